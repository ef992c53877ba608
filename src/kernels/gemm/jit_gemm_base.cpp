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
    return k;
}

GemmEpi gemm_epi(const GemmSpec& s) {
    GemmEpi e;
    e.alpha_one = s.alpha_one;
    e.beta = s.beta;
    e.bias = s.epilogue.bias;
    e.act = s.epilogue.act;
    e.residual = s.epilogue.residual ? s.residual_type : DType::s32;
    return e;
}

namespace {
// Lane masks for AVX2 partial loads: 8 x -1 then 8 x 0; the mask of w lanes starts at 8 - w.
alignas(64) const int32_t kAvx2Masks[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
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
    const bool need_mask = !z_ && tail && (e.beta != BetaKind::zero || e.bias || e.residual == DType::f32);
    const int mask_idx = nvregs_ - 1;
    const int vbytes = vlen_ * 4;
    const Xmm vmask = V(mask_idx);
    auto width = [&](int j) { return j == nv - 1 ? w_last : vlen_; };

    // Row addressing: dynamic (c_row / res_row walk down by ldc / ldr) or static (displacements).
    const bool dyn = r.ldc != nullptr;
    const int res_es = e.residual == DType::bf16 ? 2 : 4;
    int at_row = 0;  // the row c_row / res_row point at (dynamic mode)
    auto goto_row = [&](int i) {
        if (!dyn) return;
        for (; at_row < i; ++at_row) {
            add(r.c_row, *r.ldc);
            if (e.has_residual()) add(r.res_row, *r.ldr);
        }
    };
    auto c_at = [&](int i, int j) {
        return dyn ? ptr[r.c_row + j * vbytes] : ptr[r.c_row + static_cast<int32_t>(i * r.ldc_imm + j * vbytes)];
    };
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
        if (e.beta != BetaKind::zero) {
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
    // residual, store.
    auto post = [&](const Xmm& acc, int i, int j, const Xmm& s0) {
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
        const bool walk = dyn && mr > 1 && e.beta != BetaKind::zero;  // pre() reads C row by row
        if (walk) mov(r.gtmp, r.c_row);
        for (int i = 0; i < mr; ++i) {
            for (int j = 0; j < nv; ++j) pre(V(acc_idx(i, j, nv)), i, j, s0);
            if (walk && i + 1 < mr) add(r.c_row, *r.ldc);
        }
        if (walk) mov(r.c_row, r.gtmp);
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
                post(xs[l], i, j, ss[l][0]);
            }
        }
        finish();
        return;
    }

    // In registers. Scratch: the registers beyond the tile (and the mask); rows are spilled from
    // the bottom while they are fewer than needed.
    const int need = std::max(act_scratch, 1);
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
            post(acc, i, j, scratch[0]);
        }
    }
    finish();
}

}  // namespace xk::detail
