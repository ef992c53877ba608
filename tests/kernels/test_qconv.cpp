// int8 convolution (xk::qconv2d / QConvPlan), both routes against an oracle written here (exact
// int64 sum of (src - zp) * w, the epilogue in double):
//   gemm:qconv   every ISA (the int8 GEMM's avx2 / avx2_vnni / avx512 kernels) and the reference:
//                1x1 (the direct GEMM) and im2col shapes (3x3, strides, asymmetric padding that reads
//                the zero point, dilation), u8 / s8 src, u8 / s8 / f32 dst, bias, ReLU, zero points,
//                odd channel counts, 1 and 2 threads, packed plans; bad input (nothing written).
//   onednn:qconv (AVX-512 VNNI / AMX machines) forced with XK_QCONV_IMPL=onednn: odd shapes (1x1,
//                3x3, 7x7 stride 2, strides, asymmetric padding, dilation, N > 1, odd channels),
//                u8 / s8 src, u8 / s8 / f32 dst, every activation, bias or not, zero points zero or
//                not, one-shot and packed plans at 1 and 2 threads, new scales on the same plan,
//                parameters oneDNN cannot take (falls back to ours), routing / override / packs of
//                the other route rejected, bad input validated before any oneDNN call.
// Tolerances:
//   f32 dst: |got - want| <= 1e-5 * (|want| + |bias| + 1) (the f32 scale product and the
//     float(acc) conversion; oneDNN: its bias / scale order, same bound); gelu / silu: + 1e-5
//     (the activation's approximation).
//   u8 / s8 dst, gemm:qconv and the reference: within 1 where the oracle is < 0.01 from a .5
//     boundary (the f32 epilogue may round either way), else exactly equal.
//   u8 / s8 dst, onednn:qconv: within 1 everywhere (oneDNN adds the bias before its output scale,
//     as bias / scale, and rounds after adding the zero point: ties and near-ties may go the
//     other way). Exactness holds only where our own path runs.
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "common/test_util.hpp"
#include "kernels/conv/conv.hpp"
#include "xk/conv.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

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
    int64_t g = 1;  // groups
};

double act(Activation a, double x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return std::max(x, 0.0);
        case Activation::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        case Activation::gelu_tanh:
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
        case Activation::silu: return x / (1.0 + std::exp(-x));
    }
    return x;
}

using xk::test::ScopedEnv;

std::vector<double> oracle(const QConvDesc& d, int64_t oh, int64_t ow, const uint8_t* src, const int8_t* wt,
                           const float* bias, const float* ws, float ss, int32_t szp) {
    const bool su8 = d.src_dtype == DType::u8;
    const int64_t cg = d.c / d.groups, ocg = d.oc / d.groups;
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
                            for (int64_t c = 0; c < cg; ++c) {  // the channels of o's group
                                const uint8_t raw = src[((n * d.h + y) * d.w + x) * d.c + (o / ocg) * cg + c];
                                const int64_t s = su8 ? raw : static_cast<int8_t>(raw);
                                acc += (s - szp) * wt[((o * d.kh + ky) * d.kw + kx) * cg + c];
                            }
                        }
                    double v = static_cast<double>(ss) * ws[o] * static_cast<double>(acc) + (bias ? bias[o] : 0.0);
                    v = act(d.activation, v);
                    out[static_cast<size_t>(((n * oh + oy) * ow + ox) * d.oc + o)] = v;
                }
    return out;
}

TEST(QConv, EveryIsaMatchesOracle) {
    const ScopedEnv route("XK_QCONV_IMPL", "gemm");  // our path at every ISA (oneDNN: below)
    const Shape shapes[] = {
        {2, 17, 5, 7, 9, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},   // 1x1: one GEMM
        {1, 7, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   // 3x3 pad 1
        {2, 3, 11, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   // stride 2
        {1, 16, 6, 6, 7, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1},   // 1x1 stride 2 (im2col)
        {1, 5, 9, 10, 3, 3, 2, 1, 1, 2, 0, 1, 3, 2, 1},   // asymmetric padding, dilation
        {1, 64, 14, 14, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // several im2col blocks
        {1, 12, 7, 6, 18, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3},     // groups 3: one GEMM per group
        {2, 16, 6, 7, 16, 3, 3, 2, 1, 1, 0, 1, 1, 1, 1, 16},    // depthwise, stride, asymmetric padding
        {1, 8, 5, 5, 12, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4},      // 1x1 grouped (direct GEMMs, lda = C)
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
                    d.groups = s.g;
                    d.src_dtype = st; d.dst_dtype = dt;
                    d.with_bias = variant == 1;
                    d.activation = variant == 1 ? Activation::relu : Activation::none;
                    const detail::QConvProblem p = detail::qconv_validate_desc("test", d);
                    SCOPED_TRACE(p.key());
                    const size_t ns = static_cast<size_t>(d.n * d.h * d.w * d.c),
                                 nw = static_cast<size_t>(d.oc * d.kh * d.kw * (d.c / d.groups));
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
    const ScopedEnv route("XK_QCONV_IMPL", "onednn");  // validation comes before any oneDNN call
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
    XK_EXPECT_INVALID(qconv2d(e, a), "KH*KW*C/groups=36000");
    e = d; e.groups = 3;  // does not divide C
    XK_EXPECT_INVALID(qconv2d(e, a), "groups=3");
    e = d; e.groups = 0;
    XK_EXPECT_INVALID(qconv2d(e, a), "groups=0");
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

// The C API passes groups through (depthwise here): the same bytes as the C++ call; a groups that
// does not divide C is rejected naming it.
TEST(QConv, CApiGroups) {
    QConvDesc d;
    d.n = 1; d.c = 8; d.h = 6; d.w = 5; d.oc = 16; d.kh = d.kw = 3; d.groups = 8;
    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    d.dst_dtype = DType::u8; d.with_bias = true; d.activation = Activation::relu;
    const detail::QConvProblem p = detail::qconv_validate_desc("test", d);
    std::vector<uint8_t> src(static_cast<size_t>(d.n * d.h * d.w * d.c)), a_out(static_cast<size_t>(p.oh * p.ow * d.oc)),
        c_out(a_out.size(), 7);
    std::vector<int8_t> wt(static_cast<size_t>(d.oc * 9));
    std::vector<float> ws(16, 0.01f), bias(16, 0.5f);
    std::mt19937_64 g(3);
    for (auto& v : src) v = static_cast<uint8_t>(g());
    for (auto& v : wt) v = static_cast<int8_t>(g());
    QConvArgs a;
    a.src = src.data(); a.weights = wt.data(); a.bias = bias.data(); a.dst = a_out.data(); a.weight_scales = ws.data();
    a.src_scale = 0.05f; a.src_zero_point = 3; a.dst_scale = 0.2f; a.dst_zero_point = 2;
    qconv2d(d, a);
    xk_conv2d_desc cd;
    ASSERT_EQ(xk_conv2d_desc_init(&cd, d.n, d.c, d.h, d.w, d.oc, d.kh, d.kw), XK_SUCCESS);
    cd.layout = XK_CONV_NHWC; cd.weight_layout = XK_CONV_OHWI; cd.groups = 8; cd.activation = XK_ACT_RELU;
    cd.pad_top = cd.pad_bottom = cd.pad_left = cd.pad_right = 1;
    ASSERT_EQ(xk_qconv2d(&cd, XK_DTYPE_U8, XK_DTYPE_U8, src.data(), 0.05f, 3, wt.data(), ws.data(), bias.data(),
                         c_out.data(), 0.2f, 2),
              XK_SUCCESS)
        << xk_last_error();
    EXPECT_EQ(a_out, c_out);
    cd.groups = 3;
    std::vector<uint8_t> untouched = c_out;
    EXPECT_EQ(xk_qconv2d(&cd, XK_DTYPE_U8, XK_DTYPE_U8, src.data(), 0.05f, 3, wt.data(), ws.data(), bias.data(),
                         c_out.data(), 0.2f, 2),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("groups=3"), std::string::npos) << xk_last_error();
    EXPECT_EQ(c_out, untouched);
}

// ---- onednn:qconv ----------------------------------------------------------------------------

namespace dq {

struct Params {
    float src_scale;
    int32_t src_zp;
    float dst_scale;
    int32_t dst_zp;
};

// Compares got against the oracle; onednn: within 1 everywhere (int8 dst), else the exact rule.
size_t compare(const QConvDesc& d, const std::vector<double>& want, const void* got, const Params& q,
               const std::vector<float>& bias, bool onednn, const std::string& who) {
    const DType dt = d.dst_dtype;
    const bool approx_act = d.activation != Activation::none && d.activation != Activation::relu;
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        const int64_t o = static_cast<int64_t>(i) % d.oc;
        bool ok;
        double gv;
        if (dt == DType::f32) {
            gv = static_cast<const float*>(got)[i];
            const double b = d.with_bias ? std::fabs(bias[o]) : 0.0;
            ok = std::fabs(gv - want[i]) <= 1e-5 * (std::fabs(want[i]) + b + 1) + (approx_act ? 1e-5 : 0.0);
        } else {
            const double lo = dt == DType::u8 ? 0 : -128, hi = dt == DType::u8 ? 255 : 127;
            const double x = want[i] / q.dst_scale;
            const double qv = std::min(hi, std::max(lo, std::nearbyint(x) + q.dst_zp));
            gv = dt == DType::u8 ? static_cast<const uint8_t*>(got)[i] : static_cast<const int8_t*>(got)[i];
            const bool near_half = std::fabs(std::fabs(x - std::floor(x)) - 0.5) < 0.01;
            ok = (onednn || near_half) ? std::fabs(gv - qv) <= 1 : gv == qv;
        }
        if (!ok && bad++ < 3) ADD_FAILURE() << who << " [" << i << "] got " << gv << " want " << want[i];
    }
    return bad;
}

struct Case {
    QConvDesc d;
    detail::QConvProblem p;
    Buffer<uint8_t> src;
    Buffer<int8_t> wt;
    std::vector<float> bias, ws;
    size_t nd = 0;

    explicit Case(const QConvDesc& desc, uint64_t seed) : d(desc), p(detail::qconv_validate_desc("test", desc)) {
        const size_t ns = static_cast<size_t>(d.n * d.h * d.w * d.c),
                     nw = static_cast<size_t>(d.oc * d.kh * d.kw * (d.c / d.groups));
        nd = static_cast<size_t>(d.n * p.oh * p.ow * d.oc);
        src = Buffer<uint8_t>(ns, 1);
        wt = Buffer<int8_t>(nw, 3);
        std::mt19937_64 g(seed);
        for (auto& v : src) v = static_cast<uint8_t>(g());
        for (auto& v : wt) v = static_cast<int8_t>(g());
        bias.resize(static_cast<size_t>(d.oc));
        ws.resize(static_cast<size_t>(d.oc));
        for (int64_t o = 0; o < d.oc; ++o) {
            bias[o] = static_cast<float>(static_cast<int>(g() % 2001) - 1000) / 10.0f;
            ws[o] = 1e-3f * static_cast<float>(1 + g() % 100);
        }
    }
    QConvArgs args(const Params& q, void* dst) const {
        QConvArgs a;
        a.src = src.data(); a.weights = wt.data(); a.bias = d.with_bias ? bias.data() : nullptr; a.dst = dst;
        a.weight_scales = ws.data(); a.src_scale = q.src_scale; a.src_zero_point = q.src_zp;
        a.dst_scale = q.dst_scale; a.dst_zero_point = q.dst_zp;
        return a;
    }
    std::vector<double> want(const Params& q) const {
        return oracle(d, p.oh, p.ow, src.data(), wt.data(), d.with_bias ? bias.data() : nullptr, ws.data(), q.src_scale,
                      q.src_zp);
    }
    size_t dst_bytes() const { return nd * static_cast<size_t>(dtype_size(d.dst_dtype)); }
};

bool onednn_route_available() { return isa_supported(Isa::avx512_vnni); }

}  // namespace dq

TEST(QConvOnednn, MatchesOracleWithinOne) {
    if (!dq::onednn_route_available()) GTEST_SKIP() << "onednn:qconv needs AVX-512 VNNI (or AMX)";
    const ScopedEnv route("XK_QCONV_IMPL", "onednn");
    const Shape shapes[] = {
        {2, 17, 5, 7, 9, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1},     // 1x1, N = 2, odd channels
        {1, 7, 9, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     // 3x3 pad 1
        {2, 3, 11, 8, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},     // stride 2
        {1, 16, 6, 6, 7, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1},     // 1x1 stride 2
        {1, 5, 9, 10, 3, 3, 2, 1, 1, 2, 0, 1, 1, 2, 1},     // asymmetric padding, dilation
        {1, 3, 15, 13, 19, 7, 7, 2, 2, 3, 3, 3, 3, 1, 1},   // 7x7 stride 2 pad 3 (a stem)
        {3, 33, 7, 5, 31, 3, 3, 1, 2, 0, 1, 1, 0, 1, 1},    // N = 3, odd channels, mixed stride / padding
        {1, 64, 14, 14, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  // larger (Release only)
        {1, 24, 9, 8, 24, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 24},   // depthwise 3x3
        {2, 32, 11, 9, 32, 3, 3, 2, 2, 1, 0, 1, 1, 1, 1, 32},  // depthwise stride 2, asymmetric padding
        {1, 16, 7, 7, 32, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 16},   // depthwise x2 channel multiplier, 5x5
        {1, 20, 8, 7, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4},    // groups 4
        {2, 64, 5, 5, 64, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 8},    // 1x1 groups 8
    };
    const Activation acts[] = {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                               Activation::silu};
    uint64_t seed = 100;
    int idx = 0, on_onednn = 0, grouped_on_onednn = 0;
    for (const Shape& s : shapes) {
        if (kSlow && s.c == 64) continue;
        for (DType st : {DType::u8, DType::s8})
            for (DType dt : {DType::u8, DType::s8, DType::f32}) {
                ++idx;
                QConvDesc d;
                d.n = s.n; d.c = s.c; d.h = s.h; d.w = s.w; d.oc = s.oc; d.kh = s.kh; d.kw = s.kw;
                d.stride_h = s.sh; d.stride_w = s.sw; d.pad_top = s.pt; d.pad_bottom = s.pb; d.pad_left = s.pl;
                d.pad_right = s.pr; d.dilation_h = s.dh; d.dilation_w = s.dw;
                d.groups = s.g;
                d.src_dtype = st; d.dst_dtype = dt;
                d.with_bias = idx % 2 == 0;
                d.activation = acts[idx % 5];
                const dq::Case c(d, seed++);
                SCOPED_TRACE(c.p.key());
                // Zero points zero or not (a source zero point moves oneDNN to its jit_int8 kernels).
                const bool zp = idx % 3 != 0;
                const dq::Params q1{0.02f, zp ? (st == DType::u8 ? 128 : -3) : 0, dt == DType::f32 ? 1.0f : 0.5f,
                                    zp ? (dt == DType::u8 ? 100 : (dt == DType::s8 ? 5 : 0)) : 0};
                const dq::Params q2{0.03f, st == DType::u8 ? 7 : 11, dt == DType::f32 ? 1.0f : 0.75f,
                                    dt == DType::u8 ? 3 : (dt == DType::s8 ? -9 : 0)};
                const std::vector<double> w1 = c.want(q1), w2 = c.want(q2);
                const bool dnn = detail::onednn_qconv_supports(c.p);
                on_onednn += dnn;
                grouped_on_onednn += dnn && d.groups > 1;
                EXPECT_STREQ(qconv2d_impl_name(d), dnn ? "onednn:qconv" : "gemm:qconv");
                // One-shot at 1 thread.
                set_num_threads(1);
                Buffer<uint8_t> out(c.dst_bytes(), dt == DType::f32 ? 4 : 1);
                qconv2d(d, c.args(q1, out.data()));
                dq::compare(d, w1, out.data(), q1, c.bias, dnn, "one-shot");
                // A plan, weights packed once, 2 threads: the first parameters, new ones (another
                // primitive), the first again (kept).
                set_num_threads(2);
                const QConvPlan plan(d);
                EXPECT_STREQ(plan.impl_name(), dnn ? "onednn:qconv" : "gemm:qconv");
                if (dnn) EXPECT_EQ(plan.backend_info().rfind("onednn:", 0), 0u) << plan.backend_info();
                const QConvPackedWeights pw = plan.pack_weights(c.wt.data());
                for (const dq::Params* q : {&q1, &q2, &q1}) {
                    Buffer<uint8_t> o2(c.dst_bytes());
                    QConvArgs b = c.args(*q, o2.data());
                    b.weights = nullptr;
                    plan.run(b, pw);
                    dq::compare(d, q == &q1 ? w1 : w2, o2.data(), *q, c.bias, dnn, "plan");
                }
                set_num_threads(0);
            }
    }
    EXPECT_GT(on_onednn, 0) << "no case ran on oneDNN";
    EXPECT_GT(grouped_on_onednn, 0) << "no grouped / depthwise case ran on oneDNN";
}

TEST(QConvOnednn, ParametersOneDnnCannotTakeRunOurs) {
    if (!dq::onednn_route_available()) GTEST_SKIP() << "onednn:qconv needs AVX-512 VNNI (or AMX)";
    const ScopedEnv route("XK_QCONV_IMPL", "onednn");
    QConvDesc d;
    d.n = 1; d.c = 9; d.h = d.w = 6; d.oc = 5; d.kh = d.kw = 3; d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    d.dst_dtype = DType::s8;
    d.with_bias = true;
    const dq::Case c(d, 7);
    const QConvPlan plan(d);
    ASSERT_STREQ(plan.impl_name(), "onednn:qconv");
    const QConvPackedWeights pw = plan.pack_weights(c.wt.data());
    // src_scale * weight_scales[o] subnormal in f32 (no output scale oneDNN can take; bias /
    // scale overflows), or 1 / dst_scale overflowing: those calls run on gemm:qconv (XK_VERBOSE=1
    // logs "fallback"), with its exact-rounding tolerance.
    for (const dq::Params q : {dq::Params{1e-37f, 3, 0.25f, -2}, dq::Params{0.02f, 3, 1e-39f, -2}}) {
        Buffer<uint8_t> out(c.dst_bytes());
        QConvArgs b = c.args(q, out.data());
        b.weights = nullptr;
        plan.run(b, pw);
        EXPECT_EQ(dq::compare(d, c.want(q), out.data(), q, c.bias, /*onednn=*/false, "fallback"), 0u) << q.src_scale;
    }
}

// A plan remembers the thread's last call's parameters (onednn:qconv skips recomputing them when
// they repeat): weight scales and bias rewritten in place behind the same pointers, and calls of
// two plans alternating on one thread, must each give that call's results.
TEST(QConvOnednn, ParametersChangedInPlaceAndPlansAlternating) {
    if (!dq::onednn_route_available()) GTEST_SKIP() << "onednn:qconv needs AVX-512 VNNI (or AMX)";
    const ScopedEnv route("XK_QCONV_IMPL", "onednn");
    QConvDesc d;
    d.n = 1; d.c = 19; d.h = 5; d.w = 7; d.oc = 21; d.kh = d.kw = 1;
    d.dst_dtype = DType::u8;
    d.with_bias = true;
    d.activation = Activation::relu;
    QConvDesc e = d;  // a second plan: other channels, s8 dst
    e.oc = 13; e.dst_dtype = DType::s8;
    dq::Case c(d, 21), f(e, 22);
    const QConvPlan pc(d), pf(e);
    ASSERT_STREQ(pc.impl_name(), "onednn:qconv");
    ASSERT_STREQ(pf.impl_name(), "onednn:qconv");
    const QConvPackedWeights wc = pc.pack_weights(c.wt.data()), wf = pf.pack_weights(f.wt.data());
    // Scales that keep most outputs inside the u8 / s8 range (bias in [-100, 100]).
    const dq::Params q{0.01f, 0, 2.0f, 3}, qf{0.01f, 0, 2.0f, -4};
    auto run_c = [&](const char* what) {
        Buffer<uint8_t> out(c.dst_bytes());
        QConvArgs b = c.args(q, out.data());
        b.weights = nullptr;
        pc.run(b, wc);
        EXPECT_EQ(dq::compare(d, c.want(q), out.data(), q, c.bias, /*onednn=*/true, what), 0u);
    };
    auto run_f = [&](const char* what) {
        Buffer<uint8_t> out(f.dst_bytes());
        QConvArgs b = f.args(qf, out.data());
        b.weights = nullptr;
        pf.run(b, wf);
        EXPECT_EQ(dq::compare(e, f.want(qf), out.data(), qf, f.bias, /*onednn=*/true, what), 0u);
    };
    for (int nt : {1, 2}) {
        set_num_threads(nt);
        run_c("first");
        run_c("repeated");
        const std::vector<float> ws0 = c.ws, bias0 = c.bias;
        for (float& v : c.ws) v *= 1.5f;  // the same arrays, new contents
        run_c("weight scales changed");
        for (float& v : c.bias) v = 30.0f - v;
        run_c("bias changed");
        run_f("other plan");
        run_c("back to the first plan");
        run_f("other plan again");
        c.ws = ws0, c.bias = bias0;
        run_c("restored");
    }
    set_num_threads(0);
}

TEST(QConvOnednn, RoutingOverrideAndPacks) {
    QConvDesc d;
    d.n = 1; d.c = 32; d.h = d.w = 8; d.oc = 16; d.kh = d.kw = 3; d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 1;
    d.dst_dtype = DType::u8;
    d.with_bias = true;
    d.activation = Activation::relu;
    const dq::Case c(d, 9);
    {
        const ScopedEnv route("XK_QCONV_IMPL", "gemm");
        const QConvPlan g(d);
        EXPECT_STREQ(g.impl_name(), "gemm:qconv");
        EXPECT_EQ(g.backend_info(), "");
    }
    if (!dq::onednn_route_available()) GTEST_SKIP() << "onednn:qconv needs AVX-512 VNNI (or AMX)";
    // The timed route: one of the two, the same decision for the next plan and the one-shot.
    detail::qconv_tune_clear();
    {
        const ScopedEnv route("XK_QCONV_IMPL", nullptr);
        const QConvPlan t1(d), t2(d);
        EXPECT_TRUE(std::string(t1.impl_name()) == "onednn:qconv" || std::string(t1.impl_name()) == "gemm:qconv");
        EXPECT_STREQ(t1.impl_name(), t2.impl_name());
        EXPECT_STREQ(qconv2d_impl_name(d), t1.impl_name());
        // Depthwise: oneDNN untimed where it has a primitive.
        QConvDesc dw = d;
        dw.oc = dw.c;
        dw.groups = dw.c;
        const detail::QConvProblem pdw = detail::qconv_validate_desc("test", dw);
        const char* how = "";
        const auto sel = detail::qconv_select(pdw, &how);
        if (detail::onednn_qconv_supports(pdw)) {
            EXPECT_STREQ(sel.impl->name, "onednn:qconv");
            EXPECT_STREQ(how, "grouped");
        }
    }
    const ScopedEnv gemm_env("XK_QCONV_IMPL", "gemm");
    const QConvPlan g(d);
    const QConvPackedWeights pg = g.pack_weights(c.wt.data());
    const ScopedEnv dnn_env("XK_QCONV_IMPL", "onednn");
    const QConvPlan o(d);
    ASSERT_STREQ(o.impl_name(), "onednn:qconv");
    const QConvPackedWeights po = o.pack_weights(c.wt.data());
    // A pack of the other route is rejected (same descriptor), nothing written.
    const dq::Params q{0.02f, 0, 0.5f, 3};
    std::vector<uint8_t> dst(c.dst_bytes(), 42);
    QConvArgs a = c.args(q, dst.data());
    XK_EXPECT_INVALID(o.run(a, pg), "packed_weights=gemm:qconv|");
    XK_EXPECT_INVALID(g.run(a, po), "packed_weights=onednn:qconv|");
    for (uint8_t v : dst) ASSERT_EQ(v, 42) << "a rejected call wrote dst";
    // Under a cap without VNNI the override cannot pick oneDNN (its int8 kernels would saturate).
    set_max_isa(Isa::avx512);
    EXPECT_STREQ(QConvPlan(d).impl_name(), "gemm:qconv");
    reset_max_isa();
    // Both routes agree within 1 (u8 dst, ReLU).
    std::vector<uint8_t> og(c.dst_bytes()), oo(c.dst_bytes());
    a.weights = nullptr;
    a.dst = og.data();
    g.run(a, pg);
    a.dst = oo.data();
    o.run(a, po);
    for (size_t i = 0; i < og.size(); ++i) ASSERT_LE(std::abs(int(og[i]) - int(oo[i])), 1) << i;
}

}  // namespace
