// C API: rope family.
#include <cstring>

#include "capi/capi_common.hpp"
#include "kernels/rope/rope.hpp"

using xk::detail::capi_call;

namespace {

template <class T>
xk_status c_rope(const char* fn, const xk_rope_style& style, int64_t tokens, int64_t q_heads, int64_t k_heads,
                 int64_t head_dim, int64_t rotary_dim, T* q, int64_t q_token_stride, int64_t q_head_stride, T* k,
                 int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions, const float* cache,
                 int64_t max_position, bool use_cache, float base, float scaling_factor) {
    return capi_call([&] {
        xk::RopeDesc d;
        d.style = static_cast<xk::RopeStyle>(xk::detail::c_enum(style));
        d.tokens = tokens;
        d.q_heads = q_heads;
        d.k_heads = k_heads;
        d.head_dim = head_dim;
        d.rotary_dim = rotary_dim;
        d.dtype = sizeof(T) == 2 ? xk::DType::bf16 : xk::DType::f32;
        d.q_token_stride = q_token_stride;
        d.q_head_stride = q_head_stride;
        d.k_token_stride = k_token_stride;
        d.k_head_stride = k_head_stride;
        d.position_type = xk::RopePositionType::s64;
        xk::RopeArgs a;
        a.q = q;
        a.k = k;
        a.positions = positions;
        if (use_cache) {
            d.cos_sin = xk::RopeCosSin::cache;
            d.cache_dtype = xk::DType::f32;
            d.max_position = max_position;
            a.cos_sin_cache = cache;
        } else {
            d.cos_sin = xk::RopeCosSin::compute;
            d.base = base;
            d.scaling_factor = scaling_factor;
        }
        xk::detail::rope_one_shot(fn, d, a);
    });
}

}  // namespace

extern "C" {

xk_status xk_rope_f32(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                      int64_t rotary_dim, float* q, int64_t q_token_stride, int64_t q_head_stride, float* k,
                      int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions,
                      const float* cos_sin_cache, int64_t max_position) {
    return c_rope<float>("xk_rope_f32", style, tokens, q_heads, k_heads, head_dim, rotary_dim, q, q_token_stride,
                         q_head_stride, k, k_token_stride, k_head_stride, positions, cos_sin_cache, max_position, true, 0.0f,
                         0.0f);
}
xk_status xk_rope_bf16(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                       int64_t rotary_dim, uint16_t* q, int64_t q_token_stride, int64_t q_head_stride, uint16_t* k,
                       int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions,
                       const float* cos_sin_cache, int64_t max_position) {
    return c_rope<uint16_t>("xk_rope_bf16", style, tokens, q_heads, k_heads, head_dim, rotary_dim, q, q_token_stride,
                            q_head_stride, k, k_token_stride, k_head_stride, positions, cos_sin_cache, max_position,
                            true, 0.0f, 0.0f);
}
xk_status xk_rope_theta_f32(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                            int64_t rotary_dim, float* q, int64_t q_token_stride, int64_t q_head_stride, float* k,
                            int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions, float base,
                            float scaling_factor) {
    return c_rope<float>("xk_rope_theta_f32", style, tokens, q_heads, k_heads, head_dim, rotary_dim, q,
                         q_token_stride, q_head_stride, k, k_token_stride, k_head_stride, positions, nullptr, 0, false, base,
                         scaling_factor);
}
xk_status xk_rope_theta_bf16(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                             int64_t rotary_dim, uint16_t* q, int64_t q_token_stride, int64_t q_head_stride,
                             uint16_t* k, int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions,
                             float base, float scaling_factor) {
    return c_rope<uint16_t>("xk_rope_theta_bf16", style, tokens, q_heads, k_heads, head_dim, rotary_dim, q,
                            q_token_stride, q_head_stride, k, k_token_stride, k_head_stride, positions, nullptr, 0,
                            false, base, scaling_factor);
}

}  // extern "C"
