// Vision family: validation, the ROIAlign sampling geometry, registries and public entry points.
#include "kernels/vision/vision.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "common/activation.hpp"
#include "common/check.hpp"

namespace xk {
namespace detail {
namespace {

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

void check_aligned(const char* fn, const char* arg, const void* p, int64_t align) {
    if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) != 0)
        fail_arg(fn, arg, ptr_str(p), "must be aligned to its element size (" + std::to_string(align) + " bytes)");
}

void check_layout(const char* fn, ConvLayout l) {
    if (l != ConvLayout::nchw && l != ConvLayout::nhwc)
        fail_arg(fn, "layout", std::to_string(static_cast<int>(l)), "is not a valid value (valid: nchw=0, nhwc=1)");
}

std::string elem_str(const char* arr, int64_t i, int64_t j, float v) {
    std::ostringstream os;
    os << arr << "[" << i << "][" << j << "]=" << v;
    return os.str();
}

constexpr int64_t kMaxSamplingRatio = 1024;
constexpr int64_t kMaxExtent = std::numeric_limits<int32_t>::max() / 2;

// The samples of one axis of one box for cells [p0, p1): torchvision's arithmetic, f32.
void fill_axis(float start, float bin, int64_t grid, int64_t extent, int64_t p0, int64_t p1, RoiAxis& ax) {
    ax.s.clear();
    ax.begin.clear();
    const float fe = static_cast<float>(extent);
    const float fg = static_cast<float>(grid);
    for (int64_t p = p0; p < p1; ++p) {
        ax.begin.push_back(static_cast<int32_t>(ax.s.size()));
        if (grid < 1) continue;
        int64_t lo = 0, hi = grid;
        if (bin > 0.0f && grid > 4) {
            // Samples outside [-1, extent] read 0: visit only the index range that can land inside
            // (solved in double, widened by 2; the exact test below decides).
            const double step = static_cast<double>(bin) / static_cast<double>(grid);
            const double base = static_cast<double>(start) + static_cast<double>(p) * static_cast<double>(bin);
            const double a = std::floor((-1.0 - base) / step - 0.5) - 2.0;
            const double b = std::ceil((static_cast<double>(extent) - base) / step - 0.5) + 3.0;
            lo = a <= 0.0 ? 0 : (a >= static_cast<double>(grid) ? grid : static_cast<int64_t>(a));
            hi = b <= 0.0 ? 0 : (b >= static_cast<double>(grid) ? grid : static_cast<int64_t>(b));
        }
        const float cell = start + static_cast<float>(p) * bin;
        for (int64_t i = lo; i < hi; ++i) {
            float y = cell + (static_cast<float>(i) + 0.5f) * bin / fg;
            if (y < -1.0f || y > fe) continue;
            if (y <= 0.0f) y = 0.0f;
            int64_t y0 = static_cast<int64_t>(y), y1;
            if (y0 >= extent - 1) {
                y1 = y0 = extent - 1;
                y = static_cast<float>(y0);
            } else {
                y1 = y0 + 1;
            }
            const float l = y - static_cast<float>(y0);
            const float h = static_cast<float>(1.0 - static_cast<double>(l));
            ax.s.push_back({static_cast<int32_t>(y0), static_cast<int32_t>(y1), l, h});
        }
    }
    ax.begin.push_back(static_cast<int32_t>(ax.s.size()));
}

int64_t grid_of(int64_t sampling_ratio, float roi, int64_t pooled) {
    if (sampling_ratio > 0) return sampling_ratio;
    const float g = std::ceil(roi / static_cast<float>(pooled));
    if (!(g > 0.0f)) return 0;
    return g >= 4.0e18f ? int64_t{4000000000000000000} : static_cast<int64_t>(g);
}

}  // namespace

// ---- ROIAlign ----------------------------------------------------------------------------------

std::string RoiAlignProblem::key() const {
    std::ostringstream os;
    os << conv_layout_name(d.layout) << "_" << dtype_name(d.dtype);
    return os.str();
}

RoiAlignProblem roi_align_validate_desc(const char* fn, const RoiAlignDesc& d) {
    check_layout(fn, d.layout);
    check_io_dtype(fn, "dtype", d.dtype);
    check_positive(fn, "N", d.n);
    check_positive(fn, "C", d.c);
    check_positive(fn, "H", d.h);
    check_positive(fn, "W", d.w);
    check_nonnegative(fn, "num_rois", d.num_rois);
    check_positive(fn, "pooled_h", d.pooled_h);
    check_positive(fn, "pooled_w", d.pooled_w);
    if (d.h > kMaxExtent) fail_arg(fn, "H", std::to_string(d.h), "must be <= " + std::to_string(kMaxExtent));
    if (d.w > kMaxExtent) fail_arg(fn, "W", std::to_string(d.w), "must be <= " + std::to_string(kMaxExtent));
    if (d.pooled_h > kMaxExtent)
        fail_arg(fn, "pooled_h", std::to_string(d.pooled_h), "must be <= " + std::to_string(kMaxExtent));
    if (d.pooled_w > kMaxExtent)
        fail_arg(fn, "pooled_w", std::to_string(d.pooled_w), "must be <= " + std::to_string(kMaxExtent));
    if (!(d.spatial_scale > 0.0f) || !std::isfinite(d.spatial_scale))
        fail_arg(fn, "spatial_scale", float_str(d.spatial_scale), "must be finite and > 0");
    if (d.sampling_ratio > kMaxSamplingRatio)
        fail_arg(fn, "sampling_ratio", std::to_string(d.sampling_ratio),
                 "must be <= " + std::to_string(kMaxSamplingRatio) + " (<= 0: adaptive)");
    checked_mul(fn, "N*C*H*W", checked_mul(fn, "N*C*H*W", checked_mul(fn, "N*C*H*W", d.n, d.c), d.h), d.w);
    checked_mul(fn, "K*C*PH*PW",
                checked_mul(fn, "K*C*PH*PW", checked_mul(fn, "K*C*PH*PW", d.num_rois, d.c), d.pooled_h), d.pooled_w);
    checked_mul(fn, "K*5", d.num_rois, 5);
    return RoiAlignProblem{d};
}

void roi_align_validate_args(const char* fn, const RoiAlignProblem& p, const RoiAlignArgs& a) {
    const RoiAlignDesc& d = p.d;
    const int64_t es = dtype_size(d.dtype);
    check_not_null(fn, "src", a.src);
    check_aligned(fn, "src", a.src, es);
    if (d.num_rois == 0) return;  // nothing read from boxes, nothing written
    check_not_null(fn, "boxes", a.boxes);
    check_not_null(fn, "dst", a.dst);
    check_aligned(fn, "boxes", a.boxes, 4);
    check_aligned(fn, "dst", a.dst, es);
    const int64_t src_bytes = d.n * d.c * d.h * d.w * es;
    const int64_t dst_bytes = d.num_rois * d.c * d.pooled_h * d.pooled_w * es;
    if (overlaps(a.dst, dst_bytes, a.src, src_bytes)) fail_arg(fn, "dst", ptr_str(a.dst), "overlaps src=" + ptr_str(a.src));
    if (overlaps(a.dst, dst_bytes, a.boxes, d.num_rois * 20))
        fail_arg(fn, "dst", ptr_str(a.dst), "overlaps boxes=" + ptr_str(a.boxes));
    const float off = d.aligned ? 0.5f : 0.0f;
    for (int64_t k = 0; k < d.num_rois; ++k) {
        const float* b = a.boxes + k * 5;
        if (!(b[0] >= 0.0f && b[0] < static_cast<float>(d.n) && b[0] == std::floor(b[0])))
            fail_arg(fn, "boxes", elem_str("boxes", k, 0, b[0]),
                     "batch index must be an integer in [0, N=" + std::to_string(d.n) + ")");
        for (int j = 1; j <= 4; ++j)
            if (!std::isfinite(b[j] * d.spatial_scale - off))
                fail_arg(fn, "boxes", elem_str("boxes", k, j, b[j]),
                         "must be finite (times spatial_scale=" + float_str(d.spatial_scale) + ")");
        const float rw = (b[3] * d.spatial_scale - off) - (b[1] * d.spatial_scale - off);
        const float rh = (b[4] * d.spatial_scale - off) - (b[2] * d.spatial_scale - off);
        if (!std::isfinite(rw) || !std::isfinite(rh))
            fail_arg(fn, "boxes", elem_str("boxes", k, 3, b[3]), "box extent overflows f32");
    }
}

RoiGeometry roi_align_geometry(const RoiAlignDesc& d, const float* box, int64_t ph0, int64_t ph1, RoiAxis& ys,
                               RoiAxis& xs) {
    const float off = d.aligned ? 0.5f : 0.0f;
    const float sx = box[1] * d.spatial_scale - off, sy = box[2] * d.spatial_scale - off;
    const float ex = box[3] * d.spatial_scale - off, ey = box[4] * d.spatial_scale - off;
    float rw = ex - sx, rh = ey - sy;
    if (!d.aligned) {
        rw = std::max(rw, 1.0f);
        rh = std::max(rh, 1.0f);
    }
    const float bh = rh / static_cast<float>(d.pooled_h), bw = rw / static_cast<float>(d.pooled_w);
    const int64_t gh = grid_of(d.sampling_ratio, rh, d.pooled_h), gw = grid_of(d.sampling_ratio, rw, d.pooled_w);
    fill_axis(sy, bh, gh, d.h, ph0, ph1, ys);
    fill_axis(sx, bw, gw, d.w, 0, d.pooled_w, xs);
    RoiGeometry g;
    g.batch = static_cast<int64_t>(box[0]);
    g.count = (gh >= 1 && gw >= 1) ? static_cast<float>(static_cast<double>(gh) * static_cast<double>(gw)) : 1.0f;
    return g;
}

const Registry<RoiAlignProblem, RoiAlignKernel>& roi_align_registry() {
    struct Ref final : RoiAlignKernel {
        void run(const RoiAlignProblem& p, const RoiAlignArgs& a) const override { roi_align_reference(p, a); }
    };
    static const Registry<RoiAlignProblem, RoiAlignKernel> r(
        "roi_align", {
                         {"avx512:roi_align", Isa::avx512, nullptr, create_roi_align_avx512},
                         {"avx2:roi_align", Isa::avx2, nullptr, create_roi_align_avx2},
                         {"ref:scalar", Isa::scalar, nullptr,
                          [](const RoiAlignProblem& p) -> std::shared_ptr<const RoiAlignKernel> {
                              (void)p;
                              return std::make_shared<Ref>();
                          }},
                     });
    return r;
}

// ---- NMS -----------------------------------------------------------------------------------------

std::string NmsProblem::key() const { return d.batched ? "batched" : "plain"; }

NmsProblem nms_validate_desc(const char* fn, const NmsDesc& d) {
    check_nonnegative(fn, "num_boxes", d.num_boxes);
    checked_mul(fn, "num_boxes*4", d.num_boxes, 4);
    if (std::isnan(d.iou_threshold)) fail_arg(fn, "iou_threshold", "nan", "must not be NaN");
    if (std::isnan(d.score_threshold)) fail_arg(fn, "score_threshold", "nan", "must not be NaN");
    return NmsProblem{d};
}

void nms_validate_args(const char* fn, const NmsProblem& p, const NmsArgs& a) {
    const NmsDesc& d = p.d;
    if (d.batched) {
        if (d.num_boxes > 0) check_not_null(fn, "class_ids", a.class_ids);
    } else if (a.class_ids) {
        fail_arg(fn, "class_ids", ptr_str(a.class_ids), "is given but batched is false");
    }
    if (d.num_boxes == 0) return;
    check_not_null(fn, "boxes", a.boxes);
    check_not_null(fn, "scores", a.scores);
    check_not_null(fn, "keep", a.keep);
    check_aligned(fn, "boxes", a.boxes, 4);
    check_aligned(fn, "scores", a.scores, 4);
    check_aligned(fn, "keep", a.keep, 8);
    if (a.class_ids) check_aligned(fn, "class_ids", a.class_ids, 8);
    const int64_t M = d.num_boxes;
    const int64_t keep_bytes = (d.max_output > 0 ? std::min(M, d.max_output) : M) * 8;
    if (overlaps(a.keep, keep_bytes, a.boxes, M * 16)) fail_arg(fn, "keep", ptr_str(a.keep), "overlaps boxes");
    if (overlaps(a.keep, keep_bytes, a.scores, M * 4)) fail_arg(fn, "keep", ptr_str(a.keep), "overlaps scores");
    if (a.class_ids && overlaps(a.keep, keep_bytes, a.class_ids, M * 8))
        fail_arg(fn, "keep", ptr_str(a.keep), "overlaps class_ids");
    for (int64_t i = 0; i < M; ++i)
        if (std::isnan(a.scores[i]))
            fail_arg(fn, "scores", "scores[" + std::to_string(i) + "]=nan", "must not be NaN");
}

void nms_sort(const NmsProblem& p, const NmsArgs& a, NmsSorted& s) {
    const int64_t M = p.d.num_boxes;
    s.order.clear();
    for (int64_t i = 0; i < M; ++i)
        if (a.scores[i] > p.d.score_threshold) s.order.push_back(i);
    std::stable_sort(s.order.begin(), s.order.end(),
                     [&](int64_t x, int64_t y) { return a.scores[x] > a.scores[y]; });
    const size_t n = s.order.size();
    s.x1.resize(n); s.y1.resize(n); s.x2.resize(n); s.y2.resize(n); s.area.resize(n);
    s.cls.resize(p.d.batched ? n : 0);
    for (size_t k = 0; k < n; ++k) {
        const float* b = a.boxes + s.order[k] * 4;
        s.x1[k] = b[0]; s.y1[k] = b[1]; s.x2[k] = b[2]; s.y2[k] = b[3];
        s.area[k] = (b[2] - b[0]) * (b[3] - b[1]);
        if (p.d.batched) s.cls[k] = a.class_ids[s.order[k]];
    }
}

const Registry<NmsProblem, NmsKernel>& nms_registry() {
    struct Ref final : NmsKernel {
        int64_t run(const NmsProblem& p, const NmsArgs& a) const override { return nms_reference(p, a); }
    };
    static const Registry<NmsProblem, NmsKernel> r(
        "nms", {
                   {"avx512:nms", Isa::avx512, nullptr, create_nms_avx512},
                   {"avx2:nms", Isa::avx2, nullptr, create_nms_avx2},
                   {"ref:scalar", Isa::scalar, nullptr,
                    [](const NmsProblem&) -> std::shared_ptr<const NmsKernel> { return std::make_shared<Ref>(); }},
               });
    return r;
}

// ---- FrozenBatchNorm2d ---------------------------------------------------------------------------

std::string FrozenBnProblem::key() const {
    std::ostringstream os;
    os << conv_layout_name(d.layout) << "_" << dtype_name(d.src_dtype) << ":" << dtype_name(d.dst_dtype) << "_act:"
       << activation_name(d.activation);
    return os.str();
}

FrozenBnProblem frozen_bn_validate_desc(const char* fn, const FrozenBatchNormDesc& d) {
    check_layout(fn, d.layout);
    if (!valid_activation(d.activation))
        fail_arg(fn, "activation", std::to_string(static_cast<int>(d.activation)),
                 "is not a valid value (valid: none=0, relu=1, gelu_erf=2, gelu_tanh=3, silu=4)");
    check_io_dtype(fn, "src_dtype", d.src_dtype);
    check_io_dtype(fn, "dst_dtype", d.dst_dtype);
    check_positive(fn, "N", d.n);
    check_positive(fn, "C", d.c);
    check_positive(fn, "H", d.h);
    check_positive(fn, "W", d.w);
    checked_mul(fn, "N*C*H*W", checked_mul(fn, "N*C*H*W", checked_mul(fn, "N*C*H*W", d.n, d.c), d.h), d.w);
    if (!(d.eps >= 0.0f) || !std::isfinite(d.eps)) fail_arg(fn, "eps", float_str(d.eps), "must be finite and >= 0");
    return FrozenBnProblem{d};
}

void frozen_bn_validate_args(const char* fn, const FrozenBnProblem& p, const FrozenBatchNormArgs& a) {
    const FrozenBatchNormDesc& d = p.d;
    check_not_null(fn, "src", a.src);
    check_not_null(fn, "gamma", a.gamma);
    check_not_null(fn, "beta", a.beta);
    check_not_null(fn, "mean", a.mean);
    check_not_null(fn, "var", a.var);
    check_not_null(fn, "dst", a.dst);
    check_aligned(fn, "src", a.src, dtype_size(d.src_dtype));
    check_aligned(fn, "dst", a.dst, dtype_size(d.dst_dtype));
    check_aligned(fn, "gamma", a.gamma, 4);
    check_aligned(fn, "beta", a.beta, 4);
    check_aligned(fn, "mean", a.mean, 4);
    check_aligned(fn, "var", a.var, 4);
    const int64_t elems = d.n * d.c * d.h * d.w;
    const int64_t sb = elems * dtype_size(d.src_dtype), db = elems * dtype_size(d.dst_dtype);
    if (a.dst != a.src && overlaps(a.dst, db, a.src, sb))
        fail_arg(fn, "dst", ptr_str(a.dst), "partially overlaps src=" + ptr_str(a.src) + " (only dst == src is allowed)");
    if (a.dst == a.src && d.src_dtype != d.dst_dtype)
        fail_arg(fn, "dst", ptr_str(a.dst), "== src needs src_dtype == dst_dtype");
    const float* params[4] = {a.gamma, a.beta, a.mean, a.var};
    const char* names[4] = {"gamma", "beta", "mean", "var"};
    for (int i = 0; i < 4; ++i)
        if (overlaps(a.dst, db, params[i], d.c * 4)) fail_arg(fn, "dst", ptr_str(a.dst), std::string("overlaps ") + names[i]);
    for (int64_t c = 0; c < d.c; ++c)
        if (!(a.var[c] + d.eps > 0.0f))
            fail_arg(fn, "var", "var[" + std::to_string(c) + "]=" + float_str(a.var[c]),
                     "must satisfy var + eps > 0 (eps=" + float_str(d.eps) + ")");
}

void frozen_bn_scale_shift(const FrozenBnProblem& p, const FrozenBatchNormArgs& a, float* scale, float* shift) {
    for (int64_t c = 0; c < p.d.c; ++c) {
        scale[c] = a.gamma[c] * (1.0f / std::sqrt(a.var[c] + p.d.eps));
        shift[c] = a.beta[c] - a.mean[c] * scale[c];
    }
}

const Registry<FrozenBnProblem, FrozenBnKernel>& frozen_bn_registry() {
    struct Ref final : FrozenBnKernel {
        void run(const FrozenBnProblem& p, const FrozenBatchNormArgs& a) const override { frozen_bn_reference(p, a); }
    };
    static const Registry<FrozenBnProblem, FrozenBnKernel> r(
        "frozen_batch_norm",
        {
            {"avx512:frozen_bn", Isa::avx512, nullptr, create_frozen_bn_avx512},
            {"avx2:frozen_bn", Isa::avx2, nullptr, create_frozen_bn_avx2},
            {"ref:scalar", Isa::scalar, nullptr,
             [](const FrozenBnProblem&) -> std::shared_ptr<const FrozenBnKernel> { return std::make_shared<Ref>(); }},
        });
    return r;
}

}  // namespace detail

// ---- public entry points -------------------------------------------------------------------------

struct RoiAlignPlan::State {
    detail::RoiAlignProblem p;
    const char* impl = nullptr;
    std::shared_ptr<const detail::RoiAlignKernel> kernel;
};

RoiAlignPlan::RoiAlignPlan(const RoiAlignDesc& desc) {
    auto s = std::make_shared<State>();
    s->p = detail::roi_align_validate_desc("xk::RoiAlignPlan", desc);
    const auto sel = detail::roi_align_registry().get(s->p);
    s->impl = sel.impl->name;
    s->kernel = sel.kernel;
    s_ = std::move(s);
}

void RoiAlignPlan::run(const RoiAlignArgs& args) const {
    detail::roi_align_validate_args("xk::RoiAlignPlan::run", s_->p, args);
    if (s_->p.d.num_rois > 0) s_->kernel->run(s_->p, args);
}

const RoiAlignDesc& RoiAlignPlan::desc() const { return s_->p.d; }
const char* RoiAlignPlan::impl_name() const { return s_->impl; }

void roi_align(const RoiAlignDesc& desc, const RoiAlignArgs& args) {
    constexpr const char* fn = "xk::roi_align";
    const detail::RoiAlignProblem p = detail::roi_align_validate_desc(fn, desc);
    detail::roi_align_validate_args(fn, p, args);
    if (p.d.num_rois > 0) detail::roi_align_registry().get(p).kernel->run(p, args);
}

int64_t nms(const NmsDesc& desc, const NmsArgs& args) {
    constexpr const char* fn = "xk::nms";
    const detail::NmsProblem p = detail::nms_validate_desc(fn, desc);
    detail::nms_validate_args(fn, p, args);
    if (p.d.num_boxes == 0) return 0;
    return detail::nms_registry().get(p).kernel->run(p, args);
}

const char* nms_impl_name(const NmsDesc& desc) {
    const detail::NmsProblem p = detail::nms_validate_desc("xk::nms_impl_name", desc);
    return detail::nms_registry().select(p, max_isa()).name;
}

void frozen_batch_norm(const FrozenBatchNormDesc& desc, const FrozenBatchNormArgs& args) {
    constexpr const char* fn = "xk::frozen_batch_norm";
    const detail::FrozenBnProblem p = detail::frozen_bn_validate_desc(fn, desc);
    detail::frozen_bn_validate_args(fn, p, args);
    detail::frozen_bn_registry().get(p).kernel->run(p, args);
}

const char* frozen_batch_norm_impl_name(const FrozenBatchNormDesc& desc) {
    const detail::FrozenBnProblem p = detail::frozen_bn_validate_desc("xk::frozen_batch_norm_impl_name", desc);
    return detail::frozen_bn_registry().select(p, max_isa()).name;
}

}  // namespace xk
