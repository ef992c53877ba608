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
benches=(build/release/bench/bench_*)
[[ -x ${benches[0]} ]] || { echo "run.sh: no benchmark executables in build/release/bench" >&2; exit 1; }
# The machine's peaks first: the other tables then show "% of peak" against them.
peak_log=$(mktemp)
echo "---- bench_peak"
build/release/bench/bench_peak | tee "$peak_log"
peaks=$(grep -E '^ *export XK_BENCH_PEAK' "$peak_log" | sed 's/^ *export //' || true)
rm -f "$peak_log"
for kv in $peaks; do export "$kv"; done
for b in "${benches[@]}"; do
  [[ -x $b && -f $b && $(basename "$b") != bench_peak ]] || continue
  echo "---- $(basename "$b")"
  "$b" --benchmark_filter="${XK_BENCH_FILTER:-.}" || { echo "run.sh: $(basename "$b") failed" >&2; exit 1; }
done
