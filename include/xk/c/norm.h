/* xkernels C API — norm family (see xk/xk.h for xk_status and xk_last_error).
 * Same semantics as include/xk/norm.hpp: [rows x hidden] row-major with row strides in elements
 * (0 = hidden), fp32 math, bf16 data as uint16_t bit patterns (the upper half of an IEEE float).
 * weight / bias may be NULL (not applied). y may be x (in place, same stride). */
#ifndef XK_C_NORM_H
#define XK_C_NORM_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

/* y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps). */
xk_status xk_rms_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, const float* weight, float eps,
                          float* y, int64_t ld_y);
xk_status xk_rms_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x, const uint16_t* weight,
                           float eps, uint16_t* y, int64_t ld_y);

/* y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var(x) + eps). */
xk_status xk_layer_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, const float* weight,
                            const float* bias, float eps, float* y, int64_t ld_y);
xk_status xk_layer_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x, const uint16_t* weight,
                             const uint16_t* bias, float eps, uint16_t* y, int64_t ld_y);

/* Pre-norm block: residual = x + residual (in place, rounded to the dtype), y = norm(residual).
 * y may be x (vLLM's fused_add_rms_norm writes y over x). */
xk_status xk_fused_add_rms_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, float* residual,
                                    int64_t ld_residual, const float* weight, float eps, float* y, int64_t ld_y);
xk_status xk_fused_add_rms_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x,
                                     uint16_t* residual, int64_t ld_residual, const uint16_t* weight, float eps,
                                     uint16_t* y, int64_t ld_y);
xk_status xk_fused_add_layer_norm_f32(int64_t rows, int64_t hidden, const float* x, int64_t ld_x, float* residual,
                                      int64_t ld_residual, const float* weight, const float* bias, float eps, float* y,
                                      int64_t ld_y);
xk_status xk_fused_add_layer_norm_bf16(int64_t rows, int64_t hidden, const uint16_t* x, int64_t ld_x,
                                       uint16_t* residual, int64_t ld_residual, const uint16_t* weight,
                                       const uint16_t* bias, float eps, uint16_t* y, int64_t ld_y);

#ifdef __cplusplus
}
#endif
#endif
