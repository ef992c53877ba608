// xbyak generator of softmax rows for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16 stores at the
// avx512_bf16 level), specialised on the dtypes only: the row length is a runtime value (causal
// rows differ in length), tails use runtime lane masks (kernels/common/jit_io.hpp).
//
// One row = three generated passes and a few lines of C++:
//   max    m_x = max x over the visible columns (4 accumulators)
//   exp    e = 2^(c x - c m_x) = exp(scale x - m) (c = scale log2 e; the exp of ExpConst below)
//          into a per-thread fp32 row buffer (x now from L1/L2), per-lane sums; the tail
//          (runtime lane count) through the same code, its lanes past the row zeroed
//   C++    sum of the lanes in double, inv = 1 / sum
//   scale  y = e * inv from the buffer, the masked columns zeroed (streamed where y is)
// x is read from memory once and y written once (non-temporal stores for outputs larger than
// nt_store_threshold() when every row of y is aligned: the buffer, not y, holds the exps).
// f32 y, several rows in a call: a three-stage pipeline over two row buffers. One *fused* pass
// scales row r into y, computes row r + 1's exps and takes row r + 2's max (x from DRAM,
// prefetched 2 KiB ahead) over their common whole pairs of vectors (the rest by the plain
// passes): y's DRAM writes and x's reads overlap the exp's FMAs instead of following them.
// Zen 3, one core, 16384 x 4096 from DRAM, % of the copy bandwidth: 49 (Cody-Waite exp, max
// pass of its own) -> 61 (the table exp) -> 65 (the max in the fused pass). bf16 y: the fused
// pass scales y only where that was measured faster (bf16_fused_y); elsewhere it computes the
// exps and the max, and the scale pass writes y.
// bf16 y: the exp's polynomial is of degree 2 (within 2^-18, see consts). AVX2, bf16 x and y
// (eo): every pass works on whole pairs of vectors split even / odd (one load, a shift and an AND
// for 16 values; the exps of a pair kept in the buffer in that order; y stored by a word merge,
// ties away), the fused pass takes the max on the bf16 words (bf16_words_max). Zen 3, one core,
// 16384 x 4096 from DRAM, % of copy, 1 / 2 threads: 26 / 46 -> 35 / 57; in L1 0.42 -> 0.31 ns
// an element.
// A row's exps and sum are the same bits either way (every pass adds the exps to one per-lane
// sum in column order, continuing the fused pass's): results do not depend on how rows are
// split across threads.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/streaming.hpp"
#include "common/cpu_vendor.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/softmax/softmax.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;
using Xbyak::util::T_z;

struct Args {
    const void* x = nullptr;  // 0
    void* y = nullptr;        // 8
    float* e = nullptr;       // 16  fp32 buffer of round_up(n, 16) floats
    int64_t n = 0;            // 24  visible columns, >= 1
    float scale = 1;          // 32
    float neg_m = 0;          // 36
    float inv_sum = 0;        // 40
    float pad = 0;            // 44
    alignas(16) float out[16] = {};  // 48  max pass: the max in out[0]; exp pass: per-lane sums
    const void* next_x = nullptr;    // 112 scale pass: prefetched (a later row's x, or this one's)
    const float* e_prev = nullptr;   // 120 fused pass: the previous row's exps (scaled into y)
    const void* x_max = nullptr;     // 128 fused pass: the row after next, its max over n taken
    float max_out = 0;               // 136 fused pass: that max (int_max: in the two below)
    alignas(32) uint16_t smax[16] = {};  // 160 int_max: the bf16 words' signed max per word lane
    uint16_t umin[16] = {};              // 192 int_max: their unsigned min per word lane
};
static_assert(offsetof(Args, out) == 48 && offsetof(Args, next_x) == 112 && offsetof(Args, max_out) == 136 &&
                  offsetof(Args, smax) == 160 && offsetof(Args, umin) == 192,
              "Args layout");

// The max of bf16 data from its words' signed max s and unsigned min u (int_max): a bf16 word
// with the sign bit clear compares as an int16 like its value, and is above every word with the
// sign bit set; among negative values the unsigned order of the words is the reverse of the
// values'. So the max is s when s >= 0 (some value is not negative), else u (the negative value
// closest to zero). NaN words: a positive NaN wins s (the row is NaN anyway: its exp is NaN).
float bf16_words_max(const uint16_t* smax, const uint16_t* umin, int n) {
    int16_t s = INT16_MIN;
    uint16_t u = 0xffff;
    for (int i = 0; i < n; ++i) {
        s = std::max(s, static_cast<int16_t>(smax[i]));
        u = std::min(u, umin[i]);
    }
    const uint32_t bits = static_cast<uint32_t>(s >= 0 ? static_cast<uint16_t>(s) : u) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
using PassFn = void (*)(Args*);

enum class Pass { max, exp, scale, fused };

// The passes' exp (its argument is <= 0 up to rounding): exp(scale x - m) = 2^t with
// t = x c - m c, c = scale log2(e) (one FMA: x c exact inside it, m c rounded once, so the
// argument's error is ~2 |t| ulp, like t = scale x - m rounded; it grows with the distance from
// the row's max, where the results are small). Then, for a table of 2^(j/K) (K = 8 entries on
// AVX2, read by VPERMPS from a ymm; 16 on AVX-512):
//   t = max(t, -127)                     (NaN kept: the clamp takes the constant first)
//   s = t + 1.5 2^(23 - log2 K)          (rounds t to a multiple of 1/K: n = K t in s's low bits)
//   f = t - (s - magic)                  (exact, |f| <= 1/(2K))
//   p = 1 + f (a1 + f (a2 + f a3))       (minimax relative on |f| <= 1/(2K): 0.31u (K = 8),
//                                         0.02u (K = 16), with 2^(j/K)'s factor a0 in the table)
//   2^t = p * bits(T[n mod K] + (n << (23 - log2 K)))   (T[j] = bits(a0 2^(j/K)) - (j << ..):
//                                         the shift adds floor(n / K) to the exponent)
// Five operations on the FMA pipes a vector (against twelve for the Cody-Waite exp with its
// degree-5 polynomial this replaced: Zen 3, exp pass in L1, 0.345 -> 0.20 ns an element).
// t = -127 gives n = -127 K: the exponent field becomes 0 with j = 0, so the result is +0 exactly
// (-inf and anything below 2^-127 relative to the row's max: 0, as masked logits need); t in
// (-127, -126) gives values below FLT_MIN (not the exact ones; they are below the tolerance of
// any use). The bias -m_x c is rounded once: the max element's t is not 0 but the rounding error
// d of m_x c (|d| <= ulp(m_x c) / 2), a factor 2^d common to every exp of the row that the
// division by the sum cancels — but it also moves the clamp at t = -127 by d, so values up to
// 2^(-127 + |d|) of the row's max may come out 0, and 2^d must stay in range. Below |m_x c| = 2^24
// ulp(m_x c) <= 1, |d| <= 1/2: the flush stays below ~1.5 FLT_MIN. Rows with |m_x c| >= kWideMc
// (a row max of ~1.16e7 / scale and up) take the reference (JitSoftmaxKernel::run; without that
// bound {1e10, 0, 1, 2} gave NaN: 2^d overflowed; with 2^30, fuzz_llm found a y of 1.8e-35
// flushed to 0 in a row of max -2e8, |d| = 8).
constexpr float kWideMc = 0x1p24f;

enum ExpConst : int { kXLo, kXMagic, kXA3, kXA2, kXA1, kXOne, kXNegInf, kXTab, kXCount };
struct alignas(64) Consts {
    float v[kXCount][16];
};
const Consts& consts(bool zmm, bool deg2) {
    auto make = [](int k, bool d2) {
        Consts c{};
        // Relative minimax of 2^f on |f| <= 1/(2k): a0 (folded into the table), a1..a3 / a0.
        // Degree 3 (f32 y): 0.31u (k = 8), 0.02u (k = 16). Degree 2 (bf16 y, a3 = 0 unused):
        // 3.4e-6 = 2^-18.2 (k = 8), 4.2e-7 = 2^-21.2 (k = 16), far below bf16's half ulp (2^-9).
        double a0, a1, a2, a3;
        if (!d2) {
            a0 = k == 8 ? 0.99999998166726922 : 0.99999999885362345;
            a1 = k == 8 ? 0.69314722123947181 : 0.69314718310289591;
            a2 = k == 8 ? 0.24026407730476043 : 0.24023589963416631;
            a3 = k == 8 ? 0.055498901405350437 : 0.055502806681211866;
        } else {
            a0 = k == 8 ? 1.0000001100411327 : 1.0000000068789594;
            a1 = k == 8 ? 0.6933096882083002 : 0.6931878266054754;
            a2 = k == 8 ? 0.24019830390099942 : 0.24021946087127144;
            a3 = 0.0;
        }
        const int lg = k == 8 ? 3 : 4;
        const float vals[kXTab] = {-127.0f, 1.5f * static_cast<float>(1 << (23 - lg)), static_cast<float>(a3),
                                   static_cast<float>(a2), static_cast<float>(a1), 1.0f, -INFINITY};
        for (int i = 0; i < kXTab; ++i)
            for (float& v : c.v[i]) v = vals[i];
        for (int j = 0; j < 16; ++j) {
            const float f = static_cast<float>(std::exp2(static_cast<double>(j % k) / k) * a0);
            uint32_t b;
            std::memcpy(&b, &f, 4);
            b -= static_cast<uint32_t>(j % k) << (23 - lg);
            std::memcpy(&c.v[kXTab][j], &b, 4);
        }
        return c;
    };
    static const Consts c8 = make(8, false), c16 = make(16, false), d8 = make(8, true), d16 = make(16, true);
    return deg2 ? (zmm ? d16 : d8) : (zmm ? c16 : c8);
}

class JitSoftmaxPass : public JitGenerator {
public:
    JitSoftmaxPass(const SoftmaxKernelDesc& kd, Isa isa, Pass pass, bool nt, bool with_y = true) : JitGenerator(isa) {
        const Reg64 a = abi_param1, src = rsi, dst = rdx, cnt = rcx, idx = r8, rem = r9, tbl = r10, pf = r11,
                    cx_reg = rbx, eprev = r12, yrow = r13;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        const int vl = io.vlen(), shift = vl == 16 ? 4 : 3;
        const DType xt = kd.x_dtype, yt = kd.y_dtype;
        const int xs = dtype_size(xt), ys = dtype_size(yt);
        const int unroll = pass == Pass::exp ? 3 : 4;

        preamble({rbx, r12, r13});
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        mov(cnt, ptr[a + offsetof(Args, n)]);
        mov(rem, cnt);
        and_(rem, vl - 1);
        shr(cnt, shift);
        xor_(idx, idx);

        // Register use: the value of unrolled vector k in V(k), accumulators V(8..11) (max pass);
        // constants V(12), V(13); the io scratch V(14), V(15). The exp pass: see lean_exp (its
        // tail: the value in V(0), exp scratch V(1), V(2), the sum in V(8)); the fused pass: there.
        auto acc = [&](int k) { return V(8 + k); };
        const Xmm c0 = V(12), c1 = V(13);
        const int tshift = vl == 16 ? 19 : 20;  // n << tshift adds floor(n / K) to the exponent
        // bf16 y: a degree-2 polynomial (one FMA a vector fewer; see consts). AVX2 with bf16 x and
        // y: whole pairs of vectors in even / odd order (eo, below).
        const bool deg2 = yt == DType::bf16;
        const bool eo = vl == 8 && xt == DType::bf16 && yt == DType::bf16;
        const Consts& cs = consts(vl == 16, deg2);
        // eo without y: the fused pass takes the max of the row after next on its bf16 words (two
        // integer operations a pair instead of the split and two VMAXPS; bf16_words_max).
        int_max = pass == Pass::fused && eo && !with_y;
        auto cx = [&](int e) { return ptr[cx_reg + e * 64]; };
        // The exp (see ExpConst) of t = c x - m c, x in X(q) = V(3q) for q < nq, instruction by
        // instruction interleaved; the result in X(q). Scratch S0(q) = V(3q+1), S1(q) = V(3q+2);
        // c and -m c in c0, c1, magic and the table in V(10), V(11), the lower clamp and 1 in lo /
        // one (a register or a memory operand), a1..a3 memory operands (cx_reg).
        auto exp_block = [&](int nq, const Xmm& lo, const Operand& one) {
            auto X = [&](int q) { return V(3 * q); };
            auto S0 = [&](int q) { return V(3 * q + 1); };
            auto S1 = [&](int q) { return V(3 * q + 2); };
            for (int q = 0; q < nq; ++q) vfmadd213ps(X(q), c0, c1);  // t = c x - m c
            for (int q = 0; q < nq; ++q) vmaxps(X(q), lo, X(q));     // >= -127, NaN kept
            for (int q = 0; q < nq; ++q) vaddps(S0(q), X(q), V(10));  // magic + n / K
            for (int q = 0; q < nq; ++q) vsubps(S1(q), S0(q), V(10));
            for (int q = 0; q < nq; ++q) vsubps(X(q), X(q), S1(q));   // f
            if (deg2) {
                for (int q = 0; q < nq; ++q) vmovups(S1(q), cx(kXA2));
            } else {
                for (int q = 0; q < nq; ++q) vmovups(S1(q), cx(kXA3));
                for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), cx(kXA2));
            }
            for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), cx(kXA1));
            for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), one);  // p
            for (int q = 0; q < nq; ++q) vpslld(X(q), S0(q), tshift);
            for (int q = 0; q < nq; ++q) {  // T[n mod K]
                const int r = S0(q).getIdx();
                if (vl == 16) vpermps(Zmm(r), Zmm(r), Zmm(11));
                else vpermps(Ymm(r), Ymm(r), Ymm(11));
            }
            for (int q = 0; q < nq; ++q) vpaddd(S0(q), S0(q), X(q));     // 2^(n / K) a0
            for (int q = 0; q < nq; ++q) vmulps(X(q), S1(q), S0(q));
        };
        // Loads nq vectors at src + idx + q vectors, their exps stored to dst + idx + q vectors and
        // added to V(9) in q order (the order of every pass, so a row's sum does not depend on how
        // it is cut).
        auto lean_exp = [&](int nq, const Xmm& lo, const Operand& one, bool pair_eo = false) {
            if (pair_eo)  // (nq == 2: the even elements in V(0), the odd ones in V(3))
                io.load2_eo(V(0), V(3), src + idx * xs);
            else
                for (int q = 0; q < nq; ++q) io.load(V(3 * q), src + idx * xs + q * vl * xs, xt, vl);
            exp_block(nq, lo, one);
            for (int q = 0; q < nq; ++q) {
                vmovups(ptr[dst + idx * 4 + q * vl * 4], V(3 * q));
                vaddps(V(9), V(9), V(3 * q));
            }
        };
        if (pass == Pass::fused) {
            // exp of this row (x, e, -c m_x; the sum out), y = e_prev * inv_sum of the previous one
            // and the max of the row after next (x_max; max_out), over n elements (a multiple of 2
            // vectors), two vectors an iteration. Registers: chains V(0..5), the clamp V(6), the
            // max V(7), inv_sum V(8), the sum V(9), the exp's V(10..13); io scratch V(14), V(15).
            // eo without y: the 0xffff0000 mask in V(8), the max's unsigned word min in V(15).
            mov(src, ptr[a + offsetof(Args, x)]);
            mov(dst, ptr[a + offsetof(Args, e)]);
            if (with_y) {
                mov(eprev, ptr[a + offsetof(Args, e_prev)]);
                mov(yrow, ptr[a + offsetof(Args, y)]);
            }
            mov(pf, ptr[a + offsetof(Args, x_max)]);
            mov(cx_reg, reinterpret_cast<uintptr_t>(&cs));
            // The max (int_max: the signed word max in V(7), the unsigned word min in V(15)).
            if (int_max) {
                vpcmpeqd(V(15), V(15), V(15));
                vpsllw(V(7), V(15), 15);  // 0x8000: the lowest int16
            } else {
                vmovups(V(7), cx(kXNegInf));
            }
            vbroadcastss(c0, ptr[a + offsetof(Args, scale)]);
            vbroadcastss(c1, ptr[a + offsetof(Args, neg_m)]);
            if (with_y) vbroadcastss(V(8), ptr[a + offsetof(Args, inv_sum)]);
            vmovups(V(6), cx(kXLo));
            vmovups(V(10), cx(kXMagic));
            vmovups(V(11), cx(kXTab));
            vmovups(V(9), ptr[a + offsetof(Args, out)]);  // the sum so far (zero: a row's start)
            if (eo && !with_y) io.set_eo_regs(8, -1);     // the 0xffff0000 mask in V(8)
            shr(cnt, 1);  // (cnt holds whole vectors)
            Label l_loop, l_end;
            test(cnt, cnt);
            jz(l_end, T_NEAR);
            L(l_loop);
            // The row after next: its max, with x from DRAM (its lines prefetched 2 KiB ahead of
            // the loads: the hardware prefetcher stops at each 4 KiB page).
            for (int line = 0; line < 2 * vl * xs; line += 64) prefetcht0(ptr[pf + idx * xs + line + 2048]);
            if (int_max) {  // the max of the row after next (x from DRAM), on the bf16 words
                vmovdqu(V(0), ptr[pf + idx * xs]);
                vpmaxsw(V(7), V(7), V(0));
                vpminuw(V(15), V(15), V(0));
            }
            for (int q = 0; q < 2 && !int_max; ++q) {  // the max of the row after next (x from DRAM)
                if (xt == DType::f32) {
                    vmaxps(V(7), V(7), ptr[pf + idx * xs + q * vl * xs]);
                } else {
                    io.load(V(3 * q), pf + idx * xs + q * vl * xs, xt, vl);
                    vmaxps(V(7), V(7), V(3 * q));
                }
            }
            lean_exp(2, V(6), cx(kXOne), eo);
            if (with_y) {
                for (int q = 0; q < 2; ++q) vmulps(V(3 * q), V(8), ptr[eprev + idx * 4 + q * vl * 4]);
                if (eo) io.store2_eo_away(yrow + idx * ys, V(0), V(3), nt);
                else io.store2(yrow + idx * ys, V(0), V(3), yt, 2 * vl, nt);
            }
            add(idx, 2 * vl);
            dec(cnt);
            jnz(l_loop, T_NEAR);
            L(l_end);
            io.clear_eo_regs();
            vmovups(ptr[a + offsetof(Args, out)], V(9));
            if (int_max) {
                vmovdqu(ptr[a + offsetof(Args, smax)], Ymm(7));
                vmovdqu(ptr[a + offsetof(Args, umin)], Ymm(15));
            } else {
                io.hmax(V(7));
                vmovss(ptr[a + offsetof(Args, max_out)], Xmm(7));
            }
            postamble();
            fn = finalize<PassFn>();
            return;
        }
        switch (pass) {
            case Pass::max:
                mov(src, ptr[a + offsetof(Args, x)]);
                mov(rax, reinterpret_cast<uintptr_t>(&cs));
                vmovups(c0, ptr[rax + kXNegInf * 64]);  // -inf
                for (int k = 0; k < unroll; ++k) vmovaps(acc(k), c0);
                break;
            case Pass::exp:
                mov(src, ptr[a + offsetof(Args, x)]);
                mov(dst, ptr[a + offsetof(Args, e)]);
                vbroadcastss(c0, ptr[a + offsetof(Args, scale)]);
                vbroadcastss(c1, ptr[a + offsetof(Args, neg_m)]);
                mov(cx_reg, reinterpret_cast<uintptr_t>(&cs));
                vmovups(V(9), ptr[a + offsetof(Args, out)]);  // the sum so far (see lean_exp)
                vmovups(V(10), cx(kXMagic));
                vmovups(V(11), cx(kXTab));
                vmovups(V(14), cx(kXLo));
                vmovups(V(15), cx(kXOne));
                break;
            case Pass::fused:  // (generated above)
                break;
            case Pass::scale:
                mov(pf, ptr[a + offsetof(Args, next_x)]);
                mov(src, ptr[a + offsetof(Args, e)]);
                mov(dst, ptr[a + offsetof(Args, y)]);
                vbroadcastss(c0, ptr[a + offsetof(Args, inv_sum)]);
                break;
        }

        // One vector at element idx + off; tail: `rem` lanes (runtime). The scale pass stores the
        // vectors of the unrolled loop in pairs (k odd stores k-1 and k); unroll_now = vectors in
        // the current sequence.
        int unroll_now = 1;
        auto body = [&](int k, int off, bool tail) {
            const Xmm v = V(k);
            switch (pass) {
                case Pass::max:
                    if (tail) {
                        io.load_rt(v, src + idx * xs + off * xs, xt, rem);
                        io.lane_mask_rt(c1, rem);
                        if (io.zmm()) vblendmps(v | k1, c0, v);  // lanes >= rem: -inf
                        else vblendvps(v, c0, v, c1);
                        vmaxps(acc(k), acc(k), v);
                    } else if (xt == DType::f32) {
                        vmaxps(acc(k), acc(k), ptr[src + idx * xs + off * xs]);
                    } else {
                        io.load(v, src + idx * xs + off * xs, xt, vl);
                        vmaxps(acc(k), acc(k), v);
                    }
                    break;
                case Pass::exp: {
                    if (!tail) {
                        // Full vectors: the lean exp on the loop's vectors (k == 0 emits them all).
                        if (k != 0) break;
                        lean_exp(unroll_now, V(14), V(15));
                        break;
                    }
                    // The tail (runtime lane count; the io scratch is V(14), V(15), so the clamp and 1
                    // are reloaded): the same exp, lanes >= rem zeroed (the buffer is padded: the full
                    // vector is stored).
                    io.load_rt(V(0), src + idx * xs + off * xs, xt, rem);
                    vmovups(V(4), cx(kXLo));
                    vmovups(V(5), cx(kXOne));
                    exp_block(1, V(4), V(5));
                    io.lane_mask_rt(V(3), rem);
                    if (io.zmm()) vmovaps(V(0) | k1 | T_z, V(0));
                    else vandps(V(0), V(0), V(3));
                    vmovups(ptr[dst + idx * 4 + off * 4], V(0));
                    vaddps(acc(k), acc(k), V(0));
                    break;
                }
                case Pass::fused:
                    break;
                case Pass::scale:
                    // The next row's x is fetched while this one is scaled from the cache.
                    if (!tail)
                        for (int line = (off * xs + 63) / 64 * 64; line < (off + vl) * xs; line += 64)
                            prefetcht0(ptr[pf + idx * xs + line]);
                    vmulps(v, c0, ptr[src + idx * 4 + off * 4]);
                    if (tail) io.store_rt(dst + idx * ys + off * ys, v, yt, rem);
                    else if (k % 2 == 1) io.store2(dst + idx * ys + (off - vl) * ys, V(k - 1), v, yt, 2 * vl, nt);
                    else if (k + 1 == unroll_now) io.store(dst + idx * ys + off * ys, v, yt, vl, nt);
                    break;
            }
        };

        // eo (AVX2, bf16 x and y): whole pairs of vectors first, the exps of a pair stored in even /
        // odd order (the even elements' vector, then the odd ones'), summed even then odd; the scale
        // pass (and a fused pass with y) reads them so and stores y by one word merge, rounded to
        // nearest with ties away (store2_eo_away: its NaN precondition holds, every NaN here comes
        // from bf16 x or is the default NaN). Every pass starts at a multiple of a pair, so a
        // column's place in the buffer depends only on its column, not on which pass made it. The
        // columns past a row's last whole pair take the code below (element order, ties to even).
        if (eo && (pass == Pass::exp || pass == Pass::scale)) {
            if (pass == Pass::exp) io.set_eo_regs(7, -1);
            else io.set_eo_regs(-1, 7);
            const int per = pass == Pass::scale ? 2 : 1;  // pairs an iteration
            for (int pp = per; pp >= 1; --pp) {
                Label l_loop, l_skip;
                cmp(cnt, 2 * pp);
                jb(l_skip, T_NEAR);
                L(l_loop);
                if (pass == Pass::scale) prefetcht0(ptr[pf + idx * xs]);
                for (int p = 0; p < pp; ++p) {
                    const int off = p * 2 * vl;
                    if (pass == Pass::exp) {
                        io.load2_eo(V(0), V(3), src + idx * xs + off * xs);
                        exp_block(2, V(14), V(15));
                        vmovups(ptr[dst + idx * 4 + off * 4], V(0));
                        vaddps(V(9), V(9), V(0));
                        vmovups(ptr[dst + idx * 4 + (off + vl) * 4], V(3));
                        vaddps(V(9), V(9), V(3));
                    } else {
                        const Xmm e0 = V(3 * p), e1 = V(3 * p + 1);
                        vmulps(e0, c0, ptr[src + idx * 4 + off * 4]);
                        vmulps(e1, c0, ptr[src + idx * 4 + (off + vl) * 4]);
                        io.store2_eo_away(dst + idx * ys + off * ys, e0, e1, nt);
                    }
                }
                add(idx, pp * 2 * vl);
                sub(cnt, pp * 2);
                cmp(cnt, 2 * pp);
                jae(l_loop, T_NEAR);
                L(l_skip);
            }
            io.clear_eo_regs();
        }
        Label l_unrolled, l_single, l_tail, l_done;
        L(l_unrolled);
        cmp(cnt, unroll);
        jb(l_single);
        unroll_now = unroll;
        for (int k = 0; k < unroll; ++k) body(k, k * vl, false);
        unroll_now = 1;
        add(idx, unroll * vl);
        sub(cnt, unroll);
        jmp(l_unrolled);
        L(l_single);
        test(cnt, cnt);
        jz(l_tail);
        body(0, 0, false);
        add(idx, vl);
        dec(cnt);
        jmp(l_single);
        L(l_tail);
        if (pass == Pass::exp) vmovaps(acc(0), V(9));  // (the tail's io scratch is V(14), V(15))
        test(rem, rem);
        jz(l_done);
        body(0, 0, true);
        L(l_done);

        if (pass == Pass::max) {
            for (int k = 1; k < unroll; ++k) vmaxps(acc(0), acc(0), acc(k));
            io.hmax(acc(0));
            vmovss(ptr[a + offsetof(Args, out)], Xmm(acc(0).getIdx()));
        } else if (pass == Pass::exp) {
            vmovups(ptr[a + offsetof(Args, out)], acc(0));
        }
        postamble();
        fn = finalize<PassFn>();
    }
    PassFn fn = nullptr;
    bool int_max = false;  // fused pass: the max as Args::smax / umin (bf16_words_max), not max_out

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
};

std::atomic<int> g_bf16_fused_y{-1};

// bf16 y: whether the fused pass scales y as well (measured, 16384 x 4096, % of copy, 1 / 2
// threads): on the Xeon (avx512_bf16, VCVTNE2PS2BF16 rounds) 42 / 42 with the separate scale
// pass -> 51 / 49 with y in the fused loop; on Zen 3 (AVX2) 30 / 43 -> 19 / 30: its streamed
// bf16 stores inside that loop ran 1.5x slower (with regular stores, or with whole lines an
// iteration, still slower than apart). So: Intel at avx512_bf16 and up; elsewhere the fused pass
// takes only the exps and the max. Not measured on a Zen 4 (AVX-512 BF16) yet.
bool bf16_fused_y(Isa isa) {
    const int o = g_bf16_fused_y.load(std::memory_order_relaxed);
    if (o >= 0) return o != 0;
    const bool intel = cpu_is_intel();
    return intel && isa >= Isa::avx512_bf16;
}

class JitSoftmaxKernel final : public SoftmaxKernel {
public:
    JitSoftmaxKernel(const SoftmaxKernelDesc& kd, Isa isa)
        : vlen_(isa >= Isa::avx512 ? 16 : 8),
          isa_(isa),
          max_(kd, isa, Pass::max, false),
          exp_(kd, isa, Pass::exp, false),
          scale_(kd, isa, Pass::scale, false),
          scale_nt_(kd, isa, Pass::scale, true),
          fused_y_(kd, isa, Pass::fused, false, true),
          fused_y_nt_(kd, isa, Pass::fused, true, true) {
        if (kd.y_dtype == DType::bf16) fused_exp_ = std::make_unique<const JitSoftmaxPass>(kd, isa, Pass::fused, false, false);
    }

    void run(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end) const override {
        const int xs = dtype_size(d.x_dtype), ys = dtype_size(d.y_dtype);
        const bool fy = d.y_dtype == DType::f32 || bf16_fused_y(isa_);  // y scaled in the fused pass
        // Every streamed store is aligned to its width: a full f32 vector or a bf16 pair (one
        // register of 32 / 64 bytes), so the rows must start on the register width.
        const int64_t align = static_cast<int64_t>(vlen_) * 4;
        const bool nt = use_nt_stores(d.rows * d.cols * ys) && rows_aligned(a.y, d.ld_y, ys, align);
        // Two exp buffers: row r's exps are scaled into y while row r + 1's are computed.
        thread_local std::vector<float> buffer;
        const size_t stride = static_cast<size_t>((d.cols + 15) / 16 * 16);
        if (buffer.size() < 2 * stride) buffer.resize(2 * stride);
        const int64_t pair = 2 * static_cast<int64_t>(vlen_);
        auto xrow = [&](int64_t r) { return static_cast<const char*>(a.x) + r * d.ld_x * xs; };
        auto yrow = [&](int64_t r) { return static_cast<char*>(a.y) + r * d.ld_y * ys; };
        auto ebuf = [&](int64_t r) { return buffer.data() + static_cast<size_t>(r - row_begin) % 2 * stride; };
        // exp(scale x - m) = 2^(c x - c m_x), c = scale log2(e) (see ExpConst). A row whose
        // |c m_x| is not below kWideMc (|scale m_x| >= 2^24 / log2(e) ~ 1.16e7) is "wide": the
        // reference computes it; so does every row when c itself overflows.
        const float c = d.scale * 1.44269504088896341f;
        if (!std::isfinite(c)) {
            softmax_reference(d, a, row_begin, row_end);
            return;
        }
        Args args;
        args.scale = c;
        // Row r's -c m_x in neg[r % 2]; set_max returns false for a wide row.
        float neg[2] = {0, 0};
        auto set_max = [&](int64_t r, float m) {
            const float nm = -(m * c);
            neg[(r - row_begin) % 2] = nm;
            return !(std::isfinite(m) && !(std::fabs(nm) < kWideMc));
        };
        // The max of columns [from, from + n) of row r (the max pass, from memory).
        auto max_range = [&](int64_t r, int64_t from, int64_t n) {
            args.x = xrow(r) + from * xs;
            args.n = n;
            max_.fn(&args);
            return args.out[0];
        };
        // exp of row r from element `from` on (standalone pass), continuing the per-lane sums in
        // `sums`; returns 1 / sum.
        auto exp_rest = [&](int64_t r, int64_t from, const float* sums) {
            const int64_t v = softmax_visible(d, a, r);
            std::memcpy(args.out, sums, sizeof(args.out));
            if (v > from) {
                args.x = xrow(r) + from * xs;
                args.e = ebuf(r) + from;
                args.n = v - from;
                args.neg_m = neg[(r - row_begin) % 2];
                exp_.fn(&args);
            }
            double sum = 0.0;
            for (int j = 0; j < vlen_; ++j) sum += args.out[j];
            return static_cast<float>(1.0 / sum);
        };
        const float zeros[16] = {};
        // A three-stage pipeline over the rows: at row r, the fused pass scales row r into y,
        // computes row r + 1's exps and takes row r + 2's max (its x from DRAM, with loads that
        // overlap the FMAs), over their common columns; the plain passes do the rest.
        // v / vn: the visible columns of rows r / r + 1 that the passes compute (0 for a wide row);
        // row r's exps are in ebuf(r) and 1 / sum in inv (v > 0); row r + 1's max is known.
        float inv = 0;
        int64_t v = softmax_visible(d, a, row_begin);
        bool wide = false;
        if (v > 0) {
            if (set_max(row_begin, max_range(row_begin, 0, v))) inv = exp_rest(row_begin, 0, zeros);
            else wide = true, v = 0;
        }
        int64_t vn = row_begin + 1 < row_end ? softmax_visible(d, a, row_begin + 1) : 0;
        bool wide_next = false;
        if (vn > 0 && !set_max(row_begin + 1, max_range(row_begin + 1, 0, vn))) wide_next = true, vn = 0;
        for (int64_t r = row_begin; r < row_end; ++r) {
            const int64_t v2 = r + 2 < row_end ? softmax_visible(d, a, r + 2) : 0;
            int64_t common = 0;
            if (vn > 0 && (v > 0 || !fy)) {
                common = fy ? std::min(v, vn) : vn;
                if (v2 > 0) common = std::min(common, v2);
                common = common / pair * pair;
            }
            float m2 = -INFINITY;
            float sums[16] = {};
            if (common > 0) {
                args.x = xrow(r + 1);
                args.e = ebuf(r + 1);
                args.n = common;
                args.neg_m = neg[(r + 1 - row_begin) % 2];
                args.e_prev = ebuf(r);
                args.y = yrow(r);
                args.inv_sum = inv;
                args.x_max = xrow(v2 > 0 ? r + 2 : r + 1);  // (without a row r + 2: read, not used)
                std::memset(args.out, 0, sizeof(args.out));
                const JitSoftmaxPass& fp = fy ? (nt ? fused_y_nt_ : fused_y_) : *fused_exp_;
                fp.fn(&args);
                std::memcpy(sums, args.out, sizeof(sums));
                if (v2 > 0) m2 = fp.int_max ? bf16_words_max(args.smax, args.umin, 16) : args.max_out;
            }
            // Row r + 2's max (the rest of it) before row r + 1's exp pass overwrites args.out.
            bool wide2 = false;
            int64_t vn2 = v2;
            if (v2 > 0) {
                const int64_t from = std::min(common, v2);
                if (v2 > from) m2 = std::max(m2, max_range(r + 2, from, v2 - from));
                if (!set_max(r + 2, m2)) wide2 = true, vn2 = 0;
            }
            float inv_next = 0;
            if (vn > 0) inv_next = exp_rest(r + 1, common, sums);
            if (wide) {
                softmax_reference(d, a, r, r + 1);
            } else {
                const int64_t done = fy ? common : 0;  // y columns the fused pass wrote
                if (v > done) {  // the rest of row r's y
                    args.e = ebuf(r) + done;
                    args.y = yrow(r) + done * ys;
                    args.n = v - done;
                    args.inv_sum = inv;
                    args.next_x = xrow(r + 3 < row_end ? r + 3 : r) + done * xs;  // max_range(r + 3) next
                    (nt ? scale_nt_ : scale_).fn(&args);
                }
                if (v < d.cols) zero_fill(yrow(r) + v * ys, static_cast<size_t>(d.cols - v) * ys, nt);
            }
            v = vn;
            wide = wide_next;
            inv = inv_next;
            vn = vn2;
            wide_next = wide2;
        }
        if (nt) _mm_sfence();
    }

private:
    int vlen_;
    Isa isa_;
    JitSoftmaxPass max_, exp_, scale_, scale_nt_;
    JitSoftmaxPass fused_y_, fused_y_nt_;                  // the fused pass scaling y
    std::unique_ptr<const JitSoftmaxPass> fused_exp_;      // without y (bf16 y only)
};

}  // namespace

void softmax_set_bf16_fused_y(int mode) { g_bf16_fused_y.store(mode < 0 ? -1 : (mode ? 1 : 0), std::memory_order_relaxed); }

std::shared_ptr<const SoftmaxKernel> create_jit_softmax(const SoftmaxKernelDesc& kd, Isa isa) {
    return std::make_shared<JitSoftmaxKernel>(kd, isa);
}

}  // namespace xk::detail
