// fp32 GEMM through oneDNN's matmul (the "onednn" registry entry) and the measured routing
// between it and xk's kernels (gemm_tune.cpp):
//   - the entry forced directly against a double-precision oracle written here (and beside the
//     reference): odd sizes, both transposes, leading dimensions above the minimum, misaligned
//     pointers (padding holds NaN; C's padding must stay untouched), alpha / beta classes
//     including beta = 0 over a C full of NaN and a NaN beta, every epilogue, f32 / bf16
//     residual with ld_residual, packed B (the reference layout), 1 and 2 threads, and several
//     threads running one kernel at once;
//   - autotuning: a plan of an eligible spec picks one of the two candidates, the decision is
//     cached (a second plan and one-shot calls do not time again; one-shot calls never tune),
//     results are right either way, PackedB works across plans of other M in both directions,
//     the verbose log shows both times and the pick, and bad input fails as without tuning.
//
// Tolerance per element of C (u = 2^-24), as in test_gemm_jit.cpp (the bound holds for any
// summation order):
//   e0 = 2 (K + 5) u |alpha| sum_k |a_mk b_kn| + 2u (|beta C| + |bias|)
//   |got - want| <= L e0 + kActU u (|x| + |act(x)|) [gelu, silu] + u (|act(x)| + |res|)
// with x the value entering the activation, L = 1.2 (gelu, silu; 1 otherwise) and kActU = 16:
// oneDNN's eltwise post-ops are polynomial approximations a few ulp off the libm functions.
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.hpp"
#include "kernels/gemm_f32_problem.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;

#if defined(__SANITIZE_THREAD__)
// TSan cannot see libgomp's synchronisation (the reason the TSan preset threads xk with
// std::thread), and oneDNN is an OpenMP build: accesses inside oneDNN by its reused OpenMP
// workers look unordered. Reports whose stacks are inside oneDNN / libgomp are those; everything
// of ours around them (the kernel's primitive table, per-thread scratchpads and streams, the
// decision cache, plans run from several std::threads) stays checked.
extern "C" const char* __tsan_default_suppressions() {
    return "race:libdnnl.so\n"
           "called_from_lib:libgomp.so\n";
}
#endif

namespace {

using xk::test::gemm_f32::act_d;
using xk::test::gemm_f32::Case;
using xk::test::gemm_f32::kActs;
using xk::test::gemm_f32::kNaN;
using xk::test::gemm_f32::kU;

// oneDNN's eltwise post-ops are polynomial approximations a few ulp off the libm functions.
constexpr double kActU = 16.0;

struct Problem : xk::test::gemm_f32::Problem {
    explicit Problem(const Case& cs) : xk::test::gemm_f32::Problem(cs, kActU) {}
};

using Impl = detail::Impl<detail::GemmSpec, detail::GemmKernel>;

const Impl& onednn_impl() { return detail::gemm_registry().find("onednn"); }

bool have_onednn_entry() { return isa_supported(onednn_impl().isa); }

struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

// Autotuning on for the scope, with an empty decision cache before and after.
struct TuneGuard {
    explicit TuneGuard(bool on = true) {
        detail::gemm_tune_clear();
        set_gemm_autotune(on);
    }
    ~TuneGuard() {
        set_gemm_autotune(false);
        detail::gemm_tune_clear();
    }
};

// The oneDNN kernel forced on one case: unpacked, then with its packed B; the reference too
// when asked. Both within the oracle's tolerance.
void run_forced(const Case& c, bool with_ref = false) {
    Problem p(c);
    const detail::GemmSpec spec = detail::gemm_check_desc("test", c.desc());
    ASSERT_TRUE(detail::onednn_gemm_supports(spec)) << c.str();
    const auto k = detail::gemm_registry().get(spec, onednn_impl()).kernel;
    detail::GemmCall call;
    call.args = p.args();
    call.alpha = c.alpha, call.beta = c.beta;
    p.reset_c();
    k->run(call);
    EXPECT_TRUE(p.check("onednn " + k->backend_info()));
    const auto packed = k->pack_b(p.B.data());
    EXPECT_EQ(packed->layout, k->packed_layout());
    EXPECT_EQ(packed->layout, detail::gemm_reference_packed_layout(spec));  // interchangeable with ref:scalar
    call.args.B = nullptr, call.packed_b = packed.get();
    p.reset_c();
    k->run(call);
    EXPECT_TRUE(p.check("onednn packed B"));
    if (with_ref) {
        const auto r = detail::gemm_registry().get(spec, detail::gemm_registry().find("ref:scalar")).kernel;
        p.reset_c();
        r->run(call);  // the same packed B, read by the reference
        EXPECT_TRUE(p.check("ref:scalar with oneDNN's packed B"));
    }
}

}  // namespace

// ---- the oneDNN kernel, forced --------------------------------------------------------------

TEST(GemmOnednn, OddSizesTransposesLeadingDimsAlphaBeta) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    ThreadsGuard tg;
    const float alphas[] = {1.0f, -1.5f, 0.25f};
    const float betas[] = {0.0f, 1.0f, 0.75f, -2.0f};
    int idx = 0;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for (int64_t K : {1, 5, 67}) {
            for (int64_t M : {1, 2, 7, 17, 33}) {
                for (int64_t N : {1, 7, 17, 40}) {
                    if ((idx++ + threads) % 2) continue;  // half the grid per thread count
                    Case c;
                    c.M = M, c.N = N, c.K = K;
                    c.ta = idx % 2 ? Trans::T : Trans::N;
                    c.tb = (idx / 2) % 2 ? Trans::T : Trans::N;
                    c.alpha = alphas[idx % 3];
                    c.beta = betas[idx % 4];
                    c.pad_a = idx % 3, c.pad_b = (idx / 3) % 2 * 5, c.pad_c = idx % 4 == 0 ? 3 : 0;
                    c.misalign = static_cast<size_t>(idx % 5);
                    c.seed = static_cast<uint64_t>(idx);
                    run_forced(c, idx % 7 == 0);
                    if (HasFailure()) return;
                }
            }
        }
    }
}

TEST(GemmOnednn, LargerShapesOneAndTwoThreads) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    ThreadsGuard tg;
    const int64_t shapes[][3] = {{127, 255, 300}, {300, 65, 129}, {64, 301, 96}};
    int idx = 0;
    for (const auto& s : shapes)
        for (int threads : {1, 2}) {
            set_num_threads(threads);
            Case c;
            c.M = s[0], c.N = s[1], c.K = s[2];
            c.ta = idx % 2 ? Trans::T : Trans::N, c.tb = idx % 3 ? Trans::N : Trans::T;
            c.beta = idx % 2 ? 0.5f : 0.0f, c.alpha = idx % 3 ? 1.0f : 1.25f;
            c.bias = true, c.act = kActs[idx % 5], c.res = idx % 3;
            c.pad_a = 3, c.pad_b = idx % 2, c.pad_c = 1, c.pad_r = 2;
            c.misalign = static_cast<size_t>(idx % 3);
            c.seed = 50 + static_cast<uint64_t>(idx++);
            run_forced(c);
            if (HasFailure()) return;
        }
}

TEST(GemmOnednn, EveryEpilogue) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    const int64_t shapes[][3] = {{17, 33, 41}, {29, 45, 70}};
    int idx = 0;
    for (const auto& s : shapes)
        for (Activation act : kActs)
            for (bool bias : {false, true})
                for (int res : {0, 1, 2})
                    for (float beta : {0.0f, 1.0f, 0.3f}) {
                        if ((idx++ % 2) != (s[0] == 17 ? 0 : 1) && !(bias && res)) continue;  // a sample
                        Case c;
                        c.M = s[0], c.N = s[1], c.K = s[2];
                        c.act = act, c.bias = bias, c.res = res, c.beta = beta;
                        c.alpha = idx % 2 ? 1.0f : 0.8f;  // alpha != 1 with bias: alpha * acc + bias, not alpha * (acc + bias)
                        c.ta = idx % 3 == 1 ? Trans::T : Trans::N, c.tb = idx % 4 == 2 ? Trans::T : Trans::N;
                        c.pad_r = idx % 2 ? 0 : 5;
                        c.misalign = static_cast<size_t>(idx % 3);
                        c.seed = 300 + static_cast<uint64_t>(idx);
                        run_forced(c);
                        if (HasFailure()) return;
                    }
}

// beta = 0 never reads C (NaN there does not leak); a NaN beta is not zero (C is read, every
// element NaN); alpha NaN propagates; each beta value of one kernel (the "other" class) gets
// the right sum.
TEST(GemmOnednn, NaNSemanticsAndBetaValuesOfOneKernel) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    Case c;
    c.M = 9, c.N = 13, c.K = 11, c.bias = true, c.act = Activation::relu;
    c.beta = 0.0f;
    run_forced(c);  // C full of NaN, beta 0
    for (float alpha : {kNaN, 1.0f}) {
        Case n = c;
        n.beta = alpha == 1.0f ? kNaN : 0.5f, n.alpha = alpha, n.act = Activation::none;
        Problem p(n);
        const detail::GemmSpec spec = detail::gemm_check_desc("test", n.desc());
        const auto k = detail::gemm_registry().get(spec, onednn_impl()).kernel;
        detail::GemmCall call;
        call.args = p.args(), call.alpha = n.alpha, call.beta = n.beta;
        k->run(call);
        for (int64_t m = 0; m < n.M; ++m)
            for (int64_t j = 0; j < n.N; ++j) ASSERT_TRUE(std::isnan(p.C[m * p.d.ldc + j])) << m << "," << j << " " << n.str();
    }
    // One "other" kernel, several beta values (a primitive per value, made on first use).
    Case o = c;
    o.beta = 0.3f;
    const detail::GemmSpec spec = detail::gemm_check_desc("test", o.desc());
    const auto k = detail::gemm_registry().get(spec, onednn_impl()).kernel;
    for (float beta : {0.3f, -2.0f, 0.5f, 7.0f, 0.3f}) {
        o.beta = beta;
        Problem p(o);
        detail::GemmCall call;
        call.args = p.args(), call.alpha = o.alpha, call.beta = beta;
        k->run(call);
        EXPECT_TRUE(p.check("beta " + std::to_string(beta)));
    }
}

// Several threads run one kernel at once (their own C), each with its own xk thread count; the
// caller's OpenMP thread count is left as it was.
TEST(GemmOnednn, ConcurrentRunsAndCallerThreadCountKept) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    ThreadsGuard tg;
    Case c;
    c.M = 128, c.N = 128, c.K = 1024, c.bias = true, c.act = Activation::gelu_erf, c.res = 1, c.beta = 0.5f;
    const Problem ref(c);
    detail::gemm_tune_record(detail::gemm_check_desc("test", c.desc()), "onednn");
    set_gemm_autotune(true);
    const GemmPlan plan(c.desc());
    set_gemm_autotune(false);
    detail::gemm_tune_clear();
    ASSERT_STREQ(plan.impl_name(), "onednn");
    omp_set_num_threads(3);
    set_num_threads(2);
    std::vector<Problem> ps;
    ps.reserve(4);
    for (int t = 0; t < 4; ++t) ps.emplace_back(c);  // same seed: same operands and oracle
    std::atomic<int> failures{0};
    std::vector<std::thread> th;
    for (int t = 0; t < 4; ++t)
        th.emplace_back([&, t] {
            for (int rep = 0; rep < 3; ++rep) {
                ps[t].reset_c();
                plan.run(ps[t].args());
                if (!ps[t].check("thread " + std::to_string(t))) failures.fetch_add(1);
            }
        });
    for (auto& t : th) t.join();
    EXPECT_EQ(failures.load(), 0);
    EXPECT_EQ(omp_get_max_threads(), 3);  // this thread's OpenMP setting, untouched by the runs
    plan.run(ps[0].args());
    EXPECT_EQ(omp_get_max_threads(), 3);
    omp_set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

TEST(GemmOnednn, NeverSelectedByItselfAndRejectsWhatItCannotRun) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    GemmDesc d;
    d.M = d.N = d.K = 512;
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    EXPECT_TRUE(onednn_impl().supports(spec));
    EXPECT_FALSE(onednn_impl().selectable);
    EXPECT_STRNE(detail::gemm_registry().select(spec, max_isa()).name, "onednn");
    TuneGuard off(false);
    EXPECT_STRNE(GemmPlan(d).impl_name(), "onednn");  // with autotuning off
    GemmDesc h = d;
    h.a_type = h.b_type = DType::bf16;
    const detail::GemmSpec hs = detail::gemm_check_desc("test", h);
    EXPECT_FALSE(detail::onednn_gemm_supports(hs));
    XK_EXPECT_ERROR(detail::create_gemm_onednn(hs), Status::unsupported, "is not supported");
    GemmDesc z = d;
    z.K = 0;
    EXPECT_FALSE(detail::onednn_gemm_supports(detail::gemm_check_desc("test", z)));
}

// ---- routing and autotuning ------------------------------------------------------------------

// An eligible spec is timed once: the plan picks the registry's kernel or oneDNN, a second plan
// and one-shot calls reuse the decision, and results are right either way.
TEST(GemmTune, PicksOneOfTwoCachesTheDecisionAndStaysCorrect) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    TuneGuard tune;
    Case c;
    c.M = 256, c.N = 256, c.K = 256;  // 2^25 flops: the threshold
    c.bias = true, c.act = Activation::relu, c.beta = 1.0f;
    const GemmDesc d = c.desc();
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    ASSERT_TRUE(detail::gemm_tune_eligible(spec));
    const std::string registry_pick = detail::gemm_registry().select(spec, max_isa()).name;

    testing::internal::CaptureStderr();
    set_verbose(1);
    const GemmPlan p1(d);
    set_verbose(0);
    const std::string log = testing::internal::GetCapturedStderr();
    const std::string picked = p1.impl_name();
    EXPECT_TRUE(picked == registry_pick || picked == "onednn") << picked;
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 1u);
    // The log names both candidates with their times and the pick.
    EXPECT_NE(log.find("xk_verbose,tune,gemm," + spec.key()), std::string::npos) << log;
    EXPECT_NE(log.find(registry_pick + "="), std::string::npos) << log;
    EXPECT_NE(log.find("onednn("), std::string::npos) << log;
    EXPECT_NE(log.find(",pick:" + picked), std::string::npos) << log;

    const GemmPlan p2(d);
    EXPECT_STREQ(p2.impl_name(), p1.impl_name());
    const auto st = detail::gemm_tune_stats();
    EXPECT_EQ(st.tunings, 1u) << "the second plan timed again";
    EXPECT_EQ(st.hits, 1u);

    Problem p(c);
    p2.run(p.args());
    EXPECT_TRUE(p.check(std::string("plan ") + p2.impl_name()));
    p.reset_c();
    gemm(d, p.args());  // one-shot: the cached decision
    EXPECT_TRUE(p.check("one-shot"));
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 1u);
    EXPECT_EQ(detail::gemm_tune_stats().hits, 2u);
}

// One-shot calls never tune (no timing, no scratch buffers), small specs are never timed, and
// with autotuning off a recorded decision is ignored.
TEST(GemmTune, OneShotNeverTunesAndSmallSpecsAreNotTimed) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    TuneGuard tune;
    const int64_t M = 256, N = 256, K = 256;
    std::vector<float> A(M * K, 0.5f), B(K * N, 0.25f), C(M * N, 0.0f);
    sgemm(Trans::N, Trans::N, M, N, K, 1.0f, A.data(), 0, B.data(), 0, 0.0f, C.data(), 0);
    EXPECT_EQ(C[0], 0.5f * 0.25f * K);
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 0u);
    EXPECT_EQ(detail::gemm_tune_stats().size, 0u);

    GemmDesc small;
    small.M = 64, small.N = 64, small.K = 64;
    EXPECT_FALSE(detail::gemm_tune_eligible(detail::gemm_check_desc("test", small)));
    const GemmPlan ps(small);
    EXPECT_STRNE(ps.impl_name(), "onednn");
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 0u);

    // A recorded decision for oneDNN: used with tuning on, ignored with it off.
    GemmDesc d;
    d.M = M, d.N = N, d.K = K;
    detail::gemm_tune_record(detail::gemm_check_desc("test", d), "onednn");
    EXPECT_STREQ(GemmPlan(d).impl_name(), "onednn");
    set_gemm_autotune(false);
    EXPECT_STRNE(GemmPlan(d).impl_name(), "onednn");
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 0u);
}

// A plan routed to oneDNN: every epilogue correct, its PackedB (the plain layout) runs in plans of
// other M (whatever they picked), and a PackedB of an xk plan runs in the oneDNN plan.
TEST(GemmTune, RoutedPlanAndPackedWeightsAcrossM) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    TuneGuard tune;
    ThreadsGuard tg;
    int idx = 0;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for (int64_t M : {300, 263}) {  // 2 M N K >= 2^25: routable
            Case c;
            c.M = M, c.N = 160, c.K = 400;
            c.tb = idx % 2 ? Trans::T : Trans::N, c.ta = idx % 3 == 1 ? Trans::T : Trans::N;
            c.bias = true, c.act = kActs[(idx + 2) % 5], c.res = 1 + idx % 2, c.beta = idx % 2 ? 0.5f : 0.0f;
            c.pad_b = 3, c.pad_r = idx % 2;
            c.seed = 700 + static_cast<uint64_t>(idx++);
            SCOPED_TRACE(c.str());
            detail::gemm_tune_record(detail::gemm_check_desc("test", c.desc()), "onednn");
            const GemmPlan plan(c.desc());
            ASSERT_STREQ(plan.impl_name(), "onednn");
            Problem p(c);
            plan.run(p.args());
            EXPECT_TRUE(p.check("routed plan"));
            const PackedB w = plan.pack_b(p.B.data());
            EXPECT_EQ(w.layout(), "ref:plain:f32:K400:N160");
            p.reset_c();
            GemmArgs a = p.args();
            a.B = nullptr;
            plan.run(a, w);
            EXPECT_TRUE(p.check("routed plan, packed B"));
            for (int64_t m2 : {1, 7, 64}) {  // decode, small, direct kernels: none reads this layout
                Case c2 = c;
                c2.M = m2;
                Problem q(c2);
                std::copy(p.B.begin(), p.B.end(), q.B.begin());
                q.oracle();
                const GemmPlan plan2(c2.desc());
                GemmArgs qa = q.args();
                qa.B = nullptr;
                plan2.run(qa, w);
                EXPECT_TRUE(q.check(std::string("other M=") + std::to_string(m2) + " plan " + plan2.impl_name()));
                // And the other way round: that plan's PackedB in the oneDNN plan.
                const PackedB w2 = plan2.pack_b(q.B.data());
                p.reset_c();
                plan.run(a, w2);
                EXPECT_TRUE(p.check("oneDNN plan with the PackedB of " + std::string(plan2.impl_name())));
            }
            if (HasFailure()) return;
        }
    }
}

// Two threads building plans of one spec at once: it is timed once, both get the same pick.
TEST(GemmTune, ConcurrentPlansTuneOnce) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    TuneGuard tune;
    GemmDesc d;
    d.M = 384, d.N = 256, d.K = 192;  // 37.7 Mflop
    std::string names[3];
    std::vector<std::thread> th;
    for (int t = 0; t < 3; ++t) th.emplace_back([&, t] { names[t] = GemmPlan(d).impl_name(); });
    for (auto& t : th) t.join();
    EXPECT_EQ(names[0], names[1]);
    EXPECT_EQ(names[0], names[2]);
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 1u);
    EXPECT_EQ(detail::gemm_tune_stats().hits, 2u);
}

// Bad input is rejected exactly as without tuning (before any timing); the routed plan checks
// its pointers; the C API mirrors the switch.
TEST(GemmTune, BadInputUnchangedAndCApi) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    TuneGuard tune;
    GemmDesc d;
    d.M = 512, d.N = 512, d.K = -3;
    XK_EXPECT_INVALID(GemmPlan{d}, "K=-3 must be >= 0");
    d.K = 512, d.lda = 100;
    XK_EXPECT_INVALID(GemmPlan{d}, "lda=100 must be >= K=512");
    d.lda = 0, d.epilogue.act = static_cast<Activation>(9);
    XK_EXPECT_INVALID(GemmPlan{d}, "epilogue.act=9");
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 0u);
    d.epilogue.act = Activation::none;
    detail::gemm_tune_record(detail::gemm_check_desc("test", d), "onednn");
    const GemmPlan plan(d);
    ASSERT_STREQ(plan.impl_name(), "onednn");
    std::vector<float> A(512 * 512), C(512 * 512);
    GemmArgs a;
    a.A = A.data(), a.B = nullptr, a.C = C.data();
    XK_EXPECT_INVALID(plan.run(a), "xk::GemmPlan::run: B=null");
    std::vector<float> B(512 * 512);
    a.B = B.data(), a.C = A.data();
    XK_EXPECT_INVALID(plan.run(a), "overlaps A");
    XK_EXPECT_INVALID(plan.pack_b(nullptr), "xk::GemmPlan::pack_b: B=null");

    EXPECT_EQ(xk_set_gemm_autotune(0), XK_SUCCESS);
    EXPECT_EQ(xk_get_gemm_autotune(), 0);
    EXPECT_FALSE(get_gemm_autotune());
    EXPECT_EQ(xk_set_gemm_autotune(1), XK_SUCCESS);
    EXPECT_EQ(xk_get_gemm_autotune(), 1);
}

// Under each ISA cap: a decision is per cap (a recorded one applies to its cap only), and below
// the oneDNN entry's ISA (avx2) nothing routes there.
TEST(GemmTune, DecisionsFollowTheIsaCap) {
    TuneGuard tune;
    GemmDesc d;
    d.M = 256, d.N = 256, d.K = 256;
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    xk::test::for_each_isa([&](Isa isa) {
        detail::gemm_tune_record(spec, "onednn");
        const bool routable = onednn_impl().isa <= isa && isa_supported(onednn_impl().isa);
        EXPECT_EQ(std::string(GemmPlan(d).impl_name()) == "onednn", routable);
    });
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 0u);
}

// gemm_select under an explicit cap (the AMX decode kernel's plain-B route: cap avx512_bf16)
// answers as the process capped there would: that cap's recorded decision, not the process cap's;
// a cap above the process's is clamped to it.
TEST(GemmTune, SelectUnderAnExplicitCapUsesThatCapsDecision) {
    if (!have_onednn_entry()) GTEST_SKIP() << "the oneDNN entry needs AVX2";
    TuneGuard tune;
    GemmDesc d;
    d.M = 256, d.N = 256, d.K = 256;
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    const Isa top = max_isa();
    {
        IsaCap cap(Isa::avx2);
        detail::gemm_tune_record(spec, "onednn");
    }
    ASSERT_EQ(max_isa(), top);
    EXPECT_STREQ(detail::gemm_select(spec, false, Isa::avx2).impl->name, "onednn");
    const std::string plain = detail::gemm_registry().select(spec, top).name;
    if (top != Isa::avx2) EXPECT_EQ(detail::gemm_select(spec, false).impl->name, plain);  // no decision at top
    EXPECT_EQ(detail::gemm_select(spec, false, Isa::amx).impl->name, detail::gemm_select(spec, false).impl->name);
    EXPECT_EQ(detail::gemm_tune_stats().tunings, 0u);
}
