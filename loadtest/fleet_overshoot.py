#!/usr/bin/env python3
"""Fleet quotas through Redis, measured with real processes (run by hand;
figures in docs/benchmarks.md, "Fleet quotas").

Three levee instances in front of one backend share a Redis on loopback.
One tenant offers 5x its quota through all three while a second one keeps
the backend overloaded (so quotas are enforced). For each sync interval:
the tenant's admitted CPU summed over the instances, as a share of its
quota; Redis commands per second per instance; the CPU of the sync thread
(levee-quota) against the whole process. Then the fallback switch time
after Redis is killed.

    cmake --build --preset release
    python3 loadtest/fleet_overshoot.py [--runs 3] [--intervals 50,100,200,500,1000,2000] [--seconds 12]

Uses the integration tests' harness (the same processes and helpers).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import test_fleet as tf  # noqa: E402
from harness import Backend, wait_until  # noqa: E402


class Scope:
    """What a TestCase gives the harness: cleanups, run in reverse."""

    def __init__(self):
        self.cleanups = []

    def addCleanup(self, fn, *a, **kw):  # noqa: N802 - the harness's name
        self.cleanups.append((fn, a, kw))

    def close(self):
        for fn, a, kw in reversed(self.cleanups):
            try:
                fn(*a, **kw)
            except Exception:  # noqa: BLE001 - tear down what can be
                pass


def cpu_ns(pid, thread_name=None):
    """CPU time (ns, the scheduler's own accounting) of a process's threads,
    or of its thread with that name."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            if thread_name and name != thread_name:
                continue
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            continue
    return total


def one_run(interval_ms, seconds):
    s = Scope()
    try:
        be = Backend(s, workers=9, service="fixed:40ms")
        r = tf.Redis(s)
        cfg = tf.redis_at(r, timeout=f"{min(100, interval_ms)}ms")
        fleet = [tf.fleet_levee(s, be, cfg, interval=f"{interval_ms}ms",
                                member_ttl=f"{max(2000, 3 * interval_ms)}ms") for _ in range(3)]
        wait_until(lambda: all(tf.state(lv) == "synced" and lv.metric("levee_quota_fleet_size") == 3 for lv in fleet),
                   what="fleet synced")
        cmds0 = [lv.metric("levee_quota_sync_commands_total") for lv in fleet]
        errs0 = sum(lv.metric("levee_quota_sync_errors_total") for lv in fleet)
        cpu0 = [(cpu_ns(lv.proc.p.pid), cpu_ns(lv.proc.p.pid, "levee-quota")) for lv in fleet]
        t0 = time.monotonic()
        loads = [tf.start_loadgen(lv.port, seconds, tf.HEAVY_RATE + tf.LIGHT_RATE, tf.CLASSES, warmup=2)
                 for lv in fleet]
        results = [tf.finish_loadgen(h) for h in loads]
        dt = time.monotonic() - t0
        cmds = [(lv.metric("levee_quota_sync_commands_total") - c) / dt for lv, c in zip(fleet, cmds0)]
        cpu = [(cpu_ns(lv.proc.p.pid) - a, cpu_ns(lv.proc.p.pid, "levee-quota") - b) for lv, (a, b) in zip(fleet, cpu0)]
        lat = [lv.metric("levee_quota_sync_latency_seconds_sum") / max(1, lv.metric("levee_quota_sync_latency_seconds_count"))
               for lv in fleet]
        return {
            "share": tf.heavy_cpu(results) / tf.HEAVY_QUOTA,
            "sync_errors": sum(lv.metric("levee_quota_sync_errors_total") for lv in fleet) - errs0,
            "timeouts": sum(tf.by_class(x)["heavy"]["timeouts"] for x in results),
            "cmds_per_s": statistics.mean(cmds),
            "sync_cpu_share": sum(b for _, b in cpu) / max(1, sum(a for a, _ in cpu)),
            "sync_cpu_ms_per_s": sum(b for _, b in cpu) / 1e6 / dt / 3,
            "latency_ms": 1000 * statistics.mean(lat),
        }
    finally:
        s.close()


def switch_time():
    s = Scope()
    try:
        be = Backend(s)
        r = tf.Redis(s)
        fleet = [tf.fleet_levee(s, be, tf.redis_at(r)) for _ in range(3)]
        wait_until(lambda: all(tf.state(lv) == "synced" for lv in fleet), what="fleet synced")
        t0 = time.monotonic()
        r.kill()
        wait_until(lambda: all(tf.state(lv) == "fallback" for lv in fleet), interval=0.002, what="fallback")
        return time.monotonic() - t0
    finally:
        s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--intervals", default="50,100,200,500,1000,2000")
    ap.add_argument("--seconds", type=int, default=12)
    a = ap.parse_args()
    print("| sync interval | admitted / quota (mean, min-max) | Redis commands/s per instance "
          "| sync RTT ms | sync thread CPU ms/s | share of levee CPU | failed syncs, client timeouts |")
    print("|---|---|---|---|---|---|---|")
    for iv in [int(x) for x in a.intervals.split(",")]:
        runs = [one_run(iv, a.seconds) for _ in range(a.runs)]
        shares = [x["share"] for x in runs]
        print(f"| {iv} ms | {statistics.mean(shares):.3f} ({min(shares):.3f}-{max(shares):.3f}) "
              f"| {statistics.mean(x['cmds_per_s'] for x in runs):.0f} "
              f"| {statistics.mean(x['latency_ms'] for x in runs):.2f} "
              f"| {statistics.mean(x['sync_cpu_ms_per_s'] for x in runs):.2f} "
              f"| {100 * statistics.mean(x['sync_cpu_share'] for x in runs):.2f}% "
              f"| {sum(x['sync_errors'] for x in runs):.0f}, {sum(x['timeouts'] for x in runs)} |", flush=True)
    sw = [switch_time() for _ in range(5)]
    print(f"\nfallback switch after Redis is killed (interval 200 ms, timeout 100 ms), 5 runs: "
          f"median {1000 * statistics.median(sw):.0f} ms, max {1000 * max(sw):.0f} ms")


if __name__ == "__main__":
    main()
