"""The live admin page (/admin/) in a real browser: headless Chromium loads
it from the admin listener, its script fetches the admin API and draws the
running config's clusters, endpoints and tenants, and its figures move when
traffic does."""
import html.parser
import json
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

from harness import Backend, Levee, cluster, run_loadgen, wait_until

# Debian's package, or Ubuntu's snap (Ubuntu's chromium-browser package is
# only a shim asking for the snap).
CHROMIUM = shutil.which("chromium") or next((p for p in ("/snap/bin/chromium",) if os.access(p, os.X_OK)), None)


class Dom(html.parser.HTMLParser):
    """What the test reads of the rendered page: text by element id, and the
    data-* attributes of the rows and sections the script drew."""

    def __init__(self, text):
        super().__init__()
        self.by_id, self.data, self._stack = {}, {}, []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k, v in a.items():
            if k.startswith("data-"):
                self.data.setdefault(k, []).append(v)
        self._stack.append(a.get("id"))

    def handle_endtag(self, tag):
        if self._stack:
            self._stack.pop()

    def handle_data(self, d):
        for i in self._stack:
            if i:
                self.by_id[i] = self.by_id.get(i, "") + d


def render(lv, profile):
    """The page's DOM after its script has run a few refreshes (Chromium's
    virtual time advances the page's 1 s interval; the fetches are real)."""
    r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        f"--user-data-dir={profile}", "--virtual-time-budget=3500", "--dump-dom",
                        f"http://127.0.0.1:{lv.admin_port}/admin/"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    return Dom(r.stdout)


class AdminPage(unittest.TestCase):
    def setUp(self):
        self.assertIsNotNone(CHROMIUM, "chromium is not installed (scripts/deps.sh --test installs it; "
                                       "on Ubuntu it is the snap: snap install chromium)")
        self.profile = tempfile.mkdtemp(prefix="levee-chromium-")
        self.addCleanup(shutil.rmtree, self.profile, True)

    def test_the_page_shows_the_running_config_and_moves_under_load(self):
        be = Backend(self, workers=2, service="fixed:20ms")
        lv = Levee(self, [cluster("app", [be.address], concurrency={"limit": 2}, queue={"target": "20ms"})],
                   extra={"tenants": {"source": {"header": "x-tenant-id", "trusted_networks": ["127.0.0.0/8"]},
                                      "quotas": {"default": 1.0, "gold": 2.0, "silver": 0.5}}})
        calm = render(lv, self.profile)
        self.assertEqual(calm.by_id.get("error", ""), "")
        self.assertGreaterEqual(int(calm.by_id["refreshes"]), 2, calm.by_id)
        self.assertEqual(calm.data["data-cluster"], ["app"])
        self.assertEqual(calm.data["data-endpoint"], [be.address])
        self.assertEqual(sorted(calm.data["data-tenant"]), ["default", "gold", "silver"])
        self.assertIn("ready", calm.by_id["status"])
        self.assertEqual(calm.by_id["admitted-total"], "0")
        self.assertEqual(calm.by_id["rejected-total"], "0")

        # 10x the backend's 100/s: admitted and shed traffic both show up.
        load = {}
        t = threading.Thread(target=lambda: load.update(run_loadgen(
            lv.port, "6s@1000", ["name=gold,tenant=gold,criticality=CRITICAL,deadline=1s",
                                 "name=bulk,tenant=silver,criticality=SHEDDABLE,deadline=1s"])), daemon=True)
        t.start()
        self.addCleanup(t.join)

        def stats():
            return json.loads(lv.admin_get("/admin/stats")[1])
        wait_until(lambda: sum(stats()["admitted"]) > 0 and any(any(p) for p in stats()["rejected_by_reason"]),
                   what="admissions and rejections in /admin/stats")
        hot = render(lv, self.profile)
        self.assertEqual(hot.by_id.get("error", ""), "")
        self.assertGreater(int(hot.by_id["admitted-total"]), 0, hot.by_id)
        self.assertGreater(int(hot.by_id["rejected-total"]), 0, hot.by_id)
        # The shedding chart's legend counts rejections per criticality: the
        # sheddable class was shed, by name.
        legend = " ".join(hot.by_id.get("chart-criticality", "").split())
        self.assertRegex(legend, r"SHEDDABLE: [1-9]")
        t.join()
        self.assertGreater(load["total"]["rejected"], 0)


if __name__ == "__main__":
    unittest.main()
