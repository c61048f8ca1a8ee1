#!/usr/bin/env bash
# The whole test suite, on a fresh Debian 12 machine (Debian 13 and Ubuntu
# 24.04: see docs/install.md for what fails there):
# installs what is missing, builds with -Werror, runs unit and integration
# tests. Real peers (nginx, haproxy, redis, promtool, curl) are installed
# here; the tests start their own instances on free loopback ports.
#
#   scripts/test.sh              everything, then each fuzz target for a minute
#   scripts/test.sh -L unit      only unit tests (ctest arguments pass through;
#                                the fuzz targets run only without arguments)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/deps.sh --test
cmake --preset ci >/dev/null
cmake --build --preset ci
# A missing tool fails a test instead of skipping it.
export LEVEE_REQUIRE_TOOLS=1
status=0
ctest --test-dir build --output-on-failure -j2 "$@" || status=$?
# libFuzzer targets (tests/fuzz), built with clang into build-fuzz/: each
# runs LEVEE_FUZZ_SECONDS over its committed seeds and known reproducers.
if [ $# -eq 0 ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
  ctest --preset fuzz || status=$?
fi
exit "$status"
