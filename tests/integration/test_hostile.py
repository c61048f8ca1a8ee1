"""Hostile input, both directions (issue 12): raw bytes against the real
levee, each case stating what it sends, what must come back (a status, or
the connection closed), whether anything may reach the backend, and a
normal request after it that must succeed.

Requests: smuggling shapes, malformed heads, limits, slow clients.
Responses: misbehaving upstreams on pooled connections, where a second
client on the same pool must get its own answer; framing elements that
never end, with a CPU-time check; a request that must not be sent twice.
"""
import contextlib
import os
import socket
import threading
import time
import unittest
import uuid

from harness import Backend, Levee, cluster, raw_exchange, wait_until
from misbehaving import Misbehaving


def status_of(reply):
    """The status code of the first response in reply, or None if nothing came back."""
    if not reply.startswith(b"HTTP/1."):
        return None
    return int(reply.split(b" ", 2)[1])


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- requests ---------------------------------------------------------------
# (name, bytes before the marker, expected status, may the backend see it)
# Every request carries x-test-id: <marker>, checked against the backend.
REQUEST_CASES = [
    ("te_chunked_identity", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n", 400, False),
    ("te_gzip_alone", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n", 400, False),
    ("te_gzip_then_chunked", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n", 501, False),
    ("te_twice", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400, False),
    ("te_and_length", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n", 400, False),
    ("te_in_http10", b"POST /sha256 HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n", 400, False),
    ("te_empty", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \r\n", 400, False),
    ("length_twice_equal", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n", 400, False),
    ("length_twice_different", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n", 400, False),
    ("length_list", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n", 400, False),
    ("length_signed", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n", 400, False),
    ("length_negative", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n", 400, False),
    ("length_hex", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n", 400, False),
    ("length_huge", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n", 400, False),
    ("host_twice", b"GET /headers HTTP/1.1\r\nHost: a\r\nHost: b\r\n", 400, False),
    ("host_invalid", b"GET /headers HTTP/1.1\r\nHost: a b\r\n", 400, False),
    ("host_with_userinfo", b"GET /headers HTTP/1.1\r\nHost: u@a\r\n", 400, False),
    ("host_missing_http11", b"GET /headers HTTP/1.1\r\nUser-Agent: x\r\n", 400, False),
    ("target_not_origin_form", b"GET headers HTTP/1.1\r\nHost: a\r\n", 400, False),
    ("target_with_space", b"GET /a b HTTP/1.1\r\nHost: a\r\n", 400, False),
    ("absolute_form_bad_authority", b"GET http://u@evil/ HTTP/1.1\r\nHost: a\r\n", 400, False),
    ("version_unknown", b"GET / HTTP/1.2\r\nHost: a\r\n", 400, False),
    ("version_garbage", b"GET / HTTP/x.y\r\nHost: a\r\n", 400, False),
    ("bare_lf", b"GET / HTTP/1.1\nHost: a\n", 400, False),
    ("bare_cr_in_value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n", 400, False),
    ("ctl_in_value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01c\r\n", 400, False),
    ("nul_in_value", b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n", 400, False),
    ("space_in_name", b"GET / HTTP/1.1\r\nHost: a\r\nX A: b\r\n", 400, False),
    ("space_before_colon", b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 0\r\n", 400, False),
    ("leading_whitespace_line", b"GET / HTTP/1.1\r\n Host: a\r\n", 400, False),
    ("method_with_tab", b"GET\t/ HTTP/1.1\r\nHost: a\r\n", 400, False),
    ("connect", b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n", 501, False),
    ("upgrade", b"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n", 501, False),
    ("expect_unknown", b"POST /sha256 HTTP/1.1\r\nHost: a\r\nExpect: lemonade\r\nContent-Length: 0\r\n", 400, False),
    ("criticality_invalid", b"GET / HTTP/1.1\r\nHost: a\r\nX-Criticality: URGENT\r\n", 400, False),
    ("request_line_too_long", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: a\r\n", 414, False),
    ("header_field_too_large", b"GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + b"b" * 70000 + b"\r\n", 431, False),
    ("too_many_fields", b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(120)), 431, False),
    ("obs_fold_is_unfolded", b"GET /headers HTTP/1.1\r\nHost: a\r\nX-Fold: a\r\n b\r\n", 200, True),
    ("obs_text_is_passed", b"GET /headers HTTP/1.1\r\nHost: a\r\nX-Text: caf\xc3\xa9\xff\r\n", 200, True),
    ("absolute_form_routes_by_authority", b"GET http://a/headers HTTP/1.1\r\nHost: other\r\n", 200, True),
    ("options_asterisk", b"OPTIONS * HTTP/1.1\r\nHost: a\r\n", 404, True),
]

# (name, body bytes after "Transfer-Encoding: chunked\r\n\r\n", expected status)
CHUNK_CASES = [
    ("chunk_size_not_hex", b"zz\r\nabc\r\n0\r\n\r\n", 400),
    ("chunk_size_overflow", b"fffffffffffffffff\r\nabc\r\n0\r\n\r\n", 400),
    ("chunk_size_with_space", b"3 \r\nabc\r\n0\r\n\r\n", 400),
    ("chunk_size_0x", b"0x3\r\nabc\r\n0\r\n\r\n", 400),
    ("chunk_without_crlf", b"3\r\nabcX0\r\n\r\n", 400),
    ("chunk_extension_too_long", b"3;e=" + b"x" * 5000 + b"\r\nabc\r\n0\r\n\r\n", 400),
    ("trailer_too_large", b"3\r\nabc\r\n0\r\nX-T: " + b"t" * 20000 + b"\r\n\r\n", 400),
]


class Requests(unittest.TestCase):
    """Malformed and ambiguous requests: answered at once, never forwarded,
    and the next client is served."""

    @classmethod
    def setUpClass(cls):
        cls._cleanups = []

        class Holder:
            def addCleanup(self, f, *a):
                cls._cleanups.append((f, a))
        h = Holder()
        cls.be = Backend(h)
        cls.lv = Levee(h, [cluster("app", [cls.be.address])])

    @classmethod
    def tearDownClass(cls):
        for f, a in reversed(cls._cleanups):
            f(*a)

    def after(self):
        """A normal request on a new connection succeeds."""
        marker = uuid.uuid4().hex
        status, _, _ = self.lv.request("GET", "/", headers={"x-test-id": marker})
        self.assertEqual(status, 200)
        self.assertTrue(self.be.seen(marker))
        self.assertTrue(self.lv.proc.alive())

    def run_case(self, head, expected, may_reach, body=b""):
        marker = uuid.uuid4().hex.encode()
        reply = raw_exchange(self.lv.port, head + b"X-Test-Id: " + marker + b"\r\n\r\n" + body, timeout=5)
        self.assertEqual(status_of(reply), expected, reply[:200])
        if not may_reach:
            self.assertFalse(self.be.seen(marker.decode()), "reached the backend")
        if expected >= 400 and expected != 404 and b"bad_criticality" not in reply:
            # An answer to a malformed request ends the connection (what
            # follows cannot be told from a next request).
            self.assertIn(b"connection: close", reply.lower())
        self.after()

    def test_smuggling_never_reaches_the_backend_as_a_second_request(self):
        # "chunked, identity" once read as an empty body: the chunk bytes
        # would have been a second request, here one for /status/299.
        smuggled = b"0\r\n\r\nGET /status/299 HTTP/1.1\r\nHost: a\r\nX-Test-Id: smuggled\r\n\r\n"
        reply = raw_exchange(self.lv.port, b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n"
                                           b"Content-Length: 0\r\n\r\n" + smuggled)
        self.assertEqual(status_of(reply), 400)
        self.assertNotIn(b"299", reply)
        self.assertFalse(self.be.seen("smuggled"))
        self.after()

    def test_a_head_trickled_in_pieces_is_held_to_max_header_bytes(self):
        # 100 KiB of fields against the 64 KiB default (50 of them: fewer
        # than max_headers), one 2 KiB field per write, paced as a slow client sends them: each read holds only a
        # few complete lines, which Beast consumes as they come and checks
        # its limit against the rest alone; levee counts the whole head.
        marker = uuid.uuid4().hex
        s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.sendall(f"GET / HTTP/1.1\r\nHost: a\r\nX-Test-Id: {marker}\r\n".encode())
            for i in range(50):
                s.sendall(b"X-Pad-%03d: " % i + b"v" * 2030 + b"\r\n")
                time.sleep(0.005)  # the pace of the client under test, not a wait for levee
            s.sendall(b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered and closed before the head ended
        reply = b""
        with contextlib.suppress(ConnectionResetError, socket.timeout):
            while chunk := s.recv(65536):
                reply += chunk
        s.close()
        self.assertEqual(status_of(reply), 431, reply[:200])
        self.assertFalse(self.be.seen(marker), "reached the backend")
        self.after()

    def test_a_refused_upload_trickled_on_is_closed_within_the_linger_bound(self):
        # Answered before its body was read (a 400), the connection lingers:
        # levee stops sending and reads what still comes, so a reset cannot
        # destroy the answer. A client that trickles on forever must not keep
        # it: 2 s at most, then close (the next byte gets a reset).
        s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=5)
        self.addCleanup(s.close)
        sent = time.monotonic()
        s.sendall(b"POST / HTTP/1.1\r\nHost: a\r\nX-Criticality: URGENT\r\nContent-Length: 100000000\r\n\r\nxx")
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "closed before the answer")
            reply += chunk
        answered = time.monotonic()
        self.assertEqual(status_of(reply), 400, reply[:200])
        closed = None
        while time.monotonic() - answered < 8:  # four times the bound
            try:
                s.sendall(b"y")
            except (ConnectionResetError, BrokenPipeError):
                closed = time.monotonic()
                break
            time.sleep(0.05)  # the trickle's pace, not a wait for levee
        self.assertIsNotNone(closed, "still reading a trickle 8 s after the answer")
        # Not before its 2 s (it began after the request was sent: the client
        # kept sending, so nothing else ended it), and soon after: the second
        # byte after the close fails at the latest.
        self.assertGreaterEqual(closed - sent, 2.0)
        self.assertLess(closed - answered, 4.0)
        self.after()

    def test_header_timeout_is_408(self):
        s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=15)
        s.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n")  # never finishes its head
        t0 = time.monotonic()
        data = s.recv(4096)
        s.close()
        self.assertEqual(status_of(data), 408)
        self.assertLess(time.monotonic() - t0, 12)  # header_timeout 10 s
        self.after()

    def test_a_chunk_header_that_never_ends_is_400_without_spinning(self):
        pid = self.lv.proc.p.pid
        before = cpu_seconds(pid)
        reply = raw_exchange(self.lv.port, b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;"
                             + b"e" * 300000, timeout=5)
        self.assertEqual(status_of(reply), 400, reply[:200])
        self.assertLess(cpu_seconds(pid) - before, 0.5)
        self.after()

    def test_a_client_that_leaves_cannot_keep_the_backend_working_past_the_limit(self):
        # A client that sends a request and leaves, again and again, must
        # not get more work going at the backend than the limit allows. The
        # backend goes on with an abandoned request (nothing tells it to
        # stop), so the permit comes back when it answers, not when the
        # client leaves: before, levee freed it at once, and such a client
        # could keep the backend busy with any number of requests nobody
        # waited for.
        lv = Levee(self, [cluster("slow", [self.be.address], concurrency={"limit": 1}, queue={"target": "10s"})],
                   routes=[{"cluster": "slow", "timeout": "20s"}])
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=5)
        s.sendall(b"GET /slow?ms=3000 HTTP/1.1\r\nHost: a\r\n\r\n")
        wait_until(lambda: lv.metric("levee_endpoint_outstanding") == 1, timeout=3, what="sent upstream")
        t0 = time.monotonic()
        s.close()
        # The exchange ends (its client is gone), but its permit is out, and
        # the endpoint busy, until the backend is done: the next request
        # waits in levee for the backend's 3 s.
        wait_until(lambda: "client_gone" in lv.proc.output() or " 499 " in lv.proc.output(), timeout=5,
                   what="the exchange ended")
        self.assertEqual(lv.metric("levee_cluster_in_flight", cluster="slow"), 1)
        self.assertEqual(lv.metric("levee_endpoint_outstanding"), 1)
        status, _, _ = lv.request("GET", "/slow?ms=1", timeout=15)
        self.assertEqual(status, 200)
        self.assertGreater(time.monotonic() - t0, 2.0)
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="slow") == 0
                   and lv.metric("levee_endpoint_outstanding") == 0, timeout=3, what="permit and endpoint back")

    def test_a_client_that_sends_nothing_costs_nothing_and_is_closed_at_idle_timeout(self):
        before = self.lv.metric("levee_downstream_active_connections", listener="main")
        socks = [socket.create_connection(("127.0.0.1", self.lv.port)) for _ in range(50)]
        wait_until(lambda: self.lv.metric("levee_downstream_active_connections", listener="main") >= before + 50)
        for s in socks:
            s.close()
        self.after()


def _request_case(name, head, expected, may_reach):
    def test(self):
        self.run_case(head, expected, may_reach)
    test.__name__ = f"test_request_{name}"
    return test


def _chunk_case(name, body, expected):
    def test(self):
        self.run_case(b"POST /sha256 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n", expected, False, body)
    test.__name__ = f"test_chunked_{name}"
    return test


for _n, _h, _e, _m in REQUEST_CASES:
    setattr(Requests, f"test_request_{_n}", _request_case(_n, _h, _e, _m))
for _n, _b, _e in CHUNK_CASES:
    setattr(Requests, f"test_chunked_{_n}", _chunk_case(_n, _b, _e))


# --- responses --------------------------------------------------------------
# (behaviour, method, expected status at the client or None for a cut-off answer)
RESPONSE_CASES = [
    ("extra-now", "GET", 200),
    ("extra-later", "GET", 200),
    ("head-body", "HEAD", 200),
    ("no-content-body", "GET", 204),
    ("not-modified-body", "GET", 304),
    ("switch", "GET", 502),
    ("garbage", "GET", 502),
    ("dup-length", "GET", 502),
    ("length-and-chunked", "GET", 502),
    ("http10-chunked", "GET", 502),
    ("bad-status", "GET", 502),
    ("bare-lf", "GET", 502),
    ("space-before-colon", "GET", 502),
    ("huge-header", "GET", 502),
    ("bad-chunk", "GET", None),
    ("chunked-then-extra", "GET", 200),
    ("truncated", "GET", None),
    ("until-close", "GET", 200),
    ("gzip-until-close", "GET", 200),
    ("informational", "GET", 200),
    ("status-out-of-range", "GET", 502),
]


class Responses(unittest.TestCase):
    """Misbehaving upstreams: the bad answer never reaches another client.
    One worker, so both requests go through the same pool."""

    def setUp(self):
        self.bad = Misbehaving(self)
        self.lv = Levee(self, [cluster("app", [self.bad.address], retry={"enabled": False},
                                       response_timeout="1s")], wait_ready=False)

    def get(self, method, path):
        reply = raw_exchange(self.lv.port, f"{method} {path} HTTP/1.1\r\nHost: a\r\n\r\n".encode(), timeout=5,
                             read_until_close=False)
        return reply

    def next_client_gets_its_own_answer(self):
        for _ in range(3):
            rid = uuid.uuid4().hex[:8]
            c = self.lv.conn(timeout=5)
            c.request("GET", f"/ok/{rid}")
            r = c.getresponse()
            body = r.read()
            c.close()
            self.assertEqual((r.status, body), (200, rid.encode()), "another client's answer leaked")

    def run_case(self, behaviour, method, expected):
        rid = uuid.uuid4().hex[:8]
        # A first, normal request leaves a pooled connection to misuse.
        self.next_client_gets_its_own_answer()
        c = self.lv.conn(timeout=5)
        try:
            c.request(method, f"/{behaviour}/{rid}")
            r = c.getresponse()
            status = r.status
            body = r.read()
        except (ConnectionError, OSError, Exception) as e:  # noqa: BLE001 - a cut-off answer
            status, body = None, repr(e).encode()
        finally:
            c.close()
        if expected is not None:
            self.assertEqual(status, expected, body[:200])
            self.assertNotIn(b"EVIL", body)
        time.sleep(0.1)  # stray bytes that come later arrive while the connection sits in the pool
        self.next_client_gets_its_own_answer()
        self.assertTrue(self.lv.proc.alive())

    def test_a_post_the_backend_read_and_dropped_is_not_sent_again(self):
        retrying = Levee(self, [cluster("app2", [self.bad.address])], wait_ready=False)
        status, _, _ = retrying.request("POST", "/close-after-read/p1", body=b"pay 100")
        self.assertEqual(status, 502)
        self.assertEqual(self.bad.seen("/close-after-read/p1"), 1)
        # An idempotent request may go again (retries are on here).
        status, _, _ = retrying.request("GET", "/close-after-read/g1")
        self.assertEqual(status, 502)
        self.assertGreaterEqual(self.bad.seen("/close-after-read/g1"), 2)

    def test_an_early_413_reaches_the_client(self):
        s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=5)
        s.sendall(b"POST /413-early/x HTTP/1.1\r\nHost: a\r\nContent-Length: 10000000\r\n\r\n")
        try:
            s.sendall(b"x" * 200000)  # the backend will not read this
        except OSError:
            pass
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        s.close()
        self.assertEqual(status_of(data), 413, data[:200])
        self.next_client_gets_its_own_answer()

    def cpu_bounded(self, behaviour):
        pid = self.lv.proc.p.pid
        before = cpu_seconds(pid)
        t0 = time.monotonic()
        reply = self.get("GET", f"/{behaviour}/x")
        took = time.monotonic() - t0
        spent = cpu_seconds(pid) - before
        # The answer is cut off or 502, within the response timeout, and the
        # proxy did not spin meanwhile.
        self.assertIn(status_of(reply), (None, 200, 502), reply[:200])
        self.assertLess(took, 4)
        self.assertLess(spent, 0.5, f"{spent:.2f} CPU-s in {took:.2f} s")
        self.next_client_gets_its_own_answer()
        # And nothing is left in flight.
        wait_until(lambda: self.lv.metric("levee_endpoint_outstanding") == 0, timeout=5)

    def test_a_chunk_header_that_never_ends_does_not_spin(self):
        self.cpu_bounded("huge-chunk-ext")

    def test_a_trailer_that_never_ends_does_not_spin(self):
        self.cpu_bounded("huge-trailer")

    def test_an_upstream_that_never_answers_times_out_and_frees_its_slot(self):
        t0 = time.monotonic()
        reply = self.get("GET", "/never/x")
        self.assertEqual(status_of(reply), 504)
        self.assertLess(time.monotonic() - t0, 3)
        wait_until(lambda: self.lv.metric("levee_endpoint_outstanding") == 0, timeout=5)
        self.next_client_gets_its_own_answer()


def _response_case(behaviour, method, expected):
    def test(self):
        self.run_case(behaviour, method, expected)
    return test


for _b, _m, _e in RESPONSE_CASES:
    setattr(Responses, "test_response_" + _b.replace("-", "_"), _response_case(_b, _m, _e))


class SlowClients(unittest.TestCase):
    """Slow clients do not hold admission capacity."""

    def setUp(self):
        self.be = Backend(self, workers=16)
        self.lv = Levee(self, [cluster("app", [self.be.address], concurrency={"limit": 4})],
                        listener={"min_rate": 65536, "min_rate_grace": "1s"})

    def test_clients_trickling_a_body_hold_no_permit(self):
        socks = []
        for i in range(12):  # three times the limit
            s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=10)
            s.sendall(b"POST /sha256 HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nx")
            socks.append(s)
        # Meanwhile a normal request is served at once.
        for _ in range(5):
            t0 = time.monotonic()
            self.assertEqual(self.lv.request("GET", "/")[0], 200)
            self.assertLess(time.monotonic() - t0, 0.5)
        self.assertEqual(self.lv.metric("levee_cluster_in_flight", cluster="app"), 0)
        # Below the minimum rate they are cut off after the grace.
        for s in socks:
            data = s.recv(4096)
            self.assertEqual(status_of(data), 408)
            s.close()

    def test_clients_that_never_read_their_answer_are_cut_off(self):
        socks = []
        for i in range(4):
            s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"GET /download?size=50000000 HTTP/1.1\r\nHost: a\r\n\r\n")
            socks.append(s)
        wait_until(lambda: self.lv.metric("levee_cluster_in_flight", cluster="app") == 4, timeout=5)
        # They read nothing: past the grace the minimum rate closes them, and
        # the permits come back.
        wait_until(lambda: self.lv.metric("levee_cluster_in_flight", cluster="app") == 0, timeout=15)
        self.assertEqual(self.lv.request("GET", "/")[0], 200)
        for s in socks:
            s.close()


class Robustness(unittest.TestCase):
    def test_sighup_and_sigpipe_do_not_kill(self):
        be = Backend(self)
        r, w = os.pipe()
        lv = Levee(self, [cluster("app", [be.address])],
                   extra={"access_log": {"path": f"/proc/{os.getpid()}/fd/{w}"}})
        os.close(r)  # the log's reader is gone: writes fail with EPIPE
        for _ in range(20):
            self.assertEqual(lv.request("GET", "/")[0], 200)
        lv.proc.signal(1)  # SIGHUP
        wait_until(lambda: lv.metric("levee_access_log_write_errors_total") > 0, timeout=5)
        self.assertEqual(lv.request("GET", "/")[0], 200)
        self.assertTrue(lv.proc.alive())
        os.close(w)

    def test_admin_rejects_writes_and_times_out_half_requests(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])], extra={"admin": {"header_timeout": "500ms"}})
        reply = raw_exchange(lv.admin_port, b"POST /metrics HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
                             read_until_close=False)
        self.assertEqual(status_of(reply), 405)
        self.assertIn(b"allow: get, head", reply.lower())
        s = socket.create_connection(("127.0.0.1", lv.admin_port), timeout=5)
        s.sendall(b"GET /metrics HTTP/1.1\r\n")  # half a request
        t0 = time.monotonic()
        self.assertEqual(s.recv(100), b"")  # closed by levee
        self.assertLess(time.monotonic() - t0, 3)
        s.close()

    def test_admin_answers_oversized_and_malformed_requests_before_closing(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])])
        big_head = b"GET /metrics HTTP/1.1\r\nHost: a\r\nx-pad: " + b"a" * 20000 + b"\r\n\r\n"
        reply = raw_exchange(lv.admin_port, big_head)
        self.assertEqual(status_of(reply), 431, reply[:200])
        self.assertIn(b"connection: close", reply.lower())
        # A body over 64 KiB: the answer arrives although the rest of the
        # body was still being sent (levee reads it away before closing).
        s = socket.create_connection(("127.0.0.1", lv.admin_port), timeout=5)
        s.sendall(b"POST /admin/drain HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 200000\r\n\r\n")
        try:
            s.sendall(b"x" * 200000)
        except OSError:
            pass
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        s.close()
        self.assertEqual(status_of(reply), 413, reply[:200])
        self.assertEqual(lv.admin_get("/ready")[0], 200)  # and it did not act
        self.assertEqual(status_of(raw_exchange(lv.admin_port, b"GET /metrics HTTP/1.1\r\nHost a\r\n\r\n")), 400)
        # A client that closes mid-request gets nothing, and the next one is
        # served.
        s = socket.create_connection(("127.0.0.1", lv.admin_port), timeout=5)
        s.sendall(b"GET /metr")
        s.shutdown(socket.SHUT_WR)
        self.assertEqual(s.recv(100), b"")
        s.close()
        self.assertEqual(lv.admin_get("/healthz")[0], 200)

    def test_one_client_cannot_hold_every_admin_connection(self):
        # Three kept-alive connections from 127.0.0.3 fill its share; a
        # fourth is closed at once, while another address (127.0.0.4) is
        # still served, and the first gets a connection again as soon as
        # one of its own ends. (Both on the loopback network, apart from
        # 127.0.0.1, whose connections the harness used to wait for levee.)
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])], extra={"admin": {"max_connections_per_source": 3}})
        probe = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

        def connect(source="127.0.0.3"):
            return socket.create_connection(("127.0.0.1", lv.admin_port), timeout=5, source_address=(source, 0))

        def served(s):
            try:
                s.sendall(probe)
                return s.recv(4096).startswith(b"HTTP/1.1 200")
            except OSError:  # closed, or reset since the probe was unread
                return False

        held = [connect() for _ in range(3)]
        for s in held:
            self.assertTrue(served(s))  # accepted and counted, kept alive
        extra = connect()
        self.assertFalse(served(extra))
        extra.close()
        other = connect("127.0.0.4")
        self.assertTrue(served(other))
        other.close()
        held.pop().close()

        def fresh_served():
            s = connect()
            try:
                return served(s)
            finally:
                s.close()
        wait_until(fresh_served, timeout=5, what="a connection after one of the three ended")
        for s in held:
            s.close()

    def test_ready_is_503_while_a_cluster_has_no_address(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address]), cluster("dns", ["no-such-host.invalid:80"])],
                   wait_ready=False)
        wait_until(lambda: lv.admin_get("/healthz")[0] == 200)
        status, body = lv.admin_get("/ready")
        self.assertEqual(status, 503)
        self.assertIn("dns", body)


if __name__ == "__main__":
    unittest.main()
