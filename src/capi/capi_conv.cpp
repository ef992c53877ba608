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

xk_status xk_qconv2d(const xk_conv2d_desc* desc, xk_dtype src_type, xk_dtype dst_type, const void* src,
                     float src_scale, int32_t src_zero_point, const int8_t* weights, const float* weight_scales,
                     const float* bias, void* dst, float dst_scale, int32_t dst_zero_point) {
    return capi_call([&] {
        constexpr const char* fn = "xk_qconv2d";
        const xk::ConvDesc c = to_desc(fn, desc, xk::DType::f32, xk::DType::f32, bias != nullptr);
        if (c.layout != xk::ConvLayout::nhwc)
            xk::detail::fail_arg(fn, "layout", std::to_string(static_cast<int>(c.layout)), "must be NHWC (1)");
        if (c.weight_layout != xk::ConvWeightLayout::ohwi)
            xk::detail::fail_arg(fn, "weight_layout", std::to_string(static_cast<int>(c.weight_layout)), "must be OHWI (1)");
        if (c.residual != xk::ConvResidual::none)
            xk::detail::fail_arg(fn, "residual", std::to_string(static_cast<int>(c.residual)), "must be none (0)");
        const int st = xk::detail::c_enum(src_type), dt = xk::detail::c_enum(dst_type);
        if (st < 0 || st > 5) xk::detail::fail_arg(fn, "src_type", std::to_string(st), "is not a valid xk_dtype");
        if (dt < 0 || dt > 5) xk::detail::fail_arg(fn, "dst_type", std::to_string(dt), "is not a valid xk_dtype");
        xk::QConvDesc q;
        q.n = c.n; q.c = c.c; q.h = c.h; q.w = c.w; q.oc = c.oc; q.kh = c.kh; q.kw = c.kw;
        q.stride_h = c.stride_h; q.stride_w = c.stride_w;
        q.pad_top = c.pad_top; q.pad_bottom = c.pad_bottom; q.pad_left = c.pad_left; q.pad_right = c.pad_right;
        q.dilation_h = c.dilation_h; q.dilation_w = c.dilation_w;
        q.groups = c.groups;
        q.src_dtype = static_cast<xk::DType>(st);
        q.dst_dtype = static_cast<xk::DType>(dt);
        q.with_bias = bias != nullptr;
        q.activation = c.activation;
        xk::QConvArgs a;
        a.src = src; a.weights = weights; a.bias = bias; a.dst = dst; a.src_scale = src_scale;
        a.src_zero_point = src_zero_point; a.weight_scales = weight_scales; a.dst_scale = dst_scale;
        a.dst_zero_point = dst_zero_point;
        xk::qconv2d(q, a);
    });
}

}  // extern "C"
