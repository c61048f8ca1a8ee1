"""A browser on the admin listener's host is a loopback client too: a page
of another site can make it POST to the admin port (CSRF), and a site whose
name is rebound to 127.0.0.1 (DNS rebinding) can read the admin pages as
its own. levee trusts loopback only when the Host is loopback's and an
Origin, when sent, is that Host. Real Chromium for the attacks, http.client
for the exact rules."""
import http.client
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

from harness import Backend, Levee, cluster, free_port

from test_admin_page import CHROMIUM

TOKEN = "s3cret-token-0123456789"


def send(lv, method, path, headers):
    """One request to the admin listener from loopback with exactly these
    headers (Host included, when given)."""
    c = http.client.HTTPConnection("127.0.0.1", lv.admin_port, timeout=10)
    c.request(method, path, body=b"" if method == "POST" else None, headers=headers)
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def ready(lv):
    return lv.admin_get("/ready")[0]


def token_file(tc):
    fd, path = tempfile.mkstemp(prefix="levee-token-")
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN + "\n")
    tc.addCleanup(os.unlink, path)
    return path


class Rules(unittest.TestCase):
    def setUp(self):
        a = Backend(self, name="a")
        self.lv = Levee(self, [cluster("a", [a.address])],
                        extra={"admin": {"allowed_hosts": ["Levee-Admin.internal"], "token_file": token_file(self)}})
        self.p = self.lv.admin_port

    def test_loopback_names_and_the_pages_own_origin_may_act(self):
        lv, p = self.lv, self.p
        # curl and the admin page itself: an IP literal or localhost, and
        # the page's Origin when a browser sends one.
        self.assertEqual(send(lv, "POST", "/admin/drain", {"Host": f"localhost:{p}",
                                                           "Origin": f"http://localhost:{p}"})[0], 200)
        self.assertEqual(ready(lv), 503)
        self.assertEqual(send(lv, "POST", "/admin/undrain", {"Host": f"[::1]:{p}"})[0], 200)
        self.assertEqual(send(lv, "POST", "/admin/drain", {"Host": f"levee-admin.INTERNAL:{p}"})[0], 200)
        self.assertEqual(send(lv, "POST", "/admin/undrain", {"Host": "app.localhost."})[0], 200)
        self.assertEqual(ready(lv), 200)
        self.assertEqual(send(lv, "GET", "/admin/config", {"Host": f"127.0.0.1:{p}"})[0], 200)

    def test_another_origin_or_a_rebound_name_cannot_act(self):
        lv, p = self.lv, self.p
        refusals = [
            ({"Host": f"127.0.0.1:{p}", "Origin": f"http://127.0.0.1:{p + 1}"}, "another origin"),
            ({"Host": f"127.0.0.1:{p}", "Origin": "null"}, "another origin"),
            ({"Host": f"127.0.0.1:{p}", "Origin": f"ftp://127.0.0.1:{p}"}, "another origin"),
            ({"Host": f"evil.example:{p}", "Origin": f"http://evil.example:{p}"}, "Host names neither"),
            ({"Host": f"127.0.0.1.nip.io:{p}"}, "Host names neither"),
            ({"Host": f"localhost.evil.example:{p}"}, "Host names neither"),
            ({"Host": f"[::1:{p}"}, "Host names neither"),
        ]
        for headers, why in refusals:
            status, body = send(lv, "POST", "/admin/drain", headers)
            self.assertEqual(status, 403, headers)
            self.assertIn(why, body, headers)
            self.assertEqual(ready(lv), 200, headers)
        self.assertIn("/admin/drain from 127.0.0.1 refused: loopback, but", lv.proc.output())
        # The token is not something a browser adds by itself: with it, the
        # Host and Origin do not matter.
        self.assertEqual(send(lv, "POST", "/admin/drain", {"Host": f"evil.example:{p}",
                                                           "Origin": "http://evil.example",
                                                           "Authorization": "Bearer " + TOKEN})[0], 200)
        self.assertEqual(ready(lv), 503)

    def test_a_rebound_name_reads_only_the_open_pages(self):
        lv, p = self.lv, self.p
        rebound = {"Host": f"evil.example:{p}"}
        for path in ("/admin/", "/admin/config", "/admin/clusters", "/admin/info", "/admin/stats"):
            status, body = send(lv, "GET", path, rebound)
            self.assertEqual(status, 403, path)
            self.assertIn("Host names neither", body)
            self.assertNotIn("listeners", body)
        # What is open to every address stays open.
        for path in ("/metrics", "/healthz", "/ready"):
            self.assertEqual(send(lv, "GET", path, rebound)[0], 200, path)


class InChromium(unittest.TestCase):
    def setUp(self):
        self.assertIsNotNone(CHROMIUM, "chromium is not installed (scripts/deps.sh --test installs it)")
        self.profile = tempfile.mkdtemp(prefix="levee-chromium-")
        self.addCleanup(shutil.rmtree, self.profile, True)
        a = Backend(self, name="a")
        self.lv = Levee(self, [cluster("a", [a.address])])

    def chromium(self, url, *flags):
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            f"--user-data-dir={self.profile}", "--virtual-time-budget=3000", *flags,
                            "--dump-dom", url], capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return r.stdout

    def test_a_page_of_another_site_cannot_drain_levee(self):
        lv = self.lv
        # The attacker's pages, on another origin (another port), post to the
        # admin listener: one with fetch (no-cors: it cannot read the answer,
        # only cause the action), one with a form, the classic cross-site
        # request. (Chromium's virtual time hangs on a page doing both.)
        admin = f"http://127.0.0.1:{lv.admin_port}/admin/drain"
        pages = {
            "/fetch": f"""<!doctype html><p id=done></p><script>
fetch("{admin}", {{method: "POST", mode: "no-cors"}})
  .then(r => document.getElementById("done").textContent = "fetched: " + r.type);
</script>""".encode(),
            "/form": f"""<!doctype html><form id=f method=POST action="{admin}"><input name=x value=1></form>
<script>document.getElementById("f").submit();</script>""".encode(),
        }

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                page = pages.get(self.path, b"")
                self.send_response(200 if page else 404)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *a):
                pass

        site = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Page)
        threading.Thread(target=site.serve_forever, daemon=True).start()
        self.addCleanup(site.server_close)
        self.addCleanup(site.shutdown)
        # The fetch was sent and answered (an opaque answer to no-cors).
        self.assertIn("fetched: opaque", self.chromium(f"http://127.0.0.1:{site.server_port}/fetch"))
        self.assertEqual(ready(lv), 200)
        # The form's answer is what the browser shows: the refusal.
        self.assertIn("sent by a page of another origin", self.chromium(f"http://127.0.0.1:{site.server_port}/form"))
        self.assertEqual(ready(lv), 200)
        out = lv.proc.output()
        self.assertIn("/admin/drain from 127.0.0.1 refused: loopback, but sent by a page of another origin", out)
        self.assertNotIn("drain requested", out)

    def test_a_name_rebound_to_loopback_cannot_read_the_admin_pages(self):
        lv = self.lv
        # The state after a DNS rebinding: the attacker's name resolves to
        # 127.0.0.1, so its page and the admin listener share an origin.
        url = f"http://rebound.test:{lv.admin_port}/admin/config"
        dom = self.chromium(url, "--host-resolver-rules=MAP rebound.test 127.0.0.1")
        self.assertIn("Host names neither loopback nor admin.allowed_hosts", dom)
        self.assertNotIn("listeners", dom)
        # The same page by its loopback address is served.
        self.assertIn("listeners", self.chromium(f"http://127.0.0.1:{lv.admin_port}/admin/config"))


if __name__ == "__main__":
    unittest.main()
