#!/usr/bin/env bash
# Runs the libFuzzer targets built by the 'fuzz' preset (cmake --preset fuzz && cmake --build build/fuzz).
#   bash tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET ...]      (default 30 s, every fuzz_* target,
#   XK_FUZZ_JOBS of them at once: default the core count)
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
# XK_FUZZ_JOBS targets run at once (default: the core count; each fuzzer is single-threaded).
jobs=${XK_FUZZ_JOBS:-$(nproc)}
((jobs >= 1)) || jobs=1
run_one() {
  local t=$1 family=${1#fuzz_}
  local seeds=tests/fuzz/corpus/$family work=build/fuzz/corpus/$family log=build/fuzz/$1.log
  mkdir -p "$seeds" "$work"
  "$bindir/$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="build/fuzz/artifacts/$t-" "$work" "$seeds" >"$log" 2>&1
}
report() {  # report TARGET EXIT_STATUS
  local t=$1 log=build/fuzz/$1.log
  echo "---- $t: ${secs} s"
  if [[ $2 == 0 ]]; then
    grep -E "^stat::number_of_executed_units|^stat::new_units_added|^#[0-9]+.*DONE" "$log" | tr '\n' ' '
    echo
  else
    status=1
    echo "$t: FINDING (log: $log)"
    grep -E "xk-fuzz finding|ERROR: |SUMMARY|runtime error|Test unit written" "$log" | head -20
  fi
}
status=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  batch=("${targets[@]:i:jobs}")
  pids=()
  for t in "${batch[@]}"; do
    run_one "$t" &
    pids+=($!)
  done
  for k in "${!batch[@]}"; do
    rc=0
    wait "${pids[$k]}" || rc=$?
    report "${batch[$k]}" "$rc"
  done
done
exit $status
