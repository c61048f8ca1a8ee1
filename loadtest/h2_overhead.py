#!/usr/bin/env python3
"""The HTTP/2 proxy-overhead benchmark (issue 17): h2load, cleartext with
prior knowledge (h2c), many streams on few connections, small responses,
through levee, HAProxy 2.6 and nginx 1.22 as HTTP/2 proxies in front of the
same HTTP/1.1 backend, one worker each, in one run, in two pairs as in
overhead.py:

  logs off   no access log on any front;
  logs on    what users run: levee with its shipped defaults (access log
             on, every request, to a file), HAProxy `option httplog` to a
             file, nginx buffered `access_log` (buffer=64k flush=1s).

    python3 loadtest/h2_overhead.py [--seconds 10] [--repeat 3] [--connections 8] [--streams 32]
                                    [--only levee,haproxy,...] [--json OUT]

Fronts: levee (`http2: {enabled: true}`, shipped defaults otherwise),
HAProxy (`bind ... proto h2`, HTTP/1.1 keep-alive to the backend, one
thread), nginx (`listen ... http2`, `proxy_pass` to a keep-alive upstream,
one worker), and levee-shed: the same levee with every gate-1 threshold at
0, so that every stream is answered 503 at arrival without reaching the
backend (the cost of a rejected stream). The backend is overhead.py's:
nginx `return 200 "ok"` on CPU 1, upstream HTTP/1.1 for every front.

CPUs as in overhead.py: each front on CPU 0, h2load (one thread) and the
backend on CPU 1. Each front runs `--repeat` times, interleaved; medians
are printed with ratios to HAProxy in the same pair. h2load reports only
min/max/mean/sd of the request time, so p50/p99 come from its `--log-file`
(one line per request: start, status, microseconds to the end of the
response).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import haproxy_cfg, levee_cfg, nginx_cfg, start_fronts  # noqa: E402
from run import BUILD, Procs, free_port, machine, pin, start_static_backend, wait_port  # noqa: E402


def h2load(port, seconds, conns, streams, log_path):
    cmd = pin("1") + ["h2load", "-t1", f"-c{conns}", f"-m{streams}", f"-D{seconds}",
                      f"--log-file={log_path}", f"http://127.0.0.1:{port}/"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    proto = re.search(r"Application protocol:\s*(\S+)", out)
    if not proto or proto.group(1) != "h2c":
        raise RuntimeError(f"h2load did not speak h2c to port {port}:\n{out}")
    rps = float(re.search(r"finished in [0-9.]+\w+, ([0-9.]+) req/s", out).group(1))
    req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                    r"(\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)

    def ms(s):  # h2load prints 1.23ms, 456us, 1.2s
        m = re.match(r"([0-9.]+)(us|ms|s)", s)
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    t = re.search(r"time for request:\s+(\S+)\s+(\S+)\s+(\S+)", out)
    durations = []
    with open(log_path) as f:
        for line in f:
            cols = line.split("\t")
            if len(cols) >= 3 and cols[1] != "-1":
                durations.append(int(cols[2]))
    os.unlink(log_path)
    durations.sort()

    def pct(p):
        return durations[min(len(durations) - 1, int(p / 100 * len(durations)))] / 1000 if durations else float("nan")
    return {"rps": rps, "p50_ms": pct(50), "p99_ms": pct(99), "mean_ms": ms(t.group(3)), "max_ms": ms(t.group(2)),
            "ok2xx": int(codes.group(1)), "non2xx": int(codes.group(2)) + int(codes.group(3)) + int(codes.group(4)),
            "errors": int(req.group(6)) + int(req.group(7))}  # h2load's "failed" also counts non-2xx answers


def h2_haproxy_cfg(port, be, log):
    cfg = haproxy_cfg(port, be, log)
    bind = f"bind 127.0.0.1:{port}\n"
    assert bind in cfg
    return cfg.replace(bind, f"bind 127.0.0.1:{port} proto h2\n")


def h2_nginx_cfg(d, port, be, log):
    cfg = nginx_cfg(d, port, be, log)
    listen = f"listen 127.0.0.1:{port};"
    assert listen in cfg
    # nginx's default http2_max_concurrent_streams (128) is above -m. Its
    # idle upstream pool must hold every stream in flight (-c x -m), or
    # each request beyond overhead.py's 64 opens and closes a connection.
    assert "keepalive 64;" in cfg
    return cfg.replace(listen, f"listen 127.0.0.1:{port} http2;").replace("keepalive 64;", "keepalive 1024;")


def h2_levee_cfg(port, admin, be, access_log):
    cfg = levee_cfg(port, admin, be, access_log)
    cfg["listeners"][0]["http2"] = {"enabled": True}  # max_concurrent_streams 100 by default, above -m
    return cfg


PAIRS = {"logs off": ("levee", "haproxy", "nginx"), "logs on": ("levee-log", "haproxy-log", "nginx-log")}
METRICS = ("rps", "p50_ms", "p99_ms", "mean_ms", "max_ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--streams", type=int, default=32, help="h2load -m: concurrent streams per connection")
    ap.add_argument("--only", help="comma-separated fronts to run (levee, levee-log, haproxy, haproxy-log, "
                                   "nginx, nginx-log, levee-shed)")
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"), help="the levee binary to measure")
    ap.add_argument("--json")
    args = ap.parse_args()
    for tool in ("h2load", "nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is needed (scripts/deps.sh --test installs it; h2load is in nghttp2-client)")
    procs = Procs()
    want = set(args.only.split(",")) if args.only else None
    try:
        be = start_static_backend(procs)
        ports = start_fronts(procs, be, want, h2_haproxy_cfg, h2_nginx_cfg)
        for name, log in (("levee", None), ("levee-log", os.path.join(procs.dir, "levee-access.log"))):
            if want and name not in want:
                continue
            port, admin = free_port(), free_port()
            path = os.path.join(procs.dir, name + ".yaml")
            with open(path, "w") as f:
                json.dump(h2_levee_cfg(port, admin, be, log), f)
            procs.start(pin("0") + [args.levee, "-c", path], name)
            ports[name] = port
        # Every stream shed at gate 1 (thresholds of 0): parse the HEADERS,
        # classify, answer 503 in a header block; the backend is never asked.
        if not want or "levee-shed" in want:
            sp, sa = free_port(), free_port()
            cfg = h2_levee_cfg(sp, sa, be, None)
            cfg["self_protection"] = {"time_constant": "10ms", "thresholds": {
                "SHEDDABLE": 0, "SHEDDABLE_PLUS": 0, "CRITICAL": 0, "CRITICAL_PLUS": 0}}
            cfg["listeners"][0]["shed_backoff"] = "0s"  # as in overhead.py: the cost of one rejection
            path = os.path.join(procs.dir, "levee-shed.yaml")
            with open(path, "w") as f:
                json.dump(cfg, f)
            procs.start(pin("0") + [args.levee, "-c", path], "levee-shed")
            ports["levee-shed"] = sp
        for p in ports.values():
            wait_port(p)
        log_path = os.path.join(procs.dir, "h2load.log")
        for p in ports.values():  # warm connection pools
            h2load(p, 1, args.connections, args.streams, log_path)
        results = {k: [] for k in ports}
        for _ in range(args.repeat):
            for name, port in ports.items():
                results[name].append(h2load(port, args.seconds, args.connections, args.streams, log_path))
                time.sleep(0.5)
    finally:
        procs.stop()
    med = {k: {m: statistics.median(r[m] for r in v) for m in METRICS} for k, v in results.items()}
    for k, v in results.items():
        for c in ("ok2xx", "non2xx", "errors"):
            med[k][c] = sum(r[c] for r in v)
    print(f"HTTP/2 overhead benchmark: h2load -t1 -c{args.connections} -m{args.streams} -D{args.seconds} (h2c), "
          f"{args.repeat} runs each, interleaved, medians")
    print(f"machine: {machine()}")
    print(f"{'front':>12} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'max ms':>8} "
          f"{'req/s vs haproxy':>17} {'p99 vs haproxy':>15} {'non-2xx':>8} {'errors':>7}")
    for pair, (lv, hp, ng) in PAIRS.items():
        rows = [k for k in (lv, hp, ng) if k in med]
        if not rows:
            continue
        print(f"-- {pair}")
        for k in rows:
            v = med[k]
            base = med.get(hp)
            vs = (f"{v['rps'] / base['rps']:17.3f} {v['p99_ms'] / base['p99_ms']:15.3f}" if base
                  else f"{'':>17} {'':>15}")
            print(f"{k:>12} {v['rps']:10.0f} {v['p50_ms']:8.3f} {v['p99_ms']:8.3f} {v['mean_ms']:8.3f} "
                  f"{v['max_ms']:8.3f} {vs} {v['non2xx']:8d} {v['errors']:7d}")
        if lv in med and ng in med:
            print(f"   {lv} / {ng}: req/s {med[lv]['rps'] / med[ng]['rps']:.3f}, "
                  f"p99 {med[lv]['p99_ms'] / med[ng]['p99_ms']:.3f}")
    if "levee-shed" in med:
        shed = med["levee-shed"]
        print(f"  levee-shed {shed['rps']:10.0f} rejections/s, p99 {shed['p99_ms']:.3f} ms, "
              f"{shed['ok2xx']} of them 2xx (must be 0)")
        for lv in ("levee", "levee-log"):
            if lv in med:
                print(f"  {lv} proxied {med[lv]['rps']:.0f}/s: a rejected stream costs at most "
                      f"{med[lv]['rps'] / shed['rps']:.2f}x a proxied one (at most: h2load, on the other core, "
                      f"may be what limits the rejection rate)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians": med, "runs": results, "machine": machine(), "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
