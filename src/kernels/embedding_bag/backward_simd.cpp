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
#ifdef __clang__
#pragma clang fp contract(off)  // (clang ignores the GCC pragma and contracts a * b + c into FMA)
#endif

#include "kernels/embedding_bag/embedding_bag.hpp"

namespace xk::detail {

// The vector ops of one ISA (V = the float vector, P = the intrinsics' prefix, BITS = the vector
// width, HI = the half-width integer vector bf16 rows load into, HLOAD its load), then the body.
#define XK_EBB_OPS(NS, WIDTH, V, P, BITS, HI, HLOAD)                                                 \
    namespace NS {                                                                                     \
    constexpr int W = WIDTH;                                                                           \
    using VF = V;                                                                                      \
    XK_T inline VF zero() { return P##_setzero_ps(); }                                                 \
    XK_T inline VF set1(float f) { return P##_set1_ps(f); }                                            \
    XK_T inline VF add(VF a, VF b) { return P##_add_ps(a, b); }                                        \
    XK_T inline VF sub(VF a, VF b) { return P##_sub_ps(a, b); }                                        \
    XK_T inline VF mul(VF a, VF b) { return P##_mul_ps(a, b); }                                        \
    XK_T inline VF div(VF a, VF b) { return P##_div_ps(a, b); }                                        \
    XK_T inline VF sqrt_(VF a) { return P##_sqrt_ps(a); }                                              \
    XK_T inline VF loadu(const float* p) { return P##_loadu_ps(p); }                                   \
    XK_T inline void storeu(float* p, VF v) { P##_storeu_ps(p, v); }                                   \
    XK_T inline VF load_bf16(const uint16_t* p) {                                                      \
        return P##_castsi##BITS##_ps(P##_slli_epi32(P##_cvtepu16_epi32(HLOAD(reinterpret_cast<const HI*>(p))), 16)); \
    }                                                                                                  \
    }

#define XK_T __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")))
XK_EBB_OPS(ebb_avx512, 16, __m512, _mm512, 512, __m256i, _mm256_loadu_si256)
#define XK_EBB_NS ebb_avx512
#include "kernels/embedding_bag/backward_simd.inc"
#undef XK_EBB_NS
#undef XK_T

#define XK_T __attribute__((target("avx2,fma")))
XK_EBB_OPS(ebb_avx2, 8, __m256, _mm256, 256, __m128i, _mm_loadu_si128)
#define XK_EBB_NS ebb_avx2
#include "kernels/embedding_bag/backward_simd.inc"
#undef XK_EBB_NS
#undef XK_T
#undef XK_EBB_OPS

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
