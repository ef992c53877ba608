// Vectorised per-row part of the embedding-bag backward fused with SGD / Adagrad (AVX-512 and AVX2
// intrinsics in target-attribute functions): for each unique row, the scaled grad_out rows of its
// entries summed in column blocks of up to 8 vectors held in registers, then the update of the
// block. Element by element the reference's operations in its order (contraction off): bit for bit
// the same results.
#include <immintrin.h>

#include <cmath>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12 inside _mm512_sqrt_ps
#pragma GCC optimize("fp-contract=off")

#include "kernels/embedding_bag/embedding_bag.hpp"

namespace xk::detail {

#define XK_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
namespace ebb_avx512 {
constexpr int W = 16;
using VF = __m512;
XK_T inline VF zero() { return _mm512_setzero_ps(); }
XK_T inline VF set1(float f) { return _mm512_set1_ps(f); }
XK_T inline VF add(VF a, VF b) { return _mm512_add_ps(a, b); }
XK_T inline VF sub(VF a, VF b) { return _mm512_sub_ps(a, b); }
XK_T inline VF mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
XK_T inline VF div(VF a, VF b) { return _mm512_div_ps(a, b); }
XK_T inline VF sqrt_(VF a) { return _mm512_sqrt_ps(a); }
XK_T inline VF loadu(const float* p) { return _mm512_loadu_ps(p); }
XK_T inline void storeu(float* p, VF v) { _mm512_storeu_ps(p, v); }
XK_T inline VF load_bf16(const uint16_t* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
}  // namespace ebb_avx512
#define XK_EBB_NS ebb_avx512
#include "kernels/embedding_bag/backward_simd.inc"
#undef XK_EBB_NS
#undef XK_T

#define XK_T __attribute__((target("avx2,fma")))
namespace ebb_avx2 {
constexpr int W = 8;
using VF = __m256;
XK_T inline VF zero() { return _mm256_setzero_ps(); }
XK_T inline VF set1(float f) { return _mm256_set1_ps(f); }
XK_T inline VF add(VF a, VF b) { return _mm256_add_ps(a, b); }
XK_T inline VF sub(VF a, VF b) { return _mm256_sub_ps(a, b); }
XK_T inline VF mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
XK_T inline VF div(VF a, VF b) { return _mm256_div_ps(a, b); }
XK_T inline VF sqrt_(VF a) { return _mm256_sqrt_ps(a); }
XK_T inline VF loadu(const float* p) { return _mm256_loadu_ps(p); }
XK_T inline void storeu(float* p, VF v) { _mm256_storeu_ps(p, v); }
XK_T inline VF load_bf16(const uint16_t* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}
}  // namespace ebb_avx2
#define XK_EBB_NS ebb_avx2
#include "kernels/embedding_bag/backward_simd.inc"
#undef XK_EBB_NS
#undef XK_T

namespace {
struct SimdEmbBwd final : EmbBwdKernel {
    void (*fn)(const EmbBwdCtx&, int64_t, int64_t);
    explicit SimdEmbBwd(void (*f)(const EmbBwdCtx&, int64_t, int64_t)) : fn(f) {}
    void run(const EmbBwdCtx& x, int64_t u0, int64_t u1) const override { fn(x, u0, u1); }
};
}  // namespace

std::shared_ptr<const EmbBwdKernel> create_embedding_bag_backward_simd(const EmbBwdConfig& k, Isa isa) {
    return std::make_shared<SimdEmbBwd>(isa >= Isa::avx512 ? ebb_avx512::pick(k) : ebb_avx2::pick(k));
}

}  // namespace xk::detail
