"""libxk's op families on NumPy arrays (or anything exposing the array interface).

dtypes: float32 -> f32, uint16 -> bf16 bit patterns (the upper half of an IEEE float; see
`to_bf16` / `from_bf16`; an ml_dtypes bfloat16 array works too), int8 -> s8, uint8 -> u8,
int32 -> s32, float16 -> f16 (conversions only). Every function checks the shapes of what it
receives (the C API trusts its pointers), allocates its outputs unless `out=` is given, and raises
xkernels.XkError (with libxk's message) when libxk rejects a call.
"""
import ctypes

import numpy as np

from . import _lib
from ._lib import BF16, F16, F32, S8, S32, U8, check, lib

_NP_DTYPES = {np.dtype(np.float32): F32, np.dtype(np.uint16): BF16, np.dtype(np.int8): S8,
              np.dtype(np.uint8): U8, np.dtype(np.int32): S32, np.dtype(np.float16): F16}
_XK_TO_NP = {F32: np.float32, BF16: np.uint16, S8: np.int8, U8: np.uint8, S32: np.int32, F16: np.float16}
_NAMES = {"f32": F32, "float32": F32, "bf16": BF16, "bfloat16": BF16, "s8": S8, "int8": S8, "u8": U8,
          "uint8": U8, "s32": S32, "int32": S32, "f16": F16, "float16": F16}


def xk_dtype(a):
    """The xk dtype (an int of xk_dtype) of a NumPy array / dtype."""
    dt = np.dtype(getattr(a, "dtype", a))
    if dt.name == "bfloat16":  # ml_dtypes
        return BF16
    try:
        return _NP_DTYPES[dt]
    except KeyError:
        raise TypeError("xkernels: dtype %s has no xk equivalent (float32, uint16 as bf16, int8, uint8, int32, "
                        "float16)" % dt) from None


def _dt(d):
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        return _NAMES[d]
    return xk_dtype(d)


def _ptr(a):
    return a.ctypes.data if a is not None else None


def _arr(a, name, dtypes=None, ndim=None):
    a = np.asarray(a)
    if dtypes is not None and xk_dtype(a) not in dtypes:
        raise TypeError("%s: dtype %s not supported here" % (name, a.dtype))
    if ndim is not None and a.ndim != ndim:
        raise ValueError("%s: expected %d dimensions, got shape %s" % (name, ndim, a.shape))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def _out(out, shape, dtype, name="out"):
    if out is None:
        return np.empty(shape, dtype=dtype)
    if tuple(out.shape) != tuple(shape) or np.dtype(out.dtype) != np.dtype(dtype) or not out.flags.c_contiguous:
        raise ValueError("%s: expected a C-contiguous %s array of shape %s, got %s %s" %
                         (name, np.dtype(dtype), tuple(shape), out.dtype, out.shape))
    if not out.flags.writeable:
        raise ValueError("%s: read-only array" % name)
    return out


def _rows(x):
    """[..., hidden] -> (rows, hidden)."""
    hidden = x.shape[-1] if x.ndim else 1
    return (x.size // hidden if hidden else int(np.prod(x.shape[:-1]))), hidden


# ---- runtime -----------------------------------------------------------------------------------

def version():
    return lib().version().decode()


def max_isa():
    v = ctypes.c_int()
    check(lib().get_max_isa(ctypes.byref(v)))
    return _lib.ISA_NAMES[v.value]


def set_max_isa(name):
    check(lib().set_max_isa(_lib.ISA_NAMES.index(name)))


def set_num_threads(n):
    check(lib().set_num_threads(int(n)))


# ---- conversions -------------------------------------------------------------------------------

def convert(x, dtype, out=None):
    """x converted to dtype (among f32 / bf16 / f16; bf16 as uint16), round to nearest even."""
    x = _arr(x, "convert")
    dst = _dt(dtype)
    out = _out(out, x.shape, _XK_TO_NP[dst])
    check(lib().convert(x.size, xk_dtype(x), _ptr(x), dst, _ptr(out)))
    return out


def to_bf16(x):
    """float32 array -> uint16 bf16 bit patterns (round to nearest even)."""
    return convert(np.asarray(x, dtype=np.float32), BF16)


def from_bf16(x):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return convert(_arr(x, "from_bf16", (BF16,)), F32)


# ---- gemm --------------------------------------------------------------------------------------

def _gemm_shapes(a, b, trans_a, trans_b):
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError("gemm: a and b must be 2-D, got %s and %s" % (a.shape, b.shape))
    M, K = (a.shape[1], a.shape[0]) if trans_a else a.shape
    Kb, N = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if K != Kb:
        raise ValueError("gemm: inner dimensions differ: op(a) %s, op(b) %s" % ((M, K), (Kb, N)))
    return M, N, K


def _desc(M, N, K, trans_a, trans_b, a_type, b_type, c_type, alpha, beta, bias, activation, residual_type):
    d = _lib.GemmDesc()
    lib().gemm_desc_init(ctypes.byref(d))
    d.M, d.N, d.K = M, N, K
    d.trans_a, d.trans_b = int(bool(trans_a)), int(bool(trans_b))
    d.a_type, d.b_type, d.c_type = a_type, b_type, c_type
    d.alpha, d.beta = alpha, beta
    d.bias = int(bias)
    d.act = _lib.ACTIVATIONS[activation]
    if residual_type is not None:
        d.residual = 1
        d.residual_type = residual_type
    return d


def gemm(a, b, out=None, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0, bias=None, activation=None,
         residual=None, out_dtype=None):
    """C = act(alpha op(a) op(b) + beta C + bias) + residual (xk_gemm; float types only here: f32 / bf16
    inputs, f32 or bf16 output; bias f32[N]; residual f32 or bf16 [M, N]). beta != 0 reads `out`."""
    a = _arr(a, "gemm: a", (F32, BF16))
    b = _arr(b, "gemm: b", (F32, BF16))
    M, N, K = _gemm_shapes(a, b, trans_a, trans_b)
    c_type = _dt(out_dtype) if out_dtype is not None else (xk_dtype(out) if out is not None else xk_dtype(a))
    if beta != 0 and out is None:
        raise ValueError("gemm: beta != 0 needs out=")
    out = _out(out, (M, N), _XK_TO_NP[c_type])
    if bias is not None:
        bias = _arr(bias, "gemm: bias", (F32,), 1)
        if bias.shape[0] != N:
            raise ValueError("gemm: bias must have N=%d elements" % N)
    if residual is not None:
        residual = _arr(residual, "gemm: residual", (F32, BF16), 2)
        if residual.shape != (M, N):
            raise ValueError("gemm: residual must be [%d, %d]" % (M, N))
    d = _desc(M, N, K, trans_a, trans_b, xk_dtype(a), xk_dtype(b), c_type, alpha, beta, bias is not None,
              activation, xk_dtype(residual) if residual is not None else None)
    args = _lib.GemmArgs(A=_ptr(a), B=_ptr(b), C=_ptr(out), bias=_ptr(bias), residual=_ptr(residual))
    check(lib().gemm(ctypes.byref(d), ctypes.byref(args)))
    return out


class PackedB:
    """B in a plan's kernel layout (xk_gemm_packed_b); serves every plan of the same K, N, b_type."""

    def __init__(self, handle, K, N, b_type):
        self._h, self.K, self.N, self.b_type = handle, K, N, b_type

    def __del__(self):
        if getattr(self, "_h", None):
            lib().gemm_packed_b_destroy(self._h)
            self._h = None


class GemmPlan:
    """xk_gemm_plan: the descriptor validated and the kernel selected once.

    GemmPlan(M, N, K, a_type="f32", b_type=None, c_type=None, trans_a=False, trans_b=False, alpha=1,
    beta=0, bias=False, activation=None, residual_type=None). run(a, b_or_packed, out=None, bias=None,
    residual=None); pack_b(b) -> PackedB."""

    def __init__(self, M, N, K, a_type="f32", b_type=None, c_type=None, *, trans_a=False, trans_b=False,
                 alpha=1.0, beta=0.0, bias=False, activation=None, residual_type=None):
        a_type = _dt(a_type)
        b_type = _dt(b_type) if b_type is not None else a_type
        c_type = _dt(c_type) if c_type is not None else a_type
        self.M, self.N, self.K, self.trans_a, self.trans_b = M, N, K, trans_a, trans_b
        self.a_type, self.b_type, self.c_type, self.beta = a_type, b_type, c_type, beta
        self.has_bias = bool(bias)
        self.residual_type = _dt(residual_type) if residual_type is not None else None
        self._desc = _desc(M, N, K, trans_a, trans_b, a_type, b_type, c_type, alpha, beta, bias, activation,
                           self.residual_type)
        h = ctypes.c_void_p()
        check(lib().gemm_plan_create(ctypes.byref(self._desc), ctypes.byref(h)))
        self._h = h.value

    def __del__(self):
        if getattr(self, "_h", None):
            lib().gemm_plan_destroy(self._h)
            self._h = None

    @property
    def impl_name(self):
        return lib().gemm_plan_impl_name(self._h).decode()

    def _check(self, x, shape, dtype, name):
        x = _arr(x, name)
        if tuple(x.shape) != tuple(shape) or xk_dtype(x) != dtype:
            raise ValueError("GemmPlan: %s must be %s %s, got %s %s" % (name, _lib.DTYPE_NAMES[dtype], shape,
                                                                         x.dtype, x.shape))
        return x

    def pack_b(self, b):
        b = self._check(b, (self.N, self.K) if self.trans_b else (self.K, self.N), self.b_type, "b")
        h = ctypes.c_void_p()
        check(lib().gemm_plan_pack_b(self._h, _ptr(b), ctypes.byref(h)))
        return PackedB(h.value, self.K, self.N, self.b_type)

    def run(self, a, b, out=None, bias=None, residual=None):
        a = self._check(a, (self.K, self.M) if self.trans_a else (self.M, self.K), self.a_type, "a")
        if self.beta != 0 and out is None:
            raise ValueError("GemmPlan.run: beta != 0 needs out=")
        out = _out(out, (self.M, self.N), _XK_TO_NP[self.c_type])
        if self.has_bias:
            bias = self._check(bias, (self.N,), F32, "bias")
        if self.residual_type is not None:
            residual = self._check(residual, (self.M, self.N), self.residual_type, "residual")
        args = _lib.GemmArgs(A=_ptr(a), C=_ptr(out), bias=_ptr(bias) if self.has_bias else None,
                             residual=_ptr(residual) if self.residual_type is not None else None)
        if isinstance(b, PackedB):
            if (b.K, b.N, b.b_type) != (self.K, self.N, self.b_type):
                raise ValueError("GemmPlan.run: packed B of another shape / type")
            check(lib().gemm_plan_run_packed(self._h, ctypes.byref(args), b._h))
        else:
            b = self._check(b, (self.N, self.K) if self.trans_b else (self.K, self.N), self.b_type, "b")
            args.B = _ptr(b)
            check(lib().gemm_plan_run(self._h, ctypes.byref(args)))
        return out


def linear(x, weight, bias=None, activation=None, residual=None):
    """PyTorch's F.linear: x [..., K] @ weight[N, K]^T + bias (f32 or bf16 x and weight; bias f32)."""
    x = _arr(x, "linear: x", (F32, BF16))
    weight = _arr(weight, "linear: weight", (F32, BF16), 2)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    res2 = None if residual is None else _arr(residual, "linear: residual").reshape(-1, weight.shape[0])
    y = gemm(x2, weight, trans_b=True, bias=None if bias is None else np.asarray(bias, np.float32),
             activation=activation, residual=res2, out_dtype=xk_dtype(x))
    return y.reshape(lead + (weight.shape[0],))


# ---- norms -------------------------------------------------------------------------------------

def _norm_args(x, weight, bias, name):
    x = _arr(x, name + ": x", (F32, BF16))
    rows, hidden = _rows(x)
    t = xk_dtype(x)
    if weight is not None:
        weight = _arr(weight, name + ": weight", (t,), 1)
        if weight.shape[0] != hidden:
            raise ValueError("%s: weight must have %d elements" % (name, hidden))
    if bias is not None:
        bias = _arr(bias, name + ": bias", (t,), 1)
        if bias.shape[0] != hidden:
            raise ValueError("%s: bias must have %d elements" % (name, hidden))
    return x, weight, bias, rows, hidden, t


def rms_norm(x, weight=None, eps=1e-6, out=None):
    """y = x / sqrt(mean(x^2) + eps) * weight over the last dimension (f32 or bf16; weight of x's dtype)."""
    x, weight, _, rows, hidden, t = _norm_args(x, weight, None, "rms_norm")
    out = _out(out, x.shape, x.dtype)
    f = lib().rms_norm_f32 if t == F32 else lib().rms_norm_bf16
    check(f(rows, hidden, _ptr(x), 0, _ptr(weight), eps, _ptr(out), 0))
    return out


def layer_norm(x, weight=None, bias=None, eps=1e-5, out=None):
    """y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension."""
    x, weight, bias, rows, hidden, t = _norm_args(x, weight, bias, "layer_norm")
    out = _out(out, x.shape, x.dtype)
    f = lib().layer_norm_f32 if t == F32 else lib().layer_norm_bf16
    check(f(rows, hidden, _ptr(x), 0, _ptr(weight), _ptr(bias), eps, _ptr(out), 0))
    return out


def _residual(residual, x, name):
    if not isinstance(residual, np.ndarray) or residual.shape != x.shape or residual.dtype != x.dtype or \
            not residual.flags.c_contiguous or not residual.flags.writeable:
        raise ValueError("%s: residual must be a writable C-contiguous array like x (updated in place)" % name)
    return residual


def fused_add_rms_norm(x, residual, weight=None, eps=1e-6, out=None):
    """residual += x (in place); returns rms_norm(residual)."""
    x, weight, _, rows, hidden, t = _norm_args(x, weight, None, "fused_add_rms_norm")
    residual = _residual(residual, x, "fused_add_rms_norm")
    out = _out(out, x.shape, x.dtype)
    f = lib().fused_add_rms_norm_f32 if t == F32 else lib().fused_add_rms_norm_bf16
    check(f(rows, hidden, _ptr(x), 0, _ptr(residual), 0, _ptr(weight), eps, _ptr(out), 0))
    return out


def fused_add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5, out=None):
    """residual += x (in place); returns layer_norm(residual)."""
    x, weight, bias, rows, hidden, t = _norm_args(x, weight, bias, "fused_add_layer_norm")
    residual = _residual(residual, x, "fused_add_layer_norm")
    out = _out(out, x.shape, x.dtype)
    f = lib().fused_add_layer_norm_f32 if t == F32 else lib().fused_add_layer_norm_bf16
    check(f(rows, hidden, _ptr(x), 0, _ptr(residual), 0, _ptr(weight), _ptr(bias), eps, _ptr(out), 0))
    return out


# ---- rope, glu, softmax ------------------------------------------------------------------------

ROPE_STYLES = {"neox": 0, "gptj": 1}


def rope(q, k, positions, *, cos_sin_cache=None, base=10000.0, scaling_factor=1.0, rotary_dim=0, style="neox"):
    """Rotates q [tokens, q_heads, head_dim] and k [tokens, k_heads, head_dim] (or None) in place.
    cos / sin from cos_sin_cache [max_position, rotary_dim] (f32, row = concat(cos, sin)) or
    computed from base / scaling_factor. positions: int64[tokens]."""
    q = np.asarray(q)
    if q.ndim != 3 or not q.flags.c_contiguous or not q.flags.writeable:
        raise ValueError("rope: q must be a writable C-contiguous [tokens, heads, head_dim] array")
    t = xk_dtype(q)
    if t not in (F32, BF16):
        raise TypeError("rope: q must be float32 or bf16 (uint16), got %s" % q.dtype)
    tokens, qh, hd = q.shape
    kh = 0
    if k is not None:
        if k.ndim != 3 or not k.flags.c_contiguous or not k.flags.writeable or k.shape[0] != tokens or k.shape[2] != hd or k.dtype != q.dtype:
            raise ValueError("rope: k must be a C-contiguous [tokens, heads, head_dim] array like q")
        kh = k.shape[1]
    positions = _arr(positions, "rope: positions", None, 1).astype(np.int64, copy=False)
    if positions.shape[0] != tokens:
        raise ValueError("rope: positions must have %d entries" % tokens)
    st = ROPE_STYLES[style]
    common = (st, tokens, qh, kh, hd, rotary_dim, _ptr(q), qh * hd, hd, _ptr(k), kh * hd, hd, _ptr(positions))
    if cos_sin_cache is not None:
        c = _arr(cos_sin_cache, "rope: cos_sin_cache", (F32,), 2)
        if c.shape[1] != (rotary_dim or hd):
            raise ValueError("rope: cos_sin_cache must have rotary_dim=%d columns" % (rotary_dim or hd))
        f = lib().rope_f32 if t == F32 else lib().rope_bf16
        check(f(*common, _ptr(c), c.shape[0]))
    else:
        f = lib().rope_theta_f32 if t == F32 else lib().rope_theta_bf16
        check(f(*common, base, scaling_factor))
    return q, k


def glu(x, activation="silu", out=None, out_dtype=None):
    """y = act(x[..., :inner]) * x[..., inner:] (SwiGLU / GeGLU over a fused [gate | up] projection)."""
    x = _arr(x, "glu: x", (F32, BF16))
    rows, two = _rows(x)
    if two % 2:
        raise ValueError("glu: last dimension %d is odd" % two)
    t = xk_dtype(x)
    if out_dtype is not None and _dt(out_dtype) != t:
        raise ValueError("glu: the C API computes y in x's dtype")
    out = _out(out, x.shape[:-1] + (two // 2,), x.dtype)
    f = lib().glu_f32 if t == F32 else lib().glu_bf16
    check(f(_lib.ACTIVATIONS[activation], rows, two // 2, _ptr(x), 0, _ptr(out), 0))
    return out


def silu_and_mul(x, out=None):
    return glu(x, "silu", out)


def gelu_and_mul(x, approximate="none", out=None):
    return glu(x, "gelu_tanh" if approximate == "tanh" else "gelu_erf", out)


def softmax(x, scale=1.0, causal=False, causal_offset=0, out=None):
    """softmax(scale * x) over the last dimension, optionally causal (row r sees columns <= r + offset)."""
    x = _arr(x, "softmax: x", (F32, BF16))
    rows, cols = _rows(x)
    out = _out(out, x.shape, x.dtype)
    f = lib().softmax_f32 if xk_dtype(x) == F32 else lib().softmax_bf16
    check(f(rows, cols, _ptr(x), 0, _ptr(out), 0, scale, int(bool(causal)), causal_offset))
    return out


# ---- quant -------------------------------------------------------------------------------------

def compute_quant_params(min, max, dtype="u8", symmetric=False):
    """(scale, zero_point) covering [min, max] (PyTorch's observer formula)."""
    s, z = ctypes.c_float(), ctypes.c_int32()
    f = lib().compute_quant_params_u8 if _dt(dtype) == U8 else lib().compute_quant_params_s8
    check(f(min, max, int(bool(symmetric)), ctypes.byref(s), ctypes.byref(z)))
    return s.value, z.value


def quantize(x, scale, zero_point=None, dtype="u8", axis=None, out=None):
    """q = saturate(zp + round_half_even(x / scale)); per tensor (scalar scale) or per channel of a
    2-D x (scale array, axis 1 = per column, 0 = per row). zero_point None: symmetric."""
    x = _arr(x, "quantize: x", (F32,))
    qt = _dt(dtype)
    out = _out(out, x.shape, _XK_TO_NP[qt])
    if axis is None:
        f = lib().quantize_per_tensor_f32_u8 if qt == U8 else lib().quantize_per_tensor_f32_s8
        zp = (128 if qt == U8 else 0) if zero_point is None else int(zero_point)
        check(f(x.size, _ptr(x), float(scale), zp, _ptr(out)))
        return out
    if x.ndim != 2:
        raise ValueError("quantize: per channel needs a 2-D x")
    n = x.shape[axis]
    scale = _arr(scale, "quantize: scale", (F32,), 1)
    zp = None if zero_point is None else _arr(zero_point, "quantize: zero_point", (S32,), 1)
    if scale.shape[0] != n or (zp is not None and zp.shape[0] != n):
        raise ValueError("quantize: scale / zero_point must have %d entries" % n)
    f = lib().quantize_per_channel_f32_u8 if qt == U8 else lib().quantize_per_channel_f32_s8
    check(f(x.shape[0], x.shape[1], _ptr(x), 0, _ptr(scale), _ptr(zp), axis, _ptr(out), 0))
    return out


def dequantize(q, scale, zero_point=None, axis=None, out=None):
    """x = (q - zp) * scale (u8 / s8 -> f32), per tensor or per channel as in quantize."""
    q = _arr(q, "dequantize: q", (U8, S8))
    qt = xk_dtype(q)
    out = _out(out, q.shape, np.float32)
    if axis is None:
        f = lib().dequantize_per_tensor_u8_f32 if qt == U8 else lib().dequantize_per_tensor_s8_f32
        zp = (128 if qt == U8 else 0) if zero_point is None else int(zero_point)
        check(f(q.size, _ptr(q), float(scale), zp, _ptr(out)))
        return out
    if q.ndim != 2:
        raise ValueError("dequantize: per channel needs a 2-D q")
    n = q.shape[axis]
    scale = _arr(scale, "dequantize: scale", (F32,), 1)
    zp = None if zero_point is None else _arr(zero_point, "dequantize: zero_point", (S32,), 1)
    if scale.shape[0] != n or (zp is not None and zp.shape[0] != n):
        raise ValueError("dequantize: scale / zero_point must have %d entries" % n)
    f = lib().dequantize_per_channel_u8_f32 if qt == U8 else lib().dequantize_per_channel_s8_f32
    check(f(q.shape[0], q.shape[1], _ptr(q), 0, _ptr(scale), _ptr(zp), axis, _ptr(out), 0))
    return out


def quantize_dynamic_per_token(x, dtype="u8", symmetric=False, smooth=None):
    """Per-row dynamic quantization of a 2-D f32 / bf16 x: returns (q, scales f32[rows], zero_points
    int32[rows] or None when symmetric). Each row's range is that of its finite values; NaN quantizes
    to the zero point, +-inf saturate."""
    x = _arr(x, "quantize_dynamic_per_token: x", (F32, BF16), 2)
    qt = _dt(dtype)
    rows, cols = x.shape
    q = np.empty(x.shape, _XK_TO_NP[qt])
    scales = np.empty(rows, np.float32)
    zps = None if symmetric else np.empty(rows, np.int32)
    if smooth is not None:
        smooth = _arr(smooth, "quantize_dynamic_per_token: smooth", (F32,), 1)
        if smooth.shape[0] != cols:
            raise ValueError("quantize_dynamic_per_token: smooth must have %d entries" % cols)
    name = "quantize_dynamic_per_token_%s_%s" % ("f32" if xk_dtype(x) == F32 else "bf16", "u8" if qt == U8 else "s8")
    check(getattr(lib(), name)(rows, cols, _ptr(x), 0, _ptr(smooth), _ptr(q), 0, _ptr(scales), _ptr(zps),
                               int(bool(symmetric))))
    return q, scales, zps


# ---- embedding_bag -----------------------------------------------------------------------------

EMBEDDING_BAG_MODES = {"sum": 0, "mean": 1, "max": 2}


def embedding_bag(table, indices, offsets, mode="sum", per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """torch.nn.functional.embedding_bag over a 2-D f32 (or bf16 -> f32 output) table with 1-D
    indices and offsets (int64, or int32 for an f32 table)."""
    table = _arr(table, "embedding_bag: table", (F32, BF16), 2)
    indices = _arr(indices, "embedding_bag: indices", None, 1)
    offsets = _arr(offsets, "embedding_bag: offsets", None, 1)
    idx32 = indices.dtype == np.int32 and offsets.dtype == np.int32 and xk_dtype(table) == F32
    if not idx32:
        indices = indices.astype(np.int64, copy=False)
        offsets = offsets.astype(np.int64, copy=False)
    d = _lib.EmbeddingBagDesc()
    check(lib().embedding_bag_desc_init(ctypes.byref(d), table.shape[0], table.shape[1]))
    d.mode = EMBEDDING_BAG_MODES[mode]
    d.include_last_offset = int(bool(include_last_offset))
    d.padding_idx = -1 if padding_idx is None else (padding_idx % table.shape[0])
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    out = np.empty((bags, table.shape[1]), np.float32)
    if per_sample_weights is not None:
        per_sample_weights = _arr(per_sample_weights, "embedding_bag: per_sample_weights", (F32,), 1)
        if per_sample_weights.shape != indices.shape:
            raise ValueError("embedding_bag: per_sample_weights must match indices")
    f = lib().embedding_bag_f32_i32 if idx32 else (lib().embedding_bag_f32 if xk_dtype(table) == F32
                                                     else lib().embedding_bag_bf16_f32)
    check(f(ctypes.byref(d), _ptr(table), indices.shape[0], _ptr(indices), bags, _ptr(offsets),
            _ptr(per_sample_weights), _ptr(out)))
    return out


# ---- conv --------------------------------------------------------------------------------------

def conv_output_size(input, kernel, stride=1, pad_begin=0, pad_end=0, dilation=1):
    v = ctypes.c_int64()
    check(lib().conv_output_size(input, kernel, stride, pad_begin, pad_end, dilation, ctypes.byref(v)))
    return v.value


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, activation=None, out_dtype=None):
    """torch.nn.functional.conv2d on NCHW x [n, c, h, w] and OIHW weight [oc, c/groups, kh, kw]
    (f32, or bf16 with a bf16 or f32 output); bias f32[oc]."""
    x = _arr(x, "conv2d: x", (F32, BF16), 4)
    weight = _arr(weight, "conv2d: weight", (xk_dtype(x),), 4)
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)
    (sh, sw), (ph, pw), (dh, dw) = pair(stride), pair(padding), pair(dilation)
    n, c, h, w = x.shape
    oc, cg, kh, kw = weight.shape
    if cg * groups != c:
        raise ValueError("conv2d: weight has %d input channels per group, x has %d channels and groups=%d" %
                         (cg, c, groups))
    d = _lib.Conv2dDesc()
    check(lib().conv2d_desc_init(ctypes.byref(d), n, c, h, w, oc, kh, kw))
    d.stride_h, d.stride_w, d.pad_top, d.pad_bottom, d.pad_left, d.pad_right = sh, sw, ph, ph, pw, pw
    d.dilation_h, d.dilation_w, d.groups = dh, dw, groups
    d.activation = _lib.ACTIVATIONS[activation]
    oh = conv_output_size(h, kh, sh, ph, ph, dh)
    ow = conv_output_size(w, kw, sw, pw, pw, dw)
    t = xk_dtype(x)
    ot = _dt(out_dtype) if out_dtype is not None else t
    out = np.empty((n, oc, oh, ow), _XK_TO_NP[ot])
    if bias is not None:
        bias = _arr(bias, "conv2d: bias", (F32,), 1)
        if bias.shape[0] != oc:
            raise ValueError("conv2d: bias must have %d entries" % oc)
    if t == F32:
        f = lib().conv2d_f32
    else:
        f = lib().conv2d_bf16 if ot == BF16 else lib().conv2d_bf16_f32
    check(f(ctypes.byref(d), _ptr(x), _ptr(weight), _ptr(bias), _ptr(out), None))
    return out
