// Shared pieces of the fp32 GEMM JIT kernels (the blocked / packed kernel in jit_gemm.cpp with its
// microkernel in jit_gemm_ukernel.cpp, and the small-shape kernel in jit_gemm_small.cpp):
//   - the register-tile geometry per ISA,
//   - the epilogue class (what the fused store does) and the runtime scalars it reads,
//   - JitGemmBase: a JitGenerator that emits the fused store of an accumulator tile
//     (alpha, beta, bias, activation, residual, masked N tails) in one pass over C,
//   - the packing routines (gemm_pack.cpp) shared by both kernels.
#pragma once
#include <immintrin.h>
#include <cstdint>
#include <string>
#include <vector>

#include "dispatch/jit_generator.hpp"
#include "kernels/gemm/gemm.hpp"

namespace xk::detail {

// Register tile: mr rows x nr columns of C in accumulators, nr = nv vectors of vlen floats.
// Chosen from the register file: nv = 2 B vectors, mr = the rows whose accumulators fit beside
// them and one broadcast register (AVX2, 16 ymm: 6 x 16; AVX-512, 32 zmm with broadcasts from
// memory: 14 x 32).
struct GemmGeometry {
    Isa isa = Isa::avx2;
    int vlen = 8;     // floats per vector
    int nvregs = 16;  // vector registers
    int mr = 6;       // rows of the full tile (and of a packed A panel)
    int nr = 16;      // columns of the full tile (and of a packed B panel)
    int nv() const { return nr / vlen; }
};
GemmGeometry gemm_geometry(Isa isa);
// Whether `isa` is one of the two code shapes (avx2 = ymm, avx512 = zmm) of the fp32 JIT kernels.
inline Isa gemm_code_isa(Isa isa) { return isa >= Isa::avx512 ? Isa::avx512 : Isa::avx2; }

// What the store of one tile does: x = alpha*acc [+ P] [+ beta*C] [+ bias] [act] [+ residual],
// then C = x (rounded to bf16 when c is bf16). P is an f32 partial sum of earlier K blocks read
// from its own rows (the bf16-C path of the blocked kernel accumulates its K blocks in an f32
// scratch; EpiRegs::p_row / ldp).
struct GemmEpi {
    bool alpha_one = true;
    BetaKind beta = BetaKind::zero;
    bool bias = false;
    Activation act = Activation::none;
    DType residual = DType::s32;  // s32 = no residual; else f32 or bf16
    DType c = DType::f32;         // C's type (read by beta, written): f32 or bf16
    bool partial = false;         // add P (f32) after alpha
    bool has_residual() const { return residual == DType::f32 || residual == DType::bf16; }
    std::string key() const;
};
// The full epilogue of a spec.
GemmEpi gemm_epi(const GemmSpec& s);

// Runtime scalars of the epilogue, broadcast (AVX2 reads full vectors from memory).
struct alignas(64) GemmScalars {
    float alpha[16];
    float beta[16];
    void set(float a, float b) {
        for (int i = 0; i < 16; ++i) alpha[i] = a, beta[i] = b;
    }
};

class JitGemmBase : public JitGenerator {
protected:
    JitGemmBase(Isa isa, size_t code_bytes);

    Xbyak::Xmm V(int i) const;                       // ymm(i) or zmm(i) (ymm(i) in ymm mode)
    static int acc_idx(int i, int j, int nv) { return i * nv + j; }

    // Where the epilogue finds what it needs. c_row points at the tile's row 0; on return it
    // points at row mr (res_row likewise). Row strides: ldc / ldr (register or memory operand,
    // bytes: c_row advances row by row), or, when those are null, the compile-time ldc_imm /
    // ldr_imm (rows addressed by displacement, one add at the end). bias points at the tile's
    // column 0, scal at a GemmScalars. tbl and gtmp are free general registers.
    // With GemmEpi::partial (dynamic addressing only): p_row points at P's row 0 and advances by
    // ldp (bytes) as c_row does.
    struct EpiRegs {
        Xbyak::Reg64 c_row, res_row, bias, scal, tbl, gtmp, p_row;
        const Xbyak::Operand* ldc = nullptr;
        const Xbyak::Operand* ldr = nullptr;
        const Xbyak::Operand* ldp = nullptr;
        int64_t ldc_imm = 0, ldr_imm = 0;
    };
    // Bytes of stack the epilogue may spill to at [rsp + spill_offset] for an mr x nv tile.
    int spill_bytes(int mr, int nv) const { return mr * nv * vlen_ * 4; }

    // Sets up the opmask k1 for a partial last vector of `w` lanes (AVX-512; nothing on AVX2).
    void set_tail_mask(int w);
    // Emits the fused store of the mr x nv accumulator tile (acc(i, j) = V(i*nv + j)) whose valid
    // columns are [0, ncols). Registers V(mr*nv) and above are free (clobbered).
    void emit_epilogue(const GemmEpi& e, int mr, int nv, int ncols, const EpiRegs& r, int spill_offset);

    // Partial vector memory access of w < vlen lanes (k1 must hold the w-lane mask on AVX-512;
    // on AVX2 `mask` holds it for loads, stores need none).
    void load_partial(const Xbyak::Xmm& dst, const Xbyak::Address& src, int w, const Xbyak::Xmm& mask);
    void store_partial(const Xbyak::Address& dst, const Xbyak::Xmm& src, int w, const Xbyak::Xmm& tmp);
    void load_bf16(const Xbyak::Xmm& dst, const Xbyak::RegExp& src, int w);
    // Stores the w (<= vlen) lanes of v to dst as bf16, rounded to nearest even with NaN kept
    // (quiet), bit for bit as xk::bf16 (integer arithmetic, also where AVX512-BF16 exists: its
    // VCVTNEPS2BF16 flushes denormals). Clobbers v, t0, t1, gtmp and (AVX-512) k3; k1 must hold
    // the w-lane mask on AVX-512 when w < vlen.
    void store_bf16(const Xbyak::RegExp& dst, const Xbyak::Xmm& v, int w, const Xbyak::Xmm& t0, const Xbyak::Xmm& t1,
                    const Xbyak::Reg64& gtmp);
    // ymm mask of w lanes (AVX2), from a static table.
    void load_avx2_mask(const Xbyak::Xmm& dst, int w, const Xbyak::Reg64& gtmp);

    // AVX-512 code on ymm registers (V(), vlen_ = 8; AVX-512VL encodings, k1 masks, embedded
    // broadcasts), for a tile of at most 8 columns; off again before the next full-width tile.
    void set_ymm(bool on) {
        ymm_ = z_ && on;
        vlen_ = z_ && !on ? 16 : 8;
    }

    bool z_ = false;
    bool ymm_ = false;
    int vlen_ = 8, nvregs_ = 16;
};

// ---- packing (gemm_pack.cpp; AVX2 code, used by the AVX2 and AVX-512 kernels) -------------------
// Sources are f32 or bf16 (uint16_t bits, widened to f32 as they are read: exact); the panels
// are f32 either way.

// op(A) rows [0, m) x k [0, kc) -> panels of MR rows, k-major: dst[p][k][MR] (p = 0..ceil(m/MR)-1).
// A points at op(A)[0, 0] of the block: A[r*lda + k] (trans_a N) or A[k*lda + r] (trans_a T).
// Rows of the last panel beyond m are left unspecified (the kernel never reads them). dst needs
// kPackSlack floats beyond the panels (vector stores may run past the last one).
void gemm_pack_a(const float* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR, float* dst);
void gemm_pack_a(const uint16_t* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR, float* dst);
constexpr int64_t kPackSlack = 16;
// op(B) k [0, kc) x columns [0, n) -> panels of NR columns: dst[p][k][NR]; columns beyond n are 0.
// B points at op(B)[0, 0] of the block: B[k*ldb + c] (trans_b N) or B[c*ldb + k] (trans_b T).
void gemm_pack_b(const float* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR, float* dst);
void gemm_pack_b(const uint16_t* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR, float* dst);
// n bf16 -> f32 (exact), and back for values that are bf16 already (the low 16 bits dropped).
void gemm_widen_bf16(const uint16_t* src, int64_t n, float* dst);
void gemm_narrow_bf16(const float* src, int64_t n, uint16_t* dst);

// bf16 pairs for the VDPBF16PS microkernel (AVX-512 code, avx512_bf16 only): k taken in pairs
// (kp = ceil(kc / 2); an odd kc's last pair has a zero second half), each pair of one row / column
// one 32-bit element (the lower k in the low half).
// op(A) rows [0, m) x k [0, kc) -> panels of MR rows: dst[p][kk][MR] (rows past m: 0).
void gemm_pack_a_pairs(const uint16_t* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR, uint32_t* dst);
// op(B) k [0, kc) x columns [0, n) -> panels of NR columns: dst[p][kk][NR] (columns past n: 0).
void gemm_pack_b_pairs(const uint16_t* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR, uint32_t* dst);

// The packed B of the JIT kernels (one layout per ISA, shared by the blocked and the small
// kernel, so one packed weight serves every M): K split into blocks of kc rows (the last may be
// shorter); block b holds ceil(N/NR) panels of kcb x NR elements (kcb = the block's rows), so the
// panel p of the block starting at row pc is at pc * npad + p * kcb * NR, npad = ceil(N/NR)*NR.
// Elements are f32, or bf16 for a bf16 B (dtype bf16: the same arrangement at half the bytes,
// widened to f32 panels by the kernel per K block and column block).
// pairs (bf16 at avx512_bf16, the VDPBF16PS kernel): each block's rows taken in pairs (kcb
// rounded up to even, the pad row 0; every block but the last has an even kc), a panel k-pair
// major: element (k, c) of the panel at (k / 2) * 2 NR + 2 c + k % 2 — offsets in bf16 elements.
struct GemmBLayout {
    int64_t K = 0, N = 0, kc = 0, nr = 0, npad = 0;
    DType dtype = DType::f32;
    bool pairs = false;
    std::string name;  // e.g. "jit:avx2:f32:K768:N3072:kc256:nr16", "jit:avx512:bf16:K768:N768:kc384:nr32",
                       // "jit:avx512_bf16:bf16x2:K768:N768:kc384:nr32"
    int64_t kpad(int64_t k) const { return pairs ? (k + 1) / 2 * 2 : k; }
    size_t floats() const { return static_cast<size_t>(kpad(K) * npad); }  // elements
    int64_t offset(int64_t pc, int64_t panel, int64_t kcb) const { return pc * npad + panel * kpad(kcb) * nr; }
};
// isa avx512_bf16 (and above) with dtype bf16: the pairs layout.
GemmBLayout gemm_b_layout(Isa isa, int64_t K, int64_t N, DType dtype = DType::f32);
std::shared_ptr<const GemmPacked> gemm_jit_pack_b(const GemmSpec& s, const GemmBLayout& l, const void* B);

// The blocked kernel's thread split (jit_gemm.cpp): the (M, N) grid of MR x NR tiles cut into
// pm x pn parts (row-major), run by nthr threads (pm * pn > nthr with the extra cuts).
struct GemmSplit {
    int nthr = 1, pm = 1, pn = 1;
};
// How the base grid (one part per thread) is chosen — XK_GEMM_F32_SPLIT (an experiment knob, read
// when a plan is created; an unknown value is an error naming it):
//   cost   (default, unset or "cost") the least estimated time per thread: its tile rectangle's
//          FMAs plus the packing of its A rows and (unless prepacked) B columns
//   <a>x<b> exactly a x b parts when a * b <= the threads, a <= M's tiles and b <= N's tiles
//          (e.g. "4x4" at 16 threads), else the cost rule
// Extra cuts (XK_GEMM_EXTRA parts per thread, default 3) are then made by the same rule for all.
struct GemmSplitPolicy {
    enum Kind { cost, grid } kind = cost;
    int pm = 0, pn = 0;  // grid
};
GemmSplitPolicy gemm_split_policy();
GemmSplit gemm_split(int64_t M, int64_t N, int64_t K, int64_t MR, int64_t NR, int threads, bool prepacked, int extra,
                     const GemmSplitPolicy& policy);

// A 64-byte aligned per-thread scratch buffer (slot 0..5) of at least `floats` floats, reused
// across calls. Slots 0 and 1 are a worker's own packing buffers; 2 and 3 hold the operands the
// blocked kernel's calling thread shares with its workers for one call (jit_gemm.cpp); 4 is a
// worker's f32 accumulator of a bf16 C block. The AMX kernel (jit_gemm_amx.cpp) uses the same
// roles: 0 packed A, 1 A's K tail and a requantization tile, 2 and 3 the per-call packed B and
// int8 column terms, 4 the accumulators of a task's column blocks, 5 (the calling thread's) the
// call's shared packed A.
constexpr int kGemmThreadBufferSlots = 6;
float* gemm_thread_buffer(int slot, size_t floats);


// A 16 x 16 dword transpose in registers: out[p] = dword p of r[0..15] (AVX-512 F; callers are
// target-attribute functions). Used by the int8 A packer and the AMX B packer.
__attribute__((target("avx512f"), always_inline)) inline void transpose16x16_epi32(const __m512i r[16], __m512i out[16]) {
    __m512i u[16];
    for (int q = 0; q < 4; ++q) {
        const __m512i t0 = _mm512_unpacklo_epi32(r[4 * q], r[4 * q + 1]), t1 = _mm512_unpackhi_epi32(r[4 * q], r[4 * q + 1]);
        const __m512i t2 = _mm512_unpacklo_epi32(r[4 * q + 2], r[4 * q + 3]), t3 = _mm512_unpackhi_epi32(r[4 * q + 2], r[4 * q + 3]);
        u[4 * q + 0] = _mm512_unpacklo_epi64(t0, t2), u[4 * q + 1] = _mm512_unpackhi_epi64(t0, t2);
        u[4 * q + 2] = _mm512_unpacklo_epi64(t1, t3), u[4 * q + 3] = _mm512_unpackhi_epi64(t1, t3);
    }
    // u[4q + j], 128-bit lane L: dword 4L + j of rows 4q .. 4q + 3
    for (int j = 0; j < 4; ++j) {
        const __m512i ab_lo = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), ab_hi = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
        const __m512i cd_lo = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), cd_hi = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xEE);
        out[0 + j] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0x88);
        out[4 + j] = _mm512_shuffle_i32x4(ab_lo, cd_lo, 0xDD);
        out[8 + j] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0x88);
        out[12 + j] = _mm512_shuffle_i32x4(ab_hi, cd_hi, 0xDD);
    }
}

}  // namespace xk::detail
