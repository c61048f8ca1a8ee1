#!/usr/bin/env python3
"""The overload scenario with gRPC on both sides (issue 17): gRPC clients
(python3-grpcio, asyncio) on a few channels, many calls in flight on each,
through levee to a gRPC server of fixed capacity spoken to in HTTP/2
(`protocol: http2`), at a multiple of that capacity.

    python3 loadtest/grpc_overload.py [--capacity 100] [--load 10] [--seconds 10]
                                      [--channels 4] [--json OUT]

The backend serves `--workers` calls at once, each taking workers/capacity
seconds (so `--capacity` calls/s at most); calls beyond that wait in the
server. The offered load is open-loop (Poisson arrivals) at `--load` times
the capacity, split 5% CRITICAL_PLUS, 20% CRITICAL, 25% SHEDDABLE_PLUS,
50% SHEDDABLE as in scenarios/overload.yaml (the x-criticality metadata),
each call with a 1 s deadline (grpc-timeout); calls that arrive in the
first `--warmup` seconds (the adaptive limit finding its level) are not
counted.
Printed per class: calls offered, OK (share), p50/p99 of OK calls, and the
p99 of the time to a rejection (UNAVAILABLE or RESOURCE_EXHAUSTED from
levee), which is how early the excess is turned away. levee runs with its
shipped defaults otherwise (adaptive concurrency limit, access log on).
"""
import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from concurrent import futures

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration"))
from harness import Levee, cluster, free_port  # noqa: E402

import grpc  # noqa: E402  (python3-grpcio)
import grpc.aio  # noqa: E402

# The mix of scenarios/overload.yaml.
CLASSES = [("CRITICAL_PLUS", 0.05), ("CRITICAL", 0.20), ("SHEDDABLE_PLUS", 0.25), ("SHEDDABLE", 0.50)]


class _Tc:
    """The harness's test-case interface, for use outside unittest."""

    def __init__(self):
        self.cleanups = []

    def addCleanup(self, f, *a):
        self.cleanups.append((f, a))

    def close(self):
        for f, a in reversed(self.cleanups):
            try:
                f(*a)
            except Exception:  # noqa: BLE001  best effort at exit
                pass


def start_backend(tc, capacity, workers):
    service = workers / capacity
    sem = threading.Semaphore(workers)

    def work(req, ctx):
        with sem:  # `workers` at once: a fixed capacity
            time.sleep(service)
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "bench.Svc", {"Work": grpc.unary_unary_rpc_method_handler(work, request_deserializer=None,
                                                                   response_serializer=None)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=256))
    server.add_generic_rpc_handlers((handler,))
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    tc.addCleanup(server.stop, None)
    return port


async def drive(port, rate, seconds, warmup, channels, seed=1):
    rng = random.Random(seed)
    chans = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(channels)]
    calls = [c.unary_unary("/bench.Svc/Work") for c in chans]
    results = []  # (class, code, seconds)

    async def one(i, crit, counted):
        t0 = time.monotonic()
        try:
            await calls[i % channels](b"x", timeout=1.0, metadata=[("x-criticality", crit)])
            code = "OK"
        except grpc.aio.AioRpcError as e:
            code = e.code().name
        if counted:
            results.append((crit, code, time.monotonic() - t0))

    tasks = []
    start = time.monotonic()
    t = start
    i = 0
    while t - start < warmup + seconds:
        t += rng.expovariate(rate)
        delay = t - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        u = rng.random()
        crit = CLASSES[-1][0]
        acc = 0.0
        for name, share in CLASSES:
            acc += share
            if u < acc:
                crit = name
                break
        tasks.append(asyncio.ensure_future(one(i, crit, t - start >= warmup)))
        i += 1
    await asyncio.gather(*tasks)
    for c in chans:
        await c.close()
    return results, seconds


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--capacity", type=float, default=100)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--load", type=float, default=10)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=3)
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--json")
    a = ap.parse_args()
    tc = _Tc()
    try:
        be = start_backend(tc, a.capacity, a.workers)
        lv = Levee(tc, [cluster("grpc", [f"127.0.0.1:{be}"], protocol="http2")],
                   listener={"http2": {"enabled": True}},
                   extra={"access_log": {"enabled": True, "path": os.path.join(tempfile.gettempdir(),
                                                                                  "levee-grpc-overload.log")}})
        rate = a.capacity * a.load
        results, elapsed = asyncio.run(drive(lv.port, rate, a.seconds, a.warmup, a.channels))
        connections = lv.metric("levee_upstream_connections_total", cluster="grpc")
        streams_in = lv.metric("levee_http2_connections_total")
        limits = {}
        for line in lv.metrics().splitlines():
            if line.startswith("levee_http2_limit_total{") and not line.endswith(" 0"):
                limits[line.split('limit="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
    finally:
        tc.close()
    out = {"capacity": a.capacity, "load": a.load, "offered_per_s": rate, "seconds": elapsed,
           "upstream_connections": connections, "client_connections": streams_in, "http2_limits": limits,
           "classes": {}}
    print(f"gRPC overload: capacity {a.capacity:.0f}/s, offered {rate:.0f}/s ({a.load:g}x) for {a.seconds:g} s "
          f"on {a.channels} channels; levee opened {connections:.0f} upstream connection(s)")
    print(f"client connections {streams_in:.0f}; HTTP/2 limits triggered: {limits or 'none'}")
    print(f"{'class':<15}{'offered':>9}{'ok':>8}{'ok %':>8}{'ok p50 ms':>11}{'ok p99 ms':>11}"
          f"{'rejected':>10}{'reject p99 ms':>15}{'deadline':>10}")
    total_ok = 0
    for name, _ in CLASSES:
        rs = [r for r in results if r[0] == name]
        ok = [r[2] for r in rs if r[1] == "OK"]
        rej = [r[2] for r in rs if r[1] in ("UNAVAILABLE", "RESOURCE_EXHAUSTED")]
        dl = [r for r in rs if r[1] == "DEADLINE_EXCEEDED"]
        total_ok += len(ok)
        row = {"offered": len(rs), "ok": len(ok), "ok_share": len(ok) / max(1, len(rs)),
               "ok_p50_ms": pct(ok, 50) * 1e3, "ok_p99_ms": pct(ok, 99) * 1e3, "rejected": len(rej),
               "reject_p99_ms": pct(rej, 99) * 1e3, "deadline_exceeded": len(dl),
               "other": len(rs) - len(ok) - len(rej) - len(dl)}
        out["classes"][name] = row
        print(f"{name:<15}{row['offered']:>9}{row['ok']:>8}{100 * row['ok_share']:>7.1f}%{row['ok_p50_ms']:>11.1f}"
              f"{row['ok_p99_ms']:>11.1f}{row['rejected']:>10}{row['reject_p99_ms']:>15.2f}{len(dl):>10}")
    out["goodput_per_s"] = total_ok / elapsed
    print(f"goodput {out['goodput_per_s']:.1f}/s = {out['goodput_per_s'] / a.capacity:.2f}x capacity")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
