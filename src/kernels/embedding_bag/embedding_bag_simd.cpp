// Vectorised embedding-bag forward (AVX-512 and AVX2 intrinsics in target-attribute functions:
// the op is a gather of table rows, memory-bound, so generated code buys nothing over them).
// One function per (ISA, index type, table dtype, pooling (sum and mean share one), column block
// of 1 / 2 / 4 / NVMAX vectors): the accumulators of a column block stay in registers over the
// bag's indices; wider rows take several blocks per bag (the later blocks read rows the first
// block brought to cache). Software prefetch of the rows of the indices 8 KiB (at most 16 rows)
// ahead, within the thread's bag range. Bit for bit the reference (see embedding_bag_simd.inc).
// The lookup's row copy (rows and out of one type) is there too.
//
// The instantiations live in four translation units, by ISA and table type
// (embedding_bag_{avx512,avx2}_{dense,quant}.cpp: the vector ops in embedding_bag_simd_isa.hpp,
// the kernels in embedding_bag_simd.inc), so a build compiles them in parallel; this file picks.
#include "kernels/embedding_bag/embedding_bag_simd.hpp"

namespace xk::detail {

namespace {
struct SimdEmbeddingBag final : EmbeddingBagKernel {
    EbRunFn fn, lookup;  // lookup: the row copy of xk::embedding where it applies (else null)
    SimdEmbeddingBag(EbRunFn f, EbRunFn l) : fn(f), lookup(l) {}
    void run(const EmbeddingBagCall& c, int64_t b0, int64_t b1) const override {
        if (c.lookup && lookup) lookup(c, b0, b1);
        else fn(c, b0, b1);
    }
};
}  // namespace

std::shared_ptr<const EmbeddingBagKernel> create_embedding_bag_simd(const EmbeddingBagConfig& k, Isa isa) {
    const bool quant = k.row_quant != EmbeddingRowQuant::none;
    if (isa >= Isa::avx512)
        return std::make_shared<SimdEmbeddingBag>(quant ? eb_avx512::pick_quant(k) : eb_avx512::pick_dense(k),
                                                  eb_avx512::pick_lookup(k));
    return std::make_shared<SimdEmbeddingBag>(quant ? eb_avx2::pick_quant(k) : eb_avx2::pick_dense(k),
                                              eb_avx2::pick_lookup(k));
}

}  // namespace xk::detail
