"""Do libxk's and torch's OpenMP pools fight? Small 2-thread xk calls interleaved with 2-thread torch
calls in one process; prints the latency distribution of each. Run it three ways:
    python bench/py/threads.py                         # libxk loaded first, sharing torch's runtime (default)
    XK_TORCH_OPENMP=0 python bench/py/threads.py       # libxk loaded first on the system libgomp: two runtimes
    python bench/py/threads.py --torch-first           # torch imported first
(PYTHONPATH=python, XK_LIBRARY=build/release/libxk.so.) The loaded runtimes are printed."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

ap = argparse.ArgumentParser()
ap.add_argument("--torch-first", action="store_true")
ap.add_argument("--iters", type=int, default=3000)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()

if a.torch_first:
    import torch  # noqa: F401
import xkernels  # noqa: E402
import xkernels.openmp  # noqa: E402

xkernels.lib()
import torch  # noqa: E402,F811
import xkernels.torch  # noqa: E402

xkernels.torch.set_num_threads(a.threads)
from xkernels.torch._ops import IMPLS  # noqa: E402

rms = IMPLS["rms_norm"]
x = torch.randn(64, 2048)  # ~0.5 MB: an xk call of tens of us, split over the threads
w = torch.randn(2048)
t1, t2 = torch.randn(256, 2048), torch.randn(256, 2048)


def pct(v, p):
    return sorted(v)[min(len(v) - 1, int(p / 100 * len(v)))]


xs, ts = [], []
for i in range(a.iters + 100):
    s = time.perf_counter()
    rms(x, w, 1e-6)
    m = time.perf_counter()
    torch.add(t1, t2)  # a parallel ATen op on torch's pool
    e = time.perf_counter()
    if i >= 100:
        xs.append((m - s) * 1e6)
        ts.append((e - m) * 1e6)
print("torch %s, threads %d, runtimes: %s" % (torch.__version__, a.threads,
                                              ", ".join(xkernels.openmp.openmp_runtimes())))
for name, v in (("xk rms_norm 64x2048", xs), ("torch add 256x2048", ts)):
    print("%-22s median %8.1f us  p99 %8.1f us  max %8.1f us  calls > 1 ms: %d / %d" % (
        name, statistics.median(v), pct(v, 99), max(v), sum(1 for t in v if t > 1000), len(v)))
