// Vectorised DLRM interaction (AVX-512 and AVX2 intrinsics in target-attribute functions). Body
// in interaction_simd.inc: per sample the N rows are widened into a zero-padded f32 block (L1),
// the forward computes the lower triangle of T T^T in R x C tiles of pairs (R*C = one vector of
// dot products: the tile's accumulators stay in registers over k, then one transpose-reduce), the
// backward computes S T (S the symmetric matrix of the pair gradients) in R rows x 4 vectors.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/interaction/interaction.hpp"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace xk::detail {

// ---- AVX-512 ------------------------------------------------------------------------------------
#define XK_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
namespace ia_avx512 {
constexpr int W = 16;
using VF = __m512;
XK_T inline VF zero() { return _mm512_setzero_ps(); }
XK_T inline VF set1(float f) { return _mm512_set1_ps(f); }
XK_T inline VF loadu(const float* p) { return _mm512_loadu_ps(p); }
XK_T inline void storeu(float* p, VF v) { _mm512_storeu_ps(p, v); }
XK_T inline VF fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
XK_T inline VF widen_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
// Round to nearest even as bf16::from_float (a NaN becomes quiet).
XK_T inline void store_bf16(uint16_t* p, VF v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(r));
}
// Lane q of the result = the sum of the lanes of v[q].
XK_T inline VF reduce(const VF* v) {
    VF s[8], u[4], w[2];
    for (int q = 0; q < 8; ++q) s[q] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * q], v[2 * q + 1]), _mm512_unpackhi_ps(v[2 * q], v[2 * q + 1]));
    for (int q = 0; q < 4; ++q) {
        const __m512d a = _mm512_castps_pd(s[2 * q]), b = _mm512_castps_pd(s[2 * q + 1]);
        u[q] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    for (int q = 0; q < 2; ++q)
        w[q] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * q], u[2 * q + 1], 0x88), _mm512_shuffle_f32x4(u[2 * q], u[2 * q + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88), _mm512_shuffle_f32x4(w[0], w[1], 0xDD));
}
// The first n (1..4) floats of src to dst.
XK_T inline void store4(float* dst, const float* src, int n) {
    _mm_mask_storeu_ps(dst, static_cast<__mmask8>((1u << n) - 1), _mm_loadu_ps(src));
}
constexpr int R = 4;  // forward tile rows (x C = 4 columns); backward rows per block
}  // namespace ia_avx512
#define XK_IA_NS ia_avx512
#include "kernels/interaction/interaction_simd.inc"
#undef XK_IA_NS
#undef XK_T

// ---- AVX2 ---------------------------------------------------------------------------------------
#define XK_T __attribute__((target("avx2,fma")))
namespace ia_avx2 {
constexpr int W = 8;
using VF = __m256;
XK_T inline VF zero() { return _mm256_setzero_ps(); }
XK_T inline VF set1(float f) { return _mm256_set1_ps(f); }
XK_T inline VF loadu(const float* p) { return _mm256_loadu_ps(p); }
XK_T inline void storeu(float* p, VF v) { _mm256_storeu_ps(p, v); }
XK_T inline VF fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
XK_T inline VF widen_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
XK_T inline void store_bf16(uint16_t* p, VF v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));  // abs < 2^31: signed compare is fine
    r = _mm256_blendv_epi8(r, _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40)), nan);
    const __m128i packed = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, _mm256_setzero_si256()), 0x08));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}
XK_T inline VF reduce(const VF* v) {
    VF s[4], u[2];
    for (int q = 0; q < 4; ++q) s[q] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * q], v[2 * q + 1]), _mm256_unpackhi_ps(v[2 * q], v[2 * q + 1]));
    for (int q = 0; q < 2; ++q) {
        const __m256d a = _mm256_castps_pd(s[2 * q]), b = _mm256_castps_pd(s[2 * q + 1]);
        u[q] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)), _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
}
XK_T inline void store4(float* dst, const float* src, int n) {
    const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32(n), _mm_setr_epi32(0, 1, 2, 3));
    _mm_maskstore_ps(dst, m, _mm_loadu_ps(src));
}
constexpr int R = 2;
}  // namespace ia_avx2
#define XK_IA_NS ia_avx2
#include "kernels/interaction/interaction_simd.inc"
#undef XK_IA_NS
#undef XK_T

namespace {
struct SimdInteraction final : InteractionKernel {
    using Fn = void (*)(const InteractionCall&, int64_t, int64_t);
    Fn fwd, bwd;
    SimdInteraction(Fn f, Fn b) : fwd(f), bwd(b) {}
    void forward(const InteractionCall& c, int64_t b0, int64_t b1) const override { fwd(c, b0, b1); }
    void backward(const InteractionCall& c, int64_t b0, int64_t b1) const override { bwd(c, b0, b1); }
};
}  // namespace

std::shared_ptr<const InteractionKernel> create_interaction_simd(const InteractionConfig&, Isa isa) {
    if (isa >= Isa::avx512) return std::make_shared<SimdInteraction>(ia_avx512::forward, ia_avx512::backward);
    return std::make_shared<SimdInteraction>(ia_avx2::forward, ia_avx2::backward);
}

}  // namespace xk::detail
