// int8 Linear (xk::QLinearPlan) and the SmoothQuant recipe: every ISA (avx2_vnni included) against
// the reference pipeline written here — the weights quantized per output channel by xk::quantize
// with scales checked against max|W|/127, the activations by xk::quantize (dynamic per token /
// per tensor; its own tests check it against an oracle), the integer products summed exactly in
// int64, then the dequantization in the header's fp32 order, bias, activation, residual; odd
// sizes, strides, misaligned pointers, 1 and 2 threads; bad input naming the argument with nothing
// written.
//
// Tolerances.
//   integer part: exact (the reference's s32 sums are the kernel's; the dequantized value is one
//     fp32 product per scale in the same order, so f32 y with act none / relu is compared bit for
//     bit, bf16 y too (one more rounding of the same value), u8 / s8 y (static) bit for bit).
//   gelu / silu: the JIT's vectorised activation: rtol 2e-6 + atol 1e-6 (f32 y).
//   against the fp32 product X W^T (no quantization): |y - y_fp32| <= sum_k (|x| dw + |w| dx + dx dw)
//     with dx = x_scale / 2, dw = w_scale / 2 per element (the rounding of each operand), + 1e-5.
//   SmoothQuant: the smoothed fp32 product equals the original within rtol 1e-5 of sum |x w|.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/test_util.hpp"
#include "xk/qlinear.hpp"
#include "xk/quant.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

namespace {

constexpr double kActRtol = 2e-6, kActAtol = 1e-6;

bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return true;
#else
    return false;
#endif
#else
    return false;
#endif
}

float act_ref(Activation a, float x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0.0f ? x : 0.0f;
        case Activation::gelu_erf: return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f)));
        case Activation::gelu_tanh: {
            const float c = std::sqrt(2.0f / 3.14159265358979f);
            return 0.5f * x * (1.0f + std::tanh(c * (x + 0.044715f * x * x * x)));
        }
        case Activation::silu: return x / (1.0f + std::exp(-x));
    }
    return x;
}

float requant(float x, float inv, int zp, int lo, int hi) {
    float q = std::nearbyint(x * inv) + float(zp);
    if (!(q >= float(lo))) q = float(lo);
    if (q > float(hi)) q = float(hi);
    return q;
}

struct Case {
    int64_t M, N, K;
    QLinearQuant quant;
    DType x, y;
    bool bias, residual;
    Activation act;
    bool strided;
    int misalign;  // elements (of each buffer's type) past a 64-byte boundary
    bool smooth = false;  // dynamic: x * smooth[k] first
};

// Everything one case needs: data, the plan's output, the reference's.
struct QRun {
    Case c;
    QLinearDesc d;
    std::vector<float> W;             // [N x K] f32 weights
    std::vector<float> xf;            // dynamic x as float values (bf16-exact for bf16)
    Buffer<unsigned char> x, y, res;  // raw storage
    std::vector<float> bias, smooth;
    QLinearArgs a;
    std::vector<float> x_scales;  // reference: per row (per token) or [1]
    int32_t x_zp = 0;
};

template <class T>
T* as(Buffer<unsigned char>& b) {
    return reinterpret_cast<T*>(b.data());
}

void make_run(QRun& r, uint64_t seed) {
    const Case& c = r.c;
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    QLinearDesc& d = r.d;
    d.N = c.N, d.K = c.K, d.quant = c.quant, d.x_type = c.x, d.y_type = c.y;
    d.ldx = c.strided ? c.K + 3 : 0;
    d.ldy = c.strided ? c.N + 5 : 0;
    d.epilogue.bias = c.bias, d.epilogue.residual = c.residual, d.epilogue.act = c.act;
    d.residual_type = c.y == DType::bf16 ? DType::bf16 : DType::f32;
    d.ld_residual = c.strided ? c.N + 2 : 0;
    const int64_t ldx = d.ldx ? d.ldx : c.K, ldy = d.ldy ? d.ldy : c.N, ldr = d.ld_residual ? d.ld_residual : c.N;
    r.W.resize(c.N * c.K);
    for (auto& v : r.W) v = u(g) * 0.5f;
    for (int64_t k = 0; k < c.K; k += 5) r.W[k] = 3.0f;  // a row with one large weight
    r.x.resize(c.M * ldx * dtype_size(c.x) + 64, c.misalign * dtype_size(c.x));
    r.y.resize(c.M * ldy * dtype_size(c.y) + 64, c.misalign * dtype_size(c.y));
    r.res.resize(c.M * ldr * dtype_size(d.residual_type) + 64, c.misalign * dtype_size(d.residual_type));
    r.xf.assign(c.M * ldx, 0.0f);
    for (int64_t m = 0; m < c.M; ++m)
        for (int64_t k = 0; k < c.K; ++k) {
            const int64_t i = m * ldx + k;
            if (c.x == DType::f32) {
                float v = u(g) * 2.0f * (1 + m % 3);
                as<float>(r.x)[i] = v, r.xf[i] = v;
            } else if (c.x == DType::bf16) {
                bf16 v(u(g) * 2.0f * (1 + m % 3));
                as<bf16>(r.x)[i] = v, r.xf[i] = v.to_float();
            } else if (c.x == DType::u8) {
                as<uint8_t>(r.x)[i] = static_cast<uint8_t>(g() % 256);
            } else {
                as<int8_t>(r.x)[i] = static_cast<int8_t>(static_cast<int>(g() % 256) - 128);
            }
        }
    for (int64_t m = 0; m < c.M; ++m)
        for (int64_t n = 0; n < c.N; ++n) {
            const float v = u(g);
            if (d.residual_type == DType::bf16) as<bf16>(r.res)[m * ldr + n] = bf16(v);
            else as<float>(r.res)[m * ldr + n] = v;
        }
    r.bias.resize(c.N);
    for (auto& v : r.bias) v = u(g);
    if (c.smooth) {
        d.smooth = true;
        r.smooth.resize(c.K);
        for (auto& v : r.smooth) v = 0.5f + 0.75f * (u(g) + 1.0f);
        r.a.smooth = r.smooth.data();
    }
    r.a.x = r.x.data(), r.a.y = r.y.data();
    r.a.bias = c.bias ? r.bias.data() : nullptr;
    r.a.residual = c.residual ? r.res.data() : nullptr;
    if (c.quant == QLinearQuant::static_per_tensor) {
        r.a.x_scale = 0.0173f;
        r.a.x_zero_point = c.x == DType::u8 ? 131 : -3;
    }
    if (c.y == DType::u8) r.a.y_scale = 0.05f, r.a.y_zero_point = 120;
    if (c.y == DType::s8) r.a.y_scale = 0.04f, r.a.y_zero_point = 5;
}

// The weights quantized per channel with the plan's scales (checked against max|W|/127 first).
std::vector<int8_t> ref_weights(const QRun& r, const float* ws) {
    const int64_t N = r.c.N, K = r.c.K;
    for (int64_t n = 0; n < N; ++n) {
        float amax = 0;
        for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(r.W[n * K + k]));
        const float want = amax > 0 ? static_cast<float>(double(amax) / 127.0) : 1.0f;
        EXPECT_EQ(ws[n], want) << "w_scale[" << n << "]";
    }
    std::vector<int8_t> q(N * K);
    if (N * K == 0) return q;
    QuantDesc qd;
    qd.rows = N, qd.cols = K, qd.src_dtype = DType::f32, qd.dst_dtype = DType::s8;
    qd.granularity = QuantGranularity::per_channel, qd.axis = 0, qd.symmetric = true;
    QuantArgs qa;
    qa.src = r.W.data(), qa.dst = q.data(), qa.scales = ws;
    quantize(qd, qa);
    return q;
}

// The reference pipeline; returns y as float values of y_type; also fills the fp32 bound.
std::vector<float> reference(QRun& r, const std::vector<int8_t>& wq, const float* ws, std::vector<double>* err_bound,
                             std::vector<double>* y_fp32) {
    const Case& c = r.c;
    const QLinearDesc& d = r.d;
    const int64_t M = c.M, N = c.N, K = c.K;
    const int64_t ldx = d.ldx ? d.ldx : K, ldr = d.ld_residual ? d.ld_residual : N;
    std::vector<int32_t> qx(M * K);  // activation integers minus zero point
    std::vector<float> xs(M, 1.0f);
    if (c.quant == QLinearQuant::static_per_tensor) {
        for (int64_t m = 0; m < M; ++m)
            for (int64_t k = 0; k < K; ++k) {
                const int64_t i = m * ldx + k;
                const int v = c.x == DType::u8 ? as<uint8_t>(r.x)[i] : as<int8_t>(r.x)[i];
                qx[m * K + k] = v - r.a.x_zero_point;
            }
    } else if (K > 0 && M > 0) {
        QuantDesc qd;
        qd.rows = M, qd.cols = K, qd.src_dtype = c.x, qd.ld_src = ldx;
        QuantArgs qa;
        qa.src = r.x.data();
        qd.smooth = c.smooth, qa.smooth = c.smooth ? r.smooth.data() : nullptr;
        if (c.quant == QLinearQuant::dynamic_per_token) {
            std::vector<int8_t> q(M * K);
            qd.dst_dtype = DType::s8, qd.granularity = QuantGranularity::per_token_dynamic, qd.symmetric = true;
            qa.dst = q.data(), qa.scales_out = xs.data();
            quantize(qd, qa);
            for (int64_t i = 0; i < M * K; ++i) qx[i] = q[i];
        } else {
            float mn = 0, mx = 0;
            for (int64_t m = 0; m < M; ++m)
                for (int64_t k = 0; k < K; ++k) {
                    const float v = r.xf[m * ldx + k] * (c.smooth ? r.smooth[k] : 1.0f);
                    mn = std::min(mn, v), mx = std::max(mx, v);
                }
            const QuantParams p = compute_quant_params(mn, mx, DType::u8, false);
            std::vector<uint8_t> q(M * K);
            qd.dst_dtype = DType::u8, qd.granularity = QuantGranularity::per_tensor;
            qa.dst = q.data(), qa.scales = &p.scale, qa.zero_points = &p.zero_point;
            quantize(qd, qa);
            for (int64_t i = 0; i < M * K; ++i) qx[i] = int32_t(q[i]) - p.zero_point;
            std::fill(xs.begin(), xs.end(), p.scale);
        }
    }
    std::vector<float> y(M * N);
    if (err_bound) err_bound->assign(M * N, 0.0), y_fp32->assign(M * N, 0.0);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            int64_t acc = 0;
            double exact = 0, bound = 0;
            for (int64_t k = 0; k < K; ++k) {
                acc += int64_t(qx[m * K + k]) * wq[n * K + k];
                if (err_bound) {
                    const double xv = r.xf[m * ldx + k], wv = r.W[n * K + k];
                    exact += xv * wv;
                    const double dx = xs[m] / 2, dw = ws[n] / 2;
                    bound += std::fabs(xv) * dw + std::fabs(wv) * dx + dx * dw;
                }
            }
            float v;
            if (c.quant == QLinearQuant::dynamic_per_token)
                v = (float(int32_t(acc)) * ws[n]) * xs[m];
            else {
                const float sc = (c.quant == QLinearQuant::static_per_tensor ? r.a.x_scale : xs[m]) * ws[n];
                v = float(int32_t(acc)) * sc;
            }
            if (err_bound) (*err_bound)[m * N + n] = bound + 1e-5, (*y_fp32)[m * N + n] = exact;
            if (c.bias) v = v + r.bias[n];
            v = act_ref(c.act, v);
            if (c.residual)
                v = v + (d.residual_type == DType::bf16 ? as<bf16>(r.res)[m * ldr + n].to_float()
                                                         : as<float>(r.res)[m * ldr + n]);
            if (c.y == DType::bf16) v = bf16(v).to_float();
            if (c.y == DType::u8) v = requant(v, 1.0f / r.a.y_scale, r.a.y_zero_point, 0, 255);
            if (c.y == DType::s8) v = requant(v, 1.0f / r.a.y_scale, r.a.y_zero_point, -128, 127);
            y[m * N + n] = v;
        }
    return y;
}

float y_at(QRun& r, int64_t m, int64_t n) {
    const int64_t ldy = r.d.ldy ? r.d.ldy : r.c.N;
    const int64_t i = m * ldy + n;
    switch (r.c.y) {
        case DType::f32: return as<float>(r.y)[i];
        case DType::bf16: return as<bf16>(r.y)[i].to_float();
        case DType::u8: return as<uint8_t>(r.y)[i];
        default: return as<int8_t>(r.y)[i];
    }
}

void check_case(const Case& c, uint64_t seed) {
    QRun r;
    r.c = c;
    make_run(r, seed);
    QLinearWeight w;
    w.type = DType::f32, w.data = r.W.data();
    QLinearPlan plan(r.d, w);
    const std::vector<int8_t> wq = ref_weights(r, plan.weight_scales());
    std::vector<double> bound, y32;
    const bool fp_bound = c.quant != QLinearQuant::static_per_tensor && !c.smooth && !c.bias && !c.residual &&
                          c.act == Activation::none && c.y == DType::f32;
    const std::vector<float> want = reference(r, wq, plan.weight_scales(), fp_bound ? &bound : nullptr, &y32);
    for (int thr : {1, 2}) {
        set_num_threads(thr);
        std::memset(r.y.data(), 0, r.y.size());
        plan.run(c.M, r.a);
        int bad = 0;
        const bool exact = c.act == Activation::none || c.act == Activation::relu || c.y == DType::u8 || c.y == DType::s8;
        for (int64_t m = 0; m < c.M && bad < 5; ++m)
            for (int64_t n = 0; n < c.N && bad < 5; ++n) {
                const float got = y_at(r, m, n), ref = want[m * c.N + n];
                const double tol = exact ? 0.0 : kActAtol + kActRtol * std::fabs(ref) + (c.y == DType::bf16 ? std::fabs(ref) / 128 : 0);
                if (!(std::fabs(double(got) - ref) <= tol)) {
                    ADD_FAILURE() << "y[" << m << "][" << n << "] = " << got << ", reference " << ref << " (M" << c.M
                                  << " N" << c.N << " K" << c.K << " quant " << qlinear_quant_name(c.quant) << " x "
                                  << dtype_name(c.x) << " y " << dtype_name(c.y) << " act " << activation_name(c.act)
                                  << " threads " << thr << " impl " << plan.impl_name() << ")";
                    ++bad;
                }
                if (fp_bound && std::fabs(double(got) - y32[m * c.N + n]) > bound[m * c.N + n]) {
                    ADD_FAILURE() << "y[" << m << "][" << n << "] = " << got << " is farther than " << bound[m * c.N + n]
                                  << " from the fp32 product " << y32[m * c.N + n];
                    ++bad;
                }
            }
    }
    set_num_threads(0);
}

}  // namespace

TEST(QLinear, DynamicPerTokenMatchesReference) {
    const bool san = under_sanitizer();
    std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1}, {7, 17, 33}, {17, 31, 64}, {33, 65, 127}, {3, 40, 1023}};
    if (!san) shapes.push_back({70, 96, 300});
    for_each_isa(
        [&](Isa) {
            uint64_t seed = 1;
            for (auto s : shapes)
                for (DType x : {DType::f32, DType::bf16})
                    for (DType y : {DType::f32, DType::bf16}) {
                        const bool epi = (seed % 2) == 0;
                        Case c{s[0], s[1], s[2], QLinearQuant::dynamic_per_token, x, y, epi, epi,
                               epi ? Activation::relu : Activation::none, (seed % 3) == 1, int(seed % 4)};
                        check_case(c, ++seed);
                    }
            // activations with a tolerance
            // SmoothQuant's smooth vector on x
            check_case({13, 40, 77, QLinearQuant::dynamic_per_token, DType::f32, DType::f32, true, false, Activation::none, true, 4, true}, 7);
            check_case({5, 33, 64, QLinearQuant::dynamic_per_token, DType::bf16, DType::bf16, false, true, Activation::relu, false, 2, true}, 8);
            check_case({6, 20, 48, QLinearQuant::dynamic_per_tensor, DType::f32, DType::f32, false, false, Activation::none, false, 0, true}, 9);
            for (Activation act : {Activation::gelu_erf, Activation::silu})
                check_case({9, 35, 50, QLinearQuant::dynamic_per_token, DType::f32, DType::f32, true, false, act, false, 0}, 99);
        },
        true);
}

TEST(QLinear, DynamicPerTensorMatchesReference) {
    for_each_isa(
        [&](Isa) {
            uint64_t seed = 11;
            for (auto s : std::vector<std::array<int64_t, 3>>{{1, 5, 3}, {15, 33, 65}, {40, 17, 200}})
                for (DType x : {DType::f32, DType::bf16}) {
                    const bool epi = (seed % 2) == 0;
                    check_case({s[0], s[1], s[2], QLinearQuant::dynamic_per_tensor, x, DType::f32, epi, epi,
                                Activation::none, epi, 4},
                               ++seed);
                }
        },
        true);
}

TEST(QLinear, StaticEndToEndBitExact) {
    for_each_isa(
        [&](Isa) {
            uint64_t seed = 21;
            for (auto s : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 17, 33}, {29, 48, 129}})
                for (DType x : {DType::u8, DType::s8})
                    for (DType y : {DType::u8, DType::s8, DType::f32, DType::bf16}) {
                        const bool epi = (seed % 2) == 1;
                        check_case({s[0], s[1], s[2], QLinearQuant::static_per_tensor, x, y, epi, epi,
                                    epi ? Activation::relu : Activation::none, seed % 3 == 0, int(seed % 3)},
                                   ++seed);
                    }
        },
        true);
}

TEST(QLinear, PreQuantizedWeightsAndEmptyShapes) {
    // s8 weights with given scales: the same result as the plan quantizing f32 weights itself.
    QRun r;
    r.c = {9, 21, 40, QLinearQuant::dynamic_per_token, DType::f32, DType::f32, true, false, Activation::none, false, 0};
    make_run(r, 5);
    QLinearPlan pf(r.d, {DType::f32, r.W.data(), 0, nullptr});
    const std::vector<int8_t> wq = ref_weights(r, pf.weight_scales());
    QLinearPlan ps(r.d, {DType::s8, wq.data(), 0, pf.weight_scales()});
    std::vector<float> y1(9 * 21), y2(9 * 21);
    QLinearArgs a = r.a;
    a.y = y1.data();
    pf.run(9, a);
    a.y = y2.data();
    ps.run(9, a);
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
    EXPECT_GT(pf.weight_bytes(), 0u);
    // M = 0 does nothing; K = 0: y = act(bias)
    pf.run(0, QLinearArgs{});
    QLinearDesc d0;
    d0.N = 3, d0.K = 0, d0.epilogue.bias = true;
    QLinearPlan p0(d0, {DType::f32, nullptr, 0, nullptr});
    float bias[3] = {1, -2, 3}, y[6] = {};
    QLinearArgs a0;
    a0.y = y, a0.bias = bias;
    p0.run(2, a0);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], bias[i % 3]);
}

TEST(QLinear, BadInputNamesTheArgumentAndWritesNothing) {
    const int64_t M = 4, N = 8, K = 16;
    std::vector<float> W(N * K, 0.25f), x(M * K, 1.0f), bias(N, 0.0f);
    std::vector<float> y(M * N, 7.0f);
    QLinearDesc d;
    d.N = N, d.K = K, d.epilogue.bias = true;
    QLinearPlan p(d, {DType::f32, W.data(), 0, nullptr});
    QLinearArgs a;
    a.x = x.data(), a.y = y.data(), a.bias = bias.data();
    auto untouched = [&] {
        for (float v : y) ASSERT_EQ(v, 7.0f);
    };
    QLinearArgs b = a;
    b.x = nullptr; XK_EXPECT_INVALID(p.run(M, b), "x=null");
    b = a, b.y = nullptr; XK_EXPECT_INVALID(p.run(M, b), "y=null");
    b = a, b.bias = nullptr; XK_EXPECT_INVALID(p.run(M, b), "bias=null");
    XK_EXPECT_INVALID(p.run(-1, a), "M=-1");
    b = a, b.x = y.data(); XK_EXPECT_INVALID(p.run(1, b), "overlaps x=");
    b = a, b.smooth = bias.data(); XK_EXPECT_INVALID(p.run(M, b), "smooth=");
    x[2 * K + 5] = std::nanf("");
    XK_EXPECT_INVALID(p.run(M, a), "x[2][5]");
    untouched();
    x[2 * K + 5] = INFINITY;
    XK_EXPECT_INVALID(p.run(M, a), "x[2][5]");
    untouched();
    x[2 * K + 5] = 1.0f;
    {  // per tensor: the same check
        QLinearDesc dt = d;
        dt.quant = QLinearQuant::dynamic_per_tensor;
        QLinearPlan pt(dt, {DType::f32, W.data(), 0, nullptr});
        x[3 * K + 1] = -INFINITY;
        XK_EXPECT_INVALID(pt.run(M, a), "x[3][1]");
        untouched();
        x[3 * K + 1] = 1.0f;
    }
    {  // a non-finite value in a later block of rows (the quantizer works block by block), 2 threads
        const int64_t M2 = 64, K2 = 2048;
        std::vector<float> W2(N * K2, 0.5f), x2(M2 * K2, 1.0f), y2(M2 * N, 7.0f);
        QLinearDesc d2;
        d2.N = N, d2.K = K2;
        QLinearPlan p2(d2, {DType::f32, W2.data(), 0, nullptr});
        x2[50 * K2 + 7] = -INFINITY;
        QLinearArgs a2;
        a2.x = x2.data(), a2.y = y2.data();
        for (int thr : {1, 2}) {
            set_num_threads(thr);
            XK_EXPECT_INVALID(p2.run(M2, a2), "x[50][7]");
        }
        set_num_threads(0);
        for (float v : y2) ASSERT_EQ(v, 7.0f);
    }
    // static: scales and zero points
    QLinearDesc ds = d;
    ds.quant = QLinearQuant::static_per_tensor, ds.x_type = DType::u8, ds.y_type = DType::u8;
    QLinearPlan pst(ds, {DType::f32, W.data(), 0, nullptr});
    std::vector<uint8_t> xq(M * K, 3), yq(M * N, 77);
    QLinearArgs s;
    s.x = xq.data(), s.y = yq.data(), s.bias = bias.data(), s.x_scale = 0.1f, s.y_scale = 0.2f;
    for (float bad : {0.0f, -1.0f, std::nanf(""), INFINITY, 1e-45f}) {
        QLinearArgs t = s;
        t.x_scale = bad; XK_EXPECT_INVALID(pst.run(M, t), "x_scale=");
        t = s, t.y_scale = bad; XK_EXPECT_INVALID(pst.run(M, t), "y_scale=");
    }
    QLinearArgs t = s;
    t.x_zero_point = 256; XK_EXPECT_INVALID(pst.run(M, t), "x_zero_point=256");
    t = s, t.y_zero_point = -1; XK_EXPECT_INVALID(pst.run(M, t), "y_zero_point=-1");
    for (uint8_t v : yq) ASSERT_EQ(v, 77);
    // plan construction
    QLinearDesc e = d;
    e.ldx = K - 1; XK_EXPECT_INVALID(QLinearPlan(e, {DType::f32, W.data(), 0, nullptr}), "ldx=15");
    e = d, e.N = -2; XK_EXPECT_INVALID(QLinearPlan(e, {DType::f32, W.data(), 0, nullptr}), "N=-2");
    e = d, e.quant = static_cast<QLinearQuant>(7); XK_EXPECT_INVALID(QLinearPlan(e, {DType::f32, W.data(), 0, nullptr}), "quant=7");
    e = d, e.x_type = DType::u8; XK_EXPECT_ERROR(QLinearPlan(e, {DType::f32, W.data(), 0, nullptr}), Status::unsupported, "x_type=u8");
    e = d, e.y_type = DType::u8; XK_EXPECT_ERROR(QLinearPlan(e, {DType::f32, W.data(), 0, nullptr}), Status::unsupported, "y_type=u8");
    e = ds, e.smooth = true; XK_EXPECT_INVALID(QLinearPlan(e, {DType::f32, W.data(), 0, nullptr}), "smooth=true");
    XK_EXPECT_INVALID(QLinearPlan(d, {DType::f32, nullptr, 0, nullptr}), "weight.data=null");
    XK_EXPECT_INVALID(QLinearPlan(d, {DType::f32, W.data(), K - 3, nullptr}), "weight.ld=13");
    XK_EXPECT_ERROR(QLinearPlan(d, {DType::s32, W.data(), 0, nullptr}), Status::unsupported, "weight.type=s32");
    W[3 * K + 2] = std::nanf("");
    XK_EXPECT_INVALID(QLinearPlan(d, {DType::f32, W.data(), 0, nullptr}), "weight.data[3][2]");
    std::vector<int8_t> wq(N * K, 1);
    std::vector<float> ws(N, 0.5f);
    XK_EXPECT_INVALID(QLinearPlan(d, {DType::s8, wq.data(), 0, nullptr}), "weight.scales=null");
    for (float bad : {0.0f, -0.5f, std::nanf("")}) {
        ws[5] = bad;
        XK_EXPECT_INVALID(QLinearPlan(d, {DType::s8, wq.data(), 0, ws.data()}), "weight.scales[5]=");
    }
    // C API: status + message
    xk_qlinear_desc cd;
    xk_qlinear_desc_init(&cd);
    cd.N = N, cd.K = K;
    xk_qlinear_weight cw{XK_DTYPE_F32, nullptr, 0, nullptr};
    xk_qlinear* h = reinterpret_cast<xk_qlinear*>(&cd);
    EXPECT_EQ(xk_qlinear_create(&cd, &cw, &h), XK_INVALID_ARGUMENT);
    EXPECT_EQ(h, nullptr);
    EXPECT_NE(std::string(xk_last_error()).find("weight.data=null"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_qlinear_run(nullptr, 1, nullptr), XK_INVALID_ARGUMENT);
    // calibrator
    SmoothQuantCalibrator cal(K);
    XK_EXPECT_INVALID(cal.observe(2, static_cast<const float*>(nullptr)), "x=null");
    XK_EXPECT_INVALID(cal.observe(2, x.data(), K - 1), "ld=15");
    x[K + 4] = INFINITY;
    XK_EXPECT_INVALID(cal.observe(2, x.data()), "x[1][4]");
    EXPECT_EQ(cal.batches(), 0);
    EXPECT_EQ(cal.absmax()[0], 0.0f);
    std::vector<float> am(K, 1.0f), wm(K, 1.0f);
    am[3] = -1.0f;
    XK_EXPECT_INVALID(smoothquant_factors(K, am.data(), wm.data()), "act_absmax[3]");
    XK_EXPECT_INVALID(smoothquant_factors(K, wm.data(), wm.data(), 1.5f), "alpha=");
    std::vector<float> sf(K, 1.0f);
    sf[2] = 0.0f;
    XK_EXPECT_INVALID(smoothquant_fold_weight(N, K, W.data(), 0, sf.data()), "s[2]=");
}

TEST(QLinear, CApiMatchesCpp) {
    QRun r;
    r.c = {5, 19, 37, QLinearQuant::dynamic_per_token, DType::f32, DType::f32, true, true, Activation::relu, false, 0};
    make_run(r, 77);
    QLinearPlan p(r.d, {DType::f32, r.W.data(), 0, nullptr});
    std::vector<float> y1(5 * 19), y2(5 * 19);
    QLinearArgs a = r.a;
    a.y = y1.data();
    p.run(5, a);
    xk_qlinear_desc cd;
    xk_qlinear_desc_init(&cd);
    cd.N = 19, cd.K = 37, cd.bias = 1, cd.residual = 1, cd.act = XK_ACT_RELU;
    xk_qlinear_weight cw{XK_DTYPE_F32, r.W.data(), 0, nullptr};
    xk_qlinear* h = nullptr;
    ASSERT_EQ(xk_qlinear_create(&cd, &cw, &h), XK_SUCCESS) << xk_last_error();
    xk_qlinear_args ca;
    xk_qlinear_args_init(&ca);
    ca.x = r.x.data(), ca.y = y2.data(), ca.bias = r.bias.data(), ca.residual = r.res.data();
    ASSERT_EQ(xk_qlinear_run(h, 5, &ca), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4));
    EXPECT_EQ(0, std::memcmp(xk_qlinear_weight_scales(h), p.weight_scales(), 19 * 4));
    xk_qlinear_destroy(h);
}

namespace {
// ||Y_int8 - X W^T|| / ||X W^T|| of a dynamic int8 Linear on (x, W), optionally smoothed.
double qlinear_rel_error(int64_t M, int64_t N, int64_t K, const std::vector<float>& x, const std::vector<float>& W,
                         const float* inv_s) {
    QLinearDesc d;
    d.N = N, d.K = K, d.smooth = inv_s != nullptr;
    QLinearPlan p(d, {DType::f32, W.data(), 0, nullptr});
    std::vector<float> y(M * N);
    QLinearArgs a;
    a.x = x.data(), a.y = y.data(), a.smooth = inv_s;
    p.run(M, a);
    double num = 0, den = 0;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double e = 0;
            for (int64_t k = 0; k < K; ++k) e += double(x[m * K + k] * (inv_s ? inv_s[k] : 1.0f)) * W[n * K + k];
            num += (y[m * N + n] - e) * (y[m * N + n] - e);
            den += e * e;
        }
    return std::sqrt(num / den);
}
}  // namespace

TEST(SmoothQuant, FactorsFoldingAndOutlierChannels) {
    const int64_t M = 32, N = 48, K = 96;
    std::mt19937_64 g(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(M * K), W(N * K);
    for (auto& v : x) v = nd(g);
    for (auto& v : W) v = nd(g) * 0.1f;
    for (int64_t m = 0; m < M; ++m) x[m * K + 5] *= 60.0f, x[m * K + 70] *= 40.0f;  // outlier channels

    // calibration over two batches (f32 and bf16), 1 and 2 threads: the per-channel abs-max
    SmoothQuantCalibrator cal(K);
    set_num_threads(2);
    cal.observe(M / 2, x.data());
    std::vector<bf16> xb(M / 2 * K);
    for (int64_t i = 0; i < M / 2 * K; ++i) xb[i] = bf16(x[M / 2 * K + i]);
    set_num_threads(1);
    cal.observe(M / 2, xb.data());
    set_num_threads(0);
    EXPECT_EQ(cal.batches(), 2);
    for (int64_t k = 0; k < K; ++k) {
        float want = 0;
        for (int64_t m = 0; m < M; ++m) want = std::max(want, std::fabs(m < M / 2 ? x[m * K + k] : xb[(m - M / 2) * K + k].to_float()));
        ASSERT_EQ(cal.absmax()[k], want) << k;
    }
    std::vector<float> wmax(K, 0.0f);
    smoothquant_weight_absmax(N, K, W.data(), 0, wmax.data());
    const float alpha = 0.5f;
    const std::vector<float> s = smoothquant_factors(K, cal.absmax().data(), wmax.data(), alpha);
    for (int64_t k = 0; k < K; ++k) {
        const double want = std::pow(double(cal.absmax()[k]), 0.5) / std::pow(double(wmax[k]), 0.5);
        ASSERT_NEAR(s[k], want, 1e-6 * want) << k;
    }
    // zeros guarded
    {
        float a0[2] = {0.0f, 3.0f}, w0[2] = {2.0f, 0.0f};
        const auto s0 = smoothquant_factors(2, a0, w0, 0.5f);
        EXPECT_EQ(s0[0], 1.0f);
        EXPECT_EQ(s0[1], 1.0f);
    }
    // folded weights and 1/s on x: the same fp32 product
    std::vector<float> Ws = W;
    smoothquant_fold_weight(N, K, Ws.data(), 0, s.data());
    const std::vector<float> inv = smoothquant_inverse(K, s.data());
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double y0 = 0, y1 = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) {
                y0 += double(x[m * K + k]) * W[n * K + k];
                y1 += double(x[m * K + k] * inv[k]) * Ws[n * K + k];
                mag += std::fabs(double(x[m * K + k]) * W[n * K + k]);
            }
            ASSERT_NEAR(y1, y0, 1e-5 * mag);
        }
    // norm folding: gamma / s and beta / s, so that norm_out / s comes out of the norm itself
    std::vector<float> gamma(K), beta(K);
    for (int64_t k = 0; k < K; ++k) gamma[k] = 1.0f + 0.01f * k, beta[k] = 0.1f * (k % 7);
    std::vector<float> g2 = gamma, b2 = beta;
    smoothquant_fold_norm(K, g2.data(), b2.data(), s.data());
    for (int64_t k = 0; k < K; ++k) {
        EXPECT_FLOAT_EQ(g2[k] * s[k], gamma[k]);
        EXPECT_NEAR(b2[k] * s[k], beta[k], 1e-6);
    }
    // smoothing moves the outliers into the weights: less int8 error on the same product
    const double e_plain = qlinear_rel_error(M, N, K, x, W, nullptr);
    const double e_smooth = qlinear_rel_error(M, N, K, x, Ws, inv.data());
    EXPECT_LT(e_smooth, 0.7 * e_plain) << "plain " << e_plain << " smoothed " << e_smooth;
    // C API agrees
    std::vector<float> am(K, 0.0f), wm(K, 0.0f), sc(K);
    ASSERT_EQ(xk_smoothquant_observe_f32(M, K, x.data(), 0, am.data()), XK_SUCCESS);
    ASSERT_EQ(xk_smoothquant_weight_absmax(N, K, W.data(), 0, wm.data()), XK_SUCCESS);
    ASSERT_EQ(xk_smoothquant_factors(K, am.data(), wm.data(), 0.5f, sc.data()), XK_SUCCESS);
    for (int64_t k = 0; k < K; ++k) EXPECT_NEAR(sc[k], s[k], 2e-3f * s[k]);  // (the bf16 batch above rounds)
}

TEST(QLinear, OnePlanFromSeveralThreadsAtOnce) {
    // One plan run concurrently from 4 threads with different M (each its own scratch, the
    // per-M kernel memo shared): bit for bit the results of one thread at a time.
    const int64_t N = 40, K = 96;
    std::vector<float> W(N * K), x(33 * K), bias(N);
    std::mt19937_64 g(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : W) v = u(g);
    for (auto& v : x) v = u(g) * 3.0f;
    for (auto& v : bias) v = u(g);
    for (QLinearQuant q : {QLinearQuant::dynamic_per_token, QLinearQuant::dynamic_per_tensor}) {
        QLinearDesc d;
        d.N = N, d.K = K, d.quant = q, d.epilogue.bias = true, d.epilogue.act = Activation::relu;
        const QLinearPlan p(d, {DType::f32, W.data(), 0, nullptr});
        const int64_t Ms[4] = {1, 7, 16, 33};
        std::vector<std::vector<float>> want(4), got(4);
        for (int t = 0; t < 4; ++t) {
            want[t].assign(Ms[t] * N, 0.0f), got[t].assign(Ms[t] * N, 0.0f);
            QLinearArgs a;
            a.x = x.data(), a.y = want[t].data(), a.bias = bias.data();
            p.run(Ms[t], a);
        }
        for (int rep = 0; rep < 3; ++rep) {
            std::vector<std::thread> ts;
            for (int t = 0; t < 4; ++t)
                ts.emplace_back([&, t] {
                    for (int i = 0; i < 5; ++i) {
                        QLinearArgs a;
                        a.x = x.data(), a.y = got[t].data(), a.bias = bias.data();
                        p.run(Ms[t], a);
                    }
                });
            for (auto& th : ts) th.join();
            for (int t = 0; t < 4; ++t) EXPECT_EQ(0, std::memcmp(got[t].data(), want[t].data(), want[t].size() * 4)) << t;
        }
    }
}

TEST(SmoothQuant, CalibratorEveryIsaOddSizesNaNIgnored) {
    for_each_isa([&](Isa) {
        for (int64_t K : {1, 17, 1023}) {
            const int64_t rows = 9, ld = K + 3;
            std::mt19937_64 g(K);
            std::uniform_real_distribution<float> u(-5.0f, 5.0f);
            Buffer<float> x(rows * ld, 4);
            Buffer<bf16> xb(rows * ld, 2);
            for (int64_t i = 0; i < rows * ld; ++i) x[i] = u(g), xb[i] = bf16(u(g));
            x[3 * ld + K / 2] = std::nanf(""), xb[2 * ld] = bf16(std::nanf(""));
            for (int thr : {1, 2}) {
                set_num_threads(thr);
                SmoothQuantCalibrator cal(K);
                cal.observe(rows, x.data(), ld);
                cal.observe(rows, xb.data(), ld);
                for (int64_t k = 0; k < K; ++k) {
                    float want = 0;
                    for (int64_t r = 0; r < rows; ++r) {
                        const float a = std::fabs(x[r * ld + k]), b = std::fabs(xb[r * ld + k].to_float());
                        if (a > want) want = a;
                        if (b > want) want = b;
                    }
                    ASSERT_EQ(cal.absmax()[k], want) << "K " << K << " k " << k << " threads " << thr;
                }
            }
            set_num_threads(0);
        }
    });
}
