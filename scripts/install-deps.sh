#!/usr/bin/env bash
# Installs, with apt-get, whichever of xkernels' build/test/bench dependencies are missing.
# Every dependency is a Debian 12 package; nothing is downloaded at build time.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libdnnl-dev libxbyak-dev opencl-headers ocl-icd-opencl-dev pocl-opencl-icd clinfo
  libhwloc-dev libgtest-dev libbenchmark-dev
  libopenblas-dev libxsmm-dev libclblast-dev
  clang libclang-rt-14-dev libomp-14-dev
  python3 python3-venv python3-pip
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all ${#PKGS[@]} packages present"
fi
