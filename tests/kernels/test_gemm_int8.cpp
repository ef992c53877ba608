// INT8 GEMM (u8|s8 x s8 -> s32 | f32 | u8 | s8): the reference against a naive int64 oracle
// written here, then every ISA variant the machine and the cap allow against the reference, over
// odd sizes, tails, transposes, padded leading dimensions, misaligned pointers, every zero-point
// and s8-shift path, the saturation worst cases, requantized outputs (ties, saturation, NaN /
// Inf from a bias), PackedB reused across M, 1 and 2 threads, and bad input.
//
// Tolerances (JIT against the reference; u = 2^-24):
//   s32 C:   exact (modulo 2^32, both wrap).
//   u8 / s8: exact when the activation is none or relu (the f32 value before the requantization
//            is computed with the same float operations in the same order: float(acc) times
//            (alpha * a_scale) * b_scale[n], + bias, relu, + residual); with gelu / silu the JIT
//            activation is a few ulps from libm's, so a value next to a rounding boundary may
//            land one step away: |got - want| <= 1.
//   f32:     exact with activation none / relu and beta 0 or 1 (same operations); otherwise the
//            JIT fuses beta * C into an FMA (one rounding less) and evaluates gelu / silu its own
//            way (a few ulps): |got - want| <= 16 u (|want| + 64), 64 bounding |beta C| + |bias| +
//            |residual| of this data (C in [-32, 32], bias and residual in [-2, 2]), which
//            covers a cancellation of beta * C against the product.
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/c/gemm.h"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

namespace {

constexpr double kU = 1.0 / 16777216.0;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

bool requant_type(DType t) { return t == DType::u8 || t == DType::s8; }

// One problem: descriptor, operands (padded, misaligned), quantization parameters.
struct Problem {
    GemmDesc d;
    Buffer<uint8_t> A, B, C, res;
    Buffer<float> bias, bscales;
    float a_scale = 0.03f, c_scale = 0.5f;
    int32_t azp = 0, bzp = 0, czp = 0;
    size_t c_bytes = 0;

    // lda / ldb / ldc: 0 = packed, else padded by that many elements; misalign in bytes.
    Problem(const GemmDesc& desc, int pad, size_t mis, uint64_t seed) : d(desc) {
        const bool an = d.trans_a == Trans::N, bn = d.trans_b == Trans::N;
        if (pad) {
            d.lda = (an ? d.K : d.M) + pad;
            d.ldb = (bn ? d.N : d.K) + pad;
            d.ldc = d.N + pad;
            d.ld_residual = d.N + pad + 1;
        }
        const int64_t lda = d.lda ? d.lda : (an ? d.K : d.M), ldb = d.ldb ? d.ldb : (bn ? d.N : d.K);
        const int64_t ldc = d.ldc ? d.ldc : d.N, ldr = d.ld_residual ? d.ld_residual : d.N;
        const size_t na = static_cast<size_t>((an ? d.M : d.K) * lda), nb = static_cast<size_t>((bn ? d.K : d.N) * ldb);
        A.resize(na + 1, mis);
        B.resize(nb + 1, (mis * 3) % 7);
        const size_t ces = static_cast<size_t>(dtype_size(d.c_type));
        c_bytes = static_cast<size_t>(d.M * ldc) * ces;
        C.resize(c_bytes + 4, (mis % 2) * (ces == 1 ? 1 : 4));
        res.resize(static_cast<size_t>(d.M * ldr) * 4 + 4, 4 * (mis % 2));
        bias.resize(static_cast<size_t>(d.N) + 1, 4 * (mis % 3));
        bscales.resize(static_cast<size_t>(d.N) + 1);
        std::mt19937_64 g(seed);
        std::uniform_int_distribution<int> byte(0, 255);
        for (auto& v : A) v = static_cast<uint8_t>(byte(g));
        for (auto& v : B) v = static_cast<uint8_t>(byte(g));
        for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<uint8_t>(byte(g));
        if (d.c_type == DType::f32) {
            auto* c = reinterpret_cast<float*>(C.data());
            for (size_t i = 0; i < c_bytes / 4; ++i) c[i] = static_cast<float>(byte(g) - 128) * 0.25f;
        }
        std::uniform_real_distribution<float> u(-2.0f, 2.0f);
        for (auto& v : bias) v = u(g);
        for (auto& v : bscales) v = 0.001f + 0.01f * static_cast<float>(byte(g)) / 255.0f;
        if (d.residual_type == DType::f32) {
            auto* r = reinterpret_cast<float*>(res.data());
            for (size_t i = 0; i < res.size() / 4; ++i) r[i] = u(g);
        } else {
            auto* r = reinterpret_cast<bf16*>(res.data());
            for (size_t i = 0; i < res.size() / 2; ++i) r[i] = bf16(u(g));
        }
    }

    GemmArgs args() {
        GemmArgs a;
        a.A = A.data(), a.B = B.data(), a.C = C.data();
        if (d.epilogue.bias) a.bias = bias.data();
        if (d.epilogue.residual) a.residual = res.data();
        if (d.c_type != DType::s32) a.a_scale = &a_scale, a.b_scales = bscales.data();
        if (requant_type(d.c_type)) a.c_scale = &c_scale;
        a.a_zero_point = azp, a.b_zero_point = bzp, a.c_zero_point = czp;
        return a;
    }
    std::vector<uint8_t> c_copy() const { return {C.data(), C.data() + C.size()}; }
};

// The reference kernel on p (C overwritten).
void run_reference(Problem& p) {
    const detail::GemmSpec s = detail::gemm_check_desc("test", p.d);
    detail::GemmCall call;
    call.args = p.args();
    call.alpha = p.d.alpha, call.beta = p.d.beta;
    detail::create_gemm_reference(s)->run(call);
}

// Whether the JIT's f32 value equals the reference's bit for bit (see the top).
bool exact_f32(const GemmDesc& d) {
    const bool act_ok = d.epilogue.act == Activation::none || d.epilogue.act == Activation::relu;
    return act_ok && (d.beta == 0.0f || d.beta == 1.0f);
}

// got vs want C (same buffer layout), with the tolerance of the top; `what` names the case.
::testing::AssertionResult same_c(const Problem& p, const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                  const std::vector<uint8_t>& before) {
    const GemmDesc& d = p.d;
    const int64_t ldc = d.ldc ? d.ldc : d.N;
    const size_t es = static_cast<size_t>(dtype_size(d.c_type));
    int bad = 0;
    std::string msg;
    for (size_t i = 0; i < got.size(); ++i) {
        // bytes outside C's elements must be untouched
        const size_t e = i / es;
        const int64_t m = static_cast<int64_t>(e) / ldc, n = static_cast<int64_t>(e) % ldc;
        const bool inside = i < p.c_bytes && n < d.N && m < d.M;
        if (!inside) {
            if (got[i] != before[i] && bad++ < 5) msg += "\n  byte " + std::to_string(i) + " outside C was written";
            continue;
        }
        if (i % es) continue;
        bool ok;
        double g, w;
        if (d.c_type == DType::s32) {
            int32_t a, b;
            std::memcpy(&a, &got[i], 4), std::memcpy(&b, &want[i], 4);
            g = a, w = b, ok = a == b;
        } else if (d.c_type == DType::f32) {
            float a, b;
            std::memcpy(&a, &got[i], 4), std::memcpy(&b, &want[i], 4);
            g = a, w = b;
            if (exact_f32(d) || std::isnan(b) || std::isinf(b)) {
                ok = std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
            } else {
                ok = std::fabs(g - w) <= 16 * kU * (std::fabs(w) + 64.0);
            }
        } else {
            g = d.c_type == DType::u8 ? double(got[i]) : double(int8_t(got[i]));
            w = d.c_type == DType::u8 ? double(want[i]) : double(int8_t(want[i]));
            const bool exact = d.epilogue.act == Activation::none || d.epilogue.act == Activation::relu;
            ok = exact ? g == w : std::fabs(g - w) <= 1.0;
        }
        if (!ok && bad++ < 5)
            msg += "\n  C[" + std::to_string(m) + "," + std::to_string(n) + "] got " + std::to_string(g) + " want " +
                   std::to_string(w);
    }
    if (!bad) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " mismatches" << msg;
}

std::string describe(const GemmDesc& d, const Problem& p) {
    return std::string(dtype_name(d.a_type)) + "->" + dtype_name(d.c_type) + " " + trans_name(d.trans_a) +
           trans_name(d.trans_b) + " M" + std::to_string(d.M) + " N" + std::to_string(d.N) + " K" +
           std::to_string(d.K) + " lda" + std::to_string(d.lda) + " ldb" + std::to_string(d.ldb) + " ldc" +
           std::to_string(d.ldc) + " azp" + std::to_string(p.azp) + " bzp" + std::to_string(p.bzp) + " czp" +
           std::to_string(p.czp) + " beta" + std::to_string(d.beta) + " alpha" + std::to_string(d.alpha) +
           " act" + activation_name(d.epilogue.act) + (d.epilogue.bias ? " bias" : "") +
           (d.epilogue.residual ? " res" : "");
}

// Runs p through a plan at the current cap with 1 and 2 threads (and with B packed), compares
// against the reference.
void check_problem(Problem& p) {
    SCOPED_TRACE(describe(p.d, p));
    const std::vector<uint8_t> before = p.c_copy();
    run_reference(p);
    const std::vector<uint8_t> want = p.c_copy();
    const GemmPlan plan(p.d);
    std::vector<uint8_t> one_thread;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        std::memcpy(p.C.data(), before.data(), before.size());
        plan.run(p.args());
        const std::vector<uint8_t> got = p.c_copy();
        EXPECT_TRUE(same_c(p, got, want, before)) << "impl " << plan.impl_name() << " threads " << threads;
        // 1 and 2 threads: bit for bit (every output element is computed the same way)
        if (threads == 1) one_thread = got;
        else EXPECT_EQ(got, one_thread) << "1 vs 2 threads, impl " << plan.impl_name();
        if (threads == 2) {
            // packed B: bit for bit the unpacked run
            const PackedB pb = plan.pack_b(p.B.data());
            std::memcpy(p.C.data(), before.data(), before.size());
            plan.run(p.args(), pb);
            EXPECT_EQ(p.c_copy(), got) << "packed B, impl " << plan.impl_name();
        }
    }
    set_num_threads(0);
    std::memcpy(p.C.data(), want.data(), want.size());
}

// The naive int64 oracle of the s32 result (mod 2^32).
std::vector<int32_t> oracle_s32(Problem& p) {
    const GemmDesc& d = p.d;
    const bool an = d.trans_a == Trans::N, bn = d.trans_b == Trans::N;
    const int64_t lda = d.lda ? d.lda : (an ? d.K : d.M), ldb = d.ldb ? d.ldb : (bn ? d.N : d.K);
    std::vector<int32_t> out(static_cast<size_t>(d.M * d.N));
    for (int64_t m = 0; m < d.M; ++m)
        for (int64_t n = 0; n < d.N; ++n) {
            int64_t s = 0;
            for (int64_t k = 0; k < d.K; ++k) {
                const uint8_t ab = p.A[static_cast<size_t>(an ? m * lda + k : k * lda + m)];
                const int64_t a = d.a_type == DType::u8 ? int64_t(ab) : int64_t(int8_t(ab));
                const int64_t b = int8_t(p.B[static_cast<size_t>(bn ? k * ldb + n : n * ldb + k)]);
                s += (a - p.azp) * (b - p.bzp);
            }
            out[static_cast<size_t>(m * d.N + n)] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(s)));
        }
    return out;
}

GemmDesc int8_desc(DType at, DType ct, int64_t M, int64_t N, int64_t K) {
    GemmDesc d;
    d.M = M, d.N = N, d.K = K;
    d.a_type = at, d.b_type = DType::s8, d.c_type = ct;
    return d;
}

int32_t zp_for(DType t, int which) {
    // 0, the extremes and an interior value
    if (t == DType::u8) return std::array<int32_t, 4>{0, 255, 1, 128}[which % 4];
    return std::array<int32_t, 4>{0, -128, 127, -3}[which % 4];
}

}  // namespace

TEST(GemmInt8, ReferenceMatchesTheInt64Oracle) {
    int idx = 0;
    for (DType at : {DType::u8, DType::s8})
        for (Trans ta : {Trans::N, Trans::T})
            for (Trans tb : {Trans::N, Trans::T})
                for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {7, 17, 63}, {17, 7, 65}, {5, 9, 1023}}) {
                    GemmDesc d = int8_desc(at, DType::s32, M, N, K);
                    d.trans_a = ta, d.trans_b = tb;
                    Problem p(d, idx % 2 ? 3 : 0, static_cast<size_t>(idx % 3), 100 + idx);
                    p.azp = zp_for(at, idx), p.bzp = zp_for(DType::s8, idx / 2);
                    ++idx;
                    run_reference(p);
                    const auto want = oracle_s32(p);
                    const int64_t ldc = p.d.ldc ? p.d.ldc : N;
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t n = 0; n < N; ++n) {
                            int32_t g;
                            std::memcpy(&g, p.C.data() + (m * ldc + n) * 4, 4);
                            ASSERT_EQ(g, want[static_cast<size_t>(m * N + n)]) << describe(p.d, p) << " at " << m << "," << n;
                        }
                }
}

TEST(GemmInt8, EveryIsaMatchesTheReference) {
    const std::vector<std::array<int64_t, 3>> shapes =
        kSanitized ? std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {7, 17, 63}, {17, 33, 65}, {30, 65, 130}}
                   : std::vector<std::array<int64_t, 3>>{{1, 1, 1},    {1, 64, 17},  {7, 17, 63},   {17, 7, 65},
                                                         {16, 33, 4},  {29, 65, 130}, {63, 1, 1023}, {65, 97, 777},
                                                         {15, 31, 1541}, {130, 70, 263}};
    for_each_isa([&](Isa) {
        int idx = 0;
        for (const auto& sh : shapes)
            for (DType at : {DType::u8, DType::s8})
                for (DType ct : {DType::s32, DType::f32, DType::u8, DType::s8}) {
                    GemmDesc d = int8_desc(at, ct, sh[0], sh[1], sh[2]);
                    d.trans_a = idx % 3 == 1 ? Trans::T : Trans::N;
                    d.trans_b = idx % 2 == 1 ? Trans::T : Trans::N;
                    if (ct == DType::s32) {
                        d.beta = idx % 4 == 1 ? 1.0f : 0.0f;
                    } else {
                        d.b_scale_per_channel = idx % 2 == 0;
                        d.epilogue.bias = idx % 3 != 2;
                        d.epilogue.act = std::array<Activation, 4>{Activation::none, Activation::relu,
                                                                  Activation::gelu_erf, Activation::silu}[idx % 4];
                        d.epilogue.residual = idx % 5 >= 3;
                        d.residual_type = idx % 2 ? DType::bf16 : DType::f32;
                        if (ct == DType::f32) {
                            d.alpha = idx % 3 == 0 ? 1.0f : 0.75f;
                            d.beta = std::array<float, 3>{0.0f, 1.0f, -0.5f}[idx % 3];
                        }
                    }
                    Problem p(d, idx % 4 == 3 ? 5 : 0, static_cast<size_t>(idx % 4), 1000 + idx);
                    p.azp = zp_for(at, idx / 2), p.bzp = zp_for(DType::s8, idx / 3);
                    p.czp = zp_for(ct == DType::s8 ? DType::s8 : DType::u8, idx / 5);
                    p.c_scale = idx % 2 ? 0.37f : 4.0f;
                    ++idx;
                    check_problem(p);
                }
    }, /*with_avx2_vnni=*/true);
}

// Shapes large enough for several threads, so the parts split M and N: parts that share rows
// share their packed A panels and an unpacked B is packed panel by panel by the first part to
// reach it (the others wait). 3, 4 and 7 threads (more than the cores here: the waits must not
// depend on every thread running) give the 1-thread result bit for bit, unpacked and packed B.
TEST(GemmInt8, ManyThreadsShareTheirPackedPanels) {
    const std::vector<std::array<int64_t, 3>> shapes =
        kSanitized ? std::vector<std::array<int64_t, 3>>{{60, 700, 130}, {200, 150, 140}}
                   : std::vector<std::array<int64_t, 3>>{{100, 1000, 300}, {37, 2000, 64}, {300, 400, 520}, {513, 97, 700},
                                                                   {40, 70, 4300}};  // (AMX: two K blocks)
    for_each_isa([&](Isa) {
        int idx = 0;
        for (const auto& sh : shapes)
            for (DType ct : {DType::s32, DType::f32, DType::u8}) {
                GemmDesc d = int8_desc(idx % 2 ? DType::s8 : DType::u8, ct, sh[0], sh[1], sh[2]);
                d.trans_b = idx % 3 == 1 ? Trans::T : Trans::N;
                if (ct != DType::s32) d.epilogue.bias = true, d.b_scale_per_channel = idx % 2 == 0;
                Problem p(d, 0, static_cast<size_t>(idx % 4), 2000 + idx);
                p.azp = zp_for(d.a_type, idx + 1), p.bzp = zp_for(DType::s8, idx);
                p.czp = 3, p.c_scale = 50.0f;
                ++idx;
                SCOPED_TRACE(describe(p.d, p));
                const std::vector<uint8_t> before = p.c_copy();
                run_reference(p);
                const std::vector<uint8_t> want = p.c_copy();
                const GemmPlan plan(p.d);
                const PackedB pb = plan.pack_b(p.B.data());
                std::vector<uint8_t> one;
                for (int threads : {1, 3, 4, 7}) {
                    set_num_threads(threads);
                    for (int packed = 0; packed < 2; ++packed) {
                        std::memcpy(p.C.data(), before.data(), before.size());
                        if (packed) plan.run(p.args(), pb);
                        else plan.run(p.args());
                        const std::vector<uint8_t> got = p.c_copy();
                        if (one.empty()) {
                            EXPECT_TRUE(same_c(p, got, want, before)) << "impl " << plan.impl_name();
                            one = got;
                        } else {
                            EXPECT_EQ(got, one) << threads << " threads, packed " << packed << ", impl " << plan.impl_name();
                        }
                    }
                }
                set_num_threads(0);
            }
    }, /*with_avx2_vnni=*/true);
}

// s32 C without zero points, beta 0: nothing left to do on the sums, so the AMX kernel may store its
// full 32 x 32 blocks straight from the tiles into C (strided, unaligned rows) beside the tails;
// one and two K blocks (AMX: 4096 k a block); last row blocks of 16 rows (the 16-row kernels).
TEST(GemmInt8, ZeroPointFreeS32BlocksAndTails) {
    for_each_isa([&](Isa) {
        int idx = 0;
        for (auto s : {std::array<int64_t, 3>{64, 64, 64}, {96, 160, 700}, {65, 97, 300}, {64, 40, 4300}, {48, 100, 300},
                       {80, 64, 4300}})
            for (DType at : {DType::u8, DType::s8}) {
                if (kSanitized && (s[2] > 1000 || at == DType::s8)) continue;  // (sanitizer builds: fewer)
                GemmDesc d = int8_desc(at, DType::s32, s[0], s[1], s[2]);
                d.trans_b = idx % 2 ? Trans::T : Trans::N;
                Problem p(d, idx % 3 == 1 ? 3 : 0, static_cast<size_t>(idx % 4), 3000 + idx);
                ++idx;
                check_problem(p);
            }
    }, /*with_avx2_vnni=*/true);
}

// The AMX kernel's shared packed A (a thread whose columns span several 1 MiB B chunks), at 1 / 2 /
// 5 threads with M, N and K tails: the same bits as the reference.
TEST(GemmInt8, AmxSharedPackedA) {
    for_each_isa([&](Isa isa) {
        if (isa < Isa::amx || kSanitized) return;
        GemmDesc d = int8_desc(DType::u8, DType::f32, 70, 1100, 8300);
        d.epilogue.bias = true, d.b_scale_per_channel = true;
        Problem p(d, 0, 1, 2100);
        p.azp = zp_for(d.a_type, 3), p.bzp = zp_for(DType::s8, 2);
        SCOPED_TRACE(describe(p.d, p));
        const std::vector<uint8_t> before = p.c_copy();
        run_reference(p);
        const std::vector<uint8_t> want = p.c_copy();
        const GemmPlan plan(p.d);
        for (int threads : {1, 2, 5}) {
            set_num_threads(threads);
            std::memcpy(p.C.data(), before.data(), before.size());
            plan.run(p.args());
            EXPECT_TRUE(same_c(p, p.c_copy(), want, before)) << threads << " threads, impl " << plan.impl_name();
        }
        set_num_threads(0);
    });
}

// The AMX kernel's packing of B (generated, no tile instruction runs: any host) against the tile
// layout written out here: 32-column blocks of k steps of 64, two 16-column tiles a step, tile row
// p = 16 dwords of the k quad 4p..4p+3 (lower k in the low byte), zeros beyond K and N, then the
// wrapping column sums. Plain B (the permute interleave of whole blocks and steps, the unpacks of
// an N tail, the scalar K tail) and B^T, packed strides; the earlier packing (XK_AMX_BPACK=0 at
// process start) gives the same bytes.
TEST(GemmInt8, AmxPackedBLayout) {
    if (!cpu_info().avx512f || !cpu_info().avx512bw) return;
    struct Shape {
        int64_t K, N, pad;
    };
    for (Trans tb : {Trans::N, Trans::T})
        for (Shape sh : {Shape{64, 32, 0}, Shape{200, 70, 3}, Shape{1, 33, 0}, Shape{129, 96, 64}, Shape{63, 31, 1}, Shape{320, 200, 5}}) {
            GemmDesc d = int8_desc(DType::u8, DType::s32, 32, sh.N, sh.K);
            d.trans_b = tb;
            const int64_t ldb = (tb == Trans::N ? sh.N : sh.K) + sh.pad;
            d.ldb = ldb;
            std::vector<uint8_t> B(static_cast<size_t>((tb == Trans::N ? sh.K : sh.N) * ldb));
            std::mt19937_64 g(static_cast<uint64_t>(sh.K * 1000 + sh.N));
            for (auto& v : B) v = static_cast<uint8_t>(g());
            const auto kern = detail::create_gemm_amx_int8(detail::gemm_check_desc("test", d));
            const auto packed = kern->pack_b(B.data());
            const int64_t nkb = (sh.K + 63) / 64, nblocks = (sh.N + 31) / 32;
            ASSERT_EQ(packed->bytes, static_cast<size_t>(nblocks * nkb * 2048 + nblocks * 32 * 4));
            const auto* got = static_cast<const uint8_t*>(packed->data);
            auto b_at = [&](int64_t k, int64_t n) -> uint8_t {
                if (k >= sh.K || n >= sh.N) return 0;
                return B[static_cast<size_t>(tb == Trans::N ? k * ldb + n : n * ldb + k)];
            };
            for (int64_t nb = 0; nb < nblocks; ++nb) {
                for (int64_t kb = 0; kb < nkb; ++kb)
                    for (int t = 0; t < 2; ++t)
                        for (int p = 0; p < 16; ++p)
                            for (int c = 0; c < 16; ++c)
                                for (int j = 0; j < 4; ++j) {
                                    const size_t off = static_cast<size_t>(((nb * nkb + kb) * 2 + t) * 1024 + p * 64 + c * 4 + j);
                                    ASSERT_EQ(got[off], b_at(kb * 64 + 4 * p + j, nb * 32 + t * 16 + c))
                                        << "trans_b " << (tb == Trans::T) << " K " << sh.K << " N " << sh.N << " nb " << nb
                                        << " kb " << kb << " half " << t << " p " << p << " c " << c << " j " << j;
                                }
                for (int64_t c = 0; c < 32; ++c) {
                    uint32_t want = 0;
                    for (int64_t k = 0; k < sh.K; ++k) want += static_cast<uint32_t>(int32_t(int8_t(b_at(k, nb * 32 + c))));
                    int32_t sum;
                    std::memcpy(&sum, got + nblocks * nkb * 2048 + (nb * 32 + c) * 4, 4);
                    ASSERT_EQ(static_cast<uint32_t>(sum), want) << "column sum " << nb * 32 + c;
                }
            }
        }
}

TEST(GemmInt8, SaturationWorstCasesAndEveryShiftPath) {
    // All 255 x all -128, all 127 x 127, s8 A = -128 with its extremes; K long enough that the
    // s32 sum wraps (255 * 128 * 70000 > 2^31) and the short one that does not.
    struct Fill {
        uint8_t a, b;
    };
    for_each_isa([&](Isa isa) {
        for (DType at : {DType::u8, DType::s8})
            for (Fill f : {Fill{255, 0x80}, Fill{127, 127}, Fill{0x80, 0x80}, Fill{0x80, 127}, Fill{0, 0x80}})
                for (int64_t K : {int64_t(1023), int64_t(kSanitized ? 3000 : 70001)})
                    for (int z = 0; z < 4; ++z) {
                        // the long K (wrapping sums): every fill, one zero-point pair, 3 rows, the top ISA
                        if (K > 1023 && (z > 0 || isa != available_isas().back())) continue;
                        GemmDesc d = int8_desc(at, DType::s32, K > 1023 ? 3 : 9, 33, K);
                        Problem p(d, 0, 0, 7);
                        std::memset(p.A.data(), f.a, p.A.size());
                        std::memset(p.B.data(), f.b, p.B.size());
                        p.azp = zp_for(at, z), p.bzp = zp_for(DType::s8, z + 1);
                        const auto want = oracle_s32(p);
                        check_problem(p);  // (leaves the reference's C in p.C)
                        for (size_t i = 0; i < want.size(); ++i) {
                            int32_t g;
                            std::memcpy(&g, p.C.data() + i * 4, 4);
                            ASSERT_EQ(g, want[i]) << describe(p.d, p);
                        }
                    }
    }, /*with_avx2_vnni=*/true);
}

TEST(GemmInt8, RequantizationTiesSaturationNanAndInf) {
    // a_scale = b_scale = 1, alpha 1, c_scale 2: x = acc exactly, x * 0.5 is a tie for every odd
    // acc (to even); a c_scale of 1/64 saturates; the bias puts NaN, +Inf and -Inf in columns 0-2.
    const float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
    for_each_isa([&](Isa) {
        for (DType ct : {DType::u8, DType::s8})
            for (float cs : {2.0f, 1.0f / 64.0f, 3.0f})
                for (Activation act : {Activation::none, Activation::relu}) {
                    GemmDesc d = int8_desc(DType::u8, ct, 19, 37, 9);
                    d.epilogue.bias = true;
                    d.epilogue.act = act;
                    Problem p(d, 0, 1, 3);
                    for (size_t i = 0; i < p.A.size(); ++i) p.A[i] = static_cast<uint8_t>(i % 5);
                    for (size_t i = 0; i < p.B.size(); ++i) p.B[i] = static_cast<uint8_t>(int8_t((i * 7) % 9) - 4);
                    p.a_scale = 1.0f;
                    for (auto& v : p.bscales) v = 1.0f;
                    for (int64_t n = 0; n < d.N; ++n) p.bias[static_cast<size_t>(n)] = 0.0f;
                    p.bias[0] = kNaN, p.bias[1] = kInf, p.bias[2] = -kInf;
                    p.c_scale = cs;
                    p.czp = ct == DType::u8 ? 7 : -5;
                    check_problem(p);  // JIT == reference bit for bit; p.C holds the reference's
                    // The reference against the definition.
                    const int lo = ct == DType::u8 ? 0 : -128, hi = ct == DType::u8 ? 255 : 127;
                    for (int64_t m = 0; m < d.M; ++m)
                        for (int64_t n = 0; n < d.N; ++n) {
                            int64_t acc = 0;
                            for (int64_t k = 0; k < d.K; ++k)
                                acc += int64_t(p.A[static_cast<size_t>(m * d.K + k)]) *
                                       int64_t(int8_t(p.B[static_cast<size_t>(k * d.N + n)]));
                            double x = double(acc) + double(p.bias[static_cast<size_t>(n)]);
                            if (act == Activation::relu) x = x > 0 ? x : 0;
                            const float inv = 1.0f / cs;
                            double q = std::isnan(x) ? lo : std::nearbyint(double(float(x) * inv)) + p.czp;
                            q = std::min<double>(hi, std::max<double>(lo, q));
                            if (std::isnan(x) && act == Activation::relu) q = std::min(hi, std::max(lo, p.czp));
                            const uint8_t byte = p.C[static_cast<size_t>(m * d.N + n)];
                            const int got = ct == DType::u8 ? int(byte) : int(int8_t(byte));
                            ASSERT_EQ(got, int(q)) << "C[" << m << "," << n << "] " << dtype_name(ct) << " cs " << cs;
                        }
                }
    }, /*with_avx2_vnni=*/true);
}

TEST(GemmInt8, PackedBServesEveryM) {
    for_each_isa([&](Isa) {
        for (DType ct : {DType::s32, DType::f32, DType::u8}) {
            GemmDesc d0 = int8_desc(DType::s8, ct, 64, 77, 300);
            d0.trans_b = Trans::T;
            if (ct != DType::s32) d0.epilogue.bias = true;
            Problem p0(d0, 0, 0, 5);
            const GemmPlan plan0(d0);
            const PackedB pb = plan0.pack_b(p0.B.data());
            for (int64_t M : {1, 2, 5, 16, 17, 64, 200}) {
                GemmDesc d = d0;
                d.M = M;
                Problem p(d, 0, 1, 9);
                std::memcpy(p.B.data(), p0.B.data(), p0.B.size());
                p.azp = -7, p.bzp = 3, p.czp = 11;
                const auto before = p.c_copy();
                run_reference(p);
                const auto want = p.c_copy();
                const GemmPlan plan(d);
                std::memcpy(p.C.data(), before.data(), before.size());
                plan.run(p.args(), pb);
                EXPECT_TRUE(same_c(p, p.c_copy(), want, before)) << "M " << M << " plan " << plan.impl_name();
            }
        }
    }, /*with_avx2_vnni=*/true);
}

TEST(GemmInt8, SelectionAtEachCap) {
    GemmDesc d = int8_desc(DType::u8, DType::u8, 64, 64, 64);
    for (Isa isa : available_isas()) {
        IsaCap cap(isa);
        const std::string name = GemmPlan(d).impl_name();
        GemmDesc dec = d;
        dec.M = 16;
        const std::string dec_name = GemmPlan(dec).impl_name();
        // the tiles from 32 rows up; below, for a PackedB (a plain B: the VPDPBUSD kernel)
        if (isa >= Isa::amx)
            EXPECT_EQ(name + " " + dec_name, "amx:int8 amx:int8:decode");
        else
            EXPECT_EQ(dec_name, name) << isa_name(isa);  // (one kernel for every M below amx)
        if (isa >= Isa::amx) {
        } else if (isa >= Isa::avx512_vnni)
            EXPECT_EQ(name, "jit:avx512_vnni:int8");
        else if (isa >= Isa::avx2_vnni && isa_supported(Isa::avx2_vnni))
            EXPECT_EQ(name, "jit:avx2_vnni:int8") << isa_name(isa);
        else if (isa >= Isa::avx2)
            EXPECT_EQ(name, "jit:avx2:int8") << isa_name(isa);
        else
            EXPECT_EQ(name, "ref:scalar") << isa_name(isa);
    }
}

TEST(GemmInt8, BadInputIsRejectedNamingTheArgument) {
    const Status inv = Status::invalid_argument, uns = Status::unsupported;
    auto expect_desc = [&](const GemmDesc& d, Status st, const std::string& needle) {
        XK_EXPECT_ERROR(GemmPlan{d}, st, "xk::GemmPlan: " + needle);
    };
    GemmDesc q = int8_desc(DType::u8, DType::u8, 3, 5, 7);
    GemmDesc d = q;
    d.beta = 1.0f, expect_desc(d, uns, "beta=1 is not supported with c_type=u8");
    d = q, d.c_type = DType::s8, d.beta = 0.5f, expect_desc(d, uns, "beta=0.5 is not supported with c_type=s8");
    d = q, d.a_type = DType::f32, d.b_type = DType::f32, expect_desc(d, uns, "a_type=f32 b_type=f32 c_type=u8");
    d = q, d.a_type = DType::bf16, d.b_type = DType::bf16, d.c_type = DType::s8,
    expect_desc(d, uns, "a_type=bf16 b_type=bf16 c_type=s8");
    d = q, d.b_type = DType::u8, expect_desc(d, uns, "a_type=u8 b_type=u8 c_type=u8");
    d = q, d.c_type = DType::s32, d.b_scale_per_channel = true, expect_desc(d, inv, "b_scale_per_channel=true");

    for (DType ct : {DType::u8, DType::s8}) {
        GemmDesc dd = q;
        dd.c_type = ct;
        Problem p(dd, 0, 0, 1);
        const GemmPlan plan(dd);
        plan.run(p.args());
        auto expect = [&](const GemmArgs& a, const std::string& needle) {
            XK_EXPECT_INVALID(plan.run(a), "xk::GemmPlan::run: " + needle);
            XK_EXPECT_INVALID(gemm(dd, a), "xk::gemm: " + needle);
        };
        GemmArgs a = p.args();
        a.c_scale = nullptr, expect(a, "c_scale=null must not be a null pointer");
        for (float bad : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
            float v = bad;
            a = p.args(), a.c_scale = &v, expect(a, "c_scale=");
            a = p.args(), a.c_scale = &v;
            XK_EXPECT_INVALID(plan.run(a), "must be finite and > 0");
        }
        const int32_t lo = ct == DType::u8 ? 0 : -128, hi = ct == DType::u8 ? 255 : 127;
        a = p.args(), a.c_zero_point = lo - 1, expect(a, "c_zero_point=" + std::to_string(lo - 1));
        a = p.args(), a.c_zero_point = hi + 1, expect(a, "c_zero_point=" + std::to_string(hi + 1));
        a = p.args(), a.a_scale = nullptr, expect(a, "a_scale=null");
        a = p.args(), a.b_scales = nullptr, expect(a, "b_scales=null");
        a = p.args(), a.a_zero_point = 256, expect(a, "a_zero_point=256");
        a = p.args(), a.b_zero_point = -129, expect(a, "b_zero_point=-129");
        // C over c_scale
        a = p.args();
        a.c_scale = reinterpret_cast<const float*>(p.C.data());
        XK_EXPECT_INVALID(plan.run(a), "overlaps c_scale");
        // nothing written on a rejected call
        const auto before = p.c_copy();
        a = p.args(), a.c_zero_point = hi + 1;
        XK_EXPECT_INVALID(plan.run(a), "c_zero_point");
        EXPECT_EQ(p.c_copy(), before);
    }
}

TEST(GemmInt8, CApiRequantizedOutput) {
    GemmDesc d = int8_desc(DType::s8, DType::s8, 9, 40, 33);
    d.epilogue.bias = true;
    d.b_scale_per_channel = true;
    Problem p(d, 0, 0, 77);
    p.azp = 5, p.bzp = -2, p.czp = -9, p.c_scale = 0.05f;
    run_reference(p);
    const auto want = p.c_copy();
    std::memset(p.C.data(), 0, p.C.size());
    xk_gemm_desc cd;
    xk_gemm_desc_init(&cd);
    cd.M = d.M, cd.N = d.N, cd.K = d.K;
    cd.a_type = XK_DTYPE_S8, cd.b_type = XK_DTYPE_S8, cd.c_type = XK_DTYPE_S8;
    cd.bias = 1, cd.b_scale_per_channel = 1;
    xk_gemm_args ca;
    xk_gemm_args_init(&ca);
    const GemmArgs g = p.args();
    ca.A = g.A, ca.B = g.B, ca.C = g.C, ca.bias = g.bias, ca.a_scale = g.a_scale, ca.b_scales = g.b_scales;
    ca.a_zero_point = g.a_zero_point, ca.b_zero_point = g.b_zero_point;
    ca.c_scale = g.c_scale, ca.c_zero_point = g.c_zero_point;
    ASSERT_EQ(xk_gemm(&cd, &ca), XK_SUCCESS);
    EXPECT_EQ(std::memcmp(p.C.data(), want.data(), p.c_bytes), 0);
    ca.c_zero_point = 200;
    EXPECT_EQ(xk_gemm(&cd, &ca), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("c_zero_point=200"), std::string::npos) << xk_last_error();
}

TEST(GemmInt8, AvxVnniLevelInEvexForm) {
    // The avx2_vnni kernel with the EVEX encoding of VPDPBUSD ymm (what an AVX512-VNNI machine
    // without AVX-VNNI runs), forced by XK_GEMM_INT8_EVEX=1 on shapes no other test uses (the
    // kernel cache keys the two forms apart).
    if (!isa_supported(Isa::avx2_vnni) || !cpu_info().avx512_vnni || !cpu_info().avx512vl) GTEST_SKIP() << "no AVX512-VNNI + VL";
    IsaCap cap(Isa::avx2_vnni);
    setenv("XK_GEMM_INT8_EVEX", "1", 1);
    int idx = 0;
    for (DType ct : {DType::s32, DType::f32, DType::u8, DType::s8}) {
        GemmDesc d = int8_desc(idx % 2 ? DType::s8 : DType::u8, ct, 23, 41, 1601);
        if (ct != DType::s32) d.epilogue.bias = true, d.epilogue.act = Activation::relu;
        Problem p(d, 1, 1, 400 + idx);
        p.azp = 3, p.bzp = -1, p.czp = ct == DType::s8 ? -2 : 2;
        ++idx;
        check_problem(p);
    }
    unsetenv("XK_GEMM_INT8_EVEX");
}
