#!/usr/bin/env python3
"""The proxy-overhead benchmark: the same small-response workload (wrk,
keep-alive, 50 connections) directly against a backend, through levee,
through HAProxy and through nginx, one worker each, in one run, in two
pairs:

  logs off   levee, HAProxy and nginx with no access log;
  logs on    what users run: levee with its shipped defaults (access log
             on, every request, to a file), HAProxy with `option httplog`
             logging to a file (stdout redirected), nginx with a buffered
             `access_log` to a file (buffer=64k flush=1s).

    python3 loadtest/overhead.py [--seconds 10] [--repeat 5] [--connections 50] [--only levee,haproxy]
                                 [--baseline OTHER_LEVEE_BINARY]
                                 [--tls [--close] [--no-resume] [--levee-tls JSON]]

--tls: every front terminates TLS with the same ECDSA P-256 certificate
(made here with openssl), wrk speaks https and negotiates TLS 1.3 with
each; the backend stays cleartext. Each front keeps its own TLS defaults
(levee's shipped ones; HAProxy's and nginx's, with nginx 1.22 given TLS
1.3, which it does not enable by default, and the shared session cache its
documentation recommends). Each TLS front is checked to negotiate TLS 1.3
before the runs. --close adds `Connection:
close` to every request, so each one is a new connection and a new
handshake: a resumed one, since wrk offers the session its connection had
before (SSL_clear keeps it), wherever the front sends a fresh ticket.
--no-resume turns resumption off on every front (no tickets, no session
cache), so that with --close each request is a full handshake. levee-shed
is not run with --tls.

haproxy-same (run only when named in --only): HAProxy with logs off,
configured to add the fields levee adds upstream by default and a request
id in the answer, so that both do the same work for the backend and wrk.

The backend is nginx answering `return 200 "ok"` (the cheapest server at
hand, so it is not the bottleneck). On a 2+ CPU machine every proxy gets
CPU 0 to itself (all of its threads) and wrk and the backend share CPU 1;
every proxy sees the same conditions. Each front runs `--repeat` times,
interleaved; medians are printed with ratios to HAProxy in the same pair,
each front's median p99/p50 (in a closed loop p50 follows the rate, so this
tells a fatter tail from a slower front), and each pair's ratios round by
round (levee against HAProxy in the same round, a few runs apart).
levee runs with its shipped defaults (the only settings given are its
ports, the backend and, for the logs-off pair, `access_log.enabled:
false`).
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import BUILD, Procs, free_port, machine, pin, session_cpu, start_static_backend, wait_port  # noqa: E402


def wrk(port, seconds, conns, tls=False, close=False):
    cmd = pin("1") + ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency"]
    if close:
        cmd += ["-H", "Connection: close"]
    out = subprocess.run(cmd + [f"{'https' if tls else 'http'}://127.0.0.1:{port}/"],
                         capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))

    def lat(p):
        m = re.search(rf"\s{p}%\s+([0-9.]+)(us|ms|s)", out)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errs = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    return {"rps": rps, "p50_ms": lat(50), "p99_ms": lat(99), "non2xx": int(non2xx.group(1)) if non2xx else 0,
            "errors": sum(int(g) for g in errs.groups()) if errs else 0, "requests": total}


def make_cert(d):
    """An ECDSA P-256 certificate for every TLS front: (cert, key, both in one file)."""
    cert, key, both = (os.path.join(d, n) for n in ("cert.pem", "key.pem", "combined.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=bench.test",
                    "-addext", "subjectAltName=DNS:bench.test"], check=True, capture_output=True)
    with open(both, "w") as f:
        f.write(open(cert).read() + open(key).read())
    return cert, key, both


def tls13(port):
    """Fails unless the server on port negotiates TLS 1.3 with a default client."""
    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-brief"], input=b"",
                         capture_output=True, timeout=10)
    text = (out.stdout + out.stderr).decode(errors="replace")
    if "Protocol version: TLSv1.3" not in text:
        raise RuntimeError(f"port {port} does not negotiate TLS 1.3:\n{text}")


def tls_fronts(cert, key, both, resume=True, levee_tls=None):
    """overhead.py's configs, each terminating TLS; with resume=False, none
    resumes a session (no tickets, no session cache)."""
    def hp(port, be, log):
        cfg = haproxy_cfg(port, be, log)
        bind = f"bind 127.0.0.1:{port}\n"
        assert bind in cfg and cfg.startswith("global\n")
        if not resume:
            cfg = cfg.replace("global\n", "global\n  tune.ssl.cachesize 0\n", 1)
        return cfg.replace(bind, f"bind 127.0.0.1:{port} ssl crt {both} alpn http/1.1"
                                 f"{'' if resume else ' no-tls-tickets'}\n")

    def ng(d, port, be, log):
        cfg = nginx_cfg(d, port, be, log)
        listen = f"listen 127.0.0.1:{port};"
        assert listen in cfg
        return cfg.replace(listen, f"listen 127.0.0.1:{port} ssl; ssl_certificate {cert}; ssl_certificate_key {key}; "
                                   "ssl_protocols TLSv1.2 TLSv1.3; "  # 1.22 has no 1.3 by default
                                   + ("ssl_session_cache shared:s:10m;" if resume else
                                      "ssl_session_cache off; ssl_session_tickets off;"))

    def lv(port, admin, be, access_log):
        cfg = levee_cfg(port, admin, be, access_log)
        cfg["listeners"][0]["tls"] = {"certificate": cert, "key": key}
        if not resume:
            cfg["listeners"][0]["tls"].update({"session_tickets": False, "session_cache": 0})
        cfg["listeners"][0]["tls"].update(levee_tls or {})
        return cfg
    return hp, ng, lv


def haproxy_cfg(port, be, log):
    logging = """global
  nbthread 1
  maxconn 4000
  log stdout format raw local0
defaults
  mode http
  log global
  option httplog
""" if log else """global
  nbthread 1
  maxconn 4000
defaults
  mode http
"""
    return logging + f"""  timeout connect 1s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend fe
  bind 127.0.0.1:{port}
  default_backend be
backend be
  http-reuse always
  server s1 127.0.0.1:{be}
"""


def same_work(cfg):
    """A HAProxy config asked for the headers levee adds by default: Via,
    X-Forwarded-For and -Proto, a request id both ways, the time left and
    the attempt count. What they cost the backend and the client (nginx and
    wrk share a core here) then counts on both sides."""
    anchor = "  default_backend be\n"
    assert anchor in cfg
    return cfg.replace(anchor, anchor + """  unique-id-format %[rand(4294967295),hex]%[rand(4294967295),hex]
  unique-id-header x-request-id
  option forwardfor
  http-request set-header x-forwarded-proto http
  http-request add-header via "1.1 haproxy"
  http-request set-header x-request-timeout-ms 29999
  http-request set-header x-attempt-count 1
  http-response set-header x-request-id %[unique-id]
""", 1)


def nginx_cfg(d, port, be, log):
    access = f"access_log {d}/access.log combined buffer=64k flush=1s;" if log else "access_log off;"
    return f"""daemon off; worker_processes 1; pid {d}/px.pid; error_log {d}/px.err;
events {{ worker_connections 4096; }}
http {{ {access} keepalive_requests 1000000;
  upstream be {{ server 127.0.0.1:{be}; keepalive 64; }}
  server {{ listen 127.0.0.1:{port}; location / {{ proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; }} }} }}
"""


def levee_cfg(port, admin, be, access_log):
    cfg = {"admin": {"address": "127.0.0.1", "port": admin}, "workers": 1,
           "listeners": [{"name": "bench", "address": "127.0.0.1", "port": port, "routes": [{"cluster": "app"}]}],
           "clusters": [{"name": "app", "endpoints": [f"127.0.0.1:{be}"]}]}
    cfg["access_log"] = {"path": access_log} if access_log else {"enabled": False}
    return cfg


PAIRS = {"logs off": ("levee", "haproxy", "nginx"), "logs on": ("levee-log", "haproxy-log", "nginx-log")}


def start_fronts(procs, be, want, haproxy_conf, nginx_conf):
    """HAProxy and nginx, each with logs off and on, pinned to CPU 0 in
    front of the backend `be`; configs from haproxy_conf(port, be, log) and
    nginx_conf(dir, port, be, log). Returns {name: port} of those started
    (all, or those in `want`)."""
    ports = {}
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    for name, log in (("haproxy", False), ("haproxy-log", True), ("haproxy-same", False)):
        if (want and name not in want) or (name == "haproxy-same" and not want):
            continue  # haproxy-same runs only when asked for
        port = free_port()
        cfg = os.path.join(procs.dir, name + ".cfg")
        with open(cfg, "w") as f:
            f.write(same_work(haproxy_conf(port, be, log)) if name == "haproxy-same" else haproxy_conf(port, be, log))
        out = open(os.path.join(procs.dir, name + "-access.log"), "w")
        procs.items.append((name, subprocess.Popen(pin("0") + [haproxy, "-f", cfg], stdout=out,
                                                   stderr=subprocess.DEVNULL, start_new_session=True)))
        ports[name] = port
    for name, log in (("nginx", False), ("nginx-log", True)):
        if want and name not in want:
            continue
        port = free_port()
        d = os.path.join(procs.dir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "px.conf"), "w") as f:
            f.write(nginx_conf(d, port, be, log))
        procs.start(pin("0") + ["nginx", "-p", d, "-c", os.path.join(d, "px.conf")], name)
        ports[name] = port
    return ports


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", help="comma-separated fronts to run (direct always runs)")
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--levee", default=os.path.join(BUILD, "levee"), help="the levee binary to measure")
    ap.add_argument("--baseline", help="a second levee binary (e.g. a build of main), measured as levee-base "
                                       "interleaved with levee under the same conditions (before/after a change)")
    ap.add_argument("--tls", action="store_true", help="every front terminates TLS (wrk over https)")
    ap.add_argument("--close", action="store_true", help="Connection: close on every request (with --tls: a new "
                                                         "handshake per request, resumed unless --no-resume)")
    ap.add_argument("--no-resume", action="store_true", help="with --tls: no front resumes sessions (with --close: "
                                                             "a full handshake per request)")
    ap.add_argument("--levee-tls", help="with --tls: JSON merged into levee's listener tls settings, e.g. "
                                        "'{\"shed_handshakes_above\": 0}'")
    ap.add_argument("--json")
    args = ap.parse_args()
    for tool in ("wrk", "nginx", "haproxy"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            sys.exit(f"{tool} is needed (scripts/deps.sh --test installs it)")
    procs = Procs()
    want = set(args.only.split(",")) if args.only else None
    try:
        be = start_static_backend(procs)
        hp_cfg, ng_cfg, lv_cfg = haproxy_cfg, nginx_cfg, levee_cfg
        if args.tls:
            hp_cfg, ng_cfg, lv_cfg = tls_fronts(*make_cert(procs.dir), resume=not args.no_resume,
                                                levee_tls=json.loads(args.levee_tls) if args.levee_tls else None)
        ports = {"direct": be}
        ports.update(start_fronts(procs, be, want, hp_cfg, ng_cfg))
        levees = [("levee", None, args.levee), ("levee-log", os.path.join(procs.dir, "levee-access.log"), args.levee)]
        if args.baseline:
            levees.append(("levee-base", None, args.baseline))
        for name, log, binary in levees:
            if want and name not in want and name != "levee-base":
                continue
            port, admin = free_port(), free_port()
            path = os.path.join(procs.dir, name + ".yaml")
            with open(path, "w") as f:
                json.dump(lv_cfg(port, admin, be, log), f)
            procs.start(pin("0") + [binary, "-c", path], name)
            ports[name] = port
        # The same levee shedding every request at gate 1 (thresholds of 0):
        # the full cost of a rejection (parse, classify, answer) against a
        # proxied request's.
        if not args.tls and (not want or "levee-shed" in want):
            sp, sa = free_port(), free_port()
            cfg = levee_cfg(sp, sa, be, None)
            cfg["self_protection"] = {"time_constant": "10ms", "thresholds": {
                "SHEDDABLE": 0, "SHEDDABLE_PLUS": 0, "CRITICAL": 0, "CRITICAL_PLUS": 0}}
            # wrk's keep-alive connections are refused again and again: with
            # the listener's shed_backoff they would be read less often
            # (loadtest/shed_flood.py measures that); here the point is what
            # one rejection costs.
            cfg["listeners"][0]["shed_backoff"] = "0s"
            with open(os.path.join(procs.dir, "levee-shed.yaml"), "w") as f:
                json.dump(cfg, f)
            procs.start(pin("0") + [args.levee, "-c", os.path.join(procs.dir, "levee-shed.yaml")],
                        "levee-shed")
            ports["levee-shed"] = sp
        for p in ports.values():
            wait_port(p)
        sids = {name: p.pid for name, p in procs.items}
        sids["direct"] = sids["backend"]

        def run(name, port, seconds):
            # The front's CPU per request, beside the client's figures: on
            # 2 cores wrk may be what limits the rate, and then the front
            # with spare time shows it here.
            tls = args.tls and name != "direct"  # the backend is cleartext
            before = session_cpu(sids[name])
            r = wrk(port, seconds, args.connections, tls=tls, close=args.close)
            r["cpu_us"] = (session_cpu(sids[name]) - before) / max(1, r["requests"]) * 1e6
            return r
        if args.tls:
            for name, port in ports.items():
                if name != "direct":
                    tls13(port)
        for name, port in ports.items():  # warm connection pools
            run(name, port, 1)
        results = {k: [] for k in ports}
        for _ in range(args.repeat):
            for name, port in ports.items():
                results[name].append(run(name, port, args.seconds))
                time.sleep(0.5)
    finally:
        procs.stop()
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("rps", "p50_ms", "p99_ms", "cpu_us")}
           for k, v in results.items()}
    for k, v in results.items():
        med[k]["non2xx"] = sum(r["non2xx"] for r in v) + sum(r["errors"] for r in v)
        # The latency distribution's spread, apart from the rate: in a
        # closed loop p50 follows the rate, so a p99 ratio with the same
        # p99/p50 is the rate's doing, and a larger p99/p50 is a fatter tail.
        med[k]["p99_over_p50"] = statistics.median(r["p99_ms"] / r["p50_ms"] for r in v if r["p50_ms"] > 0) \
            if any(r["p50_ms"] > 0 for r in v) else 0.0
    mode = ((" over TLS 1.3 (ECDSA P-256)" if args.tls else "") + (", no resumption" if args.no_resume else "")
            + (", Connection: close" if args.close else ""))
    print(f"overhead benchmark{mode}: wrk -t1 -c{args.connections} -d{args.seconds}s, {args.repeat} runs each, "
          "interleaved, medians")
    print(f"machine: {machine()}")
    print(f"{'front':>12} {'req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'req/s vs haproxy':>17} {'p99 vs haproxy':>15} {'non-2xx/errors':>8} {'cpu us/req':>10} {'p99/p50':>8}")
    for pair, (lv, hp, ng) in PAIRS.items():
        if hp not in med:
            continue
        base = med[hp]
        print(f"-- {pair}")
        for k in (([] if pair != "logs off" else ["direct"]) + [lv] + (["levee-base"] if pair == "logs off" else []) + [hp]
                 + (["haproxy-same"] if pair == "logs off" else []) + [ng]):
            if k not in med:
                continue
            v = med[k]
            print(f"{k:>12} {v['rps']:10.0f} {v['p50_ms']:8.3f} {v['p99_ms']:8.3f} {v['rps'] / base['rps']:17.3f} "
                  f"{v['p99_ms'] / base['p99_ms']:15.3f} {v['non2xx']:8d} {v['cpu_us']:10.1f} {v['p99_over_p50']:8.2f}")
        if lv in results and hp in results:
            # Each round's levee against the same round's HAProxy: the
            # machine's speed moves between rounds, less within one.
            def ratio(a, b):
                return f"{a / b:.3f}" if b > 0 else "n/a"
            rounds = list(zip(results[lv], results[hp]))
            print(f"   same-round {lv}/{hp}: req/s " + " ".join(ratio(a["rps"], b["rps"]) for a, b in rounds)
                  + "; p99 " + " ".join(ratio(a["p99_ms"], b["p99_ms"]) for a, b in rounds))
    if "levee" in med and "levee-base" in med:
        lv, base = med["levee"], med["levee-base"]
        print(f"levee / levee-base (--baseline): req/s {lv['rps'] / base['rps']:.3f}, p50 {lv['p50_ms'] / base['p50_ms']:.3f}, "
              f"p99 {lv['p99_ms'] / base['p99_ms']:.3f}")
    if "levee" in med and "haproxy-same" in med:
        lv, same = med["levee"], med["haproxy-same"]
        print(f"levee / haproxy-same (HAProxy adding levee's default headers): req/s {lv['rps'] / same['rps']:.3f}, "
              f"p99 {lv['p99_ms'] / same['p99_ms']:.3f}")
    if "levee" in med and "levee-shed" in med:
        lv, shed = med["levee"]["rps"], med["levee-shed"]["rps"]
        print(f"levee-shed answers every request itself (503 executor_overload): {shed:.0f} rejections/s against "
              f"{lv:.0f} proxied/s on the same core: a rejection costs at most {lv / shed:.2f}x a proxied request "
              f"(at most: wrk, on the other core, may be what limits the rejection rate)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians": med, "runs": results, "machine": machine(), "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
