#!/usr/bin/env python3
"""The batch-flood benchmark (issue 6).

    python3 loadtest/batch_flood.py [--seconds 15] [--out loadtest/results/batch-flood]

One backend (10 workers x 10 ms), one levee with two listeners: an
interactive one (CRITICAL traffic at 0.5x capacity) and a batch one, hit by
a flood opening up to 3000 connections at 3x capacity. Run twice: with the
batch listener in `mode: batch` (the fuse: 4 upstream connections) and in
`mode: normal` (the flood is ordinary traffic with the default criticality).
Reports interactive success and p99, what the backend saw (its peak
connection count), and levee's RSS and CPU per 1,000 idle keep-alive
connections.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import BUILD, Procs, free_port, machine, measure_capacity, pin, start_backend, wait_port  # noqa: E402


def proc_stats(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    ticks = int(parts[11]) + int(parts[12])
    return rss, ticks / os.sysconf("SC_CLK_TCK")


def loadgen(port, phases, cls, out, max_conns):
    args = pin("1") + [os.path.join(BUILD, "levee-loadgen"), "--target", f"127.0.0.1:{port}", "--phases", phases,
                       "--warmup", "3s", "--poisson", "--max-conns", str(max_conns), "--class", cls, "--json", out]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def run(mode, seconds, out_dir):
    procs = Procs()
    try:
        b = {"workers": 10, "service": "fixed:10ms", "orca": "text", "burn": False, "warmup_seconds": 0,
             "warmup_factor": 1}
        be = free_port()
        start_backend(procs, be, b, 0)
        capacity = measure_capacity([be], 10, 2)
        procs.stop()
        procs = Procs()
        start_backend(procs, be, b, 0)
        ip, bp, ap = free_port(), free_port(), free_port()
        cfg = {"admin": {"address": "127.0.0.1", "port": ap}, "workers": 1, "access_log": {"enabled": False},
               "listeners": [{"name": "interactive", "address": "127.0.0.1", "port": ip,
                              "routes": [{"cluster": "app", "timeout": "2s"}]},
                             {"name": "batch", "address": "127.0.0.1", "port": bp, "mode": mode,
                              "max_connections": 20000, "fuse": {"connections_per_endpoint": 4, "queue": 4096,
                                                                "queue_timeout": "1s"},
                              "routes": [{"cluster": "app", "timeout": "2s"}]}],
               "clusters": [{"name": "app", "endpoints": [f"127.0.0.1:{be}"], "concurrency": {"limit": 10}}]}
        path = os.path.join(procs.dir, "levee.yaml")
        with open(path, "w") as f:
            json.dump(cfg, f)
        lv = procs.start(pin("0") + [os.path.join(BUILD, "levee"), "-c", path], "levee")
        wait_port(ip)
        wait_port(bp)
        import urllib.request
        urllib.request.urlopen(f"http://127.0.0.1:{be}/_admin/reset").read()
        total = seconds + 3
        inter = loadgen(ip, f"{total}s@{0.5 * capacity:.0f}", "name=interactive,criticality=CRITICAL,deadline=1s",
                        os.path.join(out_dir, f"{mode}-interactive.json"), 2000)
        flood = loadgen(bp, f"{total}s@{3 * capacity:.0f}", "name=batch,deadline=2s",
                        os.path.join(out_dir, f"{mode}-batch.json"), 3000)
        rss0, cpu0 = proc_stats(lv.pid)
        t0 = time.monotonic()
        inter.wait()
        flood.wait()
        rss1, cpu1 = proc_stats(lv.pid)
        cpu_share = (cpu1 - cpu0) / (time.monotonic() - t0)
        stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{be}/_admin/stats").read())
        with open(os.path.join(out_dir, f"{mode}-interactive.json")) as f:
            i = json.load(f)["total"]
        with open(os.path.join(out_dir, f"{mode}-batch.json")) as f:
            bt = json.load(f)["total"]
        return {"mode": mode, "capacity": capacity, "interactive_success": i["success_rate"],
                "interactive_p99_ms": i["ok_latency"]["p99_ms"], "interactive_p50_ms": i["ok_latency"]["p50_ms"],
                "batch_goodput": bt["goodput"], "batch_rejected": bt["rejected"], "batch_timeouts": bt["timeouts"],
                "backend_max_connections": stats["max_connections"] - 1,  # minus this stats query
                "levee_rss_mib": rss1 / 1024, "levee_cpu": cpu_share}
    finally:
        procs.stop()


def idle_cost(n):
    """levee's RSS and CPU per 1,000 idle keep-alive connections."""
    procs = Procs()
    socks = []
    try:
        be = free_port()
        start_backend(procs, be, {"workers": 10, "service": "fixed:1ms", "orca": "text", "burn": False,
                                  "warmup_seconds": 0, "warmup_factor": 1}, 0)
        lp, ap = free_port(), free_port()
        path = os.path.join(procs.dir, "levee.yaml")
        with open(path, "w") as f:
            json.dump({"admin": {"address": "127.0.0.1", "port": ap}, "workers": 1, "access_log": {"enabled": False},
                       "listeners": [{"name": "idle", "address": "127.0.0.1", "port": lp, "max_connections": 4 * n,
                                      "idle_timeout": "10m", "routes": [{"cluster": "app"}]}],
                       "clusters": [{"name": "app", "endpoints": [f"127.0.0.1:{be}"]}]}, f)
        lv = procs.start(pin("0") + [os.path.join(BUILD, "levee"), "-c", path], "levee")
        wait_port(lp)
        time.sleep(0.5)
        rss0, _ = proc_stats(lv.pid)
        for _ in range(n):
            # One at a time: this measures idle connections, not a burst.
            s = socket.create_connection(("127.0.0.1", lp))
            s.sendall(b"GET / HTTP/1.1\r\nHost: idle\r\n\r\n")
            data = b""
            while b"\r\n\r\n" not in data or not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    raise RuntimeError("levee closed an idle-cost connection")
                data += chunk
            socks.append(s)
        rss1, cpu1 = proc_stats(lv.pid)
        time.sleep(10)
        rss2, cpu2 = proc_stats(lv.pid)
        return {"connections": n, "rss_per_1000_kib": (rss1 - rss0) * 1000 / n,
                "idle_cpu_per_1000": (cpu2 - cpu1) / 10 * 1000 / n}
    finally:
        for s in socks:
            s.close()
        procs.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "batch-flood"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = [run("batch", args.seconds, args.out), run("normal", args.seconds, args.out)]
    idle = idle_cost(5000)
    print(f"batch flood: interactive 0.5x capacity beside a batch flood at 3x, {args.seconds}s; machine {machine()}")
    print(f"{'batch listener':>15} {'inter. ok':>9} {'inter. p50':>10} {'inter. p99':>10} {'batch ok/s':>10} "
          f"{'backend conns':>13} {'levee RSS':>9} {'levee CPU':>9}")
    for r in rows:
        print(f"{'mode: ' + r['mode']:>15} {100 * r['interactive_success']:8.2f}% {r['interactive_p50_ms']:8.1f}ms "
              f"{r['interactive_p99_ms']:8.1f}ms {r['batch_goodput']:10.0f} {r['backend_max_connections']:13d} "
              f"{r['levee_rss_mib']:7.1f}MiB {100 * r['levee_cpu']:8.1f}%")
    print(f"idle keep-alive connections: {idle['rss_per_1000_kib']:.0f} KiB and "
          f"{100 * idle['idle_cpu_per_1000']:.3f}% of a CPU per 1,000 (measured with {idle['connections']})")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"runs": rows, "idle": idle, "machine": machine(), "command": " ".join(sys.argv)}, f, indent=1)


if __name__ == "__main__":
    main()
