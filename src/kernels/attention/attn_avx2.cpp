// AVX2 attention kernel (intrinsics, target pragma): decode (few rows) is attn_simd.hpp over 8
// lanes, prefill (>= 16 rows a task) attn_prefill256.hpp.
#include <immintrin.h>

#include <cstdint>
#include <memory>

#include "kernels/attention/attention.hpp"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

namespace xk::detail {
namespace {

struct V256 {
    using reg = __m256;
    static constexpr int W = 8;
    static constexpr int kDotChunks = 4;
    static constexpr int kPvRows = 4;
    static constexpr bool kPvWide = false;  // 4 vectors of head_dim x 6 rows in the P.V loop
    static constexpr bool kKeyBlocked = false;  // dots one key at a time (16 ymm registers)
    static inline reg reduce4(reg a, reg, reg, reg) { return a; }           // (unused: kKeyBlocked)
    static inline void reduce_final(const float*, int64_t, float*) {}
    static inline reg zero() { return _mm256_setzero_ps(); }
    static inline reg set1(float v) { return _mm256_set1_ps(v); }
    static inline reg load(const float* p) { return _mm256_loadu_ps(p); }
    static inline reg loadkv(const float* p) { return _mm256_loadu_ps(p); }
    static inline reg loadkv(const uint16_t* p) {
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
    }
    static inline void loadkv_pair(const float* p, reg& a, reg& b) {
        a = _mm256_loadu_ps(p);
        b = _mm256_loadu_ps(p + 8);
    }
    // 16 bf16: the even elements to e, the odd ones to o (exact).
    static inline void loadkv_pair(const uint16_t* p, reg& e, reg& o) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        e = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
        o = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536)));
    }
    static inline void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
    static inline reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
    static inline reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
    static inline reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
    static inline reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
    static inline reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
    static inline float hmax(reg v) {
        __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        x = _mm_max_ps(x, _mm_movehl_ps(x, x));
        x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
        return _mm_cvtss_f32(x);
    }
    static inline float hsum(reg v) {
        __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        x = _mm_add_ps(x, _mm_movehl_ps(x, x));
        x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
        return _mm_cvtss_f32(x);
    }
    static inline reg exp_masked(reg x, reg s) {
        x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
        const reg fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        reg r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
        r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
        reg y = _mm256_set1_ps(1.9875691500e-4f);
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
        y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
        y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
        y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
        return _mm256_and_ps(y, _mm256_cmp_ps(s, _mm256_set1_ps(-__builtin_inff()), _CMP_NEQ_OQ));
    }
    static inline __m256 hsum8(const float* z) {
        const __m256 a0 = _mm256_hadd_ps(_mm256_loadu_ps(z), _mm256_loadu_ps(z + 8));
        const __m256 a1 = _mm256_hadd_ps(_mm256_loadu_ps(z + 16), _mm256_loadu_ps(z + 24));
        const __m256 a2 = _mm256_hadd_ps(_mm256_loadu_ps(z + 32), _mm256_loadu_ps(z + 40));
        const __m256 a3 = _mm256_hadd_ps(_mm256_loadu_ps(z + 48), _mm256_loadu_ps(z + 56));
        const __m256 b0 = _mm256_hadd_ps(a0, a1), b1 = _mm256_hadd_ps(a2, a3);
        return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
    }
    // out[j] = sum of the 8 lanes of z[j*8 ...], j < 16.
    static inline void reduce_tile(const float* z, float* out) {
        _mm256_storeu_ps(out, hsum8(z));
        _mm256_storeu_ps(out + 8, hsum8(z + 64));
    }
};

#define XK_ATTN_CASES                                                                                            \
    XK_ATTN_NC(2) XK_ATTN_NC(4) XK_ATTN_NC(6) XK_ATTN_NC(8) XK_ATTN_NC(10) XK_ATTN_NC(12) XK_ATTN_NC(14)        \
    XK_ATTN_NC(16) XK_ATTN_NC(18) XK_ATTN_NC(20) XK_ATTN_NC(22) XK_ATTN_NC(24) XK_ATTN_NC(26) XK_ATTN_NC(28)    \
    XK_ATTN_NC(30) XK_ATTN_NC(32)
#include "kernels/attention/attn_simd.hpp"
#undef XK_ATTN_CASES
#include "kernels/attention/attn_prefill256.hpp"

// Many rows (prefill, chunked prefill, decode of wide GQA groups): the 64-key GEMM-shaped kernel;
// few rows (decode): dot products along head_dim.
constexpr int64_t kPrefillRows = 16;

void run_avx2(DType kv, const AttnTask& t, float* m, float* l, float* acc) {
    const bool many = t.tokens * t.group >= kPrefillRows;
    if (kv == DType::bf16) {
        if (many)
            attn_prefill256<uint16_t>(t, m, l, acc);
        else
            attn_dispatch<V256, uint16_t>(t, m, l, acc);
    } else {
        if (many)
            attn_prefill256<float>(t, m, l, acc);
        else
            attn_dispatch<V256, float>(t, m, l, acc);
    }
}

}  // namespace
}  // namespace xk::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace xk::detail {
namespace {
struct Avx2Attention final : AttnKernel {
    DType kv;
    explicit Avx2Attention(DType t) : kv(t) {}
    void run(const AttnTask& t, float* m, float* l, float* acc) const override { run_avx2(kv, t, m, l, acc); }
};
}  // namespace

std::shared_ptr<const AttnKernel> create_attention_avx2(const AttnKernelDesc& kd) {
    return std::make_shared<Avx2Attention>(kd.kv_dtype);
}

}  // namespace xk::detail
