// int4 WOQ decode with VDPBF16PS (entry avx512_bf16:woq_u4:gemv; + AVX512-VBMI): u4 weights, bf16
// X, M <= 16, exact mode. Each 16-byte row of a block (16 channels x one k-pair: low nibble k even,
// high nibble k odd) becomes 16 dwords of bf16 pairs by VBROADCASTI64X2 + VPMULTISHIFTQB (each
// word gets its nibble in its low bits) + VPERMW (the low 5 bits looked up in a table of
// bf16(i & 15): the values 0..15 exactly), then one VDPBF16PS per row of X
// against that row's (x[k], x[k+1]) pair as it lies in memory (bf16 X needs no widening). The
// products are exact in fp32 (8-bit x mantissa times a 4-bit integer), so the group sums are those
// of the f32 FMA kernel up to the order of the fp32 additions; VDPBF16PS reads a denormal x as a
// zero of its sign and flushes a denormal sum (the sums are then below 2^-126 in magnitude).
// Per group y += scale * sum + offset * sum_k x, as the f32 kernel (woq_kernels.inc).
// Against that kernel (VPMOVZXBD, VPERMPS, VPSRLD, CVTDQ2PS and two FMAs per 32 weights and row)
// it needs 3 instructions per 32 weights plus one per row: at M = 16 (one pass of 16 rows) half
// the arithmetic instructions, at M = 1 two thirds. (Zen 4, one core, weights from DRAM, M = 16:
// 1.6-1.8x the FMA kernel's speed.) Selected by default on AMD CPUs only (see dp_on()).
// s8 (entry avx512_bf16:woq_s8:gemv, M >= 6): rows k and k + 1 of a block widened (VPMOVSXBD,
// CVTDQ2PS), rounded to bf16 together (VCVTNE2PS2BF16: int8 values are exact) and interleaved into
// the channels' pairs (VPERMW); an odd K's last k pairs with a zero (and x with a zero).
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "common/cpu_vendor.hpp"
#include "kernels/woq/woq.hpp"
#include "xk/isa.hpp"
#include "xk/types.hpp"

#define XK_WOQ_DP_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,fma")))

namespace xk::detail {
namespace {

constexpr int64_t kPf = 4096;  // software prefetch distance in the weight stream (as woq_kernels.inc)

// VPMULTISHIFTQB's control over a row broadcast to each 128-bit lane (qword 2L: bytes 0-7, 2L + 1:
// bytes 8-15): output qword i (lanes 2i, 2i + 1 of the accumulators) takes channels
// ch = (i odd ? 8 : 0) + 2 (i / 2) + l, l = 0, 1 — byte 0 of a lane's dword the channel's byte
// (its low nibble in bits 0-3), byte 2 that byte from bit 4 on (its high nibble in bits 0-3); bytes
// 1 and 3 are never read (VPERMW reads the low 5 bits of each word). The accumulators' lanes are
// thus the channels in the order kLane2Ch; scales and offsets are permuted to it per group and the
// sums back once per block.
constexpr uint8_t msh(int i, int t) { return static_cast<uint8_t>(8 * (2 * (i / 2) + t / 4) + 4 * ((t / 2) % 2)); }
#define XK_MSH_Q(i) msh(i, 0), msh(i, 1), msh(i, 2), msh(i, 3), msh(i, 4), msh(i, 5), msh(i, 6), msh(i, 7)
alignas(64) constexpr uint8_t kMsh[64] = {XK_MSH_Q(0), XK_MSH_Q(1), XK_MSH_Q(2), XK_MSH_Q(3),
                                          XK_MSH_Q(4), XK_MSH_Q(5), XK_MSH_Q(6), XK_MSH_Q(7)};
#undef XK_MSH_Q
alignas(64) constexpr int32_t kLane2Ch[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
alignas(64) constexpr int32_t kCh2Lane[16] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
alignas(64) constexpr uint16_t kBf16Nib[32] = {  // bf16(i & 15)
    0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0, 0x4100, 0x4110, 0x4120,
    0x4130, 0x4140, 0x4150, 0x4160, 0x4170, 0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0,
    0x40C0, 0x40E0, 0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170};

alignas(64) constexpr uint16_t kPairIdx[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4,  20, 5,  21, 6,  22, 7,  23,
                                               8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

struct Consts {
    __m512i msh, table, pidx;
};

// One 16-byte row of u4 -> 16 dwords (bf16(q[c][2j]), bf16(q[c][2j + 1])), lanes in kLane2Ch order.
XK_WOQ_DP_TARGET inline __m512i pairs(const uint8_t* p, const Consts& k) {
    const __m512i b = _mm512_broadcast_i64x2(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i d = _mm512_multishift_epi64_epi8(k.msh, b);  // words: the nibble in bits 0-3
    return _mm512_permutexvar_epi16(d, k.table);               // (VPERMW reads bits 0-4: the table repeats)
}

// s8: rows k, k + 1 of a block (16 bytes each, p and p + 16; hi = false: k + 1 = K, zeros) -> 16
// dwords (bf16(q[c][k]), bf16(q[c][k + 1])) in channel order (int8 values are exact in bf16).
XK_WOQ_DP_TARGET inline __m512i pairs_s8(const uint8_t* p, bool hi, const Consts& k) {
    const __m512 l = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    const __m512 h = hi ? _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16))))
                        : _mm512_setzero_ps();
    return _mm512_permutexvar_epi16(k.pidx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(h, l)));
}

XK_WOQ_DP_TARGET inline __m512 xpair(const uint32_t* x) { return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(*x))); }

XK_WOQ_DP_TARGET inline __m512 dp(__m512 acc, __m512i w, __m512 x) {
    return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w), reinterpret_cast<__m512bh>(x));
}

// Block b, rows [0, MB) of x: out[m * 16 + c] = the row's dot products. x holds the (x[k], x[k+1])
// pairs k-major: pair j of row m at x[j * ldp + m] (the rows' pairs of one j in one cache line;
// rows of X 4 KiB apart would share their L1 set). A: independent accumulator chains per row.
// U4: u4 rows (lanes in kLane2Ch order), else s8 rows in pairs (channel order; an odd K's last
// pair has a zero k + 1).
template <bool U4, int MB, int A>
XK_WOQ_DP_TARGET void block_dp(const WoqPacked& w, int64_t b, const uint32_t* x, int64_t ldp, const float* xs, float* out) {
    const Consts k{_mm512_load_si512(kMsh), _mm512_load_si512(kBf16Nib), _mm512_load_si512(kPairIdx)};
    constexpr int64_t kRowBytes = U4 ? 16 : 32;  // bytes of one k-pair of a block
    const __m512i l2c = _mm512_load_si512(kLane2Ch);
    const uint8_t* q = w.qb(b);
    const float* sc = w.sb(b);
    const float* of = w.ob(b);
    const int64_t G = w.G, gs = w.gs;
    for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, _mm512_setzero_ps());
    for (int64_t g = 0; g < G; ++g) {
        __m512 acc[A][MB];
        for (int a = 0; a < A; ++a)
            for (int m = 0; m < MB; ++m) acc[a][m] = _mm512_setzero_ps();
        const int64_t k1 = std::min(w.K, g * gs + gs);
        const int64_t j0 = g * gs / 2, j1 = k1 / 2;  // whole k-pairs of the group (gs is even or K)
        constexpr int U = A >= 4 ? A : 4 / A * A;    // pairs a step
        int64_t j = j0;
        for (; j + U <= j1; j += U) {
            for (int64_t o = 0; o < U * kRowBytes; o += 64)
                _mm_prefetch(reinterpret_cast<const char*>(q + j * kRowBytes + o + kPf), _MM_HINT_T0);
#pragma GCC unroll 4
            for (int u = 0; u < U; ++u) {
                const __m512i wv = U4 ? pairs(q + (j + u) * 16, k) : pairs_s8(q + (j + u) * 32, true, k);
                for (int m = 0; m < MB; ++m) acc[u % A][m] = dp(acc[u % A][m], wv, xpair(x + (j + u) * ldp + m));
            }
        }
        for (; j < (k1 + 1) / 2; ++j) {  // (s8, odd K: the last pair is k = K - 1 alone)
            const __m512i wv = U4 ? pairs(q + j * 16, k) : pairs_s8(q + j * 32, 2 * j + 1 < k1, k);
            for (int m = 0; m < MB; ++m) acc[0][m] = dp(acc[0][m], wv, xpair(x + j * ldp + m));
        }
        for (int a = 1; a < A; ++a)
            for (int m = 0; m < MB; ++m) acc[0][m] = _mm512_add_ps(acc[0][m], acc[a][m]);
        __m512 s = _mm512_loadu_ps(sc + g * 16);
        __m512 o = of ? _mm512_loadu_ps(of + g * 16) : _mm512_setzero_ps();
        if (U4) s = _mm512_permutexvar_ps(l2c, s), o = _mm512_permutexvar_ps(l2c, o);
        for (int m = 0; m < MB; ++m) {
            __m512 y = _mm512_fmadd_ps(acc[0][m], s, _mm512_loadu_ps(out + m * 16));
            if (of) y = _mm512_fmadd_ps(_mm512_set1_ps(xs[m * G + g]), o, y);
            _mm512_storeu_ps(out + m * 16, y);
        }
    }
    if (!U4) return;
    const __m512i c2l = _mm512_load_si512(kCh2Lane);
    for (int m = 0; m < MB; ++m) _mm512_storeu_ps(out + m * 16, _mm512_permutexvar_ps(c2l, _mm512_loadu_ps(out + m * 16)));
}

using BlockFn = void (*)(const WoqPacked&, int64_t, const uint32_t*, int64_t, const float*, float*);

template <int MB>
constexpr int chains() {
    return MB == 1 ? 4 : MB <= 3 ? 2 : 1;
}

template <bool U4>
BlockFn block_fn(int64_t mb) {
    switch (mb) {
        case 1: return &block_dp<U4, 1, chains<1>()>;
        case 2: return &block_dp<U4, 2, chains<2>()>;
        case 3: return &block_dp<U4, 3, chains<3>()>;
        case 4: return &block_dp<U4, 4, chains<4>()>;
        case 5: return &block_dp<U4, 5, chains<5>()>;
        case 6: return &block_dp<U4, 6, chains<6>()>;
        case 7: return &block_dp<U4, 7, chains<7>()>;
        case 8: return &block_dp<U4, 8, chains<8>()>;
        case 16: return &block_dp<U4, 16, chains<16>()>;
    }
    return nullptr;
}

class WoqGemvDp final : public WoqKernel {
public:
    // M <= 8 or 16: one pass over the weights; 9..15: two passes of balanced row counts (the
    // second finds the block in L1 / L2).
    explicit WoqGemvDp(const WoqSpec& s) : s_(s) {
        const int64_t passes = s.M <= 8 || s.M == 16 ? 1 : 2;
        int64_t m0 = 0;
        for (int64_t p = 0; p < passes; ++p) {
            const int64_t mb = (s.M - m0 + (passes - p) - 1) / (passes - p);
            passes_.push_back({m0, mb, s.wtype == WoqWeightType::u4 ? block_fn<true>(mb) : block_fn<false>(mb)});
            m0 += mb;
        }
    }

    void run(const WoqCall& c) const override {
        const WoqSpec& s = s_;
        const WoqPacked& w = *c.w;
        const auto* x = static_cast<const uint16_t*>(c.args.A);
        // X's pairs k-major (xp[j * M + m]), and the sums of x over each group (offsets only): per
        // row, 16 partial sums (lane j: k = j mod 16), then those in order — the same values
        // whatever the thread count.
        static thread_local std::vector<uint32_t> xpv;
        static thread_local std::vector<float> xsv;
        const int64_t M = s.M, J = (s.K + 1) / 2;
        xpv.resize(static_cast<size_t>(J * M));
        uint32_t* xp = xpv.data();
        woq_prep_for(J, J * M, [&](int64_t j0, int64_t j1) {
            for (int64_t m = 0; m < M; ++m) {
                const uint16_t* xr = x + m * s.lda;
                for (int64_t j = j0; j < j1; ++j) {
                    if (2 * j + 1 < s.K) std::memcpy(xp + j * M + m, xr + 2 * j, 4);
                    else xp[j * M + m] = xr[2 * j];  // odd K: (x[K - 1], 0)
                }
            }
        });
        const float* xs = nullptr;
        if (w.has_offset) {
            xsv.resize(static_cast<size_t>(M * w.G));
            float* xsb = xsv.data();
            woq_prep_for(M, M * s.K, [&](int64_t m0, int64_t m1) {
                for (int64_t m = m0; m < m1; ++m)
                    for (int64_t g = 0; g < w.G; ++g) {
                        const uint16_t* xr = x + m * s.lda + g * w.gs;
                        const int64_t n = std::min(w.gs, s.K - g * w.gs);
                        float part[16] = {};
                        for (int64_t i = 0; i < n; ++i) part[i % 16] += bf16::to_float(xr[i]);
                        float sum = 0.0f;
                        for (float v : part) sum += v;
                        xsb[m * w.G + g] = sum;
                    }
            });
            xs = xsv.data();
        }
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, w.q_block_bytes));
        parallel_for(w.nblk, grain, [&](int64_t b0, int64_t b1) {
            alignas(64) float out[kWoqMaxDecodeM * 16];
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t n0 = b * 16, n1 = std::min(s.N, n0 + 16);
                for (const Pass& p : passes_) {
                    p.fn(w, b, xp + p.m0, M, xs ? xs + p.m0 * w.G : nullptr, out);
                    woq_epilogue(s, c, out, 16, p.m0, p.mb, n0, n1);
                }
            }
        });
    }

private:
    struct Pass {
        int64_t m0, mb;
        BlockFn fn;
    };
    WoqSpec s_;
    std::vector<Pass> passes_;
};

}  // namespace

namespace {
// -1: the default (AMD CPUs: on the device Xeon, 1 thread, 4096 x 4096, M = 16 without AMX the FMA
// kernel took 7.3 ms against these 9.4, and M = 1 was a draw over two runs, 1.21 / 1.01 ms against
// 1.27 / 0.91; on Zen 4 these are 1.2-1.8x faster), 0: off, 1: on wherever the instructions are.
// XK_WOQ_DP (read once) sets the start.
std::atomic<int> g_dp{[] {
    const char* e = std::getenv("XK_WOQ_DP");
    return e && *e ? (std::atoi(e) != 0 ? 1 : 0) : -1;
}()};
bool dp_on() {
    static const bool hw = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
    const bool amd = cpu_is_amd();
    const int v = g_dp.load(std::memory_order_relaxed);
    return hw && (v < 0 ? amd : v != 0);
}
}  // namespace

bool woq_dp_enabled() { return dp_on(); }
void set_woq_dp(int mode) { g_dp.store(mode < 0 ? -1 : mode != 0 ? 1 : 0, std::memory_order_relaxed); }

bool woq_u4_dp_supports(const WoqSpec& s) {
    return dp_on() && s.compute == WoqCompute::exact && s.wtype == WoqWeightType::u4 && s.a_type == DType::bf16 &&
           s.M <= kWoqMaxDecodeM && s.K > 0;
}

// s8 from M = 6: the conversion (VPMOVSXBD + CVTDQ2PS per 16 weights, VCVTNE2PS2BF16 + VPERMW per
// 32) costs more than the FMA kernel's, repaid from ~6 rows (Zen 4, one core, L2-resident: M = 4
// 0.95x, 6 1.18x, 8 1.27x, 16 1.5x the FMA kernel)
bool woq_s8_dp_supports(const WoqSpec& s) {
    return dp_on() && s.compute == WoqCompute::exact && s.wtype == WoqWeightType::s8 && s.a_type == DType::bf16 &&
           s.M >= 6 && s.M <= kWoqMaxDecodeM && s.K > 0;
}

std::shared_ptr<const WoqKernel> create_woq_dp(const WoqSpec& s) { return std::make_shared<WoqGemvDp>(s); }

}  // namespace xk::detail
