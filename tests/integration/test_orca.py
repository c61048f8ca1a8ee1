"""ORCA load reports as real servers send them, through the real binary.

The backend here behaves as vLLM and Triton do: it reports load in
`endpoint-load-metrics` only when the request asks with
`endpoint-load-metrics-format: text` (or json), and then in their form
(named_metrics.kv_cache_usage_perc, named_metrics.num_requests_waiting).
On /grpc it answers as a gRPC server does over HTTP/1.1 chunked framing:
the report in a trailer, `endpoint-load-metrics-bin`, unpadded base64
protobuf.
"""
import base64
import json
import socket
import struct
import threading
import unittest

from harness import Levee, cluster, wait_until


def _pb_double(field, v):
    return bytes([field << 3 | 1]) + struct.pack("<d", v)


def _pb_entry(field, key, v):
    k = key.encode()
    entry = bytes([1 << 3 | 2, len(k)]) + k + _pb_double(2, v)
    return bytes([field << 3 | 2, len(entry)]) + entry


class ReportingBackend:
    """Answers every request 200; reports load as described above."""

    def __init__(self, tc, kv=0.4, waiting=2.0, extra_text=""):
        self.kv, self.waiting, self.extra_text = kv, waiting, extra_text
        self.formats = []  # endpoint-load-metrics-format of each request ("" when absent)
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        tc.addCleanup(self.sock.close)

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        buf = b""
        with c:
            while True:
                while b"\r\n\r\n" not in buf:
                    chunk = c.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                head, _, buf = buf.partition(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                path = lines[0].split(" ")[1]
                fields = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
                fmt = fields.get("endpoint-load-metrics-format", "")
                with self.lock:
                    self.formats.append(fmt)
                c.sendall(self._answer(path, fmt))

    def _answer(self, path, fmt):
        if path.startswith("/grpc"):
            report = _pb_double(1, 0.1) + _pb_entry(8, "kv", self.kv) + _pb_entry(4, "cpu", 0.003)
            trailer = b"endpoint-load-metrics-bin: " + base64.b64encode(report).rstrip(b"=") + b"\r\n"
            return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nok\n\r\n0\r\n" + trailer + b"\r\n"
        extra = b""
        if fmt.lower() == "text":
            value = (f"TEXT named_metrics.kv_cache_usage_perc={self.kv!r}, "
                     f"named_metrics.num_requests_waiting={self.waiting!r}{self.extra_text}")
            extra = b"endpoint-load-metrics: " + value.encode() + b"\r\n"
        elif fmt.lower() == "json":
            value = "JSON " + json.dumps({"named_metrics": {"kv_cache_usage_perc": self.kv,
                                                            "num_requests_waiting": self.waiting}})
            extra = b"endpoint-load-metrics: " + value.encode() + b"\r\n"
        return b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n" + extra + b"\r\nok\n"


def endpoint_utilization(lv, cluster_name):
    clusters = json.loads(lv.admin_get("/admin/clusters")[1])["clusters"]
    c = next(c for c in clusters if c["name"] == cluster_name)
    return c["endpoints"][0]["utilization"]


class Orca(unittest.TestCase):
    def test_inference_backend_reports_when_asked_and_kv_cache_is_the_utilization(self):
        text = ReportingBackend(self, kv=0.4)
        js = ReportingBackend(self, kv=0.6)
        silent = ReportingBackend(self, kv=0.9)
        lv = Levee(self, [
            cluster("text", [text.address], load_report={
                "request_format": "text", "utilization": "named_metrics.kv_cache_usage_perc"}),
            cluster("json", [js.address], load_report={
                "request_format": "json", "utilization": "named_metrics.kv_cache_usage_perc"}),
            cluster("silent", [silent.address]),
        ], routes=[{"match": {"prefix": "/t"}, "cluster": "text"},
                   {"match": {"prefix": "/j"}, "cluster": "json"},
                   {"match": {"prefix": "/s"}, "cluster": "silent"}])
        for i in range(30):
            for p in ("/t", "/j", "/s"):
                st, _, _ = lv.request("GET", f"{p}/{i}")
                self.assertEqual(st, 200)
        # Asked in the configured format, on every request.
        self.assertEqual(set(text.formats), {"text"})
        self.assertEqual(set(js.formats), {"json"})
        self.assertEqual(set(silent.formats), {""})  # not configured: nothing asked, nothing reported
        # The endpoint's utilization is the KV-cache usage (smoothed; the
        # backend reports the same value every time).
        self.assertAlmostEqual(endpoint_utilization(lv, "text"), 0.4, delta=0.02)
        self.assertAlmostEqual(endpoint_utilization(lv, "json"), 0.6, delta=0.02)
        self.assertLess(endpoint_utilization(lv, "silent"), 0)  # no report: unknown (-1)
        self.assertEqual(lv.metric("levee_load_report_errors_total"), 0)
        self.assertEqual(lv.metric("levee_load_report_metrics_ignored_total"), 0)

    def test_the_client_asks_when_the_cluster_does_not(self):
        be = ReportingBackend(self, kv=0.3)
        lv = Levee(self, [cluster("c", [be.address], load_report={"utilization": "named_metrics.kv_cache_usage_perc"})])
        st, _, _ = lv.request("GET", "/", headers={"endpoint-load-metrics-format": "TEXT"})
        self.assertEqual(st, 200)
        self.assertEqual(be.formats, ["TEXT"])
        wait_until(lambda: endpoint_utilization(lv, "c") > 0, what="a report read")
        self.assertAlmostEqual(endpoint_utilization(lv, "c"), 0.3, delta=0.02)

    def test_grpc_trailer_report_in_binary(self):
        be = ReportingBackend(self, kv=0.7)
        lv = Levee(self, [cluster("g", [be.address], load_report={"utilization": "named_metrics.kv"})])
        for i in range(20):
            st, _, body = lv.request("GET", f"/grpc/{i}")
            self.assertEqual((st, body), (200, b"ok\n"))
        self.assertAlmostEqual(endpoint_utilization(lv, "g"), 0.7, delta=0.02)
        self.assertEqual(lv.metric("levee_load_report_errors_total"), 0)

    def test_unknown_and_malformed_metrics_are_counted_and_the_rest_used(self):
        be = ReportingBackend(self, kv=0.5, extra_text=", bogus=1, named_metrics.bad=oops")
        lv = Levee(self, [cluster("c", [be.address], load_report={
            "request_format": "text", "utilization": "named_metrics.kv_cache_usage_perc"})])
        for i in range(10):
            self.assertEqual(lv.request("GET", f"/{i}")[0], 200)
        self.assertAlmostEqual(endpoint_utilization(lv, "c"), 0.5, delta=0.03)
        self.assertEqual(lv.metric("levee_load_report_metrics_ignored_total", cluster="c", why="unknown"), 10)
        self.assertEqual(lv.metric("levee_load_report_metrics_ignored_total", cluster="c", why="malformed"), 10)
        self.assertEqual(lv.metric("levee_load_report_errors_total"), 0)

    def test_a_bad_metric_name_in_the_config_is_named(self):
        import subprocess
        import tempfile
        from harness import LEVEE
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write("listeners:\n  - {name: l, port: 18080, routes: [{cluster: c}]}\n"
                    "clusters:\n  - name: c\n    endpoints: [127.0.0.1:9]\n"
                    "    load_report: {utilization: kv_cache_usage_perc}\n")
        out = subprocess.run([LEVEE, "--validate", f.name], capture_output=True, text=True)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("clusters[0].load_report.utilization", out.stderr)
        self.assertIn(":6:", out.stderr)  # line 6


if __name__ == "__main__":
    unittest.main()
