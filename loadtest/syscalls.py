#!/usr/bin/env python3
"""System calls per proxied request, levee against HAProxy, at saturation.

    python3 loadtest/syscalls.py [--rounds 2] [--baseline OTHER_LEVEE_BINARY]

The same set-up as overhead.py with logs off (one worker each, pinned to
CPU 0; nginx answering "ok" and wrk -t1 -c50 on CPU 1). For each front in
turn, wrk runs 8 s and `perf stat -e syscalls:sys_enter_*` counts the
front's calls over 4 s of it; the counts are divided by wrk's rate times
4 s. Needs perf (Debian linux-perf) and tracefs. Prints one line per front
and round.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import haproxy_cfg, levee_cfg  # noqa: E402
from run import BUILD, Procs, free_port, pin, start_static_backend, wait_port  # noqa: E402

CALLS = ["recvfrom", "sendto", "epoll_wait", "epoll_ctl", "clock_gettime", "timerfd_settime", "read", "write"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"))
    ap.add_argument("--baseline")
    args = ap.parse_args()
    procs = Procs()
    try:
        be = start_static_backend(procs)
        fronts = {}
        levees = [("levee", args.levee)] + ([("levee-base", args.baseline)] if args.baseline else [])
        for name, binary in levees:
            port, admin = free_port(), free_port()
            path = os.path.join(procs.dir, name + ".yaml")
            with open(path, "w") as f:
                json.dump(levee_cfg(port, admin, be, None), f)
            fronts[name] = (port, procs.start(pin("0") + [binary, "-c", path], name))
        port = free_port()
        cfg = os.path.join(procs.dir, "haproxy.cfg")
        with open(cfg, "w") as f:
            f.write(haproxy_cfg(port, be, False))
        haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
        fronts["haproxy"] = (port, procs.start(pin("0") + [haproxy, "-f", cfg], "haproxy"))
        for p, _ in fronts.values():
            wait_port(p)
        events = ",".join("syscalls:sys_enter_" + c for c in CALLS)
        print("per request: " + " ".join(CALLS))
        for _ in range(args.rounds):
            for name, (port, p) in fronts.items():
                wrk = subprocess.Popen(pin("1") + ["wrk", "-t1", "-c50", "-d8s", f"http://127.0.0.1:{port}/"],
                                       stdout=subprocess.PIPE, text=True)
                time.sleep(2)  # counted from the middle of the run
                r = subprocess.run(["perf", "stat", "-x,", "-e", events, "-p", str(p.pid), "--", "sleep", "4"],
                                   capture_output=True, text=True)
                out = wrk.communicate()[0]
                rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
                counts = {}
                for ln in r.stderr.splitlines():
                    f = ln.split(",")
                    if len(f) > 3 and "sys_enter_" in f[2]:
                        counts[f[2].split("sys_enter_")[1]] = float(f[0]) if f[0][:1].isdigit() else 0.0
                if not counts:
                    sys.exit("perf counted nothing: " + r.stderr.strip())
                print(f"{name:11} {rps:8.0f} req/s  " +
                      "  ".join(f"{c} {counts.get(c, 0.0) / (rps * 4):.3f}" for c in CALLS), flush=True)
    finally:
        procs.stop()


if __name__ == "__main__":
    main()
