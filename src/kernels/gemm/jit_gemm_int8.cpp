// INT8 GEMM (u8|s8 x s8 -> s32 | f32 | u8 | s8), three code shapes of one blocked kernel:
//   jit:avx512_vnni:int8  VPDPBUSD zmm, 14 x 32 register tile
//   jit:avx2_vnni:int8    VPDPBUSD ymm, 6 x 16: the VEX form (AVX-VNNI) where the CPU has it, else
//                         the EVEX form (AVX512-VNNI + VL, e.g. Ice Lake / Cascade Lake servers)
//   jit:avx2:int8         exact on AVX2: A - a_zero_point and B widened to s16 as they are packed
//                         (pairs of k: the same 4-byte groups), VPMADDWD + VPADDD, 6 x 16. Every
//                         product and pair sum fits (|a - za| <= 255, |b| <= 128): no saturation
//                         (VPMADDUBSW would saturate its 16-bit pair sums), and the zero point of
//                         A costs nothing more; the one of B is the row term below.
//
// Operands:
//   B (s8) is packed once into the VNNI-4 layout: panels of NR columns, each holding every group
//     of 4 consecutive k (K padded with zeros to Kp, a multiple of 4) as NR x 4 bytes (column c's
//     4 k values at c*4); panel p at p * Kp * NR bytes; then the NR-padded column sums
//     colsum[n] = sum_k b[k][n] (int32) after the panels. A PackedB is exactly that (layout
//     "jit:int8:vnni:K..:N..:nr.."), reusable by a plan of any M.
//   A is packed per block of rows as u8 in panels of MR rows: [panel][k group][MR][4]; an s8 A
//     is shifted to u8 (a' = a + 128, an xor with 0x80), its zero point likewise (za' = za + 128).
// Zero points and the shift through row and column sums, never a subtraction per element:
//   sum (a - za)(b - zb) = sum a'b - zb * rowsum(a') - za' * colsum(b) + K za' zb   (mod 2^32)
// The row term (rowc[m] = -zb rowsum(a')) is computed as A is packed, the column term
// (colc[n] = -za' colsum[n] + K za' zb) once per call from the packed column sums; the
// microkernel adds both to its s32 accumulators before the store. Every step wraps modulo 2^32
// like the reference's s32 sum, so s32 results are bit for bit the reference's.
// Epilogues: s32 C (beta 0 / 1: a vpaddd of C); f32: float(acc) times the per-column
// (alpha * a_scale) * b_scale[n] (the reference's order of products), then the fp32 kernels'
// fused store (JitGemmBase::emit_epilogue: beta, bias, activation, residual); u8 / s8: that f32
// store into a tile on the stack, then x * inv_c_scale, VRNDSCALEPS to nearest even, + zero
// point, max / min against the type's range (VMAXPS returns its second operand for a NaN first:
// NaN -> the minimum), VCVTPS2DQ and a saturating VPMOV[US]DB store — the reference's
// gemm_requantize bit for bit.
//
// Blocking: K in blocks of at most kKcMax (a kc x NR B chunk, 24 KiB, stays in L1 while every A
// panel of the row block streams past it from L2); rows in blocks of mc (mc x Kp bytes of packed
// A within half of L2); loops per part: ic (pack A rows, all of K) > jr (B panel) > K block >
// A panels (one microkernel call). K blocks before the last add into an s32 scratch of mc x NR
// per thread; the last one adds the scratch and stores with the epilogue. Threads: the (M, N)
// tile grid cut into pm x pn rectangles (the least compute + A packing per thread), then three
// parts per thread handed out dynamically; an unpacked B is packed first, in parallel, into a
// per-call buffer, or panel by panel inside the part that reads it where no part shares a panel.
// Results do not depend on the blocking or the thread count.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <emmintrin.h>
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands) when they are
// inlined into target-attribute functions: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <memory>
#include <vector>

#include "common/parallel.hpp"
#include "dispatch/kernel_cache.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "kernels/gemm/jit_gemm_int8.hpp"
#include "xk/runtime.hpp"

namespace xk::detail {

using namespace Xbyak;

namespace {

constexpr int64_t kMinMacsPerThread = int64_t(1) << 21;
constexpr int kExtraParts = 3;  // parts per thread (handed out dynamically)
// Largest per-call shared packed A (bytes); above it each part packs its own rows.
constexpr int64_t kShareAMax = int64_t(64) << 20;
using PanelFlag = std::atomic<uint32_t>;
constexpr int64_t kKcBBytes = 24 * 1024;
int64_t kc_bytes() {
    const char* e = std::getenv("XK_GEMM_INT8_KCB");
    return e ? std::atoll(e) : kKcBBytes;
}  // K block: its kc x NR bytes of B in L1 (zmm: 768 k)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Register tile of the int8 kernels per code shape: zmm (avx512_vnni; 32 registers: 14 x 32,
// 28 accumulators, 2 B vectors, 2 broadcasts) or ymm (avx2_vnni; 16 registers: 6 x 16, 12
// accumulators, 2 B vectors, 2 broadcasts).
struct Int8Geometry {
    bool zmm = true;
    int vlen = 16;  // int32 lanes per vector
    int nv = 2;     // B vectors per k group
    int mr = 14;    // rows
    int nr() const { return vlen * nv; }
};
Int8Geometry int8_geometry(Isa isa) {
    Int8Geometry g;
    if (isa >= Isa::avx512) {
        g.zmm = true, g.vlen = 16, g.nv = 2, g.mr = 14;
        if (const char* e = std::getenv("XK_GEMM_INT8_NV")) {  // experiment override: 2, 3 or 4 vectors
            const int nv = std::atoi(e);
            if (nv == 3) g.nv = 3, g.mr = 8;
            if (nv == 4) g.nv = 4, g.mr = 6;
        }
    }
    else
        g.zmm = false, g.vlen = 8, g.nv = 2, g.mr = 6;
    return g;
}

// Arguments of one microkernel call (read by the generated code at these offsets).
struct Int8UkArgs {
    const uint8_t* a = nullptr;  // first A panel's first k group of this K block
    const int8_t* b = nullptr;   // the B panel's first k group of this K block
    void* c = nullptr;           // C[0, 0] of the first panel's tile (final calls)
    int64_t kg = 0;              // k groups of this K block (>= 1)
    int64_t ldc = 0;             // bytes
    int64_t m_panels = 0;        // >= 1
    int64_t a_stride = 0;        // bytes from one A panel to the next
    int32_t* acc = nullptr;      // s32 partial sums, MR x NR per panel (row-major)
    int64_t load_acc = 0;        // nonzero: start from the partial sums
    const int32_t* rowc = nullptr;  // row terms, one per row (final)
    const int32_t* colc = nullptr;  // column terms of the tile's columns (final)
    const float* scale = nullptr;   // per-column f32 multipliers (final, f32 / u8 / s8 C)
    const float* bias = nullptr;
    const void* res = nullptr;
    int64_t ldr = 0;  // bytes
    const GemmScalars* scal = nullptr;
    const float* rq = nullptr;  // {inv_c_scale, c_zero_point, lo, hi} (u8 / s8 C)
    const float* rscale = nullptr;  // per-row A scales of the first panel's rows (row_scale)
};
using Int8UkFn = void (*)(const Int8UkArgs*);

struct Int8UkSpec {
    Isa isa = Isa::avx512_vnni;  // avx512_vnni (zmm) or avx2_vnni (ymm)
    bool vex = true;             // ymm: VEX (AVX-VNNI) or EVEX (AVX512-VNNI + VL) VPDPBUSD
    bool s16 = false;            // AVX2 (isa avx2): s16 operands, VPMADDWD + VPADDD
    int mr = 0, ncols = 0;
    bool final = false;
    DType c = DType::s32;
    GemmEpi epi;  // f32 part of the epilogue (alpha folded into the scales)
    bool row_scale = false;  // x *= rscale[row] after the column scales (GemmSpec::a_scale_per_row)
    std::string key() const {
        return std::string(isa_name(isa)) + (s16 ? ",s16" : isa < Isa::avx512 ? (vex ? ",vex" : ",evex") : "") + ",m" +
               std::to_string(mr) + "n" + std::to_string(ncols) +
               (final ? ",final,c:" + std::string(dtype_name(c)) + "," + epi.key() + (row_scale ? ",rs" : "") : ",partial");
    }
};

class JitInt8Uk : public JitGemmBase {
public:
    explicit JitInt8Uk(const Int8UkSpec& s)
        : JitGemmBase(s.isa >= Isa::avx512 ? Isa::avx512 : Isa::avx2, 64 * 1024) {
        if (s.s16 && s.isa >= Isa::avx512) throw Error(Status::invalid_argument, "gemm int8 ukernel: s16 is ymm only");
        generate(s);
    }

private:
    void generate(const Int8UkSpec& s) {
        const Int8Geometry g = int8_geometry(s.isa);
        const bool z = g.zmm;
        const int MR = g.mr, vl = g.vlen, NR = g.nr(), NREG = z ? 32 : 16;
        const int mr = s.mr;
        const int nv = (s.ncols + vl - 1) / vl;
        const int w_last = s.ncols - (nv - 1) * vl;
        const bool tail = w_last < vl;
        const int U = 4;
        const PreferredEncoding enc = z ? EvexEncoding : (s.vex ? VexEncoding : EvexEncoding);

        const Reg64 rP = rdi, rA = rsi, rB = rdx, rBk = rcx, rC = r8, rK = r9, rLdc = r10, rMp = r11, rRes = r12,
                    rBias = r13, rTbl = r14, rScal = r15, rTmp = rax, rAcc = rbx;
        preamble({rbx, r12, r13, r14, r15});
        push(rbp);
        mov(rbp, rsp);
        and_(rsp, -64);
        // Stack: [0, spill) epilogue spill | f32 tile MR x NR (u8 / s8 C) | slots
        const int spill = (spill_bytes(mr, g.nv) + 63) / 64 * 64;
        const bool rq = s.final && (s.c == DType::u8 || s.c == DType::s8);
        const int tile_off = spill;
        const int slot_off = tile_off + (rq ? MR * NR * 4 : 0);
        const int o_a = slot_off, o_rowc = slot_off + 8, o_ldt = slot_off + 16, o_rs = slot_off + 24;
        sub(rsp, slot_off + 64);

        set_tail_mask(w_last);  // (AVX-512; uses eax)
        mov(rA, ptr[rP + offsetof(Int8UkArgs, a)]);
        mov(ptr[rsp + o_a], rA);
        mov(rTmp, ptr[rP + offsetof(Int8UkArgs, rowc)]);
        mov(ptr[rsp + o_rowc], rTmp);
        if (s.row_scale) {
            mov(rTmp, ptr[rP + offsetof(Int8UkArgs, rscale)]);
            mov(ptr[rsp + o_rs], rTmp);
        }
        mov(qword[rsp + o_ldt], NR * 4);
        mov(rB, ptr[rP + offsetof(Int8UkArgs, b)]);
        mov(rC, ptr[rP + offsetof(Int8UkArgs, c)]);
        mov(rLdc, ptr[rP + offsetof(Int8UkArgs, ldc)]);
        mov(rMp, ptr[rP + offsetof(Int8UkArgs, m_panels)]);
        mov(rAcc, ptr[rP + offsetof(Int8UkArgs, acc)]);
        mov(rBias, ptr[rP + offsetof(Int8UkArgs, bias)]);
        mov(rRes, ptr[rP + offsetof(Int8UkArgs, res)]);
        mov(rScal, ptr[rP + offsetof(Int8UkArgs, scal)]);

        auto R = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        auto acc = [&](int i, int j) { return R(acc_idx(i, j, nv)); };
        auto vload = [&](const Xmm& d, const Address& a) {
            if (z) vmovdqu32(d, a);
            else vmovdqu(d, a);
        };
        auto vstore = [&](const Address& a, const Xmm& v) {
            if (z) vmovdqu32(a, v);
            else vmovdqu(a, v);
        };
        const int b_base = mr * nv;
        const int bc_base = b_base + nv;
        // s16: one broadcast register and one product register (VPMADDWD, then VPADDD)
        const int nbc = s.s16 ? 1 : std::min(2, NREG - bc_base);
        const Xmm prod = R(NREG - 1);
        auto body = [&](int steps) {
            for (int u = 0; u < steps; ++u) {
                for (int j = 0; j < nv; ++j) vload(R(b_base + j), ptr[rBk + (u * NR + j * vl) * 4]);
                for (int i = 0; i < mr; ++i) {
                    const Xmm bc = R(bc_base + i % nbc);
                    vpbroadcastd(bc, ptr[rA + (u * MR + i) * 4]);
                    for (int j = 0; j < nv; ++j) {
                        if (s.s16) {
                            vpmaddwd(prod, bc, R(b_base + j));
                            vpaddd(acc(i, j), acc(i, j), prod);
                        } else {
                            vpdpbusd(acc(i, j), bc, R(b_base + j), enc);
                        }
                    }
                }
            }
        };
        auto acc_at = [&](int i, int j) { return ptr[rAcc + (i * NR + j * vl) * 4]; };
        // Free registers after the K loop: the top nv hold the column vectors, below them a
        // temporary and (ymm) the tail mask. mr * nv + nv + 2 <= NREG for both geometries.
        auto top = [&](int j) { return R(NREG - nv + j); };
        const Xmm tmp = R(NREG - nv - 1), ymask = R(NREG - nv - 2);

        Label l_panel;
        L(l_panel);
        {
            Label l_zero, l_start, l_k, l_krem, l_k1, l_kdone;
            cmp(qword[rP + offsetof(Int8UkArgs, load_acc)], 0);
            je(l_zero);
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) vload(acc(i, j), acc_at(i, j));
            jmp(l_start);
            L(l_zero);
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) {
                    if (z) vpxord(acc(i, j), acc(i, j), acc(i, j));
                    else vpxor(acc(i, j), acc(i, j), acc(i, j));
                }
            L(l_start);
            mov(rA, ptr[rsp + o_a]);
            mov(rBk, rB);
            mov(rK, ptr[rP + offsetof(Int8UkArgs, kg)]);
            cmp(rK, U);
            jl(l_krem);
            align(16);
            L(l_k);
            body(U);
            add(rA, U * MR * 4);
            add(rBk, U * NR * 4);
            sub(rK, U);
            cmp(rK, U);
            jge(l_k);
            L(l_krem);
            test(rK, rK);
            jz(l_kdone);
            L(l_k1);
            body(1);
            add(rA, MR * 4);
            add(rBk, NR * 4);
            dec(rK);
            jnz(l_k1);
            L(l_kdone);
            // next panel's A
            mov(rTmp, ptr[rP + offsetof(Int8UkArgs, a_stride)]);
            add(ptr[rsp + o_a], rTmp);
        }

        if (!s.final) {
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) vstore(acc_at(i, j), acc(i, j));
        } else {
            // + row term (broadcast) + column term
            mov(rTmp, ptr[rsp + o_rowc]);
            for (int i = 0; i < mr; ++i) {
                if (z) {
                    for (int j = 0; j < nv; ++j) vpaddd(acc(i, j), acc(i, j), ptr_b[rTmp + i * 4]);
                } else {
                    vpbroadcastd(tmp, ptr[rTmp + i * 4]);
                    for (int j = 0; j < nv; ++j) vpaddd(acc(i, j), acc(i, j), tmp);
                }
            }
            add(qword[rsp + o_rowc], MR * 4);
            mov(rTmp, ptr[rP + offsetof(Int8UkArgs, colc)]);
            for (int j = 0; j < nv; ++j) vload(top(j), ptr[rTmp + j * vl * 4]);
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) vpaddd(acc(i, j), acc(i, j), top(j));
            if (s.c == DType::s32) {
                if (!z && tail) load_avx2_mask(ymask, w_last, rTmp);
                for (int i = 0; i < mr; ++i) {
                    for (int j = 0; j < nv; ++j) {
                        const bool part = tail && j == nv - 1;
                        const Address ca = ptr[rC + j * vl * 4];
                        if (s.epi.beta == BetaKind::one) {
                            if (part) {
                                if (z) vmovdqu32(Zmm(tmp.getIdx()) | k1 | T_z, ca);
                                else vpmaskmovd(tmp, ymask, ca);
                                vpaddd(acc(i, j), acc(i, j), tmp);
                            } else {
                                vpaddd(acc(i, j), acc(i, j), ca);
                            }
                        }
                        if (!part) vstore(ca, acc(i, j));
                        else if (z) vmovdqu32(ca | k1, Zmm(acc(i, j).getIdx()));
                        else vpmaskmovd(ca, ymask, acc(i, j));
                    }
                    add(rC, rLdc);
                }
            } else {
                mov(rTmp, ptr[rP + offsetof(Int8UkArgs, scale)]);
                for (int j = 0; j < nv; ++j) vmovups(top(j), ptr[rTmp + j * vl * 4]);
                for (int i = 0; i < mr; ++i)
                    for (int j = 0; j < nv; ++j) {
                        vcvtdq2ps(acc(i, j), acc(i, j));
                        vmulps(acc(i, j), acc(i, j), top(j));
                    }
                if (s.row_scale) {  // x = (float(acc) * col scale) * row scale, the reference's order
                    mov(rTmp, ptr[rsp + o_rs]);
                    for (int i = 0; i < mr; ++i) {
                        if (z) {
                            for (int j = 0; j < nv; ++j) vmulps(acc(i, j), acc(i, j), ptr_b[rTmp + i * 4]);
                        } else {
                            vbroadcastss(tmp, ptr[rTmp + i * 4]);
                            for (int j = 0; j < nv; ++j) vmulps(acc(i, j), acc(i, j), tmp);
                        }
                    }
                    add(qword[rsp + o_rs], MR * 4);
                }
                const Address ldr = ptr[rP + offsetof(Int8UkArgs, ldr)];
                const Address ldt = ptr[rsp + o_ldt];
                EpiRegs er;
                er.res_row = rRes, er.bias = rBias, er.scal = rScal, er.tbl = rTbl, er.gtmp = rTmp;
                er.ldr = &ldr;
                er.p_row = rK;
                GemmEpi e = s.epi;
                e.alpha_one = true;
                e.c = s.c == DType::bf16 ? DType::bf16 : DType::f32;
                e.partial = false;
                if (!rq) {
                    er.c_row = rC;
                    er.ldc = &rLdc;
                    emit_epilogue(e, mr, nv, s.ncols, er, 0);
                } else {
                    lea(rBk, ptr[rsp + tile_off]);
                    er.c_row = rBk;
                    er.ldc = &ldt;
                    emit_epilogue(e, mr, nv, s.ncols, er, 0);
                    emit_requant(s.c, mr, nv, vl, NR, w_last, tile_off, rP, rC, rLdc, rTmp);
                }
            }
        }
        add(rAcc, MR * NR * 4);
        dec(rMp);
        jnz(l_panel);

        mov(rsp, rbp);
        pop(rbp);
        postamble();
    }

    // The f32 tile at [rsp + tile_off] (row stride NR floats) requantized into C (rC, rows by
    // rLdc): x * inv, round to nearest even, + zero point, max(lo) (NaN -> lo: VMAXPS returns
    // its second operand when the first is NaN), min(hi), to int32 (exact), to bytes.
    void emit_requant(DType c, int mr, int nv, int vl, int NR, int w_last, int tile_off, const Reg64& rP,
                      const Reg64& rC, const Reg64& rLdc, const Reg64& rTmp) {
        const bool z = z_;
        mov(rTmp, ptr[rP + offsetof(Int8UkArgs, rq)]);
        if (z) {
            for (int i = 0; i < mr; ++i) {
                for (int j = 0; j < nv; ++j) {
                    const Zmm xv(j);
                    vmovups(xv, ptr[rsp + tile_off + (i * NR + j * vl) * 4]);
                    vmulps(xv, xv, ptr_b[rTmp]);
                    vrndscaleps(xv, xv, 0x08);  // nearest even, no precision exception
                    vaddps(xv, xv, ptr_b[rTmp + 4]);
                    vmaxps(xv, xv, ptr_b[rTmp + 8]);
                    vminps(xv, xv, ptr_b[rTmp + 12]);
                    vcvtps2dq(xv, xv);
                    const Address ca = ptr[rC + j * vl];
                    const bool part = w_last < vl && j == nv - 1;
                    if (c == DType::u8) {
                        if (part) vpmovusdb(ca | k1, xv);
                        else vpmovusdb(ca, xv);
                    } else {
                        if (part) vpmovsdb(ca | k1, xv);
                        else vpmovsdb(ca, xv);
                    }
                }
                add(rC, rLdc);
            }
            return;
        }
        const Ymm cinv(12), czp(13), clo(14), chi(15);
        vbroadcastss(cinv, ptr[rTmp]);
        vbroadcastss(czp, ptr[rTmp + 4]);
        vbroadcastss(clo, ptr[rTmp + 8]);
        vbroadcastss(chi, ptr[rTmp + 12]);
        for (int i = 0; i < mr; ++i) {
            for (int j = 0; j < nv; ++j) {
                const Ymm xv(0);
                const Xmm x0(0), x1(1);
                vmovups(xv, ptr[rsp + tile_off + (i * NR + j * vl) * 4]);
                vmulps(xv, xv, cinv);
                vroundps(xv, xv, 0x08);
                vaddps(xv, xv, czp);
                vmaxps(xv, xv, clo);
                vminps(xv, xv, chi);
                vcvtps2dq(xv, xv);
                vextracti128(x1, xv, 1);
                vpackssdw(x0, x0, x1);  // 8 words in order (values in range)
                if (c == DType::u8)
                    vpackuswb(x0, x0, x0);
                else
                    vpacksswb(x0, x0, x0);
                const int w = j == nv - 1 ? w_last : vl;
                const RegExp base = rC + j * vl;
                if (w == 8) {
                    vmovq(ptr[base], x0);
                } else {
                    int off = 0, rem = w;
                    if (rem >= 4) {
                        vmovd(ptr[base], x0);
                        vpsrlq(x0, x0, 32);
                        off = 4, rem -= 4;
                    }
                    if (rem >= 2) {
                        vpextrw(ptr[base + off], x0, 0);
                        vpsrld(x0, x0, 16);
                        off += 2, rem -= 2;
                    }
                    if (rem) vpextrb(ptr[base + off], x0, 0);
                }
            }
            add(rC, rLdc);
        }
    }
};

struct Int8UkImpl {
    explicit Int8UkImpl(const Int8UkSpec& s) : gen(s) { fn = gen.finalize<Int8UkFn>(); }
    JitInt8Uk gen;
    Int8UkFn fn = nullptr;
};

std::shared_ptr<const Int8UkImpl> int8_ukernel(const Int8UkSpec& s) {
    const std::string key = "gemm_int8_ukernel|" + s.key();
    return KernelCache::instance().get_or_create<Int8UkImpl>(key, [&]() -> std::shared_ptr<const Int8UkImpl> {
        const double t0 = now_us();
        auto k = std::make_shared<Int8UkImpl>(s);
        verbose_log("create", "gemm_int8_ukernel", s.key(), now_us() - t0);
        return k;
    });
}

// Per-thread scratch (slot 0: packed A, 1: s32 partial sums, 2: the calling thread's per-call
// buffers: packed B, column terms, scales; 3: a part's own B panel when B is packed as it goes).
constexpr int kSlots = 4;
void* thread_buffer(int slot, size_t bytes) {
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    thread_local std::unique_ptr<void, Free> buf[kSlots];
    thread_local size_t cap[kSlots] = {};
    if (cap[slot] < bytes) {
        const size_t n = (bytes + 4095) / 4096 * 4096;
        void* p = std::aligned_alloc(64, n);
        if (!p) throw std::bad_alloc();
        buf[slot].reset(p);
        cap[slot] = n;
    }
    return buf[slot].get();
}

struct Caches {
    int64_t l2;
};
Caches caches() {
    const CpuInfo& ci = cpu_info();
    Caches c;
    c.l2 = ci.l2_bytes > 0 ? ci.l2_bytes / std::max(1, ci.l2_shared_by) : 256 * 1024;
    c.l2 = std::max<int64_t>(c.l2, 64 * 1024);
    return c;
}

}  // namespace

// ---- packed B --------------------------------------------------------------------------------

Int8BLayout gemm_int8_b_layout(int64_t K, int64_t N, int nr, bool s16) {
    Int8BLayout l;
    l.K = K, l.N = N, l.nr = nr, l.s16 = s16;
    l.kp = s16 ? round_up(std::max<int64_t>(K, 1), 2) * 2 : round_up(std::max<int64_t>(K, 1), 4);
    l.npad = round_up(std::max<int64_t>(N, 1), nr);
    l.name = std::string(s16 ? "jit:int8:s16:K" : "jit:int8:vnni:K") + std::to_string(K) + ":N" + std::to_string(N) +
             ":nr" + std::to_string(nr);
    return l;
}

namespace {
// The s16 layout (AVX2): groups of 2 k per column as two int16, b widened exactly.
void pack_b_cols_s16(const GemmSpec& s, const Int8BLayout& l, const int8_t* B, int64_t ldb, bool bt, int64_t c0,
                     int64_t c1, uint8_t* dst) {
    const int64_t K = s.K, N = s.N, nr = l.nr, kg = l.kp / 4;
    int32_t* colsum = reinterpret_cast<int32_t*>(dst + l.panel_bytes());
    for (int64_t p0 = c0; p0 < c1; p0 += nr) {
        int16_t* pd = reinterpret_cast<int16_t*>(dst + (p0 / nr) * l.kp * nr);
        const int64_t nc = std::min<int64_t>(nr, N - p0);
        int32_t sums[64] = {};
        auto at = [&](int64_t k, int64_t c) -> int16_t {
            return k < K && c < nc ? (bt ? B[(p0 + c) * ldb + k] : B[k * ldb + p0 + c]) : 0;
        };
        if (!bt && nc == nr && nr % 8 == 0) {
            const int64_t k2 = K / 2 * 2;
            for (int64_t k = 0; k < k2; k += 2) {
                int16_t* o = pd + (k / 2) * nr * 2;
                const int8_t* src = B + k * ldb + p0;
                for (int64_t c = 0; c < nr; c += 8) {
                    // 8 columns: sign-extended rows k and k + 1, interleaved
                    const __m128i r0 = _mm_srai_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + c)),
                                                                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + c))), 8);
                    const __m128i r1 = _mm_srai_epi16(
                        _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + ldb + c)),
                                          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + ldb + c))),
                        8);
                    __m128i* d = reinterpret_cast<__m128i*>(o + c * 2);
                    _mm_storeu_si128(d, _mm_unpacklo_epi16(r0, r1));
                    _mm_storeu_si128(d + 1, _mm_unpackhi_epi16(r0, r1));
                }
                for (int64_t c = 0; c < nr; ++c) sums[c] += int32_t(src[c]) + int32_t(src[ldb + c]);
            }
            for (int64_t k = k2; k < l.kp / 2; k += 2) {
                int16_t* o = pd + (k / 2) * nr * 2;
                for (int64_t c = 0; c < nr; ++c) {
                    o[c * 2] = at(k, c), o[c * 2 + 1] = at(k + 1, c);
                    sums[c] += o[c * 2] + o[c * 2 + 1];
                }
            }
        } else {
            for (int64_t g = 0; g < kg; ++g) {
                int16_t* o = pd + g * nr * 2;
                for (int64_t c = 0; c < nr; ++c) {
                    o[c * 2] = at(2 * g, c), o[c * 2 + 1] = at(2 * g + 1, c);
                    sums[c] += o[c * 2] + o[c * 2 + 1];
                }
            }
        }
        for (int64_t c = 0; c < nr; ++c) colsum[p0 + c] = sums[c];
    }
}
}  // namespace

// Columns [c0, c1) (c0 a multiple of nr) of op(B) into the layout at dst (the whole packed
// buffer); column sums into its tail.
void gemm_int8_pack_b_cols(const GemmSpec& s, const Int8BLayout& l, const int8_t* B, int64_t ldb, bool bt, int64_t c0,
                           int64_t c1, uint8_t* dst, bool sums_needed) {
    if (l.s16) return pack_b_cols_s16(s, l, B, ldb, bt, c0, c1, dst);
    const int64_t K = s.K, N = s.N, nr = l.nr, kp = l.kp;
    int32_t* colsum = reinterpret_cast<int32_t*>(dst + l.panel_bytes());
    for (int64_t p0 = c0; p0 < c1; p0 += nr) {
        int8_t* pd = reinterpret_cast<int8_t*>(dst) + (p0 / nr) * kp * nr;
        const int64_t nc = std::min<int64_t>(nr, N - p0);
        int32_t sums[64] = {};
        if (!bt && nc == nr && nr % 16 == 0) {
            // 4 rows x 16 columns at a time: byte / word interleaves give the 16 columns' 4-k
            // groups in order (SSE2).
            const int64_t k4 = K / 4 * 4;
            const __m128i zero = _mm_setzero_si128();
            __m128i sacc[16];  // column sums, 4 x int32 per 4 columns
            for (auto& v : sacc) v = zero;
            for (int64_t k = 0; k < k4; k += 4) {
                int8_t* o = pd + (k / 4) * nr * 4;
                const int8_t* src = B + k * ldb + p0;
                for (int64_t c = 0; c < nr; c += 16) {
                    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + c));
                    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + ldb + c));
                    const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * ldb + c));
                    const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 3 * ldb + c));
                    const __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
                    const __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
                    const __m128i o0 = _mm_unpacklo_epi16(t0, t2), o1 = _mm_unpackhi_epi16(t0, t2);
                    const __m128i o2 = _mm_unpacklo_epi16(t1, t3), o3 = _mm_unpackhi_epi16(t1, t3);
                    __m128i* d = reinterpret_cast<__m128i*>(o + c * 4);
                    _mm_storeu_si128(d, o0), _mm_storeu_si128(d + 1, o1);
                    _mm_storeu_si128(d + 2, o2), _mm_storeu_si128(d + 3, o3);
                    if (!sums_needed) continue;
                    // column sums: the 4 rows in int16 (|sum| <= 512), then widened to int32
                    auto wide = [](__m128i r, bool hi) {
                        return _mm_srai_epi16(hi ? _mm_unpackhi_epi8(r, r) : _mm_unpacklo_epi8(r, r), 8);
                    };
                    const __m128i lo16 = _mm_add_epi16(_mm_add_epi16(wide(r0, false), wide(r1, false)),
                                                       _mm_add_epi16(wide(r2, false), wide(r3, false)));
                    const __m128i hi16 = _mm_add_epi16(_mm_add_epi16(wide(r0, true), wide(r1, true)),
                                                       _mm_add_epi16(wide(r2, true), wide(r3, true)));
                    __m128i* sa = sacc + (c / 16) * 4;
                    sa[0] = _mm_add_epi32(sa[0], _mm_srai_epi32(_mm_unpacklo_epi16(lo16, lo16), 16));
                    sa[1] = _mm_add_epi32(sa[1], _mm_srai_epi32(_mm_unpackhi_epi16(lo16, lo16), 16));
                    sa[2] = _mm_add_epi32(sa[2], _mm_srai_epi32(_mm_unpacklo_epi16(hi16, hi16), 16));
                    sa[3] = _mm_add_epi32(sa[3], _mm_srai_epi32(_mm_unpackhi_epi16(hi16, hi16), 16));
                }
            }
            for (int64_t c = 0; c < nr; c += 16)
                for (int q = 0; q < 4; ++q) {
                    alignas(16) int32_t v[4];
                    _mm_store_si128(reinterpret_cast<__m128i*>(v), sacc[(c / 16) * 4 + q]);
                    for (int l = 0; l < 4; ++l) sums[c + q * 4 + l] += v[l];
                }
            for (int64_t k = k4; k < kp; ++k) {
                int8_t* row = pd + (k / 4) * nr * 4 + (k % 4);
                for (int64_t c = 0; c < nr; ++c) {
                    const int8_t v = k < K ? B[k * ldb + p0 + c] : 0;
                    row[c * 4] = v;
                    sums[c] += v;
                }
            }
        } else if (!bt) {
            for (int64_t k = 0; k < kp; ++k) {
                int8_t* row = pd + (k / 4) * nr * 4 + (k % 4);
                if (k < K) {
                    const int8_t* src = B + k * ldb + p0;
                    for (int64_t c = 0; c < nc; ++c) {
                        row[c * 4] = src[c];
                        sums[c] += src[c];
                    }
                    for (int64_t c = nc; c < nr; ++c) row[c * 4] = 0;
                } else {
                    for (int64_t c = 0; c < nr; ++c) row[c * 4] = 0;
                }
            }
        } else {
            for (int64_t c = 0; c < nr; ++c) {
                int8_t* col = pd + c * 4;
                if (c < nc) {
                    // a column's 4-k groups are contiguous in a transposed B: 4 bytes at a time
                    const int8_t* src = B + (p0 + c) * ldb;
                    const int64_t k4 = K / 4 * 4;
                    for (int64_t k = 0; k < k4; k += 4) std::memcpy(col + k * nr, src + k, 4);
                    for (int64_t k = k4; k < kp; ++k) col[(k / 4) * nr * 4 + (k % 4)] = k < K ? src[k] : 0;
                    int32_t sum = 0;
                    if (sums_needed)
                        for (int64_t k = 0; k < K; ++k) sum += src[k];
                    sums[c] = sum;
                } else {
                    for (int64_t k = 0; k < kp; ++k) col[(k / 4) * nr * 4 + (k % 4)] = 0;
                }
            }
        }
        for (int64_t c = 0; c < nr; ++c) colsum[p0 + c] = sums[c];
    }
}

namespace {

// Groups [0, kv) of up to 16 rows of A (rows <= MR <= 16, row stride lda bytes) into one packed
// panel pd ([group][MR][4 bytes]; rows >= `rows` zero), XOR x, 16 groups (64 bytes a row) at a
// time: a 16 x 16 dword transpose and one masked store of MR dwords per group. Row sums of the
// XORed bytes over [0, kv) into sums when given. Returns kv (a multiple of 64 <= k4).
__attribute__((target("avx512f,avx512bw"))) int64_t pack_a_panel_avx512(const uint8_t* A, int64_t lda, int rows, int MR,
                                                                        int64_t k4, uint8_t x, uint8_t* pd,
                                                                        uint32_t* sums) {
    const int64_t kv = k4 / 64 * 64;
    const __m512i xv = _mm512_set1_epi8(static_cast<char>(x)), zero = _mm512_setzero_si512();
    const __mmask16 mask = static_cast<__mmask16>((1u << MR) - 1);
    __m512i acc[16];
    for (auto& v : acc) v = zero;
    for (int64_t k = 0; k < kv; k += 64) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
            r[i] = i < rows ? _mm512_xor_si512(_mm512_loadu_si512(A + i * lda + k), xv) : zero;
            if (sums && i < rows) acc[i] = _mm512_add_epi64(acc[i], _mm512_sad_epu8(r[i], zero));
        }
        __m512i t[16];
        transpose16x16_epi32(r, t);
        uint8_t* o = pd + (k / 4) * MR * 4;
        for (int g = 0; g < 16; ++g) _mm512_mask_storeu_epi32(o + g * MR * 4, mask, t[g]);
    }
    if (sums)
        for (int i = 0; i < rows; ++i) sums[i] = static_cast<uint32_t>(_mm512_reduce_add_epi64(acc[i]));
    return kv;
}

class JitGemmInt8 final : public GemmKernel {
public:
    JitGemmInt8(const GemmSpec& s, Isa isa)
        : s_(s),
          isa_(isa >= Isa::avx512 ? Isa::avx512_vnni : isa >= Isa::avx2_vnni ? Isa::avx2_vnni : Isa::avx2),
          g_(int8_geometry(isa)) {
        s16_ = isa_ == Isa::avx2;
        avx512_pack_ = !s16_ && g_.mr <= 16 && cpu_info().avx512f && cpu_info().avx512bw && isa_supported(Isa::avx512);
        layout_ = gemm_int8_b_layout(s.K, s.N, g_.nr(), s16_);
        const int64_t MR = g_.mr, NR = g_.nr();
        const int64_t kp = layout_.kp;
        const int64_t kc_max = std::max<int64_t>(4, kc_bytes() / NR / 4 * 4);
        nkb_ = ceil_div(kp, kc_max);
        kc_ = round_up(ceil_div(kp, nkb_), 4);
        nkb_ = ceil_div(kp, kc_);
        mc_ = std::clamp<int64_t>(caches().l2 / 2 / kp / MR * MR, MR, 1024 / MR * MR);
        GemmEpi epi = gemm_epi(s);
        epi.alpha_one = true;
        const int m_tail = static_cast<int>(s.M % MR), n_tail = static_cast<int>(s.N % NR);
        // ymm VPDPBUSD: VEX where AVX-VNNI exists, else EVEX (AVX512-VNNI + VL). XK_GEMM_INT8_EVEX=1
        // (a test hook, read when a plan is created) takes EVEX on a machine with both.
        const char* ev = std::getenv("XK_GEMM_INT8_EVEX");
        const bool vex = cpu_info().avx_vnni && !(ev && std::atoi(ev) == 1);
        for (int fin = 0; fin < 2; ++fin) {
            if (!fin && nkb_ == 1) continue;
            for (int mt = 0; mt < 2; ++mt) {
                const int mr = mt ? m_tail : static_cast<int>(MR);
                if (mr == 0 || (mt == 0 && s.M < MR)) continue;
                for (int nt = 0; nt < 2; ++nt) {
                    const int ncols = nt ? n_tail : static_cast<int>(NR);
                    if (fin && (ncols == 0 || (nt == 0 && s.N < NR))) continue;
                    if (!fin && nt) continue;  // partial sums: always NR columns
                    Int8UkSpec us;
                    us.isa = isa_, us.s16 = s16_, us.vex = vex, us.mr = mr, us.ncols = fin ? ncols : static_cast<int>(NR);
                    us.final = fin != 0, us.c = s.c_type, us.epi = epi;
                    us.row_scale = fin != 0 && s.a_scale_per_row;
                    uk_[fin][mt][nt] = int8_ukernel(us);
                }
            }
        }
    }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override {
        auto p = std::make_shared<GemmPacked>(layout_.name, layout_.bytes());
        if (s_.K == 0 || s_.N == 0) return p;
        pack_b_into(static_cast<const int8_t*>(B), s_.ldb, s_.trans_b == Trans::T, static_cast<uint8_t*>(p->data));
        return p;
    }
    std::string packed_layout() const override { return layout_.name; }

    void run(const GemmCall& call) const override {
        const GemmSpec& s = s_;
        const GemmArgs& a = call.args;
        const int64_t M = s.M, N = s.N, K = s.K, MR = g_.mr, NR = g_.nr();
        const int64_t npad = layout_.npad;

        // Threads and the pm x pn split of the tile grid.
        const int64_t mt = ceil_div(M, MR), nt = ceil_div(N, NR);
        const double macs = double(M) * double(N) * double(K);
        int nthr = static_cast<int>(std::clamp<double>(macs / double(kMinMacsPerThread), 1.0, get_num_threads()));
        int pm = 1, pn = 1;
        double best = -1;
        for (int t = nthr; t >= 1 && best < 0; --t) {
            nthr = t;
            for (int x = 1; x <= t; ++x) {
                if (t % x) continue;
                const int y = t / x;
                if (x > mt || y > nt) continue;
                const double mp = double(ceil_div(mt, x) * MR), np = double(ceil_div(nt, y) * NR);
                const double cost = mp * np / 16.0 + mp * double(y) / 4.0;
                if (best < 0 || cost < best) best = cost, pm = x, pn = y;
            }
        }
        // An unpacked B: cutting N only (within 5% of the best estimate) lets each part pack its
        // own panels as it reads them, in one parallel region, instead of a packing pass first.
        if (!call.packed_b && pm > 1 && nt >= nthr) {
            const double mp = double(mt * MR), np = double(ceil_div(nt, nthr) * NR);
            if (mp * np / 16.0 + mp * double(nthr) / 4.0 <= 1.05 * best) pm = 1, pn = nthr;
        }
        // With several threads, three parts per thread, handed out as threads become free (a
        // thread on a busy core takes fewer): the extra cuts go across N (a part packs its A
        // rows, O(M K) against its O(M N K / parts) products), else across M.
        if (nthr > 1) {
            if (nt >= 2 * kExtraParts * pn)
                pn *= kExtraParts;
            else if (mt >= 2 * kExtraParts * pm)
                pm *= kExtraParts;
        }
        const int parts = pm * pn;

        // (s16: A is packed as a - za, so there is no column term.)
        const uint32_t za = s16_ ? 0u : static_cast<uint32_t>(a.a_zero_point + (s.a_type == DType::s8 ? 128 : 0));
        const uint32_t zb = static_cast<uint32_t>(a.b_zero_point);
        // An unpacked B whose every panel one part reads once (the parts do not cut M and each
        // part's rows are one A block: decode and short M) is packed panel by panel inside the
        // part, into a buffer that stays in cache, instead of all of it first (which reads B from
        // memory, writes it, and reads it again).
        const bool fuse_b = !call.packed_b && pm == 1 && M <= mc_;
        // Otherwise an unpacked B is packed into a per-call buffer panel by panel, by the first
        // part that reaches a panel (the others wait for it: a panel is packed once): one
        // parallel region per call, no packing pass of its own.
        const bool lazy_b = !call.packed_b && !fuse_b;
        // Parts that share rows (pn > 1) share their packed A too: the first to reach an MR-row
        // panel packs it into a per-call buffer (instead of each of the pn parts packing it).
        const int64_t mt_pad = mt * MR, kgt = layout_.kp / 4;
        const size_t a_panel = static_cast<size_t>(kgt * MR * 4);
        const bool share_a = pn > 1 && static_cast<double>(a_panel) * double(mt) <= double(kShareAMax);
        const int64_t npanels = layout_.npad / NR;
        // The calling thread's per-call buffer: [packed B][column terms][scales][A panels][row
        // terms][B panel flags][A panel flags].
        const size_t pb_bytes = lazy_b ? round_up(static_cast<int64_t>(layout_.bytes()), 64) : 0;
        const size_t extra = static_cast<size_t>(npad) * 8 + 64;
        const size_t sa_bytes = share_a ? a_panel * static_cast<size_t>(mt) + static_cast<size_t>(mt_pad) * 4 + 64 : 0;
        const size_t nflags = static_cast<size_t>((lazy_b ? npanels : 0) + (share_a ? mt : 0));
        uint8_t* call_buf =
            static_cast<uint8_t*>(thread_buffer(2, pb_bytes + extra + sa_bytes + nflags * sizeof(PanelFlag) + 64));
        const uint8_t* pb = nullptr;
        uint8_t* rest = call_buf + pb_bytes;
        if (call.packed_b) pb = static_cast<const uint8_t*>(call.packed_b->data);
        else if (lazy_b) pb = call_buf;
        int32_t* colc = reinterpret_cast<int32_t*>(rest);
        float* scale = reinterpret_cast<float*>(rest + npad * 4);
        uint8_t* sa = share_a ? rest + extra : nullptr;
        int32_t* sa_rowc = share_a ? reinterpret_cast<int32_t*>(sa + a_panel * static_cast<size_t>(mt)) : nullptr;
        PanelFlag* flags = reinterpret_cast<PanelFlag*>(
            reinterpret_cast<uintptr_t>(rest + extra + sa_bytes + alignof(PanelFlag) - 1) & ~uintptr_t(alignof(PanelFlag) - 1));
        for (size_t f = 0; f < nflags; ++f) new (flags + f) PanelFlag(0);
        const uint32_t kzz = static_cast<uint32_t>(K) * za * zb;
        if (call.packed_b) {
            const int32_t* colsum = reinterpret_cast<const int32_t*>(pb + layout_.panel_bytes());
            for (int64_t n = 0; n < npad; ++n)
                colc[n] = static_cast<int32_t>(kzz - za * static_cast<uint32_t>(colsum[n]));
        }
        const bool fp = s.c_type != DType::s32;
        if (fp) {
            const float as = s.a_scale_per_row ? call.alpha : call.alpha * a.a_scale[0];
            for (int64_t n = 0; n < npad; ++n)
                scale[n] = n < N ? as * a.b_scales[s.b_scale_per_channel ? n : 0] : 0.0f;
        }
        alignas(64) float rq[16] = {};
        if (s.c_type == DType::u8 || s.c_type == DType::s8) {
            rq[0] = 1.0f / a.c_scale[0];
            rq[1] = static_cast<float>(a.c_zero_point);
            rq[2] = s.c_type == DType::u8 ? 0.0f : -128.0f;
            rq[3] = s.c_type == DType::u8 ? 255.0f : 127.0f;
        }
        alignas(64) GemmScalars sc;
        sc.set(call.alpha, call.beta);

        Ctx ctx{call, pb, colc, scale, rq, &sc, fuse_b, za, kzz};
        ctx.lazy_b = lazy_b ? call_buf : nullptr;
        ctx.b_flags = lazy_b ? flags : nullptr;
        ctx.b_sums = za != 0;
        ctx.sa = sa;
        ctx.sa_rowc = sa_rowc;
        ctx.a_flags = share_a ? flags + (lazy_b ? npanels : 0) : nullptr;
        auto part = [&](int64_t t) {
            const int64_t i = t / pn, j = t % pn;
            const int64_t m0 = std::min(M, i * mt / pm * MR), m1 = std::min(M, (i + 1) * mt / pm * MR);
            const int64_t n0 = std::min(N, j * nt / pn * NR), n1 = std::min(N, (j + 1) * nt / pn * NR);
            if (m0 < m1 && n0 < n1) run_part(ctx, m0, m1, n0, n1);
        };
        if (parts == 1 || nthr == 1) {
            for (int t = 0; t < parts; ++t) part(t);
        } else {
            std::atomic<int64_t> next{0};
            parallel_for(nthr, 1, [&](int64_t, int64_t) {
                for (int64_t t = next.fetch_add(1); t < parts; t = next.fetch_add(1)) part(t);
            });
        }
    }

private:
    struct Ctx {
        const GemmCall& call;
        const uint8_t* pb;
        const int32_t* colc;
        const float* scale;
        const float* rq;
        const GemmScalars* sc;
        bool fuse_b;    // pb is null: each part packs its B panels as it reaches them
        uint32_t za;    // za' (the column term's factor)
        uint32_t kzz;   // K za' zb
        // lazy_b: the per-call packed B (== pb) whose panel p the first part to need it packs
        // (b_flags[p]: 0 free, 1 being packed, 2 ready), with its column terms
        uint8_t* lazy_b = nullptr;
        PanelFlag* b_flags = nullptr;
        bool b_sums = true;
        // sa: every MR-row panel of A, packed by the first part that needs it (a_flags)
        uint8_t* sa = nullptr;
        int32_t* sa_rowc = nullptr;
        PanelFlag* a_flags = nullptr;
    };

    // Runs work() if this caller is the first to claim f, else waits until whoever claimed it is
    // done. Deadlock-free: a claimed flag belongs to a thread that is running work().
    template <class Work>
    static void claim_or_wait(PanelFlag& f, Work&& work) {
        uint32_t st = f.load(std::memory_order_acquire);
        if (st == 2) return;
        if (st == 0 && f.compare_exchange_strong(st, 1, std::memory_order_acq_rel)) {
            work();
            f.store(2, std::memory_order_release);
            return;
        }
        while (f.load(std::memory_order_acquire) != 2) _mm_pause();
    }

    // sums_needed = false: the column sums are not computed (zeros; a per-call pack whose column
    // term is 0 anyway: za' = 0).
    void pack_b_into(const int8_t* B, int64_t ldb, bool bt, uint8_t* dst, bool sums_needed = true) const {
        const int64_t NR = g_.nr(), np = layout_.npad / NR;
        const double bytes = double(s_.K) * double(s_.N);
        const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(double(np) * (double(1 << 18) / std::max(1.0, bytes))));
        parallel_for(np, grain, [&](int64_t p0, int64_t p1) {
            gemm_int8_pack_b_cols(s_, layout_, B, ldb, bt, p0 * NR, std::min(s_.N, p1 * NR), dst, sums_needed);
        });
    }

    // op(A) rows [r0, r0 + rows) x all of K into panels of MR rows at dst ([panel][k group][MR][4],
    // u8, s8 shifted by +128, padding 0), and the row terms -zb * rowsum(a') into rowc.
    void pack_a(const GemmArgs& a, int64_t r0, int64_t rows, uint8_t* dst, int32_t* rowc) const {
        if (s16_) return pack_a_s16(a, r0, rows, dst, rowc);
        const GemmSpec& s = s_;
        const int64_t K = s.K, kp = layout_.kp, kg = kp / 4, MR = g_.mr;
        const bool shift = s.a_type == DType::s8;
        const uint8_t x = shift ? 0x80 : 0;
        const auto* A = static_cast<const uint8_t*>(a.A);
        const uint32_t zb = static_cast<uint32_t>(a.b_zero_point);
        const int64_t panels = ceil_div(rows, MR);
        const int64_t k4 = K / 4 * 4;
        for (int64_t p = 0; p < panels; ++p) {
            uint8_t* pd = dst + p * kg * MR * 4;
            // AVX-512: 64 bytes of K a row at a time for the whole panel, the rest below
            int64_t kv = 0;
            uint32_t vsum[16] = {};
            if (s.trans_a == Trans::N && avx512_pack_)
                kv = pack_a_panel_avx512(A + (r0 + p * MR) * s.lda, s.lda, static_cast<int>(std::min(MR, rows - p * MR)),
                                         static_cast<int>(MR), k4, x, pd, zb != 0 ? vsum : nullptr);
            for (int64_t r = 0; r < MR; ++r) {
                const int64_t row = p * MR + r;
                uint8_t* d = pd + r * 4;
                if (row >= rows) {
                    for (int64_t gi = kv / 4; gi < kg; ++gi) std::memset(d + gi * MR * 4, 0, 4);
                    rowc[row] = 0;
                    continue;
                }
                uint32_t sum = 0;
                if (s.trans_a == Trans::N) {
                    const uint8_t* src = A + (r0 + row) * s.lda;
                    // 4 bytes at a time; the row sum (only needed with a B zero point) by SAD
                    const uint32_t x4 = x * 0x01010101u;
                    for (int64_t k = kv; k < k4; k += 4) {
                        uint32_t v;
                        std::memcpy(&v, src + k, 4);
                        v ^= x4;
                        std::memcpy(d + (k / 4) * MR * 4, &v, 4);
                    }
                    if (zb != 0) {
                        const __m128i xv = _mm_set1_epi8(static_cast<char>(x)), zero = _mm_setzero_si128();
                        __m128i acc = zero;
                        int64_t k = kv;
                        for (; k + 16 <= k4; k += 16) {
                            const __m128i v = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k)), xv);
                            acc = _mm_add_epi64(acc, _mm_sad_epu8(v, zero));
                        }
                        alignas(16) uint64_t two[2];
                        _mm_store_si128(reinterpret_cast<__m128i*>(two), acc);
                        sum = vsum[r] + static_cast<uint32_t>(two[0] + two[1]);
                        for (; k < k4; ++k) sum += static_cast<uint8_t>(src[k] ^ x);
                    }
                    if (k4 < kp) {
                        uint8_t* o = d + (k4 / 4) * MR * 4;
                        for (int64_t k = k4; k < k4 + 4; ++k) {
                            const uint8_t v = k < K ? static_cast<uint8_t>(src[k] ^ x) : 0;
                            o[k - k4] = v;
                            sum += v;
                        }
                    }
                } else {
                    const uint8_t* src = A + r0 + row;
                    for (int64_t k = 0; k < kp; ++k) {
                        const uint8_t v = k < K ? static_cast<uint8_t>(src[k * s.lda] ^ x) : 0;
                        d[(k / 4) * MR * 4 + (k % 4)] = v;
                        sum += v;
                    }
                }
                rowc[row] = static_cast<int32_t>(0u - zb * sum);
            }
        }
    }

    // The s16 form: [panel][k pair][MR][2] int16 a - za (exact: [-255, 255]), padding 0; row terms
    // -zb * sum (a - za).
    void pack_a_s16(const GemmArgs& a, int64_t r0, int64_t rows, uint8_t* dst, int32_t* rowc) const {
        const GemmSpec& s = s_;
        const int64_t K = s.K, kg = layout_.kp / 4, MR = g_.mr;
        const bool u8 = s.a_type == DType::u8;
        const auto* Au = static_cast<const uint8_t*>(a.A);
        const auto* As = static_cast<const int8_t*>(a.A);
        const int32_t za = a.a_zero_point;
        const uint32_t zb = static_cast<uint32_t>(a.b_zero_point);
        const int64_t panels = ceil_div(rows, MR);
        for (int64_t p = 0; p < panels; ++p) {
            int16_t* pd = reinterpret_cast<int16_t*>(dst + p * kg * MR * 4);
            for (int64_t r = 0; r < MR; ++r) {
                const int64_t row = p * MR + r;
                int16_t* d = pd + r * 2;
                if (row >= rows) {
                    for (int64_t g = 0; g < kg; ++g) d[g * MR * 2] = d[g * MR * 2 + 1] = 0;
                    rowc[row] = 0;
                    continue;
                }
                int32_t sum = 0;
                const bool tn = s.trans_a == Trans::N;
                const int64_t base = tn ? (r0 + row) * s.lda : r0 + row, step = tn ? 1 : s.lda;
                for (int64_t k = 0; k < kg * 2; ++k) {
                    int16_t v = 0;
                    if (k < K) {
                        const int64_t i = base + k * step;
                        v = static_cast<int16_t>((u8 ? int32_t(Au[i]) : int32_t(As[i])) - za);
                    }
                    d[(k / 2) * MR * 2 + (k % 2)] = v;
                    sum += v;
                }
                rowc[row] = static_cast<int32_t>(0u - zb * static_cast<uint32_t>(sum));
            }
        }
    }

    void run_part(const Ctx& ctx, int64_t m0, int64_t m1, int64_t n0, int64_t n1) const {
        const GemmSpec& s = s_;
        const GemmArgs& a = ctx.call.args;
        const int64_t MR = g_.mr, NR = g_.nr(), kp = layout_.kp, kgt = kp / 4;
        const int64_t mparts = ceil_div(m1 - m0, mc_);
        const int64_t mc = std::min(mc_, round_up(ceil_div(m1 - m0, mparts), MR));
        const int64_t c_es = dtype_size(s.c_type);
        auto* C = static_cast<unsigned char*>(a.C);
        const auto* res = static_cast<const unsigned char*>(a.residual);
        const int64_t res_es = dtype_size(s.residual_type);
        uint8_t* bufA = ctx.sa ? nullptr : static_cast<uint8_t*>(thread_buffer(0, static_cast<size_t>(mc * kp + mc * 4 + 64)));
        int32_t* rowc = ctx.sa ? nullptr : reinterpret_cast<int32_t*>(bufA + round_up(mc * kp, 64));
        int32_t* accb = nkb_ > 1 ? static_cast<int32_t*>(thread_buffer(1, static_cast<size_t>(mc * NR * 4))) : nullptr;
        // fused B packing: one panel and its column terms (slot 3)
        uint8_t* bufB = ctx.fuse_b ? static_cast<uint8_t*>(thread_buffer(3, static_cast<size_t>(kp * NR + NR * 8 + 64)))
                                   : nullptr;
        int32_t* colcB = ctx.fuse_b ? reinterpret_cast<int32_t*>(bufB + round_up(kp * NR + NR * 4, 64)) : nullptr;

        Int8UkArgs ua;
        ua.ldr = s.ld_residual * res_es;
        ua.scal = ctx.sc;
        ua.rq = ctx.rq;
        ua.a_stride = kgt * MR * 4;
        for (int64_t ic = m0; ic < m1; ic += mc) {
            const int64_t mcb = std::min(mc, m1 - ic);
            if (ctx.sa) {
                // shared A: claim and pack the block's free panels, then wait for the others
                const int64_t p0 = ic / MR, p1 = ceil_div(ic + mcb, MR);
                const size_t psz = static_cast<size_t>(kgt * MR * 4);
                for (int pass = 0; pass < 2; ++pass)
                    for (int64_t p = p0; p < p1; ++p) {
                        PanelFlag& f = ctx.a_flags[p];
                        if (pass == 0 && f.load(std::memory_order_relaxed) != 0) continue;
                        claim_or_wait(f, [&] {
                            const int64_t r = p * MR;
                            pack_a(a, r, std::min(MR, s.M - r), ctx.sa + static_cast<size_t>(p) * psz, ctx.sa_rowc + r);
                        });
                    }
                bufA = ctx.sa + static_cast<size_t>(p0) * psz;
                rowc = ctx.sa_rowc + ic;
            } else {
                pack_a(a, ic, mcb, bufA, rowc);
            }
            const int64_t full = mcb / MR, mrest = mcb % MR;
            for (int64_t n = n0; n < n1; n += NR) {
                const int nt = s.N - n < NR ? 1 : 0;
                const int8_t* bp;
                if (ctx.fuse_b) {
                    // this panel alone (a one-panel layout: kp x NR bytes, then NR column sums)
                    GemmSpec s1 = s;
                    s1.N = std::min(NR, s.N - n);
                    const Int8BLayout l1 = gemm_int8_b_layout(s.K, s1.N, static_cast<int>(NR), s16_);
                    const auto* B = static_cast<const int8_t*>(a.B) + (s.trans_b == Trans::T ? n * s.ldb : n);
                    gemm_int8_pack_b_cols(s1, l1, B, s.ldb, s.trans_b == Trans::T, 0, s1.N, bufB, ctx.za != 0);
                    const auto* cs = reinterpret_cast<const int32_t*>(bufB + l1.panel_bytes());
                    for (int64_t c = 0; c < NR; ++c)
                        colcB[c] = static_cast<int32_t>(ctx.kzz - ctx.za * static_cast<uint32_t>(cs[c]));
                    bp = reinterpret_cast<const int8_t*>(bufB);
                    ua.colc = colcB;
                } else {
                    if (ctx.lazy_b)
                        claim_or_wait(ctx.b_flags[n / NR], [&] {
                            gemm_int8_pack_b_cols(s, layout_, static_cast<const int8_t*>(a.B), s.ldb,
                                                  s.trans_b == Trans::T, n, std::min(s.N, n + NR), ctx.lazy_b, ctx.b_sums);
                            const auto* cs = reinterpret_cast<const int32_t*>(ctx.lazy_b + layout_.panel_bytes()) + n;
                            int32_t* cc = const_cast<int32_t*>(ctx.colc) + n;
                            for (int64_t c = 0; c < NR; ++c)
                                cc[c] = static_cast<int32_t>(ctx.kzz - ctx.za * static_cast<uint32_t>(cs[c]));
                        });
                    bp = reinterpret_cast<const int8_t*>(ctx.pb) + (n / NR) * kp * NR;
                    ua.colc = ctx.colc + n;
                }
                ua.scale = ctx.scale + n;
                ua.bias = a.bias ? a.bias + n : nullptr;
                for (int64_t kb = 0; kb < nkb_; ++kb) {
                    const int64_t k0 = kb * kc_, kcb = std::min(kc_, kp - k0);
                    const int fin = kb == nkb_ - 1 ? 1 : 0;
                    ua.kg = kcb / 4;
                    ua.b = bp + k0 * NR;
                    ua.load_acc = kb > 0;
                    auto tile = [&](int64_t r, int mt, int64_t panels) {
                        ua.a = bufA + (r - ic) * kgt * 4 + k0 * MR;
                        ua.acc = accb ? accb + (r - ic) * NR : nullptr;
                        ua.rowc = rowc + (r - ic);
                        ua.rscale = ctx.call.a_row_scales ? ctx.call.a_row_scales + r : nullptr;
                        ua.c = C + (r * s.ldc + n) * c_es;
                        ua.ldc = s.ldc * c_es;
                        ua.res = res ? res + (r * s.ld_residual + n) * res_es : nullptr;
                        ua.m_panels = panels;
                        uk_[fin][mt][fin ? nt : 0]->fn(&ua);
                    };
                    if (full) tile(ic, 0, full);
                    if (mrest) tile(ic + full * MR, 1, 1);
                }
            }
        }
    }

    GemmSpec s_;
    Isa isa_;
    Int8Geometry g_;
    Int8BLayout layout_;
    bool s16_ = false;  // AVX2: A and B widened to s16, VPMADDWD + VPADDD
    bool avx512_pack_ = false;  // A packed by pack_a_panel_avx512 (AVX-512 BW, MR <= 16)
    int64_t kc_ = 0, nkb_ = 0, mc_ = 0;
    std::shared_ptr<const Int8UkImpl> uk_[2][2][2];  // [final][m tail][n tail]
};

}  // namespace

bool gemm_int8_vnni_supports(const GemmSpec& s) {
    return s.int8() && s.b_type == DType::s8 && s.M > 0 && s.N > 0 && s.K > 0;
}

std::shared_ptr<const GemmKernel> create_gemm_int8_vnni(const GemmSpec& s, Isa isa) {
    if (!gemm_int8_vnni_supports(s)) throw Error(Status::unsupported, "gemm int8 vnni: " + s.key() + " is not supported");
    return std::make_shared<JitGemmInt8>(s, isa);
}

}  // namespace xk::detail
