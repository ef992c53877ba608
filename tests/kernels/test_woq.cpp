// Weight-only quantized GEMM: every registry entry and every ISA's selection against a
// double-precision oracle over the dequantized weights (woq_dequantize, itself checked against the
// formulas of include/xk/woq.hpp: the native layouts, PyTorch's int8 / int4 inputs, llama.cpp's
// Q8_0 / Q4_0 dequantize_row formulas bit for bit); int8 / int4, per channel / groups 32 / 64 / 128,
// symmetric / zero points; M in {1, 3, 8, 16, 17, 67}, N and K tails, f32 / bf16 X and Y, every
// epilogue; 1 and 2 threads bit for bit; bad input (nothing written).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "common/activation.hpp"
#include "common/test_util.hpp"
#include "kernels/woq/woq.hpp"
#include "xk/runtime.hpp"
#include "xk/woq.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;

// Tolerances, per output, against the oracle's exact sum over the dequantized weights:
//   |got - want| <= rt * S + ct * |want| + 1e-6 * (|bias| + |residual| + |beta C|)
//   S = sum_k |x_k| * (|q|max * |scale| + |offset|) of the row's groups: the decode kernels sum
//       x * q per group and add scale * sum + offset * sum(x), so their rounding scales with S.
//   rt = (K + 16) * 2^-24 for f32 weights; + 2^-8 where the prefill path (and AMX from M = 12) rounds the weights to
//       bf16 (bf16 X, M > 16).
//   ct = 2^-8 for a bf16 Y (half an ulp, plus the activation), 4e-6 for f32 (activations).
namespace {

struct Weight {
    WoqWeightDesc d;
    std::vector<uint8_t> q;      // raw input bytes (N x ld_w)
    std::vector<float> scales;   // N x G
    std::vector<uint8_t> zp;     // N x G (int8 or uint8)
    WoqPackedWeight packed;
    std::vector<double> bound;   // per n: max over groups of |q|max |s| + |o|
};

int64_t groups(const WoqWeightDesc& d) { return d.group_size ? d.K / d.group_size : 1; }

Weight make_weight(int64_t N, int64_t K, WoqWeightType t, int64_t gs, bool zp, uint64_t seed) {
    Weight w;
    w.d.N = N, w.d.K = K, w.d.type = t, w.d.group_size = gs, w.d.zero_points = zp;
    const bool u4 = t == WoqWeightType::u4;
    const int64_t row = u4 ? K / 2 : K, G = groups(w.d);
    std::mt19937_64 g(seed);
    w.q.resize(static_cast<size_t>(N * row));
    for (auto& b : w.q) b = static_cast<uint8_t>(g());
    w.scales.resize(static_cast<size_t>(N * G));
    for (auto& s : w.scales) s = static_cast<float>(0.001 + (g() % 1000) * 1e-5);
    w.zp.resize(static_cast<size_t>(N * G));
    for (auto& z : w.zp) z = u4 ? static_cast<uint8_t>(g() % 16) : static_cast<uint8_t>(g());
    w.packed = woq_pack(w.d, {w.q.data(), w.scales.data(), zp ? w.zp.data() : nullptr});
    w.bound.assign(static_cast<size_t>(N), 0.0);
    for (int64_t n = 0; n < N; ++n)
        for (int64_t gg = 0; gg < G; ++gg) {
            const double s = w.scales[n * G + gg];
            const double z = zp ? (u4 ? w.zp[n * G + gg] : static_cast<int8_t>(w.zp[n * G + gg])) : (u4 ? 8 : 0);
            w.bound[n] = std::max(w.bound[n], (u4 ? 15 : 128) * s + std::fabs(z * s));
        }
    return w;
}

// The formula of include/xk/woq.hpp from the raw inputs.
float expect_w(const Weight& w, int64_t n, int64_t k) {
    const bool u4 = w.d.type == WoqWeightType::u4;
    const int64_t G = groups(w.d), gi = w.d.group_size ? k / w.d.group_size : 0;
    const int64_t row = u4 ? w.d.K / 2 : w.d.K;
    int q;
    if (u4) {
        const uint8_t b = w.q[n * row + k / 2];
        q = (k & 1) ? b >> 4 : b & 15;
    } else {
        q = static_cast<int8_t>(w.q[n * row + k]);
    }
    const float s = w.scales[n * G + gi];
    int z = u4 ? 8 : 0;
    if (w.d.zero_points) z = u4 ? w.zp[n * G + gi] : static_cast<int8_t>(w.zp[n * G + gi]);
    const float off = (u4 || w.d.zero_points) ? -(s * static_cast<float>(z)) : 0.0f;
    return std::fma(static_cast<float>(q), s, off);
}

double exact_act(Activation a, double x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::silu: return x / (1 + std::exp(-x));
        case Activation::gelu_erf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
        case Activation::gelu_tanh:
            return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    }
    return 0;
}

struct Case {
    int64_t M = 1;
    DType a = DType::f32, c = DType::f32;
    bool bias = false, residual = false;
    Activation act = Activation::none;
    float alpha = 1.0f, beta = 0.0f;
    DType rtype = DType::f32;
    int64_t lda_pad = 0, ldc_pad = 0;
    int x_span = 0;          // > 0: x = u * 2^-e, e uniform in [0, x_span] (rows of wide exponent range)
    bool x_special = false;  // row 0 all zeros; row 1 (if any) denormals, powers of two and zeros
};

// Runs the case through `run` (plan or forced kernel) and compares with the oracle. Returns Y's
// bytes (for the thread comparison).
std::vector<uint8_t> check_case(const Weight& w, const Case& cs, const std::function<void(const WoqDesc&, const WoqArgs&)>& run,
                                const char* what) {
    const int64_t M = cs.M, N = w.d.N, K = w.d.K;
    WoqDesc d;
    d.M = M, d.N = N, d.K = K, d.weight_type = w.d.type, d.a_type = cs.a, d.c_type = cs.c;
    d.lda = K + cs.lda_pad, d.ldc = N + cs.ldc_pad;
    d.alpha = cs.alpha, d.beta = cs.beta;
    d.epilogue.bias = cs.bias, d.epilogue.residual = cs.residual, d.epilogue.act = cs.act;
    d.residual_type = cs.rtype, d.ld_residual = N;
    std::mt19937_64 g(static_cast<uint64_t>(M * 7 + N * 13 + K));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t asz = dtype_size(cs.a), csz = dtype_size(cs.c), rsz = dtype_size(cs.rtype);
    test::Buffer<uint8_t> A(static_cast<size_t>(M * d.lda * asz), 4), C(static_cast<size_t>(M * d.ldc * csz), 4),
        R(static_cast<size_t>(M * N * rsz));
    std::vector<float> bias(static_cast<size_t>(N));
    std::vector<double> xa(static_cast<size_t>(M * K)), c0(static_cast<size_t>(M * d.ldc)), r0(static_cast<size_t>(M * N));
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < d.lda; ++k) {
            float v = u(g);
            if (cs.x_span > 0) v = std::ldexp(v, -static_cast<int>(g() % static_cast<uint64_t>(cs.x_span + 1)));
            if (cs.x_special && m == 0) v = 0.0f;
            if (cs.x_special && m == 1)
                v = k % 3 == 0 ? std::ldexp(static_cast<float>(k % 7) - 3.0f, -128) : k % 3 == 1 ? std::ldexp(1.0f, -(int)(k % 9)) : 0.0f;
            if (cs.a == DType::bf16) {
                const bf16 b(v);
                std::memcpy(A.data() + (m * d.lda + k) * 2, &b.bits, 2);
                if (k < K) xa[m * K + k] = b.to_float();
            } else {
                std::memcpy(A.data() + (m * d.lda + k) * 4, &v, 4);
                if (k < K) xa[m * K + k] = v;
            }
        }
    for (int64_t i = 0; i < M * d.ldc; ++i) {
        const float v = u(g);
        if (cs.c == DType::bf16) {
            const bf16 b(v);
            std::memcpy(C.data() + i * 2, &b.bits, 2);
            c0[i] = b.to_float();
        } else {
            std::memcpy(C.data() + i * 4, &v, 4);
            c0[i] = v;
        }
    }
    for (int64_t i = 0; i < M * N; ++i) {
        const float v = u(g);
        if (cs.rtype == DType::bf16) {
            const bf16 b(v);
            std::memcpy(R.data() + i * 2, &b.bits, 2);
            r0[i] = b.to_float();
        } else {
            std::memcpy(R.data() + i * 4, &v, 4);
            r0[i] = v;
        }
    }
    for (auto& b : bias) b = u(g);
    std::vector<float> wd(static_cast<size_t>(N * K));
    woq_dequantize(w.packed, wd.data());
    WoqArgs a;
    a.A = A.data(), a.C = C.data(), a.bias = bias.data(), a.residual = R.data();
    run(d, a);
    const bool bfw = cs.a == DType::bf16 && (M > detail::kWoqMaxDecodeM || (M >= detail::woq_amx_decode_min_m() && max_isa() >= Isa::amx));
    const double rt = (K + 16) * 0x1p-24 + (bfw ? 0x1p-8 : 0.0);
    const double ct = cs.c == DType::bf16 ? 0x1p-8 : 4e-6;
    int bad = 0;
    for (int64_t m = 0; m < M && bad < 5; ++m)
        for (int64_t n = 0; n < d.ldc && bad < 5; ++n) {
            const double got = cs.c == DType::bf16 ? bf16::from_bits(*reinterpret_cast<const uint16_t*>(C.data() + (m * d.ldc + n) * 2)).to_float()
                                                   : *reinterpret_cast<const float*>(C.data() + (m * d.ldc + n) * 4);
            if (n >= N) {  // padding untouched
                if (got != c0[m * d.ldc + n]) {
                    ADD_FAILURE() << what << ": C padding written at m=" << m << " n=" << n;
                    ++bad;
                }
                continue;
            }
            double acc = 0, S = 0;
            for (int64_t k = 0; k < K; ++k) {
                acc += xa[m * K + k] * wd[n * K + k];
                S += std::fabs(xa[m * K + k]) * w.bound[n];
            }
            double x = cs.alpha * acc, extra = 0;
            if (cs.beta != 0.0f) x += cs.beta * c0[m * d.ldc + n], extra += std::fabs(cs.beta * c0[m * d.ldc + n]);
            if (cs.bias) x += bias[n], extra += std::fabs(bias[n]);
            x = exact_act(cs.act, x);
            if (cs.residual) x += r0[m * N + n], extra += std::fabs(r0[m * N + n]);
            const double tol = rt * S * std::fabs(cs.alpha) * 1.5 + ct * std::fabs(x) + 1e-6 * extra + 1e-30;
            if (!(std::fabs(got - x) <= tol)) {
                ADD_FAILURE() << what << ": M=" << M << " N=" << N << " K=" << K << " m=" << m << " n=" << n << " got " << got
                              << " want " << x << " tol " << tol << " (layout " << w.packed.layout() << ")";
                ++bad;
            }
        }
    return std::vector<uint8_t>(C.data(), C.data() + C.size());
}

void plan_run(const Weight& w, const WoqDesc& d, const WoqArgs& a) {
    WoqPlan p(d);
    p.run(a, w.packed);
}

// The case through a plan, against the oracle; returns the kernel the plan chose.
std::string check_plan_name(const Weight& w, const Case& cs, const char* what) {
    std::string name;
    check_case(w, cs, [&](const WoqDesc& d, const WoqArgs& a) {
        WoqPlan p(d);
        name = p.impl_name();
        p.run(a, w.packed);
    }, what);
    return name;
}

// The case through a plan at 1 and 2 threads, each against the oracle, and the two bit for bit.
void check_plan_threads(const Weight& w, const Case& cs, const char* what) {
    std::vector<uint8_t> r[2];
    for (int th : {1, 2}) {
        set_num_threads(th);
        r[th - 1] = check_case(w, cs, [&](const WoqDesc& d, const WoqArgs& a) { plan_run(w, d, a); }, what);
    }
    set_num_threads(0);
    EXPECT_EQ(r[0], r[1]) << "1 and 2 threads differ, M=" << cs.M;
}

}  // namespace

// woq_pack's layout for every type / group / zero-point mode: woq_dequantize reads back the formula.
TEST(Woq, PackDequantizeFormula) {
    for (auto t : {WoqWeightType::s8, WoqWeightType::u4})
        for (int64_t gs : {0, 32, 64, 128})
            for (bool zp : {false, true}) {
                const int64_t N = 37, K = gs ? 256 : (t == WoqWeightType::u4 ? 70 : 71);
                Weight w = make_weight(N, K, t, gs, zp, 7);
                std::vector<float> wd(static_cast<size_t>(N * K));
                woq_dequantize(w.packed, wd.data());
                int bad = 0;
                for (int64_t n = 0; n < N; ++n)
                    for (int64_t k = 0; k < K; ++k)
                        if (wd[n * K + k] != expect_w(w, n, k) && bad++ < 3)
                            ADD_FAILURE() << w.packed.layout() << " n=" << n << " k=" << k;
                EXPECT_EQ(w.packed.N(), N);
                EXPECT_EQ(w.packed.K(), K);
                EXPECT_EQ(w.packed.group_size(), gs ? gs : K);
            }
}

// Every registry entry this machine can run (each ISA's cap selects its decode entry for M <= 16
// and its prefill entry above; the scalar cap the reference), every layout, M / N / K tails,
// f32 / bf16 X and Y, leading dimensions past the row.
TEST(Woq, EveryKernelEveryLayout) {
    std::set<std::string> seen;
    for (auto t : {WoqWeightType::s8, WoqWeightType::u4})
        for (int64_t gs : {0, 32, 64, 128})
            for (bool zp : {false, true}) {
                const int64_t K = gs ? 2 * gs + (gs == 32 ? 64 : 0) : (t == WoqWeightType::u4 ? 90 : 77);
                const int64_t N = gs == 64 ? 16 : 37;
                Weight w = make_weight(N, K, t, gs, zp, 11 + gs);
                for_each_isa([&](Isa isa) {
                    for (int64_t M : {1, 3, 8, 12, 16, 17, 67}) {
                        Case cs;
                        cs.M = M;
                        cs.a = (M + gs / 32) % 2 ? DType::bf16 : DType::f32;
                        cs.c = (M / 2 + (zp ? 1 : 0)) % 2 ? DType::bf16 : DType::f32;
                        cs.lda_pad = M % 3, cs.ldc_pad = M % 2;
                        const std::string name = check_plan_name(w, cs, isa_name(isa));
                        seen.insert(name);
                        const bool dec = M <= detail::kWoqMaxDecodeM;
                        if (isa == Isa::scalar) EXPECT_EQ(name, "ref:scalar");
                        else if (isa == Isa::amx && (!dec || M >= detail::woq_amx_decode_min_m()) && cs.a == DType::bf16)
                            EXPECT_EQ(name, "amx:woq:dequant_gemm");
                        else if (isa >= Isa::avx512_vnni && detail::woq_planes_enabled() && t == WoqWeightType::s8 &&
                                 M <= 4 && cs.a == DType::bf16)
                            EXPECT_EQ(name, "avx512_vnni:woq_s8:planes");
                        else if (isa >= Isa::avx512_bf16 && detail::woq_dp_enabled() && dec && cs.a == DType::bf16 &&
                                 (t == WoqWeightType::u4 || M >= 6))
                            EXPECT_EQ(name, t == WoqWeightType::u4 ? "avx512_bf16:woq_u4:gemv" : "avx512_bf16:woq_s8:gemv");
                        else if (isa >= Isa::avx512)
                            EXPECT_EQ(name, dec ? (t == WoqWeightType::u4 ? "avx512:woq_u4:gemv" : "avx512:woq_s8:gemv")
                                                : "avx512:woq:dequant_gemm");
                        else
                            EXPECT_EQ(name, dec ? (t == WoqWeightType::u4 ? "avx2:woq_u4:gemv" : "avx2:woq_s8:gemv")
                                                : "avx2:woq:dequant_gemm");
                    }
                });
            }
    // Every entry of the registry this machine runs was exercised (TSan builds sweep only some ISAs).
    if (xk::test::kTsanSweep) return;
    const auto isas = xk::available_isas();  // (under XK_MAX_ISA the sweep stops at the cap)
    for (const auto& impl : detail::woq_registry().impls())
        if (std::find(isas.begin(), isas.end(), impl.isa) != isas.end() &&
            std::string(impl.name).find(":woq:int8") == std::string::npos &&  // (Woq.Int8Compute)
            (detail::woq_dp_enabled() || std::string(impl.name).rfind("avx512_bf16:woq_", 0) != 0) &&  // (Woq.Bf16DotKernels)
            (detail::woq_planes_enabled() || std::string(impl.name) != "avx512_vnni:woq_s8:planes"))  // (Woq.PlanesKernel)
            EXPECT_TRUE(seen.count(impl.name)) << impl.name;
}

// The VDPBF16PS decode kernels (avx512_bf16:woq_u4:gemv, woq_s8:gemv from M = 6), forced on
// wherever the instructions are (by default they run on AMD CPUs only): every layout, odd K, row
// counts of one and two passes, leading dimensions past the row, f32 / bf16 Y.
TEST(Woq, Bf16DotKernels) {
    if (max_isa() < Isa::avx512_bf16 || !__builtin_cpu_supports("avx512vbmi")) GTEST_SKIP() << "needs AVX512-BF16 + VBMI (and no lower cap)";
    const IsaCap cap(Isa::avx512_bf16);  // (below AMX, which takes bf16 X from M = 12)
    detail::set_woq_dp(1);
    for (auto t : {WoqWeightType::s8, WoqWeightType::u4})
        for (int64_t gs : {0, 32, 128})
            for (bool zp : {false, true}) {
                const int64_t K = gs ? 2 * gs + 128 : (t == WoqWeightType::u4 ? 90 : 77);
                const int64_t N = 37;
                Weight w = make_weight(N, K, t, gs, zp, 5 + gs);
                for (int64_t M : {1, 6, 11, 16}) {
                    Case cs;
                    cs.M = M;
                    cs.a = DType::bf16;
                    cs.c = M % 2 ? DType::bf16 : DType::f32;
                    cs.lda_pad = M % 3, cs.ldc_pad = M % 2;
                    const std::string name = check_plan_name(w, cs, "dp");
                    if (t == WoqWeightType::u4 || M >= 6)
                        EXPECT_EQ(name, t == WoqWeightType::u4 ? "avx512_bf16:woq_u4:gemv" : "avx512_bf16:woq_s8:gemv");
                }
            }
    detail::set_woq_dp(-1);
}

// The exact VPDPBUSD decode kernel on digit planes of bf16 X (avx512_vnni:woq_s8:planes, M <= 4),
// (on by default wherever the instructions are; set here in case XK_WOQ_PLANES=0): every s8 layout, odd K, rows
// of 1 to 6 planes and rows needing more (the call runs the FMA kernel), a row of zeros, denormal
// and power-of-two x, leading dimensions past the row, f32 / bf16 Y, 1 and 2 threads bit for bit.
TEST(Woq, PlanesKernel) {
    if (max_isa() < Isa::avx512_vnni || !detail::woq_vnni_supported()) GTEST_SKIP() << "needs AVX512-VNNI + VBMI (and no lower cap)";
    detail::set_woq_planes(1);
    for (int64_t gs : {0, 32, 128})
        for (bool zp : {false, true}) {
            const int64_t K = gs ? 2 * gs + 128 : 77;
            const int64_t N = 37;
            Weight w = make_weight(N, K, WoqWeightType::s8, gs, zp, 3 + gs);
            for (int64_t M : {1, 2, 3, 4})
                for (int span : {0, 12, 24, 34, 60}) {
                    Case cs;
                    cs.M = M;
                    cs.a = DType::bf16;
                    cs.c = (M + span) % 2 ? DType::bf16 : DType::f32;
                    cs.lda_pad = M % 3, cs.ldc_pad = M % 2;
                    cs.x_span = span;
                    cs.x_special = span == 12;
                    cs.bias = span == 24;
                    check_plan_threads(w, cs, "planes");
                    const std::string name = check_plan_name(w, cs, "planes");
                    EXPECT_EQ(name, "avx512_vnni:woq_s8:planes");
                }
        }
    detail::set_woq_planes(-1);
}

// The planes kernel bit for bit against its documented formula: per group the exact sum
// S = sum_k x q (x = X * 2^e with X integers, S = 2^e sum_k X q in int64) rounded to f32 once, then
// y = fma(S, scale, y) and, with offsets, y = fma(f32(sum_k x), offset, y), group by group (alpha 1,
// no epilogue terms: Y is y). Rows of up to ~20 bits of span (P <= 4: the kernel's case, no
// fallback), odd K and K = 2 group + 128, misaligned X with a leading dimension past the row, a
// padded Y, 1 and 2 threads.
TEST(Woq, PlanesKernelExactSums) {
    if (max_isa() < Isa::avx512_vnni || !detail::woq_vnni_supported()) GTEST_SKIP() << "needs AVX512-VNNI + VBMI (and no lower cap)";
    detail::set_woq_planes(1);
    for (int64_t gs : {0, 32, 128})
        for (bool zp : {false, true}) {
            const int64_t K = gs ? 2 * gs + 128 : 77, N = 37, G = gs ? K / gs : 1, glen = gs ? gs : K;
            Weight w = make_weight(N, K, WoqWeightType::s8, gs, zp, 11 + gs);
            const detail::WoqPacked* pk = detail::woq_packed(w.packed);
            for (int64_t M : {1, 2, 3, 4}) {
                const int64_t lda = K + 3, ldc = N + 2;
                std::mt19937_64 g(static_cast<uint64_t>(M * 100 + gs + zp));
                std::uniform_real_distribution<float> u(-1.0f, 1.0f);
                std::vector<uint16_t> xbuf(static_cast<size_t>(M * lda + 1));
                uint16_t* x = xbuf.data() + 1;  // (2-byte offset: misaligned rows)
                std::vector<double> xv(static_cast<size_t>(M * K));
                for (int64_t m = 0; m < M; ++m)
                    for (int64_t k = 0; k < lda; ++k) {
                        const bf16 b(std::ldexp(u(g), -static_cast<int>(g() % 12)));
                        x[m * lda + k] = b.bits;
                        if (k < K) xv[m * K + k] = b.to_float();
                    }
                WoqDesc d;
                d.M = M, d.N = N, d.K = K, d.weight_type = WoqWeightType::s8, d.a_type = DType::bf16, d.c_type = DType::f32;
                d.lda = lda, d.ldc = ldc;
                std::vector<float> want(static_cast<size_t>(M * ldc), -7.0f);
                for (int64_t m = 0; m < M; ++m) {
                    int lo = 1000;  // the row's lowest set bit: x = X * 2^lo
                    for (int64_t k = 0; k < K; ++k) {
                        const double v = xv[m * K + k];
                        if (v == 0.0) continue;
                        int e;
                        double f = std::frexp(std::fabs(v), &e);  // v = f * 2^e, f in [0.5, 1): 8 significant bits
                        int64_t mant = static_cast<int64_t>(std::ldexp(f, 8));
                        int t = e - 8;
                        while (mant % 2 == 0) mant /= 2, ++t;
                        lo = std::min(lo, t);
                    }
                    if (lo == 1000) lo = 0;
                    for (int64_t n = 0; n < N; ++n) {
                        float y = 0.0f;
                        for (int64_t gg = 0; gg < G; ++gg) {
                            int64_t S = 0, X = 0;
                            for (int64_t k = gg * glen; k < std::min(K, (gg + 1) * glen); ++k) {
                                const int64_t xi = static_cast<int64_t>(std::ldexp(xv[m * K + k], -lo));  // exact
                                S += xi * pk->q_at(n, k);
                                X += xi;
                            }
                            const float sum = static_cast<float>(std::ldexp(static_cast<double>(S), lo));
                            y = std::fma(sum, pk->scale_at(n, gg), y);
                            if (zp) y = std::fma(static_cast<float>(std::ldexp(static_cast<double>(X), lo)), pk->offset_at(n, gg), y);
                        }
                        want[m * ldc + n] = y;
                    }
                }
                for (int th : {1, 2}) {
                    set_num_threads(th);
                    std::vector<float> got(static_cast<size_t>(M * ldc), -7.0f);
                    WoqPlan plan(d);
                    EXPECT_STREQ(plan.impl_name(), "avx512_vnni:woq_s8:planes");
                    plan.run({x, got.data()}, w.packed);
                    ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
                        << "gs=" << gs << " zp=" << zp << " M=" << M << " threads=" << th;
                }
                set_num_threads(0);
            }
        }
    detail::set_woq_planes(-1);
}

// The AMX prefill's producer (amx:woq:dequant_gemm) writes, for every block, the bytes the AMX
// bf16 GEMM's own packer writes for the dequantized weights rounded to bf16 (B = W^T, K x N):
// checked here bit for bit on any AVX512-BF16 machine (packing needs no tiles); the product runs on
// AMX hosts.
TEST(Woq, AmxProducerLayout) {
    if (!isa_supported(Isa::avx512_bf16)) GTEST_SKIP() << "the producer needs AVX512-BF16";
    for (auto t : {WoqWeightType::s8, WoqWeightType::u4})
        for (int64_t gs : {0, 32, 64, 128, 256})
            for (int64_t N : {16, 37, 64}) {
                const int64_t K = gs ? 256 : (t == WoqWeightType::u4 ? 90 : 77);
                Weight w = make_weight(N, K, t, gs, gs == 32, 3 + N);
                std::vector<float> wd(static_cast<size_t>(N * K));
                woq_dequantize(w.packed, wd.data());
                std::vector<uint16_t> B(static_cast<size_t>(K * N));
                for (int64_t n = 0; n < N; ++n)
                    for (int64_t k = 0; k < K; ++k) B[k * N + n] = bf16(wd[n * K + k]).bits;
                GemmDesc gd;
                gd.M = 64, gd.N = N, gd.K = K, gd.a_type = gd.b_type = DType::bf16;
                const auto gemm = detail::create_gemm_amx_bf16(detail::gemm_check_desc("test", gd));
                const auto ref = gemm->pack_b(B.data());
                std::vector<uint8_t> got(ref->bytes, 0xEE);
                detail::WoqAmxCtx ctx;
                ctx.w = detail::woq_packed(w.packed);
                ctx.nkb = (K + 31) / 32;
                const int64_t nblocks = (N + 31) / 32;
                ASSERT_EQ(ref->bytes, static_cast<size_t>(nblocks * ctx.nkb * 2048));
                for (int64_t nb = 0; nb < nblocks; ++nb)
                    detail::woq_amx_pack_block(&ctx, nb, 0, ctx.nkb, got.data() + nb * ctx.nkb * 2048);
                EXPECT_EQ(0, std::memcmp(got.data(), ref->data, ref->bytes)) << w.packed.layout();
                // windows of k steps (the decode ring's calls), 3 at a time, written at their place
                std::fill(got.begin(), got.end(), uint8_t{0xEE});
                for (int64_t nb = 0; nb < nblocks; ++nb)
                    for (int64_t kb = 0; kb < ctx.nkb; kb += 3)
                        detail::woq_amx_pack_block(&ctx, nb, kb, std::min(ctx.nkb, kb + 3), got.data() + (nb * ctx.nkb + kb) * 2048);
                EXPECT_EQ(0, std::memcmp(got.data(), ref->data, ref->bytes)) << w.packed.layout() << " (windows)";
                // raw (the decode windows' scales applied to the tiles' sums): bf16 of the integer
                // weight itself, q - 8 for u4 without zero points
                const detail::WoqPacked& pw = *ctx.w;
                EXPECT_EQ(pw.sym8, t == WoqWeightType::u4 && gs != 32);
                for (int64_t n = 0; n < N; ++n)
                    for (int64_t k = 0; k < K; ++k) B[k * N + n] = bf16(static_cast<float>(pw.q_at(n, k) - (pw.sym8 ? 8 : 0))).bits;
                const auto ref_raw = gemm->pack_b(B.data());
                ctx.raw = true;
                std::fill(got.begin(), got.end(), uint8_t{0xEE});
                for (int64_t nb = 0; nb < nblocks; ++nb)
                    for (int64_t kb = 0; kb < ctx.nkb; kb += 3)
                        detail::woq_amx_pack_block(&ctx, nb, kb, std::min(ctx.nkb, kb + 3), got.data() + (nb * ctx.nkb + kb) * 2048);
                EXPECT_EQ(0, std::memcmp(got.data(), ref_raw->data, ref_raw->bytes)) << w.packed.layout() << " (raw)";
            }
}

// WoqCompute::int8 with enough column blocks to split over threads: every worker reads the calling
// thread's quantized activations (a device bench at 16 threads crashed when each worker named its
// own, empty thread_local copy). Bit for bit against one thread.
TEST(Woq, Int8ComputeSplitOverThreads) {
    for (auto t : {WoqWeightType::s8, WoqWeightType::u4}) {
        const int64_t N = 2048 + 16, K = 256, M = 3;
        Weight w = make_weight(N, K, t, 128, false, 77);
        std::vector<float> A(static_cast<size_t>(M * K));
        std::mt19937_64 g(5);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (auto& v : A) v = u(g);
        WoqDesc d;
        d.M = M, d.N = N, d.K = K, d.weight_type = t, d.compute = WoqCompute::int8;
        std::vector<float> ref;
        for (int th : {1, 2, 5}) {
            set_num_threads(th);
            std::vector<float> C(static_cast<size_t>(M * N), -7.0f);
            WoqPlan p(d);
            p.run({A.data(), C.data(), nullptr}, w.packed);
            if (ref.empty())
                ref = C;
            else
                EXPECT_EQ(C, ref) << "threads " << th << " " << p.impl_name();
        }
        set_num_threads(0);
    }
}

// WoqCompute::int8: every ISA's selection bit for bit against the reference (the scalar cap; the
// integer sums are exact), 1 and 2 threads; the reference against the exact double product within
// the activation quantization's bound: |error| <= (max_k |x[m,k]| / 254) * sum_k |w[n,k]| (+ fp32).
TEST(Woq, Int8Compute) {
    std::set<std::string> seen;
    for (auto t : {WoqWeightType::s8, WoqWeightType::u4})
        for (int64_t gs : {0, 32, 128})
            for (bool zp : {false, true}) {
                const int64_t K = gs ? 2 * gs + (gs == 32 ? 64 : 0) : (t == WoqWeightType::u4 ? 90 : 77);
                const int64_t N = gs == 32 ? 16 : 37;
                Weight w = make_weight(N, K, t, gs, zp, 21 + gs);
                std::vector<float> wd(static_cast<size_t>(N * K));
                woq_dequantize(w.packed, wd.data());
                for (int64_t M : {1, 5, 9, 17}) {
                    const bool abf = (M + gs / 32 + zp) % 2 == 1;
                    const DType at = abf ? DType::bf16 : DType::f32, ct = M == 9 ? DType::bf16 : DType::f32;
                    const int64_t lda = K + M % 3, ldc = N + M % 2, esz = abf ? 2 : 4, csz = ct == DType::bf16 ? 2 : 4;
                    std::mt19937_64 g(static_cast<uint64_t>(M * 31 + K));
                    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
                    test::Buffer<uint8_t> A(static_cast<size_t>(M * lda * esz), 4);
                    std::vector<double> xa(static_cast<size_t>(M * K));
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t k = 0; k < lda; ++k) {
                            const float v = u(g) * (m == 2 ? 0.0f : 1.0f) * (k == 3 ? 9.0f : 1.0f);  // a zero row, an outlier
                            if (abf) {
                                const bf16 b(v);
                                std::memcpy(A.data() + (m * lda + k) * 2, &b.bits, 2);
                                if (k < K) xa[m * K + k] = b.to_float();
                            } else {
                                std::memcpy(A.data() + (m * lda + k) * 4, &v, 4);
                                if (k < K) xa[m * K + k] = v;
                            }
                        }
                    std::vector<float> bias(static_cast<size_t>(N));
                    for (auto& b : bias) b = u(g);
                    WoqDesc d;
                    d.M = M, d.N = N, d.K = K, d.weight_type = t, d.a_type = at, d.c_type = ct, d.lda = lda, d.ldc = ldc;
                    d.compute = WoqCompute::int8;
                    d.epilogue.bias = true;
                    std::vector<uint8_t> ref;
                    for_each_isa([&](Isa isa) {
                        for (int th : {1, 2}) {
                            if (isa != Isa::scalar && th == 2 && M != 17) continue;
                            set_num_threads(th);
                            test::Buffer<uint8_t> C(static_cast<size_t>(M * ldc * csz));
                            std::memset(C.data(), 0x5a, C.size());
                            WoqPlan p(d);
                            p.run({A.data(), C.data(), bias.data()}, w.packed);
                            seen.insert(p.impl_name());
                            const bool vnni = isa >= Isa::avx512_vnni && detail::woq_vnni_supported();
                            const bool avx_vnni = isa >= Isa::avx2_vnni && detail::woq_avx_vnni_supported();
                            EXPECT_STREQ(p.impl_name(), vnni       ? "avx512_vnni:woq:int8"
                                                        : avx_vnni ? "avx2_vnni:woq:int8"
                                                        : isa >= Isa::avx2 ? "avx2:woq:int8"
                                                                           : "ref:scalar");
                            std::vector<uint8_t> got(C.data(), C.data() + C.size());
                            if (ref.empty()) {
                                ref = got;
                                // the reference against the exact product
                                for (int64_t m = 0; m < M; ++m) {
                                    double amax = 0;
                                    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(xa[m * K + k]));
                                    for (int64_t n = 0; n < ldc; ++n) {
                                        const uint8_t* e = got.data() + (m * ldc + n) * csz;
                                        if (n >= N) {
                                            EXPECT_EQ(*e, 0x5a) << "padding written";
                                            continue;
                                        }
                                        double acc = bias[n], S = 0, W = 0;
                                        for (int64_t k = 0; k < K; ++k) {
                                            acc += xa[m * K + k] * wd[n * K + k];
                                            S += std::fabs(xa[m * K + k]) * w.bound[n];
                                            W += std::fabs(wd[n * K + k]);
                                        }
                                        const double y = csz == 2 ? bf16::from_bits(*reinterpret_cast<const uint16_t*>(e)).to_float()
                                                                  : *reinterpret_cast<const float*>(e);
                                        const double tol = amax / 254 * W * 1.01 + 4 * (K + 16) * 0x1p-24 * S +
                                                           (csz == 2 ? 0x1p-8 : 4e-6) * std::fabs(acc) + 1e-6;
                                        EXPECT_NEAR(y, acc, tol) << "M=" << M << " m=" << m << " n=" << n << " " << w.packed.layout();
                                    }
                                }
                            } else {
                                EXPECT_EQ(got, ref) << isa_name(isa) << " threads " << th << " M=" << M << " " << w.packed.layout();
                            }
                        }
                    }, /*with_avx2_vnni=*/true);
                    set_num_threads(0);
                }
            }
    // (under XK_MAX_ISA the sweep stops at the cap)
    const auto isas = xk::available_isas();
    auto swept = [&](Isa i) {
        if (xk::test::kTsanSweep) return i == Isa::avx2 || i == isas.back();  // (for_each_isa under TSan)
        return std::find(isas.begin(), isas.end(), i) != isas.end();
    };
    if (detail::woq_vnni_supported() && swept(Isa::avx512_vnni)) EXPECT_TRUE(seen.count("avx512_vnni:woq:int8"));
    if (detail::woq_avx_vnni_supported() && swept(Isa::avx2_vnni)) EXPECT_TRUE(seen.count("avx2_vnni:woq:int8"));
    if (swept(Isa::avx2)) EXPECT_TRUE(seen.count("avx2:woq:int8"));
    // bad input
    WoqDesc d;
    d.M = 1, d.N = 16, d.K = 32;
    d.compute = static_cast<WoqCompute>(5);
    XK_EXPECT_INVALID(WoqPlan{d}, "compute=5");
}

// Each ISA's selection with every epilogue, beta, alpha, bf16 residual; 1 and 2 threads bit for bit.
TEST(Woq, EpiloguesAndThreads) {
    for_each_isa([&](Isa) {
        for (auto t : {WoqWeightType::s8, WoqWeightType::u4}) {
            Weight w = make_weight(50, 256, t, 128, t == WoqWeightType::u4, 5);
            for (int64_t M : {1, 5, 16, 20}) {
                Case cs;
                cs.M = M;
                cs.bias = cs.residual = true;
                cs.act = M % 2 ? Activation::gelu_erf : Activation::silu;
                cs.alpha = 0.75f, cs.beta = M == 5 ? 0.0f : 0.5f;
                cs.rtype = M % 2 ? DType::bf16 : DType::f32;
                cs.a = M == 20 ? DType::f32 : DType::bf16;
                check_plan_threads(w, cs, "plan");
            }
        }
    });
}

// bf16 X at M <= 32 with K over several of the AMX decode ring's windows (8 k steps of 32, or one
// group: the integer weights) and a partial one, N over several 32-column blocks with a tail: on AMX
// machines the per-window producer + tile products (amx:woq:dequant_gemm), elsewhere the decode /
// prefill kernels; 1 and 2 threads bit for bit.
TEST(Woq, AmxDecodeRingWindows) {
    for_each_isa([&](Isa) {
        // u4 g32 (bf16-rounded scaled weights); s8 per channel with zero points, symmetric; u4 g128
        // symmetric, g64 with zero points (the integer weights, windows of one group)
        for (int v = 0; v < 5; ++v) {
            const WoqWeightType t = v == 0 || v >= 3 ? WoqWeightType::u4 : WoqWeightType::s8;
            const int64_t K = v == 0 ? 608 : v < 3 ? 609 : 640;  // 19 / 20 k steps: 2 windows + a part; 20 steps
            const int64_t gs = v == 0 ? 32 : v < 3 ? 0 : v == 3 ? 128 : 64;
            Weight w = make_weight(80, K, t, gs, v == 1 || v == 4, 9);
            for (int64_t M : {16, 29}) {
                Case cs;
                cs.M = M;
                cs.a = DType::bf16;
                cs.c = M == 29 ? DType::bf16 : DType::f32;
                cs.bias = true;
                cs.lda_pad = 3;
                check_plan_threads(w, cs, "plan");
            }
        }
    });
}

// A wide N (several threads' chunks, several prefill slabs) against the oracle.
TEST(Woq, WideN) {
    for_each_isa([&](Isa) {
        Weight w = make_weight(1040, 128, WoqWeightType::u4, 32, false, 9);
        for (int64_t M : {2, 33}) {
            for (DType at : {DType::f32, DType::bf16}) {  // (bf16, M = 33: the AMX prefill on AMX hosts)
                Case cs;
                cs.M = M;
                cs.a = at;
                check_case(w, cs, [&](const WoqDesc& d, const WoqArgs& a) { plan_run(w, d, a); }, "wide");
            }
        }
    });
}

// PyTorch: _weight_int8pack_mm's inputs (int8 W, per-channel scales f32 / bf16).
TEST(Woq, ImportTorchInt8) {
    const int64_t N = 33, K = 40;
    std::vector<int8_t> q(static_cast<size_t>(N * K));
    std::mt19937_64 g(3);
    for (auto& v : q) v = static_cast<int8_t>(g());
    std::vector<float> s(static_cast<size_t>(N));
    std::vector<uint16_t> sb(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) s[n] = 0.01f + n * 1e-3f, sb[n] = bf16(s[n]).bits;
    for (DType st : {DType::f32, DType::bf16}) {
        auto w = woq_import_torch_int8pack(N, K, q.data(), st, st == DType::f32 ? static_cast<const void*>(s.data()) : sb.data());
        std::vector<float> wd(static_cast<size_t>(N * K));
        woq_dequantize(w, wd.data());
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k = 0; k < K; ++k) {
                const float sc = st == DType::f32 ? s[n] : bf16::to_float(sb[n]);
                ASSERT_EQ(wd[n * K + k], static_cast<float>(q[n * K + k]) * sc);
            }
    }
}

// PyTorch: _weight_int4pack_mm_for_cpu's inputs, w packed by _convert_weight_to_int4pack_for_cpu
// (the order of aten's weight_to_int4pack_kernel, block_n 64 and 32; checked against torch 2.15 on
// this machine by packing int32 weights with torch and decoding them with this order),
// scales_and_zeros [G x N x 2]: w = (q - 8) * scale + zero.
TEST(Woq, ImportTorchInt4) {
    for (int block_n : {64, 32})
        for (int64_t N : {16, 64, 96, 144}) {
            const int64_t K = 128, gs = 32, G = K / gs;
            std::mt19937_64 g(static_cast<uint64_t>(N + block_n));
            std::vector<int> q(static_cast<size_t>(N * K));
            for (auto& v : q) v = static_cast<int>(g() % 16);
            std::vector<uint8_t> packed(static_cast<size_t>(N * K / 2));
            for (int64_t i = 0; i * block_n < N; ++i) {
                const int64_t nb = std::min<int64_t>(block_n, N - i * block_n);
                for (int64_t k = 0; k < K; ++k)
                    for (int64_t j = 0; j < nb / 2; ++j) {
                        const int64_t lo = nb == block_n ? j : 2 * j, hi = nb == block_n ? j + block_n / 2 : 2 * j + 1;
                        packed[i * K * block_n / 2 + k * nb / 2 + j] =
                            static_cast<uint8_t>(q[(i * block_n + lo) * K + k] | q[(i * block_n + hi) * K + k] << 4);
                    }
            }
            std::vector<float> sz(static_cast<size_t>(G * N * 2));
            for (int64_t i = 0; i < G * N; ++i) sz[2 * i] = 0.01f + (g() % 100) * 1e-4f, sz[2 * i + 1] = (static_cast<int>(g() % 200) - 100) * 1e-3f;
            auto w = woq_import_torch_int4pack_cpu(N, K, gs, packed.data(), DType::f32, sz.data(), block_n);
            std::vector<float> wd(static_cast<size_t>(N * K));
            woq_dequantize(w, wd.data());
            for (int64_t n = 0; n < N; ++n)
                for (int64_t k = 0; k < K; ++k) {
                    const float s = sz[((k / gs) * N + n) * 2], z = sz[((k / gs) * N + n) * 2 + 1];
                    const double want = (q[n * K + k] - 8.0) * s + z;
                    ASSERT_NEAR(wd[n * K + k], want, 2e-7 * (16 * s + std::fabs(z))) << "n=" << n << " k=" << k << " block_n=" << block_n;
                }
            // and a product through it
            WoqDesc d;
            d.M = 2, d.N = N, d.K = K;
            std::vector<float> x(static_cast<size_t>(2 * K), 0.5f), y(static_cast<size_t>(2 * N));
            woq_gemm(d, {x.data(), y.data()}, w);
            double want = 0;
            for (int64_t k = 0; k < K; ++k) want += 0.5 * wd[k];
            EXPECT_NEAR(y[0], want, 1e-4 * (1 + std::fabs(want)));
        }
}

// llama.cpp's dequantize_row_q8_0 / dequantize_row_q4_0 (ggml-quants.c):
//   q8_0: y[i*32 + j] = x[i].qs[j] * d
//   q4_0: x0 = (qs[j] & 0x0F) - 8, x1 = (qs[j] >> 4) - 8; y[i*32 + j] = x0 * d, y[i*32 + j + 16] = x1 * d
// bit for bit, negative and zero d included.
TEST(Woq, ImportGgufExact) {
    const int64_t N = 21, K = 96, nbk = K / 32;
    std::mt19937_64 g(17);
    for (GgufType t : {GgufType::q8_0, GgufType::q4_0}) {
        const bool q4 = t == GgufType::q4_0;
        const int64_t bb = q4 ? 18 : 34;
        std::vector<uint8_t> data(static_cast<size_t>(N * nbk * bb));
        for (auto& b : data) b = static_cast<uint8_t>(g());
        for (int64_t i = 0; i < N * nbk; ++i) {
            const float dv = i % 7 == 0 ? 0.0f : ((g() % 2) ? -1.0f : 1.0f) * (0.0005f + (g() % 1000) * 3e-5f);
            const uint16_t h = f16(dv).bits;
            std::memcpy(data.data() + i * bb, &h, 2);
        }
        auto w = woq_import_gguf(t, N, K, data.data());
        std::vector<float> wd(static_cast<size_t>(N * K));
        woq_dequantize(w, wd.data());
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < nbk; ++i) {
                const uint8_t* blk = data.data() + (n * nbk + i) * bb;
                uint16_t h;
                std::memcpy(&h, blk, 2);
                const float d = f16::to_float(h);
                float y[32];
                if (q4) {
                    for (int j = 0; j < 16; ++j) {
                        const int x0 = (blk[2 + j] & 0x0F) - 8, x1 = (blk[2 + j] >> 4) - 8;
                        y[j] = x0 * d;
                        y[j + 16] = x1 * d;
                    }
                } else {
                    for (int j = 0; j < 32; ++j) y[j] = static_cast<int8_t>(blk[2 + j]) * d;
                }
                for (int j = 0; j < 32; ++j) {
                    float got = wd[n * K + i * 32 + j];
                    ASSERT_EQ(std::memcmp(&got, &y[j], 4) == 0 || (got == 0 && y[j] == 0), true)
                        << (q4 ? "q4_0" : "q8_0") << " n=" << n << " block " << i << " j=" << j << " got " << got << " want " << y[j];
                }
            }
        // The product of a GGUF weight on each ISA.
        for_each_isa([&](Isa) {
            Weight ww;
            ww.d.N = N, ww.d.K = K, ww.d.type = q4 ? WoqWeightType::u4 : WoqWeightType::s8;
            ww.packed = w;
            ww.bound.assign(static_cast<size_t>(N), 0.0);
            for (int64_t n = 0; n < N; ++n)
                for (int64_t i = 0; i < nbk; ++i) {
                    uint16_t h;
                    std::memcpy(&h, data.data() + (n * nbk + i) * bb, 2);
                    ww.bound[n] = std::max(ww.bound[n], std::fabs(f16::to_float(h)) * (q4 ? 16.0 : 128.0));
                }
            for (int64_t M : {1, 4, 24}) {
                Case cs;
                cs.M = M;
                check_case(ww, cs, [&](const WoqDesc& d, const WoqArgs& a) { plan_run(ww, d, a); }, "gguf");
            }
        });
    }
}

TEST(Woq, BadInput) {
    const int64_t N = 16, K = 64;
    std::vector<uint8_t> q(static_cast<size_t>(N * K), 1);
    std::vector<float> s(static_cast<size_t>(N * 2), 0.5f);
    WoqWeightDesc d;
    d.N = N, d.K = K, d.type = WoqWeightType::s8, d.group_size = 32;
    EXPECT_NO_THROW(woq_pack(d, {q.data(), s.data(), nullptr}));
    {
        auto d2 = d;
        d2.group_size = 48;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), nullptr}), "group_size=48");
        d2.group_size = 128;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), nullptr}), "does not divide K=64");
    }
    for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
        auto s2 = s;
        s2[5] = bad;
        XK_EXPECT_INVALID(woq_pack(d, {q.data(), s2.data(), nullptr}), "scales[5]");
    }
    XK_EXPECT_INVALID(woq_pack(d, {nullptr, s.data(), nullptr}), "weights=null");
    XK_EXPECT_INVALID(woq_pack(d, {q.data(), nullptr, nullptr}), "scales=null");
    {
        auto d2 = d;
        d2.zero_points = true;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), nullptr}), "zero_points=null");
        d2.type = WoqWeightType::u4;
        std::vector<uint8_t> z(static_cast<size_t>(N * 2), 3);
        z[7] = 16;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), z.data()}), "zero_points[7]=16");
        d2.K = 63, d2.group_size = 0;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), z.data()}), "K=63");
    }
    {
        auto d2 = d;
        d2.ld_w = 10;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), nullptr}), "ld_w=10");
        d2.ld_w = 0;
        d2.N = int64_t(1) << 62;
        XK_EXPECT_INVALID(woq_pack(d2, {q.data(), s.data(), nullptr}), "overflows");
    }
    XK_EXPECT_INVALID(woq_import_gguf(static_cast<GgufType>(3), 4, 32, q.data()), "type=3");
    XK_EXPECT_INVALID(woq_import_gguf(GgufType::q8_0, 4, 33, q.data()), "K=33");
    {
        std::vector<uint8_t> blk(34, 0);
        const uint16_t nan_h = 0x7E00;
        std::memcpy(blk.data(), &nan_h, 2);
        XK_EXPECT_INVALID(woq_import_gguf(GgufType::q8_0, 1, 32, blk.data()), "must be finite");
    }
    {
        std::vector<float> sz(static_cast<size_t>(2 * N * 2), 1.0f);
        sz[2 * 3] = 0.0f;
        XK_EXPECT_INVALID(woq_import_torch_int4pack_cpu(N, K, 32, q.data(), DType::f32, sz.data()), "scales_and_zeros[0][3][0]");
        XK_EXPECT_INVALID(woq_import_torch_int4pack_cpu(N, K, 48, q.data(), DType::f32, sz.data()), "group_size=48");
        std::vector<float> s1(static_cast<size_t>(N), 1.0f);
        s1[2] = std::numeric_limits<float>::quiet_NaN();
        XK_EXPECT_INVALID(woq_import_torch_int8pack(N, K, reinterpret_cast<const int8_t*>(q.data()), DType::f32, s1.data()), "scales[2]");
    }

    // The product: a weight of another shape, null pointers, bad strides, overlap — nothing written.
    WoqPackedWeight w = woq_pack(d, {q.data(), s.data(), nullptr});
    WoqDesc pd;
    pd.M = 2, pd.N = N, pd.K = K, pd.weight_type = WoqWeightType::s8;
    std::vector<float> x(static_cast<size_t>(2 * K), 1.0f), y(static_cast<size_t>(2 * N), 42.0f);
    WoqPlan plan(pd);
    {
        auto pd2 = pd;
        pd2.N = 32;
        WoqPlan p2(pd2);
        std::vector<float> y2(static_cast<size_t>(2 * 32), 42.0f);
        XK_EXPECT_INVALID(p2.run({x.data(), y2.data()}, w), "weight='woq:s8:N16:K64:g32'");
        for (float v : y2) ASSERT_EQ(v, 42.0f);
        auto pd3 = pd;
        pd3.weight_type = WoqWeightType::u4;
        XK_EXPECT_INVALID(WoqPlan(pd3).run({x.data(), y.data()}, w), "type=s8");
        XK_EXPECT_INVALID(plan.run({x.data(), y.data()}, WoqPackedWeight()), "weight=empty");
    }
    XK_EXPECT_INVALID(plan.run({nullptr, y.data()}, w), "A=null");
    XK_EXPECT_INVALID(plan.run({x.data(), nullptr}, w), "C=null");
    XK_EXPECT_INVALID(plan.run({x.data(), x.data()}, w), "overlaps A");
    {
        auto pd2 = pd;
        pd2.epilogue.bias = true;
        XK_EXPECT_INVALID(WoqPlan(pd2).run({x.data(), y.data()}, w), "bias=null");
        pd2 = pd;
        pd2.lda = 3;
        XK_EXPECT_INVALID(WoqPlan{pd2}, "lda=3");
        pd2 = pd;
        pd2.a_type = DType::s8;
        XK_EXPECT_ERROR(WoqPlan{pd2}, Status::unsupported, "a_type");
        pd2 = pd;
        pd2.weight_type = WoqWeightType::u4;
        pd2.K = 65;
        XK_EXPECT_INVALID(WoqPlan{pd2}, "K=65");
        pd2 = pd;
        pd2.weight_type = static_cast<WoqWeightType>(7);
        XK_EXPECT_INVALID(WoqPlan{pd2}, "weight_type=7");
    }
    for (float v : y) ASSERT_EQ(v, 42.0f);
}

// The C API: pack, import, run, errors (status, message, *out = NULL, nothing written).
TEST(Woq, CApi) {
    const int64_t N = 40, K = 128, M = 3;
    Weight w = make_weight(N, K, WoqWeightType::u4, 64, true, 21);
    xk_woq_weight* cw = nullptr;
    ASSERT_EQ(xk_woq_pack(XK_WOQ_U4, N, K, 64, w.q.data(), 0, w.scales.data(), w.zp.data(), &cw), XK_SUCCESS) << xk_last_error();
    std::vector<float> a(static_cast<size_t>(N * K)), b(a.size());
    ASSERT_EQ(xk_woq_dequantize(cw, a.data()), XK_SUCCESS);
    woq_dequantize(w.packed, b.data());
    EXPECT_EQ(a, b);
    std::vector<float> x(static_cast<size_t>(M * K)), y1(static_cast<size_t>(M * N)), y2(y1.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1 * double(i));
    xk_woq_desc d;
    xk_woq_desc_init(&d);
    d.M = M, d.N = N, d.K = K;
    d.act = XK_ACT_RELU;
    xk_woq_args args{x.data(), y1.data(), nullptr, nullptr};
    ASSERT_EQ(xk_woq_gemm(&d, &args, cw), XK_SUCCESS) << xk_last_error();
    WoqDesc pd;
    pd.M = M, pd.N = N, pd.K = K, pd.weight_type = WoqWeightType::u4;
    pd.epilogue.act = Activation::relu;
    woq_gemm(pd, {x.data(), y2.data()}, w.packed);
    EXPECT_EQ(y1, y2);
    // errors
    xk_woq_weight* bad = reinterpret_cast<xk_woq_weight*>(1);
    EXPECT_EQ(xk_woq_pack(XK_WOQ_U4, N, K, 48, w.q.data(), 0, w.scales.data(), nullptr, &bad), XK_INVALID_ARGUMENT);
    EXPECT_EQ(bad, nullptr);
    EXPECT_NE(std::string(xk_last_error()).find("group_size=48"), std::string::npos) << xk_last_error();
    d.N = N + 1;
    std::vector<float> y3(static_cast<size_t>(M * (N + 1)), 7.0f);
    args.C = y3.data();
    EXPECT_EQ(xk_woq_gemm(&d, &args, cw), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("weight="), std::string::npos) << xk_last_error();
    for (float v : y3) ASSERT_EQ(v, 7.0f);
    d.N = N;
    int raw = 99;
    std::memcpy(&d.act, &raw, sizeof raw);
    EXPECT_EQ(xk_woq_gemm(&d, &args, cw), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_woq_gemm(&d, &args, nullptr), XK_INVALID_ARGUMENT);
    std::vector<uint8_t> gg(static_cast<size_t>(2 * 34), 0);
    xk_woq_weight* g8 = nullptr;
    EXPECT_EQ(xk_woq_import_gguf(XK_GGUF_Q8_0, 2, 32, gg.data(), &g8), XK_SUCCESS);
    xk_woq_weight_destroy(g8);
    xk_woq_weight_destroy(cw);
    xk_woq_weight_destroy(nullptr);
}

// N wide enough that two threads split the blocks (the decode kernels' chunks are >= 256 KiB of
// weights) and the prefill slabs: 1 and 2 threads bit for bit, and against the oracle.
TEST(Woq, TwoThreadsSplitN) {
    for (auto t : {WoqWeightType::u4, WoqWeightType::s8}) {
        Weight w = make_weight(t == WoqWeightType::u4 ? 8200 : 4100, 128, t, 64, t == WoqWeightType::s8, 31);
        for (int64_t M : {1, 3, 18}) {
            Case cs;
            cs.M = M;
            cs.c = M == 3 ? DType::bf16 : DType::f32;
            check_plan_threads(w, cs, "split");
        }
    }
}
