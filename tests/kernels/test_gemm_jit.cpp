// fp32 GEMM: every registry entry this machine can run (the JIT kernels of each ISA, forced one by
// one, and the reference), against a double-precision oracle written here, over
//   - every M and N tail: all M, N in 1..17 with a few K (both transposes, alpha / beta classes),
//   - larger odd sizes (33, 65, 127, 255, 300) and K around the K-block edges (multi-block
//     accumulation: first / middle / last block epilogues),
//   - every epilogue (bias, each activation, f32 / bf16 residual) x beta 0 / 1 / other x alpha,
//   - leading dimensions above the minimum, misaligned pointers (C padding must stay untouched,
//     padding of the inputs holds NaN so that reading it shows),
//   - packed and unpacked B (bit-identical), 1 and 2 threads (bit-identical),
// and the generation of the AVX-512 code even where it cannot run (encodings checked here, the
// numbers on an AVX-512 machine, where the same sweeps force the avx512 entries). The small
// kernel's AVX-512 tilings (XK_GEMM_SMALL_ZMM = 0..kGemmSmallZmmVariants-1) are each run through
// the small-shape sweeps where AVX-512 is there (the variable set, the kernel cache emptied, before
// the kernels are created), and generated for every shape everywhere.
//
// Tolerance per element of C (u = 2^-24), as in test_gemm.cpp:
//   e0 = 2 (K + 5) u |alpha| sum_k |a_mk b_kn| + 2u (|beta C| + |bias|)
//   |got - want| <= L e0 + 4u (|x| + |act(x)|) [act other than none / relu] + u (|act(x)| + |res|)
// with x the value entering the activation and L = 1.2 its slope bound (gelu, silu; 1 otherwise).
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "dispatch/kernel_cache.hpp"
#include "kernels/gemm_f32_problem.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemv.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

using namespace xk;

namespace {

using namespace xk::test::gemm_f32;

using Impl = detail::Impl<detail::GemmSpec, detail::GemmKernel>;

std::map<std::string, int>& runs_per_impl() {
    static std::map<std::string, int> m;
    return m;
}

// The registry entries this machine can run and selection can pick (xk's kernels and the reference).
std::vector<const Impl*> runnable_impls() {
    std::vector<const Impl*> v;
    for (const Impl& i : detail::gemm_registry().impls())
        // (oneDNN's: test_gemm_onednn.cpp; the bf16 and int8 entries, which take no f32 spec:
        // test_gemm_bf16.cpp, test_gemm_int8.cpp)
        if (isa_supported(i.isa) && i.selectable && !std::strstr(i.name, ":bf16") && !std::strstr(i.name, ":int8"))
            v.push_back(&i);
    return v;
}

// The AVX-512 small kernel's tiling under test (XK_GEMM_SMALL_ZMM) and the cases each ran.
int& current_zmm_variant() {
    static int v = 0;
    return v;
}
std::map<int, int>& runs_per_zmm_variant() {
    static std::map<int, int> m;
    return m;
}

// Sets XK_GEMM_SMALL_ZMM for its lifetime (and empties the kernel cache on the way in and out, so
// that the kernels are generated under it); the previous value is restored.
class ZmmVariant {
public:
    explicit ZmmVariant(int v) {
        if (const char* e = std::getenv(kVar)) had_ = true, old_ = e;
        set(std::to_string(v).c_str());
        current_zmm_variant() = v;
    }
    ~ZmmVariant() {
        if (had_)
            set(old_.c_str());
        else
            set(nullptr);
        current_zmm_variant() = 0;
    }
    static void set(const char* value) {
        if (value)
            setenv(kVar, value, 1);
        else
            unsetenv(kVar);
        detail::KernelCache::instance().clear();
    }

private:
    static constexpr const char* kVar = "XK_GEMM_SMALL_ZMM";
    bool had_ = false;
    std::string old_;
};

// The tilings the small-shape sweeps run: all of them where the AVX-512 kernels run, else the
// default only (the override changes nothing else).
// (Under TSan, which looks for races, not for wrong sums: the single-threaded shape sweeps below
// run thinned, and only the default small-kernel tiling.)
std::vector<int> zmm_variants_to_run() {
    std::vector<int> v{0};
    if (isa_supported(Isa::avx512) && !xk::test::kTsanSweep)
        for (int i = 1; i < detail::kGemmSmallZmmVariants; ++i) v.push_back(i);
    return v;
}
constexpr const char* kZmmSmall = "jit:avx512:small";

// Runs one case through every runnable implementation that supports it (or only the one named
// `only`): unpacked, then packed (bit-identical). Returns how many implementations ran.
int run_all(const Case& c, const char* only = nullptr) {
    Problem p(c);
    const GemmDesc d = c.desc();
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    int ran = 0;
    for (const Impl* impl : runnable_impls()) {
        if (impl->supports && !impl->supports(spec)) continue;
        if (only && std::string(impl->name) != only) continue;
        ++ran;
        ++runs_per_impl()[impl->name];
        if (std::string(impl->name) == kZmmSmall) ++runs_per_zmm_variant()[current_zmm_variant()];
        xk::test::exercised_isas().insert(impl->isa);
        const auto k = detail::gemm_registry().get(spec, *impl).kernel;
        detail::GemmCall call;
        call.args = p.args();
        call.alpha = c.alpha, call.beta = c.beta;
        p.reset_c();
        k->run(call);
        EXPECT_TRUE(p.check(impl->name));
        const std::vector<float> unpacked = p.c_copy();
        const auto packed = k->pack_b(p.B.data());
        EXPECT_EQ(packed->layout, k->packed_layout());
        call.args.B = nullptr;
        call.packed_b = packed.get();
        p.reset_c();
        k->run(call);
        EXPECT_TRUE(p.check(impl->name));
        // The decode kernels (M <= 16) read an unpacked B with dot products / row sweeps and a
        // packed one with broadcasts: both within the tolerance, not the same rounding
        // (test_gemm_decode.cpp). Every other kernel sums in the same order either way.
        const std::string n(impl->name);
        const bool decode = (n.find(":gemv") != std::string::npos || n.find(":panel") != std::string::npos) &&
                            c.M <= detail::kGemvMaxM;
        if (!decode)
            EXPECT_TRUE(std::memcmp(unpacked.data(), p.C.data(), unpacked.size() * 4) == 0)
                << impl->name << ": packed B differs from unpacked, " << c.str();
        if (::testing::Test::HasFailure()) return ran;
    }
    return ran;
}

struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

// Every epilogue of one shape: activation x bias x residual (none / f32 / bf16) x beta (0, 1,
// other); `more` sets the rest of the case (alpha, transposes, padding, seed) and runs it.
template <class F>
void for_each_epilogue(const int64_t (&shape)[3], F&& more) {
    for (Activation act : kActs)
        for (bool bias : {false, true})
            for (int res : {0, 1, 2})
                for (float beta : {0.0f, 1.0f, 0.3f}) {
                    Case c;
                    c.M = shape[0], c.N = shape[1], c.K = shape[2];
                    c.act = act, c.bias = bias, c.res = res, c.beta = beta;
                    more(c);
                    if (::testing::Test::HasFailure()) return;
                }
}

}  // namespace

TEST(GemmJit, EveryMAndNTail) {
    const float alphas[] = {1.0f, -1.5f};
    const float betas[] = {0.0f, 1.0f, 0.75f};
    int idx = 0;
    for (int64_t K : {1, 7, 16}) {
        for (int64_t M = 1; M <= 17; ++M) {
            for (int64_t N = 1; N <= 17; ++N, ++idx) {
                Case c;
                c.M = M, c.N = N, c.K = K;
                c.ta = idx % 2 ? Trans::T : Trans::N;
                c.tb = (idx / 2) % 2 ? Trans::T : Trans::N;
                c.alpha = alphas[idx % 2];
                c.beta = betas[idx % 3];
                c.pad_a = idx % 3, c.pad_b = (idx / 3) % 2 * 5, c.pad_c = idx % 4 == 0 ? 3 : 0;
                c.misalign = static_cast<size_t>(idx % 5);
                c.seed = static_cast<uint64_t>(idx);
                ASSERT_GE(run_all(c), 2) << c.str();  // a JIT kernel beside the reference
            }
        }
    }
}

TEST(GemmJit, LargerOddSizesAndKBlocks) {
    const int64_t sizes[] = {33, 65, 127, 255, 300};
    int idx = 0;
    // A sample of (M, N, K) from the sizes: every size in every position, mixed.
    for (int i = 0; i < 5; ++i) {
        for (int j = 0; j < 5; ++j) {
            if ((i + 2 * j) % 3 != 0 && !(i == 4 && j == 4)) continue;
            const int64_t M = sizes[i], N = sizes[j], K = sizes[(i + j) % 5];
            Case c;
            c.M = M, c.N = N, c.K = K;
            c.ta = idx % 2 ? Trans::T : Trans::N;
            c.tb = idx % 3 ? Trans::N : Trans::T;
            c.beta = idx % 2 ? 0.5f : 0.0f;
            c.pad_a = 1 + idx % 2, c.pad_b = idx % 3, c.pad_c = 2;
            c.misalign = static_cast<size_t>(idx % 4);
            c.seed = 100 + static_cast<uint64_t>(idx++);
            run_all(c);
            if (HasFailure()) return;
        }
    }
    // K around the K-block size of each ISA (one, two and three blocks; blocks of uneven size).
    std::vector<int64_t> ks;
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
        const int64_t kc = detail::gemm_b_layout(isa, 100000, 16).kc;  // the largest block
        for (int64_t k : {kc - 1, kc, kc + 1, 2 * kc + 3, 3 * kc - 5}) ks.push_back(k);
    }
    for (int64_t K : ks) {
        Case c;
        c.M = 13 + idx % 7, c.N = 21 + idx % 11, c.K = K;
        c.ta = idx % 2 ? Trans::T : Trans::N, c.tb = idx % 3 ? Trans::T : Trans::N;
        c.beta = idx % 3 == 0 ? 0.0f : idx % 3 == 1 ? 1.0f : -0.5f;
        c.bias = true, c.act = Activation::gelu_erf, c.res = 1 + idx % 2;
        c.seed = 200 + static_cast<uint64_t>(idx++);
        run_all(c);
        if (HasFailure()) return;
    }
}

TEST(GemmJit, EveryEpilogue) {
    // One shape in the small kernel's range, one with several K blocks, one with M and N tails
    // across tiles and threads.
    const int64_t shapes[][3] = {{17, 33, 41}, {29, 45, 700}, {71, 38, 96}};
    int idx = 0;
    for (const auto& s : shapes) {
        if (xk::test::kTsanSweep && s[2] != 96) continue;  // (TSan: the threaded shape only)
        for_each_epilogue(s, [&](Case& c) {
            c.alpha = idx % 2 ? 1.0f : 0.8f;
            c.ta = idx % 3 == 1 ? Trans::T : Trans::N, c.tb = idx % 4 == 2 ? Trans::T : Trans::N;
            c.pad_r = idx % 2 ? 0 : 5;
            c.misalign = static_cast<size_t>(idx % 3);
            c.seed = 300 + static_cast<uint64_t>(idx++);
            run_all(c);
        });
        if (HasFailure()) return;
    }
}

namespace {
void small_columns_and_k_loop(const char* only) {
    const int64_t ns[] = {18, 24, 25, 31, 32, 33, 40, 47, 48, 56, 57, 63, 64};
    const int64_t ks[] = {1, 2, 16, 17, 24, 25, 40, 64};
    const int64_t ms[] = {1, 3, 4, 6, 7, 13, 32, 33, 64};
    int idx = 0;
    for (int64_t N : ns) {
        for (int64_t K : ks) {
            Case c;
            c.M = ms[idx % 9], c.N = N, c.K = K;
            c.ta = idx % 3 == 1 ? Trans::T : Trans::N, c.tb = idx % 5 == 2 ? Trans::T : Trans::N;
            c.alpha = idx % 2 ? 1.0f : -0.7f;
            c.beta = idx % 3 == 0 ? 0.0f : idx % 3 == 1 ? 1.0f : 0.4f;
            if (idx % 4 == 3) c.bias = true, c.act = kActs[(idx / 4) % 5], c.res = 1 + (idx / 4) % 2;
            c.pad_a = idx % 2, c.pad_b = (idx / 2) % 3, c.pad_c = idx % 4 == 1 ? 5 : 0, c.pad_r = idx % 3;
            c.misalign = static_cast<size_t>(idx % 7);
            c.seed = 500 + static_cast<uint64_t>(idx++);
            ASSERT_GE(run_all(c, only), only ? 1 : 2) << c.str();
            if (::testing::Test::HasFailure()) return;
            Problem p(c);
            const GemmPlan plan(c.desc());
            if (isa_supported(Isa::avx2)) EXPECT_NE(std::string(plan.impl_name()).find(":small"), std::string::npos);
            plan.run(p.args());
            ASSERT_TRUE(p.check(std::string("plan ") + plan.impl_name()));
        }
    }
}
}  // namespace

// The small kernel's tiling (M, N, K <= 64): AVX2 columns of 4 vectors (3 x 4 tiles, A outer) with
// a last column of 1..4 vectors, masked or not (N = 18..64), the K loop with every remainder and
// k = 0 peeled (K = 1, 2, 16 fully unrolled; 17, 24, 25, 40, 64 looped), tile heights balanced over
// M, every epilogue on the widest tile; through every registry entry and through a plan (the
// plan's direct entry into the generated code: A, B, C, bias, residual and the scalars). With
// AVX-512, again for each of its small-form tilings (the AVX-512 small entry and the plan only).
TEST(GemmJit, SmallKernelColumnsAndKLoop) {
    for (int v : zmm_variants_to_run()) {
        const ZmmVariant zv(v);
        SCOPED_TRACE("XK_GEMM_SMALL_ZMM=" + std::to_string(v));
        small_columns_and_k_loop(v == 0 ? nullptr : kZmmSmall);
        if (HasFailure()) return;
    }
}

// The small-shape sweep of each tiling: every size class of N (1, 7, 8: one narrow vector; 16,
// 17, 23, 31, 32, 33: one or two zmm, masked or not; 63, 64: four), M and K from the same sizes
// (tile heights, K loop remainders), transposes, leading dimensions, misalignment, the epilogue
// classes rotating; then every epilogue on the narrow (N = 8 and 7), the two-vector (23) and the
// widest (64) column.
TEST(GemmJit, SmallShapesEveryTiling) {
    const int64_t sizes[] = {1, 7, 8, 16, 17, 23, 31, 32, 33, 63, 64};
    const float alphas[] = {1.0f, -0.7f};
    const float betas[] = {0.0f, 1.0f, 0.4f};
    for (int v : zmm_variants_to_run()) {
        const ZmmVariant zv(v);
        SCOPED_TRACE("XK_GEMM_SMALL_ZMM=" + std::to_string(v));
        const char* only = v == 0 ? nullptr : kZmmSmall;
        int idx = 0;
        for (int64_t N : sizes) {
            for (int64_t M : sizes) {
                if (xk::test::kTsanSweep && (M + N) % 4 != 0) {  // (TSan: a quarter of the pairs)
                    ++idx;
                    continue;
                }
                Case c;
                c.M = M, c.N = N, c.K = sizes[(idx * 7 + 3) % 11];
                c.ta = idx % 3 == 1 ? Trans::T : Trans::N, c.tb = idx % 4 == 2 ? Trans::T : Trans::N;
                c.alpha = alphas[idx % 2], c.beta = betas[(idx / 2) % 3];
                if (idx % 3 == 2) c.bias = true, c.act = kActs[(idx / 3) % 5], c.res = (idx / 3) % 3;
                c.pad_a = idx % 2 * 3, c.pad_b = (idx / 2) % 3, c.pad_c = idx % 5 == 1 ? 4 : 0, c.pad_r = idx % 3;
                c.misalign = static_cast<size_t>(idx % 6);
                c.seed = 900 + static_cast<uint64_t>(idx++);
                run_all(c, only);
                if (HasFailure()) return;
            }
        }
        const int64_t every[][3] = {{8, 8, 8}, {13, 7, 19}, {23, 23, 23}, {64, 64, 64}};
        for (const auto& sh : every) {
            if (xk::test::kTsanSweep && sh[0] != 13) continue;
            for_each_epilogue(sh, [&](Case& c) {
                c.alpha = idx % 2 ? 1.0f : 0.8f;
                c.ta = idx % 3 == 1 ? Trans::T : Trans::N;
                c.pad_b = idx % 2 * 9, c.pad_c = idx % 3, c.pad_r = idx % 2 ? 0 : 5;
                c.misalign = static_cast<size_t>(idx % 3);
                c.seed = 1900 + static_cast<uint64_t>(idx++);
                run_all(c, only);
            });
            if (HasFailure()) return;
        }
        // Through a plan too (the fast path into the generated code), one shape per column class.
        for (int64_t N : {7, 8, 23, 32, 64}) {
            Case c;
            c.M = 29, c.N = N, c.K = 33, c.bias = true, c.act = Activation::silu, c.res = 1, c.beta = 0.5f;
            c.seed = 2900 + static_cast<uint64_t>(N);
            Problem p(c);
            const GemmPlan plan(c.desc());
            plan.run(p.args());
            ASSERT_TRUE(p.check(std::string("plan ") + plan.impl_name()));
        }
    }
}


// A plan at 1 thread against the oracle, then at 2 threads and with B packed by the plan: both
// give the 1-thread bits. Returns the packed B (empty after a fatal failure).
static PackedB check_threads_and_packed_b(Problem& p, const GemmPlan& plan) {
    set_num_threads(1);
    plan.run(p.args());
    if (!p.check(plan.impl_name())) {
        ADD_FAILURE() << "1 thread against the oracle";
        return {};
    }
    const std::vector<float> one = p.c_copy();
    set_num_threads(2);
    p.reset_c();
    plan.run(p.args());
    EXPECT_TRUE(std::memcmp(one.data(), p.C.data(), one.size() * 4) == 0) << "2 threads differ from 1";
    PackedB w = plan.pack_b(p.B.data());
    p.reset_c();
    GemmArgs a = p.args();
    a.B = nullptr;
    plan.run(a, w);
    EXPECT_TRUE(std::memcmp(one.data(), p.C.data(), one.size() * 4) == 0) << "packed B, 2 threads";
    return w;
}

// Through plans: 1 and 2 threads give the same bits (the K accumulation order does not depend on
// the split), a PackedB serves plans of other M, and each ISA's selection is exercised.
TEST(GemmJit, ThreadsAndPackedWeightsThroughPlans) {
    ThreadsGuard tg;
    // (300x255x127: extra cuts along M, each thread keeps its packed B columns between parts;
    // 130x400x96: cuts along both, packed A rows kept too. With 2 threads the shared operands
    // are packed once, cooperatively: 300x255x127 B, 130x400x96 A and B, 97x301x800 A in 3 K
    // blocks with odd row shares, transposed on every other ISA.)
    const int64_t shapes[][3] = {{300, 255, 127}, {64, 300, 65},  {255, 33, 300}, {40, 64, 64},
                                 {1000, 40, 64},  {301, 60, 200}, {130, 400, 96}, {97, 301, 800}};
    int idx = 0;
    xk::test::for_each_isa([&](Isa) {
        for (const auto& s : shapes) {
            Case c;
            c.M = s[0], c.N = s[1], c.K = s[2];
            c.tb = idx % 2 ? Trans::T : Trans::N;
            c.ta = idx % 4 >= 2 ? Trans::T : Trans::N;
            c.bias = true, c.act = kActs[idx % 5], c.res = idx % 3, c.beta = idx % 2 ? 0.5f : 0.0f;
            c.misalign = static_cast<size_t>(idx % 3);
            c.seed = 400 + static_cast<uint64_t>(idx++);
            SCOPED_TRACE(c.str());
            Problem p(c);
            const GemmPlan plan(c.desc());
            const PackedB w = check_threads_and_packed_b(p, plan);
            if (w.empty()) return;
            // The same packed weights through a plan of another M.
            Case c2 = c;
            c2.M = c.M > 1 ? c.M / 2 + 1 : 1;
            Problem q(c2);
            std::copy(p.B.begin(), p.B.end(), q.B.begin());
            q.oracle();
            GemmArgs qa = q.args();
            qa.B = nullptr;
            const GemmPlan plan2(c2.desc());
            plan2.run(qa, w);
            EXPECT_TRUE(q.check(std::string("other M, ") + plan2.impl_name()));
        }
    });
}

// The blocked kernel's thread split under each rule of XK_GEMM_F32_SPLIT (the base grid) and
// XK_GEMM_EXTRA (1: one part per thread, 3: the default extra cuts), read when the plan is made:
// 2 threads give 1 thread's bits and the oracle's values, odd sizes, plain and packed B (the
// packed B changes the split's choice), "3x1" above the 2 threads falls back to the cost rule.
TEST(GemmJit, ThreadSplitRules) {
    ThreadsGuard tg;
    // (the best ISA only: the split is the same code for every tile; 97x130x600: 2 K blocks)
    const int64_t shapes[][3] = {{301, 255, 127}, {97, 130, 600}};
    int idx = 0;
    {
        for (const char* rule : {"2x1", "1x2", "3x1"})
            for (const char* extra : {"1", "3"})
                for (const auto& sh : shapes) {
                    const xk::test::ScopedEnv e1("XK_GEMM_F32_SPLIT", rule), e2("XK_GEMM_EXTRA", extra);
                    Case c;
                    c.M = sh[0], c.N = sh[1], c.K = sh[2];
                    c.tb = idx % 2 ? Trans::T : Trans::N;
                    c.bias = true, c.act = kActs[idx % 5], c.beta = idx % 3 ? 0.0f : 0.5f;
                    c.seed = 900 + static_cast<uint64_t>(idx++);
                    SCOPED_TRACE(c.str() + " XK_GEMM_F32_SPLIT=" + rule + " XK_GEMM_EXTRA=" + extra);
                    Problem p(c);
                    const GemmPlan plan(c.desc());
                    if (check_threads_and_packed_b(p, plan).empty()) return;
                }
    }
}

// The split itself (no run): every rule keeps to the threads and the tile grid; a grid that fits is
// taken exactly (with XK_GEMM_EXTRA=1), one that does not falls back; a bad value is an error naming it.
TEST(GemmJit, ThreadSplitChoice) {
    using detail::GemmSplitPolicy;
    for (const char* rule : {"cost", "4x4", "8x2", "32x1"}) {
        const xk::test::ScopedEnv e("XK_GEMM_F32_SPLIT", rule);
        const GemmSplitPolicy pol = detail::gemm_split_policy();
        for (int64_t M : {1, 13, 384, 512, 2048})
            for (int64_t N : {31, 768, 3072})
                for (int threads : {1, 2, 16})
                    for (int extra : {1, 3}) {
                        const detail::GemmSplit r = detail::gemm_split(M, N, 768, 14, 32, threads, true, extra, pol);
                        const int64_t mt = (M + 13) / 14, nt = (N + 31) / 32;
                        EXPECT_TRUE(r.nthr >= 1 && r.nthr <= threads && r.pm >= 1 && r.pn >= 1 && r.pm <= mt &&
                                    r.pn <= nt && r.pm * r.pn >= r.nthr)
                            << rule << " " << M << "x" << N << " threads " << threads << ": " << r.nthr << " threads, "
                            << r.pm << "x" << r.pn;
                    }
    }
    {
        const xk::test::ScopedEnv e("XK_GEMM_F32_SPLIT", "4x4");
        const detail::GemmSplit r = detail::gemm_split(512, 768, 768, 14, 32, 16, true, 1, detail::gemm_split_policy());
        EXPECT_EQ(r.nthr, 16);
        EXPECT_EQ(r.pm, 4);
        EXPECT_EQ(r.pn, 4);
    }
    GemmDesc d;
    d.M = d.N = d.K = 200;
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    for (const char* bad : {"x", "4x", "0x4", "4x4x", "cubic", "square", "-1x2"}) {
        const xk::test::ScopedEnv e("XK_GEMM_F32_SPLIT", bad);
        XK_EXPECT_INVALID(detail::create_gemm_jit(spec, Isa::avx2), std::string("XK_GEMM_F32_SPLIT: unknown value '") + bad + "'");
    }
}

// Selection: f32 goes to the JIT kernels of the capped ISA (small shapes to the small kernel),
// bf16 to the blocked kernel's bf16 entry (the VDPBF16PS one where the probe found it faster, the
// tiles at amx; test_gemm_bf16.cpp), int8 to its VNNI / AVX2 / AMX kernel (test_gemm_int8.cpp).
TEST(GemmJit, Selection) {
    if (!isa_supported(Isa::avx2)) GTEST_SKIP() << "no AVX2";
    auto pick = [](GemmDesc d) { return std::string(GemmPlan(d).impl_name()); };
    GemmDesc d;
    d.M = d.N = d.K = 32;
    xk::test::for_each_isa([&](Isa isa) {
        const std::string pre = isa == Isa::scalar ? "ref:scalar" : isa >= Isa::avx512 ? "jit:avx512" : "jit:avx2";
        EXPECT_EQ(pick(d), isa == Isa::scalar ? pre : pre + ":small");
        GemmDesc big = d;  // B too large for the direct kernel: blocked
        big.M = big.N = big.K = 512;
        EXPECT_EQ(pick(big), pre);
        GemmDesc direct = d;  // tall-skinny and medium: the direct kernel, threaded over M
        direct.M = 1000, direct.K = 64;
        EXPECT_EQ(pick(direct), isa == Isa::scalar ? pre : pre + ":direct");
        direct.M = direct.N = direct.K = 100;
        EXPECT_EQ(pick(direct), isa == Isa::scalar ? pre : pre + ":direct");
        GemmDesc h = d;
        h.a_type = h.b_type = DType::bf16;
        const std::string bf16_pick = isa == Isa::scalar                                           ? pre
                                      : isa >= Isa::amx                                            ? "amx:bf16"
                                      : isa >= Isa::avx512_bf16 && detail::gemm_bf16_dp_fast() ? "jit:avx512_bf16:bf16"
                                                                                                   : pre + ":bf16";
        EXPECT_EQ(pick(h), bf16_pick);
        GemmDesc q = d;
        q.a_type = DType::u8, q.b_type = DType::s8, q.c_type = DType::s32;
        const std::string int8_pick = isa == Isa::scalar        ? "ref:scalar"
                                      : isa >= Isa::amx         ? "amx:int8"
                                      : isa >= Isa::avx512_vnni ? "jit:avx512_vnni:int8"
                                      : isa >= Isa::avx2_vnni && isa_supported(Isa::avx2_vnni) ? "jit:avx2_vnni:int8"
                                                                                               : "jit:avx2:int8";
        EXPECT_EQ(pick(q), int8_pick);
    });
}

// The AVX-512 (and AVX2) code is generated for a spread of shapes and epilogues even where it
// cannot run: xbyak rejects invalid operand combinations at generation.
TEST(GemmJit, GeneratesEveryIsaVariant) {
    int idx = 0;
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
        for (const auto& s : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {23, 23, 23}, {64, 64, 64}, {7, 33, 5},
                                                               {30, 17, 64}, {100, 70, 600}, {15, 47, 9},
                                                               {500, 64, 100}, {77, 30, 131}, {8, 8, 8},
                                                               {64, 7, 40}, {37, 56, 17}, {64, 49, 64}}) {
            for (Activation act : kActs) {
                Case c;
                c.M = s[0], c.N = s[1], c.K = s[2];
                c.act = act, c.bias = idx % 2, c.res = idx % 3, c.beta = idx % 3 == 0 ? 0.0f : 0.5f;
                c.alpha = idx % 2 ? 1.0f : 2.0f;
                c.tb = idx % 2 ? Trans::T : Trans::N;
                ++idx;
                const detail::GemmSpec spec = detail::gemm_check_desc("test", c.desc());
                EXPECT_NO_THROW(detail::create_gemm_jit(spec, isa)) << isa_name(isa) << " " << c.str();
                if (detail::gemm_small_supports(spec))
                    for (int v = 0; v < (isa == Isa::avx512 ? detail::kGemmSmallZmmVariants : 1); ++v) {
                        const ZmmVariant zv(v);
                        EXPECT_NO_THROW(detail::create_gemm_small(spec, isa))
                            << isa_name(isa) << " XK_GEMM_SMALL_ZMM=" << v << " " << c.str();
                    }
                if (detail::gemm_direct_supports(spec, isa))
                    EXPECT_NO_THROW(detail::create_gemm_direct(spec, isa)) << isa_name(isa) << " " << c.str();
            }
        }
    }
}

// The tiling override: an unknown value is an error naming the variable and the value (the
// AVX-512 kernel is generated, not run, so this holds on any machine); other ISAs ignore it.
TEST(GemmJit, SmallZmmVariantBadValue) {
    GemmDesc d;
    d.M = d.N = d.K = 16;
    const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
    for (const char* bad : {"-1", "6", "99", "x", "1x"}) {
        const ZmmVariant restore(0);
        ZmmVariant::set(bad);
        XK_EXPECT_INVALID(detail::create_gemm_small(spec, Isa::avx512),
                          std::string("XK_GEMM_SMALL_ZMM: unknown variant '") + bad + "'");
        EXPECT_NO_THROW(detail::create_gemm_small(spec, Isa::avx2)) << bad;
    }
}

// Last: what the forced sweeps covered (a machine without AVX-512 shows no avx512 entries, and the
// AVX-512 small tilings only generated).
TEST(GemmJit, ZZCoverage) {
    for (const auto& [name, n] : runs_per_impl()) std::printf("[coverage] %-18s %d cases\n", name.c_str(), n);
    for (const Impl* impl : runnable_impls())
        EXPECT_GT(runs_per_impl()[impl->name], 100) << impl->name;
    if (isa_supported(Isa::avx512)) {
        std::printf("[coverage] %s XK_GEMM_SMALL_ZMM variants run:", kZmmSmall);
        for (const auto& [v, n] : runs_per_zmm_variant()) std::printf(" %d (%d cases)", v, n);
        std::printf("\n");
        for (int v = 0; v < detail::kGemmSmallZmmVariants; ++v)  // (TSan runs the default tiling only)
            if (!xk::test::kTsanSweep) EXPECT_GT(runs_per_zmm_variant()[v], 100) << "XK_GEMM_SMALL_ZMM=" << v;
    } else {
        std::printf("[coverage] no AVX-512 here: the %s tilings XK_GEMM_SMALL_ZMM=0..%d generated, not run\n",
                    kZmmSmall, detail::kGemmSmallZmmVariants - 1);
    }
}

// One packed weight serves every batch size: a PackedB made by a decode plan (M = 1) runs in a
// prefill plan (M = 200) and the other way round, with the kernel that reads its layout.
TEST(GemmJit, PackedWeightServesEveryM) {
    xk::test::for_each_isa([&](Isa) {
        const int64_t N = 70, K = 300;
        std::vector<float> B(static_cast<size_t>(N * K)), A(static_cast<size_t>(200 * K));
        xk::test::fill_uniform(B.data(), B.size(), -1, 1, 5);
        xk::test::fill_uniform(A.data(), A.size(), -1, 1, 6);
        for (int64_t m_pack : {1, 200})
            for (int64_t m_run : {1, 16, 200}) {
                GemmDesc dp, dr;
                dp.M = m_pack, dp.N = N, dp.K = K, dp.trans_b = Trans::T;
                dr = dp;
                dr.M = m_run;
                const GemmPlan pack_plan(dp), run_plan(dr);
                const PackedB packed = pack_plan.pack_b(B.data());
                std::vector<float> c1(static_cast<size_t>(m_run * N)), c2(c1.size());
                GemmArgs a;
                a.A = A.data(), a.B = B.data(), a.C = c1.data();
                run_plan.run(a);
                a.B = nullptr, a.C = c2.data();
                run_plan.run(a, packed);
                EXPECT_TRUE(xk::test::all_close(c2.data(), c1.data(), c1.size(), 1e-4, 1e-4))
                    << "packed by M=" << m_pack << " (" << pack_plan.impl_name() << "), run with M=" << m_run << " ("
                    << run_plan.impl_name() << ")";
            }
    });
}
