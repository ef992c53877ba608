// The avx512 embedding-bag kernels of f32 / bf16 tables and the lookup's row copy (see
// embedding_bag_simd.cpp).
#define XK_EB_AVX512 1
#include "kernels/embedding_bag/embedding_bag_simd_isa.hpp"

namespace xk::detail::eb_avx512 {

EbRunFn pick_dense(const EmbeddingBagConfig& k) {
    return k.table_dtype == DType::bf16 ? pick_index<uint16_t>(k) : pick_index<float>(k);
}

EbRunFn pick_lookup(const EmbeddingBagConfig& k) { return pick_lookup_copy(k); }

}  // namespace xk::detail::eb_avx512
