"""The foundation: levee is a correct HTTP/1.1 reverse proxy (issue 2)."""
import hashlib
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import (LEVEE, Backend, Levee, cluster, download_bytes, free_port, memory_bound_mib, port_open, raw_exchange,
                     sha256_hex, tool, wait_until, Proc, ROOT)


class ProxyBasics(unittest.TestCase):
    def setUp(self):
        self.be = Backend(self, workers=16)
        self.lv = Levee(self, [cluster("app", [self.be.address])])

    def test_get_is_proxied_with_forwarding_headers(self):
        status, headers, body = self.lv.request("GET", "/headers", headers={
            "Host": "example.test", "X-Forwarded-For": "10.1.1.1", "X-Request-Id": "rid-42",
            "Connection": "x-secret, keep-alive", "X-Secret": "hop", "Keep-Alive": "timeout=5",
            "TE": "trailers", "Proxy-Connection": "keep-alive", "Via": "1.1 edge"})
        self.assertEqual(status, 200)
        text = body.decode().lower()
        self.assertIn("host: example.test", text)              # Host preserved
        self.assertIn("x-forwarded-for: 10.1.1.1, 127.0.0.1", text)
        self.assertIn("x-forwarded-proto: http", text)
        self.assertIn("via: 1.1 edge, 1.1 levee", text)
        self.assertIn("x-request-id: rid-42", text)             # passed through
        self.assertIn("x-attempt-count: 1", text)
        self.assertIn("x-request-timeout-ms:", text)            # remaining deadline
        for hop in ("x-secret:", "keep-alive:", "te:", "proxy-connection:", "connection:"):
            self.assertNotIn(hop, text, hop)

    def test_request_id_is_generated_when_absent(self):
        _, _, body = self.lv.request("GET", "/headers")
        line = [l for l in body.decode().lower().splitlines() if l.startswith("x-request-id:")]
        self.assertEqual(len(line), 1)
        self.assertRegex(line[0], r"x-request-id: [0-9a-f]{32}$")

    def test_keep_alive_reuses_both_connections(self):
        before = self.lv.metric("levee_downstream_connections_total", listener="main")
        c = self.lv.conn()
        for _ in range(20):
            c.request("GET", "/")
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            r.read()
        c.close()
        # One upstream connection served all 20 requests.
        self.assertEqual(self.lv.metric("levee_upstream_connections_total", cluster="app"), 1)
        self.assertEqual(self.lv.metric("levee_downstream_connections_total", listener="main") - before, 1)
        # The backend saw levee's one connection (plus this stats query's).
        self.assertEqual(self.be.stats()["max_connections"], 2)

    def test_chunked_upload_checksum(self):
        data = os.urandom(3 * 1024 * 1024 + 17)

        def chunks():
            for i in range(0, len(data), 100000):
                yield data[i:i + 100000]
        c = self.lv.conn()
        c.request("POST", "/sha256", body=chunks(), encode_chunked=True,
                  headers={"Transfer-Encoding": "chunked"})
        r = c.getresponse()
        digest, size = r.read().decode().split()
        self.assertEqual(r.status, 200)
        self.assertEqual(int(size), len(data))
        self.assertEqual(digest, sha256_hex(data))

    def test_content_length_upload_with_curl_and_100_continue(self):
        curl = tool("curl")
        data = os.urandom(2 * 1024 * 1024)
        path = self.id() + ".bin"
        with open(f"/tmp/{path}", "wb") as f:
            f.write(data)
        self.addCleanup(os.unlink, f"/tmp/{path}")
        # curl sends Expect: 100-continue for large bodies and waits for it.
        out = subprocess.run([curl, "-sS", "-v", "--data-binary", f"@/tmp/{path}", "-H", "Expect: 100-continue",
                              f"http://127.0.0.1:{self.lv.port}/sha256"], capture_output=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"HTTP/1.1 100 Continue", out.stderr)
        digest, size = out.stdout.decode().split()
        self.assertEqual((digest, int(size)), (sha256_hex(data), len(data)))

    def test_100_continue_sent_before_the_body(self):
        body = b"x" * 1000
        s = socket.create_connection(("127.0.0.1", self.lv.port), timeout=5)
        s.sendall(b"POST /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
        first = s.recv(100)
        self.assertTrue(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first)
        s.sendall(body)
        rest = b""
        while b"\n" not in rest.split(b"\r\n\r\n", 1)[-1] or b"\r\n\r\n" not in rest:
            rest += s.recv(4096)
        s.close()
        self.assertIn(b"200 OK", rest)
        self.assertIn(sha256_hex(body).encode(), rest)

    def test_chunked_and_fixed_downloads_byte_for_byte(self):
        for chunked in ("0", "1"):
            size = 5 * 1024 * 1024 + 3
            status, headers, body = self.lv.request("GET", f"/download?size={size}&chunked={chunked}")
            self.assertEqual(status, 200)
            self.assertEqual(len(body), size)
            self.assertEqual(hashlib.sha256(body).hexdigest(), hashlib.sha256(download_bytes(size)).hexdigest())
            if chunked == "1":
                self.assertEqual(headers.get("transfer-encoding"), "chunked")
            else:
                self.assertEqual(headers.get("content-length"), str(size))

    def test_http10_client_gets_a_close_delimited_body(self):
        out = raw_exchange(self.lv.port, b"GET /download?size=1000&chunked=1 HTTP/1.0\r\n\r\n")
        head, _, body = out.partition(b"\r\n\r\n")
        self.assertIn(b"200", head.split(b"\r\n")[0])
        self.assertNotIn(b"transfer-encoding", head.lower())
        self.assertEqual(body, download_bytes(1000))

    def test_head_and_bodyless_statuses(self):
        status, headers, body = self.lv.request("HEAD", "/download?size=777")
        self.assertEqual((status, body), (200, b""))
        self.assertEqual(headers.get("content-length"), "777")
        for code in (204, 304):
            c = self.lv.conn()
            c.request("GET", f"/status/{code}")
            r = c.getresponse()
            self.assertEqual((r.status, r.read()), (code, b""))
            # The connection is still usable: no stray body bytes.
            c.request("GET", "/")
            r = c.getresponse()
            self.assertEqual((r.status, r.read()), (200, b"ok\n"))
            c.close()

    def test_pipelined_requests_are_answered_in_order(self):
        req = b"GET /status/201 HTTP/1.1\r\nHost: t\r\n\r\nGET /status/202 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        out = raw_exchange(self.lv.port, req)
        first = out.find(b"HTTP/1.1 201")
        second = out.find(b"HTTP/1.1 202")
        self.assertTrue(0 <= first < second, out[:200])

    def test_malformed_request_gets_400_and_the_next_client_is_served(self):
        out = raw_exchange(self.lv.port, b"GET / HTTP/1.1\r\nHost: t\r\nBad Header Line\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])
        self.assertIn(b"connection: close", out.lower())
        out = raw_exchange(self.lv.port, b"NOT-HTTP\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])
        # Conflicting framing (a smuggling shape) is refused too.
        out = raw_exchange(self.lv.port, b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])
        status, _, _ = self.lv.request("GET", "/")
        self.assertEqual(status, 200)
        self.assertGreaterEqual(self.lv.metric("levee_local_replies_total", reason="bad_request"), 3)

    def test_header_limits(self):
        big = b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(80)) + b"\r\n"
        out = raw_exchange(self.lv.port, big)
        self.assertTrue(out.startswith(b"HTTP/1.1 431"), out[:100])
        long_line = b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: t\r\n\r\n"
        out = raw_exchange(self.lv.port, long_line)
        self.assertTrue(out.startswith(b"HTTP/1.1 414"), out[:100])
        self.assertEqual(self.lv.request("GET", "/")[0], 200)

    def test_missing_host_and_unknown_route(self):
        out = raw_exchange(self.lv.port, b"GET / HTTP/1.1\r\n\r\n")
        self.assertTrue(out.startswith(b"HTTP/1.1 400"), out[:100])

    def test_metrics_pass_promtool(self):
        promtool = tool("promtool")
        for _ in range(5):
            self.lv.request("GET", "/")
        self.lv.request("GET", "/", headers={"x-criticality": "nope"})
        text = self.lv.metrics()
        out = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertEqual(self.lv.metric("levee_requests_total", route="main/0", code="2xx"), 5)
        self.assertEqual(self.lv.metric("levee_local_replies_total", reason="bad_criticality"), 1)


class Routing(unittest.TestCase):
    def test_host_and_prefix_first_match_wins(self):
        a = Backend(self, name="a")
        b = Backend(self, name="b")
        c = Backend(self, name="c")
        lv = Levee(self, [cluster("a", [a.address]), cluster("b", [b.address]), cluster("c", [c.address])],
                   routes=[{"match": {"prefix": "/api", "host": "*.example.com"}, "cluster": "a"},
                           {"match": {"prefix": "/api"}, "cluster": "b"},
                           {"match": {"prefix": "/", "host": "static.test"}, "cluster": "c"}])

        def who(path, host):
            c_ = lv.conn()
            c_.request("GET", path, headers={"Host": host})
            r = c_.getresponse()
            r.read()
            return r.status, r.getheader("x-backend")
        self.assertEqual(who("/api/x", "www.example.com:8080"), (200, "a"))
        self.assertEqual(who("/api/x", "WWW.EXAMPLE.COM"), (200, "a"))
        self.assertEqual(who("/api/x", "example.org"), (200, "b"))
        self.assertEqual(who("/index", "static.test"), (200, "c"))
        status, _ = who("/index", "other.test")
        self.assertEqual(status, 404)

    def test_p2c_spreads_over_endpoints_by_weight(self):
        a = Backend(self, name="a")
        b = Backend(self, name="b")
        lv = Levee(self, [cluster("app", [{"address": a.address, "weight": 3}, b.address])])
        seen = {"a": 0, "b": 0}
        for _ in range(400):
            c = lv.conn()
            c.request("GET", "/")
            r = c.getresponse()
            r.read()
            seen[r.getheader("x-backend")] += 1
            c.close()
        # Sequential requests: outstanding is always equal, so the share is
        # proportional to the weights: 3/4 for a (300 of 400, +-10%).
        self.assertGreater(seen["a"], 270)
        self.assertLess(seen["a"], 330)


class Failures(unittest.TestCase):
    def test_upstream_down_is_502(self):
        dead = free_port()
        lv = Levee(self, [cluster("app", [f"127.0.0.1:{dead}"], retry={"enabled": False})])
        status, headers, body = lv.request("GET", "/")
        self.assertEqual(status, 502)
        self.assertEqual(headers.get("x-levee-error"), "upstream_connect")

    def test_upstream_slow_is_504_at_the_route_timeout(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])],
                   routes=[{"cluster": "app", "timeout": "300ms"}])
        t0 = time.monotonic()
        status, headers, _ = lv.request("GET", "/slow?ms=3000")
        took = time.monotonic() - t0
        self.assertEqual(status, 504)
        self.assertEqual(headers.get("x-levee-error"), "upstream_timeout")
        self.assertLess(took, 2.0)
        # A client deadline shorter than the route's wins.
        t0 = time.monotonic()
        status, _, _ = lv.request("GET", "/slow?ms=3000", headers={"x-request-timeout-ms": "100"})
        self.assertEqual(status, 504)
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_slow_header_client_is_cut_off_without_affecting_others(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])], listener={"header_timeout": "300ms"})
        slow = socket.create_connection(("127.0.0.1", lv.port), timeout=5)
        slow.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        # Meanwhile other clients are served at once.
        for _ in range(10):
            t0 = time.monotonic()
            self.assertEqual(lv.request("GET", "/")[0], 200)
            self.assertLess(time.monotonic() - t0, 0.25)
        t0 = time.monotonic()
        data = b""
        while True:
            chunk = slow.recv(4096)
            if not chunk:
                break
            data += chunk
        took = time.monotonic() - t0
        slow.close()
        self.assertTrue(data.startswith(b"HTTP/1.1 408"), data[:80])
        self.assertLess(took, 2.0)

    def test_a_kept_alive_connection_is_served_across_pauses_that_park_it(self):
        # From its first answer on, a cleartext connection reads through the
        # worker's readiness set; idle past 100 ms it parks (its coroutine
        # ends and it waits for readability alone), and a request then
        # resumes it. Pauses below, around and well past that, in turn, on
        # one connection: each request is answered, and nothing else is
        # sent.
        be = Backend(self, service="fixed:0ms")
        lv = Levee(self, [cluster("app", [be.address])])
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=5)
        self.addCleanup(s.close)
        for i, pause in enumerate((0, 0, 0.05, 0.3, 0, 0.12, 0.3, 0.3, 0, 0)):
            ready, _, _ = select.select([s], [], [], pause)
            self.assertFalse(ready, "levee sent something unasked after request %d" % (i - 1))
            s.sendall(b"GET /echo-%d HTTP/1.1\r\nHost: t\r\n\r\n" % i)
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = s.recv(4096)
                self.assertTrue(chunk, "closed before answer %d" % i)
                got += chunk
            head, _, body = got.partition(b"\r\n\r\n")
            self.assertTrue(head.startswith(b"HTTP/1.1 200"), head)
            length = int(re.search(rb"(?im)^content-length:\s*(\d+)", head).group(1))
            while len(body) < length:
                body += s.recv(4096)
            self.assertEqual(len(body), length, "answer %d has more than its body" % i)

    def test_idle_keep_alive_connection_is_closed(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])], listener={"idle_timeout": "200ms"})
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
        got = b""
        while b"ok\n" not in got:
            got += s.recv(4096)
        t0 = time.monotonic()
        self.assertEqual(s.recv(10), b"")  # closed by levee
        self.assertLess(time.monotonic() - t0, 2.0)
        s.close()


class Lifecycle(unittest.TestCase):
    def test_sigterm_drains_in_flight_and_exits_0(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])])
        result = {}

        def slow_request():
            result["r"] = lv.request("GET", "/slow?ms=700")
        t = threading.Thread(target=slow_request)
        t.start()
        wait_until(lambda: lv.metric("levee_endpoint_outstanding") >= 1, what="request in flight")
        lv.proc.signal(signal.SIGTERM)
        # New connections are refused while the in-flight request finishes.
        wait_until(lambda: not port_open(lv.port), timeout=2, what="listener closed")
        t.join(5)
        self.assertEqual(result["r"][0], 200)
        self.assertEqual(lv.proc.wait(5), 0)
        self.assertIn("drained", lv.proc.output())

    def test_validate_and_bad_config_exit_2_with_place(self):
        good = os.path.join(ROOT, "config", "levee.yaml")
        out = subprocess.run([LEVEE, "--validate", good], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        bad = "/tmp/levee-test-bad.yaml"
        with open(bad, "w") as f:
            f.write("listeners:\n  - port: 99999\n    routes: [{cluster: x}]\nclusters: []\n")
        self.addCleanup(os.unlink, bad)
        out = subprocess.run([LEVEE, "--validate", bad], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn(f"{bad}:2:11: listeners[0].port: must be 1..65535", out.stderr)
        self.assertIn("no cluster named 'x'", out.stderr)
        out = subprocess.run([LEVEE, "-c", bad], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        out = subprocess.run([LEVEE, "--version"], capture_output=True, text=True)
        self.assertRegex(out.stdout, r"^levee \d+\.\d+\.\d+")

    def test_port_in_use_exits_1(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])])
        # A second levee on the same admin port cannot start.
        cfg = dict(lv.cfg)
        cfg["listeners"] = [dict(cfg["listeners"][0], port=free_port())]
        path = "/tmp/levee-test-clash.yaml"
        import json
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.addCleanup(os.unlink, path)
        out = subprocess.run([LEVEE, "-c", path], capture_output=True, text=True, timeout=10)
        self.assertEqual(out.returncode, 1)
        self.assertIn("cannot start", out.stderr)


class Nginx(unittest.TestCase):
    def test_proxying_to_nginx(self):
        nginx = tool("nginx")
        d = f"/tmp/levee-nginx-{os.getpid()}"
        os.makedirs(f"{d}/html", exist_ok=True)
        payload = os.urandom(300000)
        with open(f"{d}/html/blob", "wb") as f:
            f.write(payload)
        port = free_port()
        with open(f"{d}/nginx.conf", "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 256; }}
http {{ access_log off; server {{ listen 127.0.0.1:{port}; root {d}/html; }} }}
""")
        p = Proc([nginx, "-p", d, "-c", f"{d}/nginx.conf"], "nginx")
        self.addCleanup(p.stop)
        wait_until(lambda: port_open(port), what="nginx")
        lv = Levee(self, [cluster("web", [f"127.0.0.1:{port}"])])
        status, headers, body = lv.request("GET", "/blob")
        self.assertEqual(status, 200)
        self.assertEqual(body, payload)
        self.assertEqual(lv.request("GET", "/missing")[0], 404)


class BigUpload(unittest.TestCase):
    def test_one_gib_upload_in_bounded_memory(self):
        be = Backend(self)
        lv = Levee(self, [cluster("app", [be.address])], routes=[{"cluster": "app", "timeout": "120s"}])
        size = 1 << 30
        block = os.urandom(1 << 20)
        h = hashlib.sha256()
        s = socket.create_connection(("127.0.0.1", lv.port), timeout=60)
        s.sendall(b"PUT /sha256 HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size // len(block)):
            s.sendall(block)
            h.update(block)
        resp = b""
        while not resp.endswith(b"\n") or b"\r\n\r\n" not in resp:
            chunk = s.recv(4096)
            if not chunk:
                break
            resp += chunk
        s.close()
        body = resp.split(b"\r\n\r\n", 1)[1].decode().split()
        self.assertEqual(body, [h.hexdigest(), str(size)])
        peak_mib = lv.proc.rss_peak_kib() / 1024
        self.assertLess(peak_mib, memory_bound_mib(64), f"levee peak RSS {peak_mib:.1f} MiB while relaying 1 GiB")


if __name__ == "__main__":
    unittest.main()
