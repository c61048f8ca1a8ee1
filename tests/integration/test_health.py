"""Upstream health: active checks with hysteresis, outlier ejection,
slow-start re-adding, readiness (issue 5)."""
import math
import threading
import time
import unittest

from harness import Backend, Levee, cluster, free_port, wait_until


HC = {"path": "/healthz", "interval": "100ms", "jitter": 0.1, "timeout": "200ms", "healthy": 2, "unhealthy": 2,
      "max_interval": "400ms"}


class Load:
    """Sequential requests in a thread, recording which backend answered."""

    def __init__(self, lv, pause=0.0):
        self.lv = lv
        self.pause = pause
        self.results = []  # (time, status, backend)
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        c = self.lv.conn(timeout=5)
        while not self.stop:
            try:
                c.request("GET", "/")
                r = c.getresponse()
                r.read()
                self.results.append((time.monotonic(), r.status, r.getheader("x-backend")))
            except Exception:  # noqa: BLE001 - a new connection next time
                c.close()
                c = self.lv.conn(timeout=5)
                self.results.append((time.monotonic(), 0, None))
            if self.pause:
                time.sleep(self.pause)

    def finish(self):
        self.stop = True
        self.t.join(5)


class ActiveChecks(unittest.TestCase):
    def test_killed_backend_is_removed_and_returns_with_a_ramp(self):
        a = Backend(self, name="a", workers=64, service="fixed:1ms")
        port_b = free_port()
        b = Backend(self, name="b", workers=64, service="fixed:1ms", port=port_b)
        # Passive outlier detection would also eject b for its connect
        # failures (and keep it out past its health); this test is about
        # active checks and the ramp.
        lv = Levee(self, [cluster("app", [a.address, b.address], health_check=HC,
                                  slow_start={"window": "4s", "min_weight_pct": 5},
                                  outlier_detection={"enabled": False},
                                  concurrency={"limit": 64})])
        load = Load(lv, pause=0.002)
        self.addCleanup(load.finish)
        wait_until(lambda: len(load.results) > 200, what="traffic")
        # Both ramp from start-up; b's return is measured against a warm a.
        wait_until(lambda: lv.metric("levee_endpoint_weight", endpoint=a.address) == 1, timeout=8,
                   what="a's start-up ramp to finish")
        b.proc.stop()
        t_kill = time.monotonic()
        wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=b.address) == 0, timeout=5,
                   what="b marked unhealthy")
        removed_after = time.monotonic() - t_kill
        # 2 failed checks at 100 ms (+ jitter and a 200 ms timeout at most each).
        self.assertLess(removed_after, 1.5)
        mark = len(load.results)
        wait_until(lambda: len(load.results) > mark + 200, what="traffic without b")
        after = load.results[mark:]
        self.assertTrue(all(s == 200 for _, s, _ in after),
                        f"requests failed while b was out: {[(s, who) for _, s, who in after if s != 200][:5]}")
        self.assertTrue(all(who == "a" for _, _, who in after))
        # Restart b: it returns after `healthy` checks and ramps over 4 s.
        b2 = Backend(self, name="b", workers=64, service="fixed:1ms", port=port_b)
        t_back = time.monotonic()
        wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=b2.address) == 1, timeout=5,
                   what="b healthy again")
        # With a warm peer, b's share of the cluster's limit ramps too:
        # 64 x (1 + w) / 2 with w well under 0.75 this early in a 4 s ramp.
        self.assertLess(lv.metric("levee_cluster_concurrency_limit", cluster="app"), 56)
        wait_until(lambda: load.results[-1][0] - t_back > 5.5, timeout=10, what="ramp to finish")
        load.finish()
        # b's share per second since its return, measured on the answers.
        shares, counts = [], []
        for k in range(6):
            window = [who for t, s, who in load.results if t_back + k <= t < t_back + k + 1 and s == 200]
            counts.append(len(window))
            shares.append(sum(1 for w in window if w == "b") / max(1, len(window)))

        # The shape of the ramp: at low load b's share is w/(1+w) with
        # w = max(5%, t/4s), averaged over each second; then an even split.
        # Each second's share is a binomial proportion over that second's
        # answers: allow 4 standard deviations of it, plus 0.06 for where
        # t_back falls against the weight refreshes (every 100 ms).
        def expected(k):
            ws = [min(1.0, max(0.05, (k + i / 100) / 4)) for i in range(100)]
            return sum(w / (1 + w) for w in ws) / len(ws)
        for k in range(6):
            e = expected(k)
            margin = 4 * math.sqrt(e * (1 - e) / max(1, counts[k])) + 0.06
            self.assertLess(abs(shares[k] - e), margin, f"second {k}: share {shares[k]:.3f} of {counts[k]}, "
                                                        f"expected {e:.3f} +- {margin:.3f}; all: {shares}")
        self.assertGreater(shares[2], shares[0] + 0.1, shares)

    def test_at_start_up_the_ramp_does_not_cut_the_cluster_limit(self):
        # Every endpoint joins at start-up, so every one ramps its weight; with
        # no warm peer to shift load to, the ramp must not also shrink the
        # cluster's limit (that would shed most traffic on every levee restart).
        a = Backend(self, name="a")
        b = Backend(self, name="b")
        lv = Levee(self, [cluster("app", [a.address, b.address], health_check=HC,
                                  slow_start={"window": "60s", "min_weight_pct": 10},
                                  concurrency={"limit": 40})])
        for ep in (a.address, b.address):
            wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=ep) == 1, what="healthy")
            self.assertLess(lv.metric("levee_endpoint_weight", endpoint=ep), 0.5)
        self.assertEqual(lv.metric("levee_cluster_concurrency_limit", cluster="app"), 40)

    def test_flapping_faster_than_the_thresholds_never_flaps_levee(self):
        a = Backend(self, name="a")
        lv = Levee(self, [cluster("app", [a.address], health_check=dict(HC, healthy=2, unhealthy=3))])
        wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=a.address) == 1, what="healthy")
        before = lv.metric("levee_endpoint_health_transitions_total", endpoint=a.address)
        # Alternate fail / ok faster than 3 checks: never 3 failures in a row.
        for i in range(20):
            a.admin("health?ok=%d" % (i % 2))
            checks = lv.metric("levee_health_checks_total", endpoint=a.address)
            wait_until(lambda: lv.metric("levee_health_checks_total", endpoint=a.address) > checks, what="a check")
        a.admin("health?ok=1")
        self.assertEqual(lv.metric("levee_endpoint_health_transitions_total", endpoint=a.address), before)
        self.assertEqual(lv.metric("levee_endpoint_healthy", endpoint=a.address), 1)

    def test_ready_waits_for_a_healthy_endpoint(self):
        port = free_port()
        lv = Levee(self, [cluster("app", [f"127.0.0.1:{port}"], health_check=HC)], wait_ready=False)
        self.assertEqual(lv.admin_get("/ready")[0], 503)
        status, headers, _ = lv.request("GET", "/")
        self.assertEqual(status, 503)
        self.assertEqual(headers["x-levee-error"], "no_endpoint")
        Backend(self, port=port)
        wait_until(lambda: lv.admin_get("/ready")[0] == 200, timeout=5, what="ready")
        self.assertEqual(lv.request("GET", "/")[0], 200)

    def test_check_path_status_and_body_are_configurable(self):
        a = Backend(self)
        lv = Levee(self, [cluster("app", [a.address],
                                  health_check=dict(HC, path="/status/204", expected_status={"min": 204, "max": 204}))])
        self.assertEqual(lv.metric("levee_endpoint_healthy", endpoint=a.address), 1)
        lv2 = Levee(self, [cluster("app", [a.address], health_check=dict(HC, body_contains="definitely-not-there"))],
                    wait_ready=False)
        wait_until(lambda: lv2.metric("levee_health_checks_total", endpoint=a.address, result="failed") >= 2,
                   what="failing checks")
        self.assertEqual(lv2.metric("levee_endpoint_healthy", endpoint=a.address), 0)


class Outliers(unittest.TestCase):
    def test_endpoint_passing_checks_but_failing_requests_is_ejected(self):
        good = Backend(self, name="good")
        bad = Backend(self, name="bad")
        bad.admin("fail?status=500&rate=1")
        lv = Levee(self, [cluster("app", [good.address, bad.address], health_check=HC,
                                  outlier_detection={"consecutive_failures": 3, "base_ejection": "30s"},
                                  retry={"enabled": False})])
        statuses = [lv.request("GET", "/")[0] for _ in range(60)]
        self.assertEqual(lv.metric("levee_endpoint_ejected", endpoint=bad.address), 1)
        self.assertEqual(lv.metric("levee_endpoint_ejections_total", endpoint=bad.address), 1)
        self.assertEqual(lv.metric("levee_endpoint_healthy", endpoint=bad.address), 1)  # checks still pass
        # After the ejection only the good endpoint answers.
        tail = [lv.request("GET", "/") for _ in range(30)]
        self.assertTrue(all(s == 200 for s, _, _ in tail))
        self.assertLessEqual(statuses.count(500), 3 + 1)

    def test_never_ejects_the_whole_cluster(self):
        a = Backend(self, name="a")
        b = Backend(self, name="b")
        for x in (a, b):
            x.admin("fail?status=500&rate=1")
        lv = Levee(self, [cluster("app", [a.address, b.address],
                                  outlier_detection={"consecutive_failures": 2, "max_ejected_pct": 50},
                                  retry={"enabled": False})])
        for _ in range(40):
            lv.request("GET", "/")
        self.assertEqual(lv.metric("levee_endpoint_ejected", cluster="app"), 1)


if __name__ == "__main__":
    unittest.main()
