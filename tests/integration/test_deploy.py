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
        used |= {n for n in re.findall(r"\b(process_[a-z_]+)\b", rules_text + json.dumps(self.dashboard))}
        exported |= set(re.findall(r"^# TYPE (process_[a-z_]+) ", lv.metrics(), re.M))
        self.assertGreater(len(used), 10)
        missing = sorted(n for n in used if n not in exported)
        self.assertEqual(missing, [], f"used in deploy/ but not exported: {missing}")

    def test_rules_unit_tests_pass(self):
        # levee-rules.test.yaml: each alert fires on the series that should
        # fire it, and stays silent on the ones that should not.
        tests = os.path.join(DEPLOY, "prometheus", "levee-rules.test.yaml")
        out = subprocess.run([tool("promtool"), "test", "rules", tests], capture_output=True, text=True,
                             cwd=os.path.dirname(tests))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("SUCCESS", out.stdout + out.stderr)

    def test_every_alert_has_a_unit_test_and_a_runbook(self):
        import yaml
        with open(self.rules) as f:
            groups = yaml.safe_load(f)["groups"]
        alerts = [r for g in groups for r in g["rules"] if "alert" in r]
        with open(os.path.join(DEPLOY, "prometheus", "levee-rules.test.yaml")) as f:
            tested = {a["alertname"] for t in yaml.safe_load(f)["tests"] for a in t.get("alert_rule_test", [])}
        with open(os.path.join(ROOT, "docs", "operations.md")) as f:
            anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                       for h in re.findall(r"^#+ (.*)$", f.read(), re.M)}
        for a in alerts:
            self.assertIn(a["alert"], tested, "alert without a promtool unit test")
            url = a["annotations"]["runbook_url"]
            self.assertTrue(url.startswith("docs/operations.md#"), url)
            self.assertIn(url.split("#", 1)[1], anchors, f"{a['alert']}: no such heading in docs/operations.md")
            # Every range spans at least four 15 s scrapes.
            for w in re.findall(r"\[(\d+)([smh])\]", a["expr"]):
                self.assertGreaterEqual(int(w[0]) * {"s": 1, "m": 60, "h": 3600}[w[1]], 60, a["alert"])
        for g in groups:
            for r in g["rules"]:
                for w in re.findall(r"\[(\d+)([smh])\]", r["expr"]):
                    self.assertGreaterEqual(int(w[0]) * {"s": 1, "m": 60, "h": 3600}[w[1]], 60, r)

    def test_dashboard_filters_by_namespace_and_instance(self):
        names = {v["name"] for v in self.dashboard["templating"]["list"]}
        self.assertLessEqual({"datasource", "namespace", "instance"}, names)
        titles = [p["title"] for p in self.dashboard["panels"]]
        self.assertTrue(any("Request duration" in t for t in titles), titles)
        self.assertTrue(any("Dry-run" in t for t in titles), titles)
        for p in self.dashboard["panels"]:
            for t in p["targets"]:
                for m in re.finditer(r"\b((?:levee|process)_[a-z_]+)(\{[^}]*\})?", t["expr"]):
                    self.assertIn('namespace=~"$namespace"', m.group(2) or "", (p["title"], t["expr"]))
                    self.assertIn('instance=~"$instance"', m.group(2) or "", (p["title"], t["expr"]))


if __name__ == "__main__":
    unittest.main()
