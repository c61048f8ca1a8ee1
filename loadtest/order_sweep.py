#!/usr/bin/env python3
"""Strict order at any service time (issue 19): levee against tuned HAProxy
over service times, CRITICAL_PLUS shares and queue targets, in one run.

For each service time (10 ms x 10 workers: 1,000/s; 50 ms x 10: 200/s;
200 ms x 25: 125/s) and each CRITICAL_PLUS share of the capacity (5%, 30%,
60%), the backend is offered 3x its capacity, open loop: CRITICAL_PLUS at
that share, the rest split evenly between CRITICAL, SHEDDABLE_PLUS and
SHEDDABLE, every client giving up at max(1 s, 10 x the service time).
levee runs with the shipped defaults and a static limit of the backend's
workers at each queue.target (20, 50, 200 ms); haproxy-expert (maxconn =
workers, priority classes, a queue timeout of half the client deadline, at
least 500 ms) once per point, as it has no queue target. Each run goes
through loadtest/run.py; the table prints goodput against HAProxy's and
against the backend's capacity (workers / service time) for both fronts,
CRITICAL_PLUS served and its p99 against
HAProxy's, what CRITICAL got, and whether a lower class was served while
CRITICAL_PLUS was refused (an inversion).

Goodput here is the 2xx answers that completed inside the measured window,
divided by its length (the load generator's `goodput_completed`). The
generator's `goodput` counts a request by the time it was sent and waits for
late answers, so it credits a front that queues long (HAProxy's queue
timeout is 500 ms or more) with service given after the window closed: by
that count tuned HAProxy served 1.02-1.07x the backend's capacity, which no
front can.

    python3 loadtest/order_sweep.py [--duration 10s] [--only 50] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVICES = {10: 10, 50: 10, 200: 25}  # service ms -> workers
CP_SHARES = (0.05, 0.30, 0.60)
TARGETS = (20, 50, 200)
OVERLOAD = 3.0


def scenario(ms, workers, share, target, fronts):
    deadline = max(1000, 10 * ms)
    cp = share / OVERLOAD  # of the offered load
    rest = (1 - cp) / 3
    classes = [
        {"name": "cp", "weight": round(100 * cp, 3), "criticality": "CRITICAL_PLUS", "deadline": f"{deadline}ms"},
        {"name": "critical", "weight": round(100 * rest, 3), "criticality": "CRITICAL", "deadline": f"{deadline}ms"},
        {"name": "sheddable_plus", "weight": round(100 * rest, 3), "criticality": "SHEDDABLE_PLUS",
         "deadline": f"{deadline}ms"},
        {"name": "sheddable", "weight": round(100 * rest, 3), "criticality": "SHEDDABLE", "deadline": f"{deadline}ms"},
    ]
    return {"name": f"order-{ms}ms-cp{int(share * 100)}-q{target}",
            "description": f"{ms} ms x {workers} workers, CRITICAL_PLUS {share:.0%} of capacity, queue.target "
                           f"{target} ms, {OVERLOAD:g}x overload",
            "backend": {"workers": workers, "service": f"fixed:{ms}ms"},
            "fronts": fronts,
            "load": {"duration": "10s", "warmup": "3s", "steps": [OVERLOAD], "classes": classes},
            "levee": {"queue_target": f"{target}ms"},
            "haproxy": {"queue_timeout": f"{max(500, deadline // 2)}ms"}}


def run(sc, out, duration):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump(sc, f)  # JSON is YAML
    try:
        subprocess.run([sys.executable, os.path.join(ROOT, "loadtest", "run.py"), f.name, "--out", out,
                        "--duration", duration], check=True, stdout=subprocess.DEVNULL)
    finally:
        os.unlink(f.name)
    res = {}
    for front in sc["fronts"]:
        with open(os.path.join(out, sc["name"], f"{front}-{OVERLOAD:g}x.json")) as f:
            res[front] = json.load(f)
    return res


def cls(r, name):
    return next(c for c in r["classes"] if c["name"] == name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", default="10s")
    ap.add_argument("--only", help="comma-separated service times in ms (10, 50, 200)")
    ap.add_argument("--out", default=os.path.join(ROOT, "loadtest", "results", "order-sweep"))
    args = ap.parse_args()
    services = {int(s): SERVICES[int(s)] for s in args.only.split(",")} if args.only else SERVICES
    rows = []
    for ms, workers in services.items():
        for share in CP_SHARES:
            hp = run(scenario(ms, workers, share, 50, ["haproxy-expert"]), args.out, args.duration)["haproxy-expert"]
            for target in TARGETS:
                lv = run(scenario(ms, workers, share, target, ["levee"]), args.out, args.duration)["levee"]
                cp_l, cp_h = cls(lv, "cp"), cls(hp, "cp")
                lower_served = sum(cls(lv, n)["success_rate"] for n in ("sheddable_plus", "sheddable")) > 0
                inversion = cp_l["success_rate"] < 0.999 and lower_served
                cap = workers * 1000.0 / ms
                g_l, g_h = lv["total"]["goodput_completed"], hp["total"]["goodput_completed"]
                rows.append((ms, workers, share, target, g_l / g_h, g_l / cap, g_h / cap,
                             cp_l["success_rate"], cp_h["success_rate"], cp_l["ok_latency"]["p99_ms"],
                             cp_h["ok_latency"]["p99_ms"], cls(lv, "critical")["success_rate"],
                             cls(hp, "critical")["success_rate"], inversion))
                print(f"{ms} ms x {workers}, CP {share:.0%}, q {target} ms: goodput {rows[-1][4]:.3f}x HAProxy "
                      f"({g_l / cap:.3f} vs {g_h / cap:.3f} of capacity), "
                      f"CP {100 * cp_l['success_rate']:.1f}% (HAProxy {100 * cp_h['success_rate']:.1f}%), "
                      f"CP p99 {cp_l['ok_latency']['p99_ms']:.1f} ms (HAProxy {cp_h['ok_latency']['p99_ms']:.1f}), "
                      f"inversion {'YES' if inversion else 'no'}", flush=True)
    print()
    print("| service | CP share | queue.target | goodput vs HAProxy | levee / capacity | HAProxy / capacity "
          "| CP served | HAProxy CP | CP p99 | HAProxy CP p99 "
          "| CRITICAL served | HAProxy CRITICAL | inversion |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for ms, workers, share, target, g, gcl, gch, cpl, cph, p99l, p99h, crl, crh, inv in rows:
        print(f"| {ms} ms x {workers} | {share:.0%} | {target} ms | {g:.3f} | {gcl:.3f} | {gch:.3f} "
              f"| {100 * cpl:.1f}% | {100 * cph:.1f}% "
              f"| {p99l:.1f} ms | {p99h:.1f} ms | {100 * crl:.1f}% | {100 * crh:.1f}% | {'yes' if inv else 'no'} |")


if __name__ == "__main__":
    main()
