// Packing of A and B for the blocked fp32 GEMM (layouts in jit_gemm_common.hpp). AVX2 code
// (function-level target attributes: only the JIT kernels, which need AVX2, call it). Transposed
// layouts go through 8 x 8 register transposes; copies move 8 / 4 / 2 / 1 floats at a time and
// never read past the operand. Every packer takes f32 or bf16 (uint16_t bits) sources: bf16 is
// widened to f32 as it is read (a 16-bit left shift, exact), so the packed panels are f32 either
// way and the fp32 microkernel runs on them.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "kernels/gemm/jit_gemm_common.hpp"

#define XK_AVX2 __attribute__((target("avx2,fma")))

namespace xk::detail {
namespace {

XK_AVX2 inline void transpose8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// The first n (0..8) lanes of v to dst.
XK_AVX2 inline void store_n(float* dst, __m256 v, int n) {
    if (n == 8) {
        _mm256_storeu_ps(dst, v);
        return;
    }
    __m128 x = _mm256_castps256_ps128(v);
    if (n >= 4) {
        _mm_storeu_ps(dst, x);
        dst += 4, n -= 4;
        x = _mm256_extractf128_ps(v, 1);
    }
    if (n >= 2) {
        _mm_storel_pi(reinterpret_cast<__m64*>(dst), x);
        dst += 2, n -= 2;
        x = _mm_movehl_ps(x, x);
    }
    if (n == 1) _mm_store_ss(dst, x);
}

// n (0..8) floats from src, the other lanes 0; reads only those n.
XK_AVX2 inline __m256 load_n(const float* src, int n) {
    if (n == 8) return _mm256_loadu_ps(src);
    __m128 lo = _mm_setzero_ps(), hi = _mm_setzero_ps();
    __m128* cur = &lo;
    if (n >= 4) {
        lo = _mm_loadu_ps(src);
        src += 4, n -= 4;
        cur = &hi;
    }
    if (n >= 2) {
        *cur = _mm_loadl_pi(_mm_setzero_ps(), reinterpret_cast<const __m64*>(src));
        src += 2, n -= 2;
        if (n == 1) *cur = _mm_insert_ps(*cur, _mm_load_ss(src), 0x20);
    } else if (n == 1) {
        *cur = _mm_load_ss(src);
    }
    return _mm256_insertf128_ps(_mm256_castps128_ps256(lo), hi, 1);
}


// Element access of a source of either type: ld8 = 8 consecutive elements as f32 (bf16 widened),
// ldn = the first n (0..8) of them (reads only those n), ld1 = one element.
XK_AVX2 inline __m256 ld8(const float* p) { return _mm256_loadu_ps(p); }
XK_AVX2 inline __m256 ld8(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
XK_AVX2 inline __m256 ldn(const float* p, int n) { return load_n(p, n); }
XK_AVX2 inline __m256 ldn(const uint16_t* p, int n) {
    if (n == 8) return ld8(p);
    // Assembled in general registers (a copy through a stack buffer and one vector load of it
    // stalls on store forwarding: it made packing a 1-column B 4x slower than the reference GEMM).
    uint64_t lo = 0, hi = 0;
    for (int i = 0; i < n; ++i) (i < 4 ? lo : hi) |= static_cast<uint64_t>(p[i]) << (16 * (i & 3));
    const __m128i h = _mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float ld1(const float* p) { return *p; }
inline float ld1(const uint16_t* p) {
    const uint32_t u = static_cast<uint32_t>(*p) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

template <class T>
XK_AVX2 inline void copy_n(float* dst, const T* src, int64_t n) {
    for (; n >= 8; n -= 8, src += 8, dst += 8) _mm256_storeu_ps(dst, ld8(src));
    if (n > 0) store_n(dst, ldn(src, static_cast<int>(n)), static_cast<int>(n));
}

// Rows: op(A) is m x kc with A[r*lda + k]; panels of MR rows, dst[p][k][MR]. Full panels: per
// group of 8 rows and 8 k, one 8 x 8 transpose (rows past the group's end repeat its last row),
// then per k one 8-float store that may run up to 8 - (MR - g) floats into the next k's slots —
// the next store (increasing k) overwrites them, and past the last k they land in the next
// panel (written later) or in the buffer's slack (kPackSlack).
template <int MR, class T>
XK_AVX2 void pack_a_rows(const T* A, int64_t lda, int64_t m, int64_t kc, float* dst) {
    constexpr int kGroups = (MR + 7) / 8;
    for (int64_t p0 = 0; p0 < m; p0 += MR, dst += kc * MR) {
        const int rows = static_cast<int>(std::min<int64_t>(MR, m - p0));
        int64_t k = 0;
        if (rows == MR) {
            for (; k + 8 <= kc; k += 8) {
                __m256 v[kGroups][8];
                for (int g = 0; g < kGroups; ++g) {
                    constexpr int kLast = MR - 8 * (kGroups - 1);  // rows of the last group
                    const int nrow = g + 1 < kGroups ? 8 : kLast;
                    for (int i = 0; i < 8; ++i)
                        v[g][i] = ld8(A + (p0 + 8 * g + std::min(i, nrow - 1)) * lda + k);
                    transpose8(v[g]);
                }
                // k-major store order: a store's overrun is always overwritten by a later one.
                for (int kk = 0; kk < 8; ++kk)
                    for (int g = 0; g < kGroups; ++g) _mm256_storeu_ps(dst + (k + kk) * MR + 8 * g, v[g][kk]);
            }
        }
        for (; k < kc; ++k)
            for (int i = 0; i < rows; ++i) dst[k * MR + i] = ld1(A + (p0 + i) * lda + k);
    }
}

template <class T>
XK_AVX2 void pack_a_rows_any(const T* A, int64_t lda, int64_t m, int64_t kc, int MR, float* dst) {
    for (int64_t p0 = 0; p0 < m; p0 += MR, dst += kc * MR) {
        const int rows = static_cast<int>(std::min<int64_t>(MR, m - p0));
        for (int64_t k = 0; k < kc; ++k)
            for (int i = 0; i < rows; ++i) dst[k * MR + i] = ld1(A + (p0 + i) * lda + k);
    }
}

// Columns: op(A) is m x kc with A[k*lda + r]: blocks of 8 k, each row segment read once across
// every panel (a panel at a time would walk A with stride lda: with a power-of-two lda every
// access falls in one cache set). Whole vectors are copied where they stay inside the block,
// with the same overlapping stores as above; the last panel exactly.
template <class T>
XK_AVX2 void pack_a_cols(const T* A, int64_t lda, int64_t m, int64_t kc, int MR, float* dst) {
    const int nvec = (MR + 7) / 8;
    const int64_t npanel = (m + MR - 1) / MR;
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
        const int64_t k1 = std::min(kc, k0 + 8);
        for (int64_t p = 0; p < npanel; ++p) {
            const int64_t p0 = p * MR;
            const int rows = static_cast<int>(std::min<int64_t>(MR, m - p0));
            float* d = dst + p * kc * MR;
            if (rows == MR && p0 + nvec * 8 <= m) {
                // (The panel's last k is copied exactly: its overrun would land in the next
                // panel's first k, written by an earlier block of k.)
                const int64_t kv = std::min(k1, kc - 1);
                for (int64_t k = k0; k < kv; ++k) {
                    const T* src = A + k * lda + p0;
                    for (int v = 0; v < nvec; ++v) _mm256_storeu_ps(d + k * MR + 8 * v, ld8(src + 8 * v));
                }
                for (int64_t k = kv; k < k1; ++k) copy_n(d + k * MR, A + k * lda + p0, rows);
            } else {
                for (int64_t k = k0; k < k1; ++k) copy_n(d + k * MR, A + k * lda + p0, rows);
            }
        }
    }
}

// op(B) is kc x n with B[k*ldb + c]: blocks of 8 rows (k) streamed across every panel (reads
// sequential along each row), each panel receiving 8 consecutive NR-float rows; columns past n
// are zero.
template <class T>
XK_AVX2 void pack_b_rows(const T* B, int64_t ldb, int64_t kc, int64_t n, int NR, float* dst) {
    const int64_t npanel = (n + NR - 1) / NR;
    for (int64_t k0 = 0; k0 < kc; k0 += 8) {
        const int64_t k1 = std::min(kc, k0 + 8);
        for (int64_t p = 0; p < npanel; ++p) {
            const int64_t c0 = p * NR;
            const int cols = static_cast<int>(std::min<int64_t>(NR, n - c0));
            float* d = dst + p * kc * NR;
            if (cols == NR) {
                for (int64_t k = k0; k < k1; ++k) {
                    const T* s = B + k * ldb + c0;
                    for (int c = 0; c < NR; c += 8) _mm256_storeu_ps(d + k * NR + c, ld8(s + c));
                }
            } else {
                for (int64_t k = k0; k < k1; ++k)
                    for (int c = 0; c < NR; c += 8) {
                        const int nc = std::max(0, std::min(8, cols - c));
                        _mm256_storeu_ps(d + k * NR + c, nc ? ldn(B + k * ldb + c0 + c, nc) : _mm256_setzero_ps());
                    }
            }
        }
    }
}

// op(B) is kc x n with B[c*ldb + k]: 8 x 8 transposes of (8 columns) x (8 k).
template <class T>
XK_AVX2 void pack_b_cols(const T* B, int64_t ldb, int64_t kc, int64_t n, int NR, float* dst) {
    for (int64_t p0 = 0; p0 < n; p0 += NR, dst += kc * NR) {
        const int cols = static_cast<int>(std::min<int64_t>(NR, n - p0));
        for (int g = 0; g < NR; g += 8) {
            const int nc = std::max(0, std::min(8, cols - g));  // valid columns of this group
            if (nc == 0) {
                for (int64_t k = 0; k < kc; ++k) _mm256_storeu_ps(dst + k * NR + g, _mm256_setzero_ps());
                continue;
            }
            const T* r[8];
            for (int i = 0; i < 8; ++i) r[i] = B + (p0 + g + std::min(i, nc - 1)) * ldb;
            const __m256 keep = _mm256_castsi256_ps(
                _mm256_cmpgt_epi32(_mm256_set1_epi32(nc), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
            int64_t k = 0;
            for (; k + 8 <= kc; k += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; ++i) v[i] = ld8(r[i] + k);
                transpose8(v);
                for (int kk = 0; kk < 8; ++kk) _mm256_storeu_ps(dst + (k + kk) * NR + g, _mm256_and_ps(v[kk], keep));
            }
            for (; k < kc; ++k)
                for (int i = 0; i < 8; ++i) dst[k * NR + g + i] = i < nc ? ld1(r[i] + k) : 0.0f;
        }
    }
}

struct BufferFree {
    void operator()(float* p) const { std::free(p); }
};

template <class T>
void pack_a(const T* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR, float* dst) {
    if (trans)
        pack_a_cols(A, lda, m, kc, MR, dst);
    else if (MR == 6)
        pack_a_rows<6>(A, lda, m, kc, dst);
    else if (MR == 14)
        pack_a_rows<14>(A, lda, m, kc, dst);
    else
        pack_a_rows_any(A, lda, m, kc, MR, dst);
}

template <class T>
void pack_b(const T* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR, float* dst) {
    if (trans)
        pack_b_cols(B, ldb, kc, n, NR, dst);
    else
        pack_b_rows(B, ldb, kc, n, NR, dst);
}

}  // namespace

void gemm_pack_a(const float* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR, float* dst) {
    pack_a(A, lda, trans, m, kc, MR, dst);
}
void gemm_pack_a(const uint16_t* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR, float* dst) {
    pack_a(A, lda, trans, m, kc, MR, dst);
}
void gemm_pack_b(const float* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR, float* dst) {
    pack_b(B, ldb, trans, kc, n, NR, dst);
}
void gemm_pack_b(const uint16_t* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR, float* dst) {
    pack_b(B, ldb, trans, kc, n, NR, dst);
}

XK_AVX2 void gemm_widen_bf16(const uint16_t* src, int64_t n, float* dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(dst + i, ld8(src + i));
        _mm256_storeu_ps(dst + i + 8, ld8(src + i + 8));
    }
    copy_n(dst + i, src + i, n - i);
}

XK_AVX2 void gemm_narrow_bf16(const float* src, int64_t n, uint16_t* dst) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(src + i)), 16);
        const __m256i b = _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(src + i + 8)), 16);
        // packus per 128-bit lane: a0-3 b0-3 | a4-7 b4-7 -> reorder the 64-bit quarters
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), p);
    }
    for (; i < n; ++i) {
        uint32_t u;
        std::memcpy(&u, src + i, 4);
        dst[i] = static_cast<uint16_t>(u >> 16);
    }
}

// ---- bf16 pairs (the VDPBF16PS kernel at avx512_bf16) ------------------------------------------
// AVX-512 code (AVX512BW / VL masked loads and stores, which never touch masked-out elements):
// only that kernel calls it.
#define XK_AVX512BW __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))

namespace {

// 8 x 8 transpose of 32-bit lanes (integer view of transpose8).
XK_AVX512BW inline void transpose8i(__m256i r[8]) {
    __m256 v[8];
    for (int i = 0; i < 8; ++i) v[i] = _mm256_castsi256_ps(r[i]);
    transpose8(v);
    for (int i = 0; i < 8; ++i) r[i] = _mm256_castps_si256(v[i]);
}

// dst[kk * W + i] = the pair (src[i * ld + 2kk], src[i * ld + 2kk + 1]) for rows i < nrow, pairs
// kk < ceil(kc / 2) (an odd kc's last pair is (src[.. + kc - 1], 0)); lanes i in [nrow, W) are 0.
// Groups of 8 rows x 8 pairs: masked loads of 16 bf16 per row (zeros past kc), one 8 x 8
// transpose of the 32-bit pairs, masked stores of the group's lanes.
XK_AVX512BW void pairs_transpose(const uint16_t* src, int64_t ld, int nrow, int64_t kc, int W, uint32_t* dst) {
    const int64_t kp = (kc + 1) / 2;
    for (int g = 0; g < W; g += 8) {
        const int lanes = std::min(8, W - g);
        const __mmask8 smask = static_cast<__mmask8>((1u << lanes) - 1);
        const int rows = std::max(0, std::min(lanes, nrow - g));
        for (int64_t k0 = 0; k0 < kp; k0 += 8) {
            const int64_t e = std::min<int64_t>(16, kc - 2 * k0);  // bf16 of each row in this chunk
            const __mmask16 lmask = static_cast<__mmask16>(e >= 16 ? 0xFFFFu : (1u << e) - 1);
            __m256i v[8];
            for (int i = 0; i < 8; ++i)
                v[i] = i < rows ? _mm256_maskz_loadu_epi16(lmask, src + (g + i) * ld + 2 * k0) : _mm256_setzero_si256();
            transpose8i(v);
            const int nk = static_cast<int>(std::min<int64_t>(8, kp - k0));
            for (int kk = 0; kk < nk; ++kk) _mm256_mask_storeu_epi32(dst + (k0 + kk) * W + g, smask, v[kk]);
        }
    }
}

// dst[kk * W + c] = the pair (src[2kk * ld + c], src[(2kk + 1) * ld + c]) for columns c < ncol
// (<= W <= 32), pairs kk < ceil(kc / 2) (row kc of an odd kc: 0); lanes c in [ncol, W) are 0.
// Per pair: two masked row loads, two vpermt2w interleaves, masked stores.
XK_AVX512BW void pairs_interleave(const uint16_t* src, int64_t ld, int ncol, int64_t kc, int W, uint32_t* dst) {
    const int64_t kp = (kc + 1) / 2;
    const __mmask32 lmask = ncol >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << ncol) - 1);
    const __m512i lo = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                        37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi = _mm512_add_epi16(lo, _mm512_set1_epi16(16));
    const __mmask16 m0 = static_cast<__mmask16>(W >= 16 ? 0xFFFFu : (1u << W) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(W >= 32 ? 0xFFFFu : W > 16 ? (1u << (W - 16)) - 1 : 0);
    for (int64_t kk = 0; kk < kp; ++kk) {
        const __m512i r0 = _mm512_maskz_loadu_epi16(lmask, src + 2 * kk * ld);
        const __m512i r1 = 2 * kk + 1 < kc ? _mm512_maskz_loadu_epi16(lmask, src + (2 * kk + 1) * ld) : _mm512_setzero_si512();
        _mm512_mask_storeu_epi32(dst + kk * W, m0, _mm512_permutex2var_epi16(r0, lo, r1));
        if (m1) _mm512_mask_storeu_epi32(dst + kk * W + 16, m1, _mm512_permutex2var_epi16(r0, hi, r1));
    }
}

}  // namespace

XK_AVX512BW void gemm_pack_a_pairs(const uint16_t* A, int64_t lda, bool trans, int64_t m, int64_t kc, int MR,
                                   uint32_t* dst) {
    const int64_t kp = (kc + 1) / 2;
    for (int64_t p0 = 0; p0 < m; p0 += MR, dst += kp * MR) {
        const int rows = static_cast<int>(std::min<int64_t>(MR, m - p0));
        if (trans)
            pairs_interleave(A + p0, lda, rows, kc, MR, dst);
        else
            pairs_transpose(A + p0 * lda, lda, rows, kc, MR, dst);
    }
}

XK_AVX512BW void gemm_pack_b_pairs(const uint16_t* B, int64_t ldb, bool trans, int64_t kc, int64_t n, int NR,
                                   uint32_t* dst) {
    const int64_t kp = (kc + 1) / 2;
    for (int64_t c0 = 0; c0 < n; c0 += NR, dst += kp * NR) {
        const int cols = static_cast<int>(std::min<int64_t>(NR, n - c0));
        if (trans)
            pairs_transpose(B + c0 * ldb, ldb, cols, kc, NR, dst);
        else
            pairs_interleave(B + c0, ldb, cols, kc, NR, dst);
    }
}

float* gemm_thread_buffer(int slot, size_t floats) {
    thread_local std::unique_ptr<float, BufferFree> buf[kGemmThreadBufferSlots];
    thread_local size_t cap[kGemmThreadBufferSlots] = {};
    if (cap[slot] < floats) {
        const size_t n = (floats + 1023) / 1024 * 1024;  // a multiple of 64 bytes
        float* p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
        if (!p) throw std::bad_alloc();
        buf[slot].reset(p);
        cap[slot] = n;
    }
    return buf[slot].get();
}

}  // namespace xk::detail
