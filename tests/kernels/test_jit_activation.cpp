// The vectorised activation injector (src/kernels/common/jit_activation.hpp), per ISA: a small
// JIT harness applies one function to an array; results are compared with double-precision
// std:: definitions over a dense range (incl. large |x|, the exp over/underflow edges, denormals,
// +-0, +-inf, NaN) and with the scalar reference of src/common/activation.hpp. The harness also
// checks that the injector leaves every vector register outside its scratch list untouched.
//
// Accuracy asserted (u = 2^-24), per function f with exact value w = f(x) in double, on top of
// an absolute 2^-120 (no denormal results): relu exact; exp 2u |w| on [-86.9, 88.72] (+inf above
// ln FLT_MAX, 0 below ln FLT_MIN, |err| < 2^-126 between); sigmoid, erf, silu 4u |w|; tanh 5u |w|;
// gelu_tanh (4 + 3|2y|) u |w| (exp's condition number where gelu is tiny); gelu_erf 4u |w| + 5u |x|
// (its erf has an absolute error). The measured maxima are printed ([accuracy] lines) and quoted
// in jit_activation.hpp.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/activation.hpp"
#include "common/test_util.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_activation.hpp"

using namespace xk;
using detail::JitActivation;
using detail::JitFn;

namespace {

constexpr double kU = 1.0 / 16777216.0;
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// void fn(const float* in, float* out, int64_t nvec, float* guard /* 32 x 16 floats, in/out */)
using HarnessFn = void (*)(const float*, float*, int64_t, float*);

class Harness : public detail::JitGenerator {
public:
    // lanes > 1: that many registers per iteration through apply_n (interleaved emission).
    Harness(Isa isa, JitFn f, int lanes = 1) : JitGenerator(isa), lanes_(lanes) {
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        nregs_ = z ? 32 : 16;
        vbytes_ = z ? 64 : 32;
        auto V = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        // Scattered register choice: the values, then their scratch lists (upper zmm on AVX-512).
        const std::vector<int> xs = z ? std::vector<int>{20, 3, 11} : std::vector<int>{3, 0, 10};
        const std::vector<std::vector<int>> ss =
            z ? std::vector<std::vector<int>>{{5, 17, 31, 8}, {1, 2, 25, 26}, {12, 13, 14, 15}}
              : std::vector<std::vector<int>>{{7, 9, 15, 12}, {1, 2, 4, 5}, {6, 8, 11, 13}};
        const size_t ns = static_cast<size_t>(JitActivation::scratch_regs(f));
        std::vector<Xmm> xv;
        std::vector<std::vector<Xmm>> sv;
        for (int l = 0; l < lanes; ++l) {
            x_.push_back(xs[l]);
            xv.push_back(V(xs[l]));
            sv.emplace_back();
            for (size_t i = 0; i < ns; ++i) scratch_.push_back(ss[l][i]), sv.back().push_back(V(ss[l][i]));
        }
        const Reg64 in = abi_param1, out = abi_param2, n = abi_param3, guard = abi_param4, tbl = r10;
        preamble();
        for (int i = 0; i < nregs_; ++i)
            if (guarded(i)) vmovups(V(i), ptr[guard + i * 64]);
        mov(tbl, reinterpret_cast<uintptr_t>(JitActivation::table()));
        JitActivation act(*this, isa);
        Label loop, done;
        test(n, n);
        jz(done);
        L(loop);
        for (int l = 0; l < lanes; ++l) vmovups(xv[l], ptr[in + l * vbytes_]);
        if (lanes == 1)
            act.apply(f, xv[0], sv[0], tbl);
        else
            act.apply_n(f, xv, sv, tbl);
        for (int l = 0; l < lanes; ++l) vmovups(ptr[out + l * vbytes_], xv[l]);
        add(in, vbytes_ * lanes);
        add(out, vbytes_ * lanes);
        dec(n);
        jnz(loop);
        L(done);
        for (int i = 0; i < nregs_; ++i)
            if (guarded(i)) vmovups(ptr[guard + i * 64], V(i));
        postamble();
        fn_ = finalize<HarnessFn>();
    }
    bool guarded(int i) const {
        for (int x : x_)
            if (x == i) return false;
        for (int s : scratch_)
            if (s == i) return false;
        return true;
    }
    // Applies f to in (any size); checks the guarded registers.
    std::vector<float> run(const std::vector<float>& in) const {
        const size_t vl = static_cast<size_t>(vbytes_ / 4) * static_cast<size_t>(lanes_);
        const size_t nv = (in.size() + vl - 1) / vl;
        std::vector<float> a(nv * vl, 0.0f), b(nv * vl, 0.0f), guard(32 * 16);
        std::copy(in.begin(), in.end(), a.begin());
        for (size_t i = 0; i < guard.size(); ++i) guard[i] = static_cast<float>(i) * 0.5f - 77.0f;
        const std::vector<float> before = guard;
        fn_(a.data(), b.data(), static_cast<int64_t>(nv), guard.data());
        for (int r = 0; r < nregs_; ++r) {
            if (!guarded(r)) continue;
            for (int l = 0; l < vbytes_ / 4; ++l)
                EXPECT_EQ(guard[r * 16 + l], before[r * 16 + l]) << "register " << r << " lane " << l << " was clobbered";
        }
        b.resize(in.size());
        return b;
    }

private:
    HarnessFn fn_ = nullptr;
    int lanes_ = 1, nregs_ = 16, vbytes_ = 32;
    std::vector<int> x_, scratch_;
};

double exact(JitFn f, double x) {
    switch (f) {
        case JitFn::relu: return x > 0 ? x : 0;
        case JitFn::exp: return std::exp(x);
        case JitFn::sigmoid: return 1.0 / (1.0 + std::exp(-x));
        case JitFn::tanh: return std::tanh(x);
        case JitFn::erf: return std::erf(x);
        case JitFn::silu: return x / (1.0 + std::exp(-x));
        case JitFn::gelu_tanh: {  // 0.5 x (1 + tanh y) = x / (1 + exp(-2y)), without cancellation
            const double y = std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
            return x / (1.0 + std::exp(-2.0 * y));
        }
        case JitFn::gelu_erf: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    }
    return 0;
}

// Inputs: a dense grid over [-30, 30], a log-spaced sweep of both signs up to FLT_MAX, denormals,
// and the exp edges.
std::vector<float> inputs() {
    std::vector<float> v;
    const int n = 1 << 21;
    for (int i = 0; i <= n; ++i) v.push_back(static_cast<float>(-30.0 + 60.0 * i / n));
    for (double e = -45; e <= 38.5; e += 0.01) {
        v.push_back(static_cast<float>(std::pow(10.0, e)));
        v.push_back(static_cast<float>(-std::pow(10.0, e)));
    }
    for (float x : {0.0f, -0.0f, 1e-45f, -1e-45f, 1.17549435e-38f, -1.17549435e-38f, 88.7228f, 88.7229f, 88.75f,
                    88.76f, 88.8f, 89.0f, -86.9f, -87.0f, -87.33f, -87.34f, -88.0f, -103.0f, -104.0f, 0.5f, -0.5f,
                    0.49999997f, -0.49999997f, 9.0f, -9.0f, 1e20f, -1e20f, 3.4e38f, -3.4e38f})
        v.push_back(x);
    return v;
}

// The tolerance of f at x (w = exact value). kTiny: results below FLT_MIN are not produced
// exactly (no denormals; the exp clamp leaves at most a few FLT_MIN where the true value is tiny).
const double kTiny = std::ldexp(1.0, -120);
double tol(JitFn f, double x, double w) {
    const double aw = std::fabs(w);
    switch (f) {
        case JitFn::relu: return 0;
        case JitFn::exp:
            if (x >= -86.9 && x <= 88.72) return 2 * kU * aw;
            return std::ldexp(1.0, -126);
        case JitFn::sigmoid:
        case JitFn::erf:
        case JitFn::silu: return 4 * kU * aw + kTiny;
        case JitFn::tanh: return 5 * kU * aw + kTiny;
        // exp(-2y) and exp(-x^2/2) have a relative condition number of their argument's size: for
        // x << 0, where gelu is tiny, the argument's rounding error shows relatively.
        case JitFn::gelu_tanh: {
            const double two_y = 2 * std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
            return (4 + 3 * std::fabs(two_y)) * kU * aw + kTiny;
        }
        // erf from a rational with absolute error: relative to |x|, not to gelu(x) (which is tiny
        // for x << 0, where 1 + erf cancels).
        case JitFn::gelu_erf: return 4 * kU * aw + 5 * kU * std::fabs(x) + kTiny;
    }
    return 0;
}

struct Stats {
    double max_rel = 0, max_rel_x = 0, max_rel8 = 0, max_abs_over_x = 0;
};

void check_function(Isa isa, JitFn f) {
    SCOPED_TRACE(std::string(isa_name(isa)) + " " + detail::jit_fn_name(f));
    const Harness h(isa, f);
    const std::vector<float> in = inputs();
    const std::vector<float> out = h.run(in);
    Stats st;
    int bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
        const double x = in[i], g = out[i];
        const double w = exact(f, x);
        const float wf = static_cast<float>(w);  // the exact value, rounded (inf where it overflows)
        bool ok;
        if (std::isinf(wf) || (f == JitFn::exp && x > 88.7228)) {
            ok = g == double(wf) || (f == JitFn::exp && std::isinf(g) && g > 0);
        } else if (f == JitFn::exp && x < -87.3365) {
            ok = g == 0;
        } else {
            const double e = std::fabs(g - w);
            ok = e <= tol(f, x, w);
            if (std::fabs(w) > 1e-30 && e / std::fabs(w) > st.max_rel) st.max_rel = e / std::fabs(w), st.max_rel_x = x;
            if (std::fabs(w) > 1e-30 && std::fabs(x) <= 8) st.max_rel8 = std::max(st.max_rel8, e / std::fabs(w));
            if (std::fabs(x) > 1e-30 && e / std::fabs(x) > st.max_abs_over_x) st.max_abs_over_x = e / std::fabs(x);
        }
        if (!ok && bad++ < 8)
            ADD_FAILURE() << "x=" << x << " (" << std::hexfloat << x << std::defaultfloat << ") got " << g << " want " << w
                          << " |err|=" << std::fabs(g - w) << " tol " << tol(f, x, w);
    }
    EXPECT_EQ(bad, 0);
    std::printf("[accuracy] %-7s %-9s max rel err %.2f u (at x=%.7g), %.2f u for |x| <= 8", isa_name(isa),
                detail::jit_fn_name(f), st.max_rel / kU, st.max_rel_x, st.max_rel8 / kU);
    if (f != JitFn::exp && f != JitFn::sigmoid) std::printf(", max |err|/|x| %.2f u", st.max_abs_over_x / kU);
    std::printf("\n");

    // Special values.
    const std::vector<float> sp = {kNaN, -kNaN, kInf, -kInf};
    const std::vector<float> so = h.run(sp);
    for (size_t i = 0; i < sp.size(); ++i) {
        const double want = exact(f, sp[i]);
        if (std::isnan(sp[i])) {
            if (f == JitFn::relu)
                EXPECT_EQ(so[i], 0.0f) << "relu(NaN) must be 0 like the scalar reference";
            else
                EXPECT_TRUE(std::isnan(so[i])) << detail::jit_fn_name(f) << "(NaN) = " << so[i];
        } else if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(so[i])) << detail::jit_fn_name(f) << "(" << sp[i] << ") = " << so[i] << ", want NaN";
        } else {
            EXPECT_EQ(double(so[i]), want) << detail::jit_fn_name(f) << "(" << sp[i] << ")";
        }
    }
}

std::vector<Isa> jit_isas() {
    std::vector<Isa> v;
    for (Isa i : available_isas())
        if (i == Isa::avx2 || i == Isa::avx512) v.push_back(i);  // the two register widths
    return v;
}

const JitFn kAll[] = {JitFn::relu, JitFn::exp,  JitFn::sigmoid,  JitFn::tanh,
                      JitFn::erf,  JitFn::silu, JitFn::gelu_tanh, JitFn::gelu_erf};

}  // namespace

TEST(JitActivation, AccuracyAndSpecialsPerIsa) {
    if (jit_isas().empty()) GTEST_SKIP() << "no AVX2 on this machine";
    for (Isa isa : jit_isas()) {
        xk::test::exercised_isas().insert(isa);
        for (JitFn f : kAll) check_function(isa, f);
    }
}

// The four activations against the scalar reference the GEMM epilogues are specified by
// (src/common/activation.hpp): same NaN / inf behaviour, values within the stated bounds.
TEST(JitActivation, MatchesTheScalarReference) {
    if (jit_isas().empty()) GTEST_SKIP() << "no AVX2 on this machine";
    const Activation acts[] = {Activation::relu, Activation::gelu_erf, Activation::gelu_tanh, Activation::silu};
    std::vector<float> in;
    for (int i = -20000; i <= 20000; ++i) in.push_back(static_cast<float>(i) * 1e-3f);
    for (float x : {kInf, -kInf, kNaN, 1e30f, -1e30f, 0.0f, -0.0f}) in.push_back(x);
    for (Isa isa : jit_isas()) {
        for (Activation a : acts) {
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + activation_name(a));
            const Harness h(isa, detail::jit_fn(a));
            const std::vector<float> out = h.run(in);
            int bad = 0;
            for (size_t i = 0; i < in.size(); ++i) {
                const float r = detail::apply_activation(a, in[i]);
                // The reference's own float evaluation loses up to ~u |x| to cancellation (1 + tanh,
                // 1 + erf for x < 0): the GEMM tests' bound 4u (|x| + |act(x)|).
                const bool ok = (std::isnan(r) && std::isnan(out[i])) || r == out[i] ||
                                std::fabs(double(r) - out[i]) <= 4 * kU * (std::fabs(double(r)) + std::fabs(in[i]));
                if (!ok && bad++ < 5) ADD_FAILURE() << "x=" << in[i] << " jit " << out[i] << " reference " << r;
            }
            EXPECT_EQ(bad, 0);
        }
    }
}

// Every function also encodes for the ISAs this machine cannot run (generation needs no CPU
// support): catches operand combinations xbyak rejects before a remote machine runs them.
TEST(JitActivation, GeneratesForEveryWidth) {
    for (Isa isa : {Isa::avx2, Isa::avx512})
        for (JitFn f : kAll)
            for (int lanes : {1, 3}) EXPECT_NO_THROW(Harness(isa, f, lanes)) << isa_name(isa) << " " << detail::jit_fn_name(f);
}

// apply_n (several registers, interleaved) gives the same bits as apply, lane by lane.
TEST(JitActivation, InterleavedMatchesSingle) {
    if (jit_isas().empty()) GTEST_SKIP() << "no AVX2 on this machine";
    std::vector<float> in;
    for (int i = -3000; i < 3000; ++i) in.push_back(static_cast<float>(i) * 0.0123f);
    for (Isa isa : jit_isas()) {
        for (JitFn f : kAll) {
            SCOPED_TRACE(std::string(isa_name(isa)) + " " + detail::jit_fn_name(f));
            const std::vector<float> one = Harness(isa, f, 1).run(in), three = Harness(isa, f, 3).run(in);
            EXPECT_EQ(0, std::memcmp(one.data(), three.data(), one.size() * 4));
        }
    }
}

TEST(JitActivation, ScratchCountsAndNames) {
    EXPECT_EQ(JitActivation::scratch_regs(JitFn::relu), 0);
    for (JitFn f : kAll) EXPECT_LE(JitActivation::scratch_regs(f), JitActivation::kMaxScratch);
    EXPECT_EQ(detail::jit_fn(Activation::silu), JitFn::silu);
    EXPECT_STREQ(detail::jit_fn_name(JitFn::gelu_erf), "gelu_erf");
    EXPECT_THROW(detail::jit_fn(Activation::none), Error);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(JitActivation::table()) % 64, 0u);
}
