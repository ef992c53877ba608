#!/usr/bin/env python3
"""PyTorch 2.x eager peers of bench/bench_llm.cpp and bench/bench_gemm.cpp (provider `torch`), never
part of CI.

bench_llm's ops: the chains of ops a user writes without a custom kernel: HF's LlamaRMSNorm,
F.layer_norm (after x + residual in the pre-norm block rows), HF's rotate_half (NeoX) /
rotate_every_two (GPT-J) RoPE, F.silu(gate) * up, F.gelu(gate[, approximate="tanh"]) * up and
torch.softmax (with a masked_fill for the causal mask), on the same shapes, dtypes, thread counts
(`nt:N`, torch.set_num_threads) and DRAM rotation (XK_BENCH_ROTATE_MB, default 1024 MiB) as
bench_llm, with the same benchmark names and the same GBPS byte counts (bytes read + written by the
op, as bench_llm counts them; PyTorch's temporaries are not counted: they are its overhead).

bench_gemm's GEMMs (names gemm/<dtype>/torch/<MxNxK>[_suffix]/threads:<t>, as bench_gemm's; GFLOPS
= 2 M N K / time):
  gemm/f32/torch/<MxNxK>       torch.matmul(A[M x K], B[K x N]), f32
  gemm/bf16/torch/<MxNxK>      the same in bf16 (bf16 C: PyTorch has no bf16 x bf16 -> f32 matmul)
  gemm/s8s8s32/torch/<MxNxK>   torch._int_mm(A, B), s8 x s8 -> s32 (PyTorch's int8 GEMM has no u8 A;
                               A holds 0..127 like bench_gemm's 7-bit u8 data; --compare puts it
                               beside bench_gemm's u8s8s32 rows)
  at issue 25's shapes 256^3, 512^3, 1024^3, 2048^3, 4096^3, 384x768x768, 384x3072x768,
  384x768x3072, and decode rows <MxNxK>_decode_bt (F.linear(x[M x K], W[N x K]): PyTorch's Linear
  layout, bench_gemm's `_decode_bt`) for M = 1, 16 and (N, K) = (4096, 4096), (11008, 4096),
  (4096, 11008), f32 and bf16 weights rotated over XK_BENCH_ROTATE_MB so they come from DRAM
  (GBPS = weight bytes / time, as bench_gemm's decode rows count them, and GFLOPS).

    python3 -m venv /opt/torchpeer && /opt/torchpeer/bin/pip install torch numpy
    /opt/torchpeer/bin/python bench/torch_peer.py --repetitions 3 > torch.json
    build/release/bench/bench_llm --benchmark_repetitions=3 --benchmark_format=json > xk.json
    /opt/torchpeer/bin/python bench/torch_peer.py --compare xk.json torch.json   # the table
    /opt/torchpeer/bin/python bench/torch_peer.py --filter '^gemm/' > torch_gemm.json
    build/release/bench/bench_gemm --benchmark_format=json > xk_gemm.json
    /opt/torchpeer/bin/python bench/torch_peer.py --compare xk_gemm.json torch_gemm.json

Output: Google-Benchmark-style JSON on stdout ({"context": ..., "benchmarks": [...]}, one entry
per repetition, real_time in ns, "GBPS" in GB/s and / or "GFLOPS" in GFLOP/s), and one line per
run on stderr. --filter REGEX, --min-time SECONDS, --repetitions N, --threads 1,2 (default:
XK_BENCH_THREADS or 1,2) as in the benches.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys
import time


def env_threads():
    s = os.environ.get("XK_BENCH_THREADS", "")
    v = [int(x) for x in s.split(",") if x.strip().isdigit() and int(x) > 0]
    return v or [1, 2]


ROTATE_BYTES = int(os.environ.get("XK_BENCH_ROTATE_MB", "1024")) << 20


# ---- the ops, as a user writes them ---------------------------------------------------------------
def make_ops(torch, F):
    def rms_norm(x, w, eps=1e-5):  # transformers' LlamaRMSNorm.forward
        dt = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + eps)
        return w * h.to(dt)

    def layer_norm(x, w, b, eps=1e-5):
        return F.layer_norm(x, (x.shape[-1],), w, b, eps)

    def rotate_half(x):  # transformers' Llama
        h = x.shape[-1] // 2
        return torch.cat((-x[..., h:], x[..., :h]), dim=-1)

    def rope_neox(q, k, cos_cached, sin_cached, positions):
        cos = cos_cached[positions].unsqueeze(1)  # [tokens, 1, head_dim]
        sin = sin_cached[positions].unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    def rotate_every_two(x):  # transformers' GPT-J
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    def rope_gptj(q, k, cos_half, sin_half, positions):
        cos = cos_half[positions].repeat_interleave(2, dim=-1).unsqueeze(1)
        sin = sin_half[positions].repeat_interleave(2, dim=-1).unsqueeze(1)
        return q * cos + rotate_every_two(q) * sin, k * cos + rotate_every_two(k) * sin

    def swiglu(x):
        i = x.shape[-1] // 2
        return F.silu(x[..., :i]) * x[..., i:]

    def geglu(x):
        i = x.shape[-1] // 2
        return F.gelu(x[..., :i]) * x[..., i:]

    def geglu_tanh(x):
        i = x.shape[-1] // 2
        return F.gelu(x[..., :i], approximate="tanh") * x[..., i:]

    def softmax(x, scale, mask=None):
        t = x * scale
        if mask is not None:
            t = t.masked_fill(mask, float("-inf"))
        return torch.softmax(t, dim=-1)

    return dict(rms_norm=rms_norm, layer_norm=layer_norm, rope_neox=rope_neox, rope_gptj=rope_gptj, swiglu=swiglu,
                geglu=geglu, geglu_tanh=geglu_tanh, softmax=softmax)


# ---- benchmark cases: (name, bytes per call, make_sets(nsets) -> list of args, fn(*args)) ----------
def cases(torch, F, threads):
    ops = make_ops(torch, F)
    dts = {"f32": torch.float32, "bf16": torch.bfloat16}
    es = {"f32": 4, "bf16": 2}
    out = []

    def sets_for(bytes_per_set, dram):
        return max(1, math.ceil(ROTATE_BYTES / bytes_per_set)) if dram else 1

    # Norms.
    norm_shapes = [((4096, 4096), True)] + [((16384, 8192), True)]
    for dname, dt in dts.items():
        for (rows, hidden), dram in norm_shapes:
            shape = f"{rows}x{hidden}"
            n = rows * hidden
            for nt in threads:
                def mk_rms(nsets, rows=rows, hidden=hidden, dt=dt):
                    w = torch.rand(hidden, dtype=dt) + 0.5
                    return [(torch.rand(rows, hidden, dtype=dt) * 4 - 2, w) for _ in range(nsets)]
                out.append((f"rms_norm/{dname}/torch/{shape}/nt:{nt}", nt, 2 * n * es[dname] + hidden * es[dname],
                            sets_for(2 * n * es[dname], dram), mk_rms, lambda x, w: ops["rms_norm"](x, w)))
                for affine in (True, False):
                    def mk_ln(nsets, rows=rows, hidden=hidden, dt=dt, affine=affine):
                        w = torch.rand(hidden, dtype=dt) + 0.5 if affine else None
                        b = torch.rand(hidden, dtype=dt) - 0.5 if affine else None
                        return [(torch.rand(rows, hidden, dtype=dt) * 4 - 2, w, b) for _ in range(nsets)]
                    tail = "scale_shift" if affine else "plain"
                    out.append((f"layer_norm/{dname}/torch/{shape}/{tail}/nt:{nt}", nt,
                                2 * n * es[dname] + (2 * hidden * es[dname] if affine else 0),
                                sets_for(2 * n * es[dname], dram), mk_ln, lambda x, w, b: ops["layer_norm"](x, w, b)))
    # The pre-norm block (HF Llama's decoder layer): h = x + residual; residual = h; y = norm(h),
    # new tensors for h and y (bench_llm's `apart` rows).
    rows, hidden = 4096, 4096
    n = rows * hidden
    for dname, dt in dts.items():
        for nt in threads:
            def mk_res(nsets, dt=dt):
                w = torch.rand(hidden, dtype=dt) + 0.5
                b = torch.rand(hidden, dtype=dt) - 0.5
                return [(torch.rand(rows, hidden, dtype=dt) * 4 - 2, torch.rand(rows, hidden, dtype=dt) * 4 - 2, w, b)
                        for _ in range(nsets)]
            out.append((f"rms_norm/{dname}/torch/{rows}x{hidden}/residual/apart/nt:{nt}", nt, 4 * n * es[dname] + hidden * es[dname],
                        sets_for(2 * n * es[dname], True), mk_res, lambda x, r, w, b: ops["rms_norm"](x + r, w)))
            out.append((f"layer_norm/{dname}/torch/{rows}x{hidden}/scale_shift/residual/apart/nt:{nt}", nt,
                        4 * n * es[dname] + 2 * hidden * es[dname],
                        sets_for(2 * n * es[dname], True), mk_res, lambda x, r, w, b: ops["layer_norm"](x + r, w, b)))
    # RoPE: q, k [2048, 32, 128], cache of 4096 positions.
    T, H, D, MAXP = 2048, 32, 128, 4096
    for dname, dt in dts.items():
        for style in ("neox", "gptj"):
            for nt in threads:
                def mk_rope(nsets, dt=dt, style=style, T=T):
                    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
                    ang = torch.arange(MAXP, dtype=torch.float32)[:, None] * inv[None, :]
                    if style == "neox":
                        emb = torch.cat((ang, ang), dim=-1)
                        c, s = emb.cos().to(dt), emb.sin().to(dt)
                    else:
                        c, s = ang.cos().to(dt), ang.sin().to(dt)
                    pos = torch.randint(0, MAXP, (T,))
                    return [(torch.rand(T, H, D, dtype=dt) * 2 - 1, torch.rand(T, H, D, dtype=dt) * 2 - 1, c, s, pos)
                            for _ in range(nsets)]
                n = T * H * D
                fn = ops["rope_neox"] if style == "neox" else ops["rope_gptj"]
                out.append((f"rope/{dname}/torch/{style}/{T}x{H}x{D}/nt:{nt}", nt, 4 * n * es[dname] + T * (8 + D * 4),
                            sets_for(4 * n * es[dname], True), mk_rope, fn))
    # GLU.
    R, I = 4096, 11008
    for dname, dt in dts.items():
        for nt in threads:
            def mk_glu(nsets, dt=dt, R=R):
                return [(torch.rand(R, 2 * I, dtype=dt) * 8 - 4,) for _ in range(nsets)]
            out.append((f"swiglu/{dname}/torch/{R}x{I}/nt:{nt}", nt, 3 * R * I * es[dname],
                        sets_for(3 * R * I * es[dname], True), mk_glu, ops["swiglu"]))
    for gname in ("geglu", "geglu_tanh"):
        for dname, dt in dts.items():
            for nt in threads:
                def mk_geglu(nsets, dt=dt, R=R):
                    return [(torch.rand(R, 2 * I, dtype=dt) * 8 - 4,) for _ in range(nsets)]
                out.append((f"{gname}/{dname}/torch/{R}x{I}/nt:{nt}", nt, 3 * R * I * es[dname],
                            sets_for(3 * R * I * es[dname], True), mk_geglu, ops[gname]))
    # Softmax.
    SR, SC = 16384, 4096
    for dname, dt in dts.items():
        for causal in (False, True):
            for nt in threads:
                def mk_sm(nsets, dt=dt, causal=causal):
                    mask = None
                    if causal:
                        r = torch.arange(SR)[:, None] + (SC - SR)
                        mask = torch.arange(SC)[None, :] > r
                    return [(torch.rand(SR, SC, dtype=dt) * 16 - 8, 0.0883883, mask) for _ in range(nsets)]
                read = SR * SC
                if causal:
                    read = sum(min(SC, max(0, r + SC - SR + 1)) for r in range(SR))
                tail = "/causal" if causal else ""
                out.append((f"softmax/{dname}/torch/{SR}x{SC}{tail}/nt:{nt}", nt, (read + SR * SC) * es[dname],
                            sets_for(2 * SR * SC * es[dname], True), mk_sm, ops["softmax"]))
    # Decode shapes: cache-resident, one thread.
    for t in (1, 4, 16):
        for dname, dt in (("bf16", torch.bfloat16), ("f32", torch.float32)):
            def mk_rms_d(nsets, t=t, dt=dt):
                return [(torch.rand(t, 4096, dtype=dt) * 4 - 2, torch.rand(4096, dtype=dt) + 0.5)]
            out.append((f"rms_norm/{dname}/torch/decode/t:{t}/h:4096/nt:1", 1, (2 * t * 4096 + 4096) * es[dname], 1,
                        mk_rms_d, lambda x, w: ops["rms_norm"](x, w)))
            def mk_ln_d(nsets, t=t, dt=dt):
                return [(torch.rand(t, 4096, dtype=dt) * 4 - 2, torch.rand(4096, dtype=dt) + 0.5, torch.rand(4096, dtype=dt) - 0.5)]
            out.append((f"layer_norm/{dname}/torch/decode/t:{t}/h:4096/nt:1", 1, (2 * t * 4096 + 2 * 4096) * es[dname], 1,
                        mk_ln_d, lambda x, w, b: ops["layer_norm"](x, w, b)))
        def mk_rope_d(nsets, t=t):
            inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
            ang = torch.arange(MAXP, dtype=torch.float32)[:, None] * inv[None, :]
            emb = torch.cat((ang, ang), dim=-1)
            pos = torch.randint(0, MAXP, (t,))
            return [(torch.rand(t, H, D, dtype=torch.bfloat16), torch.rand(t, H, D, dtype=torch.bfloat16),
                     emb.cos().bfloat16(), emb.sin().bfloat16(), pos)]
        out.append((f"rope/bf16/torch/neox/decode/t:{t}/h:32x128/nt:1", 1, 4 * t * H * D * 2 + t * (8 + D * 4), 1,
                    mk_rope_d, ops["rope_neox"]))
        def mk_glu_d(nsets, t=t):
            return [(torch.rand(t, 2 * I, dtype=torch.bfloat16) * 8 - 4,)]
        out.append((f"swiglu/bf16/torch/decode/t:{t}/i:{I}/nt:1", 1, 3 * t * I * 2, 1, mk_glu_d, ops["swiglu"]))
    return (out + gemm_cases(torch, F, threads) + woq_cases(torch, F, threads) + qlinear_cases(torch, F, threads)
            + attention_cases(torch, F, threads) + quant_cases(torch, F, threads))


# ---- bench_gemm's GEMMs (see the top); counters: a dict {"GFLOPS": flops, "GBPS": bytes} per call ---
GEMM_SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
               (384, 768, 768), (384, 3072, 768), (384, 768, 3072)]
DECODE_NK = [(4096, 4096), (11008, 4096), (4096, 11008)]


def gemm_cases(torch, F, threads):
    out = []

    def sets_for(bytes_per_set):
        return max(1, math.ceil(ROTATE_BYTES / bytes_per_set))

    for M, N, K in GEMM_SHAPES:
        shape = f"{M}x{N}x{K}"
        flops = 2 * M * N * K
        for dname, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            for nt in threads:
                def mk(nsets, M=M, N=N, K=K, dt=dt):
                    return [((torch.rand(M, K) * 2 - 1).to(dt), (torch.rand(K, N) * 2 - 1).to(dt))]
                out.append((f"gemm/{dname}/torch/{shape}/threads:{nt}", nt, {"GFLOPS": flops}, 1, mk,
                            lambda a, b: torch.matmul(a, b)))
        for nt in threads:
            def mk_i8(nsets, M=M, N=N, K=K):
                return [(torch.randint(0, 128, (M, K), dtype=torch.int8), torch.randint(-128, 128, (K, N), dtype=torch.int8))]
            out.append((f"gemm/s8s8s32/torch/{shape}/threads:{nt}", nt, {"GFLOPS": flops}, 1, mk_i8,
                        lambda a, b: torch._int_mm(a, b)))
    for N, K in DECODE_NK:
        for dname, dt, es in (("f32", torch.float32, 4), ("bf16", torch.bfloat16, 2)):
            for M in (1, 16):
                for nt in threads:
                    def mk_dec(nsets, M=M, N=N, K=K, dt=dt):
                        x = (torch.rand(M, K) * 2 - 1).to(dt)
                        return [(x, (torch.rand(N, K) * 2 - 1).to(dt)) for _ in range(nsets)]
                    out.append((f"gemm/{dname}/torch/{M}x{N}x{K}_decode_bt/threads:{nt}", nt,
                                {"GBPS": N * K * es, "GFLOPS": 2 * M * N * K}, sets_for(N * K * es), mk_dec,
                                lambda x, w: F.linear(x, w)))
    return out


# ---- bench_woq's rows: PyTorch's weight-only quantized kernels (names woq/<w>/torch/M<M>xN<N>xK<K>/nt:<t>,
# as bench_woq's; GBPS = packed weight bytes (q + scales [+ zeros]) / time, GFLOPS = 2 M N K / time):
#   woq/s8/torch      torch._weight_int8pack_mm(x, w int8 [N x K], scales [N]), bf16 x
#   woq/u4g128/torch  torch._weight_int4pack_mm_for_cpu(x, w, 128, scales_and_zeros), bf16 x, w from
#                     torch._convert_weight_to_int4pack_for_cpu (weights rotated over XK_BENCH_ROTATE_MB)
def woq_cases(torch, F, threads):
    out = []
    shapes = [(M, N, K) for N, K in DECODE_NK for M in (1, 16)] + [(512, 4096, 4096)]
    for M, N, K in shapes:
        shape = f"M{M}xN{N}xK{K}"
        b8, b4 = N * K + N * 2, N * K // 2 + (K // 128) * N * 2 * 2
        for nt in threads:
            def mk8(nsets, M=M, N=N, K=K):
                x = (torch.rand(M, K) * 2 - 1).to(torch.bfloat16)
                return [(x, torch.randint(-128, 128, (N, K), dtype=torch.int8), (torch.rand(N) * 0.01 + 0.001).to(torch.bfloat16))
                        for _ in range(nsets)]

            def mk4(nsets, M=M, N=N, K=K):
                x = (torch.rand(M, K) * 2 - 1).to(torch.bfloat16)
                q = torch.randint(0, 16, (N, K), dtype=torch.int32)
                w = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
                sz = torch.rand(K // 128, N, 2).to(torch.bfloat16)
                return [(x, w.clone(), sz) for _ in range(nsets)]
            rot = 1 if M > 16 else None
            out.append((f"woq/s8/torch/{shape}/nt:{nt}", nt, {"GBPS": b8, "GFLOPS": 2 * M * N * K},
                        rot or max(1, math.ceil(ROTATE_BYTES / b8)), mk8, lambda x, w, s: torch._weight_int8pack_mm(x, w, s)))
            out.append((f"woq/u4g128/torch/{shape}/nt:{nt}", nt, {"GBPS": b4, "GFLOPS": 2 * M * N * K},
                        rot or max(1, math.ceil(ROTATE_BYTES / b4)), mk4,
                        lambda x, w, sz: torch._weight_int4pack_mm_for_cpu(x, w, 128, sz)))
    return out


# ---- bench_quant's rows (names as bench_quant's: quantize/<f32|bf16>/torch/<mode>/<u8|s8>/4096x4096/nt:<t>,
# dequantize/...; GBPS = bytes read + written, x and q once, as bench_quant counts; x rotated over
# XK_BENCH_ROTATE_MB):
#   per_tensor   torch.quantize_per_tensor(x, scale, zp, quint8) (u8 asymmetric); dequantize: q.dequantize()
#   per_channel  torch.quantize_per_channel(x, scales [cols], zeros, axis=1, qint8) (s8 symmetric)
#   dynamic      per token asymmetric s8 in eager ops (torch.aminmax per row, PyTorch's observer formula,
#                torch.quantize_per_channel on axis 0 with the rows' parameters): the one call PyTorch has
#                for a per-row quantization with computed parameters
#   bf16 x: the same ops on bf16 tensors where this build accepts them (else skipped)
def quant_cases(torch, F, threads):
    out = []
    R = C = 4096
    shape = f"{R}x{C}"
    for dname, dt, es in (("f32", torch.float32, 4), ("bf16", torch.bfloat16, 2)):
        nsets = max(1, math.ceil(ROTATE_BYTES / (R * C * (es + 1))))

        def mk_x(nsets, dt=dt):
            return [((torch.rand(R, C) * 6 - 3).to(dt),) for _ in range(nsets)]

        def mk_pc(nsets, dt=dt):
            sc = torch.rand(C, dtype=torch.float64) * 0.02 + 0.01
            return [((torch.rand(R, C) * 6 - 3).to(dt), sc, torch.zeros(C, dtype=torch.int64)) for _ in range(nsets)]

        def dyn(x):
            mn, mx = torch.aminmax(x.float(), dim=1)
            mn, mx = mn.clamp(max=0), mx.clamp(min=0)
            sc = ((mx - mn) / 255).double().clamp(min=1e-12)
            zp = (-128 - torch.round(mn.double() / sc)).clamp(-128, 127).long()
            return torch.quantize_per_channel(x, sc, zp, 0, torch.qint8)

        def mk_q(nsets, dt=dt):
            return [(torch.quantize_per_tensor((torch.rand(R, C) * 6 - 3), 0.02, 128, torch.quint8),) for _ in range(nsets)]

        def mk_qc(nsets, dt=dt):
            sc = torch.rand(C, dtype=torch.float64) * 0.02 + 0.01
            return [(torch.quantize_per_channel(torch.rand(R, C) * 6 - 3, sc, torch.zeros(C, dtype=torch.int64), 1, torch.qint8),)
                    for _ in range(nsets)]
        b = R * C * (es + 1)
        for nt in threads:
            out.append((f"quantize/{dname}/torch/per_tensor/u8/{shape}/nt:{nt}", nt, {"GBPS": b}, nsets, mk_x,
                        lambda x: torch.quantize_per_tensor(x, 0.02, 128, torch.quint8)))
            out.append((f"quantize/{dname}/torch/per_channel/s8/{shape}/nt:{nt}", nt, {"GBPS": b + C * 4}, nsets, mk_pc,
                        lambda x, sc, zp: torch.quantize_per_channel(x, sc, zp, 1, torch.qint8)))
            out.append((f"quantize/{dname}/torch/dynamic/s8/{shape}/nt:{nt}", nt, {"GBPS": b + R * 8}, nsets, mk_x, dyn))
            if dt == torch.float32:  # (q.dequantize() gives f32)
                out.append((f"dequantize/{dname}/torch/per_tensor/u8/{shape}/nt:{nt}", nt, {"GBPS": b}, nsets, mk_q,
                            lambda q: q.dequantize()))
                out.append((f"dequantize/{dname}/torch/per_channel/s8/{shape}/nt:{nt}", nt, {"GBPS": b + C * 4}, nsets, mk_qc,
                            lambda q: q.dequantize()))
    return out


# ---- bench_qlinear's int8 Linear layers (names qlinear/f32/torch/<mode>/<MxNxK>/nt:<t>, GFLOPS = 2 M N K
# per call, quantization included; Y = X W^T + bias, f32 X and Y, weights quantized once):
#   dynamic_per_token   torchao's int8-dynamic-activation / int8-weight recipe in eager ops: X quantized
#                       per row (symmetric s8: amax / 127), torch._int_mm(Xq, Wq^T) -> s32, then
#                       * x_scale[m] * w_scale[n] + bias
#   dynamic_per_tensor  torch.ao.quantization.quantize_dynamic(nn.Linear, qint8): PyTorch's dynamic
#                       quantized Linear (u8 activations per tensor, fbgemm / x86 engine)
QLINEAR_SHAPES = [(384, 3072, 768), (128, 4096, 4096), (1, 4096, 4096)]


def qlinear_cases(torch, F, threads):
    out = []
    for M, N, K in QLINEAR_SHAPES:
        shape = f"{M}x{N}x{K}"
        flops = 2 * M * N * K

        def mk_tok(nsets, M=M, N=N, K=K):
            w = (torch.rand(N, K) - 0.5) * 0.1
            ws = w.abs().amax(dim=1).clamp(min=1e-8) / 127
            wq_t = torch.round(w / ws[:, None]).clamp(-128, 127).to(torch.int8).t()  # [K x N] view of Wq [N x K]
            x = (torch.rand(M, K) - 0.5) * 4
            return [(x, wq_t, ws, torch.rand(N))]

        def fwd_tok(x, wq_t, ws, b):
            xs = x.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127
            xq = torch.round(x / xs).clamp(-128, 127).to(torch.int8)
            if xq.shape[0] <= 16:  # torch._int_mm needs M > 16 on CPU in some builds: pad
                xq = torch.nn.functional.pad(xq, (0, 0, 0, 17 - xq.shape[0]))
                acc = torch._int_mm(xq, wq_t)[: x.shape[0]]
            else:
                acc = torch._int_mm(xq, wq_t)
            return acc.to(torch.float32) * xs * ws + b

        def mk_ao(nsets, M=M, N=N, K=K):
            lin = torch.nn.Linear(K, N)
            with torch.no_grad():
                lin.weight.copy_((torch.rand(N, K) - 0.5) * 0.1)
            q = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(lin), {torch.nn.Linear}, dtype=torch.qint8)
            return [(q, (torch.rand(M, K) - 0.5) * 4)]

        for nt in threads:
            out.append((f"qlinear/f32/torch/dynamic_per_token/{shape}/nt:{nt}", nt, {"GFLOPS": flops}, 1, mk_tok, fwd_tok))
            out.append((f"qlinear/f32/torch/dynamic_per_tensor/{shape}/nt:{nt}", nt, {"GFLOPS": flops}, 1, mk_ao,
                        lambda q, x: q(x)))
    return out


# ---- bench_attention's rows (names attention/<dtype>/torch/..., as bench_attention's) ------------
# decode:  F.scaled_dot_product_attention(q [B, 32, 1, 128], k / v [B, 8, L, 128], enable_gqa=True)
#          over a padded cache of L tokens, rotated over XK_BENCH_ROTATE_MB / 2; GBPS = K + V bytes.
# prefill: F.scaled_dot_product_attention(q / k / v [1, 32, T, 128], is_causal=True);
#          GFLOPS = 4 T^2 128 32 / 2 (the causal half). XK_BENCH_PREFILL_8K=1 adds T = 8192.
def attention_cases(torch, F, threads):
    out = []
    QH, KVH, D = 32, 8, 128
    for dname, dt, es in (("bf16", torch.bfloat16, 2), ("f32", torch.float32, 4)):
        for nt in threads:
            for B in (1, 8):
                for L in (2048, 8192, 32768):
                    if dname == "f32" and B == 8 and L == 32768:
                        continue  # as bench_attention: 2 GiB a cache copy
                    kv_bytes = 2 * B * KVH * L * D * es
                    nsets = max(1, min(8, (ROTATE_BYTES // 2) // kv_bytes))

                    def mk(nsets, B=B, L=L, dt=dt):
                        q = torch.rand(B, QH, 1, D).to(dt) * 2 - 1
                        return [(q, (torch.rand(B, KVH, L, D) * 2 - 1).to(dt), (torch.rand(B, KVH, L, D) * 2 - 1).to(dt))
                                for _ in range(nsets)]
                    out.append((f"attention/{dname}/torch/decode/b:{B}/ctx:{L}/nt:{nt}", nt, {"GBPS": kv_bytes}, nsets, mk,
                                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)))
            Ts = [2048] + ([8192] if os.environ.get("XK_BENCH_PREFILL_8K") == "1" else [])
            for T in Ts:
                def mk_p(nsets, T=T, dt=dt):
                    return [tuple((torch.rand(1, QH, T, D) * 2 - 1).to(dt) for _ in range(3))]
                out.append((f"attention/{dname}/torch/prefill/T:{T}/nt:{nt}", nt, {"GFLOPS": 4 * T * T * D * QH / 2}, 1,
                            mk_p, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)))
    return out


def run(args):
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        sys.exit("torch_peer.py: PyTorch is not installed here; see the top of this file "
                 "(python3 -m venv /opt/torchpeer && /opt/torchpeer/bin/pip install torch numpy)")

    threads = [int(x) for x in args.threads.split(",")] if args.threads else env_threads()
    rx = re.compile(args.filter) if args.filter else None
    results = []
    torch.manual_seed(0)
    with torch.inference_mode():
        for name, nt, units, nsets, make, fn in cases(torch, F, threads):
            if rx and not rx.search(name):
                continue
            if not isinstance(units, dict):
                units = {"GBPS": units}  # bench_llm's rows: bytes per call
            torch.set_num_threads(nt)
            try:
                sets = make(nsets)
                for _ in range(2):  # warm-up (allocator, first touch)
                    fn(*sets[0])
            except (RuntimeError, NotImplementedError) as e:  # e.g. an op this build lacks on CPU
                print(f"{name:60s} skipped: {e}", file=sys.stderr)
                continue
            for rep in range(args.repetitions):
                it, k, t0, c0 = 0, 0, time.perf_counter(), time.process_time()
                while True:
                    fn(*sets[k])
                    k = (k + 1) % len(sets)
                    it += 1
                    el = time.perf_counter() - t0
                    if el >= args.min_time and it >= 2:
                        break
                per = el / it
                cpu = (time.process_time() - c0) / it  # (the process's CPU time: every torch thread)
                entry = {
                    "name": name + "/real_time", "run_name": name + "/real_time", "run_type": "iteration",
                    "repetitions": args.repetitions, "repetition_index": rep, "threads": 1, "iterations": it,
                    "real_time": per * 1e9, "cpu_time": cpu * 1e9, "time_unit": "ns",
                    "label": f"torch {torch.__version__}, {len(sets)} sets",
                }
                text = ""
                for c, v in units.items():
                    entry[c] = v / per * 1e-9
                    text += f" {v / per * 1e-9:9.2f} {'GB/s' if c == 'GBPS' else 'GFLOP/s'}"
                results.append(entry)
                print(f"{name:60s} {per * 1e6:12.1f} us (cpu {cpu * 1e6:.1f} us){text}", file=sys.stderr)
            del sets
    ctx = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "executable": "bench/torch_peer.py",
           "torch": torch.__version__, "num_cpus": os.cpu_count(), "library_build_type": "release",
           "rotate_bytes": ROTATE_BYTES}
    json.dump({"context": ctx, "benchmarks": results}, sys.stdout, indent=1)
    print()


# ---- bench_embedding's peers (issue 30): F.embedding_bag and torch.optim.AdamW(foreach=True) ------
#   embedding_bag/<f32|bf16>/torch/sum_dim:<D>_<uniform|zipf1.05>/nt:<N>   F.embedding_bag(mode="sum"),
#       a 1 GiB table, 2048 bags x 100 indices (int64), GBPS = gathered row bytes per call
#   embedding_train/f32/torch/sum_sgd_dim:<D>_<dist>/nt:<N>   forward + backward (sparse=True) +
#       torch.optim.SGD(lr=1e-6).step(), GBPS = the forward's gathered bytes (as bench_embedding)
#   optim/f32/torch/adamw_n:1e8/nt:<N>   AdamW(foreach=True, weight_decay=1e-2).step() over 100
#       tensors of 1e6 f32 params with grads set, GBPS = 28 bytes per parameter (as bench_embedding)
def embedding_cases(torch, F, threads):
    import numpy as np
    out = []
    table_bytes, bags, pool = int(os.environ.get("XK_BENCH_TABLE_MB", "1024")) << 20, 2048, 100

    def idx_for(E, zipf):
        n = bags * pool
        if not zipf:
            return torch.randint(0, E, (n,), dtype=torch.int64)
        r = np.arange(1, E + 1, dtype=np.float64) ** -1.05
        cdf = np.cumsum(r)
        u = np.random.default_rng(0x2F).random(n) * cdf[-1]
        rank = np.minimum(np.searchsorted(cdf, u), E - 1).astype(np.uint64)
        with np.errstate(over="ignore"):
            v = (rank * np.uint64(0x9E3779B97F4A7C15)) & np.uint64(E - 1)
        return torch.from_numpy(v.astype(np.int64))

    offsets = torch.arange(0, bags * pool, pool, dtype=torch.int64)
    for dim in (64, 128):
        for zipf in (False, True):
            for dt, es in (("f32", 4), ("bf16", 2)):
                E = table_bytes // (dim * es)
                shape = f"sum_dim:{dim}_{'zipf1.05' if zipf else 'uniform'}"

                def mk(nsets, E=E, dt=dt, dim=dim, zipf=zipf):
                    w = torch.rand(E, dim, dtype=torch.float32 if dt == "f32" else torch.bfloat16)
                    return [(w, idx_for(E, zipf))]

                for nt in threads:
                    out.append((f"embedding_bag/{dt}/torch/{shape}/nt:{nt}", nt, bags * pool * dim * es, 1, mk,
                                lambda w, i: F.embedding_bag(i, w, offsets, mode="sum")))

    # One training step: forward + backward (sparse grad) + torch.optim.SGD step (lr 1e-6).
    for dim in (64, 128):
        for zipf in (False, True):
            E = table_bytes // (dim * 4)
            shape = f"sum_sgd_dim:{dim}_{'zipf1.05' if zipf else 'uniform'}"

            def mk_train(nsets, E=E, dim=dim, zipf=zipf):
                with torch.inference_mode(False):  # normal tensors: autograd saves them
                    w = torch.nn.Parameter(torch.rand(E, dim))
                    opt = torch.optim.SGD([w], lr=1e-6)
                    i, o = idx_for(E, zipf).clone(), offsets.clone()
                return [(w, opt, i, o)]

            def train(w, opt, i, offs):
                with torch.inference_mode(False):
                    o = F.embedding_bag(i, w, offs, mode="sum", sparse=True)
                    o.backward(o.detach())
                    opt.step()
                    opt.zero_grad(set_to_none=True)

            for nt in threads:
                out.append((f"embedding_train/f32/torch/{shape}/nt:{nt}", nt, bags * pool * dim * 4, 1, mk_train, train))

    n_total, n_each = 100_000_000, 1_000_000

    def mk_opt(nsets):
        with torch.inference_mode(False):
            ps = [torch.nn.Parameter(torch.full((n_each,), 0.5)) for _ in range(n_total // n_each)]
            for p in ps:
                p.grad = torch.full((n_each,), 1e-3)
            opt = torch.optim.AdamW(ps, lr=1e-3, weight_decay=1e-2, foreach=True)
        return [(opt,)]

    def step(opt):
        with torch.inference_mode(False):
            opt.step()

    for nt in threads:
        out.append((f"optim/f32/torch/adamw_n:1e8/nt:{nt}", nt, 28 * n_total, 1, mk_opt, step))
    return out


_cases_without_embedding = cases


def cases(torch, F, threads):  # noqa: F811  (the rows above appended to every other family's)
    return _cases_without_embedding(torch, F, threads) + embedding_cases(torch, F, threads)


# ---- bench_embedding's interaction peers (issue 30): DLRM's interact_features ("dot") ------------
#   interaction/<f32|bf16>/torch/<fwd|fwdbwd>_n:27_dim:<D>_b:2048/nt:<N>   DLRM's code: T = cat([x] + ly)
#       .view(B, -1, D); Z = bmm(T, T^T); R = cat([x, Z[:, li, lj]]) with li, lj = tril_indices(27, 27,
#       -1) (IPEX's formula: the same pairs); fwdbwd adds R.backward(g). GBPS counted as bench_embedding.
def interaction_cases(torch, F, threads):
    out = []
    N, B = 27, 2048
    P = N * (N - 1) // 2
    for dim in (64, 128):
        for dt, es in (("f32", 4), ("bf16", 2)):
            for bwd in (False, True):
                tdt = torch.float32 if dt == "f32" else torch.bfloat16

                def mk(nsets, dim=dim, tdt=tdt, bwd=bwd):
                    with torch.inference_mode(False):
                        x = (torch.rand(B, dim) - 0.5).to(tdt).requires_grad_(bwd)
                        ly = [(torch.rand(B, dim) - 0.5).to(tdt).requires_grad_(bwd) for _ in range(N - 1)]
                        g = ((torch.rand(B, dim + P) - 0.5) * 1e-2).to(tdt)
                        ij = torch.tril_indices(N, N, offset=-1)  # a normal tensor: autograd saves it
                    return [(x, ly, g, ij[0], ij[1])]

                def fn(x, ly, g, li, lj, dim=dim, bwd=bwd):
                    with torch.inference_mode(False):
                        T = torch.cat([x] + ly, dim=1).view((B, -1, dim))
                        Z = torch.bmm(T, torch.transpose(T, 1, 2))
                        R = torch.cat([x, Z[:, li, lj]], dim=1)
                        if bwd:
                            R.backward(g)
                            x.grad = None
                            for t in ly:
                                t.grad = None
                        return R

                fwd_bytes = B * (N * dim + dim + P) * es
                nbytes = fwd_bytes + (B * (2 * N * dim + dim + P) * es if bwd else 0)
                name = f"{'fwdbwd' if bwd else 'fwd'}_n:27_dim:{dim}_b:2048"
                for nt in threads:
                    out.append((f"interaction/{dt}/torch/{name}/nt:{nt}", nt, nbytes, 1, mk, fn))
    return out


_cases_without_interaction = cases


def cases(torch, F, threads):  # noqa: F811
    return _cases_without_interaction(torch, F, threads) + interaction_cases(torch, F, threads)


# ---- bench_conv's peers (issue 31): ResNet-50's layers as PyTorch eager runs them -------------------
#   conv/<f32|bf16>/torch/r50_<H>x<W>x<C>_k<K>_oc<OC>/n:<N>/nt:<T>   torchvision's Bottleneck order on
#       channels-last tensors: F.conv2d (no bias, stride 1, padding (K-1)/2) -> F.batch_norm (eval,
#       running stats) [-> += shortcut for the 1x1 expand layer] -> F.relu(inplace=True); bf16 rows
#       hold everything in bf16 (a model .to(torch.bfloat16)). GFLOPS = 2*N*H*W*OC*C*K*K (the conv's,
#       as bench_conv counts them; ours fuses BN into the weights and bias).
#   convstack/<f32|bf16>/torch/r50_5layers/n:<N>/nt:<T>   the five layers one after another,
#       GFLOPS = their sum (bench_conv's convstack rows).
#   Batches: XK_BENCH_CONV_BATCHES (default 1,8), as bench_conv.
CONV_LAYERS = [(56, 56, 64, 64, 3, False), (56, 56, 64, 256, 1, True), (28, 28, 128, 128, 3, False),
               (14, 14, 256, 256, 3, False), (7, 7, 512, 512, 3, False)]


def conv_batches():
    s = os.environ.get("XK_BENCH_CONV_BATCHES", "")
    v = [int(x) for x in s.split(",") if x.strip().isdigit() and int(x) > 0]
    return v or [1, 8]


def conv_cases(torch, F, threads):
    cl = torch.channels_last

    def tensors(layer, n, tdt):
        h, w, c, oc, k, res = layer
        x = (torch.rand(n, c, h, w) * 2 - 1).to(tdt).contiguous(memory_format=cl)
        wt = ((torch.rand(oc, c, k, k) * 2 - 1) / math.sqrt(c * k * k)).to(tdt).contiguous(memory_format=cl)
        bn = [(torch.rand(oc) - 0.5).to(tdt), (torch.rand(oc) + 0.5).to(tdt),  # running mean, var
              (torch.rand(oc) + 0.5).to(tdt), (torch.rand(oc) - 0.5).to(tdt)]  # gamma, beta
        sc = (torch.rand(n, oc, h, w) * 2 - 1).to(tdt).contiguous(memory_format=cl) if res else None
        return (x, wt, *bn, sc, (k - 1) // 2)

    def layer(x, wt, rm, rv, g, b, sc, pad):
        y = F.conv2d(x, wt, None, 1, pad)
        y = F.batch_norm(y, rm, rv, g, b, False, 0.0, 1e-5)
        if sc is not None:
            y += sc
        return F.relu(y, inplace=True)

    out = []
    for dt, tdt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        for n in conv_batches():
            for L in CONV_LAYERS:
                h, w, c, oc, k, _ = L
                fl = 2 * n * h * w * oc * c * k * k

                def mk(nsets, L=L, n=n, tdt=tdt):
                    return [tensors(L, n, tdt)]

                for nt in threads:
                    out.append((f"conv/{dt}/torch/r50_{h}x{w}x{c}_k{k}_oc{oc}/n:{n}/nt:{nt}", nt, {"GFLOPS": fl}, 1,
                                mk, layer))

            def mk_stack(nsets, n=n, tdt=tdt):
                return [tuple(tensors(L, n, tdt) for L in CONV_LAYERS)]

            def stack(*ls):
                for t in ls:
                    layer(*t)

            fl_all = sum(2 * n * h * w * oc * c * k * k for h, w, c, oc, k, _ in CONV_LAYERS)
            for nt in threads:
                out.append((f"convstack/{dt}/torch/r50_5layers/n:{n}/nt:{nt}", nt, {"GFLOPS": fl_all}, 1,
                            mk_stack, stack))
    return out


_cases_without_conv = cases


def cases(torch, F, threads):  # noqa: F811
    return _cases_without_conv(torch, F, threads) + conv_cases(torch, F, threads)


def median_by_name(path):
    """{(key, provider): (median, unit)}: GB/s where a row has GBPS (memory-bound), else GFLOP/s.
    The key is the name without the provider (and real_time); PyTorch's s8s8s32 GEMM rows are keyed
    as bench_gemm's u8s8s32 rows, provider "torch(s8s8)"."""
    with open(path) as f:
        data = json.load(f)
    vals = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        unit = "GB/s" if "GBPS" in b else "GFLOP/s" if "GFLOPS" in b else None
        if unit is None:
            continue
        parts = [p for p in b["name"].split("/") if p != "real_time"]
        if len(parts) < 3:
            continue
        prov = parts[2]
        if parts[0] == "gemm" and parts[1] == "s8s8s32" and prov == "torch":
            parts[1], prov = "u8s8s32", "torch(s8s8)"
        key = "/".join(parts[:2] + parts[3:])  # without the provider
        vals.setdefault((key, prov, unit), []).append(float(b["GBPS" if unit == "GB/s" else "GFLOPS"]))
    return {(k, p): (statistics.median(v), u) for (k, p, u), v in vals.items()}


def compare(paths):
    merged = {}
    for p in paths:
        merged.update(median_by_name(p))
    keys = sorted({k for k, _ in merged})
    rows = []
    for k in keys:
        ours = merged.get((k, "xk"))
        if ours is None:
            continue
        for prov in ("torch", "torch(s8s8)", "onednn"):
            peer = merged.get((k, prov))
            if peer and peer[1] == ours[1]:
                rows.append((k, ours[1], ours[0], prov, peer[0], ours[0] / peer[0]))
    w = max([len(r[0]) for r in rows] + [10])
    print(f"{'benchmark':{w}s}  {'unit':7s}  {'xk':>8s}  {'peer':11s}  {'peer':>8s}  {'xk/peer':>8s}")
    for k, unit, ours, prov, peer, ratio in rows:
        print(f"{k:{w}s}  {unit:7s}  {ours:8.2f}  {prov:11s}  {peer:8.2f}  {ratio:7.2f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", default="")
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--repetitions", type=int, default=1)
    ap.add_argument("--threads", default="")
    ap.add_argument("--compare", nargs="+", metavar="JSON",
                    help="print the xk-vs-peer table of bench_llm / bench_gemm / torch_peer JSON files instead of running")
    args = ap.parse_args()
    if args.compare:
        compare(args.compare)
    else:
        run(args)


if __name__ == "__main__":
    main()
