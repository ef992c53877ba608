// xkernels — embedding bag (torch.nn.EmbeddingBag / at::embedding_bag forward; FBGEMM's SpMDM;
// IPEX's merged embedding bag for DLRM).
//
//   table    num_embeddings x dim, row stride ld_table >= dim (0 = dim); f32 or bf16, or row-wise
//            quantized 8-bit / 4-bit rows (row_quant, below; ld_table then in bytes)
//   indices  num_indices rows of the table, int32 or int64 (IndexType)
//   offsets  bag starts, same integer type as indices (PyTorch semantics, see below)
//   out      num_bags x dim, row stride ld_out >= dim (0 = dim); f32 or bf16
//
// Bag b covers indices[offsets[b] .. end_b) where end_b = offsets[b+1] for b < num_bags-1, and
// for the last bag end = num_indices, or end = offsets[num_bags] with include_last_offset (then
// offsets holds num_bags+1 entries and indices past offsets[num_bags] are not read). offsets[0]
// must be 0, offsets must be non-decreasing and no offset may exceed num_indices.
//
// For each bag, over its entries j whose index is not padding_idx:
//   sum   out[b] = sum_j w_j * table[indices[j]]   (w_j = per_sample_weights[j], or 1)
//   mean  out[b] = (sum_j table[indices[j]]) / count   count = entries that are not padding
//   max   out[b] = elementwise max_j table[indices[j]]  (NaN propagates)
// A bag with no such entry (empty, or only padding) is all zeros, in every mode. Accumulation
// is f32 in index order; bf16 table rows are converted exactly to f32; a bf16 out is rounded to
// nearest even once, at the end. per_sample_weights are f32 and allowed only with mode sum (as
// in PyTorch). padding_idx = -1 means none; otherwise it must be in [0, num_embeddings).
//
// Every index that belongs to a bag is checked against [0, num_embeddings) before anything is
// written (one pass over the indices): an out-of-range one is an xk::Error naming its position,
// bag and value, and out is left as it was (every table's indices first, for the merged form).
//
// Static properties (the table and options) form the descriptor, so one plan serves every batch;
// the per-call sizes (num_bags, num_indices) are in the arguments.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "xk/types.hpp"

namespace xk {

enum class EmbeddingBagMode : int { sum = 0, mean = 1, max = 2 };  // PyTorch's mode numbers

enum class IndexType : int { i32 = 0, i64 = 1 };

// Row-wise quantized tables in FBGEMM's fused layouts (table_dtype must then be u8; ld_table is
// in bytes, 0 = the fused row size):
//   int8_rowwise  row = uint8 q[dim], float scale, float bias            (dim + 8 bytes; FBGEMM's
//                 "fused 8-bit rowwise", PyTorch's embedding_bag_byte_prepack)
//   int4_rowwise  row = uint8 [ceil(dim/2)] (element 2i in the low nibble of byte i, 2i+1 in the
//                 high nibble), fp16 scale, fp16 bias                     (ceil(dim/2) + 4 bytes;
//                 FBGEMM's "fused 4-bit rowwise SBHalf", PyTorch's embedding_bag_4bit_prepack)
// Element value: v = q * scale + bias (scale and bias as stored, fp16 ones converted exactly).
// sum / mean pool it in the fused form (as FBGEMM folds scale and bias): per entry, in index
// order, s = w * scale and c = w * bias (w = the per-sample weight, or 1; each product rounded),
// acc[k] = fma(q[k], s, acc[k]) (one rounding), and the c summed apart in f32; the bag's result is
// acc[k] + sum c (then / count for mean). Within a few f32 ulps of sum |w| (|q scale| + |bias|) of
// the exact value, the same on every ISA and thread count (not bit for bit the dequantized f32
// table's result). max pools v computed in f32 (the product rounded, then the sum): bit for bit
// the dequantized table's, as the lookup (xk::embedding) returns v. The scale / bias need no
// alignment.
enum class EmbeddingRowQuant : int { none = 0, int8_rowwise = 1, int4_rowwise = 2 };

const char* embedding_row_quant_name(EmbeddingRowQuant q) noexcept;
// Bytes of one fused row (no padding) for `dim` values.
int64_t embedding_row_quant_bytes(EmbeddingRowQuant q, int64_t dim) noexcept;

const char* embedding_bag_mode_name(EmbeddingBagMode m) noexcept;
const char* index_type_name(IndexType t) noexcept;

struct EmbeddingBagDesc {
    int64_t num_embeddings = 0;  // table rows (>= 0)
    int64_t dim = 1;             // embedding width (>= 1)
    int64_t ld_table = 0;        // table row stride in elements (0 = dim)
    int64_t ld_out = 0;          // output row stride in elements (0 = dim)
    EmbeddingBagMode mode = EmbeddingBagMode::sum;
    DType table_dtype = DType::f32;  // f32 or bf16
    DType out_dtype = DType::f32;    // f32 or bf16
    IndexType index_type = IndexType::i64;  // of indices and offsets
    bool include_last_offset = false;
    bool per_sample_weights = false;  // args.per_sample_weights is given (mode sum only)
    int64_t padding_idx = -1;         // -1 = none
    EmbeddingRowQuant row_quant = EmbeddingRowQuant::none;  // != none: table_dtype = u8, fused rows
};

struct EmbeddingBagArgs {
    int64_t num_bags = 0;     // B (>= 0)
    int64_t num_indices = 0;  // (>= 0)
    const void* table = nullptr;                  // required when num_indices > 0
    const void* indices = nullptr;                // index_type[num_indices]; required when num_indices > 0
    const void* offsets = nullptr;                // index_type[num_bags + include_last_offset]
    const float* per_sample_weights = nullptr;    // f32[num_indices]; iff desc.per_sample_weights (required when num_indices > 0)
    void* out = nullptr;                          // out_dtype[num_bags rows of ld_out]; required when num_bags > 0
};

// Validates the descriptor and selects/creates the kernel once (through the kernel cache).
// Immutable; run() may be called concurrently from several threads (on different outputs).
class EmbeddingBagPlan {
public:
    explicit EmbeddingBagPlan(const EmbeddingBagDesc& desc);  // copies share the kernel
    // Validates sizes, pointers, offsets and indices, then computes out.
    void run(const EmbeddingBagArgs& args) const;
    const EmbeddingBagDesc& desc() const;
    const char* impl_name() const;

private:
    struct State;
    std::shared_ptr<const State> s_;
};

// One-shot: validate, select (kernel cached per descriptor), run.
void embedding_bag(const EmbeddingBagDesc& desc, const EmbeddingBagArgs& args);

// Embedding lookup (torch.nn.functional.embedding forward): out[i] = table[indices[i]] for
// i < num_indices, converted to out_dtype (f32 / bf16 rows copied exactly, a bf16 out rounded to
// nearest even; quantized rows dequantized as above). The descriptor is the bag's, with mode sum,
// include_last_offset and per_sample_weights false; padding_idx is checked but, as in PyTorch's
// forward, its row is returned like any other. Every index must be in [0, num_embeddings)
// (checked before anything is written). Rows and out of one type are copied row by row (rows
// prefetched ahead; non-temporal stores for outputs past the streaming threshold, see
// docs/embedding.md); other pairs go through the bag kernels. One chunk of rows per thread.
struct EmbeddingArgs {
    int64_t num_indices = 0;
    const void* table = nullptr;    // required when num_indices > 0
    const void* indices = nullptr;  // index_type[num_indices]; required when num_indices > 0
    void* out = nullptr;            // out_dtype[num_indices rows of ld_out]; required when num_indices > 0
};
void embedding(const EmbeddingBagDesc& desc, const EmbeddingArgs& args);

// Backward of sum / mean pooling w.r.t. the table, fused with a sparse optimizer step on the rows
// the bags read (IPEX's MergedEmbeddingBagWithSGD / WithAdagrad semantics; no dense gradient):
//   grad_row[r] = sum over the entries j of every bag b with indices[j] == r (padding_idx
//                 skipped) of s_j * grad_out[b],  s_j = per_sample_weights[j] (sum), 1 (sum),
//                 or 1.0f / count_b (mean; count_b = the bag's entries that are not padding)
//   sgd       table[r] = table[r] - lr * grad_row[r]
//   adagrad   state[r] = state[r] + grad_row[r]^2;  table[r] = table[r] - lr * (grad_row[r] / (sqrt(state[r]) + eps))
//             (element-wise accumulator, torch.optim.Adagrad's formula without lr_decay / weight_decay)
// for every row r that some entry references (other rows untouched). f32 table (row_quant none);
// grad_out is out_dtype (f32 / bf16), num_bags rows of ld_out. grad_row is summed in f32 in entry
// order, so the result does not depend on the thread count; rows are sorted and deduplicated
// first and each unique row is updated by one thread (no write conflicts on hot rows).
// args.table is the table that is updated (it is written through a const_cast of that pointer)
// and args.out must be null. Everything is validated (indices, offsets, sizes, overlaps) before
// anything is written.
enum class EmbeddingOptimizer : int { sgd = 0, adagrad = 1 };
struct EmbeddingBagUpdate {
    EmbeddingOptimizer optimizer = EmbeddingOptimizer::sgd;
    float lr = 0.01f;
    float eps = 1e-10f;          // adagrad
    float* state = nullptr;      // adagrad: f32 num_embeddings x dim, row stride ld_state
    int64_t ld_state = 0;        // 0 = dim
};
void embedding_bag_backward_update(const EmbeddingBagDesc& desc, const EmbeddingBagArgs& args, const void* grad_out,
                                   const EmbeddingBagUpdate& update);

// Merged embedding bag (IPEX's MergedEmbeddingBag, DLRM): T tables looked up in one call, every
// table with the same number of bags B, written side by side into one output
//   out: B x ld_out (ld_out >= sum of dims, 0 = packed), table t in columns [col_t, col_t + dim_t)
//   with col_t = dim_0 + ... + dim_{t-1}.
// Every table must have the same out_dtype; each table's own ld_out must be 0 (the merged ld_out
// is used). Per call, args[t] describes table t with args[t].out == nullptr and args[t].num_bags
// equal for all tables. The work of all tables is split over the threads together.
class EmbeddingBagMultiPlan {
public:
    explicit EmbeddingBagMultiPlan(std::vector<EmbeddingBagDesc> tables, int64_t ld_out = 0);
    void run(const EmbeddingBagArgs* args, int64_t num_tables, void* out) const;
    int64_t num_tables() const;
    int64_t total_dim() const;       // sum of dims
    int64_t column(int64_t t) const;  // col_t
    int64_t ld_out() const;
    const char* impl_name(int64_t t) const;

private:
    struct State;
    std::shared_ptr<const State> s_;
};

void embedding_bag_multi(const std::vector<EmbeddingBagDesc>& tables, const EmbeddingBagArgs* args,
                         int64_t num_tables, void* out, int64_t ld_out = 0);

}  // namespace xk
