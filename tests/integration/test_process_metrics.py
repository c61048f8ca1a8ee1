"""process_* metrics and levee_build_info: values agree with what the
kernel reports for the levee process, and move when they should."""
import os
import re
import resource
import socket
import subprocess
import time
import unittest

from harness import LEVEE, Backend, Levee, cluster, cmake_cache, wait_until

TICKS = os.sysconf("SC_CLK_TCK")


def proc_stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # [0] is field (3)


def cpu_seconds(pid):
    t = proc_stat(pid)
    return (int(t[14 - 3]) + int(t[15 - 3])) / TICKS


def vm_rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class ProcessMetrics(unittest.TestCase):
    def setUp(self):
        self.be = Backend(self)
        self.t_before = time.time()
        self.lv = Levee(self, [cluster("app", [self.be.address])], workers=2)
        self.t_after = time.time()
        self.pid = self.lv.proc.p.pid

    def value(self, name):
        return self.lv.metric(name)

    def test_types_are_declared(self):
        text = self.lv.metrics()
        for name, kind in [("process_cpu_seconds_total", "counter"), ("process_resident_memory_bytes", "gauge"),
                           ("process_virtual_memory_bytes", "gauge"), ("process_open_fds", "gauge"),
                           ("process_max_fds", "gauge"), ("process_start_time_seconds", "gauge"),
                           ("levee_build_info", "gauge")]:
            self.assertRegex(text, rf"(?m)^# TYPE {name} {kind}$")

    def test_start_time_is_when_the_process_started(self):
        start = self.value("process_start_time_seconds")
        # The kernel's boot time (btime) is whole seconds, rounded down, and
        # the start offset is in clock ticks: the value may read up to one
        # second plus one tick early, never late.
        self.assertGreaterEqual(start, self.t_before - 1.0 - 1.0 / TICKS)
        self.assertLessEqual(start, self.t_after)

    def test_cpu_matches_the_kernel(self):
        # Load the process a little so the counter is not 0.
        for _ in range(200):
            self.lv.request("GET", "/")
        before = cpu_seconds(self.pid)
        v = self.value("process_cpu_seconds_total")
        after = cpu_seconds(self.pid)
        self.assertGreater(v, 0)
        self.assertGreaterEqual(v, before)
        self.assertLessEqual(v, after)

    def test_memory_matches_the_kernel(self):
        before = vm_rss_bytes(self.pid)
        rss = self.value("process_resident_memory_bytes")
        after = vm_rss_bytes(self.pid)
        # Serving the scrape may touch a few new pages between the reads.
        slack = 1 << 20
        self.assertGreaterEqual(rss, min(before, after) - slack)
        self.assertLessEqual(rss, max(before, after) + slack)
        self.assertGreater(rss, 1 << 20)
        self.assertGreaterEqual(self.value("process_virtual_memory_bytes"), rss)

    def test_max_fds_is_the_soft_limit(self):
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)  # levee inherits ours
        self.assertEqual(self.value("process_max_fds"), soft)

    def test_open_fds_follow_connections(self):
        baseline = self.value("process_open_fds")
        # The scrape counted its own admin connection, which levee closes
        # once the client has gone: then a listing from outside agrees.
        wait_until(lambda: len(os.listdir(f"/proc/{self.pid}/fd")) == baseline - 1,
                   what=f"/proc/{self.pid}/fd to list {baseline - 1:.0f} descriptors")
        n = 20
        conns = [socket.create_connection(("127.0.0.1", self.lv.port)) for _ in range(n)]
        try:
            wait_until(lambda: self.lv.metric("levee_downstream_active_connections") == n, what="connections accepted")
            self.assertGreaterEqual(self.value("process_open_fds"), baseline + n)
        finally:
            for c in conns:
                c.close()
        wait_until(lambda: self.value("process_open_fds") == baseline, what="descriptors closed")

    def test_build_info(self):
        text = self.lv.metrics()
        m = re.search(r'^levee_build_info\{([^}]*)\} 1$', text, re.M)
        self.assertIsNotNone(m, text[:2000])
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        version = subprocess.run([LEVEE, "--version"], capture_output=True, text=True).stdout.split()[-1]
        self.assertEqual(labels["version"], version)
        self.assertEqual(labels["build_type"], cmake_cache("CMAKE_BUILD_TYPE"))
        # The release build allocates through tcmalloc, a sanitizer build through its own allocator.
        self.assertEqual(labels["allocator"], "tcmalloc" if cmake_cache("LEVEE_TCMALLOC") == "ON" else "system")
        self.assertRegex(labels["commit"], r"^([0-9a-f]{7,}(-dirty)?|v?[\w.+-]+|unknown)$")


if __name__ == "__main__":
    unittest.main()
