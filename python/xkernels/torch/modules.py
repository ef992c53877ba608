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
