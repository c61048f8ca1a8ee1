"""HTTP/2 towards clients (issue 17, docs/http2.md) with real clients: curl
(prior knowledge and ALPN over TLS), h2load, a raw python3-h2 client for
resets and floods, and python3-grpcio for gRPC answers."""
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Backend, Levee, cluster, sha256_hex, tool, wait_until

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.settings
except ImportError:  # scripts/deps.sh --test installs python3-h2
    h2 = None
try:
    import grpc
except ImportError:  # python3-grpcio
    grpc = None

H2 = {"http2": {"enabled": True}}


def static(limit, target="50ms"):
    return {"concurrency": {"limit": limit}, "queue": {"target": target}}


def curl(*args):
    r = subprocess.run([tool("curl"), "-sS", "--max-time", "20"] + list(args), capture_output=True, timeout=30)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def missing(package):
    """A Python module the tests need is absent: a failure where the README
    test command installed everything (LEVEE_REQUIRE_TOOLS=1), else a skip."""
    msg = f"{package} is not installed (scripts/deps.sh --test installs it)"
    if os.environ.get("LEVEE_REQUIRE_TOOLS") == "1":
        raise AssertionError(msg)
    raise unittest.SkipTest(msg)


class H2Client:
    """A raw HTTP/2 client over one socket (python3-h2)."""

    def __init__(self, port):
        if h2 is None:
            missing("python3-h2")
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.events = []

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, headers=(), end=True):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "http"),
                                     (":authority", "test")] + list(headers), end_stream=end)
        self.flush()
        return sid

    def pump(self, until, timeout=10):
        """Reads frames until until(events) is true; returns the events."""
        deadline = time.monotonic() + timeout
        while not until(self.events):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; events: {self.events}")
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                data = b""
            if not data:
                self.events.append("closed")
                break
            self.events += self.conn.receive_data(data)
            try:
                self.flush()
            except OSError:
                pass  # levee stopped reading (a GOAWAY); what it sent is still read
        return self.events

    def response(self, sid, timeout=10):
        """(headers, trailers) of stream sid once it ended."""
        self.pump(lambda ev: any(isinstance(e, h2.events.StreamEnded) and e.stream_id == sid for e in ev)
                  or "closed" in ev, timeout)
        blocks = [dict(e.headers) for e in self.events
                  if isinstance(e, (h2.events.ResponseReceived, h2.events.TrailersReceived)) and e.stream_id == sid]
        return blocks

    def ending(self, timeout=10):
        """How the connection ends, once read to its end: "fin", "reset"
        or "timeout"."""
        self.sock.settimeout(timeout)
        try:
            self.sock.shutdown(socket.SHUT_WR)
            while self.sock.recv(65536):
                pass
        except TimeoutError:
            return "timeout"
        except OSError:  # ECONNRESET, or ENOTCONN: reset already
            return "reset"
        return "fin"

    def close(self):
        self.sock.close()


class Http2(unittest.TestCase):
    def setUp(self):
        self.be = Backend(self)

    def test_prior_knowledge_and_http11_on_the_same_listener(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        rc, out, err = curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                            "-H", "x-test-id: h2c", f"http://127.0.0.1:{lv.port}/")
        self.assertEqual((rc, out), (0, "2 200"), err)
        self.assertTrue(self.be.seen("h2c"))
        # HTTP/1.1 still served on the same listener.
        self.assertEqual(lv.request("GET", "/")[0], 200)
        self.assertGreaterEqual(lv.metric("levee_http2_connections_total"), 1)

    def test_disabled_by_default_the_preface_is_not_http2(self):
        lv = Levee(self, [cluster("app", [self.be.address])])
        rc, out, _ = curl("--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                          f"http://127.0.0.1:{lv.port}/")
        self.assertNotEqual(out, "2 200")
        self.assertEqual(lv.metric("levee_http2_connections_total"), 0)

    def test_alpn_h2_over_tls(self):
        from test_tls import Pki
        pki = Pki(self)
        cert, key = pki.issue("www", "www.test", dns=["www.test"])
        lv = Levee(self, [cluster("app", [self.be.address])],
                   listener={"tls": {"certificate": cert, "key": key}, **H2})
        url = f"https://www.test:{lv.port}/"
        resolve = f"www.test:{lv.port}:127.0.0.1"
        rc, out, err = curl("--http2", "--cacert", pki.ca, "--resolve", resolve, "-o", "/dev/null",
                            "-w", "%{http_version} %{http_code}", url)
        self.assertEqual((rc, out), (0, "2 200"), err)
        # A client that offers only http/1.1 still gets it.
        rc, out, err = curl("--http1.1", "--cacert", pki.ca, "--resolve", resolve, "-o", "/dev/null",
                            "-w", "%{http_version} %{http_code}", url)
        self.assertEqual((rc, out), (0, "1.1 200"), err)

    def test_many_streams_on_few_connections(self):
        # Admission off, self-protection too: this is about multiplexing, not
        # shedding (under ASan on a busy machine, 200 streams arriving at
        # once took the executor load past CRITICAL's 1.0, and most of them
        # were shed as executor_overload).
        lv = Levee(self, [cluster("app", [self.be.address], concurrency={"enabled": False})], listener=H2,
                   extra={"self_protection": {"enabled": False}})
        before = self.be.stats()["work_requests"]
        r = subprocess.run([tool("h2load"), "-n", "4000", "-c", "4", "-m", "50", f"http://127.0.0.1:{lv.port}/"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("4000 succeeded, 0 failed, 0 errored", r.stdout)
        self.assertIn("status codes: 4000 2xx", r.stdout)
        self.assertEqual(self.be.stats()["work_requests"] - before, 4000)

    def test_request_body_arrives_intact(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        # Larger than the stream window (64 KiB) and the exchange's buffer:
        # it moves only as the exchange forwards it.
        body = os.urandom(700 * 1024 + 13)
        with tempfile.NamedTemporaryFile() as f:
            f.write(body)
            f.flush()
            rc, out, err = curl("--http2-prior-knowledge", "--data-binary", "@" + f.name,
                                f"http://127.0.0.1:{lv.port}/sha256")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.split(), [sha256_hex(body), str(len(body))])

    def test_expect_100_continue(self):
        # The client holds its body until levee has admitted the request and
        # says 100; then the body goes up whole.
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        c = H2Client(lv.port)
        sid = c.conn.get_next_available_stream_id()
        c.conn.send_headers(sid, [(":method", "POST"), (":path", "/sha256"), (":scheme", "http"), (":authority", "t"),
                                  ("content-length", "5"), ("expect", "100-continue")])
        c.flush()
        c.pump(lambda ev: any(isinstance(e, h2.events.InformationalResponseReceived) for e in ev))
        info = next(e for e in c.events if isinstance(e, h2.events.InformationalResponseReceived))
        self.assertEqual(dict(info.headers)[":status"], "100")
        c.conn.send_data(sid, b"hello", end_stream=True)
        c.flush()
        self.assertEqual(c.response(sid)[0][":status"], "200")
        body = b"".join(e.data for e in c.events if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)
        self.assertEqual(body.split(), [sha256_hex(b"hello").encode(), b"5"])
        c.close()

    def test_head_sent_upstream_and_a_large_response(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        c = H2Client(lv.port)
        sid = c.request("/headers", [("cookie", "a=1"), ("cookie", "b=2"), ("x-one", "1")])
        blocks = c.response(sid)
        self.assertEqual(blocks[0][":status"], "200")
        body = b"".join(e.data for e in c.events if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)
        head = body.decode().lower()
        # :authority became Host, the cookie crumbs one field (RFC 9113 8.2.3).
        self.assertIn("\nhost: test\n", head)
        self.assertIn("\ncookie: a=1; b=2\n", head)
        self.assertIn("\nx-one: 1\n", head)
        self.assertIn("\nvia: 2 levee\n", head)
        self.assertNotIn("te:", head)
        c.close()
        # A response far larger than the client's window moves as it reads.
        from harness import download_bytes
        for chunked in ("0", "1"):
            r = subprocess.run([tool("curl"), "-sS", "--http2-prior-knowledge", "--max-time", "20",
                                f"http://127.0.0.1:{lv.port}/download?size=3000000&chunked={chunked}"],
                               capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(sha256_hex(r.stdout), sha256_hex(download_bytes(3000000)))

    def test_drain_sends_goaway_and_finishes_open_streams(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener=H2)
        c = H2Client(lv.port)
        sid = c.request("/slow?ms=700")
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="app") >= 1, what="in flight")
        lv.proc.signal(signal.SIGTERM)
        # GOAWAY first (no new streams), while the open one is still answered.
        c.pump(lambda ev: any(isinstance(e, h2.events.ConnectionTerminated) for e in ev))
        goaway = next(e for e in c.events if isinstance(e, h2.events.ConnectionTerminated))
        self.assertEqual(goaway.error_code, h2.errors.ErrorCodes.NO_ERROR)
        self.assertGreaterEqual(goaway.last_stream_id, sid)  # the open stream is still served
        self.assertFalse(any(isinstance(e, h2.events.StreamEnded) for e in c.events))
        # (python3-h2 takes no frames after a GOAWAY: read the rest raw.)
        c.sock.settimeout(10)
        while c.sock.recv(65536):
            pass
        c.close()
        self.assertEqual(lv.proc.wait(10), 0)
        self.assertIn('"GET /slow?ms=700 HTTP/2.0" 200', lv.proc.output())

    def test_idle_timeout_spares_busy_connections_and_closes_idle_ones(self):
        lv = Levee(self, [cluster("app", [self.be.address])], listener={"idle_timeout": "300ms", **H2})
        c = H2Client(lv.port)
        # A stream longer than the idle timeout is not idleness.
        sid = c.request("/slow?ms=800")
        self.assertEqual(c.response(sid)[0][":status"], "200")
        self.assertFalse(any(isinstance(e, h2.events.ConnectionTerminated) for e in c.events))
        # Idle from its end: GOAWAY, then the close.
        t0 = time.monotonic()
        c.pump(lambda ev: any(isinstance(e, h2.events.ConnectionTerminated) for e in ev))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        goaway = next(e for e in c.events if isinstance(e, h2.events.ConnectionTerminated))
        self.assertEqual(goaway.error_code, h2.errors.ErrorCodes.NO_ERROR)
        c.sock.settimeout(5)
        while c.sock.recv(65536):
            pass
        c.close()

    def test_reset_stream_leaves_the_queue_and_never_goes_upstream(self):
        be = Backend(self, workers=1, service="fixed:500ms", name="slow")
        lv = Levee(self, [cluster("app", [be.address], **static(1, target="5s"))],
                   routes=[{"cluster": "app", "timeout": "10s"}], listener=H2)
        holder = threading.Thread(target=lambda: lv.request("GET", "/", headers={"x-test-id": "holder"}))
        holder.start()
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="app") >= 1, what="slot taken")
        c = H2Client(lv.port)
        sid = c.request("/", [("x-test-id", "reset")])
        wait_until(lambda: lv.metric("levee_cluster_queue_depth", cluster="app") >= 1, what="queued")
        c.conn.reset_stream(sid)
        c.flush()
        wait_until(lambda: lv.metric("levee_cluster_queue_depth", cluster="app") == 0, timeout=2,
                   what="left the queue")
        # The connection carries on: another stream is served.
        sid2 = c.request("/", [("x-test-id", "after")])
        holder.join()
        blocks = c.response(sid2)
        self.assertEqual(blocks[0][":status"], "200")
        c.close()
        self.assertTrue(be.seen("holder"))
        self.assertTrue(be.seen("after"))
        self.assertFalse(be.seen("reset"))

    def test_grpc_deadline_past_in_queue_is_deadline_exceeded(self):
        be = Backend(self, workers=1, service="fixed:600ms", name="slow")
        lv = Levee(self, [cluster("app", [be.address], **static(1, target="5s"))],
                   routes=[{"cluster": "app", "timeout": "10s"}], listener=H2)
        holder = threading.Thread(target=lambda: lv.request("GET", "/", headers={"x-test-id": "holder"}))
        holder.start()
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="app") >= 1, what="slot taken")
        c = H2Client(lv.port)
        sid = c.request("/pkg.Svc/Call", [("content-type", "application/grpc"), ("te", "trailers"),
                                          ("grpc-timeout", "150m"), ("x-test-id", "late")])
        t0 = time.monotonic()
        blocks = c.response(sid)
        self.assertLess(time.monotonic() - t0, 0.5)
        # Trailers-Only: one block with :status 200 and the gRPC status.
        self.assertEqual(len(blocks), 1, blocks)
        self.assertEqual(blocks[0][":status"], "200")
        self.assertEqual(blocks[0]["content-type"], "application/grpc")
        self.assertEqual(blocks[0]["grpc-status"], "4")
        c.close()
        holder.join()
        self.assertFalse(be.seen("late"))

    def test_grpc_client_sees_unavailable_with_pushback(self):
        if grpc is None:
            missing("python3-grpcio")
        be = Backend(self, workers=1, service="fixed:500ms", name="slow")
        lv = Levee(self, [cluster("app", [be.address], **static(1, target="1ms"))], listener=H2)
        holder = threading.Thread(target=lambda: lv.request("GET", "/", headers={"x-test-id": "holder"}))
        holder.start()
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="app") >= 1, what="slot taken")
        ch = grpc.insecure_channel(f"127.0.0.1:{lv.port}")
        call = ch.unary_unary("/pkg.Svc/Call", request_serializer=None, response_deserializer=None)
        with self.assertRaises(grpc.RpcError) as ctx:
            call(b"\x00", timeout=5, metadata=[("x-test-id", "shed")])
        e = ctx.exception
        self.assertIn(e.code(), (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED))
        md = dict(list(e.trailing_metadata() or []) + list(e.initial_metadata() or []))
        self.assertIn("grpc-retry-pushback-ms", md)
        self.assertGreater(int(md["grpc-retry-pushback-ms"]), 0)
        self.assertIn("overloaded", e.details())
        ch.close()
        holder.join()
        self.assertFalse(be.seen("shed"))


if __name__ == "__main__":
    unittest.main()
