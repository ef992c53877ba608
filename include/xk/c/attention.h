/* xkernels C API — attention family (see xk/xk.h for xk_status and xk_last_error).
 * Same semantics as include/xk/attention.hpp (read it for the math and the cache layouts):
 * q / o [tokens x heads x head_dim] packed, k / v [kv_tokens x kv_heads x head_dim] packed,
 * cu_seqlens int64 [batch + 1], scale 0 = 1/sqrt(head_dim). bf16 data as uint16_t bit patterns.
 * Zero a xk_kv_cache_desc with xk_kv_cache_desc_init before filling it (fields may be added). */
#ifndef XK_C_ATTENTION_H
#define XK_C_ATTENTION_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_kv_layout XK_ENUM_INT {
    XK_KV_CONTIGUOUS = 0, /* K, V each [batch x kv_heads x capacity x head_dim] */
    XK_KV_PAGED = 1,      /* K, V each a pool [num_blocks x kv_heads x block_size x head_dim] + block table */
} xk_kv_layout;

typedef struct xk_kv_cache_desc {
    xk_kv_layout layout;
    xk_dtype dtype;             /* XK_DTYPE_F32 or XK_DTYPE_BF16 */
    int64_t batch, kv_heads, head_dim;
    int64_t capacity;           /* contiguous */
    int64_t block_size;         /* paged: 16, 32 or 64 */
    int64_t num_blocks;         /* paged */
    int64_t max_blocks_per_seq; /* paged: columns of block_table (int32 [batch x max_blocks_per_seq]) */
} xk_kv_cache_desc;

void xk_kv_cache_desc_init(xk_kv_cache_desc* desc);

/* Token t of k_new / v_new ([tokens x kv_heads x head_dim], src_dtype) into sequence seq_ids[t]
 * at position positions[t]; every index checked before anything is written. */
xk_status xk_kv_cache_append(const xk_kv_cache_desc* desc, void* k_cache, void* v_cache, const int32_t* block_table,
                             int64_t tokens, xk_dtype src_dtype, const void* k_new, const void* v_new,
                             const int64_t* seq_ids, const int64_t* positions);

/* Queries of sequence b: tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]) at the last positions of
 * its context_lens[b] cached tokens, causal (decode: one query per sequence). lse may be NULL. */
xk_status xk_cached_attention_f32(const xk_kv_cache_desc* desc, const void* k_cache, const void* v_cache,
                                  const int32_t* block_table, int64_t q_tokens, int64_t q_heads, const float* q,
                                  float* o, float* lse, const int64_t* cu_seqlens_q, const int64_t* context_lens,
                                  float scale);
xk_status xk_cached_attention_bf16(const xk_kv_cache_desc* desc, const void* k_cache, const void* v_cache,
                                   const int32_t* block_table, int64_t q_tokens, int64_t q_heads, const uint16_t* q,
                                   uint16_t* o, float* lse, const int64_t* cu_seqlens_q, const int64_t* context_lens,
                                   float scale);

/* Fused SDPA over q / k / v tensors; causal: query i sees keys j <= i + causal_offset; mask: f32
 * [q_tokens x mask_stride] additive (NULL = none); cu_seqlens may be NULL when batch == 1. */
xk_status xk_attention_f32(int64_t batch, int64_t q_tokens, int64_t kv_tokens, int64_t q_heads, int64_t kv_heads,
                           int64_t head_dim, const float* q, const float* k, const float* v, float* o, float* lse,
                           const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, float scale, int causal,
                           int64_t causal_offset, const float* mask, int64_t mask_stride);
xk_status xk_attention_bf16(int64_t batch, int64_t q_tokens, int64_t kv_tokens, int64_t q_heads, int64_t kv_heads,
                            int64_t head_dim, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o,
                            float* lse, const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, float scale,
                            int causal, int64_t causal_offset, const float* mask, int64_t mask_stride);

#ifdef __cplusplus
}
#endif
#endif
