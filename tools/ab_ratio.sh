#!/bin/bash
# A/B of benchmark configurations by the ratio ours / peer within one bench process.
#
#   tools/ab_ratio.sh FILTER ROUNDS "CONFIG" ["CONFIG" ...]
#
# CONFIG: an optional list of VAR=value settings, then the bench binary (and arguments), run as
# `env CONFIG --benchmark_filter=FILTER`. FILTER must select our rows and one peer's rows of the
# same shapes (e.g. '^gemm/f32/(xk|onednn)/1x4096x4096/decode:BN/threads:1'). Configurations run
# alternately, ROUNDS times; for every configuration and shape it prints the per-round ratio of
# our GFLOPS / GBPS counter to the peer's, and their median. On a host whose speed drifts (shared
# machines: 5-25% between phases) the ratio of two rows measured back to back moves far less
# than either row. MINT (seconds, default 0.3) sets --benchmark_min_time.
set -euo pipefail
if [ $# -lt 3 ]; then sed -n 2,12p "$0"; exit 2; fi
F=$1; R=$2; shift 2
for r in $(seq "$R"); do
  i=0
  for cfg in "$@"; do
    # shellcheck disable=SC2086
    env $cfg --benchmark_filter="$F" --benchmark_min_time="${MINT:-0.3}" 2>/dev/null |
      awk -v c="$i" '$1 ~ /\// && $2 ~ /^[0-9.]+$/ {
        v = ""; for (k = 1; k <= NF; k++) if ($k ~ /^(GFLOPS|GBPS)=/) v = $k
        if (v == "") next
        gsub(/GFLOPS=|GBPS=|\/s/, "", v); n = $1; split(n, p, "/"); lib = p[3]; sub("/" lib "/", "/", n)
        print c, n, lib, v }'
    i=$((i + 1))
  done
done | awk '{ key = $1 " " $2; if ($3 == "xk") x[key] = x[key] " " $4; else y[key] = y[key] " " $4 }
  END {
    for (k in x) {
      nx = split(x[k], a, " "); ny = split(y[k], b, " "); if (ny != nx) continue
      s = ""; for (i = 1; i <= nx; i++) { r[i] = a[i] / b[i]; s = s sprintf(" %.3f", r[i]) }
      for (i = 1; i <= nx; i++) for (j = i + 1; j <= nx; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
      printf "cfg%s %s ratios%s  median %.3f\n", substr(k, 1, index(k, " ") - 1), substr(k, index(k, " ") + 1), s, r[int((nx + 1) / 2)]
    }
  }' | sort -k2,2 -k1,1
