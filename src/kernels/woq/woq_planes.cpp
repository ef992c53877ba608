// int8 WOQ decode with VPDPBUSD, exact (entry avx512_vnni:woq_s8:planes; + VBMI): s8 weights,
// bf16 X, 1 <= M <= 4, WoqCompute::exact.
//
// A bf16 value is an 8-bit integer times a power of two, so a row of X is exactly an integer
// vector times one power of two: X[k] = x[k] * 2^(134 - Lmin) (Lmin: the lowest set bit of the
// row's significands, counted from 2^-134), |X| < 2^B with B = the row's span of bits. X is cut
// into P = ceil(B / 7) base-128 digits of |X|, each negated where x < 0 (-127..127: an s8), and
// each group's sum_k x q is exactly 2^(Lmin - 134) * sum_p 128^p sum_k d_p[k] q[k]:
// P integer dot products of s8 digits with the s8 weights, VPDPBUSD on the packed q as it lies
// (one VPERMB per 64 bytes gathers each channel's 4 k into a dword, XOR 0x80 makes it the unsigned
// operand q + 128; the group's 128 * sum_k d_p[k] is subtracted after). The int32 sums are exact
// (|sum| <= 255 * 128 * group length < 2^31 for groups up to 65536) and are combined in double,
// then rounded to f32 once: the group sums are the exact sums rounded (the FMA kernel's are those
// up to the fp32 roundings of its additions), then y += scale * sum + offset * sum_k x as every
// decode kernel. Per 64 weights: VPERMB + VPXOR + P VPDPBUSD (a broadcast operand from memory)
// against the FMA kernel's 4 x (VPMOVSXBD, CVTDQ2PS, FMA): on Zen 4 (one core, weights in L2) the
// inner loop streams 55-57 GB/s at P = 3-4 against the FMA loop's ~30.
//
// Typical rows need P = 3-5 (uniform (-1, 1): ~3-4; activations spanning 2^-17..2^7: 5). Rows that
// do not fit (P > 6, or rows needing more than 16 accumulators in all, or more than the FMA kernel's
// work: P summed over the rows >= 4M + 6), non-finite x, and groups longer than 65536 run the f32
// FMA kernel (avx512:woq_s8:gemv) for the call, so NaN / inf propagate as there.
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <array>
#include <utility>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "common/cpu_vendor.hpp"
#include "kernels/woq/woq.hpp"
#include "xk/isa.hpp"

#define XK_PLANES_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx512cd,fma")))

namespace xk::detail {
namespace {

constexpr int kMaxPlanes = 6;         // digits of a row (B <= 42 bits)
constexpr int kMaxL = 16;             // accumulators: planes summed over the rows
constexpr int64_t kMaxGroup = 65536;  // k of one group (the int32 sums stay exact)
constexpr int kMaxM = 4;
constexpr int64_t kBatch = 16;          // blocks streamed before their sums are combined
constexpr int64_t kBatchInts = 8192;    // at most 32 KiB of sums a batch (G * L * 16 int32 a block)
// Software prefetch distance in the weight stream, bytes: 4096 (as woq_kernels.inc), 0 (the line
// being read: none) on AMD CPUs (Zen 4, one core, M = 1 4096 x 4096 from DRAM, three runs
// alternating: 876-951 us against 988-1075 with 4 KiB). XK_WOQ_PF (read once) overrides it.
int64_t pf_distance() {
    static const int64_t v = [] {
        const char* e = std::getenv("XK_WOQ_PF");
        if (e && *e) return std::max<int64_t>(0, std::atoll(e));
        return cpu_is_amd() ? int64_t{0} : int64_t{4096};
    }();
    return v;
}

// The quantities of one call: per row m its planes [l0[m], l0[m] + P[m]) of the L accumulators,
// its scale exponent (x = X * 2^e2[m]); the digits xd[j * L + l] (4 bytes: k = 4j .. 4j + 3,
// zeros past K), the digit sums of each plane and group ds[l * G + g], the f32 group sums of x
// xs[m * G + g] (offsets only).
struct Prep {
    int L = 0;
    int P[kMaxM] = {}, l0[kMaxM] = {}, e2[kMaxM] = {};
    std::vector<int32_t> xd, ds;
    std::vector<float> xs;
};

// 16 bf16 (bits in dword lanes) -> their significands (1.m, or 0.m for a denormal), biased
// exponents (1 for denormals), sign mask. Non-finite: e == 0xFF.
struct Parts {
    __m512i sig, ee;
    __mmask16 neg, nf;
};
XK_PLANES_TARGET inline Parts parts(__m512i b) {
    const __m512i e = _mm512_and_si512(_mm512_srli_epi32(b, 7), _mm512_set1_epi32(0xFF));
    const __mmask16 norm = _mm512_test_epi32_mask(e, e);
    Parts p;
    p.sig = _mm512_mask_or_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x7F)), norm,
                                 _mm512_and_si512(b, _mm512_set1_epi32(0x7F)), _mm512_set1_epi32(0x80));
    p.ee = _mm512_max_epi32(e, _mm512_set1_epi32(1));
    p.neg = _mm512_test_epi32_mask(b, _mm512_set1_epi32(0x8000));
    p.nf = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF));
    return p;
}

XK_PLANES_TARGET inline __m512i load16(const uint16_t* x, int64_t n) {  // n <= 16 elements, zeros after
    const __mmask16 m = n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
    return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x));
}

// Row's span: lo / hi = the lowest / highest set bit of its significands from 2^-134 (sig times
// 2^(ee - 134)); a row of zeros: hi < lo. False if a value is not finite.
XK_PLANES_TARGET bool row_span(const uint16_t* x, int64_t K, int& lo, int& hi) {
    __m512i vlo = _mm512_set1_epi32(1 << 20), vhi = _mm512_set1_epi32(-(1 << 20));
    for (int64_t k = 0; k < K; k += 16) {
        const Parts p = parts(load16(x + k, K - k));
        if (p.nf) return false;
        const __mmask16 nz = _mm512_test_epi32_mask(p.sig, p.sig);
        const __m512i lowbit = _mm512_and_si512(p.sig, _mm512_sub_epi32(_mm512_setzero_si512(), p.sig));
        const __m512i c31 = _mm512_set1_epi32(31);
        // ctz = 31 - lzcnt(lowbit), top = 31 - lzcnt(sig)
        const __m512i l = _mm512_add_epi32(p.ee, _mm512_sub_epi32(c31, _mm512_lzcnt_epi32(lowbit)));
        const __m512i h = _mm512_add_epi32(p.ee, _mm512_sub_epi32(c31, _mm512_lzcnt_epi32(p.sig)));
        vlo = _mm512_mask_min_epi32(vlo, nz, vlo, l);
        vhi = _mm512_mask_max_epi32(vhi, nz, vhi, h);
    }
    lo = _mm512_reduce_min_epi32(vlo);
    hi = _mm512_reduce_max_epi32(vhi);
    return true;
}

// Digits of k in [k0, k1) of a row (lo: its lowest bit): digit p of |X| (X = sig * 2^(ee - lo)),
// negated for negative x, as bytes at xb[((k / 4) * L + l0 + p) * 4 + k % 4]; returns nothing,
// adds each plane's digit sum to ds[p].
XK_PLANES_TARGET void row_digits(const uint16_t* x, int64_t k0, int64_t k1, int lo, int P, int L, int l0, int8_t* xb,
                                 int64_t* ds) {
    __m512i sum[kMaxPlanes];
    for (int p = 0; p < P; ++p) sum[p] = _mm512_setzero_si512();
    alignas(16) int8_t tmp[16];
    for (int64_t k = k0; k < k1; k += 16) {
        const int64_t n = std::min<int64_t>(16, k1 - k);
        const Parts pt = parts(load16(x + k, n));
        const __m512i sh = _mm512_sub_epi32(pt.ee, _mm512_set1_epi32(lo));  // >= 0 for nonzero x
        for (int p = 0; p < P; ++p) {
            const __m512i t = _mm512_sub_epi32(sh, _mm512_set1_epi32(7 * p));  // shifts past 31 give 0
            __m512i d = _mm512_or_si512(_mm512_sllv_epi32(pt.sig, t),
                                        _mm512_srlv_epi32(pt.sig, _mm512_sub_epi32(_mm512_setzero_si512(), t)));
            d = _mm512_and_si512(d, _mm512_set1_epi32(127));
            d = _mm512_mask_sub_epi32(d, pt.neg, _mm512_setzero_si512(), d);
            sum[p] = _mm512_add_epi32(sum[p], d);
            _mm_store_si128(reinterpret_cast<__m128i*>(tmp), _mm512_cvtepi32_epi8(d));
            for (int64_t i = 0; i < n; i += 4) {
                const int64_t kk = k + i;  // (k0 % 4 == 0, so kk % 4 == 0)
                std::memcpy(xb + ((kk / 4) * L + l0 + p) * 4, tmp + i, 4);
            }
        }
    }
    for (int p = 0; p < P; ++p) ds[p] += _mm512_reduce_add_epi32(sum[p]);
}

// The stream of block b: its int32 sums of every group g and plane l to a32[(g * L + l) * 16 + c]
// (the digit sums' correction, the planes' combination and the scales are block_combine's, run
// later for a batch of blocks: see WoqPlanes::run).
template <int L>
XK_PLANES_TARGET void block_sums(const WoqPacked& w, int64_t b, const Prep& pr, int64_t pf, int32_t* a32) {
    alignas(64) uint8_t idx_b[64];
    for (int c = 0; c < 16; ++c)
        for (int r = 0; r < 4; ++r) idx_b[c * 4 + r] = static_cast<uint8_t>(r * 16 + c);
    const __m512i idx = _mm512_load_si512(idx_b);
    const __m512i x80 = _mm512_set1_epi8(static_cast<char>(0x80));
    const uint8_t* q = w.qb(b);
    const int64_t G = w.G, gs = w.gs, K = w.K;
    const int32_t* xd = pr.xd.data();
    for (int64_t g = 0; g < G; ++g) {
        __m512i acc[L];
        for (int l = 0; l < L; ++l) acc[l] = _mm512_setzero_si512();
        const int64_t k0 = g * gs, k1 = std::min(K, k0 + gs);
        const int64_t j0 = k0 / 4;  // (k0 % 4 == 0: gs is K or a multiple of 32)
        // j = jf < je (the last 1-3 k of K) reads a whole 64-byte line like the others: the bytes
        // past the block's K are the next block's q (or the scales after the last block: the same
        // allocation, WoqPacked) and meet digits of 0 (Prep: zeros past K), so they add nothing.
        // (A masked load there cost 5-8% of the read stream on Zen 4 in one loop, the mask built
        // every step; a separate masked step after the loop made GCC 12 copy the accumulators
        // between registers every step.)
        const int64_t je = (k1 + 3) / 4;
        if (pf > 0) {
            for (int64_t j = j0; j < je; ++j) {
                _mm_prefetch(reinterpret_cast<const char*>(q + j * 64 + pf), _MM_HINT_T0);
                const __m512i t = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, _mm512_loadu_si512(q + j * 64)), x80);
#pragma GCC unroll 16
                for (int l = 0; l < L; ++l) acc[l] = _mm512_dpbusd_epi32(acc[l], t, _mm512_set1_epi32(xd[j * L + l]));
            }
        } else {
            for (int64_t j = j0; j < je; ++j) {
                const __m512i t = _mm512_xor_si512(_mm512_permutexvar_epi8(idx, _mm512_loadu_si512(q + j * 64)), x80);
#pragma GCC unroll 16
                for (int l = 0; l < L; ++l) acc[l] = _mm512_dpbusd_epi32(acc[l], t, _mm512_set1_epi32(xd[j * L + l]));
            }
        }
        for (int l = 0; l < L; ++l) _mm512_store_si512(a32 + (g * L + l) * 16, acc[l]);
    }
}

// Block b, all rows, from its sums a32 (block_sums): out[m * 16 + c] = sum_k x[m, k] * w[c, k].
XK_PLANES_TARGET void block_combine(const WoqPacked& w, int64_t b, const Prep& pr, int M, const int32_t* a32, float* out) {
    const float* sc = w.sb(b);
    const float* of = w.ob(b);
    const int64_t G = w.G;
    const int L = pr.L;
    __m512 y[kMaxM];
    __m512d f[kMaxM];
    for (int m = 0; m < M; ++m) {
        y[m] = _mm512_setzero_ps();
        f[m] = _mm512_set1_pd(std::ldexp(1.0, pr.e2[m]));
    }
    const __m512d r = _mm512_set1_pd(128.0);
    for (int64_t g = 0; g < G; ++g) {
        const __m512 s = _mm512_loadu_ps(sc + g * 16);
        const __m512 o = of ? _mm512_loadu_ps(of + g * 16) : _mm512_setzero_ps();
        for (int m = 0; m < M; ++m) {
            // sum_p 128^p (acc_p - 128 * ds_p) in double (exact up to 2^53), times 2^e2, to f32 once
            __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
            for (int p = pr.P[m] - 1; p >= 0; --p) {
                const int l = pr.l0[m] + p;
                const __m512i a =
                    _mm512_sub_epi32(_mm512_load_si512(a32 + (g * L + l) * 16), _mm512_set1_epi32(128 * pr.ds[l * G + g]));
                lo = _mm512_fmadd_pd(lo, r, _mm512_cvtepi32_pd(_mm512_castsi512_si256(a)));
                hi = _mm512_fmadd_pd(hi, r, _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(a, 1)));
            }
            const __m512 sum = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(_mm512_mul_pd(lo, f[m]))),
                                                  _mm512_cvtpd_ps(_mm512_mul_pd(hi, f[m])), 1);
            y[m] = _mm512_fmadd_ps(sum, s, y[m]);
            if (of) y[m] = _mm512_fmadd_ps(_mm512_set1_ps(pr.xs[m * G + g]), o, y[m]);
        }
    }
    for (int m = 0; m < M; ++m) _mm512_storeu_ps(out + m * 16, y[m]);
}

using SumsFn = void (*)(const WoqPacked&, int64_t, const Prep&, int64_t, int32_t*);

template <int... Ls>
constexpr auto make_table(std::integer_sequence<int, Ls...>) {
    return std::array<SumsFn, sizeof...(Ls)>{&block_sums<Ls + 1>...};
}
constexpr auto kSumsFns = make_table(std::make_integer_sequence<int, kMaxL>{});

// The digits of the call's rows; false: run the FMA kernel (non-finite x, too many planes).
XK_PLANES_TARGET bool prepare(const WoqSpec& s, const WoqCall& c, Prep& pr) {
    const WoqPacked& w = *c.w;
    const int64_t M = s.M, K = s.K, G = w.G;
    if (w.gs > kMaxGroup) return false;
    const auto* x = static_cast<const uint16_t*>(c.args.A);
    int lo[kMaxM], L = 0;
    for (int64_t m = 0; m < M; ++m) {
        int hi;
        if (!row_span(x + m * s.lda, K, lo[m], hi)) return false;
        const int B = hi >= lo[m] ? hi - lo[m] + 1 : 0;  // |X| < 2^B
        pr.P[m] = std::max(1, (B + 6) / 7);
        if (pr.P[m] > kMaxPlanes) return false;
        pr.l0[m] = L;
        pr.e2[m] = hi >= lo[m] ? lo[m] - 134 : 0;
        if (hi < lo[m]) lo[m] = 0;
        L += pr.P[m];
    }
    if (L > kMaxL || L >= 4 * M + 6) return false;
    pr.L = L;
    const int64_t J = (K + 3) / 4;
    pr.xd.resize(static_cast<size_t>(J * L));
    if (K % 4) std::memset(pr.xd.data() + (J - 1) * L, 0, static_cast<size_t>(L) * 4);  // (digits past K: 0)
    pr.ds.assign(static_cast<size_t>(L * G), 0);
    if (w.has_offset) pr.xs.assign(static_cast<size_t>(M * G), 0.0f);
    auto* xb = reinterpret_cast<int8_t*>(pr.xd.data());
    for (int64_t m = 0; m < M; ++m) {
        const int P = pr.P[m];
        for (int64_t g = 0; g < G; ++g) {
            int64_t ds[kMaxPlanes] = {};
            row_digits(x + m * s.lda, g * w.gs, std::min(K, (g + 1) * w.gs), lo[m], P, L, pr.l0[m], xb, ds);
            double xsum = 0;  // sum_k x = 2^e2 sum_p 128^p (digit sums): exact in double up to 2^53
            for (int p = P - 1; p >= 0; --p) {
                pr.ds[(pr.l0[m] + p) * G + g] = static_cast<int32_t>(ds[p]);
                xsum = xsum * 128.0 + static_cast<double>(ds[p]);
            }
            if (w.has_offset) pr.xs[m * G + g] = static_cast<float>(std::ldexp(xsum, pr.e2[m]));
        }
    }
    return true;
}

// 1 / 0: on / off; starts from XK_WOQ_PLANES (read once; unset: on).
int planes_start() {
    static const int v = [] {
        const char* e = std::getenv("XK_WOQ_PLANES");
        return e && *e && std::atoi(e) == 0 ? 0 : 1;
    }();
    return v;
}
std::atomic<int> g_planes{planes_start()};

class WoqPlanes final : public WoqKernel {
public:
    explicit WoqPlanes(const WoqSpec& s) : s_(s), fallback_(create_woq_gemv_avx512(s)) {}

    void run(const WoqCall& c) const override {
        static thread_local Prep prep;
        Prep& pr = prep;  // (the workers read the caller's)
        if (!prepare(s_, c, pr)) {
            fallback_->run(c);
            return;
        }
        const WoqPacked& w = *c.w;
        const SumsFn fn = kSumsFns[static_cast<size_t>(pr.L - 1)];
        const int M = static_cast<int>(s_.M);
        const int64_t pf = pf_distance();
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / std::max<int64_t>(1, w.q_block_bytes));
        // Blocks in batches: the sums of up to kBatch blocks streamed back to back, then their
        // combination and epilogue. (Zen 4, one core, 4096 x 4096 from DRAM on 2 MiB pages: the
        // combination after every block's stream held it at 22-24 GB/s, batches of 16 blocks
        // 26-27, the stream alone 26-28: the core's read stream slows at each pause of the loads.)
        const int64_t per_block = w.G * pr.L * 16;  // int32 sums of a block
        const int64_t batch = std::clamp<int64_t>(kBatchInts / per_block, 1, kBatch);
        parallel_for(w.nblk, grain, [&](int64_t b0, int64_t b1) {
            alignas(64) float out[kMaxM * 16];
            static thread_local std::vector<int32_t> sums_buf;
            const size_t need = static_cast<size_t>(batch * per_block + 16);
            if (sums_buf.size() < need) sums_buf.resize(need);
            int32_t* a32 = reinterpret_cast<int32_t*>((reinterpret_cast<uintptr_t>(sums_buf.data()) + 63) / 64 * 64);
            for (int64_t bb = b0; bb < b1; bb += batch) {
                const int64_t be = std::min(b1, bb + batch);
                for (int64_t b = bb; b < be; ++b) fn(w, b, pr, pf, a32 + (b - bb) * per_block);
                for (int64_t b = bb; b < be; ++b) {
                    block_combine(w, b, pr, M, a32 + (b - bb) * per_block, out);
                    woq_epilogue(s_, c, out, 16, 0, M, b * 16, std::min(s_.N, b * 16 + 16));
                }
            }
        });
    }

private:
    WoqSpec s_;
    std::shared_ptr<const WoqKernel> fallback_;
};

}  // namespace

// On wherever the instructions are (Zen 4, one core, L2-resident M = 1 4096-K weights: 36.9 vs
// 28.7 GB/s of the FMA kernel; device Xeon from DRAM, 1 thread 96% of the read vs 91-92%, 16
// threads 93-99% vs 93-94%) unless XK_WOQ_PLANES=0; set_woq_planes(1 / 0 / -1): on / off / the start.
bool woq_planes_enabled() {
    static const bool hw = woq_vnni_supported();
    return hw && g_planes.load(std::memory_order_relaxed) != 0;
}
void set_woq_planes(int mode) { g_planes.store(mode < 0 ? planes_start() : mode != 0 ? 1 : 0, std::memory_order_relaxed); }

bool woq_planes_supports(const WoqSpec& s) {
    return woq_planes_enabled() && s.compute == WoqCompute::exact && s.wtype == WoqWeightType::s8 &&
           s.a_type == DType::bf16 && s.M >= 1 && s.M <= kMaxM && s.K > 0;
}

std::shared_ptr<const WoqKernel> create_woq_planes(const WoqSpec& s) { return std::make_shared<WoqPlanes>(s); }

}  // namespace xk::detail
