"""Thin wrappers over libxk's int8 Linear (include/xk/c/qlinear.h) and weight-only int8 / int4 GEMM
(include/xk/c/woq.h) C APIs. NumPy-free: every buffer is a raw address (an int, e.g. a torch
tensor's data_ptr()) and the caller keeps the memory alive and laid out as the C API says."""
import ctypes

from . import _lib
from ._lib import check

_byref = ctypes.byref


def _need(L, name):
    if getattr(L, name) is None:
        raise _lib.XkUnsupported(_lib.UNSUPPORTED, "xkernels: %s has no xk_%s: rebuild libxk" % (L.path, name))


class QLinearPlan:
    """xk_qlinear plan: dynamic per-token int8 Linear y[M, N] = x[M, K] W^T (+ bias, activation) with
    x / y f32 or bf16 (x_type / y_type: _lib.F32 / _lib.BF16) and the weights given as int8 [N, K]
    (row-major, `weight` an address) with f32 per-output-channel `scales` [N], or as f32 / bf16
    (weight_type F32 / BF16, scales None: quantized by the plan). The plan copies and packs the
    weights: the buffers may go once it is made."""

    __slots__ = ("h", "N", "K", "x_type", "y_type", "bias", "act", "smooth")

    def __init__(self, N, K, weight, scales=None, weight_type=_lib.S8, x_type=_lib.F32, y_type=_lib.F32,
                 bias=False, act=0, smooth=False):
        L = _lib.lib()
        self.h = None
        _need(L, "qlinear_create")
        d = _lib.QLinearDesc()
        L.qlinear_desc_init(_byref(d))
        d.N, d.K, d.quant, d.x_type, d.y_type = N, K, _lib.QLINEAR_DYNAMIC_PER_TOKEN, x_type, y_type
        d.bias, d.act, d.smooth = int(bool(bias)), act, int(bool(smooth))
        w = _lib.QLinearWeight(weight_type, weight, 0, scales)
        h = ctypes.c_void_p()
        check(L.qlinear_create(_byref(d), _byref(w), _byref(h)))
        self.h = h.value
        self.N, self.K, self.x_type, self.y_type, self.bias, self.act = N, K, x_type, y_type, bool(bias), act
        self.smooth = bool(smooth)

    def run(self, M, x, y, bias=None, smooth=None):
        """x [M, K] -> y [M, N] (contiguous rows); bias: f32 [N] address when the plan has one; smooth:
        f32 [K] address (x[m, k] * smooth[k] before quantizing) when the plan was made with smooth."""
        a = _lib.QLinearArgs(x, y, bias, None, smooth, 1.0, 0, 1.0, 0)
        st = _lib.lib().qlinear_run(self.h, M, _byref(a))
        if st:
            check(st)

    def weight_scales(self):
        p = _lib.lib().qlinear_weight_scales(self.h)
        return list((ctypes.c_float * self.N).from_address(p))

    def impl_name(self):
        return _lib.lib().qlinear_impl_name(self.h).decode()

    def __del__(self):
        if self.h:
            _lib.lib().qlinear_destroy(self.h)
            self.h = None


class WoqWeight:
    """xk_woq_pack: a packed weight-only quantized weight, N x K. bits 8: int8 [N, K]; bits 4: uint8
    [N, K/2], k = 2j in the low nibble of byte j, k = 2j+1 in the high one, values 0..15 with the
    implied zero point 8. scales f32 [N, G], G = K / group_size (group_size 0: one per row).
    Symmetric (no zero points). The weight is copied: the buffers may go once it is packed."""

    __slots__ = ("h", "N", "K", "bits", "group_size", "type")

    def __init__(self, bits, N, K, group_size, weights, scales):
        L = _lib.lib()
        self.h = None
        _need(L, "woq_pack")
        if bits not in (4, 8):
            raise ValueError("WoqWeight: bits=%r must be 4 or 8" % (bits,))
        self.type = _lib.WOQ_S8 if bits == 8 else _lib.WOQ_U4
        h = ctypes.c_void_p()
        check(L.woq_pack(self.type, N, K, group_size, weights, 0, scales, None, _byref(h)))
        self.h = h.value
        self.N, self.K, self.bits, self.group_size = N, K, bits, group_size

    def gemm(self, M, a, c, a_type=_lib.F32, c_type=_lib.F32, bias=None, act=0):
        """c[M, N] = act(a[M, K] dequant(W)^T + bias): a / c contiguous, f32 or bf16; bias f32 [N]."""
        d = _lib.WoqDesc()
        L = _lib.lib()
        L.woq_desc_init(_byref(d))
        d.M, d.N, d.K, d.weight_type, d.a_type, d.c_type = M, self.N, self.K, self.type, a_type, c_type
        d.bias, d.act = int(bias is not None), act
        args = _lib.WoqArgs(a, c, bias, None)
        st = L.woq_gemm(_byref(d), _byref(args), self.h)
        if st:
            check(st)

    def dequantize(self, out):
        """out: f32 [N, K] address."""
        check(_lib.lib().woq_dequantize(self.h, out))

    def __del__(self):
        if self.h:
            _lib.lib().woq_weight_destroy(self.h)
            self.h = None


# ---- SmoothQuant (include/xk/c/qlinear.h): raw addresses, f32 buffers -----------------------------------

def smoothquant_observe(rows, K, x, bf16, absmax):
    """absmax[j] = max(absmax[j], max |x[:, j]|) over `rows` contiguous rows of K (f32 or bf16)."""
    L = _lib.lib()
    f = L.smoothquant_observe_bf16 if bf16 else L.smoothquant_observe_f32
    check(f(rows, K, x, 0, absmax))


def smoothquant_weight_absmax(N, K, w, absmax):
    check(_lib.lib().smoothquant_weight_absmax(N, K, w, 0, absmax))


def smoothquant_factors(K, act_absmax, weight_absmax, alpha, s):
    check(_lib.lib().smoothquant_factors(K, act_absmax, weight_absmax, alpha, s))


def smoothquant_fold_weight(N, K, w, s):
    check(_lib.lib().smoothquant_fold_weight(N, K, w, 0, s))
