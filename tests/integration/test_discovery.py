"""Service discovery (issue 14): a hostname endpoint is one endpoint per
address it resolves to, re-resolved off the serving threads; addresses that
appear or go are added or drained and the rest keep their state. The name
is served by a small DNS server in the test (resolver.servers), answering
with 127.0.0.x loopback addresses and a 1-second TTL."""
import http.client
import json
import socket
import struct
import threading
import unittest

from harness import BACKEND, Levee, Proc, cluster, free_port, port_open, wait_until


class DnsServer:
    """Answers A queries for the names in `records` (AAAA: no records,
    other names: NXDOMAIN); `fail` makes it answer SERVFAIL."""

    def __init__(self, tc, records, ttl=1):
        self.records = records
        self.ttl = ttl
        self.fail = False
        self.queries = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stopped = False
        self.t = threading.Thread(target=self.serve, daemon=True)
        self.t.start()
        tc.addCleanup(self.stop)

    def stop(self):
        self.stopped = True
        self.sock.close()

    def serve(self):
        while not self.stopped:
            try:
                data, peer = self.sock.recvfrom(4096)
            except OSError:
                return
            reply = self.answer(data)
            if reply:
                self.sock.sendto(reply, peer)

    def answer(self, q):
        if len(q) < 12:
            return None
        qid, _flags, qd = struct.unpack("!HHH", q[:6])
        if qd != 1:
            return None
        i, labels = 12, []
        while q[i] != 0:
            n = q[i]
            labels.append(q[i + 1:i + 1 + n].decode())
            i += 1 + n
        question = q[12:i + 5]
        qtype = struct.unpack("!H", q[i + 1:i + 3])[0]
        name = ".".join(labels).lower()
        self.queries += 1
        if self.fail:
            return struct.pack("!HHHHHH", qid, 0x8182, 1, 0, 0, 0) + question
        if name not in self.records:
            return struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
        addrs = list(self.records[name]) if qtype == 1 else []
        out = struct.pack("!HHHHHH", qid, 0x8180, 1, len(addrs), 0, 0) + question
        for a in addrs:
            out += struct.pack("!HHHIH", 0xC00C, 1, 1, self.ttl, 4) + socket.inet_aton(a)
        return out


class Discovery(unittest.TestCase):
    def setUp(self):
        self.port = free_port()
        self.backends = {}
        for n, ip in (("a", "127.0.0.2"), ("b", "127.0.0.3"), ("c", "127.0.0.4")):
            self.backends[n] = self.backend(n, ip)
        self.dns = DnsServer(self, {"svc.test": ["127.0.0.2", "127.0.0.3", "127.0.0.4"]})

    def backend(self, name, ip):
        p = Proc([BACKEND, "--port", str(self.port), "--address", ip, "--workers", "8", "--service", "fixed:1ms",
                  "--id", name], name)
        self.addCleanup(p.stop)
        wait_until(lambda: port_open(self.port, host=ip), what=f"{name} on {ip}")
        return p

    def levee(self):
        return Levee(self, [cluster("svc", [f"svc.test:{self.port}"], resolve_interval="1s",
                                    slow_start={"window": "0s"})],
                     extra={"resolver": {"servers": [f"127.0.0.1:{self.dns.port}"], "min_ttl": "100ms",
                                         "timeout": "200ms"}})

    def endpoints(self, lv):
        return {e["address"]: e for e in json.loads(lv.admin_get("/admin/clusters")[1])["clusters"][0]["endpoints"]}

    def served_by(self, lv, n=60):
        seen = set()
        for _ in range(n):
            c = lv.conn(timeout=5)
            c.request("GET", "/")
            r = c.getresponse()
            r.read()
            c.close()
            self.assertEqual(r.status, 200)
            seen.add(r.getheader("x-backend"))
        return seen

    def test_one_endpoint_per_address_and_changes_keep_state(self):
        lv = self.levee()
        want = {f"127.0.0.{i}:{self.port}" for i in (2, 3, 4)}
        wait_until(lambda: set(self.endpoints(lv)) == want, what="three endpoints")
        for e in self.endpoints(lv).values():
            self.assertEqual(e["host"], "svc.test")
        wait_until(lambda: self.served_by(lv) == {"a", "b", "c"}, what="all three addresses used")
        # An operator drains a; then the name loses c. a keeps its state,
        # c is gone, b carries the traffic.
        a = f"127.0.0.2:{self.port}"
        status = http.client.HTTPConnection("127.0.0.1", lv.admin_port, timeout=5)
        status.request("POST", f"/admin/endpoint/drain?cluster=svc&endpoint={a}", body=b"")
        self.assertEqual(status.getresponse().status, 200)
        generation = json.loads(lv.admin_get("/admin/info")[1])["generation"]
        self.dns.records["svc.test"] = ["127.0.0.2", "127.0.0.3"]
        wait_until(lambda: set(self.endpoints(lv)) == {a, f"127.0.0.3:{self.port}"}, what="c removed")
        self.assertEqual(self.endpoints(lv)[a]["admin"], "draining")
        self.assertGreater(json.loads(lv.admin_get("/admin/info")[1])["generation"], generation)
        self.assertEqual(self.served_by(lv), {"b"})
        self.assertEqual(lv.metric("levee_resolver_addresses", host=f"svc.test:{self.port}"), 2)
        self.assertGreaterEqual(lv.metric("levee_resolver_changes_total", host=f"svc.test:{self.port}"), 2)
        self.assertIn("resolves to 2 address(es)", lv.proc.output())

    def test_an_address_that_appears_joins_through_slow_start(self):
        self.dns.records["svc.test"] = ["127.0.0.2", "127.0.0.3"]
        lv = Levee(self, [cluster("svc", [f"svc.test:{self.port}"], resolve_interval="1s",
                                  slow_start={"window": "2s", "min_weight_pct": 10})],
                   extra={"resolver": {"servers": [f"127.0.0.1:{self.dns.port}"], "min_ttl": "100ms"}})
        wait_until(lambda: len(self.endpoints(lv)) == 2, what="two endpoints")
        # The first two ramp up from the start, then stay at full weight.
        wait_until(lambda: all(e["effective_weight"] == 1 for e in self.endpoints(lv).values()), timeout=10,
                   what="the first two warm")
        self.dns.records["svc.test"] = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
        c = f"127.0.0.4:{self.port}"
        wait_until(lambda: c in self.endpoints(lv), what="the third address")
        eps = self.endpoints(lv)
        self.assertLess(eps[c]["effective_weight"], 1)
        self.assertGreater(eps[c]["effective_weight"], 0)
        self.assertEqual([eps[a]["effective_weight"] for a in sorted(eps) if a != c], [1, 1])
        wait_until(lambda: self.endpoints(lv)[c]["effective_weight"] == 1, timeout=10, what="the third warm")

    def test_failed_lookup_keeps_the_last_good_set(self):
        lv = self.levee()
        wait_until(lambda: len(self.endpoints(lv)) == 3, what="three endpoints")
        self.dns.fail = True
        wait_until(lambda: lv.metric("levee_resolver_failures_total") >= 2, timeout=15, what="failures counted")
        self.assertEqual(len(self.endpoints(lv)), 3)
        self.assertEqual(self.served_by(lv), {"a", "b", "c"})
        self.assertIn("keeping its 3 address(es)", lv.proc.output())
        self.dns.fail = False
        wait_until(lambda: "resolves again" in lv.proc.output(), timeout=15, what="recovery logged")


if __name__ == "__main__":
    unittest.main()
