// Vectorised fused optimizer steps (AVX-512 and AVX2 intrinsics in target-attribute functions:
// a streaming elementwise update, memory-bound). Body in optim_simd.inc.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 inside _mm512_reduce_add_pd
// Each product rounds before its sum, as in the reference (compiled without FMA).
#pragma GCC optimize("fp-contract=off")
#ifdef __clang__
#pragma clang fp contract(off)  // (clang ignores the GCC pragma and contracts a * b + c into FMA)
#endif

#include "kernels/optim/optim.hpp"

namespace xk::detail {

// ---- AVX-512 ------------------------------------------------------------------------------------
#define XK_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
namespace opt_avx512 {
constexpr int W = 16;
using VF = __m512;
XK_T inline VF set1(float f) { return _mm512_set1_ps(f); }
XK_T inline VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
XK_T inline VF sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
XK_T inline VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
XK_T inline VF div(VF a, VF b) { return _mm512_div_ps(a, b); }
XK_T inline VF sqrt_(VF a) { return _mm512_sqrt_ps(a); }
XK_T inline VF neg(VF a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
// v > vm ? v : vm
XK_T inline VF max_gt(VF v, VF vm) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, vm, _CMP_GT_OQ), vm, v); }
XK_T inline VF loadu(const float* p) { return _mm512_loadu_ps(p); }
XK_T inline void storeu(float* p, VF v) { _mm512_storeu_ps(p, v); }
XK_T inline void stream(float* p, VF v) { _mm512_stream_ps(p, v); }
XK_T inline VF load_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
XK_T inline VF load_split(const uint16_t* hi, const uint16_t* lo) {
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)));
    const __m512i l = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_slli_epi32(h, 16), l));
}
XK_T inline void store_split(uint16_t* hi, uint16_t* lo, VF v) {
    const __m512i u = _mm512_castps_si512(v);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo), _mm512_cvtepi32_epi16(u));  // truncates to the low 16 bits
}
XK_T inline void store_split_nt(uint16_t* hi, uint16_t* lo, VF v) {
    const __m512i u = _mm512_castps_si512(v);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(hi), _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(lo), _mm512_cvtepi32_epi16(u));
}
// Two double accumulators' worth of lanes: sum of squares of the 16 floats, in double.
struct VD {
    __m512d lo, hi;
};
XK_T inline VD dzero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
XK_T inline VD acc_sq(VD a, VF x) {
    const __m512d l = _mm512_cvtps_pd(_mm512_castps512_ps256(x)), h = _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1));
    return {_mm512_fmadd_pd(l, l, a.lo), _mm512_fmadd_pd(h, h, a.hi)};
}
XK_T inline double dsum(VD a) { return _mm512_reduce_add_pd(_mm512_add_pd(a.lo, a.hi)); }
}  // namespace opt_avx512
#define XK_OPT_NS opt_avx512
#include "kernels/optim/optim_simd.inc"
#undef XK_OPT_NS
#undef XK_T

// ---- AVX2 ---------------------------------------------------------------------------------------
#define XK_T __attribute__((target("avx2,fma")))
namespace opt_avx2 {
constexpr int W = 8;
using VF = __m256;
XK_T inline VF set1(float f) { return _mm256_set1_ps(f); }
XK_T inline VF add(VF a, VF b) { return _mm256_add_ps(a, b); }
XK_T inline VF sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
XK_T inline VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
XK_T inline VF div(VF a, VF b) { return _mm256_div_ps(a, b); }
XK_T inline VF sqrt_(VF a) { return _mm256_sqrt_ps(a); }
XK_T inline VF neg(VF a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
XK_T inline VF max_gt(VF v, VF vm) { return _mm256_blendv_ps(vm, v, _mm256_cmp_ps(v, vm, _CMP_GT_OQ)); }
XK_T inline VF loadu(const float* p) { return _mm256_loadu_ps(p); }
XK_T inline void storeu(float* p, VF v) { _mm256_storeu_ps(p, v); }
XK_T inline void stream(float* p, VF v) { _mm256_stream_ps(p, v); }
XK_T inline VF load_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
XK_T inline VF load_split(const uint16_t* hi, const uint16_t* lo) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)));
    const __m256i l = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo)));
    return _mm256_castsi256_ps(_mm256_or_si256(_mm256_slli_epi32(h, 16), l));
}
// 8 x u32 (each <= 0xFFFF) -> 8 x u16.
XK_T inline __m128i narrow(__m256i x) {
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(x, _mm256_setzero_si256()), 0x08));
}
XK_T inline void store_split(uint16_t* hi, uint16_t* lo, VF v) {
    const __m256i u = _mm256_castps_si256(v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), narrow(_mm256_srli_epi32(u, 16)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), narrow(_mm256_and_si256(u, _mm256_set1_epi32(0xFFFF))));
}
XK_T inline void store_split_nt(uint16_t* hi, uint16_t* lo, VF v) {
    const __m256i u = _mm256_castps_si256(v);
    _mm_stream_si128(reinterpret_cast<__m128i*>(hi), narrow(_mm256_srli_epi32(u, 16)));
    _mm_stream_si128(reinterpret_cast<__m128i*>(lo), narrow(_mm256_and_si256(u, _mm256_set1_epi32(0xFFFF))));
}
struct VD {
    __m256d lo, hi;
};
XK_T inline VD dzero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
XK_T inline VD acc_sq(VD a, VF x) {
    const __m256d l = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), h = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    return {_mm256_fmadd_pd(l, l, a.lo), _mm256_fmadd_pd(h, h, a.hi)};
}
XK_T inline double dsum(VD a) {
    const __m256d s = _mm256_add_pd(a.lo, a.hi);
    const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(t, _mm_unpackhi_pd(t, t)));
}
}  // namespace opt_avx2
#define XK_OPT_NS opt_avx2
#include "kernels/optim/optim_simd.inc"
#undef XK_OPT_NS
#undef XK_T

namespace {
struct SimdOptim final : OptimKernel {
    void (*fn)(const OptimCall&, int64_t, int64_t);
    void (*norms)(const OptimCall&, int64_t, int64_t, double*, double*);
    SimdOptim(void (*f)(const OptimCall&, int64_t, int64_t), void (*nf)(const OptimCall&, int64_t, int64_t, double*, double*))
        : fn(f), norms(nf) {}
    void run(const OptimCall& c, int64_t i0, int64_t i1) const override { fn(c, i0, i1); }
    void lamb_norms(const OptimCall& c, int64_t i0, int64_t i1, double* p2, double* u2) const override {
        norms(c, i0, i1, p2, u2);
    }
};
}  // namespace

std::shared_ptr<const OptimKernel> create_optim_simd(const OptimConfig& k, Isa isa) {
    if (isa >= Isa::avx512) return std::make_shared<SimdOptim>(opt_avx512::pick(k), opt_avx512::pick_norms(k));
    return std::make_shared<SimdOptim>(opt_avx2::pick(k), opt_avx2::pick_norms(k));
}

}  // namespace xk::detail
