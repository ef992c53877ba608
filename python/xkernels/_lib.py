"""Locating and loading libxk, and the ctypes declarations of its C API (include/xk/c/*.h).

No compiled dependency on any Python or torch version: the library is the plain C ABI of libxk.
Search order: $XK_LIBRARY (a path to libxk.so), the libxk.so shipped inside this package (a wheel
built by `pip install .`), then build/release/libxk.so of the source tree this package sits in.
"""
import ctypes
import os

c_i64 = ctypes.c_int64
c_i32 = ctypes.c_int32
c_int = ctypes.c_int
c_f32 = ctypes.c_float
c_p = ctypes.c_void_p
c_str = ctypes.c_char_p

# xk_status
SUCCESS, INVALID_ARGUMENT, UNSUPPORTED, ISA_UNAVAILABLE, OUT_OF_MEMORY, RUNTIME_ERROR = range(6)
# xk_dtype
F32, BF16, S8, U8, S32, F16 = range(6)
DTYPE_NAMES = {F32: "f32", BF16: "bf16", S8: "s8", U8: "u8", S32: "s32", F16: "f16"}
# xk_activation
ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "gelu": 2, "gelu_erf": 2, "gelu_tanh": 3, "silu": 4}
ISA_NAMES = ["scalar", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"]


class XkError(RuntimeError):
    """A failed libxk call: .status is the xk_status, the message is xk_last_error()."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class XkInvalidArgument(XkError, ValueError):
    pass


class XkUnsupported(XkError, NotImplementedError):
    pass


_ERRORS = {INVALID_ARGUMENT: XkInvalidArgument, UNSUPPORTED: XkUnsupported}


class GemmDesc(ctypes.Structure):
    _fields_ = [("M", c_i64), ("N", c_i64), ("K", c_i64), ("trans_a", c_int), ("trans_b", c_int),
                ("lda", c_i64), ("ldb", c_i64), ("ldc", c_i64),
                ("a_type", c_int), ("b_type", c_int), ("c_type", c_int),
                ("alpha", c_f32), ("beta", c_f32), ("bias", c_int), ("act", c_int), ("residual", c_int),
                ("residual_type", c_int), ("ld_residual", c_i64), ("b_scale_per_channel", c_int),
                ("batch", c_i64), ("batch_stride_a", c_i64), ("batch_stride_b", c_i64),
                ("batch_stride_c", c_i64), ("batch_stride_residual", c_i64)]


class GemmArgs(ctypes.Structure):
    _fields_ = [("A", c_p), ("B", c_p), ("C", c_p), ("bias", c_p), ("residual", c_p),
                ("a_scale", c_p), ("b_scales", c_p), ("a_zero_point", c_i32), ("b_zero_point", c_i32),
                ("c_scale", c_p), ("c_zero_point", c_i32)]


class EmbeddingBagDesc(ctypes.Structure):
    _fields_ = [("num_embeddings", c_i64), ("dim", c_i64), ("ld_table", c_i64), ("ld_out", c_i64),
                ("mode", c_int), ("include_last_offset", c_int), ("padding_idx", c_i64)]


class Conv2dDesc(ctypes.Structure):
    _fields_ = [(n, c_i64) for n in ("n", "c", "h", "w", "oc", "kh", "kw", "stride_h", "stride_w", "pad_top",
                                     "pad_bottom", "pad_left", "pad_right", "dilation_h", "dilation_w", "groups")] + \
               [("layout", c_int), ("weight_layout", c_int), ("residual", c_int), ("activation", c_int)]


# include/xk/c/qlinear.h (no size / version field in these structs: fill them with the *_init functions)
# xk_qlinear_quant
QLINEAR_DYNAMIC_PER_TOKEN, QLINEAR_DYNAMIC_PER_TENSOR, QLINEAR_STATIC_PER_TENSOR = range(3)


class QLinearDesc(ctypes.Structure):
    _fields_ = [("N", c_i64), ("K", c_i64), ("quant", c_int), ("x_type", c_int), ("y_type", c_int),
                ("ldx", c_i64), ("ldy", c_i64), ("smooth", c_int), ("bias", c_int), ("act", c_int),
                ("residual", c_int), ("residual_type", c_int), ("ld_residual", c_i64)]


class QLinearWeight(ctypes.Structure):
    _fields_ = [("type", c_int), ("data", c_p), ("ld", c_i64), ("scales", c_p)]


class QLinearArgs(ctypes.Structure):
    _fields_ = [("x", c_p), ("y", c_p), ("bias", c_p), ("residual", c_p), ("smooth", c_p),
                ("x_scale", c_f32), ("x_zero_point", c_i32), ("y_scale", c_f32), ("y_zero_point", c_i32)]


# include/xk/c/woq.h: xk_woq_type
WOQ_S8, WOQ_U4 = 0, 1


class WoqDesc(ctypes.Structure):
    _fields_ = [("M", c_i64), ("N", c_i64), ("K", c_i64), ("weight_type", c_int), ("a_type", c_int),
                ("c_type", c_int), ("lda", c_i64), ("ldc", c_i64), ("alpha", c_f32), ("beta", c_f32),
                ("bias", c_int), ("act", c_int), ("residual", c_int), ("residual_type", c_int),
                ("ld_residual", c_i64)]


class WoqArgs(ctypes.Structure):
    _fields_ = [("A", c_p), ("C", c_p), ("bias", c_p), ("residual", c_p)]


# include/xk/c/attention.h: xk_kv_layout
KV_CONTIGUOUS, KV_PAGED = 0, 1


class KvCacheDesc(ctypes.Structure):
    _fields_ = [("layout", c_int), ("dtype", c_int), ("batch", c_i64), ("kv_heads", c_i64), ("head_dim", c_i64),
                ("capacity", c_i64), ("block_size", c_i64), ("num_blocks", c_i64), ("max_blocks_per_seq", c_i64)]


class AttentionDesc(ctypes.Structure):
    _fields_ = [("batch", c_i64), ("q_tokens", c_i64), ("kv_tokens", c_i64), ("q_heads", c_i64), ("kv_heads", c_i64),
                ("head_dim", c_i64), ("dtype", c_int), ("o_dtype", c_int), ("scale", c_f32), ("causal", c_int),
                ("causal_offset", c_i64), ("has_mask", c_int), ("mask_stride", c_i64)]


class AttentionStrides(ctypes.Structure):
    _fields_ = [(n, c_i64) for n in ("q_token", "q_head", "k_token", "k_head", "v_token", "v_head", "o_token",
                                     "o_head")]


# sizeof / offsetof of the C structs (x86-64), checked by the tests against the ctypes layouts above
C_LAYOUTS = {"QLinearDesc": (80, {"ldx": 32, "smooth": 48, "ld_residual": 72}),
             "QLinearWeight": (32, {"data": 8, "ld": 16, "scales": 24}),
             "QLinearArgs": (56, {"x_scale": 40, "y_zero_point": 52}),
             "WoqDesc": (88, {"lda": 40, "alpha": 56, "ld_residual": 80}),
             "WoqArgs": (32, {"residual": 24}),
             "KvCacheDesc": (64, {"batch": 8, "capacity": 32, "max_blocks_per_seq": 56}),
             "AttentionDesc": (88, {"dtype": 48, "scale": 56, "causal_offset": 64, "mask_stride": 80}),
             "AttentionStrides": (64, {"k_token": 16, "o_head": 56})}


P = c_p
# name: argument types (every function returns xk_status unless listed in _OTHER_RESTYPES)
_SIGNATURES = {
    "xk_get_max_isa": [P], "xk_set_max_isa": [c_int], "xk_set_num_threads": [c_int],
    "xk_axpby": [c_i64, c_f32, P, c_f32, P],
    # gemm
    "xk_sgemm": [c_int, c_int, c_i64, c_i64, c_i64, c_f32, P, c_i64, P, c_i64, c_f32, P, c_i64],
    "xk_gemm_bf16f32": [c_int, c_int, c_i64, c_i64, c_i64, c_f32, P, c_i64, P, c_i64, c_f32, P, c_i64],
    "xk_gemm_bf16bf16": [c_int, c_int, c_i64, c_i64, c_i64, c_f32, P, c_i64, P, c_i64, c_f32, P, c_i64],
    "xk_gemm": [P, P],
    "xk_gemm_plan_create": [P, P], "xk_gemm_plan_run": [P, P], "xk_gemm_plan_pack_b": [P, P, P],
    "xk_gemm_plan_run_packed": [P, P, P], "xk_set_gemm_autotune": [c_int],
    # norm
    "xk_rms_norm_f32": [c_i64, c_i64, P, c_i64, P, c_f32, P, c_i64],
    "xk_rms_norm_bf16": [c_i64, c_i64, P, c_i64, P, c_f32, P, c_i64],
    "xk_layer_norm_f32": [c_i64, c_i64, P, c_i64, P, P, c_f32, P, c_i64],
    "xk_layer_norm_bf16": [c_i64, c_i64, P, c_i64, P, P, c_f32, P, c_i64],
    "xk_fused_add_rms_norm_f32": [c_i64, c_i64, P, c_i64, P, c_i64, P, c_f32, P, c_i64],
    "xk_fused_add_rms_norm_bf16": [c_i64, c_i64, P, c_i64, P, c_i64, P, c_f32, P, c_i64],
    "xk_fused_add_layer_norm_f32": [c_i64, c_i64, P, c_i64, P, c_i64, P, P, c_f32, P, c_i64],
    "xk_fused_add_layer_norm_bf16": [c_i64, c_i64, P, c_i64, P, c_i64, P, P, c_f32, P, c_i64],
    # rope
    "xk_rope_f32": [c_int, c_i64, c_i64, c_i64, c_i64, c_i64, P, c_i64, c_i64, P, c_i64, c_i64, P, P, c_i64],
    "xk_rope_bf16": [c_int, c_i64, c_i64, c_i64, c_i64, c_i64, P, c_i64, c_i64, P, c_i64, c_i64, P, P, c_i64],
    "xk_rope_theta_f32": [c_int, c_i64, c_i64, c_i64, c_i64, c_i64, P, c_i64, c_i64, P, c_i64, c_i64, P, c_f32,
                          c_f32],
    "xk_rope_theta_bf16": [c_int, c_i64, c_i64, c_i64, c_i64, c_i64, P, c_i64, c_i64, P, c_i64, c_i64, P, c_f32,
                           c_f32],
    # llm
    "xk_glu_f32": [c_int, c_i64, c_i64, P, c_i64, P, c_i64],
    "xk_glu_bf16": [c_int, c_i64, c_i64, P, c_i64, P, c_i64],
    "xk_softmax_f32": [c_i64, c_i64, P, c_i64, P, c_i64, c_f32, c_int, c_i64],
    "xk_softmax_bf16": [c_i64, c_i64, P, c_i64, P, c_i64, c_f32, c_int, c_i64],
    # quant
    "xk_compute_quant_params_u8": [c_f32, c_f32, c_int, P, P],
    "xk_compute_quant_params_s8": [c_f32, c_f32, c_int, P, P],
    "xk_quantize_per_tensor_f32_u8": [c_i64, P, c_f32, c_i32, P],
    "xk_quantize_per_tensor_f32_s8": [c_i64, P, c_f32, c_i32, P],
    "xk_dequantize_per_tensor_u8_f32": [c_i64, P, c_f32, c_i32, P],
    "xk_dequantize_per_tensor_s8_f32": [c_i64, P, c_f32, c_i32, P],
    "xk_quantize_per_channel_f32_u8": [c_i64, c_i64, P, c_i64, P, P, c_int, P, c_i64],
    "xk_quantize_per_channel_f32_s8": [c_i64, c_i64, P, c_i64, P, P, c_int, P, c_i64],
    "xk_dequantize_per_channel_u8_f32": [c_i64, c_i64, P, c_i64, P, P, c_int, P, c_i64],
    "xk_dequantize_per_channel_s8_f32": [c_i64, c_i64, P, c_i64, P, P, c_int, P, c_i64],
    "xk_quantize_dynamic_per_token_f32_u8": [c_i64, c_i64, P, c_i64, P, P, c_i64, P, P, c_int],
    "xk_quantize_dynamic_per_token_f32_s8": [c_i64, c_i64, P, c_i64, P, P, c_i64, P, P, c_int],
    "xk_quantize_dynamic_per_token_bf16_u8": [c_i64, c_i64, P, c_i64, P, P, c_i64, P, P, c_int],
    "xk_quantize_dynamic_per_token_bf16_s8": [c_i64, c_i64, P, c_i64, P, P, c_i64, P, P, c_int],
    # convert
    "xk_convert": [c_i64, c_int, P, c_int, P],
    "xk_convert_2d": [c_i64, c_i64, c_int, P, c_i64, c_int, P, c_i64],
    # embedding_bag
    "xk_embedding_bag_desc_init": [P, c_i64, c_i64],
    "xk_embedding_bag_f32": [P, P, c_i64, P, c_i64, P, P, P],
    "xk_embedding_bag_f32_i32": [P, P, c_i64, P, c_i64, P, P, P],
    "xk_embedding_bag_bf16_f32": [P, P, c_i64, P, c_i64, P, P, P],
    # conv
    "xk_conv2d_desc_init": [P, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, c_i64],
    "xk_conv_output_size": [c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, P],
    "xk_conv2d_f32": [P, P, P, P, P, P],
    "xk_conv2d_bf16": [P, P, P, P, P, P],
    "xk_conv2d_bf16_f32": [P, P, P, P, P, P],
}
# functions that do not return an xk_status
_OTHER = {
    "xk_last_error": ([], c_str), "xk_version": ([], c_str), "xk_isa_name": ([c_int], c_str),
    "xk_gemm_desc_init": ([P], None), "xk_gemm_args_init": ([P], None),
    "xk_gemm_plan_destroy": ([P], None), "xk_gemm_packed_b_destroy": ([P], None),
    "xk_gemm_plan_impl_name": ([P], c_str), "xk_get_gemm_autotune": ([], c_int),
}
# optional entry points (newer libraries): absent ones are None on the Lib object
_OPTIONAL = {"xk_get_num_threads": ([], c_int),
             # strided attention (include/xk/c/attention.h)
             "xk_attention_strided": ([P, P, P, P, P, P, P, P, P, P, P], c_int),
             # qlinear (include/xk/c/qlinear.h)
             "xk_qlinear_desc_init": ([P], None), "xk_qlinear_args_init": ([P], None),
             "xk_qlinear_create": ([P, P, P], c_int), "xk_qlinear_destroy": ([P], None),
             "xk_qlinear_run": ([P, c_i64, P], c_int), "xk_qlinear_weight_scales": ([P], P),
             "xk_qlinear_impl_name": ([P], c_str),
             # woq (include/xk/c/woq.h)
             "xk_woq_pack": ([c_int, c_i64, c_i64, c_i64, P, c_i64, P, P, P], c_int),
             "xk_woq_weight_destroy": ([P], None), "xk_woq_dequantize": ([P, P], c_int),
             "xk_woq_desc_init": ([P], None), "xk_woq_gemm": ([P, P, P], c_int),
             "xk_smoothquant_observe_f32": ([c_i64, c_i64, P, c_i64, P], c_int),
             "xk_smoothquant_observe_bf16": ([c_i64, c_i64, P, c_i64, P], c_int),
             "xk_smoothquant_weight_absmax": ([c_i64, c_i64, P, c_i64, P], c_int),
             "xk_smoothquant_factors": ([c_i64, P, P, c_f32, P], c_int),
             "xk_smoothquant_fold_weight": ([c_i64, c_i64, P, c_i64, P], c_int),
             # attention (include/xk/c/attention.h)
             "xk_kv_cache_desc_init": ([P], None),
             "xk_kv_cache_append": ([P, P, P, P, c_i64, c_int, P, P, P, P], c_int),
             "xk_cached_attention_f32": ([P, P, P, P, c_i64, c_i64, P, P, P, P, P, c_f32], c_int),
             "xk_cached_attention_bf16": ([P, P, P, P, c_i64, c_i64, P, P, P, P, P, c_f32], c_int),
             "xk_attention_f32": ([c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, P, P, P, P, P, P, P, c_f32, c_int,
                                   c_i64, P, c_i64], c_int),
             "xk_attention_bf16": ([c_i64, c_i64, c_i64, c_i64, c_i64, c_i64, P, P, P, P, P, P, P, c_f32, c_int,
                                    c_i64, P, c_i64], c_int)}


def _candidates():
    env = os.environ.get("XK_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libxk.so")]
    root = os.path.dirname(os.path.dirname(here))  # python/xkernels -> repo root
    for build in ("build/release", "build/relwithdebinfo", "build/debug", "build"):
        out.append(os.path.join(root, build, "libxk.so"))
    return out


def _prepare_openmp():
    """Waiting policy of the OpenMP runtime libxk brings (see xkernels.openmp)."""
    from . import openmp as _t
    _t.configure_before_load()


class Lib:
    """The loaded library: every C function as an attribute (ctypes function objects)."""

    def __init__(self, path):
        self.path = path
        self.dll = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        for name, argtypes in _SIGNATURES.items():
            f = getattr(self.dll, name)
            f.argtypes = argtypes
            f.restype = c_int
            setattr(self, name[3:], f)
        for name, (argtypes, restype) in _OTHER.items():
            f = getattr(self.dll, name)
            f.argtypes = argtypes
            f.restype = restype
            setattr(self, name[3:], f)
        for name, (argtypes, restype) in _OPTIONAL.items():
            f = getattr(self.dll, name, None)
            if f is not None:
                f.argtypes = argtypes
                f.restype = restype
            setattr(self, name[3:], f)

    def error(self, status):
        msg = self.last_error().decode(errors="replace") or "xk error %d" % status
        return _ERRORS.get(status, XkError)(status, msg)


_LIB = None


def lib():
    """The loaded libxk (loaded on first use)."""
    global _LIB
    if _LIB is None:
        _prepare_openmp()
        tried = []
        for p in _candidates():
            if os.path.exists(p):
                _LIB = Lib(p)
                break
            tried.append(p)
        else:
            raise ImportError("xkernels: libxk.so not found (tried %s); build it (cmake --preset release && "
                              "ninja -C build/release xk) or set XK_LIBRARY=/path/to/libxk.so" % ", ".join(tried))
    return _LIB


def check(status):
    """Raise the XkError of a nonzero xk_status."""
    if status:
        raise lib().error(status)
