#!/usr/bin/env python3
"""Critical traffic beside a flood of requests that are shed (issue 19).

One worker per proxy, on CPU 0; wrk and the backend (nginx, `return 200`)
on CPU 1. Ten keep-alive connections of CRITICAL_PLUS (wrk -c10) are
measured alone, then beside a closed-loop flood of SHEDDABLE requests on
400 connections (a second wrk -c400), which every front refuses:

  levee            shipped defaults (shed_backoff 100 ms), SHEDDABLE's
                   self-protection threshold at 0 so that every SHEDDABLE
                   request is shed (503 executor_overload)
  levee-nobackoff  the same with `shed_backoff: 0s` (off)
  haproxy          `http-request deny deny_status 503` on the same header

    python3 loadtest/shed_flood.py [--seconds 10] [--repeat 3]

Prints medians: CRITICAL_PLUS req/s alone and beside the flood (and the
share kept), its p99 beside the flood, and the flood's answers per second.
Target (issue 19): CRITICAL_PLUS keeps >= 50% of its unloaded throughput
with p99 <= 2 ms beside the flood.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import haproxy_cfg, levee_cfg  # noqa: E402
from run import BUILD, Procs, free_port, machine, pin, start_static_backend, wait_port  # noqa: E402


def wrk(port, seconds, conns, criticality):
    out = subprocess.run(pin("1") + ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency",
                                     "-H", f"x-criticality: {criticality}", f"http://127.0.0.1:{port}/"],
                         capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    m = re.search(r"\s99%\s+([0-9.]+)(us|ms|s)", out)
    p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {"rps": rps, "p99_ms": p99, "non2xx": int(non2xx.group(1)) if non2xx else 0}


def measure(port, seconds):
    alone = wrk(port, seconds, 10, "CRITICAL_PLUS")
    flood = {}
    t = threading.Thread(target=lambda: flood.update(wrk(port, seconds + 2, 400, "SHEDDABLE")))
    t.start()
    time.sleep(1)  # the flood's connections are open before the measured run starts
    beside = wrk(port, seconds, 10, "CRITICAL_PLUS")
    t.join()
    return {"alone_rps": alone["rps"], "alone_p99": alone["p99_ms"], "beside_rps": beside["rps"],
            "beside_p99": beside["p99_ms"], "beside_non2xx": beside["non2xx"], "flood_rps": flood["rps"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"))
    args = ap.parse_args()
    for tool in ("wrk", "nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is needed (scripts/deps.sh --test installs it)")
    procs = Procs()
    results = {}
    try:
        be = start_static_backend(procs)
        ports = {}
        for name, backoff in (("levee", None), ("levee-nobackoff", "0s")):
            port, admin = free_port(), free_port()
            cfg = levee_cfg(port, admin, be, os.path.join(procs.dir, name + "-access.log"))
            cfg["self_protection"] = {"thresholds": {"SHEDDABLE": 0}}
            if backoff:
                cfg["listeners"][0]["shed_backoff"] = backoff
            path = os.path.join(procs.dir, name + ".yaml")
            with open(path, "w") as f:
                json.dump(cfg, f)
            procs.start(pin("0") + [args.levee, "-c", path], name)
            ports[name] = port
        port = free_port()
        cfg = haproxy_cfg(port, be, True).replace(
            "frontend fe\n", "frontend fe\n  http-request deny deny_status 503 if { req.hdr(x-criticality) -m str SHEDDABLE }\n")
        path = os.path.join(procs.dir, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(cfg)
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        out = open(os.path.join(procs.dir, "haproxy-access.log"), "w")
        procs.items.append(("haproxy", subprocess.Popen(pin("0") + [haproxy, "-f", path], stdout=out,
                                                        stderr=subprocess.DEVNULL, start_new_session=True)))
        ports["haproxy"] = port
        for p in ports.values():
            wait_port(p)
        results = {k: [] for k in ports}
        for _ in range(args.repeat):
            for name, p in ports.items():
                results[name].append(measure(p, args.seconds))
    finally:
        procs.stop()
    print(f"shed flood: CRITICAL_PLUS wrk -t1 -c10 alone, then beside SHEDDABLE wrk -t1 -c400; "
          f"-d{args.seconds}s, {args.repeat} runs each, interleaved, medians")
    print(f"machine: {machine()}")
    print(f"{'front':>16} {'CP alone/s':>11} {'CP beside/s':>12} {'kept':>6} {'CP p99 alone':>13} "
          f"{'CP p99 beside':>14} {'flood answers/s':>16}")
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(f"{name:>16} {med['alone_rps']:11.0f} {med['beside_rps']:12.0f} "
              f"{100 * med['beside_rps'] / med['alone_rps']:5.1f}% {med['alone_p99']:10.2f} ms "
              f"{med['beside_p99']:11.2f} ms {med['flood_rps']:16.0f}")


if __name__ == "__main__":
    main()
