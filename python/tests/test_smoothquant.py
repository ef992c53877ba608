"""SmoothQuant (optimize(model, quantization="smoothquant", calib_data=...)): calibration factors as
the paper's formula, the smoothed dynamic int8 Linear against its definition, and on activations
with outlier channels (as in LLMs) a lower error than plain dynamic int8; state_dict round trip,
opcheck and torch.compile through the op with its smooth argument."""
import copy
import io

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import xkernels.torch as xkt  # noqa: E402
from xkernels.torch.modules import XkDynamicInt8Linear  # noqa: E402

GEN = torch.Generator().manual_seed(0)


def outlier_model():
    """LayerNorm whose weight has a few huge channels (LLM-style activation outliers) -> FFN."""
    torch.manual_seed(0)
    ln = nn.LayerNorm(64)
    with torch.no_grad():
        ln.weight.copy_(1 + 0.1 * torch.randn(64))
        ln.weight[[3, 17, 40]] = 40.0
    return nn.Sequential(ln, nn.Linear(64, 96), nn.GELU(), nn.Linear(96, 64)).eval()


def calib():
    return [torch.randn(4, 16, 64, generator=GEN) for _ in range(3)]


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_factors_formula():
    m = outlier_model()
    data = calib()
    s = xkt.smoothquant_factors(m, data, alpha=0.5)
    lin = m[1]
    x = torch.cat([m[0](d).reshape(-1, 64) for d in data])
    want = x.abs().amax(0).pow(0.5) / lin.weight.abs().amax(0).pow(0.5)
    torch.testing.assert_close(s[lin], want.detach(), rtol=1e-5, atol=0)
    assert set(s) == {m[1], m[3]}


def test_smooth_linear_matches_definition():
    x = torch.randn(5, 32, generator=GEN)
    w = torch.randn(16, 32, generator=GEN)
    sm = torch.rand(32, generator=GEN) + 0.5
    q, ws = xkt.modules.quantize_weight_int8(w)
    y = torch.ops.xk.dynamic_int8_linear(x, q, ws, None, "none", sm)
    v = x * sm
    xs = v.abs().amax(1, keepdim=True) / 127
    xq = torch.round(v / xs).clamp(-128, 127)
    want = (xq @ q.float().T) * ws * xs
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    torch.library.opcheck(torch.ops.xk.dynamic_int8_linear.default, (x, q, ws, None, "none", sm))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_smoothquant_beats_plain_int8_on_outliers(dtype):
    m = outlier_model()
    x = torch.randn(2, 9, 64, generator=GEN)
    with torch.no_grad():
        ref = m(x)
        sq = xkt.optimize(m, dtype=dtype, quantization="smoothquant", calib_data=calib())
        dq = xkt.optimize(m, dtype=dtype, quantization="dynamic_int8")
        e_sq, e_dq = rel_err(sq(x.to(dtype)), ref), rel_err(dq(x.to(dtype)), ref)
    assert sum(isinstance(v, XkDynamicInt8Linear) and v.smooth is not None for v in sq.modules()) == 2
    assert "smoothquant" in xkt.info() or "SmoothQuant" in repr(sq)
    assert e_sq < 0.05 and e_sq < 0.7 * e_dq, (e_sq, e_dq)


def test_smoothquant_state_dict_compile_and_errors():
    m = outlier_model()
    sq = xkt.optimize(m, quantization="smoothquant", calib_data=calib(), alpha=0.6)
    x = torch.randn(3, 64, generator=GEN)
    with torch.no_grad():
        want = sq(x)
        buf = io.BytesIO()
        torch.save(sq.state_dict(), buf)
        other = copy.deepcopy(sq)
        for mod in other.modules():
            if isinstance(mod, XkDynamicInt8Linear):
                mod.smooth.fill_(1.0)
        buf.seek(0)
        other.load_state_dict(torch.load(buf))
        torch.testing.assert_close(other(x), want, rtol=0, atol=0)
        got = torch.compile(sq, fullgraph=True, backend="eager")(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    with pytest.raises(ValueError):
        xkt.optimize(m, quantization="smoothquant")  # no calibration data
    with pytest.raises(ValueError):
        xkt.optimize(m, calib_data=calib())
