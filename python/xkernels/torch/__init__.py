"""PyTorch adapter: torch.ops.xk.* (torch.library ops on libxk, with fake kernels for torch.compile),
xk nn.Modules and optimize(model). Pure Python over libxk's C API: no build against torch, one
install serves every torch version with torch.library.register_fake (>= 2.4).

    import xkernels.torch as xkt
    model = xkt.optimize(model, dtype=torch.bfloat16)
    print(xkt.info())
"""
from collections import Counter

import torch

from .. import _lib
from . import _ops  # noqa: F401  (registers torch.ops.xk)
from .modules import (BertSelfAttention, GatedMLP, KVCache, LayerNorm, Linear, LlamaAttention, RMSNorm, XkDynamicInt8Linear,  # noqa: F401
                      XkWoqLinear)
from .optimize import last_report, optimize, smoothquant_factors  # noqa: F401

OPS = ("linear", "gated_linear", "rms_norm", "layer_norm", "fused_add_rms_norm", "fused_add_layer_norm",
       "rotary_embedding", "silu_and_mul", "gelu_and_mul", "softmax", "quantize_per_tensor",
       "dequantize_per_tensor", "quantize_per_channel", "dequantize_per_channel", "dynamic_quantize_per_token",
       "embedding_bag", "dynamic_int8_linear", "woq_linear", "attention", "kv_cache_append", "cached_attention",
       "fused_linear")


def set_num_threads(n):
    """Threads for both torch and xk (xk follows OMP_NUM_THREADS / the CPU count otherwise)."""
    torch.set_num_threads(n)
    _lib.check(_lib.lib().set_num_threads(n))


_lib.check(_lib.lib().set_num_threads(torch.get_num_threads()))


def info():
    """What the last optimize() did, and the library in use (a str)."""
    L = _lib.lib()
    import ctypes
    isa = ctypes.c_int()
    _lib.check(L.get_max_isa(ctypes.byref(isa)))
    r = last_report()
    lines = ["xkernels %s (%s), ISA %s, torch %s, %d threads" % (
        L.version().decode(), L.path, _lib.ISA_NAMES[isa.value], torch.__version__, torch.get_num_threads())]
    if r["dtype"] is None:
        lines.append("optimize() not called yet")
    else:
        counts = Counter("%s -> %s" % (old, new) for _, old, new in r["replaced"])
        lines.append("optimize(dtype=%s, quantization=%s): %d modules replaced" % (
            r["dtype"], r["quantization"], len(r["replaced"])))
        lines += ["  %4d x %s" % (n, k) for k, n in sorted(counts.items())]
        for path, cls, why in r["skipped"]:
            lines.append("  left alone: %s (%s): %s" % (path, cls, why))
    return "\n".join(lines)
