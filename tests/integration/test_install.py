"""`cmake --install` and the Debian package put exactly the promised files
where the systemd unit looks for them, and the unit passes systemd's own
checks (`systemd-analyze verify` and `security`, offline)."""
import glob
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BUILD, ROOT, cmake_cache, tool

UNIT = os.path.join(ROOT, "deploy", "systemd", "levee.service")
MAX_EXPOSURE = 2.0  # systemd-analyze security: 0 is fully locked down, 10 is no sandbox


def cmake():
    return shutil.which("cmake") or "cmake"


def install(prefix):
    dest = tempfile.mkdtemp(prefix="levee-install-")
    out = subprocess.run([cmake(), "--install", BUILD, "--prefix", prefix],
                         env=dict(os.environ, DESTDIR=dest), capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    return dest


def files_under(root):
    found = set()
    for d, _, names in os.walk(root):
        for n in names:
            found.add("/" + os.path.relpath(os.path.join(d, n), root))
    return found


def bundled_libs():
    """Debian 12 builds bundle prometheus-cpp (from .deps); others link the distro's."""
    libdir = cmake_cache("PROMCPP_LIBDIR") or ""
    if not libdir or re.match(r"^/(usr/)?lib", libdir):
        return []
    return sorted(os.path.basename(p) for p in glob.glob(os.path.join(libdir, "libprometheus-cpp-core.so.*")))


def expected_files(prefix, etc):
    docs = [os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))] + ["README.md"]
    imgs = [os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "docs", "img", "*"))]
    want = {f"{prefix}/bin/levee", f"{etc}/levee/levee.yaml", f"{prefix}/lib/systemd/system/levee.service",
            f"{prefix}/share/levee/levee-rules.yaml", f"{prefix}/share/levee/levee-dashboard.json"}
    want |= {f"{prefix}/share/doc/levee/{d}" for d in docs}
    want |= {f"{prefix}/share/doc/levee/img/{i}" for i in imgs}
    return want


def unit_fields(text):
    fields = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            fields.setdefault(k, []).append(v)
    return fields


class Install(unittest.TestCase):
    def check_tree(self, dest, prefix, etc):
        want = expected_files(prefix, etc)
        got = files_under(dest)
        libs = {f for f in got if "/levee/libprometheus" in f}
        self.assertEqual({os.path.basename(f) for f in libs}, set(bundled_libs()))
        self.assertEqual(got - libs, want)
        # The installed unit names the installed binary and configuration.
        with open(dest + f"{prefix}/lib/systemd/system/levee.service") as f:
            unit = unit_fields(f.read())
        self.assertEqual(unit["ExecStart"], [f"{prefix}/bin/levee -c {etc}/levee/levee.yaml"])
        self.assertEqual(unit["Documentation"], [f"file://{prefix}/share/doc/levee/operations.md"])
        # The installed binary runs from there (its RUNPATH finds a bundled
        # library) and accepts the installed configuration.
        out = subprocess.run([dest + f"{prefix}/bin/levee", "--validate", dest + f"{etc}/levee/levee.yaml"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        return unit

    def test_install_to_usr_local(self):
        dest = install("/usr/local")
        self.addCleanup(shutil.rmtree, dest)
        self.check_tree(dest, "/usr/local", "/usr/local/etc")

    def test_install_to_usr_puts_the_configuration_in_etc(self):
        dest = install("/usr")
        self.addCleanup(shutil.rmtree, dest)
        self.check_tree(dest, "/usr", "/etc")

    def test_unit_passes_systemd_analyze_verify(self):
        dest = install("/usr")
        self.addCleanup(shutil.rmtree, dest)
        with open(dest + "/usr/lib/systemd/system/levee.service") as f:
            text = f.read()
        # verify checks that every Exec path exists: point them into DESTDIR.
        text = text.replace("/usr/bin/levee", dest + "/usr/bin/levee").replace("/etc/levee/", dest + "/etc/levee/")
        d = tempfile.mkdtemp(prefix="levee-unit-")
        self.addCleanup(shutil.rmtree, d)
        path = os.path.join(d, "levee.service")
        with open(path, "w") as f:
            f.write(text)
        out = subprocess.run([tool("systemd-analyze"), "verify", "--man=no", path], capture_output=True, text=True)
        # verify exits 0 on unknown keys too, with a warning: no output is the pass.
        self.assertEqual((out.returncode, out.stdout + out.stderr), (0, ""))

    def test_unit_sandbox_scores_well(self):
        out = subprocess.run([tool("systemd-analyze"), "security", "--offline=yes", "--no-pager", UNIT],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        m = re.search(r"Overall exposure level for levee\.service: ([\d.]+)", out.stdout)
        self.assertIsNotNone(m, out.stdout[-2000:])
        self.assertLessEqual(float(m.group(1)), MAX_EXPOSURE, out.stdout)

    def test_unit_declares_what_operations_md_promises(self):
        with open(UNIT) as f:
            u = unit_fields(f.read())
        self.assertEqual(u["Type"], ["notify"])
        self.assertIn("/bin/sh -c 'kill -HUP ${MAINPID}'", u["ExecReload"])
        self.assertEqual(u["KillSignal"], ["SIGTERM"])
        self.assertEqual(u["CapabilityBoundingSet"], ["CAP_NET_BIND_SERVICE"])
        self.assertEqual(u["AmbientCapabilities"], ["CAP_NET_BIND_SERVICE"])
        self.assertEqual(u["RestrictAddressFamilies"], ["AF_INET AF_INET6 AF_UNIX"])
        self.assertIn("@system-service", u["SystemCallFilter"])
        for k in ("PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
                  "NoNewPrivileges", "DynamicUser"):
            self.assertEqual(u[k], ["yes"], k)
        self.assertEqual(u["LogsDirectory"], ["levee"])
        self.assertGreaterEqual(int(u["LimitNOFILE"][0]), 65536)
        # The stop timeout outlasts the default drain_timeout (15 s).
        self.assertGreater(int(u["TimeoutStopSec"][0]), 15)

    def test_debian_package(self):
        t0 = time.monotonic()
        out = subprocess.run([shutil.which("cpack") or "cpack", "-G", "DEB"], cwd=BUILD, capture_output=True, text=True)
        took = time.monotonic() - t0
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertLess(took, 60)
        debs = glob.glob(os.path.join(BUILD, "levee_*.deb"))
        self.assertEqual(len(debs), 1, debs)
        deb = debs[0]
        self.addCleanup(os.unlink, deb)
        info = subprocess.run([tool("dpkg-deb"), "-f", deb], capture_output=True, text=True).stdout
        self.assertRegex(info, r"(?m)^Package: levee$")
        depends = re.search(r"(?m)^Depends: (.*)$", info).group(1)
        self.assertIn("libyaml-cpp", depends)
        self.assertIn("libspdlog", depends)
        if cmake_cache("LEVEE_TCMALLOC") == "ON":
            self.assertIn("libtcmalloc-minimal4", depends)  # the allocator the binary links
        x = tempfile.mkdtemp(prefix="levee-deb-")
        self.addCleanup(shutil.rmtree, x)
        subprocess.run([tool("dpkg-deb"), "-R", deb, x], check=True)
        with open(os.path.join(x, "DEBIAN", "conffiles")) as f:
            self.assertEqual(f.read().split(), ["/etc/levee/levee.yaml"])
        for script in ("postinst", "prerm", "postrm"):
            self.assertTrue(os.access(os.path.join(x, "DEBIAN", script), os.X_OK), script)
        # The package holds the /usr install, stripped.
        want = expected_files("/usr", "/etc")
        got = {f for f in files_under(x) if not f.startswith("/DEBIAN/")}
        libs = {f for f in got if "/levee/libprometheus" in f}
        self.assertEqual(got - libs, want)
        with open(os.path.join(x, "usr/lib/systemd/system/levee.service")) as f:
            self.assertIn("ExecStart=/usr/bin/levee -c /etc/levee/levee.yaml", f.read())
        self.assertLess(os.path.getsize(os.path.join(x, "usr/bin/levee")), os.path.getsize(os.path.join(BUILD, "levee")))
        out = subprocess.run([os.path.join(x, "usr/bin/levee"), "--validate", os.path.join(x, "etc/levee/levee.yaml")],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)


if __name__ == "__main__":
    unittest.main()
