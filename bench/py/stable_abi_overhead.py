"""Per-call overhead of the stable-ABI probe (python/stable_abi, build it with build_probe.sh first)
beside the ctypes torch.ops.xk.rms_norm, an empty Library op and aten, 1x16 f32, 1 thread, CPU time.
    PYTHONPATH=python python bench/py/stable_abi_overhead.py build/stable_abi/libxk_stable_probe.so"""
import time, torch, sys
import xkernels.torch as xkt
xkt.set_num_threads(1)
torch.ops.load_library(sys.argv[1])
x, w = torch.randn(1, 16), torch.randn(16)
a = torch.ops.xkstable.rms_norm(x, w, 1e-6); b = torch.ops.xk.rms_norm(x, w, 1e-6)
assert torch.equal(a, b), (a, b)
def t(f, n=20000):
    for _ in range(200): f()
    best = 1e9
    for _ in range(5):
        s = time.thread_time()
        for _ in range(n): f()
        best = min(best, time.thread_time() - s)
    return best / n * 1e6
with torch.inference_mode():
    for _ in range(2):
        print("torch %s: stable-ABI xkstable.rms_norm %.2f us, ctypes xk.rms_norm %.2f us, empty Library op %.2f us, aten rms_norm %.2f us" % (
            torch.__version__, t(lambda: torch.ops.xkstable.rms_norm(x, w, 1e-6)), t(lambda: torch.ops.xk.rms_norm(x, w, 1e-6)),
            t(lambda: torch.ops.xk.noop(x)), t(lambda: torch.nn.functional.rms_norm(x, (16,), w, 1e-6))))
