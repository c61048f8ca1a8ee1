"""The trust boundary (issue 13): criticality, tenant, deadline and attempt
headers count only from trusted sources; from anyone else the route's
defaults apply, the header is replaced upstream by what levee decided, and
it is counted. X-Forwarded-For is appended to only from trusted sources."""
import subprocess
import unittest

from harness import Backend, Levee, cluster

SPOOF = {"Host": "app.test", "X-Criticality": "CRITICAL_PLUS", "X-Tenant-Id": "gold",
         "X-Request-Timeout-Ms": "1234", "X-Attempt-Count": "5", "X-Forwarded-For": "10.9.9.9"}


def upstream_headers(lv, headers):
    status, _, body = lv.request("GET", "/headers", headers=headers)
    assert status == 200, (status, body)
    out = {}
    for line in body.decode().splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out.setdefault(k.strip().lower(), []).append(v.strip())
    return out


class Trust(unittest.TestCase):
    def setUp(self):
        self.be = Backend(self)

    def levee(self, listener, route=None):
        r = {"cluster": "app", "criticality": "SHEDDABLE_PLUS", "timeout": "20s"}
        r.update(route or {})
        return Levee(self, [cluster("app", [self.be.address])], routes=[r], listener=listener,
                     extra={"tenants": {"quotas": {"default": 1.0, "gold": 1.0}}})

    def test_untrusted_signals_are_ignored_replaced_and_counted(self):
        lv = self.levee({"trust": {"networks": ["10.0.0.0/8"]}})  # the test client (127.0.0.1) is not in it
        h = upstream_headers(lv, SPOOF)
        self.assertEqual(h["x-criticality"], ["SHEDDABLE_PLUS"])  # the route's default, not the claim
        self.assertEqual(h["x-tenant-id"], ["default"])
        self.assertEqual(h["x-attempt-count"], ["1"])
        self.assertGreater(int(h["x-request-timeout-ms"][0]), 10000)  # the route's 20s, not the client's 1234ms
        self.assertEqual(h["x-forwarded-for"], ["127.0.0.1"])  # the spoofed chain is dropped
        for header in ("criticality", "tenant", "timeout", "attempt"):
            self.assertEqual(lv.metric("levee_untrusted_headers_total", listener="main", header=header), 1, header)
        # Admission used the default class and tenant too.
        self.assertEqual(lv.metric("levee_admitted_total", criticality="SHEDDABLE_PLUS", tenant="default"), 1)
        self.assertEqual(lv.metric("levee_admitted_total", criticality="CRITICAL_PLUS"), 0)

    def test_trusted_networks_are_believed(self):
        lv = self.levee({"trust": {"networks": ["127.0.0.0/8"]},
                         "tenant": {"trusted_networks": ["127.0.0.0/8"]}})
        h = upstream_headers(lv, SPOOF)
        self.assertEqual(h["x-criticality"], ["CRITICAL_PLUS"])
        self.assertEqual(h["x-tenant-id"], ["gold"])
        self.assertEqual(h["x-attempt-count"], ["1"])  # levee's own attempt number, whoever asks
        self.assertLessEqual(int(h["x-request-timeout-ms"][0]), 1234)
        self.assertEqual(h["x-forwarded-for"], ["10.9.9.9, 127.0.0.1"])
        self.assertEqual(lv.metric("levee_untrusted_headers_total"), 0)
        self.assertEqual(lv.metric("levee_admitted_total", criticality="CRITICAL_PLUS", tenant="gold"), 1)

    def test_load_reports_reach_trusted_clients_only(self):
        # The backend reports its load (ORCA) on every response: levee reads
        # it either way, and passes it on only to clients it trusts.
        be = Backend(self, extra=["--orca", "text"])
        for trust, passed in ((["127.0.0.0/8"], True), (["10.0.0.0/8"], False)):
            lv = Levee(self, [cluster("app", [be.address])],
                       listener={"trust": {"networks": trust}, "http2": {"enabled": True}})
            c = lv.conn()
            c.request("GET", "/")
            r = c.getresponse()
            r.read()
            c.close()
            self.assertEqual(r.status, 200)
            self.assertEqual(r.getheader("endpoint-load-metrics") is not None, passed, trust)
            # The same over HTTP/2 (curl, prior knowledge).
            out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-D", "-", "--http2-prior-knowledge",
                                  f"http://127.0.0.1:{lv.port}/"], capture_output=True, text=True, timeout=30)
            self.assertIn("HTTP/2 200", out.stdout)
            self.assertEqual("endpoint-load-metrics" in out.stdout.lower(), passed, (trust, out.stdout))

    def test_a_listener_off_loopback_trusts_nobody_by_default(self):
        lv = self.levee({"address": "0.0.0.0"})
        h = upstream_headers(lv, SPOOF)
        self.assertEqual(h["x-criticality"], ["SHEDDABLE_PLUS"])
        self.assertEqual(h["x-forwarded-for"], ["127.0.0.1"])
        self.assertEqual(lv.metric("levee_untrusted_headers_total", header="criticality"), 1)

    def test_a_loopback_listener_trusts_its_callers_by_default(self):
        lv = self.levee({})
        h = upstream_headers(lv, SPOOF)
        self.assertEqual(h["x-criticality"], ["CRITICAL_PLUS"])
        self.assertEqual(h["x-forwarded-for"], ["10.9.9.9, 127.0.0.1"])
        # The tenant header keeps its own trusted_networks (none here).
        self.assertEqual(h["x-tenant-id"], ["default"])

    def test_a_route_caps_what_untrusted_clients_may_claim(self):
        lv = self.levee({"trust": {"networks": []}}, {"untrusted_criticality": "CRITICAL", "criticality": "SHEDDABLE"})
        self.assertEqual(upstream_headers(lv, SPOOF)["x-criticality"], ["CRITICAL"])
        low = dict(SPOOF, **{"X-Criticality": "SHEDDABLE_PLUS"})
        self.assertEqual(upstream_headers(lv, low)["x-criticality"], ["SHEDDABLE_PLUS"])
        self.assertEqual(lv.metric("levee_untrusted_headers_total", header="criticality"), 1)  # only the capped one

    def test_a_request_without_the_headers_gets_none_added(self):
        lv = self.levee({"trust": {"networks": []}})
        h = upstream_headers(lv, {"Host": "app.test"})
        self.assertNotIn("x-criticality", h)
        self.assertNotIn("x-tenant-id", h)
        self.assertEqual(lv.metric("levee_untrusted_headers_total"), 0)


if __name__ == "__main__":
    unittest.main()
