"""The PROXY protocol behind a real L4 balancer: HAProxy in TCP mode with
send-proxy (v1) and send-proxy-v2 in front of levee. The client address the
header names is the one levee trusts, caps and forwards; connections from
elsewhere are served as direct clients; a broken or stalled header closes
the connection and is counted."""
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import unittest

from harness import LEVEE, Backend, Levee, Proc, cluster, free_port, wait_until

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


class SourceConnection(http.client.HTTPConnection):
    """An HTTP connection from a chosen loopback source address."""

    def __init__(self, port, source):
        super().__init__("127.0.0.1", port, timeout=10, source_address=(source, 0))


def listening(port):
    """A socket listens on 127.0.0.1:port, seen without connecting to it
    (a connection through HAProxy would reach levee, or not, as HAProxy
    pleases: the tests count what reaches levee)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == want and line.split()[3] == "0A" for line in list(f)[1:])


def haproxy(tc, levee_port):
    """HAProxy in TCP mode: one frontend sending v1 headers, one v2."""
    v1, v2 = free_port(), free_port()
    cfg = f"""
global
  maxconn 200
defaults
  mode tcp
  timeout connect 2s
  timeout client 20s
  timeout server 20s
frontend v1
  bind 127.0.0.1:{v1}
  default_backend lv1
frontend v2
  bind 127.0.0.1:{v2}
  default_backend lv2
backend lv1
  server levee 127.0.0.1:{levee_port} send-proxy
backend lv2
  server levee 127.0.0.1:{levee_port} send-proxy-v2
"""
    fd, path = tempfile.mkstemp(prefix="levee-test-haproxy-", suffix=".cfg")
    with os.fdopen(fd, "w") as f:
        f.write(cfg)
    tc.addCleanup(os.unlink, path)
    p = Proc([HAPROXY, "-db", "-f", path], "haproxy")
    tc.addCleanup(p.stop)
    wait_until(lambda: listening(v1) and listening(v2), what="haproxy frontends")
    return v1, v2


def closed_by_peer(s):
    """The peer closed (a FIN, or a reset: bytes it never read were pending)."""
    try:
        return s.recv(100) == b""
    except ConnectionResetError:
        return True


def get(port, source, path="/headers", headers=None, conn=None):
    c = conn or SourceConnection(port, source)
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    body = r.read().decode(errors="replace").lower()
    if conn is None:
        c.close()
    return r.status, body


class ProxyProtocol(unittest.TestCase):
    def levee(self, be, **listener):
        lst = {"proxy_protocol": {"from": ["127.0.0.1/32"], "timeout": "300ms"},
               "trust": {"networks": ["127.0.0.5/32"]}}
        lst.update(listener)
        return Levee(self, [cluster("app", [be.address])], listener=lst,
                     extra={"tenants": {"source": {"header": "x-tenant-id", "trusted_networks": ["127.0.0.5/32"]},
                                        "quotas": {"default": 10.0, "gold": 10.0}}})

    def test_v1_and_v2_headers_name_the_client_for_trust_and_forwarding(self):
        be = Backend(self)
        lv = self.levee(be)
        v1, v2 = haproxy(self, lv.port)
        for port, version in ((v1, "v1"), (v2, "v2")):
            before = lv.metric("levee_proxy_protocol_headers_total", result=version)
            # From 127.0.0.5 (trusted): the tenant header counts; the backend
            # sees the client's address in X-Forwarded-For, not HAProxy's.
            status, body = get(port, "127.0.0.5", headers={"X-Tenant-Id": "gold"})
            self.assertEqual(status, 200, body)
            self.assertIn("x-forwarded-for: 127.0.0.5", body)
            # From 127.0.0.6 (not trusted): the tenant header is not believed.
            status, body = get(port, "127.0.0.6", headers={"X-Tenant-Id": "gold"})
            self.assertEqual(status, 200, body)
            self.assertIn("x-forwarded-for: 127.0.0.6", body)
            self.assertEqual(lv.metric("levee_proxy_protocol_headers_total", result=version), before + 2)
        self.assertEqual(lv.metric("levee_admitted_total", tenant="gold"), 2)
        self.assertEqual(lv.metric("levee_admitted_total", tenant="default"), 2)
        self.assertEqual(lv.metric("levee_untrusted_headers_total", header="tenant"), 2)

    def test_the_per_source_cap_counts_clients_not_the_balancer(self):
        be = Backend(self)
        lv = self.levee(be, max_connections_per_source=1)
        v1, v2 = haproxy(self, lv.port)
        before = lv.metric("levee_downstream_refused_total", cause="per_source")
        # One kept-alive connection from .5 through each version's frontend:
        # the second is the same client's second connection, refused.
        first = SourceConnection(v2, "127.0.0.5")
        self.addCleanup(first.close)
        self.assertEqual(get(v2, "127.0.0.5", conn=first)[0], 200)
        status, body = get(v1, "127.0.0.5")
        self.assertEqual(status, 503, body)
        self.assertIn("conn_limit", body)
        # Other clients behind the same balancer are not held to .5's cap.
        self.assertEqual(get(v1, "127.0.0.6")[0], 200)
        self.assertEqual(get(v2, "127.0.0.7")[0], 200)
        self.assertEqual(lv.metric("levee_downstream_refused_total", cause="per_source"), before + 1)

    def test_direct_clients_bad_and_stalled_headers(self):
        be = Backend(self)
        lv = self.levee(be)
        # Not from the balancer's network: a direct client, no header expected.
        status, body = get(lv.port, "127.0.0.9")
        self.assertEqual(status, 200, body)
        self.assertIn("x-forwarded-for: 127.0.0.9", body)
        # (the harness's port probe connected from the balancer's address and
        # left without a byte: a close, not a bad header)
        wait_until(lambda: lv.metric("levee_proxy_protocol_headers_total", result="closed") == 1,
                   what="the probe's close counted")
        # From the balancer's address without a header: closed, counted, and
        # the HTTP request never reaches the backend.
        with socket.create_connection(("127.0.0.1", lv.port), timeout=5) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertTrue(closed_by_peer(s))
        wait_until(lambda: lv.metric("levee_proxy_protocol_headers_total", result="invalid") == 1,
                   what="the invalid header counted")
        # A header that stops half way: closed at the header timeout (300 ms).
        with socket.create_connection(("127.0.0.1", lv.port), timeout=5) as s:
            s.sendall(b"PROXY TCP4 192.0.2.1 ")
            self.assertTrue(closed_by_peer(s))
        wait_until(lambda: lv.metric("levee_proxy_protocol_headers_total", result="timeout") == 1,
                   what="the stalled header counted")
        # A header and a request in one write: the request behind the header
        # is read whole (nothing of it was consumed as header).
        with socket.create_connection(("127.0.0.1", lv.port), timeout=5) as s:
            s.sendall(b"PROXY TCP4 192.0.2.44 10.0.0.1 5555 80\r\nGET /headers HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        self.assertTrue(data.startswith(b"HTTP/1.1 200"), data[:200])
        self.assertIn(b"x-forwarded-for: 192.0.2.44", data.lower())
        # Two requests went upstream: the direct client's and this one; the
        # headerless request from the balancer's address never did.
        self.assertEqual(lv.metric("levee_upstream_requests_total"), 2)
        # The listener still serves, and every refused connection gave back
        # its place.
        self.assertEqual(get(lv.port, "127.0.0.9")[0], 200)
        wait_until(lambda: lv.metric("levee_downstream_active_connections") == 0, what="no connection left open")

    def test_from_is_required(self):
        be = Backend(self)
        for pp, why in ((True, "must be a map with from"), ({"timeout": "1s"}, "proxy_protocol.from: is required")):
            path = tempfile.mkstemp(prefix="levee-test-pp-", suffix=".yaml")[1]
            self.addCleanup(os.unlink, path)
            with open(path, "w") as f:
                json.dump({"listeners": [{"port": free_port(), "address": "127.0.0.1", "proxy_protocol": pp,
                                          "routes": [{"cluster": "app"}]}],
                           "clusters": [{"name": "app", "endpoints": [be.address]}]}, f)
            r = subprocess.run([LEVEE, "--validate", path], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(why, r.stderr)


if __name__ == "__main__":
    unittest.main()
