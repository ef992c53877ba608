// Vectorised activation injector for xbyak generators: emits x = f(x) in place on one ymm (AVX2)
// or zmm (AVX-512) register, with scratch registers the caller names and a constant table
// addressed by a general-purpose register. Used by the GEMM epilogues; meant for any family
// (GEMV, LLM ops, conv) that fuses an activation into its store.
//
// Usage, inside a JitGenerator for `isa`:
//   JitActivation act(*this, isa);               // AVX-512: also an opmask it may clobber (k2)
//   mov(r14, reinterpret_cast<uintptr_t>(JitActivation::table()));
//   act.apply(JitFn::gelu_erf, Zmm(0), {Zmm(1), Zmm(2), Zmm(3), Zmm(4)}, r14);
// apply() clobbers the scratch registers (at least scratch_regs(f) of them, distinct from x),
// the opmask given at construction (AVX-512, erf / gelu_erf only) and the flags; nothing else.
// It reads the table only through memory operands, so the table register is preserved.
//
// Definitions and accuracy. u = 2^-24; "err" is against the exact value in double precision.
// tests/kernels/test_jit_activation.cpp asserts these bounds per ISA over 2^21 points of
// [-30, 30], a log sweep of both signs up to FLT_MAX, denormals and the exp edges (the figure in
// brackets is the maximum it measured on AVX2):
//   relu       max(x, 0); NaN -> 0, as the scalar reference (x > 0 ? x : 0)        exact
//   exp        n = round(x log2 e), r = x - n ln2 (two-part ln2), Cephes polynomial, scale 2^n:
//              rel err <= 2u on [-86.9, 88.72] [1.2u]; x > 88.7228 -> +inf; x < -87.3365 -> 0
//              (no denormal results); in between |err| < 2^-126
//   sigmoid    1 / (1 + exp(-x)), exact division: rel err <= 4u [2.6u]; -inf -> 0, +inf -> 1
//   tanh       Eigen's 13/6 rational x P(x^2)/Q(x^2), x clamped to [-9, 9], result to [-1, 1]:
//              rel err <= 5u [4.5u]; +-inf -> +-1
//   erf        |x| < 0.75: Taylor series to x^19; else sign(x) (1 - erfc|x|), erfc from the
//              Numerical Recipes fit erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2) (fractional
//              error < 1.2e-7): rel err <= 4u [2.9u]; +-inf -> +-1
//   silu       x / (1 + exp(-x)): rel err <= 4u [2.9u]
//   gelu_tanh  0.5 x (1 + tanh y) computed as x / (1 + exp(-2y)), y = sqrt(2/pi)(x + 0.044715 x^3)
//              (no cancellation for x < 0): rel err <= (4 + 3|2y|) u
//   gelu_erf   (x/2)(1 + erf(x/sqrt2)), erf from Eigen's 13/8 rational on [-4, 4], its division
//              a reciprocal estimate + one Newton step (no exp, no divider: ~25 instructions,
//              ~10 cycles per ymm on Zen 3 — the cheapest accurate-enough form for an epilogue):
//              |err| <= 4u |gelu| + 5u |x| [4.4u |x|]; an absolute bound in |x|: for x << 0,
//              1 + erf cancels (gelu(x) = 0 exactly for x <= -4 sqrt2, where it is < 4e-8 |x|).
//              (The erf building block above is the accurate one.)
//   For gelu_tanh and silu: |err| <= 4u |x| everywhere [2.0u]; gelu_erf [4.4u].
//   Results below 2^-120 in magnitude may be off by up to 2^-120 (no denormal results).
//   Specials: NaN -> NaN (relu: 0); +-inf as the scalar definitions: gelu_erf / gelu_tanh /
//   silu (+inf) = +inf and (-inf) = NaN (the definitions' -inf * 0), sigmoid(-inf) = 0.
// The exp-based functions never produce denormal intermediates for finite inputs in the ranges
// that matter (denormal arithmetic costs microcode assists): exp() is clamped at 1.8e-38, erfc's
// at e^-80.
#pragma once
#include <cstdint>
#include <vector>

#include "dispatch/xbyak_config.hpp"
#include "xk/isa.hpp"
#include "xk/types.hpp"

namespace xk::detail {

// Everything the injector can emit: the activations and their building blocks.
enum class JitFn : int { relu, gelu_erf, gelu_tanh, silu, exp, sigmoid, tanh, erf };

const char* jit_fn_name(JitFn f) noexcept;
// The injector function of an activation (Activation::none has none: throws).
JitFn jit_fn(Activation a);

class JitActRecorder;

class JitActivation {
public:
    // `g` emits for `isa` (avx2: ymm; avx512 and above: zmm). `kmask` is an opmask apply() may
    // clobber on AVX-512 (ignored on AVX2).
    JitActivation(Xbyak::CodeGenerator& g, Isa isa, Xbyak::Opmask kmask = Xbyak::Opmask(2));

    // Vector scratch registers apply(f) needs (0 for relu, at most 4).
    static int scratch_regs(JitFn f) noexcept;
    static constexpr int kMaxScratch = 4;
    // The constant table (static storage, 64-byte aligned): load its address into the table
    // register before apply().
    static const void* table() noexcept;

    // Emits x = f(x). scratch.size() >= scratch_regs(f), all distinct from x and of x's kind.
    void apply(JitFn f, const Xbyak::Xmm& x, const std::vector<Xbyak::Xmm>& scratch, const Xbyak::Reg64& table) const;
    // Emits xs[i] = f(xs[i]) for several registers at once, instruction by instruction
    // interleaved (the functions are long dependency chains: independent chains side by side run
    // several times faster). scratch[i] belongs to xs[i]; all registers distinct.
    void apply_n(JitFn f, const std::vector<Xbyak::Xmm>& xs, const std::vector<std::vector<Xbyak::Xmm>>& scratch,
                 const Xbyak::Reg64& table) const;

private:
    Xbyak::Address c(int idx) const;  // a table entry as a full-width memory operand
    void record(JitActRecorder& g, JitFn f, const Xbyak::Xmm& x, const std::vector<Xbyak::Xmm>& s) const;
    void exp_core(JitActRecorder& g, const Xbyak::Xmm& x, const Xbyak::Xmm& s0, const Xbyak::Xmm& s1,
                  int lo = -1) const;
    void erfc_core(JitActRecorder& g, const Xbyak::Xmm& z, const Xbyak::Xmm& t, const Xbyak::Xmm& q,
                   const Xbyak::Xmm& s0) const;

    Xbyak::CodeGenerator& g_;
    bool zmm_;
    Xbyak::Opmask k_;
    mutable Xbyak::Reg64 tbl_;  // the table register of the apply() in progress
};

}  // namespace xk::detail
