/* xkernels C API — quant family (see xk/xk.h for xk_status and xk_last_error).
 * Same semantics as include/xk/quant.hpp: q = saturate(zp + round_half_even(x * (1.0f/scale))),
 * x = (q - zp) * scale, fp32 math. A NULL zero_points means symmetric: the zero point is 0 for s8
 * and 128 for u8. bf16 data as uint16_t bit patterns. */
#ifndef XK_C_QUANT_H
#define XK_C_QUANT_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

/* PyTorch-style parameters covering [min, max] (see xk::compute_quant_params). */
xk_status xk_compute_quant_params_u8(float min, float max, int symmetric, float* scale, int32_t* zero_point);
xk_status xk_compute_quant_params_s8(float min, float max, int symmetric, float* scale, int32_t* zero_point);

/* Per tensor, n contiguous elements, explicit zero point. */
xk_status xk_quantize_per_tensor_f32_u8(int64_t n, const float* x, float scale, int32_t zero_point, uint8_t* q);
xk_status xk_quantize_per_tensor_f32_s8(int64_t n, const float* x, float scale, int32_t zero_point, int8_t* q);
xk_status xk_dequantize_per_tensor_u8_f32(int64_t n, const uint8_t* q, float scale, int32_t zero_point, float* x);
xk_status xk_dequantize_per_tensor_s8_f32(int64_t n, const int8_t* q, float scale, int32_t zero_point, float* x);

/* Per channel of a [rows x cols] matrix: axis 1 = one (scale, zero point) per column, axis 0 = per
 * row. zero_points may be NULL (symmetric). */
xk_status xk_quantize_per_channel_f32_u8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                         const float* scales, const int32_t* zero_points, int axis, uint8_t* q,
                                         int64_t ld_q);
xk_status xk_quantize_per_channel_f32_s8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                         const float* scales, const int32_t* zero_points, int axis, int8_t* q,
                                         int64_t ld_q);
xk_status xk_dequantize_per_channel_u8_f32(int64_t rows, int64_t cols, const uint8_t* q, int64_t ld_q,
                                           const float* scales, const int32_t* zero_points, int axis, float* x,
                                           int64_t ld_x);
xk_status xk_dequantize_per_channel_s8_f32(int64_t rows, int64_t cols, const int8_t* q, int64_t ld_q,
                                           const float* scales, const int32_t* zero_points, int axis, float* x,
                                           int64_t ld_x);

/* Dynamic per token (per row): scales[r] / zero_points[r] receive each row's parameters, from the
 * min / max of the row's finite values (a row without one: those of [0, 0]); NaN quantizes to the
 * zero point, +-inf saturate (as the static forms), no error. smooth (NULL = none) multiplies column
 * c by smooth[c] first (SmoothQuant; an x * smooth that overflows counts as +-inf). zero_points may
 * be NULL when symmetric. */
xk_status xk_quantize_dynamic_per_token_f32_u8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                               const float* smooth, uint8_t* q, int64_t ld_q, float* scales,
                                               int32_t* zero_points, int symmetric);
xk_status xk_quantize_dynamic_per_token_f32_s8(int64_t rows, int64_t cols, const float* x, int64_t ld_x,
                                               const float* smooth, int8_t* q, int64_t ld_q, float* scales,
                                               int32_t* zero_points, int symmetric);
xk_status xk_quantize_dynamic_per_token_bf16_u8(int64_t rows, int64_t cols, const uint16_t* x, int64_t ld_x,
                                                const float* smooth, uint8_t* q, int64_t ld_q, float* scales,
                                                int32_t* zero_points, int symmetric);
xk_status xk_quantize_dynamic_per_token_bf16_s8(int64_t rows, int64_t cols, const uint16_t* x, int64_t ld_x,
                                                const float* smooth, int8_t* q, int64_t ld_q, float* scales,
                                                int32_t* zero_points, int symmetric);

#ifdef __cplusplus
}
#endif
#endif
