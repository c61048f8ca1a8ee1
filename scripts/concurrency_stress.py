#!/usr/bin/env python3
"""Every concurrent part of levee at once, for a sanitizer build to watch.

    scripts/concurrency_stress.py BUILD_DIR [SECONDS]

Runs levee (BUILD_DIR/levee) with two workers in front of two backends and
drives it past capacity with three criticalities and two tenants, so that
the workers share cluster state (queue gate, concurrency limit, tenant
usage, throttle, retry budget) while the access-log thread writes JSON
lines, active health checks run, the admin thread is scraped for metrics
and cluster state in a loop, and one backend is killed and restarted
(ejection, return, slow start). Then levee is stopped with SIGTERM and
must drain and exit 0: unlike the integration tests, which kill levee,
this lets LeakSanitizer check it at exit.

scripts/sanitize.sh runs it after the test suite; sanitizer reports go to
the files its *SAN_OPTIONS name, and it fails on any.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"concurrency_stress: nothing listens on {port}")


def main():
    build = os.path.abspath(sys.argv[1])
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 15.0
    tmp = tempfile.mkdtemp(prefix="levee-stress-")
    be_ports = [free_port(), free_port()]
    port, admin = free_port(), free_port()

    def backend(p, name):
        return subprocess.Popen([os.path.join(build, "levee-backend"), "--port", str(p), "--workers", "4",
                                 "--service", "fixed:5ms", "--orca", "json", "--id", name],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    backends = [backend(p, f"b{i}") for i, p in enumerate(be_ports)]
    for p in be_ports:
        wait_port(p)
    cfg = {
        "admin": {"address": "127.0.0.1", "port": admin},
        "workers": 2,
        "access_log": {"enabled": True, "path": os.path.join(tmp, "access.log"), "format": "json",
                       "sample": 1.0, "reject_sample": 1.0},
        # Gate 1 off: a sanitizer build on a busy machine would shed nearly
        # everything at arrival, and the point is to reach every later part.
        "self_protection": {"enabled": False},
        "tenants": {"source": {"header": "x-tenant-id", "trusted_networks": ["127.0.0.0/8"]},
                    "quotas": {"default": 0.5, "gold": 2.0}, "enforce": "always", "window": "2s"},
        "listeners": [{"name": "main", "address": "127.0.0.1", "port": port,
                       "routes": [{"match": {"prefix": "/bulk"}, "cluster": "app", "fuse": True},
                                  {"cluster": "app", "timeout": "3s"}],
                       "fuse": {"connections_per_endpoint": 4, "queue": 100, "queue_timeout": "200ms"}}],
        "clusters": [{"name": "app", "endpoints": [f"127.0.0.1:{p}" for p in be_ports],
                      "concurrency": {"adaptive": {"min": 4, "max": 64}},
                      "queue": {"max": 200, "target": "20ms"},
                      "health_check": {"path": "/healthz", "interval": "100ms", "healthy": 1, "unhealthy": 1},
                      "outlier_detection": {"consecutive_failures": 3, "base_ejection": "500ms"},
                      "slow_start": {"window": "1s"},
                      "retry": {"max_attempts": 2}}],
    }
    cfg_path = os.path.join(tmp, "levee.yaml")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    levee = subprocess.Popen([os.path.join(build, "levee"), "-c", cfg_path],
                             stdout=open(os.path.join(tmp, "levee.out"), "w"), stderr=subprocess.STDOUT)
    wait_port(port)
    wait_port(admin)

    stop = threading.Event()
    scrapes = [0]

    def scrape():
        while not stop.is_set():
            for path in ("/metrics", "/admin/clusters", "/ready"):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{admin}{path}", timeout=5).read()
                    scrapes[0] += 1
                except Exception:  # noqa: BLE001 - /ready may answer 503
                    pass

    def bulk():
        while not stop.is_set():
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/bulk/x", timeout=5).read()
            except Exception:  # noqa: BLE001 - fuse rejections are 503s
                pass

    threads = [threading.Thread(target=scrape), threading.Thread(target=bulk)]
    for t in threads:
        t.start()
    load = subprocess.Popen(
        [os.path.join(build, "levee-loadgen"), "--target", f"127.0.0.1:{port}", "--rate", "400",
         "--duration", f"{seconds}s", "--poisson", "--retries", "1", "--backoff", "20ms",
         "--class", "name=cp,weight=1,criticality=CRITICAL_PLUS,tenant=gold,deadline=2s",
         "--class", "name=c,weight=2,criticality=CRITICAL,tenant=gold,deadline=2s",
         "--class", "name=s,weight=3,criticality=SHEDDABLE,tenant=other,deadline=1s",
         "--json", os.path.join(tmp, "load.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # One backend leaves and comes back while the load runs.
    time.sleep(seconds / 3)
    backends[1].kill()
    backends[1].wait()
    time.sleep(seconds / 3)
    backends[1] = backend(be_ports[1], "b1")
    load.wait(timeout=seconds + 120)
    stop.set()
    for t in threads:
        t.join()
    levee.send_signal(signal.SIGTERM)
    try:
        code = levee.wait(timeout=120)
    except subprocess.TimeoutExpired:
        levee.kill()
        code = "killed after 120 s"
    for b in backends:
        b.kill()
    with open(os.path.join(tmp, "load.json")) as f:
        total = json.load(f)["total"]
    with open(os.path.join(tmp, "access.log")) as f:
        lines = sum(1 for _ in f)
    print(f"concurrency_stress: {total['sent']} requests sent, {total['ok']} ok, {total['rejected']} shed "
          f"{dict(total['reasons'])}, "
          f"{lines} access-log lines, {scrapes[0]} admin scrapes; levee exit {code}")
    if code != 0 or total["ok"] == 0 or lines == 0:
        print(f"concurrency_stress: failed; files in {tmp}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
