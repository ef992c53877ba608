"""xkernels.torch.optimize on Llama- and BERT-style blocks: the output matches the original module,
state_dict / torch.save round trips, torch.compile(fullgraph=True) traces through the xk ops."""
import copy
import io

import pytest

torch = pytest.importorskip("torch")
import xkernels.torch as xkt  # noqa: E402

from blocks import BertLayer, GemmaRMSNorm, LlamaDecoderLayer, LlamaMLP, LlamaRMSNorm  # noqa: E402

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def _inputs(dtype, T=9):
    return torch.randn(2, T, 64, generator=torch.Generator().manual_seed(1)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block", [LlamaDecoderLayer, BertLayer])
def test_optimize_matches(block, dtype):
    torch.manual_seed(0)
    ref = block().eval()
    opt = xkt.optimize(ref, dtype=dtype)
    names = {type(m).__name__ for m in opt.modules()}
    assert "Linear" in names and names & {"LayerNorm", "RMSNorm"}
    assert all(not isinstance(m, torch.nn.Linear) for m in opt.modules())
    x = _inputs(dtype)
    with torch.no_grad():
        want = ref.to(dtype)(x)
        got = opt(x)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
    report = xkt.info()
    assert "modules replaced" in report


def test_optimize_llama_patterns():
    torch.manual_seed(0)
    m = torch.nn.ModuleDict({"mlp": LlamaMLP(32, 80), "norm": LlamaRMSNorm(32), "gemma": GemmaRMSNorm(32),
                             "rms": torch.nn.RMSNorm(32, eps=1e-5), "emb": torch.nn.Embedding(10, 32)})
    opt = xkt.optimize(m)
    assert type(opt["mlp"]).__name__ == "GatedMLP"
    assert type(opt["norm"]).__module__.startswith("xkernels") and type(opt["rms"]).__module__.startswith("xkernels")
    assert isinstance(opt["gemma"], GemmaRMSNorm)  # different formula: left alone
    assert isinstance(opt["emb"], torch.nn.Embedding)
    assert "gemma" in xkt.info()
    x = torch.randn(5, 32)
    with torch.no_grad():
        for k in ("mlp", "norm", "rms"):
            torch.testing.assert_close(opt[k](x), m[k](x), rtol=1e-4, atol=1e-4)
    # the original module is untouched (deep copy)
    assert isinstance(m["mlp"].gate_proj, torch.nn.Linear)


class _Intermediate(torch.nn.Module):  # Hugging Face's BertIntermediate
    def __init__(self, act):
        super().__init__()
        self.dense, self.intermediate_act_fn = torch.nn.Linear(32, 80), act

    def forward(self, x):
        return self.intermediate_act_fn(self.dense(x))


class _NotIntermediate(_Intermediate):  # same children, another forward: left to the Linear rule
    def forward(self, x):
        return self.intermediate_act_fn(self.dense(x)) * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_optimize_fuses_linear_activation(dtype):
    torch.manual_seed(0)
    acts = {"gelu": torch.nn.GELU(), "gelu_tanh": torch.nn.GELU(approximate="tanh"), "relu": torch.nn.ReLU(),
            "silu": torch.nn.SiLU()}
    m = torch.nn.ModuleDict({k: _Intermediate(a) for k, a in acts.items()})
    m["other"] = _NotIntermediate(torch.nn.GELU())
    opt = xkt.optimize(m, dtype=dtype)
    want_act = {"gelu": "gelu_erf", "gelu_tanh": "gelu_tanh", "relu": "relu", "silu": "silu"}
    for k, a in want_act.items():
        assert type(opt[k]).__name__ == "LinearAct" and opt[k].dense.activation == a
    assert isinstance(opt["other"], _NotIntermediate) and opt["other"].dense.activation == "none"
    assert set(opt.state_dict()) == set(m.state_dict())
    x = torch.randn(5, 32).to(dtype)
    with torch.no_grad():
        for k in m:
            torch.testing.assert_close(opt[k](x).float(), m[k].to(dtype)(x).float(), **TOL[dtype])


def test_state_dict_and_save_load():
    torch.manual_seed(0)
    ref = LlamaDecoderLayer().eval()
    opt = xkt.optimize(ref)
    assert set(opt.state_dict()) == set(ref.state_dict())  # same keys: checkpoints load either way
    x = _inputs(torch.float32)
    with torch.no_grad():
        y = opt(x)
    # torch.save of the whole optimized module and of its state_dict
    buf = io.BytesIO()
    torch.save(opt, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), y)
    # load new weights in place: packed weights follow (repacked on the version change)
    other = LlamaDecoderLayer().eval()
    opt2 = copy.deepcopy(opt)
    opt2.load_state_dict(other.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(opt2(x), other(x), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(opt(x), y)


@pytest.mark.parametrize("dtype,backend", [(torch.float32, "inductor"), (torch.bfloat16, "aot_eager")])
def test_compile_fullgraph(dtype, backend):
    torch.manual_seed(0)
    ref = LlamaDecoderLayer().eval()
    opt = xkt.optimize(ref, dtype=dtype)
    x = _inputs(dtype)
    torch._dynamo.reset()
    compiled = torch.compile(opt, fullgraph=True, backend=backend)
    with torch.no_grad():
        want = opt(x)
        got = compiled(x)
        got2 = compiled(_inputs(dtype, T=5))
    torch.testing.assert_close(got.float(), want.float(), **TOL[dtype])
    assert got2.shape == (2, 5, 64)


def test_optimize_replaces_large_scale_bf16_mlp():
    # bf16 roundings must not make the numeric pattern check refuse a genuine SwiGLU MLP
    torch.manual_seed(0)
    m = LlamaMLP(256, 688)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(8)
    opt = xkt.optimize(m, dtype=torch.bfloat16)
    assert type(opt).__name__ == "GatedMLP", xkt.info()


def test_saved_module_loads_in_a_fresh_process(tmp_path):
    import os
    import subprocess
    import sys
    torch.manual_seed(0)
    opt = xkt.optimize(LlamaDecoderLayer().eval(), dtype=torch.bfloat16)
    x = _inputs(torch.bfloat16)
    with torch.no_grad():
        y = opt(x)
    torch.save({"model": opt, "x": x, "y": y}, tmp_path / "m.pt")
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import torch, sys; d = torch.load(sys.argv[1], weights_only=False)\n"
            "with torch.no_grad(): y = d['model'](d['x'])\n"
            "assert torch.equal(y, d['y']), (y - d['y']).abs().max()\nprint('ok')")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(here), here]))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.pt")], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]
