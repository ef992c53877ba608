// References of the vision family: the specifications the vectorised kernels are tested against.
// ROIAlign and NMS transcribe torchvision's CPU kernels (roi_align_kernel.cpp, nms_kernel.cpp),
// f32 arithmetic in the same order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/activation.hpp"
#include "common/float_io.hpp"
#include "common/parallel.hpp"
#include "kernels/vision/vision.hpp"

namespace xk::detail {
namespace {

inline float load(const void* p, DType t, int64_t i) {
    return t == DType::bf16 ? bf16::to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}
inline void store(void* p, DType t, int64_t i, float v) {
    if (t == DType::bf16) static_cast<uint16_t*>(p)[i] = bf16::from_float(v);
    else static_cast<float*>(p)[i] = v;
}

// torchvision's bilinear_interpolate on one plane (element (y, x) at plane(y, x)).
template <class At>
float bilinear(int64_t height, int64_t width, float y, float x, At at) {
    if (y < -1.0f || y > static_cast<float>(height) || x < -1.0f || x > static_cast<float>(width)) return 0.0f;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
    if (y_low >= height - 1) {
        y_high = y_low = height - 1;
        y = static_cast<float>(y_low);
    } else {
        y_high = y_low + 1;
    }
    if (x_low >= width - 1) {
        x_high = x_low = width - 1;
        x = static_cast<float>(x_low);
    } else {
        x_high = x_low + 1;
    }
    const float ly = y - static_cast<float>(y_low), lx = x - static_cast<float>(x_low);
    const float hy = static_cast<float>(1. - ly), hx = static_cast<float>(1. - lx);
    const float w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
    return w1 * at(y_low, x_low) + w2 * at(y_low, x_high) + w3 * at(y_high, x_low) + w4 * at(y_high, x_high);
}

// Sample indices [lo, hi) of a grid of g along one axis that can land in [-1, extent]; the others
// read 0 (skipping them changes nothing but the time a huge box takes).
void sample_range(float start, float bin, int64_t g, int64_t extent, int64_t p, int64_t& lo, int64_t& hi) {
    lo = 0;
    hi = g;
    if (!(bin > 0.0f) || g <= 4) return;
    const double step = static_cast<double>(bin) / static_cast<double>(g);
    const double base = static_cast<double>(start) + static_cast<double>(p) * static_cast<double>(bin);
    const double a = std::floor((-1.0 - base) / step - 0.5) - 2.0;
    const double b = std::ceil((static_cast<double>(extent) - base) / step - 0.5) + 3.0;
    lo = a <= 0.0 ? 0 : (a >= static_cast<double>(g) ? g : static_cast<int64_t>(a));
    hi = b <= 0.0 ? 0 : (b >= static_cast<double>(g) ? g : static_cast<int64_t>(b));
}

}  // namespace

void roi_align_reference(const RoiAlignProblem& p, const RoiAlignArgs& a) {
    const RoiAlignDesc& d = p.d;
    const int64_t C = d.c, H = d.h, W = d.w, PH = d.pooled_h, PW = d.pooled_w;
    parallel_for(d.num_rois, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k) {
            const float* r = a.boxes + k * 5;
            const int64_t b = static_cast<int64_t>(r[0]);
            const float offset = d.aligned ? 0.5f : 0.0f;
            const float roi_start_w = r[1] * d.spatial_scale - offset, roi_start_h = r[2] * d.spatial_scale - offset;
            const float roi_end_w = r[3] * d.spatial_scale - offset, roi_end_h = r[4] * d.spatial_scale - offset;
            float roi_width = roi_end_w - roi_start_w, roi_height = roi_end_h - roi_start_h;
            if (!d.aligned) {
                roi_width = std::max(roi_width, 1.0f);
                roi_height = std::max(roi_height, 1.0f);
            }
            const float bin_h = roi_height / static_cast<float>(PH), bin_w = roi_width / static_cast<float>(PW);
            auto grid = [&](float roi, int64_t pooled) -> int64_t {
                if (d.sampling_ratio > 0) return d.sampling_ratio;
                const float g = std::ceil(roi / static_cast<float>(pooled));
                return g > 0.0f ? (g >= 4.0e18f ? int64_t{4000000000000000000} : static_cast<int64_t>(g)) : 0;
            };
            const int64_t gh = grid(roi_height, PH), gw = grid(roi_width, PW);
            const float count =
                (gh >= 1 && gw >= 1) ? static_cast<float>(static_cast<double>(gh) * static_cast<double>(gw)) : 1.0f;
            for (int64_t c = 0; c < C; ++c) {
                auto at = [&](int64_t y, int64_t x) {
                    const int64_t i = d.layout == ConvLayout::nchw ? ((b * C + c) * H + y) * W + x
                                                                    : ((b * H + y) * W + x) * C + c;
                    return load(a.src, d.dtype, i);
                };
                for (int64_t ph = 0; ph < PH; ++ph) {
                    int64_t iy0, iy1;
                    sample_range(roi_start_h, bin_h, gh, H, ph, iy0, iy1);
                    for (int64_t pw = 0; pw < PW; ++pw) {
                        int64_t ix0, ix1;
                        sample_range(roi_start_w, bin_w, gw, W, pw, ix0, ix1);
                        float out = 0.0f;
                        for (int64_t iy = iy0; iy < iy1; ++iy) {
                            const float y = roi_start_h + static_cast<float>(ph) * bin_h +
                                            (static_cast<float>(iy) + 0.5f) * bin_h / static_cast<float>(gh);
                            for (int64_t ix = ix0; ix < ix1; ++ix) {
                                const float x = roi_start_w + static_cast<float>(pw) * bin_w +
                                                (static_cast<float>(ix) + 0.5f) * bin_w / static_cast<float>(gw);
                                out += bilinear(H, W, y, x, at);
                            }
                        }
                        out /= count;
                        const int64_t o = d.layout == ConvLayout::nchw ? ((k * C + c) * PH + ph) * PW + pw
                                                                        : ((k * PH + ph) * PW + pw) * C + c;
                        store(a.dst, d.dtype, o, out);
                    }
                }
            }
        }
    });
}

int64_t nms_reference(const NmsProblem& p, const NmsArgs& a) {
    const NmsDesc& d = p.d;
    const int64_t M = d.num_boxes;
    std::vector<int64_t> order;
    for (int64_t i = 0; i < M; ++i)
        if (a.scores[i] > d.score_threshold) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return a.scores[x] > a.scores[y]; });
    const int64_t limit = d.max_output > 0 ? d.max_output : M;
    std::vector<char> suppressed(static_cast<size_t>(M), 0);
    int64_t kept = 0;
    const float* bx = a.boxes;
    for (size_t oi = 0; oi < order.size() && kept < limit; ++oi) {
        const int64_t i = order[oi];
        if (suppressed[i]) continue;
        a.keep[kept++] = i;
        const float ix1 = bx[i * 4], iy1 = bx[i * 4 + 1], ix2 = bx[i * 4 + 2], iy2 = bx[i * 4 + 3];
        const float iarea = (ix2 - ix1) * (iy2 - iy1);
        for (size_t oj = oi + 1; oj < order.size(); ++oj) {
            const int64_t j = order[oj];
            if (suppressed[j]) continue;
            if (d.batched && a.class_ids[j] != a.class_ids[i]) continue;
            const float jx1 = bx[j * 4], jy1 = bx[j * 4 + 1], jx2 = bx[j * 4 + 2], jy2 = bx[j * 4 + 3];
            const float jarea = (jx2 - jx1) * (jy2 - jy1);
            const float xx1 = std::max(ix1, jx1), yy1 = std::max(iy1, jy1);
            const float xx2 = std::min(ix2, jx2), yy2 = std::min(iy2, jy2);
            const float w = std::max(0.0f, xx2 - xx1), h = std::max(0.0f, yy2 - yy1);
            const float inter = w * h;
            const float ovr = inter / (iarea + jarea - inter);
            if (ovr > d.iou_threshold) suppressed[j] = 1;
        }
    }
    return kept;
}

void frozen_bn_reference(const FrozenBnProblem& p, const FrozenBatchNormArgs& a) {
    const FrozenBatchNormDesc& d = p.d;
    std::vector<float> scale(static_cast<size_t>(d.c)), shift(static_cast<size_t>(d.c));
    frozen_bn_scale_shift(p, a, scale.data(), shift.data());
    const int64_t HW = d.h * d.w, C = d.c;
    parallel_for(d.n * C, std::max<int64_t>(1, 16384 / HW), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / C, c = r % C;
            for (int64_t s = 0; s < HW; ++s) {
                const int64_t i = d.layout == ConvLayout::nchw ? (n * C + c) * HW + s : (n * HW + s) * C + c;
                store(a.dst, d.dst_dtype, i, apply_activation(d.activation, load(a.src, d.src_dtype, i) * scale[c] + shift[c]));
            }
        }
    });
}

}  // namespace xk::detail
