// C API: vision family.
#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/c/vision.h"
#include "xk/vision.hpp"

using xk::detail::capi_call;

namespace {

xk::RoiAlignDesc to_desc(const char* fn, const xk_roi_align_desc* c, xk::DType t) {
    xk::detail::check_not_null(fn, "desc", c);
    xk::RoiAlignDesc d;
    d.n = c->n; d.c = c->c; d.h = c->h; d.w = c->w;
    d.num_rois = c->num_rois; d.pooled_h = c->pooled_h; d.pooled_w = c->pooled_w;
    d.spatial_scale = c->spatial_scale;
    d.sampling_ratio = c->sampling_ratio;
    d.aligned = c->aligned != 0;
    d.layout = static_cast<xk::ConvLayout>(xk::detail::c_enum(c->layout));
    d.dtype = t;
    return d;
}

xk::FrozenBatchNormDesc to_desc(const char* fn, const xk_frozen_bn_desc* c, xk::DType t) {
    xk::detail::check_not_null(fn, "desc", c);
    xk::FrozenBatchNormDesc d;
    d.n = c->n; d.c = c->c; d.h = c->h; d.w = c->w;
    d.layout = static_cast<xk::ConvLayout>(xk::detail::c_enum(c->layout));
    d.eps = c->eps;
    d.activation = static_cast<xk::Activation>(xk::detail::c_enum(c->activation));
    d.src_dtype = d.dst_dtype = t;
    return d;
}

xk_status nms_call(const char* fn, int64_t m, const float* boxes, const float* scores, const int64_t* cls,
                   bool batched, float iou, float score_thr, int64_t max_out, int64_t* keep, int64_t* num_kept) {
    return capi_call([&] {
        xk::detail::check_not_null(fn, "num_kept", num_kept);
        xk::NmsDesc d;
        d.num_boxes = m;
        d.iou_threshold = iou;
        d.score_threshold = score_thr;
        d.max_output = max_out;
        d.batched = batched;
        if (batched && m > 0) xk::detail::check_not_null(fn, "class_ids", cls);
        *num_kept = xk::nms(d, xk::NmsArgs{boxes, scores, cls, keep});
    });
}

}  // namespace

extern "C" {

xk_status xk_roi_align_desc_init(xk_roi_align_desc* desc, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t num_rois, int64_t pooled_h, int64_t pooled_w) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_roi_align_desc_init", "desc", desc);
        *desc = xk_roi_align_desc{};
        desc->n = n; desc->c = c; desc->h = h; desc->w = w;
        desc->num_rois = num_rois; desc->pooled_h = pooled_h; desc->pooled_w = pooled_w;
        desc->spatial_scale = 1.0f;
        desc->sampling_ratio = -1;
        desc->aligned = 0;
        desc->layout = XK_CONV_NCHW;
    });
}

xk_status xk_roi_align_f32(const xk_roi_align_desc* desc, const float* src, const float* boxes, float* dst) {
    return capi_call([&] { xk::roi_align(to_desc("xk_roi_align_f32", desc, xk::DType::f32), {src, boxes, dst}); });
}

xk_status xk_roi_align_bf16(const xk_roi_align_desc* desc, const uint16_t* src, const float* boxes, uint16_t* dst) {
    return capi_call([&] { xk::roi_align(to_desc("xk_roi_align_bf16", desc, xk::DType::bf16), {src, boxes, dst}); });
}

xk_status xk_nms(int64_t num_boxes, const float* boxes, const float* scores, float iou_threshold,
                 float score_threshold, int64_t max_output, int64_t* keep, int64_t* num_kept) {
    return nms_call("xk_nms", num_boxes, boxes, scores, nullptr, false, iou_threshold, score_threshold, max_output,
                    keep, num_kept);
}

xk_status xk_batched_nms(int64_t num_boxes, const float* boxes, const float* scores, const int64_t* class_ids,
                         float iou_threshold, float score_threshold, int64_t max_output, int64_t* keep,
                         int64_t* num_kept) {
    return nms_call("xk_batched_nms", num_boxes, boxes, scores, class_ids, true, iou_threshold, score_threshold,
                    max_output, keep, num_kept);
}

xk_status xk_frozen_bn_desc_init(xk_frozen_bn_desc* desc, int64_t n, int64_t c, int64_t h, int64_t w) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_frozen_bn_desc_init", "desc", desc);
        *desc = xk_frozen_bn_desc{};
        desc->n = n; desc->c = c; desc->h = h; desc->w = w;
        desc->layout = XK_CONV_NCHW;
        desc->eps = 1e-5f;
        desc->activation = XK_ACT_NONE;
    });
}

xk_status xk_frozen_batch_norm_f32(const xk_frozen_bn_desc* desc, const float* src, const float* gamma,
                                   const float* beta, const float* mean, const float* var, float* dst) {
    return capi_call([&] {
        xk::frozen_batch_norm(to_desc("xk_frozen_batch_norm_f32", desc, xk::DType::f32),
                              {src, gamma, beta, mean, var, dst});
    });
}

xk_status xk_frozen_batch_norm_bf16(const xk_frozen_bn_desc* desc, const uint16_t* src, const float* gamma,
                                    const float* beta, const float* mean, const float* var, uint16_t* dst) {
    return capi_call([&] {
        xk::frozen_batch_norm(to_desc("xk_frozen_batch_norm_bf16", desc, xk::DType::bf16),
                              {src, gamma, beta, mean, var, dst});
    });
}

}  // extern "C"
