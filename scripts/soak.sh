#!/usr/bin/env bash
# The soak of docs/security.md, run by hand: tests/integration/test_soak.py
# for SECONDS (default 1800: half an hour) against the build in
# LEVEE_BUILD (default build/), printing RSS and open descriptors each
# second. The suite runs the same test for 60 s.
#
#   scripts/soak.sh [SECONDS] [--sanitizer asan]   (asan: against build-asan/)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-1800}"
if [ "${2:-}" = "--sanitizer" ]; then
  export LEVEE_SANITIZER="${3:?asan or tsan}"
  export LEVEE_BUILD="$ROOT/build-$LEVEE_SANITIZER"
fi
export LEVEE_SOAK_SECONDS="$seconds"
cd "$ROOT/tests/integration"
exec python3 -m unittest -v test_soak
