#!/usr/bin/env bash
# Builds python/stable_abi/xk_stable_probe.cpp against the torch of $PY (>= 2.10: stable ABI headers,
# TORCH_TARGET_VERSION 2.10, so the .so loads in every later torch) and build/release/libxk.so.
# Usage: PY=~/.cache/xkernels/venv/bin/python python/stable_abi/build_probe.sh  -> build/stable_abi/libxk_stable_probe.so
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
py=${PY:-python3}
tdir=$("$py" -c "import os, torch; print(os.path.dirname(torch.__file__))")
mkdir -p "$root/build/stable_abi"
g++ -std=c++17 -O2 -shared -fPIC -DTORCH_TARGET_VERSION=0x020a000000000000ULL \
  -I"$tdir/include" -I"$root/include" "$root/python/stable_abi/xk_stable_probe.cpp" \
  -L"$root/build/release" -lxk -Wl,-rpath,"$root/build/release" \
  -L"$tdir/lib" -ltorch_cpu -lc10 -Wl,-rpath,"$tdir/lib" \
  -o "$root/build/stable_abi/libxk_stable_probe.so"
echo "$root/build/stable_abi/libxk_stable_probe.so"
