// C API: embedding-bag family.
#include "capi/capi_common.hpp"
#include "common/check.hpp"
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

}  // extern "C"
