// xbyak generator of GLU rows (y = act(gate) * up) for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16
// stores at the avx512_bf16 level), specialised on (activation, inner, dtypes). The activation is
// the shared vectorised injector (kernels/common/jit_activation.hpp); two vectors per iteration
// with separate scratch registers so their exp / division chains overlap. The whole row range is
// one call. Outputs larger than nt_store_threshold() are written with non-temporal stores when
// every row of y is aligned.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

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

// SwiGLU's own silu (the hot path of an LLM MLP): silu(g) = g * r, r = 1 / (1 + e^-g), with
//   e^-g = 2^n p(t), n = round(-g log2 e), t = -g - n ln2 (f32 output: two-part ln2; bf16: one
//        part, t off by up to 2.4e-7 for |g| ~ 86), p(t) = 1 + t q(t):
//        q of degree 5 (f32 output; Chebyshev interpolant, |p/e^t - 1| <= 0.2u on |t| <= ln2/2)
//        or degree 4 (bf16 output; 3.5u, far below the 2^-9 of the bf16 rounding),
//   r from the reciprocal estimate (VRCPPS 2^-11.4 / VRCP14PS 2^-14) and one Newton step
//        (no divider: its throughput bounds the loop on AVX2).
// -g is clamped to [-86.9, 86] (2^n stays normal, 1 + e^-g <= 3e37 so r is normal) and g to
// >= -88 in the final product: for g < -86 the result is below 4e-36 in magnitude instead of
// g e^g (silu(-inf) gives -4e-36, the limit 0, where the scalar formula's -inf / inf is NaN);
// NaN stays NaN. u = 2^-24; asserted against double by test_glu (SiluAccuracy): f32 output within
// 6u of silu(g) (3.0u measured on AVX2), bf16 within half a bf16 ulp + 8u.
enum SiluConst : int {
    kSSign, kSHi, kSLo, kSMagic, kSLog2e, kSLn2Hi, kSLn2Lo, kSLn2, kSOne, kSGLo,
    kSQ6,  // f32: q5 .. q1 (5 entries, highest first); q0 = 1 is kSOne
    kSQ5 = kSQ6 + 5,  // bf16: q4 .. q1 (4 entries)
    kSCount = kSQ5 + 4
};

struct alignas(64) SiluTable {
    uint32_t v[kSCount][16];
};

const SiluTable& silu_table() {
    static const SiluTable t = [] {
        SiluTable t{};
        auto setb = [&](int i, uint32_t b) {
            for (auto& e : t.v[i]) e = b;
        };
        auto setf = [&](int i, float f) {
            uint32_t b;
            std::memcpy(&b, &f, 4);
            setb(i, b);
        };
        setb(kSSign, 0x80000000u);
        setf(kSHi, 86.0f);
        setf(kSLo, -86.9f);
        setf(kSMagic, 12582912.0f + 127.0f);  // 1.5 * 2^23 + 127: holds n + 127 in the low bits
        setf(kSLog2e, 1.44269504088896341f);
        setf(kSLn2Hi, 0.693359375f);
        setf(kSLn2Lo, -2.12194440e-4f);
        setf(kSLn2, 0.693147182f);
        setf(kSOne, 1.0f);
        setf(kSGLo, -88.0f);
        const float q6[5] = {1.3933731243e-03f, 8.3692204207e-03f, 4.1666463017e-02f, 1.6666504741e-01f, 5.0e-01f};
        const float q5[4] = {8.3632329479e-03f, 4.1876062751e-02f, 1.6666576266e-01f, 4.9999368191e-01f};
        for (int i = 0; i < 5; ++i) setf(kSQ6 + i, q6[i]);
        for (int i = 0; i < 4; ++i) setf(kSQ5 + i, q5[i]);
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

        preamble({rbx});
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
            const int64_t nblk = nvec / kUnroll;
            if (nblk > 0) {
                Label loop;
                mov(cnt, nblk);
                L(loop);
                block(kUnroll, 0, vl);
                add(idx, kUnroll * vl);
                dec(cnt);
                jnz(loop);
            }
            const int rem = static_cast<int>(nvec % kUnroll);  // 0 or 1
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
        const bool deg5 = yt == DType::f32;
        eo_ = !zmm && xt == DType::bf16 && yt == DType::bf16;
        const Xmm glo = V(12);
        auto X = [&](int k) { return V(base + 3 * k); };
        auto S0 = [&](int k) { return V(base + 3 * k + 1); };
        auto S1 = [&](int k) { return V(base + 3 * k + 2); };
        auto cst = [&](int e) { return ptr[ct + e * 64]; };
        vmovups(glo, cst(kSGLo));

        // nv vectors from element idx, counts[k] elements each (full but the last).
        auto block = [&](int nv, const int* counts) {
            auto gate = [&](int k) { return x + idx * xs + k * vl * xs; };
            // bf16 in and out on AVX2: full pairs of vectors split even / odd (JitIo::load2_eo).
            auto eo = [&](int k) {
                const int k0 = k & ~1;
                return eo_ && k0 + 1 < nv && counts[k0] == vl && counts[k0 + 1] == vl;
            };
            auto load = [&](int k, const Xmm& v, const Xmm& v_next, const RegExp& addr) {
                if (!eo(k)) io.load(v, addr, xt, counts[k]);
                else if (k % 2 == 0) io.load2_eo(v, v_next, addr);  // k + 1's vector too
            };
            for (int k = 0; k < nv; ++k) load(k, X(k), X(k + 1 < 4 ? k + 1 : k), gate(k));
            for (int k = 0; k < nv; ++k) vxorps(X(k), X(k), cst(kSSign));  // -g
            for (int k = 0; k < nv; ++k) vminps(X(k), X(k), cst(kSHi));
            for (int k = 0; k < nv; ++k) vmaxps(X(k), X(k), cst(kSLo));
            for (int k = 0; k < nv; ++k) vmovups(S0(k), cst(kSMagic));
            for (int k = 0; k < nv; ++k) vfmadd231ps(S0(k), X(k), cst(kSLog2e));  // magic + n
            for (int k = 0; k < nv; ++k) vsubps(S1(k), S0(k), cst(kSMagic));      // n
            if (deg5) {
                for (int k = 0; k < nv; ++k) vfnmadd231ps(X(k), S1(k), cst(kSLn2Hi));  // t
                for (int k = 0; k < nv; ++k) vfnmadd231ps(X(k), S1(k), cst(kSLn2Lo));
            } else {  // bf16 output: one-part ln2 (t off by |n| 1.9e-9 <= 2.4e-7)
                for (int k = 0; k < nv; ++k) vfnmadd231ps(X(k), S1(k), cst(kSLn2));
            }
            for (int k = 0; k < nv; ++k) vpslld(S0(k), S0(k), 23);  // 2^n
            const int q0 = deg5 ? kSQ6 : kSQ5, nq = deg5 ? 5 : 4;
            for (int k = 0; k < nv; ++k) vmovups(S1(k), cst(q0));
            for (int i = 1; i < nq; ++i)
                for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(q0 + i));
            for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(kSOne));   // q(t)
            for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), X(k), cst(kSOne));   // p(t) = 1 + t q
            for (int k = 0; k < nv; ++k) vfmadd213ps(S1(k), S0(k), cst(kSOne));  // d = 1 + 2^n p
            for (int k = 0; k < nv; ++k) {
                if (zmm) vrcp14ps(S0(k), S1(k));
                else vrcpps(S0(k), S1(k));
            }
            for (int k = 0; k < nv; ++k) vfnmadd213ps(S1(k), S0(k), cst(kSOne));  // e = 1 - d r
            for (int k = 0; k < nv; ++k) vfmadd231ps(S0(k), S0(k), S1(k));        // r (1 + e)
            for (int k = 0; k < nv; ++k) {  // X = max(g, -88): NaN kept (the second operand)
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
            for (int k = 0; k < nv; ++k) vmulps(X(k), X(k), S0(k));  // silu(g)
            for (int k = 0; k < nv; ++k) {
                const RegExp u = up + idx * xs + k * vl * xs;
                if (xt == DType::f32 && counts[k] == vl) {
                    vmulps(X(k), X(k), ptr[u]);
                } else {
                    load(k, S1(k), S1(k + 1 < 4 ? k + 1 : k), u);
                    if (!eo(k) || k % 2 == 1) {
                        if (eo(k)) vmulps(X(k - 1), X(k - 1), S1(k - 1));
                        vmulps(X(k), X(k), S1(k));
                    }
                }
            }
            for (int k = 0; k < nv; k += 2) {
                const RegExp o = y + idx * ys + k * vl * ys;
                if (eo(k)) io.store2_eo(o, X(k), X(k + 1), nt_);
                else if (k + 1 < nv) io.store2(o, X(k), X(k + 1), yt, vl + counts[k + 1], nt_);
                else io.store(o, X(k), yt, counts[k], nt_ && counts[k] == vl);
            }
        };

        int full[4] = {vl, vl, vl, vl};
        Label row_loop;
        L(row_loop);
        mov(up, n * xs);
        add(up, x);
        xor_(idx, idx);
        const int64_t nblk = nvec / U;
        if (nblk > 0) {
            Label loop;
            mov(cnt, nblk);
            L(loop);
            block(U, full);
            add(idx, U * vl);
            dec(cnt);
            jnz(loop);
        }
        const int rem = static_cast<int>(nvec % U);
        if (rem || tail) {
            int counts[4] = {vl, vl, vl, vl};
            if (tail) counts[rem] = tail;
            block(rem + (tail ? 1 : 0), counts);
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
        const bool nt = use_nt_stores(d.rows * d.inner * ys) && a.y != a.x &&
                        reinterpret_cast<uintptr_t>(a.y) % align == 0 && (d.ld_y * ys) % align == 0 && d.inner >= vlen_;
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
