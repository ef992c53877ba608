// xkernels — vision operators of detection / segmentation networks (Mask R-CNN): ROIAlign
// (forward), NMS (plain and batched by class), FrozenBatchNorm2d.
//
// ROIAlign (torchvision.ops.roi_align semantics, forward):
//   src      N x C x H x W feature map, layout ConvLayout::nchw or ::nhwc (dense)
//   boxes    K x 5 f32, row k = (batch index, x1, y1, x2, y2) in image coordinates
//   dst      K x C x PH x PW (nchw) or K x PH x PW x C (nhwc): the layout of src
// For box k: off = aligned ? 0.5 : 0; start_x = x1*spatial_scale - off, end_x = x2*spatial_scale - off
// (likewise y); roi_w = end_x - start_x (max(roi_w, 1) when !aligned), bin_w = roi_w / PW; the
// sampling grid per bin is gw = sampling_ratio > 0 ? sampling_ratio : ceil(roi_w / PW) (likewise gh);
// sample (iy, ix) of bin (ph, pw) sits at
//   y = start_y + ph*bin_h + (iy + 0.5)*bin_h/gh,   x = start_x + pw*bin_w + (ix + 0.5)*bin_w/gw
// and reads src bilinearly with torchvision's boundary rules: a sample with y < -1, y > H, x < -1 or
// x > W reads 0; otherwise y, x are clamped to >= 0, and a sample at or past the last row / column
// reads that row / column. dst = (sum of the samples) / max(gh*gw, 1). All arithmetic is f32 (as
// torchvision's f32 kernel); bf16 src is widened exactly and dst rounded to nearest even.
// Errors (nothing written): a batch index that is not an integer in [0, N), a non-finite
// coordinate, sizes < 1 (K may be 0), spatial_scale <= 0 or not finite, sampling_ratio > 1024.
//
// NMS (torchvision.ops.nms / batched_nms semantics): boxes M x 4 f32 (x1, y1, x2, y2) with
// x1 <= x2, y1 <= y2 expected (not checked, as torchvision); boxes are visited by descending score
// (ties: lower index first); a visited box that is not suppressed is kept and suppresses every
// later box whose IoU with it is > iou_threshold, where
//   area = (x2 - x1)*(y2 - y1), inter = max(0, min(x2) - max(x1))*max(0, min(y2) - max(y1)),
//   IoU = inter / (area_i + area_j - inter)   (f32; 0/0 is NaN, which suppresses nothing)
// batched (class_ids given): a box suppresses only boxes of its own class (torchvision's
// batched_nms). Options: boxes with score <= score_threshold are dropped first (default -inf:
// none); at most max_output boxes are kept (<= 0: no limit). keep[] receives the indices of the
// kept boxes in descending score order; the return value is their count.
//
// FrozenBatchNorm2d (torchvision.ops.FrozenBatchNorm2d, plus a fused activation):
//   scale[c] = gamma[c] / sqrt(var[c] + eps),  shift[c] = beta[c] - mean[c]*scale[c]
//   dst[n, c, y, x] = act(src[n, c, y, x]*scale[c] + shift[c])
// src / dst N x C x H x W in nchw or nhwc, f32 or bf16 (independently); parameters f32[C].
// dst may equal src (in place, same dtype). Errors: eps < 0 or NaN, var[c] + eps <= 0.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>

#include "xk/conv.hpp"
#include "xk/types.hpp"

namespace xk {

struct RoiAlignDesc {
    int64_t n = 1, c = 1, h = 1, w = 1;  // feature map
    int64_t num_rois = 0;                // K
    int64_t pooled_h = 1, pooled_w = 1;  // PH, PW
    float spatial_scale = 1.0f;
    int64_t sampling_ratio = -1;  // <= 0: adaptive, ceil(roi size / pooled size) per dimension
    bool aligned = false;         // true: pixel model shifted by -0.5 (Detectron2's ROIAlignV2)
    ConvLayout layout = ConvLayout::nchw;
    DType dtype = DType::f32;  // src and dst: f32 or bf16
};

struct RoiAlignArgs {
    const void* src = nullptr;     // dtype[N*C*H*W]
    const float* boxes = nullptr;  // f32[K*5]
    void* dst = nullptr;           // dtype[K*C*PH*PW]
};

// Validates the descriptor and selects the implementation once; run() may be called concurrently.
class RoiAlignPlan {
public:
    explicit RoiAlignPlan(const RoiAlignDesc& desc);
    void run(const RoiAlignArgs& args) const;  // validates pointers and boxes, then runs
    const RoiAlignDesc& desc() const;
    const char* impl_name() const;  // "avx512:roi_align", "avx2:roi_align", "ref:scalar"

private:
    struct State;
    std::shared_ptr<const State> s_;
};

void roi_align(const RoiAlignDesc& desc, const RoiAlignArgs& args);

struct NmsDesc {
    int64_t num_boxes = 0;                      // M
    float iou_threshold = 0.5f;                 // suppress IoU > threshold; not NaN
    float score_threshold = -std::numeric_limits<float>::infinity();  // drop score <= threshold first; not NaN
    int64_t max_output = 0;                     // <= 0: keep all
    bool batched = false;                       // class_ids given: suppression within a class only
};

struct NmsArgs {
    const float* boxes = nullptr;      // f32[M*4] (x1, y1, x2, y2)
    const float* scores = nullptr;     // f32[M], not NaN
    const int64_t* class_ids = nullptr;  // int64[M] iff batched
    int64_t* keep = nullptr;           // int64[min(M, max_output)] (M when max_output <= 0)
};

// Returns the number of kept boxes written to keep.
int64_t nms(const NmsDesc& desc, const NmsArgs& args);
// The implementation nms() selects under the current ISA cap ("avx512:nms", "avx2:nms", "ref:scalar").
const char* nms_impl_name(const NmsDesc& desc);

struct FrozenBatchNormDesc {
    int64_t n = 1, c = 1, h = 1, w = 1;
    ConvLayout layout = ConvLayout::nchw;
    DType src_dtype = DType::f32, dst_dtype = DType::f32;  // f32 / bf16 each
    float eps = 1e-5f;  // torchvision's FrozenBatchNorm2d default
    Activation activation = Activation::none;
};

struct FrozenBatchNormArgs {
    const void* src = nullptr;
    const float* gamma = nullptr;  // weight
    const float* beta = nullptr;   // bias
    const float* mean = nullptr;   // running_mean
    const float* var = nullptr;    // running_var
    void* dst = nullptr;           // may equal src when src_dtype == dst_dtype
};

void frozen_batch_norm(const FrozenBatchNormDesc& desc, const FrozenBatchNormArgs& args);
const char* frozen_batch_norm_impl_name(const FrozenBatchNormDesc& desc);

}  // namespace xk
