"""Per-call overhead of torch.ops.xk on tiny inputs (1 thread), beside empty custom ops: one defined
like ours (torch.library.Library "DEF" + a Python CPU kernel: xk.noop) and one made with
torch.library.custom_op, the aten op doing the same work, and the xk modules' eager path (the op's
kernel called directly, without the dispatcher). Best of 5 runs of N calls, in us per call of this
thread's CPU time (time.thread_time: on a shared machine, the time it was descheduled is left out;
XK_OVERHEAD_CLOCK=wall for wall time)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xkernels.torch as xkt  # noqa: E402
from xkernels.torch._ops import IMPLS  # noqa: E402

xkt.set_num_threads(1)
xk = torch.ops.xk


CLOCK = time.thread_time if os.environ.get("XK_OVERHEAD_CLOCK", "cpu") == "cpu" else time.perf_counter


def t(f, n=5000):
    for _ in range(200):
        f()
    best = 1e9
    for _ in range(5):
        s = CLOCK()
        for _ in range(n):
            f()
        best = min(best, (CLOCK() - s) / n)
    return best * 1e6


@torch.library.custom_op("xkbench::empty", mutates_args=())
def _empty(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(())


x, w, nw, g = torch.randn(1, 16), torch.randn(16, 16), torch.randn(16), torch.randn(1, 32)
lin = xkt.optimize(torch.nn.Linear(16, 16, bias=False))
rows = [
    ("empty custom_op (torch.library.custom_op)", lambda: torch.ops.xkbench.empty(x), None),
    ("empty Library DEF op (xk.noop)", lambda: xk.noop(x), None),
    ("xk.linear 1x16x16", lambda: xk.linear(x, w), lambda: F.linear(x, w)),
    ("  xk Linear module (eager: kernel called directly)", lambda: lin(x), None),
    ("  linear kernel without the dispatcher", lambda: IMPLS["linear"](x, w), None),
    ("xk.rms_norm 1x16", lambda: xk.rms_norm(x, nw, 1e-6), lambda: F.rms_norm(x, (16,), nw, 1e-6)),
    ("xk.layer_norm 1x16", lambda: xk.layer_norm(x, nw, nw, 1e-5), lambda: F.layer_norm(x, (16,), nw, nw)),
    ("xk.silu_and_mul 1x32", lambda: xk.silu_and_mul(g), lambda: F.silu(g[:, :16]) * g[:, 16:]),
    ("xk.softmax 1x16", lambda: xk.softmax(x), lambda: torch.softmax(x, -1)),
]
print("# torch %s; us per call (%s), best of 5 (1 thread)" % (torch.__version__, CLOCK.__name__))
with torch.inference_mode():
    for name, f, ref in rows:
        a = t(f)
        b = t(ref) if ref else None
        print("%-52s %7.2f us%s" % (name, a, "   (aten: %.2f us)" % b if b else ""))
