/* xkernels C API — vision family: ROIAlign, NMS, FrozenBatchNorm2d (see xk/xk.h for xk_status and
 * xk_last_error). Semantics are those of xk/vision.hpp (torchvision's). */
#ifndef XK_C_VISION_H
#define XK_C_VISION_H
#include "xk/xk.h"
#include "xk/c/conv.h"
#ifdef __cplusplus
extern "C" {
#endif

/* ROIAlign. Start from xk_roi_align_desc_init(): spatial_scale 1, sampling_ratio -1 (adaptive),
 * aligned 0, NCHW. */
typedef struct xk_roi_align_desc {
    int64_t n, c, h, w;          /* feature map */
    int64_t num_rois;            /* K (0 allowed) */
    int64_t pooled_h, pooled_w;  /* PH, PW */
    float spatial_scale;
    int64_t sampling_ratio;      /* <= 0: adaptive */
    int32_t aligned;             /* nonzero: aligned=True */
    xk_conv_layout layout;       /* NCHW: dst K x C x PH x PW; NHWC: dst K x PH x PW x C */
} xk_roi_align_desc;

xk_status xk_roi_align_desc_init(xk_roi_align_desc* desc, int64_t n, int64_t c, int64_t h, int64_t w,
                                 int64_t num_rois, int64_t pooled_h, int64_t pooled_w);
/* boxes: f32[K*5] rows (batch index, x1, y1, x2, y2). */
xk_status xk_roi_align_f32(const xk_roi_align_desc* desc, const float* src, const float* boxes, float* dst);
xk_status xk_roi_align_bf16(const xk_roi_align_desc* desc, const uint16_t* src, const float* boxes, uint16_t* dst);

/* NMS over num_boxes boxes (f32[M*4] x1, y1, x2, y2) with f32[M] scores (not NaN): keep receives
 * the kept indices in descending score order (capacity min(M, max_output), M when
 * max_output <= 0), *num_kept their count. score_threshold: boxes with score <= it are dropped
 * (-INFINITY: none). */
xk_status xk_nms(int64_t num_boxes, const float* boxes, const float* scores, float iou_threshold,
                 float score_threshold, int64_t max_output, int64_t* keep, int64_t* num_kept);
/* The same, suppressing only within a class (class_ids: int64[M]), as torchvision's batched_nms. */
xk_status xk_batched_nms(int64_t num_boxes, const float* boxes, const float* scores, const int64_t* class_ids,
                         float iou_threshold, float score_threshold, int64_t max_output, int64_t* keep,
                         int64_t* num_kept);

/* FrozenBatchNorm2d: dst = act(src * gamma / sqrt(var + eps) + beta - mean * that); parameters
 * f32[c]; dst may equal src. Start from xk_frozen_bn_desc_init(): NCHW, eps 1e-5, no activation. */
typedef struct xk_frozen_bn_desc {
    int64_t n, c, h, w;
    xk_conv_layout layout;
    float eps;
    xk_activation activation;
} xk_frozen_bn_desc;

xk_status xk_frozen_bn_desc_init(xk_frozen_bn_desc* desc, int64_t n, int64_t c, int64_t h, int64_t w);
xk_status xk_frozen_batch_norm_f32(const xk_frozen_bn_desc* desc, const float* src, const float* gamma,
                                   const float* beta, const float* mean, const float* var, float* dst);
xk_status xk_frozen_batch_norm_bf16(const xk_frozen_bn_desc* desc, const uint16_t* src, const float* gamma,
                                    const float* beta, const float* mean, const float* var, uint16_t* dst);

#ifdef __cplusplus
}
#endif
#endif
