#!/usr/bin/env bash
# Runs the libFuzzer targets built by the 'fuzz' preset (cmake --preset fuzz && cmake --build build/fuzz).
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET ...]      (default 30 s, every fuzz_* target)
# Each target starts from the seeds in tests/fuzz/corpus/<family>/ (read only) plus a working corpus
# in build/fuzz/corpus/<family>/ (kept between runs); a finding (an abort with "xk-fuzz finding",
# a sanitizer report, a crash, a call over the time limit, an input over -timeout) stops the run
# with the input saved as build/fuzz/artifacts/<target>-crash-<sha1> and a non-zero exit.
# Reproduce one with: build/fuzz/tests/fuzz/<target> <that file>.
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-30}
shift || true
bindir=build/fuzz/tests/fuzz
targets=("$@")
if ((${#targets[@]} == 0)); then
  for b in "$bindir"/fuzz_*; do [[ -x $b ]] && targets+=("$(basename "$b")"); done
fi
((${#targets[@]})) || { echo "run.sh: no fuzz targets in $bindir (build the 'fuzz' preset first)"; exit 1; }
mkdir -p build/fuzz/artifacts
export ASAN_OPTIONS=${ASAN_OPTIONS:-"detect_leaks=1:abort_on_error=1"}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-"print_stacktrace=1:halt_on_error=1"}
status=0
for t in "${targets[@]}"; do
  family=${t#fuzz_}
  seeds=tests/fuzz/corpus/$family
  work=build/fuzz/corpus/$family
  mkdir -p "$seeds" "$work"
  log=build/fuzz/$t.log
  echo "---- $t: ${secs} s"
  if "$bindir/$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix="build/fuzz/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^stat::new_units_added|^#[0-9]+.*DONE" "$log" | tr '\n' ' '
    echo
  else
    status=1
    echo "$t: FINDING (log: $log)"
    grep -E "xk-fuzz finding|ERROR: |SUMMARY|runtime error|Test unit written" "$log" | head -20
  fi
done
exit $status
