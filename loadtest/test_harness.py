"""Tests of the load-test harness itself: scenario parsing, generated front
configs (validated by the real haproxy and nginx), and a smoke run."""
import glob
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import fronts
import scenario as sc

HERE = os.path.dirname(os.path.abspath(__file__))


def tool(name):
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if not path:
        if os.environ.get("LEVEE_REQUIRE_TOOLS") == "1":
            raise AssertionError(f"{name} is not installed")
        raise unittest.SkipTest(f"{name} is not installed")
    return path


class Scenarios(unittest.TestCase):
    def test_every_shipped_scenario_parses(self):
        try:
            import yaml
        except ImportError:
            if os.environ.get("LEVEE_REQUIRE_TOOLS") == "1":
                raise
            self.skipTest("PyYAML missing")
        files = glob.glob(os.path.join(HERE, "scenarios", "*.yaml"))
        self.assertGreaterEqual(len(files), 2)
        for f in files:
            with open(f) as fh:
                s = sc.parse(yaml.safe_load(fh), os.path.basename(f))
            self.assertTrue(s["fronts"], f)
            self.assertTrue(s["load"]["classes"], f)

    def test_defaults_and_durations(self):
        s = sc.parse({"load": {"steps": [1, 2], "duration": "1500ms",
                               "classes": [{"name": "a", "deadline": "250ms", "criticality": "critical"}]}})
        self.assertEqual(s["fronts"], ["levee"])
        self.assertEqual(s["load"]["duration"], 1.5)
        self.assertEqual(s["load"]["classes"][0]["deadline"], 0.25)
        self.assertEqual(s["backend"]["workers"], 10)
        self.assertEqual(sc.class_arg(s["load"]["classes"][0]),
                         "name=a,weight=1.0,deadline=0.25s,path=/,criticality=critical")
        # A class with a service time of its own asks the backend for it.
        s = sc.parse({"load": {"classes": [{"name": "big", "service": "100ms"}]}})
        self.assertEqual(sc.class_arg(s["load"]["classes"][0]),
                         "name=big,weight=1.0,deadline=1.0s,path=/,service_ms=100")

    def test_errors_name_the_problem(self):
        cases = [({"load": {}, "oops": 1}, "unknown key 'oops'"),
                 ({"load": {}, "fronts": ["envoy"]}, "unknown front 'envoy'"),
                 ({}, "load is required"),
                 ({"load": {"steps": [0]}}, "positive"),
                 ({"load": {"classes": [{"weight": 1}]}}, "needs a name"),
                 ({"load": {"classes": [{"name": "a", "criticality": "URGENT"}]}}, "not a criticality"),
                 ({"load": {"duration": "soon"}}, "not a duration"),
                 ({"load": {}, "events": [{"at": 1, "action": "explode"}]}, "action must be one of")]
        for doc, msg in cases:
            with self.assertRaises(sc.ScenarioError) as e:
                sc.parse(doc)
            self.assertIn(msg, str(e.exception))


class FrontConfigs(unittest.TestCase):
    def test_haproxy_configs_are_valid_and_expert_has_the_tuning(self):
        haproxy = tool("haproxy")
        s = sc.parse({"load": {}, "haproxy": {"queue_timeout": "400ms"}})
        for front in ("haproxy", "haproxy-expert"):
            cfg = fronts.haproxy_config(18080, [19001, 19002], 8, front, s)
            with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
                f.write(cfg)
            out = subprocess.run([haproxy, "-c", "-f", f.name], capture_output=True, text=True)
            os.unlink(f.name)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        expert = fronts.haproxy_config(18080, [19001], 8, "haproxy-expert", s)
        self.assertRegex(expert, r"server s0 127.0.0.1:19001 maxconn 8\n")
        self.assertIn("timeout queue 400ms", expert)
        self.assertIn("option abortonclose", expert)
        self.assertIn("set-priority-class int(-30) if { req.hdr(x-criticality) -m str -i CRITICAL_PLUS }", expert)
        self.assertRegex(fronts.haproxy_config(18080, [19001], 8, "haproxy", s), r"server s0 127.0.0.1:19001\n")

    def test_nginx_configs_are_valid(self):
        nginx = tool("nginx")
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        for front in ("nginx", "nginx-limited"):
            path = os.path.join(d, "nginx.conf")
            with open(path, "w") as f:
                f.write(fronts.nginx_config(18081, [19001], 8, front, d))
            out = subprocess.run([nginx, "-t", "-p", d, "-c", path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("max_conns=8", fronts.nginx_config(18081, [19001], 8, "nginx-limited", d))

    def test_levee_configs_validate(self):
        levee = os.path.join(os.environ.get("LEVEE_BUILD", os.path.join(os.path.dirname(HERE), "build")), "levee")
        s = sc.parse({"load": {}, "levee": {"tenants": {"quotas": {"default": 1.0, "a": 2.0}}}})
        for front in ("levee", "levee-adaptive", "levee-nogates"):
            cfg = fronts.levee_config(18082, 18083, [19001], 8, front, s)
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(cfg)
            out = subprocess.run([levee, "--validate", f.name], capture_output=True, text=True)
            os.unlink(f.name)
            self.assertEqual(out.returncode, 0, out.stderr)
            c = json.loads(cfg)["clusters"][0]
            if front == "levee":
                self.assertEqual(c["concurrency"], {"limit": 8})
            if front == "levee-adaptive":
                self.assertNotIn("concurrency", c)
            if front == "levee-nogates":
                self.assertEqual(c["concurrency"], {"enabled": False})


@unittest.skipUnless(os.environ.get("LEVEE_SMOKE") == "1", "the smoke run is its own ctest entry")
class Smoke(unittest.TestCase):
    def test_smoke_scenario_runs_and_sheds(self):
        out = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, out)
        r = subprocess.run(["python3", os.path.join(HERE, "run.py"), os.path.join(HERE, "scenarios", "smoke.yaml"),
                            "--out", out, "--capacity-seconds", "1"], capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        with open(os.path.join(out, "smoke", "levee-3x.json")) as f:
            res = json.load(f)
        t = res["total"]
        self.assertGreater(t["goodput"], 0.8 * res["capacity"], t)
        self.assertGreater(t["rejected"], 0)
        classes = {c["name"]: c for c in res["classes"]}
        self.assertEqual(classes["cp"]["success_rate"], 1.0)
        self.assertTrue(os.path.exists(os.path.join(out, "smoke", "summary.json")))
        self.assertTrue(os.path.exists(os.path.join(out, "smoke", "levee-3x.csv")))


if __name__ == "__main__":
    unittest.main()


class SimValidation(unittest.TestCase):
    """validate.py's half that needs no real run: every validation case
    becomes a simulator scenario that levee-sim accepts and runs, with the
    real run's classes, and the calibration gives the backend the measured
    capacity."""

    def test_every_case_simulates(self):
        try:
            import yaml  # noqa: F401
        except ImportError:
            self.skipTest("PyYAML missing")
        import validate
        sim = os.path.join(validate.BUILD, "levee-sim")
        if not os.path.exists(sim):
            self.skipTest("levee-sim not built")
        self.assertEqual(validate.calibrated_service({"service": "fixed:10ms", "instances": 1, "workers": 10}, 500),
                         "fixed:20.0000ms")
        with tempfile.TemporaryDirectory() as d:
            for case, file, fronts_, steps, short in validate.CASES:
                s = validate.load_scenario(os.path.join(HERE, "scenarios", file), short)
                cap = 1000.0 * s["backend"]["instances"]
                r = validate.sim_run(s, fronts_[0], steps[0], cap, d, 1)
                self.assertEqual([c["name"] for c in r["classes"]], [c["name"] for c in s["load"]["classes"]], case)
                self.assertGreater(r["total"]["offered"], 0, case)
                self.assertEqual(r["capacity"], cap, case)
