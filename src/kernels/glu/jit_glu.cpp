// xbyak generator of GLU rows (y = act(gate) * up) for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16
// stores at the avx512_bf16 level), specialised on (activation, inner, dtypes). The activation is
// the shared vectorised injector (kernels/common/jit_activation.hpp); two vectors per iteration
// with separate scratch registers so their exp / division chains overlap. SwiGLU (silu_rows) and
// GeGLU (erf_n: f32 -> f32 and bf16 -> bf16; tanh_two: f32 -> f32; tanh_fast: bf16 -> bf16) have main loops of their own. The whole row range is
// one call. Outputs larger than nt_store_threshold() are written with non-temporal stores when
// every row of y is aligned.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <initializer_list>

#include "common/streaming.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_activation.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/glu/glu.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

struct Args {
    const void* x = nullptr;  // 0   first row
    void* y = nullptr;        // 8
    int64_t rows = 0;         // 16  >= 1
    int64_t ld_x = 0;         // 24  bytes
    int64_t ld_y = 0;         // 32  bytes
};
using GluFn = void (*)(const Args*);

constexpr int kUnroll = 2;
constexpr int kSiluPrefetchBytes = 8192;  // software prefetch distance of f32 x (silu rows)
// The same for bf16 x with bf16 y: 2 KiB ahead on AVX2 (Zen 3, one thread, SwiGLU 4096 x 11008:
// 4 KiB 65.7, 2 KiB 67.4, 1 KiB 66.4% of copy, medians of 5), 4 KiB on AVX-512 (as measured before).
constexpr int bf16_silu_prefetch_bytes(bool zmm) { return zmm ? 4096 : 2048; }

// SwiGLU's own silu (the hot path of an LLM MLP): silu(g) = g * r, r = 1 / (1 + e^-g), with
//   e^-g = 2^n p(t), n = round(-g log2 e), t = -g - n ln2, evaluated in x = -t = g + n ln2 (no
//        negation of g; the polynomials take the signs of the odd powers).
// f32 output (fp32 accuracy): two-part ln2, p of degree 6 (Chebyshev interpolant, |p/e^t - 1| <=
//        0.2u on |t| <= ln2/2), d = 1 + 2^n p; AVX2: y = (g u) / d (VDIVPS, 2.2u measured);
//        AVX-512: r from VRCP14PS (2^-14) and one Newton step, y = (g r) u; within 6u of silu(g) u.
//        The AVX2 f32 -> f32 main loop reaches it with a table instead (silu_rows, f32_two: 2^(m/8)
//        from 8 entries, p of degree 3 on |x| <= ln2/16, 0.31u; 3.1u measured).
//        Speed (Zen 3, one core, cache-resident rows): the loop is bound by its loads and FMAs,
//        and Zen 3 loads at most two ymm a cycle, each constant operand being one: the three
//        constants used most stay in registers (0.426 -> 0.37 ns / element), and the divide
//        replaces the reciprocal, its Newton step and a multiply (-> 0.34 ns; the earlier note
//        that the divider bounds the loop held for a longer chain). 4096 x 11008 from DRAM:
//        22.8 -> 26.6 GB/s.
// bf16 output (bf16 accuracy: the result keeps 8 significant bits, so the activation needs
//        ~2^-12, not 2^-24): one-part ln2 (t off by <= 2.4e-7), p = 1 + x q(x) with q of degree 2
//        (minimax relative, 1.02e-4 = 2^-13.3), d = 1 + 2^n p, r = the bare reciprocal estimate
//        (no Newton step: 1.5 * 2^-12 on AVX2, 2^-14 on AVX-512), y = (max(g, -86) u) r: within
//        2^-10 of silu(g) u relative before the rounding (the rounding adds <= 2^-8), so every
//        bf16 result is within (2^-8 + 2^-10) relative of the exact value and at most one bf16
//        ulp from it correctly rounded (bf16 -> bf16, AVX2 and AVX-512, rounds the even / odd
//        pairs to nearest with ties away from zero, + 0x8000: NaNs there carry a bf16 input's
//        payload, whose low words are zero, or the default NaN, so no carry reaches the sign;
//        other paths round to nearest even). About 20 instructions a vector instead of ~27, and
//        a chain ~15 cycles shorter: 0.31 ns / element in L1 on Zen 3 instead of 0.53. The
//        bf16 -> bf16 main loop meets the same bound another way (silu_rows, fast_pair: an 8-entry
//        (AVX2) / 16-entry (AVX-512) table for 2^(m/8) / 2^(m/16), a degree-1 polynomial, y
//        scaled by 1 + 2^-8 and truncated).
// g is clamped to [-86, 86.9] in the exponential (2^n stays normal, 1 + e^-g <= 3e37 so r is
// normal) and to >= -86 in the final product (one register holds -86 for both): for g < -86 the
// result is below 4e-36 in magnitude instead of g e^g (silu(-inf) gives -3.8e-36, the limit 0,
// where the scalar formula's -inf / inf is NaN); NaN stays NaN. u = 2^-24; both contracts
// asserted against double by test_glu (SiluAccuracy).
enum SiluConst : int {
    kSGClampHi, kSMagic, kSNegLog2e, kSLn2Hi, kSLn2Lo, kSLn2, kSOne, kSGLo,
    kSP6,             // f32: p of degree 6 in x = -t, highest first: a6, -a5, a4, -a3, a2, -1 (then + 1)
    kSQ3 = kSP6 + 6,  // bf16 output: q of degree 2 in x, p = 1 + x q: q2, q1, q0
    kSRound = kSQ3 + 3,  // 0x8000: bf16 rounding (half away from zero on the magnitude)
    // AVX2 bf16 -> bf16 main loop (silu_rows, fast_pair): e^-g = 2^(m/8) c0 (1 + c1 x)
    kSGClampHi8,  // 86: the exponential's upper clamp there (2^(m/8) c0 c1 stays normal; zmm too)
    kSMagic8,     // 1.5 * 2^23 + 8 * 127: holds m + 1016 in the low bits
    kSNeg8Log2e,  // -8 log2 e
    kSLn2d8,      // ln2 / 8
    kSExp8,       // 8 entries (twice), as integers: bits(2^(i/8) c0 c1 256/257) - (127 << 23) - (i << 20)
    kSUp,         // 256 / 257: d scaled by it, so y comes out (1 + 2^-8) too large, then truncated
    kSInvC1,      // 1 / c1
    // AVX-512 (zmm) the same with 16 entries: e^-g = 2^(m/16) c0 (1 + c1 x), |x| <= ln2/32
    kSMagic16, kSNeg16Log2e, kSLn2d16, kSExp16, kSInvC1z,
    kSHiWords,    // 0xffff0000
    // AVX2 f32 -> f32 main loop (silu_rows, f32_two): two-part ln2/8, the table of 2^(i/8) c0,
    // e^-x / c0 ~ 1 + x (a1 + x (a2 + x a3)) on |x| <= ln2/16
    kSLn2d8Hi, kSLn2d8Lo, kSExpF,
    kSF3,                  // a3, a2, a1
    // GeGLU (tanh) main loops (tanh_two, tanh_fast): its exponent -2y = -x (k + k3 x^2),
    // k = 2 sqrt(2/pi), k3 = 0.044715 k; the numerator's lower clamp
    kSTanhK = kSF3 + 3, kSTanhK3, kSTanhNumLo,
    kSTanhHi,  // 9.9: GeGLU (tanh) bf16 -> bf16 (tanh_fast), the exponent's variable clamped above
    kSCount
};

struct alignas(64) SiluTable {
    uint32_t v[kSCount][16];
};

const SiluTable& silu_table() {
    static const SiluTable t = [] {
        SiluTable t{};
        auto setf = [&](int i, float f) {
            uint32_t b;
            std::memcpy(&b, &f, 4);
            for (auto& e : t.v[i]) e = b;
        };
        setf(kSGClampHi, 86.9f);
        setf(kSMagic, 12582912.0f + 127.0f);  // 1.5 * 2^23 + 127: holds n + 127 in the low bits
        setf(kSNegLog2e, -1.44269504088896341f);
        setf(kSLn2Hi, 0.693359375f);
        setf(kSLn2Lo, -2.12194440e-4f);
        setf(kSLn2, 0.693147182f);
        setf(kSOne, 1.0f);
        setf(kSGLo, -86.0f);
        // f32: e^t ~ 1 + t + a2 t^2 + .. + a6 t^6 (Chebyshev interpolant, 0.2u on |t| <= ln2/2),
        // evaluated in x = -t: the odd powers change sign.
        const float a6[5] = {1.3933731243e-03f, 8.3692204207e-03f, 4.1666463017e-02f, 1.6666504741e-01f, 5.0e-01f};
        for (int i = 0; i < 5; ++i) setf(kSP6 + i, i % 2 ? -a6[i] : a6[i]);  // a6 .. a2
        setf(kSP6 + 5, -1.0f);                                              // a1
        // bf16 output: e^-x ~ 1 + x q(x), q of degree 2 (minimax relative, 1.02e-4 = 2^-13.3 on
        // |x| <= ln2/2), highest first.
        setf(kSQ3 + 0, -1.6517773271e-01f);
        setf(kSQ3 + 1, 5.0413483381e-01f);
        setf(kSQ3 + 2, -1.0001963377e+00f);
        for (auto& e : t.v[kSRound]) e = 0x8000u;
        // AVX2 bf16 -> bf16: e^-x ~ c0 (1 + c1 x) on |x| <= ln2 / 16 (minimax relative, 4.70e-4
        // = 2^-11.06), c0 c1 256/257 folded into the table: d' = s (x + 1/c1) + 256/257.
        const double c0 = 1.00046942, c1 = -0.9993742159368493;
        setf(kSMagic8, 12582912.0f + 1016.0f);
        setf(kSNeg8Log2e, static_cast<float>(-8.0 * 1.44269504088896341));
        setf(kSLn2d8, static_cast<float>(0.69314718055994531 / 8));
        for (int i = 0; i < 16; ++i) {
            const float f = static_cast<float>(std::exp2((i % 8) / 8.0) * c0 * c1 * 256.0 / 257.0);
            uint32_t b;
            std::memcpy(&b, &f, 4);
            t.v[kSExp8][i] = b - (127u << 23) - (static_cast<uint32_t>(i % 8) << 20);
        }
        setf(kSInvC1, static_cast<float>(1.0 / c1));
        setf(kSGClampHi8, 86.0f);
        setf(kSUp, static_cast<float>(256.0 / 257.0));
        // zmm: 16 entries, e^-x ~ c0 (1 + c1 x) on |x| <= ln2/32 (minimax relative, 1.17e-4).
        const double z0 = 1.0001173997495778, z1 = -0.999843465823349;
        setf(kSMagic16, 12582912.0f + 2032.0f);  // 1.5 * 2^23 + 16 * 127
        setf(kSNeg16Log2e, static_cast<float>(-16.0 * 1.44269504088896341));
        setf(kSLn2d16, static_cast<float>(0.69314718055994531 / 16));
        for (int i = 0; i < 16; ++i) {
            const float f = static_cast<float>(std::exp2(i / 16.0) * z0 * z1 * 256.0 / 257.0);
            uint32_t b;
            std::memcpy(&b, &f, 4);
            t.v[kSExp16][i] = b - (127u << 23) - (static_cast<uint32_t>(i) << 19);
        }
        setf(kSInvC1z, static_cast<float>(1.0 / z1));
        for (auto& e : t.v[kSHiWords]) e = 0xffff0000u;
        setf(kSLn2d8Hi, 0.693359375f / 8);  // 355 / 4096: m ln2hi/8 is exact for |m| < 2^14
        setf(kSLn2d8Lo, -2.12194440e-4f / 8);
        const double f0 = 0.999999981630171;  // minimax relative, 1.84e-8 = 0.31u
        for (int i = 0; i < 16; ++i) {
            const float f = static_cast<float>(std::exp2((i % 8) / 8.0) * f0);
            uint32_t b;
            std::memcpy(&b, &f, 4);
            t.v[kSExpF][i] = b - (127u << 23) - (static_cast<uint32_t>(i % 8) << 20);
        }
        setf(kSF3 + 0, static_cast<float>(-0.1666510148970098));  // a3
        setf(kSF3 + 1, static_cast<float>(0.5000782768543582));   // a2
        setf(kSF3 + 2, static_cast<float>(-1.0000000588064313));  // a1
        setf(kSTanhK, static_cast<float>(2.0 * 0.79788456080286536));
        setf(kSTanhK3, static_cast<float>(2.0 * 0.79788456080286536 * 0.044715));
        setf(kSTanhNumLo, -10.0f);
        setf(kSTanhHi, 9.9f);
        return t;
    }();
    return t;
}

// GeGLU (gelu_erf), f32 -> f32 and bf16 -> bf16 main loop (erf_n, AVX2 and AVX-512): the injector's rational (Eigen's
// coefficients, erf(z) = z A(z^2) / B(z^2) on z = x / sqrt2 clamped to [-4, 4]; jit_activation.cpp)
// with A scaled by 1/2 (exact), a divide instead of the reciprocal estimate and its Newton step,
// and the product folded: y = (g (1/2 + (z A/2) / B)) u, exactly 0 for g <= -4 sqrt2 as the injector.
enum GeluConst : int {
    kGInvSqrt2, kGHi, kGLo, kGHalf, kGZero, kGOne,
    kGA13, kGA11, kGA9, kGA7, kGA5, kGA3, kGA1,  // A / 2, highest first
    kGB8, kGB6, kGB4, kGB2, kGB0,
    kGCount
};
struct alignas(64) GeluTable {
    float v[kGCount][16];
};
const GeluTable& gelu_table() {
    static const GeluTable t = [] {
        GeluTable t{};
        const float vals[kGCount] = {0.70710678118654752f, 4.0f, -4.0f, 0.5f, -5.65685424949238f, 1.0f,
                                     0.5f * -2.72614225801306e-10f, 0.5f * 2.77068142495902e-08f,
                                     0.5f * -2.10102402082508e-06f, 0.5f * -5.69250639462346e-05f,
                                     0.5f * -7.34990630326855e-04f, 0.5f * -2.95459980854025e-03f,
                                     0.5f * -1.60960333262415e-02f, -1.45660718464996e-05f, -2.13374055278905e-04f,
                                     -1.68282697438203e-03f, -7.37332916720468e-03f, -1.42647390514189e-02f};
        for (int i = 0; i < kGCount; ++i)
            for (float& e : t.v[i]) e = vals[i];
        return t;
    }();
    return t;
}

class JitGlu : public JitGenerator {
public:
    JitGlu(const GluKernelDesc& kd, Isa isa, bool nt) : JitGenerator(isa), nt_(nt) {
        const Reg64 a = abi_param1, x = rsi, y = rdx, rows = rcx, idx = r8, cnt = r9, tbl = r10, act_tbl = r11,
                    up = rbx;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        JitActivation act(*this, isa, k2);
        const bool has_act = kd.activation != Activation::none;
        const JitFn f = has_act ? jit_fn(kd.activation) : JitFn::relu;
        const int vl = io.vlen();
        const int64_t n = kd.inner, nvec = n / vl;
        const int tail = static_cast<int>(n % vl);
        const DType xt = kd.x_dtype, yt = kd.y_dtype;
        const int xs = dtype_size(xt), ys = dtype_size(yt);

        preamble({rbx, r12});
        mov(x, ptr[a + offsetof(Args, x)]);
        mov(y, ptr[a + offsetof(Args, y)]);
        mov(rows, ptr[a + offsetof(Args, rows)]);
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        if (kd.activation == Activation::silu) mov(act_tbl, reinterpret_cast<uintptr_t>(&silu_table()));
        else if (has_act) mov(act_tbl, reinterpret_cast<uintptr_t>(JitActivation::table()));

        if (kd.activation == Activation::silu) {
            silu_rows(kd, io, a, x, y, rows, idx, cnt, up, act_tbl);
        } else {
            // act(gate) * up into V(6k).
            auto body = [&](int k, int64_t off, int count) {
                const int b = k * 6;
                const Xmm g = V(b), u = V(b + 1);
                const std::vector<Xmm> s = {V(b + 2), V(b + 3), V(b + 4), V(b + 5)};
                io.load(g, x + idx * xs + off * xs, xt, count);
                if (has_act) act.apply(f, g, s, act_tbl);
                if (xt == DType::f32 && count == vl) {
                    vmulps(g, g, ptr[up + idx * xs + off * xs]);
                } else {
                    io.load(u, up + idx * xs + off * xs, xt, count);
                    vmulps(g, g, u);
                }
            };
            // nv (1 or 2) vectors from element idx + off, the last `last` elements long, stored as a pair.
            auto block = [&](int nv, int64_t off, int last) {
                for (int k = 0; k < nv; ++k) body(k, off + k * vl, k == nv - 1 ? last : vl);
                if (nv == 2) io.store2(y + idx * ys + off * ys, V(0), V(6), yt, vl + last, nt);
                else io.store(y + idx * ys + off * ys, V(0), yt, last, nt && last == vl);
            };

            Label row_loop;
            L(row_loop);
            mov(up, n * xs);
            add(up, x);
            xor_(idx, idx);
            // GeGLU (erf) f32 -> f32: its own main loop (erf_n, below), erf_nv() vectors an
            // iteration; the vectors it leaves go through block() in pairs.
            // (f32 -> f32, or bf16 -> bf16 in even / odd pairs: geglu_bf16_)
            const bool same = xt == yt;
            geglu_bf16_ = xt == DType::bf16;
            const bool erf_main = kd.activation == Activation::gelu_erf && same;
            const bool tanh_main = kd.activation == Activation::gelu_tanh && same;
            const bool tanh_fast_main = tanh_main && geglu_bf16_;  // bf16 -> bf16: two pairs an iteration
            const int per = erf_main ? erf_nv() : tanh_fast_main ? 4 : kUnroll;  // (tanh_two: two vectors, as kUnroll)
            const int64_t nblk = nvec / per;
            if (nblk > 0) {
                Label loop;
                if (erf_main) erf_consts();
                if (tanh_fast_main) tanh_fast_consts();
                else if (tanh_main) tanh_consts();
                mov(cnt, nblk);
                L(loop);
                if (erf_main) erf_n(io, x, y, up, idx);
                else if (tanh_fast_main) {
                    prefetch_streams(x, up, idx, 2, bf16_silu_prefetch_bytes(io.zmm()), 4 * vl * 2);  // as SwiGLU's bf16 rows
                    tanh_fast(io, x, y, up, idx, 0);
                    tanh_fast(io, x, y, up, idx, 2 * vl);
                }
                else if (tanh_main) tanh_two(x, y, up, idx);
                else block(kUnroll, 0, vl);
                add(idx, per * vl);
                dec(cnt);
                jnz(loop);
            }
            int left = static_cast<int>(nvec % per);
            for (; left >= 2; left -= 2) {
                block(2, 0, vl);
                add(idx, 2 * vl);
            }
            const int rem = left;  // 0 or 1
            if (tail) block(rem + 1, 0, tail);
            else if (rem) block(1, 0, vl);
            add(x, ptr[a + offsetof(Args, ld_x)]);
            add(y, ptr[a + offsetof(Args, ld_y)]);
            dec(rows);
            jnz(row_loop);
        }
        postamble();
        fn = finalize<GluFn>();
    }
    GluFn fn = nullptr;

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }

    // Software prefetch of both read streams (gate at x, up at up), one prefetcht0 per line of the
    // `bytes` an iteration reads from each, `dist` bytes ahead of element idx (xs bytes an element).
    void prefetch_streams(const Reg64& x, const Reg64& up, const Reg64& idx, int xs, int dist, int bytes) {
        for (int o = 0; o < bytes; o += 64) {
            prefetcht0(ptr[x + idx * xs + dist + o]);
            prefetcht0(ptr[up + idx * xs + dist + o]);
        }
    }

    // bf16 -> bf16 (geglu_bf16_; tanh: tanh_fast, below): the same arithmetic (erf keeps its
    // accurate quotient: 1 + erf cancels for g << 0, where the bare estimate's error grew to 4% on
    // the Xeon; asserted over every bf16 gate by GeluBf16EveryGate: max error 0.98 x 2^-8, as the
    // correctly rounded reference) on whole pairs of vectors
    // split even / odd (JitIo::load2_eo; the gate read twice, as f32 re-reads it), y stored by one
    // word merge rounded to nearest, ties away (store2_eo_away: every NaN here is a bf16 input's or
    // the default one). AVX2 erf: four vectors (two pairs) an iteration, chains in all of ymm0-15,
    // every constant a memory operand (ymm14-15 are JitIo's scratch too: the word merges of the
    // stores write ymm14 after A of the last chain is dead; the loads take no scratch). Zen 3, in
    // L1: 0.556 with one pair and six constants in registers -> 0.499 ns an element; 31.1 / 51.6
    // -> 34.3 / 56.2% of copy (1 / 2 threads, medians of 3);
    // Zen 3, in L1, ns an element: erf 0.82 -> 0.55 (f32: erf 0.61 -> 0.48, tanh 0.78 -> 0.44).
    // GeGLU (erf) main loop, f32 -> f32 (gelu_table). AVX2: three vectors an iteration, chains in
    // ymm0-11 (z, z^2, A, B), A11..A5 in ymm12-15 (erf_consts; the other constants are memory
    // operands through r12). Per vector 15 operations on the FMA pipes and a divide, against 19
    // and ~17 constant loads through the injector. Zen 3, one core, in L1: 0.61 -> 0.48 ns an
    // element (two vectors an iteration with 8 constants in registers: 0.51; four, none: 0.53;
    // the reciprocal and a Newton step instead of the divide: no faster); 4096 x 11008 from DRAM,
    // % of copy, 1 / 2 threads: 53 / 84 -> 65 / 95.
    // AVX-512 (zmm): four vectors an iteration (zmm0-15), every constant in zmm16-31, and the
    // reciprocal estimate with a Newton step instead of the divide (a zmm divide is slow on Intel
    // cores); its rounding may leave 1 + erf a few ulps from 0 at the clamp, so the cutoff compare
    // (into k3) zeroes it there as the injector does.
    bool geglu_bf16_ = false;  // erf_n / tanh_fast: bf16 gate, up and y, whole pairs split even / odd
    int erf_nv() const { return isa() >= Isa::avx512 ? 4 : geglu_bf16_ ? 4 : 3; }
    static constexpr int kErfRegConsts[16] = {kGA11, kGA9, kGA7, kGA5, kGA3, kGA1, kGB6, kGB4,
                                              kGA13, kGB8, kGB2, kGB0, kGInvSqrt2, kGHi, kGLo, kGHalf};
    // (AVX2: the registers the chains leave; none with bf16, whose four chains take ymm0-15)
    int erf_ncr() const { return isa() >= Isa::avx512 ? 16 : std::max(0, 16 - 4 * erf_nv() - (geglu_bf16_ ? 2 : 0)); }
    int erf_creg(int i) const { return isa() >= Isa::avx512 ? 16 + i : 4 * erf_nv() + i; }
    void erf_consts() {
        mov(r12, reinterpret_cast<uintptr_t>(&gelu_table()));
        for (int i = 0; i < erf_ncr(); ++i) vmovups(V(erf_creg(i)), ptr[r12 + kErfRegConsts[i] * 64]);
    }
    void erf_n(const JitIo& io, const Reg64& x, const Reg64& y, const Reg64& up, const Reg64& idx) {
        const bool zmm = isa() >= Isa::avx512, bf = geglu_bf16_;
        const int nv = erf_nv(), ncr = erf_ncr(), vb = zmm ? 64 : 32;
        // bf16: vector k is the even (k even) or odd half of pair k / 2, at byte k / 2 * vb
        auto load_pairs = [&](auto&& reg, const Reg64& base) {
            for (int k = 0; k < nv; k += 2) io.load2_eo(reg(k), reg(k + 1), base + idx * 2 + k / 2 * vb);
        };
        auto c = [&](int e) { return ptr[r12 + e * 64]; };
        auto Z = [&](int k) { return V(4 * k); };
        auto Q = [&](int k) { return V(4 * k + 1); };
        auto A = [&](int k) { return V(4 * k + 2); };
        auto B = [&](int k) { return V(4 * k + 3); };
        auto g = [&](int k) { return ptr[x + idx * 4 + k * vb]; };
        auto u = [&](int k) { return ptr[up + idx * 4 + k * vb]; };
        // a constant: its register (the first ncr of kErfRegConsts) or memory
        auto k_op = [&](int e, auto&& f) {
            for (int i = 0; i < ncr; ++i)
                if (kErfRegConsts[i] == e) return f(V(erf_creg(i)));
            return f(c(e));
        };
        const int xs = bf ? 2 : 4;
        prefetch_streams(x, up, idx, xs, kSiluPrefetchBytes, nv * vb * xs / 4);
        if (bf) load_pairs(Z, x);
        else for (int k = 0; k < nv; ++k) vmovups(Z(k), g(k));
        for (int k = 0; k < nv; ++k) k_op(kGInvSqrt2, [&](const auto& o) { vmulps(Z(k), Z(k), o); });
        for (int k = 0; k < nv; ++k) k_op(kGHi, [&](const auto& o) { vminps(Z(k), Z(k), o); });  // (NaN: see below)
        for (int k = 0; k < nv; ++k) k_op(kGLo, [&](const auto& o) { vmaxps(Z(k), Z(k), o); });  // z
        for (int k = 0; k < nv; ++k) vmulps(Q(k), Z(k), Z(k));  // z^2
        for (int k = 0; k < nv; ++k) k_op(kGA13, [&](const auto& o) { vmovups(A(k), o); });
        for (int e = kGA11; e <= kGA1; ++e)
            for (int k = 0; k < nv; ++k) k_op(e, [&](const auto& o) { vfmadd213ps(A(k), Q(k), o); });
        for (int k = 0; k < nv; ++k) vmulps(A(k), A(k), Z(k));  // z A / 2
        for (int k = 0; k < nv; ++k) k_op(kGB8, [&](const auto& o) { vmovups(B(k), o); });
        for (int e = kGB6; e <= kGB0; ++e)
            for (int k = 0; k < nv; ++k) k_op(e, [&](const auto& o) { vfmadd213ps(B(k), Q(k), o); });
        if (zmm) {
            for (int k = 0; k < nv; ++k) vrcp14ps(Q(k), B(k));
            // (bf16 y too: 1 + erf cancels for g << 0, so the estimate's 2^-14 would not do)
            for (int k = 0; k < nv; ++k) vfnmadd213ps(B(k), Q(k), c(kGOne));  // e = 1 - B r
            for (int k = 0; k < nv; ++k) vfmadd231ps(Q(k), Q(k), B(k));       // r (1 + e)
            for (int k = 0; k < nv; ++k) vmulps(A(k), A(k), Q(k));            // erf / 2
        } else {
            for (int k = 0; k < nv; ++k) vdivps(A(k), A(k), B(k));  // erf / 2
        }
        for (int k = 0; k < nv; ++k) k_op(kGHalf, [&](const auto& o) { vaddps(A(k), A(k), o); });  // (1 + erf) / 2
        // AVX2, no cutoff compare: at the clamp z = -4 these IEEE operations give erf / 2 = -0.5
        // exactly, so gelu is exactly 0 for g <= -4 sqrt2 and NaN for -inf (test
        // GeluErfBelowTheCutoffIsExactlyZero); a NaN g became z = 4 at the clamps and stays NaN in
        // the product. AVX-512: the compare (GT_OQ: NaN and g <= -4 sqrt2 give 0, NaN g stays NaN).
        if (bf) load_pairs(Z, x);
        else for (int k = 0; k < nv; ++k) vmovups(Z(k), g(k));
        if (zmm) {
            for (int k = 0; k < nv; ++k) {
                vcmpps(k3, Z(k), c(kGZero), 0x1e /* GT_OQ */);
                vmovaps(A(k) | k3 | Xbyak::util::T_z, A(k));
            }
        }
        for (int k = 0; k < nv; ++k) vmulps(Z(k), Z(k), A(k));  // gelu(g) first: g u may overflow
        if (bf) {  // (Q is free: the divide / the reciprocal's product is done)
            load_pairs(Q, up);
            for (int k = 0; k < nv; ++k) vmulps(Z(k), Z(k), Q(k));
            // rounded to nearest, ties away: every NaN here is a bf16 input's or the default one
            for (int k = 0; k < nv; k += 2) io.store2_eo_away(y + idx * 2 + k / 2 * vb, Z(k), Z(k + 1), nt_);
            return;
        }
        for (int k = 0; k < nv; ++k) vmulps(Z(k), Z(k), u(k));
        for (int k = 0; k < nv; ++k) {
            if (nt_) vmovntps(ptr[y + idx * 4 + k * vb], Z(k));
            else vmovups(ptr[y + idx * 4 + k * vb], Z(k));
        }
    }

    // GeGLU (tanh) main loop, f32 -> f32: gelu_tanh(x) = x / (1 + e^-X), X = 2y = x (k + k3 x^2),
    // y = sqrt(2/pi) (x + 0.044715 x^3); e^-X exactly as SwiGLU's f32 loop takes e^-g (f32_two:
    // X clamped to [-86, 86], the 8-entry table with a degree-3 polynomial, two-part ln2/8), then
    // y = (max(x, -10) u) / d (AVX2: VDIVPS; AVX-512: VRCP14PS and a Newton step). Two vectors an
    // iteration, chains in V(0..5); AVX2: ten constants in ymm6-15 (k3, the clamps and -10 are
    // memory operands through r12); AVX-512: zmm16-25. For x < -10 (X < -87.3, clamped) the
    // result is below 5e-37 |u| in magnitude (the true one is smaller still); gelu_tanh(-inf) u
    // gives -4.5e-37 u there (the limit, 0) where the scalar formula's -inf * 0 is NaN, as SwiGLU's
    // silu(-inf); NaN stays NaN, +inf gives +inf u.
    void tanh_consts() {
        mov(r12, reinterpret_cast<uintptr_t>(&silu_table()));
        int r = isa() >= Isa::avx512 ? 16 : 6;
        for (int e : {int(kSMagic8), int(kSNeg8Log2e), int(kSLn2d8Hi), int(kSLn2d8Lo), int(kSExpF), int(kSF3),
                      int(kSTanhK), int(kSF3 + 1), int(kSF3 + 2), int(kSOne)})
            vmovups(V(r++), ptr[r12 + e * 64]);
    }
    void tanh_two(const Reg64& x, const Reg64& y, const Reg64& up, const Reg64& idx) {
        const bool zmm = isa() >= Isa::avx512;
        const int vb = zmm ? 64 : 32, fb = zmm ? 16 : 6;
        auto c = [&](int e) { return ptr[r12 + e * 64]; };
        const Xmm magic = V(fb), nl2e = V(fb + 1), l2hi = V(fb + 2), l2lo = V(fb + 3), tbl = V(fb + 4), a3 = V(fb + 5),
                  kk = V(fb + 6), a2 = V(fb + 7), a1 = V(fb + 8), one = V(fb + 9);
        const Xmm X[2] = {V(0), V(3)}, S0[2] = {V(1), V(4)}, S1[2] = {V(2), V(5)};
        auto g = [&](int k) { return ptr[x + idx * 4 + k * vb]; };
        auto u = [&](int k) { return ptr[up + idx * 4 + k * vb]; };
        prefetch_streams(x, up, idx, 4, kSiluPrefetchBytes, 2 * vb);  // as SwiGLU's f32 rows
        for (int k = 0; k < 2; ++k) vmovups(X[k], g(k));
        for (int k = 0; k < 2; ++k) vmulps(S0[k], X[k], X[k]);
        for (int k = 0; k < 2; ++k) vfmadd132ps(S0[k], kk, c(kSTanhK3));  // k + k3 x^2
        for (int k = 0; k < 2; ++k) vmulps(X[k], X[k], S0[k]);           // X = 2y
        for (int k = 0; k < 2; ++k) vmaxps(X[k], X[k], c(kSGLo));        // (NaN: the numerator keeps it)
        for (int k = 0; k < 2; ++k) vminps(X[k], X[k], c(kSGClampHi8));
        for (int k = 0; k < 2; ++k) vmovaps(S0[k], magic);
        for (int k = 0; k < 2; ++k) vfmadd231ps(S0[k], X[k], nl2e);  // magic + m
        for (int k = 0; k < 2; ++k) vsubps(S1[k], S0[k], magic);     // m
        for (int k = 0; k < 2; ++k) vfmadd231ps(X[k], S1[k], l2hi);  // -t
        for (int k = 0; k < 2; ++k) vfmadd231ps(X[k], S1[k], l2lo);
        for (int k = 0; k < 2; ++k) {  // (VPERMPS: the Ymm form names the zmm registers too)
            if (zmm) vpermps(Zmm(S1[k].getIdx()), Zmm(S0[k].getIdx()), Zmm(tbl.getIdx()));
            else vpermps(Ymm(S1[k].getIdx()), Ymm(S0[k].getIdx()), Ymm(tbl.getIdx()));
        }
        for (int k = 0; k < 2; ++k) vpslld(S0[k], S0[k], 20);
        for (int k = 0; k < 2; ++k) vpaddd(S0[k], S0[k], S1[k]);  // s
        for (int k = 0; k < 2; ++k) vmovaps(S1[k], a3);
        for (int k = 0; k < 2; ++k) vfmadd213ps(S1[k], X[k], a2);
        for (int k = 0; k < 2; ++k) vfmadd213ps(S1[k], X[k], a1);
        for (int k = 0; k < 2; ++k) vfmadd213ps(S1[k], X[k], one);  // p
        for (int k = 0; k < 2; ++k) vfmadd213ps(S1[k], S0[k], one);  // d = 1 + e^-X
        if (zmm) {  // y = num r (AVX2: num / d)
            for (int k = 0; k < 2; ++k) vrcp14ps(S0[k], S1[k]);
            for (int k = 0; k < 2; ++k) vfnmadd213ps(S1[k], S0[k], one);  // e = 1 - d r
            for (int k = 0; k < 2; ++k) vfmadd231ps(S0[k], S0[k], S1[k]);  // r (1 + e)
        }
        const Xmm* F = zmm ? S1 : S0;  // free now (AVX2: d in S1; AVX-512: r in S0)
        for (int k = 0; k < 2; ++k) {  // max(-10, x) (NaN kept: the second operand), times u
            vmovups(F[k], c(kSTanhNumLo));
            vmaxps(X[k], F[k], g(k));
        }
        for (int k = 0; k < 2; ++k) vmulps(X[k], X[k], u(k));
        for (int k = 0; k < 2; ++k) {
            if (zmm) vmulps(X[k], X[k], S0[k]);
            else vdivps(X[k], X[k], S1[k]);
        }
        for (int k = 0; k < 2; ++k) {
            if (nt_) vmovntps(ptr[y + idx * 4 + k * vb], X[k]);
            else vmovups(ptr[y + idx * 4 + k * vb], X[k]);
        }
    }

    // GeGLU (tanh), bf16 -> bf16 main loop (tanh_fast): SwiGLU's bf16 pair (silu_rows, fast_pair)
    // with its gate replaced by X = 2y = a (k + k3 a^2): gelu_tanh(x) = x / (1 + e^-X).
    //   gm = max(-10, x) (NaN kept), G = gm u, a = min(gm, 9.9) (NaN -> 9.9),
    //   X = a (k + k3 a^2), in [-87.3, 85.1]: e^-X and 1 + e^-X stay normal, so does their
    //   reciprocal (>= 1.2e-38), without a clamp of X,
    //   then as fast_pair: the 8-entry (16 on zmm) table for 2^(m/8), a degree-1 polynomial,
    //   d' = (256/257) (1 + e^-X (1 + e1)), y' = G rcp(d') = (1 + 2^-8) y (1 + e), truncated.
    // X's own rounding moves the sigmoid by at most |X| 3u (1 - s) relative, < 2^-15; so |e| <
    // 2^-10 as SwiGLU's, every result is within (2^-8 + 2^-10) relative and at most one ulp from
    // the correctly rounded value. For x <= -10 (and -inf) the result is G r with r <= 1.23e-38:
    // |y| <= 1.3e-37 |u| (the limit is 0; the scalar formula's gelu_tanh(-inf) is NaN). Three
    // operations a vector more than SwiGLU's; on AVX2 256/257 and k are memory operands (k3 in
    // 256/257's register: 0.34 -> 0.33 ns an element, within the noise). Two pairs an iteration
    // (four: no faster). Zen 3, one core, in L1 (4 x 11008): 0.44 (tanh_two's bf16 form) -> 0.33 ns
    // an element, SwiGLU's 0.256.
    void tanh_fast_consts() {
        const bool zmm = isa() >= Isa::avx512;
        mov(r12, reinterpret_cast<uintptr_t>(&silu_table()));
        int r = zmm ? 16 : 8;
        for (int e : {int(kSTanhHi), int(zmm ? kSMagic16 : kSMagic8), int(zmm ? kSNeg16Log2e : kSNeg8Log2e),
                      int(zmm ? kSLn2d16 : kSLn2d8), int(kSTanhNumLo), int(zmm ? kSExp16 : kSExp8), int(zmm ? kSUp : kSTanhK3),
                      int(zmm ? kSInvC1z : kSInvC1)})
            vmovups(V(r++), ptr[r12 + e * 64]);
        if (zmm)
            for (int e : {int(kSHiWords), int(kSTanhK3), int(kSTanhK)}) vmovups(V(r++), ptr[r12 + e * 64]);
    }
    void tanh_fast(const JitIo& io, const Reg64& x, const Reg64& y, const Reg64& up, const Reg64& idx, int off) {
        const bool zmm = isa() >= Isa::avx512;
        const int cb = zmm ? 16 : 8;
        auto R = [&](int i) { return zmm ? Ymm(Zmm(i)) : Ymm(i); };
        auto c = [&](int e) { return ptr[r12 + e * 64]; };
        // (AVX2: 256/257 and k are memory operands, k3 takes 256/257's register)
        const Ymm hi = R(cb), lo = R(cb + 4), up_c = R(cb + 6), k3 = zmm ? R(cb + 9) : R(cb + 6), kk = R(cb + 10);
        const Ymm G[2] = {R(0), R(4)}, A[2] = {R(1), R(5)}, C[2] = {R(3), R(7)};
        io.load2_eo(A[0], A[1], x + idx * 2 + off * 2);
        io.load2_eo(G[0], G[1], up + idx * 2 + off * 2);
        for (int j = 0; j < 2; ++j) vmaxps(A[j], lo, A[j]);  // gm: NaN kept (the second operand)
        for (int j = 0; j < 2; ++j) vmulps(G[j], G[j], A[j]);
        for (int j = 0; j < 2; ++j) vminps(A[j], A[j], hi);  // NaN -> 9.9
        for (int j = 0; j < 2; ++j) vmulps(C[j], A[j], A[j]);
        for (int j = 0; j < 2; ++j) {  // k + k3 a^2
            if (zmm) vfmadd213ps(C[j], k3, kk);
            else vfmadd213ps(C[j], k3, c(kSTanhK));
        }
        for (int j = 0; j < 2; ++j) vmulps(A[j], A[j], C[j]);  // X
        const Address up_m = c(kSUp);
        fast_pair_tail(zmm ? static_cast<const Operand&>(up_c) : static_cast<const Operand&>(up_m), y + idx * 2 + off * 2);
    }

    // The common tail of the bf16 -> bf16 pairs (silu_rows' fast_pair, tanh_fast): registers
    // G = {0, 4} (the product's factor), A = {1, 5} (the exponent's variable, e^-A taken),
    // B = {2, 6}, C = {3, 7}, the constants from cb = 8 (ymm) / 16 (zmm) as fast_consts() and
    // tanh_fast_consts() load them, zmm24 = 0xffff0000. s = 2^(m/8) c0 c1 (256/257) (zmm: m/16)
    // from the table, d' = s (x + 1/c1) + up_c, y' = G rcp(d'), truncated to bf16 and the pair
    // stored to out (streaming when nt_).
    void fast_pair_tail(const Operand& up_c, const RegExp& out) {
        const bool zmm = isa() >= Isa::avx512;
        const int cb = zmm ? 16 : 8;
        auto R = [&](int i) { return zmm ? Ymm(Zmm(i)) : Ymm(i); };
        const Ymm magic = R(cb + 1), nl2e = R(cb + 2), ln2d = R(cb + 3), tbl = R(cb + 5), inv_c1 = R(cb + 7);
        const Ymm G[2] = {R(0), R(4)}, A[2] = {R(1), R(5)}, B[2] = {R(2), R(6)}, C[2] = {R(3), R(7)};
        // 1 / c1 is added to A beside the rounding of m (x + 1/c1 = (A + 1/c1) + m ln2/8: the
        // add off the chain; its rounding, <= 2^-18 absolute, is far inside the polynomial's error).
        // Zen 3, one thread, SwiGLU bf16 4096 x 11008, with AVX2's prefetch at 2 KiB
        // (bf16_silu_prefetch_bytes), old / new binaries, 4 rounds, medians: 61.6 -> 65.4% of copy
        // (GeGLU (tanh) 52.1 -> 54.6).
        for (int j = 0; j < 2; ++j) vmovaps(B[j], magic);
        for (int j = 0; j < 2; ++j) vfmadd231ps(B[j], A[j], nl2e);  // magic + m
        for (int j = 0; j < 2; ++j) vaddps(A[j], A[j], inv_c1);     // A + 1 / c1
        for (int j = 0; j < 2; ++j) vsubps(C[j], B[j], magic);      // m
        for (int j = 0; j < 2; ++j) vfmadd231ps(A[j], C[j], ln2d);  // x + 1 / c1
        for (int j = 0; j < 2; ++j) vpermps(C[j], B[j], tbl);
        for (int j = 0; j < 2; ++j) vpslld(B[j], B[j], zmm ? 19 : 20);
        for (int j = 0; j < 2; ++j) vpaddd(B[j], B[j], C[j]);  // s
        for (int j = 0; j < 2; ++j) vfmadd213ps(B[j], A[j], up_c);  // d'
        for (int j = 0; j < 2; ++j) {
            if (zmm) vrcp14ps(A[j], B[j]);
            else vrcpps(A[j], B[j]);
        }
        for (int j = 0; j < 2; ++j) vmulps(G[j], G[j], A[j]);
        vpsrld(G[0], G[0], 16);
        if (zmm) vpternlogd(G[0], G[1], Zmm(24), 0xd8);  // high words from the odd vector
        else vpblendw(G[0], G[0], G[1], 0xaa);          // even words from the even vector, odd from the odd
        if (nt_) vmovntdq(ptr[out], G[0]);
        else if (zmm) vmovdqu32(ptr[out], Zmm(0));
        else vmovdqu(ptr[out], G[0]);
    }

    // The silu rows: 4 independent chains of 3 registers per iteration (ymm0-11 / zmm16-27),
    // emitted instruction by instruction interleaved so their latency chains overlap; the gate is
    // read again for the final product (f32: a memory operand) rather than held in a register.
    // Pairs of vectors are stored together (bf16: one packed store; with streaming stores every
    // pair is aligned as the row is, as U is even).
    void silu_rows(const GluKernelDesc& kd, const JitIo& io, const Reg64& a, const Reg64& x, const Reg64& y,
                   const Reg64& rows, const Reg64& idx, const Reg64& cnt, const Reg64& up, const Reg64& ct) {
        const bool zmm = io.zmm();
        const int vl = io.vlen(), U = 4, base = zmm ? 16 : 0;
        const int64_t n = kd.inner, nvec = n / vl;
        const int tail = static_cast<int>(n % vl);
        const DType xt = kd.x_dtype, yt = kd.y_dtype;
        const int xs = dtype_size(xt), ys = dtype_size(yt);
        const bool f32_out = yt == DType::f32;
        eo_ = xt == DType::bf16 && yt == DType::bf16;
        const Xmm glo = V(12);
        auto X = [&](int k) { return V(base + 3 * k); };
        auto S0 = [&](int k) { return V(base + 3 * k + 1); };
        auto S1 = [&](int k) { return V(base + 3 * k + 2); };
        auto cst = [&](int e) { return ptr[ct + e * 64]; };
        vmovups(glo, cst(kSGLo));

        // Shared by both blocks: the gate's k-th vector; whether vector k of a block of nv vectors
        // (counts[k] elements each) is in a full pair split even / odd (bf16 in and out,
        // JitIo::load2_eo); its load (the even vector of such a pair loads both, the odd none).
        auto gate = [&](int k) { return x + idx * xs + k * vl * xs; };
        auto eo_pair = [&](int nv, const int* counts, int k) {
            const int k0 = k & ~1;
            return eo_ && k0 + 1 < nv && counts[k0] == vl && counts[k0 + 1] == vl;
        };
        auto load_v = [&](int nv, const int* counts, int k, const Xmm& v, const Xmm& v_next, const RegExp& addr) {
            if (!eo_pair(nv, counts, k)) io.load(v, addr, xt, counts[k]);
            else if (k % 2 == 0) io.load2_eo(v, v_next, addr);  // k + 1's vector too
        };

        // cr: in block()'s main loop the three constants used most live in registers — magic, 1
        // and -log2 e — ymm13-15 on AVX2 (JitIo's scratch registers, unused by f32 pairs),
        // zmm28-30 on AVX-512; the rest are memory operands. Zen 3 loads at most two ymm a cycle,
        // and each constant operand is a load per vector. Reloaded per row: on AVX2 the tail's
        // stores use ymm14-15.
        const int creg0 = zmm ? 28 : 13, cmid = kSNegLog2e;
        auto in_reg = [&](bool cr, int e) { return cr && (e == kSMagic || e == cmid || e == kSOne); };
        auto creg = [&](int e) { return V(creg0 + (e == kSMagic ? 0 : e == cmid ? 1 : 2)); };
        auto with = [&](bool cr, int e, auto&& f) {
            if (in_reg(cr, e)) f(creg(e));
            else f(cst(e));
        };
        // AVX2: y = (g u) / d with VDIVPS instead of the reciprocal estimate and a Newton step
        // (one divide a vector; Zen 3's divider keeps up with the rest of the chain). AVX-512
        // keeps VRCP14PS + Newton: a zmm divide takes ~10+ cycles a vector on Intel cores.
        const bool div = !zmm;
        // nv vectors from element idx, counts[k] elements each (full but the last).
        auto block = [&](int nv, const int* counts, bool cr) {
            auto eo = [&](int k) { return eo_pair(nv, counts, k); };
            auto load = [&](int k, const Xmm& v, const Xmm& v_next, const RegExp& addr) {
                load_v(nv, counts, k, v, v_next, addr);
            };
            for (int k = 0; k < nv; ++k) load(k, X(k), X(k + 1 < 4 ? k + 1 : k), gate(k));
            // x = -t = max(g, -86) clamped to <= 86.9, then g + n ln2 (the polynomials are in -t).
            for (int k = 0; k < nv; ++k) vmaxps(X(k), X(k), glo);
            for (int k = 0; k < nv; ++k) with(cr, kSGClampHi, [&](const auto& o) { vminps(X(k), X(k), o); });
            for (int k = 0; k < nv; ++k) with(cr, kSMagic, [&](const auto& o) { vmovups(S0(k), o); });
            for (int k = 0; k < nv; ++k) with(cr, kSNegLog2e, [&](const auto& o) { vfmadd231ps(S0(k), X(k), o); });  // magic + n
            for (int k = 0; k < nv; ++k) with(cr, kSMagic, [&](const auto& o) { vsubps(S1(k), S0(k), o); });        // n
            for (int k = 0; k < nv; ++k) with(cr, kSLn2Hi, [&](const auto& o) { vfmadd231ps(X(k), S1(k), o); });  // x = -t
            for (int k = 0; k < nv; ++k) with(cr, kSLn2Lo, [&](const auto& o) { vfmadd231ps(X(k), S1(k), o); });
            for (int k = 0; k < nv; ++k) vpslld(S0(k), S0(k), 23);  // 2^n
            // p(t) by Horner in x: S1 = the highest coefficient, then one FMA per lower one.
            const int c0 = kSP6, nc = 6;
            for (int k = 0; k < nv; ++k) vmovups(S1(k), cst(c0));
            for (int i = 1; i < nc; ++i)
                for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(c0 + i));
            for (int k = 0; k < nv; ++k) with(cr, kSOne, [&](const auto& o) { vfmadd213ps(S1(k), X(k), o); });  // p = 1 + ...
            for (int k = 0; k < nv; ++k) with(cr, kSOne, [&](const auto& o) { vfmadd213ps(S1(k), S0(k), o); });  // d = 1 + 2^n p
            if (!div) {
                for (int k = 0; k < nv; ++k) {
                    if (zmm) vrcp14ps(S0(k), S1(k));
                    else vrcpps(S0(k), S1(k));
                }
                for (int k = 0; k < nv; ++k) with(cr, kSOne, [&](const auto& o) { vfnmadd213ps(S1(k), S0(k), o); });  // e = 1 - d r
                for (int k = 0; k < nv; ++k) vfmadd231ps(S0(k), S0(k), S1(k));  // r (1 + e)
            }
            for (int k = 0; k < nv; ++k) {  // X = max(g, -86): NaN kept (the second operand)
                if (xt == DType::f32 && counts[k] == vl) {
                    vmaxps(X(k), glo, ptr[gate(k)]);
                } else {
                    load(k, X(k), X(k + 1 < 4 ? k + 1 : k), gate(k));
                    if (!eo(k) || k % 2 == 1) {
                        if (eo(k)) vmaxps(X(k - 1), glo, X(k - 1));
                        vmaxps(X(k), glo, X(k));
                    }
                }
            }
            if (!div) for (int k = 0; k < nv; ++k) vmulps(X(k), X(k), S0(k));  // silu(g) = g r
            for (int k = 0; k < nv; ++k) {
                const RegExp u = up + idx * xs + k * vl * xs;
                // u's register: a free scratch one (with the divide, d is in S1 and r not used)
                auto T = [&](int j) { return div ? S0(j) : S1(j); };
                if (xt == DType::f32 && counts[k] == vl) {
                    vmulps(X(k), X(k), ptr[u]);
                } else {
                    load(k, T(k), T(k + 1 < 4 ? k + 1 : k), u);
                    if (!eo(k) || k % 2 == 1) {
                        if (eo(k)) vmulps(X(k - 1), X(k - 1), T(k - 1));
                        vmulps(X(k), X(k), T(k));
                    }
                }
            }
            if (div) for (int k = 0; k < nv; ++k) vdivps(X(k), X(k), S1(k));  // g u / d
            for (int k = 0; k < nv; k += 2) {
                const RegExp o = y + idx * ys + k * vl * ys;
                if (eo(k)) io.store2_eo(o, X(k), X(k + 1), nt_);
                else if (k + 1 < nv) io.store2(o, X(k), X(k + 1), yt, vl + counts[k + 1], nt_);
                else io.store(o, X(k), yt, counts[k], nt_ && counts[k] == vl);
            }
        };

        // bf16 output: the activation only needs ~2^-12 relative accuracy (the result is rounded
        // to 8 bits). One-part ln2, p = 1 + x q(x) with q of degree 2, d = (1 + 2^n) + (2^n x) q
        // (two short chains instead of a Horner tail), r = the reciprocal estimate without a
        // Newton step, y = (max(g, -86) u) r; the even / odd pairs round with + 0x8000 (ties away
        // from zero: every NaN here has zero low words, see the contract above).
        // (Tails of the bf16 -> bf16 rows and the f32 gate -> bf16 y rows: constants from memory.)
        auto block_bf16 = [&](int nv, const int* counts) {
            auto eo = [&](int k) { return eo_pair(nv, counts, k); };
            auto load = [&](int k, const Xmm& v, const Xmm& v_next, const RegExp& addr) {
                load_v(nv, counts, k, v, v_next, addr);
            };
            auto nx = [&](int k) { return k + 1 < 4 ? k + 1 : k; };
            for (int k = 0; k < nv; ++k) load(k, X(k), X(nx(k)), gate(k));
            for (int k = 0; k < nv; ++k) vmaxps(X(k), X(k), glo);
            for (int k = 0; k < nv; ++k) vminps(X(k), X(k), cst(kSGClampHi));
            for (int k = 0; k < nv; ++k) vmovups(S0(k), cst(kSMagic));
            for (int k = 0; k < nv; ++k) vfmadd231ps(S0(k), X(k), cst(kSNegLog2e));  // magic + n
            for (int k = 0; k < nv; ++k) vsubps(S1(k), S0(k), cst(kSMagic));  // n
            for (int k = 0; k < nv; ++k) vfmadd231ps(X(k), S1(k), cst(kSLn2));      // x = -t
            for (int k = 0; k < nv; ++k) vpslld(S0(k), S0(k), 23);                  // 2^n
            for (int k = 0; k < nv; ++k) vmovups(S1(k), cst(kSQ3));
            for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(kSQ3 + 1));
            for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(kSQ3 + 2));  // q
            for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(kSOne));  // p
            for (int k = 0; k < nv; ++k) vfmadd213ps(S0(k), S1(k), cst(kSOne));  // d
            for (int k = 0; k < nv; ++k) {                                         // r ~ 1 / d
                if (zmm) vrcp14ps(S1(k), S0(k));
                else vrcpps(S1(k), S0(k));
            }
            for (int k = 0; k < nv; ++k) {  // X = max(g, -86): NaN kept (the second operand)
                if (xt == DType::f32 && counts[k] == vl) {
                    vmaxps(X(k), glo, ptr[gate(k)]);
                } else {
                    load(k, X(k), X(nx(k)), gate(k));
                    if (!eo(k) || k % 2 == 1) {
                        if (eo(k)) vmaxps(X(k - 1), glo, X(k - 1));
                        vmaxps(X(k), glo, X(k));
                    }
                }
            }
            for (int k = 0; k < nv; ++k) {  // g u
                const RegExp u = up + idx * xs + k * vl * xs;
                if (xt == DType::f32 && counts[k] == vl) {
                    vmulps(X(k), X(k), ptr[u]);
                } else {
                    load(k, S0(k), S0(nx(k)), u);
                    if (!eo(k) || k % 2 == 1) {
                        if (eo(k)) vmulps(X(k - 1), X(k - 1), S0(k - 1));
                        vmulps(X(k), X(k), S0(k));
                    }
                }
            }
            for (int k = 0; k < nv; ++k) vmulps(X(k), X(k), S1(k));  // g u r
            for (int k = 0; k < nv; k += 2) {
                const RegExp o = y + idx * ys + k * vl * ys;
                if (eo(k) && zmm) {
                    io.store2_eo_away(o, X(k), X(k + 1), nt_);  // (VPBLENDW has no zmm form)
                } else if (eo(k)) {
                    vpaddd(X(k), X(k), cst(kSRound));
                    vpaddd(X(k + 1), X(k + 1), cst(kSRound));
                    vpsrld(X(k), X(k), 16);
                    vpblendw(X(k), X(k), X(k + 1), 0xaa);  // even words from k, odd from k + 1
                    if (nt_) vmovntdq(ptr[o], X(k));
                    else vmovdqu(ptr[o], X(k));
                } else if (k + 1 < nv) {
                    io.store2(o, X(k), X(k + 1), yt, vl + counts[k + 1], nt_);
                } else {
                    io.store(o, X(k), yt, counts[k], nt_ && counts[k] == vl);
                }
            }
        };
        // bf16 gate / up -> bf16 y, the main loop (AVX2 below; AVX-512 after): one even / odd pair (16 elements) at a
        // time, 4 registers a chain (ymm0-7) and every constant in a register (ymm8-15; ymm12 =
        // glo as elsewhere), so the gate is read once and no constant is a load:
        //   gm = max(-86, g) (NaN kept), G = gm u, xin = min(gm, 86) (NaN -> 86),
        //   y8 = magic8 + xin (-8 log2 e): m = round(-8 log2 e xin) in its low bits,
        //   x = xin + m ln2/8 (|x| <= ln2/16; the polynomial's variable is -t, as above),
        //   s = 2^(m/8) c0 c1 (256/257): the table entry of m mod 8 (VPERMPS reads the index's low
        //       3 bits) plus m << 20 (m div 8 lands in the exponent; the entries are pre-biased),
        //   d' = s (x + 1/c1) + 256/257 = (256/257) (1 + e^-g (1 + e1)),
        //   y' = G rcp(d') = (1 + 2^-8) silu(g) u (1 + e), bf16 = the high word of y' (truncation).
        // Truncating y' (1 + 2^-8) is within 2^-8 relative of y' like rounding to nearest (at most
        // one ulp from it); |e| <= 4.70e-4 (the exponential) + 1.5 2^-12 (the reciprocal
        // estimate) < 2^-10, so the contract above holds (asserted over every bf16 gate by
        // test_glu). Edge: a result within 2^-8 of FLT_MAX becomes inf. Per four vectors ~79
        // instructions instead of ~97 (no second read of the gate, no constant loads, the table
        // instead of the polynomial's two top terms, truncation instead of + 0x8000): 0.28 ->
        // 0.25 ns / element in L1 on Zen 3.
        // AVX-512 (zmm): the same with 16 table entries (2^(m/16), |x| <= ln2/32, the degree-1
        // polynomial within 1.17e-4, VRCP14PS within 2^-14), chains in zmm0-7, constants in
        // zmm16-23 and the high-word mask in zmm24 (VPBLENDW has no zmm form: VPTERNLOGD).
        const bool eo_fast = eo_ && !f32_out;
        const int cb = zmm ? 16 : 8;  // the constants' first register
        auto R = [&](int i) { return zmm ? Ymm(Zmm(i)) : Ymm(i); };
        auto load_consts = [&](int first, std::initializer_list<int> entries) {  // into consecutive registers
            for (int e : entries) vmovups(R(first++), cst(e));
        };
        auto fast_consts = [&] {
            load_consts(cb, {kSGClampHi8, zmm ? kSMagic16 : kSMagic8, zmm ? kSNeg16Log2e : kSNeg8Log2e, zmm ? kSLn2d16 : kSLn2d8,
                             kSGLo, zmm ? kSExp16 : kSExp8, kSUp, zmm ? kSInvC1z : kSInvC1});
            if (zmm) load_consts(24, {kSHiWords});
        };
        auto fast_pair = [&](int off) {  // off: elements from idx
            const Ymm hi = R(cb), lo = R(cb + 4), up_c = R(cb + 6);
            const Ymm G[2] = {R(0), R(4)}, A[2] = {R(1), R(5)};
            io.load2_eo(A[0], A[1], x + idx * 2 + off * 2);
            io.load2_eo(G[0], G[1], up + idx * 2 + off * 2);
            for (int c = 0; c < 2; ++c) vmaxps(A[c], lo, A[c]);  // gm: NaN kept (the second operand)
            for (int c = 0; c < 2; ++c) vmulps(G[c], G[c], A[c]);
            for (int c = 0; c < 2; ++c) vminps(A[c], A[c], hi);  // NaN -> 86
            fast_pair_tail(up_c, y + idx * 2 + off * 2);
        };

        // AVX2, f32 gate / up -> f32 y, the main loop: two vectors at a time, 3 registers a
        // chain (ymm0-5), the constants in ymm6-15 (ymm12 = glo), so the only loads are the gate
        // (twice: clamped for the exponential, then for the product), up and the upper clamp:
        //   xin = min(max(-86, g), 86) (NaN -> 86), y8 = magic8 + xin (-8 log2 e),
        //   x = xin + m ln2/8 (two-part ln2/8), s = 2^(m/8) c0 (table entry plus m << 20, as
        //   above), p = 1 + x (a1 + x (a2 + x a3)) ~ e^-x / c0 (minimax relative 0.31u on
        //   |x| <= ln2/16), d = 1 + s p, y = (max(-86, g) u) / d.
        // Per vector ~19 instructions instead of ~22, 4 loads instead of ~12 (Zen 3 loads two ymm a
        // cycle): 0.40 -> 0.355 ns / element in L1; measured error 2.2u -> 3.1u (the contract: 6u).
        // AVX-512: the same on zmm (chains zmm0-5, constants zmm16-25; VPERMPS reads 4 index bits,
        // the 16-lane table holds the 8 entries twice), with VRCP14PS and a Newton step instead
        // of the divide (a zmm divide is slow on Intel cores), y = (max(-86, g) u) r.
        // Xeon (one thread, 3 rounds, noisy): 4096x11008 30.0 / 31.5 / 34.9 -> 29.8 / 29.1 / 27.6 ms,
        // decode rows within the noise; all test_glu cases pass there.
        const bool f32_fast = xt == DType::f32 && f32_out;
        const int fb = zmm ? 16 : 6;  // the constants' first register
        auto f32_consts = [&] {
            load_consts(fb, {kSMagic8, kSNeg8Log2e, kSLn2d8Hi, kSLn2d8Lo, kSExpF, kSF3, kSGLo, kSF3 + 1, kSF3 + 2, kSOne});
        };
        auto f32_two = [&](int off) {  // vectors at off and off + vl (elements from idx)
            const Ymm magic = R(fb), nl2e = R(fb + 1), l2hi = R(fb + 2), l2lo = R(fb + 3), tbl = R(fb + 4), a3 = R(fb + 5),
                      lo = R(fb + 6), a2 = R(fb + 7), a1 = R(fb + 8), one = R(fb + 9);
            const Ymm X[2] = {R(0), R(3)}, S0[2] = {R(1), R(4)}, S1[2] = {R(2), R(5)};
            auto g = [&](int c) { return ptr[x + idx * 4 + (off + c * vl) * 4]; };
            auto u = [&](int c) { return ptr[up + idx * 4 + (off + c * vl) * 4]; };
            for (int c = 0; c < 2; ++c) vmaxps(X[c], lo, g(c));  // NaN kept here, then -> 86
            for (int c = 0; c < 2; ++c) vminps(X[c], X[c], cst(kSGClampHi8));
            for (int c = 0; c < 2; ++c) vmovaps(S0[c], magic);
            for (int c = 0; c < 2; ++c) vfmadd231ps(S0[c], X[c], nl2e);  // magic + m
            for (int c = 0; c < 2; ++c) vsubps(S1[c], S0[c], magic);     // m
            for (int c = 0; c < 2; ++c) vfmadd231ps(X[c], S1[c], l2hi);  // x
            for (int c = 0; c < 2; ++c) vfmadd231ps(X[c], S1[c], l2lo);
            for (int c = 0; c < 2; ++c) vpermps(S1[c], S0[c], tbl);
            for (int c = 0; c < 2; ++c) vpslld(S0[c], S0[c], 20);
            for (int c = 0; c < 2; ++c) vpaddd(S0[c], S0[c], S1[c]);  // s
            for (int c = 0; c < 2; ++c) vmovaps(S1[c], a3);
            for (int c = 0; c < 2; ++c) vfmadd213ps(S1[c], X[c], a2);
            for (int c = 0; c < 2; ++c) vfmadd213ps(S1[c], X[c], a1);
            for (int c = 0; c < 2; ++c) vfmadd213ps(S1[c], X[c], one);  // p
            for (int c = 0; c < 2; ++c) vfmadd213ps(S1[c], S0[c], one);  // d
            if (zmm) {
                for (int c = 0; c < 2; ++c) vrcp14ps(S0[c], S1[c]);
                for (int c = 0; c < 2; ++c) vfnmadd213ps(S1[c], S0[c], one);  // e = 1 - d r
                for (int c = 0; c < 2; ++c) vfmadd231ps(S0[c], S0[c], S1[c]);  // r (1 + e)
            }
            for (int c = 0; c < 2; ++c) vmaxps(X[c], lo, g(c));  // max(g, -86): NaN kept
            for (int c = 0; c < 2; ++c) vmulps(X[c], X[c], u(c));
            for (int c = 0; c < 2; ++c) {
                if (zmm) vmulps(X[c], X[c], S0[c]);
                else vdivps(X[c], X[c], S1[c]);
            }
            for (int c = 0; c < 2; ++c) {
                const Address o = ptr[y + idx * 4 + (off + c * vl) * 4];
                if (nt_) vmovntps(o, X[c]);
                else vmovups(o, X[c]);
            }
        };

        const bool fast = !f32_out;  // fast: the bf16-output silu
        // constants in registers in block()'s main loop (bf16 gate -> f32 y: the other f32 / eo
        // main loops hold their own; block_bf16 is left with the f32 gate -> bf16 y rows and tails)
        const bool main_cr = f32_out;

        int full[4] = {vl, vl, vl, vl};
        Label row_loop;
        L(row_loop);
        mov(up, n * xs);
        add(up, x);
        xor_(idx, idx);
        const int64_t nblk = nvec / U;
        if (nblk > 0) {
            if (eo_fast) fast_consts();
            else if (f32_fast) f32_consts();
            else if (main_cr)
                for (int e : {int(kSMagic), cmid, int(kSOne)}) vmovups(creg(e), cst(e));
            Label loop;
            mov(cnt, nblk);
            L(loop);
            // Software prefetch of both read streams (gate and up), one per line, past the row's
            // end into the next row's halves. Measured on Zen 3 (DRAM rows, one thread): f32 x 8 KiB
            // ahead +7-14%; bf16 x with bf16 y 4 KiB ahead +4-8% (2 KiB now, see
            // bf16_silu_prefetch_bytes); none for bf16 x with f32 y.
            if (eo_fast || xt == DType::f32) {
                const int dist = xt == DType::f32 ? kSiluPrefetchBytes : bf16_silu_prefetch_bytes(zmm);
                prefetch_streams(x, up, idx, xs, dist, U * vl * xs);
            }
            if (eo_fast) {  // two pairs an iteration (four measured the same)
                fast_pair(0);
                fast_pair(2 * vl);
            } else if (f32_fast) {
                f32_two(0);
                f32_two(2 * vl);
            } else if (fast) {
                block_bf16(U, full);
            } else {
                block(U, full, main_cr);
            }
            add(idx, U * vl);
            dec(cnt);
            jnz(loop);
        }
        const int rem = static_cast<int>(nvec % U);
        if (rem || tail) {
            int counts[4] = {vl, vl, vl, vl};
            if (tail) counts[rem] = tail;
            if (fast) block_bf16(rem + (tail ? 1 : 0), counts);
            else block(rem + (tail ? 1 : 0), counts, false);
        }
        add(x, ptr[a + offsetof(Args, ld_x)]);
        add(y, ptr[a + offsetof(Args, ld_y)]);
        dec(rows);
        jnz(row_loop);
    }

    bool nt_ = false, eo_ = false;
};

class JitGluKernel final : public GluKernel {
public:
    JitGluKernel(const GluKernelDesc& kd, Isa isa)
        : vlen_(isa >= Isa::avx512 ? 16 : 8), gen_(kd, isa, false), gen_nt_(kd, isa, true) {}

    void run(const GluDesc& d, const GluArgs& a, int64_t row_begin, int64_t row_end) const override {
        if (row_end <= row_begin) return;
        const int xs = dtype_size(d.x_dtype), ys = dtype_size(d.y_dtype);
        // Every streamed store is aligned to its width: a full f32 vector or a bf16 pair (one
        // register of 32 / 64 bytes), so the rows must start on the register width.
        const int64_t align = static_cast<int64_t>(vlen_) * 4;
        // Streaming stores: a large output, every row aligned, and not in place (y is x's memory).
        const bool nt =
            use_nt_stores(d.rows * d.inner * ys) && a.y != a.x && rows_aligned(a.y, d.ld_y, ys, align) && d.inner >= vlen_;
        Args args;
        args.x = static_cast<const char*>(a.x) + row_begin * d.ld_x * xs;
        args.y = static_cast<char*>(a.y) + row_begin * d.ld_y * ys;
        args.rows = row_end - row_begin;
        args.ld_x = d.ld_x * xs;
        args.ld_y = d.ld_y * ys;
        (nt ? gen_nt_ : gen_).fn(&args);
        if (nt) _mm_sfence();
    }

private:
    int vlen_;
    JitGlu gen_, gen_nt_;
};

}  // namespace

std::shared_ptr<const GluKernel> create_jit_glu(const GluKernelDesc& kd, Isa isa) {
    return std::make_shared<JitGluKernel>(kd, isa);
}

}  // namespace xk::detail
