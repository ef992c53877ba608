"""torch.ops.xk.attention / kv_cache_append / cached_attention / fused_linear against torch SDPA as
the oracle (varlen batches, causal top-left and bottom-right, GQA, additive masks, contiguous and
paged caches, decode and chunked prefill), opcheck on each, and optimize() on Hugging Face
Llama-style attention (transformers >= 4.48 interface: position_embeddings, cache.update()).
Tolerances: f32 1e-5 (attention sums in f32 like the oracle); bf16 outputs one bf16 rounding plus
the oracle's own (2^-7 relative and absolute: values are O(1))."""
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import xkernels.torch as xkt  # noqa: E402

from blocks import DynamicCache, HFLlamaAttention, HFLlamaModel, LlamaConfig  # noqa: E402

xk = torch.ops.xk
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2 ** -7, atol=2 ** -7)}
GEN = torch.Generator().manual_seed(0)


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN).to(dtype)


def close(a, b, dtype, **kw):
    tol = dict(TOL[dtype])
    tol.update(kw)
    torch.testing.assert_close(a.float(), b.float(), **tol)


def sdpa(q, k, v, causal_offset=None, mask=None, scale=None):
    """One sequence: q [Tq, Hq, D], k / v [Tk, Hkv, D] -> [Tq, Hq, D] (f32 math)."""
    Tq, Hq, D = q.shape
    Tk, Hkv = k.shape[:2]
    rep = Hq // Hkv
    qq = q.float().transpose(0, 1)
    kk = k.float().transpose(0, 1).repeat_interleave(rep, 0)
    vv = v.float().transpose(0, 1).repeat_interleave(rep, 0)
    m = torch.zeros(Tq, Tk)
    if causal_offset is not None:
        i, j = torch.arange(Tq)[:, None], torch.arange(Tk)[None]
        m = m.masked_fill(j > i + causal_offset, float("-inf"))
    if mask is not None:
        m = m + mask
    o = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=m, scale=scale)
    return o.transpose(0, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("Hq,Hkv,D", [(4, 4, 16), (8, 2, 64), (6, 1, 32)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_varlen(dtype, Hq, Hkv, D, causal):
    lq, lk = [1, 7, 17, 0], [1, 9, 17, 3]
    q, k, v = rand(sum(lq), Hq, D, dtype=dtype), rand(sum(lk), Hkv, D, dtype=dtype), rand(sum(lk), Hkv, D, dtype=dtype)
    cq = torch.tensor([0] + lq).cumsum(0)
    ck = torch.tensor([0] + lk).cumsum(0)
    off = 2 if causal else 0
    o = xk.attention(q, k, v, cq, ck, 0.0, causal, off)
    assert o.dtype == dtype and o.shape == q.shape
    for b in range(len(lq)):
        if lq[b] == 0:
            continue
        sq, sk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        ref = sdpa(q[sq], k[sk], v[sk], off if causal else None)
        close(o[sq], ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_batched_mask_scale(dtype):
    B, T, S, Hq, Hkv, D = 2, 5, 8, 4, 2, 32
    q, k, v = rand(B, T, Hq, D, dtype=dtype), rand(B, S, Hkv, D, dtype=dtype), rand(B, S, Hkv, D, dtype=dtype)
    mask = rand(B * T, S)
    mask[:, 0] = float("-inf")
    o = xk.attention(q, k, v, scale=0.3, mask=mask)
    oc = xk.attention(q, k, v, causal=True, causal_offset=S - T)  # bottom-right (decode with a cache)
    for b in range(B):
        close(o[b], sdpa(q[b], k[b], v[b], None, mask[b * T:(b + 1) * T], 0.3), dtype)
        close(oc[b], sdpa(q[b], k[b], v[b], S - T), dtype)
    # a non-contiguous input is copied, not misread
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    close(xk.attention(qt, k, v, scale=0.3, mask=mask), o, dtype, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B", [1, 3])
def test_attention_strided_views(dtype, B):
    """q / k / v as slices of one fused [.., tokens, (Hq + 2 Hkv) D] projection are read in place
    (xk_attention_strided): the same bits as their contiguous copies; head-major views are copied."""
    T, Hq, Hkv, D = 19, 4, 2, 32
    qkv = rand(B, T, (Hq + 2 * Hkv) * D + 16, dtype=dtype)  # (+16: padded rows)
    q = qkv[..., :Hq * D].view(B, T, Hq, D)
    k = qkv[..., Hq * D:(Hq + Hkv) * D].view(B, T, Hkv, D)
    v = qkv[..., (Hq + Hkv) * D:(Hq + 2 * Hkv) * D].view(B, T, Hkv, D)
    mask = rand(B * T, T)
    for kw in (dict(), dict(causal=True), dict(mask=mask, scale=0.2)):
        o = xk.attention(q, k, v, **kw)
        ref = xk.attention(q.contiguous(), k.contiguous(), v.contiguous(), **kw)
        assert o.is_contiguous() and o.shape == q.shape
        close(o, ref, dtype, rtol=0, atol=0)
    q3, k3, v3 = q[0], k[0], v[0]  # 3-D [tokens, heads, D] with cu_seqlens
    cu = torch.tensor([0, 7, T])
    close(xk.attention(q3, k3, v3, cu, cu, causal=True),
          xk.attention(q3.contiguous(), k3.contiguous(), v3.contiguous(), cu, cu, causal=True), dtype, rtol=0, atol=0)
    qh = rand(Hq, T, D, dtype=dtype).transpose(0, 1)  # head-major view: copied, not rejected
    close(xk.attention(qh, k3, v3), xk.attention(qh.contiguous(), k3, v3), dtype, rtol=0, atol=0)


def test_attention_rejects():
    q, k = rand(4, 4, 16), rand(4, 3, 16)
    with pytest.raises(ValueError):
        xk.attention(q, k, k)  # 3 kv heads do not divide 4
    with pytest.raises(TypeError):
        xk.attention(q, rand(4, 2, 16, dtype=torch.bfloat16), rand(4, 2, 16))
    with pytest.raises(ValueError):  # cu_seqlens past the tokens: libxk's check
        xk.attention(q, q, q, torch.tensor([0, 9]), torch.tensor([0, 4]))


def _cache(layout, dtype, B, Hkv, D, cap):
    if layout == "contiguous":
        return torch.zeros(B, Hkv, cap, D, dtype=dtype), torch.zeros(B, Hkv, cap, D, dtype=dtype), None
    bs = 16
    per = (cap + bs - 1) // bs
    nb = B * per + 1
    table = torch.randperm(nb, generator=GEN)[:B * per].view(B, per).to(torch.int32)  # blocks in any order
    return torch.zeros(nb, Hkv, bs, D, dtype=dtype), torch.zeros(nb, Hkv, bs, D, dtype=dtype), table


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["contiguous", "paged"])
def test_kv_cache_prefill_then_decode(dtype, layout):
    B, Hq, Hkv, D, cap = 2, 8, 2, 32, 40
    kc, vc, table = _cache(layout, dtype, B, Hkv, D, cap)
    lens = [13, 21]  # prefill, in two chunks for sequence 1, then one decode step each
    K = [rand(lens[b] + 1, Hkv, D, dtype=dtype) for b in range(B)]
    V = [rand(lens[b] + 1, Hkv, D, dtype=dtype) for b in range(B)]
    Q = [rand(lens[b] + 1, Hq, D, dtype=dtype) for b in range(B)]

    def step(chunks):  # chunks: (b, start, n): append tokens [start, start + n) of b and attend
        seq = torch.cat([torch.full((n,), b, dtype=torch.int64) for b, s, n in chunks])
        pos = torch.cat([torch.arange(s, s + n) for b, s, n in chunks])
        kn = torch.cat([K[b][s:s + n] for b, s, n in chunks])
        vn = torch.cat([V[b][s:s + n] for b, s, n in chunks])
        xk.kv_cache_append(kc, vc, kn, vn, seq, pos, table)
        q = torch.cat([Q[b][s:s + n] for b, s, n in chunks])
        cu = torch.tensor([0] + [n for _, _, n in chunks]).cumsum(0)
        ctx = torch.tensor([s + n for _, s, n in chunks])
        o = xk.cached_attention(q, kc, vc, cu, ctx, table)
        for i, (b, s, n) in enumerate(chunks):
            ref = sdpa(Q[b][s:s + n], K[b][:s + n], V[b][:s + n], s)
            close(o[cu[i]:cu[i + 1]], ref, dtype)

    step([(0, 0, 13), (1, 0, 10)])
    step([(0, 13, 0), (1, 10, 11)])  # chunked prefill, sequence 0 has no new query
    step([(0, 13, 1), (1, 21, 1)])   # decode
    # an f32 source into a bf16 cache rounds; positions past the capacity are refused, nothing written
    before = kc.clone()
    with pytest.raises(ValueError):
        xk.kv_cache_append(kc, vc, rand(1, Hkv, D, dtype=dtype), rand(1, Hkv, D, dtype=dtype),
                           torch.tensor([0]), torch.tensor([10 ** 6]), table)
    assert torch.equal(kc, before)


def test_fused_linear():
    x = rand(3, 5, 48)
    ws = [rand(16, 48), rand(8, 48), rand(8, 48)]
    bs = [rand(16), rand(8), rand(8)]
    ref = torch.cat([F.linear(x, w, b) for w, b in zip(ws, bs)], -1)
    close(xk.fused_linear(x, ws, bs), ref, torch.float32, atol=1e-4)
    close(xk.fused_linear(x, ws), torch.cat([F.linear(x, w) for w in ws], -1), torch.float32, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck(dtype):
    q, k, v = rand(6, 4, 16, dtype=dtype), rand(6, 2, 16, dtype=dtype), rand(6, 2, 16, dtype=dtype)
    cu = torch.tensor([0, 2, 6])
    torch.library.opcheck(xk.attention.default, (q, k, v, cu, cu, 0.0, True, 0, None))
    torch.library.opcheck(xk.attention.default, (q.view(2, 3, 4, 16), k.view(2, 3, 2, 16), v.view(2, 3, 2, 16)),
                          {"mask": rand(6, 3)})
    kc, vc = torch.zeros(2, 2, 8, 16, dtype=dtype), torch.zeros(2, 2, 8, 16, dtype=dtype)
    seq, pos = torch.tensor([0, 0, 1, 1, 1, 1]), torch.tensor([0, 1, 0, 1, 2, 3])
    torch.library.opcheck(xk.kv_cache_append.default, (kc, vc, k, v, seq, pos))
    xk.kv_cache_append(kc, vc, k, v, seq, pos)
    torch.library.opcheck(xk.cached_attention.default, (q, kc, vc, cu, torch.tensor([2, 4])))
    torch.library.opcheck(xk.fused_linear.default, (q.view(6, 64), [rand(8, 64, dtype=dtype)] * 2))


# ---- optimize() on Hugging Face Llama-style attention ----------------------------------------------

OPT_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_optimize_llama_attention_and_caches(dtype):
    torch.manual_seed(0)
    cfg = LlamaConfig()
    ref = HFLlamaModel(cfg).eval().to(dtype)
    opt = xkt.optimize(ref, dtype=dtype)
    assert sum(isinstance(m, xkt.LlamaAttention) for m in opt.modules()) == 2
    assert "HFLlamaAttention -> LlamaAttention" in xkt.info()
    assert list(opt.state_dict()) == list(ref.state_dict())
    x, y = rand(2, 7, 64, dtype=dtype), rand(2, 1, 64, dtype=dtype)
    with torch.no_grad():
        close(opt(x), ref(x), dtype, **OPT_TOL[dtype])
        # prefill then decode: stock on HF's DynamicCache, xk on its KVCache and on the DynamicCache
        c_ref, c_xk, c_dyn = DynamicCache(), xkt.KVCache(2, 2, 2, 16, 16, dtype), DynamicCache()
        want = ref(x, c_ref)
        close(opt(x, c_xk), want, dtype, **OPT_TOL[dtype])
        close(opt(x, c_dyn), want, dtype, **OPT_TOL[dtype])
        want = ref(y, c_ref)
        close(opt(y, c_xk), want, dtype, **OPT_TOL[dtype])
        close(opt(y, c_dyn), want, dtype, **OPT_TOL[dtype])
        assert c_xk.get_seq_length() == 8
        # the stock model also runs on the xk cache (update() protocol)
        c2 = xkt.KVCache(2, 2, 2, 16, 16, dtype)
        ref(x, c2)
        close(ref(y, c2), want, dtype, **OPT_TOL[dtype])
        # a padding mask (4-D additive, as the eager path passes it)
        m = torch.zeros(2, 1, 7, 7).masked_fill(torch.ones(7, 7, dtype=torch.bool).triu(1), float("-inf"))
        m[1, :, :, :2] = float("-inf")
        m = m.to(dtype)
        close(opt(x, None, m)[:, 2:], ref(x, None, m)[:, 2:], dtype, **OPT_TOL[dtype])


class QKNormAttention(HFLlamaAttention):
    """A look-alike (Qwen3-style q / k norms) optimize() must leave alone."""

    def __init__(self, config):
        super().__init__(config)
        self.q_norm = torch.nn.LayerNorm(config.head_dim)


class NoRopeAttention(HFLlamaAttention):
    def forward(self, hidden_states, position_embeddings, attention_mask=None, **kwargs):
        ones = torch.ones_like(position_embeddings[0])
        return super().forward(hidden_states, (ones, torch.zeros_like(ones)), attention_mask)


def test_optimize_attention_look_alikes():
    cfg = LlamaConfig()
    m = torch.nn.ModuleDict({"a": QKNormAttention(cfg), "b": NoRopeAttention(cfg)})
    opt = xkt.optimize(m)
    assert not any(isinstance(v, xkt.LlamaAttention) for v in opt.modules())
    report = xkt.info()
    assert "q_norm" in report and "not Llama's RoPE" in report


def test_compile_attention_fullgraph():
    torch.manual_seed(0)
    ref = HFLlamaAttention(LlamaConfig()).eval()
    opt = xkt.optimize(ref)
    assert isinstance(opt, xkt.LlamaAttention)
    x = rand(2, 6, 64)
    ang = torch.rand(1, 6, 8, generator=GEN)
    pe = (torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1))
    with torch.no_grad():
        got = torch.compile(opt, fullgraph=True, backend="eager")(x, pe)[0]
        close(got, ref(x, pe)[0], torch.float32, atol=1e-4)


def test_transformers_llama():
    """The real transformers LlamaModel, when transformers is installed."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(0)
    ref = transformers.LlamaModel(cfg).eval()
    opt = xkt.optimize(ref)
    assert sum(isinstance(m, xkt.LlamaAttention) for m in opt.modules()) == 2, xkt.info()
    ids = torch.randint(0, 100, (2, 9))
    with torch.no_grad():
        want = ref(ids, use_cache=True)
        got = opt(ids, use_cache=True)
        close(got.last_hidden_state, want.last_hidden_state, torch.float32, atol=1e-4)
        nxt = torch.randint(0, 100, (2, 1))
        w2 = ref(nxt, past_key_values=want.past_key_values).last_hidden_state
        g2 = opt(nxt, past_key_values=got.past_key_values).last_hidden_state
        close(g2, w2, torch.float32, atol=1e-4)
