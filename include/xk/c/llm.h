/* xkernels C API — gated activations and softmax (see xk/xk.h for xk_status and xk_last_error).
 * Same semantics as include/xk/llm.hpp: row-major, row strides in elements (0 = packed), fp32
 * math, bf16 data as uint16_t bit patterns (the upper half of an IEEE float). */
#ifndef XK_C_LLM_H
#define XK_C_LLM_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

/* y[r, i] = act(x[r, i]) * x[r, inner + i]: x [rows x 2*inner] (ld_x >= 2*inner, 0 = packed),
 * y [rows x inner] (ld_y >= inner, 0 = packed). act: XK_ACT_SILU (SwiGLU), XK_ACT_GELU_ERF /
 * XK_ACT_GELU_TANH (GeGLU), XK_ACT_RELU, XK_ACT_NONE. y may be x (same stride: in place over the
 * gate half). bf16 y with silu / gelu: within (2^-8 + 2^-10) relative of the exact value, up to one
 * bf16 ulp from it correctly rounded (xk/llm.hpp states every bound). */
xk_status xk_glu_f32(xk_activation act, int64_t rows, int64_t inner, const float* x, int64_t ld_x, float* y,
                     int64_t ld_y);
xk_status xk_glu_bf16(xk_activation act, int64_t rows, int64_t inner, const uint16_t* x, int64_t ld_x, uint16_t* y,
                      int64_t ld_y);

/* vLLM's silu_and_mul / gelu_and_mul (tanh_approximation != 0: gelu_tanh_and_mul), packed rows. */
xk_status xk_silu_and_mul_f32(int64_t rows, int64_t inner, const float* x, float* y);
xk_status xk_silu_and_mul_bf16(int64_t rows, int64_t inner, const uint16_t* x, uint16_t* y);
xk_status xk_gelu_and_mul_f32(int64_t rows, int64_t inner, const float* x, float* y, int tanh_approximation);
xk_status xk_gelu_and_mul_bf16(int64_t rows, int64_t inner, const uint16_t* x, uint16_t* y, int tanh_approximation);

/* y = softmax(scale * x) over each row of cols (ld_x / ld_y >= cols, 0 = packed), scale finite
 * and > 0. causal != 0: row r is the query at position r + causal_offset and sees the columns
 * j <= r + causal_offset (|causal_offset| <= 2^60); the others (and every column of a row with none
 * visible) are 0.
 * y may be x (same stride: in place). */
xk_status xk_softmax_f32(int64_t rows, int64_t cols, const float* x, int64_t ld_x, float* y, int64_t ld_y, float scale,
                         int causal, int64_t causal_offset);
xk_status xk_softmax_bf16(int64_t rows, int64_t cols, const uint16_t* x, int64_t ld_x, uint16_t* y, int64_t ld_y,
                          float scale, int causal, int64_t causal_offset);

#ifdef __cplusplus
}
#endif
#endif
