"""torch.ops.xk.*: libxk ops registered with torch.library (schema, a CPU kernel calling libxk on
data_ptr() through ctypes, and a fake kernel so torch.compile traces through them). Nothing here
is compiled against torch: the same files work in every torch with torch.library.register_fake
(>= 2.4)."""
import ctypes
import threading
import weakref
from collections import OrderedDict

import torch

from .. import _lib, _quant
from .._lib import BF16, F32, S8, U8, XkError, check

L = _lib.lib()
_XK = {torch.float32: F32, torch.bfloat16: BF16, torch.int8: S8, torch.uint8: U8}
_ACT = _lib.ACTIVATIONS

lib = torch.library.Library("xk", "DEF")  # noqa: the registrations live as long as this object


IMPLS = {}  # name -> the CPU kernel (the xk modules call it directly in eager mode)


def _define(schema, cpu, fake):
    name = schema.split("(")[0]
    IMPLS[name] = cpu
    lib.define(schema)
    lib.impl(name, cpu, "CPU")
    torch.library.register_fake("xk::" + name, fake, lib=lib)


def _float_dtype(x, op):
    t = _XK.get(x.dtype)
    if t not in (F32, BF16):
        raise TypeError("xk.%s: x must be float32 or bfloat16, got %s" % (op, x.dtype))
    return t


def _same(t, ref, op, name):
    if t is not None and t.dtype != ref.dtype:
        raise TypeError("xk.%s: %s must be %s like x, got %s" % (op, name, ref.dtype, t.dtype))


def _c(t):
    return t if t.is_contiguous() else t.contiguous()


# ---- per-process derived data of weight tensors (packed GEMM weights, f32 biases) ------------------
# Keyed by the tensors' identity (one Python object per TensorImpl) and version counters, so an
# in-place update (load_state_dict, copy_) repacks; entries go when a tensor is freed.

class _Derived:
    def __init__(self):
        self._d = {}

    @staticmethod
    def _version(t):
        try:
            return t._version
        except RuntimeError:  # inference tensors have no version counter
            return -1

    def get(self, tag, tensors, make):
        key = (tag,) + tuple(map(id, tensors))
        versions = tuple(map(self._version, tensors))
        e = self._d.get(key)
        if e is not None and e[1] == versions and all(r() is t for r, t in zip(e[0], tensors)):
            return e[2]
        value = make()
        pop = self._d.pop
        refs = tuple(weakref.ref(t, lambda _, k=key: pop(k, None)) for t in tensors)
        self._d[key] = (refs, versions, value)
        return value

    def get1(self, tag, t, make):
        """get() of one tensor (the per-call path of linear)."""
        key = (tag, id(t))
        e = self._d.get(key)
        try:
            v = t._version
        except RuntimeError:
            v = -1
        if e is not None and e[1][0] == v and e[0][0]() is t:
            return e[2]
        return self.get(tag, (t,), make)

    def clear(self):
        self._d.clear()


_derived = _Derived()


class _Packed:
    """A packed weight, the calls it serves — fam = _ANY_M (every M), _DECODE (M <= 16) or _PREFILL
    (M > 16), decided when packing (_pack_family) — and the ISA cap it was packed under."""
    __slots__ = ("h", "fam", "cap")

    def __init__(self, h, fam, cap):
        self.h = h
        self.fam = fam
        self.cap = cap

    def __del__(self):
        if self.h:
            L.gemm_packed_b_destroy(self.h)
            self.h = None


class _Plan:
    __slots__ = ("h", "desc")

    def __init__(self, desc):
        self.desc = desc
        h = ctypes.c_void_p()
        check(L.gemm_plan_create(ctypes.byref(desc), ctypes.byref(h)))
        self.h = h.value

    def __del__(self):
        if self.h:
            L.gemm_plan_destroy(self.h)
            self.h = None


_plans = OrderedDict()
_PLAN_CAPACITY = 512


def _plan(M, N, K, ab_type, c_type, bias, act, res_type, cap=None):
    """The cached plan (its kernel picked under the cap when it was made; `cap` given: kept apart per
    cap, as the packing plans are, whose layout must be one the kernels under that cap read)."""
    key = (M, N, K, ab_type, c_type, bias, act, res_type) if cap is None else \
        (M, N, K, ab_type, c_type, bias, act, res_type, cap)
    p = _plans.get(key)
    if p is None:
        d = _lib.GemmDesc()
        L.gemm_desc_init(ctypes.byref(d))
        d.M, d.N, d.K = M, N, K
        d.trans_b = 1  # weight [N, K] = B^T
        d.a_type = d.b_type = ab_type
        d.c_type = c_type
        d.bias = bias
        d.act = act
        if res_type is not None:
            d.residual, d.residual_type = 1, res_type
        p = _Plan(d)
        _plans[key] = p
        if len(_plans) > _PLAN_CAPACITY:
            _plans.popitem(last=False)
    return p


# fp32 weights: the blocked GEMM kernel's layout (packed by an M = 256 plan) serves every M where the
# decode kernel reads it, from AVX-512 up ("jit:avx512:gemv:blocked": M <= 16, 0.9-1.1x the time of its
# own panel layout, 1 thread, Zen 4). Below AVX-512 (32-column panels there, 16 in the AVX2 blocked
# layout) a module run both ways holds two packs: decode (M <= 16 rows: the GEMV kernels' panel layout,
# packed by an M = 1 plan) and prefill (M > 16, blocked) — any plan reads either, but a prefill GEMM on
# the panel layout runs the GEMV kernel for every row ("jit:avx2:panel", 1.0-1.3x slower than the
# blocked kernel, 1.7-2.8x with a fused GELU), and M <= 16 on the AVX2 blocked layout runs the blocked
# kernel. bf16 keeps one pack everywhere (its decode kernels read the blocked layout).
# Which of these a pack is gets decided when it is made, from the ISA cap then (XK_MAX_ISA,
# xkernels.set_max_isa), and recorded with it (_Packed.fam): a weight packed once for every M keeps
# serving every M after the cap drops (its layout is read by whatever kernel the plans find for it
# under the new cap, or refused with an error naming the layout), and one packed for one family below
# AVX-512 is joined by a pack of the other family (decided then) when a call of the other kind comes.
_DECODE_MAX_M = 16
_PREFILL_PACK_M = 256
_ANY_M, _DECODE, _PREFILL = "any", "decode", "prefill"
_AVX512 = _lib.ISA_NAMES.index("avx512")


def _cap_now():
    v = ctypes.c_int()
    check(L.get_max_isa(ctypes.byref(v)))
    return v.value


def _pack_family(t, M, cap):
    """The calls a weight packed under `cap` for an M-row call will serve."""
    if t != F32 or cap >= _AVX512:
        return _ANY_M
    return _PREFILL if M > _DECODE_MAX_M else _DECODE


def _pack_now(weight, t, M=1):
    """weight [N, K] packed as B^T for the calls of M rows under the current ISA cap (any plan of this
    K, N, dtype reads it, whatever M: the family only picks the faster layout)."""
    w = _c(weight.detach())
    N, K = w.shape
    cap = _cap_now()
    fam = _pack_family(t, M, cap)
    plan = _plan(_PREFILL_PACK_M if t == F32 and fam != _DECODE else 1, N, K, t, t, 0, 0, None, cap)
    h = ctypes.c_void_p()
    check(L.gemm_plan_pack_b(plan.h, w.data_ptr(), ctypes.byref(h)))
    return _Packed(h.value, fam, cap)


def _other_family(p, M):
    """True when the pack p does not serve calls of M rows (its family is the other one)."""
    return p.fam is not _ANY_M and (p.fam is _PREFILL) is not (M > _DECODE_MAX_M)


def _packed(tag, tensors, t, M, weight_fn):
    """The packed weight of `tensors` (weight_fn() builds the [N, K] weight) for a call of M rows: the
    first pack made, or, when that one serves the other family, the pack of this call's family."""
    p = _derived.get(tag, tensors, lambda: _pack_now(weight_fn(), t, M))
    if _other_family(p, M):
        p = _derived.get(tag + (":prefill" if M > _DECODE_MAX_M else ":decode"), tensors,
                         lambda: _pack_now(weight_fn(), t, M))
    return p


def _pack(weight, t, M=1):
    return _packed("pack", (weight,), t, M, lambda: weight)


class _StalePack(Exception):
    """A GEMM refused a pack made under another ISA cap (a layout no kernel under the cap now reads)."""


def _repacked(tag, tensors, t, M, weight_fn):
    """After _StalePack: the packs of `tensors` made under another cap than the current one are
    dropped (the next calls of either family make theirs again), then this call's pack is made."""
    cap, ids = _cap_now(), tuple(map(id, tensors))
    for k in [k for k, e in _derived._d.items()
              if k[1:] == ids and k[0] in (tag, tag + ":prefill", tag + ":decode") and e[2].cap != cap]:
        _derived._d.pop(k, None)
    return _packed(tag, tensors, t, M, weight_fn)


def _bias_f32(bias):
    if bias.dtype == torch.float32 and bias.is_contiguous():
        return bias
    return _derived.get1("bias32", bias, lambda: bias.detach().float().contiguous())


_T32, _T16 = torch.float32, torch.bfloat16
_GemmArgs = _lib.GemmArgs
_byref = ctypes.byref
_run_packed = L.gemm_plan_run_packed


_tls = threading.local()  # one reusable xk_gemm_args per thread (filling it beats building one)


def _gemm_packed(x2, packed, N, K, t, bias, act, residual, out, M=None):
    """out[M, N] = x2[M, K] packed^T (+ bias, act, residual): x2 / out contiguous (x2 any shape when M
    is given: its rows are read as M x K)."""
    if M is None:
        M = x2.shape[0]
    res_type = None if residual is None else (F32 if residual.dtype is _T32 else BF16)
    key = (M, N, K, t, t, 0 if bias is None else 1, act, res_type)
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(*key)
    try:
        args = _tls.gemm_args
    except AttributeError:
        args = _tls.gemm_args = _GemmArgs()
        _tls.gemm_args_ref = _byref(args)
    args.A = x2.data_ptr()
    args.C = out.data_ptr()
    args.bias = None if bias is None else bias.data_ptr()
    args.residual = None if residual is None else residual.data_ptr()
    st = _run_packed(plan.h, _tls.gemm_args_ref, packed.h)
    if st:
        try:
            check(st)
        except XkError:
            if packed.cap != _cap_now():
                raise _StalePack() from None  # the caller packs again and retries
            raise


def _out_shape(shape, N):
    """shape[:-1] + (N,) as a tuple (slicing a torch.Size costs more than this)."""
    nd = len(shape)
    if nd == 2:
        return (shape[0], N)
    if nd == 3:
        return (shape[0], shape[1], N)
    return (N,) if nd == 1 else tuple(shape)[:-1] + (N,)


# ---- linear --------------------------------------------------------------------------------------

def _linear_checks(x, weight, bias, residual, op):
    dt = x.dtype
    t = F32 if dt is _T32 else (BF16 if dt is _T16 else _float_dtype(x, op))
    ws = weight.shape
    if weight.dtype is not dt or len(ws) != 2 or x.dim() == 0 or ws[1] != x.shape[-1]:
        _same(weight, x, op, "weight")
        raise ValueError("xk.%s: weight must be [N, %d], got %s" % (op, x.shape[-1] if x.dim() else 0, tuple(ws)))
    N = ws[0]
    if bias is not None and (bias.shape != (N,) or not bias.is_floating_point()):
        raise ValueError("xk.%s: bias must be a float vector of %d elements" % (op, N))
    if residual is not None and (residual.shape != x.shape[:-1] + (N,) or
                                 residual.dtype not in (torch.float32, torch.bfloat16)):
        raise ValueError("xk.%s: residual must be a float32 / bfloat16 tensor of shape %s" %
                         (op, tuple(x.shape[:-1]) + (N,)))
    return t, N


def _linear(x, weight, bias=None, activation="none", residual=None):
    # the per-call path: checks inlined for the common case, no views, one allocation
    dt, xs, ws = x.dtype, x.shape, weight.shape
    if weight.dtype is not dt or len(ws) != 2 or not xs or ws[1] != xs[-1] or (dt is not _T32 and dt is not _T16) \
            or (bias is not None and (bias.shape != (ws[0],) or not bias.is_floating_point())) or residual is not None:
        t, N = _linear_checks(x, weight, bias, residual, "linear")
    else:
        t, N = (F32 if dt is _T32 else BF16), ws[0]
    K = xs[-1]
    out = x.new_empty(_out_shape(xs, N))
    M = x.numel() // K if K else 0
    if M == 0 or N == 0:
        return _linear_empty(out, bias, activation, residual)
    if not x.is_contiguous():
        x = x.contiguous()
    packed = _derived.get1("pack", weight, lambda: _pack_now(weight, t, M))
    if packed.fam is not _ANY_M and _other_family(packed, M):
        packed = _pack(weight, t, M)
    if bias is not None and (bias.dtype is not _T32 or not bias.is_contiguous()):
        bias = _bias_f32(bias)
    if residual is not None and not residual.is_contiguous():
        residual = residual.contiguous()
    try:
        _gemm_packed(x, packed, N, K, t, bias, _ACT[activation], residual, out, M)
    except _StalePack:
        packed = _repacked("pack", (weight,), t, M, lambda: weight)
        _gemm_packed(x, packed, N, K, t, bias, _ACT[activation], residual, out, M)
    return out


def _linear_empty(out, bias, activation, residual):
    """K == 0 (nothing to pack): act(bias) + residual."""
    if out.numel() == 0:
        return out
    r = torch.zeros_like(out) if bias is None else bias.to(out.dtype).expand_as(out).clone()
    act = {"none": lambda v: v, "relu": torch.relu, "silu": torch.nn.functional.silu,
           "gelu": torch.nn.functional.gelu, "gelu_erf": torch.nn.functional.gelu,
           "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[activation](r)
    return act + residual.to(out.dtype) if residual is not None else act


def _linear_fake(x, weight, bias=None, activation="none", residual=None):
    _linear_checks(x, weight, bias, residual, "linear")
    return x.new_empty(x.shape[:-1] + (weight.shape[0],))


_define("linear(Tensor x, Tensor weight, Tensor? bias=None, str activation=\"none\", Tensor? residual=None) -> Tensor",
        _linear, _linear_fake)


def _gated_checks(x, w_gate, w_up, activation):
    t = _float_dtype(x, "gated_linear")
    _same(w_gate, x, "gated_linear", "w_gate")
    _same(w_up, x, "gated_linear", "w_up")
    if w_gate.dim() != 2 or tuple(w_gate.shape) != tuple(w_up.shape) or w_gate.shape[1] != x.shape[-1]:
        raise ValueError("xk.gated_linear: w_gate and w_up must both be [I, %d], got %s and %s" %
                         (x.shape[-1], tuple(w_gate.shape), tuple(w_up.shape)))
    if activation not in _ACT:
        raise ValueError("xk.gated_linear: unknown activation %r" % activation)
    return t


def _gated_linear(x, w_gate, w_up, activation="silu"):
    """act(x w_gate^T) * (x w_up^T): one GEMM against the packed [w_gate; w_up], then the GLU."""
    t = _gated_checks(x, w_gate, w_up, activation)
    I, K = w_gate.shape
    out = x.new_empty(x.shape[:-1] + (I,))
    if out.numel() == 0:
        return out
    x2 = _c(x).view(-1, K)
    M = x2.shape[0]
    cat = lambda: torch.cat([w_gate.detach(), w_up.detach()])  # noqa: E731
    packed = _packed("pack_gate_up", (w_gate, w_up), t, M, cat)
    h = x.new_empty((M, 2 * I))
    try:
        _gemm_packed(x2, packed, 2 * I, K, t, None, 0, None, h)
    except _StalePack:
        _gemm_packed(x2, _repacked("pack_gate_up", (w_gate, w_up), t, M, cat), 2 * I, K, t, None, 0, None, h)
    f = L.glu_f32 if t == F32 else L.glu_bf16
    check(f(_ACT[activation], M, I, h.data_ptr(), 0, out.data_ptr(), 0))
    return out


def _gated_linear_fake(x, w_gate, w_up, activation="silu"):
    _gated_checks(x, w_gate, w_up, activation)
    return x.new_empty(x.shape[:-1] + (w_gate.shape[0],))


_define("gated_linear(Tensor x, Tensor w_gate, Tensor w_up, str activation=\"silu\") -> Tensor",
        _gated_linear, _gated_linear_fake)


# ---- norms ---------------------------------------------------------------------------------------

def _norm_checks(x, weight, bias, op):
    t = _float_dtype(x, op)
    H = x.shape[-1] if x.dim() else 1
    for name, v in (("weight", weight), ("bias", bias)):
        if v is not None:
            _same(v, x, op, name)
            if v.dim() != 1 or v.shape[0] != H:
                raise ValueError("xk.%s: %s must have %d elements" % (op, name, H))
    return t, H


def _opt(v):
    return None if v is None else _c(v).data_ptr()


_RMS = {_T32: L.rms_norm_f32, _T16: L.rms_norm_bf16}
_LN = {_T32: L.layer_norm_f32, _T16: L.layer_norm_bf16}


def _norm_prologue(x, weight, bias, table, op):
    f = table.get(x.dtype)
    if f is None or x.dim() == 0:
        _float_dtype(x, op)
        raise ValueError("xk.%s: x must have at least one dimension" % op)
    H = x.shape[-1]
    for v in (weight, bias):
        if v is not None and (v.dtype is not x.dtype or v.shape != (H,)):
            _norm_checks(x, weight, bias, op)
    return f, H


def _rms_norm(x, weight=None, eps=1e-6):
    f, H = _norm_prologue(x, weight, None, _RMS, "rms_norm")
    if not x.is_contiguous():
        x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        st = f(n // H, H, x.data_ptr(), 0, None if weight is None else _c(weight).data_ptr(), eps, out.data_ptr(), 0)
        if st:
            check(st)
    return out


def _layer_norm(x, weight=None, bias=None, eps=1e-5):
    f, H = _norm_prologue(x, weight, bias, _LN, "layer_norm")
    if not x.is_contiguous():
        x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        st = f(n // H, H, x.data_ptr(), 0, None if weight is None else _c(weight).data_ptr(),
               None if bias is None else _c(bias).data_ptr(), eps, out.data_ptr(), 0)
        if st:
            check(st)
    return out


def _norm_fake(x, weight=None, bias=None, eps=1e-5):
    _norm_checks(x, weight, bias, "norm")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _rms_norm_fake(x, weight=None, eps=1e-6):
    return _norm_fake(x, weight, None, eps)


_define("rms_norm(Tensor x, Tensor? weight=None, float eps=1e-06) -> Tensor", _rms_norm, _rms_norm_fake)
_define("layer_norm(Tensor x, Tensor? weight=None, Tensor? bias=None, float eps=1e-05) -> Tensor",
        _layer_norm, _norm_fake)


def _residual_checks(x, residual, op):
    if tuple(residual.shape) != tuple(x.shape) or residual.dtype != x.dtype or not residual.is_contiguous():
        raise ValueError("xk.%s: residual must be a contiguous tensor of x's shape and dtype" % op)


def _fused_add_rms_norm(x, residual, weight=None, eps=1e-6):
    t, H = _norm_checks(x, weight, None, "fused_add_rms_norm")
    _residual_checks(x, residual, "fused_add_rms_norm")
    xc = _c(x)
    out = torch.empty_like(xc)
    if out.numel():
        f = L.fused_add_rms_norm_f32 if t == F32 else L.fused_add_rms_norm_bf16
        check(f(xc.numel() // H, H, xc.data_ptr(), 0, residual.data_ptr(), 0, _opt(weight), eps, out.data_ptr(), 0))
    return out


def _fused_add_layer_norm(x, residual, weight=None, bias=None, eps=1e-5):
    t, H = _norm_checks(x, weight, bias, "fused_add_layer_norm")
    _residual_checks(x, residual, "fused_add_layer_norm")
    xc = _c(x)
    out = torch.empty_like(xc)
    if out.numel():
        f = L.fused_add_layer_norm_f32 if t == F32 else L.fused_add_layer_norm_bf16
        check(f(xc.numel() // H, H, xc.data_ptr(), 0, residual.data_ptr(), 0, _opt(weight), _opt(bias), eps,
                out.data_ptr(), 0))
    return out


def _fused_add_norm_fake(x, residual, weight=None, bias=None, eps=1e-5):
    _norm_checks(x, weight, bias, "fused_add_norm")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _fused_add_rms_norm_fake(x, residual, weight=None, eps=1e-6):
    return _fused_add_norm_fake(x, residual, weight, None, eps)


_define("fused_add_rms_norm(Tensor x, Tensor(a!) residual, Tensor? weight=None, float eps=1e-06) -> Tensor",
        _fused_add_rms_norm, _fused_add_rms_norm_fake)
_define("fused_add_layer_norm(Tensor x, Tensor(a!) residual, Tensor? weight=None, Tensor? bias=None, "
        "float eps=1e-05) -> Tensor", _fused_add_layer_norm, _fused_add_norm_fake)


# ---- rotary embedding (vLLM's rotary_embedding: query / key rotated in place) ------------------------

def _rope_checks(positions, query, key, head_size, cos_sin_cache):
    t = _float_dtype(query, "rotary_embedding")
    tokens = positions.numel()
    if query.numel() % (tokens * head_size if tokens else 1) or (key is not None and key.dtype != query.dtype):
        raise ValueError("xk.rotary_embedding: query [tokens, heads * head_size] with tokens = positions.numel()")
    if cos_sin_cache.dim() != 2:
        raise ValueError("xk.rotary_embedding: cos_sin_cache must be [max_position, rotary_dim]")
    return t


def _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    t = _rope_checks(positions, query, key, head_size, cos_sin_cache)
    tokens = positions.numel()
    if tokens == 0:
        return
    for name, v in (("query", query), ("key", key)):
        if v is not None and not v.is_contiguous():
            raise ValueError("xk.rotary_embedding: %s must be contiguous (rotated in place)" % name)
    qh = query.numel() // (tokens * head_size)
    kh = 0 if key is None else key.numel() // (tokens * head_size)
    pos = positions.reshape(-1)
    pos = _c(pos if pos.dtype == torch.int64 else pos.long())
    cache = cos_sin_cache
    if cache.dtype != torch.float32 or not cache.is_contiguous():
        cache = _derived.get("cache32", (cos_sin_cache,), lambda: cos_sin_cache.detach().float().contiguous())
    f = L.rope_f32 if t == F32 else L.rope_bf16
    check(f(0 if is_neox else 1, tokens, qh, kh, head_size, cache.shape[1], query.data_ptr(), qh * head_size, head_size,
            None if key is None else key.data_ptr(), kh * head_size, head_size, pos.data_ptr(), cache.data_ptr(),
            cache.shape[0]))


def _rotary_embedding_fake(positions, query, key, head_size, cos_sin_cache, is_neox=True):
    _rope_checks(positions, query, key, head_size, cos_sin_cache)


_define("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "
        "bool is_neox=True) -> ()", _rotary_embedding, _rotary_embedding_fake)


# ---- gated activations, softmax ------------------------------------------------------------------

def _glu_checks(x, op):
    t = _float_dtype(x, op)
    if x.dim() == 0 or x.shape[-1] % 2:
        raise ValueError("xk.%s: the last dimension must be even (the [gate | up] concatenation)" % op)
    return t


_GLU = {_T32: L.glu_f32, _T16: L.glu_bf16}


def _glu(x, act, op):
    f = _GLU.get(x.dtype)
    if f is None or x.dim() == 0 or x.shape[-1] % 2:
        _glu_checks(x, op)
    if not x.is_contiguous():
        x = x.contiguous()
    I = x.shape[-1] // 2
    out = x.new_empty(x.shape[:-1] + (I,))
    n = out.numel()
    if n:
        st = f(act, n // I, I, x.data_ptr(), 0, out.data_ptr(), 0)
        if st:
            check(st)
    return out


def _glu_fake(x, op):
    _glu_checks(x, op)
    return x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,))


_define("silu_and_mul(Tensor x) -> Tensor", lambda x: _glu(x, _ACT["silu"], "silu_and_mul"),
        lambda x: _glu_fake(x, "silu_and_mul"))
_define("gelu_and_mul(Tensor x, str approximate=\"none\") -> Tensor",
        lambda x, approximate="none": _glu(x, _ACT["gelu_tanh" if approximate == "tanh" else "gelu_erf"], "gelu_and_mul"),
        lambda x, approximate="none": _glu_fake(x, "gelu_and_mul"))


_SOFTMAX = {_T32: L.softmax_f32, _T16: L.softmax_bf16}


def _softmax(x, scale=1.0, causal=False, causal_offset=0):
    f = _SOFTMAX.get(x.dtype)
    if f is None:
        _float_dtype(x, "softmax")
    if not x.is_contiguous():
        x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        cols = x.shape[-1]
        st = f(n // cols, cols, x.data_ptr(), 0, out.data_ptr(), 0, scale, causal, causal_offset)
        if st:
            check(st)
    return out


def _softmax_fake(x, scale=1.0, causal=False, causal_offset=0):
    _float_dtype(x, "softmax")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


_define("softmax(Tensor x, float scale=1.0, bool causal=False, int causal_offset=0) -> Tensor", _softmax, _softmax_fake)


# ---- quantize / dequantize -----------------------------------------------------------------------

def _qdtype(dtype, op):
    if dtype not in (torch.uint8, torch.int8):
        raise TypeError("xk.%s: dtype must be torch.uint8 or torch.int8, got %s" % (op, dtype))
    return dtype == torch.uint8


def _quantize_per_tensor(x, scale, zero_point, dtype):
    u8 = _qdtype(dtype, "quantize_per_tensor")
    if x.dtype != torch.float32:
        raise TypeError("xk.quantize_per_tensor: x must be float32")
    xc = _c(x)
    q = torch.empty(x.shape, dtype=dtype)
    f = L.quantize_per_tensor_f32_u8 if u8 else L.quantize_per_tensor_f32_s8
    check(f(xc.numel(), xc.data_ptr(), scale, zero_point, q.data_ptr()))
    return q


def _quantize_per_tensor_fake(x, scale, zero_point, dtype):
    _qdtype(dtype, "quantize_per_tensor")
    return torch.empty(x.shape, dtype=dtype, device=x.device)


_define("quantize_per_tensor(Tensor x, float scale, int zero_point, ScalarType dtype) -> Tensor",
        _quantize_per_tensor, _quantize_per_tensor_fake)


def _dequantize_per_tensor(q, scale, zero_point):
    _qdtype(q.dtype, "dequantize_per_tensor")
    qc = _c(q)
    x = torch.empty(q.shape, dtype=torch.float32)
    f = L.dequantize_per_tensor_u8_f32 if q.dtype == torch.uint8 else L.dequantize_per_tensor_s8_f32
    check(f(qc.numel(), qc.data_ptr(), scale, zero_point, x.data_ptr()))
    return x


def _dequantize_per_tensor_fake(q, scale, zero_point):
    _qdtype(q.dtype, "dequantize_per_tensor")
    return torch.empty(q.shape, dtype=torch.float32, device=q.device)


_define("dequantize_per_tensor(Tensor q, float scale, int zero_point) -> Tensor",
        _dequantize_per_tensor, _dequantize_per_tensor_fake)


def _per_channel_checks(x, scales, zero_points, axis, op):
    if x.dim() != 2 or axis not in (0, 1):
        raise ValueError("xk.%s: x must be 2-D and axis 0 or 1" % op)
    n = x.shape[axis]
    if scales.dtype != torch.float32 or scales.shape != (n,):
        raise ValueError("xk.%s: scales must be float32 [%d]" % (op, n))
    if zero_points is not None and (zero_points.dtype != torch.int32 or zero_points.shape != (n,)):
        raise ValueError("xk.%s: zero_points must be int32 [%d]" % (op, n))


def _quantize_per_channel(x, scales, zero_points, axis, dtype):
    u8 = _qdtype(dtype, "quantize_per_channel")
    if x.dtype != torch.float32:
        raise TypeError("xk.quantize_per_channel: x must be float32")
    _per_channel_checks(x, scales, zero_points, axis, "quantize_per_channel")
    xc = _c(x)
    q = torch.empty(x.shape, dtype=dtype)
    f = L.quantize_per_channel_f32_u8 if u8 else L.quantize_per_channel_f32_s8
    check(f(x.shape[0], x.shape[1], xc.data_ptr(), 0, _opt(scales), _opt(zero_points), axis, q.data_ptr(), 0))
    return q


def _quantize_per_channel_fake(x, scales, zero_points, axis, dtype):
    _qdtype(dtype, "quantize_per_channel")
    _per_channel_checks(x, scales, zero_points, axis, "quantize_per_channel")
    return torch.empty(x.shape, dtype=dtype, device=x.device)


_define("quantize_per_channel(Tensor x, Tensor scales, Tensor? zero_points, int axis, ScalarType dtype) -> Tensor",
        _quantize_per_channel, _quantize_per_channel_fake)


def _dequantize_per_channel(q, scales, zero_points, axis):
    _qdtype(q.dtype, "dequantize_per_channel")
    _per_channel_checks(q, scales, zero_points, axis, "dequantize_per_channel")
    qc = _c(q)
    x = torch.empty(q.shape, dtype=torch.float32)
    f = L.dequantize_per_channel_u8_f32 if q.dtype == torch.uint8 else L.dequantize_per_channel_s8_f32
    check(f(q.shape[0], q.shape[1], qc.data_ptr(), 0, _opt(scales), _opt(zero_points), axis, x.data_ptr(), 0))
    return x


def _dequantize_per_channel_fake(q, scales, zero_points, axis):
    _qdtype(q.dtype, "dequantize_per_channel")
    _per_channel_checks(q, scales, zero_points, axis, "dequantize_per_channel")
    return torch.empty(q.shape, dtype=torch.float32, device=q.device)


_define("dequantize_per_channel(Tensor q, Tensor scales, Tensor? zero_points, int axis) -> Tensor",
        _dequantize_per_channel, _dequantize_per_channel_fake)


def _dynamic_quantize(x, dtype, symmetric=False):
    u8 = _qdtype(dtype, "dynamic_quantize_per_token")
    t = _float_dtype(x, "dynamic_quantize_per_token")
    xc = _c(x)
    cols = x.shape[-1]
    rows = xc.numel() // cols if cols else 0
    q = torch.empty(x.shape, dtype=dtype)
    scales = torch.empty(x.shape[:-1], dtype=torch.float32)
    zps = torch.full(x.shape[:-1], 128 if (u8 and symmetric) else 0, dtype=torch.int32)
    if q.numel():
        f = getattr(L, "quantize_dynamic_per_token_%s_%s" % ("f32" if t == F32 else "bf16", "u8" if u8 else "s8"))
        check(f(rows, cols, xc.data_ptr(), 0, None, q.data_ptr(), 0, scales.data_ptr(),
                None if symmetric else zps.data_ptr(), int(symmetric)))
    return q, scales, zps


def _dynamic_quantize_fake(x, dtype, symmetric=False):
    _qdtype(dtype, "dynamic_quantize_per_token")
    _float_dtype(x, "dynamic_quantize_per_token")
    return (torch.empty(x.shape, dtype=dtype, device=x.device),
            torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device),
            torch.empty(x.shape[:-1], dtype=torch.int32, device=x.device))


_define("dynamic_quantize_per_token(Tensor x, ScalarType dtype, bool symmetric=False) -> (Tensor, Tensor, Tensor)",
        _dynamic_quantize, _dynamic_quantize_fake)


# ---- embedding_bag -------------------------------------------------------------------------------

def _eb_checks(weight, indices, offsets, mode, per_sample_weights, include_last_offset):
    if weight.dim() != 2 or weight.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError("xk.embedding_bag: weight must be a 2-D float32 / bfloat16 table")
    if indices.dim() != 1 or offsets.dim() != 1:
        raise ValueError("xk.embedding_bag: indices and offsets must be 1-D")
    if mode not in (0, 1, 2):
        raise ValueError("xk.embedding_bag: mode must be 0 (sum), 1 (mean) or 2 (max)")
    if per_sample_weights is not None and (per_sample_weights.shape != indices.shape or
                                           per_sample_weights.dtype != torch.float32):
        raise ValueError("xk.embedding_bag: per_sample_weights must be float32 like indices")
    return offsets.shape[0] - (1 if include_last_offset else 0)


def _embedding_bag(weight, indices, offsets, mode=0, per_sample_weights=None, include_last_offset=False,
                   padding_idx=None):
    bags = _eb_checks(weight, indices, offsets, mode, per_sample_weights, include_last_offset)
    w = _c(weight)
    d = _lib.EmbeddingBagDesc()
    check(L.embedding_bag_desc_init(ctypes.byref(d), w.shape[0], w.shape[1]))
    d.mode = mode
    d.include_last_offset = int(include_last_offset)
    d.padding_idx = -1 if padding_idx is None else (padding_idx + w.shape[0] if padding_idx < 0 else padding_idx)
    out = torch.empty((bags, w.shape[1]), dtype=torch.float32)
    i32 = indices.dtype == torch.int32 and offsets.dtype == torch.int32 and weight.dtype == torch.float32
    if not i32:
        indices, offsets = indices.long(), offsets.long()
    indices, offsets = _c(indices), _c(offsets)
    f = L.embedding_bag_f32_i32 if i32 else (L.embedding_bag_f32 if weight.dtype == torch.float32
                                               else L.embedding_bag_bf16_f32)
    check(f(ctypes.byref(d), w.data_ptr(), indices.shape[0], indices.data_ptr(), bags, offsets.data_ptr(),
            _opt(per_sample_weights), out.data_ptr()))
    return out


def _embedding_bag_fake(weight, indices, offsets, mode=0, per_sample_weights=None, include_last_offset=False,
                        padding_idx=None):
    bags = _eb_checks(weight, indices, offsets, mode, per_sample_weights, include_last_offset)
    return weight.new_empty((bags, weight.shape[1]), dtype=torch.float32)


_define("embedding_bag(Tensor weight, Tensor indices, Tensor offsets, int mode=0, Tensor? per_sample_weights=None, "
        "bool include_last_offset=False, int? padding_idx=None) -> Tensor", _embedding_bag, _embedding_bag_fake)


# ---- quantized Linears: dynamic per-token int8, weight-only int8 / int4 ----------------------------
# The quantized weights and scales are plain tensors (module buffers); the C plan / packed weight is
# derived from them per process, cached like the GEMM's packed weights (tensor identity + version).

def _bias_arg(bias):
    return None if bias is None else _bias_f32(bias)


def _qlinear_checks(x, qweight, scales, bias, activation, op):
    t = _float_dtype(x, op)
    if qweight.dtype != torch.int8 or qweight.dim() != 2 or x.dim() == 0 or qweight.shape[1] != x.shape[-1]:
        raise ValueError("xk.%s: qweight must be int8 [N, %d], got %s %s" % (
            op, x.shape[-1] if x.dim() else 0, qweight.dtype, tuple(qweight.shape)))
    N = qweight.shape[0]
    if scales.dtype != torch.float32 or tuple(scales.shape) != (N,):
        raise ValueError("xk.%s: w_scales must be float32 [%d]" % (op, N))
    if bias is not None and (tuple(bias.shape) != (N,) or not bias.is_floating_point()):
        raise ValueError("xk.%s: bias must be a float vector of %d elements" % (op, N))
    if activation not in _ACT:
        raise ValueError("xk.%s: unknown activation %r" % (op, activation))
    return t, N


def _smooth_checks(smooth, K):
    if smooth is not None and (smooth.dtype != torch.float32 or tuple(smooth.shape) != (K,)):
        raise ValueError("xk.dynamic_int8_linear: smooth must be float32 [%d]" % K)


def _dynamic_int8_linear(x, qweight, w_scales, bias=None, activation="none", smooth=None):
    t, N = _qlinear_checks(x, qweight, w_scales, bias, activation, "dynamic_int8_linear")
    _smooth_checks(smooth, x.shape[-1])
    K = x.shape[-1]
    out = x.new_empty(x.shape[:-1] + (N,))
    if out.numel() == 0 or K == 0:
        return _linear_empty(out, bias, activation, None)
    x2 = _c(x).view(-1, K)
    act = _ACT[activation]
    has_bias = bias is not None
    has_smooth = smooth is not None

    def make():
        w, s = _c(qweight.detach()), _c(w_scales.detach())
        return _quant.QLinearPlan(N, K, w.data_ptr(), s.data_ptr(), S8, t, t, has_bias, act, has_smooth)

    plan = _derived.get(("qlinear", t, has_bias, act, has_smooth), (qweight, w_scales), make)
    b = _bias_arg(bias)
    plan.run(x2.shape[0], x2.data_ptr(), out.data_ptr(), None if b is None else b.data_ptr(),
             None if smooth is None else _c(smooth).data_ptr())
    return out


def _dynamic_int8_linear_fake(x, qweight, w_scales, bias=None, activation="none", smooth=None):
    _, N = _qlinear_checks(x, qweight, w_scales, bias, activation, "dynamic_int8_linear")
    _smooth_checks(smooth, x.shape[-1])
    return x.new_empty(x.shape[:-1] + (N,))


_define("dynamic_int8_linear(Tensor x, Tensor qweight, Tensor w_scales, Tensor? bias=None, "
        "str activation=\"none\", Tensor? smooth=None) -> Tensor", _dynamic_int8_linear, _dynamic_int8_linear_fake)


def _woq_checks(x, qweight, scales, group_size, bits, bias, activation, op):
    t = _float_dtype(x, op)
    K = x.shape[-1] if x.dim() else 0
    if bits not in (4, 8):
        raise ValueError("xk.%s: bits=%r must be 4 or 8" % (op, bits))
    qd, qk = (torch.int8, K) if bits == 8 else (torch.uint8, K // 2)
    if qweight.dtype != qd or qweight.dim() != 2 or qweight.shape[1] != qk or (bits == 4 and K % 2):
        raise ValueError("xk.%s: qweight must be %s [N, %d] for int%d and in_features %d, got %s %s" % (
            op, qd, qk, bits, K, qweight.dtype, tuple(qweight.shape)))
    N = qweight.shape[0]
    G = 1 if group_size == 0 else (K // group_size if group_size > 0 else -1)
    if scales.dtype != torch.float32 or tuple(scales.shape) != (N, G):
        raise ValueError("xk.%s: scales must be float32 [%d, %d] (group_size %d), got %s %s" % (
            op, N, G, group_size, scales.dtype, tuple(scales.shape)))
    if bias is not None and (tuple(bias.shape) != (N,) or not bias.is_floating_point()):
        raise ValueError("xk.%s: bias must be a float vector of %d elements" % (op, N))
    if activation not in _ACT:
        raise ValueError("xk.%s: unknown activation %r" % (op, activation))
    return t, N


def _woq_weight(qweight, scales, group_size, bits):
    """The packed xk weight of (qweight, scales), made once per process and tensor version."""
    def make():
        w, s = _c(qweight.detach()), _c(scales.detach())
        K = w.shape[1] * (2 if bits == 4 else 1)
        return _quant.WoqWeight(bits, w.shape[0], K, group_size, w.data_ptr(), s.data_ptr())

    return _derived.get(("woq", bits, group_size), (qweight, scales), make)


def _woq_linear(x, qweight, scales, group_size, bits, bias=None, activation="none"):
    t, N = _woq_checks(x, qweight, scales, group_size, bits, bias, activation, "woq_linear")
    K = x.shape[-1]
    out = x.new_empty(x.shape[:-1] + (N,))
    if out.numel() == 0 or K == 0:
        return _linear_empty(out, bias, activation, None)
    x2 = _c(x).view(-1, K)
    w = _woq_weight(qweight, scales, group_size, bits)
    b = _bias_arg(bias)
    w.gemm(x2.shape[0], x2.data_ptr(), out.data_ptr(), t, t, None if b is None else b.data_ptr(),
           _ACT[activation])
    return out


def _woq_linear_fake(x, qweight, scales, group_size, bits, bias=None, activation="none"):
    _, N = _woq_checks(x, qweight, scales, group_size, bits, bias, activation, "woq_linear")
    return x.new_empty(x.shape[:-1] + (N,))


_define("woq_linear(Tensor x, Tensor qweight, Tensor scales, int group_size, int bits, Tensor? bias=None, "
        "str activation=\"none\") -> Tensor", _woq_linear, _woq_linear_fake)


# ---- attention (include/xk/c/attention.h): fused SDPA, KV cache append, attention over the cache -----
# Layouts as the C API: q / o [tokens, heads, head_dim], k / v [kv_tokens, kv_heads, head_dim], packed
# (copied when not contiguous); variable-length batches through cu_seqlens (int64 [batch + 1]).

_ATTN = {_T32: L.attention_f32, _T16: L.attention_bf16}
_CACHED = {_T32: L.cached_attention_f32, _T16: L.cached_attention_bf16}
_I64 = torch.int64


def _attention_checks(q, k, v, cu_seqlens_q, cu_seqlens_k, mask):
    if _ATTN.get(q.dtype) is None:
        _float_dtype(q, "attention")
    if k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise TypeError("xk.attention: q, k, v must share one dtype, got %s, %s, %s" % (q.dtype, k.dtype, v.dtype))
    nd = q.dim()
    if nd not in (3, 4) or k.dim() != nd or v.shape != k.shape:
        raise ValueError("xk.attention: q [tokens, heads, head_dim] (or [batch, tokens, heads, head_dim]), k and v "
                         "alike with kv heads, got %s, %s, %s" % (tuple(q.shape), tuple(k.shape), tuple(v.shape)))
    Hq, D, Hkv = q.shape[-2], q.shape[-1], k.shape[-2]
    if k.shape[-1] != D or Hkv < 1 or Hq % Hkv:
        raise ValueError("xk.attention: k / v head_dim must be %d and kv_heads must divide %d, got %s" %
                         (D, Hq, tuple(k.shape)))
    if nd == 4:
        if q.shape[0] != k.shape[0] or cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise ValueError("xk.attention: 4-D q / k / v share the batch dimension and take no cu_seqlens")
        batch = q.shape[0]
    else:
        if (cu_seqlens_q is None) != (cu_seqlens_k is None):
            raise ValueError("xk.attention: give both cu_seqlens_q and cu_seqlens_k or neither")
        batch = 1
        if cu_seqlens_q is not None:
            if cu_seqlens_q.dtype != _I64 or cu_seqlens_k.dtype != _I64 or cu_seqlens_q.dim() != 1 or \
                    cu_seqlens_q.shape != cu_seqlens_k.shape or cu_seqlens_q.shape[0] < 1:
                raise ValueError("xk.attention: cu_seqlens_q / cu_seqlens_k must be int64 [batch + 1]")
            batch = cu_seqlens_q.shape[0] - 1
    q_tokens = q.shape[0] * q.shape[1] if nd == 4 else q.shape[0]
    if mask is not None and (mask.dtype != torch.float32 or mask.dim() != 2 or mask.shape[0] != q_tokens):
        raise ValueError("xk.attention: mask must be float32 [%d (query tokens), key positions], got %s %s" %
                         (q_tokens, mask.dtype, tuple(mask.shape)))
    return batch, Hq, Hkv, D


def _token_major(t):
    """(token stride, head stride) of q / k / v [tokens, heads, D] or [batch, tokens, heads, D] read in
    place by xk_attention_strided (tokens evenly strided, heads too, head_dim packed), else None."""
    st, sh = t.stride(), t.shape
    if st[-1] != 1 and sh[-1] > 1:
        return None
    if t.dim() == 4 and sh[0] > 1 and st[0] != sh[1] * st[1]:
        return None
    ts, hs, H, D = st[-3], st[-2], sh[-2], sh[-1]
    if hs < D or ts < (H - 1) * hs + D:  # head-major (e.g. a transposed [heads, tokens, D]): copied
        return None
    return ts, hs


def _attention_views(q, k, v):
    """Strides of q, k, v when all three can be read in place (strided library and views), else None."""
    if _STRIDED is None or (q.is_contiguous() and k.is_contiguous() and v.is_contiguous()):
        return None
    s = [_token_major(t) for t in (q, k, v)]
    if None in s:
        return None
    # (0 is "packed" to the C API: a real stride of 0 (expanded heads / tokens) is copied instead)
    if any(x == 0 for a in s for x in a) or any(t.numel() == 0 for t in (q, k, v)):
        return None
    return s


_STRIDED = L.attention_strided
_DT = {_T32: F32, _T16: BF16}


def _attention(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, scale=0.0, causal=False, causal_offset=0,
               mask=None):
    batch, Hq, Hkv, D = _attention_checks(q, k, v, cu_seqlens_q, cu_seqlens_k, mask)
    views = _attention_views(q, k, v)
    if views is None:
        q, k, v = _c(q), _c(k), _c(v)
    out = torch.empty(q.shape, dtype=q.dtype)
    if q.dim() == 4:  # [batch, tokens, heads, D]: equal lengths
        B, Tq, Tk = q.shape[0], q.shape[1], k.shape[1]
        if B > 1:
            cu_seqlens_q = torch.arange(0, (B + 1) * Tq, Tq, dtype=_I64) if Tq else torch.zeros(B + 1, dtype=_I64)
            cu_seqlens_k = torch.arange(0, (B + 1) * Tk, Tk, dtype=_I64) if Tk else torch.zeros(B + 1, dtype=_I64)
        q_tokens, kv_tokens = B * Tq, B * Tk
    else:
        q_tokens, kv_tokens = q.shape[0], k.shape[0]
        if cu_seqlens_q is not None:
            cu_seqlens_q, cu_seqlens_k = _c(cu_seqlens_q), _c(cu_seqlens_k)
    if out.numel() == 0:
        return out
    if mask is not None:
        mask = _c(mask)
    if views is not None:
        # q / k / v read in place (e.g. slices of one fused QKV projection): no copies
        d = _lib.AttentionDesc(batch, q_tokens, kv_tokens, Hq, Hkv, D, _DT[q.dtype], _DT[q.dtype], scale, int(causal),
                               causal_offset, int(mask is not None), 0 if mask is None else mask.shape[1])
        s = _lib.AttentionStrides(views[0][0], views[0][1], views[1][0], views[1][1], views[2][0], views[2][1], 0, 0)
        st = _STRIDED(ctypes.byref(d), ctypes.byref(s), q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), None,
                      None if mask is None else mask.data_ptr(),
                      None if cu_seqlens_q is None else cu_seqlens_q.data_ptr(),
                      None if cu_seqlens_k is None else cu_seqlens_k.data_ptr(), None)
        if st:
            check(st)
        return out
    st = _ATTN[q.dtype](batch, q_tokens, kv_tokens, Hq, Hkv, D, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                        out.data_ptr(), None, None if cu_seqlens_q is None else cu_seqlens_q.data_ptr(),
                        None if cu_seqlens_k is None else cu_seqlens_k.data_ptr(), scale, int(causal), causal_offset,
                        None if mask is None else mask.data_ptr(), 0 if mask is None else mask.shape[1])
    if st:
        check(st)
    return out


def _attention_fake(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, scale=0.0, causal=False, causal_offset=0,
                    mask=None):
    _attention_checks(q, k, v, cu_seqlens_q, cu_seqlens_k, mask)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


_define("attention(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q=None, Tensor? cu_seqlens_k=None, "
        "float scale=0.0, bool causal=False, int causal_offset=0, Tensor? mask=None) -> Tensor",
        _attention, _attention_fake)


def _kv_desc(k_cache, v_cache, block_table, batch, op):
    """xk_kv_cache_desc of a contiguous cache [slots, kv_heads, capacity, head_dim] (block_table None)
    or a paged pool [num_blocks, kv_heads, block_size, head_dim] with block_table int32 [batch, max_blocks]."""
    if k_cache.dtype not in (_T32, _T16) or v_cache.dtype is not k_cache.dtype or k_cache.dim() != 4 or \
            v_cache.shape != k_cache.shape:
        raise ValueError("xk.%s: k_cache / v_cache must be float32 / bfloat16 tensors of one 4-D shape, got %s %s, "
                         "%s %s" % (op, k_cache.dtype, tuple(k_cache.shape), v_cache.dtype, tuple(v_cache.shape)))
    if not (k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("xk.%s: k_cache / v_cache must be contiguous" % op)
    d = _lib.KvCacheDesc()
    d.dtype = _XK[k_cache.dtype]
    d.kv_heads, d.head_dim = k_cache.shape[1], k_cache.shape[3]
    if block_table is None:
        d.layout = _lib.KV_CONTIGUOUS
        d.capacity = k_cache.shape[2]
        if batch is not None and batch > k_cache.shape[0]:
            raise ValueError("xk.%s: %d sequences but the cache has %d slots" % (op, batch, k_cache.shape[0]))
        d.batch = k_cache.shape[0] if batch is None else batch
    else:
        if block_table.dtype != torch.int32 or block_table.dim() != 2:
            raise ValueError("xk.%s: block_table must be int32 [batch, max_blocks_per_seq]" % op)
        d.layout = _lib.KV_PAGED
        d.num_blocks, d.block_size = k_cache.shape[0], k_cache.shape[2]
        d.batch, d.max_blocks_per_seq = block_table.shape
        if batch is not None and batch != d.batch:
            raise ValueError("xk.%s: block_table has %d rows for %d sequences" % (op, d.batch, batch))
    return d


def _append_checks(k_cache, v_cache, k_new, v_new, seq_ids, positions, block_table):
    d = _kv_desc(k_cache, v_cache, block_table, None, "kv_cache_append")
    if k_new.dtype not in (_T32, _T16) or v_new.dtype is not k_new.dtype or k_new.dim() != 3 or \
            v_new.shape != k_new.shape or tuple(k_new.shape[1:]) != (d.kv_heads, d.head_dim):
        raise ValueError("xk.kv_cache_append: k_new / v_new must be float32 / bfloat16 [tokens, %d, %d], got %s %s" %
                         (d.kv_heads, d.head_dim, k_new.dtype, tuple(k_new.shape)))
    T = k_new.shape[0]
    for name, t in (("seq_ids", seq_ids), ("positions", positions)):
        if t.dtype != _I64 or t.shape != (T,):
            raise ValueError("xk.kv_cache_append: %s must be int64 [%d]" % (name, T))
    return d


def _kv_cache_append(k_cache, v_cache, k_new, v_new, seq_ids, positions, block_table=None):
    d = _append_checks(k_cache, v_cache, k_new, v_new, seq_ids, positions, block_table)
    if k_new.shape[0] == 0:
        return
    k_new, v_new, seq_ids, positions = _c(k_new), _c(v_new), _c(seq_ids), _c(positions)
    bt = None if block_table is None else _c(block_table).data_ptr()
    st = L.kv_cache_append(_byref(d), k_cache.data_ptr(), v_cache.data_ptr(), bt, k_new.shape[0], _XK[k_new.dtype],
                           k_new.data_ptr(), v_new.data_ptr(), seq_ids.data_ptr(), positions.data_ptr())
    if st:
        check(st)


def _kv_cache_append_fake(k_cache, v_cache, k_new, v_new, seq_ids, positions, block_table=None):
    _append_checks(k_cache, v_cache, k_new, v_new, seq_ids, positions, block_table)


_define("kv_cache_append(Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor k_new, Tensor v_new, Tensor seq_ids, "
        "Tensor positions, Tensor? block_table=None) -> ()", _kv_cache_append, _kv_cache_append_fake)


def _cached_checks(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_table):
    if _CACHED.get(q.dtype) is None:
        _float_dtype(q, "cached_attention")
    if cu_seqlens_q.dtype != _I64 or context_lens.dtype != _I64 or cu_seqlens_q.dim() != 1 or \
            context_lens.dim() != 1 or cu_seqlens_q.shape[0] != context_lens.shape[0] + 1:
        raise ValueError("xk.cached_attention: cu_seqlens_q int64 [batch + 1] and context_lens int64 [batch]")
    d = _kv_desc(k_cache, v_cache, block_table, context_lens.shape[0], "cached_attention")
    if q.dim() != 3 or q.shape[2] != d.head_dim or q.shape[1] % d.kv_heads:
        raise ValueError("xk.cached_attention: q must be [tokens, heads (a multiple of %d), %d], got %s" %
                         (d.kv_heads, d.head_dim, tuple(q.shape)))
    return d


def _cached_attention(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_table=None, scale=0.0):
    d = _cached_checks(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_table)
    q = _c(q)
    out = torch.empty_like(q)
    if out.numel() == 0 or d.batch == 0:
        return out
    cu, cl = _c(cu_seqlens_q), _c(context_lens)
    bt = None if block_table is None else _c(block_table).data_ptr()
    st = _CACHED[q.dtype](_byref(d), k_cache.data_ptr(), v_cache.data_ptr(), bt, q.shape[0], q.shape[1],
                          q.data_ptr(), out.data_ptr(), None, cu.data_ptr(), cl.data_ptr(), scale)
    if st:
        check(st)
    return out


def _cached_attention_fake(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_table=None, scale=0.0):
    _cached_checks(q, k_cache, v_cache, cu_seqlens_q, context_lens, block_table)
    return torch.empty_like(q, memory_format=torch.contiguous_format)


_define("cached_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cu_seqlens_q, Tensor context_lens, "
        "Tensor? block_table=None, float scale=0.0) -> Tensor", _cached_attention, _cached_attention_fake)


# ---- several Linears on one input as one GEMM (Llama's q / k / v projections) -------------------------

def _fused_checks(x, weights, biases):
    t = _float_dtype(x, "fused_linear")
    if len(weights) == 0 or x.dim() == 0:
        raise ValueError("xk.fused_linear: at least one weight and a non-scalar x")
    K = x.shape[-1]
    for w in weights:
        if w.dtype is not x.dtype or w.dim() != 2 or w.shape[1] != K:
            raise ValueError("xk.fused_linear: every weight must be %s [N_i, %d], got %s %s" %
                             (x.dtype, K, w.dtype, tuple(w.shape)))
    if biases is not None and (len(biases) != len(weights) or
                               any(b.shape != (w.shape[0],) for b, w in zip(biases, weights))):
        raise ValueError("xk.fused_linear: biases must match the weights one for one ([N_i] each)")
    return t, sum(w.shape[0] for w in weights)


def _fused_linear(x, weights, biases=None):
    """cat([x W_i^T + b_i], -1): one GEMM against the packed concatenation of the weights."""
    t, N = _fused_checks(x, weights, biases)
    K = x.shape[-1]
    out = x.new_empty(x.shape[:-1] + (N,))
    if out.numel() == 0 or K == 0:
        return torch.cat([_linear_empty(x.new_empty(x.shape[:-1] + (w.shape[0],)), b, "none", None)
                          for w, b in zip(weights, biases or [None] * len(weights))], -1)
    ws = tuple(weights)
    M = out.numel() // N
    cat = lambda: torch.cat([w.detach() for w in ws])  # noqa: E731
    packed = _packed("pack_cat", ws, t, M, cat)
    bias = None
    if biases is not None:
        bs = tuple(biases)
        bias = _derived.get("bias_cat", bs, lambda: torch.cat([b.detach().float() for b in bs]).contiguous())
    x2 = _c(x).view(-1, K)
    try:
        _gemm_packed(x2, packed, N, K, t, bias, 0, None, out)
    except _StalePack:
        _gemm_packed(x2, _repacked("pack_cat", ws, t, M, cat), N, K, t, bias, 0, None, out)
    return out


def _fused_linear_fake(x, weights, biases=None):
    _, N = _fused_checks(x, weights, biases)
    return x.new_empty(x.shape[:-1] + (N,))


_define("fused_linear(Tensor x, Tensor[] weights, Tensor[]? biases=None) -> Tensor", _fused_linear, _fused_linear_fake)


# ---- an op that does nothing, for measuring the dispatcher's share of the per-call overhead ------

_define("noop(Tensor x) -> Tensor", lambda x: x.new_empty(()), lambda x: x.new_empty(()))
