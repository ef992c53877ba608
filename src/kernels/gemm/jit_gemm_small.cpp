// Direct fp32 GEMM, libxsmm-style: one function generated for the exact shape, leading
// dimensions, transposes and epilogue; no packing of A, every stride and displacement folded into
// the code. Two forms:
//   small  (M, N, K <= 64): the whole problem in one call, no threading; a plan's run() checks
//          the pointers and jumps into the generated code (GemmFastPath::fn is the code itself:
//          no GemmCall, no virtual call, no frame in between).
//   direct (B of at most 40% of L2, K within one packed-B block): tall-skinny, medium cubes,
//          few columns, where packing would not pay for itself; the M tiles are split over
//          threads, each call running a range of them.
//
// Tiles: columns of nr = 2 vectors (the blocked kernel's panel width; the last column may be
// narrower, its last vector masked), rows as many as the register file holds beside them (AVX2
// 6 for two vectors / 12 for one; AVX-512 15 / 28), heights balanced over M (e.g. M = 32:
// 5, 5, 5, 5, 6, 6 — a short tile has too few accumulators to hide the FMA latency). The AVX2
// small form with B read in place uses columns of 4 vectors instead (3 x 4 tiles, A outer: 3
// broadcasts and 4 B loads per 12 FMAs, libxsmm's AVX2 tile; narrower last columns B outer, see
// wide_rows). The AVX-512 small form with B in place has alternative tilings behind an experiment
// override (XK_GEMM_SMALL_ZMM, small_zmm_tiling: register broadcasts, columns of 4 zmm in either
// step order, ymm for columns of <= 8 floats); the default is the panel width above.
// Per tile: k = 0 multiplies into the accumulators (no zeroing), the rest of the K
// loop (fully unrolled for K <= 16, else by 8 with the remainder unrolled) loads B vectors
// straight from B and broadcasts A straight from A (either transpose), then the fused store of
// JitGemmBase. Small: columns outer, tiles inner (B's column block stays in L1; rows outer as
// libxsmm measured no faster here); direct: tiles outer, columns inner (A's rows stay in L1, B
// is small).
// B: op(B) read in place when trans_b = N (direct form: unless its rows are a multiple of 256
// bytes apart, where they would thrash a few cache sets); otherwise (trans_b = T, or a PackedB)
// from the JIT kernels' packed layout (gemm_b_layout: one K block of ceil(N/nr) panels) — run()
// packs B into a per-thread buffer first. Every form sums each element of C in the same order
// (k = 0, 1, ..), so all give bit-identical results, and so do 1 and 2 threads.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

#include "common/parallel.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "xk/runtime.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

struct SmallArgs {
    const float* bias;
    const void* res;
    float alpha, beta;
    int64_t tiles_hi, tiles_lo;  // direct: the call's tiles of each height (rows hi = lo + 1)
};

// The direct form: A, B and C at the call's first tile row, the rest in SmallArgs.
using SmallFn = void (*)(const float* A, const float* B, float* C, const SmallArgs* p);
// The small form (GemmFastPath::fn): A, B (args->B or a packed B), C, the GemmArgs (bias and
// residual read from it) and {alpha, beta}.
using SmallPlanFn = GemmSmallFn;

// Rows of a tile with nv vectors: the accumulators + nv B registers + a broadcast register (AVX2)
// + the AVX2 tail mask (counted always, so that the height does not depend on B's form).
int rows_for(Isa isa, int nv) {
    const bool z = gemm_code_isa(isa) == Isa::avx512;
    const int nvregs = z ? 32 : 16;
    const int free = nvregs - nv - (z ? 0 : 1) - (z ? 0 : 1);
    return std::min(free / nv, z ? 28 : 12);
}

// AVX2 small form with B read in place (16 ymm): the rows of a column of nv vectors in the two
// step orders. B outer: nv B vectors loaded, then each row's broadcast (nv + 1 registers beside
// the accumulators); A outer: the rows' broadcasts, then one B vector at a time (rows + 1). A
// masked last vector also holds its mask. A outer where it fits more rows: nv = 4 (3 rows against
// 2); nv <= 3 stay B outer (nv = 3: 4 rows against 3).
int b_outer_rows(int nv, bool masked) { return std::min((16 - nv - 1 - (masked ? 1 : 0)) / nv, 12); }
int a_outer_rows(int nv, bool masked) { return std::min((16 - 1 - (masked ? 1 : 0)) / (nv + 1), 12); }
bool wide_a_outer(int nv, bool masked) { return a_outer_rows(nv, masked) > b_outer_rows(nv, masked); }
int wide_rows(int nv, bool masked) { return std::max(a_outer_rows(nv, masked), b_outer_rows(nv, masked)); }

// AVX-512 small form with B read in place: the tiling, an experiment override
// (XK_GEMM_SMALL_ZMM=<variant>, read when the kernel is generated; default 0). Every variant sums
// each element of C in the same k order (bit-identical results); they differ in the column width,
// the step order and how A is broadcast:
//   0: columns of 2 zmm, B outer, A broadcast from memory inside each FMA ({1to16}): nv B
//      registers + the accumulators (rows_for: 15 rows x 2, 28 x 1);
//   1: as 0, A broadcast into 2 alternating registers (vbroadcastss, then the row's FMAs): 14 x 2,
//      28 x 1;
//   2: columns of 4 zmm, A outer: the rows' broadcasts held in registers, then one B vector at a
//      time (2 alternating B registers) against every row: 6 x 4, 7 x 3, 10 x 2, 15 x 1;
//   3: columns of 4 zmm, B outer, embedded broadcasts (as 0): 7 x 4, 9 x 3, 15 x 2, 28 x 1;
//   4: as 0, but a tile of a column of at most 8 floats (N <= 8, narrow last columns) runs on ymm
//      registers, K loop and store (JitGemmBase::set_ymm; AVX-512VL encodings, {1to8} broadcasts,
//      plain 8-float loads / stores where the column is 8 wide, k1-masked below) instead of
//      half-masked zmm;
//   5: columns of 4 zmm, B outer, A broadcast into 2 alternating registers: 6 x 4, 9 x 3, 14 x 2,
//      28 x 1.
struct ZTiling {
    int cv = 2;              // vectors per full column
    bool a_outer = false;    // A outer (else B outer)
    bool reg_bcast = false;  // B outer: A broadcast into registers (else embedded broadcasts)
    bool ymm_narrow = false; // columns of <= 8 floats on ymm
};
ZTiling small_zmm_tiling(int v) {
    ZTiling t;
    if (v == 1) t.reg_bcast = true;
    if (v == 2) t.cv = 4, t.a_outer = true;
    if (v == 3) t.cv = 4;
    if (v == 4) t.ymm_narrow = true;
    if (v == 5) t.cv = 4, t.reg_bcast = true;
    return t;
}
// Whether a column of nv vectors, ncols floats, takes the ymm K loop.
bool ztile_ymm(const ZTiling& t, int nv, int ncols) { return t.ymm_narrow && nv == 1 && ncols <= 8; }
// Rows of a tile of nv zmm vectors under the tiling (at most 28, as rows_for).
int ztile_rows(const ZTiling& t, int nv, int ncols) {
    if (ztile_ymm(t, nv, ncols)) return 28;
    if (t.a_outer) return std::min((32 - 2) / (nv + 1), 28);  // + rows broadcasts + 2 B registers
    if (t.reg_bcast) return std::min((32 - nv - 2) / nv, 28);  // + nv B + 2 broadcast registers
    return std::min((32 - nv) / nv, 28);                       // + nv B registers
}
int small_zmm_variant() {
    const char* e = std::getenv("XK_GEMM_SMALL_ZMM");
    if (!e || !*e) return 0;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (*end != '\0' || v < 0 || v >= kGemmSmallZmmVariants)
        throw Error(Status::invalid_argument, std::string("XK_GEMM_SMALL_ZMM: unknown variant '") + e + "' (0.." +
                                                  std::to_string(kGemmSmallZmmVariants - 1) + ")");
    return static_cast<int>(v);
}

// Balanced tile heights over M: n_hi tiles of lo + 1 rows, then n_lo tiles of lo rows.
struct Rows {
    int lo = 0;
    int64_t n_hi = 0, n_lo = 0;
    int64_t tiles() const { return n_hi + n_lo; }
    int64_t row_of(int64_t t) const { return t < n_hi ? t * (lo + 1) : n_hi * (lo + 1) + (t - n_hi) * lo; }
};
Rows rows_of(int64_t M, int max_rows) {
    const int64_t ntiles = (M + max_rows - 1) / max_rows;
    Rows r;
    r.lo = static_cast<int>(M / ntiles);
    r.n_hi = M % ntiles, r.n_lo = ntiles - r.n_hi;
    return r;
}
// The direct form's single tiling (its columns share the tiles).
Rows direct_rows(const GemmSpec& s, Isa isa) {
    const GemmGeometry g = gemm_geometry(isa);
    const int nv = s.N >= g.nr ? g.nv() : static_cast<int>((s.N + g.vlen - 1) / g.vlen);
    return rows_of(s.M, rows_for(isa, nv));
}

class JitGemmSmall : public JitGemmBase {
public:
    // zvariant: the AVX-512 small form's tiling with B in place (small_zmm_tiling; ignored elsewhere).
    JitGemmSmall(const GemmSpec& s, Isa isa, bool panel_b, bool direct, int zvariant = 0)
        : JitGemmBase(gemm_code_isa(isa), 256 * 1024) {
        generate(s, panel_b, direct, zvariant);
    }

private:
    void generate(const GemmSpec& s, bool panel_b, bool direct, int zvariant) {
        const GemmGeometry g = gemm_geometry(isa());
        const int vl = g.vlen, NR = g.nr;
        const int64_t M = s.M, N = s.N, K = s.K;
        const bool at = s.trans_a == Trans::T;
        const int64_t a_row = at ? 4 : s.lda * 4;  // bytes between rows of op(A)
        const int64_t a_k = at ? s.lda * 4 : 4;    // bytes between k of op(A)
        const int64_t b_k = panel_b ? NR * 4 : s.ldb * 4;
        const int64_t res_es = dtype_size(s.residual_type);
        const int64_t ldc_b = s.ldc * 4, ldr_b = s.ld_residual * res_es;
        const GemmEpi epi = gemm_epi(s);
        const bool res = epi.has_residual();
        const int U = 8;
        const int64_t kUnrollAll = 16;
        // AVX2, B read in place, small form: columns of up to 4 vectors (libxsmm's width: a 3 x 4
        // tile reads 7 operands per 12 FMAs where 6 x 2 reads 8, and its B rows are read whole
        // for N = 32 / 64), each column with the order that fits more rows (below). Elsewhere
        // (AVX-512, packed B, the direct form): the blocked kernel's panel width NR.
        const bool wide = !panel_b && !direct && !z_;
        // AVX-512, B read in place, small form: the variant's tiling (default: as the others).
        const bool zp = !panel_b && !direct && z_;
        const ZTiling zt = small_zmm_tiling(zp ? zvariant : 0);
        const int CV = wide ? 4 : zp ? zt.cv : g.nv();
        const int CW = CV * vl;
        // The tiling: columns of CW (+ one narrower).
        const int64_t nfull = N / CW;
        const int ntail = static_cast<int>(N % CW);
        const int nv_tail = (ntail + vl - 1) / vl;
        const bool tail_masked = !panel_b && ntail % vl != 0;
        auto max_rows = [&](int nv, int ncols, bool masked) {
            return wide ? wide_rows(nv, masked) : zp ? ztile_rows(zt, nv, ncols) : rows_for(isa(), nv);
        };
        const Rows rows_full = rows_of(M, max_rows(CV, CW, false));
        const Rows rows_tail = rows_of(M, max_rows(std::max(nv_tail, 1), ntail, tail_masked));
        const Rows rows_direct = direct_rows(s, isa());

        // Registers. Arguments: A rdi, B rsi, C rdx, SmallArgs (direct form) or GemmArgs (small
        // form) rcx, read first (rcx then counts K and holds the activation table during the
        // store); small form: {alpha, beta} r8. Small: columns outer, so the column cursors are
        // the arguments' registers; direct: tiles outer, columns inner, with bases.
        const Reg64 rA = rdi, rP = rcx, rAk = r8, rBk = r9, rCrow = r10, rK = rcx, rTmp = rax, rTbl = rcx;
        Reg64 rBcol = rsi, rCcol = rdx, rBias = r11, rResrow = r13, rRescol = r12;
        Reg64 rB = rsi, rCt = rdx, rBiasBase = r11, rRest = r14;  // direct: bases / tile cursors
        std::vector<Reg64> saved;
        if (direct) {
            rBcol = r15, rCcol = r12, rBias = rbx, rRescol = rbp, rResrow = r13;
            saved = {rbx, rbp, r12, r13, r14, r15};
        } else if (res) {
            saved = {r12, r13};
        }
        const bool scal = !epi.alpha_one || epi.beta == BetaKind::other;
        const bool act = epi.act != Activation::none;
        const bool m_loop = (nfull > 0 && (rows_full.n_hi > 1 || rows_full.n_lo > 1)) ||
                            (ntail > 0 && (rows_tail.n_hi > 1 || rows_tail.n_lo > 1));
        const bool frame = direct || scal || act || m_loop || nfull > 1;
        // Frame (unaligned is fine: every stack access is vmovups or a memory operand):
        // GemmScalars at 0, the spill area, then loop counters.
        const int o_spill = static_cast<int>(sizeof(GemmScalars));
        const int o_mcnt = o_spill + nvregs_ * vl * 4, o_ncnt = o_mcnt + 8, o_ccnt = o_ncnt + 8;
        const int frame_bytes = o_ccnt + 8;

        preamble(saved);
        if (frame) sub(rsp, frame_bytes);
        // GemmScalars: alpha at 0, beta at 64 (AVX2 reads full vectors; AVX-512 broadcasts).
        auto scalars = [&](const Address& alpha, const Address& beta) {
            vbroadcastss(V(0), alpha);
            vmovups(ptr[rsp], V(0));
            vbroadcastss(V(0), beta);
            vmovups(ptr[rsp + offsetof(GemmScalars, beta)], V(0));
        };
        if (direct) {
            mov(rBias, ptr[rP + offsetof(SmallArgs, bias)]);
            if (res) mov(rRest, ptr[rP + offsetof(SmallArgs, res)]);
            if (scal) scalars(ptr[rP + offsetof(SmallArgs, alpha)], ptr[rP + offsetof(SmallArgs, beta)]);
        } else {
            const Reg64 rAB = r8;
            if (scal) scalars(ptr[rAB], ptr[rAB + 4]);
            if (epi.bias) mov(rBias, ptr[rP + offsetof(GemmArgs, bias)]);
            if (res) mov(rRescol, ptr[rP + offsetof(GemmArgs, residual)]);
        }
        if (direct) {
            mov(rTmp, ptr[rP + offsetof(SmallArgs, tiles_hi)]);
            mov(qword[rsp + o_mcnt], rTmp);
            mov(rTmp, ptr[rP + offsetof(SmallArgs, tiles_lo)]);
            mov(qword[rsp + o_ncnt], rTmp);  // (the lo count waits here until the hi tiles are done)
            mov(rBiasBase, rBias);
        }

        EpiRegs er;
        er.c_row = rCrow, er.res_row = rResrow, er.bias = rBias, er.scal = rsp, er.tbl = rTbl, er.gtmp = rTmp;
        er.ldc_imm = ldc_b;
        er.ldr_imm = ldr_b;

        // One tile of mr rows x nv vectors (ncols valid columns): A at rAk (advanced mr rows),
        // B at rBcol, C at rCrow and the residual at rResrow (both advanced mr rows).
        auto tile = [&](int mr, int nv, int ncols, bool mask_b) {
            const int w_last = ncols - (nv - 1) * vl;
            const int b_base = mr * nv, bc = b_base + nv, mask = nvregs_ - 1;
            // The vector registers the tile may use (AVX2: the last one holds a B mask).
            const int limit = mask_b && !z_ ? mask : nvregs_;
            // AVX-512 small form: the variant's step order and broadcasts; a narrow column on ymm.
            const bool ymm = zp && ztile_ymm(zt, nv, ncols);
            const bool reg_bcast = !z_ || (zp && zt.reg_bcast && !ymm);
            // Two broadcast registers, alternating, where the mask leaves room for them.
            const int nbc = reg_bcast ? std::min(2, limit - bc) : 0;
            const bool a_outer = wide ? wide_a_outer(nv, mask_b) : zp && zt.a_outer && !ymm;
            if (a_outer ? mr * nv + mr + 1 > limit : (bc > nvregs_ || (reg_bcast && nbc < 1)))
                throw Error(Status::invalid_argument, "gemm small kernel: tile of " + std::to_string(mr) + " x " +
                                                          std::to_string(nv) + " vectors does not fit the registers");
            // A narrow column: the whole tile (K loop and store) on ymm registers.
            set_ymm(ymm);

            if (mask_b && !z_) load_avx2_mask(V(mask), w_last, rTmp);
            // Direct form: C's next tile to the right (rows are swept left to right) is touched
            // in advance; a short K leaves the stores too little time otherwise.
            if (direct)
                for (int i = 0; i < mr; ++i) prefetcht0(ptr[rCrow + static_cast<int32_t>(i * ldc_b + NR * 4)]);
            // No zeroing: k = 0 multiplies (acc = a b: what 0 + a b rounds to, but for the sign of
            // a zero product; 32 x 64 x 16: +10%). K <= 16: fully unrolled, every address a
            // displacement; else k = 0, a loop of U steps over k = 1.., the remainder unrolled.
            const int64_t Kr = K - 1;
            const int64_t iters = K <= kUnrollAll ? 0 : Kr / U, rem = K <= kUnrollAll ? Kr : Kr % U;
            bool first = true;
            auto fma = [&](const Xmm& acc, const Xmm& b, const Operand& a) {
                if (first)
                    vmulps(acc, b, a);
                else
                    vfmadd231ps(acc, b, a);
            };
            const Reg64 rb = iters > 0 ? rBk : rBcol;
            if (iters > 0) mov(rBk, rBcol);
            // A outer: the mr rows of A broadcast first, then one B vector at a time.
            auto step_a = [&](int u) {
                const int bc0 = mr * nv, nbr = std::min(2, limit - bc0 - mr);
                for (int i = 0; i < mr; ++i) vbroadcastss(V(bc0 + i), ptr[rAk + i * a_row + u * a_k]);
                for (int j = 0; j < nv; ++j) {
                    const Xmm bj = V(bc0 + mr + j % nbr);
                    const Address b = ptr[rb + u * b_k + j * vl * 4];
                    if (mask_b && j == nv - 1 && w_last < vl)
                        load_partial(bj, b, w_last, V(mask));
                    else
                        vmovups(bj, b);
                    for (int i = 0; i < mr; ++i) fma(V(acc_idx(i, j, nv)), bj, V(bc0 + i));
                }
            };
            auto step = [&](int u) {
                if (a_outer) return step_a(u);
                for (int j = 0; j < nv; ++j) {
                    const Address b = ptr[rb + u * b_k + j * vl * 4];
                    if (ymm && w_last < 8)
                        vmovups(V(b_base + j) | k1 | T_z, b);  // k1: the column's w_last lanes
                    else if (ymm)
                        vmovups(V(b_base + j), b);
                    else if (mask_b && j == nv - 1 && w_last < vl)
                        load_partial(V(b_base + j), b, w_last, V(mask));
                    else
                        vmovups(V(b_base + j), b);
                }
                for (int i = 0; i < mr; ++i) {
                    const RegExp a = rAk + i * a_row + u * a_k;
                    if (!reg_bcast) {
                        for (int j = 0; j < nv; ++j) fma(V(acc_idx(i, j, nv)), V(b_base + j), ptr_b[a]);
                    } else {
                        const Xmm b = V(bc + i % nbc);
                        vbroadcastss(b, ptr[a]);
                        for (int j = 0; j < nv; ++j) fma(V(acc_idx(i, j, nv)), V(b_base + j), b);
                    }
                }
            };
            step(0);
            first = false;
            if (iters > 0) {
                Label l_k;
                mov(rK, iters);
                L(l_k);
                for (int u = 0; u < U; ++u) step(1 + u);
                add(rAk, U * a_k);
                add(rBk, U * b_k);
                dec(rK);
                jnz(l_k);
            }
            for (int u = 0; u < rem; ++u) step(1 + u);
            // rAk: back to this tile's first k, then down mr rows.
            const int64_t a_adv = mr * a_row - (iters * U) * a_k;
            if (a_adv) add(rAk, static_cast<int32_t>(a_adv));
            emit_epilogue(epi, mr, nv, ncols, er, o_spill);
            set_ymm(false);
        };
        // The same tile for every count tiles (runtime loop over a stack counter when count > 1).
        auto repeat = [&](int64_t count, int o_cnt, const std::function<void()>& f) {
            if (count > 1) {
                Label l;
                mov(qword[rsp + o_cnt], static_cast<uint32_t>(count));
                L(l);
                f();
                dec(qword[rsp + o_cnt]);
                jnz(l);
            } else if (count == 1) {
                f();
            }
        };
        const int64_t b_col = panel_b ? K * NR * 4 : CW * 4;  // bytes between column tiles of B
        auto next_column = [&](int64_t cols) {
            add(rCcol, static_cast<int32_t>(cols * 4));
            add(rBcol, static_cast<int32_t>(b_col));
            if (epi.bias) add(rBias, static_cast<int32_t>(cols * 4));
            if (res) add(rRescol, static_cast<int32_t>(cols * res_es));
        };

        if (!direct) {
            // Columns outer; per column all of M, its tiles one after the other.
            auto column = [&](int nv, int ncols, bool mask_b, const Rows& rows) {
                const bool tail_vec = ncols < nv * vl;
                if (tail_vec) set_tail_mask(ncols - (nv - 1) * vl);
                mov(rAk, rA);
                mov(rCrow, rCcol);
                if (res) mov(rResrow, rRescol);
                for (const auto& [height, count] :
                     {std::pair<int, int64_t>{rows.lo + 1, rows.n_hi}, {rows.lo, rows.n_lo}})
                    repeat(count, o_mcnt, [&, height = height] { tile(height, nv, ncols, mask_b && tail_vec); });
            };
            if (nfull > 1) {
                Label l_n;
                mov(qword[rsp + o_ncnt], static_cast<uint32_t>(nfull));
                L(l_n);
                column(CV, CW, false, rows_full);
                next_column(CW);
                dec(qword[rsp + o_ncnt]);
                jnz(l_n);
            } else if (nfull == 1) {
                column(CV, CW, false, rows_full);
                if (ntail) next_column(CW);
            }
            if (ntail) column(nv_tail, ntail, tail_masked, rows_tail);
        } else {
            // Tiles outer (their counts come with the call: hi tiles at o_mcnt, lo at o_ncnt),
            // columns inner (a runtime loop over o_ccnt beyond two full columns).
            auto row_of_tiles = [&](int height) {
                mov(rBcol, rB);
                mov(rCcol, rCt);
                mov(rBias, rBiasBase);
                if (res) mov(rRescol, rRest);
                auto col = [&](int nv, int ncols, bool mask_b) {
                    const bool tail_vec = ncols < nv * vl;
                    if (tail_vec) set_tail_mask(ncols - (nv - 1) * vl);
                    mov(rAk, rA);
                    mov(rCrow, rCcol);
                    if (res) mov(rResrow, rRescol);
                    tile(height, nv, ncols, mask_b && tail_vec);
                };
                if (nfull > 2) {
                    Label l_c;
                    mov(qword[rsp + o_ccnt], static_cast<uint32_t>(nfull));
                    L(l_c);
                    col(g.nv(), NR, false);
                    next_column(NR);
                    dec(qword[rsp + o_ccnt]);
                    jnz(l_c);
                } else {
                    for (int64_t c = 0; c < nfull; ++c) {
                        col(g.nv(), NR, false);
                        if (c + 1 < nfull || ntail) next_column(NR);
                    }
                }
                if (ntail) col(nv_tail, ntail, tail_masked);
                add(rA, static_cast<int32_t>(height * a_row));
                add(rCt, static_cast<int32_t>(height * ldc_b));
                if (res) add(rRest, static_cast<int32_t>(height * ldr_b));
            };
            for (int kind = 0; kind < 2; ++kind) {
                if ((kind == 0 ? rows_direct.n_hi : rows_direct.n_lo) == 0) continue;  // no such tiles
                const int height = kind == 0 ? rows_direct.lo + 1 : rows_direct.lo;
                const int o = kind == 0 ? o_mcnt : o_ncnt;
                Label l, l_skip;
                cmp(qword[rsp + o], 0);
                je(l_skip);
                L(l);
                row_of_tiles(height);
                dec(qword[rsp + o]);
                jnz(l);
                L(l_skip);
            }
        }

        if (frame) add(rsp, frame_bytes);
        postamble();
    }
};

class SmallGemm final : public GemmKernel {
public:
    SmallGemm(const GemmSpec& s, Isa isa, bool direct, int zvariant = 0)
        : s_(s),
          isa_(gemm_code_isa(isa)),
          direct_(direct),
          rows_(direct_rows(s, isa_)),
          layout_(gemm_b_layout(isa_, s.K, s.N)),
          panel_gen_(s, isa_, true, direct) {
        panel_ = panel_gen_.finalize<const void*>();
        // B read in place (trans_b N) unless its rows are a multiple of 256 bytes apart in the
        // direct form: then a tile's K rows of B fall into a few cache sets and evict each other
        // (1024 x 1024 x 32: 38 GFLOP/s in place, ~85 packed per call).
        const bool conflicts = direct && s.ldb % 64 == 0;
        if (s.trans_b == Trans::N && !conflicts) {
            plain_gen_ = std::make_unique<JitGemmSmall>(s, isa_, false, direct, zvariant);
            plain_ = plain_gen_->finalize<const void*>();
        }
    }

    void run(const GemmCall& call) const override {
        const void* B = call.args.B;
        const void* code = plain_;
        if (call.packed_b) {
            B = call.packed_b->data, code = panel_;
        } else if (!plain_) {
            float* buf = gemm_thread_buffer(1, layout_.floats());
            gemm_pack_b(static_cast<const float*>(B), s_.ldb, s_.trans_b == Trans::T, s_.K, s_.N,
                        static_cast<int>(layout_.nr), buf);
            B = buf, code = panel_;
        }
        if (!direct_) {
            const float ab[2] = {call.alpha, call.beta};
            reinterpret_cast<SmallPlanFn>(const_cast<void*>(code))(call.args.A, B, call.args.C, &call.args, ab);
            return;
        }
        const auto fn = reinterpret_cast<SmallFn>(const_cast<void*>(code));
        const SmallArgs a{call.args.bias, call.args.residual, call.alpha, call.beta, 0, 0};
        const auto* A = static_cast<const float*>(call.args.A);
        const auto* Bf = static_cast<const float*>(B);
        auto* C = static_cast<float*>(call.args.C);
        // Tiles [t0, t1) per call: A, C and the residual at the range's first row.
        const int64_t ntiles = rows_.tiles();
        const int64_t macs_per_tile = std::max<int64_t>(1, (rows_.lo + 1) * s_.N * s_.K);
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 20) / macs_per_tile);
        const bool at = s_.trans_a == Trans::T;
        const auto* res = static_cast<const unsigned char*>(call.args.residual);
        const int64_t res_row = s_.ld_residual * dtype_size(s_.residual_type);
        auto range = [&](int64_t t0, int64_t t1) {
            SmallArgs r = a;
            r.tiles_hi = std::max<int64_t>(0, std::min(t1, rows_.n_hi) - t0);
            r.tiles_lo = (t1 - t0) - r.tiles_hi;
            const int64_t row = rows_.row_of(t0);
            if (res) r.res = res + row * res_row;
            fn(at ? A + row : A + row * s_.lda, Bf, C + row * s_.ldc, &r);
        };
        const int nthr = parallel_threads(ntiles, grain);
        if (nthr <= 1) {
            range(0, ntiles);
            return;
        }
        // Chunks of tiles handed out as threads become free (four per thread): a thread slowed
        // down by a busy core takes fewer.
        const int64_t chunk = std::max<int64_t>(1, (ntiles + 4 * nthr - 1) / (4 * nthr));
        std::atomic<int64_t> next{0};
        parallel_for(nthr, 1, [&](int64_t, int64_t) {
            for (int64_t t0 = next.fetch_add(chunk); t0 < ntiles; t0 = next.fetch_add(chunk))
                range(t0, std::min(ntiles, t0 + chunk));
        });
    }

    // Small form with B read in place: the plan calls the generated code directly.
    GemmFastPath fast_path() const override {
        if (direct_ || !plain_) return {};
        GemmFastPath f;
        f.fn = reinterpret_cast<SmallPlanFn>(const_cast<void*>(plain_));
        return f;
    }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return gemm_jit_pack_b(s_, layout_, B); }
    std::string packed_layout() const override { return layout_.name; }

private:
    GemmSpec s_;
    Isa isa_;
    bool direct_;
    Rows rows_;
    GemmBLayout layout_;
    JitGemmSmall panel_gen_;
    const void* panel_ = nullptr;  // SmallPlanFn (small form) or SmallFn (direct form)
    std::unique_ptr<JitGemmSmall> plain_gen_;
    const void* plain_ = nullptr;
};

constexpr int64_t kMaxLd = int64_t(1) << 20;  // displacements stay 32-bit

bool f32_direct(const GemmSpec& s) {
    return s.a_type == DType::f32 && s.b_type == DType::f32 && s.c_type == DType::f32 && s.M >= 1 && s.N >= 1 &&
           s.K >= 1 && s.lda <= kMaxLd && s.ldb <= kMaxLd && s.ldc <= kMaxLd && s.ld_residual <= kMaxLd;
}

}  // namespace

bool gemm_small_supports(const GemmSpec& s) { return f32_direct(s) && s.M <= 64 && s.N <= 64 && s.K <= 64; }

std::shared_ptr<const GemmKernel> create_gemm_small(const GemmSpec& s, Isa isa) {
    // The AVX-512 tiling override is read here, when the kernel is generated (the kernel cache
    // then keeps it for the process).
    return std::make_shared<SmallGemm>(s, isa, false, gemm_code_isa(isa) == Isa::avx512 ? small_zmm_variant() : 0);
}

// Where packing does not pay for itself: B (K x N) small enough to stay in L2 beside the rest
// (at most 40% of it: measured, 200^3 and 2048 x 128 x 128 run faster here than blocked, 256^3
// slower) and within one packed-B block (the packed form reads one K block). Tall-skinny,
// medium cubes, and short-K problems with few columns land here.
bool gemm_direct_supports(const GemmSpec& s, Isa isa) {
    const CpuInfo& ci = cpu_info();
    const int64_t l2 = ci.l2_bytes > 0 ? ci.l2_bytes / std::max(1, ci.l2_shared_by) : 256 * 1024;
    return f32_direct(s) && s.K <= gemm_b_layout(isa, s.K, s.N).kc && s.K * s.N * 4 <= l2 * 2 / 5;
}

std::shared_ptr<const GemmKernel> create_gemm_direct(const GemmSpec& s, Isa isa) {
    return std::make_shared<SmallGemm>(s, isa, true);
}

}  // namespace xk::detail
