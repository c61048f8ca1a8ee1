#!/usr/bin/env bash
# The whole test suite (unit + integration) under a sanitizer:
#
#   scripts/sanitize.sh asan     AddressSanitizer + UndefinedBehaviorSanitizer
#   scripts/sanitize.sh tsan     ThreadSanitizer
#   scripts/sanitize.sh asan -L unit    (further arguments go to ctest)
#
# Builds the preset of that name into build-<name>/, runs ctest there, and
# fails if any process (unit test, levee, the load tools) wrote a sanitizer
# report, even one whose test passed: the integration harness kills levee
# and discards its output, so reports go to files (log_path), not to the
# test's output. Reports: build-<name>/sanitizer-reports/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
san="${1:-}"
case "$san" in
  asan|tsan) shift ;;
  *) echo "usage: scripts/sanitize.sh asan|tsan [ctest arguments]" >&2; exit 2 ;;
esac
scripts/deps.sh --test
cmake --preset "$san" >/dev/null
cmake --build --preset "$san"

build="$ROOT/build-$san"
reports="$build/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
# Leaks are checked at exit (LeakSanitizer, part of ASan); UBSan's checks
# abort on the first report (-fno-sanitize-recover in the preset).
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1"
export TSAN_OPTIONS="log_path=$reports/tsan:second_deadlock_stack=1:history_size=4:suppressions=$ROOT/tests/tsan.supp"
export LEVEE_REQUIRE_TOOLS=1
# For tests whose bounds measure the build (RSS, throughput): which sanitizer.
export LEVEE_SANITIZER="$san"
# tests/integration/test_deploy.py finds levee by LEVEE_BIN, not LEVEE_BUILD.
export LEVEE_BIN="$build/levee"

status=0
start=$(date +%s)
ctest --test-dir "$build" --output-on-failure -j2 "$@" || status=$?
echo "sanitize.sh: ctest under $san took $(( $(date +%s) - start )) s"
# Every concurrent part at once, and a clean exit for LeakSanitizer
# (the integration tests kill levee). Only with the whole suite.
if [ $# -eq 0 ]; then
  python3 scripts/concurrency_stress.py "$build" 15 || status=$?
fi
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports:" >&2
  for f in "$reports"/*; do echo "=== $f" >&2; cat "$f" >&2; done
  status=1
fi
exit "$status"
