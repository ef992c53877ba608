// Vision ops: ROIAlign, NMS, FrozenBatchNorm2d. Every registry entry against the reference (the
// transcription of torchvision's CPU kernels), the reference against an independent oracle written
// here (ROIAlign: per-sample bilinear interpolation with f32 positions and a double sum; NMS: "a box
// is kept iff no kept box of its class overlaps it by more than the threshold"; FrozenBN: double
// math), hand-made cases with known answers (constant and linear maps, torchvision's boundary
// rules, aligned, adaptive grid, ties, strict IoU threshold, 0/0 IoU), both layouts, f32 / bf16,
// odd sizes, misaligned pointers, 1 and 2 threads, bad input (nothing written), the C API.
//
// Tolerances: ROIAlign f32: |got - want| <= 1e-5 * (1 + |want|) (a convex combination of at most a
// few hundred products per output, inputs in [-1, 1], FMA vs separate rounding); bf16 dst: plus
// 2^-8 * |want| (one rounding). NMS: exact (same f32 operations in every implementation). FrozenBN:
// 2e-6 * (1 + |x*scale| + |shift|) for f32 (one FMA vs mul + add), plus 2^-8 * |want| for bf16 dst.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/test_util.hpp"
#include "kernels/vision/vision.hpp"
#include "xk/runtime.hpp"
#include "xk/vision.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSlow = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSlow = true;
#else
constexpr bool kSlow = false;
#endif
#else
constexpr bool kSlow = false;
#endif

constexpr double kBf16Rel = 1.0 / 256;

// ---- ROIAlign ------------------------------------------------------------------------------------

struct Map {
    DType t = DType::f32;
    Buffer<float> f;
    Buffer<bf16> h;
    void alloc(DType type, size_t n, size_t misalign_elems = 0) {
        t = type;
        if (t == DType::bf16) h.resize(n, misalign_elems * 2);
        else f.resize(n, misalign_elems * 4);
    }
    void* data() { return t == DType::bf16 ? static_cast<void*>(h.data()) : static_cast<void*>(f.data()); }
    double get(size_t i) const { return t == DType::bf16 ? h[i].to_float() : f[i]; }
    void set(size_t i, float v) {
        if (t == DType::bf16) h[i] = bf16(v);
        else f[i] = v;
    }
    size_t size() const { return t == DType::bf16 ? h.size() : f.size(); }
};

size_t src_at(const RoiAlignDesc& d, int64_t n, int64_t c, int64_t y, int64_t x) {
    return static_cast<size_t>(d.layout == ConvLayout::nchw ? ((n * d.c + c) * d.h + y) * d.w + x
                                                            : ((n * d.h + y) * d.w + x) * d.c + c);
}
size_t dst_at(const RoiAlignDesc& d, int64_t k, int64_t c, int64_t ph, int64_t pw) {
    return static_cast<size_t>(d.layout == ConvLayout::nchw ? ((k * d.c + c) * d.pooled_h + ph) * d.pooled_w + pw
                                                            : ((k * d.pooled_h + ph) * d.pooled_w + pw) * d.c + c);
}

// Oracle: the definition of the header, sample by sample (positions in f32 as torchvision, the
// interpolation and the sum in double). Visits every sample of the grid (keep boxes moderate).
std::vector<double> roi_oracle(const RoiAlignDesc& d, const Map& src, const std::vector<float>& boxes) {
    std::vector<double> out(static_cast<size_t>(d.num_rois * d.c * d.pooled_h * d.pooled_w));
    for (int64_t k = 0; k < d.num_rois; ++k) {
        const float* r = &boxes[k * 5];
        const int64_t b = static_cast<int64_t>(r[0]);
        const float off = d.aligned ? 0.5f : 0.0f;
        const float sx = r[1] * d.spatial_scale - off, sy = r[2] * d.spatial_scale - off;
        float rw = r[3] * d.spatial_scale - off - sx, rh = r[4] * d.spatial_scale - off - sy;
        if (!d.aligned) { rw = std::max(rw, 1.0f); rh = std::max(rh, 1.0f); }
        const float bw = rw / static_cast<float>(d.pooled_w), bh = rh / static_cast<float>(d.pooled_h);
        const int64_t gh = d.sampling_ratio > 0 ? d.sampling_ratio : static_cast<int64_t>(std::ceil(rh / static_cast<float>(d.pooled_h)));
        const int64_t gw = d.sampling_ratio > 0 ? d.sampling_ratio : static_cast<int64_t>(std::ceil(rw / static_cast<float>(d.pooled_w)));
        const double count = std::max<int64_t>(gh * gw, 1);
        for (int64_t c = 0; c < d.c; ++c)
            for (int64_t ph = 0; ph < d.pooled_h; ++ph)
                for (int64_t pw = 0; pw < d.pooled_w; ++pw) {
                    double acc = 0;
                    for (int64_t iy = 0; iy < gh; ++iy)
                        for (int64_t ix = 0; ix < gw; ++ix) {
                            float y = sy + static_cast<float>(ph) * bh + (static_cast<float>(iy) + 0.5f) * bh / static_cast<float>(gh);
                            float x = sx + static_cast<float>(pw) * bw + (static_cast<float>(ix) + 0.5f) * bw / static_cast<float>(gw);
                            if (y < -1.0f || y > static_cast<float>(d.h) || x < -1.0f || x > static_cast<float>(d.w)) continue;
                            y = std::max(y, 0.0f);
                            x = std::max(x, 0.0f);
                            int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
                            int64_t y1 = y0 + 1, x1 = x0 + 1;
                            if (y0 >= d.h - 1) { y0 = y1 = d.h - 1; y = static_cast<float>(y0); }
                            if (x0 >= d.w - 1) { x0 = x1 = d.w - 1; x = static_cast<float>(x0); }
                            const double ly = static_cast<double>(y) - y0, lx = static_cast<double>(x) - x0;
                            acc += (1 - ly) * (1 - lx) * src.get(src_at(d, b, c, y0, x0)) +
                                   (1 - ly) * lx * src.get(src_at(d, b, c, y0, x1)) +
                                   ly * (1 - lx) * src.get(src_at(d, b, c, y1, x0)) + ly * lx * src.get(src_at(d, b, c, y1, x1));
                        }
                    out[dst_at(d, k, c, ph, pw)] = acc / count;
                }
    }
    return out;
}

::testing::AssertionResult roi_close(const RoiAlignDesc& d, const Map& got, const std::vector<double>& want) {
    const double rel = d.dtype == DType::bf16 ? kBf16Rel : 0.0;
    size_t bad = 0;
    std::string msg;
    for (size_t i = 0; i < want.size(); ++i) {
        const double g = got.get(i), w = want[i];
        if (!(std::fabs(g - w) <= 1e-5 * (1 + std::fabs(w)) + rel * std::fabs(w)) && bad++ < 5)
            msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
    }
    if (!bad) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << want.size() << " differ:" << msg;
}

std::vector<float> random_boxes(const RoiAlignDesc& d, uint64_t seed, bool wild) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> b(static_cast<size_t>(d.num_rois * 5));
    const float iw = static_cast<float>(d.w) / d.spatial_scale, ih = static_cast<float>(d.h) / d.spatial_scale;
    for (int64_t k = 0; k < d.num_rois; ++k) {
        float* r = &b[k * 5];
        r[0] = static_cast<float>(g() % static_cast<uint64_t>(d.n));
        const float lo = wild ? -0.5f : 0.0f, span = wild ? 2.0f : 1.0f;
        float x1 = (lo + span * u(g)) * iw, y1 = (lo + span * u(g)) * ih;
        float x2 = x1 + (wild ? 1.5f : 0.8f) * u(g) * iw, y2 = y1 + (wild ? 1.5f : 0.8f) * u(g) * ih;
        if (wild && k % 7 == 3) std::swap(x1, x2);  // negative width
        r[1] = x1; r[2] = y1; r[3] = x2; r[4] = y2;
    }
    return b;
}

void run_forced(const char* impl, const RoiAlignDesc& d, const RoiAlignArgs& a) {
    const auto& reg = detail::roi_align_registry();
    const detail::RoiAlignProblem p = detail::roi_align_validate_desc("test", d);
    detail::roi_align_validate_args("test", p, a);
    reg.get(p, reg.find(impl)).kernel->run(p, a);
}

struct RoiCase {
    int64_t n, c, h, w, k, ph, pw, sr;
    float scale;
};

TEST(RoiAlign, EveryIsaMatchesReferenceAndOracle) {
    std::vector<RoiCase> cases = {
        {1, 1, 1, 1, 3, 1, 1, -1, 1.0f},     {1, 7, 5, 9, 5, 2, 3, 2, 1.0f},   {2, 17, 13, 11, 9, 7, 7, 0, 0.5f},
        {2, 64, 10, 12, 6, 7, 7, 2, 0.25f},  {1, 100, 9, 7, 4, 3, 5, 3, 1.0f}, {3, 16, 6, 6, 80, 2, 2, 1, 1.0f},
        {1, 33, 20, 17, 11, 4, 4, -1, 0.5f},
    };
    if (kSlow) cases.resize(5);
    uint64_t seed = 1;
    for (const RoiCase& rc : cases)
        for (ConvLayout lay : {ConvLayout::nchw, ConvLayout::nhwc})
            for (DType dt : {DType::f32, DType::bf16})
                for (bool aligned : {false, true}) {
                    RoiAlignDesc d;
                    d.n = rc.n; d.c = rc.c; d.h = rc.h; d.w = rc.w; d.num_rois = rc.k; d.pooled_h = rc.ph;
                    d.pooled_w = rc.pw; d.sampling_ratio = rc.sr; d.spatial_scale = rc.scale; d.aligned = aligned;
                    d.layout = lay; d.dtype = dt;
                    SCOPED_TRACE(detail::RoiAlignProblem{d}.key() + " c" + std::to_string(rc.c) + " k" + std::to_string(rc.k) +
                                 " sr" + std::to_string(rc.sr) + (aligned ? " aligned" : ""));
                    Map src;
                    src.alloc(dt, static_cast<size_t>(d.n * d.c * d.h * d.w), seed % 3);
                    std::mt19937_64 g(seed);
                    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
                    for (size_t i = 0; i < src.size(); ++i) src.set(i, u(g));
                    const std::vector<float> boxes = random_boxes(d, seed + 7, seed % 2 == 0);
                    ++seed;
                    const size_t no = static_cast<size_t>(d.num_rois * d.c * d.pooled_h * d.pooled_w);
                    const std::vector<double> want = roi_oracle(d, src, boxes);
                    Map ref;
                    ref.alloc(dt, no, 1);
                    run_forced("ref:scalar", d, {src.data(), boxes.data(), ref.data()});
                    EXPECT_TRUE(roi_close(d, ref, want)) << "reference vs oracle";
                    for_each_isa([&](Isa) {
                        for (int threads : {1, 2}) {
                            set_num_threads(threads);
                            Map got;
                            got.alloc(dt, no, 3);
                            RoiAlignPlan plan(d);
                            plan.run({src.data(), boxes.data(), got.data()});
                            EXPECT_TRUE(roi_close(d, got, want)) << plan.impl_name() << " threads " << threads;
                        }
                    });
                    set_num_threads(0);
                }
}

TEST(RoiAlign, RegistrySelection) {
    RoiAlignDesc d;
    const std::vector<Isa> isas = available_isas();
    for (Isa isa : isas) {
        IsaCap cap(isa);
        const std::string name = RoiAlignPlan(d).impl_name();
        if (isa >= Isa::avx512) EXPECT_EQ(name, "avx512:roi_align");
        else if (isa >= Isa::avx2) EXPECT_EQ(name, "avx2:roi_align");
        else EXPECT_EQ(name, "ref:scalar");
    }
}

// Every implementation on one hand-made case: f(y, x) given by `fill`, one box, expected outputs.
void expect_cells(RoiAlignDesc d, const std::function<float(int64_t, int64_t)>& fill, std::vector<float> box,
                  const std::vector<double>& want, double tol) {
    for (ConvLayout lay : {ConvLayout::nchw, ConvLayout::nhwc}) {
        d.layout = lay;
        d.c = 3;
        d.num_rois = 1;
        Map src;
        src.alloc(DType::f32, static_cast<size_t>(d.n * d.c * d.h * d.w));
        for (int64_t n = 0; n < d.n; ++n)
            for (int64_t c = 0; c < d.c; ++c)
                for (int64_t y = 0; y < d.h; ++y)
                    for (int64_t x = 0; x < d.w; ++x) src.set(src_at(d, n, c, y, x), fill(y, x) * static_cast<float>(c + 1));
        for (const auto& impl : detail::roi_align_registry().impls()) {
            if (!isa_supported(impl.isa)) continue;
            SCOPED_TRACE(std::string(impl.name) + " " + conv_layout_name(lay));
            Map got;
            got.alloc(DType::f32, static_cast<size_t>(d.c * d.pooled_h * d.pooled_w));
            run_forced(impl.name, d, {src.data(), box.data(), got.data()});
            for (int64_t c = 0; c < d.c; ++c)
                for (int64_t ph = 0; ph < d.pooled_h; ++ph)
                    for (int64_t pw = 0; pw < d.pooled_w; ++pw)
                        EXPECT_NEAR(got.get(dst_at(d, 0, c, ph, pw)), want[ph * d.pooled_w + pw] * (c + 1), tol * (c + 1))
                            << "c " << c << " cell " << ph << "," << pw;
        }
    }
}

TEST(RoiAlign, HandMadeCases) {
    RoiAlignDesc d;
    d.h = 8; d.w = 8; d.pooled_h = 2; d.pooled_w = 2; d.sampling_ratio = 2;
    // Constant map: every bin inside the map averages to the constant.
    expect_cells(d, [](int64_t, int64_t) { return 3.0f; }, {0, 0.5f, 1.0f, 6.0f, 5.5f}, {3, 3, 3, 3}, 1e-6);
    // Linear map x + 10 y (bilinear interpolation is exact): box x 1..5, y 2..6, bins of 2, samples
    // at bin offsets 0.5 and 1.5 -> cell means x = 2, 4 and y = 3, 5.
    expect_cells(d, [](int64_t y, int64_t x) { return static_cast<float>(x + 10 * y); }, {0, 1, 2, 5, 6},
                 {32, 34, 52, 54}, 1e-5);
    // aligned shifts the box by -0.5: x samples at 1.0 and 2.0 (mean 1.5) instead of 1.5, 2.5 (2).
    RoiAlignDesc one = d;
    one.pooled_h = one.pooled_w = 1;
    one.aligned = true;
    expect_cells(one, [](int64_t, int64_t x) { return static_cast<float>(x); }, {0, 1, 1, 3, 3}, {1.5}, 1e-6);
    one.aligned = false;
    expect_cells(one, [](int64_t, int64_t x) { return static_cast<float>(x); }, {0, 1, 1, 3, 3}, {2.0}, 1e-6);
    // Boundary rules on an all-ones map: samples at x = -1.5 (< -1: read 0) and x = -0.5 (clamped to
    // 0: reads 1) -> 0.5; a box past the map -> 0.
    expect_cells(one, [](int64_t, int64_t) { return 1.0f; }, {0, -2, 0, 0, 2}, {0.5}, 1e-6);
    expect_cells(one, [](int64_t, int64_t) { return 1.0f; }, {0, 10, 10, 12, 12}, {0.0}, 0);
    // At or past the last row: reads that row (f = y, H = 8: samples 7.25, 7.75 read row 7, not 7.5).
    expect_cells(one, [](int64_t y, int64_t) { return static_cast<float>(y); }, {0, 2, 7, 3, 8}, {7.0}, 1e-6);
    // Samples in (H - 1, H] only (y 7.25, 7.75 with H = 8) vs (H, ...): y > H reads 0 -> half.
    expect_cells(one, [](int64_t, int64_t) { return 1.0f; }, {0, 2, 7.5f, 3, 9.5f}, {0.5}, 1e-6);
    // Adaptive grid: a 10-wide box over 2 bins samples ceil(5) = 5 points per bin; on f = x the
    // mean is the bin centre (x 0..10: 2.5, 7.5); y: box 0..2 over 2 bins -> grid 1, centres 0.5, 1.5.
    RoiAlignDesc ad = d;
    ad.w = 16;
    ad.sampling_ratio = -1;
    expect_cells(ad, [](int64_t y, int64_t x) { return static_cast<float>(x + 100 * y); }, {0, 0, 0, 10, 2},
                 {52.5, 57.5, 152.5, 157.5}, 1e-4);
    // !aligned: a box smaller than one pixel is grown to 1 x 1 (width max(0, 1) = 1): samples 2.25, 2.75.
    expect_cells(one, [](int64_t, int64_t x) { return static_cast<float>(x); }, {0, 2, 2, 2, 2}, {2.5}, 1e-6);
    // aligned: an empty box has a grid of 0 samples -> 0.
    one.aligned = true;
    one.sampling_ratio = -1;
    expect_cells(one, [](int64_t, int64_t) { return 1.0f; }, {0, 2, 2, 2, 2}, {0.0}, 0);
}

TEST(RoiAlign, HugeBoxesCostWhatTheyCover) {
    // A box 1e7 pixels wide (adaptive grid ~1.4e6 samples per cell and axis) on a 6 x 6 map: only
    // the samples near the map are visited. Checked against the constant it must produce.
    RoiAlignDesc d;
    d.h = 6; d.w = 6; d.c = 5; d.num_rois = 2; d.pooled_h = d.pooled_w = 7;
    for (ConvLayout lay : {ConvLayout::nchw, ConvLayout::nhwc})
        for_each_isa([&](Isa) {
            d.layout = lay;
            Map src;
            src.alloc(DType::f32, static_cast<size_t>(d.c * d.h * d.w));
            for (size_t i = 0; i < src.size(); ++i) src.set(i, 1.0f);
            const std::vector<float> boxes = {0, -5e6f, -5e6f, 5e6f, 5e6f, 0, 0, 0, 1e7f, 3};
            Map got;
            got.alloc(DType::f32, static_cast<size_t>(d.num_rois * d.c * 49));
            roi_align(d, {src.data(), boxes.data(), got.data()});
            for (size_t i = 0; i < got.size(); ++i) {
                EXPECT_GE(got.get(i), 0.0);
                EXPECT_LT(got.get(i), 1e-3);  // (few samples on the map) / (1.4e6^2 or 1.4e6 * 1)
            }
        });
}

TEST(RoiAlign, BadInput) {
    RoiAlignDesc d;
    d.n = 2; d.c = 3; d.h = 4; d.w = 4; d.num_rois = 2; d.pooled_h = d.pooled_w = 2;
    Buffer<float> src(static_cast<size_t>(2 * 3 * 16)), dst(static_cast<size_t>(2 * 3 * 4));
    std::vector<float> boxes = {0, 0, 0, 2, 2, 1, 1, 1, 3, 3};
    auto call = [&](const RoiAlignDesc& dd, std::vector<float> b) { roi_align(dd, {src.data(), b.data(), dst.data()}); };
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = 42.0f;
    auto bad = boxes;
    bad[5] = 2;
    XK_EXPECT_INVALID(call(d, bad), "boxes[1][0]=2 batch index must be an integer in [0, N=2)");
    bad[5] = 0.5f;
    XK_EXPECT_INVALID(call(d, bad), "boxes[1][0]=0.5");
    bad[5] = -1;
    XK_EXPECT_INVALID(call(d, bad), "boxes[1][0]=-1");
    bad = boxes;
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(call(d, bad), "boxes[0][3]=nan must be finite");
    bad = boxes;
    bad[4] = std::numeric_limits<float>::infinity();
    XK_EXPECT_INVALID(call(d, bad), "boxes[0][4]=inf");
    bad = boxes;
    bad[1] = -3e38f;
    bad[3] = 3e38f;
    XK_EXPECT_INVALID(call(d, bad), "overflows");
    for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], 42.0f) << "a rejected call wrote dst";
    RoiAlignDesc e = d;
    e.c = -1;
    XK_EXPECT_INVALID(call(e, boxes), "C=-1 must be >= 1");
    e = d; e.num_rois = -2;
    XK_EXPECT_INVALID(call(e, boxes), "num_rois=-2 must be >= 0");
    e = d; e.pooled_w = 0;
    XK_EXPECT_INVALID(call(e, boxes), "pooled_w=0");
    e = d; e.spatial_scale = 0;
    XK_EXPECT_INVALID(call(e, boxes), "spatial_scale=0");
    e = d; e.spatial_scale = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(call(e, boxes), "spatial_scale=nan");
    e = d; e.sampling_ratio = 5000;
    XK_EXPECT_INVALID(call(e, boxes), "sampling_ratio=5000");
    e = d; e.layout = static_cast<ConvLayout>(7);
    XK_EXPECT_INVALID(call(e, boxes), "layout=7");
    e = d; e.dtype = DType::s8;
    XK_EXPECT_ERROR(call(e, boxes), Status::unsupported, "dtype=s8");
    e = d; e.n = int64_t{1} << 40; e.c = int64_t{1} << 30;
    XK_EXPECT_INVALID(call(e, boxes), "N*C*H*W");
    XK_EXPECT_INVALID(roi_align(d, {nullptr, boxes.data(), dst.data()}), "src=null");
    XK_EXPECT_INVALID(roi_align(d, {src.data(), nullptr, dst.data()}), "boxes=null");
    XK_EXPECT_INVALID(roi_align(d, {src.data(), boxes.data(), nullptr}), "dst=null");
    XK_EXPECT_INVALID(roi_align(d, {src.data(), boxes.data(), src.data() + 4}), "overlaps src");
    e = d; e.num_rois = 0;  // nothing read from boxes / written
    EXPECT_NO_THROW(roi_align(e, {src.data(), nullptr, nullptr}));
    for (size_t i = 0; i < dst.size(); ++i) ASSERT_EQ(dst[i], 42.0f) << "a rejected call wrote dst";
}

// ---- NMS -----------------------------------------------------------------------------------------

// Oracle: a box (visited by descending score, ties by index, above the score threshold) is kept iff
// no already-kept box of its class has IoU > threshold with it.
std::vector<int64_t> nms_oracle(const NmsDesc& d, const std::vector<float>& b, const std::vector<float>& s,
                                const std::vector<int64_t>& cls) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < d.num_boxes; ++i)
        if (s[i] > d.score_threshold) idx.push_back(i);
    std::sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return s[x] != s[y] ? s[x] > s[y] : x < y; });
    std::vector<int64_t> kept;
    auto iou = [&](int64_t i, int64_t j) {
        const float* p = &b[i * 4];
        const float* q = &b[j * 4];
        const float ai = (p[2] - p[0]) * (p[3] - p[1]), aj = (q[2] - q[0]) * (q[3] - q[1]);
        const float w = std::max(0.0f, std::min(p[2], q[2]) - std::max(p[0], q[0]));
        const float h = std::max(0.0f, std::min(p[3], q[3]) - std::max(p[1], q[1]));
        const float inter = w * h;
        return inter / (ai + aj - inter);
    };
    for (int64_t j : idx) {
        if (d.max_output > 0 && static_cast<int64_t>(kept.size()) >= d.max_output) break;
        bool ok = true;
        for (int64_t i : kept)
            if ((!d.batched || cls[i] == cls[j]) && iou(i, j) > d.iou_threshold) { ok = false; break; }
        if (ok) kept.push_back(j);
    }
    return kept;
}

std::vector<int64_t> run_nms(const char* impl, const NmsDesc& d, const std::vector<float>& b,
                             const std::vector<float>& s, const std::vector<int64_t>& cls) {
    std::vector<int64_t> keep(static_cast<size_t>(std::max<int64_t>(1, d.num_boxes)), -1);
    NmsArgs a{b.data(), s.data(), d.batched ? cls.data() : nullptr, keep.data()};
    int64_t n;
    if (impl) {
        const detail::NmsProblem p = detail::nms_validate_desc("test", d);
        detail::nms_validate_args("test", p, a);
        const auto& reg = detail::nms_registry();
        n = d.num_boxes ? reg.get(p, reg.find(impl)).kernel->run(p, a) : 0;
    } else {
        n = nms(d, a);
    }
    keep.resize(static_cast<size_t>(n));
    return keep;
}

TEST(Nms, EveryIsaMatchesReferenceAndOracle) {
    std::mt19937_64 g(5);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int64_t m : {1, 2, 7, 16, 17, 33, 300, kSlow ? 500 : 2000}) {
        std::vector<float> b(static_cast<size_t>(m * 4)), s(static_cast<size_t>(m));
        std::vector<int64_t> cls(static_cast<size_t>(m));
        for (int64_t i = 0; i < m; ++i) {
            // Clustered boxes (overlaps), some degenerate (zero area), scores with ties.
            const float cx = std::floor(u(g) * 8) * 10 + u(g) * 4, cy = std::floor(u(g) * 8) * 10 + u(g) * 4;
            const float w = i % 11 == 5 ? 0.0f : 3 + u(g) * 8, h = i % 13 == 6 ? 0.0f : 3 + u(g) * 8;
            b[i * 4] = cx; b[i * 4 + 1] = cy; b[i * 4 + 2] = cx + w; b[i * 4 + 3] = cy + h;
            s[i] = std::floor(u(g) * 50) / 50;
            cls[i] = static_cast<int64_t>(g() % 3);
        }
        for (float thr : {0.0f, 0.3f, 0.5f, 0.7f, 1.0f})
            for (bool batched : {false, true})
                for (int64_t maxo : {int64_t{0}, int64_t{5}})
                    for (float sthr : {-std::numeric_limits<float>::infinity(), 0.4f}) {
                        NmsDesc d;
                        d.num_boxes = m; d.iou_threshold = thr; d.batched = batched; d.max_output = maxo;
                        d.score_threshold = sthr;
                        SCOPED_TRACE("m " + std::to_string(m) + " thr " + std::to_string(thr) + (batched ? " batched" : "") +
                                     " max " + std::to_string(maxo) + " sthr " + std::to_string(sthr));
                        const auto want = nms_oracle(d, b, s, cls);
                        EXPECT_EQ(run_nms("ref:scalar", d, b, s, cls), want);
                        for_each_isa([&](Isa) { EXPECT_EQ(run_nms(nullptr, d, b, s, cls), want) << nms_impl_name(d); });
                    }
    }
}

TEST(Nms, HandMadeCases) {
    for (const auto& impl : detail::nms_registry().impls()) {
        if (!isa_supported(impl.isa)) continue;
        SCOPED_TRACE(impl.name);
        NmsDesc d;
        d.num_boxes = 4;
        // Two identical boxes: the higher score stays; equal scores: the lower index stays.
        std::vector<float> b = {0, 0, 10, 10, 0, 0, 10, 10, 20, 20, 30, 30, 0, 0, 10, 10};
        EXPECT_EQ(run_nms(impl.name, d, b, {0.5f, 0.9f, 0.1f, 0.9f}, {}), (std::vector<int64_t>{1, 2}));
        // IoU exactly 0.5 (box [0,10]x[0,10] vs [0,10]x[0,5]... area 100 vs 50, inter 50: 50/100):
        // suppressed only when 0.5 > threshold (strict).
        d.num_boxes = 2;
        b = {0, 0, 10, 10, 0, 0, 10, 5};
        d.iou_threshold = 0.5f;
        EXPECT_EQ(run_nms(impl.name, d, b, {1, 0.5f}, {}), (std::vector<int64_t>{0, 1}));
        d.iou_threshold = 0.49f;
        EXPECT_EQ(run_nms(impl.name, d, b, {1, 0.5f}, {}), (std::vector<int64_t>{0}));
        // Zero-area boxes at one point: IoU 0/0 = NaN suppresses nothing.
        b = {3, 3, 3, 3, 3, 3, 3, 3};
        d.iou_threshold = 0.0f;
        EXPECT_EQ(run_nms(impl.name, d, b, {1, 0.5f}, {}), (std::vector<int64_t>{0, 1}));
        // Batched: the same box in two classes survives twice.
        d.batched = true;
        b = {0, 0, 10, 10, 0, 0, 10, 10};
        EXPECT_EQ(run_nms(impl.name, d, b, {0.2f, 0.5f}, {7, 8}), (std::vector<int64_t>{1, 0}));
        EXPECT_EQ(run_nms(impl.name, d, b, {0.2f, 0.5f}, {7, 7}), (std::vector<int64_t>{1}));
    }
}

TEST(Nms, BadInput) {
    NmsDesc d;
    d.num_boxes = 2;
    std::vector<float> b = {0, 0, 1, 1, 0, 0, 1, 1}, s = {1, 0.5f};
    std::vector<int64_t> keep = {-7, -7}, cls = {0, 1};
    d.iou_threshold = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), nullptr, keep.data()}), "iou_threshold=nan");
    d.iou_threshold = 0.5f;
    d.score_threshold = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), nullptr, keep.data()}), "score_threshold=nan");
    d.score_threshold = 0;
    s[1] = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), nullptr, keep.data()}), "scores[1]=nan");
    s[1] = 0.5f;
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), cls.data(), keep.data()}), "class_ids=");
    d.batched = true;
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), nullptr, keep.data()}), "class_ids=null");
    d.batched = false;
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), nullptr, nullptr}), "keep=null");
    XK_EXPECT_INVALID(nms(d, {nullptr, s.data(), nullptr, keep.data()}), "boxes=null");
    d.num_boxes = -3;
    XK_EXPECT_INVALID(nms(d, {b.data(), s.data(), nullptr, keep.data()}), "num_boxes=-3");
    EXPECT_EQ(keep, (std::vector<int64_t>{-7, -7})) << "a rejected call wrote keep";
    d.num_boxes = 0;
    EXPECT_EQ(nms(d, {nullptr, nullptr, nullptr, nullptr}), 0);
}

// ---- FrozenBatchNorm2d ---------------------------------------------------------------------------

double act_ref(Activation a, double x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        case Activation::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / std::acos(-1.0)) * (x + 0.044715 * x * x * x)));
        case Activation::silu: return x / (1 + std::exp(-x));
    }
    return x;
}

TEST(FrozenBatchNorm, EveryIsaMatchesOracle) {
    struct Shape { int64_t n, c, h, w; };
    for (Shape sh : {Shape{1, 1, 1, 1}, Shape{2, 7, 3, 5}, Shape{1, 17, 9, 9}, Shape{3, 64, 4, 7}, Shape{1, 300, 2, 3}})
        for (ConvLayout lay : {ConvLayout::nchw, ConvLayout::nhwc})
            for (DType st : {DType::f32, DType::bf16})
                for (DType dt : {DType::f32, DType::bf16})
                    for (Activation act : {Activation::none, Activation::relu, Activation::gelu_erf, Activation::silu}) {
                        if (kSlow && act == Activation::gelu_erf) continue;
                        FrozenBatchNormDesc d;
                        d.n = sh.n; d.c = sh.c; d.h = sh.h; d.w = sh.w; d.layout = lay; d.src_dtype = st; d.dst_dtype = dt;
                        d.activation = act; d.eps = 1e-3f;
                        SCOPED_TRACE(detail::FrozenBnProblem{d}.key() + " c" + std::to_string(sh.c));
                        const size_t ne = static_cast<size_t>(d.n * d.c * d.h * d.w), C = static_cast<size_t>(d.c);
                        Map src;
                        src.alloc(st, ne, 1);
                        std::mt19937_64 g(ne + C);
                        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
                        for (size_t i = 0; i < ne; ++i) src.set(i, u(g));
                        std::vector<float> gamma(C), beta(C), mean(C), var(C);
                        for (size_t c = 0; c < C; ++c) {
                            gamma[c] = u(g); beta[c] = u(g); mean[c] = u(g); var[c] = 0.1f + std::fabs(u(g));
                        }
                        std::vector<double> want(ne), tol(ne);
                        const int64_t HW = d.h * d.w;
                        for (size_t i = 0; i < ne; ++i) {
                            const int64_t c = lay == ConvLayout::nchw ? (static_cast<int64_t>(i) / HW) % d.c : static_cast<int64_t>(i) % d.c;
                            const double sc = gamma[c] / std::sqrt(static_cast<double>(var[c]) + d.eps);
                            const double shf = beta[c] - mean[c] * sc;
                            const double v = src.get(i) * sc + shf;
                            want[i] = act_ref(act, v);
                            tol[i] = 2e-6 * (1 + std::fabs(src.get(i) * sc) + std::fabs(shf)) * 4 +
                                     (dt == DType::bf16 ? kBf16Rel * std::fabs(want[i]) : 0.0);
                        }
                        auto check = [&](const Map& got, const char* what) {
                            size_t bad = 0;
                            for (size_t i = 0; i < ne; ++i)
                                if (!(std::fabs(got.get(i) - want[i]) <= tol[i]) && bad++ < 3)
                                    ADD_FAILURE() << what << " [" << i << "] got " << got.get(i) << " want " << want[i];
                        };
                        FrozenBatchNormArgs a{src.data(), gamma.data(), beta.data(), mean.data(), var.data(), nullptr};
                        Map ref;
                        ref.alloc(dt, ne);
                        a.dst = ref.data();
                        detail::frozen_bn_reference(detail::FrozenBnProblem{d}, a);
                        check(ref, "reference");
                        for_each_isa([&](Isa) {
                            for (int threads : {1, 2}) {
                                set_num_threads(threads);
                                Map got;
                                got.alloc(dt, ne, 2);
                                a.dst = got.data();
                                frozen_batch_norm(d, a);
                                check(got, frozen_batch_norm_impl_name(d));
                            }
                            if (st == dt) {  // in place
                                Map io;
                                io.alloc(st, ne);
                                for (size_t i = 0; i < ne; ++i) io.set(i, static_cast<float>(src.get(i)));
                                FrozenBatchNormArgs b = a;
                                b.src = b.dst = io.data();
                                frozen_batch_norm(d, b);
                                check(io, "in place");
                            }
                        });
                        set_num_threads(0);
                    }
}

TEST(FrozenBatchNorm, BadInput) {
    FrozenBatchNormDesc d;
    d.c = 2; d.h = 3; d.w = 3;
    Buffer<float> src(18), dst(18);
    for (size_t i = 0; i < 18; ++i) dst[i] = 42;
    std::vector<float> g = {1, 1}, b = {0, 0}, m = {0, 0}, v = {1, -1};
    FrozenBatchNormArgs a{src.data(), g.data(), b.data(), m.data(), v.data(), dst.data()};
    XK_EXPECT_INVALID(frozen_batch_norm(d, a), "var[1]=-1 must satisfy var + eps > 0");
    v[1] = 1;
    FrozenBatchNormDesc e = d;
    e.eps = -1;
    XK_EXPECT_INVALID(frozen_batch_norm(e, a), "eps=-1");
    e = d; e.h = -4;
    XK_EXPECT_INVALID(frozen_batch_norm(e, a), "H=-4");
    e = d; e.activation = static_cast<Activation>(99);
    XK_EXPECT_INVALID(frozen_batch_norm(e, a), "activation=99");
    FrozenBatchNormArgs c = a;
    c.mean = nullptr;
    XK_EXPECT_INVALID(frozen_batch_norm(d, c), "mean=null");
    c = a;
    c.dst = src.data() + 1;
    XK_EXPECT_INVALID(frozen_batch_norm(d, c), "partially overlaps src");
    for (size_t i = 0; i < 18; ++i) ASSERT_EQ(dst[i], 42.0f) << "a rejected call wrote dst";
}

// ---- C API ---------------------------------------------------------------------------------------

TEST(VisionCapi, Calls) {
    xk_roi_align_desc rd;
    ASSERT_EQ(xk_roi_align_desc_init(&rd, 1, 2, 8, 8, 1, 2, 2), XK_SUCCESS);
    rd.sampling_ratio = 2;
    rd.layout = XK_CONV_NHWC;
    std::vector<float> src(128), dst(8, -1), box = {0, 1, 2, 5, 6};
    for (int y = 0; y < 8; ++y)
        for (int x = 0; x < 8; ++x)
            for (int c = 0; c < 2; ++c) src[(y * 8 + x) * 2 + c] = static_cast<float>(x + 10 * y);
    ASSERT_EQ(xk_roi_align_f32(&rd, src.data(), box.data(), dst.data()), XK_SUCCESS) << xk_last_error();
    EXPECT_NEAR(dst[0], 32, 1e-5);
    EXPECT_NEAR(dst[7], 54, 1e-5);
    box[0] = 1;
    EXPECT_EQ(xk_roi_align_f32(&rd, src.data(), box.data(), dst.data()), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("boxes[0][0]=1"), std::string::npos) << xk_last_error();
    rd.layout = static_cast<xk_conv_layout>(9);
    EXPECT_EQ(xk_roi_align_f32(&rd, src.data(), box.data(), dst.data()), XK_INVALID_ARGUMENT);

    std::vector<float> b = {0, 0, 10, 10, 1, 1, 10, 10, 50, 50, 60, 60}, s = {0.9f, 0.8f, 0.7f};
    std::vector<int64_t> keep(3, -1), cls = {0, 1, 0};
    int64_t nk = -1;
    ASSERT_EQ(xk_nms(3, b.data(), s.data(), 0.5f, -INFINITY, 0, keep.data(), &nk), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(nk, 2);
    EXPECT_EQ(keep[0], 0);
    EXPECT_EQ(keep[1], 2);
    ASSERT_EQ(xk_batched_nms(3, b.data(), s.data(), cls.data(), 0.5f, -INFINITY, 0, keep.data(), &nk), XK_SUCCESS);
    EXPECT_EQ(nk, 3);
    EXPECT_EQ(xk_nms(3, b.data(), s.data(), NAN, -INFINITY, 0, keep.data(), &nk), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_batched_nms(3, b.data(), s.data(), nullptr, 0.5f, -INFINITY, 0, keep.data(), &nk), XK_INVALID_ARGUMENT);

    xk_frozen_bn_desc fd;
    ASSERT_EQ(xk_frozen_bn_desc_init(&fd, 1, 2, 1, 2), XK_SUCCESS);
    fd.activation = XK_ACT_RELU;
    std::vector<float> x = {1, -1, 2, -2}, y(4), g = {2, 1}, be = {0, 1}, mu = {0, 0}, var = {1, 1};
    fd.eps = 0;
    ASSERT_EQ(xk_frozen_batch_norm_f32(&fd, x.data(), g.data(), be.data(), mu.data(), var.data(), y.data()), XK_SUCCESS);
    EXPECT_EQ(y, (std::vector<float>{2, 0, 3, 0}));
    fd.eps = -1;
    EXPECT_EQ(xk_frozen_batch_norm_f32(&fd, x.data(), g.data(), be.data(), mu.data(), var.data(), y.data()),
              XK_INVALID_ARGUMENT);
}

}  // namespace
