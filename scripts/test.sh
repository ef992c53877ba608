#!/usr/bin/env bash
# Installs what is missing, builds and runs the whole test suite:
#   1. Release build: every test (ctest), then `cmake --install` into a scratch prefix and a tiny
#      consumer project (tests/consumer) built against it with find_package(xkernels);
#   2. ASan + UBSan build: every test;
#   3. TSan build (std::thread parallel-for backend): every test;
#   4. fuzz build (clang, libFuzzer + ASan + UBSan): every tests/fuzz target for XK_FUZZ_SECONDS
#      (default 15) from its seed corpus (tests/fuzz/README.md: running them longer);
#   5. python: the Python package's tests (python/tests, pytest) against the Release libxk, in a
#      venv outside the clone (scripts/test_python.sh: created once with pytest, numpy and PyTorch
#      — the CPU-only wheel, or PyPI's default torch where download.pytorch.org is unreachable).
# XK_TEST_CONFIGS="release asan tsan fuzz python" selects the builds. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
CONFIGS=${XK_TEST_CONFIGS:-"release asan tsan fuzz python"}
JOBS=$(nproc)
export ASAN_OPTIONS=${ASAN_OPTIONS:-"detect_leaks=1:abort_on_error=1"}
export LSAN_OPTIONS=${LSAN_OPTIONS:-"suppressions=$PWD/tests/lsan.supp:print_suppressions=0"}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-"print_stacktrace=1:halt_on_error=1"}
# Tests run two at a time (ctest -j): OpenMP threads that spin while waiting would take the cores
# from the other test (measured on 2 cores: 4 tests 42 s at -j1, 25 s at -j2, 12 s at -j2 passive).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export TSAN_OPTIONS=${TSAN_OPTIONS:-"halt_on_error=1:second_deadlock_stack=1"}
start=$(date +%s)
for cfg in $CONFIGS; do
  t0=$(date +%s)
  if [[ $cfg == python ]]; then
    echo "==================== python: package tests ===================="
    bash scripts/test_python.sh
    echo "==================== $cfg: done in $(( $(date +%s) - t0 )) s ===================="
    continue
  fi
  echo "==================== $cfg: configure + build ===================="
  cmake --preset "$cfg" >/dev/null
  cmake --build "build/$cfg" -j"$JOBS"
  echo "==================== $cfg: tests ===================="
  if [[ $cfg == fuzz ]]; then
    bash tests/fuzz/run.sh "${XK_FUZZ_SECONDS:-15}"
  else
    ctest --test-dir "build/$cfg" --output-on-failure -j"$JOBS"
  fi
  if [[ $cfg == release ]]; then
    echo "==================== release: install + find_package(xkernels) consumer ===================="
    prefix=$PWD/build/install
    rm -rf "$prefix" build/consumer
    cmake --install build/release --prefix "$prefix" >/dev/null
    cmake -S tests/consumer -B build/consumer -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
    cmake --build build/consumer
    build/consumer/xk_consumer
    build/consumer/xk_consumer_static
    build/consumer/xk_consumer_c
  fi
  echo "==================== $cfg: done in $(( $(date +%s) - t0 )) s ===================="
done
echo "all test configurations passed (${CONFIGS}) in $(( $(date +%s) - start )) s"
