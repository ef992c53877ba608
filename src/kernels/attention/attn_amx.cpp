// AMX attention prefill (Isa::amx, "amx:bf16"): bf16 K / V caches, >= 16 rows, head_dim a multiple
// of 32 up to 256. Both products run on the GEMM's bf16 tile kernel (amx_tile.hpp, TDPBF16PS,
// 32 x 32 f32 blocks); everything else is AVX-512 (+ AVX512_BF16 conversions: the amx level
// implies both). Other tasks (f32 / s8 caches, other head_dims, < 16 rows: decode) run the
// AVX-512 kernel.
//
// Per task (one kv head, R = tokens x group rows (512 by default: task_rows), a key range):
//   q:       the f32 rows (already scaled) are divided by the scale again and rounded to bf16
//            once (bf16 queries come back exactly), packed per 32-row block in the tile kernel's
//            A layout [k step][32 rows][32 bf16], zero rows past R; the scale is applied to the
//            f32 scores;
//   per tile of 256 keys (XK_ATTN_AMX_KEYS; K / V packed once, shared by every row block):
//     K:     B of S = Q K^T (k = head_dim, columns = keys): per 32-key block and k step, two
//            16 x 16 dword transposes of 16 key rows' 64-byte slices (a head_dim pair of one
//            key is contiguous: one dword); keys past the tile's end are zero;
//     V:     B of P V (k = keys, columns = head_dim): per 32-column block and k step, 16 pairs
//            of V rows interleaved 16-bit-wise (VPUNPCKL/HWD + VPERMT2D); keys past the end zero;
//     the next tile's K / V rows prefetched into L2 a few keys per softmax row;
//     per 32-row block (skipped when its tokens see none of the tile, 32-key blocks past its
//     last row's limit skipped: causal):
//       S    = the tile kernel over head_dim per 32-key block, issued one row block ahead (two S
//            buffers) so the tile unit overlaps the vector work;
//       softmax: online, in log2 units (x = s * scale * log2 e, p = 2^(x - m)): per row the max
//            of the visible scores, then m / corr for 16 rows at a time (vector exp2), then per
//            row p (VREDUCEPS, degree-4 polynomial, VSCALEFPS; masked lanes exactly 0) rounded
//            to bf16 into the A layout of P and summed into the row's 16 partial sums of l;
//       P V  = the tile kernel per 32 values of head_dim (a k step per 32 keys), added on the
//            tiles (accumulate = 1) to acc kept in the kernel's C layout [row block][32 values]
//            [32 x 32] for the task (rows whose running max moved are first rescaled with
//            AVX-512), acc copied out to [rows x head_dim] at the end, m back to natural units,
//            l reduced. XK_ATTN_AMX_ACC=0: each block into a temporary, then acc = acc * corr +
//            block (AVX-512 FMA) on [rows x head_dim].
// Rounding: q (not for bf16 queries) and p are rounded to bf16; products exact, f32 sums.
// XK_ATTN_PROFILE=1: TSC cycles per phase printed at exit (AttnAmxProfile).
//
// For tests on machines without AMX, create_attention_amx(kd, true) runs the same data flow with
// amx_tile_emulate (a scalar model of the tile kernel over the same packed layouts).
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <x86intrin.h>

#include "kernels/attention/attention.hpp"
#include "kernels/gemm/amx_tile.hpp"
#include "xk/error.hpp"
#include "xk/isa.hpp"

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace xk::detail {

// ---- the scalar model of the tile kernel (amx_tile.hpp) -----------------------------------------

namespace {
inline float bf16_in(uint16_t h) {  // bf16 -> f32, denormals as 0 (TDPBF16PS: DAZ)
    if ((h & 0x7f80u) == 0) h &= 0x8000u;
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline float ftz(float x) { return std::fabs(x) < 0x1p-126f ? std::copysign(0.0f, x) : x; }
}  // namespace

void amx_tile_emulate(const AmxTileArgs* p) {
    const auto* a = static_cast<const uint8_t*>(p->a);
    const auto* b = static_cast<const uint8_t*>(p->b);
    const int64_t nsteps = p->steps + (p->a_tail ? 1 : 0);
    for (int m = 0; m < 32; ++m)
        for (int n = 0; n < 32; ++n) {
            float c = p->accumulate ? p->acc[m * 32 + n] : 0.0f;
            for (int64_t s = 0; s < nsteps; ++s) {
                const uint8_t* arow = s < p->steps ? a + s * p->a_step + m * p->lda
                                                   : static_cast<const uint8_t*>(p->a_tail) + m * 64;
                const uint8_t* brow = b + s * kAmxTileStepBytes + (n / 16) * 1024;
                for (int q = 0; q < 16; ++q) {
                    uint16_t a0, a1, b0, b1;
                    std::memcpy(&a0, arow + 4 * q, 2);
                    std::memcpy(&a1, arow + 4 * q + 2, 2);
                    std::memcpy(&b0, brow + q * 64 + (n % 16) * 4, 2);
                    std::memcpy(&b1, brow + q * 64 + (n % 16) * 4 + 2, 2);
                    c = ftz(c + bf16_in(a0) * bf16_in(b0));
                    c = ftz(c + bf16_in(a1) * bf16_in(b1));
                }
            }
            if (p->c_out)
                reinterpret_cast<float*>(static_cast<uint8_t*>(p->c_out) + m * p->ldc_out)[n] = c;
            else
                p->acc[m * 32 + n] = c;
        }
}

// Keys per tile of the AMX prefill in 32-key blocks: XK_ATTN_AMX_KEYS (read once; a tuning knob:
// a multiple of 32 in [32, 512]), default 256. Larger tiles take the per-row softmax overheads
// (the max reduction, the acc rescale) and the tile kernel's C loads / stores of P V over more keys.
int64_t amx_key_blocks() {
    static const int64_t v = [] {
        const char* e = std::getenv("XK_ATTN_AMX_KEYS");
        const int64_t k = e && *e ? std::atoll(e) : 256;
        return k >= 32 && k <= 512 && k % 32 == 0 ? k / 32 : int64_t{8};
    }();
    return v;
}

// Prefill rows per task (AttnKernel::task_rows): XK_ATTN_AMX_ROWS (read once; a tuning knob, a
// multiple of 32 in [32, 1024]), default 512: the packed K / V of a key tile serve 16 row blocks.
int64_t amx_task_rows() {
    static const int64_t v = [] {
        const char* e = std::getenv("XK_ATTN_AMX_ROWS");
        const int64_t r = e && *e ? std::atoll(e) : 512;
        return r >= 32 && r <= 1024 && r % 32 == 0 ? r : int64_t{512};
    }();
    return v;
}

// XK_ATTN_AMX_PIPE=0 (read once; a measurement knob): no S products of the next row block issued
// ahead of the softmax (the profile's phases then separate the tile and the vector work).
bool amx_pipeline_on() {
    static const bool v = [] {
        const char* e = std::getenv("XK_ATTN_AMX_PIPE");
        return !(e && *e && std::atoi(e) == 0);
    }();
    return v;
}

// XK_ATTN_AMX_PF=0 (read once; a measurement knob): no prefetch of the next key tile's rows.
bool amx_prefetch_on() {
    static const bool v = [] {
        const char* e = std::getenv("XK_ATTN_AMX_PF");
        return !(e && *e && std::atoi(e) == 0);
    }();
    return v;
}

// XK_ATTN_PROFILE=1 (a measurement aid, read once): TSC cycles per phase of the AMX prefill,
// summed over tasks and threads, printed at exit (stderr): q packing + state init, K packing, V
// packing, the S tile products, the softmax, the acc rescale, the P V tile products, the copy out;
// with the counts of tasks, packed key tiles, (32-row block, key tile) pairs and 32 x 32 score
// blocks; per phase the share and TSC cycles per 32 x 32 score block (a 32-row block against 32
// keys: 32 x 32 x head_dim x 4 flops). With the pipeline on (XK_ATTN_AMX_PIPE, default) the S
// products of a block are issued during the previous one: S-tiles counts issue time, a wait for
// them lands in softmax; XK_ATTN_AMX_PIPE=0 separates them.
struct AttnAmxProfile {
    enum { setup, kpack, vpack, stile, soft, resc, pvtile, out, tasks, tiles, pairs, blocks, n };
    std::atomic<uint64_t> v[n] = {};
    static bool on() {
        static const bool b = [] {
            const char* e = std::getenv("XK_ATTN_PROFILE");
            return e && *e && std::atoi(e) != 0;
        }();
        return b;
    }
    static AttnAmxProfile& get() {
        static AttnAmxProfile* p = [] {
            auto* q = new AttnAmxProfile;
            std::atexit([] { get().print(); });
            return q;
        }();
        return *p;
    }
    void add(const uint64_t* x) {
        for (int i = 0; i < n; ++i)
            if (x[i]) v[i].fetch_add(x[i], std::memory_order_relaxed);
    }
    void print() const {
        const uint64_t np = v[pairs].load(), nb = v[blocks].load();
        if (!np || !nb) return;
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t c0 = __rdtsc();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20)) {
        }
        const double ghz =
            double(__rdtsc() - c0) / std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        static const char* names[] = {"setup", "kpack", "vpack", "S-tiles", "softmax", "rescale", "PV-tiles", "out"};
        uint64_t tot = 0;
        for (int i = 0; i < tasks; ++i) tot += v[i].load();
        std::fprintf(stderr,
                     "[xk attn amx profile] key tile %lld, task rows %lld, pipeline %d, prefetch %d: %llu tasks, %llu key "
                     "tiles packed, %llu (row block, key tile) pairs, %llu 32x32 score blocks, TSC %.2f GHz, %.1f ms "
                     "summed over threads\n",
                     static_cast<long long>(32 * amx_key_blocks()), static_cast<long long>(amx_task_rows()),
                     amx_pipeline_on() ? 1 : 0, amx_prefetch_on() ? 1 : 0, static_cast<unsigned long long>(v[tasks].load()),
                     static_cast<unsigned long long>(v[tiles].load()), static_cast<unsigned long long>(np),
                     static_cast<unsigned long long>(nb), ghz, double(tot) / ghz * 1e-6);
        for (int i = 0; i < tasks; ++i)
            std::fprintf(stderr, "[xk attn amx profile]   %-9s %6.1f%%  %8.1f TSC cycles per 32x32 block  %9.2f ms\n",
                         names[i], tot ? 100.0 * double(v[i].load()) / double(tot) : 0.0, double(v[i].load()) / double(nb),
                         double(v[i].load()) / ghz * 1e-6);
    }
};

}  // namespace xk::detail

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma")
#endif

namespace xk::detail {
namespace {

#include "kernels/attention/attn_exp512.hpp"      // attn_exp2_512
#include "kernels/attention/attn_prefill512.hpp"  // pf_row, pf_transpose16

constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f;

// 2^d for the probabilities p (the hot loop; each p is rounded to bf16 for P V anyway), d clamped
// at -126 and lanes outside `keep` 0 as attn_exp2_512 (attn_exp512.hpp): r = d - floor(d) in [0, 1) in one VREDUCEPS, 2^r by a degree-4 polynomial (least squares on
// [0, 1], |rel. error| <= 3.0e-6), VSCALEFPS multiplies by 2^floor(d) itself.
inline __m512 amx_exp2_p(__mmask16 keep, __m512 d) {
    d = _mm512_max_ps(d, _mm512_set1_ps(-126.0f));
    const __m512 r = _mm512_reduce_ps(d, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512 y = _mm512_set1_ps(0.013426551595330238f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.052240896970033646f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.24128268659114838f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(0.6930440068244934f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(keep, y, d);
}

inline __mmask16 amx_lanes(int64_t left) {  // the first `left` of 16 lanes
    return left >= 16 ? static_cast<__mmask16>(0xFFFF)
                      : (left <= 0 ? static_cast<__mmask16>(0) : static_cast<__mmask16>((1u << left) - 1));
}

inline void to_bf16_32(const float* src, __m512 mul, uint16_t* dst) {
    const __m512 lo = _mm512_mul_ps(_mm512_loadu_ps(src), mul), hi = _mm512_mul_ps(_mm512_loadu_ps(src + 16), mul);
    _mm512_storeu_si512(dst, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

#include "kernels/attention/attn_dp_decode.hpp"  // run_dp_decode (dpbf16:bf16, < 16 rows)

// Scratch of a task (floats), laid out by amx_layout below.
struct AmxScratch {
    uint16_t* qp;  // [nrb][NK][32][32] bf16
    uint16_t* kp;  // [2 column blocks][NK][2 x 16 x 32] bf16 (B of S)
    uint16_t* vp;  // [NK column blocks][2][2 x 16 x 32] bf16 (B of P V)
    float* S;      // 2 buffers [kbs][32][32] (the scores of one row block; pipelined: two)
    uint16_t* P;   // [2][32][32] bf16 (A of P V)
    float* blk;    // [32][32]
    float* corr;   // [32]
    float* mt;     // [32]: the row block's maxima of this tile, then the new running maxima
    float* lv;     // [R][16]: l per row as 16 partial sums (reduced once at the end of the task)
    float* accb;   // [nrb][NK][32][32]: acc in the tile kernel's C layout (XK_ATTN_AMX_ACC=1)
};

inline AmxScratch amx_layout(float* scratch, int64_t R, int64_t hd, int64_t kbs) {
    const int64_t nk = hd / 32, nrb = (R + 31) / 32;
    auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(scratch) + 63) & ~uintptr_t(63));
    AmxScratch s;
    s.qp = reinterpret_cast<uint16_t*>(base);
    base += nrb * nk * 2048;
    s.kp = reinterpret_cast<uint16_t*>(base);
    base += kbs * nk * 2048;
    s.vp = reinterpret_cast<uint16_t*>(base);
    base += kbs * nk * 2048;
    s.S = reinterpret_cast<float*>(base);
    base += 2 * kbs * 4096;
    s.P = reinterpret_cast<uint16_t*>(base);
    base += kbs * 2048;
    s.blk = reinterpret_cast<float*>(base);
    base += 4096;
    s.corr = reinterpret_cast<float*>(base);
    base += 128;
    s.mt = reinterpret_cast<float*>(base);
    base += 128;
    s.lv = reinterpret_cast<float*>(base);
    base += nrb * 32 * 64;
    s.accb = reinterpret_cast<float*>(base);
    return s;
}

template <int NK>
void attn_prefill_amx(AmxTileFn tile, bool tile_acc, const AttnTask& t, float* m, float* l, float* acc) {
    constexpr int64_t hd = 32 * NK;
    const int64_t R = t.tokens * t.group, nrb = (R + 31) / 32;
    const float ninf = -__builtin_inff();
    AmxScratch sc = amx_layout(t.scratch, R, hd, amx_key_blocks());
    const bool prof = AttnAmxProfile::on();
    uint64_t pc[AttnAmxProfile::n] = {};
    uint64_t tsc = prof ? __rdtsc() : 0;
    auto mark = [&](int phase) {  // adds the cycles since the last mark to `phase`
        if (!prof) return;
        const uint64_t now = __rdtsc();
        pc[phase] += now - tsc;
        tsc = now;
    };
    // q: divide the scale out (bf16 queries exact again) unless it is extreme.
    const float as = std::fabs(t.scale);
    const bool unscale = as >= 0x1p-24f && as <= 0x1p24f;
    const __m512 qmul = _mm512_set1_ps(unscale ? 1.0f / t.scale : 1.0f);
    const float smul = unscale ? t.scale : 1.0f;
    // Scores in log2 units: x = s * sl2 (+ mask * log2(e)). Without a mask and for sl2 > 0 the row
    // max is max(s) * sl2 and x - m one FMA in the exponent (direct); else x is stored over s.
    const float sl2 = smul * kLog2e;
    const bool direct = !t.mask && sl2 > 0.0f;
    const __m512 smv = _mm512_set1_ps(sl2), l2e = _mm512_set1_ps(kLog2e), xmul = direct ? smv : _mm512_set1_ps(1.0f);
    for (int64_t rb = 0; rb < nrb; ++rb)
        for (int64_t ks = 0; ks < NK; ++ks) {
            uint16_t* dst = sc.qp + (rb * NK + ks) * 1024;
            for (int64_t r = 0; r < 32; ++r) {
                const int64_t row = rb * 32 + r;
                if (row < R)
                    to_bf16_32(t.q + row * hd + ks * 32, qmul, dst + r * 32);
                else
                    _mm512_storeu_si512(dst + r * 32, _mm512_setzero_si512());
            }
        }
    std::memset(sc.P, 0, static_cast<size_t>(amx_key_blocks() * 2048));  // (rows past R stay 0)
    for (int64_t r = 0; r < R; ++r) m[r] = ninf;  // (in log2 units until the end of the task)
    std::memset(sc.lv, 0, static_cast<size_t>(std::max<int64_t>(R, 0)) * 64);  // (R > 0: GCC cannot tell)
    if (tile_acc)
        std::memset(sc.accb, 0, static_cast<size_t>(nrb * NK * 4096));
    else
        for (int64_t i = 0; i < R * hd; ++i) acc[i] = 0.0f;
    const int64_t jmax = attn_key_end(t);
    const uint16_t* kbase = static_cast<const uint16_t*>(t.kv.k);
    const uint16_t* vbase = static_cast<const uint16_t*>(t.kv.v);
    // V pairs: VPUNPCKL/HWD interleave a and b per 128-bit lane (dwords (a[c], b[c]) for c in
    // 0-3, 8-11, 16-19, 24-27 / 4-7, 12-15, 20-23, 28-31), VPERMT2D puts the dwords in order:
    // low half c = 0..15, high half 16..31 (one uop each, where VPERMT2W takes three).
    alignas(64) uint32_t ilo[16], ihi[16];
    for (int i = 0; i < 16; ++i) {  // dword c (lane c / 4 of 0..7 in order) from lo (lane even) / hi (odd)
        const int c = i, lane = c / 4, src = lane & 1, pos = (lane / 2) * 4 + c % 4;
        ilo[i] = static_cast<uint32_t>(src * 16 + pos);
        const int c2 = 16 + i, lane2 = c2 / 4, src2 = lane2 & 1, pos2 = (lane2 / 2) * 4 + c2 % 4;
        ihi[i] = static_cast<uint32_t>(src2 * 16 + pos2);
    }
    const __m512i vilo = _mm512_load_si512(ilo), vihi = _mm512_load_si512(ihi);
    AmxTileArgs ta;  // P V: A = P [k step][32 rows][32 keys]
    ta.lda = 64;
    ta.a_step = 2048;
    mark(AttnAmxProfile::setup);
    const int64_t kbs = amx_key_blocks();  // 32-key blocks per key tile
    const bool pipe = amx_pipeline_on();
    for (int64_t j0 = t.j_begin; j0 < jmax; j0 += 32 * kbs) {
        ++pc[AttnAmxProfile::tiles];
        const int64_t n = jmax - j0 < 32 * kbs ? jmax - j0 : 32 * kbs;
        const int64_t nkb = (n + 31) / 32;  // 32-key blocks of this tile
        // ---- K into the B layout of S, per 32-key block [NK k steps][2 x 16 x 32] (keys past n: 0)
        for (int64_t cb = 0; cb < nkb; ++cb)
            for (int kg = 0; kg < 2; ++kg) {
                const uint16_t* rows[16];
                for (int c = 0; c < 16; ++c) {
                    const int64_t j = cb * 32 + kg * 16 + c;
                    rows[c] = j < n ? pf_row(t.kv, kbase, t.kv.k_stride, j0 + j) : nullptr;
                }
                for (int64_t ks = 0; ks < NK; ++ks) {
                    __m512 r16[16];
                    for (int c = 0; c < 16; ++c)
                        r16[c] = rows[c] ? _mm512_loadu_ps(rows[c] + ks * 32) : _mm512_setzero_ps();
                    pf_transpose16(r16, reinterpret_cast<float*>(sc.kp + (cb * NK + ks) * 1024 + kg * 512), 16);
                }
            }
        mark(AttnAmxProfile::kpack);
        // ---- V into the B layout of P V, per 32 values [kbs k steps][2 x 16 x 32] (keys past n: 0)
        for (int64_t ks = 0; ks < nkb; ++ks)
            for (int p = 0; p < 16; ++p) {
                const int64_t ja = ks * 32 + 2 * p, jb = ja + 1;
                const uint16_t* ra = ja < n ? pf_row(t.kv, vbase, t.kv.v_stride, j0 + ja) : nullptr;
                const uint16_t* rb = jb < n ? pf_row(t.kv, vbase, t.kv.v_stride, j0 + jb) : nullptr;
                for (int64_t cb = 0; cb < NK; ++cb) {
                    const __m512i a = ra ? _mm512_loadu_si512(ra + cb * 32) : _mm512_setzero_si512();
                    const __m512i b = rb ? _mm512_loadu_si512(rb + cb * 32) : _mm512_setzero_si512();
                    uint16_t* d = sc.vp + (cb * kbs + ks) * 1024 + p * 32;
                    const __m512i lo = _mm512_unpacklo_epi16(a, b), hi = _mm512_unpackhi_epi16(a, b);
                    _mm512_storeu_si512(d, _mm512_permutex2var_epi32(lo, vilo, hi));
                    _mm512_storeu_si512(d + 512, _mm512_permutex2var_epi32(lo, vihi, hi));
                }
            }
        mark(AttnAmxProfile::vpack);
        // The next tile's K / V rows are prefetched into L2 (and the TLB: the rows of a cache sit
        // heads x head_dim apart, a page or more) a few keys per softmax row, the rest after the
        // row blocks: its packing then finds them there.
        const int64_t pf_end = jmax - (j0 + 32 * kbs) < 32 * kbs ? jmax - (j0 + 32 * kbs) : 32 * kbs;
        const int64_t pf_rate = pf_end > 0 ? (pf_end + R - 1) / R : 0;  // keys per row
        int64_t pf_done = amx_prefetch_on() ? 0 : pf_end;
        auto prefetch_keys = [&](int64_t upto) {
            for (; pf_done < upto && pf_done < pf_end; ++pf_done) {
                const char* kr = reinterpret_cast<const char*>(pf_row(t.kv, kbase, t.kv.k_stride, j0 + 32 * kbs + pf_done));
                const char* vr = reinterpret_cast<const char*>(pf_row(t.kv, vbase, t.kv.v_stride, j0 + 32 * kbs + pf_done));
                for (int64_t c = 0; c < NK; ++c) {
                    _mm_prefetch(kr + c * 64, _MM_HINT_T1);
                    _mm_prefetch(vr + c * 64, _MM_HINT_T1);
                }
            }
        };
        // 32-key blocks of the tile row block rb needs (0: none): its last row sees the most keys
        // (limits grow with the token), blocks past that are skipped.
        auto blocks_of = [&](int64_t rb) -> int64_t {
            const int64_t r0 = rb * 32, nr = R - r0 < 32 ? R - r0 : 32;
            const int64_t seen = t.limit[(r0 + nr - 1) / t.group] - j0;
            return seen <= 0 ? 0 : (seen >= n ? nkb : (seen + 31) / 32);
        };
        auto next_block = [&](int64_t rb) {
            while (rb < nrb && blocks_of(rb) == 0) ++rb;
            return rb;
        };
        // ---- S = Q K^T of row block rb into Sb, per 32-key block
        auto s_tiles = [&](int64_t rb, float* Sb) {
            AmxTileArgs ts;
            ts.a = sc.qp + rb * NK * 1024;
            ts.lda = 64;
            ts.a_step = 2048;
            ts.steps = NK;
            ts.accumulate = 0;
            const int64_t nb = blocks_of(rb);
            for (int64_t cb = 0; cb < nb; ++cb) {
                ts.b = sc.kp + cb * NK * 1024;
                ts.acc = Sb + cb * 1024;
                tile(&ts);
            }
        };
        // Pipelined (default): the S products of the next row block are issued before this one's
        // softmax, into the other S buffer, so the tile unit works on them while the vector code
        // runs (XK_ATTN_AMX_PIPE=0: each block's S just before its softmax).
        int64_t rb = next_block(0);
        if (pipe && rb < nrb) s_tiles(rb, sc.S);
        for (int cur = 0; rb < nrb; cur ^= 1) {
            const int64_t rbc = rb, r0 = rb * 32, nr = R - r0 < 32 ? R - r0 : 32;
            const int64_t nb = blocks_of(rb);
            const int64_t nv = 2 * nb;  // 16-key vectors per row
            rb = next_block(rb + 1);
            float* const Sb = sc.S + cur * kbs * 1024;
            if (!pipe)
                s_tiles(rbc, Sb);
            else if (rb < nrb)
                s_tiles(rb, sc.S + (cur ^ 1) * kbs * 1024);
            ++pc[AttnAmxProfile::pairs];
            pc[AttnAmxProfile::blocks] += static_cast<uint64_t>(nb);
            mark(AttnAmxProfile::stile);
            // ---- online softmax (log2 units: x = s * scale * log2(e), p = 2^(x - m)): per row the
            //      tile's max (masked lanes: keys past the row's limit or the tile's end), then the
            //      new maxima and corr = 2^(m_old - m_new) for 16 rows at a time, then per row p
            //      (bf16 into the A layout of P) and its sum into the row's 16 partial sums of l.
            for (int64_t r = 0; r < nr; ++r) {
                const int64_t tok = (r0 + r) / t.group;
                const int64_t cnt = t.limit[tok] - j0 < n ? t.limit[tok] - j0 : n;
                __m512 mx = _mm512_set1_ps(ninf);
                if (direct) {  // max(s * c) = max(s) * c (c > 0); x formed in the exponent below
                    for (int64_t k = 0; k < nv; ++k)
                        mx = _mm512_mask_max_ps(mx, amx_lanes(cnt - 16 * k), mx,
                                                _mm512_loadu_ps(Sb + (k / 2) * 1024 + r * 32 + (k % 2) * 16));
                    sc.mt[r] = _mm512_reduce_max_ps(mx) * sl2;
                    continue;
                }
                const float* mrow = t.mask ? t.mask + tok * t.mask_stride + j0 : nullptr;
                for (int64_t k = 0; k < nv; ++k) {  // x stored in place of s
                    const __mmask16 km = amx_lanes(cnt - 16 * k);
                    float* sp = Sb + (k / 2) * 1024 + r * 32 + (k % 2) * 16;
                    __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(km, sp), smv);
                    if (mrow) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(km, mrow + k * 16), l2e, x);
                    _mm512_storeu_ps(sp, x);
                    mx = _mm512_mask_max_ps(mx, km, mx, x);
                }
                sc.mt[r] = _mm512_reduce_max_ps(mx);
            }
            for (int64_t g = 0; g < nr; g += 16) {  // m_new = max(m_old, tile max), corr
                const __mmask16 rm = amx_lanes(nr - g);
                const __m512 mo = _mm512_mask_loadu_ps(_mm512_set1_ps(ninf), rm, m + r0 + g);
                const __m512 mn = _mm512_max_ps(mo, _mm512_mask_loadu_ps(_mm512_set1_ps(ninf), rm, sc.mt + g));
                // corr 1 where the max did not move and on the empty state (m_old = -inf: acc, l 0)
                const __mmask16 seen_m = _mm512_cmp_ps_mask(mo, _mm512_set1_ps(ninf), _CMP_NEQ_OQ);
                const __mmask16 same = _mm512_cmp_ps_mask(mo, mn, _CMP_EQ_OQ);
                const __m512 c = _mm512_mask_mov_ps(attn_exp2_512(seen_m, _mm512_sub_ps(mo, mn)),
                                                    static_cast<__mmask16>(~seen_m | same), _mm512_set1_ps(1.0f));
                _mm512_storeu_ps(sc.corr + g, c);
                _mm512_storeu_ps(sc.mt + g, mn);
                _mm512_mask_storeu_ps(m + r0 + g, rm, mn);
            }
            for (int64_t r = 0; r < nr; ++r) {
                const int64_t tok = (r0 + r) / t.group;
                const int64_t cnt = t.limit[tok] - j0 < n ? t.limit[tok] - j0 : n;
                const float mn = sc.mt[r];
                uint16_t* prow = sc.P + r * 32;
                if (mn == ninf) {  // nothing visible yet
                    for (int64_t k = 0; k < nb; ++k) _mm512_storeu_si512(prow + k * 1024, _mm512_setzero_si512());
                    continue;
                }
                const __m512 mnv = _mm512_set1_ps(mn);
                __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
                for (int64_t k = 0; k < nb; ++k) {
                    const float* sp = Sb + k * 1024 + r * 32;
                    const __m512 p0 = amx_exp2_p(amx_lanes(cnt - 32 * k), _mm512_fmsub_ps(_mm512_loadu_ps(sp), xmul, mnv));
                    const __m512 p1 =
                        amx_exp2_p(amx_lanes(cnt - 32 * k - 16), _mm512_fmsub_ps(_mm512_loadu_ps(sp + 16), xmul, mnv));
                    _mm512_storeu_si512(prow + k * 1024, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
                    sum0 = _mm512_add_ps(sum0, p0);
                    sum1 = _mm512_add_ps(sum1, p1);
                }
                prefetch_keys(pf_done + pf_rate);
                float* lr = sc.lv + (r0 + r) * 16;
                _mm512_storeu_ps(lr, _mm512_fmadd_ps(_mm512_loadu_ps(lr), _mm512_set1_ps(sc.corr[r]), _mm512_add_ps(sum0, sum1)));
            }
            mark(AttnAmxProfile::soft);
            // ---- acc = acc * corr + P V, 32 values of head_dim at a time (nb k steps)
            ta.a = sc.P;
            ta.steps = nb;
            if (tile_acc) {  // the rows whose max moved rescaled, then P V added on the tiles
                float* ab = sc.accb + rbc * NK * 1024;
                for (int64_t r = 0; r < nr; ++r)
                    if (sc.corr[r] != 1.0f) {
                        const __m512 cr = _mm512_set1_ps(sc.corr[r]);
                        for (int64_t cb = 0; cb < NK; ++cb) {
                            float* ar = ab + cb * 1024 + r * 32;
                            _mm512_storeu_ps(ar, _mm512_mul_ps(_mm512_loadu_ps(ar), cr));
                            _mm512_storeu_ps(ar + 16, _mm512_mul_ps(_mm512_loadu_ps(ar + 16), cr));
                        }
                    }
                mark(AttnAmxProfile::resc);
                ta.accumulate = 1;
                for (int64_t cb = 0; cb < NK; ++cb) {
                    ta.b = sc.vp + cb * kbs * 1024;
                    ta.acc = ab + cb * 1024;
                    tile(&ta);
                }
                mark(AttnAmxProfile::pvtile);
                continue;
            }
            ta.acc = sc.blk;
            for (int64_t cb = 0; cb < NK; ++cb) {
                ta.b = sc.vp + cb * kbs * 1024;
                tile(&ta);
                for (int64_t r = 0; r < nr; ++r) {
                    float* ar = acc + (r0 + r) * hd + cb * 32;
                    const __m512 cr = _mm512_set1_ps(sc.corr[r]);
                    _mm512_storeu_ps(ar, _mm512_fmadd_ps(_mm512_loadu_ps(ar), cr, _mm512_loadu_ps(sc.blk + r * 32)));
                    _mm512_storeu_ps(ar + 16,
                                     _mm512_fmadd_ps(_mm512_loadu_ps(ar + 16), cr, _mm512_loadu_ps(sc.blk + r * 32 + 16)));
                }
            }
            mark(AttnAmxProfile::pvtile);
        }
        prefetch_keys(pf_end);
    }
    if (tile_acc)  // back to [R x head_dim]
        for (int64_t r = 0; r < R; ++r)
            for (int64_t cb = 0; cb < NK; ++cb) {
                const float* src = sc.accb + ((r / 32) * NK + cb) * 1024 + (r % 32) * 32;
                _mm512_storeu_ps(acc + r * hd + cb * 32, _mm512_loadu_ps(src));
                _mm512_storeu_ps(acc + r * hd + cb * 32 + 16, _mm512_loadu_ps(src + 16));
            }
    for (int64_t r = 0; r < R; ++r) {
        l[r] = _mm512_reduce_add_ps(_mm512_loadu_ps(sc.lv + r * 16));
        m[r] *= kLn2;  // (-inf stays)
    }
    if (prof) {
        mark(AttnAmxProfile::out);
        pc[AttnAmxProfile::tasks] = 1;
        AttnAmxProfile::get().add(pc);
    }
}

// The tile kernel's contract (amx_tile.hpp: C[32 x 32] (+)= A[32 x K] B[K x 32] over the packed
// layouts) on AVX512-BF16 (dpbf16:bf16, CPUs with AVX512-BF16 and no AMX, e.g. AMD Zen 4, where
// VDPBF16PS issues at the FMA's rate: twice its multiply-adds): per k pair, the B tile rows of both
// column halves in two registers, A's (a[2p], a[2p+1]) dword broadcast per row, one VDPBF16PS per
// row and half (NR rows x 2 accumulators in registers). VDPBF16PS rounds to nearest even with
// denormals as zero, as TDPBF16PS (its sum order within a pair differs: odd product first).
template <int NR>
inline void dp_tile_rows(const AmxTileArgs* p, int m0) {
    __m512 c[NR][2];
    for (int i = 0; i < NR; ++i)
        for (int h = 0; h < 2; ++h)
            c[i][h] = p->accumulate ? _mm512_loadu_ps(p->acc + (m0 + i) * 32 + h * 16) : _mm512_setzero_ps();
    const int64_t nsteps = p->steps + (p->a_tail ? 1 : 0);
    for (int64_t s = 0; s < nsteps; ++s) {
        const bool tail = s >= p->steps;
        const auto* a = tail ? static_cast<const uint8_t*>(p->a_tail) : static_cast<const uint8_t*>(p->a) + s * p->a_step;
        const int64_t lda = tail ? 64 : p->lda;
        const auto* b = static_cast<const uint8_t*>(p->b) + s * kAmxTileStepBytes;
        for (int q = 0; q < 16; ++q) {
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + q * 64);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + 1024 + q * 64);
            for (int i = 0; i < NR; ++i) {
                int32_t w;
                std::memcpy(&w, a + (m0 + i) * lda + 4 * q, 4);
                const __m512bh av = (__m512bh)_mm512_set1_epi32(w);
                c[i][0] = _mm512_dpbf16_ps(c[i][0], av, b0);
                c[i][1] = _mm512_dpbf16_ps(c[i][1], av, b1);
            }
        }
    }
    for (int i = 0; i < NR; ++i)
        for (int h = 0; h < 2; ++h) _mm512_storeu_ps(p->acc + (m0 + i) * 32 + h * 16, c[i][h]);
}

void dp_tile(const AmxTileArgs* p) {
    dp_tile_rows<12>(p, 0);
    dp_tile_rows<12>(p, 12);
    dp_tile_rows<8>(p, 24);
}

void run_amx(AmxTileFn tile, bool tile_acc, const AttnTask& t, float* m, float* l, float* acc) {
    switch (t.head_dim / 32) {
#define XK_AMX_CASE(nc)                                                                                     \
    case nc:                                                                                                \
        if constexpr (attn_hd_compiled(nc * 32)) return attn_prefill_amx<nc>(tile, tile_acc, t, m, l, acc); \
        break;
        XK_AMX_CASE(1) XK_AMX_CASE(2) XK_AMX_CASE(3) XK_AMX_CASE(4) XK_AMX_CASE(5) XK_AMX_CASE(6) XK_AMX_CASE(7) XK_AMX_CASE(8)
#undef XK_AMX_CASE
    }
    __builtin_trap();
}

}  // namespace

// The driver's row conversions (attention.cpp), bit for bit its scalar loops: q row * scale into
// f32, o row = acc * inv into f32 / bf16 (round to nearest even, NaN quieted).
void attn_q_row_avx512(const void* src, bool bf16_in, float scale, float* dst, int64_t n) {
    const __m512 sv = _mm512_set1_ps(scale);
    for (int64_t d = 0; d < n; d += 16) {
        const __mmask16 k = amx_lanes(n - d);
        __m512 x;
        if (bf16_in)
            x = _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, static_cast<const uint16_t*>(src) + d)), 16));
        else
            x = _mm512_maskz_loadu_ps(k, static_cast<const float*>(src) + d);
        _mm512_mask_storeu_ps(dst + d, k, _mm512_mul_ps(x, sv));
    }
}

void attn_o_row_avx512(const float* acc, float inv, bool bf16_out, void* dst, int64_t n) {
    const __m512 iv = _mm512_set1_ps(inv);
    for (int64_t d = 0; d < n; d += 16) {
        const __mmask16 k = amx_lanes(n - d);
        const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, acc + d), iv);
        if (!bf16_out) {
            _mm512_mask_storeu_ps(static_cast<float*>(dst) + d, k, x);
            continue;
        }
        const __m512i u = _mm512_castps_si512(x);
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
        const __mmask16 nan =
            _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
        r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40)));
        _mm256_mask_storeu_epi16(static_cast<uint16_t*>(dst) + d, k, _mm512_cvtepi32_epi16(r));
    }
}

}  // namespace xk::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace xk::detail {

int64_t attn_amx_scratch_floats(int64_t rows, int64_t head_dim) {
    const int64_t nk = (head_dim + 31) / 32, nrb = (rows + 31) / 32;
    const int64_t kbs = amx_key_blocks();
    return (nrb * nk * 2048 + 2 * kbs * nk * 2048 + 2 * kbs * 4096 + kbs * 2048 + 4096 + 256 + nrb * 32 * 64 + nrb * nk * 4096 + 64) / 4;
}

namespace {
void no_cfg(const void*) {}
void no_release() {}

// XK_ATTN_AMX_ACC (read once; a measurement knob): 1 (default) keeps acc in the tile kernel's C
// layout and adds P V on the tiles (accumulate = 1; rows whose max moved rescaled first with
// AVX-512), 0 computes each P V block into a temporary and adds it with AVX-512 FMAs
// (acc = acc * corr + block).
bool env_tile_acc() {
    static const bool v = [] {
        const char* e = std::getenv("XK_ATTN_AMX_ACC");
        return !(e && *e && std::atoi(e) == 0);
    }();
    return v;
}

// XK_ATTN_DP_DECODE (read once): 1 / 0 forces the VDPBF16PS decode of dpbf16:bf16 on / off;
// unset: on for AMD CPUs (Zen 4: VDPBF16PS at the FMA's issue rate), off elsewhere (a Xeon core
// issues it at half the FMA's rate: docs/attention.md).
bool env_dp_decode() {
    static const bool v = [] {
        const char* e = std::getenv("XK_ATTN_DP_DECODE");
        if (!e || !*e) return attn_amd();
        return std::atoi(e) != 0;
    }();
    return v;
}

struct AmxAttention final : AttnKernel {
    DType kv;
    bool tiles_ok;  // bf16 cache, head_dim a multiple of 32 up to 256
    bool tile_acc;
    bool dp_decode = false;  // < 16 rows on VDPBF16PS (run_dp_decode; dpbf16:bf16 only)
    AmxBf16Tile tile;
    std::shared_ptr<const AttnKernel> vec;
    AmxAttention(const AttnKernelDesc& kd, AmxTileFn custom, int acc_mode, int dp_mode = 0)
        : kv(kd.kv_dtype),
          tiles_ok(kd.kv_dtype == DType::bf16 && kd.head_dim % 32 == 0 && kd.head_dim <= 256),
          tile_acc(acc_mode < 0 ? env_tile_acc() : acc_mode != 0),
          dp_decode(tiles_ok && (dp_mode < 0 ? env_dp_decode() : dp_mode != 0)),
          vec(create_attention_avx512(kd)) {
        if (custom) {
            tile = AmxBf16Tile{custom, no_cfg, no_release};
        } else if (tiles_ok) {
            if (!isa_supported(Isa::amx)) throw Error(Status::unsupported, "attention amx: AMX is not available");
            tile = amx_bf16_tile();
        }
    }
    int64_t task_rows() const override { return tiles_ok ? amx_task_rows() : vec->task_rows(); }
    void run(const AttnTask& t, float* m, float* l, float* acc) const override {
        if (!tiles_ok || t.tokens * t.group < kAttnPrefillRows) {
            if (dp_decode)
                run_dp_decode(t, m, l, acc);
            else
                vec->run(t, m, l, acc);
            return;
        }
        tile.configure(amx_tile_config());
        run_amx(tile.fn, tile_acc, t, m, l, acc);
        tile.release();
    }
};
}  // namespace

std::shared_ptr<const AttnKernel> create_attention_amx(const AttnKernelDesc& kd, bool emulate_tiles, int tile_acc) {
    return std::make_shared<AmxAttention>(kd, emulate_tiles ? amx_tile_emulate : nullptr, tile_acc);
}

std::shared_ptr<const AttnKernel> create_attention_amx_custom(const AttnKernelDesc& kd, AmxTileFn tile, int tile_acc) {
    return std::make_shared<AmxAttention>(kd, tile, tile_acc);
}

std::shared_ptr<const AttnKernel> create_attention_amx_variant(const AttnKernelDesc& kd) {
    return create_attention_amx(kd, false);
}

std::shared_ptr<const AttnKernel> create_attention_dpbf16(const AttnKernelDesc& kd, int tile_acc, int dp_decode) {
    if (!isa_supported(Isa::avx512_bf16)) throw Error(Status::unsupported, "attention dpbf16: AVX512-BF16 is not available");
    return std::make_shared<AmxAttention>(kd, dp_tile, tile_acc, dp_decode);
}

std::shared_ptr<const AttnKernel> create_attention_dpbf16_variant(const AttnKernelDesc& kd) {
    return create_attention_dpbf16(kd);
}

}  // namespace xk::detail
