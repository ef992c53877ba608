#!/usr/bin/env bash
# The main job: install what is missing, build (Release), run xk-info and a short benchmark
# table of our kernels beside the peers (oneDNN, OpenBLAS, libxsmm) measured in the same process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build build/release -j"$(nproc)"
echo; echo "==================== xk-info ===================="
build/release/tools/xk-info
echo; echo "==================== xk-info (XK_MAX_ISA=avx2) ===================="
XK_MAX_ISA=avx2 build/release/tools/xk-info --brief
echo; echo "==================== benchmarks (short run) ===================="
export XK_BENCH_QUICK=1
for b in build/release/bench/bench_*; do
  [[ -x $b ]] || continue
  echo "---- $(basename "$b")"
  "$b" --benchmark_filter="${XK_BENCH_FILTER:-.}" || echo "($(basename "$b") failed: $?)"
done
