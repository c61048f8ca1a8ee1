#!/usr/bin/env python3
"""levee, HAProxy and nginx side by side in front of the same misbehaving
upstream (issue 12; docs/security.md, "Side by side").

The upstream is tests/integration/misbehaving.py: each path names a way to
answer badly (stray bytes after the body, a body after HEAD or 204, a 101
nobody asked for, two lengths, bare LF, truncated bodies...). Every front
runs one worker with pooled keep-alive upstream connections. For each case:
one normal request (so that a pooled connection exists), the bad one (its
status at the client, or "cut" when the answer was cut off), a pause for
stray bytes to arrive while the connection sits in the pool, then three
normal requests from new clients, each of which must get its own answer.
"LEAK" means one of them got another request's answer or bytes: a desync.
(The status is what Python's http.client reports: a forwarded 103 Early
Hints shows as 103.)

    python3 loadtest/hostile_compare.py
"""
import http.client
import os
import shutil
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
from misbehaving import Misbehaving  # noqa: E402
from run import BUILD, Procs, free_port, wait_port  # noqa: E402

CASES = [("extra-now", "GET"), ("extra-later", "GET"), ("head-body", "HEAD"), ("no-content-body", "GET"),
         ("not-modified-body", "GET"), ("switch", "GET"), ("garbage", "GET"), ("dup-length", "GET"),
         ("length-and-chunked", "GET"), ("http10-chunked", "GET"), ("bad-status", "GET"), ("bare-lf", "GET"),
         ("space-before-colon", "GET"), ("huge-header", "GET"), ("bad-chunk", "GET"),
         ("chunked-then-extra", "GET"), ("truncated", "GET"), ("until-close", "GET"),
         ("informational", "GET"), ("status-out-of-range", "GET")]


class Cleanups:
    def __init__(self):
        self.fns = []

    def addCleanup(self, f, *a):
        self.fns.append((f, a))

    def run(self):
        for f, a in reversed(self.fns):
            f(*a)


def request(port, method, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, r.read()
    except Exception:  # noqa: BLE001 - a cut-off answer
        return None, b""
    finally:
        c.close()


def own_answers(port):
    for _ in range(3):
        rid = uuid.uuid4().hex[:8]
        status, body = request(port, "GET", f"/ok/{rid}")
        if (status, body) != (200, rid.encode()):
            return False
    return True


def main():
    for tool in ("nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is needed (scripts/deps.sh --test installs it)")
    procs, clean = Procs(), Cleanups()
    results = {}
    try:
        bad = Misbehaving(clean)
        fronts = {}
        port, admin = free_port(), free_port()
        path = os.path.join(procs.dir, "levee.yaml")
        with open(path, "w") as f:
            f.write(f"""{{"admin": {{"address": "127.0.0.1", "port": {admin}}}, "workers": 1,
 "listeners": [{{"name": "main", "address": "127.0.0.1", "port": {port}, "routes": [{{"cluster": "app"}}]}}],
 "clusters": [{{"name": "app", "endpoints": ["{bad.address}"], "response_timeout": "1s",
               "retry": {{"enabled": false}}}}]}}""")
        procs.start([os.path.join(BUILD, "levee"), "-c", path], "levee")
        fronts["levee"] = port
        port = free_port()
        with open(os.path.join(procs.dir, "haproxy.cfg"), "w") as f:
            f.write(f"""global
  nbthread 1
defaults
  mode http
  timeout connect 1s
  timeout client 30s
  timeout server 1s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  http-reuse always
  server s1 {bad.address}
""")
        procs.start([shutil.which("haproxy") or "/usr/sbin/haproxy", "-f", os.path.join(procs.dir, "haproxy.cfg")],
                    "haproxy")
        fronts["haproxy"] = port
        port = free_port()
        d = os.path.join(procs.dir, "nginx")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "px.conf"), "w") as f:
            f.write(f"""daemon off; worker_processes 1; pid {d}/px.pid; error_log {d}/px.err;
events {{ worker_connections 1024; }}
http {{ access_log off;
  upstream be {{ server {bad.address}; keepalive 16; }}
  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://be; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_read_timeout 1s; proxy_next_upstream off; }} }} }}
""")
        procs.start(["nginx", "-p", d, "-c", os.path.join(d, "px.conf")], "nginx")
        fronts["nginx"] = port
        for p in fronts.values():
            wait_port(p)
        for behaviour, method in CASES:
            row = {}
            for name, p in fronts.items():
                own_answers(p)  # leaves a pooled upstream connection
                status, body = request(p, method, f"/{behaviour}/{uuid.uuid4().hex[:8]}")
                time.sleep(0.1)  # stray bytes arrive while the connection sits in the pool
                ok = own_answers(p)
                row[name] = f"{status if status is not None else 'cut'}{'' if ok else ', LEAK'}"
            results[behaviour] = row
            print(behaviour, row, flush=True)
    finally:
        procs.stop()
        clean.run()
    print()
    print("| upstream answer | levee | HAProxy 2.6 | nginx 1.22 |")
    print("|---|---|---|---|")
    for behaviour, row in results.items():
        print(f"| `{behaviour}` | {row['levee']} | {row['haproxy']} | {row['nginx']} |")


if __name__ == "__main__":
    main()
