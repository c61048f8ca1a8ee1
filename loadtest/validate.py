#!/usr/bin/env python3
"""Runs the same scenarios through the real proxy and through levee-sim and
prints the side-by-side table: goodput and per-class success at every step,
and how alike the per-second series are.

    python3 loadtest/validate.py                 # real runs, then the simulator, then the table
    python3 loadtest/validate.py --sim-only      # re-simulate against the last real runs (after a core change)
    python3 loadtest/validate.py --short         # shorter real runs where the scenario allows
    python3 loadtest/validate.py --cases overload,noisy-tenant --md /tmp/table.md

Real runs are loadtest/run.py (real levee, real fixed-capacity backend, real
load generator) with the scenario files in loadtest/scenarios/. The
simulated run of each (front, step) gets the same levee YAML (fronts.py's
levee_config), the same classes, rates, client retry behaviour and events,
and the backend's parameters. One calibration: the real backend's capacity
is measured before each real run (a 10 ms sleep takes a little longer than
10 ms), and the simulated backend's service time is scaled so that its
capacity is that measured figure; offered rates are the real run's.

Agreement: goodput (as a share of capacity) and every class's success rate
within 5 percentage points; per-second goodput series with a mean absolute
difference within 5 points of capacity (and, where the series moves, a
correlation of at least 0.9). A real run whose measured capacity is more
than 6% from the backend's nominal one (workers / service time) is marked
invalid: the machine was too busy for it to be a reference.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fronts import levee_config  # noqa: E402
from scenario import parse, seconds  # noqa: E402

ROOT = os.path.dirname(HERE)
BUILD = os.environ.get("LEVEE_BUILD", os.path.join(ROOT, "build"))

# (case, scenario file, fronts, steps, short overrides)
CASES = [
    ("overload", "overload.yaml", ["levee", "levee-adaptive"], [0.5, 1, 2, 5, 10], {"duration": "5s", "warmup": "2s"}),
    ("noisy-tenant", "noisy-tenant.yaml", ["levee", "levee-adaptive"], [2], {"duration": "8s", "warmup": "3s"}),
    ("retry-storm", "retry-storm.yaml", ["levee", "levee-adaptive", "direct"], [1.2], {}),
    ("restart", "restart.yaml", ["levee+slowstart", "levee+noslowstart"], [1600], {}),
]
TOLERANCE_PP = 5.0
MAX_CAPACITY_ERROR = 0.06  # the real runs' measured capacity vs the backend's nominal one


def load_scenario(path, overrides):
    import yaml
    with open(path) as f:
        s = parse(yaml.safe_load(f), os.path.basename(path))
    for k, v in overrides.items():
        s["load"][k] = seconds(v, k)
    return s


def real_run(case, path, fronts, steps, overrides, out):
    cmd = [sys.executable, os.path.join(HERE, "run.py"), path, "--fronts", ",".join(fronts),
           "--steps", ",".join(f"{s:g}" for s in steps), "--out", out]
    for k, v in overrides.items():
        cmd += [f"--{k}", v]
    print("real:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env=dict(os.environ, LEVEE_BUILD=BUILD))


def nominal_capacity(b):
    """What the backend serves by its parameters alone (workers / mean service time)."""
    kind, _, rest = b["service"].partition(":")
    parts = rest.split(":")
    mean = seconds(parts[0], "service")
    if kind == "uniform":
        mean = (mean + seconds(parts[1], "service")) / 2
    return b["instances"] * b["workers"] / mean


def calibrated_service(b, capacity):
    """The backend's service time scaled so that its capacity is the real one's."""
    kind, _, rest = b["service"].partition(":")
    parts = rest.split(":")

    def ms(v):
        return seconds(v, "service") * 1000

    mean = {"fixed": lambda: ms(parts[0]), "exp": lambda: ms(parts[0]), "lognormal": lambda: ms(parts[0]),
            "uniform": lambda: (ms(parts[0]) + ms(parts[1])) / 2}[kind]()
    nominal = b["instances"] * b["workers"] / (mean / 1000)
    f = nominal / capacity if capacity > 0 else 1.0
    if kind == "uniform":
        return f"uniform:{ms(parts[0]) * f:.4f}ms:{ms(parts[1]) * f:.4f}ms"
    tail = f":{parts[1]}" if kind == "lognormal" and len(parts) > 1 else ""
    return f"{kind}:{mean * f:.4f}ms{tail}"


def sim_scenario(s, front, step, capacity, workdir, seed):
    """The simulator's scenario for one real (front, step) run, as YAML text."""
    import yaml
    b = s["backend"]
    load = s["load"]
    ports = [9000 + i for i in range(b["instances"])]
    rate_of = (lambda x: x * capacity) if load["step_unit"] == "capacity" else (lambda x: x)
    if load["phases"]:
        phases = ",".join(f"{seconds(d, 'phases')}s@{rate_of(float(r)) * step:.1f}"
                          for d, r in (p.split("@") for p in load["phases"].split(",")))
    else:
        phases = f"{load['warmup'] + load['duration']}s@{rate_of(step):.1f}"
    backend = {"name": "app", "instances": b["instances"], "workers": b["workers"],
               "service": calibrated_service(b, capacity), "orca": b["orca"] != "none",
               "warmup_seconds": b["warmup_seconds"], "warmup_factor": b["warmup_factor"],
               "warmup_mode": b.get("warmup_mode", "slow")}
    c = load["client"]
    client = {"name": "load", "target": "app" if front == "direct" else "levee", "phases": phases,
              "poisson": load["poisson"], "retries": c["retries"], "backoff": f"{c['backoff']}s",
              "honor_retry_after": c["honor_retry_after"], "honor_no_retry": c["honor_no_retry"],
              "classes": [{k: v for k, v in (("name", cl["name"]), ("weight", cl["weight"]),
                                             ("criticality", cl["criticality"]), ("tenant", cl["tenant"]),
                                             ("deadline", f"{cl['deadline']}s")) if v != ""}
                          for cl in load["classes"]]}
    doc = {"name": s["name"], "seed": seed, "warmup": f"{load['warmup']}s", "front": front, "step": step,
           "capacity": capacity, "backends": [backend], "clients": [client],
           # The load generator starts 50 ms after the clock the events are timed from.
           "events": [{"at": f"{max(0.0, e['at'] - 0.05):.3f}s", "action": e["action"], "target": "app",
                       "instance": e["instance"]} for e in s["events"]]}
    if front != "direct":
        cfg = os.path.join(workdir, f"{front}-{step:g}x.levee.yaml")
        with open(cfg, "w") as f:
            f.write(levee_config(8080, 9901, ports, b["workers"], front, s))
        doc["levee"] = [{"name": "levee", "config": os.path.basename(cfg), "targets": {"app": "app"}}]
    return yaml.safe_dump(doc, sort_keys=False)


def sim_run(s, front, step, capacity, out_dir, seed):
    os.makedirs(out_dir, exist_ok=True)
    base = os.path.join(out_dir, f"{front}-{step:g}x")
    path = base + ".sim.yaml"
    with open(path, "w") as f:
        f.write(sim_scenario(s, front, step, capacity, out_dir, seed))
    out = subprocess.run([os.path.join(BUILD, "levee-sim"), path, "--json", base + ".json", "--csv", base + ".csv"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"levee-sim {path}: {out.stderr}")
    with open(base + ".json") as f:
        return json.load(f)


def series(path):
    rows = []
    with open(path) as f:
        head = f.readline().strip().split(",")
        for line in f:
            rows.append(dict(zip(head, (int(x) for x in line.strip().split(",")))))
    return rows


def compare_series(real_csv, sim_csv, capacity, first, last):
    a = {r["second"]: r["ok"] for r in series(real_csv)}
    b = {r["second"]: r["ok"] for r in series(sim_csv)}
    secs = [t for t in range(first, last) if t in a and t in b]
    if not secs:
        return None, None
    x = [100.0 * a[t] / capacity for t in secs]
    y = [100.0 * b[t] / capacity for t in secs]
    mad = sum(abs(p - q) for p, q in zip(x, y)) / len(secs)
    mx, my = sum(x) / len(x), sum(y) / len(y)
    vx = sum((p - mx) ** 2 for p in x)
    vy = sum((q - my) ** 2 for q in y)
    corr = None
    # Only meaningful where the series moves (an outage, a restart).
    if vx / len(x) > 25 and vy > 0:
        corr = sum((p - mx) * (q - my) for p, q in zip(x, y)) / math.sqrt(vx * vy)
    return mad, corr


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", help="comma-separated: " + ",".join(c[0] for c in CASES))
    ap.add_argument("--sim-only", action="store_true", help="reuse the real results already in --out")
    ap.add_argument("--real-only", action="store_true")
    ap.add_argument("--short", action="store_true", help="shorter real runs (overload, noisy-tenant)")
    ap.add_argument("--out", default=os.path.join(ROOT, "loadtest", "results", "validate"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--md", help="also write the table (markdown) here")
    args = ap.parse_args()
    wanted = set(args.cases.split(",")) if args.cases else {c[0] for c in CASES}
    real_out, sim_out = os.path.join(args.out, "real"), os.path.join(args.out, "sim")
    rows, failures, invalid = [], 0, 0
    for case, file, fronts, steps, short in CASES:
        if case not in wanted:
            continue
        path = os.path.join(HERE, "scenarios", file)
        overrides = short if args.short else {}
        if not args.sim_only:
            real_run(case, path, fronts, steps, overrides, real_out)
        if args.real_only:
            continue
        s = load_scenario(path, overrides)
        sim_summary = {"scenario": s, "machine": {"cpus": 1, "cpu_model": "levee-sim (simulated time)", "kernel": "-"},
                       "command": "loadtest/validate.py --sim-only (levee-sim)",
                       "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": []}
        for front in fronts:
            for step in steps:
                rpath = os.path.join(real_out, s["name"], f"{front}-{step:g}x")
                if not os.path.exists(rpath + ".json"):
                    print(f"no real run {rpath}.json: skipped (run without --sim-only)", file=sys.stderr)
                    continue
                with open(rpath + ".json") as f:
                    real = json.load(f)
                sim = sim_run(s, front, step, real["capacity"], os.path.join(sim_out, s["name"]), args.seed)
                sim_summary["runs"].append({"front": front, "step": step, "capacity": real["capacity"],
                                            "file": f"{front}-{step:g}x.json"})
                cap = real["capacity"]
                g_real = 100 * real["total"]["goodput"] / cap
                g_sim = 100 * sim["total"]["goodput"] / cap
                classes = []
                worst = abs(g_real - g_sim)
                for cr in real["classes"]:
                    cs = next(c for c in sim["classes"] if c["name"] == cr["name"])
                    pr, ps = 100 * cr["success_rate"], 100 * cs["success_rate"]
                    classes.append((cr["name"], pr, ps))
                    worst = max(worst, abs(pr - ps))
                total_s = int(s["load"]["warmup"] + s["load"]["duration"])
                first = 0 if s["events"] else int(s["load"]["warmup"])
                mad, corr = compare_series(rpath + ".csv", os.path.join(sim_out, s["name"], f"{front}-{step:g}x.csv"),
                                           cap, first, total_s)
                ok = worst <= TOLERANCE_PP and (mad is None or mad <= TOLERANCE_PP) and (corr is None or corr >= 0.9)
                # A capacity measured far from what the backend's parameters
                # give means the machine was too busy for the real run to be
                # a reference (a timer-based backend loses a few percent, not
                # tens): say so rather than blame the simulator.
                nominal = nominal_capacity(s["backend"])
                valid = abs(cap / nominal - 1) <= MAX_CAPACITY_ERROR
                failures += not ok
                invalid += not valid
                with open(os.path.join(sim_out, s["name"], "summary.json"), "w") as f:
                    json.dump(sim_summary, f, indent=1)
                rows.append({"case": case, "front": front, "step": step, "capacity": cap, "goodput_real": g_real,
                             "goodput_sim": g_sim, "classes": classes, "series_mad": mad, "series_corr": corr,
                             "worst_pp": worst, "ok": ok, "real_valid": valid, "nominal_capacity": nominal})
    if args.real_only:
        return
    md = table(rows)
    print(md)
    meta = {"commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_average": os.getloadavg(), "rows": rows}
    with open(os.path.join(args.out, "validation.json"), "w") as f:
        json.dump(meta, f, indent=1)
    if args.md:
        with open(args.md, "w") as f:
            f.write(f"Measured at commit {meta['commit']} ({meta['date']}).\n\n" + md + "\n")
    print(f"\n{len(rows) - failures} of {len(rows)} runs agree within {TOLERANCE_PP:g} points "
          f"(commit {meta['commit']})")
    if invalid:
        print(f"{invalid} real runs measured a capacity more than {100 * MAX_CAPACITY_ERROR:g}% from the backend's "
              "nominal one: the machine was too busy, re-run them on a quiet machine (marked 'real invalid')")
    sys.exit(1 if failures else 0)


def verdict(r):
    v = "yes" if r["ok"] else "NO"
    if not r.get("real_valid", True):
        v += f" (real invalid: capacity {r['capacity']:.0f}/s of {r['nominal_capacity']:.0f})"
    return v


def table(rows):
    out = ["| scenario | front | step | goodput real / sim | per-class success real / sim | "
           "series: mean abs diff, corr | worst diff | agree |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        step = f"{r['step']:g} req/s" if r["step"] > 50 else f"{r['step']:g}x"
        cls = "; ".join(f"{n} {a:.1f} / {b:.1f}" for n, a, b in r["classes"])
        mad = "-" if r["series_mad"] is None else f"{r['series_mad']:.1f} pp"
        corr = "" if r["series_corr"] is None else f", {r['series_corr']:.2f}"
        out.append(f"| {r['case']} | {r['front']} | {step} | {r['goodput_real']:.1f}% / {r['goodput_sim']:.1f}% | "
                   f"{cls} | {mad}{corr} | {r['worst_pp']:.1f} pp | {verdict(r)} |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
