#!/usr/bin/env python3
"""Where the CPU of the overhead benchmark goes: the same workload as
overhead.py (wrk -t1 -c50 keep-alive, 3-byte answers from nginx), with the
proxy pinned to CPU 0 and wrk and the backend to CPU 1, and for each front
the busy share of each CPU (/proc/stat) and the CPU time per request of the
proxy, of wrk and of the backend (/proc/<pid>/stat), over 5 s in the middle
of each run. Logs off on both fronts.

    python3 loadtest/cpu_split.py [--rounds 3] [--levee BINARY[,BINARY...]] [--syscalls]

--syscalls: also the proxy's system calls per request over the same 5 s,
counted by `perf stat` on the kernel's syscall tracepoints (Debian
linux-perf; run as root): receives, sends, epoll_wait, epoll_ctl and all of
them. A kept-alive request needs two receives and two sends; what is above
that is the event loop's own cost.

When CPU 1 is busy all the time and CPU 0 is not, the rate is set by CPU 1:
by what wrk and the backend spend per request, which the proxy changes
through what it sends them (extra header fields to parse, packets), and a
cheaper proxy then lowers latency rather than raising the rate.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import BUILD, Procs, free_port, pin, session_cpu, start_static_backend, wait_port  # noqa: E402
import overhead  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_busy():
    """{cpu: (busy ticks, all ticks)} from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *v = line.split()
                v = [int(x) for x in v]
                out[name] = (sum(v) - v[3] - v[4], sum(v))  # less idle and iowait
    return out


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


SYSCALLS = {"recv": ("recvfrom", "recvmsg", "read"), "send": ("sendto", "sendmsg", "write", "writev"),
            "epoll_wait": ("epoll_wait", "epoll_pwait"), "epoll_ctl": ("epoll_ctl",)}


def count_syscalls(pid, seconds):
    """{kind: count} of pid's system calls (all threads) over `seconds`,
    kinds as in SYSCALLS plus "all"."""
    events = [f"syscalls:sys_enter_{n}" for names in SYSCALLS.values() for n in names] + ["raw_syscalls:sys_enter"]
    p = subprocess.run(["perf", "stat", "-x,", "-e", ",".join(events), "-p", str(pid), "--", "sleep", str(seconds)],
                       capture_output=True, text=True)
    counts = {}
    for line in p.stderr.splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].strip().isdigit():
            counts[f[2]] = int(f[0])
    if "raw_syscalls:sys_enter" not in counts:
        sys.exit("perf stat counted nothing (linux-perf installed? root?):\n" + p.stderr)
    out = {kind: sum(counts.get(f"syscalls:sys_enter_{n}", 0) for n in names) for kind, names in SYSCALLS.items()}
    out["all"] = counts["raw_syscalls:sys_enter"]
    return out


def one(front, binary, syscalls=False):
    procs = Procs()
    try:
        be = start_static_backend(procs)
        backend = procs.items[-1][1].pid  # its session: the nginx master and worker
        port = free_port()
        if front == "haproxy":
            cfg = os.path.join(procs.dir, "h.cfg")
            with open(cfg, "w") as f:
                f.write(overhead.haproxy_cfg(port, be, False))
            proxy = procs.start(pin("0") + ["haproxy", "-f", cfg], "haproxy")
        else:
            path = os.path.join(procs.dir, "levee.yaml")
            with open(path, "w") as f:
                json.dump(overhead.levee_cfg(port, free_port(), be, None), f)
            proxy = procs.start(pin("0") + [binary, "-c", path], "levee")
        wait_port(port)
        w = subprocess.Popen(pin("1") + ["wrk", "-t1", "-c50", "-d9s", f"http://127.0.0.1:{port}/"],
                             stdout=subprocess.PIPE, text=True)
        time.sleep(2)
        def spent():
            return {"proxy": session_cpu(proxy.pid), "wrk": cpu_seconds(w.pid), "backend": session_cpu(backend)}
        c0, t0 = cpu_busy(), spent()
        calls = count_syscalls(proxy.pid, 5) if syscalls else None
        if not syscalls:
            time.sleep(5)
        c1, t1 = cpu_busy(), spent()
        out = w.communicate()[0]
        rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
        r = {"rps": rps}
        for c in ("cpu0", "cpu1"):
            r[c] = (c1[c][0] - c0[c][0]) / max(1, c1[c][1] - c0[c][1])
        for k in t0:
            r[k + "_us"] = (t1[k] - t0[k]) * 1e6 / (rps * 5)
        for k, n in (calls or {}).items():
            r["sys_" + k] = n / (rps * 5)
        return r
    finally:
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"), help="one binary, or several separated by commas")
    ap.add_argument("--syscalls", action="store_true", help="the proxy's system calls per request too (perf stat)")
    args = ap.parse_args()
    fronts = [("levee" if len(args.levee.split(",")) == 1 else f"levee:{b}", b) for b in args.levee.split(",")]
    fronts.append(("haproxy", None))
    results = {name: [] for name, _ in fronts}
    for _ in range(args.rounds):  # interleaved
        for name, binary in fronts:
            results[name].append(one("haproxy" if binary is None else "levee", binary, args.syscalls))
    print(f"cpu split: wrk -t1 -c50, proxy on CPU 0, wrk and nginx on CPU 1; medians of {args.rounds} interleaved runs")
    print(f"{'front':>24} {'req/s':>8} {'CPU 0 busy':>10} {'CPU 1 busy':>10} {'proxy us/req':>12} "
          f"{'wrk us/req':>10} {'nginx us/req':>12}")
    for name, rs in results.items():
        def med(k):
            return statistics.median(r[k] for r in rs)
        print(f"{name[-24:]:>24} {med('rps'):8.0f} {100 * med('cpu0'):9.1f}% {100 * med('cpu1'):9.1f}% "
              f"{med('proxy_us'):12.1f} {med('wrk_us'):10.1f} {med('backend_us'):12.1f}")
    if args.syscalls:
        print(f"the proxy's system calls per request (perf stat), medians of {args.rounds}")
        print(f"{'front':>24} " + " ".join(f"{k:>10}" for k in [*SYSCALLS, "all"]))
        for name, rs in results.items():
            print(f"{name[-24:]:>24} " + " ".join(
                f"{statistics.median(r['sys_' + k] for r in rs):10.3f}" for k in [*SYSCALLS, "all"]))


if __name__ == "__main__":
    main()
