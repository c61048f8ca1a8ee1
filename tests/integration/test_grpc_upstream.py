"""HTTP/2 towards the backends (issue 17, docs/http2.md#upstream-http2): a
real gRPC server (python3-grpcio) behind levee with `protocol: http2`, and
real gRPC clients in front: unary and streaming calls, statuses and
trailers passed intact, many calls on few upstream connections, a
cancelled call reset upstream, and an HTTP/1.1 client reaching the same
HTTP/2 backend."""
import queue
import threading
import time
import unittest
from concurrent import futures

from harness import Levee, cluster, free_port, wait_until

from test_http2 import H2, missing

try:
    import grpc
except ImportError:  # python3-grpcio
    grpc = None


class GrpcServer:
    """A gRPC server on loopback with raw-bytes methods (no generated code):
    Echo (unary), Fail (unary, NOT_FOUND), Chat (bidi echo) and Hold
    (waits until cancelled, and records that it was)."""

    def __init__(self, tc, tls=None):
        if grpc is None:
            missing("python3-grpcio")
        self.port = free_port()
        self.cancelled = threading.Event()
        self.holding = threading.Event()
        self.peers = set()
        self.lock = threading.Lock()

        def echo(req, ctx):
            with self.lock:
                self.peers.add(ctx.peer())
            md = dict(ctx.invocation_metadata())
            ctx.set_trailing_metadata((("x-echo-trailer", "t-" + md.get("x-tag", "")),
                                       ("endpoint-load-metrics", "TEXT cpu_utilization=0.25")))
            return b"echo:" + req

        def fail(req, ctx):
            ctx.abort(grpc.StatusCode.NOT_FOUND, "no such thing")

        def chat(it, ctx):
            for m in it:
                yield b"re:" + m

        self.active = 0
        self.max_active = 0

        def slow(req, ctx):
            with self.lock:
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            time.sleep(0.05)
            with self.lock:
                self.active -= 1
            return b"slow:" + req

        def hold(req, ctx):
            ctx.add_callback(self.cancelled.set)
            self.holding.set()
            deadline = time.monotonic() + 20
            while ctx.is_active() and time.monotonic() < deadline:
                time.sleep(0.01)
            return b"late"

        # grpc.health.v1.Health/Check, in raw protobuf: HealthCheckRequest
        # {1: service}, HealthCheckResponse {1: status} (1 SERVING, 2 NOT_SERVING).
        self.serving = True
        self.health_asked = []
        self.health_peers = set()

        def health(req, ctx):
            service = req[2:2 + req[1]].decode() if req[:1] == b"\x0a" else ""
            with self.lock:
                self.health_asked.append(service)
                self.health_peers.add(ctx.peer())
            return b"\x08\x01" if self.serving else b"\x08\x02"

        ident = dict(request_deserializer=None, response_serializer=None)
        health_handler = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(health, **ident)})
        handler = grpc.method_handlers_generic_handler("pkg.Svc", {
            "Echo": grpc.unary_unary_rpc_method_handler(echo, **ident),
            "Fail": grpc.unary_unary_rpc_method_handler(fail, **ident),
            "Chat": grpc.stream_stream_rpc_method_handler(chat, **ident),
            "Hold": grpc.unary_unary_rpc_method_handler(hold, **ident),
            "Slow": grpc.unary_unary_rpc_method_handler(slow, **ident),
        })
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
        self.server.add_generic_rpc_handlers((handler, health_handler))
        if tls:
            cert, key = tls
            with open(cert, "rb") as c, open(key, "rb") as k:
                creds = grpc.ssl_server_credentials([(k.read(), c.read())])
            self.server.add_secure_port(f"127.0.0.1:{self.port}", creds)
        else:
            self.server.add_insecure_port(f"127.0.0.1:{self.port}")
        self.server.start()
        tc.addCleanup(self.server.stop, None)


def h2_cluster(server, **kw):
    return cluster("grpc", [f"127.0.0.1:{server.port}"], protocol="http2", **kw)


class GrpcUpstream(unittest.TestCase):
    def setUp(self):
        self.srv = GrpcServer(self)

    def channel(self, lv):
        ch = grpc.insecure_channel(f"127.0.0.1:{lv.port}")
        self.addCleanup(ch.close)
        return ch

    def test_unary_call_with_trailers_and_load_report(self):
        # The test client (loopback) is outside the trusted networks.
        lv = Levee(self, [h2_cluster(self.srv)], listener=dict(H2, trust={"networks": ["10.0.0.0/8"]}))
        ch = self.channel(lv)
        call = ch.unary_unary("/pkg.Svc/Echo")
        resp, c = call.with_call(b"hello", timeout=10, metadata=[("x-tag", "abc")])
        self.assertEqual(resp, b"echo:hello")
        self.assertEqual(c.code(), grpc.StatusCode.OK)
        trailers = dict(c.trailing_metadata())
        self.assertEqual(trailers.get("x-echo-trailer"), "t-abc")
        # The load report in the trailer was read, and (the client being
        # untrusted) not passed on.
        self.assertNotIn("endpoint-load-metrics", trailers)
        from test_orca import endpoint_utilization
        self.assertAlmostEqual(endpoint_utilization(lv, "grpc"), 0.25, delta=0.02)
        self.assertEqual(lv.metric("levee_load_report_errors_total"), 0)

    def test_active_health_checks_use_grpc_health_protocol(self):
        # Over HTTP/2 an active check is grpc.health.v1.Health/Check for the
        # configured service: SERVING keeps the endpoint in, NOT_SERVING
        # (grpc-status 0 all the same) takes it out, and back.
        lv = Levee(self, [h2_cluster(self.srv, health_check={
            "grpc_service": "pkg.Svc", "interval": "50ms", "healthy": 1, "unhealthy": 1})], listener=H2)
        ep = f"127.0.0.1:{self.srv.port}"
        wait_until(lambda: lv.metric("levee_health_checks_total", endpoint=ep, result="ok") >= 2,
                   what="checks that pass")
        self.assertEqual(lv.metric("levee_endpoint_healthy", endpoint=ep), 1)
        with self.srv.lock:
            self.assertEqual(set(self.srv.health_asked), {"pkg.Svc"})
        self.srv.serving = False
        wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=ep) == 0, what="NOT_SERVING: out")
        call = self.channel(lv).unary_unary("/pkg.Svc/Echo")
        with self.assertRaises(grpc.RpcError) as ctx:
            call(b"x", timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)  # no endpoint to send it to
        self.srv.serving = True
        wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=ep) == 1, what="SERVING again: in")
        self.assertEqual(call(b"y", timeout=10), b"echo:y")
        # Every probe went over one connection, kept between them.
        with self.srv.lock:
            self.assertEqual(len(self.srv.health_peers), 1, self.srv.health_peers)

    def test_error_status_passes_as_trailers_only(self):
        lv = Levee(self, [h2_cluster(self.srv)], listener=H2)
        call = self.channel(lv).unary_unary("/pkg.Svc/Fail")
        with self.assertRaises(grpc.RpcError) as ctx:
            call(b"x", timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(ctx.exception.details(), "no such thing")

    def test_bidi_stream(self):
        lv = Levee(self, [h2_cluster(self.srv)], listener=H2)
        chat = self.channel(lv).stream_stream("/pkg.Svc/Chat")
        msgs = [b"m%d" % i for i in range(20)]
        got = list(chat(iter(msgs), timeout=10))
        self.assertEqual(got, [b"re:" + m for m in msgs])

    def test_interactive_bidi_stream(self):
        # Each message waits for the answer to the one before: the server's
        # answer begins while the request body is still open, and the body
        # must keep flowing beside it (HTTP/2 is full duplex).
        lv = Levee(self, [h2_cluster(self.srv)], listener=H2)
        chat = self.channel(lv).stream_stream("/pkg.Svc/Chat")
        replies = queue.Queue()

        def messages():
            for i in range(5):
                yield b"q%d" % i
                replies.get(timeout=10)

        got = []
        for r in chat(messages(), timeout=15):
            got.append(r)
            replies.put(r)
        self.assertEqual(got, [b"re:q%d" % i for i in range(5)])

    def test_many_calls_share_few_upstream_connections(self):
        # A limit above the burst: nothing waits in admission (whose per-connection
        # cap would refuse streams), so every call goes upstream at once. And
        # no self-protection: 600 calls at once on an ASan build can take the
        # executor load past CRITICAL's threshold (as in test_http2's burst).
        lv = Levee(self, [h2_cluster(self.srv, http2={"max_connections": 2}, concurrency={"limit": 1000})],
                   listener=H2, workers=1, extra={"self_protection": {"enabled": False}})
        ch = self.channel(lv)
        call = ch.unary_unary("/pkg.Svc/Echo")
        n = 600
        futs = [call.future(b"%d" % i, timeout=20) for i in range(n)]
        self.assertEqual([f.result() for f in futs], [b"echo:%d" % i for i in range(n)])
        # 600 calls, one worker, at most max_connections connections.
        self.assertLessEqual(lv.metric("levee_upstream_connections_total", cluster="grpc"), 2)
        self.assertLessEqual(len(self.srv.peers), 2)
        # The client's WINDOW_UPDATEs and PINGs for that much work are not a
        # control-frame flood (they were, at one per call past 1,000/s).
        self.assertEqual(lv.metric("levee_http2_limit_total", limit="control_flood"), 0)

    def test_the_batch_fuse_caps_streams(self):
        # A batch listener's fuse in front of an HTTP/2 cluster: its slots cap
        # the streams in flight (2 here), whatever the clients send at once.
        lv = Levee(self, [h2_cluster(self.srv, concurrency={"limit": 1000})],
                   listener=dict(H2, mode="batch", fuse={"connections_per_endpoint": 2, "queue": 100,
                                                         "queue_timeout": "10s"}))
        call = self.channel(lv).unary_unary("/pkg.Svc/Slow")
        futs = [call.future(b"%d" % i, timeout=20) for i in range(20)]
        self.assertEqual([f.result() for f in futs], [b"slow:%d" % i for i in range(20)])
        self.assertEqual(self.srv.max_active, 2)
        self.assertLessEqual(lv.metric("levee_upstream_connections_total", cluster="grpc"), 2)

    def test_cancelled_call_is_reset_upstream(self):
        lv = Levee(self, [h2_cluster(self.srv)], listener=H2)
        call = self.channel(lv).unary_unary("/pkg.Svc/Hold")
        fut = call.future(b"x", timeout=20)
        self.assertTrue(self.srv.holding.wait(10), "the call reached the server")
        fut.cancel()
        # levee resets the upstream stream: the server's handler sees the
        # cancellation long before its own 20 s end.
        self.assertTrue(self.srv.cancelled.wait(10), "the server saw the cancel")
        wait_until(lambda: lv.metric("levee_cluster_in_flight", cluster="grpc") == 0, what="permit back")

    def test_deadline_is_forwarded_and_enforced(self):
        lv = Levee(self, [h2_cluster(self.srv)], listener=H2)
        call = self.channel(lv).unary_unary("/pkg.Svc/Hold")
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as ctx:
            call(b"x", timeout=0.5)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - t0, 5)
        # The server learnt the deadline from levee's grpc-timeout and gave up too.
        self.assertTrue(self.srv.cancelled.wait(10))

    def test_http11_client_reaches_the_http2_backend(self):
        lv = Levee(self, [h2_cluster(self.srv)], listener=H2)
        # A gRPC frame (uncompressed, length 2, "hi") posted over HTTP/1.1.
        frame = b"\x00\x00\x00\x00\x02hi"
        status, headers, body = lv.request("POST", "/pkg.Svc/Echo", body=frame,
                                           headers={"content-type": "application/grpc", "te": "trailers"})
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("content-type"), "application/grpc")
        self.assertEqual(body, b"\x00\x00\x00\x00\x07echo:hi")

    def test_backend_down_is_a_connect_failure(self):
        port = free_port()
        lv = Levee(self, [cluster("grpc", [f"127.0.0.1:{port}"], protocol="http2",
                                  retry={"max_attempts": 2, "backoff_base": "1ms"})], listener=H2)
        call = self.channel(lv).unary_unary("/pkg.Svc/Echo")
        with self.assertRaises(grpc.RpcError) as ctx:
            call(b"x", timeout=10)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertGreaterEqual(lv.metric("levee_upstream_errors_total", cluster="grpc", kind="connect"), 1)


class GrpcUpstreamTls(unittest.TestCase):
    """HTTP/2 over TLS to the backend: ALPN h2, the server verified."""

    def test_tls_backend_with_alpn_h2(self):
        from test_tls import Pki
        pki = Pki(self)
        cert, key = pki.issue("backend", "backend.test", dns=["backend.test"])
        srv = GrpcServer(self, tls=(cert, key))
        lv = Levee(self, [h2_cluster(srv, tls={"ca": pki.ca, "server_name": "backend.test"})], listener=H2)
        ch = grpc.insecure_channel(f"127.0.0.1:{lv.port}")
        self.addCleanup(ch.close)
        self.assertEqual(ch.unary_unary("/pkg.Svc/Echo")(b"over tls", timeout=10), b"echo:over tls")
        self.assertEqual(lv.metric("levee_upstream_connections_total", cluster="grpc"), 1)

    def test_grpc_health_checks_over_tls(self):
        from test_tls import Pki
        pki = Pki(self)
        cert, key = pki.issue("backend", "backend.test", dns=["backend.test"])
        srv = GrpcServer(self, tls=(cert, key))
        lv = Levee(self, [h2_cluster(srv, tls={"ca": pki.ca, "server_name": "backend.test"},
                                     health_check={"interval": "50ms", "healthy": 1, "unhealthy": 1})], listener=H2)
        ep = f"127.0.0.1:{srv.port}"
        wait_until(lambda: lv.metric("levee_health_checks_total", endpoint=ep, result="ok") >= 2,
                   what="checks passing over TLS (ALPN h2, the server verified)")
        self.assertEqual(lv.metric("levee_health_checks_total", endpoint=ep, result="failed"), 0)
        with srv.lock:
            self.assertEqual(set(srv.health_asked), {""})  # no grpc_service: the server as a whole

    def test_a_tls_backend_that_does_not_choose_h2_is_a_connect_failure(self):
        from test_tls import Pki, TlsBackend
        pki = Pki(self)
        cert, key = pki.issue("backend", "backend.test", dns=["backend.test"])
        be = TlsBackend(self, cert, key)  # HTTP/1.1 only: it answers no ALPN
        lv = Levee(self, [cluster("app", [be.address], protocol="http2",
                                  tls={"ca": pki.ca, "server_name": "backend.test"})])
        status, headers, _ = lv.request("GET", "/")
        self.assertEqual((status, headers.get("x-levee-error")), (502, "upstream_connect"))
        self.assertGreaterEqual(lv.metric("levee_upstream_errors_total", cluster="app", kind="connect"), 1)
        self.assertEqual(be.seen["requests"], 0)


if __name__ == "__main__":
    unittest.main()
