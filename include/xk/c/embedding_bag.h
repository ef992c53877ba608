/* xkernels C API — embedding_bag family (see xk/xk.h for xk_status and xk_last_error).
 * Semantics (offsets, modes, padding_idx, empty bags) are those of xk/embedding_bag.hpp. */
#ifndef XK_C_EMBEDDING_BAG_H
#define XK_C_EMBEDDING_BAG_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef enum xk_embedding_bag_mode XK_ENUM_INT {
    XK_EMBEDDING_BAG_SUM = 0,
    XK_EMBEDDING_BAG_MEAN = 1,
    XK_EMBEDDING_BAG_MAX = 2,
} xk_embedding_bag_mode;

/* The table and options (as xk::EmbeddingBagDesc, without the dtypes: the function says them).
 * Start from xk_embedding_bag_desc_init(): ld_table = ld_out = 0 (packed), mode SUM,
 * include_last_offset 0, padding_idx -1 (none). */
typedef struct xk_embedding_bag_desc {
    int64_t num_embeddings, dim;
    int64_t ld_table, ld_out; /* row strides in elements, 0 = dim */
    xk_embedding_bag_mode mode;
    int include_last_offset; /* offsets holds num_bags + 1 entries */
    int64_t padding_idx;     /* -1 = none */
} xk_embedding_bag_desc;

xk_status xk_embedding_bag_desc_init(xk_embedding_bag_desc* desc, int64_t num_embeddings, int64_t dim);

/* out[num_bags x dim] from table[num_embeddings x dim]; table and indices are required (non-NULL)
 * when num_indices > 0, offsets when num_bags + include_last_offset > 0, out when num_bags > 0.
 * per_sample_weights (f32[num_indices])
 * may be NULL (none); non-NULL requires mode SUM. */
xk_status xk_embedding_bag_f32(const xk_embedding_bag_desc* desc, const float* table, int64_t num_indices,
                               const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                               const float* per_sample_weights, float* out);
/* int32 indices and offsets. */
xk_status xk_embedding_bag_f32_i32(const xk_embedding_bag_desc* desc, const float* table, int64_t num_indices,
                                   const int32_t* indices, int64_t num_bags, const int32_t* offsets,
                                   const float* per_sample_weights, float* out);
/* bf16 table (raw bfloat16 bits), f32 output. */
xk_status xk_embedding_bag_bf16_f32(const xk_embedding_bag_desc* desc, const uint16_t* table, int64_t num_indices,
                                    const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                    const float* per_sample_weights, float* out);
/* Row-wise quantized tables (xk/embedding_bag.hpp, EmbeddingRowQuant): FBGEMM's fused rows of
 * ld_table bytes (0 = packed): q8 = uint8 q[dim], float scale, float bias; q4 = ceil(dim/2) bytes of
 * nibbles (low first), fp16 scale, fp16 bias. Element value q * scale + bias (sum / mean pool it
 * in the fused form: fma(q, w * scale, acc), the w * bias summed apart; see the C++ header). */
xk_status xk_embedding_bag_q8_f32(const xk_embedding_bag_desc* desc, const uint8_t* table, int64_t num_indices,
                                  const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                  const float* per_sample_weights, float* out);
xk_status xk_embedding_bag_q4_f32(const xk_embedding_bag_desc* desc, const uint8_t* table, int64_t num_indices,
                                  const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                  const float* per_sample_weights, float* out);
/* Embedding lookup (F.embedding): out[i] = table[indices[i]], num_indices x dim (row stride ld_out).
 * desc->mode must be SUM and include_last_offset 0. */
xk_status xk_embedding_f32(const xk_embedding_bag_desc* desc, const float* table, int64_t num_indices,
                           const int64_t* indices, float* out);

/* Backward of sum / mean pooling w.r.t. the table fused with a sparse optimizer step on the rows
 * the bags read (xk::embedding_bag_backward_update; IPEX's MergedEmbeddingBagWithSGD / WithAdagrad):
 *   grad_row[r] = sum of s_j * grad_out[bag(j)] over the entries j with indices[j] == r (padding
 *                 skipped; s_j = per_sample_weights[j], 1, or 1/count for MEAN)
 *   SGD      table[r] -= lr * grad_row[r]
 *   ADAGRAD  state[r] += grad_row[r]^2;  table[r] -= lr * (grad_row[r] / (sqrt(state[r]) + eps))
 * for every row some entry references (the others are untouched). f32 table updated in place;
 * grad_out num_bags rows of ld_out (desc->ld_out). Mode SUM or MEAN. The result does not depend on
 * the thread count. Everything is checked before anything is written. */
typedef enum xk_embedding_optimizer XK_ENUM_INT {
    XK_EMBEDDING_SGD = 0,
    XK_EMBEDDING_ADAGRAD = 1,
} xk_embedding_optimizer;

typedef struct xk_embedding_update {
    xk_embedding_optimizer optimizer;
    float lr;         /* finite, >= 0 */
    float eps;        /* ADAGRAD; finite, >= 0 */
    float* state;     /* ADAGRAD: f32 num_embeddings rows of ld_state (the accumulator); NULL for SGD */
    int64_t ld_state; /* 0 = dim */
} xk_embedding_update;

/* SGD, lr 0.01, eps 1e-10, state NULL, ld_state 0. */
xk_status xk_embedding_update_init(xk_embedding_update* update);

/* table (f32, updated), int64 indices / offsets, f32 grad_out. table and indices are required
 * when num_indices > 0, offsets when num_bags + include_last_offset > 0, grad_out when num_bags > 0. */
xk_status xk_embedding_bag_backward_update_f32(const xk_embedding_bag_desc* desc, float* table, int64_t num_indices,
                                               const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                               const float* per_sample_weights, const float* grad_out,
                                               const xk_embedding_update* update);
/* int32 indices and offsets. */
xk_status xk_embedding_bag_backward_update_f32_i32(const xk_embedding_bag_desc* desc, float* table, int64_t num_indices,
                                                   const int32_t* indices, int64_t num_bags, const int32_t* offsets,
                                                   const float* per_sample_weights, const float* grad_out,
                                                   const xk_embedding_update* update);
/* bf16 grad_out (raw bfloat16 bits). */
xk_status xk_embedding_bag_backward_update_f32_gbf16(const xk_embedding_bag_desc* desc, float* table,
                                                     int64_t num_indices, const int64_t* indices, int64_t num_bags,
                                                     const int64_t* offsets, const float* per_sample_weights,
                                                     const uint16_t* grad_out, const xk_embedding_update* update);

#ifdef __cplusplus
}
#endif
#endif
