"""Test harness: real levee and real peers on loopback.

Processes are started on free ports and waited for by polling a condition
(a port accepting, an admin endpoint answering), never by sleeping. Every
process is torn down at the end of its test, with its output kept for
failure messages.
"""
import contextlib
import hashlib
import http.client
import json
import os
import shutil
import re
import signal
import socket
import subprocess
import tempfile
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("LEVEE_BUILD", os.path.join(ROOT, "build"))
LEVEE = os.environ.get("LEVEE_BIN", os.path.join(BUILD, "levee"))
BACKEND = os.environ.get("LEVEE_BACKEND_BIN", os.path.join(BUILD, "levee-backend"))
LOADGEN = os.environ.get("LEVEE_LOADGEN_BIN", os.path.join(BUILD, "levee-loadgen"))


_ports_given = set()


def free_port():
    """A loopback port nothing listens on, never one this process was given
    before: the kernel may hand the same ephemeral port to two binds in a
    row once the first socket is closed (a listener and an admin port that
    collide)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports_given:
            _ports_given.add(port)
            return port


def cmake_cache(key):
    """The value the build under test's CMakeCache.txt holds for key, or None."""
    with open(os.path.join(BUILD, "CMakeCache.txt")) as f:
        m = re.search(rf"^{re.escape(key)}:[A-Z]+=(.*)$", f.read(), re.M)
    return m.group(1) if m else None


def memory_bound_mib(mib):
    """A bound on levee's peak RSS, for the build under test: ASan keeps up to
    256 MiB of freed memory in quarantine (its default quarantine_size_mb)
    plus shadow memory, TSan maps shadow for every byte touched (about 5-8x).
    The bound stays far below what buffering the data a test moves would
    take, so it still fails if levee buffers."""
    san = os.environ.get("LEVEE_SANITIZER", "")
    if san == "asan":
        return mib + 256
    if san == "tsan":
        return mib * 8
    return mib


def wait_until(predicate, timeout=10.0, interval=0.01, what="condition"):
    """Polls predicate until it returns a truthy value; fails after timeout."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = predicate()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - a condition not met yet
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last_exc})" if last_exc else ""))


def port_open(port, host="127.0.0.1"):
    with contextlib.suppress(OSError):
        with socket.create_connection((host, port), timeout=0.2):
            return True
    return False


class Proc:
    """A child process with captured output."""

    def __init__(self, args, name, env=None):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"levee-test-{name}-", suffix=".log", delete=False)
        # Its own process group, so that stop() also ends what it forks
        # (nginx's workers outlive a killed master otherwise).
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def output(self):
        self.log.flush()
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.p.poll() is None

    def signal(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def wait(self, timeout=10):
        return self.p.wait(timeout=timeout)

    def stop(self):
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=5)
        self.log.close()
        if os.path.exists(self.log.name):
            os.unlink(self.log.name)

    def rss_peak_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0


class Backend:
    def __init__(self, tc, workers=8, service="fixed:1ms", extra=(), port=None, name="backend"):
        self.port = port or free_port()
        args = [BACKEND, "--port", str(self.port), "--workers", str(workers), "--service", service, "--id", name]
        args += list(extra)
        self.proc = Proc(args, name)
        tc.addCleanup(self.proc.stop)
        wait_until(lambda: port_open(self.port), what=f"{name} on {self.port}")

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body.decode()

    def stats(self):
        return json.loads(self.get("/_admin/stats")[1])

    def admin(self, path):
        status, body = self.get("/_admin/" + path)
        assert status == 200, body
        return body

    def seen(self, test_id):
        return self.get(f"/_admin/seen?id={test_id}")[1].strip() == "yes"


def cluster(name, endpoints, **kw):
    c = {"name": name, "endpoints": endpoints}
    c.update(kw)
    return c


class Levee:
    """levee with a config built from dicts (JSON is valid YAML)."""

    def __init__(self, tc, clusters, routes=None, listener=None, extra=None, listeners=None, wait_ready=True,
                 workers=1, env=None):
        self.port = free_port()
        self.admin_port = free_port()
        lst = {"name": "main", "address": "127.0.0.1", "port": self.port,
               "routes": routes or [{"cluster": clusters[0]["name"]}]}
        lst.update(listener or {})
        cfg = {"admin": {"address": "127.0.0.1", "port": self.admin_port},
               "workers": workers,
               "drain_timeout": "5s",
               "access_log": {"enabled": True, "path": "stdout", "reject_sample": 1.0},
               "listeners": [lst] + (listeners or []),
               "clusters": clusters}
        for k, v in (extra or {}).items():
            if k == "admin":
                cfg["admin"].update(v)  # keep the ports the harness chose
            else:
                cfg[k] = v
        self.cfg = cfg
        fd, self.config_path = tempfile.mkstemp(prefix="levee-test-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f, indent=1)
        tc.addCleanup(os.unlink, self.config_path)
        self.proc = Proc([LEVEE, "-c", self.config_path], "levee", env=env)
        tc.addCleanup(self.proc.stop)
        wait_until(lambda: self.proc.alive() and self.admin_get("/healthz")[0] == 200 or not self.proc.alive(),
                   what="levee admin")
        if not self.proc.alive():
            raise AssertionError("levee exited:\n" + self.proc.output())
        for extra_l in listeners or []:
            wait_until(lambda: port_open(extra_l["port"]), what="extra listener")
        wait_until(lambda: port_open(self.port), what="levee listener")
        if wait_ready:
            wait_until(lambda: self.admin_get("/ready")[0] == 200, what="levee ready")

    def admin_get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=5)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        return r.status, body

    def metrics(self):
        return self.admin_get("/metrics")[1]

    def metric(self, name, **labels):
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric = head.split("{")[0]
            if metric != name:
                continue
            lbl = {}
            if "{" in head:
                for part in head[head.index("{") + 1:-1].split(","):
                    if "=" in part:
                        k, v = part.split("=", 1)
                        lbl[k] = v.strip('"')
            if all(lbl.get(k) == str(v) for k, v in labels.items()):
                total += float(value)
        return total

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=10):
        c = self.conn(timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()
        finally:
            c.close()


def raw_exchange(port, data, timeout=5.0, read_until_close=True):
    """Sends raw bytes and returns everything read until close (or timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
            if not read_until_close:
                break
        return out
    finally:
        s.close()


def download_bytes(size):
    """The backend's deterministic /download content."""
    return bytes(((i * 31 + 7) % 251) for i in range(size))


def tool(name):
    """A real client or server the tests drive. The README test command
    installs them all and sets LEVEE_REQUIRE_TOOLS=1, so in CI a missing
    tool fails the test instead of skipping it."""
    path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
    if not path:
        msg = f"{name} is not installed (scripts/deps.sh --test installs it)"
        if os.environ.get("LEVEE_REQUIRE_TOOLS") == "1":
            raise AssertionError(msg)
        raise unittest.SkipTest(msg)
    return path


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def run_loadgen(port, phases, classes, warmup="0s", extra=()):
    """Runs levee-loadgen against 127.0.0.1:port and returns its JSON summary."""
    args = [LOADGEN, "--target", f"127.0.0.1:{port}", "--phases", phases, "--warmup", warmup,
            "--max-conns", "4000"]
    for c in classes:
        args += ["--class", c]
    args += list(extra)
    out = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError(f"loadgen failed: {out.stderr}")
    return json.loads(out.stdout)


def closed_loop_rate(port, conns, seconds=1):
    """Requests/s a closed loop of `conns` connections gets from 127.0.0.1:port
    (wrk): what a backend really serves on this machine at this minute, its
    timers and wake-ups included, to compare a goodput with."""
    out = subprocess.run([tool("wrk"), "-t1", f"-c{conns}", f"-d{seconds}s", f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True, timeout=seconds + 30).stdout
    m = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if not m:
        raise AssertionError("wrk: " + out)
    return float(m.group(1))


def by_class(summary):
    return {c["name"]: c for c in summary["classes"]}
