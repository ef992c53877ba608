// GEMM: every implementation against a naive double-precision oracle written here, over every
// dtype combination, both transposes, odd sizes, padded leading dimensions, misaligned pointers,
// alpha / beta, every epilogue, int8 scales and zero points, 1 and 2 threads; packed B, the
// one-shot and BLAS-style entry points, concurrency, the C API, and bad input for each entry point.
//
// Tolerances, per output element (u = 2^-24, the fp32 unit roundoff):
//   mag  = |alpha| * sum_k |a_k b_k| + |beta C| + |bias|  (int8 -> f32: |alpha a_scale b_scale acc| + ...)
//   f32 / bf16 inputs:  |got - want| <= L * 2 (K + 5) u mag + 4u (|x| + |act(x)|) + u (|act(x)| + |residual|)
//   int8 -> f32:        the same with 16u mag in place of 2 (K + 5) u mag (the s32 sum is exact)
//   where L = 1.2 bounds the slope of gelu / silu (1 otherwise) and 4u (...) covers the float
//   evaluation of the activation; bf16 inputs are exact in fp32, so the oracle uses the bf16 values
//   and the same bound applies;
//   bf16 C:             the above + 2^-8 |want|  (round to nearest even: half a bf16 ulp)
//   int8 -> s32:        exact (modulo 2^32)
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <thread>
#include <vector>

#include "common/test_util.hpp"
#include "common/check.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;

namespace {

constexpr double kU = 1.0 / 16777216.0;  // 2^-24
constexpr double kBf16Rtol = 1.0 / 256.0;  // 2^-8

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- the oracle's own scalar definitions ---------------------------------------------------------

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

double get(DType t, const void* p, int64_t i) {
    switch (t) {
        case DType::f32: return static_cast<const float*>(p)[i];
        case DType::bf16: return static_cast<const bf16*>(p)[i].to_float();
        case DType::s8: return static_cast<const int8_t*>(p)[i];
        case DType::u8: return static_cast<const uint8_t*>(p)[i];
        case DType::s32: return static_cast<const int32_t*>(p)[i];
    }
    return 0;
}

void put(DType t, void* p, int64_t i, double v) {
    switch (t) {
        case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
        case DType::bf16: static_cast<bf16*>(p)[i] = bf16(static_cast<float>(v)); break;
        case DType::s8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(std::lround(v)); break;
        case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(std::lround(v)); break;
        case DType::s32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(std::llround(v)); break;
    }
}

bool is_float(DType t) { return t == DType::f32 || t == DType::bf16; }

// ---- matrices in test buffers ---------------------------------------------------------------------

// rows x cols, leading dimension ld, `misalign` elements past a 64-byte boundary, 64 bytes of
// slack after the last element (to catch overruns). Padding and slack hold a sentinel pattern.
struct Mat {
    DType t = DType::f32;
    int64_t rows = 0, cols = 0, ld = 0, n = 0;
    test::Buffer<uint8_t> buf;

    void alloc(DType type, int64_t r, int64_t c, int64_t l, size_t misalign) {
        t = type, rows = r, cols = c, ld = l;
        n = (r == 0 || c == 0) ? 0 : (r - 1) * l + c;
        buf.resize(static_cast<size_t>(n * dtype_size(t) + 64), misalign * dtype_size(t));
        std::memset(buf.data(), 0xA5, buf.size());
        if (is_float(t))  // padding read by mistake turns the result into NaN
            for (int64_t i = 0; i < n; ++i) put(t, buf.data(), i, kNaN);
    }
    void* data() { return n ? buf.data() : nullptr; }
    double at(int64_t r, int64_t c) const { return get(t, buf.data(), r * ld + c); }
    void set(int64_t r, int64_t c, double v) { put(t, buf.data(), r * ld + c, v); }
    bool inside(int64_t i) const { return i < n && i % ld < cols; }
};

double random_value(DType t, std::mt19937_64& g) {
    switch (t) {
        case DType::f32:
        case DType::bf16: return std::uniform_real_distribution<double>(-1, 1)(g);
        case DType::u8: return std::uniform_int_distribution<int>(0, 255)(g);
        case DType::s8: return std::uniform_int_distribution<int>(-128, 127)(g);
        case DType::s32: return std::uniform_int_distribution<int>(-100000, 100000)(g);
    }
    return 0;
}

void fill(Mat& m, std::mt19937_64& g) {
    for (int64_t r = 0; r < m.rows; ++r)
        for (int64_t c = 0; c < m.cols; ++c) m.set(r, c, random_value(m.t, g));
}

int64_t min_lda(const GemmDesc& d) { return d.trans_a == Trans::N ? d.K : d.M; }
int64_t min_ldb(const GemmDesc& d) { return d.trans_b == Trans::N ? d.N : d.K; }

// One problem: the descriptor (explicit leading dimensions or 0), misalignment in elements,
// int8 quantisation parameters, and the seed of its data.
struct Case {
    GemmDesc d;
    size_t misalign = 0;
    float a_scale = 0.02f;
    int32_t a_zp = 0, b_zp = 0;
    uint64_t seed = 1;
};

std::string describe(const Case& c) {
    const GemmDesc& d = c.d;
    std::ostringstream os;
    os << dtype_name(d.a_type) << "*" << dtype_name(d.b_type) << "->" << dtype_name(d.c_type) << " "
       << trans_name(d.trans_a) << trans_name(d.trans_b) << " M=" << d.M << " N=" << d.N << " K=" << d.K
       << " lda=" << d.lda << " ldb=" << d.ldb << " ldc=" << d.ldc << " alpha=" << d.alpha << " beta=" << d.beta
       << " bias=" << d.epilogue.bias << " act=" << activation_name(d.epilogue.act) << " residual=" << d.epilogue.residual
       << "(" << dtype_name(d.residual_type) << ",ld=" << d.ld_residual << ") per_channel=" << d.b_scale_per_channel
       << " zp=" << c.a_zp << "/" << c.b_zp << " misalign=" << c.misalign << " threads=" << get_num_threads();
    return os.str();
}

// Operands of a Case, and what the oracle expects.
struct Problem {
    Case c;
    GemmDesc d;  // leading dimensions resolved
    Mat A, B, C, R;
    test::Buffer<float> bias;
    std::vector<float> b_scales;
    float a_scale = 1;
    std::vector<double> want, tol;  // per element of C
    std::vector<uint8_t> c_before;  // C's buffer before the run (padding check)

    explicit Problem(const Case& cs) : c(cs), d(cs.d) {
        std::mt19937_64 g(c.seed);
        if (d.lda == 0) d.lda = min_lda(d);
        if (d.ldb == 0) d.ldb = min_ldb(d);
        if (d.ldc == 0) d.ldc = d.N;
        if (d.ld_residual == 0) d.ld_residual = d.N;
        const bool an = d.trans_a == Trans::N, bn = d.trans_b == Trans::N;
        A.alloc(d.a_type, an ? d.M : d.K, an ? d.K : d.M, d.lda, c.misalign);
        B.alloc(d.b_type, bn ? d.K : d.N, bn ? d.N : d.K, d.ldb, c.misalign + 1);
        C.alloc(d.c_type, d.M, d.N, d.ldc, c.misalign);
        fill(A, g);
        fill(B, g);
        if (d.beta == 0.0f && is_float(d.c_type)) {
            for (int64_t m = 0; m < d.M; ++m)
                for (int64_t n = 0; n < d.N; ++n) C.set(m, n, kNaN);  // must not leak
        } else if (d.beta == 0.0f) {
            for (int64_t m = 0; m < d.M; ++m)
                for (int64_t n = 0; n < d.N; ++n) C.set(m, n, 0x7eadbeef);
        } else {
            fill(C, g);
        }
        if (d.epilogue.bias) {
            bias.resize(static_cast<size_t>(d.N), 4 * ((c.misalign + 2) % 16));
            for (int64_t n = 0; n < d.N; ++n) bias[n] = static_cast<float>(random_value(DType::f32, g));
        }
        if (d.epilogue.residual) {
            R.alloc(d.residual_type, d.M, d.N, d.ld_residual, c.misalign + 3);
            fill(R, g);
        }
        if (d.a_type == DType::u8 || d.a_type == DType::s8) {
            a_scale = c.a_scale;
            b_scales.resize(d.b_scale_per_channel ? static_cast<size_t>(d.N) : 1);
            for (float& s : b_scales) s = static_cast<float>(std::uniform_real_distribution<double>(0.002, 0.02)(g));
        }
        oracle();
        c_before.assign(C.buf.data(), C.buf.data() + C.buf.size());
    }

    GemmArgs args() {
        GemmArgs a;
        a.A = A.data();
        a.B = B.data();
        a.C = C.data();
        a.bias = d.epilogue.bias && d.N ? bias.data() : nullptr;
        a.residual = d.epilogue.residual ? R.data() : nullptr;
        a.a_scale = b_scales.empty() ? nullptr : &a_scale;
        a.b_scales = b_scales.empty() ? nullptr : b_scales.data();
        a.a_zero_point = c.a_zp;
        a.b_zero_point = c.b_zp;
        return a;
    }

    double opa(int64_t m, int64_t k) const { return d.trans_a == Trans::N ? A.at(m, k) : A.at(k, m); }
    double opb(int64_t k, int64_t n) const { return d.trans_b == Trans::N ? B.at(k, n) : B.at(n, k); }

    void oracle() {
        want.assign(static_cast<size_t>(d.M * d.N), 0.0);
        tol.assign(want.size(), 0.0);
        const bool int8 = d.a_type == DType::u8 || d.a_type == DType::s8;
        for (int64_t m = 0; m < d.M; ++m) {
            for (int64_t n = 0; n < d.N; ++n) {
                const size_t i = static_cast<size_t>(m * d.N + n);
                if (int8) {
                    int64_t acc = 0;
                    for (int64_t k = 0; k < d.K; ++k)
                        acc += (static_cast<int64_t>(opa(m, k)) - c.a_zp) * (static_cast<int64_t>(opb(k, n)) - c.b_zp);
                    if (d.c_type == DType::s32) {
                        int64_t v = acc + (d.beta == 1.0f ? static_cast<int64_t>(C.at(m, n)) : 0);
                        want[i] = static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
                        continue;
                    }
                    const double s = double(d.alpha) * a_scale * b_scales[d.b_scale_per_channel ? n : 0];
                    epilogue(m, n, s * static_cast<double>(acc), 16 * kU * std::fabs(s * static_cast<double>(acc)));
                } else {
                    double acc = 0, mag = 0;
                    for (int64_t k = 0; k < d.K; ++k) {
                        const double p = opa(m, k) * opb(k, n);
                        acc += p;
                        mag += std::fabs(p);
                    }
                    epilogue(m, n, d.alpha * acc, 2 * (d.K + 5) * kU * std::fabs(d.alpha) * mag);
                }
            }
        }
    }

    // x: the scaled product; e: its error bound so far.
    void epilogue(int64_t m, int64_t n, double x, double e) {
        const size_t i = static_cast<size_t>(m * d.N + n);
        if (d.beta != 0.0f) {
            x += double(d.beta) * C.at(m, n);
            e += 2 * kU * std::fabs(double(d.beta) * C.at(m, n));
        }
        if (d.epilogue.bias) {
            x += bias[n];
            e += 2 * kU * std::fabs(bias[n]);
        }
        const Activation act = d.epilogue.act;
        const double L = (act == Activation::none || act == Activation::relu) ? 1.0 : 1.2;
        double v = act_d(act, x);
        e = L * e + (act == Activation::none || act == Activation::relu ? 0.0 : 4 * kU * (std::fabs(x) + std::fabs(v)));
        if (d.epilogue.residual) {
            const double r = R.at(m, n);
            e += kU * (std::fabs(v) + std::fabs(r));
            v += r;
        }
        if (d.c_type == DType::bf16) e += kBf16Rtol * std::fabs(v);
        want[i] = v;
        tol[i] = e + 1e-30;
    }

    // Checks C against the oracle and that nothing outside C's elements changed.
    ::testing::AssertionResult check() const {
        int bad = 0;
        std::ostringstream msg;
        for (int64_t m = 0; m < d.M; ++m) {
            for (int64_t n = 0; n < d.N; ++n) {
                const size_t i = static_cast<size_t>(m * d.N + n);
                const double g = C.at(m, n), w = want[i];
                const bool ok = d.c_type == DType::s32 ? g == w : std::fabs(g - w) <= tol[i];
                if (!ok && bad++ < 5)
                    msg << "\n  C[" << m << "," << n << "] got " << g << " want " << w << " (tol " << tol[i] << ")";
            }
        }
        const int64_t es = dtype_size(d.c_type);
        for (size_t b = 0; b < c_before.size(); ++b) {
            if (C.inside(static_cast<int64_t>(b) / es)) continue;
            if (C.buf.data()[b] != c_before[b]) {
                if (bad++ < 5) msg << "\n  byte " << b << " outside C's elements changed";
                break;
            }
        }
        if (bad == 0) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << bad << " mismatches in " << describe(c) << ":" << msg.str();
    }

    std::vector<uint8_t> c_bytes() const { return {C.buf.data(), C.buf.data() + C.buf.size()}; }
};

struct Types {
    DType a, b, c;
};
const Types kAllTypes[] = {
    {DType::f32, DType::f32, DType::f32},   {DType::bf16, DType::bf16, DType::f32}, {DType::bf16, DType::bf16, DType::bf16},
    {DType::u8, DType::s8, DType::s32},     {DType::s8, DType::s8, DType::s32},     {DType::u8, DType::s8, DType::f32},
    {DType::s8, DType::s8, DType::f32},
};

Case make_case(Types t, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K) {
    Case c;
    c.d.a_type = t.a, c.d.b_type = t.b, c.d.c_type = t.c;
    c.d.trans_a = ta, c.d.trans_b = tb;
    c.d.M = M, c.d.N = N, c.d.K = K;
    return c;
}

bool int8_types(const GemmDesc& d) { return d.a_type == DType::u8 || d.a_type == DType::s8; }

// Runs a Case through a plan and checks it.
void run_plan(const Case& c) {
    Problem p(c);
    GemmPlan plan(c.d);
    plan.run(p.args());
    ASSERT_TRUE(p.check());
}

struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

}  // namespace

// ---- correctness sweeps ---------------------------------------------------------------------------

TEST(Gemm, ShapesTransposesTypes) {
    const int64_t shapes[][3] = {{1, 1, 1},   {1, 65, 33},  {65, 1, 17}, {2, 7, 1},    {7, 17, 33},  {17, 2, 65},
                                 {33, 65, 7}, {65, 33, 2},  {17, 17, 17}, {64, 64, 64}, {130, 17, 96}, {3, 129, 130},
                                 {96, 130, 5}};
    const float alphas[] = {1.0f, -0.75f, 2.0f};
    const float betas[] = {0.0f, 1.0f, 0.5f};
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            int idx = 0;
            for (const Types& t : kAllTypes) {
                for (Trans ta : {Trans::N, Trans::T}) {
                    for (Trans tb : {Trans::N, Trans::T}) {
                        for (const auto& s : shapes) {
                            ++idx;
                            Case c = make_case(t, ta, tb, s[0], s[1], s[2]);
                            c.seed = static_cast<uint64_t>(idx);
                            // Leading dimensions: packed or padded, alternating per operand.
                            if (idx % 2) c.d.lda = min_lda(c.d) + 3;
                            if (idx % 3 == 0) c.d.ldb = min_ldb(c.d) + 5;
                            if (idx % 4 < 2) c.d.ldc = c.d.N + 1;
                            c.misalign = static_cast<size_t>(idx % 3);  // elements: f32 4-byte, bf16 2-byte, int8 1-byte steps
                            if (t.c == DType::s32) {
                                c.d.beta = (idx % 2) ? 1.0f : 0.0f;
                            } else {
                                c.d.alpha = alphas[idx % 3];
                                c.d.beta = betas[(idx / 3) % 3];
                            }
                            if (int8_types(c.d)) {
                                c.a_zp = (idx % 3 == 0) ? 0 : (t.a == DType::u8 ? 128 : -3);
                                c.b_zp = (idx % 5 < 2) ? 0 : 5;
                                c.d.b_scale_per_channel = t.c == DType::f32 && idx % 2 == 0;
                            }
                            SCOPED_TRACE(describe(c));
                            run_plan(c);
                            if (HasFatalFailure()) return;
                        }
                    }
                }
            }
        });
    }
}

TEST(Gemm, Epilogues) {
    const Activation acts[] = {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                               Activation::silu};
    ThreadsGuard tg;
    for_each_isa([&](Isa) {
        int idx = 0;
        for (const Types& t : kAllTypes) {
            if (t.c == DType::s32) continue;
            for (Activation act : acts) {
                for (bool bias : {false, true}) {
                    for (int res : {0, 1, 2}) {  // none, f32, bf16
                        for (float beta : {0.0f, 0.5f}) {
                            ++idx;
                            set_num_threads(1 + idx % 2);
                            Case c = make_case(t, idx % 2 ? Trans::T : Trans::N, idx % 3 ? Trans::N : Trans::T, 17, 33, 65);
                            c.seed = 1000 + static_cast<uint64_t>(idx);
                            c.d.alpha = idx % 2 ? 1.0f : 1.5f;
                            c.d.beta = beta;
                            c.d.epilogue.bias = bias;
                            c.d.epilogue.act = act;
                            c.d.epilogue.residual = res != 0;
                            c.d.residual_type = res == 2 ? DType::bf16 : DType::f32;
                            if (res && idx % 2) c.d.ld_residual = c.d.N + 7;
                            c.misalign = static_cast<size_t>(idx % 4);
                            if (int8_types(c.d)) {
                                c.a_zp = t.a == DType::u8 ? 120 : 0;
                                c.b_zp = idx % 2 ? -7 : 0;
                                c.d.b_scale_per_channel = idx % 3 == 0;
                            }
                            SCOPED_TRACE(describe(c));
                            run_plan(c);
                            if (HasFatalFailure()) return;
                        }
                    }
                }
            }
        }
    });
}

TEST(Gemm, Int8ScalesAndZeroPoints) {
    for_each_isa([&](Isa) {
        int idx = 0;
        for (DType at : {DType::u8, DType::s8}) {
            for (DType ct : {DType::s32, DType::f32}) {
                for (bool per_channel : {false, true}) {
                    if (per_channel && ct == DType::s32) continue;
                    const int32_t a_zps[] = {0, at == DType::u8 ? 255 : -128, at == DType::u8 ? 1 : 127};
                    for (int32_t azp : a_zps) {
                        for (int32_t bzp : {0, -128, 127, 9}) {
                            ++idx;
                            Case c = make_case({at, DType::s8, ct}, Trans::N, idx % 2 ? Trans::T : Trans::N, 9, 23, 41);
                            c.seed = 5000 + static_cast<uint64_t>(idx);
                            c.d.b_scale_per_channel = per_channel;
                            c.a_zp = azp, c.b_zp = bzp;
                            c.a_scale = idx % 2 ? 0.5f : 0.0125f;
                            SCOPED_TRACE(describe(c));
                            run_plan(c);
                            if (HasFatalFailure()) return;
                        }
                    }
                }
            }
        }
    });
}

TEST(Gemm, S32AccumulationWrapsModulo2To32) {
    // (0 - 255) * (127 - (-128)) = -65025 per k: 40000 terms leave the s32 range.
    const int64_t K = 40000;
    std::vector<uint8_t> A(K, 0);
    std::vector<int8_t> B(K, 127);
    for (float beta : {0.0f, 1.0f}) {
        int32_t C = 1000;
        GemmDesc d;
        d.M = 1, d.N = 1, d.K = K;
        d.a_type = DType::u8, d.b_type = DType::s8, d.c_type = DType::s32;
        d.beta = beta;
        GemmArgs a;
        a.A = A.data(), a.B = B.data(), a.C = &C;
        a.a_zero_point = 255, a.b_zero_point = -128;
        gemm(d, a);
        const int64_t exact = -65025 * K + (beta == 1.0f ? 1000 : 0);
        EXPECT_LT(exact, std::numeric_limits<int32_t>::min());
        EXPECT_EQ(C, static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(exact))));
    }
}

TEST(Gemm, BetaZeroNeverReadsCAndNaNBetaDoes) {
    for (const Types& t : kAllTypes) {
        if (!is_float(t.c)) continue;
        for (bool bias : {false, true}) {
            Case c = make_case(t, Trans::N, Trans::N, 7, 9, 11);
            c.d.epilogue.bias = bias;
            c.d.epilogue.act = Activation::gelu_erf;
            Problem p(c);  // beta = 0: C is filled with NaN
            GemmPlan(c.d).run(p.args());
            ASSERT_TRUE(p.check());
            for (int64_t m = 0; m < c.d.M; ++m)
                for (int64_t n = 0; n < c.d.N; ++n) ASSERT_FALSE(std::isnan(p.C.at(m, n)));
        }
        Case c = make_case(t, Trans::N, Trans::N, 3, 4, 5);
        c.d.beta = kNaN;  // not zero: C is read, the result is NaN
        Problem p(c);
        GemmPlan(c.d).run(p.args());
        for (int64_t m = 0; m < c.d.M; ++m)
            for (int64_t n = 0; n < c.d.N; ++n) ASSERT_TRUE(std::isnan(p.C.at(m, n)));
    }
}

TEST(Gemm, ZeroSizes) {
    for (const Types& t : kAllTypes) {
        for (auto s : {std::array<int64_t, 3>{0, 5, 3}, {4, 0, 3}, {0, 0, 0}}) {
            GemmDesc d = make_case(t, Trans::N, Trans::T, s[0], s[1], s[2]).d;
            d.epilogue.bias = is_float(t.c);
            GemmPlan plan(d);
            plan.run(GemmArgs{});  // nothing is read or written: null pointers are fine
            gemm(d, GemmArgs{});
            if (s[1] * s[2] == 0) plan.run(GemmArgs{}, plan.pack_b(nullptr));
        }
        // K == 0: the product is 0, C = act(beta*C + bias) + residual.
        for (float beta : {0.0f, 0.5f}) {
            Case c = make_case(t, Trans::T, Trans::N, 5, 6, 0);
            c.d.beta = t.c == DType::s32 ? 1.0f : beta;
            if (is_float(t.c)) {
                c.d.epilogue.bias = true;
                c.d.epilogue.act = Activation::silu;
                c.d.epilogue.residual = true;
            }
            SCOPED_TRACE(describe(c));
            run_plan(c);
        }
    }
}

// ---- implementations, plans, packed B, one-shot -------------------------------------------------------

TEST(Gemm, EveryImplementationMatchesTheOracleAndSelectionFollowsTheCap) {
    for_each_isa([&](Isa isa) {
        for (const Types& t : kAllTypes) {
            Case c = make_case(t, Trans::T, Trans::N, 19, 37, 29);
            c.d.beta = t.c == DType::s32 ? 1.0f : 0.5f;
            c.a_zp = int8_types(c.d) ? 3 : 0;
            const detail::GemmSpec spec = detail::gemm_check_desc("test", c.d);
            const auto& selected = detail::gemm_registry().select(spec, isa);
            EXPECT_LE(selected.isa, isa);
            EXPECT_STREQ(GemmPlan(c.d).impl_name(), selected.name);
            for (const auto& impl : detail::gemm_registry().impls()) {
                if (impl.isa > isa || (impl.supports && !impl.supports(spec))) continue;
                SCOPED_TRACE(std::string("impl=") + impl.name + " " + describe(c));
                Problem p(c);
                const auto k = detail::gemm_registry().get(spec, impl).kernel;
                detail::GemmCall call;
                call.args = p.args();
                call.alpha = c.d.alpha, call.beta = c.d.beta;
                k->run(call);
                EXPECT_TRUE(p.check());
                // Its packed B gives the same bits.
                Problem q(c);
                const auto packed = k->pack_b(q.B.data());
                EXPECT_EQ(packed->layout, k->packed_layout());
                call.args = q.args();
                call.args.B = nullptr;
                call.packed_b = packed.get();
                k->run(call);
                // (amx:bf16:decode runs the tiles for its PackedB, the vector kernel for a plain B)
                if (std::string(impl.name) == "amx:bf16:decode")
                    EXPECT_TRUE(q.check());
                else
                    EXPECT_EQ(p.c_bytes(), q.c_bytes());
            }
        }
    });
}

TEST(Gemm, PackedBMatchesUnpackedAndServesEveryM) {
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            int idx = 0;
            for (const Types& t : kAllTypes) {
                for (Trans tb : {Trans::N, Trans::T}) {
                    ++idx;
                    Case c = make_case(t, Trans::N, tb, 33, 45, 70);
                    c.d.ldb = min_ldb(c.d) + 4;
                    c.d.epilogue.bias = is_float(t.c);
                    c.d.epilogue.act = is_float(t.c) ? Activation::relu : Activation::none;
                    c.misalign = static_cast<size_t>(idx % 3);
                    c.seed = 300 + static_cast<uint64_t>(idx);
                    SCOPED_TRACE(describe(c));
                    Problem p(c), q(c);
                    const GemmPlan plan(c.d);
                    plan.run(p.args());
                    const PackedB packed = plan.pack_b(q.B.data());
                    ASSERT_FALSE(packed.empty());
                    EXPECT_GE(packed.size_bytes(), static_cast<size_t>(c.d.K * c.d.N * dtype_size(t.b)));
                    EXPECT_FALSE(packed.layout().empty());
                    GemmArgs qa = q.args();
                    qa.B = nullptr;  // not read
                    plan.run(qa, packed);
                    EXPECT_TRUE(q.check());
                    EXPECT_EQ(p.c_bytes(), q.c_bytes());

                    // The same packed weights serve a plan with another M (a different batch size).
                    Case c2 = c;
                    c2.d.M = 5;
                    Problem r(c2);
                    std::memcpy(r.B.buf.data(), q.B.buf.data(), q.B.buf.size());  // same B
                    r.oracle();
                    GemmArgs ra = r.args();
                    ra.B = nullptr;
                    GemmPlan(c2.d).run(ra, packed);
                    EXPECT_TRUE(r.check());
                }
            }
        });
    }
}

TEST(Gemm, PackedBFromAnotherPlanIsRejected) {
    GemmDesc d;
    d.M = 8, d.N = 16, d.K = 12;
    std::vector<float> A(8 * 12, 1.0f), B(12 * 16, 1.0f), C(8 * 16);
    const GemmPlan plan(d);
    GemmArgs a;
    a.A = A.data(), a.C = C.data();
    const PackedB good = plan.pack_b(B.data());
    plan.run(a, good);

    GemmDesc other_n = d;
    other_n.N = 15;
    GemmDesc other_k = d;
    other_k.K = 11;
    GemmDesc other_type = d;
    other_type.a_type = other_type.b_type = DType::bf16;
    std::vector<bf16> Bh(12 * 16, bf16(1.0f));
    const std::vector<std::pair<GemmDesc, const void*>> others = {
        {other_n, B.data()}, {other_k, B.data()}, {other_type, Bh.data()}};
    for (const auto& [od, bptr] : others) {
        const PackedB wrong = GemmPlan(od).pack_b(bptr);
        XK_EXPECT_INVALID(plan.run(a, wrong), "xk::GemmPlan::run: packed_b='" + wrong.layout() + "' was packed for another plan");
        XK_EXPECT_INVALID(plan.run(a, wrong), good.layout());
    }
    XK_EXPECT_INVALID(plan.run(a, PackedB{}), "xk::GemmPlan::run: packed_b=empty");
    EXPECT_TRUE(PackedB{}.empty());
    EXPECT_EQ(PackedB{}.size_bytes(), 0u);
}

TEST(Gemm, OneShotAndSgemmMatchThePlanBitForBit) {
    ThreadsGuard tg;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for (const Types& t : kAllTypes) {
            Case c = make_case(t, Trans::T, Trans::T, 40, 31, 57);
            c.d.lda = min_lda(c.d) + 2;
            c.d.beta = t.c == DType::s32 ? 1.0f : 0.25f;
            if (is_float(t.c)) c.d.epilogue.act = Activation::gelu_tanh;
            Problem p(c), q(c);
            GemmPlan(c.d).run(p.args());
            gemm(c.d, q.args());
            EXPECT_TRUE(q.check()) << describe(c);
            EXPECT_EQ(p.c_bytes(), q.c_bytes()) << describe(c);
        }
        for (Trans ta : {Trans::N, Trans::T}) {
            for (Trans tb : {Trans::N, Trans::T}) {
                Case c = make_case(kAllTypes[0], ta, tb, 23, 19, 31);
                c.d.ldb = min_ldb(c.d) + 1;
                c.d.alpha = -1.25f, c.d.beta = 0.5f;
                Problem p(c), q(c);
                gemm(c.d, p.args());
                sgemm(ta, tb, c.d.M, c.d.N, c.d.K, c.d.alpha, static_cast<const float*>(q.A.data()), 0,
                      static_cast<const float*>(q.B.data()), q.d.ldb, c.d.beta, static_cast<float*>(q.C.data()), 0);
                EXPECT_TRUE(q.check()) << describe(c);
                EXPECT_EQ(p.c_bytes(), q.c_bytes()) << describe(c);
            }
        }
    }
}

TEST(Gemm, ConcurrentRunsOfOnePlan) {
    ThreadsGuard tg;
    set_num_threads(2);
    Case c = make_case(kAllTypes[2], Trans::N, Trans::T, 37, 29, 53);
    c.d.beta = 0.5f;
    c.d.epilogue.bias = true;
    c.d.epilogue.act = Activation::silu;
    const GemmPlan plan(c.d);
    Problem ref(c);
    plan.run(ref.args());
    ASSERT_TRUE(ref.check());
    const PackedB packed = plan.pack_b(ref.B.data());
    const std::vector<uint8_t> want = ref.c_bytes();

    constexpr int kThreads = 4, kIters = 8;
    std::atomic<int> mismatches{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < kThreads; ++w) {
        workers.emplace_back([&, w] {
            for (int it = 0; it < kIters; ++it) {
                Problem p(c);  // same seed: same inputs, its own C
                if ((w + it) % 2)
                    plan.run(p.args(), packed);
                else
                    plan.run(p.args());
                if (p.c_bytes() != want) ++mismatches;
            }
        });
    }
    for (auto& t : workers) t.join();
    EXPECT_EQ(mismatches.load(), 0);
}

// ---- bad input -------------------------------------------------------------------------------------

namespace {
GemmDesc small_desc() {
    GemmDesc d;
    d.M = 5, d.N = 9, d.K = 7;
    return d;
}
}  // namespace

TEST(Gemm, BadDescriptorIsRejectedByThePlanAndTheOneShot) {
    std::vector<float> A(100), B(100), C(100);
    GemmArgs a;
    a.A = A.data(), a.B = B.data(), a.C = C.data();
    auto expect = [&](GemmDesc d, Status st, const std::string& needle) {
        XK_EXPECT_ERROR(GemmPlan{d}, st, "xk::GemmPlan: " + needle);
        XK_EXPECT_ERROR(gemm(d, a), st, "xk::gemm: " + needle);
    };
    const Status inv = Status::invalid_argument, uns = Status::unsupported;
    GemmDesc d;
    d = small_desc(), d.M = -1, expect(d, inv, "M=-1 must be >= 0");
    d = small_desc(), d.N = -3, expect(d, inv, "N=-3 must be >= 0");
    d = small_desc(), d.K = -2, expect(d, inv, "K=-2 must be >= 0");
    d = small_desc(), d.lda = 3, expect(d, inv, "lda=3 must be >= K=7");
    d = small_desc(), d.lda = -1, expect(d, inv, "lda=-1 must be >= K=7");
    d = small_desc(), d.trans_a = Trans::T, d.lda = 4, expect(d, inv, "lda=4 must be >= M=5");
    d = small_desc(), d.ldb = 8, expect(d, inv, "ldb=8 must be >= N=9");
    d = small_desc(), d.trans_b = Trans::T, d.ldb = 6, expect(d, inv, "ldb=6 must be >= K=7");
    d = small_desc(), d.ldc = 4, expect(d, inv, "ldc=4 must be >= N=9");
    d = small_desc(), d.epilogue.residual = true, d.ld_residual = 2, expect(d, inv, "ld_residual=2 must be >= N=9");
    d = small_desc(), d.M = int64_t(1) << 40, d.K = int64_t(1) << 40, expect(d, inv, "M*lda = 1099511627775*1099511627776 overflows");
    d = small_desc(), d.trans_b = Trans::T, d.N = int64_t(1) << 40, d.K = int64_t(1) << 30, expect(d, inv, "N*ldb = 1099511627775*1073741824 overflows");
    d = small_desc(), d.M = 3, d.ldc = int64_t(1) << 62, expect(d, inv, "M*ldc = 2*4611686018427387904 overflows");
    d = small_desc(), d.trans_a = static_cast<Trans>(7), expect(d, inv, "trans_a=7 is not a valid xk::Trans");
    d = small_desc(), d.trans_b = static_cast<Trans>(-1), expect(d, inv, "trans_b=-1 is not a valid xk::Trans");
    d = small_desc(), d.a_type = static_cast<DType>(9), expect(d, inv, "a_type=9 is not a valid xk::DType");
    d = small_desc(), d.c_type = static_cast<DType>(-4), expect(d, inv, "c_type=-4 is not a valid xk::DType");
    d = small_desc(), d.residual_type = static_cast<DType>(12), expect(d, inv, "residual_type=12 is not a valid xk::DType");
    d = small_desc(), d.epilogue.act = static_cast<Activation>(42), expect(d, inv, "epilogue.act=42 is not a valid xk::Activation");
    // Unsupported type combinations name the three types.
    d = small_desc(), d.b_type = DType::bf16, expect(d, uns, "a_type=f32 b_type=bf16 c_type=f32");
    d = small_desc(), d.c_type = DType::bf16, expect(d, uns, "a_type=f32 b_type=f32 c_type=bf16");
    d = small_desc(), d.a_type = d.b_type = DType::bf16, d.c_type = DType::s32, expect(d, uns, "a_type=bf16 b_type=bf16 c_type=s32");
    d = small_desc(), d.a_type = DType::s8, d.b_type = DType::u8, d.c_type = DType::s32, expect(d, uns, "a_type=s8 b_type=u8 c_type=s32");
    d = small_desc(), d.a_type = DType::u8, d.b_type = DType::s8, d.c_type = DType::bf16, expect(d, uns, "a_type=u8 b_type=s8 c_type=bf16");
    d = small_desc(), d.a_type = d.b_type = DType::s32, d.c_type = DType::s32, expect(d, uns, "a_type=s32 b_type=s32 c_type=s32");
    // s32 output: plain sums only.
    GemmDesc s32 = small_desc();
    s32.a_type = DType::u8, s32.b_type = DType::s8, s32.c_type = DType::s32;
    d = s32, d.alpha = 2, expect(d, uns, "alpha=2 is not supported with c_type=s32");
    d = s32, d.beta = 0.5f, expect(d, uns, "beta=0.5 is not supported with c_type=s32");
    d = s32, d.epilogue.bias = true, expect(d, uns, "epilogue (bias=on act=none residual=off) is not supported with c_type=s32");
    d = s32, d.epilogue.act = Activation::relu, expect(d, uns, "epilogue (bias=off act=relu residual=off)");
    d = s32, d.b_scale_per_channel = true, expect(d, inv, "b_scale_per_channel=true applies only to int8 inputs with c_type=f32");
    d = small_desc(), d.b_scale_per_channel = true, expect(d, inv, "b_scale_per_channel=true");
    d = small_desc(), d.epilogue.residual = true, d.residual_type = DType::s8, expect(d, uns, "residual_type=s8 is not supported");
}

TEST(Gemm, BadArgumentsAreRejectedByRunAndTheOneShot) {
    constexpr const char* run = "xk::GemmPlan::run: ";
    std::vector<float> A(200), B(200), C(200), bias(16), res(200);
    GemmDesc d = small_desc();
    d.epilogue.bias = true;
    d.epilogue.residual = true;
    const GemmPlan plan(d);
    const PackedB packed = plan.pack_b(B.data());
    GemmArgs ok;
    ok.A = A.data(), ok.B = B.data(), ok.C = C.data(), ok.bias = bias.data(), ok.residual = res.data();
    plan.run(ok);
    plan.run(ok, packed);
    auto expect = [&](const GemmArgs& a, const std::string& needle) {
        XK_EXPECT_INVALID(plan.run(a), run + needle);
        XK_EXPECT_INVALID(gemm(d, a), "xk::gemm: " + needle);
    };
    auto expect_overlap = [&](const GemmArgs& a, const std::string& needle) {
        XK_EXPECT_INVALID(plan.run(a), run + ("C=" + detail::ptr_str(a.C) + " overlaps " + needle));
        XK_EXPECT_INVALID(gemm(d, a), "xk::gemm: C=" + detail::ptr_str(a.C) + " overlaps " + needle);
    };
    GemmArgs a;
    a = ok, a.A = nullptr, expect(a, "A=null must not be a null pointer");
    a = ok, a.B = nullptr, expect(a, "B=null must not be a null pointer");
    a = ok, a.C = nullptr, expect(a, "C=null must not be a null pointer");
    a = ok, a.bias = nullptr, expect(a, "bias=null must not be a null pointer");
    a = ok, a.residual = nullptr, expect(a, "residual=null must not be a null pointer");
    a = ok, a.C = A.data() + 3, expect_overlap(a, "A=" + detail::ptr_str(A.data()));
    a = ok, a.C = B.data() + 40, expect_overlap(a, "B=" + detail::ptr_str(B.data()));
    a = ok, a.bias = C.data() + 40, expect_overlap(a, "bias=");
    a = ok, a.residual = C.data() + 1, expect_overlap(a, "residual=");
    a = ok, a.A = nullptr; XK_EXPECT_INVALID(plan.run(a, packed), std::string(run) + "A=null");
    a = ok, a.B = nullptr, plan.run(a, packed);  // B is not read with a packed B
    a = ok, a.C = B.data(), plan.run(a, packed);  // ... nor checked for overlap

    // int8: scales and zero points.
    std::vector<uint8_t> Au(100);
    std::vector<int8_t> As(100), Bs(100);
    std::vector<int32_t> Ci(100);
    float scale = 0.5f;
    GemmDesc q = small_desc();
    q.a_type = DType::u8, q.b_type = DType::s8, q.c_type = DType::f32;
    const GemmPlan qplan(q);
    GemmArgs qa;
    qa.A = Au.data(), qa.B = Bs.data(), qa.C = C.data(), qa.a_scale = &scale, qa.b_scales = &scale;
    qplan.run(qa);
    a = qa, a.a_scale = nullptr; XK_EXPECT_INVALID(qplan.run(a), std::string(run) + "a_scale=null must not be a null pointer");
    a = qa, a.b_scales = nullptr; XK_EXPECT_INVALID(qplan.run(a), std::string(run) + "b_scales=null must not be a null pointer");
    a = qa, a.a_zero_point = 256; XK_EXPECT_INVALID(qplan.run(a), std::string(run) + "a_zero_point=256 must be in [0, 255]");
    a = qa, a.a_zero_point = -1; XK_EXPECT_INVALID(qplan.run(a), "a_zero_point=-1 must be in [0, 255]");
    a = qa, a.b_zero_point = 128; XK_EXPECT_INVALID(qplan.run(a), "b_zero_point=128 must be in [-128, 127]");
    a = qa, a.C = &scale; XK_EXPECT_INVALID(qplan.run(a), "overlaps a_scale=");
    GemmDesc qs = q;
    qs.a_type = DType::s8, qs.c_type = DType::s32;
    GemmArgs sa;
    sa.A = As.data(), sa.B = Bs.data(), sa.C = Ci.data();
    gemm(qs, sa);  // s32 output reads no scales
    sa.a_zero_point = -129;
    XK_EXPECT_INVALID(gemm(qs, sa), "xk::gemm: a_zero_point=-129 must be in [-128, 127]");

    // A moved-from plan.
    GemmPlan moved(d);
    GemmPlan taker(std::move(moved));
    taker.run(ok);
    XK_EXPECT_INVALID(moved.run(ok), "xk::GemmPlan::run: the plan was moved from");  // NOLINT(bugprone-use-after-move)
    XK_EXPECT_INVALID(moved.pack_b(B.data()), "xk::GemmPlan::pack_b: the plan was moved from");
}

TEST(Gemm, BadInputToPackB) {
    const GemmPlan plan(small_desc());
    XK_EXPECT_INVALID(plan.pack_b(nullptr), "xk::GemmPlan::pack_b: B=null must not be a null pointer");
    GemmDesc d = small_desc();
    d.K = 0;
    EXPECT_TRUE(GemmPlan(d).pack_b(nullptr).size_bytes() == 0);  // nothing to read
}

TEST(Gemm, BadInputToSgemm) {
    std::vector<float> A(100), B(100), C(100);
    XK_EXPECT_INVALID(sgemm(Trans::N, Trans::N, 5, 9, 7, 1, A.data(), 3, B.data(), 0, 0, C.data(), 0),
                      "xk::sgemm: lda=3 must be >= K=7");
    XK_EXPECT_INVALID(sgemm(Trans::N, Trans::N, -5, 9, 7, 1, A.data(), 0, B.data(), 0, 0, C.data(), 0),
                      "xk::sgemm: M=-5 must be >= 0");
    XK_EXPECT_INVALID(sgemm(Trans::N, Trans::N, 5, 9, 7, 1, nullptr, 0, B.data(), 0, 0, C.data(), 0),
                      "xk::sgemm: A=null");
    XK_EXPECT_INVALID(sgemm(Trans::N, static_cast<Trans>(2), 5, 9, 7, 1, A.data(), 0, B.data(), 0, 0, C.data(), 0),
                      "xk::sgemm: trans_b=2 is not a valid xk::Trans");
    XK_EXPECT_INVALID(sgemm(Trans::N, Trans::T, 5, 9, 7, 1, A.data(), 0, B.data(), 5, 0, C.data(), 0),
                      "xk::sgemm: ldb=5 must be >= K=7");
    sgemm(Trans::N, Trans::N, 0, 9, 7, 1, nullptr, 0, nullptr, 0, 0, nullptr, 0);  // M == 0: no-op
}

// ---- C API -----------------------------------------------------------------------------------------

TEST(Gemm, CApiMatchesTheOracle) {
    // sgemm
    {
        Case c = make_case(kAllTypes[0], Trans::T, Trans::N, 13, 21, 17);
        c.d.alpha = 0.5f, c.d.beta = 1.0f;
        Problem p(c);
        ASSERT_EQ(xk_sgemm(XK_TRANS_T, XK_TRANS_N, 13, 21, 17, 0.5f, static_cast<const float*>(p.A.data()), 0,
                           static_cast<const float*>(p.B.data()), 0, 1.0f, static_cast<float*>(p.C.data()), 0),
                  XK_SUCCESS)
            << xk_last_error();
        EXPECT_TRUE(p.check());
    }
    // bf16 -> f32 and bf16 -> bf16
    for (int out = 0; out < 2; ++out) {
        Case c = make_case(kAllTypes[1 + out], Trans::N, Trans::T, 11, 6, 33);
        c.d.ldb = 40;
        c.d.alpha = 2.0f, c.d.beta = 0.5f;
        Problem p(c);
        const auto* A = static_cast<const uint16_t*>(p.A.data());
        const auto* B = static_cast<const uint16_t*>(p.B.data());
        const xk_status st =
            out ? xk_gemm_bf16bf16(XK_TRANS_N, XK_TRANS_T, 11, 6, 33, 2.0f, A, 0, B, 40, 0.5f, static_cast<uint16_t*>(p.C.data()), 0)
                : xk_gemm_bf16f32(XK_TRANS_N, XK_TRANS_T, 11, 6, 33, 2.0f, A, 0, B, 40, 0.5f, static_cast<float*>(p.C.data()), 0);
        ASSERT_EQ(st, XK_SUCCESS) << xk_last_error();
        EXPECT_TRUE(p.check());
    }
    // int8 -> s32 (u8 and s8 A)
    for (const Types& t : {kAllTypes[3], kAllTypes[4]}) {
        Case c = make_case(t, Trans::N, Trans::N, 8, 19, 27);
        c.d.beta = 1.0f;
        c.a_zp = t.a == DType::u8 ? 100 : -4;
        c.b_zp = 3;
        Problem p(c);
        const auto* B = static_cast<const int8_t*>(p.B.data());
        auto* C = static_cast<int32_t*>(p.C.data());
        const xk_status st = t.a == DType::u8
                                 ? xk_gemm_u8s8s32(XK_TRANS_N, XK_TRANS_N, 8, 19, 27, static_cast<const uint8_t*>(p.A.data()), 0,
                                                   c.a_zp, B, 0, c.b_zp, 1.0f, C, 0)
                                 : xk_gemm_s8s8s32(XK_TRANS_N, XK_TRANS_N, 8, 19, 27, static_cast<const int8_t*>(p.A.data()), 0,
                                                   c.a_zp, B, 0, c.b_zp, 1.0f, C, 0);
        ASSERT_EQ(st, XK_SUCCESS) << xk_last_error();
        EXPECT_TRUE(p.check());
    }
    // int8 -> f32 with per-channel scales
    for (const Types& t : {kAllTypes[5], kAllTypes[6]}) {
        Case c = make_case(t, Trans::T, Trans::T, 9, 14, 31);
        c.d.b_scale_per_channel = true;
        c.d.alpha = 1.5f, c.d.beta = 0.5f;
        c.a_zp = t.a == DType::u8 ? 7 : 2;
        c.b_zp = -1;
        Problem p(c);
        const auto* B = static_cast<const int8_t*>(p.B.data());
        auto* C = static_cast<float*>(p.C.data());
        const xk_status st =
            t.a == DType::u8
                ? xk_gemm_u8s8f32(XK_TRANS_T, XK_TRANS_T, 9, 14, 31, 1.5f, static_cast<const uint8_t*>(p.A.data()), 0,
                                  p.a_scale, c.a_zp, B, 0, p.b_scales.data(), 1, c.b_zp, 0.5f, C, 0)
                : xk_gemm_s8s8f32(XK_TRANS_T, XK_TRANS_T, 9, 14, 31, 1.5f, static_cast<const int8_t*>(p.A.data()), 0,
                                  p.a_scale, c.a_zp, B, 0, p.b_scales.data(), 1, c.b_zp, 0.5f, C, 0);
        ASSERT_EQ(st, XK_SUCCESS) << xk_last_error();
        EXPECT_TRUE(p.check());
    }
    // Descriptor form: one-shot, plan, packed B, with an epilogue.
    {
        Case c = make_case(kAllTypes[2], Trans::N, Trans::N, 10, 12, 14);
        c.d.epilogue.bias = true;
        c.d.epilogue.act = Activation::gelu_erf;
        c.d.epilogue.residual = true;
        c.d.residual_type = DType::bf16;
        xk_gemm_desc cd;
        xk_gemm_desc_init(&cd);
        cd.M = 10, cd.N = 12, cd.K = 14;
        cd.a_type = cd.b_type = cd.c_type = XK_DTYPE_BF16;
        cd.bias = 1;
        cd.act = XK_ACT_GELU_ERF;
        cd.residual = 1;
        cd.residual_type = XK_DTYPE_BF16;
        auto to_c = [](Problem& p) {
            xk_gemm_args a;
            xk_gemm_args_init(&a);
            const GemmArgs g = p.args();
            a.A = g.A, a.B = g.B, a.C = g.C, a.bias = g.bias, a.residual = g.residual;
            return a;
        };
        Problem p1(c), p2(c), p3(c);
        xk_gemm_args a1 = to_c(p1), a2 = to_c(p2), a3 = to_c(p3);
        ASSERT_EQ(xk_gemm(&cd, &a1), XK_SUCCESS) << xk_last_error();
        EXPECT_TRUE(p1.check());
        xk_gemm_plan* plan = nullptr;
        ASSERT_EQ(xk_gemm_plan_create(&cd, &plan), XK_SUCCESS) << xk_last_error();
        EXPECT_STREQ(xk_gemm_plan_impl_name(plan), GemmPlan(c.d).impl_name());
        ASSERT_EQ(xk_gemm_plan_run(plan, &a2), XK_SUCCESS) << xk_last_error();
        EXPECT_TRUE(p2.check());
        xk_gemm_packed_b* packed = nullptr;
        ASSERT_EQ(xk_gemm_plan_pack_b(plan, a3.B, &packed), XK_SUCCESS) << xk_last_error();
        a3.B = nullptr;
        ASSERT_EQ(xk_gemm_plan_run_packed(plan, &a3, packed), XK_SUCCESS) << xk_last_error();
        EXPECT_TRUE(p3.check());
        EXPECT_EQ(p1.c_bytes(), p2.c_bytes());
        EXPECT_EQ(p1.c_bytes(), p3.c_bytes());
        xk_gemm_packed_b_destroy(packed);
        xk_gemm_plan_destroy(plan);
    }
}

TEST(Gemm, CApiBadInput) {
    std::vector<float> A(100), B(100), C(100);
    auto err = [] { return std::string(xk_last_error()); };
    EXPECT_EQ(xk_sgemm(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, 1, A.data(), 3, B.data(), 0, 0, C.data(), 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("lda=3 must be >= K=7"), std::string::npos) << err();
    EXPECT_EQ(xk_sgemm(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, 1, A.data(), 0, nullptr, 0, 0, C.data(), 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("B=null"), std::string::npos) << err();
    EXPECT_EQ(xk_sgemm(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, 1, A.data(), 0, B.data(), 0, 0, C.data(), 0), XK_SUCCESS);
    EXPECT_EQ(err(), "");

    std::vector<uint16_t> H(100);
    EXPECT_EQ(xk_gemm_bf16f32(XK_TRANS_N, XK_TRANS_N, 5, -9, 7, 1, H.data(), 0, H.data(), 0, 0, C.data(), 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("N=-9 must be >= 0"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_bf16bf16(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, 1, H.data(), 0, H.data(), 0, 0, nullptr, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("C=null"), std::string::npos) << err();

    std::vector<uint8_t> Au(100);
    std::vector<int8_t> Bs(100);
    std::vector<int32_t> Ci(100);
    EXPECT_EQ(xk_gemm_u8s8s32(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, Au.data(), 0, 300, Bs.data(), 0, 0, 0, Ci.data(), 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("a_zero_point=300 must be in [0, 255]"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_s8s8s32(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, Bs.data(), 0, 0, Bs.data(), 0, 0, 0.5f, Ci.data(), 0), XK_UNSUPPORTED);
    EXPECT_NE(err().find("beta=0.5 is not supported with c_type=s32"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_u8s8f32(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, 1, Au.data(), 0, 1, 0, Bs.data(), 0, nullptr, 0, 0, 0, C.data(), 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("b_scales=null"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_s8s8f32(XK_TRANS_N, XK_TRANS_N, 5, 9, 7, 1, Bs.data(), 0, 1, 0, Bs.data(), 2, A.data(), 1, 0, 0, C.data(), 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("ldb=2 must be >= N=9"), std::string::npos) << err();

    xk_gemm_desc d;
    xk_gemm_desc_init(&d);
    d.M = 5, d.N = 9, d.K = 7;
    xk_gemm_args a;
    xk_gemm_args_init(&a);
    a.A = A.data(), a.B = B.data(), a.C = C.data();
    EXPECT_EQ(xk_gemm(nullptr, &a), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("xk_gemm: desc=null"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm(&d, nullptr), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("xk_gemm: args=null"), std::string::npos) << err();
    xk_gemm_desc bad = d;
    bad.c_type = static_cast<xk_dtype>(7);  // in the enum's range, not a type
    EXPECT_EQ(xk_gemm(&bad, &a), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("c_type=7 is not a valid xk::DType"), std::string::npos) << err();
    bad = d;
    bad.act = static_cast<xk_activation>(7);
    EXPECT_EQ(xk_gemm(&bad, &a), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("epilogue.act=7"), std::string::npos) << err();

    xk_gemm_plan* plan = reinterpret_cast<xk_gemm_plan*>(&d);  // must be reset to NULL on failure
    bad = d;
    bad.b_type = XK_DTYPE_BF16;
    EXPECT_EQ(xk_gemm_plan_create(&bad, &plan), XK_UNSUPPORTED);
    EXPECT_EQ(plan, nullptr);
    EXPECT_NE(err().find("a_type=f32 b_type=bf16 c_type=f32"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_plan_create(&d, nullptr), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_gemm_plan_create(nullptr, &plan), XK_INVALID_ARGUMENT);
    ASSERT_EQ(xk_gemm_plan_create(&d, &plan), XK_SUCCESS) << err();
    EXPECT_EQ(xk_gemm_plan_run(nullptr, &a), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("xk_gemm_plan_run: plan=null"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_plan_run(plan, nullptr), XK_INVALID_ARGUMENT);
    xk_gemm_args na = a;
    na.A = nullptr;
    EXPECT_EQ(xk_gemm_plan_run(plan, &na), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("xk::GemmPlan::run: A=null"), std::string::npos) << err();

    xk_gemm_packed_b* packed = nullptr;
    EXPECT_EQ(xk_gemm_plan_pack_b(plan, nullptr, &packed), XK_INVALID_ARGUMENT);
    EXPECT_EQ(packed, nullptr);
    EXPECT_NE(err().find("xk::GemmPlan::pack_b: B=null"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_plan_pack_b(plan, B.data(), nullptr), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_gemm_plan_run_packed(plan, &a, nullptr), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("xk_gemm_plan_run_packed: packed=null"), std::string::npos) << err();
    // A packed B from a plan with another N is rejected.
    xk_gemm_desc d2 = d;
    d2.N = 8;
    xk_gemm_plan* plan2 = nullptr;
    ASSERT_EQ(xk_gemm_plan_create(&d2, &plan2), XK_SUCCESS) << err();
    ASSERT_EQ(xk_gemm_plan_pack_b(plan2, B.data(), &packed), XK_SUCCESS) << err();
    EXPECT_EQ(xk_gemm_plan_run_packed(plan, &a, packed), XK_INVALID_ARGUMENT);
    EXPECT_NE(err().find("was packed for another plan"), std::string::npos) << err();
    EXPECT_EQ(xk_gemm_plan_run_packed(plan2, &a, packed), XK_SUCCESS) << err();
    EXPECT_STREQ(xk_gemm_plan_impl_name(nullptr), "");
    xk_gemm_packed_b_destroy(packed);
    xk_gemm_plan_destroy(plan2);
    xk_gemm_plan_destroy(plan);
    xk_gemm_plan_destroy(nullptr);
    xk_gemm_packed_b_destroy(nullptr);
}

// Regression: an A row block of the blocked kernel clamped to 1024 rows (not a multiple of the
// 14- / 6-row panels) was packed in whole panels past the end of its buffer (heap corruption at
// 1024 / 2048 x N x 128). Rows of exactly one and two blocks, f32 and bf16, both B layouts; small
// integers, so every sum is exact; C's guard band untouched.
TEST(Gemm, RowBlocksOfTheClampPackWholePanels) {
    for_each_isa([&](Isa isa) {
        if (isa == Isa::scalar) return;
        for (int64_t M : {1024, 2048})
            for (DType dt : {DType::f32, DType::bf16})
                for (Trans tb : {Trans::N, Trans::T}) {
                    const int64_t N = 48, K = 128;
                    GemmDesc d;
                    d.M = M, d.N = N, d.K = K, d.trans_b = tb;
                    d.a_type = d.b_type = dt;
                    const size_t es = dt == DType::f32 ? 4 : 2;
                    std::vector<unsigned char> A(static_cast<size_t>(M * K) * es), B(static_cast<size_t>(K * N) * es);
                    auto put = [&](std::vector<unsigned char>& v, size_t i, float x) {
                        if (dt == DType::f32) std::memcpy(&v[i * 4], &x, 4);
                        else { const bf16 h(x); std::memcpy(&v[i * 2], &h, 2); }
                    };
                    auto a_at = [](int64_t m, int64_t k) { return float((m * 7 + k * 3) % 5) - 2.0f; };
                    auto b_at = [](int64_t k, int64_t n) { return float((k * 5 + n) % 7) - 3.0f; };
                    for (int64_t m = 0; m < M; ++m)
                        for (int64_t k = 0; k < K; ++k) put(A, static_cast<size_t>(m * K + k), a_at(m, k));
                    for (int64_t k = 0; k < K; ++k)
                        for (int64_t n = 0; n < N; ++n)
                            put(B, static_cast<size_t>(tb == Trans::N ? k * N + n : n * K + k), b_at(k, n));
                    std::vector<float> C(static_cast<size_t>(M * N + 64), -7.0f);
                    GemmArgs g;
                    g.A = A.data(), g.B = B.data(), g.C = C.data();
                    set_num_threads(1);
                    gemm(d, g);
                    set_num_threads(0);
                    int bad = 0;
                    for (int64_t m = 0; m < M && bad < 3; ++m)
                        for (int64_t n = 0; n < N; ++n) {
                            double want = 0;
                            for (int64_t k = 0; k < K; ++k) want += double(a_at(m, k)) * b_at(k, n);
                            if (C[static_cast<size_t>(m * N + n)] != float(want) && bad++ < 3)
                                ADD_FAILURE() << "M " << M << " " << dtype_name(dt) << " C[" << m << "," << n << "] "
                                              << C[static_cast<size_t>(m * N + n)] << " want " << want;
                        }
                    for (size_t i = static_cast<size_t>(M * N); i < C.size(); ++i) ASSERT_EQ(C[i], -7.0f) << "guard " << i;
                }
    });
}
