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
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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
    const void* next_x = nullptr;    // 112 scale pass: prefetched (the next row, or this one)
};
static_assert(offsetof(Args, out) == 48 && offsetof(Args, next_x) == 112, "Args layout");
using PassFn = void (*)(Args*);

enum class Pass { max, exp, scale };

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
        const Reg64 a = abi_param1, src = rsi, dst = rdx, cnt = rcx, idx = r8, rem = r9, tbl = r10, act_tbl = r11;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        JitActivation act(*this, isa, k2);
        const int vl = io.vlen(), shift = vl == 16 ? 4 : 3;
        const DType xt = kd.x_dtype, yt = kd.y_dtype;
        const int xs = dtype_size(xt), ys = dtype_size(yt);
        const int unroll = pass == Pass::exp ? 3 : 4;

        preamble();
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        mov(cnt, ptr[a + offsetof(Args, n)]);
        mov(rem, cnt);
        and_(rem, vl - 1);
        shr(cnt, shift);
        xor_(idx, idx);

        // Register use: the value of unrolled vector k in V(k) (exp pass: V(4k), with its exp
        // scratch in V(4k+1..4k+3)); accumulators V(8..11), constants V(12), V(13), the io
        // scratch V(14), V(15).
        auto acc = [&](int k) { return V(8 + k); };
        const Xmm c0 = V(12), c1 = V(13);
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
                mov(rax, reinterpret_cast<uintptr_t>(&consts()));
                vxorps(V(9), V(9), V(9));
                vmovups(V(10), ptr[rax + kXMagic * 64]);
                vmovups(V(11), ptr[rax + kXLog2e * 64]);
                vmovups(V(14), ptr[rax + kXLo * 64]);
                vmovups(V(15), ptr[rax + kXOne * 64]);
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
                        // Full vectors: the lean exp (see ExpConst) on the loop's vectors,
                        // instruction by instruction interleaved; x' = V(3q), scratch V(3q+1),
                        // V(3q+2); the sum in V(9); constants in V(10), V(11), V(14), V(15) (and
                        // scale, -m in V(12), V(13)), the rest memory operands (rax).
                        if (k != 0) break;
                        const int nq = unroll_now;
                        auto X = [&](int q) { return V(3 * q); };
                        auto S0 = [&](int q) { return V(3 * q + 1); };
                        auto S1 = [&](int q) { return V(3 * q + 2); };
                        auto cx = [&](int e) { return ptr[rax + e * 64]; };
                        for (int q = 0; q < nq; ++q) io.load(X(q), src + idx * xs + q * vl * xs, xt, vl);
                        for (int q = 0; q < nq; ++q) vfmadd213ps(X(q), c0, c1);       // x' = scale x - m
                        for (int q = 0; q < nq; ++q) vmaxps(X(q), V(14), X(q));       // >= -87.6, NaN kept
                        for (int q = 0; q < nq; ++q) vmovaps(S0(q), V(10));
                        for (int q = 0; q < nq; ++q) vfmadd231ps(S0(q), X(q), V(11));  // magic + n
                        for (int q = 0; q < nq; ++q) vsubps(S1(q), S0(q), V(10));      // n
                        for (int q = 0; q < nq; ++q) vfnmadd231ps(X(q), S1(q), cx(kXLn2Hi));
                        for (int q = 0; q < nq; ++q) vfnmadd231ps(X(q), S1(q), cx(kXLn2Lo));  // r
                        for (int q = 0; q < nq; ++q) vpslld(S0(q), S0(q), 23);           // 2^(n-1)
                        for (int q = 0; q < nq; ++q) vmovups(S1(q), cx(kXP5));
                        for (int e = kXP4; e <= kXP0; ++e)
                            for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), cx(e));
                        for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), V(15));
                        for (int q = 0; q < nq; ++q) vfmadd213ps(S1(q), X(q), V(15));   // e^r
                        for (int q = 0; q < nq; ++q) vmulps(X(q), S1(q), S0(q));
                        for (int q = 0; q < nq; ++q) vaddps(X(q), X(q), X(q));
                        for (int q = 0; q < nq; ++q) {
                            vmovups(ptr[dst + idx * 4 + q * vl * 4], X(q));
                            vaddps(V(9), V(9), X(q));
                        }
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
          max_(kd, isa, Pass::max, false),
          exp_(kd, isa, Pass::exp, false),
          scale_(kd, isa, Pass::scale, false),
          scale_nt_(kd, isa, Pass::scale, true) {}

    void run(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end) const override {
        const int xs = dtype_size(d.x_dtype), ys = dtype_size(d.y_dtype);
        // Every streamed store is aligned to its width: a full f32 vector or a bf16 pair (one
        // register of 32 / 64 bytes), so the rows must start on the register width.
        const int64_t align = static_cast<int64_t>(vlen_) * 4;
        const bool nt = use_nt_stores(d.rows * d.cols * ys) && reinterpret_cast<uintptr_t>(a.y) % align == 0 &&
                        (d.ld_y * ys) % align == 0;
        thread_local std::vector<float> buffer;
        const size_t need = static_cast<size_t>((d.cols + 15) / 16 * 16);
        if (buffer.size() < need) buffer.resize(need);
        Args args;
        args.e = buffer.data();
        args.scale = d.scale;
        for (int64_t r = row_begin; r < row_end; ++r) {
            const int64_t v = softmax_visible(d, r);
            char* y = static_cast<char*>(a.y) + r * d.ld_y * ys;
            if (v > 0) {
                args.x = static_cast<const char*>(a.x) + r * d.ld_x * xs;
                args.y = y;
                args.n = v;
                args.next_x = static_cast<const char*>(a.x) + (r + 1 < row_end ? r + 1 : r) * d.ld_x * xs;
                max_.fn(&args);
                args.neg_m = -(d.scale * args.out[0]);
                exp_.fn(&args);
                double sum = 0.0;
                for (int j = 0; j < vlen_; ++j) sum += args.out[j];
                args.inv_sum = static_cast<float>(1.0 / sum);
                (nt ? scale_nt_ : scale_).fn(&args);
            }
            if (v < d.cols) std::memset(y + v * ys, 0, static_cast<size_t>(d.cols - v) * ys);
        }
        if (nt) _mm_sfence();
    }

private:
    int vlen_;
    JitSoftmaxPass max_, exp_, scale_, scale_nt_;
};

}  // namespace

std::shared_ptr<const SoftmaxKernel> create_jit_softmax(const SoftmaxKernelDesc& kd, Isa isa) {
    return std::make_shared<JitSoftmaxKernel>(kd, isa);
}

}  // namespace xk::detail
