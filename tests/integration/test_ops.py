"""Running levee through an operator's day (issue 14): hot reload on SIGHUP
and POST /admin/reload, SIGUSR1 log reopening, the SIGTERM drain sequence,
and the runtime admin actions."""
import hashlib
import http.client
import json
import os
import re
import signal
import socket
import tempfile
import threading
import time
import unittest

from harness import Backend, Levee, cluster, free_port, port_open, raw_exchange, wait_until


def admin_post(lv, path, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", lv.admin_port, timeout=10)
    c.request("POST", path, body=b"", headers=headers or {})
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def rewrite(lv, cfg):
    """Replaces the running config file (atomically, as an editor or a
    config management tool would)."""
    tmp = lv.config_path + ".new"
    with open(tmp, "w") as f:
        json.dump(cfg, f, indent=1)
    os.replace(tmp, lv.config_path)
    lv.cfg = cfg


def generation(lv):
    return json.loads(lv.admin_get("/admin/info")[1])["generation"]


def get(lv, path="/", conn=None):
    c = conn or lv.conn(timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    if conn is None:
        c.close()
    return r.status, r.getheader("x-backend"), r.getheader("connection"), body


class InFlight:
    """One request in a thread (a slow one, across a reload or a drain)."""

    def __init__(self, port, path):
        self.result = None
        self.error = None
        self.t = threading.Thread(target=self.run, args=(port, path), daemon=True)
        self.t.start()

    def run(self, port, path):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            c.request("GET", path)
            r = c.getresponse()
            self.result = (r.status, r.getheader("x-backend"), r.getheader("connection"), r.read())
            c.close()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def join(self):
        self.t.join(20)
        if self.error:
            raise AssertionError(f"in-flight request failed: {self.error!r}")
        return self.result


def wait_in_flight(lv, cluster_name, n=1):
    def busy():
        for c in json.loads(lv.admin_get("/admin/clusters")[1])["clusters"]:
            if c["name"] == cluster_name:
                return sum(e["outstanding"] for e in c["endpoints"]) >= n
        return False
    wait_until(busy, what=f"{n} request(s) in flight to {cluster_name}")


class Reload(unittest.TestCase):
    def setUp(self):
        self.a = Backend(self, name="a")
        self.b = Backend(self, name="b")

    def test_sighup_switches_routes_without_dropping_in_flight(self):
        lv = Levee(self, [cluster("a", [self.a.address]), cluster("b", [self.b.address])],
                   routes=[{"cluster": "a"}])
        self.assertEqual(get(lv)[1], "a")
        keep = lv.conn()  # a keep-alive connection established before the reload
        self.assertEqual(get(lv, conn=keep)[1], "a")
        slow = InFlight(lv.port, "/slow?ms=1500")
        wait_in_flight(lv, "a")
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["listeners"][0]["routes"] = [{"cluster": "b"}]
        rewrite(lv, cfg)
        lv.proc.signal(signal.SIGHUP)
        wait_until(lambda: generation(lv) == 2, what="generation 2")
        # New requests, also on the connection kept alive across it, go to b.
        # Every proxied request is counted, to check below that generation
        # 1's counters are kept when it is folded in.
        sent = [2]

        def routed_to_b():
            sent[0] += 1
            return get(lv)[1] == "b"
        wait_until(routed_to_b, what="new requests routed to b")
        self.assertEqual(get(lv, conn=keep)[1], "b")
        sent[0] += 1
        # The request in flight keeps generation 1 alive...
        self.assertEqual(lv.metric("levee_config_retired_generations"), 1)
        # ...and finishes where it began; then generation 1 is folded in,
        # its counters kept. (A request is counted just after its answer is
        # written, so the count is awaited, never read once.)
        status, backend, _, _ = slow.join()
        sent[0] += 1
        self.assertEqual((status, backend), (200, "a"))
        wait_until(lambda: lv.metric("levee_config_retired_generations") == 0, what="generation 1 released")
        wait_until(lambda: lv.metric("levee_requests_total") == sent[0],
                   what=f"levee_requests_total == {sent[0]}, every request counted once")
        self.assertTrue(lv.proc.alive())
        self.assertEqual(lv.metric("levee_config_reloads_total", result="ok"), 1)
        self.assertIn("reload (SIGHUP): now generation 2", lv.proc.output())

    def test_reload_under_load_fails_no_request(self):
        lv = Levee(self, [cluster("a", [self.a.address]), cluster("b", [self.b.address])],
                   routes=[{"cluster": "a"}], workers=2)
        results = []
        stop = threading.Event()

        def load():
            c = lv.conn(timeout=10)
            while not stop.is_set():
                try:
                    c.request("GET", "/")
                    r = c.getresponse()
                    r.read()
                    results.append((r.status, r.getheader("x-backend")))
                except Exception as e:  # noqa: BLE001 - counted as a failure
                    results.append((0, repr(e)))
                    c.close()
                    c = lv.conn(timeout=10)
        threads = [threading.Thread(target=load, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        try:
            for i in range(6):
                cfg = json.loads(json.dumps(lv.cfg))
                cfg["listeners"][0]["routes"] = [{"cluster": "b" if i % 2 == 0 else "a"}]
                rewrite(lv, cfg)
                n = len(results)
                status, body = admin_post(lv, "/admin/reload")
                self.assertEqual(status, 200, body)
                self.assertTrue(json.loads(body)["applied"], body)
                wait_until(lambda: len(results) > n + 50, what="traffic after the reload")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
        failed = [r for r in results if r[0] != 200]
        self.assertEqual(failed, [], f"{len(failed)} of {len(results)} requests failed")
        self.assertEqual(generation(lv), 7)
        self.assertEqual({r[1] for r in results}, {"a", "b"})

    def test_bad_config_keeps_the_old_one_and_names_the_place(self):
        lv = Levee(self, [cluster("a", [self.a.address])])
        with open(lv.config_path) as f:
            good = f.read()
        # An unknown key, on a line the test knows.
        bad = good.replace('"drain_timeout": "5s"', '"drain_timeout": "5s",\n "drain_timout": "1s"')
        self.assertNotEqual(bad, good)
        with open(lv.config_path, "w") as f:
            f.write(bad)
        line = [i for i, text in enumerate(bad.splitlines()) if "drain_timout" in text][0] + 1
        status, body = admin_post(lv, "/admin/reload")
        self.assertEqual(status, 400, body)
        answer = json.loads(body)
        self.assertFalse(answer["ok"])
        self.assertEqual(answer["generation"], 1)
        self.assertTrue(any(e.startswith(f"{lv.config_path}:{line}:") and "drain_timout" in e
                            for e in answer["errors"]), answer)
        # Logged too, and the old configuration serves on.
        self.assertIn(f"{lv.config_path}:{line}:", lv.proc.output())
        self.assertEqual(get(lv)[:2], (200, "a"))
        # The same through SIGHUP: logged, still running.
        lv.proc.signal(signal.SIGHUP)
        wait_until(lambda: lv.metric("levee_config_reloads_total", result="error") == 2, what="second failure")
        self.assertTrue(lv.proc.alive())
        self.assertEqual(generation(lv), 1)
        self.assertIn("reload (SIGHUP): 1 error(s); still running the previous configuration",
                      lv.proc.output())

    def test_restart_only_change_is_refused_with_its_place(self):
        lv = Levee(self, [cluster("a", [self.a.address])])
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["workers"] = 3
        rewrite(lv, cfg)
        with open(lv.config_path) as f:
            line = [i for i, text in enumerate(f.read().splitlines()) if '"workers"' in text][0] + 1
        status, body = admin_post(lv, "/admin/reload")
        self.assertEqual(status, 400, body)
        errors = json.loads(body)["errors"]
        self.assertTrue(any(e.startswith(f"{lv.config_path}:{line}:") and "workers" in e and "restart" in e
                            for e in errors), errors)
        self.assertEqual(get(lv)[:2], (200, "a"))

    def test_port_in_use_fails_the_reload(self):
        lv = Levee(self, [cluster("a", [self.a.address])])
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        self.addCleanup(taken.close)
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["listeners"].append({"name": "extra", "address": "127.0.0.1", "port": taken.getsockname()[1],
                                 "routes": [{"cluster": "a"}]})
        rewrite(lv, cfg)
        status, body = admin_post(lv, "/admin/reload")
        self.assertEqual(status, 400, body)
        self.assertIn(f"127.0.0.1:{taken.getsockname()[1]}", body)
        self.assertIn("listeners[1]", body)
        self.assertEqual(generation(lv), 1)
        self.assertEqual(get(lv)[:2], (200, "a"))

    def test_listeners_added_and_removed(self):
        lv = Levee(self, [cluster("a", [self.a.address]), cluster("b", [self.b.address])])
        port2 = free_port()
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["listeners"].append({"name": "second", "address": "127.0.0.1", "port": port2,
                                 "routes": [{"cluster": "b"}]})
        rewrite(lv, cfg)
        self.assertEqual(admin_post(lv, "/admin/reload")[0], 200)
        c = http.client.HTTPConnection("127.0.0.1", port2, timeout=5)
        c.request("GET", "/")
        r = c.getresponse()
        r.read()
        self.assertEqual((r.status, r.getheader("x-backend")), (200, "b"))
        # The first listener kept its socket: a connection made before is served.
        self.assertEqual(get(lv)[:2], (200, "a"))
        # Removed again: its port stops accepting.
        cfg["listeners"].pop()
        rewrite(lv, cfg)
        self.assertEqual(admin_post(lv, "/admin/reload")[0], 200)
        wait_until(lambda: not port_open(port2), what="the removed listener closed")
        self.assertEqual(get(lv)[:2], (200, "a"))

    def test_endpoint_state_survives_a_reload(self):
        lv = Levee(self, [cluster("app", [self.a.address, self.b.address])])
        status, body = admin_post(lv, f"/admin/endpoint/drain?cluster=app&endpoint={self.a.address}")
        self.assertEqual(status, 200, body)
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["drain_timeout"] = "4s"  # any change
        rewrite(lv, cfg)
        self.assertEqual(admin_post(lv, "/admin/reload")[0], 200)
        eps = {e["address"]: e for e in json.loads(lv.admin_get("/admin/clusters")[1])["clusters"][0]["endpoints"]}
        self.assertEqual(eps[self.a.address]["admin"], "draining")
        self.assertEqual({get(lv)[1] for _ in range(30)}, {"b"})


class ReloadKeepsState(unittest.TestCase):
    def test_ejection_and_pooled_connections_survive_a_reload(self):
        good = Backend(self, name="good")
        bad = Backend(self, name="bad")
        bad.admin("fail?status=500&rate=1")
        lv = Levee(self, [cluster("app", [good.address, bad.address],
                                  outlier_detection={"consecutive_failures": 3, "base_ejection": "30s"},
                                  retry={"enabled": False})])
        for _ in range(40):
            lv.request("GET", "/")
        self.assertEqual(lv.metric("levee_endpoint_ejected", endpoint=bad.address), 1)
        # bad would answer well now: only its carried ejection keeps it out.
        bad.admin("fail?status=500&rate=0")
        keep = lv.conn()
        self.assertEqual(get(lv, conn=keep)[:2], (200, "good"))
        connects = lv.metric("levee_upstream_connections_total")
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["clusters"].append(cluster("other", [good.address]))  # a change elsewhere
        rewrite(lv, cfg)
        status, body = admin_post(lv, "/admin/reload")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["changed"], "clusters")
        self.assertEqual(lv.metric("levee_endpoint_ejected", endpoint=bad.address), 1)
        self.assertEqual(lv.metric("levee_endpoint_ejections_total", endpoint=bad.address), 1)
        self.assertEqual({get(lv, conn=keep)[1] for _ in range(30)}, {"good"})
        # One client connection, one at a time: the pooled upstream
        # connection carried over serves them all.
        self.assertEqual(lv.metric("levee_upstream_connections_total"), connects)


class Signals(unittest.TestCase):
    def test_sigusr1_reopens_the_access_log(self):
        a = Backend(self, name="a")
        d = tempfile.mkdtemp(prefix="levee-log-")
        path = os.path.join(d, "access.log")
        lv = Levee(self, [cluster("a", [a.address])],
                   extra={"access_log": {"enabled": True, "path": path, "format": "json",
                                         "flush_interval": "10ms"}})
        get(lv, "/?before=1")
        wait_until(lambda: os.path.exists(path) and "before=1" in open(path).read(), what="first line")
        os.rename(path, path + ".1")  # what logrotate does
        lv.proc.signal(signal.SIGUSR1)
        wait_until(lambda: os.path.exists(path), what="the log reopened at its path")
        get(lv, "/?after=1")
        wait_until(lambda: "after=1" in open(path).read(), what="a line in the new file")
        self.assertNotIn("after=1", open(path + ".1").read())
        self.assertTrue(lv.proc.alive())
        for line in open(path).read().splitlines():
            json.loads(line)

    def test_sigterm_drain_sequence(self):
        a = Backend(self, name="a")
        lv = Levee(self, [cluster("a", [a.address])], extra={"drain_delay": "1500ms", "drain_timeout": "5s"})
        keep = lv.conn()
        self.assertEqual(get(lv, conn=keep)[0], 200)
        slow = InFlight(lv.port, "/slow?ms=2500")
        wait_in_flight(lv, "a")
        t0 = time.monotonic()
        lv.proc.signal(signal.SIGTERM)
        wait_until(lambda: lv.admin_get("/ready")[0] == 503, what="/ready 503")
        self.assertLess(time.monotonic() - t0, 1.0)
        # Within drain_delay: new connections are accepted and served, and
        # keep-alive goes on.
        accepted = 0
        while time.monotonic() - t0 < 1.0:
            status, _, _, _ = get(lv)
            self.assertEqual(status, 200)
            accepted += 1
        self.assertGreater(accepted, 0)
        status, _, connection, _ = get(lv, conn=keep)
        self.assertEqual(status, 200)
        # After it, the listener closes; the request in flight finishes,
        # told to close its connection, and levee exits 0.
        wait_until(lambda: not port_open(lv.port), timeout=5, what="listener closed after drain_delay")
        self.assertGreaterEqual(time.monotonic() - t0, 1.4)
        status, backend, connection, _ = slow.join()
        self.assertEqual((status, backend), (200, "a"))
        self.assertEqual((connection or "").lower(), "close")
        self.assertEqual(lv.proc.wait(10), 0)

    def test_zero_refused_connections_within_drain_delay(self):
        """A client that reconnects for every request during a rollout."""
        a = Backend(self, name="a")
        lv = Levee(self, [cluster("a", [a.address])], extra={"drain_delay": "1s"}, workers=2)
        refused = []
        ok = []
        stop = threading.Event()
        t_signal = []

        def client():
            while not stop.is_set():
                try:
                    c = http.client.HTTPConnection("127.0.0.1", lv.port, timeout=5)
                    c.request("GET", "/")
                    r = c.getresponse()
                    r.read()
                    c.close()
                    ok.append((time.monotonic(), r.status))
                except OSError:
                    refused.append(time.monotonic())
        threads = [threading.Thread(target=client, daemon=True) for _ in range(3)]
        for t in threads:
            t.start()
        wait_until(lambda: len(ok) > 20, what="traffic")
        t_signal.append(time.monotonic())
        lv.proc.signal(signal.SIGTERM)
        wait_until(lambda: refused, timeout=10, what="the listener to close")
        stop.set()
        for t in threads:
            t.join(10)
        # Nothing refused before drain_delay had passed; everything answered was a 200.
        self.assertGreaterEqual(min(refused) - t_signal[0], 0.95)
        self.assertEqual({s for _, s in ok}, {200})
        self.assertGreater(len([t for t, _ in ok if t > t_signal[0]]), 5)
        self.assertEqual(lv.proc.wait(10), 0)


class AdminActions(unittest.TestCase):
    def setUp(self):
        self.a = Backend(self, name="a")
        self.b = Backend(self, name="b")
        self.lv = Levee(self, [cluster("app", [self.a.address, self.b.address],
                                       slow_start={"window": "0s"})])

    def backends(self, n=40):
        return [get(self.lv)[1] for _ in range(n)]

    def endpoints(self):
        return {e["address"]: e for e in json.loads(self.lv.admin_get("/admin/clusters")[1])["clusters"][0]["endpoints"]}

    def test_drain_disable_enable_an_endpoint(self):
        lv = self.lv
        wait_until(lambda: set(self.backends()) == {"a", "b"}, what="both backends used")
        for action, state in (("drain", "draining"), ("disable", "disabled")):
            status, body = admin_post(lv, f"/admin/endpoint/{action}?cluster=app&endpoint={self.a.address}")
            self.assertEqual(status, 200, body)
            self.assertEqual(self.endpoints()[self.a.address]["admin"], state)
            self.assertEqual(set(self.backends()), {"b"})
        status, body = admin_post(lv, f"/admin/endpoint/enable?cluster=app&endpoint={self.a.address}")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.endpoints()[self.a.address]["admin"], "enabled")
        wait_until(lambda: "a" in self.backends(), what="a back in rotation")
        self.assertEqual(lv.metric("levee_admin_actions_total", action="endpoint_drain", result="ok"), 1)
        self.assertEqual(lv.metric("levee_endpoint_admin_state", endpoint=self.a.address), 0)
        self.assertIn(f"cluster app endpoint {self.a.address}: draining", lv.proc.output())
        # Unknown names are a 404 and counted as errors.
        self.assertEqual(admin_post(lv, "/admin/endpoint/drain?cluster=app&endpoint=10.9.9.9:1")[0], 404)
        self.assertEqual(admin_post(lv, "/admin/endpoint/drain?cluster=nope&endpoint=x")[0], 404)
        self.assertEqual(lv.metric("levee_admin_actions_total", action="endpoint_drain", result="error"), 2)

    def test_weight(self):
        lv = self.lv
        status, body = admin_post(lv, f"/admin/endpoint/weight?cluster=app&endpoint={self.a.address}&weight=0")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.endpoints()[self.a.address]["base_weight"], 0)
        self.assertEqual(set(self.backends()), {"b"})
        status, body = admin_post(lv, f"/admin/endpoint/weight?cluster=app&endpoint={self.a.address}&weight=reset")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.endpoints()[self.a.address]["base_weight"], 1)
        wait_until(lambda: "a" in self.backends(), what="a weighted again")
        self.assertEqual(admin_post(lv, f"/admin/endpoint/weight?cluster=app&endpoint={self.a.address}&weight=-1")[0],
                         400)

    def test_drain_and_undrain_the_instance(self):
        lv = self.lv
        status, body = admin_post(lv, "/admin/drain")
        self.assertEqual(status, 200, body)
        self.assertEqual(lv.admin_get("/ready")[0], 503)
        # Still serving (nothing is refused), but connections are told to close.
        status, _, connection, _ = get(lv)
        self.assertEqual(status, 200)
        self.assertEqual((connection or "").lower(), "close")
        status, body = admin_post(lv, "/admin/undrain")
        self.assertEqual(status, 200, body)
        self.assertEqual(lv.admin_get("/ready")[0], 200)
        c = lv.conn()
        self.assertNotEqual((get(lv, conn=c)[2] or "").lower(), "close")
        self.assertEqual(admin_post(lv, "/admin/undrain")[0], 409)
        self.assertTrue(lv.proc.alive())

    def test_health_checks_carry_on_through_an_admin_drain(self):
        a = Backend(self, name="hc")
        lv = Levee(self, [cluster("app", [a.address], health_check={"path": "/healthz", "interval": "100ms",
                                                                     "timeout": "200ms", "unhealthy": 2})])
        self.assertEqual(admin_post(lv, "/admin/drain")[0], 200)
        # Still serving: an endpoint that fails its checks meanwhile goes out.
        a.admin("health?ok=0")
        wait_until(lambda: lv.metric("levee_endpoint_healthy", endpoint=a.address) == 0, what="checks during the drain")
        a.admin("health?ok=1")
        self.assertEqual(admin_post(lv, "/admin/undrain")[0], 200)
        wait_until(lambda: lv.admin_get("/ready")[0] == 200, what="healthy and ready again")

    def test_dry_run_toggle_and_log_level(self):
        lv = self.lv
        cl = lambda: json.loads(lv.admin_get("/admin/clusters")[1])["clusters"][0]  # noqa: E731
        before = cl()["queue"]
        self.assertEqual(before, "enforce")
        status, body = admin_post(lv, "/admin/dry_run?cluster=app&gate=queue&dry_run=true")
        self.assertEqual(status, 200, body)
        self.assertEqual(cl()["queue"], "dry_run")
        status, body = admin_post(lv, "/admin/dry_run?cluster=app&gate=queue&dry_run=reset")
        self.assertEqual(status, 200, body)
        self.assertEqual(cl()["queue"], "enforce")
        self.assertEqual(admin_post(lv, "/admin/dry_run?cluster=app&gate=nonsense&dry_run=true")[0], 400)
        self.assertEqual(admin_post(lv, "/admin/log_level?level=debug")[0], 200)
        self.assertEqual(admin_post(lv, "/admin/log_level?level=loud")[0], 400)
        self.assertEqual(get(lv)[0], 200)

    def test_actions_need_post_and_pages_answer(self):
        lv = self.lv
        self.assertEqual(lv.admin_get("/admin/reload")[0], 405)
        self.assertEqual(lv.admin_get("/admin/nothing")[0], 404)
        info = json.loads(lv.admin_get("/admin/info")[1])
        with open(lv.config_path, "rb") as f:
            self.assertEqual(info["config_sha256"], hashlib.sha256(f.read()).hexdigest())
        self.assertEqual(info["config_file"], lv.config_path)
        self.assertEqual(info["generation"], 1)
        self.assertIn(info["allocator"], ("tcmalloc", "system"))  # exactly which: test_process_metrics
        cfg = json.loads(lv.admin_get("/admin/config")[1])
        self.assertEqual(cfg["clusters"][0]["name"], "app")
        self.assertEqual(cfg["listeners"][0]["port"], lv.port)
        # The shedding history samples once a second: admissions show up.
        for _ in range(20):
            self.assertEqual(get(lv)[0], 200)

        def stats():
            return json.loads(lv.admin_get("/admin/stats")[1])
        wait_until(lambda: sum(stats()["admitted"]) >= 20, what="admissions in /admin/stats")
        st = stats()
        self.assertIn("queue_wait", st["reasons"])
        self.assertEqual(st["criticalities"], ["CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS", "SHEDDABLE"])
        self.assertEqual(len(st["rejected_by_reason"]), len(st["admitted"]))
        self.assertTrue(all(len(p) == len(st["reasons"]) for p in st["rejected_by_reason"]))


class AccessLogFields(unittest.TestCase):
    def test_configured_fields_request_id_returned_and_reload_changes_them(self):
        a = Backend(self, name="a")
        d = tempfile.mkdtemp(prefix="levee-log-")
        path = os.path.join(d, "access.log")
        fields = ["method", "path", "host", "status", "user_agent", "xff", "request_id", "reason"]
        lv = Levee(self, [cluster("a", [a.address])],
                   routes=[{"match": {"prefix": "/api"}, "cluster": "a"}],
                   extra={"access_log": {"enabled": True, "path": path, "format": "json", "flush_interval": "10ms",
                                         "reject_sample": 1.0, "fields": fields}})
        # http.client sends header values as Latin-1: the e-acute is the byte
        # 0xE9, not UTF-8; the JSON line must still be valid UTF-8.
        status, headers, _ = lv.request("GET", "/api/x?q=1", headers={
            "User-Agent": "probe/1 \u00e9", "X-Forwarded-For": "203.0.113.9", "Host": "shop.example"})
        self.assertEqual(status, 200)
        rid = headers["x-request-id"]
        self.assertRegex(rid, r"^[0-9a-f]{32}$")
        # A local answer (no route) carries the client's own id back.
        status, headers, _ = lv.request("GET", "/nothing", headers={"X-Request-Id": "client-id-7"})
        self.assertEqual(status, 404)
        self.assertEqual(headers.get("x-request-id"), "client-id-7")

        def lines():
            with open(path, encoding="utf-8") as f:
                return [json.loads(text) for text in f.read().splitlines()]
        wait_until(lambda: len(lines()) == 2, what="two lines")
        first, second = lines()
        self.assertEqual(list(first), fields)
        self.assertEqual(first, {"method": "GET", "path": "/api/x", "host": "shop.example", "status": 200,
                                 "user_agent": "probe/1 \ufffd", "xff": "203.0.113.9", "request_id": rid,
                                 "reason": first["reason"]})
        self.assertEqual((second["status"], second["request_id"]), (404, "client-id-7"))
        # A reload changes the layout from the next line on.
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["access_log"]["fields"] = ["status", "path"]
        rewrite(lv, cfg)
        self.assertEqual(admin_post(lv, "/admin/reload")[0], 200)
        lv.request("GET", "/api/after")
        wait_until(lambda: len(lines()) == 3, what="a third line")
        self.assertEqual(lines()[2], {"status": 200, "path": "/api/after"})

    def test_both_formats_escape_what_would_break_a_line(self):
        # A target holding a quote, a backslash, a UTF-8 e-acute, a lone
        # 0xE9 (not UTF-8) and plain ASCII around them: the text format
        # writes the first two and the stray byte as \xNN and keeps the
        # UTF-8; JSON escapes the first two and replaces the stray byte
        # with \ufffd.
        target = b'/a"b\\c/\xc3\xa9/\xe9/plain-run?k=v'
        for fmt, want in (("text", '"GET /a\\x22b\\x5cc/\u00e9/\\xe9/plain-run?k=v HTTP/1.1" 200 '),
                          ("json", '"target":"/a\\"b\\\\c/\u00e9/\\ufffd/plain-run?k=v"')):
            with self.subTest(format=fmt):
                a = Backend(self, name="a")
                path = os.path.join(tempfile.mkdtemp(prefix="levee-log-"), "access.log")
                lv = Levee(self, [cluster("a", [a.address])],
                           extra={"access_log": {"enabled": True, "path": path, "format": fmt,
                                                 "flush_interval": "10ms"}})
                answer = raw_exchange(lv.port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n"
                                      b"Connection: close\r\n\r\n")
                self.assertTrue(answer.startswith(b"HTTP/1.1 200 "), answer[:80])
                def read():
                    with open(path, encoding="utf-8") as f:
                        return f.read()
                wait_until(lambda: os.path.exists(path) and read().endswith("\n"), what="the line")
                text = read()
                self.assertEqual(len(text.splitlines()), 1, text)
                self.assertIn(want, text)
                if fmt == "json":
                    self.assertEqual(json.loads(text)["target"], '/a"b\\c/\u00e9/\ufffd/plain-run?k=v')


class Cli(unittest.TestCase):
    def run_levee(self, *args):
        from harness import LEVEE
        import subprocess
        return subprocess.run([LEVEE, *args], capture_output=True, text=True, timeout=10)

    def test_bad_values_are_clear_errors(self):
        r = self.run_levee("--log-level", "loud")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--log-level must be trace, debug, info, warn, error, critical or off, not 'loud'", r.stderr)
        r = self.run_levee("--workers", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--workers must be a number from 1 to 1024, not '0'", r.stderr)

    def test_validate_catches_an_admin_port_clashing_with_a_listener(self):
        port = free_port()
        cfg = {"admin": {"address": "127.0.0.1", "port": port},
               "listeners": [{"name": "main", "address": "0.0.0.0", "port": port, "routes": [{"cluster": "a"}]}],
               "clusters": [cluster("a", ["127.0.0.1:1"])]}
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        self.addCleanup(os.unlink, path)
        r = self.run_levee("--validate", path)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertIn(f"admin.port: clashes with a listener on 0.0.0.0:{port}", r.stderr)

    def test_log_level_quietens_the_process_log(self):
        a = Backend(self, name="a")
        lv = Levee(self, [cluster("a", [a.address])])
        self.assertIn("levee listening", lv.proc.output())
        self.assertEqual(admin_post(lv, "/admin/log_level?level=warn")[0], 200)
        # Endpoint actions are logged at info: not shown under warn.
        self.assertEqual(admin_post(lv, f"/admin/endpoint/drain?cluster=a&endpoint={a.address}")[0], 200)
        self.assertEqual(admin_post(lv, "/admin/log_level?level=info")[0], 200)
        self.assertEqual(admin_post(lv, f"/admin/endpoint/enable?cluster=a&endpoint={a.address}")[0], 200)
        out = lv.proc.output()
        self.assertNotIn(f"endpoint {a.address}: draining", out)
        self.assertIn(f"endpoint {a.address}: enabled", out)
        self.assertEqual(get(lv)[0], 200)


def non_loopback_ipv4():
    """An address of this host other than loopback, or None."""
    import subprocess
    try:
        out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=5).stdout.split()
    except OSError:
        return None
    return next((a for a in out if "." in a and not a.startswith("127.")), None)


class AdminToken(unittest.TestCase):
    def test_actions_need_loopback_or_the_token(self):
        ip = non_loopback_ipv4()
        if not ip:
            self.skipTest("no non-loopback IPv4 address on this host")
        a = Backend(self, name="a")
        fd, token_file = tempfile.mkstemp(prefix="levee-token-")
        with os.fdopen(fd, "w") as f:
            f.write("s3cret-token-0123456789\n")
        self.addCleanup(os.unlink, token_file)
        lv = Levee(self, [cluster("a", [a.address])],
                   extra={"admin": {"address": "0.0.0.0", "token_file": token_file}})
        self.assertNotIn("s3cret-token", lv.admin_get("/admin/config")[1])

        def post(host, path, headers=None):
            c = http.client.HTTPConnection(host, lv.admin_port, timeout=5)
            c.request("POST", path, body=b"", headers=headers or {})
            r = c.getresponse()
            r.read()
            c.close()
            return r.status

        # From another address: refused without the token, or with a wrong one.
        self.assertEqual(post(ip, "/admin/drain"), 403)
        self.assertEqual(post(ip, "/admin/drain", {"Authorization": "Bearer s3cret-token-0123456788"}), 403)
        self.assertEqual(lv.admin_get("/ready")[0], 200)
        self.assertEqual(post(ip, "/admin/drain", {"Authorization": "Bearer s3cret-token-0123456789"}), 200)
        self.assertEqual(lv.admin_get("/ready")[0], 503)
        # Loopback needs none.
        self.assertEqual(post("127.0.0.1", "/admin/undrain"), 200)
        self.assertIn("refused: not loopback and no valid token", lv.proc.output())

    def test_pages_off_loopback_need_the_token_unless_open(self):
        ip = non_loopback_ipv4()
        if not ip:
            self.skipTest("no non-loopback IPv4 address on this host")
        a = Backend(self, name="a")
        token = "s3cret-token-0123456789"
        fd, token_file = tempfile.mkstemp(prefix="levee-token-")
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        self.addCleanup(os.unlink, token_file)
        lv = Levee(self, [cluster("a", [a.address])],
                   extra={"admin": {"address": "0.0.0.0", "token_file": token_file}})

        def get(host, path, headers=None):
            c = http.client.HTTPConnection(host, lv.admin_port, timeout=5)
            c.request("GET", path, headers=headers or {})
            r = c.getresponse()
            body = r.read()
            c.close()
            return r.status, body

        bearer = {"Authorization": "Bearer " + token}
        # Probes and scrapes carry no token: open by default.
        for path in ("/healthz", "/ready", "/metrics"):
            self.assertEqual(get(ip, path)[0], 200, path)
        # What describes the inside (topology, configuration, the live page)
        # needs the token from off loopback, and gets nothing without it.
        for path in ("/admin/", "/admin", "/admin/clusters", "/admin/config", "/admin/info", "/admin/stats"):
            status, body = get(ip, path)
            self.assertEqual(status, 403, path)
            self.assertNotIn(b"generation", body)
            self.assertEqual(get(ip, path, {"Authorization": "Bearer wrong-token-0123456789"})[0], 403, path)
            self.assertEqual(get(ip, path, bearer)[0], 200, path)
            self.assertEqual(get("127.0.0.1", path)[0], 200, path)
        # The first refusal is logged (the rest of this second's are not).
        self.assertIn("GET /admin/ from " + ip + " refused", lv.proc.output())
        # open_paths narrows (or widens) what is open; a reload applies it.
        cfg = json.loads(json.dumps(lv.cfg))
        cfg["admin"]["open_paths"] = ["/healthz", "/admin/info"]
        rewrite(lv, cfg)
        lv.proc.signal(signal.SIGHUP)
        wait_until(lambda: generation(lv) == 2, what="generation 2")
        self.assertEqual(get(ip, "/healthz")[0], 200)
        self.assertEqual(get(ip, "/admin/info")[0], 200)
        self.assertEqual(get(ip, "/metrics")[0], 403)
        self.assertEqual(get(ip, "/ready")[0], 403)
        self.assertEqual(get(ip, "/metrics", bearer)[0], 200)

    def test_refusals_are_logged_at_most_once_a_second(self):
        # A client off loopback must not be able to fill the process log.
        ip = non_loopback_ipv4()
        if not ip:
            self.skipTest("no non-loopback IPv4 address on this host")
        a = Backend(self, name="a")
        lv = Levee(self, [cluster("a", [a.address])], extra={"admin": {"address": "0.0.0.0"}})
        start = time.monotonic()
        sent = 0

        def refuse():
            nonlocal sent
            c = http.client.HTTPConnection(ip, lv.admin_port, timeout=5)
            c.request("POST", "/admin/drain", body=b"")
            self.assertEqual(c.getresponse().status, 403)
            c.close()
            sent += 1
            return "more refused since the last such line" in lv.proc.output()
        wait_until(refuse, timeout=10, what="a line counting the refusals it did not log")
        # A burst that then stops: its refusals are counted in a line of
        # their own once their second is over (the first of them follows the
        # line above by one round trip, so at least it is not logged itself).
        for _ in range(3):
            refuse()

        def tally():
            out = lv.proc.output()
            lines = [line for line in out.splitlines() if "/admin/drain from" in line or "more refused since" in line]
            logged = sum(1 for line in lines if "/admin/drain from" in line)
            counted = sum(int(n) for n in re.findall(r"(\d+) more refused since", out))
            return lines, logged, counted

        # Every refusal reaches the log: a line of its own, or counted in one.
        wait_until(lambda: sum(tally()[1:]) == sent, timeout=5, what="every refusal logged or counted")
        elapsed = time.monotonic() - start
        lines, logged, counted = tally()
        self.assertIn("(none since)", lv.proc.output())
        self.assertGreaterEqual(counted, 1)
        self.assertGreater(sent, len(lines))
        self.assertLessEqual(len(lines), int(elapsed) + 1, lines)

    def test_open_paths_name_only_pages_levee_serves(self):
        from harness import LEVEE
        import subprocess
        cfg = {"admin": {"open_paths": ["/healthz", "/admin/reload"]},
               "listeners": [{"name": "main", "address": "127.0.0.1", "port": free_port(),
                              "routes": [{"cluster": "a"}]}],
               "clusters": [cluster("a", ["127.0.0.1:1"])]}
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f, indent=1)
        self.addCleanup(os.unlink, path)
        r = subprocess.run([LEVEE, "--validate", path], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertRegex(r.stderr, r":\d+:\d+: admin\.open_paths\[1\]: '/admin/reload' is not a page")


if __name__ == "__main__":
    unittest.main()
