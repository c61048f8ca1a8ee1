#!/usr/bin/env python3
"""Runs the scenarios of docs/simulation.md ("Published claims, and past
them") through levee-sim, each with levee's policies on and off, and prints
the tables in markdown.

    python3 sim/claims.py                  # all of them (a few minutes on one core)
    python3 sim/claims.py --only 1,3       # some
    python3 sim/claims.py --write DIR      # also keep the generated scenario files

The small versions that the test suite asserts are in
tests/unit/sim/test_claims.cpp.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("LEVEE_BUILD", os.path.join(ROOT, "build"))
TRUST = {"header": "x-tenant-id", "trusted_networks": ["127.0.0.0/8"]}


def levee(cluster, tenants=None, name="levee", instances=1, targets=None, **extra):
    cfg = {"admin": {"port": 9901}, "workers": 1, "access_log": {"enabled": False},
           "listeners": [{"name": "l", "port": 8080, "routes": [{"cluster": "app", "timeout": "5s"}]}],
           "clusters": [dict({"name": "app", "endpoints": ["127.0.0.1:9000"]}, **cluster)]}
    if tenants:
        cfg["tenants"] = tenants
    g = {"name": name, "instances": instances, "config_inline": cfg, "targets": targets or {"app": "app"}}
    g.update(extra)
    return g


def klass(name, crit, weight=1, tenant=None, deadline="1s"):
    c = {"name": name, "weight": weight, "criticality": crit, "deadline": deadline}
    if tenant:
        c["tenant"] = tenant
    return c


class Runner:
    def __init__(self, keep):
        self.dir = keep or tempfile.mkdtemp(prefix="levee-claims-")
        os.makedirs(self.dir, exist_ok=True)
        self.requests = 0
        self.wall = 0.0

    def run(self, name, doc):
        doc.setdefault("name", name)
        path = os.path.join(self.dir, name + ".yaml")
        with open(path, "w") as f:
            yaml.safe_dump(doc, f, sort_keys=False)
        out = subprocess.run([os.path.join(BUILD, "levee-sim"), path], capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"levee-sim {path}: {out.stderr}")
        r = json.loads(out.stdout)
        self.requests += r["sim"]["requests"]
        self.wall += r["sim"]["wall_seconds"]
        return r


def node(r, name):
    return next(n for n in r["sim"]["nodes"] if n["name"] == name)


def cls(r, name):
    return next(c for c in r["classes"] if c["name"] == name)


def pct(x):
    return f"{100 * x:.1f}%"


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def ok_rate(r, first, last):
    # 2xx per second by arrival second, from the per-second series the JSON
    # does not carry: use the node counters of the client-facing group instead.
    return None


# --- 1. retry amplification ---------------------------------------------------------

def claim1(R):
    down = [{"at": "0s", "action": "kill", "target": "db"}]
    base_client = {"name": "load", "phases": "10s@1000", "backoff": "10ms", "retry_connect_errors": True,
                   "classes": [klass("all", "CRITICAL", deadline="10s")]}
    rows = []

    def amp(r):
        b = node(r, "db")["totals"]
        return (b["received"] + b["refused"]) / r["total"]["offered"]

    def one(label, client, levee_groups=None, backends=None):
        doc = {"seed": 1, "backends": backends or [{"name": "db", "instances": 10, "workers": 10, "service": "fixed:5ms"}],
               "clients": [dict(base_client, **client)], "events": down}
        if levee_groups:
            doc["levee"] = levee_groups
        r = R.run("c1-" + label.split(":")[0], doc)
        rows.append([label, f"{amp(r):.2f}x"])

    one("a: client, 3 attempts, no budget", {"target": "db", "retries": 2})
    one("b: client, 3 attempts, 10% retry budget", {"target": "db", "retries": 2, "retry_budget": {"ratio": 0.1}})
    one("c: levee in front (3 attempts, its 10% budget), client does not retry", {"target": "levee"},
        [levee({"concurrency": {"limit": 100}}, targets={"app": "db"})])
    one("d: as c, levee's adaptive throttle off (the retry budget alone)", {"target": "levee"},
        [levee({"concurrency": {"limit": 100}, "throttle": {"enabled": False}}, targets={"app": "db"})])
    one("e: levee in front, client retrying 3 attempts too", {"target": "levee", "retries": 2},
        [levee({"concurrency": {"limit": 100}}, targets={"app": "db"})])
    naive = {"retries": 2, "backoff": "5ms", "retry_connect_errors": True}
    svc = lambda n, t, pol: {"name": n, "instances": 10, "workers": 0, "service": "fixed:1ms",  # noqa: E731
                             "downstream": dict({"target": t, "timeout": "9s"}, **pol)}
    db = {"name": "db", "instances": 10, "workers": 10, "service": "fixed:5ms"}
    one("f: three layers, each retrying 3 attempts, no budgets", {"target": "svc_a", "retries": 2},
        None, [svc("svc_a", "svc_b", naive), svc("svc_b", "db", naive), db])
    stack = [levee({"concurrency": {"limit": 1000}}, name="edge", targets={"app": "svc_a"}),
             levee({"concurrency": {"limit": 1000}}, name="side_a", instances=10, targets={"app": "svc_b"}),
             levee({"concurrency": {"limit": 1000}}, name="side_b", instances=10, targets={"app": "db"})]
    one("g: three layers with levee at each hop (services leave retries to it), client retrying 3 attempts",
        {"target": "edge", "retries": 2}, stack, [svc("svc_a", "side_a", {}), svc("svc_b", "side_b", {}), db])
    one("h: as g, the client honouring x-levee-no-retry", {"target": "edge", "retries": 2, "honor_no_retry": True},
        stack, [svc("svc_a", "side_a", {}), svc("svc_b", "side_b", {}), db])
    return "Calls reaching the (dead) backends per client request, 1,000 requests/s for 10 s:\n\n" + \
        table(["setup", "load amplification"], rows)


# --- 2. client-side throttling ----------------------------------------------------------

def claim2(R):
    rows = []
    for k in (None, 2.0, 1.5, 1.1):
        client = {"name": "load", "target": "levee", "phases": "600s@4000",
                  "classes": [klass("all", "CRITICAL")]}
        if k:
            client["throttle"] = {"k": k}
        r = R.run(f"c2-k{k}", {
            "seed": 2, "backends": [{"name": "app", "workers": 10, "service": "fixed:10ms"}],
            "levee": [levee({"concurrency": {"limit": 10}, "queue": {"target": "50ms"}, "retry": {"enabled": False}})],
            "clients": [client],
            "events": [{"at": "20s", "action": "fail", "target": "app", "rate": 1},
                       {"at": "30s", "action": "recover", "target": "app"}]})
        n = node(r, "levee")
        rec, ok = n["received"], n["served"]
        ratio = sum(rec[10:20]) / max(1, sum(ok[10:20]))
        before = sum(ok[10:20]) / 10
        back = next((i - 30 for i in range(30, len(ok)) if ok[i] >= 0.9 * before), None)
        rows.append(["off" if not k else f"K = {k:g}", f"{ratio:.2f}", f"{sum(rec[22:30]) / 8:.0f}/s",
                     "never (in 570 s)" if back is None else f"{back} s"])
    return ("4,000 requests/s against a levee that serves 1,000/s and refuses the rest at once; the backend fails "
            "every request from 20 s to 30 s; 600 s in all. Per client: `throttle: {k: K}` (2-minute window):\n\n" +
            table(["client-side throttling", "arriving / accepted (10-20 s)", "arriving during the failure",
                   "back to 90% of goodput after recovery"], rows))


# --- 3. cascading failure ---------------------------------------------------------------

def claim3(R):
    rows = []
    for label, lv in (("no levee", None), ("levee, static limit", {"concurrency": {"limit": 105}}),
                      ("levee, adaptive limit", {})):
        cl = dict({"queue": {"target": "50ms"}}, **(lv or {}))
        doc = {"seed": 3, "backends": [{"name": "app", "workers": 105, "service": "fixed:10ms", "crash_queue": 2000,
                                        "restart_after": "2s", "warmup_seconds": 10, "warmup_factor": 2}],
               "clients": [{"name": "load", "target": "levee" if lv is not None else "app",
                            "phases": "20s@10000,10s@11000,30s@10000", "retries": 3, "backoff": "50ms",
                            "retry_connect_errors": True, "classes": [klass("all", "CRITICAL")]}]}
        if lv is not None:
            doc["levee"] = [levee(cl)]
        r = R.run("c3-" + label.replace(" ", "-").replace(",", ""), doc)
        b = node(r, "app")
        served = b["served"]
        rows.append([label, int(b["totals"]["crashes"]), f"{sum(served[10:20]) / 10:.0f}/s",
                     f"{sum(served[20:30]) / 10:.0f}/s", f"{sum(served[40:60]) / 20:.0f}/s"])
    return ("A backend of capacity 10,500/s (105 workers x 10 ms) that crashes when 2,000 requests wait in it and "
            "restarts after 2 s, cold (2x slower, fading over 10 s); clients retry 3 times (50 ms backoff, "
            "connection errors too). Demand 10,000/s, then 11,000/s from 20 s to 30 s, then 10,000/s again:\n\n" +
            table(["", "crashes", "served 10-20 s", "served 20-30 s (trigger)", "served 40-60 s (trigger gone)"], rows))


# --- 4. 12x spike of SHEDDABLE -----------------------------------------------------------

def claim4(R):
    rows = []
    for label, lv in (("no levee", None), ("levee, static limit", {"concurrency": {"limit": 100}}),
                      ("levee, adaptive limit", {})):
        t = "levee" if lv is not None else "app"
        doc = {"seed": 4, "warmup": "5s",
               "backends": [{"name": "app", "instances": 10, "workers": 10, "service": "exp:10ms"}],
               "clients": [{"name": "steady", "target": t, "phases": "40s@5000",
                            "classes": [klass("cp", "CRITICAL_PLUS", 2), klass("c", "CRITICAL", 3)]},
                           {"name": "prefetch", "target": t, "phases": "15s@2000,10s@24000,15s@2000",
                            "classes": [klass("s", "SHEDDABLE")]}]}
        if lv is not None:
            doc["levee"] = [levee(dict({"queue": {"target": "50ms"}}, **lv))]
        r = R.run("c4-" + label.replace(" ", "-").replace(",", ""), doc)
        cp, c, s = cls(r, "steady/cp"), cls(r, "steady/c"), cls(r, "prefetch/s")
        rows.append([label, f"{100 * cp['success_rate']:.3f}%", f"{cp['ok_latency']['p99_ms']:.0f} ms",
                     pct(c["success_rate"]), pct(s["success_rate"]), f"{r['total']['goodput']:.0f}/s"])
    return ("10 backends of 10 workers (exponential service times, mean 10 ms: 10,000/s in all) at 70%: "
            "CRITICAL_PLUS 2,000/s, CRITICAL 3,000/s, SHEDDABLE 2,000/s; from 15 s to 25 s SHEDDABLE jumps "
            "12x to 24,000/s (3.1x capacity in all):\n\n" +
            table(["", "CRITICAL_PLUS kept", "its p99", "CRITICAL", "SHEDDABLE", "goodput"], rows))


# --- 5. 1.4x step --------------------------------------------------------------------------

def settle(tl, step_at, end, interval_ms):
    """Seconds after the step until goodput and mean latency, averaged over
    a second, stay within 10% and 2x of their averages over the last 5 s."""
    ok = tl["ok"]
    lat_sum = [m * n for m, n in zip(tl["mean_ms"], ok)]
    per_s = 1000 / interval_ms
    a, b = int(step_at * per_s), min(len(ok), int(end * per_s))
    w = int(per_s)

    def avg(i, j):
        n = sum(ok[i:j])
        return n / (j - i), (sum(lat_sum[i:j]) / n if n else 0.0)
    g, lat = avg(b - int(5 * per_s), b)
    settled = b
    for i in range(b - w, a - 1, -1):
        wg, wl = avg(i, i + w)
        if abs(wg - g) > 0.1 * g or wl > 2 * lat:
            break
        settled = i
    return (settled - a) / per_s, g * per_s, lat


def claim5(R):
    rows = []
    for label, lv in (("no levee", None), ("levee, static limit", {"concurrency": {"limit": 100}}),
                      ("levee, adaptive limit", {})):
        t = "levee" if lv is not None else "app"
        doc = {"seed": 5, "timeline": "100ms",
               "backends": [{"name": "app", "instances": 10, "workers": 10, "service": "exp:10ms"}],
               "clients": [{"name": "load", "target": t, "phases": "20s@8000,20s@11200",
                            "classes": [klass("c", "CRITICAL")]}]}
        if lv is not None:
            doc["levee"] = [levee(dict({"queue": {"target": "50ms"}}, **lv))]
        r = R.run("c5-" + label.replace(" ", "-").replace(",", ""), doc)
        tl = r["sim"]["timeline"]
        s, g, lat = settle(tl, 20, 40, tl["interval_ms"])
        collapsed = g < 0.5 * 10000
        rows.append([label, "never (collapses)" if collapsed else f"{s:.1f} s", f"{g:.0f}/s", f"{lat:.1f} ms"])
    return ("10,000/s of capacity (10 x 10 workers, exponential 10 ms); demand steps from 8,000/s to 11,200/s "
            "(1.4x) at 20 s. Settled: from when on goodput averaged over any second stays within 10% of its "
            "average over the last 5 s, and the mean latency within 2x of its average:\n\n" +
            table(["", "settles after", "goodput after", "mean latency after"], rows))


# --- 6. shared quotas -------------------------------------------------------------------------

def claim6(R):
    tenants = {"source": TRUST, "quotas": {"default": 1, "noisy": 10.0, "good": 1000}, "enforce": "always", "window": "10s"}

    def one(name, instances, fleet, outage=None, **outage_keys):
        lv = levee({"concurrency": {"enabled": False}}, tenants, instances=instances)
        if fleet:
            lv["fleet"] = fleet
        doc = {"seed": 6, "warmup": "10s",
               "backends": [{"name": "app", "instances": 100, "workers": 10, "service": "fixed:10ms"}],
               "levee": [lv],
               "clients": [{"name": "load", "count": 5000, "target": "levee", "phases": "40s@6000",
                            "classes": [klass("noisy", "CRITICAL", 2, "noisy"), klass("good", "CRITICAL", 1, "good")]}]}
        if outage:
            doc["redis"] = {"outages": [dict({"from": outage[0], "to": outage[1]}, **outage_keys)]}
        r = R.run("c6-" + name, doc)
        served = cls(r, "noisy")["goodput"] * 0.010  # CPU-seconds per second
        return served / 10.0 - 1.0, r

    rows = []
    over, _ = one("nosync-50", 50, None)
    rows.append(["no sync (each instance alone)", 50, "-", f"{100 * over:+.1f}%"])
    for interval in ("50ms", "200ms", "1s", "5s"):
        over, _ = one(f"sync-50-{interval}", 50, {"interval": interval})
        rows.append(["synced", 50, interval, f"{100 * over:+.1f}%"])
    for n in (5, 20):
        over, _ = one(f"sync-{n}-200ms", n, {"interval": "200ms"})
        rows.append(["synced", n, "200ms", f"{100 * over:+.1f}%"])
    over, _ = one("outage-50", 50, {"interval": "200ms", "max_instances": 50}, ("10s", "40s"))
    rows.append(["Redis down from 10 s (fallback: quota / max_instances = 50)", 50, "200ms", f"{100 * over:+.1f}%"])
    over, _ = one("outage-50-last", 50, {"interval": "200ms"}, ("10s", "40s"))
    rows.append(["Redis down from 10 s (fallback: quota / last fleet size)", 50, "200ms", f"{100 * over:+.1f}%"])
    over, _ = one("restart-50", 50, {"interval": "200ms"}, ("10s", "20s"), mode="refuse", flush=True)
    rows.append(["Redis killed at 10 s, back empty at 20 s (new epoch, windows pushed again)", 50, "200ms",
                 f"{100 * over:+.1f}%"])
    return ("One tenant with a fleet-wide quota of 10 CPU-s/s sends 4,000 requests/s of 10 ms each (4x its quota) "
            "through N levee instances (5,000 clients spread over them), quotas enforced always, no concurrency "
            "limit, so the quota alone decides; measured over 10-40 s. Overshoot = the tenant's served CPU / its "
            "quota - 1 (the real sync logic, core/fleet_quota, against the modelled Redis of src/sim/redis.hpp):\n\n" +
            table(["", "instances", "sync interval", "overshoot"], rows))


# --- 7. the whole fleet at 3x ---------------------------------------------------------------------

def claim7(R):
    tenants = {"source": TRUST, "quotas": {"default": 1, "gold": 60, "silver": 40, "bronze": 20, "batch": 10}}
    classes = [klass("gold_cp", "CRITICAL_PLUS", 5, "gold"), klass("gold_c", "CRITICAL", 15, "gold"),
               klass("silver_c", "CRITICAL", 20, "silver"), klass("silver_sp", "SHEDDABLE_PLUS", 20, "silver"),
               klass("bronze_sp", "SHEDDABLE_PLUS", 15, "bronze"), klass("batch_s", "SHEDDABLE", 25, "batch")]
    rows, shares = [], []
    for label, lv in (("no levee", None), ("levee, static limit 24 per instance", {"concurrency": {"limit": 24}}),
                      ("levee, static limit 32 per instance", {"concurrency": {"limit": 32}}),
                      ("levee, adaptive limit", {})):
        t = "edge" if lv is not None else "app"
        doc = {"seed": 7, "warmup": "2s",
               "backends": [{"name": "app", "instances": 300, "workers": 4, "service": "exp:10ms"}],
               "clients": [{"name": "load", "count": 5000, "target": t, "phases": "10s@360000", "classes": classes}]}
        if lv is not None:
            doc["levee"] = [levee(dict({"queue": {"target": "50ms"}}, **lv), tenants, name="edge", instances=50)]
        r = R.run("c7-" + label.replace(" ", "-").replace(",", ""), doc)
        row = [label, f"{r['total']['goodput']:.0f}/s ({100 * r['total']['goodput'] / 120000:.0f}%)"]
        row += [pct(cls(r, c["name"])["success_rate"]) for c in classes]
        if lv is not None:
            t_ = node(r, "edge")["totals"]
            row.append(f"{t_['limit_min']:.0f}-{t_['limit_max']:.0f}")
            row.append(f"{t_['admitted_max'] / max(1, t_['admitted_min']):.1f}x")
        else:
            row += ["-", "-"]
        rows.append(row)
        total = r["total"]["goodput"] or 1
        by_tenant = {}
        for c in classes:
            by_tenant[c["tenant"]] = by_tenant.get(c["tenant"], 0) + cls(r, c["name"])["goodput"]
        shares.append([label] + [pct(by_tenant[k] / total) for k in ("gold", "silver", "bronze", "batch")])
    return ("5,000 clients, 50 levee instances, 300 backends (4 workers each, exponential 10 ms: 120,000/s in all), "
            "offered 360,000/s (3x) for 10 s, four tenants:\n\n" +
            table(["", "goodput"] + [c["name"] + " (" + c["criticality"] + ")" for c in classes]
                  + ["limits at the end (min-max)", "admitted, busiest / idlest instance"], rows) +
            "\n\nShare of goodput by tenant (offered: gold 20%, silver 40%, bronze 15%, batch 25%):\n\n" +
            table(["", "gold", "silver", "bronze", "batch"], shares))


CLAIMS = {1: ("Retry amplification with every backend down", claim1),
          2: ("Client-side throttling", claim2),
          3: ("Cascading failure", claim3),
          4: ("A 12x spike of SHEDDABLE traffic", claim4),
          5: ("A 1.4x step in demand", claim5),
          6: ("Shared quotas across a fleet", claim6),
          7: ("The whole fleet at 3x", claim7)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated claim numbers")
    ap.add_argument("--write", help="keep the generated scenarios here")
    args = ap.parse_args()
    R = Runner(args.write)
    which = [int(x) for x in args.only.split(",")] if args.only else sorted(CLAIMS)
    t0 = time.time()
    for k in which:
        title, f = CLAIMS[k]
        print(f"### {k}. {title}\n\n{f(R)}\n", flush=True)
    print(f"({R.requests:,} simulated requests in {R.wall:.1f} s of simulation, {time.time() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
