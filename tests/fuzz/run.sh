#!/usr/bin/env bash
# Runs every libFuzzer target listed in BUILD/fuzz_targets.txt for SECONDS
# each, with a fixed seed, starting from the seed corpus its seeds_ program
# writes. Any crash, hang (-timeout), leak, sanitizer report or oversized
# allocation (-rss_limit_mb/-malloc_limit_mb) fails the run; the input that
# caused it is kept in BUILD/fuzz/artifacts/. Prints executions per target.
# Usage: tests/fuzz/run.sh BUILD SECONDS
set -euo pipefail
build=${1:?usage: run.sh BUILD SECONDS}
seconds=${2:?usage: run.sh BUILD SECONDS}
work="$build/fuzz"
rm -rf "$work"
mkdir -p "$work/artifacts"
# One thread (no pool start-up per process), no block reuse (a reused block
# would hide a use after free from AddressSanitizer).
export EMBER_NUM_THREADS=1 EMBER_CACHING_ALLOCATOR=0
export ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

summary=()
status=0
while read -r name fuzzer seeds dict; do
  [[ -n "$name" ]] || continue
  mkdir -p "$work/$name/seeds" "$work/$name/corpus"
  "$seeds" "$work/$name/seeds"
  args=(-seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024
        -print_final_stats=1 -artifact_prefix="$work/artifacts/$name-")
  [[ -n "${dict:-}" ]] && args+=(-dict="$dict")
  echo "fuzz: $name for ${seconds}s ($(ls "$work/$name/seeds" | wc -l) seeds)"
  if "$fuzzer" "${args[@]}" "$work/$name/corpus" "$work/$name/seeds" >"$work/$name.log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
    tail -n 60 "$work/$name.log"
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name.log" | tail -1)
  corpus=$(ls "$work/$name/corpus" | wc -l)
  summary+=("$(printf '%-14s %-7s %10s execs in %ss, corpus %s files' "$name" "$result" "${execs:-?}" "$seconds" "$corpus")")
done <"$build/fuzz_targets.txt"

printf '%s\n' "${summary[@]}" | tee "$work/summary.txt"
exit $status
