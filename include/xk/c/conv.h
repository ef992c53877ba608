/* xkernels C API — conv family (see xk/xk.h for xk_status and xk_last_error).
 * Semantics, layouts and the epilogue order are those of xk/conv.hpp. */
#ifndef XK_C_CONV_H
#define XK_C_CONV_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_conv_layout XK_ENUM_INT { XK_CONV_NCHW = 0, XK_CONV_NHWC = 1 } xk_conv_layout;
typedef enum xk_conv_weight_layout XK_ENUM_INT { XK_CONV_OIHW = 0, XK_CONV_OHWI = 1 } xk_conv_weight_layout;
typedef enum xk_conv_residual XK_ENUM_INT {
    XK_CONV_RESIDUAL_NONE = 0,
    XK_CONV_RESIDUAL_BEFORE_ACTIVATION = 1, /* dst = act(conv + bias + residual) */
    XK_CONV_RESIDUAL_AFTER_ACTIVATION = 2,  /* dst = act(conv + bias) + residual */
} xk_conv_residual;

/* Shapes as in xk::ConvDesc. Start from xk_conv2d_desc_init(), which sets strides, dilations and
 * groups to 1, paddings to 0, NCHW / OIHW, no residual, no activation. */
typedef struct xk_conv2d_desc {
    int64_t n, c, h, w, oc, kh, kw;
    int64_t stride_h, stride_w;
    int64_t pad_top, pad_bottom, pad_left, pad_right;
    int64_t dilation_h, dilation_w; /* 1 = dense */
    int64_t groups;
    xk_conv_layout layout;
    xk_conv_weight_layout weight_layout;
    xk_conv_residual residual;
    xk_activation activation;
} xk_conv2d_desc;

/* Fills *desc with the given shape and the defaults above. */
xk_status xk_conv2d_desc_init(xk_conv2d_desc* desc, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc,
                              int64_t kh, int64_t kw);

/* (input + pad_begin + pad_end - dilation*(kernel-1) - 1) / stride + 1, validated. */
xk_status xk_conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad_begin, int64_t pad_end,
                              int64_t dilation, int64_t* out);

/* f32 convolution. bias (f32[oc]) may be NULL (no bias); residual is required iff
 * desc->residual != NONE and may equal dst. */
xk_status xk_conv2d_f32(const xk_conv2d_desc* desc, const float* src, const float* weights, const float* bias,
                        float* dst, const float* residual);

/* bf16 src / weights (raw bfloat16 bits), f32 accumulation, bf16 dst and residual. */
xk_status xk_conv2d_bf16(const xk_conv2d_desc* desc, const uint16_t* src, const uint16_t* weights,
                         const float* bias, uint16_t* dst, const uint16_t* residual);

/* bf16 src / weights, f32 dst and residual. */
xk_status xk_conv2d_bf16_f32(const xk_conv2d_desc* desc, const uint16_t* src, const uint16_t* weights,
                             const float* bias, float* dst, const float* residual);

/* Folds an inference BatchNorm (gamma, beta, mean, var, eps; f32[oc] each) into f32 weights and
 * bias as xk::conv_fold_batchnorm: w' = w * gamma / sqrt(var + eps), b' = (b - mean) * that + beta.
 * bias may be NULL (0); out_weights / out_bias may equal weights / bias. The desc gives the weight
 * shape and layout. */
xk_status xk_conv2d_fold_batchnorm(const xk_conv2d_desc* desc, const float* weights, const float* bias,
                                   const float* gamma, const float* beta, const float* mean, const float* var,
                                   float eps, float* out_weights, float* out_bias);

/* int8 convolution (xk::qconv2d): desc gives the geometry, groups and the activation; it must be
 * NHWC / OHWI (weights [OC][KH][KW][C/groups]), no residual. src_type XK_DTYPE_U8 or _S8 (one scale / zero point), s8 weights
 * with weight_scales f32[oc], bias f32[oc] or NULL, dst_type XK_DTYPE_U8 / _S8 (requantized with
 * dst_scale / dst_zero_point) or _F32 (dst_scale / dst_zero_point not read). */
xk_status xk_qconv2d(const xk_conv2d_desc* desc, xk_dtype src_type, xk_dtype dst_type, const void* src,
                     float src_scale, int32_t src_zero_point, const int8_t* weights, const float* weight_scales,
                     const float* bias, void* dst, float dst_scale, int32_t dst_zero_point);

#ifdef __cplusplus
}
#endif
#endif
