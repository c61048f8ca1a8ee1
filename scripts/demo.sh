#!/usr/bin/env bash
# Starts levee with config/levee.yaml in front of the bundled demo backend
# (a fixed-capacity backend on 127.0.0.1:9000), installing and building
# whatever is missing first. Then, from another shell:
#
#   curl localhost:8080/
#   curl -s localhost:9901/metrics | grep levee_
#
# Ctrl-C stops both.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target levee levee-backend
build/levee-backend --port 9000 --workers 8 --service fixed:5ms --id demo &
BACKEND=$!
trap 'kill $BACKEND 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/9000) 2>/dev/null && break
  sleep 0.05
done
echo "levee: http://localhost:8080/  (admin: http://127.0.0.1:9901/metrics)"
build/levee -c config/levee.yaml
