"""The fronts a scenario can run against, and the configs the harness writes
for them. Each front gets the same backend; the comparison is only fair if
each is configured the way its users would for the job, so both the default
and the expert configuration of HAProxy and nginx are here.
"""
import json
import os

FRONTS = ("direct", "levee", "levee-adaptive", "levee-nogates", "haproxy", "haproxy-expert",
          "nginx", "nginx-limited")

CRIT_CLASS = {"CRITICAL_PLUS": -30, "CRITICAL": -20, "SHEDDABLE_PLUS": -10, "SHEDDABLE": 0}


def levee_config(port, admin_port, backends, workers, front, scenario):
    """levee with a static limit at the backend's workers (levee), no
    capacity configured (levee-adaptive), or every gate off (levee-nogates)."""
    s = scenario.get("levee", {})
    front, _, variant = front.partition("+")
    cluster = {"name": "app", "endpoints": [f"127.0.0.1:{p}" for p in backends],
               "queue": {"target": s.get("queue_target", "50ms")},
               "connect_timeout": "1s", "response_timeout": "30s"}
    if front == "levee":
        cluster["concurrency"] = {"limit": workers * len(backends)}
    elif front == "levee-nogates":
        cluster["concurrency"] = {"enabled": False}
        cluster["throttle"] = {"enabled": False}
        cluster["retry"] = {"enabled": False}
    for k, v in s.get("cluster", {}).items():
        cluster[k] = v
    # A variant ("levee+name") merges its own cluster settings on top.
    for k, v in s.get("variants", {}).get(variant, {}).items():
        cluster[k] = v
    cfg = {"admin": {"address": "127.0.0.1", "port": admin_port},
           "workers": 1,
           "access_log": {"enabled": False},
           "self_protection": dict({"enabled": front != "levee-nogates"}, **s.get("self_protection", {})),
           "listeners": [{"name": "bench", "address": "127.0.0.1", "port": port,
                          "max_connections": 100000,
                          "routes": [{"cluster": "app", "timeout": s.get("route_timeout", "5s")}]}],
           "clusters": [cluster]}
    if "tenants" in s and front != "levee-nogates":
        cfg["tenants"] = s["tenants"]
    return json.dumps(cfg, indent=1)


def haproxy_config(port, backends, workers, front, scenario):
    """Default HAProxy, or HAProxy as an expert would set it up for exactly
    this backend: per-server maxconn equal to its workers, priority classes
    from x-criticality, a queue timeout under the client deadline, and
    abortonclose so abandoned requests leave the queue."""
    h = scenario.get("haproxy", {})
    lines = ["global", "  nbthread 1", "  maxconn 8000", "defaults", "  mode http",
             "  timeout connect 1s", "  timeout client 30s", "  timeout server 30s",
             "  option http-keep-alive"]
    if front == "haproxy-expert":
        lines += [f"  timeout queue {h.get('queue_timeout', '500ms')}", "  option abortonclose"]
    lines += ["frontend fe", f"  bind 127.0.0.1:{port}", "  default_backend be"]
    if front == "haproxy-expert":
        for name, cls in CRIT_CLASS.items():
            lines.append(f"  http-request set-priority-class int({cls}) if {{ req.hdr(x-criticality) -m str -i {name} }}")
    lines += ["backend be", "  http-reuse safe"]
    for i, p in enumerate(backends):
        extra = f" maxconn {workers}" if front == "haproxy-expert" else ""
        lines.append(f"  server s{i} 127.0.0.1:{p}{extra}")
    return "\n".join(lines) + "\n"


def nginx_config(port, backends, workers, front, prefix):
    """Default nginx, or with max_conns per server (nginx has no queue
    outside its commercial edition: excess gets 502 at once)."""
    servers = "\n".join(
        f"    server 127.0.0.1:{p}" + (f" max_conns={workers}" if front == "nginx-limited" else "") + ";"
        for p in backends)
    return f"""daemon off; worker_processes 1; pid {prefix}/nginx.pid; error_log {prefix}/error.log;
worker_rlimit_nofile 20000;
events {{ worker_connections 16000; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  upstream be {{
{servers}
    keepalive 256;
  }}
  server {{
    listen 127.0.0.1:{port} reuseport;
    location / {{
      proxy_pass http://be;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_read_timeout 30s;
    }}
  }}
}}
"""
