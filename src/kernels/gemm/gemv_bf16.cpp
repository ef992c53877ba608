// bf16 decode GEMM (bf16 x bf16 -> f32 | bf16, M <= kGemvBf16MaxM): the weights B streamed once,
// in bf16 (half the bytes of fp32 weights), widened in registers (a 16-bit shift or a mask: the
// products are exact) into FMAs against op(A) widened to f32 once per call. AVX-512 code compiled
// with target attributes (intrinsics: memory-bound, so no generated code is needed).
//
// B comes three ways, each read in its memory order:
//   - packed (a PackedB of this ISA's blocked kernel, so one packed weight serves every M), read
//     K block by K block (a thread's panels of one block are contiguous: memory order):
//     widened layout (avx512: K blocks of 32-column panels, rows of 32 bf16) — the even and odd
//     columns of a row taken by a shift and a mask into two accumulators, interleaved back at the
//     end; or the pairs layout (avx512_bf16, VDPBF16PS kernel's PackedB) — the low and high half
//     of each 32-bit pair (k even, k odd) into the same accumulator in increasing k;
//   - plain [K x N] (trans_b N): a row sweep — each thread owns a column range, accumulators of
//     kSweepFloats / M columns (16 KiB, L1), four rows of B at a time added to them (rows read along N);
//   - plain B^T [N x K] (trans_b T, PyTorch's W): dot products along the rows of W, 8 (M = 1) or
//     4 rows at a time, 32 k per step (masked tail), horizontal sums at the end.
// Each element is summed in fp32: in increasing k for the packed and row-sweep paths (the
// reference's order: the products are exact, so those are the reference's sums), in 32 interleaved
// partial sums for the dot path. Then the epilogue (scalar, the reference's expressions) and the
// store (bf16 C rounded to nearest even). Columns split over threads in whole 32-column groups;
// results do not depend on the thread count.
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands) when they are
// inlined into target-attribute functions: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstring>

#include "common/activation.hpp"
#include "common/parallel.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"

#define XK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace xk::detail {
namespace {

constexpr int64_t kSweepFloats = 4096;  // row sweep: columns x rows of one accumulator block (16 KiB: L1)
constexpr int64_t kSweepRows = 256;     // row sweep, M > 4: rows of B per K block

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

XK_AVX512 inline __m512 lo_half(__m512i u) { return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)); }
XK_AVX512 inline __m512 hi_half(__m512i u) {
    return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// 16 bf16 -> 16 f32 in order.
XK_AVX512 inline __m512 widen16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }

class GemvBf16 final : public GemmKernel {
public:
    GemvBf16(const GemmSpec& s, Isa isa) : s_(s), layout_(gemm_b_layout(isa, s.K, s.N, DType::bf16)) {}

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return gemm_jit_pack_b(s_, layout_, B); }
    std::string packed_layout() const override { return layout_.name; }

    void run(const GemmCall& call) const override {
        const GemmSpec& s = s_;
        const int64_t M = s.M, K = s.K, N = s.N;
        // op(A) widened once: af[m * kpad + k], zero past K (the pair pad and the dot's last step).
        // (Rows 64 bytes off a multiple of 4 KiB apart: 16 rows at a 16 KiB stride (K = 4096)
        // shared one L1 set.)
        int64_t kpad = 0;
        const float* af = gemv_bf16_widen_a(s, call.args.A, 32, kpad);
        const int64_t groups = ceil_div(N, 32);
        // Chunks of at least ~256 KiB of weights (fewer threads for small B).
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(1, K * 32));
        parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
            const int64_t n0 = g0 * 32, n1 = std::min(N, g1 * 32);
            if (call.packed_b) {
                // K block by K block: the range's panels of one block are contiguous in the layout,
                // so the weights are read in memory order; the sums of the range (M x 32 per
                // panel, at most 2 MiB) stay in L2 between blocks. Row tiles of up to 4 re-read a
                // panel's block (<= 32 KiB) from L1.
                float* acc = gemm_thread_buffer(4, static_cast<size_t>((g1 - g0) * M * 32));
                const auto* P = static_cast<const uint16_t*>(call.packed_b->data);
                for (int64_t pc = 0; pc < K; pc += layout_.kc) {
                    const int64_t kcb = std::min(layout_.kc, K - pc);
                    // (4 panels at once for M = 1, else 2: at least 16 independent FMA chains;
                    // one panel's 2 per row were latency-bound.)
                    const int64_t pp = M == 1 ? 4 : 2;
                    for (int64_t g = g0; g < g1;) {
                        const int np = g + pp <= g1 ? static_cast<int>(pp) : 1;
                        const uint16_t* src = P + layout_.offset(pc, g, kcb);
                        float* a = acc + (g - g0) * M * 32;
                        for (int64_t m0 = 0; m0 < M; m0 += 4) {
                            const int mm = static_cast<int>(std::min<int64_t>(4, M - m0));
                            if (layout_.pairs)
                                panel_pairs(src, kcb, af + m0 * kpad + pc, kpad, a + m0 * 32, M * 32, pc == 0, mm, np);
                            else
                                panel_wide(src, kcb, af + m0 * kpad + pc, kpad, a + m0 * 32, M * 32, pc == 0, mm, np);
                        }
                        g += np;
                    }
                }
                for (int64_t g = g0; g < g1; ++g) {
                    float* a = acc + (g - g0) * M * 32;
                    if (!layout_.pairs) interleave(a, M);
                    epilogue(call, a, 32, g * 32, std::min(N, g * 32 + 32));
                }
            } else if (s.trans_b == Trans::N && M > 4) {
                // Several row tiles: B copied, K block by K block, into the widened panel
                // layout (groups of 8 panels: rows of 512 bytes read from B) and run as packed
                // (the row sweep's accumulators in memory made it load / store bound: 37-45% of
                // the FMA peak at 16 x 4096 x 4096 against 65-90% for the panels).
                float* acc = gemm_thread_buffer(4, static_cast<size_t>((g1 - g0) * M * 32));
                auto* tmp = reinterpret_cast<uint16_t*>(gemm_thread_buffer(1, static_cast<size_t>(8 * kSweepRows * 16)));
                for (int64_t pc = 0; pc < K; pc += kSweepRows) {
                    const int64_t kcb = std::min(kSweepRows, K - pc);
                    for (int64_t g = g0; g < g1; g += 8) {
                        const int64_t ng = std::min<int64_t>(8, g1 - g);
                        copy_panels(call, pc, kcb, g, ng, tmp);
                        for (int64_t p = 0; p < ng; p += 2) {
                            const int np = p + 2 <= ng ? 2 : 1;
                            for (int64_t m0 = 0; m0 < M; m0 += 4)
                                panel_wide(tmp + p * kcb * 32, kcb, af + m0 * kpad + pc, kpad,
                                           acc + (g + p - g0) * M * 32 + m0 * 32, M * 32, pc == 0,
                                           static_cast<int>(std::min<int64_t>(4, M - m0)), np);
                        }
                    }
                }
                for (int64_t g = g0; g < g1; ++g) {
                    float* a = acc + (g - g0) * M * 32;
                    interleave(a, M);
                    epilogue(call, a, 32, g * 32, std::min(N, g * 32 + 32));
                }
            } else if (s.trans_b == Trans::N) {
                // Column blocks whose accumulators (M x cols) fit 16 KiB of L1. With M > 4 the
                // blocks are narrow (<= 1 KiB of a row), so K goes in blocks of kSweepRows rows,
                // each swept over every column block: the rows of one K block span few enough
                // pages for the TLB, however often the column blocks revisit them (without it,
                // 16 x 4096 x 4096 walked a new page per row per block: 40% of the FMA peak).
                const int64_t cols = std::max<int64_t>(128, kSweepFloats / M / 16 * 16);
                int64_t ld = (n1 - n0 + 15) / 16 * 16;
                if (ld % 1024 == 0) ld += 16;  // (the rows' sets, as af's)
                const int64_t kb = M > 4 ? kSweepRows : K;
                float* acc = gemm_thread_buffer(4, static_cast<size_t>(M * ld));
                for (int64_t k0 = 0; k0 < K; k0 += kb)
                    for (int64_t c0 = n0; c0 < n1; c0 += cols)
                        sweep(call, af, kpad, c0, std::min(n1, c0 + cols), k0, std::min(K, k0 + kb), acc + (c0 - n0), ld);
                epilogue(call, acc, ld, n0, n1);
            } else {
                float* acc = gemm_thread_buffer(4, static_cast<size_t>(M * 32));
                for (int64_t c0 = n0; c0 < n1; c0 += 32) {
                    const int64_t c1 = std::min(n1, c0 + 32);
                    if (M == 1)
                        dots<1, 8>(call, af, kpad, c0, c1, acc);
                    else
                        dots_m(call, af, kpad, c0, c1, acc);  // (row tiles of 4 inside)
                    epilogue(call, acc, 32, c0, c1);
                }
            }
        });
    }

private:
    void epilogue(const GemmCall& call, const float* acc, int64_t ld, int64_t c0, int64_t c1) const {
        gemv_bf16_epilogue(s_, call, acc, ld, c0, c1);
    }

    // Packed, widened layout: one K block of a panel (rows of 32 bf16, kcb rows at src), rows
    // x[m * kpad + k]; the even / odd columns in acc[m * 32 + 0..15] / [16..31] (interleave()
    // puts them in order after the last block). first: the sums start at 0.
    // PP consecutive panels of the block at once (panel stride kcb * 32, sums at acc + p * ldp).
    template <int MM, int PP>
    XK_AVX512 void panel_wide_m(const uint16_t* src, int64_t kcb, const float* x, int64_t kpad, float* acc,
                                int64_t ldp, bool first) const {
        __m512 e[PP][MM], o[PP][MM];
        for (int p = 0; p < PP; ++p)
            for (int m = 0; m < MM; ++m) {
                e[p][m] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + p * ldp + m * 32);
                o[p][m] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + p * ldp + m * 32 + 16);
            }
        for (int64_t k = 0; k < kcb; ++k) {
            __m512 av[MM];
            for (int m = 0; m < MM; ++m) av[m] = _mm512_set1_ps(x[m * kpad + k]);
            for (int p = 0; p < PP; ++p) {
                const __m512i u = _mm512_load_si512(src + p * kcb * 32 + k * 32);
                const __m512 lo = lo_half(u), hi = hi_half(u);
                for (int m = 0; m < MM; ++m) {
                    e[p][m] = _mm512_fmadd_ps(lo, av[m], e[p][m]);
                    o[p][m] = _mm512_fmadd_ps(hi, av[m], o[p][m]);
                }
            }
        }
        for (int p = 0; p < PP; ++p)
            for (int m = 0; m < MM; ++m) {
                _mm512_store_ps(acc + p * ldp + m * 32, e[p][m]);
                _mm512_store_ps(acc + p * ldp + m * 32 + 16, o[p][m]);
            }
    }
    void panel_wide(const uint16_t* src, int64_t kcb, const float* x, int64_t kpad, float* acc, int64_t ldp, bool first,
                    int mm, int np) const {
        if (np == 4 && mm == 1) return panel_wide_m<1, 4>(src, kcb, x, kpad, acc, ldp, first);
        if (np == 2) {
            switch (mm) {
                case 1: return panel_wide_m<1, 2>(src, kcb, x, kpad, acc, ldp, first);
                case 2: return panel_wide_m<2, 2>(src, kcb, x, kpad, acc, ldp, first);
                case 3: return panel_wide_m<3, 2>(src, kcb, x, kpad, acc, ldp, first);
                default: return panel_wide_m<4, 2>(src, kcb, x, kpad, acc, ldp, first);
            }
        }
        switch (mm) {
            case 1: panel_wide_m<1, 1>(src, kcb, x, kpad, acc, ldp, first); break;
            case 2: panel_wide_m<2, 1>(src, kcb, x, kpad, acc, ldp, first); break;
            case 3: panel_wide_m<3, 1>(src, kcb, x, kpad, acc, ldp, first); break;
            default: panel_wide_m<4, 1>(src, kcb, x, kpad, acc, ldp, first); break;
        }
    }
    // Even / odd columns (acc[m * 32 + 0..15] / [16..31]) back in column order, rows [0, M).
    XK_AVX512 static void interleave(float* acc, int64_t M) {
        const __m512i i0 = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i i1 = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        for (int64_t m = 0; m < M; ++m) {
            const __m512 e = _mm512_load_ps(acc + m * 32), o = _mm512_load_ps(acc + m * 32 + 16);
            _mm512_store_ps(acc + m * 32, _mm512_permutex2var_ps(e, i0, o));
            _mm512_store_ps(acc + m * 32 + 16, _mm512_permutex2var_ps(e, i1, o));
        }
    }

    // Packed, pairs layout: one K block of a panel, rows of 32 pairs (k even in the low half), 2
    // vectors of 16 columns; x is zero past K (the pad of an odd K's last pair).
    template <int MM, int PP>
    XK_AVX512 void panel_pairs_m(const uint16_t* src, int64_t kcb, const float* x, int64_t kpad, float* acc,
                                 int64_t ldp, bool first) const {
        __m512 c0[PP][MM], c1[PP][MM];
        for (int p = 0; p < PP; ++p)
            for (int m = 0; m < MM; ++m) {
                c0[p][m] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + p * ldp + m * 32);
                c1[p][m] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + p * ldp + m * 32 + 16);
            }
        const int64_t kp = (kcb + 1) / 2;
        for (int64_t kk = 0; kk < kp; ++kk) {
            __m512 a0[MM], a1[MM];
            for (int m = 0; m < MM; ++m) {
                a0[m] = _mm512_set1_ps(x[m * kpad + 2 * kk]);
                a1[m] = _mm512_set1_ps(x[m * kpad + 2 * kk + 1]);
            }
            for (int p = 0; p < PP; ++p) {
                const uint16_t* r = src + p * kp * 64 + kk * 64;
                const __m512i u0 = _mm512_load_si512(r), u1 = _mm512_load_si512(r + 32);
                const __m512 l0 = lo_half(u0), h0 = hi_half(u0), l1 = lo_half(u1), h1 = hi_half(u1);
                for (int m = 0; m < MM; ++m) {
                    c0[p][m] = _mm512_fmadd_ps(l0, a0[m], c0[p][m]);
                    c1[p][m] = _mm512_fmadd_ps(l1, a0[m], c1[p][m]);
                    c0[p][m] = _mm512_fmadd_ps(h0, a1[m], c0[p][m]);
                    c1[p][m] = _mm512_fmadd_ps(h1, a1[m], c1[p][m]);
                }
            }
        }
        for (int p = 0; p < PP; ++p)
            for (int m = 0; m < MM; ++m) {
                _mm512_store_ps(acc + p * ldp + m * 32, c0[p][m]);
                _mm512_store_ps(acc + p * ldp + m * 32 + 16, c1[p][m]);
            }
    }
    void panel_pairs(const uint16_t* src, int64_t kcb, const float* x, int64_t kpad, float* acc, int64_t ldp, bool first,
                     int mm, int np) const {
        if (np == 4 && mm == 1) return panel_pairs_m<1, 4>(src, kcb, x, kpad, acc, ldp, first);
        if (np == 2) {
            switch (mm) {
                case 1: return panel_pairs_m<1, 2>(src, kcb, x, kpad, acc, ldp, first);
                case 2: return panel_pairs_m<2, 2>(src, kcb, x, kpad, acc, ldp, first);
                case 3: return panel_pairs_m<3, 2>(src, kcb, x, kpad, acc, ldp, first);
                default: return panel_pairs_m<4, 2>(src, kcb, x, kpad, acc, ldp, first);
            }
        }
        switch (mm) {
            case 1: panel_pairs_m<1, 1>(src, kcb, x, kpad, acc, ldp, first); break;
            case 2: panel_pairs_m<2, 1>(src, kcb, x, kpad, acc, ldp, first); break;
            case 3: panel_pairs_m<3, 1>(src, kcb, x, kpad, acc, ldp, first); break;
            default: panel_pairs_m<4, 1>(src, kcb, x, kpad, acc, ldp, first); break;
        }
    }

    // Plain [K x N]: rows [pc, pc + kcb) x panels [g, g + ng) of B into the widened panel layout
    // at dst (panel p at p * kcb * 32; columns past N: 0).
    XK_AVX512 void copy_panels(const GemmCall& call, int64_t pc, int64_t kcb, int64_t g, int64_t ng, uint16_t* dst) const {
        const auto* B = static_cast<const uint16_t*>(call.args.B);
        const int64_t ldb = s_.ldb, N = s_.N;
        for (int64_t k = 0; k < kcb; ++k) {
            const uint16_t* r = B + (pc + k) * ldb;
            for (int64_t p = 0; p < ng; ++p) {
                const int64_t c = (g + p) * 32, w = std::min<int64_t>(32, N - c);
                const __mmask32 mk = w >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << w) - 1);
                _mm512_store_si512(dst + p * kcb * 32 + k * 32, _mm512_maskz_loadu_epi16(mk, r + c));
            }
        }
    }

    // Plain [K x N]: rows [k0, k1) of B added into acc[m * ld + j] over columns [c0, c1) (k0 = 0:
    // from 0), rows four at a time.
    XK_AVX512 void sweep(const GemmCall& call, const float* af, int64_t kpad, int64_t c0, int64_t c1, int64_t k0,
                         int64_t K, float* acc, int64_t ld) const {
        const int64_t M = s_.M, ldb = s_.ldb, w = c1 - c0;
        const auto* B = static_cast<const uint16_t*>(call.args.B) + c0;
        const int64_t nv = ceil_div(w, 16);
        if (k0 == 0)
            for (int64_t m = 0; m < M; ++m) std::fill(acc + m * ld, acc + m * ld + nv * 16, 0.0f);
        const int64_t tail = w - (nv - 1) * 16;
        const __mmask16 tmask = static_cast<__mmask16>(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
        int64_t k = k0;
        // Two vectors (32 columns) a step: each row's four broadcasts serve both (loads, not
        // FMAs, bound the one-vector loop for M > 4).
        auto mask = [&](int64_t v) { return v + 1 < nv ? static_cast<__mmask16>(0xFFFF) : tmask; };
        for (; k + 4 <= K; k += 4) {
            const uint16_t* r = B + k * ldb;
            for (int64_t v = 0; v < nv; v += 2) {
                const bool two = v + 1 < nv;
                __m512 b[2][4];
                for (int i = 0; i < 4; ++i) {
                    b[0][i] = widen16(_mm256_maskz_loadu_epi16(mask(v), r + i * ldb + v * 16));
                    b[1][i] = two ? widen16(_mm256_maskz_loadu_epi16(mask(v + 1), r + i * ldb + v * 16 + 16))
                                  : _mm512_setzero_ps();
                }
                for (int64_t m = 0; m < M; ++m) {
                    float* a = acc + m * ld + v * 16;
                    const float* x = af + m * kpad + k;
                    const __m512 x0 = _mm512_set1_ps(x[0]), x1 = _mm512_set1_ps(x[1]), x2 = _mm512_set1_ps(x[2]),
                                 x3 = _mm512_set1_ps(x[3]);
                    __m512 c = _mm512_load_ps(a);
                    c = _mm512_fmadd_ps(b[0][0], x0, c);
                    c = _mm512_fmadd_ps(b[0][1], x1, c);
                    c = _mm512_fmadd_ps(b[0][2], x2, c);
                    c = _mm512_fmadd_ps(b[0][3], x3, c);
                    _mm512_store_ps(a, c);
                    if (two) {
                        __m512 d = _mm512_load_ps(a + 16);
                        d = _mm512_fmadd_ps(b[1][0], x0, d);
                        d = _mm512_fmadd_ps(b[1][1], x1, d);
                        d = _mm512_fmadd_ps(b[1][2], x2, d);
                        d = _mm512_fmadd_ps(b[1][3], x3, d);
                        _mm512_store_ps(a + 16, d);
                    }
                }
            }
        }
        for (; k < K; ++k) {
            const uint16_t* r = B + k * ldb;
            for (int64_t v = 0; v < nv; ++v) {
                const __mmask16 mk = v + 1 < nv ? static_cast<__mmask16>(0xFFFF) : tmask;
                const __m512 b0 = widen16(_mm256_maskz_loadu_epi16(mk, r + v * 16));
                for (int64_t m = 0; m < M; ++m) {
                    float* a = acc + m * ld + v * 16;
                    _mm512_store_ps(a, _mm512_fmadd_ps(b0, _mm512_set1_ps(af[m * kpad + k]), _mm512_load_ps(a)));
                }
            }
        }
    }

    // Plain B^T [N x K]: columns [c0, c1) (<= 32) in groups of J rows of W, 32 k a step.
    template <int MM, int J>
    XK_AVX512 void dots(const GemmCall& call, const float* af, int64_t kpad, int64_t c0, int64_t c1, float* acc) const {
        dots_at<MM, J>(call, af, kpad, c0, c1, acc, c0, c1);
    }
    // Columns [n_lo, n_hi) of the block [c0, c1) (acc column 0 is c0), rows af[0..MM).
    template <int MM, int J>
    XK_AVX512 void dots_at(const GemmCall& call, const float* af, int64_t kpad, int64_t c0, int64_t c1, float* acc,
                           int64_t n_lo, int64_t n_hi) const {
        const int64_t K = s_.K, ldb = s_.ldb;
        const auto* B = static_cast<const uint16_t*>(call.args.B);
        const int64_t ksteps = ceil_div(K, 32);
        const int64_t tail = K - (ksteps - 1) * 32;
        const __mmask32 tmask = tail >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << tail) - 1);
        for (int64_t n = n_lo; n < n_hi; n += J) {
            const uint16_t* row[J];
            for (int j = 0; j < J; ++j) row[j] = B + std::min(n + j, n_hi - 1) * ldb;
            __m512 c[MM][J];
            for (int m = 0; m < MM; ++m)
                for (int j = 0; j < J; ++j) c[m][j] = _mm512_setzero_ps();
            for (int64_t t = 0; t < ksteps; ++t) {
                const __mmask32 mk = t + 1 < ksteps ? 0xFFFFFFFFu : tmask;
                __m512 a0[MM], a1[MM];
                for (int m = 0; m < MM; ++m) {
                    a0[m] = _mm512_loadu_ps(af + m * kpad + t * 32);
                    a1[m] = _mm512_loadu_ps(af + m * kpad + t * 32 + 16);
                }
                for (int j = 0; j < J; ++j) {
                    const __m512i u = _mm512_maskz_loadu_epi16(mk, row[j] + t * 32);
                    const __m512 w0 = widen16(_mm512_castsi512_si256(u)), w1 = widen16(_mm512_extracti64x4_epi64(u, 1));
                    for (int m = 0; m < MM; ++m) {
                        c[m][j] = _mm512_fmadd_ps(w0, a0[m], c[m][j]);
                        c[m][j] = _mm512_fmadd_ps(w1, a1[m], c[m][j]);
                    }
                }
            }
            for (int m = 0; m < MM; ++m)
                for (int j = 0; j < J && n + j < n_hi; ++j) acc[m * 32 + (n + j - c0)] = _mm512_reduce_add_ps(c[m][j]);
        }
    }
    // M > 1: per group of 4 rows of W, every row tile of 4 (W's rows re-read from L1).
    void dots_m(const GemmCall& call, const float* af, int64_t kpad, int64_t c0, int64_t c1, float* acc) const {
        for (int64_t n = c0; n < c1; n += 4) {
            const int64_t n1 = std::min(c1, n + 4);
            for (int64_t m0 = 0; m0 < s_.M; m0 += 4) {
                const float* a = af + m0 * kpad;
                float* c = acc + m0 * 32;
                switch (std::min<int64_t>(4, s_.M - m0)) {
                    case 1: dots_at<1, 4>(call, a, kpad, c0, c1, c, n, n1); break;
                    case 2: dots_at<2, 4>(call, a, kpad, c0, c1, c, n, n1); break;
                    case 3: dots_at<3, 4>(call, a, kpad, c0, c1, c, n, n1); break;
                    default: dots_at<4, 4>(call, a, kpad, c0, c1, c, n, n1); break;
                }
            }
        }
    }

    GemmSpec s_;
    GemmBLayout layout_;
};

}  // namespace

float* gemv_bf16_widen_a(const GemmSpec& s, const void* Av, int64_t align, int64_t& kpad) {
    // (Rows 64 bytes off a multiple of 4 KiB apart: 16 rows at a 16 KiB stride (K = 4096) shared
    // one L1 set.)
    kpad = (s.K + align - 1) / align * align;
    if (kpad % 1024 == 0) kpad += 16;
    float* af = gemm_thread_buffer(2, static_cast<size_t>(s.M * kpad));
    const auto* A = static_cast<const uint16_t*>(Av);
    for (int64_t m = 0; m < s.M; ++m) {
        float* d = af + m * kpad;
        for (int64_t k = 0; k < s.K; ++k) {
            const uint32_t u = static_cast<uint32_t>(s.trans_a == Trans::N ? A[m * s.lda + k] : A[k * s.lda + m]) << 16;
            std::memcpy(d + k, &u, 4);
        }
        std::fill(d + s.K, d + kpad, 0.0f);
    }
    return af;
}

void gemv_bf16_epilogue(const GemmSpec& s, const GemmCall& call, const float* acc, int64_t ld, int64_t c0, int64_t c1) {
    const GemmArgs& a = call.args;
    for (int64_t m = 0; m < s.M; ++m)
        for (int64_t n = c0; n < c1; ++n) {
            float x = call.alpha * acc[m * ld + (n - c0)];
            if (s.beta != BetaKind::zero) {
                const float c = s.c_type == DType::bf16 ? static_cast<const bf16*>(a.C)[m * s.ldc + n].to_float()
                                                        : static_cast<const float*>(a.C)[m * s.ldc + n];
                x = x + call.beta * c;
            }
            if (s.epilogue.bias) x = x + a.bias[n];
            x = apply_activation(s.epilogue.act, x);
            if (s.epilogue.residual)
                x = x + (s.residual_type == DType::bf16
                             ? static_cast<const bf16*>(a.residual)[m * s.ld_residual + n].to_float()
                             : static_cast<const float*>(a.residual)[m * s.ld_residual + n]);
            if (s.c_type == DType::bf16)
                static_cast<bf16*>(a.C)[m * s.ldc + n] = bf16(x);
            else
                static_cast<float*>(a.C)[m * s.ldc + n] = x;
        }
}

bool gemv_bf16_supports(const GemmSpec& s) { return gemm_jit_bf16_any_supports(s) && s.M <= kGemvBf16MaxM; }
bool gemv_bf16_dp_supports(const GemmSpec& s) { return gemv_bf16_supports(s) && gemm_bf16_dp_fast(); }

std::shared_ptr<const GemmKernel> create_gemv_bf16(const GemmSpec& s, Isa isa) {
    if (!gemv_bf16_supports(s)) throw Error(Status::unsupported, "gemm bf16 gemv: " + s.key() + " is not supported");
    return std::make_shared<GemvBf16>(s, isa);
}

}  // namespace xk::detail
