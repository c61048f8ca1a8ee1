"""Scenario files: YAML, validated here so a typo fails before a long run.

    name: overload
    description: ...
    backend: {workers: 10, service: fixed:10ms, instances: 1, orca: text}
    fronts: [direct, levee, haproxy-expert, ...]
    load:
      duration: 10s
      warmup: 3s
      poisson: true
      steps: [0.5, 1, 2, 5, 10]        # x measured capacity (or rates: [1000, 2000])
      step_unit: capacity              # or rps
      client: {retries: 0, backoff: 50ms, honor_retry_after: false, honor_no_retry: false}
      classes:
        - {name: cp, weight: 5, criticality: CRITICAL_PLUS, tenant: a, deadline: 1s}
        - {name: big, weight: 1, tenant: b, deadline: 1s, service: 100ms}   # its own service time (and cost)
    events:                            # optional, seconds from the start of the load
      - {at: 10, action: hang}         # hang, unhang, fail, recover, kill, restart, health_fail, health_ok
    levee: {queue_target: 50ms, cluster: {...}, tenants: {...}}
    haproxy: {queue_timeout: 500ms}
"""
import re

from fronts import FRONTS

ACTIONS = {"hang", "unhang", "fail", "recover", "kill", "restart", "health_fail", "health_ok"}


class ScenarioError(ValueError):
    pass


def seconds(v, where):
    if isinstance(v, (int, float)):
        return float(v)
    m = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s|m)?\s*", str(v))
    if not m:
        raise ScenarioError(f"{where}: '{v}' is not a duration (like 500ms, 10s, 1m)")
    n = float(m.group(1))
    return {"ms": n / 1000, "s": n, "m": n * 60, None: n}[m.group(2)]


def parse(doc, name="scenario"):
    """Validates a loaded YAML document and fills in defaults."""
    if not isinstance(doc, dict):
        raise ScenarioError(f"{name}: must be a mapping")
    known = {"name", "description", "backend", "fronts", "load", "events", "levee", "haproxy", "report"}
    for k in doc:
        if k not in known:
            raise ScenarioError(f"{name}: unknown key '{k}'")
    s = {"name": doc.get("name", name), "description": doc.get("description", ""),
         "levee": doc.get("levee", {}), "haproxy": doc.get("haproxy", {}), "report": doc.get("report", {})}
    b = doc.get("backend", {})
    s["backend"] = {"workers": int(b.get("workers", 10)), "service": str(b.get("service", "fixed:10ms")),
                    "instances": int(b.get("instances", 1)), "orca": str(b.get("orca", "text")),
                    "burn": bool(b.get("burn", False)),
                    "warmup_seconds": float(b.get("warmup_seconds", 0)),
                    "warmup_factor": float(b.get("warmup_factor", 1)),
                    "warmup_mode": str(b.get("warmup_mode", "slow"))}
    if s["backend"]["warmup_mode"] not in ("slow", "thrash"):
        raise ScenarioError(f"{name}: backend.warmup_mode must be slow or thrash")
    if s["backend"]["workers"] < 1 or s["backend"]["instances"] < 1:
        raise ScenarioError(f"{name}: backend.workers and backend.instances must be >= 1")
    fronts = doc.get("fronts", ["levee"])
    variants = (doc.get("levee") or {}).get("variants", {})
    for f in fronts:
        base, _, variant = f.partition("+")
        if base not in FRONTS:
            raise ScenarioError(f"{name}: unknown front '{f}' (known: {', '.join(FRONTS)})")
        if variant and (not base.startswith("levee") or variant not in variants):
            raise ScenarioError(f"{name}: front '{f}': no levee variant '{variant}' in levee.variants")
    s["fronts"] = list(fronts)
    load = doc.get("load")
    if not isinstance(load, dict):
        raise ScenarioError(f"{name}: load is required")
    unit = load.get("step_unit", "capacity")
    if unit not in ("capacity", "rps"):
        raise ScenarioError(f"{name}: load.step_unit must be capacity or rps")
    steps = load.get("steps", [1])
    if not steps or not all(isinstance(x, (int, float)) and x > 0 for x in steps):
        raise ScenarioError(f"{name}: load.steps must be positive numbers")
    classes = load.get("classes") or [{"name": "all", "weight": 1, "deadline": "1s"}]
    out_classes = []
    for i, c in enumerate(classes):
        if "name" not in c:
            raise ScenarioError(f"{name}: load.classes[{i}] needs a name")
        crit = c.get("criticality", "")
        if crit and crit.upper() not in ("CRITICAL_PLUS", "CRITICAL", "SHEDDABLE_PLUS", "SHEDDABLE"):
            raise ScenarioError(f"{name}: load.classes[{i}].criticality '{crit}' is not a criticality")
        out_classes.append({"name": c["name"], "weight": float(c.get("weight", 1)), "criticality": crit,
                            "tenant": c.get("tenant", ""),
                            "deadline": seconds(c.get("deadline", "1s"), f"load.classes[{i}].deadline"),
                            "path": c.get("path", "/"),
                            # the backend's time for this class (x-test-service-ms), reported as its cost
                            "service": seconds(c["service"], f"load.classes[{i}].service") if "service" in c else None})
    client = load.get("client", {})
    s["load"] = {"duration": seconds(load.get("duration", "10s"), "load.duration"),
                 "warmup": seconds(load.get("warmup", "2s"), "load.warmup"),
                 "poisson": bool(load.get("poisson", True)), "steps": [float(x) for x in steps],
                 "step_unit": unit, "classes": out_classes,
                 "phases": load.get("phases"),  # optional explicit "10s@1,5s@3" in x-capacity
                 "client": {"retries": int(client.get("retries", 0)),
                            "backoff": seconds(client.get("backoff", "50ms"), "load.client.backoff"),
                            "honor_retry_after": bool(client.get("honor_retry_after", False)),
                            "honor_no_retry": bool(client.get("honor_no_retry", False))}}
    events = []
    for i, e in enumerate(doc.get("events", []) or []):
        if e.get("action") not in ACTIONS:
            raise ScenarioError(f"{name}: events[{i}].action must be one of {sorted(ACTIONS)}")
        events.append({"at": seconds(e.get("at", 0), f"events[{i}].at"), "action": e["action"],
                       "instance": int(e.get("instance", 0))})
    s["events"] = sorted(events, key=lambda e: e["at"])
    return s


def class_arg(c):
    parts = [f"name={c['name']}", f"weight={c['weight']}", f"deadline={c['deadline']}s", f"path={c['path']}"]
    if c["criticality"]:
        parts.append(f"criticality={c['criticality']}")
    if c["tenant"]:
        parts.append(f"tenant={c['tenant']}")
    if c.get("service") is not None:
        parts.append(f"service_ms={c['service'] * 1000:g}")
    return ",".join(parts)
