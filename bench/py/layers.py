"""Whole transformer layers, xkernels.torch.optimize() vs stock PyTorch eager, in one process:
a Llama-architecture decoder layer (hidden 4096, 32 heads, 8 kv heads, head_dim 128, intermediate
14336, random weights; Hugging Face's module structure: python/tests/blocks.py) and a BERT-base
encoder layer (768, 12 heads, 3072; HF structure: python/examples/minilm.py), prefill of 512 tokens and decode of 1 token over a 512-token
KV cache (Llama: stock on HF's DynamicCache, xk on xkernels.torch.KVCache; BERT has no decode),
fp32 and bf16. Threads: XK_BENCH_THREADS (default "1"), both libraries set alike. Rows: ms per
forward, best of --reps, xk / torch / ratio torch/xk (> 1: xk faster). --clock cpu times the
process's CPU time instead of the wall clock (1-thread rows on a shared, loaded host: time spent
descheduled is not counted; at 2+ threads it sums the threads' time, spin-waits included).
--breakdown adds the BERT layer's blocks timed on their own (self-attention, each Linear, LayerNorm).

    PYTHONPATH=python XK_LIBRARY=build/release/libxk.so python bench/py/layers.py
    # an AVX2-only run: both libraries capped (ATen's kernels, oneDNN and MKL: ATen's capability
    # alone leaves torch's fp32 GEMM on MKL's AVX-512 code)
    XK_MAX_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
        python bench/py/layers.py

What torch runs for bf16 on an AVX2-only CPU (torch 2.15's source): F.linear -> addmm, whose oneDNN
route (use_mkldnn_bf16_matmul, and cpublas::gemm's mkldnn_bf16_gemm) needs mkldnn_bf16_device_check(),
i.e. ideep's has_bf16_type_support(): oneDNN's effective ISA at least avx512_core (or AVX-NE-CONVERT).
On a Zen 2 / 3 that fails, so bf16 GEMMs run ATen's own kernel (gemm_stub: a dot product per output,
at::native::AVX2::bf16_dot_with_fp32_arith under ATen's AVX2 dispatch). ONEDNN_MAX_CPU_ISA=AVX2 makes
the same check fail here (the effective ISA is capped), so the capped run takes that route; with ATen
capped to AVX2 and oneDNN not, this script turns oneDNN off (torch.backends.mkldnn.enabled = False)
to the same effect, and says so. --gemm-rates prints torch's and xk's Linear GFLOP/s on the layers'
GEMM shapes (prefill tokens x out x in), the rates behind the layer ratios.
"""
import argparse
import os
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "python"))
sys.path.insert(0, os.path.join(here, "..", "..", "python", "tests"))

import torch  # noqa: E402

import xkernels.torch as xkt  # noqa: E402
sys.path.insert(0, os.path.join(here, "..", "..", "python", "examples"))
from blocks import DynamicCache, HFLlamaDecoderLayer, LlamaConfig, LlamaRotaryEmbedding  # noqa: E402
from minilm import BertLayer  # noqa: E402


clock = time.perf_counter


def best_ms(f, reps):
    f()
    b = float("inf")
    for _ in range(reps):
        s = clock()
        f()
        b = min(b, clock() - s)
    return b * 1e3


def llama_rows(dtype, T, reps, cfg):
    torch.manual_seed(0)
    ref = HFLlamaDecoderLayer(cfg).eval().to(dtype)
    for p in ref.parameters():  # HF-like init scale (randn weights would overflow bf16 activations)
        p.data.mul_(0.02) if p.dim() == 2 else None
    opt = xkt.optimize(ref, dtype=dtype)
    assert isinstance(opt.self_attn, xkt.LlamaAttention), xkt.info()
    rope = LlamaRotaryEmbedding(cfg)
    x = torch.randn(1, T, cfg.hidden_size).to(dtype)
    pe = rope(x, torch.arange(T)[None])
    out = []
    # prefill (no cache: the cache append is timed in the decode rows' setup only)
    tx = best_ms(lambda: opt(x, pe), reps)
    tt = best_ms(lambda: ref(x, pe), reps)
    out.append(("llama h4096 prefill T=%d" % T, tx, tt))
    # decode one token after a T-token prefill (the caches grow by one per call: T+1 .. T+reps+1)
    c_ref, c_xk = DynamicCache(), xkt.KVCache(1, 1, cfg.num_key_value_heads, cfg.head_dim, T + reps + 8, dtype)
    ref(x, pe, None, c_ref)
    opt(x, pe, None, c_xk)
    y = torch.randn(1, 1, cfg.hidden_size).to(dtype)

    def step(m, c):
        n = c.get_seq_length()
        return m(y, rope(y, torch.tensor([[n]])), None, c)

    tx = best_ms(lambda: step(opt, c_xk), reps)
    tt = best_ms(lambda: step(ref, c_ref), reps)
    out.append(("llama h4096 decode 1 tok (ctx %d)" % T, tx, tt))
    # A correctness look at the last step: the attention and MLP blocks' outputs (the layer's output
    # is y plus an update far below bf16's resolution of y at this init scale), the larger error.
    got = {}

    def grab(key):
        return lambda mod, args, res: got.__setitem__(key, (res[0] if isinstance(res, tuple) else res).float())

    hooks = [m.register_forward_hook(grab((tag, name))) for tag, layer in (("xk", opt), ("ref", ref))
             for name, m in (("attn", layer.self_attn), ("mlp", layer.mlp))]
    with torch.inference_mode():
        step(opt, c_xk), step(ref, c_ref)
    for h in hooks:
        h.remove()
    err = max(((got["xk", n] - got["ref", n]).norm() / got["ref", n].norm()).item() for n in ("attn", "mlp"))
    return out, err


def bert_rows(dtype, T, reps):
    torch.manual_seed(0)
    ref = BertLayer(768, 12, 3072, 1e-12).eval().to(dtype)  # Hugging Face's module structure
    opt = xkt.optimize(ref, dtype=dtype)
    assert isinstance(opt.attention.self, xkt.BertSelfAttention), xkt.info()
    x = torch.randn(1, T, 768).to(dtype)
    tx, tt = best_ms(lambda: opt(x, None), reps), best_ms(lambda: ref(x, None), reps)
    a, b = opt(x, None).float(), ref(x, None).float()
    return [("bert-base layer prefill T=%d" % T, tx, tt)], ((a - b).norm() / b.norm()).item()


def bert_breakdown(dtype, T, reps):
    """BERT-base layer's blocks on their own, xk (optimize()'s modules) beside torch's: ms, best of reps."""
    torch.manual_seed(0)
    ref = BertLayer(768, 12, 3072, 1e-12).eval().to(dtype)
    opt = xkt.optimize(ref, dtype=dtype)
    x, h = torch.randn(1, T, 768).to(dtype), torch.randn(1, T, 3072).to(dtype)
    sa, rsa = opt.attention.self, getattr(ref.attention, "self")
    rows = [("self-attention (QKV + SDPA)", lambda: sa(x), lambda: rsa(x, None)),
            ("attention out Linear 768x768", lambda: opt.attention.output.dense(x), lambda: ref.attention.output.dense(x)),
            ("LayerNorm", lambda: opt.attention.output.LayerNorm(x), lambda: ref.attention.output.LayerNorm(x)),
            ("FFN1 Linear 768x3072 + GELU", lambda: opt.intermediate(x), lambda: ref.intermediate(x)),
            ("FFN2 Linear 3072x768", lambda: opt.output.dense(h), lambda: ref.output.dense(h)),
            ("whole layer", lambda: opt(x, None), lambda: ref(x, None))]
    return [("  bert " + name, best_ms(fx, reps), best_ms(ft, reps)) for name, fx, ft in rows]


def gemm_rates(dtype, T, reps, cfg, nt):
    """torch's F.linear and xk.linear (packed weight) GFLOP/s on the layers' GEMM shapes, T rows."""
    torch.manual_seed(0)
    shapes = [("llama q/o", cfg.hidden_size, cfg.hidden_size),
              ("llama gate/up", cfg.intermediate_size, cfg.hidden_size),
              ("llama down", cfg.hidden_size, cfg.intermediate_size),
              ("bert qkv/out", 768, 768), ("bert ffn1", 3072, 768), ("bert ffn2", 768, 3072)]
    rows = []
    for name, N, K in shapes:
        x, w = torch.randn(T, K).to(dtype), (torch.randn(N, K) * 0.02).to(dtype)
        fl = 2.0 * T * N * K
        tx = best_ms(lambda: torch.ops.xk.linear(x, w), reps)
        tt = best_ms(lambda: torch.nn.functional.linear(x, w), reps)
        rows.append(("  %s %dx%dx%d GFLOP/s" % (name, T, N, K), fl / tx / 1e6, fl / tt / 1e6))
    return rows


def avx2_route_note():
    """Under ATen's AVX2 capability: make torch's bf16 matmuls take the route an AVX2-only CPU takes."""
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        return None
    try:
        onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        onednn_bf16 = torch.backends.mkldnn.is_available()
    if onednn_bf16:
        torch.backends.mkldnn.enabled = False
        return ("# torch: oneDNN would run bf16 matmuls here (its bf16 check passes: ONEDNN_MAX_CPU_ISA unset); "
                "turned off (torch.backends.mkldnn.enabled = False), as its bf16 check fails on an AVX2-only CPU")
    return "# torch: oneDNN's bf16 check fails under this cap, as on an AVX2-only CPU: bf16 matmuls run ATen's own GEMM"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--layers", default="llama,bert")
    ap.add_argument("--small", action="store_true", help="hidden 1024 Llama (a quick look)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--breakdown", action="store_true", help="BERT: also each block on its own, xk beside torch")
    ap.add_argument("--gemm-rates", action="store_true",
                    help="also torch's and xk's Linear GFLOP/s on the layers' GEMM shapes (xk / torch columns)")
    a = ap.parse_args()
    global clock
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    threads = [int(t) for t in os.environ.get("XK_BENCH_THREADS", "1").split(",")]
    cfg = LlamaConfig(1024, 16, 4, 2816) if a.small else LlamaConfig(4096, 32, 8, 14336, 500000.0, 1e-5)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    L = xkt._lib.lib()
    import ctypes
    isa = ctypes.c_int()
    L.get_max_isa(ctypes.byref(isa))
    print("# torch %s (ATen CPU capability %s, MKL_ENABLE_INSTRUCTIONS=%s, ONEDNN_MAX_CPU_ISA=%s), %s, libxk ISA %s; "
          "ms per forward (%s clock), best of %d" % (
              torch.__version__, torch.backends.cpu.get_cpu_capability(), os.environ.get("MKL_ENABLE_INSTRUCTIONS", "-"),
              os.environ.get("ONEDNN_MAX_CPU_ISA", "-"), cpu, xkt._lib.ISA_NAMES[isa.value], a.clock, a.reps))
    note = avx2_route_note()
    if note:
        print(note)
    if torch.backends.cpu.get_cpu_capability() == "AVX2" and os.environ.get("MKL_ENABLE_INSTRUCTIONS") is None:
        print("# note: torch's fp32 GEMM (MKL) is not capped: set MKL_ENABLE_INSTRUCTIONS=AVX2 for an AVX2 row")
    print("%-36s %4s %4s %10s %10s %7s %9s" % ("row", "dt", "thr", "xk ms", "torch ms", "ratio", "rel.err"))
    # rel.err: |xk - torch| / |torch| (Llama: of the attention and MLP blocks' outputs in the last
    # decode step, the larger; BERT: of the layer's output)
    with torch.inference_mode():
        for nt in threads:
            xkt.set_num_threads(nt)
            for dt in a.dtypes.split(","):
                dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dt]
                if a.gemm_rates:
                    for name, gx, gt in gemm_rates(dtype, a.tokens, a.reps, cfg, nt):
                        print("%-36s %4s %4d %10.1f %10.1f %7.2f" % (name, dt, nt, gx, gt, gx / gt), flush=True)
                for layer in a.layers.split(","):
                    rows, err = llama_rows(dtype, a.tokens, a.reps, cfg) if layer == "llama" else \
                        bert_rows(dtype, a.tokens, a.reps)
                    for name, tx, tt in rows:
                        print("%-36s %4s %4d %10.2f %10.2f %7.2f %9.1e" % (name, dt, nt, tx, tt, tt / tx, err),
                              flush=True)
                    if layer == "bert" and a.breakdown:
                        for name, tx, tt in bert_breakdown(dtype, a.tokens, a.reps):
                            print("%-36s %4s %4d %10.2f %10.2f %7.2f" % (name, dt, nt, tx, tt, tt / tx), flush=True)


if __name__ == "__main__":
    main()
