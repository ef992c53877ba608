// The fp32 GEMM test problem shared by test_gemm_jit.cpp and test_gemm_onednn.cpp: a case (shape,
// transposes, leading-dimension padding, alpha / beta, epilogue, misalignment), its operands with
// NaN in every padding element (and in all of C when beta = 0, which must never be read), and a
// double-precision oracle with a per-element tolerance (u = 2^-24; the bound holds for any
// summation order):
//   e0 = 2 (K + 5) u |alpha| sum_k |a_mk b_kn| + 2u (|beta C| + |bias|)
//   |got - want| <= L e0 + act_ulps u (|x| + |act(x)|) [gelu, silu] + u (|act(x)| + |res|)
// with x the value entering the activation and L = 1.2 its slope bound (gelu, silu; 1 otherwise).
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_util.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"

namespace xk::test::gemm_f32 {

constexpr double kU = 1.0 / 16777216.0;
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

struct Case {
    int64_t M = 1, N = 1, K = 1;
    Trans ta = Trans::N, tb = Trans::N;
    int64_t pad_a = 0, pad_b = 0, pad_c = 0, pad_r = 0;  // leading dimension above the minimum
    float alpha = 1, beta = 0;
    bool bias = false;
    Activation act = Activation::none;
    int res = 0;  // 0 none, 1 f32, 2 bf16
    size_t misalign = 0;  // floats
    uint64_t seed = 1;

    GemmDesc desc() const {
        GemmDesc d;
        d.M = M, d.N = N, d.K = K, d.trans_a = ta, d.trans_b = tb;
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
        os << "M=" << M << " N=" << N << " K=" << K << " " << trans_name(ta) << trans_name(tb) << " pads=" << pad_a << "/"
           << pad_b << "/" << pad_c << "/" << pad_r << " alpha=" << alpha << " beta=" << beta << " bias=" << bias
           << " act=" << activation_name(act) << " res=" << res << " misalign=" << misalign << " threads=" << get_num_threads();
        return os.str();
    }
};

// Operands with NaN in every padding element, and what the oracle expects.
struct Problem {
    Case c;
    GemmDesc d;
    int64_t a_rows, a_cols, b_rows, b_cols;
    test::Buffer<float> A, B, C, bias, Rf;
    test::Buffer<bf16> Rh;
    std::vector<float> c0;  // C's buffer before the run
    std::vector<double> want, tol;
    double act_ulps = 4;  // allowance of a smooth activation, in ulps of |x| + |act(x)|

    explicit Problem(const Case& cs, double act_ulps_ = 4) : c(cs), d(cs.desc()), act_ulps(act_ulps_) {
        std::mt19937_64 g(c.seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        a_rows = c.ta == Trans::N ? c.M : c.K, a_cols = c.ta == Trans::N ? c.K : c.M;
        b_rows = c.tb == Trans::N ? c.K : c.N, b_cols = c.tb == Trans::N ? c.N : c.K;
        auto fill = [&](test::Buffer<float>& buf, int64_t rows, int64_t cols, int64_t ld, size_t mis, bool random) {
            buf.resize(static_cast<size_t>(rows * ld + 16), mis * 4);
            for (size_t i = 0; i < buf.size(); ++i) buf[i] = kNaN;
            if (random)
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t k = 0; k < cols; ++k) buf[r * ld + k] = u(g);
        };
        fill(A, a_rows, a_cols, d.lda, c.misalign, true);
        fill(B, b_rows, b_cols, d.ldb, (c.misalign + 1) % 8, true);
        fill(C, c.M, c.N, d.ldc, (c.misalign + 2) % 8, c.beta != 0.0f);  // beta = 0: C holds NaN
        if (c.bias) fill(bias, 1, c.N, c.N, (c.misalign + 3) % 8, true);
        if (c.res == 1) fill(Rf, c.M, c.N, d.ld_residual, (c.misalign + 5) % 8, true);
        if (c.res == 2) {
            Rh.resize(static_cast<size_t>(c.M * d.ld_residual + 16), 2 * ((c.misalign + 3) % 8));
            for (size_t i = 0; i < Rh.size(); ++i) Rh[i] = bf16(kNaN);
            for (int64_t m = 0; m < c.M; ++m)
                for (int64_t n = 0; n < c.N; ++n) Rh[m * d.ld_residual + n] = bf16(u(g));
        }
        c0.assign(C.begin(), C.end());
        oracle();
    }
    double a(int64_t m, int64_t k) const { return c.ta == Trans::N ? A[m * d.lda + k] : A[k * d.lda + m]; }
    double b(int64_t k, int64_t n) const { return c.tb == Trans::N ? B[k * d.ldb + n] : B[n * d.ldb + k]; }
    double r(int64_t m, int64_t n) const {
        return c.res == 1 ? Rf[m * d.ld_residual + n] : Rh[m * d.ld_residual + n].to_float();
    }
    void oracle() {
        want.assign(static_cast<size_t>(c.M * c.N), 0.0);
        tol.assign(want.size(), 0.0);
        const bool smooth = c.act != Activation::none && c.act != Activation::relu;
        for (int64_t m = 0; m < c.M; ++m) {
            for (int64_t n = 0; n < c.N; ++n) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < c.K; ++k) {
                    const double p = a(m, k) * b(k, n);
                    acc += p, mag += std::fabs(p);
                }
                double x = c.alpha * acc, e = 2 * (c.K + 5) * kU * std::fabs(c.alpha) * mag;
                if (c.beta != 0.0f) {
                    const double bc = double(c.beta) * C[m * d.ldc + n];
                    x += bc, e += 2 * kU * std::fabs(bc);
                }
                if (c.bias) x += bias[n], e += 2 * kU * std::fabs(bias[n]);
                double v = act_d(c.act, x);
                e = (smooth ? 1.2 : 1.0) * e + (smooth ? act_ulps * kU * (std::fabs(x) + std::fabs(v)) : 0.0);
                if (c.res) e += kU * (std::fabs(v) + std::fabs(r(m, n))), v += r(m, n);
                want[m * c.N + n] = v;
                tol[m * c.N + n] = e + 1e-30;
            }
        }
    }
    GemmArgs args() const {
        GemmArgs g;
        g.A = A.data(), g.B = B.data(), g.C = const_cast<float*>(C.data());
        g.bias = c.bias ? bias.data() : nullptr;
        g.residual = c.res == 1 ? static_cast<const void*>(Rf.data()) : c.res == 2 ? static_cast<const void*>(Rh.data()) : nullptr;
        return g;
    }
    void reset_c() { std::copy(c0.begin(), c0.end(), C.begin()); }
    std::vector<float> c_copy() const { return {C.data(), C.data() + C.size()}; }

    ::testing::AssertionResult check(const std::string& what) const {
        int bad = 0;
        std::ostringstream msg;
        for (int64_t m = 0; m < c.M; ++m)
            for (int64_t n = 0; n < c.N; ++n) {
                const double got = C[m * d.ldc + n], w = want[m * c.N + n];
                const bool ok = std::isnan(w) ? std::isnan(got) : std::fabs(got - w) <= tol[m * c.N + n];
                if (!ok && bad++ < 4)
                    msg << "\n  C[" << m << "," << n << "] got " << got << " want " << w << " tol " << tol[m * c.N + n];
            }
        for (size_t i = 0; i < C.size(); ++i) {
            const int64_t row = static_cast<int64_t>(i) / d.ldc, col = static_cast<int64_t>(i) % d.ldc;
            if (row < c.M && col < c.N) continue;
            const float x = C[i], y = c0[i];
            if (std::memcmp(&x, &y, 4) != 0) {
                if (bad++ < 4) msg << "\n  C buffer element " << i << " outside the matrix changed";
                break;
            }
        }
        if (bad == 0) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << what << ": " << bad << " bad elements, " << c.str() << msg.str();
    }
};

const Activation kActs[] = {Activation::none, Activation::relu, Activation::gelu_erf, Activation::gelu_tanh,
                            Activation::silu};

}  // namespace xk::test::gemm_f32
