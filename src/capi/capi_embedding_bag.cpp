// C API: embedding-bag family.
#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "kernels/embedding_bag/embedding_bag.hpp"
#include "xk/embedding_bag.hpp"

using xk::detail::capi_call;

namespace {

xk_status embedding_bag(const char* fn, const xk_embedding_bag_desc* desc, xk::DType table_t, xk::IndexType index_t,
                        const void* table, int64_t num_indices, const void* indices, int64_t num_bags,
                        const void* offsets, const float* per_sample_weights, float* out,
                        xk::EmbeddingRowQuant rq = xk::EmbeddingRowQuant::none) {
    return capi_call([&] {
        xk::detail::check_not_null(fn, "desc", desc);
        xk::EmbeddingBagDesc d;
        d.num_embeddings = desc->num_embeddings;
        d.dim = desc->dim;
        d.ld_table = desc->ld_table;
        d.ld_out = desc->ld_out;
        d.mode = static_cast<xk::EmbeddingBagMode>(xk::detail::c_enum(desc->mode));
        d.table_dtype = table_t;
        d.out_dtype = xk::DType::f32;
        d.index_type = index_t;
        d.include_last_offset = desc->include_last_offset != 0;
        d.per_sample_weights = per_sample_weights != nullptr;
        d.padding_idx = desc->padding_idx;
        d.row_quant = rq;
        xk::EmbeddingBagArgs a;
        a.num_bags = num_bags;
        a.num_indices = num_indices;
        a.table = table;
        a.indices = indices;
        a.offsets = offsets;
        a.per_sample_weights = per_sample_weights;
        a.out = out;
        xk::embedding_bag(d, a);
    });
}

xk_status backward_update(const char* fn, const xk_embedding_bag_desc* desc, xk::IndexType index_t, float* table,
                          int64_t num_indices, const void* indices, int64_t num_bags, const void* offsets,
                          const float* per_sample_weights, xk::DType grad_t, const void* grad_out,
                          const xk_embedding_update* update) {
    return capi_call([&] {
        xk::detail::check_not_null(fn, "desc", desc);
        xk::detail::check_not_null(fn, "update", update);
        xk::EmbeddingBagDesc d;
        d.num_embeddings = desc->num_embeddings;
        d.dim = desc->dim;
        d.ld_table = desc->ld_table;
        d.ld_out = desc->ld_out;
        d.mode = static_cast<xk::EmbeddingBagMode>(xk::detail::c_enum(desc->mode));
        d.table_dtype = xk::DType::f32;
        d.out_dtype = grad_t;
        d.index_type = index_t;
        d.include_last_offset = desc->include_last_offset != 0;
        d.per_sample_weights = per_sample_weights != nullptr;
        d.padding_idx = desc->padding_idx;
        xk::EmbeddingBagArgs a;
        a.num_bags = num_bags;
        a.num_indices = num_indices;
        a.table = table;
        a.indices = indices;
        a.offsets = offsets;
        a.per_sample_weights = per_sample_weights;
        xk::EmbeddingBagUpdate u;
        u.optimizer = static_cast<xk::EmbeddingOptimizer>(xk::detail::c_enum(update->optimizer));
        u.lr = update->lr;
        u.eps = update->eps;
        u.state = update->state;
        u.ld_state = update->ld_state;
        xk::detail::embedding_bag_backward_update_impl(fn, d, a, grad_out, u);
    });
}

}  // namespace

extern "C" {

xk_status xk_embedding_bag_desc_init(xk_embedding_bag_desc* desc, int64_t num_embeddings, int64_t dim) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_embedding_bag_desc_init", "desc", desc);
        *desc = xk_embedding_bag_desc{};
        desc->num_embeddings = num_embeddings;
        desc->dim = dim;
        desc->mode = XK_EMBEDDING_BAG_SUM;
        desc->include_last_offset = 0;
        desc->padding_idx = -1;
    });
}

xk_status xk_embedding_bag_f32(const xk_embedding_bag_desc* desc, const float* table, int64_t num_indices,
                               const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                               const float* per_sample_weights, float* out) {
    return embedding_bag("xk_embedding_bag_f32", desc, xk::DType::f32, xk::IndexType::i64, table, num_indices,
                         indices, num_bags, offsets, per_sample_weights, out);
}

xk_status xk_embedding_bag_f32_i32(const xk_embedding_bag_desc* desc, const float* table, int64_t num_indices,
                                   const int32_t* indices, int64_t num_bags, const int32_t* offsets,
                                   const float* per_sample_weights, float* out) {
    return embedding_bag("xk_embedding_bag_f32_i32", desc, xk::DType::f32, xk::IndexType::i32, table, num_indices,
                         indices, num_bags, offsets, per_sample_weights, out);
}

xk_status xk_embedding_bag_bf16_f32(const xk_embedding_bag_desc* desc, const uint16_t* table, int64_t num_indices,
                                    const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                    const float* per_sample_weights, float* out) {
    return embedding_bag("xk_embedding_bag_bf16_f32", desc, xk::DType::bf16, xk::IndexType::i64, table, num_indices,
                         indices, num_bags, offsets, per_sample_weights, out);
}

xk_status xk_embedding_bag_q8_f32(const xk_embedding_bag_desc* desc, const uint8_t* table, int64_t num_indices,
                                  const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                  const float* per_sample_weights, float* out) {
    return embedding_bag("xk_embedding_bag_q8_f32", desc, xk::DType::u8, xk::IndexType::i64, table, num_indices,
                         indices, num_bags, offsets, per_sample_weights, out, xk::EmbeddingRowQuant::int8_rowwise);
}

xk_status xk_embedding_bag_q4_f32(const xk_embedding_bag_desc* desc, const uint8_t* table, int64_t num_indices,
                                  const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                  const float* per_sample_weights, float* out) {
    return embedding_bag("xk_embedding_bag_q4_f32", desc, xk::DType::u8, xk::IndexType::i64, table, num_indices,
                         indices, num_bags, offsets, per_sample_weights, out, xk::EmbeddingRowQuant::int4_rowwise);
}

xk_status xk_embedding_f32(const xk_embedding_bag_desc* desc, const float* table, int64_t num_indices,
                           const int64_t* indices, float* out) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_embedding_f32", "desc", desc);
        xk::EmbeddingBagDesc d;
        d.num_embeddings = desc->num_embeddings;
        d.dim = desc->dim;
        d.ld_table = desc->ld_table;
        d.ld_out = desc->ld_out;
        d.mode = static_cast<xk::EmbeddingBagMode>(xk::detail::c_enum(desc->mode));
        d.include_last_offset = desc->include_last_offset != 0;
        d.padding_idx = desc->padding_idx;
        xk::embedding(d, xk::EmbeddingArgs{num_indices, table, indices, out});
    });
}

xk_status xk_embedding_update_init(xk_embedding_update* update) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_embedding_update_init", "update", update);
        *update = xk_embedding_update{};
        update->optimizer = XK_EMBEDDING_SGD;
        update->lr = 0.01f;
        update->eps = 1e-10f;
        update->state = nullptr;
        update->ld_state = 0;
    });
}

xk_status xk_embedding_bag_backward_update_f32(const xk_embedding_bag_desc* desc, float* table, int64_t num_indices,
                                               const int64_t* indices, int64_t num_bags, const int64_t* offsets,
                                               const float* per_sample_weights, const float* grad_out,
                                               const xk_embedding_update* update) {
    return backward_update("xk_embedding_bag_backward_update_f32", desc, xk::IndexType::i64, table, num_indices, indices,
                           num_bags, offsets, per_sample_weights, xk::DType::f32, grad_out, update);
}

xk_status xk_embedding_bag_backward_update_f32_i32(const xk_embedding_bag_desc* desc, float* table, int64_t num_indices,
                                                   const int32_t* indices, int64_t num_bags, const int32_t* offsets,
                                                   const float* per_sample_weights, const float* grad_out,
                                                   const xk_embedding_update* update) {
    return backward_update("xk_embedding_bag_backward_update_f32_i32", desc, xk::IndexType::i32, table, num_indices,
                           indices, num_bags, offsets, per_sample_weights, xk::DType::f32, grad_out, update);
}

xk_status xk_embedding_bag_backward_update_f32_gbf16(const xk_embedding_bag_desc* desc, float* table,
                                                     int64_t num_indices, const int64_t* indices, int64_t num_bags,
                                                     const int64_t* offsets, const float* per_sample_weights,
                                                     const uint16_t* grad_out, const xk_embedding_update* update) {
    return backward_update("xk_embedding_bag_backward_update_f32_gbf16", desc, xk::IndexType::i64, table, num_indices,
                           indices, num_bags, offsets, per_sample_weights, xk::DType::bf16, grad_out, update);
}

}  // extern "C"
