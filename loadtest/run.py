#!/usr/bin/env python3
"""Runs a load-test scenario against chosen fronts.

    python3 loadtest/run.py loadtest/scenarios/overload.yaml [--fronts levee,haproxy-expert]
        [--steps 1,10] [--duration 10s] [--out loadtest/results] [--quick]

For every (front, step): fresh backend(s) and front, capacity measured
first (closed loop, as many connections as the backend has workers),
then open-loop load at step x capacity from levee-loadgen. On a machine
with 2+ CPUs the front gets CPU 0 to itself; backend and load generator
share the rest. Results: <out>/<scenario>/<front>-<step>x.{json,csv} and
summary.json; `loadtest/report.py` turns them into tables and plots.
"""
import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fronts import haproxy_config, levee_config, nginx_config  # noqa: E402
from scenario import ScenarioError, class_arg, parse, seconds  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("LEVEE_BUILD", os.path.join(ROOT, "build"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listening on {port}")


def pin(cpus):
    """taskset prefix, or nothing on a one-CPU machine."""
    if os.cpu_count() and os.cpu_count() >= 2 and shutil.which("taskset"):
        return ["taskset", "-c", cpus]
    return []


def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "os": platform.platform()}


class Procs:
    def __init__(self):
        self.items = []
        self.dir = tempfile.mkdtemp(prefix="levee-bench-")

    def start(self, args, name):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        # Its own process group: stop() ends what it forks too (a killed
        # nginx master leaves its workers running otherwise).
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.items.append((name, p))
        return p

    def stop(self):
        for name, p in reversed(self.items):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.items = []
        if os.environ.get("LEVEE_BENCH_KEEP"):
            print(f"kept {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def session_cpu(sid):
    """CPU seconds (user + system) of every live process in session sid
    (Procs starts each in its own): a server's cost, whatever it forks."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # fields[0] is the state: session is the 6th field of stat
            total += int(fields[11]) + int(fields[12])
    return total / tick


def start_static_backend(procs):
    """nginx answering `return 200 "ok"` on CPU 1: the cheapest backend at
    hand, for benchmarks of the proxy rather than of the backend. Returns
    its port."""
    be = free_port()
    with open(os.path.join(procs.dir, "be.conf"), "w") as f:
        f.write(f"""daemon off; worker_processes 1; pid {procs.dir}/be.pid; error_log {procs.dir}/be.err;
events {{ worker_connections 4096; }}
http {{ access_log off; keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{be}; location / {{ return 200 "ok\\n"; }} }} }}
""")
    procs.start(pin("1") + ["nginx", "-p", procs.dir, "-c", os.path.join(procs.dir, "be.conf")], "backend")
    wait_port(be)
    return be


def start_backend(procs, port, b, index, cold=False):
    """cold: a restart, slower for its first warmup_seconds (if configured)."""
    args = pin("1") + [os.path.join(BUILD, "levee-backend"), "--port", str(port), "--workers", str(b["workers"]),
                       "--service", b["service"], "--orca", b["orca"], "--id", f"b{index}"]
    if b["burn"]:
        args.append("--burn")
    if cold and b["warmup_seconds"] > 0:
        args += ["--warmup-seconds", str(b["warmup_seconds"]), "--warmup-factor", str(b["warmup_factor"]),
                 "--warmup-mode", b.get("warmup_mode", "slow")]
    p = procs.start(args, f"backend{index}")
    wait_port(port)
    return p


def measure_capacity(ports, workers, secs=3.0):
    """Closed loop with twice as many connections as the backend has workers,
    so a request is always waiting when a worker frees: what the backend
    really serves on this machine, timers and all."""
    wrk = shutil.which("wrk")
    if not wrk:
        raise RuntimeError("wrk is needed to measure capacity (scripts/deps.sh --test)")
    total = 0.0
    for port in ports:
        out = subprocess.run(pin("1") + [wrk, "-t1", f"-c{2 * workers}", f"-d{max(1, int(round(secs)))}s", f"http://127.0.0.1:{port}/"],
                             capture_output=True, text=True, timeout=secs + 30).stdout
        m = re.search(r"Requests/sec:\s+([0-9.]+)", out)
        if not m:
            raise RuntimeError("wrk: " + out)
        total += float(m.group(1))
    return total


def start_front(procs, front, backends, scenario):
    b = scenario["backend"]
    if front == "direct":
        if len(backends) != 1:
            raise RuntimeError("front 'direct' needs exactly one backend instance")
        return backends[0], None
    port = free_port()
    if front.startswith("levee"):
        admin = free_port()
        path = os.path.join(procs.dir, "levee.yaml")
        with open(path, "w") as f:
            f.write(levee_config(port, admin, backends, b["workers"], front, scenario))
        procs.start(pin("0") + [os.path.join(BUILD, "levee"), "-c", path], "levee")
        wait_port(port)
        return port, admin
    if front.startswith("haproxy"):
        path = os.path.join(procs.dir, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(haproxy_config(port, backends, b["workers"], front, scenario))
        procs.start(pin("0") + [shutil.which("haproxy") or "/usr/sbin/haproxy", "-f", path], "haproxy")
        wait_port(port)
        return port, None
    if front.startswith("nginx"):
        path = os.path.join(procs.dir, "nginx.conf")
        with open(path, "w") as f:
            f.write(nginx_config(port, backends, b["workers"], front, procs.dir))
        procs.start(pin("0") + [shutil.which("nginx") or "/usr/sbin/nginx", "-p", procs.dir, "-c", path], "nginx")
        wait_port(port)
        return port, None
    raise RuntimeError(f"unknown front {front}")


def backend_action(port, action):
    paths = {"hang": "/_admin/hang?on=1", "unhang": "/_admin/hang?on=0", "fail": "/_admin/fail?status=503&rate=1",
             "recover": "/_admin/fail?rate=0", "health_fail": "/_admin/health?ok=0", "health_ok": "/_admin/health?ok=1"}
    urllib.request.urlopen(f"http://127.0.0.1:{port}{paths[action]}", timeout=2).read()


def run_events(events, t0, procs, ports, scenario, log):
    for e in events:
        delay = t0 + e["at"] - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        i = e["instance"]
        try:
            if e["action"] == "kill":
                name = f"backend{i}"
                for n, p in procs.items:
                    if n == name and p.poll() is None:
                        p.send_signal(signal.SIGKILL)
                        p.wait()
            elif e["action"] == "restart":
                start_backend(procs, ports[i], scenario["backend"], i, cold=True)
            else:
                backend_action(ports[i], e["action"])
            log.append({"at": round(time.monotonic() - t0, 3), "action": e["action"], "instance": i})
        except Exception as ex:  # noqa: BLE001 - recorded, the run goes on
            log.append({"at": round(time.monotonic() - t0, 3), "action": e["action"], "error": str(ex)})


def run_one(scenario, front, step, capacity, out_dir, procs, args):
    b = scenario["backend"]
    load = scenario["load"]
    ports = [free_port() for _ in range(b["instances"])]
    for i, port in enumerate(ports):
        start_backend(procs, port, b, i)
    target, admin = start_front(procs, front, ports, scenario)
    rate_of = (lambda x: x * capacity) if load["step_unit"] == "capacity" else (lambda x: x)
    if load["phases"]:
        # "10s@1,10s@3": multiples of the step's rate unit
        phases = ",".join(f"{seconds(d, 'phases')}s@{rate_of(float(r)) * step:.1f}"
                          for d, r in (p.split("@") for p in load["phases"].split(",")))
        warmup = load["warmup"]
    else:
        phases = f"{load['warmup'] + load['duration']}s@{rate_of(step):.1f}"
        warmup = load["warmup"]
    base = os.path.join(out_dir, f"{front}-{step:g}x")
    lg = pin("1") + [os.path.join(BUILD, "levee-loadgen"), "--target", f"127.0.0.1:{target}", "--phases", phases,
                     "--warmup", f"{warmup}s", "--max-conns", "15000", "--csv", base + ".csv", "--json", base + ".json"]
    if load["poisson"]:
        lg.append("--poisson")
    c = load["client"]
    if c["retries"]:
        lg += ["--retries", str(c["retries"]), "--backoff", f"{c['backoff']}s"]
        if c["honor_retry_after"]:
            lg.append("--honor-retry-after")
        if c["honor_no_retry"]:
            lg.append("--honor-no-retry")
    for cl in load["classes"]:
        lg += ["--class", class_arg(cl)]
    events_log = []
    t0 = time.monotonic()
    ev = threading.Thread(target=run_events, args=(scenario["events"], t0, procs, ports, scenario, events_log),
                          daemon=True)
    ev.start()
    out = subprocess.run(lg, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("loadgen: " + out.stderr)
    ev.join(timeout=1)
    result = json.loads(out.stdout)
    result.update({"front": front, "step": step, "capacity": capacity, "phases": phases, "events": events_log})
    if admin:
        try:
            result["levee_metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2).read().decode()
        except OSError:
            pass
    with open(base + ".json", "w") as f:
        json.dump(result, f, indent=1)
    return result


def describe(r):
    t = r["total"]
    cap = r["capacity"]
    line = (f"{r['front']:>15} {r['step']:>5g}x  offered {t['offered'] / max(r.get('measured_seconds', 1), 1e-9):8.0f}/s  "
            f"goodput {t['goodput']:8.1f}/s ({100 * t['goodput'] / cap:5.1f}% of capacity)  "
            f"timeouts {t['timeouts']:6d}  rej p99 {t['rejection_latency']['p99_ms']:7.2f} ms")
    per = "  ".join(f"{c['name']}: {100 * c['success_rate']:.1f}% ok, p99 {c['ok_latency']['p99_ms']:.1f} ms"
                    for c in r["classes"])
    return line + "\n" + " " * 24 + per


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--fronts", help="comma-separated; default: the scenario's")
    ap.add_argument("--steps", help="comma-separated; default: the scenario's")
    ap.add_argument("--duration", help="override load.duration")
    ap.add_argument("--warmup", help="override load.warmup")
    ap.add_argument("--out", default=os.path.join(ROOT, "loadtest", "results"))
    ap.add_argument("--capacity-seconds", type=float, default=3.0)
    args = ap.parse_args()
    try:
        import yaml
    except ImportError:
        sys.exit("run.py needs PyYAML (apt-get install python3-yaml, or scripts/deps.sh --bench)")
    with open(args.scenario) as f:
        try:
            scenario = parse(yaml.safe_load(f), os.path.basename(args.scenario))
        except ScenarioError as e:
            sys.exit(f"scenario error: {e}")
    if args.fronts:
        scenario["fronts"] = args.fronts.split(",")
    if args.steps:
        scenario["load"]["steps"] = [float(x) for x in args.steps.split(",")]
    if args.duration:
        scenario["load"]["duration"] = seconds(args.duration, "--duration")
    if args.warmup:
        scenario["load"]["warmup"] = seconds(args.warmup, "--warmup")
    out_dir = os.path.join(args.out, scenario["name"])
    os.makedirs(out_dir, exist_ok=True)
    summary = {"scenario": scenario, "machine": machine(), "command": " ".join(sys.argv),
               "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": []}
    print(f"scenario {scenario['name']}: {scenario['description'].strip()}")
    for front in scenario["fronts"]:
        for step in scenario["load"]["steps"]:
            procs = Procs()
            try:
                b = scenario["backend"]
                ports = [free_port() for _ in range(b["instances"])]
                for i, port in enumerate(ports):
                    start_backend(procs, port, b, i)
                capacity = measure_capacity(ports, b["workers"], args.capacity_seconds)
                procs.stop()
                procs = Procs()
                r = run_one(scenario, front, step, capacity, out_dir, procs, args)
                print(describe(r), flush=True)
                summary["runs"].append({"front": front, "step": step, "capacity": capacity,
                                        "file": os.path.basename(f"{front}-{step:g}x.json")})
            finally:
                procs.stop()
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"results in {out_dir}")


if __name__ == "__main__":
    main()
