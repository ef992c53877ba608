// fp32 GEMM, decode / GEMV path (src/kernels/gemm/jit_gemv.cpp): every ISA variant against a naive
// double-precision oracle written here, over M = 1..16, N and K with tails (1, 7, 17, 33, 100, 257,
// 1023, 4097 sampled), both transposes of A and B, padded leading dimensions, misaligned pointers,
// packed and unpacked B (bit for bit the same, except the dot path of an unpacked B^T), every epilogue, beta 0 / 1 / other,
// 1 and 2 threads, K blocks and prefetch variants, the sharing of generated code between shapes,
// concurrency, and bad input on the decode plans.
//
// Tolerance, per output element (u = 2^-24, the fp32 unit roundoff; any summation order):
//   mag = |alpha| * sum_k |a_k b_k|
//   |got - want| <= L * (2 (K + 5) u mag + 2u |beta C| + 2u |bias|) + 4u (|x| + |act(x)|) + u (|act(x)| + |residual|)
// where x is the pre-activation value, L = 1.2 bounds the slope of gelu / silu (1 for none / relu),
// and the 4u term (gelu / silu only) covers the float evaluation of the activation.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "common/test_util.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "kernels/gemm/jit_gemv.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

using namespace xk;
using xk::test::for_each_isa;

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24
const float kNaN = std::numeric_limits<float>::quiet_NaN();

double act_d(Activation a, double x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::gelu_erf: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        case Activation::gelu_tanh:
            return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
        case Activation::silu: return x / (1.0 + std::exp(-x));
    }
    return x;
}

struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

struct TuningGuard {
    detail::GemvTuning saved = detail::gemv_tuning();
    ~TuningGuard() { detail::gemv_set_tuning({0, -1, 0}); }
};

// rows x cols with leading dimension ld, `misalign` floats past a 64-byte boundary; the padding
// and 16 floats of slack hold NaN (a read of the padding poisons the result) or, for C, a
// sentinel checked after the run.
struct Mat {
    int64_t rows = 0, cols = 0, ld = 0, n = 0;
    test::Buffer<float> buf;
    void alloc(int64_t r, int64_t c, int64_t l, size_t misalign) {
        rows = r, cols = c, ld = l;
        n = (r == 0 || c == 0) ? 0 : (r - 1) * l + c;
        buf.resize(static_cast<size_t>(n + 16), misalign * 4);
        std::fill(buf.begin(), buf.end(), kNaN);
    }
    float* data() { return n ? buf.data() : nullptr; }
    float& at(int64_t r, int64_t c) { return buf[static_cast<size_t>(r * ld + c)]; }
    float at(int64_t r, int64_t c) const { return buf[static_cast<size_t>(r * ld + c)]; }
    bool inside(size_t i) const { return static_cast<int64_t>(i) < n && static_cast<int64_t>(i) % ld < cols; }
};

struct Case {
    GemmDesc d;
    size_t misalign = 0;
    int res_type = 0;  // residual: 0 f32, 1 bf16
    uint64_t seed = 1;
};

std::string describe(const Case& c) {
    const GemmDesc& d = c.d;
    std::ostringstream os;
    os << trans_name(d.trans_a) << trans_name(d.trans_b) << " M=" << d.M << " N=" << d.N << " K=" << d.K
       << " lda=" << d.lda << " ldb=" << d.ldb << " ldc=" << d.ldc << " alpha=" << d.alpha << " beta=" << d.beta
       << " bias=" << d.epilogue.bias << " act=" << activation_name(d.epilogue.act)
       << " residual=" << d.epilogue.residual << "(" << dtype_name(d.residual_type) << ",ld=" << d.ld_residual
       << ") misalign=" << c.misalign << " threads=" << get_num_threads() << " isa_cap=" << isa_name(max_isa());
    return os.str();
}

struct Problem {
    GemmDesc d;  // leading dimensions resolved
    Mat A, B, C, R;
    test::Buffer<bf16> Rh;
    test::Buffer<float> bias;
    std::vector<double> want, tol;
    std::vector<float> c_before;

    explicit Problem(const Case& c) : d(c.d) {
        std::mt19937_64 g(c.seed);
        std::uniform_real_distribution<double> u(-1, 1);
        const bool an = d.trans_a == Trans::N, bn = d.trans_b == Trans::N;
        if (d.lda == 0) d.lda = an ? d.K : d.M;
        if (d.ldb == 0) d.ldb = bn ? d.N : d.K;
        if (d.ldc == 0) d.ldc = d.N;
        if (d.ld_residual == 0) d.ld_residual = d.N;
        A.alloc(an ? d.M : d.K, an ? d.K : d.M, d.lda, c.misalign);
        B.alloc(bn ? d.K : d.N, bn ? d.N : d.K, d.ldb, (c.misalign + 1) % 16);
        C.alloc(d.M, d.N, d.ldc, (c.misalign + 2) % 16);
        for (int64_t r = 0; r < A.rows; ++r)
            for (int64_t k = 0; k < A.cols; ++k) A.at(r, k) = static_cast<float>(u(g));
        for (int64_t r = 0; r < B.rows; ++r)
            for (int64_t k = 0; k < B.cols; ++k) B.at(r, k) = static_cast<float>(u(g));
        for (int64_t m = 0; m < d.M; ++m)
            for (int64_t n = 0; n < d.N; ++n) C.at(m, n) = d.beta == 0.0f ? kNaN : static_cast<float>(u(g));
        for (size_t i = 0; i < C.buf.size(); ++i)
            if (!C.inside(i)) C.buf[i] = -7.25f;  // sentinel outside C's elements
        if (d.epilogue.bias) {
            bias.resize(static_cast<size_t>(d.N), 4 * ((c.misalign + 3) % 16));
            for (auto& v : bias) v = static_cast<float>(u(g));
        }
        if (d.epilogue.residual) {
            R.alloc(d.M, d.N, d.ld_residual, (c.misalign + 5) % 16);
            for (int64_t m = 0; m < d.M; ++m)
                for (int64_t n = 0; n < d.N; ++n) R.at(m, n) = static_cast<float>(u(g));
            if (d.residual_type == DType::bf16) {
                Rh.resize(R.buf.size(), 2 * ((c.misalign + 1) % 32));
                for (size_t i = 0; i < R.buf.size(); ++i) {
                    Rh[i] = bf16(R.buf[i]);
                    R.buf[i] = Rh[i].to_float();  // the oracle sees the bf16 values
                }
            }
        }
        oracle();
        c_before.assign(C.buf.begin(), C.buf.end());
    }

    GemmArgs args() {
        GemmArgs a;
        a.A = A.data(), a.B = B.data(), a.C = C.data();
        a.bias = d.epilogue.bias ? bias.data() : nullptr;
        if (d.epilogue.residual)
            a.residual = d.residual_type == DType::bf16 ? static_cast<const void*>(Rh.data()) : R.data();
        return a;
    }
    double opa(int64_t m, int64_t k) const { return d.trans_a == Trans::N ? A.at(m, k) : A.at(k, m); }
    double opb(int64_t k, int64_t n) const { return d.trans_b == Trans::N ? B.at(k, n) : B.at(n, k); }

    void oracle() {
        want.assign(static_cast<size_t>(d.M * d.N), 0.0);
        tol.assign(want.size(), 0.0);
        std::vector<double> arow(static_cast<size_t>(d.K));
        for (int64_t m = 0; m < d.M; ++m) {
            for (int64_t k = 0; k < d.K; ++k) arow[static_cast<size_t>(k)] = opa(m, k);
            for (int64_t n = 0; n < d.N; ++n) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < d.K; ++k) {
                    const double p = arow[static_cast<size_t>(k)] * opb(k, n);
                    acc += p;
                    mag += std::fabs(p);
                }
                double x = double(d.alpha) * acc, e = 2 * (d.K + 5) * kU * std::fabs(double(d.alpha)) * mag;
                if (d.beta != 0.0f) {
                    x += double(d.beta) * C.at(m, n);
                    e += 2 * kU * std::fabs(double(d.beta) * C.at(m, n));
                }
                if (d.epilogue.bias) {
                    x += bias[static_cast<size_t>(n)];
                    e += 2 * kU * std::fabs(bias[static_cast<size_t>(n)]);
                }
                const Activation act = d.epilogue.act;
                const bool smooth = act == Activation::gelu_erf || act == Activation::gelu_tanh || act == Activation::silu;
                double v = act_d(act, x);
                e = (smooth ? 1.2 : 1.0) * e + (smooth ? 4 * kU * (std::fabs(x) + std::fabs(v)) : 0.0);
                if (d.epilogue.residual) {
                    const double r = R.at(m, n);
                    e += kU * (std::fabs(v) + std::fabs(r));
                    v += r;
                }
                want[static_cast<size_t>(m * d.N + n)] = v;
                tol[static_cast<size_t>(m * d.N + n)] = e + 1e-30;
            }
        }
    }

    ::testing::AssertionResult check() const {
        int bad = 0;
        std::ostringstream msg;
        for (int64_t m = 0; m < d.M; ++m)
            for (int64_t n = 0; n < d.N; ++n) {
                const size_t i = static_cast<size_t>(m * d.N + n);
                const double g = C.at(m, n);
                if (!(std::fabs(g - want[i]) <= tol[i]) && bad++ < 5)
                    msg << "\n  C[" << m << "," << n << "] got " << g << " want " << want[i] << " (tol " << tol[i] << ")";
            }
        for (size_t i = 0; i < C.buf.size(); ++i)
            if (!C.inside(i) && std::memcmp(&C.buf[i], &c_before[i], 4) != 0) {
                if (bad++ < 5) msg << "\n  element " << i << " outside C changed";
                break;
            }
        if (bad == 0) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << bad << " mismatches:" << msg.str();
    }
    std::vector<uint32_t> c_bits() const {
        std::vector<uint32_t> v(C.buf.size());
        std::memcpy(v.data(), C.buf.data(), v.size() * 4);
        return v;
    }
};

// The case at 1 and 2 threads, each through a fresh plan and problem by `run`: both against the
// oracle, and the two results bit for bit.
template <class Run>
void check_one_and_two_threads(const Case& c, Run&& run) {
    std::vector<uint32_t> bits[2];
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        Problem p(c);
        const GemmPlan plan(c.d);
        run(plan, p);
        ASSERT_TRUE(p.check()) << "threads " << threads;
        bits[threads - 1] = p.c_bits();
    }
    EXPECT_EQ(bits[0], bits[1]);
}

// (fp32 ones: the bf16 decode kernels, "<isa>:bf16:gemv", are tested in test_gemm_bf16.cpp.)
bool is_decode_impl(const char* name) {
    const std::string n(name);
    if (n.find(":bf16") != std::string::npos) return false;
    return n.find(":gemv") != std::string::npos || n.find(":panel") != std::string::npos;
}

// With M <= 16 the decode kernels read an unpacked B in place with a kernel of its layout (dot
// products along k for B^T, row sweeps for a [K x N] B when M is tiny) and a packed B with
// broadcasts: all within the tolerance, not necessarily with the same rounding. For larger M the
// same sums are computed in the same order, packed or not.
bool same_bits_expected(const GemmDesc& d, const char* impl) {
    return !(is_decode_impl(impl) && d.M <= detail::kGemvMaxM);
}

// Runs c through a plan, unpacked and with a packed B: both match the oracle (and each other
// where the same order of summation is used).
void run_both(const Case& c, bool expect_gemv) {
    SCOPED_TRACE(describe(c));
    const GemmPlan plan(c.d);
    if (expect_gemv && std::string(plan.impl_name()).find(":gemv") == std::string::npos) {
        // The registry prefers the small / direct kernels for shapes they take: force the decode
        // kernel of this ISA level, unpacked and packed, so it is covered too.
        const detail::GemmSpec s = detail::gemm_check_desc("test", c.d);
        const auto& reg = detail::gemm_registry();
        const std::string name = std::string("jit:") + (max_isa() >= Isa::avx512 ? "avx512" : "avx2") + ":gemv";
        const auto sel = reg.get(s, reg.find(name));
        Problem fp(c), fq(c);
        detail::GemmCall call;
        call.args = fp.args();
        call.alpha = c.d.alpha;
        call.beta = c.d.beta;
        sel.kernel->run(call);
        ASSERT_TRUE(fp.check()) << "forced " << name << ", unpacked";
        const auto pk = sel.kernel->pack_b(fq.B.data());
        call.args = fq.args();
        call.args.B = nullptr;
        call.packed_b = pk.get();
        sel.kernel->run(call);
        ASSERT_TRUE(fq.check()) << "forced " << name << ", packed";
    }
    Problem p(c), q(c);
    plan.run(p.args());
    ASSERT_TRUE(p.check()) << "unpacked, impl=" << plan.impl_name();
    const PackedB packed = plan.pack_b(q.B.data());
    GemmArgs qa = q.args();
    qa.B = nullptr;  // not read
    plan.run(qa, packed);
    ASSERT_TRUE(q.check()) << "packed, impl=" << plan.impl_name();
    if (same_bits_expected(c.d, plan.impl_name()))
        EXPECT_EQ(p.c_bits(), q.c_bits()) << "packed and unpacked B differ, impl=" << plan.impl_name();
}

const int64_t kSizes[] = {1, 7, 17, 33, 100, 257, 1023, 4097};

}  // namespace

// ---- sweeps -------------------------------------------------------------------------------------

TEST(GemmDecode, SweepShapesTransposesLeadingDimensions) {
    // (N, K) pairs sampled from kSizes x kSizes (not all combinations: the large ones are paired
    // with small ones), every M in 1..16 over the sweep.
    std::vector<std::pair<int64_t, int64_t>> nk;
    for (int64_t n : kSizes)
        for (int64_t k : kSizes)
            if (n * k <= 300000 || (n == 4097 && k == 100) || (n == 1023 && k == 257)) nk.push_back({n, k});
    ThreadsGuard tg;
    const float alphas[] = {1.0f, -0.5f, 1.25f};
    const float betas[] = {0.0f, 1.0f, -0.75f};
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            int idx = 0;
            for (const auto& [N, K] : nk) {
                for (Trans tb : {Trans::T, Trans::N}) {
                    ++idx;
                    if (xk::test::kTsanSweep && idx % 3 != 0) continue;  // (TSan, looking for races: a third)
                    Case c;
                    c.d.M = 1 + (idx * 5 + threads) % 16;
                    c.d.N = N, c.d.K = K;
                    c.d.trans_b = tb;
                    c.d.trans_a = idx % 5 == 0 ? Trans::T : Trans::N;
                    if (idx % 2) c.d.lda = (c.d.trans_a == Trans::N ? K : c.d.M) + 3;
                    if (idx % 3 == 0) c.d.ldb = (tb == Trans::N ? N : K) + 5;
                    if (idx % 4 < 2) c.d.ldc = N + 1;
                    c.d.alpha = alphas[idx % 3];
                    c.d.beta = betas[(idx / 3) % 3];
                    c.misalign = static_cast<size_t>(idx % 4);
                    c.seed = static_cast<uint64_t>(idx * 7 + threads);
                    run_both(c, isa >= Isa::avx2);
                    if (HasFatalFailure()) return;
                }
            }
        });
    }
}

TEST(GemmDecode, EveryMFrom1To16WithTails) {
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            for (int64_t M = 1; M <= 16; ++M) {
                Case c;
                c.d.M = M, c.d.N = 33 + 31 * (M % 3), c.d.K = 17 + 40 * (M % 4);
                c.d.trans_b = M % 2 ? Trans::T : Trans::N;
                c.d.beta = M % 3 == 0 ? 0.5f : 0.0f;
                c.misalign = static_cast<size_t>(M % 3);
                c.seed = 100 + static_cast<uint64_t>(M);
                run_both(c, isa >= Isa::avx2);
                if (HasFatalFailure()) return;
            }
        });
    }
}

TEST(GemmDecode, LargeShapesBothThreads) {
    ThreadsGuard tg;
    const int64_t shapes[][3] = {{1, 4097, 257}, {16, 1023, 1023}, {5, 257, 4097}};
    for (int threads : {1, 2}) {
        if (xk::test::kTsanSweep && threads == 1) continue;  // (TSan: the threaded runs)
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            for (const auto& s : shapes) {
                for (Trans tb : {Trans::T, Trans::N}) {
                    Case c;
                    c.d.M = s[0], c.d.N = s[1], c.d.K = s[2];
                    c.d.trans_b = tb;
                    c.d.beta = tb == Trans::T ? 1.0f : 0.0f;
                    c.d.epilogue.bias = true;
                    c.misalign = 1;
                    run_both(c, isa >= Isa::avx2);
                    if (HasFatalFailure()) return;
                }
            }
        });
    }
}

TEST(GemmDecode, EveryEpilogue) {
    const Activation acts[] = {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                               Activation::silu};
    ThreadsGuard tg;
    for_each_isa([&](Isa isa) {
        int idx = 0;
        for (Activation act : acts)
            for (bool bias : {false, true})
                for (int res : {0, 1, 2})  // none, f32, bf16
                    for (float beta : {0.0f, 1.0f, 0.5f}) {
                        ++idx;
                        set_num_threads(1 + idx % 2);
                        Case c;
                        c.d.M = 1 + idx % 16, c.d.N = 45, c.d.K = 70;
                        c.d.trans_b = idx % 2 ? Trans::T : Trans::N;
                        c.d.alpha = idx % 3 ? 1.0f : 1.5f;
                        c.d.beta = beta;
                        c.d.epilogue.bias = bias;
                        c.d.epilogue.act = act;
                        c.d.epilogue.residual = res != 0;
                        c.d.residual_type = res == 2 ? DType::bf16 : DType::f32;
                        if (res && idx % 2) c.d.ld_residual = c.d.N + 7;
                        c.misalign = static_cast<size_t>(idx % 4);
                        c.seed = 2000 + static_cast<uint64_t>(idx);
                        run_both(c, isa >= Isa::avx2);
                        if (HasFatalFailure()) return;
                    }
    });
}

TEST(GemmDecode, ZeroKAndNaNBeta) {
    for_each_isa([&](Isa) {
        // K == 0: C = act(beta C + bias) + residual.
        for (float beta : {0.0f, 0.5f}) {
            Case c;
            c.d.M = beta == 0.0f ? 1 : 3, c.d.N = 200, c.d.K = 0, c.d.beta = beta;
            c.d.epilogue.bias = true, c.d.epilogue.act = Activation::silu, c.d.epilogue.residual = true;
            SCOPED_TRACE(describe(c));
            Problem p(c);
            const GemmPlan plan(c.d);
            plan.run(p.args());
            EXPECT_TRUE(p.check());
            Problem q(c);
            plan.run(q.args(), plan.pack_b(nullptr));
            EXPECT_TRUE(q.check());
        }
        // A NaN beta is not zero: C is read and the result is NaN.
        Case c;
        c.d.M = 2, c.d.N = 9, c.d.K = 5, c.d.beta = kNaN;
        Problem p(c);
        GemmPlan(c.d).run(p.args());
        for (int64_t m = 0; m < 2; ++m)
            for (int64_t n = 0; n < 9; ++n) EXPECT_TRUE(std::isnan(p.C.at(m, n)));
    });
}

// ---- implementations, K blocks, prefetch, code sharing ------------------------------------------

TEST(GemmDecode, EveryDecodeImplementationForcedThroughTheRegistry) {
    const auto& reg = detail::gemm_registry();
    int ran = 0;
    for (const auto& impl : reg.impls()) {
        if (!is_decode_impl(impl.name) || !isa_supported(impl.isa) || impl.isa > max_isa()) continue;
        for (int64_t M : {1, 2, 3, 4, 9, 13, 16, 40}) {
            Case c;
            c.d.M = M, c.d.N = 67, c.d.K = 45;
            c.d.trans_a = M % 2 ? Trans::N : Trans::T;
            c.d.trans_b = M % 3 ? Trans::T : Trans::N;
            c.d.beta = 0.5f;
            c.d.epilogue.bias = true;
            c.misalign = 3;
            const detail::GemmSpec spec = detail::gemm_check_desc("test", c.d);
            if (!impl.supports(spec)) {
                EXPECT_GT(M, detail::kGemvMaxM) << impl.name;
                continue;
            }
            SCOPED_TRACE(std::string("impl=") + impl.name + " " + describe(c));
            const auto k = reg.get(spec, impl).kernel;
            Problem p(c), q(c);
            detail::GemmCall call;
            call.args = p.args();
            call.alpha = c.d.alpha, call.beta = c.d.beta;
            k->run(call);
            EXPECT_TRUE(p.check());
            const auto packed = k->pack_b(q.B.data());
            const bool blocked = std::string(impl.name).find(":blocked") != std::string::npos;
            EXPECT_EQ(packed->layout, blocked ? detail::gemm_b_layout(impl.isa, c.d.K, c.d.N).name
                                              : detail::gemm_f32_panel_layout(c.d.K, c.d.N));
            call.args = q.args();
            call.args.B = nullptr;
            call.packed_b = packed.get();
            k->run(call);
            EXPECT_TRUE(q.check());
            if (same_bits_expected(c.d, impl.name)) EXPECT_EQ(p.c_bits(), q.c_bits());
            ++ran;
        }
    }
    if (max_isa() >= Isa::avx2) EXPECT_GT(ran, 0);
}

TEST(GemmDecode, KBlocksAndPrefetchVariants) {
    // Small K blocks force many blocks (accumulation across blocks, transposer tails); prefetch on
    // with every hint exercises the prefetching micro-kernels. Kernels are created after the
    // tuning is set, so the kernel cache is cleared around each configuration.
    ThreadsGuard tg;
    TuningGuard guard;
    // {kc, pf_bytes, pf_hint, ks (B^T super-block), pf_transpose, ks_n, chunk_n, streams}
    const detail::GemvTuning configs[] = {{8, 0, 0, 16, 64, 8, 1, 1},       {13, 256, 0, 0, -1, 0, 3, 2},
                                          {24, 4096, 1, 100, 0, 50, 0, 3}, {40, 64, 2, 40, 256, 0, 2, 4},
                                          {128, 1024, 0, 0, -1, 0, 0, 0}};
    int idx = 0;
    for (const auto& t : configs) {
        detail::gemv_set_tuning(t);
        clear_kernel_cache();
        for (int threads : {1, 2}) {
            set_num_threads(threads);
            for_each_isa([&](Isa isa) {
                for (int64_t M : {1, 2, 3, 7, 16, 20}) {  // 20: the panel path (B^T transposed on the fly)
                    for (Trans tb : {Trans::T, Trans::N}) {
                        ++idx;
                        Case c;
                        c.d.M = M, c.d.N = idx % 2 ? 300 : 64, c.d.K = 127 + idx % 5;
                        c.d.trans_b = tb;
                        c.d.beta = idx % 3 == 0 ? 1.0f : 0.0f;
                        c.misalign = static_cast<size_t>(idx % 5);
                        c.seed = 3000 + static_cast<uint64_t>(idx);
                        SCOPED_TRACE("kc=" + std::to_string(t.kc) + " pf=" + std::to_string(t.pf_bytes) +
                                     " hint=" + std::to_string(t.pf_hint) + " streams=" + std::to_string(t.streams));
                        run_both(c, isa >= Isa::avx2 && M <= detail::kGemvMaxM);
                        if (HasFatalFailure()) return;
                    }
                }
            });
        }
    }
    detail::gemv_set_tuning({0, -1, 0});
    clear_kernel_cache();
}

TEST(GemmDecode, EveryGeneratorEmitsForAvx2AndAvx512) {
    // Emission needs no AVX-512 hardware: this checks every instruction encoding of the zmm
    // variants here; running them is left to the sweeps on a machine that has AVX-512.
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
        SCOPED_TRACE(isa_name(isa));
        std::vector<std::string> made;
        ASSERT_NO_THROW(made = detail::gemv_generate_all(isa));
        const size_t micro = size_t(detail::gemv_max_mr(isa)) * 9;
        EXPECT_GT(made.size(), micro);
        for (const std::string& m : made) EXPECT_EQ(m.find(":0"), std::string::npos) << m;
    }
}

TEST(GemmDecode, ShapesShareGeneratedCode) {
    if (max_isa() < Isa::avx2) GTEST_SKIP() << "no AVX2";
    clear_kernel_cache();
    GemmDesc d;
    d.M = 16, d.N = 300, d.K = 2000;  // B of 2.4 MB: too large for the direct kernel on any L2
    const GemmPlan first(d);
    const uint64_t after_first = kernel_cache_stats().creations;
    // Other N, K, transposes, leading dimensions and epilogues with the same row tiles reuse the
    // micro-kernels and the transposer: each new plan creates only its own (shape) kernel.
    GemmDesc e = d;
    // (B too large for the direct kernel on any L2, so the decode kernel takes every one.)
    e.N = 4097, e.K = 300, e.trans_b = Trans::N, e.ldb = 5000, e.epilogue.bias = true, e.beta = 1.0f;
    const GemmPlan second(e);
    EXPECT_EQ(kernel_cache_stats().creations, after_first + 1);
    GemmDesc f = d;
    f.N = 700, f.K = 1023, f.epilogue.act = Activation::gelu_tanh, f.alpha = 2.0f;
    const GemmPlan third(f);
    EXPECT_EQ(kernel_cache_stats().creations, after_first + 2);
    EXPECT_STREQ(first.impl_name(), second.impl_name());
    EXPECT_STREQ(first.impl_name(), third.impl_name());
    EXPECT_NE(std::string(first.impl_name()).find(":gemv"), std::string::npos) << first.impl_name();
}

TEST(GemmDecode, OnePackedWeightServesEveryBatchSize) {
    // The packed layout depends on K and N only: a weight packed once serves M = 1 (decode),
    // M = 16 and M = 40 (prefill) plans, and so does a pack made by any of them.
    ThreadsGuard tg;
    set_num_threads(2);
    for_each_isa([&](Isa) {
        Case base;
        base.d.N = 70, base.d.K = 90, base.d.trans_b = Trans::T;
        base.d.M = 1;
        Problem src(base);
        const PackedB packed = GemmPlan(base.d).pack_b(src.B.data());
        if (packed.layout() == detail::gemm_f32_panel_layout(90, 70))
            EXPECT_EQ(packed.size_bytes(), size_t(3 * 32 * 90 * 4));  // ceil(70 / 32) panels of 32 x K
        for (int64_t M : {1, 16, 40}) {
            Case c = base;
            c.d.M = M;
            c.seed = base.seed;  // same B (generated after A, so regenerate and compare B)
            Problem p(c);
            std::memcpy(p.B.buf.data(), src.B.buf.data(), src.B.buf.size() * 4);
            p.oracle();
            const GemmPlan plan(c.d);
            EXPECT_EQ(packed.layout(), PackedB(plan.pack_b(p.B.data())).layout());
            GemmArgs a = p.args();
            a.B = nullptr;
            plan.run(a, packed);
            EXPECT_TRUE(p.check()) << "M=" << M << " impl=" << plan.impl_name();
        }
    });
}

TEST(GemmDecode, DecodeKernelReadsThePrefillPlansPackedB) {
    // AVX-512: an M <= 16 plan given the PackedB of a prefill plan (the blocked kernel's layout: K
    // blocks of 32-column panels) runs the decode kernel on it ("jit:avx512:gemv:blocked": one packed
    // weight for decode and prefill). Several K blocks (K = 1100: 368 + 368 + 364 rows; 600: 304 +
    // 296), N tails, both transposes of B, every M path (M = 1: the streams, 700 columns = 22 panels:
    // 2 left over beside 4 streams of 5; 2..12: one row tile; 13..16: two, with the dense prefetch
    // across K blocks), epilogues; 1 and 2 threads give the
    // same bits. Other ISA caps: whatever kernel reads that layout, against the oracle.
    ThreadsGuard tg;
    const int64_t shapes[][2] = {{611, 1100}, {70, 90}, {700, 600}, {33, 1}};
    for_each_isa([&](Isa isa) {
        // (fp32 runs the same kernels at every level from avx512 up; avx2: another reader)
        if (isa != Isa::avx512 && isa != Isa::avx2) return;
        int idx = 0;
        for (const auto& sh : shapes)
            for (int64_t M : {1, 5, 12, 13, 16}) {
                Case c;
                c.d.M = M, c.d.N = sh[0], c.d.K = sh[1];
                c.d.trans_b = idx % 2 ? Trans::T : Trans::N;
                c.d.trans_a = idx % 5 == 4 ? Trans::T : Trans::N;
                c.d.beta = idx % 3 == 2 ? 0.5f : 0.0f;
                c.d.epilogue.bias = idx % 2 == 0;
                c.d.epilogue.act = static_cast<Activation>(idx % 5);
                c.d.epilogue.residual = idx % 4 == 1;
                c.misalign = static_cast<size_t>(idx % 3);
                c.seed = 700 + static_cast<uint64_t>(idx++);
                Case pre = c;
                pre.d.M = 64;  // a prefill plan: the blocked kernel's layout
                pre.d.trans_a = Trans::N;
                pre.d.beta = 0.0f;
                pre.d.epilogue = {};
                SCOPED_TRACE(describe(c));
                Problem src(c);
                const PackedB packed = GemmPlan(pre.d).pack_b(src.B.data());
                const detail::GemmSpec spec = detail::gemm_check_desc("test", c.d);
                if (isa >= Isa::avx512) {
                    EXPECT_EQ(packed.layout(), detail::gemm_b_layout(Isa::avx512, c.d.K, c.d.N).name);
                }
                if (isa >= Isa::avx512 && c.d.K > detail::gemm_b_layout(Isa::avx512, c.d.K, c.d.N).kc) {
                    // (one K block of a small B: the direct kernel, ahead in the registry, reads it)
                    const auto& reg = detail::gemm_registry();
                    EXPECT_EQ(detail::gemm_kernel_for_layout(spec, packed.layout()).get(),
                              reg.get(spec, reg.find("jit:avx512:gemv:blocked")).kernel.get());
                }
                check_one_and_two_threads(c, [&](const GemmPlan& plan, Problem& p) {
                    GemmArgs a = p.args();
                    a.B = nullptr;
                    plan.run(a, packed);
                });
            }
    });
}

TEST(GemmDecode, ResultsDoNotDependOnTheThreadCount) {
    // Threads split the columns; every output is computed by the same code whatever the split
    // (for M = 1 with a packed B, a panel gives the same sums alone or streamed with others).
    ThreadsGuard tg;
    for_each_isa([&](Isa) {
        int idx = 0;
        for (int64_t M : {1, 5, 16})
            for (Trans tb : {Trans::T, Trans::N})
                for (bool use_packed : {false, true}) {
                    Case c;
                    c.d.M = M, c.d.N = 611, c.d.K = 77 + 10 * idx++, c.d.trans_b = tb;
                    c.d.epilogue.bias = true;
                    SCOPED_TRACE(describe(c) + (use_packed ? " packed" : " unpacked"));
                    check_one_and_two_threads(c, [&](const GemmPlan& plan, Problem& p) {
                        GemmArgs a = p.args();
                        if (use_packed)
                            plan.run(a, plan.pack_b(p.B.data()));
                        else
                            plan.run(a);
                    });
                }
    });
}

TEST(GemmDecode, RowSweepSlicesDoNotDependOnTheThreadCount) {
    // An unpacked [K x N] B with one row tile (M <= 2): K cut into slices (their count depends on
    // K only), the slices' sums added in order; threads take whole slices. Long K (several
    // slices, a remainder of rows below the 8-row group), leading dimensions, both thread counts:
    // the oracle, and the same bits.
    ThreadsGuard tg;
    for_each_isa([&](Isa isa) {
        int idx = 0;
        for (int64_t M : {1, 2})
            for (int64_t K : {int64_t(2048 + 77), int64_t(4500)}) {
                Case c;
                c.d.M = M, c.d.N = 611 - 40 * idx, c.d.K = K, c.d.trans_b = Trans::N;
                c.d.ldb = idx % 2 ? c.d.N + 9 : 0;
                c.d.beta = idx % 2 ? 0.5f : 0.0f;
                c.d.epilogue.bias = true;
                c.misalign = static_cast<size_t>(idx % 3);
                c.seed = 900 + static_cast<uint64_t>(idx++);
                SCOPED_TRACE(describe(c));
                check_one_and_two_threads(c, [&](const GemmPlan& plan, Problem& p) {
                    if (isa >= Isa::avx2)
                        EXPECT_NE(std::string(plan.impl_name()).find(":gemv"), std::string::npos) << plan.impl_name();
                    plan.run(p.args());
                });
            }
    });
}

TEST(GemmDecode, ConcurrentRunsOfOnePlan) {
    ThreadsGuard tg;
    set_num_threads(2);
    Case c;
    c.d.M = 7, c.d.N = 130, c.d.K = 301, c.d.trans_b = Trans::T;
    c.d.beta = 0.5f, c.d.epilogue.bias = true, c.d.epilogue.act = Activation::relu;
    const GemmPlan plan(c.d);
    Problem ref(c);
    plan.run(ref.args());
    ASSERT_TRUE(ref.check());
    const PackedB packed = plan.pack_b(ref.B.data());
    Problem ref_packed(c);
    plan.run(ref_packed.args(), packed);
    ASSERT_TRUE(ref_packed.check());
    const std::vector<uint32_t> want = ref.c_bits(), want_packed = ref_packed.c_bits();
    std::atomic<int> mismatches{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
        workers.emplace_back([&, w] {
            for (int it = 0; it < 6; ++it) {
                Problem p(c);
                const bool use_packed = (w + it) % 2;
                if (use_packed)
                    plan.run(p.args(), packed);
                else
                    plan.run(p.args());
                if (p.c_bits() != (use_packed ? want_packed : want)) ++mismatches;
            }
        });
    for (auto& t : workers) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

TEST(GemmDecode, PlanKeepsTheKernelFoundPerLayoutAndCap) {
    // One decode plan fed, in turn, PackedBs of several layouts (its own; a prefill plan's made
    // under each ISA cap: the blocked layouts, the reference's plain one under scalar) while the cap
    // moves: every run reads the kernel kept for (layout, cap), found once. Each result is checked
    // against the oracle, a (layout, cap) seen again gives the bits it gave the first time, and a
    // layout no kernel under the cap reads is refused every time, nothing written — also after the
    // plan has kept a kernel for it under another cap. Then four threads alternate the packs on
    // the plan at once (the kept kernels are read without a lock).
    ThreadsGuard tg;
    set_num_threads(1);
    Case c;
    c.d.M = 3, c.d.N = 77, c.d.K = 530, c.d.trans_b = Trans::T;
    c.d.epilogue.bias = true, c.d.epilogue.act = Activation::silu;
    c.misalign = 1;
    c.seed = 4242;
    Case pre = c;
    pre.d.M = 64;
    pre.d.epilogue = {};
    Problem src(c);
    const std::vector<Isa> caps = available_isas();
    std::vector<PackedB> packs;
    std::vector<std::string> layouts;
    for (Isa isa : caps) {
        IsaCap cap(isa);
        PackedB pb = GemmPlan(pre.d).pack_b(src.B.data());
        if (std::find(layouts.begin(), layouts.end(), pb.layout()) != layouts.end()) continue;
        layouts.push_back(pb.layout());
        packs.push_back(std::move(pb));
    }
    const GemmPlan plan(c.d);
    packs.push_back(plan.pack_b(src.B.data()));
    layouts.push_back(packs.back().layout());
    ASSERT_GE(packs.size(), 2u);
    const detail::GemmSpec spec = detail::gemm_check_desc("test", c.d);
    std::map<std::pair<size_t, Isa>, std::vector<uint32_t>> seen;
    int refused = 0;
    for (int round = 0; round < 3; ++round)
        for (size_t ci = 0; ci < caps.size(); ++ci) {
            const Isa isa = caps[(ci + static_cast<size_t>(round)) % caps.size()];
            IsaCap cap(isa);
            for (size_t i = 0; i < packs.size(); ++i) {
                const size_t k = (i + ci) % packs.size();
                SCOPED_TRACE(std::string("cap ") + isa_name(isa) + ", PackedB " + layouts[k]);
                Problem p(c);
                GemmArgs a = p.args();
                a.B = nullptr;
                if (!detail::gemm_kernel_for_layout(spec, layouts[k]) && layouts[k] != packs.back().layout()) {
                    XK_EXPECT_INVALID(plan.run(a, packs[k]), "no kernel allowed under the ISA cap reads that one");
                    EXPECT_EQ(p.c_bits(), Problem(c).c_bits());
                    ++refused;
                    continue;
                }
                plan.run(a, packs[k]);
                ASSERT_TRUE(p.check());
                auto it = seen.emplace(std::make_pair(k, isa), p.c_bits());
                if (!it.second) EXPECT_EQ(it.first->second, p.c_bits()) << "a second run of this (layout, cap)";
            }
        }
    // (under the scalar cap no kernel reads a JIT kernel's blocked layout)
    if (caps.size() > 1) EXPECT_GT(refused, 0);
    // Concurrent runs at the best cap: each thread's packs in another order, every result the bits
    // of the sequential run.
    std::vector<size_t> usable;
    for (size_t k = 0; k < packs.size(); ++k)
        if (seen.count({k, caps.back()})) usable.push_back(k);
    ASSERT_FALSE(usable.empty());
    std::atomic<int> mismatches{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < 4; ++w)
        workers.emplace_back([&, w] {
            for (int it = 0; it < 8; ++it) {
                const size_t k = usable[static_cast<size_t>(w + it) % usable.size()];
                Problem p(c);
                GemmArgs a = p.args();
                a.B = nullptr;
                plan.run(a, packs[k]);
                if (p.c_bits() != seen.at({k, caps.back()})) ++mismatches;
            }
        });
    for (auto& t : workers) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

// ---- bad input ------------------------------------------------------------------------------------

TEST(GemmDecode, BadInputOnDecodePlans) {
    GemmDesc d;
    d.M = 1, d.N = 64, d.K = 48, d.trans_b = Trans::T;
    std::vector<float> A(48), B(64 * 48), C(64), bias(64);
    const GemmPlan plan(d);
    GemmArgs a;
    a.A = A.data(), a.B = B.data(), a.C = C.data();
    plan.run(a);
    XK_EXPECT_INVALID(plan.run([&] { GemmArgs b = a; b.A = nullptr; return b; }()), "xk::GemmPlan::run: A=null");
    XK_EXPECT_INVALID(plan.run([&] { GemmArgs b = a; b.B = nullptr; return b; }()), "xk::GemmPlan::run: B=null");
    XK_EXPECT_INVALID(plan.run([&] { GemmArgs b = a; b.C = B.data() + 5; return b; }()), "overlaps B=");
    XK_EXPECT_INVALID(plan.pack_b(nullptr), "xk::GemmPlan::pack_b: B=null");
    GemmDesc e = d;
    e.ldb = 47;
    XK_EXPECT_INVALID(GemmPlan{e}, "xk::GemmPlan: ldb=47 must be >= K=48");
    e = d, e.M = -1;
    XK_EXPECT_INVALID(GemmPlan{e}, "xk::GemmPlan: M=-1 must be >= 0");
    e = d, e.epilogue.bias = true;
    XK_EXPECT_INVALID(GemmPlan(e).run(a), "xk::GemmPlan::run: bias=null");
    // A weight packed for another K or N is rejected, naming both layouts.
    GemmDesc other = d;
    other.K = 47;
    const PackedB wrong = GemmPlan(other).pack_b(B.data());
    XK_EXPECT_INVALID(plan.run(a, wrong), "packed_b='" + wrong.layout() + "' was packed for another plan");
    XK_EXPECT_INVALID(plan.run(a, wrong), plan.pack_b(B.data()).layout());
}
