// Quantize / dequantize: every ISA's selection against a naive double-precision oracle for per
// tensor, per channel (both axes), dynamic per token (symmetric / asymmetric, with and without
// SmoothQuant smoothing); exact integers on hand-picked values (ties to even, saturation, NaN,
// inf); round-trip error bounds; strides, misaligned pointers, long rows split into blocks, 1 and
// 2 threads; bad input for every entry point (C API too).
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include <limits>
#include <tuple>
#include <vector>

#include "common/parallel.hpp"
#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/quant/quant.hpp"
#include "kernels/typed_matrix.hpp"
#include "xk/quant.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;
using xk::test::TypedMatrix;

// Tolerances.
//   quantize: exact integers, except where x * (1/scale) lies within kTieWindow (relative) of a
//             half-integer: there the fp32 product of the specification and the oracle's exact
//             double value may round to the two neighbours, and either is accepted.
//   dequantize: (q - zp) * scale is one fp32 rounding -> rtol 1e-6 (f32); bf16 output adds one
//             bf16 rounding -> rtol 2^-8 + 1e-6. atol 0 (q == zp gives exactly 0).
//   round trip: |dequantize(quantize(x)) - x| <= scale * (0.5 + 1e-4) + 1e-6 |x| unless saturated
//             (the 1e-4 covers the fp32 product x * (1/scale) near a tie).
constexpr double kTieWindow = 1e-5;
constexpr double kDeqF32Rtol = 1e-6, kDeqBf16Rtol = 1.0 / 256 + 1e-6;

namespace {

int qmin_of(DType t) { return t == DType::s8 ? -128 : 0; }
int qmax_of(DType t) { return t == DType::s8 ? 127 : 255; }
int sym_zp(DType t) { return t == DType::s8 ? 0 : 128; }

double rhe(double v) {  // round half to even, written independently of the library
    const double f = std::floor(v), diff = v - f;
    if (diff < 0.5) return f;
    if (diff > 0.5) return f + 1;
    return std::fmod(f, 2.0) == 0.0 ? f : f + 1;
}

// Accepted quantized values [lo, hi] for value v (already smoothed) under (scale, zp).
std::pair<int, int> accepted_q(double v, double scale, int zp, DType qt) {
    if (std::isnan(v)) return {zp, zp};
    const double t = v / scale;
    auto sat = [&](double q) { return static_cast<int>(std::min<double>(std::max<double>(q, qmin_of(qt)), qmax_of(qt))); };
    if (std::isinf(t)) return {sat(t), sat(t)};
    const double frac = std::fabs(t - std::trunc(t));
    if (std::fabs(frac - 0.5) <= kTieWindow * std::max(1.0, std::fabs(t)))
        return {sat(std::floor(t) + zp), sat(std::ceil(t) + zp)};
    const int q = sat(rhe(t) + zp);
    return {q, q};
}

bool is_int8(DType t) { return t == DType::u8 || t == DType::s8; }

// A static-mode problem: matrices, per-channel parameters, optional smoothing.
struct StaticProblem {
    QuantDesc d;
    TypedMatrix src, dst;
    std::vector<float> scales, smooth;
    std::vector<int32_t> zps;
    QuantArgs args() {
        QuantArgs a;
        a.src = src.data();
        a.dst = dst.data();
        a.scales = scales.data();
        if (!d.symmetric) a.zero_points = zps.data();
        if (d.smooth) a.smooth = smooth.data();
        return a;
    }
    int64_t channel(int64_t r, int64_t c) const {
        if (d.granularity == QuantGranularity::per_tensor) return 0;
        return d.axis == 0 ? r : c;
    }
    DType qtype() const { return is_int8(d.dst_dtype) ? d.dst_dtype : d.src_dtype; }
    int zp(int64_t ch) const { return d.symmetric ? sym_zp(qtype()) : zps[ch]; }
    std::string describe() const {
        return detail::quant_kernel_desc(d).key() + " rows=" + std::to_string(d.rows) + " cols=" + std::to_string(d.cols) +
               " ld_src=" + std::to_string(d.ld_src) + " ld_dst=" + std::to_string(d.ld_dst);
    }
};

StaticProblem make_static(DType src, DType dst, QuantGranularity g, int axis, bool symmetric, bool smooth, int64_t rows,
                          int64_t cols, bool padded, size_t mis, uint64_t seed) {
    StaticProblem p;
    QuantDesc& d = p.d;
    d.rows = rows;
    d.cols = cols;
    d.src_dtype = src;
    d.dst_dtype = dst;
    d.granularity = g;
    d.axis = axis;
    d.symmetric = symmetric;
    d.smooth = smooth;
    if (padded) {
        d.ld_src = cols + 3;
        d.ld_dst = cols + 5;
    }
    p.src = TypedMatrix(src, rows, cols, d.ld_src, mis);
    p.dst = TypedMatrix(dst, rows, cols, d.ld_dst, mis + 1);
    const DType qt = p.qtype();
    const int64_t channels = g == QuantGranularity::per_tensor ? 1 : (axis == 0 ? rows : cols);
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> u(0, 1);
    for (int64_t c = 0; c < channels; ++c) {
        p.scales.push_back(static_cast<float>(0.02 + 0.02 * u(gen)));
        p.zps.push_back(static_cast<int32_t>(qmin_of(qt) + 20 + static_cast<int>(u(gen) * (qmax_of(qt) - qmin_of(qt) - 40))));
    }
    if (smooth)
        for (int64_t c = 0; c < cols; ++c) p.smooth.push_back(static_cast<float>(0.5 + u(gen)));
    if (is_int8(src)) {  // dequantize: any integer of the dtype
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) p.src.set(r, c, qmin_of(src) + static_cast<int>(gen() % 256));
    } else {  // quantize: mostly in range, some saturating
        p.src.fill_uniform(-3.0, 3.0, seed + 1);
    }
    return p;
}

::testing::AssertionResult check_static(const StaticProblem& p) {
    const QuantDesc& d = p.d;
    const DType qt = p.qtype();
    for (int64_t r = 0; r < d.rows; ++r)
        for (int64_t c = 0; c < d.cols; ++c) {
            const int64_t ch = p.channel(r, c);
            const double scale = p.scales[ch];
            const int zp = p.zp(ch);
            if (is_int8(d.dst_dtype)) {
                double v = p.src.get(r, c);
                if (d.smooth) v = static_cast<float>(static_cast<float>(v) * p.smooth[c]);  // fp32 product (spec)
                const auto [lo, hi] = accepted_q(v, scale, zp, qt);
                const double got = p.dst.get(r, c);
                if (got < lo || got > hi)
                    return ::testing::AssertionFailure() << "q[" << r << "][" << c << "]=" << got << " want " << lo
                                                         << (hi != lo ? " or " + std::to_string(hi) : "") << " (v=" << v
                                                         << " scale=" << scale << " zp=" << zp << ")";
                // Round trip, where not saturated.
                const double t = v / scale + zp;
                if (t > qmin_of(qt) + 0.5 && t < qmax_of(qt) - 0.5) {
                    const double back = (got - zp) * static_cast<double>(static_cast<float>(scale));
                    if (std::fabs(back - v) > scale * (0.5 + 1e-4) + 1e-6 * std::fabs(v))
                        return ::testing::AssertionFailure() << "round trip of " << v << " gave " << back << " (scale " << scale << ")";
                }
            } else {
                const double want = (p.src.get(r, c) - zp) * scale;
                const double got = p.dst.get(r, c);
                const double rtol = d.dst_dtype == DType::bf16 ? kDeqBf16Rtol : kDeqF32Rtol;
                if (std::fabs(got - want) > rtol * std::fabs(want))
                    return ::testing::AssertionFailure() << "x[" << r << "][" << c << "]=" << got << " want " << want;
            }
        }
    return p.dst.padding_intact();
}

struct DynProblem {
    QuantDesc d;
    TypedMatrix src, dst;
    std::vector<float> smooth, scales_out;
    std::vector<int32_t> zps_out;
    bool give_zps = true;
    QuantArgs args() {
        QuantArgs a;
        a.src = src.data();
        a.dst = dst.data();
        a.scales_out = scales_out.data();
        if (give_zps) a.zero_points_out = zps_out.data();
        if (d.smooth) a.smooth = smooth.data();
        return a;
    }
};

DynProblem make_dynamic(DType src, DType dst, bool symmetric, bool smooth, int64_t rows, int64_t cols, bool padded,
                        size_t mis, uint64_t seed) {
    DynProblem p;
    QuantDesc& d = p.d;
    d.rows = rows;
    d.cols = cols;
    d.src_dtype = src;
    d.dst_dtype = dst;
    d.granularity = QuantGranularity::per_token_dynamic;
    d.symmetric = symmetric;
    d.smooth = smooth;
    if (padded) {
        d.ld_src = cols + 1;
        d.ld_dst = cols + 7;
    }
    p.src = TypedMatrix(src, rows, cols, d.ld_src, mis);
    p.dst = TypedMatrix(dst, rows, cols, d.ld_dst, mis + 3);
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<double> u(0, 1);
    for (int64_t r = 0; r < rows; ++r) {
        // Rows of different ranges and offsets: some all-positive, some all-negative, one all-zero.
        const double span = 0.01 + 10 * u(gen), offset = (u(gen) - 0.5) * 3 * span;
        for (int64_t c = 0; c < cols; ++c) p.src.set(r, c, r == 2 ? 0.0 : offset + span * (u(gen) - 0.5));
    }
    if (smooth)
        for (int64_t c = 0; c < cols; ++c) p.smooth.push_back(static_cast<float>(0.25 + 2 * u(gen)));
    p.scales_out.assign(rows, -1.0f);
    p.zps_out.assign(rows, -999);
    return p;
}

// The reference's outputs for p (q with p.dst's layout, scales, zero points) in fresh buffers.
struct DynWant {
    TypedMatrix q;
    std::vector<float> scales;
    std::vector<int32_t> zps;
};
DynWant dynamic_reference(DynProblem& p) {
    const QuantDesc rd = QuantPlan(p.d).desc();
    DynWant w{p.dst.clone(), std::vector<float>(p.scales_out.size(), -1.0f), std::vector<int32_t>(p.zps_out.size(), -999)};
    QuantArgs ra = p.args();
    ra.dst = w.q.data();
    ra.scales_out = w.scales.data();
    ra.zero_points_out = p.give_zps ? w.zps.data() : nullptr;
    detail::quant_reference(rd, ra, 0, rd.rows, 0, rd.cols);
    return w;
}

::testing::AssertionResult check_dynamic(const DynProblem& p) {
    const QuantDesc& d = p.d;
    const DType qt = d.dst_dtype;
    for (int64_t r = 0; r < d.rows; ++r) {
        std::vector<double> v(d.cols);
        double mn = 0, mx = 0;
        for (int64_t c = 0; c < d.cols; ++c) {
            v[c] = p.src.get(r, c);
            if (d.smooth) v[c] = static_cast<float>(static_cast<float>(v[c]) * p.smooth[c]);
            mn = c == 0 ? v[c] : std::min(mn, v[c]);
            mx = c == 0 ? v[c] : std::max(mx, v[c]);
        }
        // Parameters, from the definition.
        double scale;
        int zp;
        if (d.symmetric) {
            scale = static_cast<float>(std::max(std::fabs(mn), std::fabs(mx)) / 127.0);
            zp = sym_zp(qt);
        } else {
            const double lo = std::min(mn, 0.0), hi = std::max(mx, 0.0);
            scale = static_cast<float>((hi - lo) / (qmax_of(qt) - qmin_of(qt)));
        }
        if (scale == 0.0) scale = 1.0;
        if (!d.symmetric) {
            const double lo = std::min(mn, 0.0);
            zp = static_cast<int>(std::min<double>(std::max<double>(rhe(qmin_of(qt) - lo / scale), qmin_of(qt)), qmax_of(qt)));
        }
        if (p.scales_out[r] != static_cast<float>(scale))
            return ::testing::AssertionFailure() << "scales_out[" << r << "]=" << p.scales_out[r] << " want " << scale;
        if (p.give_zps && p.zps_out[r] != zp)
            return ::testing::AssertionFailure() << "zero_points_out[" << r << "]=" << p.zps_out[r] << " want " << zp;
        for (int64_t c = 0; c < d.cols; ++c) {
            const auto [lo, hi] = accepted_q(v[c], scale, zp, qt);
            const double got = p.dst.get(r, c);
            if (got < lo || got > hi)
                return ::testing::AssertionFailure() << "q[" << r << "][" << c << "]=" << got << " want " << lo << ".." << hi;
            const double back = (got - zp) * scale;  // every element of the row's range round-trips
            if (std::fabs(back - v[c]) > scale * (0.5 + 1e-4) + 1e-6 * std::fabs(v[c]))
                return ::testing::AssertionFailure() << "round trip of row " << r << " col " << c << ": " << v[c] << " -> "
                                                     << back << " (scale " << scale << ", zp " << zp << ")";
        }
    }
    return p.dst.padding_intact();
}

struct Shape {
    int64_t rows, cols;
};
// (11 and 19 rows: per column parameters run 8 rows a kernel call on AMD CPUs, then the rest)
const Shape kShapes[] = {{1, 1}, {3, 7}, {5, 17}, {2, 300}, {1, 4095}, {7, 64}, {4, 2}, {11, 70}, {19, 129}};

}  // namespace

TEST(Quant, ComputeQuantParamsByHand) {
    // [-1, 1]: fp32(2/255) rounds up, so 1/scale = 127.4999925 and the zero point is 127 (u8) / -1 (s8).
    auto p = compute_quant_params(-1.0f, 1.0f, DType::u8, false);
    EXPECT_EQ(p.scale, static_cast<float>(2.0 / 255));
    EXPECT_GT(static_cast<double>(p.scale), 2.0 / 255);
    EXPECT_EQ(p.zero_point, 127);
    p = compute_quant_params(-1.0f, 1.0f, DType::s8, false);
    EXPECT_EQ(p.zero_point, -1);
    // An exact tie: [-127.5/8, 127.5/8] has scale 1/8 exactly and qmin - min/scale = qmin + 127.5.
    p = compute_quant_params(-15.9375f, 15.9375f, DType::u8, false);
    EXPECT_EQ(p.scale, 0.125f);
    EXPECT_EQ(p.zero_point, 128);  // 127.5 -> even
    p = compute_quant_params(-15.9375f, 15.9375f, DType::s8, false);
    EXPECT_EQ(p.zero_point, 0);  // -0.5 -> even
    p = compute_quant_params(1.0f, 3.0f, DType::u8, false);  // the range is widened to include 0
    EXPECT_EQ(p.scale, static_cast<float>(3.0 / 255));
    EXPECT_EQ(p.zero_point, 0);
    p = compute_quant_params(-3.0f, -1.0f, DType::u8, false);
    EXPECT_EQ(p.scale, static_cast<float>(3.0 / 255));
    EXPECT_EQ(p.zero_point, 255);
    p = compute_quant_params(-2.0f, 1.0f, DType::s8, true);
    EXPECT_EQ(p.scale, static_cast<float>(2.0 / 127));
    EXPECT_EQ(p.zero_point, 0);
    p = compute_quant_params(-0.5f, 4.0f, DType::u8, true);
    EXPECT_EQ(p.scale, static_cast<float>(4.0 / 127));
    EXPECT_EQ(p.zero_point, 128);
    p = compute_quant_params(0.0f, 0.0f, DType::u8, false);  // all-zero range
    EXPECT_EQ(p.scale, 1.0f);
    EXPECT_EQ(p.zero_point, 0);
    p = compute_quant_params(0.0f, 1e-40f, DType::s8, true);  // 1/scale would overflow
    EXPECT_EQ(p.scale, 1.0f);

    // Round trip over random ranges.
    std::mt19937_64 g(1);
    std::uniform_real_distribution<double> u(-50, 50);
    for (int i = 0; i < 2000; ++i) {
        double a = u(g), b = u(g);
        if (i % 3 == 0) b = a + std::fabs(b) * 1e-3;  // narrow ranges
        const float mn = static_cast<float>(std::min(a, b)), mx = static_cast<float>(std::max(a, b));
        for (DType t : {DType::u8, DType::s8})
            for (bool sym : {false, true}) {
                const QuantParams q = compute_quant_params(mn, mx, t, sym);
                ASSERT_GT(q.scale, 0.0f);
                ASSERT_GE(q.zero_point, qmin_of(t));
                ASSERT_LE(q.zero_point, qmax_of(t));
                for (float x : {mn, mx, 0.5f * (mn + mx)}) {
                    const int qq = detail::quantize_value(x, 1.0f / q.scale, q.zero_point, qmin_of(t), qmax_of(t));
                    const double back = (qq - q.zero_point) * static_cast<double>(q.scale);
                    ASSERT_LE(std::fabs(back - x), q.scale * (0.5 + 1e-4) + 1e-6 * std::fabs(x))
                        << "x=" << x << " range [" << mn << ", " << mx << "] " << dtype_name(t) << (sym ? " sym" : " asym");
                }
            }
    }
}

// The values 10 times over (the kernels' 64-element main loop, then its tail).
void rep10(std::vector<float>& x, std::vector<int>& want) {
    const size_t n = x.size();
    for (int i = 1; i < 10; ++i)
        for (size_t j = 0; j < n; ++j) x.push_back(x[j]), want.push_back(want[j]);
}

TEST(Quant, ExactIntegersTiesSaturationNanInf) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for_each_isa([&](Isa) {
        // s8, scale 1 (x * 1/scale is exact): ties go to even, out-of-range saturates, NaN -> zp.
        {
            std::vector<float> x = {2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 127.4f, 127.5f, 128.0f,
                                          1000.0f, -128.5f, -129.0f, -1000.0f, inf, -inf, nan, 0.0f, -0.0f, 0.49999997f};
            std::vector<int> want = {2, 4, -2, -4, 0, 0, 2, 127, 127, 127, 127, -128, -128, -128, 127, -128, 0, 0, 0, 0};
            x.push_back(-3e9f), want.push_back(-128);  // (below -2^31: VCVTPS2DQ's INT_MIN)
            rep10(x, want);
            std::vector<int8_t> q(x.size());
            quantize_per_tensor(static_cast<int64_t>(x.size()), x.data(), 1.0f, 0, q.data());
            for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(q[i], want[i]) << "x=" << x[i];
        }
        // u8, scale 0.5 (power of two), zero point 128.
        {
            std::vector<float> x = {1.25f, 1.75f, -1.25f, 64.0f, 63.75f, -64.25f, -64.5f, nan, -inf, 0.0f, -3e9f, 3e9f, -1e38f};
            std::vector<int> want = {130, 132, 126, 255, 255, 0, 0, 128, 0, 128, 0, 255, 0};
            rep10(x, want);
            std::vector<uint8_t> q(x.size());
            quantize_per_tensor(static_cast<int64_t>(x.size()), x.data(), 0.5f, 128, q.data());
            for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(q[i], want[i]) << "x=" << x[i];
            // Dequantize them back: (q - 128) * 0.5, exact.
            std::vector<float> back(x.size());
            dequantize_per_tensor(static_cast<int64_t>(x.size()), q.data(), 0.5f, 128, back.data());
            for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], (want[i] - 128) * 0.5f);
        }
        // bf16 input, s8 with a nonzero zero point.
        {
            const std::vector<float> xf = {0.5f, 1.5f, 2.5f, -100.0f, 100.0f};
            std::vector<bf16> x;
            for (float f : xf) x.emplace_back(f);
            std::vector<int8_t> q(x.size());
            quantize_per_tensor(5, x.data(), 1.0f, -10, q.data());
            const std::vector<int> want = {-10, -8, -8, -110, 90};
            for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(q[i], want[i]) << "x=" << xf[i];
        }
        // The reciprocal is an fp32 division (PyTorch): scale 0.1 -> 1/0.1f == 10.0f, so 0.25 -> 2.5 -> 2.
        {
            const float x = 0.25f;
            uint8_t q = 0;
            quantize_per_tensor(1, &x, 0.1f, 0, &q);
            EXPECT_EQ(1.0f / 0.1f, 10.0f);
            EXPECT_EQ(q, 2);
        }
    });
}

TEST(Quant, StaticModesMatchOracle) {
    const DType floats[] = {DType::f32, DType::bf16}, ints[] = {DType::u8, DType::s8};
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            uint64_t variant = 0;
            for (int gi = 0; gi < 3; ++gi) {  // per_tensor, per_channel axis 0, per_channel axis 1
                const QuantGranularity g = gi == 0 ? QuantGranularity::per_tensor : QuantGranularity::per_channel;
                const int axis = gi == 1 ? 0 : 1;
                for (bool quantize_dir : {true, false}) {
                    for (DType ft : floats) {
                        for (DType it : ints) {
                            for (bool sym : {false, true}) {
                                for (const Shape& s : kShapes) {
                                    ++variant;
                                    const bool smooth = quantize_dir && variant % 3 == 0;
                                    StaticProblem p = make_static(quantize_dir ? ft : it, quantize_dir ? it : ft, g, axis, sym,
                                                                  smooth, s.rows, s.cols, variant % 2 == 0, variant % 3,
                                                                  900 + variant);
                                    const QuantPlan plan(p.d);
                                    EXPECT_EQ(plan.is_quantize(), quantize_dir);
                                    EXPECT_STREQ(plan.impl_name(),
                                                 detail::quant_registry().select(detail::quant_kernel_desc(plan.desc()), isa).name);
                                    plan.run(p.args());
                                    ASSERT_TRUE(check_static(p)) << p.describe() << " threads=" << threads;
                                }
                            }
                        }
                    }
                }
            }
        });
    }
    set_num_threads(0);
}

TEST(Quant, DynamicPerTokenMatchesOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t variant = 0;
            for (DType ft : {DType::f32, DType::bf16}) {
                for (DType it : {DType::u8, DType::s8}) {
                    for (bool sym : {false, true}) {
                        for (bool smooth : {false, true}) {
                            for (const Shape& s0 : kShapes) {
                                ++variant;
                                const Shape s = {s0.rows + 2, s0.cols};  // at least 3 rows: row 2 is all zeros
                                DynProblem p = make_dynamic(ft, it, sym, smooth, s.rows, s.cols, variant % 2 == 1,
                                                            variant % 3, 300 + variant);
                                p.give_zps = !sym || variant % 2 == 0;  // optional when symmetric
                                quantize(p.d, p.args());
                                ASSERT_TRUE(check_dynamic(p)) << detail::quant_kernel_desc(p.d).key() << " rows=" << s.rows
                                                              << " cols=" << s.cols << " threads=" << threads;
                            }
                        }
                    }
                }
            }
        });
    }
    set_num_threads(0);
}

TEST(Quant, LongRowsAreSplitAndBitwiseIdenticalAcrossThreads) {
    // 2 rows of 40000 > kQuantColBlock: static modes split rows into column blocks.
    for_each_isa([&](Isa) {
        for (int gi = 0; gi < 2; ++gi) {
            const QuantGranularity g = gi == 0 ? QuantGranularity::per_tensor : QuantGranularity::per_channel;
            StaticProblem a = make_static(DType::bf16, DType::s8, g, 1, false, true, 2, 40000, true, 1, 5);
            StaticProblem b = make_static(DType::bf16, DType::s8, g, 1, false, true, 2, 40000, true, 1, 5);
            set_num_threads(1);
            quantize(a.d, a.args());
            set_num_threads(2);
            quantize(b.d, b.args());
            set_num_threads(0);
            ASSERT_TRUE(check_static(b)) << b.describe();
            ASSERT_EQ(std::memcmp(a.dst.data(), b.dst.data(), a.dst.elems()), 0);
            // And back (dequantize), also split.
            StaticProblem c = make_static(DType::u8, DType::f32, g, 1, false, false, 1, 100000, false, 0, 6);
            set_num_threads(2);
            dequantize(c.d, c.args());
            set_num_threads(0);
            ASSERT_TRUE(check_static(c)) << c.describe();
        }
        // Dynamic: whole rows per chunk; many short rows split across threads.
        DynProblem a = make_dynamic(DType::f32, DType::u8, false, false, 600, 96, false, 0, 8);
        DynProblem b = make_dynamic(DType::f32, DType::u8, false, false, 600, 96, false, 0, 8);
        set_num_threads(1);
        quantize(a.d, a.args());
        set_num_threads(2);
        EXPECT_EQ(detail::parallel_threads(600, std::max<int64_t>(1, detail::kQuantColBlock / 96)), 2);
        quantize(b.d, b.args());
        set_num_threads(0);
        ASSERT_TRUE(check_dynamic(b));
        ASSERT_EQ(std::memcmp(a.dst.data(), b.dst.data(), a.dst.elems()), 0);
        ASSERT_EQ(a.scales_out, b.scales_out);
        ASSERT_EQ(a.zps_out, b.zps_out);
    });
}

TEST(Quant, ConvenienceForms) {
    for_each_isa([&](Isa) {
        const int64_t n = 37;
        StaticProblem p = make_static(DType::f32, DType::u8, QuantGranularity::per_tensor, 1, false, false, 1, n, false, 0, 1);
        std::vector<float> xf(n);
        std::vector<bf16> xb(n);
        for (int64_t i = 0; i < n; ++i) {
            xb[i] = bf16(static_cast<float>(p.src.get(0, i)));
            xf[i] = xb[i].to_float();  // the same values in both dtypes
        }
        const float scale = p.scales[0];
        const int32_t zp = 7;
        std::vector<uint8_t> qu1(n), qu2(n);
        std::vector<int8_t> qs1(n), qs2(n);
        quantize_per_tensor(n, xf.data(), scale, zp, qu1.data());
        quantize_per_tensor(n, xb.data(), scale, zp, qu2.data());
        quantize_per_tensor(n, xf.data(), scale, -zp, qs1.data());
        quantize_per_tensor(n, xb.data(), scale, -zp, qs2.data());
        EXPECT_EQ(qu1, qu2);
        EXPECT_EQ(qs1, qs2);
        for (int64_t i = 0; i < n; ++i) {
            auto [lo, hi] = accepted_q(xf[i], scale, zp, DType::u8);
            EXPECT_TRUE(qu1[i] >= lo && qu1[i] <= hi) << i;
            std::tie(lo, hi) = accepted_q(xf[i], scale, -zp, DType::s8);
            EXPECT_TRUE(qs1[i] >= lo && qs1[i] <= hi) << i;
        }
        std::vector<float> df(n);
        std::vector<bf16> db(n);
        dequantize_per_tensor(n, qu1.data(), scale, zp, df.data());
        dequantize_per_tensor(n, qu1.data(), scale, zp, db.data());
        for (int64_t i = 0; i < n; ++i) {
            const double want = (qu1[i] - zp) * static_cast<double>(scale);
            EXPECT_NEAR(df[i], want, kDeqF32Rtol * std::fabs(want));
            EXPECT_NEAR(db[i].to_float(), want, kDeqBf16Rtol * std::fabs(want));
        }
        dequantize_per_tensor(n, qs1.data(), scale, -zp, df.data());
        dequantize_per_tensor(n, qs1.data(), scale, -zp, db.data());
        for (int64_t i = 0; i < n; ++i) {
            const double want = (qs1[i] + zp) * static_cast<double>(scale);
            EXPECT_NEAR(df[i], want, kDeqF32Rtol * std::fabs(want));
            EXPECT_NEAR(db[i].to_float(), want, kDeqBf16Rtol * std::fabs(want));
        }
        // Dynamic, the four overloads, packed.
        for (int form = 0; form < 4; ++form) {
            const DType ft = form < 2 ? DType::f32 : DType::bf16, it = form % 2 ? DType::s8 : DType::u8;
            DynProblem dp = make_dynamic(ft, it, form == 3, false, 4, 33, false, 0, 20 + form);
            const void* x = dp.src.data();
            void* q = dp.dst.data();
            int32_t* zps = dp.give_zps ? dp.zps_out.data() : nullptr;
            switch (form) {
                case 0: quantize_dynamic_per_token(4, 33, static_cast<const float*>(x), static_cast<uint8_t*>(q), dp.scales_out.data(), zps); break;
                case 1: quantize_dynamic_per_token(4, 33, static_cast<const float*>(x), static_cast<int8_t*>(q), dp.scales_out.data(), zps); break;
                case 2: quantize_dynamic_per_token(4, 33, static_cast<const bf16*>(x), static_cast<uint8_t*>(q), dp.scales_out.data(), zps); break;
                default: quantize_dynamic_per_token(4, 33, static_cast<const bf16*>(x), static_cast<int8_t*>(q), dp.scales_out.data(), zps, true);
            }
            ASSERT_TRUE(check_dynamic(dp)) << "form " << form;
        }
    });
}

// Non-finite values (after smoothing) are left out of the row's range and quantize as in the
// static modes: NaN -> zero point, +inf -> qmax, -inf -> qmin; a row without a finite value gets
// the parameters of [0, 0]. Checked from the definition here, bit for bit per ISA below.
TEST(Quant, DynamicNonFiniteQuantizesLikeStatic) {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (DType it : {DType::u8, DType::s8})
        for (bool sym : {false, true}) {
            // (139 columns: the kernels' 64-element main loop and their tails)
            constexpr int64_t C = 139;
            DynProblem p = make_dynamic(DType::f32, it, sym, true, 4, C, false, 0, 3);
            for (float& v : p.smooth) v = 1.0f;
            for (int64_t c0 : {0, 70, 130}) {
                p.src.set(0, c0 + 5, inf);
                p.src.set(0, c0 + 6, -inf);
                p.src.set(0, c0 + 7, nan);
            }
            for (int64_t c = 0; c < C; ++c) p.src.set(1, c, c % 2 ? nan : inf);  // no finite value
            p.src.set(3, 2, 3e38);  // finite x, x * smooth = inf
            p.smooth[2] = 4.0f;
            quantize(p.d, p.args());
            const int qmin = qmin_of(it), qmax = qmax_of(it);
            for (int64_t r = 0; r < 4; ++r) {
                float mn = 0.0f, mx = 0.0f;
                for (int64_t c = 0; c < C; ++c) {
                    const float v = static_cast<float>(p.src.get(r, c)) * p.smooth[c];
                    if (std::isfinite(v)) mn = std::min(mn, v), mx = std::max(mx, v);
                }
                const QuantParams w = compute_quant_params(mn, mx, it, sym);
                EXPECT_EQ(p.scales_out[r], w.scale) << "row " << r;
                EXPECT_EQ(p.zps_out[r], w.zero_point) << "row " << r;
                for (int64_t c = 0; c < C; ++c) {
                    const float v = static_cast<float>(p.src.get(r, c)) * p.smooth[c];
                    if (std::isfinite(v)) continue;
                    const int want = std::isnan(v) ? w.zero_point : v > 0 ? qmax : qmin;
                    EXPECT_EQ(p.dst.get(r, c), want) << "q[" << r << "][" << c << "] of " << v;
                }
            }
            EXPECT_EQ(p.scales_out[1], 1.0f);  // [0, 0]
            EXPECT_EQ(p.zps_out[1], sym ? sym_zp(it) : qmin);
        }
}

TEST(Quant, KernelIsKeyedWithoutShape) {
    StaticProblem a = make_static(DType::f32, DType::s8, QuantGranularity::per_channel, 0, true, false, 3, 10, false, 0, 1);
    quantize(a.d, a.args());
    const uint64_t created = kernel_cache_stats().creations;
    StaticProblem b = make_static(DType::f32, DType::s8, QuantGranularity::per_channel, 0, true, false, 9, 33, true, 0, 2);
    quantize(b.d, b.args());
    EXPECT_EQ(kernel_cache_stats().creations, created);
    ASSERT_TRUE(check_static(b));
}

TEST(Quant, EmptyIsANoOp) {
    QuantDesc d;
    d.rows = 0;
    d.cols = 5;
    quantize(d, QuantArgs{});
    d.rows = 5;
    d.cols = 0;
    quantize(d, QuantArgs{});
    QuantPlan(d).run(QuantArgs{});
    d.granularity = QuantGranularity::per_token_dynamic;
    quantize(d, QuantArgs{});
    quantize_per_tensor(0, static_cast<const float*>(nullptr), 1.0f, 0, static_cast<uint8_t*>(nullptr));
    EXPECT_EQ(xk_quantize_per_tensor_f32_u8(0, nullptr, 1.0f, 0, nullptr), XK_SUCCESS);
}

TEST(Quant, BadDescriptor) {
    auto plan = [](const QuantDesc& d) { QuantPlan p(d); };
    QuantDesc ok;
    ok.rows = 3;
    ok.cols = 8;
    QuantDesc d = ok;
    plan(d);
    d.rows = -1;
    XK_EXPECT_INVALID(plan(d), "xk::QuantPlan: rows=-1 must be >= 0");
    d = ok;
    d.cols = -4;
    XK_EXPECT_INVALID(plan(d), "cols=-4");
    d = ok;
    d.dst_dtype = DType::f32;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "src_dtype=f32 -> dst_dtype=f32 is not supported");
    d = ok;
    d.src_dtype = DType::s8;
    d.dst_dtype = DType::u8;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "src_dtype=s8 -> dst_dtype=u8");
    d = ok;
    d.dst_dtype = DType::s32;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "dst_dtype=s32");
    d = ok;
    d.src_dtype = static_cast<DType>(77);
    XK_EXPECT_INVALID(plan(d), "src_dtype=77 is not a valid DType");
    d = ok;
    d.granularity = static_cast<QuantGranularity>(9);
    XK_EXPECT_INVALID(plan(d), "granularity=9 is not a QuantGranularity");
    d = ok;
    d.granularity = QuantGranularity::per_channel;
    d.axis = 2;
    XK_EXPECT_INVALID(plan(d), "axis=2 must be 0 (per row) or 1 (per column)");
    d.axis = -1;
    XK_EXPECT_INVALID(plan(d), "axis=-1");
    d = ok;
    d.src_dtype = DType::u8;
    d.dst_dtype = DType::f32;
    d.granularity = QuantGranularity::per_token_dynamic;
    XK_EXPECT_INVALID(plan(d), "granularity=per_token_dynamic is quantize-only");
    d.granularity = QuantGranularity::per_tensor;
    d.smooth = true;
    XK_EXPECT_INVALID(plan(d), "smooth=true is quantize-only");
    d = ok;
    d.ld_src = 7;
    XK_EXPECT_INVALID(plan(d), "ld_src=7 must be >= cols=8");
    d = ok;
    d.ld_dst = -1;
    XK_EXPECT_INVALID(plan(d), "ld_dst=-1");
    d = ok;
    d.rows = std::numeric_limits<int64_t>::max() / 2;
    d.ld_src = 64;
    XK_EXPECT_INVALID(plan(d), "overflows");
    // Direction of the one-shot forms.
    d = ok;
    XK_EXPECT_INVALID(dequantize(d, QuantArgs{}), "xk::dequantize: src_dtype=f32 -> dst_dtype=u8 is a quantize (use xk::quantize)");
    d.src_dtype = DType::s8;
    d.dst_dtype = DType::bf16;
    XK_EXPECT_INVALID(quantize(d, QuantArgs{}), "is a dequantize (use xk::dequantize)");
    // compute_quant_params.
    XK_EXPECT_INVALID(compute_quant_params(1.0f, -1.0f, DType::u8, false), "xk::compute_quant_params: min=1 must be <= max=-1");
    XK_EXPECT_INVALID(compute_quant_params(std::numeric_limits<float>::quiet_NaN(), 1.0f, DType::u8, false), "min=nan must be finite");
    XK_EXPECT_INVALID(compute_quant_params(0.0f, std::numeric_limits<float>::infinity(), DType::s8, true), "max=inf must be finite");
    XK_EXPECT_ERROR(compute_quant_params(0.0f, 1.0f, DType::f32, false), Status::unsupported, "qtype=f32 is not supported");
    XK_EXPECT_INVALID(compute_quant_params(0.0f, 1.0f, static_cast<DType>(12), false), "qtype=12 is not a valid DType");
}

TEST(Quant, BadArguments) {
    StaticProblem p = make_static(DType::f32, DType::u8, QuantGranularity::per_channel, 1, false, true, 3, 8, false, 0, 1);
    const QuantPlan plan(p.d);
    const QuantArgs good = p.args();
    plan.run(good);
    auto run = [&](const QuantArgs& a) { plan.run(a); };
    QuantArgs a = good;
    a.src = nullptr;
    XK_EXPECT_INVALID(run(a), "xk::QuantPlan::run: src=null");
    a = good;
    a.dst = nullptr;
    XK_EXPECT_INVALID(run(a), "dst=null");
    a = good;
    a.scales = nullptr;
    XK_EXPECT_INVALID(run(a), "scales=null");
    a = good;
    a.zero_points = nullptr;
    XK_EXPECT_INVALID(run(a), "zero_points=null");
    a = good;
    a.smooth = nullptr;
    XK_EXPECT_INVALID(run(a), "smooth=null");
    a = good;
    float so[3];
    a.scales_out = so;
    XK_EXPECT_INVALID(run(a), "scales_out=");
    XK_EXPECT_INVALID(run(a), "is given but granularity is per_channel");
    a = good;
    int32_t zo[3];
    a.zero_points_out = zo;
    XK_EXPECT_INVALID(run(a), "zero_points_out=");
    {
        QuantDesc d = p.d;
        d.symmetric = true;
        XK_EXPECT_INVALID(quantize(d, good), "is given but symmetric is true (the zero point is implied)");
        d = p.d;
        d.smooth = false;
        XK_EXPECT_INVALID(quantize(d, good), "smooth=");
    }
    // Values, naming the channel.
    for (float bad : {0.0f, -0.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        StaticProblem b = make_static(DType::f32, DType::u8, QuantGranularity::per_channel, 1, false, false, 3, 8, false, 0, 1);
        b.scales[5] = bad;
        XK_EXPECT_INVALID(quantize(b.d, b.args()), "scales[5]=");
        XK_EXPECT_INVALID(quantize(b.d, b.args()), "must be positive and finite");
    }
    {
        StaticProblem b = make_static(DType::s8, DType::f32, QuantGranularity::per_channel, 0, false, false, 3, 8, false, 0, 1);
        b.scales[2] = 1e-45f;
        XK_EXPECT_INVALID(dequantize(b.d, b.args()), "scales[2]=");
        XK_EXPECT_INVALID(dequantize(b.d, b.args()), "is too small (1/scale overflows fp32)");
        b.scales[2] = 0.5f;
        b.zps[1] = 128;
        XK_EXPECT_INVALID(dequantize(b.d, b.args()), "zero_points[1]=128 is out of range [-128, 127] of s8");
        b.zps[1] = -129;
        XK_EXPECT_INVALID(dequantize(b.d, b.args()), "zero_points[1]=-129");
        StaticProblem c = make_static(DType::f32, DType::u8, QuantGranularity::per_tensor, 1, false, false, 3, 8, false, 0, 1);
        c.zps[0] = 256;
        XK_EXPECT_INVALID(quantize(c.d, c.args()), "zero_points[0]=256 is out of range [0, 255] of u8");
        c.zps[0] = -1;
        XK_EXPECT_INVALID(quantize(c.d, c.args()), "zero_points[0]=-1");
        // dst untouched by the failed calls (still the sentinel everywhere).
        for (int64_t r = 0; r < 3; ++r)
            for (int64_t col = 0; col < 8; ++col) EXPECT_EQ(c.dst.get(r, col), TypedMatrix::kSentinel);
    }
    a = good;
    p.smooth[6] = std::numeric_limits<float>::infinity();
    XK_EXPECT_INVALID(run(a), "smooth[6]=inf must be finite");
    p.smooth[6] = 1.0f;
    // Overlaps.
    a = good;
    a.dst = const_cast<void*>(good.src);
    XK_EXPECT_INVALID(run(a), "dst=");
    XK_EXPECT_INVALID(run(a), "overlaps src=");
    a = good;
    a.dst = const_cast<float*>(good.scales);
    XK_EXPECT_INVALID(run(a), "overlaps scales=");
    // Dynamic mode pointers.
    DynProblem dp = make_dynamic(DType::f32, DType::s8, false, false, 4, 16, false, 0, 2);
    const QuantArgs dgood = dp.args();
    quantize(dp.d, dgood);
    QuantArgs b = dgood;
    b.scales_out = nullptr;
    XK_EXPECT_INVALID(quantize(dp.d, b), "xk::quantize: scales_out=null");
    b = dgood;
    b.zero_points_out = nullptr;
    XK_EXPECT_INVALID(quantize(dp.d, b), "zero_points_out=null");
    b = dgood;
    b.scales = dp.scales_out.data();
    XK_EXPECT_INVALID(quantize(dp.d, b), "scales=");
    XK_EXPECT_INVALID(quantize(dp.d, b), "is given but granularity is per_token_dynamic (parameters go to scales_out)");
    b = dgood;
    b.scales_out = reinterpret_cast<float*>(dp.zps_out.data()) + 1;
    XK_EXPECT_INVALID(quantize(dp.d, b), "scales_out=");
    XK_EXPECT_INVALID(quantize(dp.d, b), "overlaps zero_points_out=");
    b = dgood;
    b.zero_points_out = static_cast<int32_t*>(b.dst);
    XK_EXPECT_INVALID(quantize(dp.d, b), "overlaps");
}

TEST(Quant, CApi) {
    // Parameters.
    float s = 0;
    int32_t z = -1;
    ASSERT_EQ(xk_compute_quant_params_u8(-15.9375f, 15.9375f, 0, &s, &z), XK_SUCCESS);
    EXPECT_EQ(s, 0.125f);
    EXPECT_EQ(z, 128);
    ASSERT_EQ(xk_compute_quant_params_s8(-2.0f, 1.0f, 1, &s, &z), XK_SUCCESS);
    EXPECT_EQ(s, static_cast<float>(2.0 / 127));
    EXPECT_EQ(z, 0);
    EXPECT_EQ(xk_compute_quant_params_u8(2.0f, 1.0f, 0, &s, &z), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("min=2 must be <= max=1"), std::string::npos);
    EXPECT_EQ(xk_compute_quant_params_s8(0.0f, 1.0f, 0, nullptr, &z), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_compute_quant_params_s8: scale=null"), std::string::npos);

    // Per tensor round trips.
    const float x[6] = {-1.0f, -0.26f, 0.0f, 0.25f, 0.74f, 1.0f};
    uint8_t qu[6];
    int8_t qs[6];
    float back[6];
    ASSERT_EQ(xk_quantize_per_tensor_f32_u8(6, x, 0.5f, 128, qu), XK_SUCCESS);
    ASSERT_EQ(xk_dequantize_per_tensor_u8_f32(6, qu, 0.5f, 128, back), XK_SUCCESS);
    for (int i = 0; i < 6; ++i) EXPECT_LE(std::fabs(back[i] - x[i]), 0.25f) << i;
    EXPECT_EQ(qu[3], 128);  // 0.25 / 0.5 = 0.5 -> 0 (even)
    ASSERT_EQ(xk_quantize_per_tensor_f32_s8(6, x, 0.5f, 0, qs), XK_SUCCESS);
    ASSERT_EQ(xk_dequantize_per_tensor_s8_f32(6, qs, 0.5f, 0, back), XK_SUCCESS);
    for (int i = 0; i < 6; ++i) EXPECT_LE(std::fabs(back[i] - x[i]), 0.25f) << i;
    EXPECT_EQ(xk_quantize_per_tensor_f32_u8(-1, x, 0.5f, 128, qu), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_quantize_per_tensor_f32_u8: n=-1"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_quantize_per_tensor_f32_s8(6, x, 0.0f, 0, qs), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("scales[0]=0 must be positive and finite"), std::string::npos);
    EXPECT_EQ(xk_dequantize_per_tensor_u8_f32(6, qu, 0.5f, 300, back), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("zero_points[0]=300"), std::string::npos);
    EXPECT_EQ(xk_dequantize_per_tensor_s8_f32(6, nullptr, 0.5f, 0, back), XK_INVALID_ARGUMENT);

    // Per channel, both axes, symmetric (NULL zero points) and not, strided.
    for (int axis : {0, 1}) {
        for (bool sym : {false, true}) {
            for (int form = 0; form < 4; ++form) {  // q u8, q s8, dq u8, dq s8
                const bool qdir = form < 2;
                const DType it = form % 2 ? DType::s8 : DType::u8;
                StaticProblem p = make_static(qdir ? DType::f32 : it, qdir ? it : DType::f32, QuantGranularity::per_channel,
                                              axis, sym, false, 5, 13, true, 0, 70 + form);
                const int32_t* zp = sym ? nullptr : p.zps.data();
                xk_status st;
                switch (form) {
                    case 0: st = xk_quantize_per_channel_f32_u8(5, 13, static_cast<const float*>(p.src.data()), p.d.ld_src, p.scales.data(), zp, axis, static_cast<uint8_t*>(p.dst.data()), p.d.ld_dst); break;
                    case 1: st = xk_quantize_per_channel_f32_s8(5, 13, static_cast<const float*>(p.src.data()), p.d.ld_src, p.scales.data(), zp, axis, static_cast<int8_t*>(p.dst.data()), p.d.ld_dst); break;
                    case 2: st = xk_dequantize_per_channel_u8_f32(5, 13, static_cast<const uint8_t*>(p.src.data()), p.d.ld_src, p.scales.data(), zp, axis, static_cast<float*>(p.dst.data()), p.d.ld_dst); break;
                    default: st = xk_dequantize_per_channel_s8_f32(5, 13, static_cast<const int8_t*>(p.src.data()), p.d.ld_src, p.scales.data(), zp, axis, static_cast<float*>(p.dst.data()), p.d.ld_dst);
                }
                ASSERT_EQ(st, XK_SUCCESS) << xk_last_error();
                ASSERT_TRUE(check_static(p)) << p.describe();
            }
        }
    }
    float xs[16] = {};
    uint8_t q8[16];
    float sc[4] = {1, 1, 1, 1};
    EXPECT_EQ(xk_quantize_per_channel_f32_u8(2, 4, xs, 4, sc, nullptr, 3, q8, 4), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_quantize_per_channel_f32_u8: axis=3"), std::string::npos);
    EXPECT_EQ(xk_quantize_per_channel_f32_s8(2, 4, xs, 3, sc, nullptr, 1, reinterpret_cast<int8_t*>(q8), 4), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("ld_src=3 must be >= cols=4"), std::string::npos);
    EXPECT_EQ(xk_dequantize_per_channel_u8_f32(2, 4, q8, 4, nullptr, nullptr, 1, xs, 4), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_dequantize_per_channel_s8_f32(2, 4, reinterpret_cast<int8_t*>(q8), 4, sc, nullptr, 0, nullptr, 4), XK_INVALID_ARGUMENT);

    // Dynamic per token, the four forms, with smoothing.
    for (int form = 0; form < 4; ++form) {
        const DType ft = form < 2 ? DType::f32 : DType::bf16, it = form % 2 ? DType::s8 : DType::u8;
        const bool sym = form == 1;
        DynProblem p = make_dynamic(ft, it, sym, true, 4, 21, true, 0, 80 + form);
        xk_status st;
        const float* sm = p.smooth.data();
        int32_t* zo = p.zps_out.data();
        switch (form) {
            case 0: st = xk_quantize_dynamic_per_token_f32_u8(4, 21, static_cast<const float*>(p.src.data()), p.d.ld_src, sm, static_cast<uint8_t*>(p.dst.data()), p.d.ld_dst, p.scales_out.data(), zo, sym); break;
            case 1: st = xk_quantize_dynamic_per_token_f32_s8(4, 21, static_cast<const float*>(p.src.data()), p.d.ld_src, sm, static_cast<int8_t*>(p.dst.data()), p.d.ld_dst, p.scales_out.data(), zo, sym); break;
            case 2: st = xk_quantize_dynamic_per_token_bf16_u8(4, 21, static_cast<const uint16_t*>(p.src.data()), p.d.ld_src, sm, static_cast<uint8_t*>(p.dst.data()), p.d.ld_dst, p.scales_out.data(), zo, sym); break;
            default: st = xk_quantize_dynamic_per_token_bf16_s8(4, 21, static_cast<const uint16_t*>(p.src.data()), p.d.ld_src, sm, static_cast<int8_t*>(p.dst.data()), p.d.ld_dst, p.scales_out.data(), zo, sym);
        }
        ASSERT_EQ(st, XK_SUCCESS) << xk_last_error();
        ASSERT_TRUE(check_dynamic(p)) << "form " << form;
    }
    float so[2];
    uint16_t xb[8] = {};
    EXPECT_EQ(xk_quantize_dynamic_per_token_f32_u8(2, 4, xs, 4, nullptr, q8, 4, so, nullptr, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_quantize_dynamic_per_token_f32_u8: zero_points_out=null"), std::string::npos);
    EXPECT_EQ(xk_quantize_dynamic_per_token_f32_s8(2, 4, xs, 4, nullptr, reinterpret_cast<int8_t*>(q8), 4, nullptr, nullptr, 1), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("scales_out=null"), std::string::npos);
    EXPECT_EQ(xk_quantize_dynamic_per_token_bf16_u8(2, 4, xb, 2, nullptr, q8, 4, so, nullptr, 1), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_quantize_dynamic_per_token_bf16_s8(-2, 4, xb, 4, nullptr, reinterpret_cast<int8_t*>(q8), 4, so, nullptr, 1), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("rows=-2"), std::string::npos);
    EXPECT_EQ(xk_quantize_dynamic_per_token_bf16_s8(2, 4, xb, 4, nullptr, reinterpret_cast<int8_t*>(q8), 4, so, nullptr, 1), XK_SUCCESS);
    EXPECT_STREQ(xk_last_error(), "");
}

// Every ISA's kernel against the reference (detail::quant_reference), bit for bit: quantized
// bytes, dequantized f32 / bf16 bits, dynamic scales / zero points. The inputs mix ordinary
// values with exact ties (power-of-two scales), saturating magnitudes, NaN, +-inf (static modes),
// signed zeros and denormals; dequantize scales include a denormal one (denormal outputs, bf16
// rounding of them). Shapes cover every tail length of both vector widths, strides, misaligned
// pointers and a row long enough to be split into blocks; 1 and 2 threads.
namespace {

uint32_t special_bits(std::mt19937_64& g, bool allow_nonfinite) {
    static const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u,
                                        0x3f000000u /*0.5*/, 0x3fc00000u /*1.5*/, 0x40200000u /*2.5*/, 0xc0200000u,
                                        0x4b000001u /*2^23+1*/, 0x4f000000u /*2^31*/, 0xcf000000u, 0x43008000u /*128.5*/,
                                        0xc3010000u /*-129*/, 0x42fe0000u /*127*/, 0x7f7fffffu, 0xff7fffffu};
    static const uint32_t nonfinite[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7fbfffffu};
    if (allow_nonfinite && g() % 4 == 0) return nonfinite[g() % std::size(nonfinite)];
    // (dynamic: not the two largest, whose smoothed value may overflow)
    return specials[g() % (std::size(specials) - (allow_nonfinite ? 0 : 2))];
}

// Fills the float matrix m: random values in [-3, 3] scaled by `range`, one in `special_every`
// a special value (raw bits; bf16: the upper half).
void fill_mixed(TypedMatrix& m, double range, int special_every, bool allow_nonfinite, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> u(-3.0, 3.0);
    unsigned char* base = static_cast<unsigned char*>(m.data());
    for (int64_t r = 0; r < m.rows(); ++r)
        for (int64_t c = 0; c < m.cols(); ++c) {
            const int64_t i = r * m.ld() + c;
            if (special_every > 0 && static_cast<int>(g() % special_every) == 0) {
                const uint32_t b = special_bits(g, allow_nonfinite);
                if (m.dtype() == DType::f32) std::memcpy(base + 4 * i, &b, 4);
                else {
                    const uint16_t h = static_cast<uint16_t>(b >> 16);
                    std::memcpy(base + 2 * i, &h, 2);
                }
            } else {
                // ties on a grid of 1/8 (exact under power-of-two scales) half of the time
                double v = u(g) * range;
                if (g() % 2) v = std::round(v * 8) / 8;
                m.set_at(i, v);
            }
        }
}

::testing::AssertionResult same_bytes(const TypedMatrix& got, const TypedMatrix& want) {
    const size_t es = dtype_size(got.dtype());
    const auto* a = static_cast<const unsigned char*>(got.data());
    const auto* b = static_cast<const unsigned char*>(want.data());
    for (int64_t r = 0; r < got.rows(); ++r)
        for (int64_t c = 0; c < got.cols(); ++c) {
            const size_t o = (r * got.ld() + c) * es;
            if (std::memcmp(a + o, b + o, es) != 0)
                return ::testing::AssertionFailure() << "element [" << r << "][" << c << "]: got " << got.get(r, c) << " want "
                                                     << want.get(r, c) << " (bits differ)";
        }
    return got.padding_intact();
}

struct BitShape {
    int64_t rows, cols;
};
const BitShape kBitShapes[] = {{1, 1}, {2, 7}, {3, 15}, {2, 16}, {3, 17}, {2, 31}, {1, 33}, {5, 63}, {2, 64}, {3, 65},
                               {1, 127}, {2, 129}, {1, 1023}, {1, 17000}};

}  // namespace

TEST(Quant, EveryIsaBitExactWithReference) {
    const DType floats[] = {DType::f32, DType::bf16}, ints[] = {DType::u8, DType::s8};
    const float pow2_scales[] = {1.0f, 0.5f, 0.125f, 4.0f};
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            uint64_t variant = 0;
            for (int gi = 0; gi < 3; ++gi) {
                const QuantGranularity g = gi == 0 ? QuantGranularity::per_tensor : QuantGranularity::per_channel;
                const int axis = gi == 1 ? 0 : 1;
                for (bool qdir : {true, false})
                    for (DType ft : floats)
                        for (DType it : ints)
                            for (bool sym : {false, true})
                                for (const BitShape& s : kBitShapes) {
                                    ++variant;
                                    const bool smooth = qdir && variant % 3 == 0;
                                    StaticProblem p = make_static(qdir ? ft : it, qdir ? it : ft, g, axis, sym, smooth, s.rows,
                                                                  s.cols, variant % 2 == 0, variant % 5, 5000 + variant);
                                    std::mt19937_64 gen(variant);
                                    for (size_t c = 0; c < p.scales.size(); ++c) {
                                        if (qdir && c % 2 == 0) p.scales[c] = pow2_scales[gen() % 4];
                                        if (!qdir && c % 7 == 3) p.scales[c] = 3e-39f;  // denormal outputs
                                    }
                                    if (smooth && variant % 2)
                                        for (float& v : p.smooth) v = v > 1.0f ? 2.0f : 0.5f;  // ties stay ties
                                    if (qdir) fill_mixed(p.src, variant % 4 == 0 ? 100.0 : 2.0, 5, true, 77 + variant);
                                    TypedMatrix want = p.dst.clone();
                                    const QuantPlan plan(p.d);
                                    EXPECT_STREQ(plan.impl_name(),
                                                 detail::quant_registry().select(detail::quant_kernel_desc(plan.desc()), isa).name);
                                    plan.run(p.args());
                                    QuantArgs ra = p.args();
                                    ra.dst = want.data();
                                    detail::quant_reference(plan.desc(), ra, 0, p.d.rows, 0, p.d.cols);
                                    ASSERT_TRUE(same_bytes(p.dst, want)) << p.describe() << " threads=" << threads;
                                }
            }
            // Dynamic per token (specials; inf / NaN in a quarter of the variants).
            for (DType ft : floats)
                for (DType it : ints)
                    for (bool sym : {false, true})
                        for (bool smooth : {false, true})
                            for (const BitShape& s : kBitShapes) {
                                ++variant;
                                DynProblem p = make_dynamic(ft, it, sym, smooth, s.rows, s.cols, variant % 2 == 1, variant % 5,
                                                            700 + variant);
                                if (variant % 2) fill_mixed(p.src, variant % 4 == 1 ? 1e-3 : 5.0, 4, variant % 4 == 3, 99 + variant);
                                p.give_zps = !sym || variant % 3 != 0;
                                const QuantDesc rd = QuantPlan(p.d).desc();
                                DynWant w = dynamic_reference(p);
                                const TypedMatrix& want = w.q;
                                const std::vector<float>& want_scales = w.scales;
                                const std::vector<int32_t>& want_zps = w.zps;
                                quantize(p.d, p.args());
                                ASSERT_TRUE(same_bytes(p.dst, want))
                                    << detail::quant_kernel_desc(p.d).key() << " rows=" << s.rows << " cols=" << s.cols;
                                for (int64_t r = 0; r < rd.rows; ++r) {
                                    ASSERT_EQ(std::memcmp(&p.scales_out[r], &want_scales[r], 4), 0) << "scales_out[" << r << "]";
                                    if (p.give_zps) ASSERT_EQ(p.zps_out[r], want_zps[r]) << "zero_points_out[" << r << "]";
                                }
                            }
        });
    }
    set_num_threads(0);
}

namespace {
// zmm16 = 0x7fffffff in every lane: a register the JIT kernels use as a constant must be set by
// them, not inherited (fuzz_quant found the fused u8 kernel reading a caller's zmm16).
__attribute__((target("avx512f"))) void dirty_zmm16() {
    static const int32_t v = 0x7fffffff;
    asm volatile("vpbroadcastd %0, %%zmm16" ::"m"(v) : "xmm16");
}
}  // namespace

// Non-finite values (after smoothing) on every ISA, at every position of a vector and its tail,
// whole rows of them, 1 and 2 threads: bit for bit the reference.
// A row whose most negative finite value shares its word lane (column mod 32) with a -NaN / -inf:
// the bf16 range pass keeps one unsigned max per lane, so that lane shows the non-finite one and
// the row is ranged again with the finite mask (its scale is that of [-100, max]).
TEST(Quant, DynamicBf16NonFiniteLane) {
    for_each_isa([&](Isa) {
        for (uint16_t bad : {uint16_t(0xFFC0), uint16_t(0xFF80), uint16_t(0x7FC0)}) {
            constexpr int64_t R = 3, C = 64;
            std::vector<uint16_t> x(R * C);
            for (int64_t i = 0; i < R * C; ++i) x[i] = bf16(static_cast<float>((i * 37) % 19 - 9) * 0.1f).bits;
            x[2 * C + 35] = bf16(-100.0f).bits;  // lane 3
            x[2 * C + 3] = bad;
            QuantDesc d;
            d.rows = R, d.cols = C, d.src_dtype = DType::bf16, d.dst_dtype = DType::s8;
            d.granularity = QuantGranularity::per_token_dynamic;
            std::vector<int8_t> q(R * C);
            std::vector<float> sc(R);
            std::vector<int32_t> zp(R);
            QuantArgs a;
            a.src = x.data(), a.dst = q.data(), a.scales_out = sc.data(), a.zero_points_out = zp.data();
            quantize(d, a);
            float mx = 0.0f;
            for (int64_t c = 0; c < C; ++c)
                if (c != 3) mx = std::max(mx, bf16::from_bits(x[2 * C + c]).to_float());
            const QuantParams w = compute_quant_params(-100.0f, mx, DType::s8, false);
            EXPECT_EQ(sc[2], w.scale) << std::hex << bad;
            EXPECT_EQ(zp[2], w.zero_point) << std::hex << bad;
        }
    });
}

TEST(Quant, DynamicNonFiniteBitExactEveryIsa) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t variant = 0;
            for (DType ft : {DType::f32, DType::bf16})
                for (DType it : {DType::u8, DType::s8})
                    for (int64_t cols : {1, 9, 17, 40, 300})
                        for (uint32_t bad : {0x7f800000u, 0xff800000u, 0x7fc00000u}) {
                            ++variant;
                            const bool sym = variant % 2 == 0, smooth = variant % 3 == 0;
                            DynProblem p = make_dynamic(ft, it, sym, smooth, 5, cols, variant % 2 == 1, 1, 31 + cols);
                            unsigned char* base = static_cast<unsigned char*>(p.src.data());
                            auto put = [&](int64_t r, int64_t c, uint32_t b) {
                                const int64_t i = r * p.src.ld() + c;
                                if (ft == DType::f32) std::memcpy(base + 4 * i, &b, 4);
                                else {
                                    const uint16_t h = static_cast<uint16_t>(b >> 16);
                                    std::memcpy(base + 2 * i, &h, 2);
                                }
                            };
                            // row 1 of one sign (the range's other end is 0), mid-row non-finites
                            for (int64_t c = 0; c < cols; ++c) {
                                const int64_t i = 1 * p.src.ld() + c;
                                if (ft == DType::f32) base[4 * i + 3] = static_cast<unsigned char>(variant % 2 ? base[4 * i + 3] | 0x80 : base[4 * i + 3] & 0x7f);
                                else base[2 * i + 1] = static_cast<unsigned char>(variant % 2 ? base[2 * i + 1] | 0x80 : base[2 * i + 1] & 0x7f);
                            }
                            put(2, (variant * 5) % cols, bad ^ (variant % 2 ? 0x80000000u : 0u));
                            put(1, cols / 2, bad);
                            put(3, cols - 1, bad);
                            put(0, (variant * 7) % cols, bad ^ 0x80000000u);
                            for (int64_t c = 0; c < cols; ++c) put(4, c, c % 3 ? bad : 0x7f800000u);  // no finite value
                            if (smooth && cols > 4) {  // x * smooth overflows
                                p.src.set(1, 4, 3e38);
                                p.smooth[4] = 4.0f;
                            }
                            const QuantDesc rd = QuantPlan(p.d).desc();
                            DynWant w = dynamic_reference(p);
                            const TypedMatrix& want = w.q;
                            const std::vector<float>& want_scales = w.scales;
                            const std::vector<int32_t>& want_zps = w.zps;
                            if (threads == 1) {  // the kernel called directly, right after dirtying zmm16
                                const auto sel = detail::quant_registry().get(detail::quant_kernel_desc(rd));
                                std::vector<float> inv(rd.rows);
                                std::vector<int32_t> zp(rd.rows);
                                if (isa_supported(Isa::avx512)) dirty_zmm16();
                                sel.kernel->run_dynamic(rd, p.args(), 0, rd.rows, inv.data(), zp.data());
                            } else {
                                quantize(p.d, p.args());
                            }
                            ASSERT_TRUE(same_bytes(p.dst, want)) << detail::quant_kernel_desc(p.d).key() << " cols=" << cols;
                            ASSERT_EQ(0, std::memcmp(p.scales_out.data(), want_scales.data(), 4 * want_scales.size()));
                            ASSERT_EQ(p.zps_out, want_zps);
                        }
        });
    }
    set_num_threads(0);
}

// Streaming stores (forced by a zero threshold) on aligned outputs: still bit for bit the
// reference's, rows split into blocks included.
TEST(Quant, StreamingStoresBitExact) {
    detail::set_nt_store_threshold(0);
    for_each_isa([&](Isa) {
        uint64_t variant = 0;
        for (const BitShape& s : {BitShape{3, 4096}, BitShape{2, 17000}, BitShape{5, 1040}, BitShape{2, 1029}})
            for (bool qdir : {true, false})
                for (DType ft : {DType::f32, DType::bf16})
                    for (int gi = 0; gi < 3; ++gi) {
                        ++variant;
                        const QuantGranularity g = gi == 0 ? QuantGranularity::per_tensor : QuantGranularity::per_channel;
                        const DType it = variant % 2 ? DType::u8 : DType::s8;
                        StaticProblem p = make_static(qdir ? ft : it, qdir ? it : ft, g, gi == 1 ? 0 : 1, variant % 3 == 0,
                                                      false, s.rows, s.cols, false, 1, 40 + variant);
                        p.dst = TypedMatrix(p.d.dst_dtype, s.rows, s.cols, 0, 0);  // dst 64-byte aligned, src not
                        if (qdir) fill_mixed(p.src, 2.0, 7, true, 3 + variant);
                        TypedMatrix want = p.dst.clone();
                        const QuantPlan plan(p.d);
                        plan.run(p.args());
                        QuantArgs ra = p.args();
                        ra.dst = want.data();
                        detail::quant_reference(plan.desc(), ra, 0, p.d.rows, 0, p.d.cols);
                        ASSERT_TRUE(same_bytes(p.dst, want)) << p.describe();
                    }
        // Dynamic per token (the fused range / quantize kernel's streaming variant).
        for (const BitShape& s : {BitShape{3, 4096}, BitShape{5, 1040}, BitShape{4, 1029}})
            for (DType ft : {DType::f32, DType::bf16}) {
                ++variant;
                DynProblem p = make_dynamic(ft, variant % 2 ? DType::u8 : DType::s8, variant % 3 == 0, variant % 2 == 0, s.rows,
                                            s.cols, false, 1, 60 + variant);
                p.dst = TypedMatrix(p.d.dst_dtype, s.rows, s.cols, 0, 0);
                fill_mixed(p.src, 2.0, 7, true, 9 + variant);
                DynWant w = dynamic_reference(p);
                const TypedMatrix& want = w.q;
                const std::vector<float>& want_scales = w.scales;
                const std::vector<int32_t>& want_zps = w.zps;
                quantize(p.d, p.args());
                ASSERT_TRUE(same_bytes(p.dst, want)) << detail::quant_kernel_desc(p.d).key() << " cols=" << s.cols;
                ASSERT_EQ(0, std::memcmp(p.scales_out.data(), want_scales.data(), 4 * want_scales.size()));
                ASSERT_EQ(p.zps_out, want_zps);
            }
    });
    detail::set_nt_store_threshold(-1);
}
