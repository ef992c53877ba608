// bf16 GEMM (bf16 x bf16 -> f32 | bf16) on the blocked JIT kernel ("jit:avx2:bf16",
// "jit:avx512:bf16": A and B widened to f32 as they are packed, the fp32 microkernel, a bf16 C
// written by the last K block's store), under every ISA the machine allows (for_each_isa: the
// scalar cap runs the reference), against a double-precision oracle written here:
//   - odd M, N, K (1, 7, 17, 33, 100, 257) and K over several K blocks (first / middle / last
//     block epilogues; kc from gemm_b_layout), every M and N tail of the 6x16 / 14x32 tiles,
//   - both transposes, leading dimensions above the minimum, misaligned pointers (odd bf16
//     offsets), padding of the inputs full of NaN (reading it shows), C's padding untouched,
//   - every epilogue (bias, each activation, f32 / bf16 residual) x beta 0 / 1 / other x alpha,
//     beta = 0 over a C full of NaN (never read),
//   - bf16 C rounding bit for bit (ties to even, overflow to Inf, Inf, NaN kept quiet, denormals)
//     against the reference where the f32 value is exact,
//   - packed B (bf16 panels) equal to unpacked, and one PackedB reused by plans of other M (and
//     the other C type), a PackedB of f32 weights rejected,
//   - the f32 accumulator of a bf16 C in row chunks and narrow column blocks (XK_GEMM_CS / _MC /
//     _NC / _KC), bit-identical to the default blocking of the same K blocks,
//   - 1 and 2 threads bit-identical, and the selection (jit:<isa>:bf16 at avx2 and above; the
//     reference for M = 1 with N <= 16, M = 2 with N <= 8, M N K <= 64, where it measured faster:
//     those plans read a PackedB of the blocked layout through "jit:<isa>:bf16:any", and theirs,
//     the reference's plain layout, is read by larger plans through "jit:<isa>:bf16:plain").
//
// Tolerance per element of C (u = 2^-24), the bound of test_gemm.cpp (bf16 inputs are exact in
// fp32 and so are their products, so the fp32 bound holds for the bf16 values):
//   e = L (2 (K + 5) u |alpha| sum_k |a_mk b_kn| + 2u (|beta C| + |bias|))
//       + 4u (|x| + |act(x)|) [gelu, silu] + u (|act(x)| + |residual|)
//   bf16 C: e + 2^-8 |want|   (the one rounding to nearest even: half a bf16 ulp, <= 2^-9 |x|)
// with x the value entering the activation and L = 1.2 its slope bound (gelu, silu; 1 otherwise).
// The VDPBF16PS kernel (avx512_bf16) adds each pair's odd product, then its even one, into the
// accumulator (each addition rounded to nearest even: the same bound, another order than the
// reference's increasing k, so its bits differ) and flushes denormals: a denormal input counts
// as 0 (losing |a b| < FLT_MIN max(|a|, |b|)) and a denormal sum becomes 0 (< FLT_MIN each):
//   dp: e + L |alpha| FLT_MIN sum_k (1 + |a_mk| + |b_kn|)
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "dispatch/kernel_cache.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

using namespace xk;
using xk::test::for_each_isa;

namespace {

constexpr double kU = 1.0 / 16777216.0;    // 2^-24
constexpr double kBf16Rtol = 1.0 / 256.0;  // 2^-8
constexpr double kDpAbs = 1.1754943508222875e-38;  // FLT_MIN: a VDPBF16PS step's flush to zero

// Every sweep below runs the VDPBF16PS kernel at the avx512_bf16 cap, whatever the CPU's probe
// picks (SelectionFollowsTheDpProbe checks the probe's choice itself).
const bool kForceDp = [] {
    setenv("XK_GEMM_BF16_DP", "1", 1);
    return true;
}();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

double act_d(Activation a, double x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0 ? x : 0;
        case Activation::gelu_erf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
        case Activation::gelu_tanh: {
            const double y = std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
            return x / (1.0 + std::exp(-2.0 * y));
        }
        case Activation::silu: return x / (1.0 + std::exp(-x));
    }
    return x;
}

float bits_f(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

// Sets (or unsets, value == nullptr) tuning variables for a scope, restoring them on exit; the
// kernel cache is emptied on entry and exit so that plans read them.
struct EnvGuard {
    std::vector<std::string> names;
    std::vector<std::pair<bool, std::string>> before;  // (was set, value): restored on exit
    EnvGuard(std::initializer_list<std::pair<const char*, const char*>> vars) {
        for (const auto& [n, v] : vars) {
            names.emplace_back(n);
            const char* old = std::getenv(n);
            before.emplace_back(old != nullptr, old ? old : "");
            if (v)
                setenv(n, v, 1);
            else
                unsetenv(n);
        }
        detail::KernelCache::instance().clear();
    }
    ~EnvGuard() {
        for (size_t i = names.size(); i-- > 0;) {
            if (before[i].first)
                setenv(names[i].c_str(), before[i].second.c_str(), 1);
            else
                unsetenv(names[i].c_str());
        }
        detail::KernelCache::instance().clear();
    }
};

// The largest K block of the blocked kernel under the current cap, and a K of three blocks.
// The blocked kernel's layout under the current cap (the VDPBF16PS kernel's pairs at avx512_bf16).
// The VDPBF16PS kernel runs at the avx512_bf16 cap where the CPU's probe (or XK_GEMM_BF16_DP,
// forced to 1 for this binary below) says so.
bool dp_kernel() { return max_isa() >= Isa::avx512_bf16 && detail::gemm_bf16_dp_fast(); }
Isa layout_isa() { return dp_kernel() ? Isa::avx512_bf16 : max_isa() >= Isa::avx512 ? Isa::avx512 : Isa::avx2; }
int64_t kc_max() { return detail::gemm_b_layout(layout_isa(), 100000, 16, DType::bf16).kc; }
int64_t k_multi() { return 2 * kc_max() + 37; }

std::string isa_prefix() {
    return dp_kernel() ? "jit:avx512_bf16:bf16" : max_isa() >= Isa::avx512 ? "jit:avx512:bf16" : "jit:avx2:bf16";
}

// Shapes the reference runs faster than the blocked kernel (measured; see gemm_bf16_ref_preferred).
bool ref_preferred(const GemmDesc& d) {
    return (d.M == 1 && (d.N <= 16 || d.trans_b == Trans::N)) || (d.M == 2 && d.N <= 8) || d.M * d.N * d.K <= 64;
}

// The bf16 decode kernel (AVX-512 or AVX2, M <= 16) runs d under the current cap.
bool gemv_runs(const GemmDesc& d) {
    return max_isa() >= Isa::avx2 && d.M >= 1 && d.M <= detail::kGemvBf16MaxM && d.N > 0 && d.K > 0;
}
std::string gemv_name() {
    return dp_kernel() ? "avx512_bf16:bf16:gemv" : max_isa() >= Isa::avx512 ? "avx512:bf16:gemv" : "avx2:bf16:gemv";
}
// The reference runs d under the current cap.
bool ref_runs(const GemmDesc& d) {
    return max_isa() == Isa::scalar || d.K == 0 || d.M == 0 || d.N == 0 || (!gemv_runs(d) && ref_preferred(d));
}

// What a plan must pick under the current cap.
std::string want_impl(const GemmDesc& d) {
    if (ref_runs(d)) return "ref:scalar";
    if (max_isa() >= Isa::amx && d.M >= 32) return "amx:bf16";  // the tiles, from 32 rows up
    // M 1..31: the tiles for a PackedB in their layout, the vector pick for a plain B
    const char* dec = std::getenv("XK_AMX_DECODE");  // (=0: the decode-sized tiles off)
    if (max_isa() >= Isa::amx && d.M >= 1 && !ref_preferred(d) && !(dec && std::string(dec) == "0"))
        return "amx:bf16:decode";
    return gemv_runs(d) ? gemv_name() : isa_prefix();
}

// The registry entry GemmPlan::run(args, packed) runs for a PackedB of another plan (the lookup
// of gemm_kernel_for_layout), "" if none.
std::string layout_reader(const GemmDesc& d, const std::string& layout) {
    const detail::GemmSpec s = detail::gemm_check_desc("test", d);
    for (const auto& impl : detail::gemm_registry().impls()) {
        if (impl.isa > max_isa() || !isa_supported(impl.isa) || (impl.supports && !impl.supports(s))) continue;
        if (detail::gemm_registry().get(s, impl).kernel->packed_layout() == layout) return impl.name;
    }
    return "";
}

struct Case {
    int64_t M = 1, N = 1, K = 1;
    Trans ta = Trans::N, tb = Trans::N;
    int64_t pad_a = 0, pad_b = 0, pad_c = 0, pad_r = 0;
    float alpha = 1, beta = 0;
    bool bias = false;
    Activation act = Activation::none;
    int res = 0;  // 0 none, 1 f32, 2 bf16
    DType c = DType::f32;
    size_t misalign = 0;  // elements
    uint64_t seed = 1;

    GemmDesc desc() const {
        GemmDesc d;
        d.M = M, d.N = N, d.K = K, d.trans_a = ta, d.trans_b = tb;
        d.a_type = d.b_type = DType::bf16, d.c_type = c;
        d.lda = (ta == Trans::N ? K : M) + pad_a;
        d.ldb = (tb == Trans::N ? N : K) + pad_b;
        d.ldc = N + pad_c;
        d.alpha = alpha, d.beta = beta;
        d.epilogue.bias = bias, d.epilogue.act = act, d.epilogue.residual = res != 0;
        d.residual_type = res == 2 ? DType::bf16 : DType::f32;
        d.ld_residual = N + pad_r;
        return d;
    }
    std::string str() const {
        std::ostringstream os;
        os << "bf16*bf16->" << dtype_name(c) << " M=" << M << " N=" << N << " K=" << K << " " << trans_name(ta)
           << trans_name(tb) << " pads=" << pad_a << "/" << pad_b << "/" << pad_c << "/" << pad_r << " alpha=" << alpha
           << " beta=" << beta << " bias=" << bias << " act=" << activation_name(act) << " res=" << res
           << " misalign=" << misalign << " threads=" << get_num_threads() << " cap=" << isa_name(max_isa());
        return os.str();
    }
};

// Operands (NaN in every padding element, and in all of C when beta = 0) and the oracle. `cols`:
// the columns the oracle checks (empty: all).
struct Problem {
    Case c;
    GemmDesc d;
    test::Buffer<bf16> A, B, Ch, Rh;
    test::Buffer<float> Cf, bias, Rf;
    std::vector<uint8_t> c0;  // C's bytes before the run
    std::vector<int64_t> cols;
    std::vector<double> want, tol;  // [m][cols index]

    explicit Problem(const Case& cs, std::vector<int64_t> check_cols = {}) : c(cs), d(cs.desc()), cols(std::move(check_cols)) {
        if (cols.empty())
            for (int64_t n = 0; n < c.N; ++n) cols.push_back(n);
        std::mt19937_64 g(c.seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        const int64_t a_rows = c.ta == Trans::N ? c.M : c.K, a_cols = c.ta == Trans::N ? c.K : c.M;
        const int64_t b_rows = c.tb == Trans::N ? c.K : c.N, b_cols = c.tb == Trans::N ? c.N : c.K;
        auto fill16 = [&](test::Buffer<bf16>& buf, int64_t rows, int64_t cols_, int64_t ld, size_t mis, bool random) {
            buf.resize(static_cast<size_t>(rows * ld + 32), mis * 2);
            for (size_t i = 0; i < buf.size(); ++i) buf[i] = bf16(kNaN);
            if (random)
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t k = 0; k < cols_; ++k) buf[r * ld + k] = bf16(u(g));
        };
        auto fill32 = [&](test::Buffer<float>& buf, int64_t rows, int64_t cols_, int64_t ld, size_t mis, bool random) {
            buf.resize(static_cast<size_t>(rows * ld + 16), mis * 4);
            for (size_t i = 0; i < buf.size(); ++i) buf[i] = kNaN;
            if (random)
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t k = 0; k < cols_; ++k) buf[r * ld + k] = u(g);
        };
        fill16(A, a_rows, a_cols, d.lda, c.misalign, true);
        fill16(B, b_rows, b_cols, d.ldb, (c.misalign + 1) % 16, true);
        if (c.c == DType::bf16)
            fill16(Ch, c.M, c.N, d.ldc, (c.misalign + 3) % 16, c.beta != 0.0f);
        else
            fill32(Cf, c.M, c.N, d.ldc, (c.misalign + 2) % 8, c.beta != 0.0f);
        if (c.bias) fill32(bias, 1, c.N, c.N, (c.misalign + 3) % 8, true);
        if (c.res == 1) fill32(Rf, c.M, c.N, d.ld_residual, (c.misalign + 5) % 8, true);
        if (c.res == 2) fill16(Rh, c.M, c.N, d.ld_residual, (c.misalign + 7) % 16, true);
        c0 = c_bytes();
        oracle();
    }
    double a(int64_t m, int64_t k) const { return (c.ta == Trans::N ? A[m * d.lda + k] : A[k * d.lda + m]).to_float(); }
    double b(int64_t k, int64_t n) const { return (c.tb == Trans::N ? B[k * d.ldb + n] : B[n * d.ldb + k]).to_float(); }
    double cval(int64_t m, int64_t n) const {
        return c.c == DType::bf16 ? Ch[m * d.ldc + n].to_float() : double(Cf[m * d.ldc + n]);
    }
    double r(int64_t m, int64_t n) const {
        return c.res == 1 ? Rf[m * d.ld_residual + n] : Rh[m * d.ld_residual + n].to_float();
    }
    void oracle() {
        want.assign(static_cast<size_t>(c.M) * cols.size(), 0.0);
        tol.assign(want.size(), 0.0);
        const bool smooth = c.act != Activation::none && c.act != Activation::relu;
        std::vector<double> bcol(static_cast<size_t>(c.K));
        for (size_t j = 0; j < cols.size(); ++j) {
            const int64_t n = cols[j];
            for (int64_t k = 0; k < c.K; ++k) bcol[k] = b(k, n);
            for (int64_t m = 0; m < c.M; ++m) {
                double acc = 0, mag = 0, flush = 0;
                for (int64_t k = 0; k < c.K; ++k) {
                    const double p = a(m, k) * bcol[k];
                    acc += p, mag += std::fabs(p);
                    flush += 1 + std::fabs(a(m, k)) + std::fabs(bcol[k]);
                }
                double x = c.alpha * acc, e = 2 * (c.K + 5) * kU * std::fabs(c.alpha) * mag;
                if (c.beta != 0.0f) {
                    const double bc = double(c.beta) * cval(m, n);
                    x += bc, e += 2 * kU * std::fabs(bc);
                }
                if (c.bias) x += bias[n], e += 2 * kU * std::fabs(bias[n]);
                double v = act_d(c.act, x);
                e = (smooth ? 1.2 : 1.0) * e + (smooth ? 4 * kU * (std::fabs(x) + std::fabs(v)) : 0.0);
                if (c.res) e += kU * (std::fabs(v) + std::fabs(r(m, n))), v += r(m, n);
                if (dp_kernel()) e += kDpAbs * flush * std::fabs(c.alpha) * (smooth ? 1.2 : 1.0);
                if (c.c == DType::bf16) e += kBf16Rtol * std::fabs(v);
                want[m * cols.size() + j] = v;
                tol[m * cols.size() + j] = e + 1e-30;
            }
        }
    }
    GemmArgs args() {
        GemmArgs g;
        g.A = A.data(), g.B = B.data();
        g.C = c.c == DType::bf16 ? static_cast<void*>(Ch.data()) : static_cast<void*>(Cf.data());
        g.bias = c.bias ? bias.data() : nullptr;
        g.residual = c.res == 1 ? static_cast<const void*>(Rf.data()) : c.res == 2 ? static_cast<const void*>(Rh.data()) : nullptr;
        return g;
    }
    std::vector<uint8_t> c_bytes() const {
        const auto* p = c.c == DType::bf16 ? reinterpret_cast<const uint8_t*>(Ch.data()) : reinterpret_cast<const uint8_t*>(Cf.data());
        const size_t n = c.c == DType::bf16 ? Ch.size() * 2 : Cf.size() * 4;
        return {p, p + n};
    }
    void reset_c() {
        auto* p = c.c == DType::bf16 ? reinterpret_cast<uint8_t*>(Ch.data()) : reinterpret_cast<uint8_t*>(Cf.data());
        std::memcpy(p, c0.data(), c0.size());
    }

    ::testing::AssertionResult check(const std::string& what) const {
        int bad = 0;
        std::ostringstream msg;
        for (int64_t m = 0; m < c.M; ++m)
            for (size_t j = 0; j < cols.size(); ++j) {
                const int64_t n = cols[j];
                const double got = cval(m, n), w = want[m * cols.size() + j], t = tol[m * cols.size() + j];
                const bool ok = std::isnan(w) ? std::isnan(got) : std::fabs(got - w) <= t;
                if (!ok && bad++ < 4) msg << "\n  C[" << m << "," << n << "] got " << got << " want " << w << " tol " << t;
            }
        const std::vector<uint8_t> now = c_bytes();
        const int64_t es = dtype_size(c.c);
        for (size_t i = 0; i < now.size(); ++i) {
            const int64_t e = static_cast<int64_t>(i) / es, row = e / d.ldc, col = e % d.ldc;
            if (row < c.M && col < c.N) continue;
            if (now[i] != c0[i]) {
                if (bad++ < 4) msg << "\n  C buffer byte " << i << " outside the matrix changed";
                break;
            }
        }
        if (bad == 0) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << what << ": " << bad << " bad elements, " << c.str() << msg.str();
    }
};

// Runs c through a plan of the current cap: the pick, the oracle at 1 thread, 2 threads bit for
// bit, and (pack) the plan's PackedB bit for bit.
void run_case(const Case& c, bool pack = true, std::vector<int64_t> cols = {}) {
    ThreadsGuard tg;
    Problem p(c, std::move(cols));
    const GemmPlan plan(c.desc());
    ASSERT_EQ(std::string(plan.impl_name()), want_impl(c.desc())) << c.str();
    set_num_threads(1);
    plan.run(p.args());
    ASSERT_TRUE(p.check("plan, 1 thread"));
    const std::vector<uint8_t> one = p.c_bytes();
    p.reset_c();
    set_num_threads(2);
    plan.run(p.args());
    ASSERT_TRUE(p.c_bytes() == one) << "2 threads differ from 1: " << c.str();
    if (pack) {
        const PackedB w = plan.pack_b(p.B.data());
        p.reset_c();
        GemmArgs a = p.args();
        a.B = nullptr;
        plan.run(a, w);
        // (The decode kernel sums a plain B^T along k in 32 partial sums, a PackedB in k order;
        // "amx:bf16:decode" runs the tiles for its PackedB, the vector kernel for a plain B.)
        if ((gemv_runs(c.desc()) && c.tb == Trans::T) || want_impl(c.desc()) == "amx:bf16:decode")
            ASSERT_TRUE(p.check("packed B"));
        else
            ASSERT_TRUE(p.c_bytes() == one) << "packed B differs from unpacked: " << c.str();
    }
}

const int64_t kSizes[] = {1, 7, 17, 33, 100, 257};
const Activation kActs[] = {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                            Activation::silu};

}  // namespace

// ---- shapes, transposes, strides, scalars --------------------------------------------------------

TEST(GemmBf16, ShapesTransposesStridesAndScalars) {
    const float alphas[] = {1.0f, -0.75f, 2.0f};
    const float betas[] = {0.0f, 1.0f, 0.5f};
    for_each_isa([&](Isa) {
        const int64_t ks[] = {1, 7, 17, 33, 100, 257, k_multi()};
        int idx = 0;
        for (size_t ki = 0; ki < std::size(ks); ++ki)
            for (DType ct : {DType::f32, DType::bf16})
                for (int i = 0; i < 6; ++i) {
                    ++idx;
                    Case c;
                    c.K = ks[ki];
                    c.M = kSizes[(i + ki) % 6];
                    c.N = kSizes[(5 * i + ki + 2) % 6];
                    if (c.K > 300 && c.M * c.N > 100 * 100) c.M = 33;  // (the oracle's time)
                    c.c = ct;
                    c.ta = idx % 2 ? Trans::T : Trans::N;
                    c.tb = (idx / 2) % 2 ? Trans::T : Trans::N;
                    c.pad_a = idx % 3 == 0 ? 3 : 0;
                    c.pad_b = idx % 4 == 1 ? 5 : 0;
                    c.pad_c = idx % 5 < 2 ? 1 : 0;
                    c.alpha = alphas[idx % 3];
                    c.beta = betas[(idx / 3) % 3];
                    c.misalign = static_cast<size_t>(idx % 7);
                    c.seed = 100 + static_cast<uint64_t>(idx);
                    SCOPED_TRACE(c.str());
                    run_case(c);
                    if (HasFatalFailure()) return;
                }
    });
}

// Every M and N tail of both tiles (6 x 16, 14 x 32) with one and several K blocks.
TEST(GemmBf16, EveryTileTail) {
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar) return;  // (the reference: covered above)
        int idx = 0;
        // (M <= 16 runs the decode kernel at avx512 and above: 19, 20, 27 give the blocked
        // kernel's row tails 5, 6, 13 of the 14-row tile there.)
        for (int64_t M : {1, 5, 6, 13, 14, 15, 19, 20, 27, 29}) {
            for (int64_t N : {1, 8, 15, 16, 17, 31, 33, 47}) {
                ++idx;
                Case c;
                c.M = M, c.N = N, c.K = idx % 3 == 0 ? kc_max() + 9 : 19;
                c.c = idx % 2 ? DType::bf16 : DType::f32;
                c.beta = idx % 4 == 0 ? 0.0f : 0.5f;
                c.bias = idx % 3 == 1;
                c.res = idx % 3;
                c.tb = idx % 5 < 2 ? Trans::T : Trans::N;
                c.misalign = static_cast<size_t>(idx % 5);
                c.seed = 300 + static_cast<uint64_t>(idx);
                SCOPED_TRACE(c.str());
                run_case(c);
                if (HasFatalFailure()) return;
            }
        }
    });
}

// ---- epilogues --------------------------------------------------------------------------------------

TEST(GemmBf16, EveryEpilogueWithOneAndSeveralKBlocks) {
    for_each_isa([&](Isa) {
        int idx = 0;
        for (int64_t K : {int64_t(65), k_multi()})
            for (DType ct : {DType::f32, DType::bf16})
                for (Activation act : kActs)
                    for (int res : {0, 1, 2})
                        for (float beta : {0.0f, 1.0f, -0.5f}) {
                            ++idx;
                            if (xk::test::kTsanSweep && idx % 3 != 0) continue;  // (TSan: a third)
                            Case c;
                            c.M = 19, c.N = 47, c.K = K;  // 14 + 5 / 3 x 6 + 1 rows, 32 + 15 / 2 x 16 + 15 columns
                            c.c = ct, c.act = act, c.res = res, c.beta = beta;
                            c.bias = idx % 2 == 0;
                            c.alpha = idx % 3 ? 1.0f : 1.5f;
                            c.ta = idx % 2 ? Trans::T : Trans::N;
                            c.tb = idx % 3 ? Trans::N : Trans::T;
                            c.pad_c = idx % 2 ? 3 : 0;
                            c.pad_r = res && idx % 3 == 0 ? 7 : 0;
                            c.misalign = static_cast<size_t>(idx % 6);
                            c.seed = 1000 + static_cast<uint64_t>(idx);
                            SCOPED_TRACE(c.str());
                            run_case(c, idx % 4 == 0);
                            if (HasFatalFailure()) return;
                        }
    });
}

// beta = 0 never reads C (NaN there must not leak); a NaN beta is not zero: every result NaN.
TEST(GemmBf16, BetaZeroNeverReadsCAndNaNBetaDoes) {
    for_each_isa([&](Isa) {
        for (DType ct : {DType::f32, DType::bf16})
            for (int64_t K : {int64_t(11), k_multi()}) {
                Case c;
                c.M = 17, c.N = 35, c.K = K, c.c = ct, c.bias = true, c.act = Activation::gelu_erf;
                Problem p(c);  // beta = 0: C is NaN
                GemmPlan(c.desc()).run(p.args());
                ASSERT_TRUE(p.check("beta 0"));
                for (int64_t m = 0; m < c.M; ++m)
                    for (int64_t n = 0; n < c.N; ++n) ASSERT_FALSE(std::isnan(p.cval(m, n)));
                c.beta = kNaN;
                Problem q(c);
                GemmPlan(c.desc()).run(q.args());
                for (int64_t m = 0; m < c.M; ++m)
                    for (int64_t n = 0; n < c.N; ++n) ASSERT_TRUE(std::isnan(q.cval(m, n))) << c.str();
            }
    });
}

// ---- bf16 C rounding ---------------------------------------------------------------------------------

// A = 0, so the product is exactly 0 and x is exactly the f32 value put in the bias (or the f32
// residual, or beta * C): the bf16 C must be xk::bf16(x), bit for bit, whatever the blocking —
// ties to even, the largest floats overflowing to Inf, Inf, NaN kept (quiet, sign and upper
// payload), denormals rounded (not flushed) — and equal to the reference's bits.
TEST(GemmBf16, BF16COutputRoundsToNearestEvenBitForBit) {
    const uint32_t specials[] = {
        0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu, 0xBF818000u, 0xBF808000u, 0x7F7FFFFFu, 0x7F7F8000u,
        0x7F7F7FFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7FC12345u, 0x7F800001u, 0xFFFFFFFFu,
        0xFF812345u, 0x00008000u, 0x00018000u, 0x00017FFFu, 0x80018000u, 0x00000001u, 0x80000000u, 0x3F7FFFFFu,
        0x40490FDBu, 0xC0490FDBu, 0x00800000u, 0x007FFFFFu, 0x33800000u, 0x4B7FFFFFu, 0x3EAAAAABu};
    const int64_t ns = static_cast<int64_t>(std::size(specials));
    for_each_isa([&](Isa) {
        for (int64_t K : {int64_t(1), int64_t(40), k_multi()})
            for (int where : {0, 1, 2})  // the value in: bias, f32 residual, C (beta = 1, bf16 values only)
                for (int64_t M : {int64_t(3), int64_t(20)}) {
                    Case c;
                    c.M = M, c.N = ns + 3, c.K = K, c.c = DType::bf16;
                    c.bias = where == 0, c.res = where == 1 ? 1 : 0, c.beta = where == 2 ? 1.0f : 0.0f;
                    c.tb = K == 40 ? Trans::T : Trans::N;
                    std::vector<float> x(static_cast<size_t>(M * c.N));
                    auto setup = [&](Problem& p) {
                        for (size_t i = 0; i < p.A.size(); ++i) p.A[i] = bf16(0.0f);
                        for (int64_t m = 0; m < M; ++m)
                            for (int64_t n = 0; n < c.N; ++n) {
                                float v = bits_f(specials[(where == 0 ? n : n + m) % ns]);
                                if (where == 2) v = bf16(v).to_float();  // C is bf16: its values are exact
                                x[m * c.N + n] = v;
                                if (where == 0 && m == 0) p.bias[n] = v;
                                if (where == 1) p.Rf[m * p.d.ld_residual + n] = v;
                                if (where == 2) p.Ch[m * p.d.ldc + n] = bf16(v);
                            }
                        p.c0 = p.c_bytes();
                    };
                    Problem p(c), q(c);  // q: the reference's run
                    setup(p);
                    setup(q);
                    const GemmPlan plan(c.desc());
                    ASSERT_EQ(std::string(plan.impl_name()), want_impl(c.desc()));
                    plan.run(p.args());
                    {
                        IsaCap scalar(Isa::scalar);
                        const GemmPlan ref(c.desc());
                        ASSERT_STREQ(ref.impl_name(), "ref:scalar");
                        ref.run(q.args());
                    }
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t n = 0; n < c.N; ++n) {
                            const uint16_t got = p.Ch[m * p.d.ldc + n].bits, ref = q.Ch[m * p.d.ldc + n].bits;
                            const float v = x[m * c.N + n];
                            SCOPED_TRACE(c.str() + " where=" + std::to_string(where) + " m=" + std::to_string(m) +
                                         " n=" + std::to_string(n));
                            EXPECT_EQ(got, ref);
                            if (std::isnan(v)) {
                                uint32_t u;
                                std::memcpy(&u, &v, 4);
                                EXPECT_EQ(got, static_cast<uint16_t>((u >> 16) | 0x40)) << std::hex << u;
                            } else if (v != 0.0f) {  // (0 + -0 is +0: the sign of a zero follows the sum)
                                EXPECT_EQ(got, bf16(v).bits) << std::hex << bf16(v).bits;
                            }
                        }
                    if (HasFailure()) return;
                }
    });
}

// ---- packed B ----------------------------------------------------------------------------------------

// A PackedB of bf16 weights (bf16 panels, half the bytes of f32 ones) packed by one plan serves
// plans of every M and of either C type, bit for bit as their unpacked runs where the same kernel
// reads it; the plans that run the reference read it with "jit:<isa>:bf16:any", and a PackedB
// made by such a plan (the reference's plain layout) is read by "jit:<isa>:bf16:plain" in larger
// plans. A PackedB of f32 weights of the same shape is not accepted.
TEST(GemmBf16, PackedBServesEveryMAndIsBf16) {
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            // (Time: the reference and the caps above avx512, which run the same kernels, at 1 thread.)
            if (threads == 2 && (isa == Isa::scalar || isa > Isa::avx512)) return;
            int idx = 0;
            for (int64_t N : {int64_t(70), int64_t(12)})
                for (int64_t packer_m : {int64_t(100), int64_t(1)})
                    for (Trans tb : {Trans::N, Trans::T})
                        for (int64_t K : {int64_t(50), k_multi()}) {
                            if (packer_m == 1 && K == 50) continue;  // (time)
                            if (xk::test::kTsanSweep && (N == 12 || tb == Trans::T)) continue;  // (TSan: a quarter)
                            ++idx;
                            Case pc;
                            pc.M = packer_m, pc.N = N, pc.K = K, pc.tb = tb, pc.pad_b = idx % 2 ? 3 : 0;
                            Problem src(pc);
                            const GemmPlan packer(pc.desc());
                            const PackedB w = packer.pack_b(src.B.data());
                            const bool jit_layout = !ref_runs(pc.desc());
                            // Plans of 32 rows and more, and the decode-sized ones ("amx:bf16:decode",
                            // M 1..31), pack for the AMX tiles at the amx cap.
                            const bool amx_layout = jit_layout && isa >= Isa::amx &&
                                                    (packer_m >= 32 || want_impl(pc.desc()) == "amx:bf16:decode");
                            if (amx_layout) {
                                EXPECT_EQ(w.layout(), "amx:bf16:K" + std::to_string(K) + ":N" + std::to_string(N));
                                EXPECT_EQ(w.size_bytes(), static_cast<size_t>((N + 31) / 32 * ((K + 31) / 32) * 2048));
                            } else if (jit_layout) {
                                const detail::GemmBLayout l = detail::gemm_b_layout(layout_isa(), K, N, DType::bf16);
                                EXPECT_EQ(w.layout(), l.name);
                                EXPECT_NE(w.layout().find(l.pairs ? ":bf16x2:" : ":bf16:"), std::string::npos) << w.layout();
                                EXPECT_EQ(l.pairs, dp_kernel());
                                EXPECT_EQ(w.size_bytes(), static_cast<size_t>((l.pairs ? (K + 1) / 2 * 2 : K) * l.npad) * 2);
                            } else {
                                EXPECT_EQ(w.layout().rfind("ref:plain:bf16:", 0), 0u) << w.layout();
                            }
                            for (int64_t M : {1, 2, 7, 150}) {
                                for (DType ct : {DType::f32, DType::bf16}) {
                                    Case c = pc;
                                    c.M = M, c.c = ct;
                                    c.beta = M % 2 ? 0.5f : 0.0f;
                                    c.bias = true, c.act = M == 7 ? Activation::silu : Activation::relu;
                                    Problem p(c);  // (its B is replaced by the packer's)
                                    std::memcpy(p.B.data(), src.B.data(), src.B.size() * sizeof(bf16));
                                    p.oracle();
                                    const GemmPlan plan(c.desc());
                                    SCOPED_TRACE(c.str() + ", packed by M=" + std::to_string(packer_m) + ": " + w.layout());
                                    if (isa != Isa::scalar && w.layout() != plan.pack_b(p.B.data()).layout()) {
                                        // another plan's layout: the blocked kernel reads it
                                        // (a vector layout in an "amx:bf16:decode" plan: the decode
                                        // kernel of M <= 16 reads it first)
                                        const bool dec = want_impl(c.desc()) == "amx:bf16:decode";
                                        const std::string want = amx_layout   ? std::string("amx:bf16:any")
                                                                 : jit_layout ? (dec && gemv_runs(c.desc()) ? gemv_name()
                                                                                 : isa_prefix() + (ref_runs(c.desc()) ? ":any" : ""))
                                                                              : isa_prefix() + ":plain";
                                        EXPECT_EQ(layout_reader(c.desc(), w.layout()), want);
                                    }
                                    GemmArgs a = p.args();
                                    a.B = nullptr;
                                    plan.run(a, w);
                                    ASSERT_TRUE(p.check("PackedB of another M"));
                                    const std::vector<uint8_t> packed = p.c_bytes();
                                    p.reset_c();
                                    plan.run(p.args());
                                    // The same bits where the PackedB's reader and the plan's kernel are both the
                                    // blocked kernel, both the tiles, or both the reference (the decode kernel:
                                    // the same sums from a PackedB and a plain B, not a B^T).
                                    ASSERT_TRUE(p.check("plain B"));
                                    const bool plan_amx = want_impl(c.desc()) == "amx:bf16";
                                    // (amx:bf16:decode with a plain B from amx_bf16_decode_plain_m() rows:
                                    // the tiles, whatever the PackedB's layout)
                                    const bool plain_tiles = want_impl(c.desc()) == "amx:bf16:decode" &&
                                                             c.M >= detail::amx_bf16_decode_plain_m();
                                    const bool same = isa == Isa::scalar ||
                                                      (gemv_runs(c.desc()) ? jit_layout && tb == Trans::N
                                                                           : !jit_layout || !ref_runs(c.desc()));
                                    if (!plain_tiles && (amx_layout ? plan_amx : !plan_amx && same))
                                        ASSERT_TRUE(p.c_bytes() == packed) << "unpacked differs";
                                }
                            }
                            // f32 weights of the same shape: another layout, rejected.
                            GemmDesc f = pc.desc();
                            f.a_type = f.b_type = DType::f32;
                            const GemmPlan fplan(f);
                            const GemmDesc& fd = fplan.desc();  // leading dimensions resolved
                            const int64_t b_rows = fd.trans_b == Trans::N ? fd.K : fd.N;
                            std::vector<float> Bf(static_cast<size_t>(std::max<int64_t>(b_rows * fd.ldb, 1)), 1.0f);
                            const PackedB wf = fplan.pack_b(Bf.data());
                            GemmArgs a = src.args();
                            a.B = nullptr;
                            XK_EXPECT_INVALID(packer.run(a, wf), "was packed for another plan");
                        }
        });
    }
}

// ---- the f32 accumulator of a bf16 C -------------------------------------------------------------

// Small blocks forced (XK_GEMM_KC: K blocks; _MC, _NC, _CS: the accumulator in chunks of a few
// rows and column blocks of one panel): the oracle, 1 and 2 threads bit for bit, and the same
// bits as the default blocking of the same K blocks (results do not depend on the blocking).
TEST(GemmBf16, AccumulatorChunksAndBlocksDoNotChangeTheBits) {
    ThreadsGuard tg;
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar) return;
        int idx = 0;
        for (DType ct : {DType::bf16, DType::f32})
            for (Trans ta : {Trans::N, Trans::T}) {
                ++idx;
                Case c;
                c.M = 257, c.N = 70, c.K = 300, c.c = ct, c.ta = ta, c.tb = idx % 2 ? Trans::T : Trans::N;
                c.beta = 0.5f, c.bias = true, c.act = Activation::gelu_tanh, c.res = 2, c.pad_c = 5;
                c.seed = 7000 + static_cast<uint64_t>(idx);
                SCOPED_TRACE(c.str());
                Problem p(c);
                std::vector<uint8_t> base;
                {
                    EnvGuard env({{"XK_GEMM_KC", "64"}});
                    set_num_threads(1);
                    GemmPlan(c.desc()).run(p.args());
                    ASSERT_TRUE(p.check("K blocks of 64"));
                    base = p.c_bytes();
                }
                for (const char* cs : {"1", "3000", "20000"}) {
                    EnvGuard env({{"XK_GEMM_KC", "64"}, {"XK_GEMM_MC", "20"}, {"XK_GEMM_NC", "16"}, {"XK_GEMM_CS", cs}});
                    const GemmPlan plan(c.desc());
                    for (int threads : {1, 2}) {
                        set_num_threads(threads);
                        p.reset_c();
                        plan.run(p.args());
                        ASSERT_TRUE(p.c_bytes() == base) << "XK_GEMM_CS=" << cs << " threads=" << threads;
                        const PackedB w = plan.pack_b(p.B.data());
                        p.reset_c();
                        GemmArgs a = p.args();
                        a.B = nullptr;
                        plan.run(a, w);
                        ASSERT_TRUE(p.c_bytes() == base) << "packed, XK_GEMM_CS=" << cs << " threads=" << threads;
                    }
                }
            }
    });
}

// A tall bf16 C over several K blocks with the default sizes: each thread's accumulator holds
// a few hundred rows at a time (rows x nc <= 2^21 floats), so the row range goes in chunks.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;  // the tall case at the top level only (TSan: ~150 s for all)
#else
constexpr bool kSanitized = false;
#endif

// K past the AMX kernel's K block (64 k steps = 2048): the C tiles parked and reloaded between
// blocks, with a K tail, for the tiles from 32 rows up and the decode-sized tiles.
TEST(GemmBf16, SeveralAmxKBlocks) {
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar) return;
        for (int64_t M : {int64_t(45), int64_t(9)}) {
            Case c;
            c.M = M, c.N = 40, c.K = 2 * 2048 + 37, c.tb = M == 9 ? Trans::T : Trans::N;
            c.c = M == 9 ? DType::bf16 : DType::f32, c.bias = true, c.beta = 0.5f;
            c.seed = 8100 + static_cast<uint64_t>(M);
            SCOPED_TRACE(c.str());
            run_case(c);
            if (HasFatalFailure()) return;
        }
    });
}

// A plain f32 C (alpha 1, beta 0, no epilogue): the AMX kernel may store its full 32 x 32 blocks
// (16 x 32 from the 16-row kernels: a last row block of 16 rows, one or two column blocks a call)
// straight from the tiles into C (strided rows, unaligned, beside the tails the epilogue writes),
// over one and two K blocks.
TEST(GemmBf16, PlainF32BlocksAndTails) {
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar) return;
        int i = 0;
        for (auto s : {std::array<int64_t, 3>{64, 96, 100}, {70, 65, 2100}, {96, 33, 4133}, {48, 100, 2100}, {80, 64, 4133}}) {
            if (kSanitized && s[2] > 2048) continue;  // (sanitizer builds: one K block)
            Case c;
            c.M = s[0], c.N = s[1], c.K = s[2], c.pad_c = i == 1 ? 5 : 0, c.misalign = static_cast<size_t>(i % 2);
            c.tb = i % 3 == 2 ? Trans::T : Trans::N;
            c.seed = 8300 + static_cast<uint64_t>(i++);
            SCOPED_TRACE(c.str());
            run_case(c);
            if (HasFatalFailure()) return;
        }
    });
}

// The AMX kernel's shared packed A (a thread whose columns span several 1 MiB B chunks): 2 threads
// (run_case: bit-equal to 1 thread, which packs per thread) with M, N and K tails.
TEST(GemmBf16, AmxSharedPackedA) {
    for_each_isa([&](Isa isa) {
        if (isa < Isa::amx || kSanitized) return;
        Case c;
        c.M = 70, c.N = 1100, c.K = 4100, c.c = DType::bf16, c.bias = true, c.beta = 0.5f, c.ta = Trans::T;
        c.seed = 8200;
        SCOPED_TRACE(c.str());
        run_case(c);
    });
}

TEST(GemmBf16, TallBf16COverSeveralKBlocks) {
    const Isa top = available_isas().back();
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar || (kSanitized && isa != top)) return;
        Case c;
        c.M = 9000, c.N = 300, c.K = kc_max() + 40, c.c = DType::bf16, c.beta = 1.0f, c.bias = true;
        c.seed = 77;
        SCOPED_TRACE(c.str());
        run_case(c, false, {0, 1, 31, 32, 150, 257, 288, 299});
    });
}

// ---- selection ---------------------------------------------------------------------------------------

TEST(GemmBf16, SelectionAtEveryIsa) {
    for_each_isa([&](Isa isa) {
        for (DType ct : {DType::f32, DType::bf16})
            for (auto s : {std::array<int64_t, 3>{384, 3072, 768}, {1, 1, 1}, {4, 4, 4}, {5, 5, 5}, {8, 8, 8}, {1, 4096, 64},
                           {300, 5, 2000}, {2, 16, 1000}, {2, 8, 1000}, {1, 16, 4096}, {1, 17, 4}, {3, 16, 2}, {1, 64, 1},
                           {1, 3072, 768}}) {
                GemmDesc d;
                d.M = s[0], d.N = s[1], d.K = s[2];
                d.a_type = d.b_type = DType::bf16, d.c_type = ct;
                EXPECT_EQ(std::string(GemmPlan(d).impl_name()), want_impl(d)) << isa_name(isa);
                const detail::GemmSpec spec = detail::gemm_check_desc("test", d);
                EXPECT_LE(detail::gemm_registry().select(spec, isa).isa, isa);
            }
        GemmDesc z;
        z.M = 5, z.N = 6, z.K = 0, z.a_type = z.b_type = DType::bf16;
        EXPECT_STREQ(GemmPlan(z).impl_name(), "ref:scalar");  // K == 0: the reference
    });
}

// ---- the VDPBF16PS kernel (avx512_bf16): k pairs, the probe, layouts ------------------------------

// Odd K (the pair padding of the last pair, in one and in several K blocks), odd M and N, both
// transposes, padded leading dimensions, misaligned pointers: the oracle, 2 threads, packed B.
TEST(GemmBf16, OddKPairPaddingAndOddShapes) {
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar) return;
        int idx = 0;
        for (int64_t K : {int64_t(1), int64_t(2), int64_t(3), int64_t(7), int64_t(17), int64_t(63), int64_t(65),
                          int64_t(1023), kc_max() + 1, 2 * kc_max() + 3})
            for (int64_t MN : {int64_t(7), int64_t(17), int64_t(63), int64_t(65)}) {
                ++idx;
                Case c;
                c.M = MN, c.N = (MN * 3) % 67 + 1, c.K = K;
                c.ta = idx % 2 ? Trans::T : Trans::N, c.tb = (idx / 2) % 2 ? Trans::T : Trans::N;
                c.pad_a = idx % 3, c.pad_b = (idx + 1) % 3, c.pad_c = idx % 2;
                c.c = idx % 3 == 0 ? DType::bf16 : DType::f32;
                c.beta = idx % 4 == 1 ? 0.5f : 0.0f, c.bias = idx % 2 == 0;
                c.misalign = static_cast<size_t>(idx % 5);
                c.seed = 9000 + static_cast<uint64_t>(idx);
                SCOPED_TRACE(c.str());
                run_case(c);
                if (HasFatalFailure()) return;
            }
    });
}

// Denormal bf16 inputs beside large ones: VDPBF16PS counts a denormal input as 0 (DAZ); the
// widening kernels multiply it exactly. Both within their tolerance (the dp term above).
TEST(GemmBf16, DenormalInputs) {
    for_each_isa([&](Isa) {
        for (Trans tb : {Trans::N, Trans::T}) {
            Case c;
            c.M = 20, c.N = 37, c.K = 45, c.tb = tb, c.seed = 4242;
            Problem p(c);
            std::mt19937 g(5);
            for (int64_t m = 0; m < c.M; ++m)
                for (int64_t k = 0; k < c.K; ++k)
                    if ((m + k) % 3 == 0) {
                        bf16 v;
                        v.bits = static_cast<uint16_t>((g() & 0x7F) | 1 | ((k & 1) << 15));  // denormal
                        p.A[m * p.d.lda + k] = v;
                    }
            for (int64_t k = 0; k < c.K; ++k)
                for (int64_t n = 0; n < c.N; ++n) {
                    bf16& b = tb == Trans::N ? p.B[k * p.d.ldb + n] : p.B[n * p.d.ldb + k];
                    if ((k + n) % 5 == 0) b = bf16(b.to_float() * 1048576.0f);
                }
            p.oracle();
            p.reset_c();
            GemmPlan(c.desc()).run(p.args());
            ASSERT_TRUE(p.check("denormal A")) << c.str();
        }
    });
}

// The probe decides between the VDPBF16PS kernel and the widening one at the avx512_bf16 cap;
// XK_GEMM_BF16_DP forces either. Both give results within the tolerance of the same oracle.
TEST(GemmBf16, SelectionFollowsTheDpProbe) {
    if (!isa_supported(Isa::avx512_bf16)) GTEST_SKIP() << "no avx512_bf16";
    IsaCap cap(Isa::avx512_bf16);
    Case c;
    c.M = 40, c.N = 50, c.K = 61, c.c = DType::bf16, c.bias = true;
    for (const char* v : {static_cast<const char*>(nullptr), "0", "1"}) {
        EnvGuard env({{"XK_GEMM_BF16_DP", v}});
        const bool dp = v ? v[0] == '1' : detail::gemm_bf16_dp_fast();
        EXPECT_EQ(detail::gemm_bf16_dp_fast(), dp);
        const GemmPlan plan(c.desc());
        SCOPED_TRACE(std::string("XK_GEMM_BF16_DP=") + (v ? v : "(unset)"));
        EXPECT_STREQ(plan.impl_name(), dp ? "jit:avx512_bf16:bf16" : "jit:avx512:bf16");
        Problem p(c);
        plan.run(p.args());
        if (dp) {
            ASSERT_TRUE(p.check("dp"));
        } else {  // (the oracle's tolerance holds the dp term only when dp_kernel(): recompute)
            EnvGuard one({{"XK_GEMM_BF16_DP", "0"}});
            p.oracle();
            ASSERT_TRUE(p.check("widened"));
        }
    }
}

// One PackedB in the pairs layout serves every decode M (1..16) and larger ones at the
// avx512_bf16 cap (the shapes the reference runs read it through "jit:avx512_bf16:bf16:any");
// a PackedB in the widened layout (packed under the avx512 cap) still runs at the avx512_bf16
// cap (the widening kernel reads it); a pairs PackedB under the avx512 cap is rejected.
TEST(GemmBf16, PairsPackedBAcrossMAndLayouts) {
    if (!isa_supported(Isa::avx512_bf16)) GTEST_SKIP() << "no avx512_bf16";
    ThreadsGuard tg;
    for (Trans tb : {Trans::N, Trans::T})
        for (int64_t K : {int64_t(77), 2 * kc_max() + 1}) {
            Case pc;
            pc.M = 64, pc.N = 45, pc.K = K, pc.tb = tb, pc.pad_b = 2;
            Problem src(pc);
            PackedB pairs, wide;
            {
                IsaCap cap(Isa::avx512_bf16);
                pairs = GemmPlan(pc.desc()).pack_b(src.B.data());
                EXPECT_NE(pairs.layout().find("jit:avx512_bf16:bf16x2:"), std::string::npos) << pairs.layout();
            }
            {
                IsaCap cap(Isa::avx512);
                wide = GemmPlan(pc.desc()).pack_b(src.B.data());
                EXPECT_NE(wide.layout().find("jit:avx512:bf16:"), std::string::npos) << wide.layout();
                GemmArgs a = src.args();
                a.B = nullptr;
                XK_EXPECT_INVALID(GemmPlan(pc.desc()).run(a, pairs), "was packed for another plan");
            }
            IsaCap cap(Isa::avx512_bf16);
            for (int64_t M : {1, 2, 3, 5, 8, 13, 16, 17, 100})
                for (int threads : {1, 2}) {
                    set_num_threads(threads);
                    Case c = pc;
                    c.M = M, c.c = M % 2 ? DType::bf16 : DType::f32, c.beta = M % 3 ? 0.0f : 0.5f, c.bias = true;
                    c.act = Activation::gelu_erf, c.res = M % 4 == 1 ? 2 : 0;
                    Problem p(c);
                    std::memcpy(p.B.data(), src.B.data(), src.B.size() * sizeof(bf16));
                    p.oracle();
                    const GemmPlan plan(c.desc());
                    SCOPED_TRACE(c.str());
                    EXPECT_EQ(layout_reader(c.desc(), pairs.layout()),
                              gemv_runs(c.desc()) ? "avx512_bf16:bf16:gemv" : "jit:avx512_bf16:bf16");
                    GemmArgs a = p.args();
                    a.B = nullptr;
                    plan.run(a, pairs);
                    ASSERT_TRUE(p.check("pairs PackedB"));
                    const std::vector<uint8_t> got = p.c_bytes();
                    if (!gemv_runs(c.desc()) || tb == Trans::N) {  // the same kernel unpacked: the same bits
                        p.reset_c();
                        plan.run(p.args());
                        ASSERT_TRUE(p.c_bytes() == got) << "unpacked differs";
                    }
                    p.reset_c();
                    {
                        EnvGuard off({{"XK_GEMM_BF16_DP", "0"}});  // (the oracle without the dp term)
                        p.oracle();
                    }
                    EXPECT_EQ(layout_reader(c.desc(), wide.layout()),
                              gemv_runs(c.desc()) ? "avx512:bf16:gemv" : "jit:avx512:bf16");
                    plan.run(a, wide);
                    ASSERT_TRUE(p.check("widened PackedB at the avx512_bf16 cap"));
                }
        }
}

// The bf16 decode kernel (M <= 16, AVX-512): every M, column tails and column ranges longer than
// its sweep block (1024), odd K, B plain, transposed (dot products) and packed (run_case: the
// oracle, 2 threads, the plan's PackedB), padded and misaligned operands, epilogues, bf16 C.
TEST(GemmBf16, DecodeEveryMAndShape) {
    for_each_isa([&](Isa isa) {
        if (isa < Isa::avx2) return;
        int idx = 0;
        for (int64_t M = 1; M <= 16; ++M) {
            for (int v = 0; v < 2; ++v) {
                ++idx;
                const int64_t Ns[] = {1, 31, 33, 100, 1030, 2100};
                const int64_t Ks[] = {1, 7, 63, 65, 1023, 2 * kc_max() + 3};
                Case c;
                c.M = M, c.N = Ns[idx % 6], c.K = Ks[(idx / 2 + v) % 6];
                if (c.N * c.K > 600000) c.K = 257;  // (the oracle's time)
                c.ta = idx % 3 == 0 ? Trans::T : Trans::N;
                c.tb = idx % 2 ? Trans::T : Trans::N;
                c.pad_a = idx % 2, c.pad_b = idx % 3 == 1 ? 3 : 0, c.pad_c = idx % 4 == 0 ? 2 : 0;
                c.c = idx % 3 == 1 ? DType::bf16 : DType::f32;
                c.alpha = idx % 5 == 0 ? -1.5f : 1.0f;
                c.beta = idx % 4 == 1 ? 0.5f : idx % 4 == 2 ? 1.0f : 0.0f;
                c.bias = idx % 2 == 0;
                c.act = kActs[idx % 5];
                c.res = idx % 3;
                c.misalign = static_cast<size_t>(idx % 7);
                c.seed = 12000 + static_cast<uint64_t>(idx);
                SCOPED_TRACE(c.str());
                run_case(c);
                if (HasFatalFailure()) return;
            }
        }
    });
}
