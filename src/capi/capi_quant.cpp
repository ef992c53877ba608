// C API: quant family.
#include <type_traits>

#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "kernels/quant/quant.hpp"

using xk::detail::capi_call;

namespace {

template <class T>
constexpr xk::DType c_dtype() {
    if constexpr (std::is_same_v<T, float>) return xk::DType::f32;
    if constexpr (std::is_same_v<T, uint16_t>) return xk::DType::bf16;
    if constexpr (std::is_same_v<T, uint8_t>) return xk::DType::u8;
    return xk::DType::s8;
}

xk_status c_params(const char* fn, float min, float max, xk::DType t, int symmetric, float* scale, int32_t* zp) {
    return capi_call([&] {
        xk::detail::check_not_null(fn, "scale", scale);
        xk::detail::check_not_null(fn, "zero_point", zp);
        const xk::QuantParams p = xk::compute_quant_params(min, max, t, symmetric != 0);
        *scale = p.scale;
        *zp = p.zero_point;
    });
}

// Static quantize / dequantize of a [rows x cols] matrix; zero_points == nullptr means symmetric.
template <class S, class D>
xk_status c_static(const char* fn, xk::QuantGranularity g, int64_t rows, int64_t cols, const S* src, int64_t ld_src,
                   const float* scales, const int32_t* zero_points, int axis, D* dst, int64_t ld_dst) {
    return capi_call([&] {
        if (g == xk::QuantGranularity::per_tensor) xk::detail::check_nonnegative(fn, "n", cols);
        xk::QuantDesc d;
        d.rows = rows;
        d.cols = cols;
        d.src_dtype = c_dtype<S>();
        d.dst_dtype = c_dtype<D>();
        d.ld_src = ld_src;
        d.ld_dst = ld_dst;
        d.granularity = g;
        d.axis = axis;
        d.symmetric = zero_points == nullptr;
        xk::QuantArgs a;
        a.src = src;
        a.dst = dst;
        a.scales = scales;
        a.zero_points = zero_points;
        xk::detail::quant_one_shot(fn, d, a, sizeof(D) == 1);
    });
}

template <class S, class D>
xk_status c_dynamic(const char* fn, int64_t rows, int64_t cols, const S* x, int64_t ld_x, const float* smooth, D* q,
                    int64_t ld_q, float* scales, int32_t* zero_points, int symmetric) {
    return capi_call([&] {
        xk::QuantDesc d;
        d.rows = rows;
        d.cols = cols;
        d.src_dtype = c_dtype<S>();
        d.dst_dtype = c_dtype<D>();
        d.ld_src = ld_x;
        d.ld_dst = ld_q;
        d.granularity = xk::QuantGranularity::per_token_dynamic;
        d.symmetric = symmetric != 0;
        d.smooth = smooth != nullptr;
        xk::QuantArgs a;
        a.src = x;
        a.dst = q;
        a.smooth = smooth;
        a.scales_out = scales;
        a.zero_points_out = zero_points;
        xk::detail::quant_one_shot(fn, d, a, true);
    });
}

constexpr auto kTensor = xk::QuantGranularity::per_tensor;
constexpr auto kChannel = xk::QuantGranularity::per_channel;

}  // namespace

extern "C" {

xk_status xk_compute_quant_params_u8(float min, float max, int symmetric, float* scale, int32_t* zero_point) {
    return c_params("xk_compute_quant_params_u8", min, max, xk::DType::u8, symmetric, scale, zero_point);
}
xk_status xk_compute_quant_params_s8(float min, float max, int symmetric, float* scale, int32_t* zero_point) {
    return c_params("xk_compute_quant_params_s8", min, max, xk::DType::s8, symmetric, scale, zero_point);
}

xk_status xk_quantize_per_tensor_f32_u8(int64_t n, const float* x, float scale, int32_t zero_point, uint8_t* q) {
    return c_static("xk_quantize_per_tensor_f32_u8", kTensor, 1, n, x, 0, &scale, &zero_point, 1, q, 0);
}
xk_status xk_quantize_per_tensor_f32_s8(int64_t n, const float* x, float scale, int32_t zero_point, int8_t* q) {
    return c_static("xk_quantize_per_tensor_f32_s8", kTensor, 1, n, x, 0, &scale, &zero_point, 1, q, 0);
}
xk_status xk_dequantize_per_tensor_u8_f32(int64_t n, const uint8_t* q, float scale, int32_t zero_point, float* x) {
    return c_static("xk_dequantize_per_tensor_u8_f32", kTensor, 1, n, q, 0, &scale, &zero_point, 1, x, 0);
}
xk_status xk_dequantize_per_tensor_s8_f32(int64_t n, const int8_t* q, float scale, int32_t zero_point, float* x) {
    return c_static("xk_dequantize_per_tensor_s8_f32", kTensor, 1, n, q, 0, &scale, &zero_point, 1, x, 0);
}

xk_status xk_quantize_per_channel_f32_u8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                         const float* scales, const int32_t* zero_points, int axis, uint8_t* q,
                                         int64_t ld_q) {
    return c_static("xk_quantize_per_channel_f32_u8", kChannel, rows, cols, x, ld_x, scales, zero_points, axis, q, ld_q);
}
xk_status xk_quantize_per_channel_f32_s8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                         const float* scales, const int32_t* zero_points, int axis, int8_t* q,
                                         int64_t ld_q) {
    return c_static("xk_quantize_per_channel_f32_s8", kChannel, rows, cols, x, ld_x, scales, zero_points, axis, q, ld_q);
}
xk_status xk_dequantize_per_channel_u8_f32(int64_t rows, int64_t cols, const uint8_t* q, int64_t ld_q,
                                           const float* scales, const int32_t* zero_points, int axis, float* x,
                                           int64_t ld_x) {
    return c_static("xk_dequantize_per_channel_u8_f32", kChannel, rows, cols, q, ld_q, scales, zero_points, axis, x, ld_x);
}
xk_status xk_dequantize_per_channel_s8_f32(int64_t rows, int64_t cols, const int8_t* q, int64_t ld_q,
                                           const float* scales, const int32_t* zero_points, int axis, float* x,
                                           int64_t ld_x) {
    return c_static("xk_dequantize_per_channel_s8_f32", kChannel, rows, cols, q, ld_q, scales, zero_points, axis, x, ld_x);
}

xk_status xk_quantize_dynamic_per_token_f32_u8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                               const float* smooth, uint8_t* q, int64_t ld_q, float* scales,
                                               int32_t* zero_points, int symmetric) {
    return c_dynamic("xk_quantize_dynamic_per_token_f32_u8", rows, cols, x, ld_x, smooth, q, ld_q, scales, zero_points,
                     symmetric);
}
xk_status xk_quantize_dynamic_per_token_f32_s8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                               const float* smooth, int8_t* q, int64_t ld_q, float* scales,
                                               int32_t* zero_points, int symmetric) {
    return c_dynamic("xk_quantize_dynamic_per_token_f32_s8", rows, cols, x, ld_x, smooth, q, ld_q, scales, zero_points,
                     symmetric);
}
xk_status xk_quantize_dynamic_per_token_bf16_u8(int64_t rows, int64_t cols, const uint16_t* x, int64_t ld_x,
                                                const float* smooth, uint8_t* q, int64_t ld_q, float* scales,
                                                int32_t* zero_points, int symmetric) {
    return c_dynamic("xk_quantize_dynamic_per_token_bf16_u8", rows, cols, x, ld_x, smooth, q, ld_q, scales,
                     zero_points, symmetric);
}
xk_status xk_quantize_dynamic_per_token_bf16_s8(int64_t rows, int64_t cols, const uint16_t* x, int64_t ld_x,
                                                const float* smooth, int8_t* q, int64_t ld_q, float* scales,
                                                int32_t* zero_points, int symmetric) {
    return c_dynamic("xk_quantize_dynamic_per_token_bf16_s8", rows, cols, x, ld_x, smooth, q, ld_q, scales,
                     zero_points, symmetric);
}

}  // extern "C"
