// The avx512 embedding-bag kernels of int8 / int4 row-wise quantized tables (see
// embedding_bag_simd.cpp).
#define XK_EB_AVX512 1
#include "kernels/embedding_bag/embedding_bag_simd_isa.hpp"

namespace xk::detail::eb_avx512 {

EbRunFn pick_quant(const EmbeddingBagConfig& k) {
    return k.row_quant == EmbeddingRowQuant::int4_rowwise ? pick_index<Q4>(k) : pick_index<Q8>(k);
}

}  // namespace xk::detail::eb_avx512
