"""nn.Modules that run on torch.ops.xk. They hold the original modules' parameters as plain tensors
(same state_dict keys as the modules they replace, so checkpoints load either way, and they pickle,
save and move like any module); packed GEMM weights are derived per process on first use and
repacked when a weight changes in place (load_state_dict, copy_)."""
import torch
from torch import nn

from . import _ops  # noqa: F401  (registers torch.ops.xk)

try:
    from torch.compiler import is_compiling
except ImportError:  # torch < 2.3
    from torch._dynamo import is_compiling


class _Ops:
    """torch.ops.xk.<op> while torch.compile / export traces; in eager mode on CPU tensors the op's
    kernel itself (the same function the dispatcher would call: saves the dispatcher's ~5 us)."""

    def __getattr__(self, name):
        op, impl = getattr(torch.ops.xk, name), _ops.IMPLS[name]

        def call(x, *args):
            if x.is_cpu and not is_compiling():
                return impl(x, *args)
            return op(x, *args)

        setattr(self, name, call)
        return call


xk = _Ops()


def _match_dtype(x, dtype):
    return x if x.dtype == dtype else x.to(dtype)


class Linear(nn.Module):
    """y = act(x W^T + b) (+ residual) through xk's GEMM on prepacked weights (fp32 / bf16)."""

    def __init__(self, in_features, out_features, bias=True, activation="none", device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        self.weight = nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(out_features, device=device, dtype=dtype)) if bias else None

    @classmethod
    def from_linear(cls, m, activation="none"):
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features, new.activation = m.in_features, m.out_features, activation
        new.weight = m.weight
        new.bias = m.bias
        return new

    def forward(self, x, residual=None):
        dtype = x.dtype
        y = xk.linear(_match_dtype(x, self.weight.dtype), self.weight, self.bias, self.activation,
                      residual)
        return _match_dtype(y, dtype)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s, activation=%s" % (
            self.in_features, self.out_features, self.bias is not None, self.activation)


class LinearAct(nn.Module):
    """act(dense(x)) as one xk GEMM with the activation in its epilogue: Hugging Face's
    BertIntermediate (`dense` + `intermediate_act_fn`) and its look-alikes; the child keeps the
    name `dense`, so state-dict keys are unchanged."""

    def __init__(self, dense):
        super().__init__()
        self.dense = dense

    def forward(self, hidden_states):
        return self.dense(hidden_states)


class LayerNorm(nn.Module):
    """nn.LayerNorm over the last dimension (f32 / bf16); forward(x, residual) also fuses the pre-norm
    residual add (residual += x in place, returns layer_norm(residual))."""

    def __init__(self, normalized_shape, eps=1e-5, weight=None, bias=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = weight
        self.bias = bias

    @classmethod
    def from_layer_norm(cls, m):
        return cls(m.normalized_shape, m.eps, m.weight, m.bias)

    def forward(self, x, residual=None):
        w = self.weight
        if w is not None and w.dtype != x.dtype:
            return nn.functional.layer_norm(x, self.normalized_shape, w, self.bias, self.eps)
        if residual is not None:
            return xk.fused_add_layer_norm(x, residual, w, self.bias, self.eps)
        return xk.layer_norm(x, w, self.bias, self.eps)

    def extra_repr(self):
        return "%s, eps=%g" % (self.normalized_shape, self.eps)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight (nn.RMSNorm, Hugging Face LlamaRMSNorm); forward(x,
    residual) fuses the residual add as LayerNorm does."""

    def __init__(self, hidden_size, eps=1e-6, weight=None):
        super().__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        self.weight = weight

    def forward(self, x, residual=None):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        w = self.weight
        if w is not None and w.dtype != x.dtype:
            w = w.to(x.dtype)
        if residual is not None:
            return xk.fused_add_rms_norm(x, residual, w, eps)
        return xk.rms_norm(x, w, eps)

    def extra_repr(self):
        return "%d, eps=%s" % (self.hidden_size, self.eps)


class GatedMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)) (the Llama / Mistral / Qwen SwiGLU MLP): gate and up
    run as one GEMM against their packed concatenation, then the GLU kernel, then down_proj. Keeps
    gate_proj / up_proj / down_proj as submodules (the original state_dict keys)."""

    def __init__(self, gate_proj, up_proj, down_proj, activation="silu"):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = gate_proj, up_proj, down_proj
        self.activation = activation

    def forward(self, x):
        dtype = x.dtype
        wg = self.gate_proj.weight
        h = xk.gated_linear(_match_dtype(x, wg.dtype), wg, self.up_proj.weight, self.activation)
        y = xk.linear(h, self.down_proj.weight, self.down_proj.bias, "none", None)
        return _match_dtype(y, dtype)

    def extra_repr(self):
        return "activation=%s" % self.activation


# ---- quantized Linears (optimize(model, quantization=...)) ------------------------------------------

def quantize_weight_int8(w):
    """Symmetric per-output-channel int8 (xk/qlinear.hpp): scale[n] = max_k |w[n,k]| / 127 (1 for an
    all-zero row), q = round_half_even(w * (1 / scale)) saturated. Returns (q int8 [N, K], scale f32 [N])."""
    w = w.detach().float()
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    q = torch.round(w * (1.0 / scale)[:, None]).clamp_(-128, 127).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def quantize_weight_woq(w, bits, group_size):
    """Symmetric weight-only quantization per group of `group_size` input features (0: per output
    channel). int8: scale = amax / 127, q = round(w / scale) in [-127, 127] -> int8 [N, K]. int4:
    scale = amax / 7, q = round(w / scale) in [-8, 7] stored + 8 as 0..15, two per byte (even k in
    the low nibble) -> uint8 [N, K / 2]. Groups of zeros get scale 1. Returns (qweight, scales f32 [N, G])."""
    w = w.detach().float()
    N, K = w.shape
    g = K if group_size == 0 else group_size
    if K % g or (bits == 4 and K % 2):
        raise ValueError("quantize_weight_woq: in_features %d is not a multiple of group_size %d" % (K, g))
    wg = w.view(N, K // g, g)
    amax = wg.abs().amax(dim=2)
    qmax = 127 if bits == 8 else 7
    scale = torch.where(amax > 0, amax / qmax, torch.ones_like(amax))
    q = torch.round(wg / scale[:, :, None]).clamp_(-qmax - (0 if bits == 8 else 1), qmax).view(N, K)
    if bits == 8:
        return q.to(torch.int8).contiguous(), scale.contiguous()
    u = (q + 8).to(torch.uint8).view(N, K // 2, 2)
    return (u[:, :, 0] | (u[:, :, 1] << 4)).contiguous(), scale.contiguous()


def dequantize_weight_woq(qweight, scales, bits, group_size):
    """The f32 [N, K] weight xk's WOQ GEMM multiplies by (the reference of the tests)."""
    if bits == 8:
        q = qweight.float()
    else:
        q = torch.stack([qweight & 15, qweight >> 4], dim=2).view(qweight.shape[0], -1).float() - 8
    N, K = q.shape
    g = K if group_size == 0 else group_size
    return (q.view(N, K // g, g) * scales[:, :, None]).view(N, K)


class XkDynamicInt8Linear(nn.Module):
    """nn.Linear with int8 weights (symmetric, per output channel) and int8 activations quantized per
    token inside the call (xk_qlinear, dynamic_per_token): y = (acc * w_scale[n]) * x_scale[m] + bias.
    Buffers: qweight int8 [N, K], w_scales f32 [N] (and the bias parameter): state_dict / torch.save
    keep the quantized weight; the xk plan is built per process on first use. x float32 / bfloat16,
    y in x's dtype."""

    def __init__(self, in_features, out_features, bias=True, activation="none", dtype=torch.float32, smooth=False):
        super().__init__()
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        self.register_buffer("qweight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("w_scales", torch.ones(out_features, dtype=torch.float32))
        # SmoothQuant: f32 [K] 1 / s (x * smooth is quantized; the weights carry s); None otherwise
        self.register_buffer("smooth", torch.ones(in_features, dtype=torch.float32) if smooth else None)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False) if bias else None

    @classmethod
    def from_linear(cls, m, activation="none", smooth_factors=None):
        """smooth_factors: SmoothQuant's s [K] (f32): the weights are quantized as W diag(s) and each
        call quantizes x diag(1 / s), the `smooth` buffer (see smoothquant_factors())."""
        new = cls(m.in_features, m.out_features, m.bias is not None, activation, m.weight.dtype,
                  smooth_factors is not None)
        w = m.weight.detach()
        if smooth_factors is not None:
            s = smooth_factors.float().contiguous()
            w = w.float().contiguous().clone()
            from .. import _quant
            _quant.smoothquant_fold_weight(w.shape[0], w.shape[1], w.data_ptr(), s.data_ptr())
            new.smooth.copy_(1.0 / s)
        q, s = quantize_weight_int8(w)
        new.qweight.copy_(q)
        new.w_scales.copy_(s)
        if m.bias is not None:
            new.bias = m.bias
        return new

    def forward(self, x):
        dtype = x.dtype
        xx = x if dtype in (torch.float32, torch.bfloat16) else x.float()
        y = xk.dynamic_int8_linear(xx, self.qweight, self.w_scales, self.bias, self.activation, self.smooth)
        return _match_dtype(y, dtype)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s, int8 per-channel weights, int8 per-token x%s" % (
            self.in_features, self.out_features, self.bias is not None,
            ", SmoothQuant" if self.smooth is not None else "")


class XkWoqLinear(nn.Module):
    """nn.Linear with weight-only int8 / int4 weights (symmetric, one f32 scale per group of
    group_size input features, 0 = per output channel), activations kept in float (xk_woq_gemm).
    Buffers: qweight (int8 [N, K] or uint8 [N, K/2], two int4 per byte), scales f32 [N, G] (and the
    bias parameter); the packed xk weight is built per process on first use."""

    def __init__(self, in_features, out_features, bias=True, bits=4, group_size=128, activation="none",
                 dtype=torch.float32):
        super().__init__()
        if bits not in (4, 8):
            raise ValueError("XkWoqLinear: bits=%r must be 4 or 8" % (bits,))
        g = in_features if group_size == 0 else group_size
        if g <= 0 or in_features % g or (bits == 4 and in_features % 2):
            raise ValueError("XkWoqLinear: in_features=%d is not a multiple of group_size=%d" % (in_features, g))
        self.in_features, self.out_features, self.activation = in_features, out_features, activation
        self.bits, self.group_size = bits, group_size
        qshape = (out_features, in_features if bits == 8 else in_features // 2)
        self.register_buffer("qweight", torch.zeros(qshape, dtype=torch.int8 if bits == 8 else torch.uint8))
        self.register_buffer("scales", torch.ones(out_features, in_features // g, dtype=torch.float32))
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False) if bias else None

    @classmethod
    def from_linear(cls, m, bits=4, group_size=128, activation="none"):
        new = cls(m.in_features, m.out_features, m.bias is not None, bits, group_size, activation, m.weight.dtype)
        q, s = quantize_weight_woq(m.weight, bits, group_size)
        new.qweight.copy_(q)
        new.scales.copy_(s)
        if m.bias is not None:
            new.bias = m.bias
        return new

    def dequantized_weight(self):
        return dequantize_weight_woq(self.qweight, self.scales, self.bits, self.group_size)

    def forward(self, x):
        dtype = x.dtype
        xx = x if dtype in (torch.float32, torch.bfloat16) else x.float()
        y = xk.woq_linear(xx, self.qweight, self.scales, self.group_size, self.bits, self.bias, self.activation)
        return _match_dtype(y, dtype)

    def extra_repr(self):
        return "in_features=%d, out_features=%d, bias=%s, int%d weights, group_size=%d" % (
            self.in_features, self.out_features, self.bias is not None, self.bits, self.group_size)


# ---- attention: a KV cache and Hugging Face Llama-style attention ------------------------------------

class KVCache:
    """A preallocated KV cache of `num_layers` layers, each K and V [batch, kv_heads, capacity, head_dim]
    (xk's contiguous layout, also Hugging Face's [batch, heads, seq, head_dim] order). All sequences
    of the batch advance together. It speaks Hugging Face's Cache protocol (update(k, v, layer_idx)
    returning the keys / values so far, get_seq_length()), so stock modules run on it too; the xk
    attention module appends and attends through torch.ops.xk.kv_cache_append / cached_attention
    without copying the context."""

    def __init__(self, num_layers, batch, kv_heads, head_dim, capacity, dtype=torch.float32):
        shape = (batch, kv_heads, capacity, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(num_layers)]
        self.lengths = [0] * num_layers
        self.batch, self.kv_heads, self.head_dim, self.capacity = batch, kv_heads, head_dim, capacity

    def get_seq_length(self, layer_idx=0):
        return self.lengths[layer_idx]

    def reset(self):
        self.lengths = [0] * len(self.lengths)

    def _room(self, layer_idx, T):
        start = self.lengths[layer_idx]
        if start + T > self.capacity:
            raise ValueError("KVCache: %d + %d tokens exceed the capacity %d" % (start, T, self.capacity))
        return start

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None, **kwargs):
        """HF protocol: key / value [batch, kv_heads, T, head_dim] appended; returns views of all so far."""
        T = key_states.shape[2]
        start = self._room(layer_idx, T)
        self.k[layer_idx][:, :, start:start + T] = key_states
        self.v[layer_idx][:, :, start:start + T] = value_states
        self.lengths[layer_idx] = n = start + T
        return self.k[layer_idx][:, :, :n], self.v[layer_idx][:, :, :n]

    def append_attend(self, layer_idx, q, k, v, scale):
        """xk path: q [B*T, heads, D], k / v [B*T, kv_heads, D] (token-major, sequence by sequence)
        appended at the current length; returns attention of q over the cache [B*T, heads, D]."""
        B = self.batch
        T = q.shape[0] // B
        start = self._room(layer_idx, T)
        seq = torch.arange(B, dtype=torch.int64).repeat_interleave(T)
        pos = torch.arange(start, start + T, dtype=torch.int64).repeat(B)
        kc, vc = self.k[layer_idx], self.v[layer_idx]
        xk.kv_cache_append(kc, vc, k, v, seq, pos)
        self.lengths[layer_idx] = n = start + T
        cu = torch.arange(0, (B + 1) * T, T, dtype=torch.int64) if T else torch.zeros(B + 1, dtype=torch.int64)
        return xk.cached_attention(q, kc, vc, cu, torch.full((B,), n, dtype=torch.int64), None, scale)


def _additive_mask(mask, B, T, S):
    """A Hugging Face 4-D attention mask ([B or 1, 1 or heads, T, S], additive float or bool keep) as
    xk's f32 [B*T, S] (one mask for all heads), or None when it varies over heads."""
    if mask.dim() == 2:  # [B, S] padding mask (1 = keep)
        mask = mask[:, None, None, :].bool()
    if mask.dim() != 4 or mask.shape[1] != 1:
        return None
    mask = mask[..., -S:] if mask.shape[-1] >= S else None
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=torch.float32).masked_fill_(~mask, float("-inf"))
    return mask.float().expand(B, 1, T, S).reshape(B * T, S).contiguous()


class LlamaAttention(nn.Module):
    """Hugging Face LlamaAttention (transformers >= 4.48 interface: forward(hidden_states,
    position_embeddings=(cos, sin), attention_mask, past_key_value(s), ...) -> (out, None)) on xk:
    q / k / v projections as one GEMM (packed [Wq; Wk; Wv]), RoPE from the given cos / sin, fused
    SDPA (causal, GQA; a 4-D mask when given), o_proj. With an xkernels KVCache the new keys are
    appended and attention runs over the cache; any other cache object's update() is used as is.
    Keeps q_proj / k_proj / v_proj / o_proj (the original state_dict keys)."""

    def __init__(self, q_proj, k_proj, v_proj, o_proj, num_heads, num_kv_heads, head_dim, scaling=None,
                 layer_idx=0, rotary_emb=None):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = q_proj, k_proj, v_proj, o_proj
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scaling = head_dim ** -0.5 if scaling is None else float(scaling)
        self.layer_idx = layer_idx
        self.rotary_emb = rotary_emb

    def _rope(self, q, k, cos, sin, B, T):
        D = self.head_dim
        half = D // 2
        c = cos.reshape(-1, T, cos.shape[-1])
        s = sin.reshape(-1, T, sin.shape[-1])
        cache = torch.cat([c[..., :half], s[..., :half]], -1).float().reshape(-1, D)
        pos = torch.arange(B * T, dtype=torch.int64) if c.shape[0] == B else torch.arange(T, dtype=torch.int64).repeat(B)
        xk.rotary_embedding(pos, q, k, D, cache, True)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, past_key_value=None,
                cache_position=None, past_key_values=None, position_ids=None, cache=None, **kwargs):
        B, T, _ = hidden_states.shape
        Hq, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
        wq = self.q_proj.weight
        x = _match_dtype(hidden_states, wq.dtype)
        ws = [wq, self.k_proj.weight, self.v_proj.weight]
        bs = [self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]
        qkv = xk.fused_linear(x, ws, None if bs[0] is None else bs)
        q = qkv[..., :Hq * D].reshape(B * T, Hq, D).contiguous()  # copies: the C API takes packed tensors
        k = qkv[..., Hq * D:(Hq + Hkv) * D].reshape(B * T, Hkv, D).contiguous()
        v = qkv[..., (Hq + Hkv) * D:].reshape(B * T, Hkv, D).contiguous()
        if position_embeddings is None:
            if self.rotary_emb is None:
                raise ValueError("xk LlamaAttention: position_embeddings (cos, sin) are required")
            if position_ids is None:
                past = cache if cache is not None else (past_key_values if past_key_values is not None
                                                        else past_key_value)
                start = 0 if past is None else past.get_seq_length(self.layer_idx)
                position_ids = torch.arange(start, start + T)[None]
            position_embeddings = self.rotary_emb(x, position_ids)
        cos, sin = position_embeddings
        self._rope(q, k, cos, sin, B, T)
        new_style = cache is not None  # transformers >= 5: `cache`, update(k, v, layer_idx, kwargs=...)
        if cache is None:
            cache = past_key_values if past_key_values is not None else past_key_value
        if isinstance(cache, KVCache) and attention_mask is None:
            o = cache.append_attend(self.layer_idx, q, k, v, self.scaling)
        else:
            causal_offset = 0
            if cache is not None:  # HF Cache protocol: [B, kv_heads, S, D] after the update
                k4, v4 = k.view(B, T, Hkv, D).transpose(1, 2), v.view(B, T, Hkv, D).transpose(1, 2)
                if new_style:
                    k4, v4 = cache.update(k4, v4, self.layer_idx, kwargs=kwargs)
                else:
                    k4, v4 = cache.update(k4, v4, self.layer_idx,
                                          {"sin": sin, "cos": cos, "cache_position": cache_position})
                S = k4.shape[2]
                k = k4.transpose(1, 2).reshape(B * S, Hkv, D)
                v = v4.transpose(1, 2).reshape(B * S, Hkv, D)
                causal_offset = S - T
            S = k.shape[0] // B
            mask = None if attention_mask is None else _additive_mask(attention_mask, B, T, S)
            if attention_mask is not None and mask is None:
                raise ValueError("xk LlamaAttention: attention_mask of shape %s is not supported" %
                                 (tuple(attention_mask.shape),))
            causal = mask is None and T > 1
            o = xk.attention(q.view(B, T, Hq, D), k.view(B, S, Hkv, D), v.view(B, S, Hkv, D), None, None,
                             self.scaling, causal, causal_offset, mask)
        y = xk.linear(o.reshape(B, T, Hq * D), self.o_proj.weight, self.o_proj.bias, "none", None)
        return _match_dtype(y, hidden_states.dtype), None

    def extra_repr(self):
        return "heads=%d, kv_heads=%d, head_dim=%d" % (self.num_heads, self.num_kv_heads, self.head_dim)


class BertSelfAttention(nn.Module):
    """Bidirectional multi-head self-attention over query / key / value Linears (Hugging Face's
    BertSelfAttention and its look-alikes: RoBERTa, MiniLM ...) on xk: the three projections as one
    GEMM, then fused SDPA with the (padding) mask; forward(hidden_states, attention_mask=None, ...)
    returns what the replaced module returned (a tensor, or a tuple led by the context)."""

    def __init__(self, query, key, value, num_heads, scaling=None, tuple_len=0):
        super().__init__()
        self.query, self.key, self.value = query, key, value
        self.num_heads = num_heads
        self.head_dim = query.out_features // num_heads
        self.scaling = self.head_dim ** -0.5 if scaling is None else float(scaling)
        self.tuple_len = tuple_len

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        B, T, _ = hidden_states.shape
        H, D = self.num_heads, self.head_dim
        w = self.query.weight
        x = _match_dtype(hidden_states, w.dtype)
        bs = [self.query.bias, self.key.bias, self.value.bias]
        qkv = xk.fused_linear(x, [w, self.key.weight, self.value.weight], None if bs[0] is None else bs)
        q = qkv[..., :H * D].reshape(B, T, H, D)
        k = qkv[..., H * D:2 * H * D].reshape(B, T, H, D)
        v = qkv[..., 2 * H * D:].reshape(B, T, H, D)
        mask = None if attention_mask is None else _additive_mask(attention_mask, B, T, T)
        if attention_mask is not None and mask is None:
            raise ValueError("xk BertSelfAttention: attention_mask of shape %s is not supported" %
                             (tuple(attention_mask.shape),))
        o = xk.attention(q, k, v, None, None, self.scaling, False, 0, mask)
        o = _match_dtype(o.reshape(B, T, H * D), hidden_states.dtype)
        return o if not self.tuple_len else (o,) + (None,) * (self.tuple_len - 1)

    def extra_repr(self):
        return "heads=%d, head_dim=%d" % (self.num_heads, self.head_dim)
