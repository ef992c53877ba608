// f32 / bf16 vector loads and stores for xbyak generators (see jit_io.hpp).
#include "kernels/common/jit_io.hpp"

#include "xk/error.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;
using Xbyak::util::T_z;

// Table entries of 64 bytes (a full zmm), except the lane-mask slide.
enum Entry : int {
    kSlide = 0,     // 16 x 0xffffffff then 16 x 0: the mask of the first n lanes starts at (16 - n) * 4
    kOne = 2,       // 1
    k7fff = 3,      // 0x7fff
    kQuiet = 4,     // 0x00400000: the quiet bit of a float NaN
    kHiWords = 5,   // 0xffff0000
    k8000 = 6,      // 0x8000: bf16 rounding to nearest, ties away from zero
    kCount = 7
};

struct alignas(64) Table {
    uint32_t v[kCount][16];
};

const Table& the_table() {
    static const Table t = [] {
        Table t{};
        for (int i = 0; i < 16; ++i) {
            t.v[kSlide][i] = 0xffffffffu;
            t.v[kSlide + 1][i] = 0;
            t.v[kOne][i] = 1;
            t.v[k7fff][i] = 0x7fff;
            t.v[kQuiet][i] = 0x00400000u;
            t.v[kHiWords][i] = 0xffff0000u;
            t.v[k8000][i] = 0x8000u;
        }
        return t;
    }();
    return t;
}

}  // namespace

JitIo::JitIo(CodeGenerator& g, Isa isa, const Reg64& table, const Scratch& s)
    : g_(g), zmm_(isa >= Isa::avx512), native_bf16_(isa >= Isa::avx512_bf16), tbl_(table), s_(s) {
    if (isa < Isa::avx2) throw Error(Status::invalid_argument, "JitIo: needs avx2 or above");
}

const void* JitIo::table() noexcept { return &the_table(); }

Xmm JitIo::vreg(int idx) const { return zmm_ ? Xmm(Zmm(idx)) : Xmm(Ymm(idx)); }

Address JitIo::c(int entry, int offset_bytes) const { return g_.ptr[tbl_ + entry * 64 + offset_bytes]; }

void JitIo::set_kmask(int n) const {
    g_.mov(s_.gpr.cvt32(), n >= 32 ? 0xffffffffu : (1u << n) - 1u);
    g_.kmovw(s_.k, s_.gpr.cvt32());
}

void JitIo::set_kmask_rt(const Reg64& cnt) const {
    g_.mov(s_.gpr.cvt32(), 1);
    g_.shlx(s_.gpr.cvt32(), s_.gpr.cvt32(), cnt.cvt32());
    g_.dec(s_.gpr.cvt32());
    g_.kmovw(s_.k, s_.gpr.cvt32());
}

void JitIo::lane_mask_rt(const Xmm& dst, const Reg64& cnt) const {
    if (zmm_) {
        set_kmask_rt(cnt);
        return;
    }
    g_.mov(s_.gpr, cnt);
    g_.neg(s_.gpr);
    g_.vmovups(dst, g_.ptr[tbl_ + s_.gpr * 4 + kSlide * 64 + 64]);
}

void JitIo::keep_lanes(const Xmm& v, int n) const {
    if (n >= vlen()) return;
    if (zmm_) {
        set_kmask(n);
        g_.vmovaps(v | s_.k | T_z, v);
    } else {
        g_.vandps(v, v, c(kSlide, (16 - n) * 4));
    }
}

// nbytes in [2, 14], even: exactly those bytes, the rest of x zeroed.
void JitIo::load_bytes(const Xmm& x, const RegExp& addr, int nbytes) const {
    int off = 0;
    bool first = true;
    if (nbytes - off >= 8) {
        g_.vmovq(x, g_.qword[addr]);
        off += 8;
        first = false;
    }
    if (nbytes - off >= 4) {
        if (first) g_.vmovd(x, g_.dword[addr + off]);
        else g_.vpinsrd(x, x, g_.dword[addr + off], static_cast<uint8_t>(off / 4));
        off += 4;
        first = false;
    }
    if (nbytes - off >= 2) {
        if (first) g_.vpxor(x, x, x);
        g_.vpinsrw(x, x, g_.word[addr + off], static_cast<uint8_t>(off / 2));
        off += 2;
    }
}

void JitIo::store_bytes(const RegExp& addr, const Xmm& x, int nbytes) const {
    int off = 0;
    if (nbytes - off >= 8) {
        g_.vmovq(g_.qword[addr], x);
        off += 8;
    }
    if (nbytes - off >= 4) {
        g_.vpextrd(g_.dword[addr + off], x, static_cast<uint8_t>(off / 4));
        off += 4;
    }
    if (nbytes - off >= 2) {
        g_.vpextrw(g_.word[addr + off], x, static_cast<uint8_t>(off / 2));
        off += 2;
    }
}

void JitIo::load(const Xmm& v, const RegExp& addr, DType t, int n) const {
    const int vl = vlen();
    if (n < 1 || n > vl) throw Error(Status::runtime_error, "JitIo::load: bad count");
    auto& g = g_;
    if (t == DType::f32) {
        if (n == vl) {
            g.vmovups(v, g.ptr[addr]);
        } else if (zmm_) {
            if (n == 8) {
                g.vmovups(Ymm(v.getIdx()), g.ptr[addr]);
            } else {
                set_kmask(n);
                g.vmovups(v | s_.k | T_z, g.ptr[addr]);
            }
        } else if (n == 4) {
            g.vmovups(Xmm(v.getIdx()), g.ptr[addr]);
        } else {
            g.vmovups(s_.v0, c(kSlide, (16 - n) * 4));
            g.vmaskmovps(v, s_.v0, g.ptr[addr]);
        }
        return;
    }
    if (t != DType::bf16) throw Error(Status::runtime_error, "JitIo::load: dtype");
    if (n == vl) {
        g.vpmovzxwd(v, g.ptr[addr]);
    } else if (zmm_) {
        if (n == 8) {
            g.vpmovzxwd(Ymm(v.getIdx()), g.ptr[addr]);
        } else {
            set_kmask(n);
            g.vpmovzxwd(v | s_.k | T_z, g.ptr[addr]);
        }
    } else {
        load_bytes(Xmm(v.getIdx()), addr, 2 * n);
        g.vpmovzxwd(v, Xmm(v.getIdx()));
    }
    g.vpslld(v, v, 16);
}

// Round to nearest even: (u + 0x7fff + ((u >> 16) & 1)) >> 16; NaN: (u | quiet bit) >> 16. The
// result (<= 0xffff) replaces v, one per dword; clobbers v0, v1 (AVX2) or v0 and k (AVX-512).
void JitIo::round_dwords(const Xmm& v) const {
    auto& g = g_;
    const Xmm& w = s_.v0;
    if (zmm_) {
        g.vcmpps(s_.k, v, v, 3 /* UNORD_Q */);
        g.vpsrld(w, v, 16);
        g.vpandd(w, w, c(kOne));
        g.vpaddd(w, w, v);
        g.vpaddd(w, w, c(k7fff));
        g.vpord(w | s_.k, v, c(kQuiet));
        g.vpsrld(v, w, 16);
    } else {
        g.vcmpps(s_.v1, v, v, 3 /* UNORD_Q */);
        g.vpsrld(w, v, 16);
        g.vpand(w, w, c(kOne));
        g.vpaddd(w, w, v);
        g.vpaddd(w, w, c(k7fff));
        g.vpor(v, v, c(kQuiet));
        g.vblendvps(v, w, v, s_.v1);
        g.vpsrld(v, v, 16);
    }
}

// s_.v0 = the bf16 words of v (low half: xmm on AVX2, ymm on AVX-512); clobbers v and v1.
void JitIo::to_bf16_words(const Xmm& v) const {
    auto& g = g_;
    const Xmm& w = s_.v0;
    if (native_bf16_) {
        g.vcvtneps2bf16(Ymm(w.getIdx()), v);
        return;
    }
    round_dwords(v);
    if (zmm_) {
        g.vpmovdw(Ymm(w.getIdx()), v);
    } else {
        g.vextracti128(Xmm(s_.v1.getIdx()), Ymm(v.getIdx()), 1);
        g.vpackusdw(Xmm(w.getIdx()), Xmm(v.getIdx()), Xmm(s_.v1.getIdx()));
    }
}

void JitIo::round_pair(const Xmm& a, const Xmm& b, bool b_high) const {
    auto& g = g_;
    // Without NaNs the rounding is 4-5 instructions a vector; one unordered compare of a with b
    // (true in a lane where either is NaN) sends the rare pair that holds one to the full sequence.
    Label careful, done;
    g.vcmpps(s_.v1, a, b, 3 /* UNORD_Q */);
    g.vptest(s_.v1, s_.v1);
    g.jnz(careful, g.T_NEAR);
    for (const Xmm* v : {&a, &b}) {
        g.vpsrld(s_.v0, *v, 16);
        g.vpand(s_.v0, s_.v0, c(kOne));
        g.vpaddd(*v, *v, s_.v0);
        g.vpaddd(*v, *v, c(k7fff));
        if (!(b_high && v == &b)) g.vpsrld(*v, *v, 16);  // (b_high: b's result is already in its upper words)
    }
    g.jmp(done, g.T_NEAR);
    g.L(careful);
    round_dwords(a);
    round_dwords(b);
    if (b_high) g.vpslld(b, b, 16);
    g.L(done);
}

void JitIo::store2(const RegExp& addr, const Xmm& a, const Xmm& b, DType t, int n, bool nt) const {
    const int vl = vlen();
    if (n < 1 || n > 2 * vl) throw Error(Status::runtime_error, "JitIo::store2: bad count");
    auto& g = g_;
    if (t != DType::bf16 || n < 2 * vl || (zmm_ && !native_bf16_)) {
        store(addr, a, t, std::min(n, vl), nt && n >= vl);
        if (n > vl) store(addr + vl * dtype_size(t), b, t, n - vl, nt && n == 2 * vl);
        return;
    }
    const int w = s_.v0.getIdx();
    if (native_bf16_) {
        g.vcvtne2ps2bf16(Zmm(w), b, a);  // low half from a, high half from b
        if (nt) g.vmovntdq(g.ptr[addr], Zmm(w));
        else g.vmovups(g.ptr[addr], Zmm(w));
        return;
    }
    round_pair(a, b, false);
    g.vpackusdw(Ymm(w), a, b);       // per 128-bit lane: a0-3 b0-3 | a4-7 b4-7
    g.vpermq(Ymm(w), Ymm(w), 0xd8);  // a0-7 b0-7
    if (nt) g.vmovntdq(g.ptr[addr], Ymm(w));
    else g.vmovdqu(g.ptr[addr], Ymm(w));
}

void JitIo::set_eo_regs(int hi_words, int round, int r7fff, int one) {
    const int regs[4] = {hi_words, round, r7fff, one};
    for (int i = 0; i < 4; ++i) {
        if (regs[i] < 0) continue;
        if (regs[i] == s_.v0.getIdx() || regs[i] == s_.v1.getIdx())
            throw Error(Status::runtime_error, "JitIo::set_eo_regs: a scratch register");
        for (int j = 0; j < i; ++j)
            if (regs[j] == regs[i]) throw Error(Status::runtime_error, "JitIo::set_eo_regs: a register twice");
    }
    hi_reg_ = hi_words;
    round_reg_ = round;
    r7fff_reg_ = r7fff;
    one_reg_ = one;
    if (hi_reg_ >= 0) g_.vmovups(vreg(hi_reg_), c(kHiWords));
    if (round_reg_ >= 0) g_.vmovups(vreg(round_reg_), c(k8000));
    if (r7fff_reg_ >= 0) g_.vmovups(vreg(r7fff_reg_), c(k7fff));
    if (one_reg_ >= 0) g_.vmovups(vreg(one_reg_), c(kOne));
}

void JitIo::load2_eo(const Xmm& even, const Xmm& odd, const RegExp& addr) const {
    auto& g = g_;
    if (zmm_) {  // EVEX: VPAND has no zmm form
        g.vmovdqu32(even, g.ptr[addr]);
        if (hi_reg_ >= 0) g.vpandd(odd, even, vreg(hi_reg_));
        else g.vpandd(odd, even, c(kHiWords));
    } else {
        g.vmovdqu(even, g.ptr[addr]);
        if (hi_reg_ >= 0) g.vpand(odd, even, vreg(hi_reg_));
        else g.vpand(odd, even, c(kHiWords));
    }
    g.vpslld(even, even, 16);
}

// even holds its bf16 words in the low half of each dword (high half zero), odd its words in
// the high half (low half anything): one bit select, odd's high words over even's low words, into
// the register stored (AVX2: s_.v0, by VPBLENDW; AVX-512, which has no VPBLENDW on zmm: even itself,
// by VPTERNLOGD with the 0xffff0000 table entry as the selector, (C ? B : A) = 0xd8). Then the
// store of that register (vbytes).
void JitIo::merge_store_eo(const RegExp& addr, const Xmm& even, const Xmm& odd, bool nt, const RegExp* copy_to) const {
    auto& g = g_;
    Xmm out = s_.v0;
    if (zmm_) {
        if (hi_reg_ >= 0) g.vpternlogd(even, odd, vreg(hi_reg_), 0xd8);  // even = hi-word mask ? odd : even
        else g.vpternlogd(even, odd, c(kHiWords), 0xd8);
        out = even;
    } else {
        g.vpblendw(out, even, odd, 0xaa);  // even elements in the low words, odd in the high
    }
    if (nt) g.vmovntdq(g.ptr[addr], out);
    else if (zmm_) g.vmovdqu32(g.ptr[addr], out);
    else g.vmovdqu(g.ptr[addr], out);
    if (copy_to) {
        if (zmm_) g.vmovdqu32(g.ptr[*copy_to], out);
        else g.vmovdqu(g.ptr[*copy_to], out);
    }
}

void JitIo::store2_eo(const RegExp& addr, const Xmm& even, const Xmm& odd, bool nt) const {
    auto& g = g_;
    if (zmm_) {
        // The full emulated rounding of each vector (round_dwords: exact round to nearest even,
        // NaN quiet, also at avx512_bf16), odd's bf16 shifted into the high words.
        round_dwords(even);
        round_dwords(odd);
        g.vpslld(odd, odd, 16);
    } else {
        round_pair(even, odd, true);
    }
    merge_store_eo(addr, even, odd, nt);
}

void JitIo::store2_eo_away(const RegExp& addr, const Xmm& even, const Xmm& odd, bool nt) const {
    auto& g = g_;
    if (round_reg_ >= 0) {
        g.vpaddd(even, even, vreg(round_reg_));
        g.vpaddd(odd, odd, vreg(round_reg_));
    } else {
        g.vpaddd(even, even, c(k8000));
        g.vpaddd(odd, odd, c(k8000));
    }
    g.vpsrld(even, even, 16);
    merge_store_eo(addr, even, odd, nt);
}

void JitIo::round2_eo_keep(const RegExp& addr, const Xmm& even, const Xmm& odd, const Xmm& tmp, bool nt,
                           const RegExp* copy_to) const {
    auto& g = g_;
    for (const Xmm* v : {&even, &odd}) {
        g.vpsrld(tmp, *v, 16);
        if (zmm_ && one_reg_ >= 0) g.vpandd(tmp, tmp, vreg(one_reg_));  // EVEX: VPAND has no zmm form
        else if (zmm_) g.vpandd(tmp, tmp, c(kOne));
        else if (one_reg_ >= 0) g.vpand(tmp, tmp, vreg(one_reg_));
        else g.vpand(tmp, tmp, c(kOne));
        g.vpaddd(*v, *v, tmp);
        if (r7fff_reg_ >= 0) g.vpaddd(*v, *v, vreg(r7fff_reg_));
        else g.vpaddd(*v, *v, c(k7fff));
        if (zmm_ && hi_reg_ >= 0) g.vpandd(*v, *v, vreg(hi_reg_));
        else if (zmm_) g.vpandd(*v, *v, c(kHiWords));
        else if (hi_reg_ >= 0) g.vpand(*v, *v, vreg(hi_reg_));
        else g.vpand(*v, *v, c(kHiWords));
    }
    g.vpsrld(tmp, even, 16);
    merge_store_eo(addr, tmp, odd, nt, copy_to);
}

void JitIo::quiet_nan_hi_words(const Xmm& v) const {
    auto& g = g_;
    if (zmm_) {
        g.vcmpps(s_.k, v, v, 3 /* UNORD_Q */);
        g.vpord(v | s_.k, v, c(kQuiet));
        g.vpandd(v | s_.k, v, c(kHiWords));
    } else {
        g.vcmpps(s_.v1, v, v, 3 /* UNORD_Q */);
        g.vpor(s_.v0, v, c(kQuiet));
        g.vpand(s_.v0, s_.v0, c(kHiWords));
        g.vblendvps(v, v, s_.v0, s_.v1);
    }
}

void JitIo::store(const RegExp& addr, const Xmm& v, DType t, int n, bool nt) const {
    const int vl = vlen();
    if (n < 1 || n > vl || (nt && n != vl)) throw Error(Status::runtime_error, "JitIo::store: bad count");
    auto& g = g_;
    if (t == DType::f32) {
        if (n == vl) {
            if (nt) g.vmovntps(g.ptr[addr], v);
            else g.vmovups(g.ptr[addr], v);
        } else if (zmm_) {
            if (n == 8) {
                g.vmovups(g.ptr[addr], Ymm(v.getIdx()));
            } else {
                set_kmask(n);
                g.vmovups(g.ptr[addr] | s_.k, v);
            }
        } else if (n == 4) {
            g.vmovups(g.ptr[addr], Xmm(v.getIdx()));
        } else {
            g.vmovups(s_.v0, c(kSlide, (16 - n) * 4));
            g.vmaskmovps(g.ptr[addr], s_.v0, v);
        }
        return;
    }
    if (t != DType::bf16) throw Error(Status::runtime_error, "JitIo::store: dtype");
    to_bf16_words(v);
    const int w = s_.v0.getIdx();
    if (zmm_) {
        if (n == vl) {
            if (nt) g.vmovntdq(g.ptr[addr], Ymm(w));
            else g.vmovups(g.ptr[addr], Ymm(w));
        } else if (n == 8) {
            g.vmovups(g.ptr[addr], Xmm(w));
        } else {
            set_kmask(n);
            g.vmovdqu16(g.ptr[addr] | s_.k, Ymm(w));
        }
    } else {
        if (n == vl) {
            if (nt) g.vmovntdq(g.ptr[addr], Xmm(w));
            else g.vmovdqu(g.ptr[addr], Xmm(w));
        } else {
            store_bytes(addr, Xmm(w), 2 * n);
        }
    }
}

void JitIo::load_rt(const Xmm& v, const RegExp& addr, DType t, const Reg64& cnt) const {
    auto& g = g_;
    if (zmm_) {
        set_kmask_rt(cnt);
        if (t == DType::f32) {
            g.vmovups(v | s_.k | T_z, g.ptr[addr]);
        } else {
            g.vpmovzxwd(v | s_.k | T_z, g.ptr[addr]);
            g.vpslld(v, v, 16);
        }
        return;
    }
    if (t == DType::f32) {
        g.mov(s_.gpr, cnt);
        g.neg(s_.gpr);
        g.vmovups(s_.v0, g.ptr[tbl_ + s_.gpr * 4 + kSlide * 64 + 64]);
        g.vmaskmovps(v, s_.v0, g.ptr[addr]);
        return;
    }
    // bf16 on AVX2: branch to the static sequence of this count.
    Label done;
    for (int n = 1; n <= 8; ++n) {
        Label next;
        if (n < 8) {
            g.cmp(cnt, n);
            g.jne(next);
        }
        load(v, addr, DType::bf16, n);
        if (n < 8) g.jmp(done);
        g.L(next);
    }
    g.L(done);
}

void JitIo::store_rt(const RegExp& addr, const Xmm& v, DType t, const Reg64& cnt) const {
    auto& g = g_;
    if (zmm_) {
        if (t == DType::f32) {
            set_kmask_rt(cnt);
            g.vmovups(g.ptr[addr] | s_.k, v);
        } else {
            to_bf16_words(v);  // uses the opmask itself: set the count mask afterwards
            set_kmask_rt(cnt);
            g.vmovdqu16(g.ptr[addr] | s_.k, Ymm(s_.v0.getIdx()));
        }
        return;
    }
    if (t == DType::f32) {
        g.mov(s_.gpr, cnt);
        g.neg(s_.gpr);
        g.vmovups(s_.v0, g.ptr[tbl_ + s_.gpr * 4 + kSlide * 64 + 64]);
        g.vmaskmovps(g.ptr[addr], s_.v0, v);
        return;
    }
    to_bf16_words(v);
    const Xmm w(s_.v0.getIdx());
    Label done;
    for (int n = 1; n <= 8; ++n) {
        Label next;
        if (n < 8) {
            g.cmp(cnt, n);
            g.jne(next);
        }
        if (n == 8) g.vmovdqu(g.ptr[addr], w);
        else store_bytes(addr, w, 2 * n);
        if (n < 8) g.jmp(done);
        g.L(next);
    }
    g.L(done);
}

void JitIo::hsum(const Xmm& v) const {
    auto& g = g_;
    const int i = v.getIdx(), t = s_.v0.getIdx();
    if (zmm_) {
        g.vextractf64x4(Ymm(t), Zmm(i), 1);
        g.vaddps(Ymm(i), Ymm(i), Ymm(t));
    }
    if (zmm_) g.vextractf32x4(Xmm(t), Ymm(i), 1);  // EVEX: any of the 32 registers
    else g.vextractf128(Xmm(t), Ymm(i), 1);
    g.vaddps(Xmm(i), Xmm(i), Xmm(t));
    g.vpermilps(Xmm(t), Xmm(i), 0x4e);
    g.vaddps(Xmm(i), Xmm(i), Xmm(t));
    g.vpermilps(Xmm(t), Xmm(i), 0xb1);
    g.vaddps(Xmm(i), Xmm(i), Xmm(t));
}

void JitIo::hmax(const Xmm& v) const {
    auto& g = g_;
    const int i = v.getIdx(), t = s_.v0.getIdx();
    if (zmm_) {
        g.vextractf64x4(Ymm(t), Zmm(i), 1);
        g.vmaxps(Ymm(i), Ymm(i), Ymm(t));
    }
    if (zmm_) g.vextractf32x4(Xmm(t), Ymm(i), 1);
    else g.vextractf128(Xmm(t), Ymm(i), 1);
    g.vmaxps(Xmm(i), Xmm(i), Xmm(t));
    g.vpermilps(Xmm(t), Xmm(i), 0x4e);
    g.vmaxps(Xmm(i), Xmm(i), Xmm(t));
    g.vpermilps(Xmm(t), Xmm(i), 0xb1);
    g.vmaxps(Xmm(i), Xmm(i), Xmm(t));
}

}  // namespace xk::detail
