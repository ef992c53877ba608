// WOQ on AMX (entry amx:woq:dequant_gemm): bf16 X, M > 16, and decode from M =
// woq_amx_decode_min_m() (12) to 16. One call of the AMX bf16 GEMM
// kernel (jit_gemm_amx.cpp) over the whole N with the caller's epilogue; its lazily packed B is
// produced by woq_amx_pack_block instead of packed from a bf16 copy: the tile layout's 32-column
// block nb is our blocks 2nb and 2nb + 1 (16 channels each), k step kb's tile t row p = the k-pair
// (2p, 2p + 1) of 16 channels as bf16 pairs in dwords — exactly one u4 row of our block (16 bytes:
// the pair's nibbles), or two s8 rows. Decode M (one row block) with groups of >= 64 or per channel:
// the integer weight itself (exact in bf16: s8 q, u4 q - 8 without zero points, else q), windows of
// one group, each window's sums scaled by woq_amx_acc (GemmCall::b_acc_fn). Else each pair is
// widened, fma(q, scale, offset) (the header's weight), rounded to bf16 by VCVTNE2PS2BF16 (nearest
// even, as the vector prefill's bf16 panel; a denormal weight becomes a zero of its sign, as the
// tiles read it anyway) and interleaved by VPERMW (AVX512-BF16: every AMX CPU has it).
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/woq/woq.hpp"
#include "xk/isa.hpp"

#define XK_AMXW_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16")))

namespace xk::detail {

namespace {
constexpr int64_t kStep = 2048;  // bytes of one k step of a packed block (two 1 KiB tiles)
}  // namespace

XK_AMXW_BF16_TARGET void woq_amx_pack_block(const void* ctxp, int64_t nb, int64_t kb0, int64_t kb1, void* packed) {
    const auto& ctx = *static_cast<const WoqAmxCtx*>(ctxp);
    const WoqPacked& w = *ctx.w;
    const int64_t K = w.K;
    auto* out = static_cast<uint8_t*>(packed);  // step kb at out + (kb - kb0) * kStep
    const bool u4 = w.type == WoqWeightType::u4;
    alignas(64) static constexpr uint16_t kPairIdx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                          8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i pair_idx = _mm512_load_si512(kPairIdx);
    const __m512 nib = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    // Software prefetch of q 4 KiB ahead in the block's stream (u4 16 k steps, s8 8; XK_WOQ_AMX_PF,
    // read once, sets the k steps, 0 = none): the decode ring visits each block a window at a time,
    // too briefly for the hardware prefetcher. Device Xeon, M = 16, 4096 x 4096 from DRAM, 1 thread
    // (processes of three runs): s8 3.40 ms without, 2.48 / 3.63 at 2 KiB, 2.66 / 2.58 / 2.56 at
    // 4 KiB; u4 g128 2.47 ms without, 2.53 / 1.72 at 1 KiB, 2.51 at 2 KiB, 1.64 / 1.82 / 1.59 at 4 KiB.
    static const int64_t pf_env = [] {
        const char* e = std::getenv("XK_WOQ_AMX_PF");
        return static_cast<int64_t>(e && *e ? std::atol(e) : -1);
    }();
    const int64_t pf = pf_env >= 0 ? pf_env : (u4 ? 16 : 8);
    for (int t = 0; t < 2; ++t) {
        const int64_t b = 2 * nb + t;
        if (b >= w.nblk) {  // past N: zeros
            for (int64_t kb = kb0; kb < kb1; ++kb) std::memset(out + (kb - kb0) * kStep + t * 1024, 0, 1024);
            continue;
        }
        const uint8_t* q = w.qb(b);
        const float* sc = w.sb(b);
        const float* of = w.ob(b);
        // q of step kb + pf of this block (u4 256 bytes a step, s8 512), for a whole step kb (past
        // the block's end: harmless)
        auto prefetch_ahead = [&](int64_t kb) {
            constexpr int64_t kU4Step = 256, kS8Step = 512;
            const int64_t sb = u4 ? kU4Step : kS8Step;
            if (pf <= 0 || kb * 32 + 32 > K) return;
            for (int64_t l = 0; l < sb; l += 64) _mm_prefetch(reinterpret_cast<const char*>(q + (kb + pf) * sb + l), _MM_HINT_T0);
        };
        if (ctx.raw && !u4) {  // s8, bf16(q): exact (|q| <= 128 has at most 8 significant bits)
            alignas(64) static constexpr uint16_t kHiIdx[32] = {1,  33, 3,  35, 5,  37, 7,  39, 9,  41, 11, 43, 13, 45, 15, 47,
                                                                17, 49, 19, 51, 21, 53, 23, 55, 25, 57, 27, 59, 29, 61, 31, 63};
            const __m512i hi_idx = _mm512_load_si512(kHiIdx);
            for (int64_t kb = kb0; kb < kb1; ++kb) {
                uint8_t* dst = out + (kb - kb0) * kStep + t * 1024;
                prefetch_ahead(kb);
                for (int p = 0; p < 16; ++p) {
                    const int64_t k = kb * 32 + 2 * p;
                    __m512 lo = _mm512_setzero_ps(), hi = lo;
                    if (k < K) lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k * 16))));
                    if (k + 1 < K) hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (k + 1) * 16))));
                    // word 2c = the high half of lo[c] (bf16(q[k]) exactly), 2c + 1 = that of hi[c]
                    _mm512_storeu_si512(dst + p * 64, _mm512_permutex2var_epi16(_mm512_castps_si512(lo), hi_idx, _mm512_castps_si512(hi)));
                }
            }
            continue;
        }
        if (ctx.raw) {  // u4: bf16(q - 8) (sym8) or bf16(q), exact, by one VPERMW from a table
            alignas(64) uint16_t tab[32];
            for (int i = 0; i < 32; ++i) {
                const float v = static_cast<float>((i & 15) - (w.sym8 ? 8 : 0));
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                tab[i] = static_cast<uint16_t>(bits >> 16);  // (small integers: exact)
            }
            const __m512i table = _mm512_load_si512(tab), mask = _mm512_set1_epi32(0x000F000F);
            const int64_t valid = std::min<int64_t>(16, w.N - b * 16);  // (padding channels: zeros, as the packer's)
            const __mmask32 keep = valid >= 16 ? ~__mmask32{0} : static_cast<__mmask32>((uint32_t{1} << (2 * valid)) - 1);
            for (int64_t kb = kb0; kb < kb1; ++kb) {
                uint8_t* dst = out + (kb - kb0) * kStep + t * 1024;
                prefetch_ahead(kb);
                for (int p = 0; p < 16; ++p) {
                    if (kb * 32 + 2 * p >= K) {  // (u4: K even, so a pair is whole or past K)
                        _mm512_storeu_si512(dst + p * 64, _mm512_setzero_si512());
                        continue;
                    }
                    // dword c = byte c: its low nibble to word 2c, its high nibble to word 2c + 1
                    const __m512i z = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (kb * 16 + p) * 16)));
                    const __m512i nibs = _mm512_ternarylogic_epi32(z, _mm512_slli_epi32(z, 12), mask, 0xA8);  // (A | B) & C
                    _mm512_storeu_si512(dst + p * 64, _mm512_maskz_permutexvar_epi16(keep, nibs, table));
                }
            }
            continue;
        }
        for (int64_t kb = kb0; kb < kb1; ++kb) {
            uint8_t* dst = out + (kb - kb0) * kStep + t * 1024;
            const int64_t k0 = kb * 32;
            if (k0 + 32 <= K) {
                // A full step: one group (group sizes are multiples of 32, or K), no K edge.
                prefetch_ahead(kb);
                const int64_t g = k0 / w.gs;
                const __m512 s = _mm512_loadu_ps(sc + g * 16);
                const __m512 o = of ? _mm512_loadu_ps(of + g * 16) : _mm512_setzero_ps();
                if (u4) {
                    const uint8_t* qs = q + (k0 / 2) * 16;
                    for (int p = 0; p < 16; ++p) {
                        const __m512i bb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + p * 16)));
                        const __m512 lo = _mm512_permutexvar_ps(bb, nib);  // (VPERMPS reads the index's low 4 bits)
                        const __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(bb, 4), nib);
                        const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_fmadd_ps(hi, s, o), _mm512_fmadd_ps(lo, s, o)));
                        _mm512_storeu_si512(dst + p * 64, _mm512_permutexvar_epi16(pair_idx, v));
                    }
                } else {
                    const uint8_t* qs = q + k0 * 16;
                    for (int p = 0; p < 16; ++p) {
                        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + p * 32))));
                        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + p * 32 + 16))));
                        const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_fmadd_ps(hi, s, o), _mm512_fmadd_ps(lo, s, o)));
                        _mm512_storeu_si512(dst + p * 64, _mm512_permutexvar_epi16(pair_idx, v));
                    }
                }
                continue;
            }
            for (int p = 0; p < 16; ++p) {  // the last, partial step
                const int64_t k = k0 + 2 * p;
                if (k >= K) {
                    _mm512_storeu_si512(dst + p * 64, _mm512_setzero_si512());
                    continue;
                }
                const int64_t g = k / w.gs;  // (k + 1 is in the same group: group sizes are even or K)
                const __m512 s = _mm512_loadu_ps(sc + g * 16);
                const __m512 o = of ? _mm512_loadu_ps(of + g * 16) : _mm512_setzero_ps();
                __m512 lo, hi;
                if (u4) {
                    const __m512i bb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (k / 2) * 16)));
                    lo = _mm512_permutexvar_ps(bb, nib);
                    hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(bb, 4));
                } else {
                    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + k * 16))));
                    hi = k + 1 < K ? _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (k + 1) * 16))))
                                   : _mm512_setzero_ps();
                }
                const __m512 wl = _mm512_fmadd_ps(lo, s, o);
                __m512 wh = _mm512_fmadd_ps(hi, s, o);
                if (!u4 && k + 1 >= K) wh = _mm512_setzero_ps();  // (zero past K, not the offset)
                // words 0-15 = bf16(wl), 16-31 = bf16(wh), then interleaved into the channels' pairs
                const __m512i v = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(wh, wl));
                _mm512_storeu_si512(dst + p * 64, _mm512_permutexvar_epi16(pair_idx, v));
            }
        }
    }
}

// acc (+)= win * scale[n, g] (+ xsum[m, g] * offset[n, g] once per group): a window of raw sums
// (k steps [kb0, kb1), inside one group) of column block nb, rows 128 bytes apart.
XK_AMXW_BF16_TARGET void woq_amx_acc(const void* ctxp, int64_t nb, int64_t kb0, int64_t /*kb1*/, int64_t rows, const float* win,
                                     float* acc) {
    const auto& ctx = *static_cast<const WoqAmxCtx*>(ctxp);
    const WoqPacked& w = *ctx.w;
    const int64_t k0 = kb0 * 32, g = k0 / w.gs;
    const bool first = kb0 == 0, group_start = k0 % w.gs == 0;
    const int64_t m_end = std::min<int64_t>(rows, ctx.m);
    for (int t = 0; t < 2; ++t) {
        const int64_t b = 2 * nb + t;
        if (b >= w.nblk) continue;  // (past N: never stored)
        const __m512 s = _mm512_loadu_ps(w.sb(b) + g * 16);
        const bool off = ctx.xsum && group_start;
        const __m512 o = off ? _mm512_loadu_ps(w.ob(b) + g * 16) : _mm512_setzero_ps();
        for (int64_t m = 0; m < m_end; ++m) {
            const __m512 x = _mm512_loadu_ps(win + m * 32 + t * 16);
            __m512 a = first ? _mm512_mul_ps(x, s) : _mm512_fmadd_ps(x, s, _mm512_loadu_ps(acc + m * 32 + t * 16));
            if (off) a = _mm512_fmadd_ps(_mm512_set1_ps(ctx.xsum[m * w.G + g]), o, a);
            _mm512_storeu_ps(acc + m * 32 + t * 16, a);
        }
    }
}

namespace {

GemmDesc gemm_desc(const WoqSpec& s) {
    GemmDesc gd;
    gd.M = s.M, gd.N = s.N, gd.K = s.K;
    gd.lda = s.lda, gd.ldb = s.N, gd.ldc = s.ldc;
    gd.a_type = gd.b_type = DType::bf16;
    gd.c_type = s.c_type;
    gd.alpha = s.alpha_one ? 1.0f : 2.0f;  // (the class only: the values come with each call)
    gd.beta = s.beta == BetaKind::zero ? 0.0f : s.beta == BetaKind::one ? 1.0f : 0.5f;
    gd.epilogue = s.epilogue;
    gd.residual_type = s.residual_type;
    gd.ld_residual = s.ld_residual;
    return gd;
}

class WoqAmxPrefill final : public WoqKernel {
public:
    explicit WoqAmxPrefill(const WoqSpec& s) : s_(s) {
        gemm_ = create_gemm_amx_bf16(gemm_check_desc("xk::WoqPlan", gemm_desc(s)));
    }
    void run(const WoqCall& c) const override {
        WoqAmxCtx ctx;
        ctx.w = c.w;
        ctx.nkb = (s_.K + 31) / 32;
        GemmCall call;
        call.args.A = c.args.A;
        call.args.C = c.args.C;
        call.args.bias = c.args.bias;
        call.args.residual = c.args.residual;
        call.alpha = c.alpha, call.beta = c.beta;
        call.b_block_fn = &woq_amx_pack_block;
        call.b_block_ctx = &ctx;
        // Decode M (one row block), groups of >= 64 or per channel: the tiles multiply the integer
        // weights themselves (exact in bf16), windows of one group (8 k steps per channel), each
        // window's sums scaled by its group's scales (woq_amx_acc) — the producer only widens and
        // interleaves, no bf16 rounding of the weights.
        const WoqPacked& w = *c.w;
        thread_local std::vector<float> xsum;
        if (woq_amx_raw_on() && s_.M <= 32 && (w.G == 1 || w.gs >= 64)) {
            ctx.raw = true;
            ctx.m = s_.M;
            call.b_acc_fn = &woq_amx_acc;
            call.b_window = w.G == 1 ? 8 : w.gs / 32;
            if (w.offsets && !(w.type == WoqWeightType::u4 && w.sym8)) {  // the offsets' term: sum_k x per group
                xsum.assign(static_cast<size_t>(s_.M * w.G), 0.0f);
                const auto* X = static_cast<const bf16*>(c.args.A);
                for (int64_t m = 0; m < s_.M; ++m)
                    for (int64_t g = 0; g < w.G; ++g) {
                        double t = 0;
                        for (int64_t k = g * w.gs; k < std::min(s_.K, (g + 1) * w.gs); ++k) t += X[m * s_.lda + k].to_float();
                        xsum[m * w.G + g] = static_cast<float>(t);
                    }
                ctx.xsum = xsum.data();
            }
        }
        gemm_->run(call);
    }

private:
    static bool woq_amx_raw_on() {  // XK_WOQ_AMX_RAW=0 (read once): the scaled bf16 weights always
        static const bool v = [] {
            const char* e = std::getenv("XK_WOQ_AMX_RAW");
            return !(e && *e == '0');
        }();
        return v;
    }
    WoqSpec s_;
    std::shared_ptr<const GemmKernel> gemm_;
};

}  // namespace

// From this M on (XK_WOQ_AMX_MIN_M overrides it, read once) bf16 X takes the AMX path at decode
// sizes too. Per 32 weights (16 channels x a k-pair) the f32 decode kernel spends 2M FMAs plus the
// unpacking once per pass of 8 rows, the AMX producer ~20 vector instructions whatever M is (the
// tile products are nearly free at M <= 16): even around M = 8, AMX's from 12 on. Below it the
// decode kernels stream the weights at the read bandwidth.
int64_t woq_amx_decode_min_m() {
    static const int64_t v = [] {
        const char* e = std::getenv("XK_WOQ_AMX_MIN_M");
        const long n = e ? std::atol(e) : 12;
        return static_cast<int64_t>(n >= 1 ? n : 12);
    }();
    return v;
}

bool woq_amx_prefill_supports(const WoqSpec& s) {
    return s.compute == WoqCompute::exact && (s.M > kWoqMaxDecodeM || s.M >= woq_amx_decode_min_m()) &&
           s.a_type == DType::bf16 && s.K > 0 && s.N > 0;
}

std::shared_ptr<const WoqKernel> create_woq_amx_prefill(const WoqSpec& s) { return std::make_shared<WoqAmxPrefill>(s); }

}  // namespace xk::detail
