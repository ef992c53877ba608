// conv2d: every implementation against the reference, the reference against an independent
// double-precision oracle (explicit transposes to canonical NCHW/OIHW + per-group im2col + naive
// GEMM), shape sweeps (1x1, 3x3/s2/p1, dilation, groups, depthwise, odd and asymmetric sizes),
// both activation and weight layouts, every activation, bias, residual (both orders, in place),
// bf16, misaligned pointers, 1 and 2 threads, plans used concurrently, bad input, the C API.
#include <cstdlib>
#include <string>
#include <thread>

#include "common/test_util.hpp"
#include "kernels/conv/conv.hpp"
#include "xk/conv.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

#if defined(__SANITIZE_THREAD__)
// TSan cannot see libgomp's synchronisation (the TSan preset threads xk with std::thread), and
// oneDNN is an OpenMP build: accesses inside oneDNN by its reused OpenMP workers look unordered
// (as in test_gemm_onednn). Everything of ours around them stays checked.
extern "C" const char* __tsan_default_suppressions() {
    return "race:libdnnl.so\n"
           "called_from_lib:libgomp.so\n";
}
#endif

namespace {

// The plans and one-shot calls of this file run on oneDNN where it supports the descriptor
// (XK_CONV_IMPL=onednn, unless set outside): the one-time route timing costs up to ~0.4 s per
// descriptor on a shared 2-vCPU host, and every path is swept forced below anyway. The routing
// itself (timed, cached, both overrides) has its own test, Conv2dRouted.TimedRoute..., which
// clears the variable.
const bool kRouteForced = [] {
    if (!std::getenv("XK_CONV_IMPL")) setenv("XK_CONV_IMPL", "onednn", 1);
    return true;
}();

// Tolerances. u = 2^-24 (f32 unit roundoff). With K = (C/groups)*KH*KW terms and
// S = sum|src*w| + |bias| + |residual| (computed by the oracle), an f32 dot product in any order
// errs by at most ~K*u*S; bias / residual / activation add a few roundings and the activation's
// Lipschitz constant (<= 1.13) and evaluation error (gelu_tanh cancels for negative inputs, so its
// error is relative to S, not to the result). We allow
//   f32 dst:  |got - want| <= (4K + 32) * u * S              (~ 1e-5 relative to S at K = 72)
//   bf16 dst: the above + 2^-8 * |want|                      (one bf16 rounding, half-ulp 2^-9)
// bf16 inputs are converted exactly, so the oracle uses the same bf16 values and the f32 bound.
constexpr double kU = 1.0 / (1 << 24);
constexpr double kBf16Rel = 1.0 / 256;

double act_ref(Activation a, double x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::gelu_erf: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        case Activation::gelu_tanh:
            return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / std::acos(-1.0)) * (x + 0.044715 * x * x * x)));
        case Activation::silu: return x / (1 + std::exp(-x));
    }
    return x;
}

// Tensors as the test sees them (f32 or bf16 elements, stored in a misaligned buffer).
struct Tensor {
    DType t = DType::f32;
    Buffer<float> f;
    Buffer<bf16> h;
    void alloc(DType type, size_t n, size_t misalign_elems) {
        t = type;
        if (t == DType::bf16) h.resize(n, misalign_elems * 2);
        else f.resize(n, misalign_elems * 4);
    }
    void* data() { return t == DType::bf16 ? static_cast<void*>(h.data()) : static_cast<void*>(f.data()); }
    double get(size_t i) const { return t == DType::bf16 ? h[i].to_float() : f[i]; }
    void fill(double lo, double hi, uint64_t seed) {
        if (t == DType::bf16) test::fill_uniform(h.data(), h.size(), lo, hi, seed);
        else test::fill_uniform(f.data(), f.size(), lo, hi, seed);
    }
    void set(size_t i, float v) {
        if (t == DType::bf16) h[i] = bf16(v);
        else f[i] = v;
    }
    size_t size() const { return t == DType::bf16 ? h.size() : f.size(); }
};

// Index of (n, c, y, x) in a layout, written independently of the library.
size_t at(ConvLayout l, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c, int64_t y, int64_t x) {
    if (l == ConvLayout::nchw) return static_cast<size_t>(n * C * H * W + c * H * W + y * W + x);
    return static_cast<size_t>(n * H * W * C + y * W * C + x * C + c);
}
size_t wat(ConvWeightLayout l, int64_t I, int64_t KH, int64_t KW, int64_t o, int64_t i, int64_t ky, int64_t kx) {
    if (l == ConvWeightLayout::oihw) return static_cast<size_t>(o * I * KH * KW + i * KH * KW + ky * KW + kx);
    return static_cast<size_t>(o * KH * KW * I + ky * KW * I + kx * I + i);
}

struct Oracle {
    std::vector<double> want;  // canonical N x OC x OH x OW
    std::vector<double> mag;   // S per output element
    int64_t oh = 0, ow = 0;
};

Oracle oracle(const ConvDesc& d, const Tensor& src, const Tensor& wei, const float* bias, const Tensor* res) {
    const int64_t OH = (d.h + d.pad_top + d.pad_bottom - d.dilation_h * (d.kh - 1) - 1) / d.stride_h + 1;
    const int64_t OW = (d.w + d.pad_left + d.pad_right - d.dilation_w * (d.kw - 1) - 1) / d.stride_w + 1;
    const int64_t G = d.groups, I = d.c / G, OG = d.oc / G, K = I * d.kh * d.kw, P = OH * OW;
    // Canonical copies.
    std::vector<double> s(static_cast<size_t>(d.n * d.c * d.h * d.w)), w(static_cast<size_t>(d.oc * K));
    for (int64_t n = 0; n < d.n; ++n)
        for (int64_t c = 0; c < d.c; ++c)
            for (int64_t y = 0; y < d.h; ++y)
                for (int64_t x = 0; x < d.w; ++x)
                    s[((n * d.c + c) * d.h + y) * d.w + x] = src.get(at(d.layout, d.c, d.h, d.w, n, c, y, x));
    for (int64_t o = 0; o < d.oc; ++o)
        for (int64_t i = 0; i < I; ++i)
            for (int64_t ky = 0; ky < d.kh; ++ky)
                for (int64_t kx = 0; kx < d.kw; ++kx)
                    w[((o * I + i) * d.kh + ky) * d.kw + kx] = wei.get(wat(d.weight_layout, I, d.kh, d.kw, o, i, ky, kx));
    Oracle r;
    r.oh = OH;
    r.ow = OW;
    r.want.assign(static_cast<size_t>(d.n * d.oc * P), 0.0);
    r.mag.assign(r.want.size(), 0.0);
    std::vector<double> col(static_cast<size_t>(K * P));
    for (int64_t n = 0; n < d.n; ++n) {
        for (int64_t g = 0; g < G; ++g) {
            // im2col of group g: row k = (i, ky, kx), column p = (oy, ox); zero outside the input.
            for (int64_t i = 0; i < I; ++i)
                for (int64_t ky = 0; ky < d.kh; ++ky)
                    for (int64_t kx = 0; kx < d.kw; ++kx)
                        for (int64_t oy = 0; oy < OH; ++oy)
                            for (int64_t ox = 0; ox < OW; ++ox) {
                                const int64_t y = oy * d.stride_h + ky * d.dilation_h - d.pad_top;
                                const int64_t x = ox * d.stride_w + kx * d.dilation_w - d.pad_left;
                                const bool in = y >= 0 && y < d.h && x >= 0 && x < d.w;
                                col[((i * d.kh + ky) * d.kw + kx) * P + oy * OW + ox] =
                                    in ? s[((n * d.c + g * I + i) * d.h + y) * d.w + x] : 0.0;
                            }
            // GEMM: [OG x K] * [K x P].
            for (int64_t og = 0; og < OG; ++og) {
                const int64_t o = g * OG + og;
                for (int64_t p = 0; p < P; ++p) {
                    double acc = 0, mag = 0;
                    for (int64_t k = 0; k < K; ++k) {
                        acc += w[o * K + k] * col[k * P + p];
                        mag += std::fabs(w[o * K + k] * col[k * P + p]);
                    }
                    const size_t idx = static_cast<size_t>((n * d.oc + o) * P + p);
                    if (bias) {
                        acc += bias[o];
                        mag += std::fabs(bias[o]);
                    }
                    const double rv = res ? res->get(at(d.layout, d.oc, OH, OW, n, o, p / OW, p % OW)) : 0.0;
                    mag += std::fabs(rv);
                    if (d.residual == ConvResidual::add_before_activation) acc += rv;
                    acc = act_ref(d.activation, acc);
                    if (d.residual == ConvResidual::add_after_activation) acc += rv;
                    r.want[idx] = acc;
                    r.mag[idx] = mag;
                }
            }
        }
    }
    return r;
}

::testing::AssertionResult matches(const ConvDesc& d, const Oracle& o, const Tensor& dst) {
    const int64_t K = (d.c / d.groups) * d.kh * d.kw;
    size_t bad = 0;
    std::string msg;
    for (int64_t n = 0; n < d.n; ++n)
        for (int64_t c = 0; c < d.oc; ++c)
            for (int64_t y = 0; y < o.oh; ++y)
                for (int64_t x = 0; x < o.ow; ++x) {
                    const size_t ci = static_cast<size_t>(((n * d.oc + c) * o.oh + y) * o.ow + x);
                    const double want = o.want[ci];
                    const double got = dst.get(at(d.layout, d.oc, o.oh, o.ow, n, c, y, x));
                    double tol = (4.0 * K + 32) * kU * o.mag[ci] + 1e-30;
                    if (d.dst_dtype == DType::bf16) tol += kBf16Rel * std::fabs(want);
                    if (!(std::fabs(got - want) <= tol)) {
                        if (bad < 5)
                            msg += "\n  (n=" + std::to_string(n) + ",c=" + std::to_string(c) + ",y=" + std::to_string(y) +
                                   ",x=" + std::to_string(x) + ") got " + std::to_string(got) + " want " +
                                   std::to_string(want) + " tol " + std::to_string(tol);
                        ++bad;
                    }
                }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " outputs differ:" << msg;
}

std::string describe(const ConvDesc& d) {
    detail::ConvProblem p;
    p.d = d;
    return p.key();
}

// Runs one case (one-shot or plan) with misaligned buffers and checks it against the oracle.
// Returns the dst tensor for further comparisons.
// force_impl: run that registry entry's kernel directly (validated arguments); packed: through
// the kernel's packed weights (ConvPlan::pack_weights with a plan, ConvKernel::pack when forced).
Tensor run_case(const ConvDesc& d, size_t misalign, bool use_plan, bool residual_in_place = false,
                const char* force_impl = nullptr, bool packed = false) {
    const int64_t OH = conv_output_size(d.h, d.kh, d.stride_h, d.pad_top, d.pad_bottom, d.dilation_h);
    const int64_t OW = conv_output_size(d.w, d.kw, d.stride_w, d.pad_left, d.pad_right, d.dilation_w);
    const size_t ns = d.n * d.c * d.h * d.w, nw = d.oc * (d.c / d.groups) * d.kh * d.kw, nd = d.n * d.oc * OH * OW;
    const uint64_t seed = std::hash<std::string>{}(describe(d)) + misalign;
    Tensor src, wei, dst, res;
    src.alloc(d.src_dtype, ns, misalign);
    wei.alloc(d.weight_dtype, nw, (misalign + 1) % 4);
    dst.alloc(d.dst_dtype, nd + 16, (misalign + 2) % 4);
    src.fill(-1, 1, seed);
    wei.fill(-1, 1, seed + 1);
    for (size_t i = 0; i < dst.size(); ++i) dst.set(i, 640.0f);  // garbage dst (exact in bf16); the guard after it stays
    Buffer<float> bias(d.oc, ((misalign + 3) % 4) * 4);
    test::fill_uniform(bias.data(), d.oc, -1, 1, seed + 2);
    const bool with_res = d.residual != ConvResidual::none;
    if (with_res) {
        res.alloc(d.dst_dtype, nd, misalign);
        res.fill(-1, 1, seed + 3);
        if (residual_in_place)
            for (size_t i = 0; i < nd; ++i) dst.set(i, static_cast<float>(res.get(i)));
    }
    const Oracle o = oracle(d, src, wei, d.with_bias ? bias.data() : nullptr, with_res ? &res : nullptr);
    ConvArgs a{src.data(), wei.data(), d.with_bias ? bias.data() : nullptr, dst.data(),
               with_res ? (residual_in_place ? dst.data() : res.data()) : nullptr};
    if (force_impl) {
        const auto& reg = detail::conv_registry();
        const detail::ConvProblem p = detail::conv_validate_desc("test", d);
        detail::conv_validate_args("test", p, a);
        const auto k = reg.get(p, reg.find(force_impl)).kernel;
        if (packed) {
            const auto pw = k->pack(a.weights);
            EXPECT_EQ(pw->layout, k->packed_layout());
            ConvArgs b = a;
            b.weights = nullptr;
            k->run(b, pw.get());
        } else {
            k->run(a);
        }
    } else if (use_plan) {
        ConvPlan plan(d);
        EXPECT_EQ(plan.oh(), OH);
        EXPECT_EQ(plan.ow(), OW);
        if (packed) {
            const ConvPackedWeights pw = plan.pack_weights(a.weights);
            ConvArgs b = a;
            b.weights = nullptr;
            plan.run(b, pw);
        } else {
            plan.run(a);
        }
    } else {
        conv2d(d, a);
    }
    EXPECT_TRUE(matches(d, o, dst)) << describe(d) << " misalign=" << misalign << " plan=" << use_plan
                                    << " impl=" << (force_impl ? force_impl : "selected") << " packed=" << packed;
    for (size_t i = nd; i < nd + 16; ++i) EXPECT_EQ(dst.get(i), 640.0) << "wrote past dst at " << i;
    return dst;
}

ConvDesc shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t oc, int64_t kh, int64_t kw) {
    ConvDesc d;
    d.n = n; d.c = c; d.h = h; d.w = w; d.oc = oc; d.kh = kh; d.kw = kw;
    return d;
}

std::vector<ConvDesc> shape_sweep() {
    std::vector<ConvDesc> v;
    v.push_back(shape(2, 7, 5, 6, 9, 1, 1));                                           // 1x1
    v.push_back(shape(1, 8, 17, 17, 16, 3, 3).set_stride(2, 2).set_padding(1, 1));     // 3x3 s2 p1
    v.push_back(shape(1, 5, 9, 9, 6, 3, 3).set_padding(2, 2).set_dilation(2, 2));      // dilation 2
    { auto d = shape(2, 8, 7, 7, 12, 3, 3).set_padding(1, 1); d.groups = 2; v.push_back(d); }  // groups 2
    { auto d = shape(1, 7, 7, 7, 7, 3, 3).set_padding(1, 1); d.groups = 7; v.push_back(d); }   // depthwise
    { auto d = shape(1, 4, 6, 5, 8, 3, 3).set_stride(2, 1); d.groups = 4; v.push_back(d); }     // depthwise x2
    v.push_back(shape(1, 3, 7, 17, 5, 3, 5).set_stride(1, 2).set_padding(0, 2, 1, 0).set_dilation(1, 2));  // asymmetric
    v.push_back(shape(3, 17, 7, 7, 17, 3, 3));                                         // odd, no padding
    v.push_back(shape(1, 2, 5, 5, 3, 5, 5));                                           // kernel == input
    v.push_back(shape(1, 3, 8, 7, 4, 2, 2).set_stride(3, 3));                          // stride > kernel
    v.push_back(shape(2, 3, 2, 1, 2, 3, 3).set_padding(1, 1));                         // kernel > input, padded
    v.push_back(shape(1, 1, 1, 1, 1, 1, 1));                                           // smallest
    return v;
}

const ConvLayout kLayouts[] = {ConvLayout::nchw, ConvLayout::nhwc};
const ConvWeightLayout kWeightLayouts[] = {ConvWeightLayout::oihw, ConvWeightLayout::ohwi};
const Activation kActs[] = {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                            Activation::silu};
const ConvResidual kResiduals[] = {ConvResidual::none, ConvResidual::add_before_activation,
                                   ConvResidual::add_after_activation};

}  // namespace

TEST(Conv2d, ShapeSweepAllLayoutsMatchOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        SCOPED_TRACE("threads=" + std::to_string(threads));
        for_each_isa([&](Isa) {
            int k = 0;
            for (ConvDesc d : shape_sweep()) {
                for (ConvLayout l : kLayouts) {
                    for (ConvWeightLayout wl : kWeightLayouts) {
                        d.layout = l;
                        d.weight_layout = wl;
                        // Rotate through the epilogues so every shape sees several.
                        d.with_bias = k % 2 == 0;
                        d.activation = kActs[k % 5];
                        d.residual = kResiduals[k % 3];
                        run_case(d, static_cast<size_t>(k % 4), k % 3 == 1);
                        ++k;
                    }
                }
            }
        });
    }
    set_num_threads(0);
}

TEST(Conv2d, EveryEpilogue) {
    for_each_isa([&](Isa) {
        for (ConvDesc d : {shape(2, 6, 7, 9, 10, 3, 3).set_padding(1, 1),
                           [] { auto d = shape(1, 6, 5, 5, 6, 3, 3).set_stride(2, 2).set_padding(1, 1); d.groups = 6; return d; }()}) {
            for (ConvLayout l : kLayouts) {
                d.layout = l;
                d.weight_layout = l == ConvLayout::nchw ? ConvWeightLayout::oihw : ConvWeightLayout::ohwi;
                for (Activation act : kActs)
                    for (ConvResidual r : kResiduals)
                        for (bool bias : {false, true}) {
                            d.activation = act;
                            d.residual = r;
                            d.with_bias = bias;
                            run_case(d, 1, bias);
                        }
            }
        }
    });
}

TEST(Conv2d, ResidualInPlace) {
    for_each_isa([&](Isa) {
        for (ConvResidual r : {ConvResidual::add_before_activation, ConvResidual::add_after_activation})
            for (ConvLayout l : kLayouts) {
                ConvDesc d = shape(2, 5, 8, 7, 6, 3, 3).set_padding(1, 1);
                d.layout = l;
                d.residual = r;
                d.activation = Activation::relu;
                d.with_bias = true;
                run_case(d, 0, false, /*residual_in_place=*/true);
                d.dst_dtype = d.src_dtype = d.weight_dtype = DType::bf16;
                run_case(d, 1, true, true);
            }
    });
}

TEST(Conv2d, Bf16MatchesOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            int k = 0;
            for (ConvDesc d : shape_sweep()) {
                for (DType dst : {DType::bf16, DType::f32}) {
                    d.src_dtype = d.weight_dtype = DType::bf16;
                    d.dst_dtype = dst;
                    d.layout = kLayouts[k % 2];
                    d.weight_layout = kWeightLayouts[(k / 2) % 2];
                    d.with_bias = k % 2 == 1;
                    d.activation = kActs[k % 5];
                    d.residual = kResiduals[k % 3];
                    run_case(d, static_cast<size_t>(k % 3), k % 2 == 0);
                    ++k;
                }
            }
        });
    }
    set_num_threads(0);
}

// NCHW/OIHW and NHWC/OHWI of the same problem give the same numbers after transposing.
TEST(Conv2d, LayoutsAgreeAfterTranspose) {
    for_each_isa([&](Isa) {
        ConvDesc a = shape(2, 6, 9, 8, 10, 3, 3).set_stride(2, 1).set_padding(1, 1);
        a.groups = 2;
        a.with_bias = true;
        a.activation = Activation::silu;
        a.residual = ConvResidual::add_after_activation;
        const int64_t OH = a.oh(), OW = a.ow(), I = a.c / a.groups;
        const size_t ns = a.n * a.c * a.h * a.w, nw = a.oc * I * 9, nd = a.n * a.oc * OH * OW;
        std::vector<float> s1(ns), w1(nw), b(a.oc), r1(nd), d1(nd), s2(ns), w2(nw), r2(nd), d2(nd);
        test::fill_uniform(s1.data(), ns, -1, 1, 1);
        test::fill_uniform(w1.data(), nw, -1, 1, 2);
        test::fill_uniform(b.data(), a.oc, -1, 1, 3);
        test::fill_uniform(r1.data(), nd, -1, 1, 4);
        for (int64_t n = 0; n < a.n; ++n)
            for (int64_t c = 0; c < a.c; ++c)
                for (int64_t y = 0; y < a.h; ++y)
                    for (int64_t x = 0; x < a.w; ++x)
                        s2[at(ConvLayout::nhwc, a.c, a.h, a.w, n, c, y, x)] = s1[at(ConvLayout::nchw, a.c, a.h, a.w, n, c, y, x)];
        for (int64_t o = 0; o < a.oc; ++o)
            for (int64_t i = 0; i < I; ++i)
                for (int64_t ky = 0; ky < 3; ++ky)
                    for (int64_t kx = 0; kx < 3; ++kx)
                        w2[wat(ConvWeightLayout::ohwi, I, 3, 3, o, i, ky, kx)] = w1[wat(ConvWeightLayout::oihw, I, 3, 3, o, i, ky, kx)];
        for (int64_t n = 0; n < a.n; ++n)
            for (int64_t c = 0; c < a.oc; ++c)
                for (int64_t y = 0; y < OH; ++y)
                    for (int64_t x = 0; x < OW; ++x)
                        r2[at(ConvLayout::nhwc, a.oc, OH, OW, n, c, y, x)] = r1[at(ConvLayout::nchw, a.oc, OH, OW, n, c, y, x)];
        conv2d(a, {s1.data(), w1.data(), b.data(), d1.data(), r1.data()});
        ConvDesc bdesc = a;
        bdesc.layout = ConvLayout::nhwc;
        bdesc.weight_layout = ConvWeightLayout::ohwi;
        conv2d(bdesc, {s2.data(), w2.data(), b.data(), d2.data(), r2.data()});
        std::vector<float> d2t(nd);
        for (int64_t n = 0; n < a.n; ++n)
            for (int64_t c = 0; c < a.oc; ++c)
                for (int64_t y = 0; y < OH; ++y)
                    for (int64_t x = 0; x < OW; ++x)
                        d2t[at(ConvLayout::nchw, a.oc, OH, OW, n, c, y, x)] = d2[at(ConvLayout::nhwc, a.oc, OH, OW, n, c, y, x)];
        // Same sums in possibly different orders: K = 27 terms of magnitude <= 1.
        EXPECT_TRUE(test::all_close(d2t.data(), d1.data(), nd, 27 * 4 * 6e-8 * 4, 0));
    });
}

// Every registered implementation the machine allows, forced, against the reference.
TEST(Conv2d, EveryImplementationMatchesReference) {
    const auto& reg = detail::conv_registry();
    for (const auto& impl : reg.impls()) {
        if (!isa_supported(impl.isa) || impl.isa > max_isa()) continue;
        SCOPED_TRACE(impl.name);
        for (ConvDesc d : shape_sweep()) {
            for (ConvLayout l : kLayouts) {
                d.layout = l;
                d.weight_layout = l == ConvLayout::nchw ? ConvWeightLayout::oihw : ConvWeightLayout::ohwi;
                d.with_bias = true;
                d.activation = Activation::gelu_tanh;
                const detail::ConvProblem p = detail::conv_validate_desc("test", d);
                if (impl.supports && !impl.supports(p)) continue;
                const size_t ns = d.n * d.c * d.h * d.w, nw = d.oc * p.icg() * d.kh * d.kw, nd = d.n * d.oc * p.oh * p.ow;
                std::vector<float> s(ns), w(nw), b(d.oc), got(nd), want(nd);
                test::fill_uniform(s.data(), ns, -1, 1, 5);
                test::fill_uniform(w.data(), nw, -1, 1, 6);
                test::fill_uniform(b.data(), d.oc, -1, 1, 7);
                const ConvArgs ga{s.data(), w.data(), b.data(), got.data(), nullptr};
                const ConvArgs wa{s.data(), w.data(), b.data(), want.data(), nullptr};
                reg.get(p, impl).kernel->run(ga);
                detail::conv2d_reference(p, wa);
                const double K = static_cast<double>(p.icg() * d.kh * d.kw);
                EXPECT_TRUE(test::all_close(got.data(), want.data(), nd, 2 * (K + 2) * 6e-8 * (K + 1), 1e-6)) << p.key();
            }
        }
    }
}

TEST(Conv2d, PlanSelectsPerIsaAndRunsConcurrently) {
    ConvDesc d = shape(2, 8, 13, 11, 16, 3, 3).set_padding(1, 1);
    d.with_bias = true;
    d.activation = Activation::relu;
    for_each_isa([&](Isa isa) {
        const ConvPlan plan(d);
        const auto& impl = detail::conv_registry().find(plan.impl_name());
        EXPECT_LE(impl.isa, isa);
        const size_t ns = d.n * d.c * d.h * d.w, nw = d.oc * d.c * 9, nd = d.n * d.oc * plan.oh() * plan.ow();
        std::vector<float> s(ns), w(nw), b(d.oc), want(nd);
        test::fill_uniform(s.data(), ns, -1, 1, 8);
        test::fill_uniform(w.data(), nw, -1, 1, 9);
        test::fill_uniform(b.data(), d.oc, -1, 1, 10);
        plan.run({s.data(), w.data(), b.data(), want.data(), nullptr});
        std::vector<std::vector<float>> outs(4, std::vector<float>(nd));
        std::vector<std::thread> th;
        const ConvPlan copy = plan;  // copies share the kernel
        for (int t = 0; t < 4; ++t)
            th.emplace_back([&, t] { (t % 2 ? copy : plan).run({s.data(), w.data(), b.data(), outs[t].data(), nullptr}); });
        for (auto& t : th) t.join();
        for (int t = 0; t < 4; ++t) EXPECT_EQ(outs[t], want) << "thread " << t;  // same kernel, same order
    });
}

TEST(Conv2d, OutputSize) {
    for (int64_t in : {1, 2, 7, 17, 224})
        for (int64_t k : {1, 2, 3, 5, 7})
            for (int64_t s : {1, 2, 3})
                for (int64_t pb : {0, 1, 3})
                    for (int64_t pe : {0, 2})
                        for (int64_t dl : {1, 2}) {
                            // Count the valid window positions directly.
                            int64_t count = 0;
                            for (int64_t start = -pb; start + dl * (k - 1) <= in - 1 + pe; start += s) ++count;
                            if (count == 0) {
                                XK_EXPECT_INVALID(conv_output_size(in, k, s, pb, pe, dl), "output=");
                            } else {
                                EXPECT_EQ(conv_output_size(in, k, s, pb, pe, dl), count)
                                    << in << " " << k << " " << s << " " << pb << " " << pe << " " << dl;
                            }
                        }
    XK_EXPECT_INVALID(conv_output_size(0, 1, 1, 0, 0, 1), "input=0 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(5, 0, 1, 0, 0, 1), "kernel=0 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(5, 1, 0, 0, 0, 1), "stride=0 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(5, 1, 1, -1, 0, 1), "pad_begin=-1 must be >= 0");
    XK_EXPECT_INVALID(conv_output_size(5, 1, 1, 0, -2, 1), "pad_end=-2 must be >= 0");
    XK_EXPECT_INVALID(conv_output_size(5, 1, 1, 0, 0, 0), "dilation=0 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(3, 5, 1, 0, 0, 1), "output=-1 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(3, 3, 1, 0, 0, 2), "output=");
    XK_EXPECT_INVALID(conv_output_size(INT64_MAX / 2, 1, 1, INT64_MAX / 2, 0, 1), "overflows");
    XK_EXPECT_INVALID(conv_output_size(5, INT64_MAX / 2, 1, 0, 0, 4), "overflows");
    // A kernel larger than the input with a stride near INT64_MAX: the message's value (the
    // formula's floor(-2 / stride) + 1 = 0) once overflowed int64 (UBSan; found by fuzz_conv).
    XK_EXPECT_INVALID(conv_output_size(1, 3, INT64_MAX - 1, 0, 0, 1), "output=0 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(1, 3, INT64_MAX, 0, 0, 1), "output=0 must be >= 1");
    XK_EXPECT_INVALID(conv_output_size(1, INT64_MAX / 16 + 2, 1, 0, 0, 1), "overflows (sizes are limited to");
    EXPECT_EQ(conv_output_size(224, 7, 2, 3, 3), 112);
}

TEST(Conv2d, BadInput) {
    const ConvDesc good = shape(1, 4, 5, 5, 4, 3, 3).set_padding(1, 1);
    std::vector<float> s(100), w(144), b(4), dd(100), r(100);
    const ConvArgs ga{s.data(), w.data(), nullptr, dd.data(), nullptr};
    conv2d(good, ga);  // the baseline is valid

    auto bad = [&](auto mutate, const char* needle, Status st = Status::invalid_argument) {
        ConvDesc d = good;
        mutate(d);
        XK_EXPECT_ERROR(conv2d(d, ga), st, needle);
        XK_EXPECT_ERROR(ConvPlan{d}, st, needle);
    };
    bad([](ConvDesc& d) { d.n = 0; }, "N=0 must be >= 1");
    bad([](ConvDesc& d) { d.c = -3; }, "C=-3 must be >= 1");
    bad([](ConvDesc& d) { d.h = 0; }, "H=0 must be >= 1");
    bad([](ConvDesc& d) { d.w = -1; }, "W=-1 must be >= 1");
    bad([](ConvDesc& d) { d.oc = 0; }, "OC=0 must be >= 1");
    bad([](ConvDesc& d) { d.kh = 0; }, "KH=0 must be >= 1");
    bad([](ConvDesc& d) { d.kw = -2; }, "KW=-2 must be >= 1");
    bad([](ConvDesc& d) { d.stride_h = 0; }, "stride_h=0 must be >= 1");
    bad([](ConvDesc& d) { d.stride_w = -1; }, "stride_w=-1 must be >= 1");
    bad([](ConvDesc& d) { d.dilation_h = 0; }, "dilation_h=0 must be >= 1");
    bad([](ConvDesc& d) { d.dilation_w = 0; }, "dilation_w=0 must be >= 1");
    bad([](ConvDesc& d) { d.pad_top = -1; }, "pad_top=-1 must be >= 0");
    bad([](ConvDesc& d) { d.pad_bottom = -1; }, "pad_bottom=-1 must be >= 0");
    bad([](ConvDesc& d) { d.pad_left = -1; }, "pad_left=-1 must be >= 0");
    bad([](ConvDesc& d) { d.pad_right = -1; }, "pad_right=-1 must be >= 0");
    bad([](ConvDesc& d) { d.groups = 0; }, "groups=0 must be >= 1");
    bad([](ConvDesc& d) { d.groups = 3; }, "groups=3 must divide C=4");
    bad([](ConvDesc& d) { d.c = 6; d.groups = 3; }, "groups=3 must divide OC=4");
    bad([](ConvDesc& d) { d.kh = 9; }, "OH=-1 must be >= 1");
    bad([](ConvDesc& d) { d.kw = 4; d.dilation_w = 3; }, "OW=");
    bad([](ConvDesc& d) { d.layout = static_cast<ConvLayout>(2); }, "layout=2 is not a valid value");
    bad([](ConvDesc& d) { d.weight_layout = static_cast<ConvWeightLayout>(-1); }, "weight_layout=-1 is not a valid");
    bad([](ConvDesc& d) { d.residual = static_cast<ConvResidual>(3); }, "residual=3 is not a valid");
    bad([](ConvDesc& d) { d.activation = static_cast<Activation>(9); }, "activation=9 is not a valid");
    bad([](ConvDesc& d) { d.src_dtype = static_cast<DType>(42); }, "src_dtype=42 is not a valid");
    bad([](ConvDesc& d) { d.src_dtype = d.weight_dtype = DType::s8; d.dst_dtype = DType::s32; },
        "src_dtype=s8 weight_dtype=s8 dst_dtype=s32 is not supported", Status::unsupported);
    bad([](ConvDesc& d) { d.weight_dtype = DType::bf16; }, "weight_dtype=bf16", Status::unsupported);
    bad([](ConvDesc& d) { d.src_dtype = d.weight_dtype = DType::bf16; d.dst_dtype = DType::u8; }, "dst_dtype=u8",
        Status::unsupported);
    // Element-count overflow.
    bad([](ConvDesc& d) { d.n = int64_t{1} << 40; d.c = int64_t{1} << 20; }, "N*C*H*W");
    bad([](ConvDesc& d) { d.oc = int64_t{1} << 40; d.kh = 1 << 20; d.h = 1 << 20; }, "OC*(C/groups)*KH*KW");
    bad([](ConvDesc& d) { d.h = int64_t{1} << 40; d.w = int64_t{1} << 30; }, "overflows");
    bad([](ConvDesc& d) { d.pad_top = INT64_MAX - 2; }, "overflows");

    // Pointers (one-shot and plan).
    const ConvPlan plan(good);
    auto bad_args = [&](const ConvDesc& d, const ConvArgs& a, const char* needle) {
        XK_EXPECT_INVALID(conv2d(d, a), needle);
        XK_EXPECT_INVALID(ConvPlan(d).run(a), needle);
    };
    bad_args(good, {nullptr, w.data(), nullptr, dd.data(), nullptr}, "src=null");
    bad_args(good, {s.data(), nullptr, nullptr, dd.data(), nullptr}, "weights=null");
    bad_args(good, {s.data(), w.data(), nullptr, nullptr, nullptr}, "dst=null");
    bad_args(good, {s.data(), w.data(), b.data(), dd.data(), nullptr}, "bias=");  // given without with_bias
    bad_args(good, {s.data(), w.data(), nullptr, dd.data(), r.data()}, "residual=");
    ConvDesc with_extras = good;
    with_extras.with_bias = true;
    with_extras.residual = ConvResidual::add_before_activation;
    bad_args(with_extras, {s.data(), w.data(), nullptr, dd.data(), r.data()}, "bias=null");
    bad_args(with_extras, {s.data(), w.data(), b.data(), dd.data(), nullptr}, "residual=null");
    bad_args(with_extras, {s.data(), w.data(), b.data(), dd.data(), dd.data() + 3}, "partially overlaps dst");
    bad_args(good, {s.data(), w.data(), nullptr, s.data() + 10, nullptr}, "overlaps src");
    bad_args(good, {s.data(), w.data(), nullptr, w.data(), nullptr}, "overlaps weights");
    const char* misaligned = reinterpret_cast<const char*>(s.data()) + 2;
    bad_args(good, {misaligned, w.data(), nullptr, dd.data(), nullptr}, "must be aligned to its element size (4 bytes)");
    bad_args(good, {s.data(), w.data(), nullptr, reinterpret_cast<char*>(dd.data()) + 1, nullptr}, "dst=");
    XK_EXPECT_INVALID(plan.run({nullptr, w.data(), nullptr, dd.data(), nullptr}), "xk::ConvPlan::run: src=null");
    XK_EXPECT_INVALID(ConvDesc(good).set_padding(-1, 0).oh(), "pad_top=-1");
    XK_EXPECT_INVALID(ConvDesc(good).set_stride(1, 0).ow(), "stride_w=0");
    XK_EXPECT_INVALID([&] { ConvDesc d = good; d.groups = 3; return d.weight_elements(); }(), "groups=3");
    EXPECT_EQ(good.src_elements(), 100);
    EXPECT_EQ(good.weight_elements(), 144);
    EXPECT_EQ(good.dst_elements(), 100);
}

TEST(Conv2d, CApi) {
    xk_conv2d_desc cd;
    ASSERT_EQ(xk_conv2d_desc_init(&cd, 2, 6, 7, 9, 4, 3, 3), XK_SUCCESS);
    EXPECT_EQ(cd.stride_h, 1);
    EXPECT_EQ(cd.groups, 1);
    EXPECT_EQ(cd.dilation_w, 1);
    cd.pad_top = cd.pad_bottom = 1;
    cd.stride_w = 2;
    cd.groups = 2;
    cd.layout = XK_CONV_NHWC;
    cd.weight_layout = XK_CONV_OHWI;
    cd.residual = XK_CONV_RESIDUAL_BEFORE_ACTIVATION;
    cd.activation = XK_ACT_GELU_ERF;
    int64_t oh = 0, ow = 0;
    ASSERT_EQ(xk_conv_output_size(7, 3, 1, 1, 1, 1, &oh), XK_SUCCESS);
    ASSERT_EQ(xk_conv_output_size(9, 3, 2, 0, 0, 1, &ow), XK_SUCCESS);
    EXPECT_EQ(oh, 7);
    EXPECT_EQ(ow, 4);

    ConvDesc d = shape(2, 6, 7, 9, 4, 3, 3).set_padding(1, 1, 0, 0).set_stride(1, 2);
    d.groups = 2;
    d.layout = ConvLayout::nhwc;
    d.weight_layout = ConvWeightLayout::ohwi;
    d.residual = ConvResidual::add_before_activation;
    d.activation = Activation::gelu_erf;
    d.with_bias = true;
    const size_t ns = 2 * 6 * 7 * 9, nw = 4 * 3 * 9, nd = 2 * 4 * oh * ow;
    std::vector<float> s(ns), w(nw), b(4), r(nd), want(nd), got(nd);
    test::fill_uniform(s.data(), ns, -1, 1, 11);
    test::fill_uniform(w.data(), nw, -1, 1, 12);
    test::fill_uniform(b.data(), 4, -1, 1, 13);
    test::fill_uniform(r.data(), nd, -1, 1, 14);
    conv2d(d, {s.data(), w.data(), b.data(), want.data(), r.data()});
    ASSERT_EQ(xk_conv2d_f32(&cd, s.data(), w.data(), b.data(), got.data(), r.data()), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(got, want);
    EXPECT_STREQ(xk_last_error(), "");

    // bf16 in, bf16 and f32 out.
    std::vector<uint16_t> sh(ns), wh(nw), rh(nd), dh(nd), dh2(nd);
    std::vector<float> rf(nd), df(nd), df2(nd);
    for (size_t i = 0; i < ns; ++i) sh[i] = bf16::from_float(s[i]);
    for (size_t i = 0; i < nw; ++i) wh[i] = bf16::from_float(w[i]);
    for (size_t i = 0; i < nd; ++i) rh[i] = bf16::from_float(r[i]), rf[i] = bf16::to_float(rh[i]);
    ConvDesc dbf = d;
    dbf.src_dtype = dbf.weight_dtype = dbf.dst_dtype = DType::bf16;
    conv2d(dbf, {sh.data(), wh.data(), b.data(), dh.data(), rh.data()});
    ASSERT_EQ(xk_conv2d_bf16(&cd, sh.data(), wh.data(), b.data(), dh2.data(), rh.data()), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(dh2, dh);
    dbf.dst_dtype = DType::f32;
    conv2d(dbf, {sh.data(), wh.data(), b.data(), df.data(), rf.data()});
    ASSERT_EQ(xk_conv2d_bf16_f32(&cd, sh.data(), wh.data(), b.data(), df2.data(), rf.data()), XK_SUCCESS);
    EXPECT_EQ(df2, df);

    // Bad input through the C API: status + message.
    auto expect = [](xk_status st, xk_status want, const char* needle) {
        EXPECT_EQ(st, want);
        EXPECT_NE(std::string(xk_last_error()).find(needle), std::string::npos) << xk_last_error();
    };
    expect(xk_conv2d_f32(nullptr, s.data(), w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT,
           "xk_conv2d_f32: desc=null");
    expect(xk_conv2d_f32(&cd, nullptr, w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT, "src=null");
    expect(xk_conv2d_f32(&cd, s.data(), w.data(), b.data(), got.data(), nullptr), XK_INVALID_ARGUMENT, "residual=null");
    expect(xk_conv2d_bf16(&cd, sh.data(), wh.data(), b.data(), nullptr, rh.data()), XK_INVALID_ARGUMENT, "dst=null");
    expect(xk_conv_output_size(3, 5, 1, 0, 0, 1, &oh), XK_INVALID_ARGUMENT, "output=-1 must be >= 1");
    expect(xk_conv_output_size(3, 1, 1, 0, 0, 1, nullptr), XK_INVALID_ARGUMENT, "out=null");
    expect(xk_conv2d_desc_init(nullptr, 1, 1, 1, 1, 1, 1, 1), XK_INVALID_ARGUMENT, "desc=null");
    xk_conv2d_desc bad = cd;
    bad.groups = 4;
    expect(xk_conv2d_f32(&bad, s.data(), w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT,
           "groups=4 must divide C=6");
    bad = cd;
    bad.dilation_h = -1;
    expect(xk_conv2d_f32(&bad, s.data(), w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT,
           "dilation_h=-1");
    bad = cd;
    bad.residual = static_cast<xk_conv_residual>(3);
    expect(xk_conv2d_f32(&bad, s.data(), w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT,
           "residual=3 is not a valid value");
    bad = cd;
    bad.activation = static_cast<xk_activation>(7);
    expect(xk_conv2d_f32(&bad, s.data(), w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT,
           "activation=7 is not a valid value");
    bad = cd;
    bad.n = INT64_MAX / 4;
    expect(xk_conv2d_f32(&bad, s.data(), w.data(), b.data(), got.data(), r.data()), XK_INVALID_ARGUMENT, "overflows");
}

// ---------------------------------------------------------------------------------------------
// The routed paths (onednn:conv, gemm:conv), each forced, over the sweep, every epilogue and
// dtype, packed and not, 1 and 2 threads. An entry that does not support a case (oneDNN's
// reference-only shapes, NCHW for gemm:conv) is skipped for it — selection does the same.
namespace {

std::vector<ConvDesc> routed_sweep() {
    std::vector<ConvDesc> v = shape_sweep();
    // Several im2col row blocks with a tail (P = 2*20*19 = 760 rows), 1x1 grouped, 1x1 strided.
    v.push_back(shape(2, 16, 20, 19, 24, 3, 3).set_padding(1, 1));
    // K = 1152: 64-row im2col blocks, 5 of them (a 32-row tail): gemm:conv's parallel-over-blocks path.
    v.push_back(shape(2, 128, 12, 12, 16, 3, 3).set_padding(1, 1));
    { auto d = shape(2, 12, 9, 11, 18, 1, 1); d.groups = 3; v.push_back(d); }
    v.push_back(shape(1, 32, 9, 9, 40, 1, 1).set_stride(2, 2));
    { auto d = shape(3, 32, 10, 10, 32, 3, 3).set_padding(1, 1); d.groups = 32; v.push_back(d); }  // depthwise, batch 3
    { auto d = shape(2, 80, 9, 8, 80, 5, 3).set_stride(2, 1).set_padding(2, 1).set_dilation(1, 2); d.groups = 80; v.push_back(d); }  // depthwise, channel tail
    return v;
}

void sweep_impl(const char* name, bool bf16) {
    const auto& reg = detail::conv_registry();
    const auto& impl = reg.find(name);
    int k = 0, ran = 0;
    for (ConvDesc d : routed_sweep()) {
        for (ConvLayout l : kLayouts)
            for (ConvWeightLayout wl : kWeightLayouts) {
                d.layout = l;
                d.weight_layout = wl;
                d.with_bias = k % 2 == 0;
                d.activation = kActs[k % 5];
                d.residual = kResiduals[(k / 2) % 3];
                d.src_dtype = d.weight_dtype = bf16 ? DType::bf16 : DType::f32;
                d.dst_dtype = bf16 && k % 3 == 0 ? DType::f32 : d.src_dtype;
                ++k;
                // oneDNN: everything it can run (its selection preference aside).
                const auto sup = std::string(name) == "onednn:conv" ? detail::onednn_conv_supports : impl.supports;
                if (sup && !sup(detail::conv_validate_desc("test", d))) continue;
                ++ran;
                run_case(d, static_cast<size_t>(k % 4), false, /*in place*/ k % 5 == 0 && d.residual != ConvResidual::none,
                         name, /*packed*/ k % 2 == 1);
            }
    }
    // Every entry runs at least the channels-last cases of the sweep here (depthwise: its 3 shapes).
    EXPECT_GT(ran, std::string(name).find("dwconv") != std::string::npos ? 3 : 10) << name << (bf16 ? " bf16" : " f32");
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kUnderSanitizer = true;  // sanitizers: 2 threads, avx2 and the top ISA only
#else
constexpr bool kUnderSanitizer = false;
#endif

TEST(Conv2dRouted, EveryPathEveryEpilogueF32AndBf16) {
    for (int threads : {1, 2}) {
        if (kUnderSanitizer && threads == 1) continue;
        set_num_threads(threads);
        SCOPED_TRACE("threads=" + std::to_string(threads));
        for_each_isa([&](Isa isa) {
            if (kUnderSanitizer && isa != Isa::avx2 && isa != available_isas().back()) return;
            for (const char* name : {"onednn:conv", "avx512:dwconv", "avx2:dwconv", "gemm:conv"}) {
                const auto& impl = detail::conv_registry().find(name);
                if (impl.isa > isa || !isa_supported(impl.isa)) continue;
                // oneDNN dispatches by itself (the cap does not reach it): sweep it once, at the top.
                if (std::string(name) == "onednn:conv" && isa != available_isas().back()) continue;
                SCOPED_TRACE(name);
                sweep_impl(name, false);
                sweep_impl(name, true);
            }
        });
    }
    set_num_threads(0);
}

// Selection: oneDNN or xk's paths at AVX-512, xk's GEMM path at AVX2 (bf16 too: oneDNN 2.6 has
// no AVX2 bf16 convolution), never the reference at avx2 and above (NCHW included).
TEST(Conv2dRouted, SelectionPerIsa) {
    for (DType t : {DType::f32, DType::bf16})
        for (ConvLayout l : kLayouts) {
            ConvDesc d = shape(1, 64, 14, 14, 64, 3, 3).set_padding(1, 1);
            d.layout = l;
            d.weight_layout = l == ConvLayout::nhwc ? ConvWeightLayout::ohwi : ConvWeightLayout::oihw;
            d.src_dtype = d.weight_dtype = d.dst_dtype = t;
            d.with_bias = true;
            d.activation = Activation::relu;
            for_each_isa([&](Isa isa) {
                const ConvPlan plan(d);
                const std::string impl = plan.impl_name();
                if (isa == Isa::scalar) EXPECT_EQ(impl, "ref:scalar");
                else if (isa < Isa::avx512) EXPECT_EQ(impl, "gemm:conv");
                else EXPECT_NE(impl, "ref:scalar") << plan.backend_info();
                if (impl == "onednn:conv")
                    EXPECT_EQ(plan.backend_info().find("ref"), std::string::npos) << plan.backend_info();
            });
        }
}

// Packed weights: reused across calls and batch sizes where the layout agrees, rejected by a plan
// of another weight shape; an empty one is rejected.
TEST(Conv2dRouted, PackedWeights) {
    for_each_isa([&](Isa) {
        ConvDesc d = shape(2, 16, 9, 9, 24, 3, 3).set_padding(1, 1);
        d.layout = ConvLayout::nhwc;
        d.weight_layout = ConvWeightLayout::ohwi;
        d.with_bias = true;
        d.activation = Activation::relu;
        run_case(d, 0, true, false, nullptr, /*packed*/ true);
        const ConvPlan plan(d);
        std::vector<float> w(static_cast<size_t>(d.weight_elements()), 0.5f);
        const ConvPackedWeights pw = plan.pack_weights(w.data());
        EXPECT_FALSE(pw.empty());
        EXPECT_GE(pw.size_bytes(), w.size() * 4);
        std::vector<float> s(static_cast<size_t>(d.src_elements()), 1.0f), b(24, 0.0f),
            out(static_cast<size_t>(d.dst_elements())), ref(out.size());
        plan.run({s.data(), nullptr, b.data(), out.data(), nullptr}, pw);
        plan.run({s.data(), w.data(), b.data(), ref.data(), nullptr});
        EXPECT_EQ(out, ref);  // same primitive, same weights
        // Another batch size: the same packed layout is accepted (and gives the unpacked result);
        // oneDNN may pick another blocked layout per batch, which is then rejected, not misread.
        {
            ConvDesc d1 = d;
            d1.n = 1;
            const ConvPlan p1(d1);
            std::vector<float> o1(static_cast<size_t>(d1.dst_elements())), r1(o1.size());
            if (p1.pack_weights(w.data()).layout() == pw.layout()) {
                p1.run({s.data(), nullptr, b.data(), o1.data(), nullptr}, pw);
                p1.run({s.data(), w.data(), b.data(), r1.data(), nullptr});
                EXPECT_EQ(o1, r1);
            } else {
                EXPECT_THROW(p1.run({s.data(), nullptr, b.data(), o1.data(), nullptr}, pw), Error);
            }
        }
        ConvDesc other = d;
        other.oc = 32;
        const ConvPlan p2(other);
        std::vector<float> out2(static_cast<size_t>(other.dst_elements())), b2(32, 0.0f);
        EXPECT_THROW(p2.run({s.data(), nullptr, b2.data(), out2.data(), nullptr}, pw), Error);
        try {
            p2.run({s.data(), nullptr, b2.data(), out2.data(), nullptr}, pw);
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("packed_weights"), std::string::npos) << e.what();
        }
        EXPECT_THROW(plan.run({s.data(), nullptr, b.data(), out.data(), nullptr}, ConvPackedWeights()), Error);
        EXPECT_THROW(plan.pack_weights(nullptr), Error);
    });
}

// A pack made at one thread count, run at another: oneDNN's blocking may depend on the thread
// count (brgconv_1x1 of a 7x7x64 1x1 layer: 32-wide output-channel blocks at 1 thread, 16-wide at
// 32 threads on an AVX-512 host), so the plan's run reorders the pack once into the other
// primitive's layout and keeps it; results equal the unpacked run's at every count, and repeated
// calls (the per-thread memory objects reused with new pointers) stay equal.
TEST(Conv2dRouted, PackedWeightsAcrossThreadCounts) {
    ConvDesc d = shape(1, 64, 7, 7, 64, 1, 1);
    d.layout = ConvLayout::nhwc;
    d.weight_layout = ConvWeightLayout::ohwi;
    d.with_bias = true;
    d.activation = Activation::relu;
    test::Buffer<float> w(static_cast<size_t>(d.weight_elements())), s(static_cast<size_t>(d.src_elements()));
    test::fill_uniform(w.data(), w.size(), -1, 1, 11);
    test::fill_uniform(s.data(), s.size(), -1, 1, 12);
    std::vector<float> bias(64, 0.125f);
    for (int pack_nt : {1, 32}) {
        set_num_threads(pack_nt);
        const ConvPlan plan(d);
        const ConvPackedWeights pw = plan.pack_weights(w.data());
        for (int run_nt : {32, 1, 2, 32}) {
            set_num_threads(run_nt);
            std::vector<float> out(static_cast<size_t>(d.dst_elements()), -7.0f), ref(out.size(), 7.0f);
            plan.run({s.data(), nullptr, bias.data(), out.data(), nullptr}, pw);
            plan.run({s.data(), w.data(), bias.data(), ref.data(), nullptr});
            EXPECT_EQ(out, ref) << plan.impl_name() << " packed at " << pack_nt << " threads, run at " << run_nt;
        }
    }
    set_num_threads(0);
}

// BN folding: conv(x, w', b') == bn(conv(x, w, b)), bn computed in double from the unfolded conv.
TEST(Conv2dRouted, FoldBatchNormMatchesConvThenBn) {
    for (ConvWeightLayout wl : kWeightLayouts)
        for (bool with_bias : {false, true}) {
            ConvDesc d = shape(2, 6, 7, 8, 10, 3, 3).set_padding(1, 1);
            d.groups = 2;
            d.layout = ConvLayout::nhwc;
            d.weight_layout = wl;
            d.with_bias = true;  // the folded conv always has a bias
            const size_t nw = static_cast<size_t>(d.weight_elements()), ns = static_cast<size_t>(d.src_elements()),
                         nd = static_cast<size_t>(d.dst_elements());
            std::vector<float> s(ns), w(nw), b(10), gamma(10), beta(10), mean(10), var(10), zeros(10, 0.0f);
            test::fill_uniform(s.data(), ns, -1, 1, 11);
            test::fill_uniform(w.data(), nw, -1, 1, 12);
            test::fill_uniform(b.data(), 10, -1, 1, 13);
            test::fill_uniform(gamma.data(), 10, 0.5, 2, 14);
            test::fill_uniform(beta.data(), 10, -1, 1, 15);
            test::fill_uniform(mean.data(), 10, -1, 1, 16);
            test::fill_uniform(var.data(), 10, 0.1, 3, 17);
            const float eps = 1e-5f;
            std::vector<float> conv_out(nd), folded_out(nd), fw(nw), fb(10);
            conv2d(d, {s.data(), w.data(), with_bias ? b.data() : zeros.data(), conv_out.data(), nullptr});
            conv_fold_batchnorm(d, w.data(), with_bias ? b.data() : nullptr, gamma.data(), beta.data(), mean.data(),
                                var.data(), eps, fw.data(), fb.data());
            conv2d(d, {s.data(), fw.data(), fb.data(), folded_out.data(), nullptr});
            for (size_t i = 0; i < nd; ++i) {
                const size_t o = i % 10;  // NHWC: channel fastest
                const double sc = gamma[o] / std::sqrt(static_cast<double>(var[o]) + eps);
                const double want = (conv_out[i] - static_cast<double>(mean[o])) * sc + beta[o];
                // K = 27 terms of magnitude <= 1 scaled by sc <= 2/sqrt(0.1): a few 1e-6 absolute.
                ASSERT_NEAR(folded_out[i], want, 2e-5 * (1 + std::fabs(want))) << "i=" << i;
            }
            // In place, and bad input.
            std::vector<float> w2 = w, b2 = b;
            conv_fold_batchnorm(d, w2.data(), b2.data(), gamma.data(), beta.data(), mean.data(), var.data(), eps,
                                w2.data(), b2.data());
            if (with_bias) {
                std::vector<float> fw2(nw), fb2(10);
                conv_fold_batchnorm(d, w.data(), b.data(), gamma.data(), beta.data(), mean.data(), var.data(), eps,
                                    fw2.data(), fb2.data());
                EXPECT_EQ(w2, fw2);
                EXPECT_EQ(b2, fb2);
            }
            // The C API gives the same bits.
            {
                xk_conv2d_desc cd;
                ASSERT_EQ(xk_conv2d_desc_init(&cd, d.n, d.c, d.h, d.w, d.oc, d.kh, d.kw), XK_SUCCESS);
                cd.groups = d.groups;
                cd.layout = XK_CONV_NHWC;
                cd.weight_layout = wl == ConvWeightLayout::ohwi ? XK_CONV_OHWI : XK_CONV_OIHW;
                std::vector<float> cw(nw), cb(10);
                ASSERT_EQ(xk_conv2d_fold_batchnorm(&cd, w.data(), with_bias ? b.data() : nullptr, gamma.data(),
                                                   beta.data(), mean.data(), var.data(), eps, cw.data(), cb.data()),
                          XK_SUCCESS);
                EXPECT_EQ(cw, fw);
                EXPECT_EQ(cb, fb);
                EXPECT_NE(xk_conv2d_fold_batchnorm(&cd, w.data(), nullptr, gamma.data(), beta.data(), mean.data(),
                                                   var.data(), -1.0f, cw.data(), cb.data()),
                          XK_SUCCESS);
            }
            std::vector<float> badvar = var;
            badvar[3] = -1.0f;
            EXPECT_THROW(conv_fold_batchnorm(d, w.data(), nullptr, gamma.data(), beta.data(), mean.data(),
                                             badvar.data(), eps, fw.data(), fb.data()),
                         Error);
            EXPECT_THROW(conv_fold_batchnorm(d, w.data(), nullptr, nullptr, beta.data(), mean.data(), var.data(), eps,
                                             fw.data(), fb.data()),
                         Error);
        }
}

// ---------------------------------------------------------------------------------------------
// Routing (conv_select): where oneDNN and xk's own pick both run a descriptor, the one-time timing
// picks one — whichever wins, the routed plan and one-shot call match the oracle; the decision is
// remembered ("cached"); XK_CONV_IMPL=onednn / =gemm force each route.
namespace {

using xk::test::ScopedEnv;

std::vector<ConvDesc> routing_cases() {
    std::vector<ConvDesc> v;
    for (DType t : {DType::f32, DType::bf16}) {
        ConvDesc a = shape(2, 16, 9, 11, 24, 3, 3).set_padding(1, 1);  // 3x3 (im2col vs direct)
        ConvDesc b = shape(1, 32, 7, 7, 48, 1, 1);                      // 1x1 (one GEMM)
        ConvDesc c = shape(1, 24, 8, 9, 24, 3, 3).set_padding(1, 1);    // depthwise (dwconv vs oneDNN)
        c.groups = 24;
        for (ConvDesc* d : {&a, &b, &c}) {
            d->layout = ConvLayout::nhwc;
            d->weight_layout = ConvWeightLayout::ohwi;
            d->src_dtype = d->weight_dtype = d->dst_dtype = t;
            d->with_bias = true;
            d->activation = Activation::relu;
            v.push_back(*d);
        }
    }
    return v;
}

}  // namespace

TEST(Conv2dRouted, TimedRouteMatchesOracleAndForcedRoutes) {
    const bool dnn_ok = isa_supported(Isa::avx512);
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        SCOPED_TRACE("threads=" + std::to_string(threads));
        detail::conv_tune_clear();
        for (const ConvDesc& d : routing_cases()) {
            SCOPED_TRACE(describe(d));
            const detail::ConvProblem p = detail::conv_validate_desc("test", d);
            const bool both = dnn_ok && detail::onednn_conv_supports(p);
            std::string timed;
            {
                const ScopedEnv route("XK_CONV_IMPL", nullptr);
                const char* how = "";
                timed = detail::conv_select(p, &how).impl->name;
                EXPECT_STREQ(how, both ? "timed" : "registry");
                const ConvPlan plan(d);
                EXPECT_EQ(plan.impl_name(), timed);  // the decision is remembered
                detail::conv_select(p, &how);
                EXPECT_STREQ(how, both ? "cached" : "registry");
                run_case(d, 1, /*plan*/ true, false, nullptr, /*packed*/ true);
                run_case(d, 2, /*plan*/ false);  // one-shot: the same decision
            }
            {
                const ScopedEnv route("XK_CONV_IMPL", "onednn");
                const ConvPlan plan(d);
                if (both) EXPECT_STREQ(plan.impl_name(), "onednn:conv");
                else EXPECT_STRNE(plan.impl_name(), "onednn:conv");
                run_case(d, 3, true, false, nullptr, /*packed*/ threads == 1);
            }
            {
                const ScopedEnv route("XK_CONV_IMPL", "gemm");
                const ConvPlan plan(d);
                EXPECT_STRNE(plan.impl_name(), "onednn:conv");
                EXPECT_STRNE(plan.impl_name(), "ref:scalar");
                if (d.groups == 1) EXPECT_STREQ(plan.impl_name(), "gemm:conv");
                run_case(d, 0, true, false, nullptr, /*packed*/ threads == 2);
            }
            if (both) EXPECT_TRUE(timed == "onednn:conv" || timed == detail::conv_registry().select(p, max_isa()).name) << timed;
        }
    }
    set_num_threads(0);
    // Below avx512 (cap) oneDNN is not offered: nothing is timed.
    if (isa_supported(Isa::avx2)) {
        const IsaCap cap(Isa::avx2);
        const detail::ConvProblem p = detail::conv_validate_desc("test", routing_cases()[0]);
        const char* how = "";
        EXPECT_STREQ(detail::conv_select(p, &how).impl->name, "gemm:conv");
        EXPECT_STREQ(how, "registry");
    }
}
