#!/bin/sh
# Handshake cost: new (full) and resumed TLS handshakes per second that one
# levee worker completes, beside nginx and HAProxy with the same certificate
# (ECDSA P-256) and TLS 1.3, each server pinned to CPU 0 and the client
# (`openssl s_time`, handshakes only, no request) to CPU 1. Columns: the
# client's rate (hs/s), the server's CPU per handshake (us) and 1 / that
# (max/s, what one core could sustain).
#
# s_time makes one connection at a time, so its rate is bounded by the
# round trip, not by the server; the server's CPU time per handshake
# (utime+stime of its processes over the run) is the cost figure, and
# 1 / that is what one core could sustain.
#
#   sh loadtest/tls_handshakes.sh [SECONDS] [LEVEE_BINARY]
set -eu
secs=${1:-10}
levee=$(realpath "${2:-$(dirname "$0")/../build/levee}")
dir=$(mktemp -d)
trap 'kill $(cat "$dir"/*.pid 2>/dev/null) 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out cert.pem -days 1 \
  -subj /CN=bench.test -addext subjectAltName=DNS:bench.test 2>/dev/null
cat cert.pem key.pem > combined.pem
lp=18443; np=18444; hp=18445; ap=18446
cat > levee.yaml <<YAML
{"workers": 1, "admin": {"address": "127.0.0.1", "port": $ap},
 "access_log": {"enabled": false},
 "listeners": [{"name": "tls", "address": "127.0.0.1", "port": $lp,
                "tls": {"certificate": "$dir/cert.pem", "key": "$dir/key.pem"}, "routes": [{"cluster": "app"}]}],
 "clusters": [{"name": "app", "endpoints": ["127.0.0.1:1"]}]}
YAML
cat > nginx.conf <<NGX
worker_processes 1; pid $dir/nginx.pid; error_log $dir/nginx.err; daemon off;
events { worker_connections 4096; }
http { access_log off; ssl_session_cache shared:s:10m;
  server { listen 127.0.0.1:$np ssl; ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem;
           ssl_protocols TLSv1.2 TLSv1.3; location / { return 200 "ok"; } } }
NGX
cat > haproxy.cfg <<HAP
global
  nbthread 1
defaults
  mode http
  timeout client 10s
  timeout server 10s
  timeout connect 1s
frontend f
  bind 127.0.0.1:$hp ssl crt $dir/combined.pem
  http-request return status 200
HAP
taskset -c 0 "$levee" -c levee.yaml >levee.log 2>&1 & echo $! > levee.pid
taskset -c 0 nginx -p "$dir" -c "$dir/nginx.conf" >/dev/null 2>&1 & echo $! > nginx.pid
taskset -c 0 haproxy -f haproxy.cfg >haproxy.log 2>&1 & echo $! > haproxy.pid
for p in $lp $np $hp; do
  i=0; until openssl s_client -connect 127.0.0.1:$p -brief </dev/null >/dev/null 2>&1; do
    i=$((i+1)); [ $i -gt 200 ] && { echo "port $p never answered"; exit 1; }; sleep 0.05; done
done
ticks() {  # utime+stime of a process and its children, in clock ticks
  t=0
  for p in $1 $(pgrep -P "$1" || true); do
    t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat)))
  done
  echo $t
}
hz=$(getconf CLK_TCK)
measure() {  # port pid s_time-options -> "rate/s cpu_us_per_handshake"
  a=$(ticks "$2")
  out=$(taskset -c 1 openssl s_time -connect 127.0.0.1:$1 $3 -time "$secs" 2>/dev/null | grep 'real seconds' | head -1)
  b=$(ticks "$2")
  echo "$out" | awk -v d=$((b - a)) -v hz="$hz" '{printf "%8.0f %8.0f", $1 / $4, d / hz * 1e6 / $1}'
}
# TLS 1.3 resumption cannot be timed handshake-only with s_time (its
# tickets arrive after the handshake, and s_time closes first), so the
# resumed column is TLS 1.2 (session tickets); tests/integration/test_tls.py
# proves TLS 1.3 resumption.
printf '%-8s | %-20s | %-20s | %-20s\n' "" "TLS 1.3 full" "TLS 1.2 full" "TLS 1.2 resumed"
printf '%-8s | %6s %6s %6s | %6s %6s %6s | %6s %6s %6s\n' server "hs/s" "us" "max/s" "hs/s" "us" "max/s" "hs/s" "us" "max/s"
for s in levee:$lp:$(cat levee.pid) nginx:$np:$(cat nginx.pid) haproxy:$hp:$(cat haproxy.pid); do
  name=${s%%:*}; rest=${s#*:}; port=${rest%%:*}; pid=${rest#*:}
  line=$(printf '%-8s' "$name")
  for opts in "-new -tls1_3" "-new -tls1_2" "-reuse -tls1_2"; do
    set -- $(measure "$port" "$pid" "$opts")
    line="$line | $(printf '%6s %6s %6.0f' "$1" "$2" "$(echo "1000000 / $2" | bc -l)")"
  done
  echo "$line"
done
