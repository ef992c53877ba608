// The fused store shared by the fp32 GEMM generators, the tile geometry and the epilogue class.
#include <algorithm>
#include <cstring>

#include "kernels/common/jit_activation.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"

namespace xk::detail {

using namespace Xbyak;

GemmGeometry gemm_geometry(Isa isa) {
    GemmGeometry g;
    g.isa = gemm_code_isa(isa);
    if (g.isa == Isa::avx512) {
        g.vlen = 16, g.nvregs = 32, g.nr = 32;
        g.mr = (g.nvregs - g.nv() - 2) / g.nv();  // 14: FMAs broadcast A from memory
    } else {
        g.vlen = 8, g.nvregs = 16, g.nr = 16;
        g.mr = (g.nvregs - g.nv() - 1) / g.nv();  // 6: one broadcast register
    }
    return g;
}

std::string GemmEpi::key() const {
    std::string k = alpha_one ? "a1" : "aX";
    k += beta == BetaKind::zero ? ",b0" : beta == BetaKind::one ? ",b1" : ",bX";
    if (bias) k += ",bias";
    if (act != Activation::none) k += std::string(",") + activation_name(act);
    if (has_residual()) k += std::string(",res:") + dtype_name(residual);
    if (c != DType::f32) k += std::string(",c:") + dtype_name(c);
    if (partial) k += ",part";
    return k;
}

GemmEpi gemm_epi(const GemmSpec& s) {
    GemmEpi e;
    e.alpha_one = s.alpha_one;
    e.beta = s.beta;
    e.bias = s.epilogue.bias;
    e.act = s.epilogue.act;
    e.residual = s.epilogue.residual ? s.residual_type : DType::s32;
    e.c = s.c_type == DType::bf16 ? DType::bf16 : DType::f32;
    return e;
}

namespace {
// Lane masks for AVX2 partial loads: 8 x -1 then 8 x 0; the mask of w lanes starts at 8 - w.
alignas(64) const int32_t kAvx2Masks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
// Constants of the bf16 rounding: 0x7fff, 1 (the kept lsb), 0x40 (the quiet bit of a bf16 NaN),
// 16 lanes each (AVX2 reads 8 of them, AVX-512 broadcasts the first).
struct alignas(64) Bf16Consts {
    int32_t r7fff[16], one[16], qbit[16];
};
constexpr Bf16Consts make_bf16_consts() {
    Bf16Consts c{};
    for (int i = 0; i < 16; ++i) c.r7fff[i] = 0x7fff, c.one[i] = 1, c.qbit[i] = 0x40;
    return c;
}
alignas(64) constexpr Bf16Consts kBf16Consts = make_bf16_consts();
}  // namespace

JitGemmBase::JitGemmBase(Isa isa, size_t code_bytes) : JitGenerator(isa, code_bytes) {
    z_ = gemm_code_isa(isa) == Isa::avx512;
    vlen_ = z_ ? 16 : 8;
    nvregs_ = z_ ? 32 : 16;
}

Xmm JitGemmBase::V(int i) const { return z_ && !ymm_ ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }

void JitGemmBase::set_tail_mask(int w) {
    if (!z_ || w >= vlen_) return;
    mov(eax, (1u << w) - 1);
    kmovw(k1, eax);
}

void JitGemmBase::load_avx2_mask(const Xmm& dst, int w, const Reg64& gtmp) {
    mov(gtmp, reinterpret_cast<uintptr_t>(kAvx2Masks + (8 - w)));
    vmovups(dst, ptr[gtmp]);
}

void JitGemmBase::load_partial(const Xmm& dst, const Address& src, int w, const Xmm& mask) {
    (void)w;
    if (z_)
        vmovups(dst | k1 | T_z, src);
    else
        vmaskmovps(dst, mask, src);
}

// AVX2: the w < 8 lanes stored as 4 + 2 + 1 (vmaskmovps stores are slow on AMD); AVX-512: k1.
void JitGemmBase::store_partial(const Address& dst, const Xmm& src, int w, const Xmm& tmp) {
    if (z_) {
        vmovups(dst | k1, src);
        return;
    }
    const RegExp base = dst.getRegExp();
    Xmm cur = Xmm(src.getIdx());
    int off = 0, rem = w;
    if (rem >= 4) {
        vmovups(ptr[base], cur);
        rem -= 4, off = 16;
        if (rem == 0) return;
        vextractf128(Xmm(tmp.getIdx()), Ymm(src.getIdx()), 1);
        cur = Xmm(tmp.getIdx());
    }
    if (rem >= 2) {
        vmovlps(ptr[base + off], cur);
        if (rem == 3) {
            vmovhlps(Xmm(tmp.getIdx()), cur, cur);
            vmovss(ptr[base + off + 8], Xmm(tmp.getIdx()));
        }
    } else {
        vmovss(ptr[base + off], cur);
    }
}

// dst (f32) = w (<= vlen) bf16 values at src, widened.
void JitGemmBase::load_bf16(const Xmm& dst, const RegExp& src, int w) {
    if (w == vlen_) {
        vpmovzxwd(dst, ptr[src]);
    } else if (z_) {
        const Xmm half = ymm_ ? Xmm(dst.getIdx()) : Xmm(Ymm(dst.getIdx()));  // the w bf16 values
        vmovdqu16(half | k1 | T_z, ptr[src]);
        vpmovzxwd(dst, half);
    } else {
        const Xmm x(dst.getIdx());
        vpxor(x, x, x);
        for (int l = 0; l < w; ++l) vpinsrw(x, x, ptr[src + 2 * l], l);
        vpmovzxwd(dst, x);
    }
    vpslld(dst, dst, 16);
}

void JitGemmBase::store_bf16(const RegExp& dst, const Xmm& v, int w, const Xmm& t0, const Xmm& t1, const Reg64& gtmp) {
    // bits = (u + 0x7fff + ((u >> 16) & 1)) >> 16, or (u >> 16) | 0x40 where v is NaN.
    mov(gtmp, reinterpret_cast<uintptr_t>(&kBf16Consts));
    const int o_one = static_cast<int>(offsetof(Bf16Consts, one)), o_q = static_cast<int>(offsetof(Bf16Consts, qbit));
    vpsrld(t0, v, 16);
    if (z_) {
        vpandd(t0, t0, ptr_b[gtmp + o_one]);
        vpaddd(t0, t0, ptr_b[gtmp]);
        vpaddd(t0, t0, v);
        vpsrld(t0, t0, 16);
        vcmpunordps(k3, v, v);
        vpsrld(t1, v, 16);
        vpord(t0 | k3, t1, ptr_b[gtmp + o_q]);
        if (w == vlen_)
            vpmovdw(ptr[dst], t0);
        else
            vpmovdw(ptr[dst] | k1, t0);
        return;
    }
    vpand(t0, t0, ptr[gtmp + o_one]);
    vpaddd(t0, t0, ptr[gtmp]);
    vpaddd(t0, t0, v);
    vpsrld(t0, t0, 16);
    vcmpunordps(t1, v, v);
    vpsrld(v, v, 16);
    vpor(v, v, ptr[gtmp + o_q]);
    vblendvps(t0, t0, v, t1);
    const Xmm x0(t0.getIdx()), x1(t1.getIdx());
    vextracti128(x1, Ymm(t0.getIdx()), 1);
    vpackusdw(x0, x0, x1);  // the 8 words in order (each dword is <= 0xffff)
    if (w == 8) {
        vmovdqu(ptr[dst], x0);
        return;
    }
    int off = 0, rem = w;
    if (rem >= 4) {
        vmovq(ptr[dst], x0);
        vpsrldq(x0, x0, 8);
        off = 8, rem -= 4;
    }
    if (rem >= 2) {
        vmovd(ptr[dst + off], x0);
        vpsrldq(x0, x0, 4);
        off += 4, rem -= 2;
    }
    if (rem) vpextrw(ptr[dst + off], x0, 0);
}

// Two strategies:
//   - no activation, or relu: per vector in its accumulator, alpha / beta / bias / act /
//     residual / store, with the registers beyond the tile as scratch (rows spilled to the stack
//     first if those are too few);
//   - exp-based activations (gelu, silu: long dependency chains): alpha / beta / bias in the
//     accumulators, then the whole tile to the stack, then groups of vectors reloaded and run
//     through the activation interleaved (JitActivation::apply_n), residual, store.
void JitGemmBase::emit_epilogue(const GemmEpi& e, int mr, int nv, int ncols, const EpiRegs& r, int spill_offset) {
    const int w_last = ncols - (nv - 1) * vlen_;  // 1..vlen
    const bool tail = w_last < vlen_;
    const bool act = e.act != Activation::none;
    const JitFn fn = act ? jit_fn(e.act) : JitFn::relu;
    const int act_scratch = act ? JitActivation::scratch_regs(fn) : 0;
    const bool grouped = act_scratch >= 2;
    const bool c16 = e.c == DType::bf16;
    const bool need_mask =
        !z_ && tail && ((e.beta != BetaKind::zero && !c16) || e.bias || e.residual == DType::f32 || e.partial);
    const int mask_idx = nvregs_ - 1;
    const int vbytes = vlen_ * 4;
    const Xmm vmask = V(mask_idx);
    auto width = [&](int j) { return j == nv - 1 ? w_last : vlen_; };

    // Row addressing: dynamic (c_row / res_row / p_row walk down by ldc / ldr / ldp) or static
    // (displacements).
    const bool dyn = r.ldc != nullptr;
    if (e.partial && !dyn) throw Error(Status::invalid_argument, "gemm epilogue: a partial sum needs dynamic rows");
    const int res_es = e.residual == DType::bf16 ? 2 : 4;
    const int c_es = c16 ? 2 : 4;
    int at_row = 0;  // the row c_row / res_row / p_row point at (dynamic mode)
    auto goto_row = [&](int i) {
        if (!dyn) return;
        for (; at_row < i; ++at_row) {
            add(r.c_row, *r.ldc);
            if (e.has_residual()) add(r.res_row, *r.ldr);
            if (e.partial) add(r.p_row, *r.ldp);
        }
    };
    auto c_exp = [&](int i, int j) -> RegExp {
        return dyn ? r.c_row + j * vlen_ * c_es : r.c_row + static_cast<int32_t>(i * r.ldc_imm + j * vlen_ * c_es);
    };
    auto c_at = [&](int i, int j) { return ptr[c_exp(i, j)]; };
    auto res_at = [&](int i, int j) -> RegExp {
        return dyn ? r.res_row + j * vlen_ * res_es : r.res_row + static_cast<int32_t>(i * r.ldr_imm + j * vlen_ * res_es);
    };
    auto finish = [&] {
        if (dyn) {
            goto_row(mr);
        } else {
            add(r.c_row, static_cast<int32_t>(mr * r.ldc_imm));
            if (e.has_residual()) add(r.res_row, static_cast<int32_t>(mr * r.ldr_imm));
        }
    };

    // alpha, beta C, bias into acc (C of row i at c_at(i, .)).
    auto pre = [&](const Xmm& acc, int i, int j, const Xmm& s0) {
        const int w = width(j);
        const bool full = w == vlen_;
        const Address c_addr = c_at(i, j);
        if (!e.alpha_one) {
            if (z_)
                vmulps(acc, acc, ptr_b[r.scal]);
            else
                vmulps(acc, acc, ptr[r.scal]);
        }
        if (e.partial) {
            if (full) {
                vaddps(acc, acc, ptr[r.p_row + j * vbytes]);
            } else {
                load_partial(s0, ptr[r.p_row + j * vbytes], w, vmask);
                vaddps(acc, acc, s0);
            }
        }
        if (e.beta != BetaKind::zero && c16) {
            load_bf16(s0, c_exp(i, j), w);
            if (e.beta == BetaKind::one)
                vaddps(acc, acc, s0);
            else if (z_)
                vfmadd231ps(acc, s0, ptr_b[r.scal + offsetof(GemmScalars, beta)]);
            else
                vfmadd231ps(acc, s0, ptr[r.scal + offsetof(GemmScalars, beta)]);
        } else if (e.beta != BetaKind::zero) {
            if (full && e.beta == BetaKind::one) {
                vaddps(acc, acc, c_addr);
            } else {
                if (full)
                    vmovups(s0, c_addr);
                else
                    load_partial(s0, c_addr, w, vmask);
                if (e.beta == BetaKind::one)
                    vaddps(acc, acc, s0);
                else if (z_)
                    vfmadd231ps(acc, s0, ptr_b[r.scal + offsetof(GemmScalars, beta)]);
                else
                    vfmadd231ps(acc, s0, ptr[r.scal + offsetof(GemmScalars, beta)]);
            }
        }
        if (e.bias) {
            if (full) {
                vaddps(acc, acc, ptr[r.bias + j * vbytes]);
            } else {
                load_partial(s0, ptr[r.bias + j * vbytes], w, vmask);
                vaddps(acc, acc, s0);
            }
        }
    };
    // residual, store (s1: a second scratch, for a bf16 C).
    auto post = [&](const Xmm& acc, int i, int j, const Xmm& s0, const Xmm& s1) {
        const int w = width(j);
        const bool full = w == vlen_;
        if (e.residual == DType::f32) {
            if (full) {
                vaddps(acc, acc, ptr[res_at(i, j)]);
            } else {
                load_partial(s0, ptr[res_at(i, j)], w, vmask);
                vaddps(acc, acc, s0);
            }
        } else if (e.residual == DType::bf16) {
            load_bf16(s0, res_at(i, j), w);
            vaddps(acc, acc, s0);
        }
        if (c16) {
            store_bf16(c_exp(i, j), acc, w, s0, s1, r.gtmp);
            return;
        }
        const Address c_addr = c_at(i, j);
        if (full)
            vmovups(c_addr, acc);
        else
            store_partial(c_addr, acc, w, s0);
    };
    auto stack_slot = [&](int i, int j) { return ptr[rsp + spill_offset + acc_idx(i, j, nv) * vbytes]; };
    const JitActivation injector(*this, isa(), k2);

    if (act) mov(r.tbl, reinterpret_cast<uintptr_t>(JitActivation::table()));
    if (need_mask) load_avx2_mask(vmask, w_last, r.gtmp);

    if (grouped) {
        // Scratch for pre(): any register beyond the tile (at least one: the tile leaves two).
        const Xmm s0 = V(need_mask ? mask_idx - 1 : mask_idx);
        // pre() reads C and P row by row
        const bool walk = dyn && mr > 1 && e.beta != BetaKind::zero;
        const bool walk_p = dyn && mr > 1 && e.partial;
        if (walk) mov(r.gtmp, r.c_row);
        for (int i = 0; i < mr; ++i) {
            for (int j = 0; j < nv; ++j) pre(V(acc_idx(i, j, nv)), i, j, s0);
            if (walk && i + 1 < mr) add(r.c_row, *r.ldc);
            if (walk_p && i + 1 < mr) add(r.p_row, *r.ldp);
        }
        if (walk) mov(r.c_row, r.gtmp);
        if (walk_p)
            for (int i = 0; i + 1 < mr; ++i) sub(r.p_row, *r.ldp);
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nv; ++j) vmovups(stack_slot(i, j), V(acc_idx(i, j, nv)));
        // Groups of `lanes` vectors, each with its own scratch registers.
        const int avail = nvregs_ - (need_mask ? 1 : 0);
        const int lanes = std::max(1, std::min(mr * nv, avail / (1 + act_scratch)));
        for (int v0 = 0; v0 < mr * nv; v0 += lanes) {
            const int n = std::min(lanes, mr * nv - v0);
            std::vector<Xmm> xs;
            std::vector<std::vector<Xmm>> ss;
            for (int l = 0; l < n; ++l) {
                const int base = l * (1 + act_scratch);
                xs.push_back(V(base));
                ss.emplace_back();
                for (int t = 1; t <= act_scratch; ++t) ss.back().push_back(V(base + t));
                vmovups(xs[l], stack_slot((v0 + l) / nv, (v0 + l) % nv));
            }
            injector.apply_n(fn, xs, ss, r.tbl);
            for (int l = 0; l < n; ++l) {
                const int i = (v0 + l) / nv, j = (v0 + l) % nv;
                goto_row(i);
                post(xs[l], i, j, ss[l][0], ss[l][1]);
            }
        }
        finish();
        return;
    }

    // In registers. Scratch: the registers beyond the tile (and the mask); rows are spilled from
    // the bottom while they are fewer than needed.
    const int need = std::max(act_scratch, c16 ? 2 : 1);
    const int pool = nvregs_ - mr * nv - (need_mask ? 1 : 0);
    int nspill = 0;
    while (pool + nspill * nv < need) ++nspill;
    if (nspill >= mr) throw Error(Status::invalid_argument, "gemm epilogue: not enough registers");
    const int first_spilled = mr - nspill;
    for (int i = first_spilled; i < mr; ++i)
        for (int j = 0; j < nv; ++j) vmovups(stack_slot(i, j), V(acc_idx(i, j, nv)));
    for (int i = 0; i < mr; ++i) {
        const bool spilled = i >= first_spilled;
        if (spilled)
            for (int j = 0; j < nv; ++j) vmovups(V(acc_idx(i, j, nv)), stack_slot(i, j));
        const int live_end = spilled ? i + 1 : first_spilled;
        std::vector<Xmm> scratch;
        for (int v = nvregs_ - 1; v >= 0; --v) {
            if (need_mask && v == mask_idx) continue;
            if (v >= acc_idx(i, 0, nv) && v < acc_idx(live_end, 0, nv)) continue;
            scratch.push_back(V(v));
        }
        goto_row(i);
        for (int j = 0; j < nv; ++j) {
            const Xmm acc = V(acc_idx(i, j, nv));
            pre(acc, i, j, scratch[0]);
            if (act) injector.apply(fn, acc, scratch, r.tbl);
            post(acc, i, j, scratch[0], scratch[1 % static_cast<int>(scratch.size())]);
        }
    }
    finish();
}

}  // namespace xk::detail
