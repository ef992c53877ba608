// int8 convolution (xk::qconv2d): every ISA (the int8 GEMM's avx2 / avx2_vnni / avx512 kernels
// through "gemm:qconv") and the reference against an oracle written here (exact int64 sum of
// (src - zp) * w, the epilogue in double), 1x1 (the direct GEMM) and im2col shapes (3x3, strides,
// asymmetric padding that reads the zero point, dilation), u8 / s8 src, u8 / s8 / f32 dst, bias,
// ReLU, zero points, odd channel counts, 1 and 2 threads, bad input (nothing written).
// Tolerances: f32 dst |got - want| <= 1e-5 * (|want| + |bias| + 1) (the f32 scale product and the
// float(acc) conversion); u8 / s8 dst within 1 (a value within rounding of a .5 boundary may go
// either way after the f32 epilogue), and exactly equal where the oracle is >= 0.01 from one.
#include <cmath>

#include "common/test_util.hpp"
#include "kernels/conv/conv.hpp"
#include "xk/conv.hpp"
#include "xk/runtime.hpp"

using namespace xk;
using xk::test::Buffer;

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
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

struct Shape {
    int64_t n, c, h, w, oc, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw;
};

std::vector<double> oracle(const QConvDesc& d, int64_t oh, int64_t ow, const uint8_t* src, const int8_t* wt,
                           const float* bias, const float* ws, float ss, int32_t szp) {
    const bool su8 = d.src_dtype == DType::u8;
    std::vector<double> out(static_cast<size_t>(d.n * oh * ow * d.oc));
    for (int64_t n = 0; n < d.n; ++n)
        for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox)
                for (int64_t o = 0; o < d.oc; ++o) {
                    int64_t acc = 0;
                    for (int64_t ky = 0; ky < d.kh; ++ky)
                        for (int64_t kx = 0; kx < d.kw; ++kx) {
                            const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                            const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                            if (y < 0 || y >= d.h || x < 0 || x >= d.w) continue;
                            for (int64_t c = 0; c < d.c; ++c) {
                                const uint8_t raw = src[((n * d.h + y) * d.w + x) * d.c + c];
                                const int64_t s = su8 ? raw : static_cast<int8_t>(raw);
                                acc += (s - szp) * wt[((o * d.kh + ky) * d.kw + kx) * d.c + c];
                            }
                        }
                    double v = static_cast<double>(ss) * ws[o] * static_cast<double>(acc) + (bias ? bias[o] : 0.0);
                    if (d.activation == Activation::relu) v = std::max(v, 0.0);
                    out[static_cast<size_t>(((n * oh + oy) * ow + ox) * d.oc + o)] = v;
                }
    return out;
}

TEST(QConv, EveryIsaMatchesOracle) {
    const Shape shapes[] = {
        {2, 17, 5, 7, 9, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},   // 1x1: one GEMM
        {1, 7, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   // 3x3 pad 1
        {2, 3, 11, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   // stride 2
        {1, 16, 6, 6, 7, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1},   // 1x1 stride 2 (im2col)
        {1, 5, 9, 10, 3, 3, 2, 1, 1, 2, 0, 1, 3, 2, 1},   // asymmetric padding, dilation
        {1, 64, 14, 14, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // several im2col blocks
    };
    uint64_t seed = 1;
    for (const Shape& s : shapes) {
        if (kSlow && s.c == 64) continue;  // the multi-block shape: Release only
        for (DType st : {DType::u8, DType::s8})
            for (DType dt : {DType::u8, DType::s8, DType::f32})
                for (int variant = 0; variant < 2; ++variant) {
                    QConvDesc d;
                    d.n = s.n; d.c = s.c; d.h = s.h; d.w = s.w; d.oc = s.oc; d.kh = s.kh; d.kw = s.kw;
                    d.stride_h = s.sh; d.stride_w = s.sw; d.pad_top = s.pt; d.pad_bottom = s.pb; d.pad_left = s.pl;
                    d.pad_right = s.pr; d.dilation_h = s.dh; d.dilation_w = s.dw;
                    d.src_dtype = st; d.dst_dtype = dt;
                    d.with_bias = variant == 1;
                    d.activation = variant == 1 ? Activation::relu : Activation::none;
                    const detail::QConvProblem p = detail::qconv_validate_desc("test", d);
                    SCOPED_TRACE(p.key());
                    const size_t ns = static_cast<size_t>(d.n * d.h * d.w * d.c), nw = static_cast<size_t>(d.oc * d.kh * d.kw * d.c);
                    const size_t nd = static_cast<size_t>(d.n * p.oh * p.ow * d.oc);
                    Buffer<uint8_t> src(ns, 3);
                    Buffer<int8_t> wt(nw, 1);
                    std::vector<float> bias(static_cast<size_t>(d.oc)), ws(static_cast<size_t>(d.oc));
                    std::mt19937_64 g(seed++);
                    for (auto& v : src) v = static_cast<uint8_t>(g());
                    for (auto& v : wt) v = static_cast<int8_t>(g());
                    for (int64_t o = 0; o < d.oc; ++o) {
                        bias[o] = static_cast<float>(static_cast<int>(g() % 2001) - 1000) / 10.0f;
                        ws[o] = 1e-3f * static_cast<float>(1 + g() % 100);
                    }
                    QConvArgs a;
                    a.src = src.data(); a.weights = wt.data(); a.bias = d.with_bias ? bias.data() : nullptr;
                    a.weight_scales = ws.data(); a.src_scale = 0.02f;
                    a.src_zero_point = st == DType::u8 ? 128 : -3;
                    a.dst_scale = dt == DType::f32 ? 1.0f : 0.5f;
                    a.dst_zero_point = dt == DType::u8 ? 100 : (dt == DType::s8 ? 5 : 0);
                    const std::vector<double> want =
                        oracle(d, p.oh, p.ow, src.data(), wt.data(), a.bias, ws.data(), a.src_scale, a.src_zero_point);
                    auto check = [&](const void* got, const char* who) {
                        size_t bad = 0;
                        for (size_t i = 0; i < nd; ++i) {
                            const int64_t o = static_cast<int64_t>(i) % d.oc;
                            bool ok;
                            double gv;
                            if (dt == DType::f32) {
                                gv = static_cast<const float*>(got)[i];
                                ok = std::fabs(gv - want[i]) <= 1e-5 * (std::fabs(want[i]) + std::fabs(bias[o]) + 1);
                            } else {
                                const double lo = dt == DType::u8 ? 0 : -128, hi = dt == DType::u8 ? 255 : 127;
                                const double x = want[i] / a.dst_scale;
                                const double q = std::min(hi, std::max(lo, std::nearbyint(x) + a.dst_zero_point));
                                gv = dt == DType::u8 ? static_cast<const uint8_t*>(got)[i] : static_cast<const int8_t*>(got)[i];
                                const bool near_half = std::fabs(std::fabs(x - std::floor(x)) - 0.5) < 0.01;
                                ok = near_half ? std::fabs(gv - q) <= 1 : gv == q;
                            }
                            if (!ok && bad++ < 3) ADD_FAILURE() << who << " [" << i << "] got " << gv << " want " << want[i];
                        }
                    };
                    std::vector<uint8_t> ref(nd * dtype_size(dt) + 8);
                    QConvArgs ra = a;
                    ra.dst = ref.data();
                    detail::qconv2d_reference(p, ra);
                    check(ref.data(), "reference");
                    test::for_each_isa(
                        [&](Isa) {
                            for (int threads : {1, 2}) {
                                set_num_threads(threads);
                                Buffer<uint8_t> out(nd * dtype_size(dt), dt == DType::f32 ? 4 : 1);
                                QConvArgs b = a;
                                b.dst = out.data();
                                qconv2d(d, b);
                                check(out.data(), qconv2d_impl_name(d));
                                if (threads != 2) continue;
                                // A plan with weights packed once: the same results.
                                const QConvPlan plan(d);
                                const QConvPackedWeights pw = plan.pack_weights(wt.data());
                                Buffer<uint8_t> out2(nd * dtype_size(dt));
                                b.dst = out2.data();
                                b.weights = nullptr;
                                plan.run(b, pw);
                                EXPECT_EQ(std::memcmp(out.data(), out2.data(), nd * dtype_size(dt)), 0) << "packed plan";
                            }
                        },
                        /*with_avx2_vnni=*/true);
                    set_num_threads(0);
                }
    }
}

TEST(QConv, BadInput) {
    QConvDesc d;
    d.c = 4; d.h = 3; d.w = 3; d.oc = 2; d.kh = d.kw = 3; d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    d.dst_dtype = DType::u8;
    std::vector<uint8_t> src(36), dst(18, 42);
    std::vector<int8_t> wt(72);
    std::vector<float> ws = {1, 1};
    QConvArgs a;
    a.src = src.data(); a.weights = wt.data(); a.dst = dst.data(); a.weight_scales = ws.data();
    QConvArgs b = a;
    b.src_scale = 0;
    XK_EXPECT_INVALID(qconv2d(d, b), "src_scale=0");
    b = a; b.src_zero_point = 256;
    XK_EXPECT_INVALID(qconv2d(d, b), "src_zero_point=256");
    b = a; b.dst_zero_point = -1;
    XK_EXPECT_INVALID(qconv2d(d, b), "dst_zero_point=-1");
    b = a; b.dst_scale = NAN;
    XK_EXPECT_INVALID(qconv2d(d, b), "dst_scale=nan");
    ws[1] = -1;
    XK_EXPECT_INVALID(qconv2d(d, a), "weight_scales[1]=-1");
    ws[1] = 1;
    b = a; b.weight_scales = nullptr;
    XK_EXPECT_INVALID(qconv2d(d, b), "weight_scales=null");
    b = a; b.bias = ws.data();
    XK_EXPECT_INVALID(qconv2d(d, b), "bias=");
    QConvDesc e = d;
    e.src_dtype = DType::f32;
    XK_EXPECT_ERROR(qconv2d(e, a), Status::unsupported, "src_dtype=f32");
    e = d; e.dst_dtype = DType::bf16;
    XK_EXPECT_ERROR(qconv2d(e, a), Status::unsupported, "dst_dtype=bf16");
    e = d; e.c = 4000;
    XK_EXPECT_INVALID(qconv2d(e, a), "KH*KW*C=36000");
    e = d; e.kh = 9;
    XK_EXPECT_INVALID(qconv2d(e, a), "OH");
    e = d; e.oc = -2;
    XK_EXPECT_INVALID(qconv2d(e, a), "OC=-2");
    // Packed weights of another descriptor are rejected.
    QConvDesc other = d;
    other.oc = 3;
    std::vector<float> ws3 = {1, 1, 1};
    std::vector<int8_t> wt3(108);
    const QConvPackedWeights pw_other = QConvPlan(other).pack_weights(wt3.data());
    XK_EXPECT_INVALID(QConvPlan(d).run(a, pw_other), "packed_weights=");
    XK_EXPECT_INVALID(QConvPlan(d).run(a, QConvPackedWeights()), "packed_weights=empty");
    for (uint8_t v : dst) ASSERT_EQ(v, 42) << "a rejected call wrote dst";
}

}  // namespace
