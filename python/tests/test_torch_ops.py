"""torch.ops.xk against PyTorch as the oracle, over dtypes and shapes; opcheck on every op.
Tolerances: f32 results rtol/atol 1e-5 (GEMM: 1e-4 relative to sqrt(K)-scaled magnitudes);
bf16 outputs one bf16 rounding (2^-8 relative) plus the oracle's own rounding."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import xkernels.torch  # noqa: E402,F401

pytestmark = pytest.mark.filterwarnings("ignore:.*quantized tensor creation:UserWarning")

xk = torch.ops.xk
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2 ** -7, atol=2 ** -7)}
GEN = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=GEN) * scale).to(dtype)


def close(a, b, dtype, **kw):
    tol = dict(TOL[dtype])
    tol.update(kw)
    torch.testing.assert_close(a.float(), b.float(), **tol)


def opcheck(op, args, kwargs=None):
    torch.library.opcheck(op, args, kwargs or {})


ACTS = {"none": lambda v: v, "relu": torch.relu, "silu": F.silu, "gelu": F.gelu,
        "gelu_tanh": lambda v: F.gelu(v, approximate="tanh")}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (1, 64, 130), (7, 17, 9), (33, 96, 64), (2, 256, 16)])
@pytest.mark.parametrize("bias", [False, True])
def test_linear(dtype, M, K, N, bias):
    x, w = rand(M, K, dtype=dtype), rand(N, K, dtype=dtype)
    b = rand(N) if bias else None
    ref = F.linear(x.float(), w.float(), b)
    y = xk.linear(x, w, b)
    assert y.dtype == dtype and y.shape == (M, N)
    atol = 1e-4 * K ** 0.5 if dtype == torch.float32 else 2 ** -7 * (1 + K ** 0.5)
    close(y, ref, dtype, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("act", list(ACTS))
def test_linear_epilogue(dtype, act):
    x, w, b = rand(2, 5, 40, dtype=dtype), rand(24, 40, dtype=dtype), rand(24)
    for res_dtype in (None, torch.float32, dtype):
        r = None if res_dtype is None else rand(2, 5, 24, dtype=res_dtype)
        ref = ACTS[act](F.linear(x.float(), w.float(), b))
        if r is not None:
            ref = ref + r.float()
        y = xk.linear(x, w, b, act, r)
        close(y, ref, dtype, atol=1e-4 if dtype == torch.float32 else 0.1)


def test_linear_repacks_after_inplace_update():
    x, w = rand(3, 32), rand(8, 32)
    y1 = xk.linear(x, w)
    with torch.no_grad():
        w.mul_(2)
    close(xk.linear(x, w), 2 * y1, torch.float32, atol=1e-4)
    w2 = w.clone()  # new tensor: own pack
    close(xk.linear(x, w2), xk.linear(x, w), torch.float32)


def _packs_of(*tensors):
    """{tag: (family, cap)} of the packed weights the adapter holds for these tensors."""
    ids = tuple(map(id, tensors))
    return {k[0]: (e[2].fam, e[2].cap) for k, e in xkernels.torch._ops._derived._d.items()
            if k[1:] == ids and k[0].startswith("pack")}


def test_fp32_pack_family_recorded_with_the_pack():
    """fp32 weights are packed for every M (blocked) from AVX-512 up, for decode or prefill below it:
    decided when a pack is made, from the cap then, and kept with the pack — a cap raised later keeps
    using the two AVX2-era packs, a cap dropped below a pack's layout packs again (the old layout has
    no reader there), and every result matches torch."""
    import ctypes
    lib, names = xkernels._lib.lib(), xkernels._lib.ISA_NAMES
    v = ctypes.c_int()
    xkernels._lib.check(lib.get_max_isa(ctypes.byref(v)))
    top, avx2, avx512 = v.value, names.index("avx2"), names.index("avx512")
    if top < avx512:
        pytest.skip("needs AVX-512 (packs made above the AVX2 cap)")

    def run(op, *w, M):
        x = rand(M, w[0].shape[1])
        if op == "linear":
            ref, y = F.linear(x, w[0]), xk.linear(x, w[0])
        elif op == "gated":
            ref, y = F.silu(F.linear(x, w[0])) * F.linear(x, w[1]), xk.gated_linear(x, w[0], w[1])
        else:
            ref, y = F.linear(x, torch.cat(w)), xk.fused_linear(x, list(w))
        close(y, ref, torch.float32, atol=1e-4 * w[0].shape[1] ** 0.5)

    try:
        # AVX-512 cap: one pack for every M; then under AVX2 (plans made there read AVX2 layouts only)
        # it is replaced by a decode pack and a prefill pack, each recorded with the AVX2 cap.
        w = rand(36, 88)
        run("linear", w, M=1)
        run("linear", w, M=40)
        assert _packs_of(w) == {"pack": ("any", top)}
        xkernels._lib.check(lib.set_max_isa(avx2))
        run("linear", w, M=5)
        assert _packs_of(w) == {"pack": ("decode", avx2)}
        run("linear", w, M=23)
        assert _packs_of(w) == {"pack": ("decode", avx2), "pack:prefill": ("prefill", avx2)}
        # AVX2 cap, prefill first: a prefill pack, then a decode pack; the cap raised, both stay in use
        w2 = rand(44, 72)
        run("linear", w2, M=30)
        assert _packs_of(w2) == {"pack": ("prefill", avx2)}
        run("linear", w2, M=3)
        assert _packs_of(w2) == {"pack": ("prefill", avx2), "pack:decode": ("decode", avx2)}
        xkernels._lib.check(lib.set_max_isa(top))
        for M in (1, 4, 17, 64):
            run("linear", w2, M=M)
        assert _packs_of(w2) == {"pack": ("prefill", avx2), "pack:decode": ("decode", avx2)}
        # a weight first packed under the raised cap is one pack for every M again
        w3 = rand(20, 56)
        for M in (2, 33):
            run("linear", w3, M=M)
        assert _packs_of(w3) == {"pack": ("any", top)}
        # the concatenated packs (gated / fused linear) follow the same rules
        g, u = rand(24, 40), rand(24, 40)
        run("gated", g, u, M=2)
        run("fused", g, u, M=2)
        assert _packs_of(g, u) == {"pack_gate_up": ("any", top), "pack_cat": ("any", top)}
        xkernels._lib.check(lib.set_max_isa(avx2))
        for M in (3, 19):
            run("gated", g, u, M=M)
            run("fused", g, u, M=M)
        assert _packs_of(g, u) == {"pack_gate_up": ("decode", avx2), "pack_gate_up:prefill": ("prefill", avx2),
                                   "pack_cat": ("decode", avx2), "pack_cat:prefill": ("prefill", avx2)}
    finally:
        xkernels._lib.check(lib.set_max_isa(top))


def test_linear_noncontiguous_and_errors():
    x = rand(16, 10)[:, :8]
    w = rand(4, 8)
    close(xk.linear(x, w), F.linear(x, w), torch.float32, atol=1e-5)
    with pytest.raises((ValueError, RuntimeError)):
        xk.linear(rand(2, 8), rand(4, 9))
    with pytest.raises((TypeError, RuntimeError)):
        xk.linear(rand(2, 8), rand(4, 8, dtype=torch.bfloat16))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_linear(dtype):
    x, wg, wu = rand(5, 48, dtype=dtype), rand(40, 48, dtype=dtype), rand(40, 48, dtype=dtype)
    ref = F.silu(F.linear(x.float(), wg.float())) * F.linear(x.float(), wu.float())
    close(xk.gated_linear(x, wg, wu, "silu"), ref, dtype, atol=1e-4 if dtype == torch.float32 else 0.25)
    ref = F.gelu(F.linear(x.float(), wg.float())) * F.linear(x.float(), wu.float())
    close(xk.gated_linear(x, wg, wu, "gelu"), ref, dtype, atol=1e-4 if dtype == torch.float32 else 0.25)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 64), (17, 1023)])
def test_norms(dtype, shape):
    H = shape[-1]
    x, w, b = rand(*shape, dtype=dtype), rand(H, dtype=dtype), rand(H, dtype=dtype)
    close(xk.rms_norm(x, w, 1e-6), F.rms_norm(x.float(), (H,), w.float(), 1e-6), dtype, atol=1e-4)
    close(xk.rms_norm(x, None, 1e-6), F.rms_norm(x.float(), (H,), None, 1e-6), dtype, atol=1e-4)
    close(xk.layer_norm(x, w, b, 1e-5), F.layer_norm(x.float(), (H,), w.float(), b.float(), 1e-5), dtype, atol=1e-4)
    close(xk.layer_norm(x, None, None, 1e-5), F.layer_norm(x.float(), (H,), eps=1e-5), dtype, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_norms(dtype):
    x, r, w, b = rand(4, 33, dtype=dtype), rand(4, 33, dtype=dtype), rand(33, dtype=dtype), rand(33, dtype=dtype)
    s = (x.float() + r.float()).to(dtype)
    r1 = r.clone()
    y = xk.fused_add_rms_norm(x, r1, w, 1e-6)
    close(r1, s, dtype)
    close(y, F.rms_norm(s.float(), (33,), w.float(), 1e-6), dtype, atol=1e-4)
    r2 = r.clone()
    y = xk.fused_add_layer_norm(x, r2, w, b, 1e-5)
    close(r2, s, dtype)
    close(y, F.layer_norm(s.float(), (33,), w.float(), b.float(), 1e-5), dtype, atol=1e-4)


def rope_ref(positions, q, head_size, cache, neox):
    rot = cache.shape[1]
    cos, sin = cache[positions].float().chunk(2, dim=-1)  # [T, rot/2]
    q = q.float().view(q.shape[0], -1, head_size).clone()
    r = q[..., :rot]
    if neox:
        x1, x2 = r[..., :rot // 2], r[..., rot // 2:]
        c, s = cos[:, None], sin[:, None]
        q[..., :rot] = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    else:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        c, s = cos[:, None], sin[:, None]
        q[..., :rot] = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)
    return q.flatten(1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("rot", [16, 32])
def test_rotary_embedding(dtype, neox, rot):
    T, hs, qh, kh, maxpos = 7, 32, 4, 2, 64
    inv = 1.0 / (10000 ** (torch.arange(0, rot, 2).float() / rot))
    ang = torch.arange(maxpos).float()[:, None] * inv[None]
    cache = torch.cat([ang.cos(), ang.sin()], dim=-1)
    pos = torch.randint(0, maxpos, (T,), generator=GEN)
    q, k = rand(T, qh * hs, dtype=dtype), rand(T, kh * hs, dtype=dtype)
    q2, k2 = q.clone(), k.clone()
    xk.rotary_embedding(pos, q2, k2, hs, cache, neox)
    close(q2, rope_ref(pos, q, hs, cache, neox), dtype, atol=1e-5 if dtype == torch.float32 else 2 ** -6)
    close(k2, rope_ref(pos, k, hs, cache, neox), dtype, atol=1e-5 if dtype == torch.float32 else 2 ** -6)
    q3 = q.clone()
    xk.rotary_embedding(pos, q3, None, hs, cache, neox)
    close(q3, q2, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 2), (3, 34), (2, 3, 1030)])
def test_glu(dtype, shape):
    x = rand(*shape, dtype=dtype, scale=3)
    g, u = x.float().chunk(2, dim=-1)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2 ** -7, atol=1e-3)
    torch.testing.assert_close(xk.silu_and_mul(x).float(), F.silu(g) * u, **tol)
    torch.testing.assert_close(xk.gelu_and_mul(x).float(), F.gelu(g) * u, **tol)
    torch.testing.assert_close(xk.gelu_and_mul(x, "tanh").float(), F.gelu(g, approximate="tanh") * u, **tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (5, 17), (2, 3, 257)])
def test_softmax(dtype, shape):
    x = rand(*shape, dtype=dtype, scale=4)
    close(xk.softmax(x), torch.softmax(x.float(), -1), dtype, atol=1e-6 if dtype == torch.float32 else 2 ** -9)
    close(xk.softmax(x, 0.5), torch.softmax(0.5 * x.float(), -1), dtype,
          atol=1e-6 if dtype == torch.float32 else 2 ** -9)
    rows, cols = x.reshape(-1, shape[-1]).shape
    mask = torch.arange(cols)[None, :] > (torch.arange(rows)[:, None] + 1)
    ref = torch.softmax(x.float().reshape(rows, cols).masked_fill(mask, float("-inf")), -1)
    close(xk.softmax(x, 1.0, True, 1).reshape(rows, cols), ref, dtype, atol=1e-6 if dtype == torch.float32 else 2 ** -9)


@pytest.mark.parametrize("qdtype", [torch.uint8, torch.int8])
def test_quantize(qdtype):
    x = rand(7, 33, scale=3)
    zp = 3 if qdtype == torch.uint8 else -2
    tq = torch.quint8 if qdtype == torch.uint8 else torch.qint8
    ref = torch.quantize_per_tensor(x, 0.05, zp, tq)
    q = xk.quantize_per_tensor(x, 0.05, zp, qdtype)
    assert torch.equal(q, ref.int_repr())
    torch.testing.assert_close(xk.dequantize_per_tensor(q, 0.05, zp), ref.dequantize())
    scales = rand(33).abs() * 0.05 + 0.01
    zps = torch.randint(0, 5, (33,), generator=GEN, dtype=torch.int32)
    ref = torch.quantize_per_channel(x, scales.double(), zps.long(), 1, tq)
    q = xk.quantize_per_channel(x, scales, zps, 1, qdtype)
    assert (q.int() - ref.int_repr().int()).abs().max() <= 1  # fp32 1/scale vs PyTorch's double division
    torch.testing.assert_close(xk.dequantize_per_channel(q, scales, zps, 1),
                               (q.float() - zps.float()) * scales)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("qdtype", [torch.uint8, torch.int8])
@pytest.mark.parametrize("symmetric", [False, True])
def test_dynamic_quantize_per_token(dtype, qdtype, symmetric):
    x = rand(6, 40, dtype=dtype, scale=2)
    q, s, z = xk.dynamic_quantize_per_token(x, qdtype, symmetric)
    assert q.dtype == qdtype and s.shape == (6,) and z.shape == (6,)
    deq = (q.float() - z.float()[:, None]) * s[:, None]
    assert (deq - x.float()).abs().max() <= s.max() * 0.5 + 1e-6  # within half a step
    assert q.int().max() >= (250 if qdtype == torch.uint8 else 120) or symmetric  # the range is used


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_bag(mode, dtype):
    table = rand(50, 24, dtype=dtype)
    idx = torch.randint(0, 50, (30,), generator=GEN)
    off = torch.tensor([0, 3, 3, 10, 29])
    ref = F.embedding_bag(idx, table.float(), off, mode=["sum", "mean", "max"][mode])
    close(xk.embedding_bag(table, idx, off, mode), ref, torch.float32, atol=1e-5)
    if mode == 0:
        psw = rand(30)
        ref = F.embedding_bag(idx, table.float(), off, mode="sum", per_sample_weights=psw)
        close(xk.embedding_bag(table, idx, off, 0, psw), ref, torch.float32, atol=1e-5)
        ref = F.embedding_bag(idx, table.float(), off, mode="sum", padding_idx=idx[0].item())
        close(xk.embedding_bag(table, idx, off, 0, None, False, idx[0].item()), ref, torch.float32, atol=1e-5)
    if dtype == torch.float32:
        close(xk.embedding_bag(table, idx.int(), off.int(), mode), F.embedding_bag(
            idx, table, off, mode=["sum", "mean", "max"][mode]), torch.float32, atol=1e-5)


def test_errors_carry_libxk_message():
    with pytest.raises(Exception, match="scale"):
        xk.softmax(rand(2, 3), -1.0)


# ---- opcheck (schema, fake kernel, aot dispatch with static / dynamic shapes) ---------------------

def _opcheck_cases():
    cache = torch.randn(16, 8, generator=GEN)
    return [
        ("linear", lambda d: (rand(3, 16, dtype=d), rand(8, 16, dtype=d), rand(8), "relu", rand(3, 8, dtype=d))),
        ("linear", lambda d: (rand(2, 3, 16, dtype=d), rand(8, 16, dtype=d))),
        ("gated_linear", lambda d: (rand(3, 16, dtype=d), rand(8, 16, dtype=d), rand(8, 16, dtype=d))),
        ("rms_norm", lambda d: (rand(3, 16, dtype=d), rand(16, dtype=d), 1e-6)),
        ("layer_norm", lambda d: (rand(3, 16, dtype=d), rand(16, dtype=d), rand(16, dtype=d), 1e-5)),
        ("fused_add_rms_norm", lambda d: (rand(3, 16, dtype=d), rand(3, 16, dtype=d), rand(16, dtype=d), 1e-6)),
        ("fused_add_layer_norm", lambda d: (rand(3, 16, dtype=d), rand(3, 16, dtype=d), rand(16, dtype=d),
                                            rand(16, dtype=d), 1e-5)),
        ("rotary_embedding", lambda d: (torch.tensor([0, 5, 9]), rand(3, 32, dtype=d), rand(3, 16, dtype=d), 16,
                                        cache, True)),
        ("silu_and_mul", lambda d: (rand(3, 16, dtype=d),)),
        ("gelu_and_mul", lambda d: (rand(3, 16, dtype=d), "tanh")),
        ("softmax", lambda d: (rand(3, 16, dtype=d), 0.5, True, 2)),
        ("dynamic_quantize_per_token", lambda d: (rand(3, 16, dtype=d), torch.int8, False)),
    ] + [(n, (lambda a: (lambda d: a))(a)) for n, a in [
        ("quantize_per_tensor", (rand(3, 16), 0.1, 3, torch.uint8)),
        ("dequantize_per_tensor", (torch.randint(0, 255, (3, 16), dtype=torch.uint8), 0.1, 3)),
        ("quantize_per_channel", (rand(3, 16), torch.rand(16) + 0.1, None, 1, torch.int8)),
        ("dequantize_per_channel", (torch.randint(-100, 100, (3, 16), dtype=torch.int8), torch.rand(3) + 0.1,
                                    None, 0)),
        ("embedding_bag", (rand(10, 8), torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2]), 1)),
    ]]


@pytest.mark.parametrize("name,make", _opcheck_cases(), ids=[c[0] for c in _opcheck_cases()])
@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck(name, make, dtype):
    opcheck(getattr(xk, name).default, make(dtype))
