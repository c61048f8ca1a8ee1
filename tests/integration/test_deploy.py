"""deploy/ stays true to the binary: rules pass promtool, and every metric a
rule or dashboard panel uses is one levee actually exports."""
import json
import os
import re
import subprocess
import unittest

from harness import LEVEE, ROOT, Backend, Levee, cluster, tool

DEPLOY = os.path.join(ROOT, "deploy")


def metric_names(expr):
    names = set(re.findall(r"\b(levee_[a-z_]+?)(?:_bucket|_sum|_count)?\b", expr))
    return {n for n in names if not n.startswith("levee:")}


class Deploy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rules = os.path.join(DEPLOY, "prometheus", "levee-rules.yaml")
        with open(os.path.join(DEPLOY, "grafana", "levee-dashboard.json")) as f:
            cls.dashboard = json.load(f)

    def test_rules_pass_promtool(self):
        out = subprocess.run([tool("promtool"), "check", "rules", self.rules], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)

    def test_every_metric_used_exists(self):
        be = Backend(self)
        # quota_sync to an address nothing listens on: its metrics exist (in fallback).
        lv = Levee(self, [cluster("app", [be.address])],
                   extra={"tenants": {"quotas": {"default": 1.0}},
                          "quota_sync": {"enabled": True, "redis": {"address": "127.0.0.1:1"}}})
        for _ in range(3):
            lv.request("GET", "/")
        lv.request("GET", "/", headers={"x-criticality": "bad"})
        exported = set(re.findall(r"^# TYPE (levee_[a-z_]+) ", lv.metrics(), re.M))
        with open(self.rules) as f:
            rules_text = f.read()
        used = metric_names(rules_text)
        for p in self.dashboard["panels"]:
            for t in p["targets"]:
                used |= metric_names(t["expr"])
        self.assertGreater(len(used), 10)
        missing = sorted(n for n in used if n not in exported)
        self.assertEqual(missing, [], f"used in deploy/ but not exported: {missing}")

    def test_kubernetes_and_systemd_files_are_well_formed(self):
        try:
            import yaml
        except ImportError:
            self.skipTest("PyYAML missing")
        levee = LEVEE
        for name in ("sidecar.yaml", "gateway.yaml"):
            with open(os.path.join(DEPLOY, "kubernetes", name)) as f:
                docs = list(yaml.safe_load_all(f))
            kinds = {d["kind"] for d in docs}
            self.assertTrue({"ConfigMap", "Deployment", "Service"} <= kinds, name)
            # The embedded levee config is valid.
            cm = next(d for d in docs if d["kind"] == "ConfigMap")
            path = f"/tmp/levee-k8s-{name}"
            with open(path, "w") as f:
                f.write(cm["data"]["levee.yaml"])
            self.addCleanup(os.unlink, path)
            out = subprocess.run([levee, "--validate", path], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, f"{name}: {out.stderr}")
        with open(os.path.join(DEPLOY, "systemd", "levee.service")) as f:
            unit = f.read()
        self.assertIn("ExecStart=/usr/local/bin/levee -c /etc/levee/levee.yaml", unit)
        self.assertIn("KillSignal=SIGTERM", unit)


if __name__ == "__main__":
    unittest.main()
