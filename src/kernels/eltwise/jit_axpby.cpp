// xbyak generator of y = alpha*x + beta*y for AVX2 (ymm, vmaskmovps tail) and AVX-512 (zmm,
// opmask tail). Main loop: 4 vectors per iteration; then single vectors; then one masked vector.
#include "dispatch/jit_generator.hpp"
#include "kernels/eltwise/eltwise.hpp"

namespace xk::detail {
namespace {

// void fn(const float* x, float* y, int64_t n, const float* alpha_beta)
using AxpbyFn = void (*)(const float*, float*, int64_t, const float*);

class JitAxpby : public JitGenerator {
public:
    explicit JitAxpby(Isa isa) : JitGenerator(isa) {
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        const int vlen = z ? 16 : 8;  // floats per vector
        const Reg64 x = abi_param1, y = abi_param2, n = abi_param3, ab = abi_param4;
        auto V = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        preamble();
        const Xmm valpha = V(14), vbeta = V(15);
        vbroadcastss(valpha, ptr[ab]);
        vbroadcastss(vbeta, ptr[ab + 4]);
        Label l_unroll, l_single, l_tail, l_done, l_beta0;
        // beta == 0 (ordered compare) → do not read y: it may hold NaN or uninitialised memory.
        const Reg64 beta0 = rax;
        xor_(eax, eax);
        vxorps(xmm0, xmm0, xmm0);
        vucomiss(xmm0, ptr[ab + 4]);
        setz(al);       // ZF: equal or unordered
        Label l_ordered;
        jnp(l_ordered); // PF: unordered (NaN beta) → keep reading y
        xor_(eax, eax);
        L(l_ordered);

        auto body = [&](int nvec, bool masked) {
            for (int i = 0; i < nvec; ++i) {
                const Xmm acc = V(i), yv = V(i + 4);
                const Address xa = z ? zword[x + i * vlen * 4] : yword[x + i * vlen * 4];
                const Address ya = z ? zword[y + i * vlen * 4] : yword[y + i * vlen * 4];
                if (masked) {
                    if (z) {
                        vmovups(Zmm(acc.getIdx()) | k1 | T_z, xa);
                    } else {
                        vmaskmovps(acc, Ymm(13), xa);
                    }
                } else {
                    vmovups(acc, xa);
                }
                vmulps(acc, acc, valpha);
                Label l_skip;
                test(beta0, beta0);
                jnz(l_skip);
                if (masked) {
                    if (z) vmovups(Zmm(yv.getIdx()) | k1 | T_z, ya);
                    else vmaskmovps(yv, Ymm(13), ya);
                } else {
                    vmovups(yv, ya);
                }
                vfmadd231ps(acc, yv, vbeta);
                L(l_skip);
                if (masked) {
                    if (z) vmovups(ya, Zmm(acc.getIdx()) | k1);
                    else vmaskmovps(ya, Ymm(13), acc);
                } else {
                    vmovups(ya, acc);
                }
            }
        };

        L(l_unroll);
        cmp(n, 4 * vlen);
        jl(l_single);
        body(4, false);
        add(x, 4 * vlen * 4);
        add(y, 4 * vlen * 4);
        sub(n, 4 * vlen);
        jmp(l_unroll);

        L(l_single);
        cmp(n, vlen);
        jl(l_tail);
        body(1, false);
        add(x, vlen * 4);
        add(y, vlen * 4);
        sub(n, vlen);
        jmp(l_single);

        L(l_tail);
        test(n, n);
        jz(l_done);
        // Mask of the n (< vlen) remaining lanes.
        if (z) {
            mov(r8, 1);
            shlx(r8, r8, n);
            sub(r8, 1);
            kmovw(k1, r8d);
        } else {
            // ymm13 lane i = (i < n) ? -1 : 0, from a compare of the lane index with n.
            mov(r8, reinterpret_cast<uintptr_t>(kLaneIndex));
            vmovups(Ymm(12), ptr[r8]);
            vmovq(Xmm(13), n);
            vpbroadcastd(Ymm(13), Xmm(13));
            vpcmpgtd(Ymm(13), Ymm(13), Ymm(12));
        }
        body(1, true);
        L(l_done);
        postamble();
    }

private:
    alignas(32) static constexpr int32_t kLaneIndex[8] = {0, 1, 2, 3, 4, 5, 6, 7};
};

struct JitAxpbyKernel final : AxpbyKernel {
    explicit JitAxpbyKernel(Isa isa) : gen(isa), fn(gen.finalize<AxpbyFn>()) {}
    void run(int64_t n, float alpha, const float* x, float beta, float* y) const override {
        if (n <= 0) return;
        const float ab[2] = {alpha, beta};
        fn(x, y, n, ab);
    }
    JitAxpby gen;
    AxpbyFn fn;
};

}  // namespace

std::shared_ptr<const AxpbyKernel> create_jit_axpby(Isa isa) { return std::make_shared<JitAxpbyKernel>(isa); }

}  // namespace xk::detail
