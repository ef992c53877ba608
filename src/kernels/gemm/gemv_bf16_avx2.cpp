// bf16 decode GEMM on AVX2 + FMA (bf16 x bf16 -> f32 | bf16, M <= kGemvBf16MaxM): the AVX2 form
// of gemv_bf16.cpp for CPUs without AVX-512 (Zen 2 / 3, client cores). The weights B are streamed
// once in bf16 and widened in registers (a 16-bit shift or a mask: the products of two bf16 values
// are exact in fp32) into FMAs against op(A) widened to f32 once per call.
//
// B comes three ways, each read in its memory order:
//   - packed (a PackedB of the AVX2 blocked kernel, so one packed weight serves every M): K blocks
//     of 16-column panels, rows of 16 bf16 — the even and odd columns of a row taken by a shift and
//     a mask into two accumulators, interleaved back at the end;
//   - plain [K x N] (trans_b N): a row sweep — each thread owns a column range, accumulators of
//     kSweepFloats / M columns (16 KiB, L1), four rows of B at a time added to them;
//   - plain B^T [N x K] (trans_b T, PyTorch's W): dot products along the rows of W, 8 rows (M = 1)
//     or 4 rows x 2 rows of A at a time, 16 k a step (the K tail through a zero-padded copy),
//     horizontal sums at the end.
// Each element is summed in fp32: in increasing k for the packed and row-sweep paths (the
// reference's sums), in 16 interleaved partial sums for the dot path. Then the reference's scalar
// epilogue and store (bf16 C rounded to nearest even). Columns split over threads in whole
// 16-column groups: results do not depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/parallel.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"

#define XK_AVX2 __attribute__((target("avx2,fma")))

namespace xk::detail {
namespace {

constexpr int64_t kSweepFloats = 4096;  // row sweep: columns x rows of one accumulator block (16 KiB: L1)
constexpr int64_t kSweepRows = 256;     // row sweep, M > 4: rows of B per K block
constexpr int64_t kG = 16;              // columns per group (one panel of the AVX2 packed layout)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

XK_AVX2 inline __m256 lo_half(__m256i u) { return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)); }
XK_AVX2 inline __m256 hi_half(__m256i u) {
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// 8 bf16 -> 8 f32 in order.
XK_AVX2 inline __m256 widen8(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
XK_AVX2 inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

class GemvBf16Avx2 final : public GemmKernel {
public:
    explicit GemvBf16Avx2(const GemmSpec& s) : s_(s), layout_(gemm_b_layout(Isa::avx2, s.K, s.N, DType::bf16)) {}

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return gemm_jit_pack_b(s_, layout_, B); }
    std::string packed_layout() const override { return layout_.name; }

    void run(const GemmCall& call) const override {
        const GemmSpec& s = s_;
        const int64_t M = s.M, K = s.K, N = s.N;
        // op(A) widened once: af[m * kpad + k], zero past K (rows off a multiple of 4 KiB apart).
        int64_t kpad = 0;
        const float* af = gemv_bf16_widen_a(s, call.args.A, 16, kpad);
        const int64_t groups = ceil_div(N, kG);
        // Chunks of at least ~256 KiB of weights (fewer threads for small B).
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(1, K * kG));
        parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
            const int64_t n0 = g0 * kG, n1 = std::min(N, g1 * kG);
            if (call.packed_b) {
                // K block by K block (the range's panels of one block are contiguous: memory
                // order); the sums of the range stay in L2 between blocks.
                float* acc = gemm_thread_buffer(4, static_cast<size_t>((g1 - g0) * M * kG));
                const auto* P = static_cast<const uint16_t*>(call.packed_b->data);
                for (int64_t pc = 0; pc < K; pc += layout_.kc) {
                    const int64_t kcb = std::min(layout_.kc, K - pc);
                    // One panel at a time, also for M = 1: the range's weights then stream as one
                    // linear run. (4 panels in lockstep — 4 streams 12 KiB apart — read 16-20 GB/s
                    // on Zen 4 under XK_MAX_ISA=avx2, one panel 25-26, M = 1 x 4096..28672 x
                    // 4096..14336, 1 thread; the Llama decode layer 29-35 -> 19-21 ms.)
                    for (int64_t g = g0; g < g1; ++g) {
                        const uint16_t* src = P + layout_.offset(pc, g, kcb);
                        float* a = acc + (g - g0) * M * kG;
                        for (int64_t m0 = 0; m0 < M; m0 += 4) {
                            const int mm = static_cast<int>(std::min<int64_t>(4, M - m0));
                            panel_wide(src, kcb, af + m0 * kpad + pc, kpad, a + m0 * kG, pc == 0, mm);
                        }
                    }
                }
                for (int64_t g = g0; g < g1; ++g) {
                    float* a = acc + (g - g0) * M * kG;
                    interleave(a, M);
                    epilogue(call, a, kG, g * kG, std::min(N, g * kG + kG));
                }
            } else if (s.trans_b == Trans::N) {
                // Column blocks whose accumulators (M x cols) fit 16 KiB of L1; with M > 4, K in
                // blocks of kSweepRows rows swept over every column block (few pages per block).
                const int64_t cols = std::max<int64_t>(128, kSweepFloats / M / 8 * 8);
                int64_t ld = (n1 - n0 + 7) / 8 * 8;
                if (ld % 1024 == 0) ld += 8;
                const int64_t kb = M > 4 ? kSweepRows : K;
                float* acc = gemm_thread_buffer(4, static_cast<size_t>(M * ld));
                for (int64_t k0 = 0; k0 < K; k0 += kb)
                    for (int64_t c0 = n0; c0 < n1; c0 += cols)
                        sweep(call, af, kpad, c0, std::min(n1, c0 + cols), k0, std::min(K, k0 + kb), acc + (c0 - n0), ld);
                epilogue(call, acc, ld, n0, n1);
            } else {
                float* acc = gemm_thread_buffer(4, static_cast<size_t>(M * kG));
                for (int64_t c0 = n0; c0 < n1; c0 += kG) {
                    const int64_t c1 = std::min(n1, c0 + kG);
                    if (M == 1) {
                        dots_at<1, 8>(call, af, kpad, c0, acc, c0, c1);
                    } else {
                        // row tiles of 2 (W's rows re-read from L1)
                        for (int64_t n = c0; n < c1; n += 4) {
                            const int64_t nb = std::min(c1, n + 4);
                            int64_t m0 = 0;
                            for (; m0 + 2 <= M; m0 += 2) dots_at<2, 4>(call, af + m0 * kpad, kpad, c0, acc + m0 * kG, n, nb);
                            if (m0 < M) dots_at<1, 4>(call, af + m0 * kpad, kpad, c0, acc + m0 * kG, n, nb);
                        }
                    }
                    epilogue(call, acc, kG, c0, c1);
                }
            }
        });
    }

private:
    void epilogue(const GemmCall& call, const float* acc, int64_t ld, int64_t c0, int64_t c1) const {
        gemv_bf16_epilogue(s_, call, acc, ld, c0, c1);
    }

    // Packed layout: one K block of PP consecutive panels (rows of 16 bf16, panel stride kcb * 16),
    // rows x[m * kpad + k]; even / odd columns in acc[p * ldp + m * 16 + 0..7] / [8..15].
    template <int MM, int PP>
    XK_AVX2 void panel_wide_m(const uint16_t* src, int64_t kcb, const float* x, int64_t kpad, float* acc, int64_t ldp,
                              bool first) const {
        __m256 e[PP][MM], o[PP][MM];
        for (int p = 0; p < PP; ++p)
            for (int m = 0; m < MM; ++m) {
                e[p][m] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + p * ldp + m * kG);
                o[p][m] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + p * ldp + m * kG + 8);
            }
        for (int64_t k = 0; k < kcb; ++k) {
            __m256 av[MM];
            for (int m = 0; m < MM; ++m) av[m] = _mm256_broadcast_ss(x + m * kpad + k);
            for (int p = 0; p < PP; ++p) {
                const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + p * kcb * kG + k * kG));
                const __m256 lo = lo_half(u), hi = hi_half(u);
                for (int m = 0; m < MM; ++m) {
                    e[p][m] = _mm256_fmadd_ps(lo, av[m], e[p][m]);
                    o[p][m] = _mm256_fmadd_ps(hi, av[m], o[p][m]);
                }
            }
        }
        for (int p = 0; p < PP; ++p)
            for (int m = 0; m < MM; ++m) {
                _mm256_storeu_ps(acc + p * ldp + m * kG, e[p][m]);
                _mm256_storeu_ps(acc + p * ldp + m * kG + 8, o[p][m]);
            }
    }
    void panel_wide(const uint16_t* src, int64_t kcb, const float* x, int64_t kpad, float* acc, bool first, int mm) const {
        switch (mm) {
            case 1: panel_wide_m<1, 1>(src, kcb, x, kpad, acc, 0, first); break;
            case 2: panel_wide_m<2, 1>(src, kcb, x, kpad, acc, 0, first); break;
            case 3: panel_wide_m<3, 1>(src, kcb, x, kpad, acc, 0, first); break;
            default: panel_wide_m<4, 1>(src, kcb, x, kpad, acc, 0, first); break;
        }
    }
    // Even / odd columns (acc[m * 16 + 0..7] / [8..15]) back in column order, rows [0, M).
    XK_AVX2 static void interleave(float* acc, int64_t M) {
        for (int64_t m = 0; m < M; ++m) {
            const __m256 e = _mm256_loadu_ps(acc + m * kG), o = _mm256_loadu_ps(acc + m * kG + 8);
            const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
            _mm256_storeu_ps(acc + m * kG, _mm256_permute2f128_ps(lo, hi, 0x20));
            _mm256_storeu_ps(acc + m * kG + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        }
    }

    // Plain [K x N]: rows [k0, k1) of B added into acc[m * ld + j] over columns [c0, c1) (k0 = 0:
    // from 0), rows four at a time; the columns past the last whole vector one at a time.
    XK_AVX2 void sweep(const GemmCall& call, const float* af, int64_t kpad, int64_t c0, int64_t c1, int64_t k0, int64_t K,
                       float* acc, int64_t ld) const {
        const int64_t M = s_.M, ldb = s_.ldb, w = c1 - c0;
        const auto* B = static_cast<const uint16_t*>(call.args.B) + c0;
        const int64_t nv = w / 8, wv = nv * 8;
        if (k0 == 0)
            for (int64_t m = 0; m < M; ++m) std::fill(acc + m * ld, acc + m * ld + w, 0.0f);
        int64_t k = k0;
        for (; k + 4 <= K; k += 4) {
            const uint16_t* r = B + k * ldb;
            for (int64_t v = 0; v < nv; ++v) {
                __m256 b[4];
                for (int i = 0; i < 4; ++i)
                    b[i] = widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + i * ldb + v * 8)));
                for (int64_t m = 0; m < M; ++m) {
                    float* a = acc + m * ld + v * 8;
                    const float* x = af + m * kpad + k;
                    __m256 c = _mm256_loadu_ps(a);
                    c = _mm256_fmadd_ps(b[0], _mm256_broadcast_ss(x), c);
                    c = _mm256_fmadd_ps(b[1], _mm256_broadcast_ss(x + 1), c);
                    c = _mm256_fmadd_ps(b[2], _mm256_broadcast_ss(x + 2), c);
                    c = _mm256_fmadd_ps(b[3], _mm256_broadcast_ss(x + 3), c);
                    _mm256_storeu_ps(a, c);
                }
            }
        }
        for (; k < K; ++k) {
            const uint16_t* r = B + k * ldb;
            for (int64_t v = 0; v < nv; ++v) {
                const __m256 b0 = widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + v * 8)));
                for (int64_t m = 0; m < M; ++m) {
                    float* a = acc + m * ld + v * 8;
                    _mm256_storeu_ps(a, _mm256_fmadd_ps(b0, _mm256_broadcast_ss(af + m * kpad + k), _mm256_loadu_ps(a)));
                }
            }
        }
        // tail columns: the same sums in the same order (the products are exact)
        for (int64_t j = wv; j < w; ++j)
            for (int64_t m = 0; m < M; ++m) {
                float sacc = acc[m * ld + j];
                for (int64_t kk = k0; kk < K; ++kk) {
                    const uint32_t u = static_cast<uint32_t>(B[kk * ldb + j]) << 16;
                    float bv;
                    std::memcpy(&bv, &u, 4);
                    sacc = std::fma(bv, af[m * kpad + kk], sacc);
                }
                acc[m * ld + j] = sacc;
            }
    }

    // Plain B^T [N x K]: columns [n_lo, n_hi) (acc column 0 is c0) in groups of J rows of W, rows
    // af[0..MM), 16 k a step; the last step's k past K come from a zero-padded copy of the rows.
    template <int MM, int J>
    XK_AVX2 void dots_at(const GemmCall& call, const float* af, int64_t kpad, int64_t c0, float* acc, int64_t n_lo,
                         int64_t n_hi) const {
        const int64_t K = s_.K, ldb = s_.ldb;
        const auto* B = static_cast<const uint16_t*>(call.args.B);
        const int64_t kfull = K / 16, tail = K - kfull * 16;
        for (int64_t n = n_lo; n < n_hi; n += J) {
            const uint16_t* row[J];
            for (int j = 0; j < J; ++j) row[j] = B + std::min(n + j, n_hi - 1) * ldb;
            __m256 c[MM][J];
            for (int m = 0; m < MM; ++m)
                for (int j = 0; j < J; ++j) c[m][j] = _mm256_setzero_ps();
            auto step = [&](int64_t t, const uint16_t* const* rp, int64_t off) XK_AVX2 {
                __m256 a0[MM], a1[MM];
                for (int m = 0; m < MM; ++m) {
                    a0[m] = _mm256_loadu_ps(af + m * kpad + t * 16);
                    a1[m] = _mm256_loadu_ps(af + m * kpad + t * 16 + 8);
                }
                for (int j = 0; j < J; ++j) {
                    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rp[j] + off));
                    const __m256 w0 = widen8(_mm256_castsi256_si128(u)), w1 = widen8(_mm256_extracti128_si256(u, 1));
                    for (int m = 0; m < MM; ++m) {
                        c[m][j] = _mm256_fmadd_ps(w0, a0[m], c[m][j]);
                        c[m][j] = _mm256_fmadd_ps(w1, a1[m], c[m][j]);
                    }
                }
            };
            for (int64_t t = 0; t < kfull; ++t) step(t, row, t * 16);
            if (tail) {
                alignas(32) uint16_t pad[J][16];
                const uint16_t* prow[J];
                for (int j = 0; j < J; ++j) {
                    std::memset(pad[j], 0, sizeof(pad[j]));
                    std::memcpy(pad[j], row[j] + kfull * 16, static_cast<size_t>(tail) * 2);
                    prow[j] = pad[j];
                }
                step(kfull, prow, 0);
            }
            for (int m = 0; m < MM; ++m)
                for (int j = 0; j < J && n + j < n_hi; ++j) acc[m * kG + (n + j - c0)] = hsum(c[m][j]);
        }
    }

    GemmSpec s_;
    GemmBLayout layout_;
};

}  // namespace

bool gemv_bf16_avx2_supports(const GemmSpec& s) { return gemm_jit_bf16_any_supports(s) && s.M <= kGemvBf16MaxM; }

std::shared_ptr<const GemmKernel> create_gemv_bf16_avx2(const GemmSpec& s) {
    if (!gemv_bf16_avx2_supports(s)) throw Error(Status::unsupported, "gemm bf16 gemv (avx2): " + s.key() + " is not supported");
    return std::make_shared<GemvBf16Avx2>(s);
}

}  // namespace xk::detail
