// C API: conv family.
#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/conv.hpp"

using xk::detail::capi_call;

namespace {

xk::ConvDesc to_desc(const char* fn, const xk_conv2d_desc* c, xk::DType src, xk::DType dst, bool with_bias) {
    xk::detail::check_not_null(fn, "desc", c);
    xk::ConvDesc d;
    d.n = c->n; d.c = c->c; d.h = c->h; d.w = c->w; d.oc = c->oc; d.kh = c->kh; d.kw = c->kw;
    d.stride_h = c->stride_h; d.stride_w = c->stride_w;
    d.pad_top = c->pad_top; d.pad_bottom = c->pad_bottom; d.pad_left = c->pad_left; d.pad_right = c->pad_right;
    d.dilation_h = c->dilation_h; d.dilation_w = c->dilation_w;
    d.groups = c->groups;
    d.layout = static_cast<xk::ConvLayout>(xk::detail::c_enum(c->layout));
    d.weight_layout = static_cast<xk::ConvWeightLayout>(xk::detail::c_enum(c->weight_layout));
    d.residual = static_cast<xk::ConvResidual>(xk::detail::c_enum(c->residual));
    d.activation = static_cast<xk::Activation>(xk::detail::c_enum(c->activation));
    d.src_dtype = d.weight_dtype = src;
    d.dst_dtype = dst;
    d.with_bias = with_bias;
    return d;
}

xk_status conv(const char* fn, const xk_conv2d_desc* desc, xk::DType src_t, xk::DType dst_t, const void* src,
               const void* weights, const float* bias, void* dst, const void* residual) {
    return capi_call([&] {
        const xk::ConvDesc d = to_desc(fn, desc, src_t, dst_t, bias != nullptr);
        xk::conv2d(d, xk::ConvArgs{src, weights, bias, dst, residual});
    });
}

}  // namespace

extern "C" {

xk_status xk_conv2d_desc_init(xk_conv2d_desc* desc, int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc,
                              int64_t kh, int64_t kw) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_conv2d_desc_init", "desc", desc);
        *desc = xk_conv2d_desc{};
        desc->n = n; desc->c = c; desc->h = h; desc->w = w; desc->oc = oc; desc->kh = kh; desc->kw = kw;
        desc->stride_h = desc->stride_w = 1;
        desc->dilation_h = desc->dilation_w = 1;
        desc->groups = 1;
        desc->layout = XK_CONV_NCHW;
        desc->weight_layout = XK_CONV_OIHW;
        desc->residual = XK_CONV_RESIDUAL_NONE;
        desc->activation = XK_ACT_NONE;
    });
}

xk_status xk_conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad_begin, int64_t pad_end,
                              int64_t dilation, int64_t* out) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_conv_output_size", "out", out);
        *out = xk::conv_output_size(input, kernel, stride, pad_begin, pad_end, dilation);
    });
}

xk_status xk_conv2d_f32(const xk_conv2d_desc* desc, const float* src, const float* weights, const float* bias,
                        float* dst, const float* residual) {
    return conv("xk_conv2d_f32", desc, xk::DType::f32, xk::DType::f32, src, weights, bias, dst, residual);
}

xk_status xk_conv2d_bf16(const xk_conv2d_desc* desc, const uint16_t* src, const uint16_t* weights,
                         const float* bias, uint16_t* dst, const uint16_t* residual) {
    return conv("xk_conv2d_bf16", desc, xk::DType::bf16, xk::DType::bf16, src, weights, bias, dst, residual);
}

xk_status xk_conv2d_bf16_f32(const xk_conv2d_desc* desc, const uint16_t* src, const uint16_t* weights,
                             const float* bias, float* dst, const float* residual) {
    return conv("xk_conv2d_bf16_f32", desc, xk::DType::bf16, xk::DType::f32, src, weights, bias, dst, residual);
}

xk_status xk_conv2d_fold_batchnorm(const xk_conv2d_desc* desc, const float* weights, const float* bias,
                                   const float* gamma, const float* beta, const float* mean, const float* var,
                                   float eps, float* out_weights, float* out_bias) {
    return capi_call([&] {
        const xk::ConvDesc d = to_desc("xk_conv2d_fold_batchnorm", desc, xk::DType::f32, xk::DType::f32, bias != nullptr);
        xk::conv_fold_batchnorm(d, weights, bias, gamma, beta, mean, var, eps, out_weights, out_bias);
    });
}

}  // extern "C"
