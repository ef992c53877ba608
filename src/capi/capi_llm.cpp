// C API: gated activations (GLU) and softmax.
#include <cstring>

#include "capi/capi_common.hpp"
#include "kernels/glu/glu.hpp"
#include "kernels/softmax/softmax.hpp"

using xk::detail::capi_call;

namespace {

template <class T>
constexpr xk::DType dtype_of() {
    return sizeof(T) == 2 ? xk::DType::bf16 : xk::DType::f32;
}

xk::Activation activation_of(const xk_activation& act) { return static_cast<xk::Activation>(xk::detail::c_enum(act)); }

template <class T>
xk_status c_glu(const char* fn, xk::Activation act, int64_t rows, int64_t inner, const T* x, int64_t ld_x, T* y,
                int64_t ld_y) {
    return capi_call([&] {
        xk::GluDesc d;
        d.activation = act;
        d.rows = rows;
        d.inner = inner;
        d.x_dtype = d.y_dtype = dtype_of<T>();
        d.ld_x = ld_x;
        d.ld_y = ld_y;
        xk::detail::glu_one_shot(fn, d, xk::GluArgs{x, y});
    });
}

template <class T>
xk_status c_softmax(const char* fn, int64_t rows, int64_t cols, const T* x, int64_t ld_x, T* y, int64_t ld_y,
                    float scale, int causal, int64_t causal_offset) {
    return capi_call([&] {
        xk::SoftmaxDesc d;
        d.rows = rows;
        d.cols = cols;
        d.x_dtype = d.y_dtype = dtype_of<T>();
        d.ld_x = ld_x;
        d.ld_y = ld_y;
        d.scale = scale;
        d.causal = causal != 0;
        d.causal_offset = causal_offset;
        xk::detail::softmax_one_shot(fn, d, xk::SoftmaxArgs{x, y});
    });
}

}  // namespace

extern "C" {

xk_status xk_glu_f32(xk_activation act, int64_t rows, int64_t inner, const float* x, int64_t ld_x, float* y,
                     int64_t ld_y) {
    return c_glu("xk_glu_f32", activation_of(act), rows, inner, x, ld_x, y, ld_y);
}
xk_status xk_glu_bf16(xk_activation act, int64_t rows, int64_t inner, const uint16_t* x, int64_t ld_x, uint16_t* y,
                      int64_t ld_y) {
    return c_glu("xk_glu_bf16", activation_of(act), rows, inner, x, ld_x, y, ld_y);
}
xk_status xk_silu_and_mul_f32(int64_t rows, int64_t inner, const float* x, float* y) {
    return c_glu("xk_silu_and_mul_f32", xk::Activation::silu, rows, inner, x, 0, y, 0);
}
xk_status xk_silu_and_mul_bf16(int64_t rows, int64_t inner, const uint16_t* x, uint16_t* y) {
    return c_glu("xk_silu_and_mul_bf16", xk::Activation::silu, rows, inner, x, 0, y, 0);
}
xk_status xk_gelu_and_mul_f32(int64_t rows, int64_t inner, const float* x, float* y, int tanh_approximation) {
    return c_glu("xk_gelu_and_mul_f32", tanh_approximation ? xk::Activation::gelu_tanh : xk::Activation::gelu_erf, rows,
                 inner, x, 0, y, 0);
}
xk_status xk_gelu_and_mul_bf16(int64_t rows, int64_t inner, const uint16_t* x, uint16_t* y, int tanh_approximation) {
    return c_glu("xk_gelu_and_mul_bf16", tanh_approximation ? xk::Activation::gelu_tanh : xk::Activation::gelu_erf, rows,
                 inner, x, 0, y, 0);
}
xk_status xk_softmax_f32(int64_t rows, int64_t cols, const float* x, int64_t ld_x, float* y, int64_t ld_y, float scale,
                         int causal, int64_t causal_offset) {
    return c_softmax("xk_softmax_f32", rows, cols, x, ld_x, y, ld_y, scale, causal, causal_offset);
}
xk_status xk_softmax_bf16(int64_t rows, int64_t cols, const uint16_t* x, int64_t ld_x, uint16_t* y, int64_t ld_y,
                          float scale, int causal, int64_t causal_offset) {
    return c_softmax("xk_softmax_bf16", rows, cols, x, ld_x, y, ld_y, scale, causal, causal_offset);
}

}  // extern "C"
