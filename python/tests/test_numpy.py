"""The torch-free binding (xkernels.ops) on NumPy arrays, with NumPy oracles (float64).
Tolerances: f32 1e-5 relative (GEMM: 1e-4 sqrt(K)); bf16 one bf16 rounding (2^-8) of the result."""
import math

import numpy as np
import pytest

import xkernels
from xkernels import ops

RNG = np.random.default_rng(0)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def bf16_round(x):
    return ops.from_bf16(ops.to_bf16(x))


def test_runtime():
    assert ops.version().count(".") == 2
    assert ops.max_isa() in ("scalar", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx")
    ops.set_num_threads(2)
    ops.set_num_threads(0)


def test_convert_roundtrip():
    x = rand(1000, scale=100)
    b = ops.to_bf16(x)
    assert b.dtype == np.uint16
    back = ops.from_bf16(b)
    assert np.all(np.abs(back - x) <= np.abs(x) * 2 ** -8)
    # round to nearest even, as the bits say
    assert ops.to_bf16(np.array([1.0 + 2 ** -8], np.float32))[0] == 0x3F80
    h = ops.convert(x, "f16")
    assert h.dtype == np.float16 and np.array_equal(h, x.astype(np.float16))


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (7, 17, 9), (33, 64, 130)])
@pytest.mark.parametrize("bf16", [False, True])
def test_gemm(M, K, N, bf16):
    a, b, bias, res = rand(M, K), rand(K, N), rand(N), rand(M, N)
    ref = np.maximum(a.astype(np.float64) @ b + bias, 0) + res
    if bf16:
        a, b = ops.to_bf16(a), ops.to_bf16(b)
        ref = np.maximum(ops.from_bf16(a).astype(np.float64) @ ops.from_bf16(b) + bias, 0) + res
    c = ops.gemm(a, b, bias=bias, activation="relu", residual=res, out_dtype="f32")
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * math.sqrt(K))
    c = ops.gemm(a, b.T.copy(), trans_b=True, bias=bias, activation="relu", residual=res, out_dtype="f32")
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-4 * math.sqrt(K))
    if bf16:
        cb = ops.gemm(a, b, bias=bias, activation="relu", residual=res, out_dtype="bf16")
        np.testing.assert_allclose(ops.from_bf16(cb), ref, rtol=2 ** -8, atol=1e-3 * math.sqrt(K))


def test_gemm_beta_and_plan():
    a, b, c0 = rand(5, 12), rand(12, 7), rand(5, 7)
    c = c0.copy()
    ops.gemm(a, b, c, alpha=2.0, beta=0.5)
    np.testing.assert_allclose(c, 2 * a @ b + 0.5 * c0, rtol=1e-5, atol=1e-5)
    w = rand(40, 12)  # [N, K] like a Linear weight
    plan_big = ops.GemmPlan(9, 40, 12, "f32", trans_b=True, bias=True)
    packed = plan_big.pack_b(w)
    bias = rand(40)
    for M in (1, 9, 30):  # one packed B serves every M
        plan = ops.GemmPlan(M, 40, 12, "f32", trans_b=True, bias=True)
        x = rand(M, 12)
        np.testing.assert_allclose(plan.run(x, packed, bias=bias), x @ w.T + bias, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(plan.run(x, w, bias=bias), x @ w.T + bias, rtol=1e-5, atol=1e-5)
    assert isinstance(plan_big.impl_name, str) and plan_big.impl_name
    with pytest.raises(ValueError):
        ops.GemmPlan(3, 40, 12, "f32", trans_b=True).run(rand(3, 12), ops.GemmPlan(3, 41, 12, "f32").pack_b(
            rand(12, 41)))


def test_linear():
    x, w, b = rand(2, 3, 16), rand(8, 16), rand(8)
    np.testing.assert_allclose(ops.linear(x, w, b), x @ w.T + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 4, 1023)])
def test_norms(shape, bf16):
    H = shape[-1]
    x, w, b = rand(*shape), rand(H), rand(H)
    if bf16:
        x, w, b = bf16_round(x), bf16_round(w), bf16_round(b)
    x64 = x.astype(np.float64)
    rms = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    mu = x64.mean(-1, keepdims=True)
    ln = (x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b
    tol = dict(rtol=2 ** -8, atol=2 ** -8) if bf16 else dict(rtol=1e-5, atol=1e-5)
    cv = (lambda v: ops.to_bf16(v)) if bf16 else (lambda v: v)
    back = (lambda v: ops.from_bf16(v)) if bf16 else (lambda v: v)
    np.testing.assert_allclose(back(ops.rms_norm(cv(x), cv(w), 1e-6)), rms, **tol)
    np.testing.assert_allclose(back(ops.layer_norm(cv(x), cv(w), cv(b), 1e-5)), ln, **tol)
    r = rand(*shape)
    if bf16:
        r = bf16_round(r)
    res = cv(r.copy())
    y = ops.fused_add_rms_norm(cv(x), res, cv(w), 1e-6)
    s = (x64 + r)
    np.testing.assert_allclose(back(res), s, **tol)
    sb = back(res).astype(np.float64)
    np.testing.assert_allclose(back(y), sb / np.sqrt((sb ** 2).mean(-1, keepdims=True) + 1e-6) * w, **tol)
    res = cv(r.copy())
    y = ops.fused_add_layer_norm(cv(x), res, cv(w), cv(b), 1e-5)
    mu = sb.mean(-1, keepdims=True)
    np.testing.assert_allclose(back(y), (sb - mu) / np.sqrt(((sb - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * w + b,
                               **tol)


def test_rope_neox():
    T, H, D = 5, 4, 16
    q, k = rand(T, H, D), rand(T, 2, D)
    pos = np.array([0, 1, 7, 3, 2], np.int64)
    inv = 10000.0 ** (-np.arange(0, D, 2) / D)
    ang = pos[:, None] * inv[None]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]

    def ref(v):
        x1, x2 = v[..., :D // 2].astype(np.float64), v[..., D // 2:].astype(np.float64)
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    rq, rk = ref(q), ref(k)
    q1, k1 = q.copy(), k.copy()
    ops.rope(q1, k1, pos)
    np.testing.assert_allclose(q1, rq, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(k1, rk, rtol=1e-5, atol=1e-5)
    cache = np.concatenate([np.cos(np.arange(8)[:, None] * inv[None]), np.sin(np.arange(8)[:, None] * inv[None])],
                           -1).astype(np.float32)
    q2 = q.copy()
    ops.rope(q2, None, pos, cos_sin_cache=cache)
    np.testing.assert_allclose(q2, rq, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("act", ["silu", "gelu", "gelu_tanh", "relu"])
def test_glu(act):
    x = rand(3, 2, 34, scale=3)
    g, u = x[..., :17].astype(np.float64), x[..., 17:].astype(np.float64)
    erf = np.vectorize(math.erf)
    a = {"silu": lambda v: v / (1 + np.exp(-v)), "gelu": lambda v: 0.5 * v * (1 + erf(v / math.sqrt(2))),
         "gelu_tanh": lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))),
         "relu": lambda v: np.maximum(v, 0)}[act]
    np.testing.assert_allclose(ops.glu(x, act), a(g) * u, rtol=1e-5, atol=1e-5)
    if act == "silu":
        np.testing.assert_allclose(ops.silu_and_mul(x), a(g) * u, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ops.from_bf16(ops.silu_and_mul(ops.to_bf16(x))),
                                   a(bf16_round(x)[..., :17].astype(np.float64)) * bf16_round(x)[..., 17:],
                                   rtol=2 ** -7, atol=1e-3)


def test_softmax():
    x = rand(4, 33, scale=3)
    e = np.exp(0.5 * x - (0.5 * x).max(-1, keepdims=True))
    np.testing.assert_allclose(ops.softmax(x, 0.5), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    y = ops.softmax(x, 1.0, causal=True)
    assert np.all(y[np.triu_indices(4, 1, 33)] == 0)
    np.testing.assert_allclose(y.sum(-1), 1, rtol=1e-5)


def test_quant():
    x = rand(6, 10, scale=2)
    s, z = ops.compute_quant_params(float(x.min()), float(x.max()), "u8")
    q = ops.quantize(x, s, z, "u8")
    ref = np.clip(z + np.round(x.astype(np.float64) * np.float32(1 / np.float32(s))), 0, 255)
    assert np.abs(q.astype(np.int64) - ref).max() <= 1
    np.testing.assert_allclose(ops.dequantize(q, s, z), (q.astype(np.float32) - z) * np.float32(s), rtol=1e-6)
    scales = (np.abs(rand(10)) * 0.02 + 0.01).astype(np.float32)
    q = ops.quantize(x, scales, None, "s8", axis=1)
    np.testing.assert_allclose(ops.dequantize(q, scales, axis=1), q * scales, rtol=1e-6)
    assert np.abs(ops.dequantize(q, scales, axis=1) - np.clip(x, -128 * scales, 127 * scales)).max() <= \
        scales.max() * 0.5 + 1e-6
    q, sc, zp = ops.quantize_dynamic_per_token(x, "u8")
    deq = (q.astype(np.float32) - zp[:, None]) * sc[:, None]
    assert np.all(np.abs(deq - x) <= sc[:, None] * 0.5 + 1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode):
    table = rand(20, 8)
    idx = RNG.integers(0, 20, 12)
    off = np.array([0, 4, 4, 9])
    out = ops.embedding_bag(table, idx, off, mode)
    bounds = list(off) + [len(idx)]
    for bag in range(4):
        rows = table[idx[bounds[bag]:bounds[bag + 1]]].astype(np.float64)
        want = np.zeros(8) if len(rows) == 0 else {"sum": rows.sum(0), "mean": rows.mean(0), "max": rows.max(0)}[mode]
        np.testing.assert_allclose(out[bag], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.embedding_bag(table, idx.astype(np.int32), off.astype(np.int32), mode), out)


def test_conv2d():
    x, w, b = rand(2, 3, 9, 8), rand(4, 3, 3, 3), rand(4)
    y = ops.conv2d(x, w, b, stride=2, padding=1)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (9 + 2 - 3) // 2 + 1, (8 + 2 - 3) // 2 + 1
    ref = np.zeros((2, 4, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
            ref[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w) + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_errors():
    with pytest.raises(xkernels.XkError, match="scale"):
        ops.softmax(rand(2, 3), -1.0)
    with pytest.raises(xkernels.XkInvalidArgument) as e:
        ops.softmax(rand(2, 3), -1.0)
    assert e.value.status == 1 and "softmax" in str(e.value) and isinstance(e.value, ValueError)
    with pytest.raises(ValueError):
        ops.gemm(rand(2, 3), rand(4, 5))
    with pytest.raises(TypeError):
        ops.rms_norm(np.zeros((2, 3), np.float64))


def test_no_torch_needed():
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, xkernels\nfrom xkernels import ops\n"
            "print(ops.rms_norm(np.ones((2, 4), np.float32))[0, 0])")
    env = dict(__import__("os").environ)
    env["PYTHONPATH"] = __import__("os").path.dirname(__import__("os").path.dirname(xkernels.__file__))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert abs(float(out.stdout) - 1.0) < 1e-5


def test_rejects_before_reading():
    with pytest.raises(TypeError):
        ops.rope(np.zeros((2, 2, 4), np.int8), None, np.arange(2))
    with pytest.raises(ValueError):
        ops.rope(np.zeros((2, 2, 4), np.float32), np.zeros((3, 2, 4), np.float32), np.arange(2))
    with pytest.raises(ValueError):
        ops.GemmPlan(2, 3, 4, "f32").run(np.zeros((2, 5), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(xkernels.XkError, match="indices"):
        ops.embedding_bag(rand(5, 4), np.array([7]), np.array([0]))
