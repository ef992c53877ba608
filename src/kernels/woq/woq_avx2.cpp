// WOQ kernels on AVX2 (ymm: two vectors per block of 16 output channels, up to 3 rows of X per
// pass over a block). The code is woq_kernels.inc; this file gives it its vector traits.
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "kernels/woq/woq.hpp"

#define XK_WOQ_TARGET __attribute__((target("avx2,fma")))
#define XK_WOQ_NS woq_avx2
#define XK_WOQ_WIDE 0

namespace xk::detail::woq_avx2 {
namespace {
constexpr int kWoqMaxMB = 3;
struct V {
    using F = __m256;
    static constexpr int W = 8;
    XK_WOQ_TARGET static inline F zero() { return _mm256_setzero_ps(); }
    XK_WOQ_TARGET static inline F set1(float v) { return _mm256_set1_ps(v); }
    XK_WOQ_TARGET static inline F load(const float* p) { return _mm256_loadu_ps(p); }
    XK_WOQ_TARGET static inline void store(float* p, F v) { _mm256_storeu_ps(p, v); }
    XK_WOQ_TARGET static inline F add(F a, F b) { return _mm256_add_ps(a, b); }
    XK_WOQ_TARGET static inline F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
    // 8 int8 -> f32
    XK_WOQ_TARGET static inline F s8(const uint8_t* p) {
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    }
    // 8 bytes -> low nibbles (lo) and high nibbles (hi), as f32
    XK_WOQ_TARGET static inline void u4(const uint8_t* p, F& lo, F& hi) {
        const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
        lo = _mm256_cvtepi32_ps(_mm256_and_si256(b, _mm256_set1_epi32(15)));
        hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(b, 4));
    }
    // 8 finite f32 -> bf16, rounded to nearest even (xk::bf16's rounding)
    XK_WOQ_TARGET static inline void store_bf16(uint16_t* p, F v) {
        const __m256i u = _mm256_castps_si256(v);
        const __m256i r = _mm256_srli_epi32(
            _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7FFF),
                                                 _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)))),
            16);
        // 8 x u32 (< 2^16) -> 8 x u16
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
    }
};
}  // namespace
}  // namespace xk::detail::woq_avx2

#include "kernels/woq/woq_kernels.inc"

namespace xk::detail {
std::shared_ptr<const WoqKernel> create_woq_gemv_avx2(const WoqSpec& s) { return std::make_shared<woq_avx2::WoqGemv>(s); }
std::shared_ptr<const WoqKernel> create_woq_prefill_avx2(const WoqSpec& s) {
    return std::make_shared<woq_avx2::WoqPrefill>(s);
}
}  // namespace xk::detail
