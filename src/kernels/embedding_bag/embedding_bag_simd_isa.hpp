// The vector ops of one ISA for the embedding-bag forward kernels, then the kernel templates
// (embedding_bag_simd.inc). Included by exactly one of XK_EB_AVX512 / XK_EB_AVX2 defined, once per
// translation unit: embedding_bag_{avx512,avx2}_{dense,quant}.cpp (the instantiations are split by
// ISA and table type so that a build compiles them in parallel; see embedding_bag_simd.cpp).
#pragma once

#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// w * row must round before the add, as in the reference (compiled without FMA).
#pragma GCC optimize("fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)  // (clang ignores the GCC pragma and contracts a * b + c into FMA)
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "common/streaming.hpp"
#include "kernels/embedding_bag/embedding_bag_simd.hpp"

namespace xk::detail {

#if defined(XK_EB_AVX512)
// ---- AVX-512 ------------------------------------------------------------------------------------
#define XK_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))
namespace eb_avx512 {
constexpr int W = 16, NVMAX = 8;
constexpr bool kPfForms = true;  // the forms with the prefetch count at compile time
using VF = __m512;
using M = __mmask16;
XK_T inline M mask_n(int64_t n) {
    return n >= 16 ? static_cast<M>(0xFFFF) : n <= 0 ? static_cast<M>(0) : static_cast<M>((1u << n) - 1);
}
XK_T inline VF zero() { return _mm512_setzero_ps(); }
XK_T inline VF set1(float f) { return _mm512_set1_ps(f); }
XK_T inline VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
XK_T inline VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
XK_T inline VF fmadd(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c, one rounding
XK_T inline VF div(VF a, VF b) { return _mm512_div_ps(a, b); }
// The reference's max: take r where r > acc or r is NaN (a NaN acc stays).
XK_T inline VF max_nan(VF acc, VF r) {
    const M take = _mm512_cmp_ps_mask(r, acc, _CMP_GT_OQ) | _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(take, acc, r);
}
XK_T inline VF load_f32(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
XK_T inline VF load_bf16(const uint16_t* p, M m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
// q = uint8 p[0, lanes): 16 lanes.
XK_T inline VF load_q8(const uint8_t* p, M m) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, p))); }
// Nibbles from p (low first): 16 lanes from 8 bytes (ceil(lanes / 2) of them read).
XK_T inline VF load_q4(const uint8_t* p, M m) {
    const int n = __builtin_popcount(static_cast<unsigned>(m));
    const __mmask16 bm = static_cast<__mmask16>((1u << ((n + 1) / 2)) - 1);
    const __m128i w = _mm_cvtepu8_epi16(_mm_maskz_loadu_epi8(bm, p));  // byte i in 16-bit lane i
    const __m128i lo = _mm_and_si128(w, _mm_set1_epi16(15));
    const __m128i q = _mm_or_si128(lo, _mm_slli_epi16(_mm_srli_epi16(w, 4), 8));  // bytes lo0 hi0 lo1 hi1 ...
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q));
}
XK_T inline VF load_f32_full(const float* p) { return _mm512_loadu_ps(p); }
XK_T inline VF load_bf16_full(const uint16_t* p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
XK_T inline VF load_q8_full(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
XK_T inline VF load_q4_full(const uint8_t* p) {
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m128i q = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(15)), _mm_slli_epi16(_mm_srli_epi16(w, 4), 8));
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q));
}
XK_T inline void store_f32(float* p, VF v, M m) { _mm512_mask_storeu_ps(p, m, v); }
// Byte copies of the lookup: VB-byte vectors, streamed (p VB-aligned), a masked tail of n < VB bytes.
constexpr int VB = 64;
using VI = __m512i;
XK_T inline VI ldb(const char* p) { return _mm512_loadu_si512(p); }
XK_T inline void stb(char* p, VI v) { _mm512_storeu_si512(p, v); }
XK_T inline void ntb(char* p, VI v) { _mm512_stream_si512(reinterpret_cast<__m512i*>(p), v); }
XK_T inline void copy_tail(char* d, const char* s, int64_t n) {
    const __mmask64 m = n >= 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1;
    _mm512_mask_storeu_epi8(d, m, _mm512_maskz_loadu_epi8(m, s));
}
// Round to nearest even; NaN -> quiet NaN (bf16::from_float).
XK_T inline void store_bf16(uint16_t* p, VF v, M m) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
    const __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    r = _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, q);
    _mm256_mask_storeu_epi16(p, m, _mm512_cvtepi32_epi16(r));
}
}  // namespace eb_avx512
#define XK_EB_NS eb_avx512
#elif defined(XK_EB_AVX2)
// ---- AVX2 ---------------------------------------------------------------------------------------
#define XK_T __attribute__((target("avx2,fma,f16c")))
namespace eb_avx2 {
constexpr int W = 8, NVMAX = 8;
// Not the forms with the prefetch count at compile time (a runtime line count: fewer
// instantiations; this path runs only where AVX-512 does not).
constexpr bool kPfForms = false;
using VF = __m256;
struct M {
    __m256i m;
    int n;  // active lanes (a prefix)
};
XK_T inline M mask_n(int64_t n) {
    const int k = n >= 8 ? 8 : n <= 0 ? 0 : static_cast<int>(n);
    return M{_mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)), k};
}
XK_T inline VF zero() { return _mm256_setzero_ps(); }
XK_T inline VF set1(float f) { return _mm256_set1_ps(f); }
XK_T inline VF add(VF a, VF b) { return _mm256_add_ps(a, b); }
XK_T inline VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
XK_T inline VF fmadd(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
XK_T inline VF div(VF a, VF b) { return _mm256_div_ps(a, b); }
XK_T inline VF max_nan(VF acc, VF r) {
    const VF take = _mm256_or_ps(_mm256_cmp_ps(r, acc, _CMP_GT_OQ), _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    return _mm256_blendv_ps(acc, r, take);
}
XK_T inline VF load_f32(const float* p, M m) {
    return m.n == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, m.m);
}
XK_T inline VF load_bf16(const uint16_t* p, M m) {
    __m128i h;
    if (m.n == 8) {
        h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    } else {
        alignas(16) uint16_t t[8] = {};
        if (m.n > 0) std::memcpy(t, p, static_cast<size_t>(m.n) * 2);
        h = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
XK_T inline VF load_q8(const uint8_t* p, M m) {
    uint64_t t = 0;
    if (m.n == 8) std::memcpy(&t, p, 8);
    else if (m.n > 0) std::memcpy(&t, p, static_cast<size_t>(m.n));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(t))));
}
XK_T inline VF load_q4(const uint8_t* p, M m) {
    uint32_t t = 0;
    if (m.n == 8) std::memcpy(&t, p, 4);
    else if (m.n > 0) std::memcpy(&t, p, static_cast<size_t>((m.n + 1) / 2));
    const __m128i w = _mm_cvtepu8_epi16(_mm_cvtsi32_si128(static_cast<int>(t)));
    const __m128i lo = _mm_and_si128(w, _mm_set1_epi16(15));
    const __m128i q = _mm_or_si128(lo, _mm_slli_epi16(_mm_srli_epi16(w, 4), 8));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
}
XK_T inline VF load_f32_full(const float* p) { return _mm256_loadu_ps(p); }
XK_T inline VF load_bf16_full(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
XK_T inline VF load_q8_full(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
XK_T inline VF load_q4_full(const uint8_t* p) {
    uint32_t t;
    std::memcpy(&t, p, 4);
    const __m128i w = _mm_cvtepu8_epi16(_mm_cvtsi32_si128(static_cast<int>(t)));
    const __m128i q = _mm_or_si128(_mm_and_si128(w, _mm_set1_epi16(15)), _mm_slli_epi16(_mm_srli_epi16(w, 4), 8));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
}
constexpr int VB = 32;
using VI = __m256i;
XK_T inline VI ldb(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
XK_T inline void stb(char* p, VI v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
XK_T inline void ntb(char* p, VI v) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), v); }
XK_T inline void copy_tail(char* d, const char* s, int64_t n) { std::memcpy(d, s, static_cast<size_t>(n)); }
XK_T inline void store_f32(float* p, VF v, M m) {
    if (m.n == 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, m.m, v);
}
XK_T inline void store_bf16(uint16_t* p, VF v, M m) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, q, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, _mm256_setzero_si256()), 0x08);
    const __m128i h = _mm256_castsi256_si128(packed);
    if (m.n == 8) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
    } else if (m.n > 0) {
        alignas(16) uint16_t t[8];
        _mm_store_si128(reinterpret_cast<__m128i*>(t), h);
        std::memcpy(p, t, static_cast<size_t>(m.n) * 2);
    }
}
}  // namespace eb_avx2
#define XK_EB_NS eb_avx2
#else
#error "define XK_EB_AVX512 or XK_EB_AVX2"
#endif

#include "kernels/embedding_bag/embedding_bag_simd.inc"

}  // namespace xk::detail
