// xbyak generator of quantize / dequantize row segments for AVX2 (ymm, 8 lanes) and AVX-512 (zmm,
// 16 lanes), specialised on (src / dst dtype, whether the parameters are per column vectors, the
// smoothing vector). One call = one row segment of n elements; the C++ side walks the rows and
// passes each row's scalar parameters (per tensor, per channel axis 0, dynamic per token) or the
// column vectors (per channel axis 1). Bit-exact with the reference (quant.hpp):
//   quantize:   t = (x [* smooth]) * inv (fp32 multiplies, inv = 1.0f / scale computed by the
//               caller), NaN lanes -> 0, clamp to [-512, 512], VROUNDPS / VRNDSCALEPS to nearest
//               even (immediate rounding: independent of MXCSR), VCVTTPS2DQ (exact) — AVX-512:
//               one VCVTPS2DQ with embedded {rn-sae} rounding instead —, + zp (int),
//               then saturate: AVX2 by the saturating packs (VPACKSSDW, VPACKUSWB / VPACKSSWB),
//               AVX-512 by VPMOVSDB (s8) / VPMAXSD 0 + VPMOVUSDB (u8). Clamping before rounding
//               gives the same integer (512 > 255 + 128 and rounding is monotonic).
//   dequantize: VPMOVZXBD / VPMOVSXBD, - zp (int, exact), VCVTDQ2PS (exact), * scale; bf16 output
//               through JitIo's integer rounding (to nearest even, as xk::bf16, denormals kept:
//               the generator never uses VCVTNEPS2BF16, which flushes them).
//   minmax:     per_token_dynamic's range: lane-wise min / max of the finite v = x [* smooth]
//               from 0 (0 in the range leaves quant_params_from_range unchanged; NaN / +-inf lanes
//               are left out: opmask on AVX-512, zeroed on AVX2), and the max of the magnitude bits
//               (>= 0x7f800000: some v is NaN or +-inf, for int8 Linear's check); the caller
//               reduces the lanes.
//   fused:      per_token_dynamic's pipeline: one loop quantizes row r (src, in L1 since its range
//               pass) with its parameters and takes the range of row r + 1 (src2, from DRAM) as
//               minmax does, so the DRAM stream never waits for the in-cache pass. AVX-512: that
//               range from the bits — bf16 x without smooth as 32 word lanes a vector (VPMAXSW over
//               the positives, VPMAXUW over the negatives' sign-magnitude bits), f32 (or smoothed) v
//               as 16 dword lanes (VPMAXSD / VPMAXUD, loads folded in) — where NaN / +-inf show as a
//               non-finite end (the caller re-ranges that row); rows found finite are quantized by
//               the fin variants (no NaN mask, no clamp: |x * inv| <= 256 by the row's scale).
// bf16 outputs: the integer rounding, or VCVTNEPS2BF16 (jit:avx512_bf16) for the rows whose scales
// are all normal (no denormal output can arise there, where the instruction would flush it).
// Tails (n % vlen): AVX-512 by opmasks (masked loads / VPMOVDB stores, nothing touched beyond
// element n-1); AVX2 by JitIo's runtime-count loads and byte copies through the red zone.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "common/streaming.hpp"
#include "common/cpu_vendor.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/quant/quant.hpp"
#include "xk/isa.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

struct QArgs {
    const void* src = nullptr;      // 0
    void* dst = nullptr;            // 8
    int64_t n = 0;                  // 16  elements, >= 1
    const float* vscale = nullptr;  // 24  per column: quantize 1/scale, dequantize scale (at c0)
    const int32_t* vzp = nullptr;   // 32  per column zero points (at c0)
    const float* smooth = nullptr;  // 40  (at c0)
    float sscale = 0.0f;            // 48  scalar: quantize 1/scale, dequantize scale
    int32_t szp = 0;                // 52  scalar zero point
    float* mm = nullptr;            // 56  minmax: 3 * vlen floats out (min, max, magnitude bits); fused: 2
    const void* src2 = nullptr;     // 64  fused: the row whose range is taken
    int64_t rows = 1;               // 72  per column vectors (multi_): rows of the call, >= 1
    int64_t lds = 0, ldd = 0;       // 80, 88  their strides, bytes
};
using QFn = void (*)(const QArgs*);

enum QConst : int { kQ512, kQm512, kQAbs, kQInf, kQNegInf, kQAbs16, kQInf16, kQNegInf16, kQPermD, kQPermQ, kQWidenW, kQCount };
struct alignas(64) QTable {
    uint32_t v[kQCount][16];
};
const QTable& qtable() {
    static const QTable t = [] {
        QTable t{};
        auto setf = [&](int i, float f) {
            uint32_t b;
            std::memcpy(&b, &f, 4);
            for (auto& e : t.v[i]) e = b;
        };
        setf(kQ512, 512.0f);
        setf(kQm512, -512.0f);
        for (auto& e : t.v[kQAbs]) e = 0x7fffffffu;
        for (auto& e : t.v[kQInf]) e = 0x7f800000u;
        for (auto& e : t.v[kQNegInf]) e = 0xff800000u;
        for (auto& e : t.v[kQAbs16]) e = 0x7fff7fffu;
        for (auto& e : t.v[kQInf16]) e = 0x7f807f80u;
        for (auto& e : t.v[kQNegInf16]) e = 0xff80ff80u;
        for (uint32_t j = 0; j < 16; ++j) t.v[kQWidenW][j] = j << 16;  // word 2j + 1 <- word j (load_f)
        for (uint32_t j = 0; j < 16; ++j) t.v[kQPermD][j] = 4 * (j % 4) + j / 4;  // pack_store's dwords
        const uint32_t pq[8] = {0, 2, 4, 6, 1, 3, 5, 7};                         // ... and qwords (unpk_)
        for (int j = 0; j < 8; ++j) t.v[kQPermQ][2 * j] = pq[j];
        return t;
    }();
    return t;
}

enum class Mode { quantize, dequantize, minmax, fused };

class JitQuant : public JitGenerator {
public:
    // nt: full vectors stored with streaming stores (quantize: AVX-512 only, 64-byte aligned rows;
    // dequantize: vector-aligned rows), then SFENCE.
    // cvt_bf16: bf16 stores by VCVTNEPS2BF16 (AVX512-BF16; the caller uses this variant only where
    // no output can be denormal: dequantize with every scale >= FLT_MIN).
    // fin: the rows' values are finite and |x * inv| <= 256 (per_token_dynamic's rows whose range
    // pass saw no NaN / inf: the scale comes from that range), so the main loop drops the NaN mask
    // and the clamp (fin() says whether the variant got it: AVX-512 with pack_store's VPADDSW).
    JitQuant(const QuantKernelDesc& kd, Isa isa, Mode mode, bool nt = false, bool cvt_bf16 = false, bool fin = false)
        : JitGenerator(isa), kd_(kd), mode_(mode), nt_(nt) {
        zmm_ = isa >= Isa::avx512;
        vl_ = zmm_ ? 16 : 8;
        // Isa::avx512 for the zmm JitIo: bf16 stores by the integer rounding (denormals kept).
        JitIo io(*this, zmm_ ? (cvt_bf16 ? Isa::avx512_bf16 : Isa::avx512) : Isa::avx2, tbl_, {V(14), V(15), k1, rax});
        io_ = &io;
        const bool quant = mode != Mode::dequantize;
        vec_ = kd.granularity == QuantGranularity::per_channel && kd.axis == 1 && mode != Mode::minmax;
        vec_zp_ = vec_ && !kd.symmetric;
        smooth_ = quant && kd.smooth;
        ft_ = quant ? kd.src_dtype : kd.dst_dtype;
        qt_ = quant ? kd.dst_dtype : kd.src_dtype;
        fs_ = dtype_size(ft_);
        // fused, AVX-512, bf16 x without smooth: the range pass on the bf16 bits as 32 int16 lanes
        // (range16), no widening.
        // (XK_QUANT_R16=0, read once: the widening range pass, for before / after in bench_quant)
        static const bool r16_on = [] {
            const char* e = std::getenv("XK_QUANT_R16");
            return !e || std::atoi(e) != 0;
        }();
        r16_ = r16_on && mode == Mode::fused && zmm_ && ft_ == DType::bf16 && !smooth_;
        // AVX-512 quantize / fused: the main loop's 64 results packed by VPACKSSDW + VPACKSSWB /
        // VPACKUSWB (saturating: the values are within int16, then s8 / u8) and one VPERMD / VPERMQ
        // into one 64-byte store (pack_store), instead of four VPMOV[U]SDB (two uops each) and 16-byte
        // stores. unpk_: bf16 x with scalar parameters and no smooth: 32 elements a load, widened
        // by VPUNPCKLWD / VPUNPCKHWD with zeros (no shift; element order {0-3, 8-11, ..} and
        // {4-7, 12-15, ..}, which VPACKSSDW puts back in order within each 128-bit lane).
        // (XK_QUANT_PACK=0, read once: the VPMOV[U]SDB stores, for before / after in bench_quant)
        static const bool pack_on = [] {
            const char* e = std::getenv("XK_QUANT_PACK");
            return !e || std::atoi(e) != 0;
        }();
        pack64_ = pack_on && zmm_ && (mode == Mode::quantize || mode == Mode::fused);
        unpk_ = pack64_ && ft_ == DType::bf16 && !vec_ && !smooth_;
        // pack64_ with one zero point a call: the main loop adds it to the packed words with
        // VPADDSW after the first (saturating) pack, 2 instructions per 64 results instead of 4
        // VPADDD, and needs no -512 clamp: VCVTPS2DQ of t < -512 gives an int32 <= -512 (or
        // INT_MIN below -2^31), which the packs saturate as the clamped value would.
        zp16_ = pack64_ && !vec_zp_;
        // fin: per 16 results VMULPS (f32 x: the load folded in) + VCVTPS2DQ instead of load,
        // VMULPS, VCMPPS, VMINPS, VCVTPS2DQ. (Zen 4, one core: a loop's rate from DRAM falls with
        // its instruction count per byte — the out-of-order window holds fewer of its loads — so
        // fewer instructions a 64-byte line is what moves these rows.)
        fin_ = fin && zp16_ && !vec_;
        // fused, AVX-512, f32 x (or bf16 with smooth): the range from the bits as signed / unsigned
        // int32 maxima (range32), two instructions a vector with the loads folded in.
        r32_ = mode == Mode::fused && zmm_ && !r16_;

        // Per column parameter vectors: one call runs `rows` rows, each 64-column step over all of
        // them (the parameters read once from L2, then from L1 for the other rows).
        multi_ = vec_ && (mode == Mode::quantize || mode == Mode::dequantize);
        preamble({rbx, r12, r13, r14, r15, rbp});
        mov(src_, ptr[abi_param1 + offsetof(QArgs, src)]);
        mov(dst_, ptr[abi_param1 + offsetof(QArgs, dst)]);
        mov(n_, ptr[abi_param1 + offsetof(QArgs, n)]);
        mov(vs_, ptr[abi_param1 + offsetof(QArgs, vscale)]);
        mov(vz_, ptr[abi_param1 + offsetof(QArgs, vzp)]);
        mov(sm_, ptr[abi_param1 + offsetof(QArgs, smooth)]);
        if (mode == Mode::fused) mov(src2_, ptr[abi_param1 + offsetof(QArgs, src2)]);
        mov(tbl_, reinterpret_cast<uintptr_t>(JitIo::table()));
        mov(ctb_, reinterpret_cast<uintptr_t>(&qtable()));
        if (mode == Mode::minmax || mode == Mode::fused) {
            for (int i = 0; i < (mode == Mode::minmax ? 3 : 2); ++i) vxorps(V(8 + i), V(8 + i), V(8 + i));
        }
        if (mode != Mode::minmax) {
            vbroadcastss(V(12), ptr[abi_param1 + offsetof(QArgs, sscale)]);
            vpbroadcastd(V(13), ptr[abi_param1 + offsetof(QArgs, szp)]);
        }
        if (zmm_ && (mode == Mode::quantize || mode == Mode::fused)) vpxord(Zmm(16), Zmm(16), Zmm(16));
        if (pack64_) vmovdqu32(Zmm(17), ptr[ctb_ + (unpk_ ? kQPermQ : kQPermD) * 64]);
        if (zp16_) vpbroadcastw(Zmm(18), ptr[abi_param1 + offsetof(QArgs, szp)]);
        wpk_ = zmm_ && ft_ == DType::bf16 && mode != Mode::dequantize;
        if (wpk_) {
            vmovdqu16(Zmm(19), ptr[ctb_ + kQWidenW * 64]);
            mov(eax, 0xAAAAAAAA);
            kmovd(k7, eax);
        }
        if (r16_) {
            mov(eax, 0xFFFF);
            kmovd(k4, eax);  // range16's 16-element steps: the low 16 word lanes
        }

        constexpr int kUnroll = 4;
        Label l4, l1, tail, done;
        L(l4);
        cmp(n_, kUnroll * vl_);
        jl(l1, T_NEAR);
        if (pf_dist() > 0) {  // software prefetch of the source stream, pf_dist() bytes ahead
            const int src_es = mode == Mode::dequantize ? 1 : fs_;
            // fused: the quantized row is in cache; the range pass's row streams from DRAM
            const Reg64& stream = mode == Mode::fused ? src2_ : src_;
            for (int o = 0; o < kUnroll * vl_ * src_es; o += 64) prefetcht0(ptr[stream + pf_dist() + o]);
        }
        rows([&] {
            for (int k = 0; k < kUnroll; ++k) one(k, k * vl_, false, k % 2 == 0 ? 2 * vl_ : 0, pack64_);
            if (pack64_) pack_store();
        });
        advance(kUnroll * vl_);
        sub(n_, kUnroll * vl_);
        jmp(l4, T_NEAR);
        L(l1);
        cmp(n_, vl_);
        jl(tail, T_NEAR);
        rows([&] { one(0, 0, false); });
        advance(vl_);
        sub(n_, vl_);
        jmp(l1, T_NEAR);
        L(tail);
        test(n_, n_);
        jz(done, T_NEAR);
        rows([&] { one(0, 0, true); });
        L(done);
        if (nt_) sfence();
        if (r16_) range16_finish();
        if (r32_) range32_finish();
        if (mode == Mode::minmax || mode == Mode::fused) {
            mov(rax, ptr[abi_param1 + offsetof(QArgs, mm)]);
            for (int i = 0; i < (mode == Mode::minmax ? 3 : 2); ++i) vmovups(ptr[rax + i * vl_ * 4], V(8 + i));
        }
        postamble();
        io_ = nullptr;
        fn = finalize<QFn>();
    }
    QFn fn = nullptr;
    bool fin() const { return fin_; }

private:
    Xmm V(int i) const { return zmm_ ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
    // Software prefetch distance of the source stream in the main loop, bytes: 4096 (one core of
    // the Sapphire Rapids dev host, quantize f32 -> u8 4096x4096 from DRAM: ~5 -> ~8.5 GB/s,
    // noisy shared host; 1024 / 2048 / 8192 measured between). XK_QUANT_PF=<bytes> overrides it
    // (0: none) for experiments, read once. AMD CPUs: none by default (Zen 4, one core, 4096 x 4096
    // from DRAM, % of copy without / with the 4 KiB prefetch, two runs: f32 -> u8 per tensor 80-90 /
    // 65-76, f32 -> s8 dynamic 60-62 / 44-47, bf16 -> u8 per tensor 91-93 / 77-78; a T0 prefetch
    // holds one of the core's few L1 miss buffers until its line arrives, as the attention family
    // found on the same host).
    static int pf_dist() {
        static const int d = [] {
            const char* e = std::getenv("XK_QUANT_PF");
            if (e && *e) return std::atoi(e);
            return cpu_is_amd() ? 0 : 4096;
        }();
        return d;
    }
    // The slot's registers: a (value), b (parameter scratch); V(8-10) the minmax accumulators
    // (fused: V(8-9), V(10-11) its value / scratch), V(12) / V(13) the scalar scale / zero point,
    // V(14-15) JitIo's scratch, zmm16 zero.
    // body once per row of the call (multi_: src_ / dst_ stepped by the strides, then restored).
    template <class F>
    void rows(F body) {
        if (!multi_) {
            body();
            return;
        }
        Label lr;
        mov(r14, src_);
        mov(r15, dst_);
        mov(rbp, ptr[abi_param1 + offsetof(QArgs, rows)]);
        L(lr);
        body();
        add(src_, ptr[abi_param1 + offsetof(QArgs, lds)]);
        add(dst_, ptr[abi_param1 + offsetof(QArgs, ldd)]);
        dec(rbp);
        jnz(lr, T_NEAR);
        mov(src_, r14);
        mov(dst_, r15);
    }
    Xmm A(int k) const { return V(2 * k); }
    Xmm B(int k) const { return V(2 * k + 1); }

    void advance(int elems) {
        add(src_, elems * (mode_ == Mode::dequantize ? 1 : fs_));
        if (mode_ == Mode::fused) add(src2_, elems * fs_);
        if (mode_ != Mode::minmax) add(dst_, elems * (mode_ == Mode::dequantize ? fs_ : 1));
        if (vec_) add(vs_, elems * 4);
        if (vec_zp_) add(vz_, elems * 4);
        if (smooth_) add(sm_, elems * 4);
    }

    // A runtime tail of n_ elements (1..vlen-1) or a full vector at element offset off.
    // bf16 on AVX-512 (wpk_): a 32-byte load and one VPERMW that puts word i in the upper half of
    // dword i, zeroing the lower (one instruction against VPMOVZXWD + VPSLLD).
    void load_f(const Xmm& v, const Reg64& base, int64_t off_bytes, DType t, bool tail) {
        if (tail) {
            io_->load_rt(v, base + off_bytes, t, n_);
        } else if (wpk_ && t == DType::bf16) {
            vmovdqu16(Ymm(v.getIdx()), ptr[base + off_bytes]);
            vpermw(Zmm(v.getIdx()) | k7 | T_z, Zmm(19), Zmm(v.getIdx()));
        } else {
            io_->load(v, base + off_bytes, t, vl_);
        }
    }

    // AVX2 only: copy n_ (< 8 here, < 32 allowed) bytes between memory and the red zone.
    void copy_bytes(const RegExp& to, const RegExp& from) {
        Label loop;
        xor_(rax, rax);
        L(loop);
        movzx(r12d, byte[from + rax]);
        mov(byte[to + rax], r12b);
        inc(rax);
        cmp(rax, n_);
        jl(loop);
    }

    // span: range16's elements from off in this step (32, 16 or 0: the main loop's odd steps, their
    // elements taken by the even step before); -1: one vector (vl_, or the tail's n_).
    // pack: the main loop's step of pack_store (the int32 results stay in A(k), stored by it).
    void one(int k, int off, bool tail, int span = -1, bool pack = false) {
        const Xmm a = A(k), b = B(k);
        if (mode_ == Mode::dequantize) {
            dequant_one(a, b, off, tail);
            return;
        }
        if (mode_ == Mode::fused) {
            if (r16_) range16(off, tail ? -1 : span < 0 ? vl_ : span);
            else if (r32_) range32(off, tail);
            else range_one(V(10), V(11), src2_, off, tail, false);
        }
        if (mode_ == Mode::minmax) {
            range_one(a, b, src_, off, tail, true);
            return;
        }
        if (pack && unpk_) {
            if (k % 2 == 0) {  // elements off .. off + 31: A(k), A(k + 1)
                const Zmm x(b.getIdx());
                vmovdqu16(x, ptr[src_ + off * 2]);
                vpunpckhwd(Zmm(A(k + 1).getIdx()), Zmm(16), x);
                vpunpcklwd(Zmm(a.getIdx()), Zmm(16), x);
            }
        } else if (pack && !vec_ && !smooth_ && ft_ == DType::f32) {
            vmulps(a, V(12), ptr[src_ + off * 4]);  // t = x * inv, the load folded in
        } else {
            load_v(a, b, src_, off, tail);
        }
        // t = v * inv
        if (pack && !vec_ && !smooth_ && ft_ == DType::f32) {
            // (done above)
        } else if (vec_) {
            if (tail) {
                io_->load_rt(b, vs_, DType::f32, n_);
                vmulps(a, a, b);
            } else {
                vmulps(a, a, ptr[vs_ + off * 4]);
            }
        } else {
            vmulps(a, a, V(12));
        }
        if (pack && fin_) {  // finite, |t| <= 256: round to nearest even, to int32 (pack_store saturates, + zp)
            vcvtps2dq(Zmm(a.getIdx()) | T_rn_sae, Zmm(a.getIdx()));
            return;
        }
        // NaN -> 0, clamp, round to nearest even, to int32
        if (zmm_) {
            vcmpps(k2, a, a, 7);  // ordered
            vminps(a | k2 | T_z, a, ptr[ctb_ + kQ512 * 64]);
        } else {
            vcmpps(b, a, a, 7);
            vandps(a, a, b);
            vminps(a, a, ptr[ctb_ + kQ512 * 64]);
        }
        if (!(pack && zp16_)) vmaxps(a, a, ptr[ctb_ + kQm512 * 64]);
        if (zmm_) {
            vcvtps2dq(Zmm(a.getIdx()) | T_rn_sae, Zmm(a.getIdx()));  // embedded round to nearest even: one uop
        } else {
            vroundps(a, a, 8);
            vcvttps2dq(a, a);
        }
        if (pack && zp16_) return;  // (pack_store: + zero point in 16 bits)
        if (vec_zp_) {
            if (tail) {
                io_->load_rt(b, vz_, DType::f32, n_);  // bit moves
                vpaddd(a, a, b);
            } else {
                vpaddd(a, a, ptr[vz_ + off * 4]);
            }
        } else {
            vpaddd(a, a, V(13));
        }
        if (pack) return;  // (pack_store)
        // saturate and store
        if (zmm_) {
            const Zmm z(a.getIdx());
            if (tail) io_->set_kmask_rt(n_);
            auto dst = tail ? ptr[dst_ + off] | k1 : ptr[dst_ + off];
            if (qt_ == DType::u8) vpmaxsd(z, z, Zmm(16));
            if (nt_ && !tail) {
                const Xmm x(a.getIdx());
                if (qt_ == DType::s8) vpmovsdb(x, z);
                else vpmovusdb(x, z);
                vmovntdq(ptr[dst_ + off], x);
            } else if (qt_ == DType::s8) {
                vpmovsdb(dst, z);
            } else {
                vpmovusdb(dst, z);
            }
        } else {
            const Xmm xa(a.getIdx()), xb(b.getIdx());
            vextracti128(xb, Ymm(a.getIdx()), 1);
            vpackssdw(xa, xa, xb);
            if (qt_ == DType::s8) vpacksswb(xa, xa, xa);
            else vpackuswb(xa, xa, xa);
            if (tail) {
                vmovq(ptr[rsp - 64], xa);
                copy_bytes(dst_, rsp - 64);
            } else {
                vmovq(ptr[dst_ + off], xa);
            }
        }
    }

    // v = x [* smooth] of element off from base into a (b: scratch).
    void load_v(const Xmm& a, const Xmm& b, const Reg64& base, int off, bool tail) {
        load_f(a, base, static_cast<int64_t>(off) * fs_, ft_, tail);
        if (smooth_) {
            if (tail) {
                io_->load_rt(b, sm_, DType::f32, n_);
                vmulps(a, a, b);
            } else {
                vmulps(a, a, ptr[sm_ + off * 4]);
            }
        }
    }

    // The range of the finite v into V(8) (min) / V(9) (max); bits: the magnitude bits' max into
    // V(10) as well. Tail lanes load as 0 (in the range already).
    void range_one(const Xmm& a, const Xmm& b, const Reg64& base, int off, bool tail, bool bits) {
        load_v(a, b, base, off, tail);
        vandps(b, a, ptr[ctb_ + kQAbs * 64]);
        if (bits) vpmaxsd(V(10), V(10), b);
        if (zmm_) {
            vcmpps(k3, b, ptr[ctb_ + kQInf * 64], 0x11);  // |v| < inf, ordered: finite
            vminps(V(8) | k3, V(8), a);
            vmaxps(V(9) | k3, V(9), a);
        } else {
            vcmpps(b, b, ptr[ctb_ + kQInf * 64], 0x11);
            vandps(a, a, b);  // non-finite lanes -> +0
            vminps(V(8), V(8), a);
            vmaxps(V(9), V(9), a);
        }
    }

    // range32 (fused, AVX-512, f32 x or smooth): the range of v from its bits as 16 int32 lanes:
    // V(9) = signed max from 0 (a positive v's bits order as its value; negatives never pass 0),
    // V(8) = unsigned max from 0 (a negative v's bits, >= 0x80000000, order as its magnitude and
    // pass every positive). NaN / +-inf order above every finite value of their sign, so they show
    // as a non-finite end (range32_finish), and the caller takes that row's range again with the
    // finite mask (minmax mode) and quantizes it with the full kernel. Tail lanes load as 0.
    void range32(int off, bool tail) {
        if (smooth_ || tail || ft_ != DType::f32) {
            load_v(V(10), V(11), src2_, off, tail);
            vpmaxsd(Zmm(9), Zmm(9), Zmm(10));
            vpmaxud(Zmm(8), Zmm(8), Zmm(10));
        } else {
            vpmaxsd(Zmm(9), Zmm(9), ptr[src2_ + off * 4]);
            vpmaxud(Zmm(8), Zmm(8), ptr[src2_ + off * 4]);
        }
    }
    // The int32 maxima back to floats: min in V(8) (a lane with a negative v's bits is that v; one
    // with a positive's stands for 0: VMINPS with +0 as the second operand, which also turns -0
    // into +0), max in V(9) (>= +0); a non-finite end seen: V(8) := NaN (the caller re-ranges).
    void range32_finish() {
        vpcmpd(k5, Zmm(9), ptr[ctb_ + kQInf * 64], 5);    // >= 0x7f800000, signed: +inf / NaN
        vpcmpud(k6, Zmm(8), ptr[ctb_ + kQNegInf * 64], 5);  // >= 0xff800000, unsigned: -inf / -NaN
        kord(k5, k5, k6);
        vpxord(Zmm(10), Zmm(10), Zmm(10));
        vminps(Zmm(8), Zmm(8), Zmm(10));
        Label finite;
        kortestw(k5, k5);
        jz(finite);
        vmovups(Zmm(8), ptr[ctb_ + kQAbs * 64]);  // (0x7fffffff: NaN)
        L(finite);
    }

    // The main loop's 64 int32 results in A(0..3) (elements in order, or unpk_'s order) saturated
    // to s8 / u8 and stored as one 64-byte vector at dst_.
    void pack_store() {
        const Zmm a0(A(0).getIdx()), a1(A(1).getIdx()), a2(A(2).getIdx()), a3(A(3).getIdx());
        vpackssdw(a0, a0, a1);  // lane i: words of a0 lane i, a1 lane i
        vpackssdw(a2, a2, a3);
        if (zp16_) {  // + zero point, saturating: r >= -512 exactly, or <= -512 saturated (no -512 clamp)
            vpaddsw(a0, a0, Zmm(18));
            vpaddsw(a2, a2, Zmm(18));
        }
        if (qt_ == DType::s8) vpacksswb(a0, a0, a2);
        else vpackuswb(a0, a0, a2);
        if (unpk_) vpermq(a0, Zmm(17), a0);  // qword j <- 2j (j < 4), 2(j - 4) + 1
        else vpermd(a0, Zmm(17), a0);        // dword j <- 4 (j % 4) + j / 4
        if (nt_) vmovntdq(ptr[dst_], a0);
        else vmovdqu8(ptr[dst_], a0);
    }

    // range16: the range of bf16 x from its bits, 32 word lanes a zmm: V(9) = signed word max
    // from 0 (a positive x's bits order as its value; negatives never pass 0), V(8) = unsigned word
    // max from 0 (a negative x's bits, >= 0x8000, order as its magnitude and pass every positive).
    // A non-finite x orders above every finite one of its sign (+inf / NaN bits >= 0x7f80, -inf /
    // -NaN >= 0xff80), so it shows as a non-finite end of the range, and the caller takes that
    // row's range again with the finite mask (two instructions per 32 elements instead of four).
    // span 32 / 16 elements at off, -1: the tail's n_ (< 16); masked-off lanes load as 0, in the
    // range already.
    void range16(int off, int span) {
        const Zmm v(10), t(11);
        const auto src = ptr[src2_ + off * 2];
        if (span == 0) return;
        if (span == 32) {
            vmovdqu16(v, src);
        } else if (span == 16) {
            vmovdqu16(v | k4 | T_z, src);
        } else {
            mov(rax, -1);
            bzhi(rax, rax, n_);
            kmovd(k5, eax);
            vmovdqu16(v | k5 | T_z, src);
        }
        (void)t;
        vpmaxsw(Zmm(9), Zmm(9), v);
        vpmaxuw(Zmm(8), Zmm(8), v);
    }
    // The word accumulators back to the fused mode's 16 float lanes (min in V(8), max in V(9)): the
    // 32 words widened to bf16 -> f32 in two halves; min: min of the halves and 0 (the lanes that
    // hold a positive x stand for 0), max: max of the halves (all >= 0).
    void range16_finish() {
        const Zmm lo(10), hi(11);
        // A non-finite x seen (signed max >= +inf's bits, or unsigned max >= -inf's): min := NaN
        // below, so the caller re-ranges the row (the widening and VMINPS could drop a NaN lane).
        vpcmpw(k5, Zmm(9), ptr[ctb_ + kQInf16 * 64], 5);      // >= 0x7f80, signed
        vpcmpuw(k6, Zmm(8), ptr[ctb_ + kQNegInf16 * 64], 5);  // >= 0xff80, unsigned
        kord(k5, k5, k6);
        for (int i = 0; i < 2; ++i) {
            const Zmm acc(8 + i);
            vextracti64x4(Ymm(10), acc, 1);
            vpmovzxwd(hi, Ymm(8 + i));
            vpmovzxwd(lo, Ymm(10));
            vpslld(hi, hi, 16);
            vpslld(lo, lo, 16);
            if (i == 0) {
                vminps(acc, hi, lo);
                vpxord(lo, lo, lo);
                vminps(acc, acc, lo);
            } else {
                vmaxps(acc, hi, lo);
            }
        }
        Label finite;
        kortestd(k5, k5);
        jz(finite);
        vmovups(Zmm(8), ptr[ctb_ + kQAbs * 64]);  // (0x7fffffff: NaN)
        L(finite);
    }

    void dequant_one(const Xmm& a, const Xmm& b, int off, bool tail) {
        const bool u = qt_ == DType::u8;
        if (zmm_) {
            if (tail) {
                io_->set_kmask_rt(n_);
                if (u) vpmovzxbd(a | k1 | T_z, ptr[src_ + off]);
                else vpmovsxbd(a | k1 | T_z, ptr[src_ + off]);
            } else {
                if (u) vpmovzxbd(a, ptr[src_ + off]);
                else vpmovsxbd(a, ptr[src_ + off]);
            }
        } else {
            if (tail) {
                mov(qword[rsp - 64], 0);
                copy_bytes(rsp - 64, src_);
                if (u) vpmovzxbd(a, ptr[rsp - 64]);
                else vpmovsxbd(a, ptr[rsp - 64]);
            } else {
                if (u) vpmovzxbd(a, ptr[src_ + off]);
                else vpmovsxbd(a, ptr[src_ + off]);
            }
        }
        if (vec_zp_) {
            if (tail) {
                io_->load_rt(b, vz_, DType::f32, n_);
                vpsubd(a, a, b);
            } else {
                vpsubd(a, a, ptr[vz_ + off * 4]);
            }
        } else {
            vpsubd(a, a, V(13));
        }
        vcvtdq2ps(a, a);
        if (vec_) {
            if (tail) {
                io_->load_rt(b, vs_, DType::f32, n_);
                vmulps(a, a, b);
            } else {
                vmulps(a, a, ptr[vs_ + off * 4]);
            }
        } else {
            vmulps(a, a, V(12));
        }
        if (tail) io_->store_rt(dst_ + off * fs_, a, ft_, n_);
        else io_->store(dst_ + off * fs_, a, ft_, vl_, nt_);
    }

    QuantKernelDesc kd_;
    Mode mode_;
    bool nt_ = false;
    bool multi_ = false, zp16_ = false, wpk_ = false, fin_ = false, r32_ = false;
    bool zmm_ = false, vec_ = false, vec_zp_ = false, smooth_ = false, r16_ = false, pack64_ = false, unpk_ = false;
    int vl_ = 8, fs_ = 4;
    DType ft_ = DType::f32, qt_ = DType::u8;
    const JitIo* io_ = nullptr;
    const Reg64 src_ = rsi, dst_ = rdx, n_ = rcx, vs_ = r8, vz_ = r9, tbl_ = r10, sm_ = r11, ctb_ = rbx, src2_ = r13;
};

// Rows of one kernel call with per column parameter vectors (per channel, axis 1; AMD CPUs): every
// 64-column step runs over these rows, so the step's parameters come from L2 once and from L1 for the other
// rows (one row a call read 16-32 KiB of them from L2 for every 16 KiB row of f32 x). Zen 4, one
// core, 4096 x 4096 from DRAM, % of copy (f32 -> u8 asym / f32 -> s8 / bf16 -> s8 / s8 -> f32 /
// s8 -> bf16): 1 row 42-45 / 51-57 / 55 / 66-81 / 63-66, 4 rows 60-66 / 68-69 / 58-64 / 85-95 /
// 74-81, 8 rows 66-69 / 75-80 / 62-70 / 89-97 / 83-90, 16 rows 63 / 71 / 57 / 100 / 80, 32 rows
// 42 / 48 / 35 / 75 / 52. On the device Xeon (48 KiB L1, 2 MiB L2; 2026-11-28 slot, the same
// binary, Copy% 8 rows / 1 row a call, 1 | 16 threads: f32 -> s8 84 / 93 | 74 / 70, s8 -> f32
// 126 / 120 | 62 / 76, bf16 -> s8 92 / 92 | 70 / 72, s8 -> bf16 105 / 100 | 54 / 79) no gain:
// one row a call there, as before. XK_QUANT_ROWS (read once) overrides, for experiments.
int64_t col_vec_rows() {
    static const int64_t v = [] {
        const char* e = std::getenv("XK_QUANT_ROWS");
        if (e && *e) return std::max<int64_t>(1, std::atoll(e));
        return cpu_is_amd() ? int64_t{8} : int64_t{1};
    }();
    return v;
}

class JitQuantKernel final : public QuantKernel {
public:
    JitQuantKernel(const QuantKernelDesc& kd, Isa isa) : kd_(kd) {
        quant_ = kd.dst_dtype == DType::u8 || kd.dst_dtype == DType::s8;
        vl_ = isa >= Isa::avx512 ? 16 : 8;
        gen_ = std::make_unique<JitQuant>(kd, isa, quant_ ? Mode::quantize : Mode::dequantize);
        if (!quant_ || isa >= Isa::avx512) {
            gen_nt_ = std::make_unique<JitQuant>(kd, isa, quant_ ? Mode::quantize : Mode::dequantize, true);
            nt_align_ = quant_ ? 64 : vl_ * dtype_size(kd.dst_dtype);  // (quantize: pack_store's 64-byte stores)
        }
        if (kd.granularity == QuantGranularity::per_token_dynamic) {
            mm_gen_ = std::make_unique<JitQuant>(kd, isa, Mode::minmax);
            fused_gen_ = std::make_unique<JitQuant>(kd, isa, Mode::fused);
            if (gen_nt_) fused_gen_nt_ = std::make_unique<JitQuant>(kd, isa, Mode::fused, true);
            // the rows found finite by their range pass (AVX-512): no NaN mask, no clamp
            auto fin = [&](Mode m, bool nt) {
                auto g = std::make_unique<JitQuant>(kd, isa, m, nt, false, true);
                return g->fin() ? std::move(g) : nullptr;
            };
            fin_gen_ = fin(Mode::quantize, false);
            fin_fused_ = fin(Mode::fused, false);
            if (gen_nt_) {
                fin_gen_nt_ = fin(Mode::quantize, true);
                fin_fused_nt_ = fin(Mode::fused, true);
            }
        }
        if (!quant_ && kd.dst_dtype == DType::bf16 && isa >= Isa::avx512_bf16) {
            cvt_gen_ = std::make_unique<JitQuant>(kd, isa, Mode::dequantize, false, true);
            cvt_gen_nt_ = std::make_unique<JitQuant>(kd, isa, Mode::dequantize, true, true);
        }
    }

    void run(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
             const QuantPrep& p) const override {
        const int ss = dtype_size(d.src_dtype), ds = dtype_size(d.dst_dtype);
        const bool col_vec = d.granularity == QuantGranularity::per_channel && d.axis == 1;
        const DType qtype = quant_ ? d.dst_dtype : d.src_dtype;
        QArgs q;
        q.n = c1 - c0;
        if (q.n <= 0) return;
        // Streaming stores for outputs that do not stay in the LLC, where every row is aligned.
        // Quantize: judged by the bytes read + written (x streaming through the LLC evicts the
        // output written before it anyway: 4096 x 4096 f32 -> int8 is 16 MiB of output but 80 of
        // traffic, and regular stores add a read for ownership of every output line).
        const bool nt = gen_nt_ && use_nt_stores(d.rows * d.cols * (quant_ ? ss + ds : ds)) && rows_aligned(a.dst, d.ld_dst, ds, nt_align_) &&
                        (c0 * ds) % nt_align_ == 0;
        const QFn fn = nt ? gen_nt_->fn : gen_->fn;
        // Dequantize to bf16 with every scale of the row normal: |float(q - zp) * scale| is 0 or
        // >= FLT_MIN, so VCVTNEPS2BF16 rounds it as the integer emulation does (bit for bit).
        const QFn cvt_fn = cvt_gen_ ? (nt ? cvt_gen_nt_->fn : cvt_gen_->fn) : nullptr;
        auto normal = [](float s) { return s >= std::numeric_limits<float>::min(); };
        bool all_normal = cvt_fn != nullptr;
        if (cvt_fn && col_vec)
            for (int64_t c = c0; c < c1 && all_normal; ++c) all_normal = normal(a.scales[c]);
        if (cvt_fn && d.granularity == QuantGranularity::per_tensor) all_normal = normal(a.scales[0]);
        if (d.smooth) q.smooth = a.smooth + c0;
        if (col_vec) {
            q.vscale = quant_ ? p.inv + c0 : a.scales + c0;
            if (d.symmetric) q.szp = quant_symmetric_zero_point(qtype);
            else q.vzp = a.zero_points + c0;
        }
        if (col_vec) {  // rows a call (the kernel's multi_ mode)
            q.lds = d.ld_src * ss;
            q.ldd = d.ld_dst * ds;
            const int64_t R = col_vec_rows();
            for (int64_t r = r0; r < r1; r += R) {
                q.rows = std::min(R, r1 - r);
                q.src = static_cast<const char*>(a.src) + (r * d.ld_src + c0) * ss;
                q.dst = static_cast<char*>(a.dst) + (r * d.ld_dst + c0) * ds;
                (all_normal ? cvt_fn : fn)(&q);
            }
            return;
        }
        for (int64_t r = r0; r < r1; ++r) {
            if (!col_vec) {
                const int64_t c = d.granularity == QuantGranularity::per_tensor ? 0 : r;
                if (quant_) {
                    q.sscale = p.inv[c];
                    q.szp = p.zp[c];
                } else {
                    q.sscale = a.scales[c];
                    q.szp = d.symmetric ? quant_symmetric_zero_point(qtype) : a.zero_points[c];
                }
            }
            q.src = static_cast<const char*>(a.src) + (r * d.ld_src + c0) * ss;
            q.dst = static_cast<char*>(a.dst) + (r * d.ld_dst + c0) * ds;
            const bool row_normal = d.granularity == QuantGranularity::per_channel && d.axis == 0 ? cvt_fn && normal(a.scales[r]) : all_normal;
            (row_normal ? cvt_fn : fn)(&q);
        }
    }

    // Rows [r0, r1) in one read of x: the range of row r0, then per row one fused call that
    // quantizes row r (in L1 / L2 since its range pass) and takes the range of row r + 1. A row
    // whose range pass saw only finite values is quantized by the fin variants (no NaN mask, no
    // clamp: its |x * inv| <= 256 by its scale).
    void run_dynamic(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, float* inv, int32_t* zp) const override {
        if (r0 >= r1 || d.cols <= 0) return;
        const int ss = dtype_size(d.src_dtype);
        const bool nt = fused_gen_nt_ && use_nt_stores(d.rows * d.cols * (ss + 1)) && rows_aligned(a.dst, d.ld_dst, 1, nt_align_);
        const QFn fused = nt ? fused_gen_nt_->fn : fused_gen_->fn;
        const QFn last = nt ? gen_nt_->fn : gen_->fn;
        const JitQuant* ff = nt ? fin_fused_nt_.get() : fin_fused_.get();
        const JitQuant* fl = nt ? fin_gen_nt_.get() : fin_gen_.get();
        const QFn fused_fin = ff ? ff->fn : fused, last_fin = fl ? fl->fn : last;
        alignas(64) float acc[48];
        auto row = [&](int64_t r) { return static_cast<const char*>(a.src) + r * d.ld_src * ss; };
        auto reduce = [&](float& lo, float& hi) {
            lo = acc[0], hi = acc[vl_];
            for (int i = 1; i < vl_; ++i) {
                lo = std::min(lo, acc[i]);
                hi = std::max(hi, acc[vl_ + i]);
            }
        };
        auto minmax_row = [&](int64_t r, QArgs& q) {  // minmax mode: the finite values' range; false: some v is not finite
            QArgs m;
            m.n = d.cols;
            m.smooth = q.smooth;
            m.mm = acc;
            m.src = row(r);
            mm_gen_->fn(&m);
            uint32_t bits = 0;
            for (int i = 0; i < vl_; ++i) {
                uint32_t b;
                std::memcpy(&b, &acc[2 * vl_ + i], 4);
                bits = std::max(bits, b);
            }
            return bits < 0x7f800000u;
        };
        // Row r's parameters from acc (its range); returns whether the row is finite.
        auto params = [&](int64_t r, QArgs& q, bool finite) {
            float lo, hi;
            reduce(lo, hi);
            if (!std::isfinite(lo) || !std::isfinite(hi)) {  // (a fused range saw NaN / +-inf: the finite one)
                finite = minmax_row(r, q);
                reduce(lo, hi);
            }
            const QuantParams p = dynamic_row_params(d, a, r, lo, hi, inv, zp);
            q.sscale = 1.0f / p.scale;
            q.szp = p.zero_point;
            return finite;
        };
        QArgs q;
        q.n = d.cols;
        q.smooth = d.smooth ? a.smooth : nullptr;
        q.mm = acc;
        bool fin = minmax_row(r0, q);
        fin = params(r0, q, fin);
        for (int64_t r = r0; r < r1; ++r) {
            q.src = row(r);
            q.dst = static_cast<char*>(a.dst) + r * d.ld_dst;
            if (r + 1 < r1) {
                q.src2 = row(r + 1);
                (fin ? fused_fin : fused)(&q);
                // (fused ranges that cannot see NaN — AVX2 zeroes non-finite lanes — have no fin variant)
                fin = params(r + 1, q, true);
            } else {
                (fin ? last_fin : last)(&q);
            }
        }
    }

    void minmax(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, float* mn, float* mx,
                uint8_t* finite) const override {
        if (!mm_gen_) {
            QuantKernel::minmax(d, a, r0, r1, mn, mx, finite);
            return;
        }
        alignas(64) float acc[48];
        QArgs q;
        q.n = d.cols;
        q.smooth = d.smooth ? a.smooth : nullptr;
        q.mm = acc;
        const int ss = dtype_size(d.src_dtype);
        for (int64_t r = r0; r < r1; ++r) {
            q.src = static_cast<const char*>(a.src) + r * d.ld_src * ss;
            mm_gen_->fn(&q);
            float lo = acc[0], hi = acc[vl_];
            uint32_t bits = 0;
            for (int i = 0; i < vl_; ++i) {
                lo = std::min(lo, acc[i]);
                hi = std::max(hi, acc[vl_ + i]);
                uint32_t b;
                std::memcpy(&b, &acc[2 * vl_ + i], 4);
                bits = std::max(bits, b);
            }
            mn[r] = lo;
            mx[r] = hi;
            finite[r] = bits < 0x7f800000u;
        }
    }

private:
    QuantKernelDesc kd_;
    bool quant_ = true;
    int vl_ = 8;
    std::unique_ptr<JitQuant> gen_, gen_nt_, mm_gen_, fused_gen_, fused_gen_nt_, cvt_gen_, cvt_gen_nt_;
    std::unique_ptr<JitQuant> fin_gen_, fin_gen_nt_, fin_fused_, fin_fused_nt_;  // (null: none)
    int nt_align_ = 64;
};

}  // namespace

std::shared_ptr<const QuantKernel> create_jit_quant(const QuantKernelDesc& kd, Isa isa) {
    return std::make_shared<JitQuantKernel>(kd, isa);
}

}  // namespace xk::detail
