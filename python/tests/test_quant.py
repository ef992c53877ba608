"""Quantized Linears of xkernels.torch: XkDynamicInt8Linear (xk_qlinear, dynamic per-token int8) and
XkWoqLinear (xk_woq_gemm, weight-only int8 / int4), and optimize(model, quantization=...).

Tolerances (normwise: |y - ref| <= tol * |ref| over the whole output):
  * against the exact quantized math computed in torch (tight: only fp32 summation order and the
    f32 epilogue differ): TIGHT = 1e-4 for f32 x. dynamic_int8's reference quantizes x per token as
    xk/qlinear.hpp says, multiplies the integers exactly (float64 holds K * 127 * 127) and applies
    the scales in the same order; woq's is F.linear(x, dequantized W).
    bf16 x: the output is rounded to bf16 (2^-9 relative) and the woq prefill path (M > 16) rounds
    the dequantized weights to bf16 too: BF16_TIGHT = 1e-2.
  * against the float nn.Linear (the quantization error itself, Gaussian weights and x): a per-row /
    per-group symmetric grid of step amax / qmax has rounding noise step / sqrt(12) per element;
    with amax ~ 3 sigma this is ~0.7% of sigma for int8 (x and W both quantized for dynamic_int8:
    ~1%) and ~12% for int4 (qmax 7): INT8_TOL = 3e-2, INT4_TOL = 0.2 (both include headroom for the
    tails of the amax distribution); a whole block stacks a few layers: x1.5.
"""
import copy
import ctypes
import io

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import xkernels.torch as xkt  # noqa: E402
from xkernels import _lib, _quant  # noqa: E402
from xkernels.torch import modules  # noqa: E402

from blocks import LlamaDecoderLayer  # noqa: E402

TIGHT, BF16_TIGHT = 1e-4, 1e-2
INT8_TOL, INT4_TOL = 3e-2, 0.2
MS = (1, 7, 33)  # decode (M <= 16) and prefill paths


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _rel(y, ref):
    y, ref = y.detach().double(), ref.detach().double()
    return float((y - ref).norm() / ref.norm())


def _linear(K, N, bias=True, seed=0):
    m = torch.nn.Linear(K, N, bias=bias)
    with torch.no_grad():
        m.weight.copy_(torch.randn(N, K, generator=_gen(seed)) / K ** 0.5)
        if bias:
            m.bias.copy_(torch.randn(N, generator=_gen(seed + 1)) * 0.1)
    return m.eval()


def _x(M, K, seed=3):
    return torch.randn(M, K, generator=_gen(seed))


def _dynamic_int8_reference(x, qweight, w_scales, bias):
    """xk/qlinear.hpp dynamic_per_token in torch: x_scale[m] = max|x[m]| / 127, q = rne(x / x_scale),
    y = (float(acc) * w_scale[n]) * x_scale[m] + bias."""
    x = x.float()
    amax = x.abs().amax(dim=1)
    xs = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(x * (1.0 / xs)[:, None]).clamp(-128, 127)
    acc = (q.double() @ qweight.double().t()).float()
    y = (acc * w_scales[None, :]) * xs[:, None]
    return y + bias.float() if bias is not None else y


def test_struct_layouts():
    """The ctypes structs against the C headers' sizeof / offsetof (x86-64, from include/xk/c/*.h)."""
    for name, (size, offsets) in _lib.C_LAYOUTS.items():
        cls = getattr(_lib, name)
        assert ctypes.sizeof(cls) == size, name
        for field, off in offsets.items():
            assert getattr(cls, field).offset == off, (name, field)


def test_weight_quantization_matches_xk():
    """Our torch int8 per-channel quantization == the one xk_qlinear does from f32 weights, and xk
    produces the same outputs either way."""
    lin = _linear(96, 40, seed=5)
    w = lin.weight.detach().contiguous()
    q, s = modules.quantize_weight_int8(w)
    plan = _quant.QLinearPlan(40, 96, w.data_ptr(), None, _lib.F32)
    assert plan.weight_scales() == s.tolist()
    plan_q = _quant.QLinearPlan(40, 96, q.data_ptr(), s.data_ptr(), _lib.S8)
    x = _x(7, 96)
    y1, y2 = torch.empty(7, 40), torch.empty(7, 40)
    plan.run(7, x.data_ptr(), y1.data_ptr())
    plan_q.run(7, x.data_ptr(), y2.data_ptr())
    assert torch.equal(y1, y2)
    assert plan.impl_name()


@pytest.mark.parametrize("bits,group_size", [(8, 0), (8, 64), (4, 128), (4, 32)])
def test_woq_dequantize_matches_torch(bits, group_size):
    """xk's view of the packed buffers (nibble order, scale layout) == dequantize_weight_woq."""
    N, K = 24, 256
    w = torch.randn(N, K, generator=_gen(2))
    q, s = modules.quantize_weight_woq(w, bits, group_size)
    packed = _quant.WoqWeight(bits, N, K, group_size, q.data_ptr(), s.data_ptr())
    out = torch.empty(N, K)
    packed.dequantize(out.data_ptr())
    ref = modules.dequantize_weight_woq(q, s, bits, group_size)
    assert torch.equal(out, ref)
    assert _rel(ref, w) < (INT8_TOL if bits == 8 else INT4_TOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
def test_dynamic_int8_linear(dtype, bias):
    K, N = 256, 72
    lin = _linear(K, N, bias).to(dtype)
    m = xkt.XkDynamicInt8Linear.from_linear(lin)
    assert m.qweight.dtype == torch.int8 and m.w_scales.shape == (N,)
    for M in MS:
        x = _x(M, K).to(dtype)
        with torch.no_grad():
            y = m(x)
            ref_fp = lin(x)
        assert y.dtype == dtype and y.shape == (M, N)
        ref_q = _dynamic_int8_reference(x, m.qweight, m.w_scales, lin.bias)
        assert _rel(y, ref_q) < (TIGHT if dtype == torch.float32 else BF16_TIGHT), M
        assert _rel(y, ref_fp) < INT8_TOL, M
    # leading dimensions and a non-contiguous x
    x3 = _x(2 * 5 * 2 * K, 1).view(2, 5, 2 * K)[:, :, ::2].to(dtype)
    with torch.no_grad():
        y3 = m(x3)
    ref3 = _dynamic_int8_reference(x3.reshape(-1, K), m.qweight, m.w_scales, lin.bias).view(2, 5, N)
    assert _rel(y3, ref3) < (TIGHT if dtype == torch.float32 else BF16_TIGHT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bits,group_size", [(8, 0), (4, 128), (4, 64)])
def test_woq_linear(dtype, bits, group_size):
    K, N = 256, 72
    lin = _linear(K, N, True).to(dtype)
    m = xkt.XkWoqLinear.from_linear(lin, bits, group_size)
    assert m.qweight.shape == (N, K if bits == 8 else K // 2)
    assert m.scales.shape == (N, 1 if group_size == 0 else K // group_size)
    w_dq = m.dequantized_weight()
    for M in MS:
        x = _x(M, K).to(dtype)
        with torch.no_grad():
            y = m(x)
            ref_fp = lin(x)
        assert y.dtype == dtype and y.shape == (M, N)
        ref_q = F.linear(x.float(), w_dq, lin.bias.float())
        assert _rel(y, ref_q) < (TIGHT if dtype == torch.float32 else BF16_TIGHT), M
        assert _rel(y, ref_fp) < (INT8_TOL if bits == 8 else INT4_TOL), M


def test_activation_and_errors():
    lin = _linear(128, 16)
    x = _x(5, 128)
    for mod in (xkt.XkDynamicInt8Linear.from_linear(lin, activation="silu"),
                xkt.XkWoqLinear.from_linear(lin, 4, 128, activation="silu")):
        pre = copy.deepcopy(mod)
        pre.activation = "none"
        with torch.no_grad():
            assert _rel(mod(x), F.silu(pre(x))) < TIGHT
    with pytest.raises(ValueError, match="group_size"):
        xkt.XkWoqLinear.from_linear(_linear(100, 8), 4, 128)
    with pytest.raises(ValueError, match="bits"):
        xkt.XkWoqLinear(128, 8, bits=3)
    m = xkt.XkWoqLinear.from_linear(lin, 4, 128)
    with pytest.raises(ValueError):
        m(_x(3, 64))


def _block(seed=0):
    torch.manual_seed(seed)
    return LlamaDecoderLayer(hidden=128, heads=4, kv_heads=2, inter=160).eval()  # down_proj: K = 160


def _block_input(dtype=torch.float32):
    return torch.randn(2, 9, 128, generator=_gen(11)).to(dtype)


def _with_dequantized_weights(block, opt):
    """block with each Linear that opt quantized (woq) replaced by its dequantized weight."""
    ref = copy.deepcopy(block)
    qmods = dict(opt.named_modules())
    with torch.no_grad():
        for name, lin in ref.named_modules():
            if isinstance(qmods.get(name), xkt.XkWoqLinear):
                lin.weight.copy_(qmods[name].dequantized_weight())
    return ref


@pytest.mark.parametrize("quantization", ["dynamic_int8", "woq_int8", "woq_int4"])
def test_optimize_llama_block(quantization):
    block = _block()
    x = _block_input()
    opt = xkt.optimize(block, quantization=quantization)
    kinds = {name: type(mod).__name__ for name, mod in opt.named_modules()}
    want = "XkDynamicInt8Linear" if quantization == "dynamic_int8" else "XkWoqLinear"
    for p in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
              "mlp.up_proj"):
        assert kinds[p] == want, p
    report = xkt.info()
    assert "quantization=%s" % quantization in report
    if quantization == "woq_int4":  # in_features 160 is not a multiple of 128
        assert kinds["mlp.down_proj"] == "Linear"
        assert "mlp.down_proj" in report and "group_size 128" in report
    else:
        assert kinds["mlp.down_proj"] == want
    assert kinds["input_layernorm"] == "RMSNorm"
    with torch.no_grad():
        y, ref = opt(x), block(x)
        tol = (INT8_TOL if quantization != "woq_int4" else INT4_TOL) * 1.5
        # the block's residual carries x through: measure the error on what the layers add
        assert _rel(y - x, ref - x) < tol
        if quantization != "dynamic_int8":
            ref_q = _with_dequantized_weights(block, opt)(x)
            assert _rel(y - x, ref_q - x) < TIGHT  # through the attention / SiLU of the block
        y16 = xkt.optimize(block, dtype=torch.bfloat16, quantization=quantization)(x.bfloat16())
        assert _rel(y16.float() - x, ref - x) < tol + 5e-2


@pytest.mark.parametrize("quantization", ["dynamic_int8", "woq_int4"])
def test_state_dict_round_trip(quantization):
    opt = xkt.optimize(_block(0), quantization=quantization)
    x = _block_input()
    with torch.no_grad():
        y = opt(x)
    sd = opt.state_dict()
    key = "self_attn.q_proj.qweight"
    assert sd[key].dtype == (torch.int8 if quantization == "dynamic_int8" else torch.uint8)
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    # another model quantized from other weights, run once (its plans built), then loaded in place
    other = xkt.optimize(_block(1), quantization=quantization)
    with torch.no_grad():
        assert not torch.equal(other(x), y)
        other.load_state_dict(torch.load(buf))
        assert torch.equal(other(x), y)
    # the whole module pickles
    buf = io.BytesIO()
    torch.save(opt, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    with torch.no_grad():
        assert torch.equal(again(x), y)


def test_compile_fullgraph():
    lin = _linear(128, 32)
    x = _x(4, 128)
    for m in (xkt.XkDynamicInt8Linear.from_linear(lin), xkt.XkWoqLinear.from_linear(lin, 4, 128)):
        with torch.no_grad():
            want = m(x)
            got = torch.compile(m, fullgraph=True, backend="eager")(x)
        assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck(dtype):
    """torch.ops.xk.dynamic_int8_linear / woq_linear: schema, fake kernels, aot dispatch."""
    lin = _linear(128, 16)
    d = xkt.XkDynamicInt8Linear.from_linear(lin)
    w = xkt.XkWoqLinear.from_linear(lin, 4, 64)
    x = _x(3, 128).to(dtype)
    b = lin.bias.detach()
    torch.library.opcheck(torch.ops.xk.dynamic_int8_linear, (x, d.qweight, d.w_scales, b, "relu"))
    torch.library.opcheck(torch.ops.xk.woq_linear, (x.view(1, 3, 128), w.qweight, w.scales, 64, 4, b, "none"))


def test_bad_quantization_name():
    with pytest.raises(ValueError, match="fp4"):
        xkt.optimize(torch.nn.Linear(4, 4), quantization="fp4")
    with pytest.raises(ValueError, match="group_size"):
        xkt.optimize(torch.nn.Linear(256, 4), quantization="woq_int4", group_size=100)
