// Loads and stores of f32 / bf16 data as fp32 vectors for xbyak generators of memory-bound ops
// (norm, rope, glu, softmax): one ymm (AVX2, 8 lanes) or zmm (AVX-512, 16 lanes) per vector.
//
//   JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});   // scratch it may clobber
//   mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
//   io.load(V(0), x + idx * 4, DType::f32, io.vlen());     // full vector
//   io.load(V(1), x + 64, DType::bf16, 5);                  // 5 elements, lanes 5.. = 0
//   io.store(y, V(0), DType::bf16, io.vlen(), /*nt=*/true);
//
// Conversions. bf16 loads widen exactly (shift into the upper half). bf16 stores round to
// nearest even with NaN kept quiet, as xk::bf16: with AVX512-BF16 (isa >= avx512_bf16) through
// VCVTNEPS2BF16, which also treats denormal inputs as zero and flushes denormal results (the only
// difference from xk::bf16, for |x| < 2^-126); otherwise through integer arithmetic
// (u + 0x7fff + ((u >> 16) & 1)) >> 16, bit-exact with xk::bf16.
//
// Partial vectors. A count n < vlen is a static tail (known when generating): lanes >= n are
// neither read (no access beyond element n-1, so no fault and no sanitizer report at the end of
// a buffer) nor written. AVX-512 uses the opmask; AVX2 uses VMASKMOVPS for f32 and exact-width
// scalar pieces (VMOVQ / VPINSRD / VPINSRW, VPEXTR*) for bf16. load_rt / store_rt take the count
// from a register at run time (1..vlen); for bf16 on AVX2 they branch to the static piece
// sequence of that count.
//
// Clobbers: the two scratch vectors, the opmask (AVX-512), the scratch GPR (tails, runtime
// counts) and the flags. A bf16 store clobbers its source vector as well. The table register is
// read only.
#pragma once
#include <cstdint>

#include "dispatch/xbyak_config.hpp"
#include "xk/isa.hpp"
#include "xk/types.hpp"

namespace xk::detail {

class JitIo {
public:
    struct Scratch {
        Xbyak::Xmm v0, v1;     // vector scratch, of the generator's width (Ymm or Zmm)
        Xbyak::Opmask k;       // AVX-512 only
        Xbyak::Reg64 gpr;
    };

    JitIo(Xbyak::CodeGenerator& g, Isa isa, const Xbyak::Reg64& table, const Scratch& s);

    // The constant table (static storage): load its address into the table register first.
    static const void* table() noexcept;

    bool zmm() const { return zmm_; }
    bool native_bf16() const { return native_bf16_; }
    int vlen() const { return zmm_ ? 16 : 8; }       // fp32 lanes
    int vbytes() const { return zmm_ ? 64 : 32; }
    Xbyak::Xmm vreg(int idx) const;                   // Ymm(idx) or Zmm(idx)

    // v = the n (1..vlen) elements of dtype t at addr, as fp32; lanes >= n are 0.
    void load(const Xbyak::Xmm& v, const Xbyak::RegExp& addr, DType t, int n) const;
    // Stores lanes [0, n) of v to addr as dtype t. nt: non-temporal full-vector store (n == vlen;
    // addr aligned to the stored width: vbytes for f32, vbytes/2 for bf16).
    void store(const Xbyak::RegExp& addr, const Xbyak::Xmm& v, DType t, int n, bool nt = false) const;
    // Two vectors to 2*vlen consecutive elements (a first, then b), n in [1, 2*vlen] elements in
    // all. A full bf16 pair is converted and stored as one: AVX2 packs the two rounded vectors
    // (VPACKUSDW + VPERMQ, one 32-byte store), AVX512-BF16 converts both with VCVTNE2PS2BF16 (one
    // 64-byte store). Clobbers a and b (bf16). nt as for store(), for a full pair.
    void store2(const Xbyak::RegExp& addr, const Xbyak::Xmm& a, const Xbyak::Xmm& b, DType t, int n, bool nt = false) const;
    // Even / odd split of 2*vlen bf16: one full-width load (32 bytes AVX2, 64 AVX-512) gives the
    // even-indexed elements in `even` and the odd-indexed ones in `odd` (a shift and an AND for
    // 2*vlen values, against two widening loads, whose VPMOVZXWD is a lane-crossing shuffle), and
    // store2_eo writes such a pair back in element order, rounded as store2 (no pack and lane
    // permute: one word merge, VPBLENDW on AVX2, VPTERNLOGD bit select on AVX-512). For
    // elementwise code whose operands are all split the same way. On AVX-512, store2_eo rounds
    // by the integer emulation (bit-exact with xk::bf16, denormals kept) at avx512_bf16 too.
    // nt: addr aligned to vbytes. Both stores clobber even and odd.
    void load2_eo(const Xbyak::Xmm& even, const Xbyak::Xmm& odd, const Xbyak::RegExp& addr) const;
    void store2_eo(const Xbyak::RegExp& addr, const Xbyak::Xmm& even, const Xbyak::Xmm& odd, bool nt = false) const;
    // As store2_eo, but rounded to nearest with ties away from zero (+ 0x8000 on the bits: 4
    // instructions a pair instead of ~13, no NaN test). Precondition: every NaN among the values
    // has zero low 16 bits (NaNs from bf16 data, or generated default NaNs): the + 0x8000 would
    // carry a payload of 0x7fff8000-0x7fffffff into the sign. Finite values and +-inf round
    // within half a bf16 ulp (an overflow goes to inf, as round to nearest even).
    void store2_eo_away(const Xbyak::RegExp& addr, const Xbyak::Xmm& even, const Xbyak::Xmm& odd, bool nt = false) const;
    // For a sum the code goes on using once rounded (a fused residual: the norm is defined on the
    // rounded h): every lane of even and odd becomes its value rounded to bf16 (to nearest even,
    // as xk::bf16: the low 16 bits cleared), still f32, and the pair is stored in element order
    // as store2_eo would (VPSRLD, then merge_store_eo). 11 instructions a pair and the store, no
    // NaN test: precondition as store2_eo_away (NaN lanes have zero low 16 bits; then the + 0x7fff
    // or 0x8000 on the bits cannot carry out of the low word). Clobbers tmp (and s.v0 on AVX2).
    // copy_to: the same pair stored there too (a regular store; the first one as nt says).
    void round2_eo_keep(const Xbyak::RegExp& addr, const Xbyak::Xmm& even, const Xbyak::Xmm& odd,
                        const Xbyak::Xmm& tmp, bool nt = false, const Xbyak::RegExp* copy_to = nullptr) const;
    // Makes f32 data meet store2_eo_away's precondition: in every NaN lane of v, sets the quiet
    // bit and clears the low 16 bits (the NaN a bf16 conversion keeps); other lanes unchanged.
    // For operands from f32 memory that feed such stores. Clobbers s.v0, s.v1 (AVX2) / s.k.
    void quiet_nan_hi_words(const Xbyak::Xmm& v) const;
    // Constants of the even / odd path held in registers for a main loop (Zen 3 issues at most two
    // ymm loads a cycle, and each table operand is one): from set_eo_regs until clear_eo_regs,
    // load2_eo, merge_store_eo and round2_eo_keep take the 0xffff0000 mask from `hi_words`,
    // store2_eo_away the 0x8000 from `round`, round2_eo_keep its 0x7fff and 1 from `r7fff` and
    // `one` (set_eo_regs fills each; -1: from the table as before). The caller keeps those
    // registers for the constants meanwhile; they may not be JitIo's scratch.
    void set_eo_regs(int hi_words, int round, int r7fff = -1, int one = -1);
    void clear_eo_regs() { hi_reg_ = round_reg_ = r7fff_reg_ = one_reg_ = -1; }
    // Runtime counts: cnt holds 1..vlen (preserved).
    void load_rt(const Xbyak::Xmm& v, const Xbyak::RegExp& addr, DType t, const Xbyak::Reg64& cnt) const;
    void store_rt(const Xbyak::RegExp& addr, const Xbyak::Xmm& v, DType t, const Xbyak::Reg64& cnt) const;
    // v &= (lane < n) for a static n (AVX2: AND with a table mask; AVX-512: zero-masking move).
    void keep_lanes(const Xbyak::Xmm& v, int n) const;
    // Sets the scratch opmask to the first n lanes (AVX-512), from a static or a runtime count.
    void set_kmask(int n) const;
    void set_kmask_rt(const Xbyak::Reg64& cnt) const;
    // Lanes [0, cnt) of a runtime count: AVX2: dst = all-ones in those lanes, zero elsewhere;
    // AVX-512: the scratch opmask is set to them (dst untouched).
    void lane_mask_rt(const Xbyak::Xmm& dst, const Xbyak::Reg64& cnt) const;
    // Horizontal sum of v into lane 0 (other lanes undefined); clobbers v0.
    void hsum(const Xbyak::Xmm& v) const;
    // Horizontal max of v into lane 0 (other lanes undefined); clobbers v0.
    void hmax(const Xbyak::Xmm& v) const;

private:
    Xbyak::Address c(int entry, int offset_bytes = 0) const;
    void to_bf16_words(const Xbyak::Xmm& v) const;  // v0 = words (xmm / ymm half), clobbers v, v1
    // bf16 rounding of a pair (AVX2 emulation, as store2): a's bf16 in the low word of each dword;
    // b's likewise, or in the high word when b_high. Clobbers a, b, s_.v0, s_.v1.
    void round_pair(const Xbyak::Xmm& a, const Xbyak::Xmm& b, bool b_high) const;
    void round_dwords(const Xbyak::Xmm& v) const;   // v = the bf16 of v in the low half of each dword (emulation)
    // The word merge and full-width store of store2_eo / store2_eo_away. Clobbers even (AVX-512).
    void merge_store_eo(const Xbyak::RegExp& addr, const Xbyak::Xmm& even, const Xbyak::Xmm& odd, bool nt,
                        const Xbyak::RegExp* copy_to = nullptr) const;
    void load_bytes(const Xbyak::Xmm& x, const Xbyak::RegExp& addr, int nbytes) const;
    void store_bytes(const Xbyak::RegExp& addr, const Xbyak::Xmm& x, int nbytes) const;

    Xbyak::CodeGenerator& g_;
    bool zmm_, native_bf16_;
    Xbyak::Reg64 tbl_;
    Scratch s_;
    int hi_reg_ = -1, round_reg_ = -1, r7fff_reg_ = -1, one_reg_ = -1;
};

}  // namespace xk::detail
