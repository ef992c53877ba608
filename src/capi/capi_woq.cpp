// C API: weight-only quantized GEMM.
#include "capi/capi_common.hpp"
#include "xk/c/woq.h"
#include "xk/woq.hpp"

struct xk_woq_weight {
    xk::WoqPackedWeight w;
};

namespace {

using xk::detail::c_enum;
using xk::detail::capi_call;

template <class T>
void require(const char* fn, const char* arg, const T* p) {
    if (!p) throw xk::Error(xk::Status::invalid_argument, std::string(fn) + ": " + arg + "=null must not be a null pointer");
}

xk::DType to_dtype(const xk_dtype& t) { return static_cast<xk::DType>(c_enum(t)); }
xk::WoqWeightType to_wtype(const xk_woq_type& t) { return static_cast<xk::WoqWeightType>(c_enum(t)); }

template <class F>
xk_status make_weight(const char* fn, xk_woq_weight** out, F&& f) {
    if (out) *out = nullptr;
    return capi_call([&] {
        require(fn, "out", out);
        *out = new xk_woq_weight{f()};
    });
}

}  // namespace

extern "C" {

xk_status xk_woq_pack(xk_woq_type type, int64_t N, int64_t K, int64_t group_size, const void* weights, int64_t ld_w,
                      const float* scales, const void* zero_points, xk_woq_weight** out) {
    return make_weight("xk_woq_pack", out, [&] {
        xk::WoqWeightDesc d;
        d.type = to_wtype(type), d.N = N, d.K = K, d.group_size = group_size, d.ld_w = ld_w;
        d.zero_points = zero_points != nullptr;
        return xk::woq_pack(d, {weights, scales, zero_points});
    });
}

xk_status xk_woq_import_torch_int8pack(int64_t N, int64_t K, const int8_t* w, xk_dtype scale_type, const void* scales,
                                       xk_woq_weight** out) {
    return make_weight("xk_woq_import_torch_int8pack", out,
                       [&] { return xk::woq_import_torch_int8pack(N, K, w, to_dtype(scale_type), scales); });
}

xk_status xk_woq_import_torch_int4pack_cpu(int64_t N, int64_t K, int64_t group_size, const uint8_t* w, xk_dtype sz_type,
                                           const void* scales_and_zeros, int block_n, xk_woq_weight** out) {
    return make_weight("xk_woq_import_torch_int4pack_cpu", out, [&] {
        return xk::woq_import_torch_int4pack_cpu(N, K, group_size, w, to_dtype(sz_type), scales_and_zeros, block_n);
    });
}

xk_status xk_woq_import_gguf(xk_gguf_type type, int64_t N, int64_t K, const void* data, xk_woq_weight** out) {
    return make_weight("xk_woq_import_gguf", out, [&] {
        return xk::woq_import_gguf(static_cast<xk::GgufType>(c_enum(type)), N, K, data);
    });
}

void xk_woq_weight_destroy(xk_woq_weight* w) { delete w; }

xk_status xk_woq_dequantize(const xk_woq_weight* w, float* out) {
    return capi_call([&] {
        require("xk_woq_dequantize", "w", w);
        xk::woq_dequantize(w->w, out);
    });
}

void xk_woq_desc_init(xk_woq_desc* desc) {
    if (!desc) return;
    *desc = xk_woq_desc{};
    desc->weight_type = XK_WOQ_U4;
    desc->a_type = desc->c_type = desc->residual_type = XK_DTYPE_F32;
    desc->act = XK_ACT_NONE;
    desc->alpha = 1.0f;
}

xk_status xk_woq_gemm(const xk_woq_desc* desc, const xk_woq_args* args, const xk_woq_weight* w) {
    return capi_call([&] {
        constexpr const char* fn = "xk_woq_gemm";
        require(fn, "desc", desc);
        require(fn, "args", args);
        require(fn, "w", w);
        xk::WoqDesc d;
        d.M = desc->M, d.N = desc->N, d.K = desc->K;
        d.weight_type = to_wtype(desc->weight_type);
        d.a_type = to_dtype(desc->a_type), d.c_type = to_dtype(desc->c_type);
        d.lda = desc->lda, d.ldc = desc->ldc;
        d.alpha = desc->alpha, d.beta = desc->beta;
        d.epilogue.bias = desc->bias != 0;
        d.epilogue.act = static_cast<xk::Activation>(c_enum(desc->act));
        d.epilogue.residual = desc->residual != 0;
        d.residual_type = to_dtype(desc->residual_type);
        d.ld_residual = desc->ld_residual;
        xk::woq_gemm(d, {args->A, args->C, args->bias, args->residual}, w->w);
    });
}

}  // extern "C"
