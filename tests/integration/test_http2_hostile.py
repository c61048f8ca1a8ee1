"""HTTP/2 towards clients as an attacker uses it (issue 12, docs/security.md):
floods of resets, control frames and continuations, stalled windows, slow
uploads and downloads, and the resets levee's peer makes nghttp2 send for it.
Raw frames where python3-h2 would refuse to send them."""
import socket
import threading
import time
import unittest

from harness import Backend, Levee, cluster, wait_until
from test_http2 import H2, H2Client, curl, h2, static

GOAWAY, ENHANCE_YOUR_CALM = 0x7, 0xB


def frame(kind, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + payload


def literal(name, value):
    """An HPACK literal field without indexing, with a new name."""
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


# :method GET, :path /, :scheme http (static table), :authority t
REQUEST = b"\x82\x84\x86" + b"\x01\x01t"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0, b"")


def goaway_from(sock, timeout=10):
    """Reads raw frames until a GOAWAY (its error code) or the end (None)."""
    sock.settimeout(timeout)
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            if buf[3] == GOAWAY:
                return int.from_bytes(buf[13:17], "big")
            buf = buf[9 + n:]
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return None
        if not data:
            return None
        buf += data
    return None


class Hostile(unittest.TestCase):
    def setUp(self):
        self.be = Backend(self)

    def still_served(self, lv):
        rc, out, err = curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_code}",
                            f"http://127.0.0.1:{lv.port}/")
        self.assertEqual((rc, out), (0, "200"), err)

    def goaway_code(self, c):
        c.pump(lambda ev: any(isinstance(e, h2.events.ConnectionTerminated) for e in ev) or "closed" in ev)
        t = [e for e in c.events if isinstance(e, h2.events.ConnectionTerminated)]
        return t[0].error_code if t else None

    def test_rapid_reset_flood(self):
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"http2": {"enabled": True, "max_resets_per_second": 50}})
        c = H2Client(lv.port)
        try:
            for _ in range(500):
                sid = c.request("/")
                c.conn.reset_stream(sid)
            c.flush()
        except OSError:
            pass  # levee closed the connection before all were sent
        self.assertEqual(self.goaway_code(c), h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        c.close()
        self.assertGreaterEqual(lv.metric("levee_http2_limit_total", limit="rapid_reset"), 1)
        self.still_served(lv)

    def test_settings_flood(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        c = H2Client(lv.port)
        empty_settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
        try:
            c.sock.sendall(empty_settings * 5000)
        except OSError:
            pass
        self.assertEqual(self.goaway_code(c), h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        # levee stopped reading with most of the flood unread: a close now
        # would be a reset, which can destroy the GOAWAY before the client
        # reads it. A lingering close ends it with a FIN.
        self.assertEqual(c.ending(), "fin")
        c.close()
        self.assertGreaterEqual(lv.metric("levee_http2_limit_total", limit="control_flood"), 1)
        self.still_served(lv)

    def test_a_busy_client_is_not_a_control_flood(self):
        # What a gRPC client does: for each answer, a connection WINDOW_UPDATE
        # and a PING (its bandwidth probe). 300 streams in well under a
        # second is 600 control frames against a limit of 100: work earns
        # its control frames, so the connection lives.
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"http2": {"enabled": True, "max_control_per_second": 100}})
        c = H2Client(lv.port)
        for i in range(300):
            sid = c.request("/", [("x-test-id", f"busy{i}")])
            blocks = c.response(sid)
            self.assertEqual(blocks[0][":status"], "200")
            c.conn.increment_flow_control_window(64)
            c.conn.ping(b"%08d" % i)
            c.flush()
        self.assertNotIn("closed", c.events)
        self.assertEqual(lv.metric("levee_http2_limit_total", limit="control_flood"), 0)
        # Control frames with no work behind them are still a flood.
        for _ in range(5000):
            c.conn.increment_flow_control_window(1)
        try:
            c.flush()
        except OSError:
            pass
        self.assertEqual(self.goaway_code(c), h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        c.close()
        self.assertEqual(lv.metric("levee_http2_limit_total", limit="control_flood"), 1)

    def test_continuation_flood(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        c = H2Client(lv.port)
        # HEADERS without END_HEADERS (:method GET, :path /, :scheme http),
        # then CONTINUATION frames that never end the block.
        data = frame(0x1, 0x0, 1, b"\x82\x84\x86")
        data += b"".join(frame(0x9, 0x0, 1, b"\x10\x01x\x01y") for _ in range(64))
        try:
            c.sock.sendall(data)
        except OSError:
            pass
        self.assertEqual(self.goaway_code(c), h2.errors.ErrorCodes.ENHANCE_YOUR_CALM)
        c.close()
        self.assertGreaterEqual(lv.metric("levee_http2_limit_total", limit="protocol"), 1)
        self.still_served(lv)

    def test_a_preface_that_never_ends_is_cut_off(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener={"header_timeout": "300ms", **H2})
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=5)
        s.sendall(b"PRI * HTTP/2.0\r\n")  # and nothing more
        t0 = time.monotonic()
        got = b""
        while True:
            data = s.recv(65536)
            if not data:
                break
            got += data
        s.close()
        self.assertLess(time.monotonic() - t0, 3)
        self.assertTrue(got == b"" or got.startswith(b"HTTP/1.1 4"), got)
        self.still_served(lv)

    def test_streams_queued_per_connection_are_capped(self):
        be = Backend(self, workers=1, service="fixed:300ms", name="slow")
        lv = Levee(self, [cluster("app", [be.address], **static(1, target="5s"))],
                   routes=[{"cluster": "app", "timeout": "10s"}],
                   listener={"http2": {"enabled": True, "max_queued_streams": 2}})
        # The holder keeps the one slot until the extra stream has been
        # refused, however slow the machine.
        holder = threading.Thread(target=lambda: lv.request("GET", "/", headers={"x-test-id": "holder",
                                                                                 "x-test-service-ms": "2000"}))
        holder.start()
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="app") >= 1, what="slot taken")
        c = H2Client(lv.port)
        queued = [c.request("/", [("x-test-id", f"q{i}")]) for i in range(2)]
        wait_until(lambda: lv.metric("levee_cluster_queue_depth", cluster="app") >= 2, what="two queued")
        extra = c.request("/", [("x-test-id", "q-extra")])
        c.pump(lambda ev: any(isinstance(e, h2.events.StreamReset) and e.stream_id == extra for e in ev))
        reset = next(e for e in c.events if isinstance(e, h2.events.StreamReset) and e.stream_id == extra)
        self.assertEqual(reset.error_code, h2.errors.ErrorCodes.REFUSED_STREAM)
        for sid in queued:
            self.assertEqual(c.response(sid)[0][":status"], "200")
        c.close()
        holder.join()
        self.assertGreaterEqual(lv.metric("levee_http2_limit_total", limit="queued_streams"), 1)
        self.assertTrue(be.seen("q0") and be.seen("q1"))
        self.assertFalse(be.seen("q-extra"))

    def test_window_stall_holds_only_its_own_stream(self):
        # A client that opens no window: its answer cannot move. Its stream
        # is reset after body_timeout; its other streams and connections
        # are served meanwhile.
        lv = Levee(self, [cluster("app", [self.be.address])], listener={"body_timeout": "1s", **H2})
        c = H2Client(lv.port)
        c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        c.flush()
        t0 = time.monotonic()
        stalled = c.request("/download?size=1000000")
        self.still_served(lv)
        c.pump(lambda ev: any(isinstance(e, h2.events.StreamReset) and e.stream_id == stalled for e in ev), 10)
        self.assertGreaterEqual(time.monotonic() - t0, 0.9)
        # The connection itself carries on: a HEAD (no body) is answered.
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "HEAD"), (":path", "/"), (":scheme", "http"), (":authority", "t")],
                            end_stream=True)
        c.flush()
        self.assertEqual(c.response(sid)[0][":status"], "200")
        c.close()

    def test_a_slow_upload_is_cut_at_the_minimum_rate(self):
        # 500 bytes/s against a minimum of 4096/s after a 1 s grace: a 408
        # well before body_timeout (30 s), and the backend never asked.
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"body_timeout": "30s", "min_rate": 4096, "min_rate_grace": "1s", **H2})
        c = H2Client(lv.port)
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "t"),
                                  ("content-length", "100000"), ("x-test-id", "trickle")])
        c.flush()
        t0 = time.monotonic()
        status = None
        while time.monotonic() - t0 < 10 and status is None:
            try:
                c.conn.send_data(sid, b"x" * 100)
                c.flush()
            except Exception:  # noqa: BLE001  the stream ended under us
                break
            try:
                c.pump(lambda ev: any(isinstance(e, h2.events.ResponseReceived) for e in ev), timeout=0.2)
            except (AssertionError, OSError):  # nothing yet: send more
                pass
            got = [dict(e.headers) for e in c.events if isinstance(e, h2.events.ResponseReceived)]
            status = got[0][":status"] if got else None
        self.assertEqual(status, "408")
        self.assertLess(time.monotonic() - t0, 5)
        self.assertFalse(self.be.seen("trickle"))
        c.close()

    def test_a_slow_download_is_cut_at_the_minimum_rate(self):
        # The client opens its window 100 bytes every 0.2 s (500 bytes/s):
        # never a gap of body_timeout (30 s), but far below the minimum rate
        # (4096/s, 1 s grace), so the stream is reset within seconds.
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"body_timeout": "30s", "min_rate": 4096, "min_rate_grace": "1s", **H2})
        c = H2Client(lv.port)
        c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 100})
        c.flush()
        t0 = time.monotonic()
        sid = c.request("/download?size=1000000")
        reset = False
        while time.monotonic() - t0 < 20 and not reset:
            try:
                c.pump(lambda ev: any(isinstance(e, h2.events.StreamReset) for e in ev), timeout=0.2)
            except (AssertionError, OSError):  # nothing yet: open the window a little
                pass
            reset = any(isinstance(e, h2.events.StreamReset) and e.stream_id == sid for e in c.events)
            if not reset and sid in c.conn.streams:
                c.conn.increment_flow_control_window(100, stream_id=sid)
                c.conn.increment_flow_control_window(100)
                c.flush()
        self.assertTrue(reset)
        self.assertLess(time.monotonic() - t0, 12)
        c.close()
        self.still_served(lv)

    def test_oversized_header_list_gets_431(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener={"max_header_bytes": 4096, "max_request_line": 1024, **H2})
        c = H2Client(lv.port)
        sid = c.request("/", [(f"x-big-{i}", "v" * 200) for i in range(30)])
        blocks = c.response(sid)
        self.assertEqual(blocks[0][":status"], "431")
        c.close()
        self.assertGreaterEqual(lv.metric("levee_http2_limit_total", limit="header_list"), 1)
        self.still_served(lv)

    def raw(self, lv):
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=10)
        s.sendall(PREFACE)
        return s

    def assert_calmed(self, lv, s, limit):
        """The raw connection s ended with GOAWAY ENHANCE_YOUR_CALM, counted
        under limit, and another connection is still served."""
        self.assertEqual(goaway_from(s), ENHANCE_YOUR_CALM)
        s.close()
        self.assertGreaterEqual(lv.metric("levee_http2_limit_total", limit=limit), 1)
        self.still_served(lv)

    def send_all(self, s, data):
        try:
            s.sendall(data)
        except OSError:
            pass  # levee closed the connection before all was sent

    def test_resets_the_client_makes_levee_send_count_as_its_resets(self):
        # "MadeYouReset" (CVE-2025-8671): each stream declares a 1-byte body
        # and sends 2, so nghttp2 resets it (PROTOCOL_ERROR) after its
        # exchange may have started. The client never sends RST_STREAM, yet
        # the streams are freed as fast as a rapid reset frees them: they
        # count against the same limit.
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"http2": {"enabled": True, "max_resets_per_second": 50}})
        s = self.raw(lv)
        stream = REQUEST + b"\x0f\x0d\x011"  # content-length: 1 (static name 28)
        self.send_all(s, b"".join(frame(0x1, 0x4, sid, stream) + frame(0x0, 0x1, sid, b"xx")
                                  for sid in range(1, 1000, 2)))
        self.assert_calmed(lv, s, "rapid_reset")

    def test_streams_reset_for_a_bad_field_earn_no_control_frames(self):
        # A stream nghttp2 resets at once (a connection-specific field) must
        # not buy the client room for more PINGs: 3,000 of them beside 1,500
        # such streams, against a limit of 1,000 control frames a second.
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"http2": {"enabled": True, "max_resets_per_second": 100000}})
        s = self.raw(lv)
        bad = REQUEST + literal(b"connection", b"x")
        ping = frame(0x6, 0, 0, b"12345678")
        self.send_all(s, b"".join(frame(0x1, 0x5, sid, bad) + ping + ping for sid in range(1, 3000, 2)))
        self.assert_calmed(lv, s, "control_flood")

    def test_padded_empty_data_is_a_control_flood(self):
        # DATA frames carrying only their padding length (no data, no end):
        # empty DATA, as costly as the unpadded kind, counted the same way.
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        s = self.raw(lv)
        post = b"\x83\x84\x86\x01\x01t"  # :method POST, no content-length
        self.send_all(s, frame(0x1, 0x4, 1, post) + frame(0x0, 0x8, 1, b"\x00") * 5000)
        self.assert_calmed(lv, s, "control_flood")

    def test_frames_of_unknown_types_are_a_control_flood(self):
        # RFC 9113 says to ignore a frame of a type one does not know, and
        # nghttp2 does so without telling levee: each still costs a read and
        # a parse. 5,000 of them (types 0x20 and 0xfe, on stream 0 and on a
        # stream) against a limit of 1,000 control frames a second.
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        s = self.raw(lv)
        self.send_all(s, (frame(0x20, 0, 0, b"x" * 16) + frame(0xfe, 0xff, 3, b"")) * 2500)
        self.assert_calmed(lv, s, "control_flood")

    def test_window_updates_for_a_closed_stream_are_a_control_flood(self):
        # A stream the client opened and reset: nghttp2 drops WINDOW_UPDATE
        # and PRIORITY frames for it without a callback.
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        s = self.raw(lv)
        rst = frame(0x3, 0, 1, (8).to_bytes(4, "big"))  # CANCEL
        update = frame(0x8, 0, 1, (1).to_bytes(4, "big"))
        priority = frame(0x2, 0, 1, (0).to_bytes(4, "big") + b"\x10")
        self.send_all(s, frame(0x1, 0x5, 1, REQUEST) + rst + (update + priority) * 2500)
        self.assert_calmed(lv, s, "control_flood")

    def test_an_answer_before_the_request_ends_closes_the_open_half(self):
        # Answered (431) while the client's half is still open: levee resets
        # the stream with NO_ERROR (RFC 9113 section 8.1), and the stream no
        # longer counts as work, so the idle timeout closes the connection.
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"max_header_bytes": 4096, "max_request_line": 1024, "idle_timeout": "1s", **H2})
        c = H2Client(lv.port)
        sid = c.request("/", [(f"x-big-{i}", "v" * 200) for i in range(30)], end=False)
        self.assertEqual(c.response(sid)[0][":status"], "431")
        c.pump(lambda ev: any(isinstance(e, h2.events.StreamReset) and e.stream_id == sid for e in ev))
        reset = next(e for e in c.events if isinstance(e, h2.events.StreamReset) and e.stream_id == sid)
        self.assertEqual(reset.error_code, h2.errors.ErrorCodes.NO_ERROR)
        t0 = time.monotonic()
        c.pump(lambda ev: any(isinstance(e, h2.events.ConnectionTerminated) for e in ev) or "closed" in ev, 10)
        self.assertLess(time.monotonic() - t0, 5)
        c.close()
        self.assertEqual(lv.metric("levee_http2_limit_total", limit="rapid_reset"), 0)


class DeafBackend:
    """An HTTP/2 backend that opens every window as wide as it goes, then
    never reads again: what levee writes to it piles up in the socket."""

    def __init__(self, tc):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        threading.Thread(target=self.serve, daemon=True).start()
        tc.addCleanup(self.close)

    def serve(self):
        big = (1 << 31) - 1
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(c)
            c.recv(24)  # the preface, then never another byte
            c.sendall(frame(0x4, 0, 0, (4).to_bytes(2, "big") + big.to_bytes(4, "big")) +
                      frame(0x4, 0x1, 0, b"") + frame(0x8, 0, 0, (big - 65535).to_bytes(4, "big")))

    def close(self):
        self.sock.close()
        for c in self.accepted:
            c.close()


class HostileUpstream(unittest.TestCase):
    def test_a_backend_that_stops_reading_loses_its_connection(self):
        # A 20 MB upload to an http2 backend that reads nothing: the write
        # that does not drain within response_timeout ends that connection,
        # so the next request gets a new one instead of queueing behind it.
        be = DeafBackend(self)
        lv = Levee(self, [cluster("app", [f"127.0.0.1:{be.port}"], protocol="http2", response_timeout="1s")],
                   routes=[{"cluster": "app", "timeout": "10s"}])
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=15)
        size = 20 << 20
        s.sendall(f"POST /up HTTP/1.1\r\nhost: t\r\ncontent-length: {size}\r\n\r\n".encode())

        def upload():
            chunk = b"x" * 65536
            try:
                for _ in range(size // len(chunk)):
                    s.sendall(chunk)
            except OSError:
                pass  # levee answered and stopped reading

        t = threading.Thread(target=upload, daemon=True)
        t.start()
        status = s.recv(64).split(b" ")[1]
        s.close()
        self.assertIn(status, (b"502", b"504"))
        wait_until(lambda: len(be.accepted) >= 1, what="the first connection")
        curl("-o", "/dev/null", "--max-time", "5", f"http://127.0.0.1:{lv.port}/")  # a 504: it never answers
        self.assertEqual(len(be.accepted), 2, "the second request went to a new connection")
