// Small fp32 GEMM (M, N, K <= 64), libxsmm-style: one function generated for the exact shape,
// leading dimensions, transposes and epilogue; no packing of A, no threading, and everything
// (tile counts, strides, displacements) folded into the code, so a call costs a few nanoseconds
// beyond its FMAs.
//
// Tiles: columns of nr = 2 vectors (the blocked kernel's panel width; the last column may be
// narrower, its last vector masked), rows as many as the register file holds beside them (AVX2
// 6 for two vectors / 12 for one; AVX-512 14 / 28). Per tile: accumulators zeroed, the K loop
// (unrolled by up to 8, the remainder unrolled after it) loads B vectors straight from B and
// broadcasts A straight from A (either transpose), then the fused store of JitGemmBase.
// B: op(B) read directly when trans_b = N; otherwise (trans_b = T, or a PackedB) from the JIT
// kernels' packed layout (gemm_b_layout: one K block of ceil(N/nr) panels) — run() packs a
// transposed B into a per-thread buffer first. Both forms give bit-identical results.
#include <algorithm>
#include <cstddef>
#include <utility>

#include "kernels/gemm/jit_gemm_common.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

struct SmallArgs {
    const float* bias;
    const void* res;
    float alpha, beta;
};

using SmallFn = void (*)(const float* A, const float* B, float* C, const SmallArgs* p);

class JitGemmSmall : public JitGemmBase {
public:
    JitGemmSmall(const GemmSpec& s, Isa isa, bool panel_b) : JitGemmBase(gemm_code_isa(isa), 256 * 1024) {
        generate(s, panel_b);
    }

private:
    // Rows of a tile with nv vectors (accumulators + nv B registers + a broadcast register on AVX2
    // + the AVX2 tail mask when B's last vector is loaded masked).
    int rows_for(int nv, bool mask) const {
        const int free = nvregs_ - nv - (z_ ? 0 : 1) - (mask ? 1 : 0);
        return std::min(free / nv, z_ ? 28 : 12);
    }

    void generate(const GemmSpec& s, bool panel_b) {
        const GemmGeometry g = gemm_geometry(isa());
        const int vl = g.vlen, NR = g.nr;
        const int64_t M = s.M, N = s.N, K = s.K;
        const bool at = s.trans_a == Trans::T;
        const int64_t a_row = at ? 4 : s.lda * 4;  // bytes between rows of op(A)
        const int64_t a_k = at ? s.lda * 4 : 4;    // bytes between k of op(A)
        const int64_t b_k = panel_b ? NR * 4 : s.ldb * 4;
        const int64_t b_col = panel_b ? K * NR * 4 : NR * 4;  // bytes between column tiles of B
        const int64_t res_es = dtype_size(s.residual_type);
        const GemmEpi epi = gemm_epi(s);
        const int U = 8;

        // Registers: caller-saved ones first; r12 / r13 only with a residual. rcx holds the
        // arguments' pointer until they are read, then counts K (and holds the activation table
        // during the store). The scalars live at [rsp] (GemmScalars), the spill area after them.
        const Reg64 rA = rdi, rP = rcx;  // arguments (B in rsi, C in rdx)
        const Reg64 rBcol = rsi, rCcol = rdx, rAk = r8, rBk = r9, rCrow = r10, rBias = r11, rRescol = r12,
                    rResrow = r13, rK = rcx, rTmp = rax;
        const Reg64 rTbl = rK;  // the K counter is free during the store

        // The tiling (known now): columns of NR (+ one narrower), per column type balanced rows.
        const int64_t nfull = N / NR;
        const int ntail = static_cast<int>(N % NR);
        struct Rows {
            int lo = 0;
            int64_t n_hi = 0, n_lo = 0;  // n_hi tiles of lo + 1 rows, n_lo of lo
        };
        auto rows_of = [&](int nv, bool mask) {
            const int64_t max_rows = rows_for(nv, mask);
            const int64_t ntiles = (M + max_rows - 1) / max_rows;
            Rows r;
            r.lo = static_cast<int>(M / ntiles);
            r.n_hi = M % ntiles, r.n_lo = ntiles - r.n_hi;
            return r;
        };
        const int nv_tail = (ntail + vl - 1) / vl;
        const bool tail_masked = !panel_b && ntail % vl != 0;
        const Rows rows_full = rows_of(g.nv(), false), rows_tail = rows_of(std::max(nv_tail, 1), tail_masked);
        const bool m_loop = (nfull > 0 && (rows_full.n_hi > 1 || rows_full.n_lo > 1)) ||
                            (ntail > 0 && (rows_tail.n_hi > 1 || rows_tail.n_lo > 1));
        const bool n_loop = nfull > 1;
        const bool scal = !epi.alpha_one || epi.beta == BetaKind::other;
        const bool act = epi.act != Activation::none;
        const bool frame = scal || act || m_loop || n_loop;
        // Frame: GemmScalars at 0, the spill area, then the M / N loop counters.
        const int spill = nvregs_ * vl * 4;
        const int o_spill = static_cast<int>(sizeof(GemmScalars)), o_mcnt = o_spill + spill, o_ncnt = o_mcnt + 8;
        const int frame_bytes = o_ncnt + 56;

        if (epi.has_residual())
            preamble({r12, r13});
        else
            preamble();
        if (frame) {
            push(rbp);
            mov(rbp, rsp);
            and_(rsp, -64);
            sub(rsp, frame_bytes);
        }
        mov(rBias, ptr[rP + offsetof(SmallArgs, bias)]);
        if (epi.has_residual()) mov(rRescol, ptr[rP + offsetof(SmallArgs, res)]);
        if (scal) {
            // GemmScalars: alpha at 0, beta at 64 (AVX2 reads full vectors; AVX-512 broadcasts).
            vbroadcastss(V(0), ptr[rP + offsetof(SmallArgs, alpha)]);
            vmovups(ptr[rsp], V(0));
            vbroadcastss(V(0), ptr[rP + offsetof(SmallArgs, beta)]);
            vmovups(ptr[rsp + offsetof(GemmScalars, beta)], V(0));
        }

        EpiRegs er;
        er.c_row = rCrow, er.res_row = rResrow, er.bias = rBias, er.scal = rsp, er.tbl = rTbl, er.gtmp = rTmp;
        er.ldc_imm = s.ldc * 4;
        er.ldr_imm = s.ld_residual * res_es;

        // One tile of mr rows x nv vectors (ncols valid columns) at rAk / rBcol / rCrow.
        auto tile = [&](int mr, int nv, int ncols, bool mask_b) {
            const int w_last = ncols - (nv - 1) * vl;
            const int b_base = mr * nv, bc = b_base + nv, mask = nvregs_ - 1;
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) vxorps(V(acc_idx(i, j, nv)), V(acc_idx(i, j, nv)), V(acc_idx(i, j, nv)));
            if (mask_b && !z_) load_avx2_mask(V(mask), w_last, rTmp);
            mov(rBk, rBcol);
            auto step = [&](int u) {
                for (int j = 0; j < nv; ++j) {
                    const Address b = ptr[rBk + u * b_k + j * vl * 4];
                    if (mask_b && j == nv - 1 && w_last < vl)
                        load_partial(V(b_base + j), b, w_last, V(mask));
                    else
                        vmovups(V(b_base + j), b);
                }
                for (int i = 0; i < mr; ++i) {
                    const RegExp a = rAk + i * a_row + u * a_k;
                    if (z_) {
                        for (int j = 0; j < nv; ++j) vfmadd231ps(V(acc_idx(i, j, nv)), V(b_base + j), ptr_b[a]);
                    } else {
                        vbroadcastss(V(bc), ptr[a]);
                        for (int j = 0; j < nv; ++j) vfmadd231ps(V(acc_idx(i, j, nv)), V(b_base + j), V(bc));
                    }
                }
            };
            // K <= 16: fully unrolled, every address a displacement; else a loop of U steps and
            // the remainder unrolled.
            const int64_t iters = K <= 16 ? 0 : K / U, rem = K <= 16 ? K : K % U;
            if (iters > 0) {
                Label l_k;
                mov(rK, iters);
                L(l_k);
                for (int u = 0; u < U; ++u) step(u);
                add(rAk, U * a_k);
                add(rBk, U * b_k);
                dec(rK);
                jnz(l_k);
            }
            for (int u = 0; u < rem; ++u) step(u);
            // rAk: back to this tile's first k, then down mr rows.
            const int64_t a_adv = mr * a_row - (iters * U) * a_k;
            if (a_adv) add(rAk, static_cast<int32_t>(a_adv));
            emit_epilogue(epi, mr, nv, ncols, er, o_spill);
        };

        // One column of tiles (all of M). Tile heights are balanced (e.g. M = 32 in rows of at
        // most 6: 5, 5, 5, 5, 6, 6 rather than 6 x 5 + 2): a short tile has too few independent
        // accumulators to hide the FMA latency.
        auto column = [&](int nv, int ncols, bool mask_b, const Rows& rows) {
            const bool tail_vec = ncols < nv * vl;
            if (tail_vec) set_tail_mask(ncols - (nv - 1) * vl);
            mov(rAk, rA);
            mov(rCrow, rCcol);
            if (epi.has_residual()) mov(rResrow, rRescol);
            for (const auto& [height, count] : {std::pair<int, int64_t>{rows.lo + 1, rows.n_hi}, {rows.lo, rows.n_lo}}) {
                if (count > 1) {
                    Label l_m;
                    mov(qword[rsp + o_mcnt], static_cast<uint32_t>(count));
                    L(l_m);
                    tile(height, nv, ncols, mask_b && tail_vec);
                    dec(qword[rsp + o_mcnt]);
                    jnz(l_m);
                } else if (count == 1) {
                    tile(height, nv, ncols, mask_b && tail_vec);
                }
            }
        };
        auto next_column = [&](int64_t cols) {
            add(rCcol, static_cast<int32_t>(cols * 4));
            add(rBcol, static_cast<int32_t>(b_col));
            add(rBias, static_cast<int32_t>(cols * 4));
            if (epi.has_residual()) add(rRescol, static_cast<int32_t>(cols * res_es));
        };

        if (nfull > 1) {
            Label l_n;
            mov(qword[rsp + o_ncnt], static_cast<uint32_t>(nfull));
            L(l_n);
            column(g.nv(), NR, false, rows_full);
            next_column(NR);
            dec(qword[rsp + o_ncnt]);
            jnz(l_n);
        } else if (nfull == 1) {
            column(g.nv(), NR, false, rows_full);
            if (ntail) next_column(NR);
        }
        if (ntail) column(nv_tail, ntail, tail_masked, rows_tail);

        if (frame) {
            mov(rsp, rbp);
            pop(rbp);
        }
        postamble();
    }
};

class SmallGemm final : public GemmKernel {
public:
    SmallGemm(const GemmSpec& s, Isa isa)
        : s_(s), isa_(gemm_code_isa(isa)), layout_(gemm_b_layout(isa_, s.K, s.N)), panel_gen_(s, isa_, true) {
        panel_ = panel_gen_.finalize<SmallFn>();
        if (s.trans_b == Trans::N) {
            plain_gen_ = std::make_unique<JitGemmSmall>(s, isa_, false);
            plain_ = plain_gen_->finalize<SmallFn>();
        }
    }

    void run(const GemmCall& call) const override {
        const SmallArgs a{call.args.bias, call.args.residual, call.alpha, call.beta};
        const auto* A = static_cast<const float*>(call.args.A);
        auto* C = static_cast<float*>(call.args.C);
        if (call.packed_b) {
            panel_(A, static_cast<const float*>(call.packed_b->data), C, &a);
        } else if (plain_) {
            plain_(A, static_cast<const float*>(call.args.B), C, &a);
        } else {
            float* buf = gemm_thread_buffer(1, layout_.floats());
            gemm_pack_b(static_cast<const float*>(call.args.B), s_.ldb, true, s_.K, s_.N, static_cast<int>(layout_.nr), buf);
            panel_(A, buf, C, &a);
        }
    }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return gemm_jit_pack_b(s_, layout_, B); }
    std::string packed_layout() const override { return layout_.name; }

private:
    GemmSpec s_;
    Isa isa_;
    GemmBLayout layout_;
    JitGemmSmall panel_gen_;
    SmallFn panel_ = nullptr;
    std::unique_ptr<JitGemmSmall> plain_gen_;
    SmallFn plain_ = nullptr;
};

}  // namespace

bool gemm_small_supports(const GemmSpec& s) {
    constexpr int64_t kMax = 64, kMaxLd = int64_t(1) << 20;  // displacements stay 32-bit
    return s.a_type == DType::f32 && s.b_type == DType::f32 && s.c_type == DType::f32 && s.M >= 1 && s.M <= kMax &&
           s.N >= 1 && s.N <= kMax && s.K >= 1 && s.K <= kMax && s.lda <= kMaxLd && s.ldb <= kMaxLd &&
           s.ldc <= kMaxLd && s.ld_residual <= kMaxLd;
}

std::shared_ptr<const GemmKernel> create_gemm_small(const GemmSpec& s, Isa isa) {
    return std::make_shared<SmallGemm>(s, isa);
}

}  // namespace xk::detail
