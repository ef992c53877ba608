"""xkernels.torch.optimize(model): nn.Linear, nn.LayerNorm, RMSNorm modules and the SwiGLU MLP
pattern replaced by xk modules, everything else left alone."""
import copy

import torch
from torch import nn

from . import modules

_last = {"replaced": [], "skipped": [], "dtype": None, "quantization": None}
QUANTIZATIONS = ("dynamic_int8", "woq_int8", "woq_int4")


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


def _replacement(child, path, dtype, skipped):
    """The xk module replacing `child`, or None (then `skipped` may say why)."""
    new, why = None, None
    if isinstance(child, nn.Linear):
        if child.weight.dtype in (torch.float32, torch.bfloat16):
            new = modules.Linear.from_linear(child)
        else:
            why = "weight dtype %s" % child.weight.dtype
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
    else:
        new = _gated_mlp(child)
        if new is not None and not _same_output(child, new, new.gate_proj.in_features,
                                                _param_dtype(child.gate_proj, dtype)):
            new, why = None, "has gate_proj / up_proj / down_proj, but its forward is not down(silu(gate(x)) * up(x))"
    if why is not None:
        skipped.append((path or "<root>", type(child).__name__, why))
    return new


def _replace(model, prefix, dtype, log, skipped):
    for name, child in list(model.named_children()):
        path = prefix + name
        new = _replacement(child, path, dtype, skipped)
        if new is not None:
            setattr(model, name, new)
            log.append((path, type(child).__name__, type(new).__name__))
        else:
            _replace(child, path + ".", dtype, log, skipped)


def optimize(model, dtype=torch.float32, quantization=None, inplace=False):
    """Returns `model` (a deep copy unless inplace=True) in eval mode with its parameters in `dtype`
    (float32 or bfloat16: feed it inputs of that dtype) and its nn.Linear, nn.LayerNorm, RMSNorm
    (nn.RMSNorm, Hugging Face LlamaRMSNorm-style) modules and SwiGLU MLPs (gate_proj / up_proj /
    down_proj with SiLU) replaced by xk modules on torch.ops.xk. Weights are packed once per process,
    on first use. info() says what was replaced."""
    if quantization is not None:
        if quantization in QUANTIZATIONS:
            raise NotImplementedError("xkernels.torch.optimize: quantization=%r is not available yet (its "
                                      "xk ops are being built); use quantization=None" % quantization)
        raise ValueError("xkernels.torch.optimize: quantization=%r: expected None or one of %s" %
                         (quantization, ", ".join(QUANTIZATIONS)))
    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError("xkernels.torch.optimize: dtype must be torch.float32 or torch.bfloat16, got %s" % dtype)
    if not inplace:
        model = copy.deepcopy(model)
    model.eval()
    model.to(dtype)
    log, skipped = [], []
    root = _replacement(model, "", dtype, skipped)
    if root is not None:
        log.append(("<root>", type(model).__name__, type(root).__name__))
        model = root
    else:
        _replace(model, "", dtype, log, skipped)
    _last.update(replaced=log, skipped=skipped, dtype=dtype, quantization=quantization)
    return model


def last_report():
    return dict(_last)
