#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine (Debian 13 and Ubuntu
# 24.04: see docs/install.md for what fails there):
# installs what is missing, builds with -Werror, runs unit and integration
# tests. Real peers (nginx, haproxy, redis, promtool, curl) are installed
# here; the tests start their own instances on free loopback ports.
#
#   scripts/test.sh              everything
#   scripts/test.sh -L unit      only unit tests (ctest arguments pass through)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/deps.sh --test
cmake --preset ci >/dev/null
cmake --build --preset ci
# A missing tool fails a test instead of skipping it.
export LEVEE_REQUIRE_TOOLS=1
ctest --test-dir build --output-on-failure -j2 "$@"
