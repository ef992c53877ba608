"""xkernels.torch.optimize(model): nn.Linear, nn.LayerNorm, RMSNorm modules and the SwiGLU MLP
pattern replaced by xk modules, everything else left alone."""
import copy

import torch
from torch import nn

from . import modules

_last = {"replaced": [], "skipped": [], "dtype": None, "quantization": None}
QUANTIZATIONS = ("dynamic_int8", "woq_int8", "woq_int4", "smoothquant")


def _run_calibration(model, calib_data):
    for batch in calib_data:
        if isinstance(batch, dict):
            model(**batch)
        elif isinstance(batch, (tuple, list)):
            model(*batch)
        else:
            model(batch)


def smoothquant_factors(model, calib_data, alpha=0.5):
    """SmoothQuant calibration (Xiao et al. 2023; include/xk/qlinear.hpp): runs `model` on every item
    of calib_data (a tensor, a tuple of positional arguments or a dict of keyword arguments) and
    returns {nn.Linear: s [in_features] f32} with s_j = max|X_j|^alpha / max|W_j|^(1 - alpha), X the
    Linear's inputs seen (per input channel abs-max over all batches, xk_smoothquant_observe)."""
    from .. import _quant
    stats, hooks = {}, []

    def observe(mod, args):
        x = args[0].detach()
        if x.dtype not in (torch.float32, torch.bfloat16):
            x = x.float()
        x = x.contiguous()
        K = x.shape[-1]
        a = stats.setdefault(mod, torch.zeros(K, dtype=torch.float32))
        if x.numel():
            _quant.smoothquant_observe(x.numel() // K, K, x.data_ptr(), x.dtype == torch.bfloat16, a.data_ptr())

    for m in model.modules():
        if isinstance(m, nn.Linear):
            hooks.append(m.register_forward_pre_hook(observe))
    try:
        with torch.no_grad():
            _run_calibration(model, calib_data)
    finally:
        for h in hooks:
            h.remove()
    out = {}
    for m, act in stats.items():
        w = m.weight.detach().float().contiguous()
        wmax = torch.zeros(w.shape[1], dtype=torch.float32)
        _quant.smoothquant_weight_absmax(w.shape[0], w.shape[1], w.data_ptr(), wmax.data_ptr())
        s = torch.empty_like(wmax)
        _quant.smoothquant_factors(w.shape[1], act.data_ptr(), wmax.data_ptr(), float(alpha), s.data_ptr())
        out[m] = s
    return out


def _is_silu(act):
    if isinstance(act, nn.SiLU):
        return True
    name = type(act).__name__
    return name in ("SiLUActivation", "SiLU") or act is nn.functional.silu


def _gated_mlp(m):
    lin = [getattr(m, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    if not all(isinstance(v, nn.Linear) for v in lin):
        return None
    g, u, d = lin
    act = getattr(m, "act_fn", getattr(m, "act", None))
    if act is None or not _is_silu(act):
        return None
    if g.bias is not None or u.bias is not None or g.weight.shape != u.weight.shape:
        return None
    if d.in_features != g.out_features:
        return None
    # the module's own forward must be the plain pattern: check it numerically on one row
    return modules.GatedMLP(modules.Linear.from_linear(g), modules.Linear.from_linear(u),
                            modules.Linear.from_linear(d), "silu")


def _activation_name(act):
    """xk's epilogue activation equal to `act` (a module or function), or None."""
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu_erf"
    if isinstance(act, nn.ReLU) or act is torch.relu or act is nn.functional.relu:
        return "relu"
    if _is_silu(act):
        return "silu"
    if act is nn.functional.gelu:
        return "gelu_erf"
    name = type(act).__name__
    if name == "GELUActivation":  # Hugging Face's "gelu" (erf)
        return "gelu_erf"
    if name in ("NewGELUActivation", "GELUTanh", "PytorchGELUTanh", "FastGELUActivation"):
        return "gelu_tanh"
    return None


def _linear_act(m):
    """Hugging Face's BertIntermediate pattern: a `dense` Linear and an `intermediate_act_fn` ->
    (xk LinearAct, None), (None, why) or (None, None) when `m` is not that pattern."""
    dense, act = getattr(m, "dense", None), getattr(m, "intermediate_act_fn", None)
    if not isinstance(dense, nn.Linear) or act is None:
        return None, None
    name = _activation_name(act)
    if name is None:
        return None, "activation %s has no xk epilogue" % type(act).__name__
    if dense.weight.dtype not in (torch.float32, torch.bfloat16):
        return None, "weight dtype %s" % dense.weight.dtype
    new = modules.LinearAct(modules.Linear.from_linear(dense, name))
    if not _same_output(m, new, dense.in_features, dense.weight.dtype):
        return None, "has dense + intermediate_act_fn, but its forward is not act(dense(x))"
    return new, None


_ATTN_CHILDREN = {"q_proj", "k_proj", "v_proj", "o_proj", "rotary_emb"}


def _llama_attention(m):
    """(xk LlamaAttention, None), (None, why) or (None, None) when `m` is no Llama-style attention:
    q_proj / k_proj / v_proj / o_proj Linears and nothing else (no q / k norms ...), head counts
    from its config or attributes."""
    lin = [getattr(m, n, None) for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
    if not type(m).__name__.endswith("Attention") or not all(isinstance(v, nn.Linear) for v in lin):
        return None, None
    extra = sorted(set(n for n, _ in m.named_children()) - _ATTN_CHILDREN)
    if extra:
        return None, "has submodules %s beside q / k / v / o projections" % ", ".join(extra)
    cfg = getattr(m, "config", None)
    heads = getattr(m, "num_heads", None) or getattr(cfg, "num_attention_heads", None)
    kv_heads = getattr(m, "num_key_value_heads", None) or getattr(cfg, "num_key_value_heads", None) or heads
    q, k, v, o = lin
    if not heads:
        return None, "no num_heads / config.num_attention_heads"
    head_dim = getattr(m, "head_dim", None) or q.out_features // heads
    if q.out_features != heads * head_dim or k.out_features != kv_heads * head_dim or \
            v.out_features != kv_heads * head_dim or heads % kv_heads or head_dim % 2 or \
            o.in_features != heads * head_dim or (q.bias is None) != (k.bias is None) or \
            (q.bias is None) != (v.bias is None):
        return None, "projection shapes do not match %s heads / %s kv heads of %s" % (heads, kv_heads, head_dim)
    new = modules.LlamaAttention(*(modules.Linear.from_linear(t) for t in lin), heads, kv_heads, head_dim,
                                 getattr(m, "scaling", None), getattr(m, "layer_idx", 0) or 0,
                                 getattr(m, "rotary_emb", None))
    return new, None


def _same_attention(old, new, dtype):
    """Both attention modules agree on a random input with random RoPE angles and a causal mask."""
    try:
        g = torch.Generator().manual_seed(0)
        H, T, D = new.q_proj.in_features, 5, new.head_dim
        x = torch.randn(2, T, H, generator=g).to(dtype)
        ang = torch.rand(1, T, D // 2, generator=g) * 6
        cos, sin = torch.cat([ang.cos()] * 2, -1).to(dtype), torch.cat([ang.sin()] * 2, -1).to(dtype)
        mask = torch.full((T, T), float("-inf")).triu(1)[None, None].to(dtype)
        with torch.no_grad():
            a = old(hidden_states=x, position_embeddings=(cos, sin), attention_mask=mask)
            b = new(hidden_states=x, position_embeddings=(cos, sin), attention_mask=mask)
        a, b = (a[0] if isinstance(a, tuple) else a).float(), b[0].float()
        tol = 1e-3 if dtype == torch.float32 else 5e-2
        return a.shape == b.shape and bool((a - b).norm() <= tol * b.norm() + 1e-6)
    except Exception:
        return False


def _bert_self_attention(m, dtype):
    """(xk BertSelfAttention, None), (None, why) or (None, None) when `m` is no BERT-style
    self-attention: query / key / value Linears (dropout aside, nothing else), not causal / decoder;
    checked numerically against the module on a padded batch (which also tells its return form)."""
    lin = [getattr(m, n, None) for n in ("query", "key", "value")]
    if not type(m).__name__.endswith("SelfAttention") or not all(isinstance(v, nn.Linear) for v in lin):
        return None, None
    extra = sorted(n for n, c in m.named_children() if n not in ("query", "key", "value")
                   and not isinstance(c, nn.Dropout))
    if extra:
        return None, "has submodules %s beside query / key / value" % ", ".join(extra)
    if getattr(m, "is_decoder", False) or getattr(m, "is_causal", False):
        return None, "decoder / causal self-attention"
    cfg = getattr(m, "config", None)
    heads = getattr(m, "num_attention_heads", None) or getattr(m, "heads", None) or getattr(m, "num_heads", None) \
        or getattr(cfg, "num_attention_heads", None)
    q, k, v = lin
    if not heads or q.out_features % heads or k.out_features != q.out_features or v.out_features != q.out_features \
            or (q.bias is None) != (k.bias is None) or (q.bias is None) != (v.bias is None):
        return None, "projection shapes do not match %s heads" % heads
    new = modules.BertSelfAttention(*(modules.Linear.from_linear(t) for t in lin), heads, getattr(m, "scaling", None))
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 5, q.in_features, generator=g).to(dtype)
        mask = torch.zeros(2, 1, 1, 5, dtype=dtype)
        mask[1, ..., 3:] = torch.finfo(dtype).min
        with torch.no_grad():
            a = m(x, mask)
            n = len(a) if isinstance(a, tuple) else 0
            a = (a[0] if n else a).float()
            b = new(x, mask).float()
        tol = 1e-3 if dtype == torch.float32 else 5e-2
        if a.shape != b.shape or not bool((a - b).norm() <= tol * a.norm() + 1e-6):
            return None, "query / key / value, but its forward is not softmax(q k^T / sqrt(d) + mask) v"
    except Exception as e:  # another signature or semantics
        return None, "query / key / value, but calling it like BERT's self-attention failed (%s)" % type(e).__name__
    new.tuple_len = n
    return new, None


def _rms_norm(m):
    if not type(m).__name__.endswith("RMSNorm"):
        return None
    w = getattr(m, "weight", None)
    eps = None
    for a in ("variance_epsilon", "variance_eps", "eps"):
        if hasattr(m, a):
            eps = getattr(m, a)
            break
    else:
        return None
    if w is not None and (not isinstance(w, torch.Tensor) or w.dim() != 1):
        return None
    if isinstance(m, getattr(nn, "RMSNorm", ())) and len(m.normalized_shape) != 1:
        return None
    hidden = w.shape[0] if w is not None else m.normalized_shape[0]
    return modules.RMSNorm(hidden, eps, w)


def _same_output(old, new, in_features, dtype):
    """Both modules on a small random input agree, normwise (catches look-alikes: Gemma's (1 + w)
    RMSNorm, an MLP whose forward is not the plain pattern ...)."""
    try:
        with torch.no_grad():
            x = torch.randn(3, in_features, generator=torch.Generator().manual_seed(0)).to(dtype)
            a, b = old(x).float(), new(x).float()
        tol = 1e-3 if dtype == torch.float32 else 5e-2
        return a.shape == b.shape and bool((a - b).norm() <= tol * b.norm() + 1e-6)
    except Exception:
        return False


def _param_dtype(m, default):
    for p in m.parameters(recurse=False):
        return p.dtype
    return default


def _quantized_linear(child, quant):
    """(module, None) or (None, why) for nn.Linear `child` under quant = (name, group_size)."""
    name, group_size = quant[:2]
    if name == "dynamic_int8":
        return modules.XkDynamicInt8Linear.from_linear(child), None
    if name == "smoothquant":
        s = quant[2].get(child)
        if s is None:
            return None, "not reached by the calibration data: kept in float"
        return modules.XkDynamicInt8Linear.from_linear(child, smooth_factors=s), None
    bits = 8 if name == "woq_int8" else 4
    K = child.in_features
    if (group_size and K % group_size) or (bits == 4 and K % 2):
        return None, "in_features %d is not a multiple of group_size %d (%s): kept in float" % (K, group_size, name)
    return modules.XkWoqLinear.from_linear(child, bits, group_size), None


def _replacement(child, path, dtype, skipped, quant=None):
    """The xk module replacing `child`, or None (then `skipped` may say why)."""
    new, why = None, None
    if isinstance(child, nn.Linear):
        if child.weight.dtype not in (torch.float32, torch.bfloat16):
            why = "weight dtype %s" % child.weight.dtype
        elif quant is not None:
            new, why = _quantized_linear(child, quant)
        else:
            new = modules.Linear.from_linear(child)
    elif isinstance(child, nn.LayerNorm):
        if len(child.normalized_shape) == 1:
            new = modules.LayerNorm.from_layer_norm(child)
        else:
            why = "normalized_shape %s (only the last dimension is supported)" % (child.normalized_shape,)
    elif type(child).__name__.endswith("RMSNorm"):
        new = _rms_norm(child)
        if new is None:
            why = "no 1-D weight / eps attribute"
        elif not _same_output(child, new, new.hidden_size, _param_dtype(child, dtype)):
            new, why = None, "outputs differ from xk's RMSNorm (another formula)"
    elif quant is None and type(child).__name__.endswith("Attention") and not type(child).__name__.endswith(
            "SelfAttention"):
        new, why = _llama_attention(child)
        if new is not None and not _same_attention(child, new, _param_dtype(child.q_proj, dtype)):
            new, why = None, "q / k / v / o projections, but its forward is not Llama's RoPE + SDPA"
    elif quant is None and hasattr(child, "intermediate_act_fn") and isinstance(getattr(child, "dense", None),
                                                                             nn.Linear):
        new, why = _linear_act(child)
    elif quant is None and type(child).__name__.endswith("SelfAttention"):
        new, why = _bert_self_attention(child, _param_dtype(child.query, dtype) if hasattr(child, "query") else dtype)
    elif quant is None:  # quantized: the MLP's Linears are replaced one by one instead
        new = _gated_mlp(child)
        if new is not None and not _same_output(child, new, new.gate_proj.in_features,
                                                _param_dtype(child.gate_proj, dtype)):
            new, why = None, "has gate_proj / up_proj / down_proj, but its forward is not down(silu(gate(x)) * up(x))"
    if why is not None:
        skipped.append((path or "<root>", type(child).__name__, why))
    return new


def _replace(model, prefix, dtype, log, skipped, quant=None):
    for name, child in list(model.named_children()):
        path = prefix + name
        new = _replacement(child, path, dtype, skipped, quant)
        if new is not None:
            setattr(model, name, new)
            log.append((path, type(child).__name__, type(new).__name__))
        else:
            _replace(child, path + ".", dtype, log, skipped, quant)


DEFAULT_GROUP_SIZE = {"dynamic_int8": 0, "woq_int8": 0, "woq_int4": 128, "smoothquant": 0}


def optimize(model, dtype=torch.float32, quantization=None, inplace=False, group_size=None, calib_data=None,
             alpha=0.5):
    """Returns `model` (a deep copy unless inplace=True) in eval mode with its parameters in `dtype`
    (float32 or bfloat16: feed it inputs of that dtype) and its nn.Linear, nn.LayerNorm, RMSNorm
    (nn.RMSNorm, Hugging Face LlamaRMSNorm-style) modules and SwiGLU MLPs (gate_proj / up_proj /
    down_proj with SiLU) replaced by xk modules on torch.ops.xk. Weights are packed once per process,
    on first use. info() says what was replaced.

    quantization (weights quantized once, here; kept as int buffers in state_dict):
      "dynamic_int8": every nn.Linear -> XkDynamicInt8Linear (int8 weights per output channel, x
                      quantized to int8 per token in each call);
      "woq_int8":     every nn.Linear -> XkWoqLinear(bits=8), int8 weights per output channel
                      (group_size 0 unless given), float activations;
      "woq_int4":     every nn.Linear whose in_features is a multiple of group_size (default 128) ->
                      XkWoqLinear(bits=4); the others stay float (info() lists them).
      "smoothquant":  SmoothQuant W8A8 (dynamic per-token int8 activations): calib_data (an iterable of
                      model inputs: tensors, tuples of arguments or dicts of keyword arguments) is
                      run through the float model first; each nn.Linear gets s_j = max|X_j|^alpha /
                      max|W_j|^(1 - alpha) (alpha default 0.5), its weights are quantized as W diag(s)
                      and each call quantizes x diag(1 / s) per token (the smoothing is applied inside
                      xk's quantize step, nothing is folded into the norms: exact for any producer of
                      x). Linears the calibration never reached stay float.
    The SwiGLU MLP fusion is not applied when quantizing (its three Linears are quantized instead)."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError("xkernels.torch.optimize: quantization=%r: expected None or one of %s" %
                         (quantization, ", ".join(QUANTIZATIONS)))
    quant = None
    if quantization is not None:
        g = DEFAULT_GROUP_SIZE[quantization] if group_size is None else group_size
        if quantization in ("dynamic_int8", "smoothquant") and g != 0:
            raise ValueError("xkernels.torch.optimize: %s quantizes per output channel (group_size 0)" % quantization)
        if g not in (0, 32, 64, 128, 256):
            raise ValueError("xkernels.torch.optimize: group_size=%r: expected 0 (per channel), 32, 64, 128 or 256" % g)
        quant = (quantization, g)
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError("xkernels.torch.optimize: dtype must be torch.float32 or torch.bfloat16, got %s" % dtype)
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    if quantization == "smoothquant":
        if calib_data is None:
            raise ValueError("xkernels.torch.optimize: quantization='smoothquant' needs calib_data")
        quant = quant + (smoothquant_factors(model.float(), calib_data, alpha),)
    elif calib_data is not None:
        raise ValueError("xkernels.torch.optimize: calib_data is only used with quantization='smoothquant'")
    model.to(dtype)
    log, skipped = [], []
    root = _replacement(model, "", dtype, skipped, quant)
    if root is not None:
        log.append(("<root>", type(model).__name__, type(root).__name__))
        model = root
    else:
        _replace(model, "", dtype, log, skipped, quant)
    _last.update(replaced=log, skipped=skipped, dtype=dtype, quantization=quantization)
    return model


def last_report():
    return dict(_last)
