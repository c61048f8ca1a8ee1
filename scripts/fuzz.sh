#!/usr/bin/env bash
# Long fuzzing runs, by hand (ctest runs each target for a short time only).
#
#   scripts/fuzz.sh                         every target for a CPU-hour, 2 at a time
#   scripts/fuzz.sh --seconds 600 orca      one target, 10 CPU-minutes
#   scripts/fuzz.sh --known-bugs stall,pushback http_request http_response
#
# --known-bugs steps over reported, still open bugs (LEVEE_FUZZ_KNOWN_BUGS,
# see tests/fuzz/fuzz_check.hpp) so a run keeps looking for others.
# Each target runs as one process (one CPU) until it has used --seconds of
# CPU (restarted on its corpus while the machine's load keeps it below),
# over a corpus kept between runs in build-fuzz/fuzz-runs/<target>/corpus/,
# started from the committed seeds;
# crashes land beside it as crash-*, and the log as log.txt. At the end a
# table gives, per target: CPU seconds, execs, execs per CPU second,
# coverage (libFuzzer's cov = edges, ft = features), corpus size and
# crashes. Record figures in docs/security.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

seconds=3600
jobs=2
known=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --known-bugs) known="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(signals orca proxy_protocol config http_request http_response h2_request)
fi

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz

runs="$ROOT/build-fuzz/fuzz-runs"
# CPU seconds (user, system) of each fuzzer run, from bash's `time`.
TIMEFORMAT='%0U %0S'
run_one() {
  # Runs again (on the same corpus) until the target has had `seconds` of
  # CPU: on a loaded machine wall time is not CPU time.
  local t="$1" dir="$runs/$1" cpu=0 left u s
  mkdir -p "$dir/corpus"
  : >"$dir/log.txt"
  local dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="tests/fuzz/dict/$t.dict")
  while [ "$cpu" -lt "$seconds" ]; do
    left=$((seconds - cpu))
    [ "$left" -lt 30 ] && left=30
    { time LEVEE_FUZZ_KNOWN_BUGS="$known" "build-fuzz/tests/fuzz/fuzz_$t" \
        -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
        -print_final_stats=1 -print_pcs=0 "${dict[@]}" -artifact_prefix="$dir/" \
        "$dir/corpus" "tests/fuzz/corpus/$t" >>"$dir/log.txt" 2>&1 || true; } 2>"$dir/time.txt"
    read -r u s <"$dir/time.txt"
    cpu=$((cpu + u + s))
    echo "$cpu" >"$dir/cpu.txt"
    # A crash ends the run: stop there, the input is saved.
    if compgen -G "$dir/crash-*" >/dev/null || compgen -G "$dir/timeout-*" >/dev/null ||
       compgen -G "$dir/oom-*" >/dev/null || compgen -G "$dir/leak-*" >/dev/null; then break; fi
  done
}

echo "fuzz.sh: ${targets[*]}: $seconds CPU-s each, $jobs at a time${known:+, stepping over: $known}"
running=0
for t in "${targets[@]}"; do
  [ -x "build-fuzz/tests/fuzz/fuzz_$t" ] || { echo "fuzz.sh: no target fuzz_$t" >&2; exit 2; }
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

printf '\n%-14s %8s %12s %9s %6s %7s %8s %9s %7s\n' target cpu-s execs execs/cpu-s cov ft corpus bytes crashes
for t in "${targets[@]}"; do
  dir="$runs/$t"
  log="$dir/log.txt"
  cpu=$(cat "$dir/cpu.txt" 2>/dev/null || echo 0)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | awk '{s += $1} END {print s + 0}')
  rate=$(awk -v e="$execs" -v c="$cpu" 'BEGIN {if (c > 0) printf "%d", e / c; else print "?"}')
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  # libFuzzer's own count (the files on disk also hold inputs it has since reduced)
  files=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
  bytes=$(sed -n 's/.* corp: [0-9]*\/\([0-9]*[a-zA-Z]*\) .*/\1/p' <<<"$last")
  crashes=$(find "$dir" -maxdepth 1 \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | wc -l)
  printf '%-14s %8s %12s %9s %6s %7s %8s %9s %7s\n' "$t" "$cpu" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
    "${ft:-?}" "$files" "$bytes" "$crashes"
done
echo "logs and crashes: $runs/<target>/"
