// AVX-512 attention kernel (intrinsics, target pragma): decode (few rows) is attn_simd.hpp over 16
// lanes, prefill (>= 16 rows) the 64-key GEMM-shaped kernel of attn_prefill512.hpp.
#include <immintrin.h>

#include <cstdint>
#include <memory>

#include "kernels/attention/attention.hpp"

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands): false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif

namespace xk::detail {
namespace {

struct V512 {
    using reg = __m512;
    static constexpr int W = 16;
    static constexpr int kDotChunks = 8;
    static constexpr int kPvRows = 8;
    static constexpr bool kPvWide = true;  // 4 vectors of head_dim x 6 rows in the P.V loop
    static constexpr bool kKeyBlocked = true;  // decode dots: 4 keys x up to 4 rows (attn_dots4)
    static inline reg zero() { return _mm512_setzero_ps(); }
    static inline reg set1(float v) { return _mm512_set1_ps(v); }
    static inline reg load(const float* p) { return _mm512_loadu_ps(p); }
    static inline reg loadkv(const float* p) { return _mm512_loadu_ps(p); }
    static inline reg loadkv(const uint16_t* p) {
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
    }
    static inline reg loadkv(const int8_t* p) {
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
    }
    static inline void loadkv_pair(const float* p, reg& a, reg& b) {
        a = _mm512_loadu_ps(p);
        b = _mm512_loadu_ps(p + 16);
    }
    // 32 bf16: the even elements to e, the odd ones to o (exact).
    static inline void loadkv_pair(const uint16_t* p, reg& e, reg& o) {
        const __m512i x = _mm512_loadu_si512(p);
        e = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
        o = _mm512_castsi512_ps(_mm512_and_si512(x, _mm512_set1_epi32(-65536)));
    }
    static inline void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
    static inline reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
    static inline reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
    static inline reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
    static inline reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
    static inline reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
    static inline float hmax(reg v) { return _mm512_reduce_max_ps(v); }
    static inline float hsum(reg v) { return _mm512_reduce_add_ps(v); }
    // exp(x) for x <= 0 (Cephes polynomial, ~1 ulp), lanes where s is -inf exactly 0.
    static inline reg exp_masked(reg x, reg s) {
        x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
        const reg fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        reg r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
        r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
        reg y = _mm512_set1_ps(1.9875691500e-4f);
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
        y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
        y = _mm512_scalef_ps(y, fx);
        const __mmask16 k = _mm512_cmp_ps_mask(s, _mm512_set1_ps(-__builtin_inff()), _CMP_NEQ_OQ);
        return _mm512_maskz_mov_ps(k, y);
    }
    static inline __m256 hsum8(const __m256* y) {
        const __m256 a0 = _mm256_hadd_ps(y[0], y[1]), a1 = _mm256_hadd_ps(y[2], y[3]);
        const __m256 a2 = _mm256_hadd_ps(y[4], y[5]), a3 = _mm256_hadd_ps(y[6], y[7]);
        const __m256 b0 = _mm256_hadd_ps(a0, a1), b1 = _mm256_hadd_ps(a2, a3);
        return _mm256_add_ps(_mm256_permute2f128_ps(b0, b1, 0x20), _mm256_permute2f128_ps(b0, b1, 0x31));
    }
    // Keys a, b, c, d -> per 128-bit lane L: [sum a_L, sum b_L, sum c_L, sum d_L] (4 lanes each).
    static inline reg reduce4(reg a, reg b, reg c, reg d) {
        const reg t0 = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
        const reg t1 = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
        return _mm512_add_ps(_mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    // u[g*ustride ...] (g < 4) from reduce4 of keys 4g..4g+3 -> out[0..16): the 16 full sums.
    static inline void reduce_final(const float* u, int64_t ustride, float* out) {
        const reg u0 = _mm512_loadu_ps(u), u1 = _mm512_loadu_ps(u + ustride);
        const reg u2 = _mm512_loadu_ps(u + 2 * ustride), u3 = _mm512_loadu_ps(u + 3 * ustride);
        const reg w0 = _mm512_add_ps(_mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
        const reg w1 = _mm512_add_ps(_mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(u2, u3, _MM_SHUFFLE(3, 1, 3, 1)));
        _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(2, 0, 2, 0)),
                                            _mm512_shuffle_f32x4(w0, w1, _MM_SHUFFLE(3, 1, 3, 1))));
    }
    // out[j] = sum of the 16 lanes of z[j*16 ...], j < 16.
    static inline void reduce_tile(const float* z, float* out) {
        __m256 y[16];
        for (int j = 0; j < 16; ++j) {
            const __m512 v = _mm512_loadu_ps(z + j * 16);
            y[j] = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
        }
        _mm256_storeu_ps(out, hsum8(y));
        _mm256_storeu_ps(out + 8, hsum8(y + 8));
    }
};

#define XK_ATTN_CASES                                                                                           \
    XK_ATTN_NC(1) XK_ATTN_NC(2) XK_ATTN_NC(3) XK_ATTN_NC(4) XK_ATTN_NC(5) XK_ATTN_NC(6) XK_ATTN_NC(7)          \
    XK_ATTN_NC(8) XK_ATTN_NC(9) XK_ATTN_NC(10) XK_ATTN_NC(11) XK_ATTN_NC(12) XK_ATTN_NC(13) XK_ATTN_NC(14)     \
    XK_ATTN_NC(15) XK_ATTN_NC(16)
#include "kernels/attention/attn_simd.hpp"
#include "kernels/attention/attn_prefill512.hpp"
#include "kernels/attention/attn_seq_decode.hpp"

// Many rows (prefill, chunked prefill, decode of wide GQA groups): the 64-key GEMM-shaped kernel;
// few rows (decode): dot products along head_dim.
constexpr int64_t kPrefillRows = 16;

template <class T>
void prefill_dispatch(const AttnTask& t, float* m, float* l, float* acc) {
    switch (t.head_dim / 16) {
#define XK_ATTN_NC(nc) \
    case nc:                                   \
        if constexpr (attn_hd_compiled(nc * 16)) { \
            attn_prefill<T, nc>(t, m, l, acc);     \
            return;                                \
        }                                          \
        break;
        XK_ATTN_CASES
#undef XK_ATTN_NC
    }
    __builtin_trap();
}
#undef XK_ATTN_CASES

void run_avx512(DType kv, const AttnTask& t, float* m, float* l, float* acc) {
    const bool many = t.tokens * t.group >= kPrefillRows;
    if (kv == DType::s8) {  // int8 cache: the decode code for every row count
        attn_dispatch<V512, int8_t>(t, m, l, acc);
    } else if (kv == DType::bf16) {
        if (many)
            prefill_dispatch<uint16_t>(t, m, l, acc);
        else
            attn_dispatch<V512, uint16_t>(t, m, l, acc);
    } else {
        if (many)
            prefill_dispatch<float>(t, m, l, acc);
        else if (!(attn_decode_seq() && run_decode_seq(t, m, l, acc)))
            attn_dispatch<V512, float>(t, m, l, acc);
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
struct Avx512Attention final : AttnKernel {
    DType kv;
    explicit Avx512Attention(DType t) : kv(t) {}
    void run(const AttnTask& t, float* m, float* l, float* acc) const override { run_avx512(kv, t, m, l, acc); }
};
}  // namespace

std::shared_ptr<const AttnKernel> create_attention_avx512(const AttnKernelDesc& kd) {
    return std::make_shared<Avx512Attention>(kd.kv_dtype);
}

}  // namespace xk::detail
