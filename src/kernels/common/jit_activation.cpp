// Vectorised activations for xbyak generators (see jit_activation.hpp for the definitions and
// their accuracy).
#include "kernels/common/jit_activation.hpp"

#include <array>
#include <cstring>
#include <functional>

#include "xk/error.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

// Table entries: 16 copies of one 32-bit value (64 bytes), so that a ymm or zmm memory operand
// reads a full vector.
enum Const : int {
    kZero,
    kOne,
    kMinusOne,
    kHalf,
    kSign,     // 0x80000000
    kAbs,      // 0x7fffffff
    kInvSqrt2,
    // exp
    kExpHi,      // clamp: above ln(FLT_MAX) the scale 2^(n-1) * 2 overflows to +inf
    kExpLo,      // clamp: keeps 2^(n-1) a normal number (n >= -125)
    kExpFtz,     // below: the true result is under FLT_MIN (exp() flushes it to 0)
    kExpLoErfc,  // erfc's exp clamp: keeps t exp(.) normal (no denormal arithmetic, which is slow)
    kExpMagic,   // 1.5 * 2^23 + 126: rounds x log2e to an integer n and holds n + 126 in the low bits
    kLog2e,
    kLn2Hi,
    kLn2Lo,
    kExpP5, kExpP4, kExpP3, kExpP2, kExpP1, kExpP0,
    // erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2): P's coefficients, highest first
    kErfc9, kErfc8, kErfc7, kErfc6, kErfc5, kErfc4, kErfc3, kErfc2, kErfc1, kErfc0,
    // erf Taylor series in x^2 (times x), highest first
    kErfT9, kErfT8, kErfT7, kErfT6, kErfT5, kErfT4, kErfT3, kErfT2, kErfT1, kErfT0,
    kErfSplit,  // |x| below: the Taylor branch
    // gelu_tanh: -2y = x (A + B x^2)
    kGeluTanhA, kGeluTanhB,
    // gelu_erf: erf(z) = z A(z^2) / B(z^2) on z clamped to [-4, 4] (Eigen's coefficients)
    kErfRatHi, kErfRatLo,
    kGeluErfZero,  // -4 sqrt2: gelu_erf is 0 (times x) at and below it
    kErfA13, kErfA11, kErfA9, kErfA7, kErfA5, kErfA3, kErfA1,
    kErfB8, kErfB6, kErfB4, kErfB2, kErfB0,
    // tanh rational
    kTanhHi, kTanhLo,
    kTanhA13, kTanhA11, kTanhA9, kTanhA7, kTanhA5, kTanhA3, kTanhA1,
    kTanhB6, kTanhB4, kTanhB2, kTanhB0,
    kCount
};

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

struct alignas(64) Table {
    uint32_t v[kCount][16];
};

const Table& the_table() {
    static const Table t = [] {
        Table t{};
        auto set = [&](int i, uint32_t b) {
            for (auto& e : t.v[i]) e = b;
        };
        auto setf = [&](int i, float f) { set(i, bits(f)); };
        setf(kZero, 0.0f);
        setf(kOne, 1.0f);
        setf(kMinusOne, -1.0f);
        setf(kHalf, 0.5f);
        set(kSign, 0x80000000u);
        set(kAbs, 0x7fffffffu);
        setf(kInvSqrt2, 0.70710678118654752f);
        setf(kExpHi, 88.76f);             // round(88.76 log2e) = 128 -> scale field 254
        setf(kExpLo, -86.9f);             // round(-86.9 log2e) = -125 -> scale field 1
        setf(kExpFtz, -87.33654475f);     // ln(FLT_MIN)
        setf(kExpLoErfc, -80.0f);
        setf(kExpMagic, 12582912.0f + 126.0f);
        setf(kLog2e, 1.44269504088896341f);
        setf(kLn2Hi, 0.693359375f);       // Cody-Waite split of ln 2
        setf(kLn2Lo, -2.12194440e-4f);
        // Cephes expf: exp(r) = 1 + r + r^2 (P0 + r (P1 + ... )), evaluated in Horner form
        setf(kExpP5, 1.9875691500e-4f);
        setf(kExpP4, 1.3981999507e-3f);
        setf(kExpP3, 8.3334519073e-3f);
        setf(kExpP2, 4.1665795894e-2f);
        setf(kExpP1, 1.6666665459e-1f);
        setf(kExpP0, 5.0000001201e-1f);
        // Numerical Recipes erfcc (fractional error < 1.2e-7 for z >= 0)
        const float erfc[10] = {-1.26551223f, 1.00002368f, 0.37409196f, 0.09678418f, -0.18628806f,
                                0.27886807f,  -1.13520398f, 1.48851587f, -0.82215223f, 0.17087277f};
        for (int i = 0; i < 10; ++i) setf(kErfc0 - i, erfc[i]);
        // erf(x) = 2/sqrt(pi) sum (-1)^n x^(2n+1) / (n! (2n+1)), n = 0..9 (|x| < 0.75: the first
        // omitted term is below 2^-30 erf(x))
        const double two_over_sqrt_pi = 1.12837916709551257;
        double fact = 1;
        for (int n = 0; n <= 9; ++n) {
            if (n > 0) fact *= n;
            const double cn = (n % 2 ? -1.0 : 1.0) * two_over_sqrt_pi / (fact * (2 * n + 1));
            setf(kErfT0 - n, static_cast<float>(cn));
        }
        const double k = 2.0 * 0.79788456080286536;  // 2 sqrt(2/pi)
        setf(kGeluTanhA, static_cast<float>(-k));
        setf(kGeluTanhB, static_cast<float>(-k * 0.044715));
        setf(kErfSplit, 0.75f);
        setf(kErfRatHi, 4.0f);
        setf(kErfRatLo, -4.0f);
        setf(kGeluErfZero, -5.65685424949238f);
        setf(kErfA13, -2.72614225801306e-10f);
        setf(kErfA11, 2.77068142495902e-08f);
        setf(kErfA9, -2.10102402082508e-06f);
        setf(kErfA7, -5.69250639462346e-05f);
        setf(kErfA5, -7.34990630326855e-04f);
        setf(kErfA3, -2.95459980854025e-03f);
        setf(kErfA1, -1.60960333262415e-02f);
        setf(kErfB8, -1.45660718464996e-05f);
        setf(kErfB6, -2.13374055278905e-04f);
        setf(kErfB4, -1.68282697438203e-03f);
        setf(kErfB2, -7.37332916720468e-03f);
        setf(kErfB0, -1.42647390514189e-02f);
        setf(kTanhHi, 9.0f);
        setf(kTanhLo, -9.0f);
        setf(kTanhA13, -2.76076847742355e-16f);
        setf(kTanhA11, 2.00018790482477e-13f);
        setf(kTanhA9, -8.60467152213735e-11f);
        setf(kTanhA7, 5.12229709037114e-08f);
        setf(kTanhA5, 1.48572235717979e-05f);
        setf(kTanhA3, 6.37261928875436e-04f);
        setf(kTanhA1, 4.89352455891786e-03f);
        setf(kTanhB6, 1.19825839466702e-06f);
        setf(kTanhB4, 1.18534705686654e-04f);
        setf(kTanhB2, 2.26843463243900e-03f);
        setf(kTanhB0, 4.89352518554385e-03f);
        return t;
    }();
    return t;
}


}  // namespace

// Records the instructions of one lane as steps, so that several lanes (independent registers)
// can be emitted interleaved step by step: the activations are long dependency chains, and
// interleaving gives the out-of-order core independent work.
class JitActRecorder {
public:
    explicit JitActRecorder(CodeGenerator& g) : g_(g) {}
    std::vector<std::function<void()>> steps;
#define XK_REC(op) \
    template <class... A> \
    void op(const A&... a) { \
        CodeGenerator* g = &g_; \
        steps.push_back([=] { g->op(a...); }); \
    }
    XK_REC(vmovups)
    XK_REC(vmovaps)
    XK_REC(vminps)
    XK_REC(vmaxps)
    XK_REC(vaddps)
    XK_REC(vsubps)
    XK_REC(vmulps)
    XK_REC(vdivps)
    XK_REC(vrcpps)
    XK_REC(vrcp14ps)
    XK_REC(vfmadd231ps)
    XK_REC(vfmadd213ps)
    XK_REC(vfnmadd231ps)
    XK_REC(vfnmadd213ps)
    XK_REC(vpslld)
    XK_REC(vandps)
    XK_REC(vandnps)
    XK_REC(vorps)
    XK_REC(vxorps)
    XK_REC(vcmpps)
    XK_REC(vblendvps)
#undef XK_REC
    // Several instructions kept together (they share an opmask).
    void group(std::function<void(CodeGenerator&)> f) {
        CodeGenerator* g = &g_;
        steps.push_back([=] { f(*g); });
    }

private:
    CodeGenerator& g_;
};


const char* jit_fn_name(JitFn f) noexcept {
    switch (f) {
        case JitFn::relu: return "relu";
        case JitFn::gelu_erf: return "gelu_erf";
        case JitFn::gelu_tanh: return "gelu_tanh";
        case JitFn::silu: return "silu";
        case JitFn::exp: return "exp";
        case JitFn::sigmoid: return "sigmoid";
        case JitFn::tanh: return "tanh";
        case JitFn::erf: return "erf";
    }
    return "?";
}

JitFn jit_fn(Activation a) {
    switch (a) {
        case Activation::relu: return JitFn::relu;
        case Activation::gelu_erf: return JitFn::gelu_erf;
        case Activation::gelu_tanh: return JitFn::gelu_tanh;
        case Activation::silu: return JitFn::silu;
        case Activation::none: break;
    }
    throw Error(Status::invalid_argument,
                std::string("jit_fn: no injector function for activation ") + activation_name(a));
}

JitActivation::JitActivation(CodeGenerator& g, Isa isa, Opmask kmask)
    : g_(g), zmm_(isa >= Isa::avx512), k_(kmask) {
    if (isa < Isa::avx2) throw Error(Status::invalid_argument, "JitActivation: needs avx2 or above");
}

int JitActivation::scratch_regs(JitFn f) noexcept {
    switch (f) {
        case JitFn::relu: return 0;
        case JitFn::sigmoid: return 2;
        case JitFn::exp:
        case JitFn::gelu_tanh:
        case JitFn::gelu_erf:
        case JitFn::silu:
        case JitFn::tanh: return 3;
        case JitFn::erf: return 4;
    }
    return kMaxScratch;
}

const void* JitActivation::table() noexcept { return &the_table(); }

Address JitActivation::c(int idx) const { return g_.ptr[tbl_ + idx * 64]; }

// x = exp(x), clamped to [-86.9, 88.76] (so below -86.9 the result stays ~1.8e-38; above
// ln(FLT_MAX) it overflows to +inf). NaN stays NaN: the clamps take the constant as the first
// operand, and min / max return the second operand when one is NaN.
void JitActivation::exp_core(JitActRecorder& g, const Xmm& x, const Xmm& s0, const Xmm& s1, int lo) const {
    g.vmovups(s0, c(kExpHi));
    g.vminps(x, s0, x);
    g.vmovups(s0, c(lo < 0 ? kExpLo : lo));
    g.vmaxps(x, s0, x);
    g.vmovups(s0, c(kExpMagic));
    g.vfmadd231ps(s0, x, c(kLog2e));  // s0 = magic + n (rounded to nearest)
    g.vsubps(s1, s0, c(kExpMagic));   // n
    g.vfnmadd231ps(x, s1, c(kLn2Hi));  // r = x - n ln2 (exact first part)
    g.vfnmadd231ps(x, s1, c(kLn2Lo));
    g.vpslld(s0, s0, 23);  // bits of 2^(n-1): the low bits of s0 hold n + 126
    g.vmovups(s1, c(kExpP5));
    for (int i = kExpP4; i <= kExpP0; ++i) g.vfmadd213ps(s1, x, c(i));
    g.vfmadd213ps(s1, x, c(kOne));
    g.vfmadd213ps(s1, x, c(kOne));
    g.vmulps(x, s1, s0);
    g.vaddps(x, x, x);
}

// q = erfc(z) for z >= 0 (z is consumed: it is q's exp scratch); t is scratch. The exp is clamped
// at e^-80, so q stays a normal number (for z < ~3000) where the true value underflows.
void JitActivation::erfc_core(JitActRecorder& g, const Xmm& z, const Xmm& t, const Xmm& q, const Xmm& s0) const {
    g.vmovups(t, c(kHalf));
    g.vfmadd213ps(t, z, c(kOne));  // 1 + z/2
    g.vmovups(q, c(kOne));
    g.vdivps(t, q, t);  // t = 1 / (1 + z/2)
    g.vmovups(q, c(kErfc9));
    for (int i = kErfc8; i <= kErfc0; ++i) g.vfmadd213ps(q, t, c(i));
    g.vfnmadd231ps(q, z, z);  // P(t) - z^2
    exp_core(g, q, z, s0, kExpLoErfc);
    g.vmulps(q, q, t);
}

void JitActivation::apply(JitFn f, const Xmm& x, const std::vector<Xmm>& s, const Reg64& table) const {
    apply_n(f, {x}, {s}, table);
}

void JitActivation::apply_n(JitFn f, const std::vector<Xmm>& xs, const std::vector<std::vector<Xmm>>& ss,
                            const Reg64& table) const {
    if (xs.size() != ss.size())
        throw Error(Status::invalid_argument, "JitActivation::apply_n: one scratch list per register");
    for (const auto& s : ss)
        if (static_cast<int>(s.size()) < scratch_regs(f))
            throw Error(Status::invalid_argument, std::string("JitActivation::apply: ") + jit_fn_name(f) + " needs " +
                                                    std::to_string(scratch_regs(f)) + " scratch registers");
    tbl_ = table;
    std::vector<JitActRecorder> lanes;
    for (size_t i = 0; i < xs.size(); ++i) {
        lanes.emplace_back(g_);
        record(lanes.back(), f, xs[i], ss[i]);
    }
    const size_t nsteps = lanes.empty() ? 0 : lanes[0].steps.size();
    for (size_t st = 0; st < nsteps; ++st)
        for (auto& lane : lanes) lane.steps[st]();
}

void JitActivation::record(JitActRecorder& g, JitFn f, const Xmm& x, const std::vector<Xmm>& s) const {
    switch (f) {
        case JitFn::relu:
            g.vmaxps(x, x, c(kZero));  // NaN -> 0 (second operand), as x > 0 ? x : 0
            break;
        case JitFn::exp:
            g.vmovaps(s[2], x);
            exp_core(g, x, s[0], s[1]);
            if (zmm_) {
                const Opmask k = k_;
                const Address ftz = c(kExpFtz);
                g.group([=](CodeGenerator& cg) {
                    cg.vcmpps(k, s[2], ftz, 1 /* LT_OS */);
                    cg.vxorps(x | k, x, x);
                });
            } else {
                g.vcmpps(s[0], s[2], c(kExpFtz), 1 /* LT_OS */);
                g.vandnps(x, s[0], x);
            }
            break;
        case JitFn::sigmoid:
            g.vxorps(x, x, c(kSign));
            exp_core(g, x, s[0], s[1]);
            g.vaddps(x, x, c(kOne));
            g.vmovups(s[0], c(kOne));
            g.vdivps(x, s[0], x);
            break;
        case JitFn::silu:
            g.vmovaps(s[2], x);
            g.vxorps(x, x, c(kSign));
            exp_core(g, x, s[0], s[1]);
            g.vaddps(x, x, c(kOne));
            g.vdivps(x, s[2], x);
            break;
        case JitFn::gelu_tanh:
            g.vmovaps(s[2], x);
            g.vmulps(x, x, x);
            g.vmovups(s[0], c(kGeluTanhB));
            g.vfmadd213ps(s[0], x, c(kGeluTanhA));
            g.vmulps(x, s[0], s[2]);  // -2y
            exp_core(g, x, s[0], s[1]);
            g.vaddps(x, x, c(kOne));
            g.vdivps(x, s[2], x);
            break;
        case JitFn::tanh:
            g.vmovups(s[0], c(kTanhHi));
            g.vminps(x, s[0], x);
            g.vmovups(s[0], c(kTanhLo));
            g.vmaxps(x, s[0], x);
            g.vmulps(s[0], x, x);
            g.vmovups(s[1], c(kTanhA13));
            for (int i = kTanhA11; i <= kTanhA1; ++i) g.vfmadd213ps(s[1], s[0], c(i));
            g.vmulps(s[1], s[1], x);
            g.vmovups(s[2], c(kTanhB6));
            for (int i = kTanhB4; i <= kTanhB0; ++i) g.vfmadd213ps(s[2], s[0], c(i));
            g.vdivps(x, s[1], s[2]);
            g.vmovups(s[0], c(kOne));  // the rational overshoots 1 by up to 3 ulp near |x| = 8.5
            g.vminps(x, s[0], x);
            g.vmovups(s[0], c(kMinusOne));
            g.vmaxps(x, s[0], x);
            break;
        case JitFn::gelu_erf:
            // 0.5 x (1 + erf(x / sqrt2)), erf from the rational (no exp: short and cheap; erf(+-4)
            // is exactly +-1, so gelu is exactly 0 for x <= -4 sqrt2). The clamps need not keep
            // a NaN: the final product with x does.
            g.vmulps(s[0], x, c(kInvSqrt2));
            g.vminps(s[0], s[0], c(kErfRatHi));
            g.vmaxps(s[0], s[0], c(kErfRatLo));  // z
            g.vmulps(s[1], s[0], s[0]);            // z^2
            g.vmovups(s[2], c(kErfA13));
            for (int i = kErfA11; i <= kErfA1; ++i) g.vfmadd213ps(s[2], s[1], c(i));
            g.vmulps(s[2], s[2], s[0]);
            g.vmovups(s[0], c(kErfB8));
            for (int i = kErfB6; i <= kErfB0; ++i) g.vfmadd213ps(s[0], s[1], c(i));
            // erf(z) = A / B with 1/B from the reciprocal estimate and one Newton step (the
            // divider's throughput would bound a fused epilogue): |rel err| of 1/B ~ 2^-22.
            if (zmm_)
                g.vrcp14ps(s[1], s[0]);
            else
                g.vrcpps(s[1], s[0]);
            g.vfnmadd213ps(s[0], s[1], c(kOne));  // e = 1 - B r
            g.vfmadd231ps(s[1], s[1], s[0]);      // r = r + r e
            g.vmulps(s[2], s[2], s[1]);           // erf(z)
            g.vaddps(s[2], s[2], c(kOne));
            // 1 + erf is exactly 0 for x <= -4 sqrt2, whatever the reciprocal estimate gave
            // (vrcpps / vrcp14ps differ between vendors): gelu = -0 there, NaN for -inf, as
            // the scalar definition.
            if (zmm_) {
                const Opmask k = k_;
                const Address lo = c(kGeluErfZero);
                const Xmm s2 = s[2];
                g.group([=](CodeGenerator& cg) {
                    cg.vcmpps(k, x, lo, 0x1e /* GT_OQ */);
                    cg.vmovaps(s2 | k | Xbyak::util::T_z, s2);
                });
            } else {
                g.vcmpps(s[0], x, c(kGeluErfZero), 0x1e /* GT_OQ */);
                g.vandps(s[2], s[2], s[0]);
            }
            g.vmulps(x, x, c(kHalf));  // (x / 2) (1 + erf): no overflow near FLT_MAX
            g.vmulps(x, x, s[2]);
            break;
        case JitFn::erf:
            g.vmovaps(s[3], x);
            g.vandps(x, x, c(kAbs));
            erfc_core(g, x, s[0], s[1], s[2]);
            g.vmovups(s[0], c(kOne));
            g.vsubps(s[1], s[0], s[1]);  // erf|x|
            g.vandps(s[0], s[3], c(kSign));
            g.vorps(s[1], s[1], s[0]);   // sign(x) erf|x|
            g.vmulps(s[0], s[3], s[3]);  // Taylor branch
            g.vmovups(s[2], c(kErfT9));
            for (int i = kErfT8; i <= kErfT0; ++i) g.vfmadd213ps(s[2], s[0], c(i));
            g.vmulps(s[2], s[2], s[3]);
            g.vandps(s[0], s[3], c(kAbs));
            if (zmm_) {
                const Opmask k = k_;
                const Address split = c(kErfSplit);
                const Xmm s0 = s[0], s1 = s[1], s2 = s[2];
                g.group([=](CodeGenerator& cg) {
                    cg.vcmpps(k, s0, split, 1 /* LT_OS */);
                    cg.vmovaps(x, s1);
                    cg.vmovaps(x | k, s2);
                });
            } else {
                g.vcmpps(s[0], s[0], c(kErfSplit), 1 /* LT_OS */);
                g.vblendvps(x, s[1], s[2], s[0]);
            }
            break;
    }
}

}  // namespace xk::detail
