/* xkernels C API — attention family (see xk/xk.h for xk_status and xk_last_error).
 * Same semantics as include/xk/attention.hpp (read it for the math and the cache layouts):
 * q / o [tokens x heads x head_dim] packed, k / v [kv_tokens x kv_heads x head_dim] packed,
 * cu_seqlens int64 [batch + 1], scale 0 = 1/sqrt(head_dim). bf16 data as uint16_t bit patterns.
 * Zero a xk_kv_cache_desc with xk_kv_cache_desc_init before filling it (fields may be added). */
#ifndef XK_C_ATTENTION_H
#define XK_C_ATTENTION_H
#include "xk/xk.h"
#include "xk/c/rope.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_kv_layout XK_ENUM_INT {
    XK_KV_CONTIGUOUS = 0, /* K, V each [batch x kv_heads x capacity x head_dim] */
    XK_KV_PAGED = 1,      /* K, V each a pool [num_blocks x kv_heads x block_size x head_dim] + block table */
} xk_kv_layout;

typedef struct xk_kv_cache_desc {
    xk_kv_layout layout;
    xk_dtype dtype;             /* XK_DTYPE_F32, XK_DTYPE_BF16 or XK_DTYPE_S8 (int8 + scales: xk_kv_cache) */
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

/* ---- full form: cache buffers, RoPE-fused append, plans (mirror xk::KvCache, KvAppendArgs,
 * AttentionPlan, CachedAttentionPlan; packed q / k / v / o and new K / V rows) ---------------- */

/* A cache's buffers. s8 caches: k_scale / v_scale hold one f32 per (token, kv head) row
 * (xk_kv_cache_sizes' scale_elements each; row value = scale * int8); NULL for f32 / bf16. */
typedef struct xk_kv_cache {
    void* k;
    void* v;
    const int32_t* block_table; /* paged only */
    float* k_scale;
    float* v_scale;
} xk_kv_cache;

/* Elements of one K / V buffer, scales per buffer (s8), tokens per sequence; any may be NULL. */
xk_status xk_kv_cache_sizes(const xk_kv_cache_desc* desc, int64_t* elements, int64_t* scale_elements,
                            int64_t* capacity);

typedef struct xk_kv_append_args {
    int64_t tokens;
    xk_dtype src_dtype;         /* XK_DTYPE_F32 or XK_DTYPE_BF16 */
    const void* k_new;          /* [tokens x kv_heads x head_dim] packed */
    const void* v_new;
    const int64_t* seq_ids;     /* [tokens] */
    const int64_t* positions;   /* [tokens] */
    const float* rope_cos_sin;  /* optional: f32 [rope_max_position x rotary_dim]; NULL = no RoPE */
    int64_t rope_max_position;
    int64_t rope_rotary_dim;    /* even, <= head_dim; 0 = head_dim */
    xk_rope_style rope_style;
} xk_kv_append_args;
/* Zeroes args (fields may be added). */
void xk_kv_append_args_init(xk_kv_append_args* args);
/* xk_kv_cache_append with the cache as xk_kv_cache (s8 caches) and RoPE fused on K. */
xk_status xk_kv_cache_append_ex(const xk_kv_cache_desc* desc, const xk_kv_cache* cache, const xk_kv_append_args* args);

typedef struct xk_cached_attention_desc {
    xk_kv_cache_desc cache;
    int64_t q_tokens, q_heads;
    xk_dtype q_dtype, o_dtype; /* F32 or BF16 */
    float scale;               /* 0 = 1/sqrt(head_dim) */
    int64_t kv_splits;         /* 0 = automatic, 1 = never split */
} xk_cached_attention_desc;
void xk_cached_attention_desc_init(xk_cached_attention_desc* desc);

typedef struct xk_cached_attention_plan xk_cached_attention_plan; /* opaque */
/* Validates desc and selects the kernel once; *plan = NULL on failure. */
xk_status xk_cached_attention_plan_create(const xk_cached_attention_desc* desc, xk_cached_attention_plan** plan);
void xk_cached_attention_plan_destroy(xk_cached_attention_plan* plan); /* NULL is a no-op */
/* Safe to call from several threads at once on one plan. lse may be NULL. */
xk_status xk_cached_attention_plan_run(const xk_cached_attention_plan* plan, const xk_kv_cache* cache, const void* q,
                                       void* o, float* lse, const int64_t* cu_seqlens_q, const int64_t* context_lens);
const char* xk_cached_attention_plan_impl_name(const xk_cached_attention_plan* plan); /* "" for NULL */

typedef struct xk_attention_desc {
    int64_t batch, q_tokens, kv_tokens, q_heads, kv_heads, head_dim;
    xk_dtype dtype, o_dtype; /* F32 or BF16 */
    float scale;             /* 0 = 1/sqrt(head_dim) */
    int causal;
    int64_t causal_offset;
    int has_mask;            /* f32 mask [q_tokens x mask_stride] given to run */
    int64_t mask_stride;     /* 0 = kv_tokens */
} xk_attention_desc;
void xk_attention_desc_init(xk_attention_desc* desc);

typedef struct xk_attention_plan xk_attention_plan; /* opaque */
xk_status xk_attention_plan_create(const xk_attention_desc* desc, xk_attention_plan** plan);
void xk_attention_plan_destroy(xk_attention_plan* plan); /* NULL is a no-op */
/* cu_seqlens may be NULL when batch == 1; seqused_k, lse and (without has_mask) mask may be NULL. */
xk_status xk_attention_plan_run(const xk_attention_plan* plan, const void* q, const void* k, const void* v, void* o,
                                float* lse, const float* mask, const int64_t* cu_seqlens_q,
                                const int64_t* cu_seqlens_k, const int64_t* seqused_k);
const char* xk_attention_plan_impl_name(const xk_attention_plan* plan); /* "" for NULL */

/* ---- strided q / k / v / o (xk::AttentionDesc's strides) ----------------------------------------
 * Element (t, h, d) of q / o at t*q_token + h*q_head + d (k, v, o alike), in elements; 0 = packed
 * (head = head_dim, token = heads*head_dim). Each tensor's head stride >= head_dim and its token
 * stride >= (heads-1)*head + head_dim (token-major, rows may be padded): e.g. q, k, v as views of
 * one fused [tokens x 3*hidden] projection, no copies. Zero it with xk_attention_strides_init. */
typedef struct xk_attention_strides {
    int64_t q_token, q_head;
    int64_t k_token, k_head;
    int64_t v_token, v_head;
    int64_t o_token, o_head;
} xk_attention_strides;
void xk_attention_strides_init(xk_attention_strides* strides);
/* xk_attention_plan_create with strides (NULL = all packed). */
xk_status xk_attention_plan_create_strided(const xk_attention_desc* desc, const xk_attention_strides* strides,
                                           xk_attention_plan** plan);
/* One call, no plan kept: desc as for xk_attention_plan_create (dtype, o_dtype, scale, causal,
 * mask), strides (NULL = all packed), then the arguments of xk_attention_plan_run. */
xk_status xk_attention_strided(const xk_attention_desc* desc, const xk_attention_strides* strides, const void* q,
                               const void* k, const void* v, void* o, float* lse, const float* mask,
                               const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, const int64_t* seqused_k);

#ifdef __cplusplus
}
#endif
#endif
