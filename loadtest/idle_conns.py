#!/usr/bin/env python3
"""Memory per idle keep-alive client connection: levee, HAProxy and nginx
side by side (issue 11).

Each front runs one worker (one process: nginx with `master_process off`)
in front of an nginx backend (`return 200`). N client connections are
opened one at a time; each sends one GET, reads its answer and then stays
open, idle. After the fronts have had 3 s to settle (levee parks a
connection idle for 100 ms, ending its coroutine, and trims its worker's
buffer pools every second), the front's resident memory is read again:

    bytes per idle connection = (RSS with N idle - RSS before) / N

levee runs with its shipped defaults apart from the ports, one worker, the
access log to a file and `max_connections` above N.

    python3 loadtest/idle_conns.py [--connections 5000]
"""
import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import BUILD, Procs, free_port, machine, pin, start_static_backend, wait_port  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def open_idle(port, n, request=True):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        if not request:
            socks.append(s)
            continue
        s.sendall(b"GET / HTTP/1.1\r\nHost: idle\r\n\r\n")
        data = b""
        while not data.endswith(b"ok\n"):
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError(f"port {port} closed an idle connection")
            data += chunk
        socks.append(s)
    return socks


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=5000)
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"))
    args = ap.parse_args()
    n = args.connections
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * n + 1000)), hard))
    procs = Procs()
    results = {}
    try:
        be = start_static_backend(procs)
        fronts = {}
        port, admin = free_port(), free_port()
        cfg = {"admin": {"address": "127.0.0.1", "port": admin}, "workers": 1,
               "access_log": {"path": os.path.join(procs.dir, "levee-access.log")},
               "listeners": [{"name": "idle", "address": "127.0.0.1", "port": port, "max_connections": 4 * n,
                              "routes": [{"cluster": "app"}]}],
               "clusters": [{"name": "app", "endpoints": [f"127.0.0.1:{be}"]}]}
        with open(os.path.join(procs.dir, "levee.yaml"), "w") as f:
            json.dump(cfg, f)
        fronts["levee"] = (port, procs.start(pin("0") + [args.levee, "-c", os.path.join(procs.dir, "levee.yaml")],
                                             "levee"))
        port = free_port()
        with open(os.path.join(procs.dir, "haproxy.cfg"), "w") as f:
            f.write(f"""global
  nbthread 1
  maxconn {n + 100}
defaults
  mode http
  timeout connect 1s
  timeout client 10m
  timeout server 30s
  timeout http-keep-alive 10m
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:{be}
""")
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        fronts["haproxy"] = (port, procs.start(pin("0") + [haproxy, "-f", os.path.join(procs.dir, "haproxy.cfg")],
                                               "haproxy"))
        port = free_port()
        d = os.path.join(procs.dir, "nginx")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "px.conf"), "w") as f:
            f.write(f"""daemon off; master_process off; worker_processes 1; worker_rlimit_nofile {2 * n + 200};
pid {d}/px.pid; error_log {d}/px.err;
events {{ worker_connections {2 * n + 100}; }}
http {{ access_log off; keepalive_requests 1000000; keepalive_timeout 10m;
  upstream be {{ server 127.0.0.1:{be}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://be; proxy_http_version 1.1;
    proxy_set_header Connection ""; }} }} }}
""")
        fronts["nginx"] = (port, procs.start(pin("0") + ["nginx", "-p", d, "-c", os.path.join(d, "px.conf")], "nginx"))
        for name, (port, p) in fronts.items():
            try:
                wait_port(port)
            except RuntimeError:
                sys.exit(f"{name} did not start: " + open(os.path.join(procs.dir, name + ".log")).read()[-2000:])
        for name, (port, p) in fronts.items():
            for s in open_idle(port, 10):  # the backend connection, pools and lazily built state
                s.close()
            time.sleep(1)
            before = rss_kib(p.pid)
            socks = open_idle(port, n, request=False)
            time.sleep(3)
            silent = rss_kib(p.pid)
            for s in socks:
                s.close()
            time.sleep(1)
            socks = open_idle(port, n)
            time.sleep(3)
            after = rss_kib(p.pid)
            results[name] = {"before_kib": before, "silent_per_conn": (silent - before) * 1024 / n,
                             "after_kib": after, "bytes_per_conn": (after - before) * 1024 / n}
            for s in socks:
                s.close()
    finally:
        procs.stop()
    print(f"idle connections: {n} keep-alive client connections, one request each, then idle 3 s; one worker each")
    print(f"machine: {machine()}")
    print("never sent a request: connected and silent; after one request: one GET answered, then idle")
    print(f"{'front':>8} {'RSS before':>11} {'never sent a request':>21} {'vs haproxy':>11} "
          f"{'RSS after':>10} {'after one request':>18} {'vs haproxy':>11}")
    base = results["haproxy"]
    for name, r in results.items():
        print(f"{name:>8} {r['before_kib'] / 1024:7.1f} MiB {r['silent_per_conn']:15.0f} B/conn "
              f"{r['silent_per_conn'] / base['silent_per_conn']:11.2f} {r['after_kib'] / 1024:6.1f} MiB "
              f"{r['bytes_per_conn']:12.0f} B/conn {r['bytes_per_conn'] / base['bytes_per_conn']:11.2f}")


if __name__ == "__main__":
    main()
