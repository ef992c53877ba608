// Internal interface of the vision family (ROIAlign, NMS, FrozenBatchNorm2d), shared by its
// implementations and the tests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/registry.hpp"
#include "xk/vision.hpp"

namespace xk::detail {

// ---- ROIAlign ----------------------------------------------------------------------------------
struct RoiAlignProblem {
    RoiAlignDesc d;
    std::string key() const;  // layout and dtype: the rest is runtime
};
RoiAlignProblem roi_align_validate_desc(const char* fn, const RoiAlignDesc& d);
// Pointers (null, alignment, dst overlapping src / boxes) and every box (batch index, finite
// scaled coordinates), before anything is written.
void roi_align_validate_args(const char* fn, const RoiAlignProblem& p, const RoiAlignArgs& a);

struct RoiAlignKernel {
    virtual ~RoiAlignKernel() = default;
    // Validated problem and arguments (kernels are cached per layout / dtype, not per shape).
    virtual void run(const RoiAlignProblem& p, const RoiAlignArgs& a) const = 0;
};

// The sampling of one box along one dimension, exactly as torchvision computes it (f32): for each
// pooled cell p, the samples that read the map (the others read 0 and are left out), each with its
// two source rows / columns and weights (hi = 1 - lo). Samples whose coordinate lies outside
// [-1, extent] are skipped without being visited, so a huge box costs what its visible part costs.
struct RoiAxisSample {
    int32_t i0, i1;  // low / high row (column)
    float l, h;      // weight of i1 (l) and of i0 (h = 1 - l)
};
struct RoiAxis {
    std::vector<RoiAxisSample> s;
    std::vector<int32_t> begin;  // cell p owns s[begin[p], begin[p + 1])
};
struct RoiGeometry {
    int64_t batch = 0;
    float count = 1.0f;  // max(gh*gw, 1): the divisor
};
// Fills the y axis (cells [ph0, ph1)) and the x axis (all cells) of box k; returns its batch index
// and divisor.
RoiGeometry roi_align_geometry(const RoiAlignDesc& d, const float* box, int64_t ph0, int64_t ph1, RoiAxis& ys,
                               RoiAxis& xs);

std::shared_ptr<const RoiAlignKernel> create_roi_align_avx2(const RoiAlignProblem& p);
std::shared_ptr<const RoiAlignKernel> create_roi_align_avx512(const RoiAlignProblem& p);
const Registry<RoiAlignProblem, RoiAlignKernel>& roi_align_registry();

// Reference: torchvision's loop (per box, channel, cell, sample), f32, written from its definition
// without the helpers above.
void roi_align_reference(const RoiAlignProblem& p, const RoiAlignArgs& a);

// ---- NMS -----------------------------------------------------------------------------------------
struct NmsProblem {
    NmsDesc d;
    std::string key() const;  // batched or not (sizes and thresholds are runtime)
};
NmsProblem nms_validate_desc(const char* fn, const NmsDesc& d);
void nms_validate_args(const char* fn, const NmsProblem& p, const NmsArgs& a);

// The boxes visited in order (descending score, ties by index, score > score_threshold), their
// coordinates, areas and classes gathered contiguously: what every implementation sweeps.
struct NmsSorted {
    std::vector<int64_t> order;
    std::vector<float> x1, y1, x2, y2, area;
    std::vector<int64_t> cls;  // empty unless batched
};
void nms_sort(const NmsProblem& p, const NmsArgs& a, NmsSorted& s);

struct NmsKernel {
    virtual ~NmsKernel() = default;
    // Validated arguments; returns the kept count.
    virtual int64_t run(const NmsProblem& p, const NmsArgs& a) const = 0;
};
std::shared_ptr<const NmsKernel> create_nms_avx2(const NmsProblem& p);
std::shared_ptr<const NmsKernel> create_nms_avx512(const NmsProblem& p);
const Registry<NmsProblem, NmsKernel>& nms_registry();
int64_t nms_reference(const NmsProblem& p, const NmsArgs& a);

// ---- FrozenBatchNorm2d ---------------------------------------------------------------------------
struct FrozenBnProblem {
    FrozenBatchNormDesc d;
    std::string key() const;  // layout, dtypes, activation
};
FrozenBnProblem frozen_bn_validate_desc(const char* fn, const FrozenBatchNormDesc& d);
void frozen_bn_validate_args(const char* fn, const FrozenBnProblem& p, const FrozenBatchNormArgs& a);
// scale / shift of FrozenBatchNorm2d (f32, as torchvision: w * rsqrt(var + eps), b - mean * scale).
void frozen_bn_scale_shift(const FrozenBnProblem& p, const FrozenBatchNormArgs& a, float* scale, float* shift);

struct FrozenBnKernel {
    virtual ~FrozenBnKernel() = default;
    virtual void run(const FrozenBnProblem& p, const FrozenBatchNormArgs& a) const = 0;
};
std::shared_ptr<const FrozenBnKernel> create_frozen_bn_avx2(const FrozenBnProblem& p);
std::shared_ptr<const FrozenBnKernel> create_frozen_bn_avx512(const FrozenBnProblem& p);
const Registry<FrozenBnProblem, FrozenBnKernel>& frozen_bn_registry();
void frozen_bn_reference(const FrozenBnProblem& p, const FrozenBatchNormArgs& a);

}  // namespace xk::detail
