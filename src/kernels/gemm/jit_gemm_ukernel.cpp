// xbyak generator of the blocked GEMM's microkernel (see jit_gemm_ukernel.hpp).
//
// Per packed A panel: zero the mr x nv accumulators, prefetch C tiles, run the K loop (unrolled,
// remainder one step at a time) — each step loads nv B vectors and, per row, broadcasts one A value
// (AVX2: vbroadcastss into a register, two alternating; AVX-512: embedded {1to16} broadcast
// operands) into nv FMAs — then the fused store (JitGemmBase::emit_epilogue) and on to
// the next panel (A and C advance; B is reused from L1).
// dp (bf16 pairs, AVX512-BF16): the same loop over k-pairs, the panels' 32-bit elements holding two
// bf16 each, VDPBF16PS in place of the FMA (the {1to16} broadcast of one A pair).
#include "kernels/gemm/jit_gemm_ukernel.hpp"

#include <cstddef>

#include "dispatch/kernel_cache.hpp"
#include "dispatch/verbose.hpp"

namespace xk::detail {

using namespace Xbyak;

std::string GemmUkSpec::key() const {
    return std::string(isa_name(isa)) + (dp ? ",dp" : "") + ",m" + std::to_string(mr) + "n" + std::to_string(ncols) + "," + epi.key();
}

namespace {

class JitGemmUk : public JitGemmBase {
public:
    explicit JitGemmUk(const GemmUkSpec& s) : JitGemmBase(s.isa, 64 * 1024) { generate(s); }

private:
    void generate(const GemmUkSpec& s) {
        const GemmGeometry g = gemm_geometry(s.isa);
        const int MR = g.mr, NR = g.nr, vl = g.vlen;
        const int mr = s.mr;
        const int c_es = s.epi.c == DType::bf16 ? 2 : 4;
        const int nv = (s.ncols + vl - 1) / vl;
        const int w_last = s.ncols - (nv - 1) * vl;
        const int U = z_ ? 4 : 8;         // K unroll
        const int kPrefetchA = 16 * MR * 4;  // bytes ahead in the A panel stream

        const Reg64 rP = rdi, rA = rsi, rB = rdx, rBk = rcx, rC = r8, rK = r9, rLdc = r10, rMp = r11, rRes = r12,
                    rBias = r13, rTbl = r14, rScal = r15, rTmp = rax, rBn = rbx;
        preamble({rbx, r12, r13, r14, r15});
        push(rbp);
        mov(rbp, rsp);
        and_(rsp, -64);
        const int spill = (spill_bytes(mr, nv) + 63) / 64 * 64;
        if (spill) sub(rsp, spill);

        mov(rA, ptr[rP + offsetof(GemmUkArgs, a)]);
        mov(rB, ptr[rP + offsetof(GemmUkArgs, b)]);
        mov(rC, ptr[rP + offsetof(GemmUkArgs, c)]);
        mov(rLdc, ptr[rP + offsetof(GemmUkArgs, ldc)]);
        mov(rMp, ptr[rP + offsetof(GemmUkArgs, m_panels)]);
        mov(rBias, ptr[rP + offsetof(GemmUkArgs, bias)]);
        mov(rRes, ptr[rP + offsetof(GemmUkArgs, res)]);
        mov(rScal, ptr[rP + offsetof(GemmUkArgs, scal)]);
        set_tail_mask(w_last);

        const int b_base = mr * nv;  // B vectors after the accumulators, then broadcast registers
        const int bc_base = b_base + nv;
        const int nbc = z_ ? 0 : std::min(2, nvregs_ - bc_base);
        auto acc = [&](int i, int j) { return V(acc_idx(i, j, nv)); };
        // pf_b: also pull the next B panel (the next call's, packed right after this one) towards
        // L2, one line per line of this panel consumed: done during the first A panel only.
        auto body = [&](int steps, bool pf_b) {
            for (int u = 0; u < steps; ++u) {
                for (int j = 0; j < nv; ++j) vmovaps(V(b_base + j), ptr[rBk + (u * NR + j * vl) * 4]);
                if (pf_b)
                    for (int l = 0; l < NR * 4; l += 64) prefetcht1(ptr[rBn + u * NR * 4 + l]);
                const int a_off = u * MR * 4;
                if (u == 0 || a_off / 64 != (a_off - MR * 4) / 64) prefetcht0(ptr[rA + kPrefetchA + a_off]);
                for (int i = 0; i < mr; ++i) {
                    const int off = (u * MR + i) * 4;
                    if (z_) {
                        for (int j = 0; j < nv; ++j) {
                            if (s.dp)
                                vdpbf16ps(acc(i, j), V(b_base + j), ptr_b[rA + off]);
                            else
                                vfmadd231ps(acc(i, j), V(b_base + j), ptr_b[rA + off]);
                        }
                    } else {
                        const Xmm bc = V(bc_base + i % nbc);
                        vbroadcastss(bc, ptr[rA + off]);
                        for (int j = 0; j < nv; ++j) vfmadd231ps(acc(i, j), V(b_base + j), bc);
                    }
                }
            }
        };

        const Address ldr = ptr[rP + offsetof(GemmUkArgs, ldr)];
        const Address ldp = ptr[rP + offsetof(GemmUkArgs, ldp)];
        EpiRegs er;
        er.c_row = rC, er.res_row = rRes, er.bias = rBias, er.scal = rScal, er.tbl = rTbl, er.gtmp = rTmp;
        er.ldc = &rLdc;
        er.ldr = &ldr;
        // P's row pointer (epi.partial) lives in rBn, free after the first panel's K loop (its B
        // prefetch): loaded there, then carried from panel to panel by the epilogue's row walk.
        er.p_row = rBn;
        er.ldp = &ldp;
        auto panel = [&](bool pf_b) {
            Label l_k, l_krem, l_k1, l_kdone;
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) vxorps(acc(i, j), acc(i, j), acc(i, j));
            mov(rBk, rB);
            mov(rK, ptr[rP + offsetof(GemmUkArgs, kc)]);
            if (pf_b) {
                imul(rBn, rK, NR * 4);
                add(rBn, rB);
            }
            // C: only the next panel's tile, into L2 (prefetcht1), one panel ahead; the store loads
            // this tile from there. With ldc a multiple of 4 KiB (N = 1024, 2048, 3072, ...) every
            // row of a tile maps to one L1 set: C lines prefetched into L1 at the panel's start
            // evicted the B / A panels' lines of that set (and each other) during the K loop.
            // Measured on Zen 3, AVX2 (12 lines of this and the next tile into L1 before;
            // docs/gemm_log.md): +0.5-2% on large shapes at 1 and 2 threads, +2-3% with K = 64..128.
            // AVX-512 took the same step later (28 rows, 56 lines into a 12-way L1 before): Xeon,
            // one thread, in-phase % of the FMA peak, 6 rounds alternating, medians (per-round
            // differences): 2048^3 70.6 -> 77.3 (+8), 384x768x768 77.1 -> 80.0, 384x3072x768 72.4
            // -> 73.2, 1024^3 81.7 -> 77.4 (-4.5, inside that host's +-10 noise); no C prefetch at
            // all measured alike (81.3, 79.7, 73.9, 78.8). Prefetches never fault: rows past the
            // last panel cost nothing.
            imul(rTmp, rLdc, mr);
            add(rTmp, rC);
            for (int i = 0; i < mr; ++i) {
                prefetcht1(ptr[rTmp]);
                if (s.ncols * c_es > 4) prefetcht1(ptr[rTmp + s.ncols * c_es - 4]);
                if (i + 1 < mr) add(rTmp, rLdc);
            }
            cmp(rK, U);
            jl(l_krem);
            align(16);
            L(l_k);
            body(U, pf_b);
            add(rA, U * MR * 4);
            add(rBk, U * NR * 4);
            if (pf_b) add(rBn, U * NR * 4);
            sub(rK, U);
            cmp(rK, U);
            jge(l_k);
            L(l_krem);
            test(rK, rK);
            jz(l_kdone);
            L(l_k1);
            body(1, false);
            add(rA, MR * 4);
            add(rBk, NR * 4);
            dec(rK);
            jnz(l_k1);
            L(l_kdone);
            if (s.epi.partial && pf_b) mov(rBn, ptr[rP + offsetof(GemmUkArgs, part)]);
            emit_epilogue(s.epi, mr, nv, s.ncols, er, 0);
        };

        Label l_panel, l_done;
        panel(true);
        dec(rMp);
        jz(l_done);
        L(l_panel);
        panel(false);
        dec(rMp);
        jnz(l_panel);
        L(l_done);

        mov(rsp, rbp);
        pop(rbp);
        postamble();
    }
};

struct UkImpl final : GemmUkernel {
    explicit UkImpl(const GemmUkSpec& s) : gen(s) { fn = gen.finalize<GemmUkFn>(); }
    JitGemmUk gen;
};

}  // namespace

std::shared_ptr<const GemmUkernel> gemm_ukernel(const GemmUkSpec& s) {
    const std::string key = "gemm_ukernel|" + s.key();
    return KernelCache::instance().get_or_create<GemmUkernel>(key, [&]() -> std::shared_ptr<const GemmUkernel> {
        const double t0 = now_us();
        auto k = std::make_shared<UkImpl>(s);
        verbose_log("create", "gemm_ukernel", s.key(), now_us() - t0);
        return k;
    });
}

}  // namespace xk::detail
