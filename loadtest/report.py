#!/usr/bin/env python3
"""Turns loadtest results into markdown tables and PNG plots.

    /usr/bin/python3 loadtest/report.py loadtest/results/overload [--img docs/img] [--md out.md]

Prints markdown (goodput per front and load step, per-class success and
latency at the highest step, rejection latency and reasons) and writes
plots next to it. Uses Debian's python3-matplotlib when present; without
it, only the tables are produced.
"""
import argparse
import glob
import json
import os
import re


def load(result_dir):
    with open(os.path.join(result_dir, "summary.json")) as f:
        summary = json.load(f)
    runs = {}
    for path in glob.glob(os.path.join(result_dir, "*x.json")):
        with open(path) as f:
            r = json.load(f)
        runs[(r["front"], float(r["step"]))] = r
    return summary, runs


def pct(x):
    return f"{100 * x:.1f}%"


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def series(path):
    rows = []
    try:
        with open(path) as f:
            head = f.readline().strip().split(",")
            for line in f:
                rows.append(dict(zip(head, (int(x) for x in line.strip().split(",")))))
    except OSError:
        pass
    return rows


def markdown(summary, runs):
    sc = summary["scenario"]
    fronts = [f for f in sc["fronts"] if any(k[0] == f for k in runs)]
    steps = sorted({k[1] for k in runs})
    rps = sc.get("load", {}).get("step_unit") == "rps"

    def label(step):
        return step_label(sc, step)

    def offered(step, capacity):
        return step if rps else step * capacity
    m = summary["machine"]
    out = [f"### {sc['name']}", "", sc["description"].strip(), "",
           f"Command: `{summary['command']}` ({summary['started']}); machine: {m['cpus']} CPUs, "
           f"{m['cpu_model'] or 'unknown CPU'}, kernel {m['kernel']}.", ""]
    caps = sorted(r["capacity"] for r in runs.values())
    if caps:
        out.append(f"Backend capacity, measured before each run (closed loop, 2x workers connections): median "
                   f"{caps[len(caps) // 2]:.0f} req/s (range {caps[0]:.0f}-{caps[-1]:.0f}).")
        out.append("")
    rows = []
    for f in fronts:
        row = [f]
        for s in steps:
            r = runs.get((f, s))
            row.append(pct(r["total"]["goodput"] / r["capacity"]) if r else "-")
        rows.append(row)
    out += ["Goodput (2xx within the deadline) as a share of measured capacity:", "",
            table(["front"] + [label(s) for s in steps], rows), ""]
    top = steps[-1]
    classes = [c["name"] for c in next(iter(runs.values()))["classes"]]
    rows = []
    for f in fronts:
        r = runs.get((f, top))
        if not r:
            continue
        cl = {c["name"]: c for c in r["classes"]}
        t = r["total"]
        reasons = {}
        for c in r["classes"]:
            for k, v in c["reasons"].items():
                reasons[k] = reasons.get(k, 0) + v
        reason_s = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])[:4]) or "-"
        rows.append([f] + [f"{pct(cl[c]['success_rate'])} / {cl[c]['ok_latency']['p99_ms']:.0f} ms" for c in classes]
                    + [f"{t['rejection_latency']['p99_ms']:.2f} ms" if t["rejection_latency"]["count"] else "-",
                       t["timeouts"], reason_s])
    out += [f"At {label(top)}: success rate / p99 latency of successes, per class; p99 of the time to the first "
            "non-2xx answer; "
            "client timeouts; rejections by reason:", "",
            table(["front"] + classes + ["rejection p99", "timeouts", "rejections"], rows), ""]
    if sc.get("events"):
        out += ["Events: " + ", ".join(f"{e['action']} at {e['at']:g}s" for e in sc["events"]), ""]
    after = sc.get("report", {}).get("recovery_after")
    if after is not None:
        rows = []
        for f in fronts:
            r = runs.get((f, top))
            if not r:
                continue
            ser = series(os.path.join(summary.get("_dir", ""), f"{f}-{top:g}x.csv"))
            # Back to what was offered, or to capacity if that is less: at
            # 80% of capacity, 90% of capacity is never reachable.
            cap = min(r["capacity"], offered(top, r["capacity"]))
            rec = recovery(ser, after, cap)
            worst = min((x["ok"] for x in ser if after <= x["second"] < after + 5), default=0)
            tail = [x for x in ser if after + 5 <= x["second"] < after + 10]
            steady = sum(x["ok"] for x in tail) / max(1, len(tail))
            rows.append([f, "never" if rec is None else f"{rec} s", f"{100 * worst / cap:.0f}%",
                         f"{100 * steady / cap:.0f}%"])
        out += [f"Recovery after the event at {after:g} s: seconds until a second's goodput is back to 90% of "
                "the offered load (or of capacity, if less); the worst second in the 5 s after and the mean of "
                "the next 5 s, as shares of the same:", "",
                table(["front", "recovery", "worst second after", "5-10 s after"], rows), ""]
    return "\n".join(out)


def step_label(sc, step):
    """A load step as the scenario means it: a multiple of capacity or a rate."""
    return f"{step:g} req/s" if sc.get("load", {}).get("step_unit") == "rps" else f"{step:g}x"


def recovery(rows, after, capacity):
    for x in rows:
        if x["second"] >= after and x["ok"] >= 0.9 * capacity:
            return x["second"] - after
    return None


def plots(summary, runs, result_dir, img_dir):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    sc = summary["scenario"]
    name = sc["name"]
    os.makedirs(img_dir, exist_ok=True)
    made = []
    fronts = [f for f in sc["fronts"] if any(k[0] == f for k in runs)]
    steps = sorted({k[1] for k in runs})
    if len(steps) > 1:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        styles = ["-", "--", "-.", ":"]
        markers = ["o", "s", "^", "v", "D", "P", "X", "*"]
        for k, f in enumerate(fronts):
            xs, ys = [], []
            for s in steps:
                r = runs.get((f, s))
                if r:
                    xs.append(s)
                    ys.append(100 * r["total"]["goodput"] / r["capacity"])
            # Overlapping lines (several fronts collapse identically) stay
            # distinguishable by marker and dash.
            ax.plot(xs, ys, marker=markers[k % len(markers)], linestyle=styles[k % len(styles)], label=f,
                    linewidth=2.2 if f.startswith("levee") else 1.2, markersize=7 - k % 3, alpha=0.85)
        ax.set_xscale("log")
        ax.set_xticks(steps)
        ax.set_xticklabels([f"{s:g}x" for s in steps])
        ax.set_xlabel("offered load (x measured capacity)")
        ax.set_ylabel("goodput (% of capacity)")
        ax.set_ylim(-5, 110)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, ncol=2)
        ax.set_title(f"{name}: goodput vs offered load")
        path = os.path.join(img_dir, f"{name}-goodput.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        made.append(path)
    top = steps[-1]
    classes = [c["name"] for c in next(iter(runs.values()))["classes"]]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.8 / max(1, len(fronts))
    for i, f in enumerate(fronts):
        r = runs.get((f, top))
        if not r:
            continue
        cl = {c["name"]: c for c in r["classes"]}
        ax.bar([k + i * width for k in range(len(classes))], [100 * cl[c]["success_rate"] for c in classes],
               width=width, label=f)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(classes))])
    ax.set_xticklabels(classes, fontsize=8)
    ax.set_ylabel("success rate (%)")
    ax.set_title(f"{name}: success per class at {step_label(summary['scenario'], top)}")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    path = os.path.join(img_dir, f"{name}-classes.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    made.append(path)
    # Time series of goodput per second (useful with events).
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for f in fronts:
        rows = series(os.path.join(result_dir, f"{f}-{top:g}x.csv"))
        if rows:
            ax.plot([r["second"] for r in rows], [r["ok"] for r in rows], label=f)
    for e in sc.get("events", []):
        ax.axvline(e["at"], color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("second")
    ax.set_ylabel("2xx within deadline per second")
    ax.set_title(f"{name}: goodput over time at {step_label(summary['scenario'], top)}")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    path = os.path.join(img_dir, f"{name}-timeline.png")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    made.append(path)
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", help="a scenario's result directory")
    ap.add_argument("--img", default=None, help="where to write PNGs (default: docs/img)")
    ap.add_argument("--md", default=None, help="also write the markdown to this file")
    args = ap.parse_args()
    summary, runs = load(args.results)
    summary["_dir"] = args.results
    md = markdown(summary, runs)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    img = args.img or os.path.join(root, "docs", "img")
    made = plots(summary, runs, args.results, img)
    for p in made:
        rel = os.path.relpath(p, os.path.join(root, "docs"))
        md += f"\n![{os.path.basename(p)}]({rel})\n"
    print(md)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md + "\n")


if __name__ == "__main__":
    main()
