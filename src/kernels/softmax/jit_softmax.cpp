// xbyak generator of softmax rows for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16 stores at the
// avx512_bf16 level), specialised on the dtypes only: the row length is a runtime value (causal
// rows differ in length), tails use runtime lane masks (kernels/common/jit_io.hpp).
//
// One row = three generated passes and a few lines of C++:
//   max    m_x = max x over the visible columns (from memory; 4 accumulators)
//          m = scale * m_x (= max of the fp32 scale * x: a positive scale is monotonic)
//   exp    e = exp(scale * x - m) into a per-thread fp32 row buffer (x now from L1/L2),
//          per-lane sums: full vectors through the pass's own exp (ExpConst below: three
//          vectors interleaved, four constants in registers, no upper clamp or flush compare),
//          the tail through the shared exp of kernels/common/jit_activation.hpp. Zen 3, one core,
//          16384 x 4096 from DRAM: this pass was ~2/3 of the time with the shared exp on two
//          vectors (its constants are all memory operands: Zen 3 loads two ymm a cycle); with
//          its own, f32 9.1 -> 12.1 GB/s and bf16 5.1 -> 7.2 GB/s.
//   C++    sum of the lanes in double, inv = 1 / sum
//   scale  y = e * inv from the buffer, the masked columns zeroed
// x is read from memory once and y written once (non-temporal stores for outputs larger than
// nt_store_threshold() when every row of y is aligned: the buffer, not y, holds the exps).
// f32 y, several rows in a call: the passes are pipelined over two row buffers — max(r + 1),
// then one *fused* pass computes exp(r + 1) and scales row r into y over their common whole
// pairs of vectors (the rest by the plain passes), so y's DRAM writes overlap the exp's FMAs
// instead of following them (Zen 3, 16384 x 4096 f32: 12.1 -> 17.4 GB/s on one core, 20.7 ->
// 34.1 on two). bf16 y keeps the separate passes: its rounding in the fused loop cost more
// than the overlap gained (7.4 -> 6.5 GB/s). A row's exps and sum are the same bits either way
// (every pass adds the exps to one per-lane sum in column order, continuing the fused pass's):
// results do not depend on how rows are split across threads.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/streaming.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_activation.hpp"
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
    const void* next_x = nullptr;    // 112 scale / fused pass: prefetched (the next row, or this one)
    const float* e_prev = nullptr;   // 120 fused pass: the previous row's exps (scaled into y)
};
static_assert(offsetof(Args, out) == 48 && offsetof(Args, next_x) == 112, "Args layout");
using PassFn = void (*)(Args*);

enum class Pass { max, exp, scale, fused };

// The exp pass's own exp (its argument x' = scale x - m is <= 0 up to rounding): the exp of
// kernels/common/jit_activation.hpp (Cody-Waite two-part ln 2, Cephes polynomial, 2^(n-1) * 2)
// without its upper clamp (x' <= 0) and without its flush-to-zero compare: the lower clamp sits
// at -87.6, where n = round(x' log2 e) = -126 makes the scale field n + 126 zero, so every x' <
// -86.98 (results under ~FLT_MIN) gives exactly 0 by construction (-inf: 0, as the masked logits
// of attention need); NaN stays NaN (the clamp takes the constant first).
enum ExpConst : int { kXLo, kXMagic, kXLog2e, kXLn2Hi, kXLn2Lo, kXP5, kXP4, kXP3, kXP2, kXP1, kXP0, kXOne, kXNegInf, kXCount };
struct alignas(64) Consts {
    float v[kXCount][16];
};
const Consts& consts() {
    static const Consts c = [] {
        Consts c{};
        const float vals[kXCount] = {-87.6f, 12582912.0f + 126.0f, 1.44269504088896341f, 0.693359375f, -2.12194440e-4f,
                                     1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                                     1.6666665459e-1f, 5.0000001201e-1f, 1.0f, -INFINITY};
        for (int i = 0; i < kXCount; ++i)
            for (float& v : c.v[i]) v = vals[i];
        return c;
    }();
    return c;
}

class JitSoftmaxPass : public JitGenerator {
public:
    JitSoftmaxPass(const SoftmaxKernelDesc& kd, Isa isa, Pass pass, bool nt) : JitGenerator(isa) {
        const Reg64 a = abi_param1, src = rsi, dst = rdx, cnt = rcx, idx = r8, rem = r9, tbl = r10, act_tbl = r11,
                    cx_reg = rbx, eprev = r12, yrow = r13;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        JitActivation act(*this, isa, k2);
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
        // tail: the value in V(0), exp scratch V(1..3), the sum in V(8)); the fused pass: there.
        auto acc = [&](int k) { return V(8 + k); };
        const Xmm c0 = V(12), c1 = V(13);
        // The lean exp (see ExpConst) of x' = scale x - m on nq vectors at src + idx + q vectors,
        // instruction by instruction interleaved: x' in V(3q), scratch V(3q+1), V(3q+2); magic and
        // log2 e in V(10), V(11), scale and -m in c0, c1, the lower clamp and 1 in lo / one, the
        // rest memory operands (cx_reg); each exp stored to dst + idx + q vectors and added to V(9)
        // in q order (the order of every pass, so a row's sum does not depend on how it is cut).
        auto lean_exp = [&](int nq, const Xmm& lo, const Xmm& one) {
            auto X = [&](int q) { return V(3 * q); };
            auto S0 = [&](int q) { return V(3 * q + 1); };
            auto S1 = [&](int q) { return V(3 * q + 2); };
            auto cx = [&](int e) { return ptr[cx_reg + e * 64]; };
            for (int q = 0; q < nq; ++q) io.load(X(q), src + idx * xs + q * vl * xs, xt, vl);
            for (int q = 0; q < nq; ++q) vfmadd213ps(X(q), c0, c1);  // x' = scale x - m
            for (int q = 0; q < nq; ++q) vmaxps(X(q), lo, X(q));     // >= -87.6, NaN kept
            for (int q = 0; q < nq; ++q) vmovaps(S0(q), V(10));
            for (int q = 0; q < nq; ++q) vfmadd231ps(S0(q), X(q), V(11));  // magic + n
            for (int q = 0; q < nq; ++q) vsubps(S1(q), S0(q), V(10));      // n
            for (int q = 0; q < nq; ++q) vfnmadd231ps(X(q), S1(q), cx(kXLn2Hi));
            for (int q = 0; q < nq; ++q) vfnmadd231ps(X(q), S1(q), cx(kXLn2Lo));  // r
            for (int q = 0; q < nq; ++q) vpslld(S0(q), S0(q), 23);                // 2^(n-1)
            for (int q = 0; q < nq; ++q) vmovups(S1(q), cx(kXP5));
            for (int e = kXP4; e <= kXP0; ++e)
                for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), cx(e));
            for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), one);
            for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), one);  // e^r
            for (int q = 0; q < nq; ++q) vmulps(X(q), S1(q), S0(q));
            for (int q = 0; q < nq; ++q) vaddps(X(q), X(q), X(q));
            for (int q = 0; q < nq; ++q) {
                vmovups(ptr[dst + idx * 4 + q * vl * 4], X(q));
                vaddps(V(9), V(9), X(q));
            }
        };
        if (pass == Pass::fused) {
            // exp of this row (x, e, -m; the sum out) and y = e_prev * inv_sum of the previous one,
            // over n elements (a multiple of 2 vectors), two vectors an iteration; the DRAM write of
            // y (and the prefetch of next_x) overlap the exp's FMAs instead of following them.
            mov(src, ptr[a + offsetof(Args, x)]);
            mov(dst, ptr[a + offsetof(Args, e)]);
            mov(eprev, ptr[a + offsetof(Args, e_prev)]);
            mov(yrow, ptr[a + offsetof(Args, y)]);
            mov(act_tbl, ptr[a + offsetof(Args, next_x)]);
            mov(cx_reg, reinterpret_cast<uintptr_t>(&consts()));
            vbroadcastss(c0, ptr[a + offsetof(Args, scale)]);
            vbroadcastss(c1, ptr[a + offsetof(Args, neg_m)]);
            vbroadcastss(V(8), ptr[a + offsetof(Args, inv_sum)]);
            vmovups(V(6), ptr[cx_reg + kXLo * 64]);
            vmovups(V(7), ptr[cx_reg + kXOne * 64]);
            vmovups(V(10), ptr[cx_reg + kXMagic * 64]);
            vmovups(V(11), ptr[cx_reg + kXLog2e * 64]);
            vmovups(V(9), ptr[a + offsetof(Args, out)]);  // the sum so far (zero: a row's start)
            shr(cnt, 1);  // (cnt holds whole vectors)
            Label l_loop, l_end;
            test(cnt, cnt);
            jz(l_end, T_NEAR);
            L(l_loop);
            for (int line = 0; line < 2 * vl * xs; line += 64) prefetcht0(ptr[act_tbl + idx * xs + line]);
            lean_exp(2, V(6), V(7));
            for (int q = 0; q < 2; ++q) vmulps(V(3 * q), V(8), ptr[eprev + idx * 4 + q * vl * 4]);
            io.store2(yrow + idx * ys, V(0), V(3), yt, 2 * vl, nt);
            add(idx, 2 * vl);
            dec(cnt);
            jnz(l_loop, T_NEAR);
            L(l_end);
            vmovups(ptr[a + offsetof(Args, out)], V(9));
            postamble();
            fn = finalize<PassFn>();
            return;
        }
        switch (pass) {
            case Pass::max:
                mov(src, ptr[a + offsetof(Args, x)]);
                mov(rax, reinterpret_cast<uintptr_t>(&consts()));
                vmovups(c0, ptr[rax + kXNegInf * 64]);  // -inf
                for (int k = 0; k < unroll; ++k) vmovaps(acc(k), c0);
                break;
            case Pass::exp:
                mov(src, ptr[a + offsetof(Args, x)]);
                mov(dst, ptr[a + offsetof(Args, e)]);
                mov(act_tbl, reinterpret_cast<uintptr_t>(JitActivation::table()));
                vbroadcastss(c0, ptr[a + offsetof(Args, scale)]);
                vbroadcastss(c1, ptr[a + offsetof(Args, neg_m)]);
                mov(cx_reg, reinterpret_cast<uintptr_t>(&consts()));
                vmovups(V(9), ptr[a + offsetof(Args, out)]);  // the sum so far (see lean_exp)
                vmovups(V(10), ptr[cx_reg + kXMagic * 64]);
                vmovups(V(11), ptr[cx_reg + kXLog2e * 64]);
                vmovups(V(14), ptr[cx_reg + kXLo * 64]);
                vmovups(V(15), ptr[cx_reg + kXOne * 64]);
                break;
            case Pass::fused:  // (generated above)
                break;
            case Pass::scale:
                mov(act_tbl, ptr[a + offsetof(Args, next_x)]);  // (no activation in this pass)
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
            const Xmm v = pass == Pass::exp ? V(4 * k) : V(k);
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
                    // The tail (runtime lane count; the io scratch is V(14), V(15)): the shared exp.
                    io.load_rt(v, src + idx * xs + off * xs, xt, rem);
                    vfmadd213ps(v, c0, c1);
                    act.apply(JitFn::exp, v, {V(4 * k + 1), V(4 * k + 2), V(4 * k + 3)}, act_tbl);
                    {  // lanes >= rem: 0 (the buffer is padded: store the full vector)
                        io.lane_mask_rt(V(4 * k + 1), rem);
                        if (io.zmm()) vmovaps(v | k1 | T_z, v);
                        else vandps(v, v, V(4 * k + 1));
                    }
                    vmovups(ptr[dst + idx * 4 + off * 4], v);
                    vaddps(acc(k), acc(k), v);
                    break;
                }
                case Pass::fused:
                    break;
                case Pass::scale:
                    // The next row's x is fetched while this one is scaled from the cache.
                    if (!tail)
                        for (int line = (off * xs + 63) / 64 * 64; line < (off + vl) * xs; line += 64)
                            prefetcht0(ptr[act_tbl + idx * xs + line]);
                    vmulps(v, c0, ptr[src + idx * 4 + off * 4]);
                    if (tail) io.store_rt(dst + idx * ys + off * ys, v, yt, rem);
                    else if (k % 2 == 1) io.store2(dst + idx * ys + (off - vl) * ys, V(k - 1), v, yt, 2 * vl, nt);
                    else if (k + 1 == unroll_now) io.store(dst + idx * ys + off * ys, v, yt, vl, nt);
                    break;
            }
        };

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

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
};

class JitSoftmaxKernel final : public SoftmaxKernel {
public:
    JitSoftmaxKernel(const SoftmaxKernelDesc& kd, Isa isa)
        : vlen_(isa >= Isa::avx512 ? 16 : 8),
          fuse_(kd.y_dtype == DType::f32),
          max_(kd, isa, Pass::max, false),
          exp_(kd, isa, Pass::exp, false),
          scale_(kd, isa, Pass::scale, false),
          scale_nt_(kd, isa, Pass::scale, true) {
        if (fuse_) {
            fused_ = std::make_unique<const JitSoftmaxPass>(kd, isa, Pass::fused, false);
            fused_nt_ = std::make_unique<const JitSoftmaxPass>(kd, isa, Pass::fused, true);
        }
    }

    void run(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end) const override {
        const int xs = dtype_size(d.x_dtype), ys = dtype_size(d.y_dtype);
        // Every streamed store is aligned to its width: a full f32 vector or a bf16 pair (one
        // register of 32 / 64 bytes), so the rows must start on the register width.
        const int64_t align = static_cast<int64_t>(vlen_) * 4;
        const bool nt = use_nt_stores(d.rows * d.cols * ys) && reinterpret_cast<uintptr_t>(a.y) % align == 0 &&
                        (d.ld_y * ys) % align == 0;
        // Two exp buffers: row r's exps are scaled into y while row r + 1's are computed.
        thread_local std::vector<float> buffer;
        const size_t stride = static_cast<size_t>((d.cols + 15) / 16 * 16);
        if (buffer.size() < 2 * stride) buffer.resize(2 * stride);
        const int64_t pair = 2 * static_cast<int64_t>(vlen_);
        auto xrow = [&](int64_t r) { return static_cast<const char*>(a.x) + r * d.ld_x * xs; };
        auto yrow = [&](int64_t r) { return static_cast<char*>(a.y) + r * d.ld_y * ys; };
        auto ebuf = [&](int64_t r) { return buffer.data() + static_cast<size_t>(r - row_begin) % 2 * stride; };
        Args args;
        args.scale = d.scale;
        // The max of row r (from memory) and its -m in neg[r % 2].
        float neg[2] = {0, 0};
        auto max_of = [&](int64_t r) {
            args.x = xrow(r);
            args.n = softmax_visible(d, r);
            max_.fn(&args);
            neg[(r - row_begin) % 2] = -(d.scale * args.out[0]);
        };
        // exp of row r from element `from` on (standalone pass), continuing the per-lane sums in
        // `sums`; returns 1 / sum.
        auto exp_rest = [&](int64_t r, int64_t from, const float* sums) {
            const int64_t v = softmax_visible(d, r);
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
        float inv = 0;
        int64_t v = softmax_visible(d, row_begin);
        if (v > 0) {
            max_of(row_begin);
            inv = exp_rest(row_begin, 0, zeros);
        }
        for (int64_t r = row_begin; r < row_end; ++r) {
            // Row r's exps are in ebuf(r) (v > 0), 1 / sum in inv; row r + 1 next.
            const bool has_next = r + 1 < row_end;
            const int64_t vn = has_next ? softmax_visible(d, r + 1) : 0;
            const char* next_x = xrow(r + 2 < row_end ? r + 2 : (has_next ? r + 1 : r));
            if (vn > 0) max_of(r + 1);
            const int64_t common = fuse_ && v > 0 && vn > 0 ? std::min(v, vn) / pair * pair : 0;
            float sums[16] = {};
            if (common > 0) {
                args.x = xrow(r + 1);
                args.e = ebuf(r + 1);
                args.n = common;
                args.neg_m = neg[(r + 1 - row_begin) % 2];
                args.e_prev = ebuf(r);
                args.y = yrow(r);
                args.inv_sum = inv;
                args.next_x = next_x;
                std::memset(args.out, 0, sizeof(args.out));
                (nt ? fused_nt_ : fused_)->fn(&args);
                std::memcpy(sums, args.out, sizeof(sums));
            }
            float inv_next = 0;
            if (vn > 0) inv_next = exp_rest(r + 1, common, sums);
            if (v > common) {  // the rest of row r's y
                args.e = ebuf(r) + common;
                args.y = yrow(r) + common * ys;
                args.n = v - common;
                args.inv_sum = inv;
                args.next_x = next_x + common * xs;
                (nt ? scale_nt_ : scale_).fn(&args);
            }
            if (v < d.cols) std::memset(yrow(r) + v * ys, 0, static_cast<size_t>(d.cols - v) * ys);
            v = vn;
            inv = inv_next;
        }
        if (nt) _mm_sfence();
    }

private:
    int vlen_;
    bool fuse_;  // f32 y: the fused pass (bf16 y: its rounding made the fused loop slower)
    JitSoftmaxPass max_, exp_, scale_, scale_nt_;
    std::unique_ptr<const JitSoftmaxPass> fused_, fused_nt_;  // generated when fuse_
};

}  // namespace

std::shared_ptr<const SoftmaxKernel> create_jit_softmax(const SoftmaxKernelDesc& kd, Isa isa) {
    return std::make_shared<JitSoftmaxKernel>(kd, isa);
}

}  // namespace xk::detail
