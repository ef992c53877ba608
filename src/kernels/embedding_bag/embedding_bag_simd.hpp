// The vectorised embedding-bag forward kernels of one ISA, by table type (each group in its own
// translation unit: embedding_bag_{avx512,avx2}_{dense,quant}.cpp; create_embedding_bag_simd in
// embedding_bag_simd.cpp picks among them).
#pragma once

#include "kernels/embedding_bag/embedding_bag.hpp"

namespace xk::detail {

using EbRunFn = void (*)(const EmbeddingBagCall&, int64_t, int64_t);

#define XK_EB_PICKS                                                                                         \
    /* f32 / bf16 tables */                                                                                 \
    EbRunFn pick_dense(const EmbeddingBagConfig& k);                                                        \
    /* int8 / int4 row-wise quantized tables */                                                             \
    EbRunFn pick_quant(const EmbeddingBagConfig& k);                                                        \
    /* the row copy of xk::embedding where it applies (rows and out of one type: f32 / bf16), else null */ \
    EbRunFn pick_lookup(const EmbeddingBagConfig& k);
namespace eb_avx512 {
XK_EB_PICKS
}
namespace eb_avx2 {
XK_EB_PICKS
}
#undef XK_EB_PICKS

}  // namespace xk::detail
