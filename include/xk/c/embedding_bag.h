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
 * nibbles (low first), fp16 scale, fp16 bias. Element value q * scale + bias. */
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

#ifdef __cplusplus
}
#endif
#endif
