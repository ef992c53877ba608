#!/usr/bin/env bash
# Python package tests (python/tests, pytest) against build/release/libxk.so.
# Creates once and then reuses a venv outside the clone: ${XK_PY_VENV:-$HOME/.cache/xkernels/venv}
# with pytest, numpy and PyTorch's CPU-only wheel (from https://download.pytorch.org/whl/cpu:
# ~200 MB installed; PyPI's default torch wheel pulls ~5.8 GB of CUDA libraries).
# XK_PY_TORCH pins the torch requirement (e.g. "torch==2.5.1"); XK_PY_SKIP_BUILD=1 uses the
# existing build/release/libxk.so as is; extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${XK_PY_VENV:-$HOME/.cache/xkernels/venv}
torch_req=${XK_PY_TORCH:-torch}
py=${XK_PY_PYTHON:-python3}

if [[ ! -x "$venv/bin/python" ]] || [[ ! -f "$venv/.xk-ready" ]] || [[ "$(cat "$venv/.xk-ready")" != "$torch_req" ]]; then
  echo "test_python.sh: setting up $venv ($torch_req, CPU wheel)"
  rm -rf "$venv"
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q --index-url https://download.pytorch.org/whl/cpu "$torch_req"
  "$venv/bin/python" -m pip install -q pytest numpy
  echo "$torch_req" > "$venv/.xk-ready"
fi

if [[ "${XK_PY_SKIP_BUILD:-0}" != 1 ]]; then
  if [[ ! -f "$root/build/release/build.ninja" ]]; then
    cmake --preset release -S "$root" >/dev/null
  fi
  ninja -C "$root/build/release" xk >/dev/null
fi

export XK_LIBRARY=${XK_LIBRARY:-$root/build/release/libxk.so}
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
cd "$root/python"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
