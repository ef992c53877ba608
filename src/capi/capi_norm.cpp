// C API: norm family.
#include "capi/capi_common.hpp"
#include "kernels/norm/norm.hpp"

using xk::detail::capi_call;

namespace {

template <class T>
xk_status c_norm(const char* fn, xk::NormKind kind, int64_t rows, int64_t hidden, const T* x, int64_t ld_x,
                 T* residual, int64_t ld_residual, bool fused, const T* weight, const T* bias, float eps, T* y,
                 int64_t ld_y) {
    return capi_call([&] {
        constexpr xk::DType t = sizeof(T) == 2 ? xk::DType::bf16 : xk::DType::f32;
        xk::NormDesc d;
        d.kind = kind;
        d.rows = rows;
        d.hidden = hidden;
        d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
        d.ld_x = ld_x;
        d.ld_y = ld_y;
        d.ld_residual = d.ld_residual_out = ld_residual;
        d.eps = eps;
        d.has_weight = weight != nullptr;
        d.has_bias = bias != nullptr;
        d.fused_residual = fused;
        xk::NormArgs a;
        a.x = x;
        a.y = y;
        a.weight = weight;
        a.bias = bias;
        if (fused) {
            a.residual = residual;
            a.residual_out = residual;
        }
        xk::detail::norm_one_shot(fn, d, a);
    });
}

}  // namespace

extern "C" {

xk_status xk_rms_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, const float* weight, float eps,
                          float* y, int64_t ld_y) {
    return c_norm<float>("xk_rms_norm_f32", xk::NormKind::rms_norm, rows, hidden, x, ld_x, nullptr, 0, false, weight,
                         nullptr, eps, y, ld_y);
}
xk_status xk_rms_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x, const uint16_t* weight,
                           float eps, uint16_t* y, int64_t ld_y) {
    return c_norm<uint16_t>("xk_rms_norm_bf16", xk::NormKind::rms_norm, rows, hidden, x, ld_x, nullptr, 0, false,
                            weight, nullptr, eps, y, ld_y);
}
xk_status xk_layer_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, const float* weight,
                            const float* bias, float eps, float* y, int64_t ld_y) {
    return c_norm<float>("xk_layer_norm_f32", xk::NormKind::layer_norm, rows, hidden, x, ld_x, nullptr, 0, false,
                         weight, bias, eps, y, ld_y);
}
xk_status xk_layer_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x, const uint16_t* weight,
                             const uint16_t* bias, float eps, uint16_t* y, int64_t ld_y) {
    return c_norm<uint16_t>("xk_layer_norm_bf16", xk::NormKind::layer_norm, rows, hidden, x, ld_x, nullptr, 0, false,
                            weight, bias, eps, y, ld_y);
}
xk_status xk_fused_add_rms_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, float* residual,
                                    int64_t ld_residual, const float* weight, float eps, float* y, int64_t ld_y) {
    return c_norm<float>("xk_fused_add_rms_norm_f32", xk::NormKind::rms_norm, rows, hidden, x, ld_x, residual,
                         ld_residual, true, weight, nullptr, eps, y, ld_y);
}
xk_status xk_fused_add_rms_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x,
                                     uint16_t* residual, int64_t ld_residual, const uint16_t* weight, float eps,
                                     uint16_t* y, int64_t ld_y) {
    return c_norm<uint16_t>("xk_fused_add_rms_norm_bf16", xk::NormKind::rms_norm, rows, hidden, x, ld_x, residual,
                            ld_residual, true, weight, nullptr, eps, y, ld_y);
}
xk_status xk_fused_add_layer_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, float* residual,
                                      int64_t ld_residual, const float* weight, const float* bias, float eps, float* y,
                                      int64_t ld_y) {
    return c_norm<float>("xk_fused_add_layer_norm_f32", xk::NormKind::layer_norm, rows, hidden, x, ld_x, residual,
                         ld_residual, true, weight, bias, eps, y, ld_y);
}
xk_status xk_fused_add_layer_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x,
                                       uint16_t* residual, int64_t ld_residual, const uint16_t* weight,
                                       const uint16_t* bias, float eps, uint16_t* y, int64_t ld_y) {
    return c_norm<uint16_t>("xk_fused_add_layer_norm_bf16", xk::NormKind::layer_norm, rows, hidden, x, ld_x, residual,
                            ld_residual, true, weight, bias, eps, y, ld_y);
}

}  // extern "C"
