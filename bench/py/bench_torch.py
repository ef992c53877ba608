"""xkernels.torch vs stock PyTorch eager, in one process: per op (torch.ops.xk.<op> beside the
aten op doing the same), and whole blocks through xkernels.torch.optimize() vs the stock module.
Rows: name, xk us, torch us, ratio torch/xk (> 1: xk faster). Threads: XK_BENCH_THREADS (default
"1,2"), both libraries set alike. Quick: --quick (fewer repetitions, small blocks only).

    PYTHONPATH=python XK_LIBRARY=build/release/libxk.so python bench/py/bench_torch.py
"""
import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python", "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import xkernels.torch as xkt  # noqa: E402
from blocks import BertLayer, LlamaDecoderLayer  # noqa: E402

xk = torch.ops.xk


CLOCK = time.perf_counter


def bench(f, min_time):
    f()
    n, el = 1, 0.0
    while True:  # calibrate
        s = CLOCK()
        for _ in range(n):
            f()
        el = CLOCK() - s
        if el > min_time / 5:
            break
        n *= 4
    best = el / n
    for _ in range(4):
        s = CLOCK()
        for _ in range(n):
            f()
        best = min(best, (CLOCK() - s) / n)
    return best * 1e6


def op_rows(dtype):
    r = lambda *s: torch.randn(*s).to(dtype)  # noqa: E731
    x1, x64, w, b = r(1, 4096), r(64, 4096), r(4096, 4096), torch.randn(4096)
    big = r(64, 4096)
    res = r(64, 4096)
    g = r(64, 2 * 11008)
    hn = r(512, 4096)
    wn, bn = r(4096), r(4096)
    s = r(64, 1024)
    pos = torch.arange(64)
    q, k = r(64, 32 * 128), r(64, 8 * 128)
    inv = 1.0 / (10000 ** (torch.arange(0, 128, 2).float() / 128))
    ang = torch.arange(4096).float()[:, None] * inv[None]
    cache = torch.cat([ang.cos(), ang.sin()], -1)

    def rope_torch():
        cos, sin = cache[pos].chunk(2, -1)
        for t, h in ((q, 32), (k, 8)):
            v = t.view(64, h, 128).float()
            x1_, x2_ = v[..., :64], v[..., 64:]
            c, s_ = cos[:, None], sin[:, None]
            torch.cat([x1_ * c - x2_ * s_, x2_ * c + x1_ * s_], -1).to(dtype)

    rows = [
        ("linear 1x4096x4096 (decode)", lambda: xk.linear(x1, w, None), lambda: F.linear(x1, w)),
        ("linear 64x4096x4096 +bias", lambda: xk.linear(x64, w, b.to(dtype)), lambda: F.linear(x64, w, b.to(dtype))),
        ("rms_norm 512x4096", lambda: xk.rms_norm(hn, wn, 1e-6), lambda: F.rms_norm(hn, (4096,), wn, 1e-6)),
        ("layer_norm 512x4096", lambda: xk.layer_norm(hn, wn, bn, 1e-5), lambda: F.layer_norm(hn, (4096,), wn, bn, 1e-5)),
        ("add+rms_norm 64x4096", lambda: xk.fused_add_rms_norm(big, res.clone(), wn, 1e-6),
         lambda: F.rms_norm(big + res.clone(), (4096,), wn, 1e-6)),
        ("silu_and_mul 64x11008", lambda: xk.silu_and_mul(g), lambda: F.silu(g[:, :11008]) * g[:, 11008:]),
        ("softmax 64x1024", lambda: xk.softmax(s), lambda: torch.softmax(s, -1)),
        ("rotary q32 k8 h128 64 tok", lambda: xk.rotary_embedding(pos, q, k, 128, cache, True), rope_torch),
    ]
    if dtype == torch.float32:
        xq = torch.randn(64, 4096)
        tab = torch.randn(100000, 64)
        idx = torch.randint(0, 100000, (64 * 40,))
        off = torch.arange(0, 64 * 40, 40)
        rows += [
            ("quantize u8 64x4096", lambda: xk.quantize_per_tensor(xq, 0.05, 128, torch.uint8),
             lambda: torch.quantize_per_tensor(xq, 0.05, 128, torch.quint8)),
            ("dyn quant per token s8 64x4096", lambda: xk.dynamic_quantize_per_token(xq, torch.int8, True),
             lambda: torch.round(xq / (xq.abs().amax(-1, keepdim=True) / 127)).clamp(-128, 127).to(torch.int8)),
            ("embedding_bag sum 64 bags x40", lambda: xk.embedding_bag(tab, idx, off, 0),
             lambda: F.embedding_bag(idx, tab, off, mode="sum")),
        ]
    return rows


def block_rows(dtype, quick):
    cfgs = [("bert-base layer", lambda: BertLayer(768, 12, 3072), [128] if quick else [128, 512])]
    if quick:
        cfgs.append(("llama layer h1024 i2816", lambda: LlamaDecoderLayer(1024, 16, 4, 2816), [1, 128]))
    else:
        cfgs.append(("llama layer h4096 i14336", lambda: LlamaDecoderLayer(4096, 32, 8, 14336), [1, 512]))
    out = []
    for name, make, lens in cfgs:
        torch.manual_seed(0)
        ref = make().eval().to(dtype)
        opt = xkt.optimize(ref, dtype=dtype)
        H = ref.mlp.down_proj.out_features if hasattr(ref, "mlp") else 768
        for T in lens:
            x = torch.randn(1, T, H).to(dtype)
            out.append(("%s T=%d" % (name, T), lambda o=opt, x=x: o(x), lambda r=ref, x=x: r(x)))
        del ref
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-blocks", action="store_true")
    ap.add_argument("--rows", default="", help="regex: run only the rows whose name matches")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--cpu-clock", action="store_true",
                    help="time with this thread's CPU time (a shared machine; meaningful at 1 thread only)")
    a = ap.parse_args()
    global CLOCK
    if a.cpu_clock:
        CLOCK = time.thread_time
    min_time = 0.1 if a.quick else 0.3
    threads = [int(t) for t in os.environ.get("XK_BENCH_THREADS", "1,2").split(",")]
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print("# torch %s, %s, libxk %s, clock %s" % (torch.__version__, cpu, xkt._lib.lib().path, CLOCK.__name__))
    print("%-40s %4s %5s %11s %11s %7s" % ("row", "dt", "thr", "xk us", "torch us", "ratio"))
    with torch.inference_mode():
        for dt in a.dtypes.split(","):
            dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
            rows = ([] if a.rows and not any(re.search(a.rows, n) for n, _, _ in op_rows(dtype)) else op_rows(dtype))
            rows += [] if a.no_blocks else block_rows(dtype, a.quick)
            for nt in threads:
                xkt.set_num_threads(nt)
                for name, fx, ft in rows:
                    if a.rows and not re.search(a.rows, name):
                        continue
                    tx, tt = bench(fx, min_time), bench(ft, min_time)
                    print("%-40s %4s %5d %11.1f %11.1f %7.2f" % (name, dt, nt, tx, tt, tt / tx), flush=True)


if __name__ == "__main__":
    main()
