// WOQ kernels on AVX-512 (zmm: one vector per block of 16 output channels, up to 8 rows of X per
// pass over a block). The code is woq_kernels.inc; this file gives it its vector traits.
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "kernels/woq/woq.hpp"

#define XK_WOQ_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
#define XK_WOQ_NS woq_avx512
#define XK_WOQ_WIDE 1

namespace xk::detail::woq_avx512 {
namespace {
constexpr int kWoqMaxMB = 8;
struct V {
    using F = __m512;
    static constexpr int W = 16;
    XK_WOQ_TARGET static inline F zero() { return _mm512_setzero_ps(); }
    XK_WOQ_TARGET static inline F set1(float v) { return _mm512_set1_ps(v); }
    XK_WOQ_TARGET static inline F load(const float* p) { return _mm512_loadu_ps(p); }
    XK_WOQ_TARGET static inline void store(float* p, F v) { _mm512_storeu_ps(p, v); }
    XK_WOQ_TARGET static inline F add(F a, F b) { return _mm512_add_ps(a, b); }
    XK_WOQ_TARGET static inline F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
    // 16 int8 -> f32
    XK_WOQ_TARGET static inline F s8(const uint8_t* p) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
    // 16 bytes -> low nibbles (lo) and high nibbles (hi), as f32. lo by VPERMPS from the table
    // 0.0f .. 15.0f (it reads the low 4 bits of each dword: the low nibble; no AND, no CVTDQ2PS, and
    // on port 5 where the shift and the conversion of hi go to port 0).
    XK_WOQ_TARGET static inline void u4(const uint8_t* p, F& lo, F& hi) {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        const __m512 nib = _mm512_set_ps(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        lo = _mm512_permutexvar_ps(b, nib);
        hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
    }
    // 16 finite f32 -> bf16, rounded to nearest even (xk::bf16's rounding)
    XK_WOQ_TARGET static inline void store_bf16(uint16_t* p, F v) {
        const __m512i u = _mm512_castps_si512(v);
        const __m512i r = _mm512_add_epi32(
            u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
    }
};
}  // namespace
}  // namespace xk::detail::woq_avx512

#include "kernels/woq/woq_kernels.inc"

namespace xk::detail {
std::shared_ptr<const WoqKernel> create_woq_gemv_avx512(const WoqSpec& s) {
    return std::make_shared<woq_avx512::WoqGemv>(s);
}
std::shared_ptr<const WoqKernel> create_woq_prefill_avx512(const WoqSpec& s) {
    return std::make_shared<woq_avx512::WoqPrefill>(s);
}
}  // namespace xk::detail
