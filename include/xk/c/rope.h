/* xkernels C API — rope family (see xk/xk.h for xk_status and xk_last_error).
 * Same semantics as include/xk/rope.hpp: q [tokens x q_heads x head_dim] and k [tokens x k_heads x
 * head_dim] rotated in place, strides in elements (0 = packed); k may be NULL with k_heads = 0;
 * rotary_dim 0 = head_dim; positions int64. bf16 data as uint16_t bit patterns. */
#ifndef XK_C_ROPE_H
#define XK_C_ROPE_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_rope_style XK_ENUM_INT {
    XK_ROPE_NEOX = 0, /* rotate halves: pairs (x[i], x[i + rotary_dim/2]) */
    XK_ROPE_GPTJ = 1, /* interleaved: pairs (x[2i], x[2i + 1]) */
} xk_rope_style;

/* cos / sin from cos_sin_cache [max_position x rotary_dim] (f32), row p = concat(cos, sin). */
xk_status xk_rope_f32(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                      int64_t rotary_dim, float* q, int64_t q_token_stride, int64_t q_head_stride, float* k,
                      int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions,
                      const float* cos_sin_cache, int64_t max_position);
xk_status xk_rope_bf16(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                       int64_t rotary_dim, uint16_t* q, int64_t q_token_stride, int64_t q_head_stride, uint16_t* k,
                       int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions,
                       const float* cos_sin_cache, int64_t max_position);

/* cos / sin computed: theta_i = (p / scaling_factor) * base^(-2i / rotary_dim). */
xk_status xk_rope_theta_f32(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                            int64_t rotary_dim, float* q, int64_t q_token_stride, int64_t q_head_stride, float* k,
                            int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions, float base,
                            float scaling_factor);
xk_status xk_rope_theta_bf16(xk_rope_style style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                             int64_t rotary_dim, uint16_t* q, int64_t q_token_stride, int64_t q_head_stride,
                             uint16_t* k, int64_t k_token_stride, int64_t k_head_stride, const int64_t* positions,
                             float base, float scaling_factor);

#ifdef __cplusplus
}
#endif
#endif
