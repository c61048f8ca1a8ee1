#!/usr/bin/env python3
"""The proxy-overhead benchmark: the same small-response workload (wrk,
keep-alive, 50 connections) directly against a backend, through levee,
through HAProxy and through nginx, one worker each, in one run, in two
pairs:

  logs off   levee, HAProxy and nginx with no access log;
  logs on    what users run: levee with its shipped defaults (access log
             on, every request, to a file), HAProxy with `option httplog`
             logging to a file (stdout redirected), nginx with a buffered
             `access_log` to a file (buffer=64k flush=1s).

    python3 loadtest/overhead.py [--seconds 10] [--repeat 5] [--connections 50] [--only levee,haproxy]
                                 [--baseline OTHER_LEVEE_BINARY]

The backend is nginx answering `return 200 "ok"` (the cheapest server at
hand, so it is not the bottleneck). On a 2+ CPU machine every proxy gets
CPU 0 to itself (all of its threads) and wrk and the backend share CPU 1;
every proxy sees the same conditions. Each front runs `--repeat` times,
interleaved; medians are printed with ratios to HAProxy in the same pair.
levee runs with its shipped defaults (the only settings given are its
ports, the backend and, for the logs-off pair, `access_log.enabled:
false`).
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
from run import BUILD, Procs, free_port, machine, pin, start_static_backend, wait_port  # noqa: E402


def wrk(port, seconds, conns):
    out = subprocess.run(pin("1") + ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency",
                                     f"http://127.0.0.1:{port}/"], capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))

    def lat(p):
        m = re.search(rf"\s{p}%\s+([0-9.]+)(us|ms|s)", out)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {"rps": rps, "p50_ms": lat(50), "p99_ms": lat(99), "non2xx": int(non2xx.group(1)) if non2xx else 0}


def haproxy_cfg(port, be, log):
    logging = """global
  nbthread 1
  maxconn 4000
  log stdout format raw local0
defaults
  mode http
  log global
  option httplog
""" if log else """global
  nbthread 1
  maxconn 4000
defaults
  mode http
"""
    return logging + f"""  timeout connect 1s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:{be}
"""


def nginx_cfg(d, port, be, log):
    access = f"access_log {d}/access.log combined buffer=64k flush=1s;" if log else "access_log off;"
    return f"""daemon off; worker_processes 1; pid {d}/px.pid; error_log {d}/px.err;
events {{ worker_connections 4096; }}
http {{ {access} keepalive_requests 1000000;
  upstream be {{ server 127.0.0.1:{be}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
"""


def levee_cfg(port, admin, be, access_log):
    cfg = {"admin": {"address": "127.0.0.1", "port": admin}, "workers": 1,
           "listeners": [{"name": "bench", "address": "127.0.0.1", "port": port, "routes": [{"cluster": "app"}]}],
           "clusters": [{"name": "app", "endpoints": [f"127.0.0.1:{be}"]}]}
    cfg["access_log"] = {"path": access_log} if access_log else {"enabled": False}
    return cfg


PAIRS = {"logs off": ("levee", "haproxy", "nginx"), "logs on": ("levee-log", "haproxy-log", "nginx-log")}


def start_fronts(procs, be, want, haproxy_conf, nginx_conf):
    """HAProxy and nginx, each with logs off and on, pinned to CPU 0 in
    front of the backend `be`; configs from haproxy_conf(port, be, log) and
    nginx_conf(dir, port, be, log). Returns {name: port} of those started
    (all, or those in `want`)."""
    ports = {}
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    for name, log in (("haproxy", False), ("haproxy-log", True)):
        if want and name not in want:
            continue
        port = free_port()
        cfg = os.path.join(procs.dir, name + ".cfg")
        with open(cfg, "w") as f:
            f.write(haproxy_conf(port, be, log))
        out = open(os.path.join(procs.dir, name + "-access.log"), "w")
        procs.items.append((name, subprocess.Popen(pin("0") + [haproxy, "-f", cfg], stdout=out,
                                                   stderr=subprocess.DEVNULL, start_new_session=True)))
        ports[name] = port
    for name, log in (("nginx", False), ("nginx-log", True)):
        if want and name not in want:
            continue
        port = free_port()
        d = os.path.join(procs.dir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "px.conf"), "w") as f:
            f.write(nginx_conf(d, port, be, log))
        procs.start(pin("0") + ["nginx", "-p", d, "-c", os.path.join(d, "px.conf")], name)
        ports[name] = port
    return ports


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", help="comma-separated fronts to run (direct always runs)")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"), help="the levee binary to measure")
    ap.add_argument("--baseline", help="a second levee binary (e.g. a build of main), measured as levee-base "
                                       "interleaved with levee under the same conditions (before/after a change)")
    ap.add_argument("--json")
    args = ap.parse_args()
    for tool in ("wrk", "nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is needed (scripts/deps.sh --test installs it)")
    procs = Procs()
    want = set(args.only.split(",")) if args.only else None
    try:
        be = start_static_backend(procs)
        ports = {"direct": be}
        ports.update(start_fronts(procs, be, want, haproxy_cfg, nginx_cfg))
        levees = [("levee", None, args.levee), ("levee-log", os.path.join(procs.dir, "levee-access.log"), args.levee)]
        if args.baseline:
            levees.append(("levee-base", None, args.baseline))
        for name, log, binary in levees:
            if want and name not in want and name != "levee-base":
                continue
            port, admin = free_port(), free_port()
            path = os.path.join(procs.dir, name + ".yaml")
            with open(path, "w") as f:
                json.dump(levee_cfg(port, admin, be, log), f)
            procs.start(pin("0") + [binary, "-c", path], name)
            ports[name] = port
        # The same levee shedding every request at gate 1 (thresholds of 0):
        # the full cost of a rejection (parse, classify, answer) against a
        # proxied request's.
        if not want or "levee-shed" in want:
            sp, sa = free_port(), free_port()
            cfg = levee_cfg(sp, sa, be, None)
            cfg["self_protection"] = {"time_constant": "10ms", "thresholds": {
                "SHEDDABLE": 0, "SHEDDABLE_PLUS": 0, "CRITICAL": 0, "CRITICAL_PLUS": 0}}
            # wrk's keep-alive connections are refused again and again: with
            # the listener's shed_backoff they would be read less often
            # (loadtest/shed_flood.py measures that); here the point is what
            # one rejection costs.
            cfg["listeners"][0]["shed_backoff"] = "0s"
            with open(os.path.join(procs.dir, "levee-shed.yaml"), "w") as f:
                json.dump(cfg, f)
            procs.start(pin("0") + [args.levee, "-c", os.path.join(procs.dir, "levee-shed.yaml")],
                        "levee-shed")
            ports["levee-shed"] = sp
        for p in ports.values():
            wait_port(p)
        for p in ports.values():  # warm connection pools
            wrk(p, 1, args.connections)
        results = {k: [] for k in ports}
        for _ in range(args.repeat):
            for name, port in ports.items():
                results[name].append(wrk(port, args.seconds, args.connections))
                time.sleep(0.5)
    finally:
        procs.stop()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "p50_ms", "p99_ms")} for k, v in results.items()}
    for k, v in results.items():
        med[k]["non2xx"] = sum(r["non2xx"] for r in v)
    print(f"overhead benchmark: wrk -t1 -c{args.connections} -d{args.seconds}s, {args.repeat} runs each, interleaved, medians")
    print(f"machine: {machine()}")
    print(f"{'front':>12} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'req/s vs haproxy':>17} {'p99 vs haproxy':>15} {'non-2xx':>8}")
    for pair, (lv, hp, ng) in PAIRS.items():
        if hp not in med:
            continue
        base = med[hp]
        print(f"-- {pair}")
        for k in ([] if pair != "logs off" else ["direct"]) + [lv] + (["levee-base"] if pair == "logs off" else []) + [hp, ng]:
            if k not in med:
                continue
            v = med[k]
            print(f"{k:>12} {v['rps']:10.0f} {v['p50_ms']:8.3f} {v['p99_ms']:8.3f} {v['rps'] / base['rps']:17.3f} "
                  f"{v['p99_ms'] / base['p99_ms']:15.3f} {v['non2xx']:8d}")
    if "levee" in med and "levee-base" in med:
        lv, base = med["levee"], med["levee-base"]
        print(f"levee / levee-base (--baseline): req/s {lv['rps'] / base['rps']:.3f}, p50 {lv['p50_ms'] / base['p50_ms']:.3f}, "
              f"p99 {lv['p99_ms'] / base['p99_ms']:.3f}")
    if "levee" in med and "levee-shed" in med:
        lv, shed = med["levee"]["rps"], med["levee-shed"]["rps"]
        print(f"levee-shed answers every request itself (503 executor_overload): {shed:.0f} rejections/s against "
              f"{lv:.0f} proxied/s on the same core: a rejection costs at most {lv / shed:.2f}x a proxied request "
              f"(at most: wrk, on the other core, may be what limits the rejection rate)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians": med, "runs": results, "machine": machine(), "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
