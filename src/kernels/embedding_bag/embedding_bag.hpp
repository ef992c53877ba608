// Internal interface of the embedding-bag family, shared by its implementations and the tests.
//
// Validation is split in three so that fast kernels can take over the expensive part:
//   embedding_bag_validate_desc     once per plan: sizes, enums, dtypes, padding_idx
//   embedding_bag_validate_args     per call, O(num_bags): sizes, pointers, overlap, offsets
//   embedding_bag_validate_indices  per call, O(num_indices): every index read is in range
// The entry points run all three before any kernel writes (a rejected call leaves out as it was),
// whatever the kernel checks itself; embedding_bag_bad_index() words the message.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/embedding_bag.hpp"

namespace xk::detail {

// What a kernel may specialise on (the kernel-cache key). num_embeddings and the value of
// padding_idx are deliberately not part of it: they are read at run time from the call, so the
// many tables of a model that share a width share one kernel (as FBGEMM's generated kernels do).
struct EmbeddingBagConfig {
    int64_t dim = 1, ld_table = 1, ld_out = 1;  // resolved (never 0)
    EmbeddingBagMode mode = EmbeddingBagMode::sum;
    DType table_dtype = DType::f32, out_dtype = DType::f32;
    IndexType index_type = IndexType::i64;
    bool include_last_offset = false;
    bool weighted = false;     // per_sample_weights
    bool has_padding = false;  // padding_idx >= 0
    EmbeddingRowQuant row_quant = EmbeddingRowQuant::none;

    std::string key() const;
};

// Bytes of a table row's stored values (fused row for quantized tables) and the row stride in bytes.
int64_t embedding_bag_row_bytes(const EmbeddingBagDesc& d);
int64_t embedding_bag_row_stride_bytes(const EmbeddingBagDesc& d);

// One validated call: the descriptor (ld_table / ld_out resolved) and the arguments.
struct EmbeddingBagCall {
    const char* fn = "";  // public function name, for error messages
    EmbeddingBagDesc d;
    EmbeddingBagArgs a;
    bool lookup = false;  // embedding(): bag i is index i (no offsets array)

    int64_t offset(int64_t i) const {
        if (lookup) return i;
        return d.index_type == IndexType::i64 ? static_cast<const int64_t*>(a.offsets)[i]
                                              : static_cast<const int32_t*>(a.offsets)[i];
    }
    int64_t index(int64_t j) const {
        return d.index_type == IndexType::i64 ? static_cast<const int64_t*>(a.indices)[j]
                                              : static_cast<const int32_t*>(a.indices)[j];
    }
    // [begin, end) of bag b in indices (offsets already validated).
    int64_t bag_begin(int64_t b) const { return offset(b); }
    int64_t bag_end(int64_t b) const {
        return (b + 1 < a.num_bags || d.include_last_offset) ? offset(b + 1) : a.num_indices;
    }
};

// Returns the descriptor with ld_table / ld_out resolved; throws naming the bad field.
EmbeddingBagDesc embedding_bag_validate_desc(const char* fn, const EmbeddingBagDesc& d);
EmbeddingBagConfig embedding_bag_config(const EmbeddingBagDesc& resolved);
// Sizes, pointers (null only where nothing is read, element alignment, out not overlapping an
// input) and offsets (offsets[0] == 0, non-decreasing, <= num_indices). d must be resolved.
EmbeddingBagCall embedding_bag_validate_args(const char* fn, const EmbeddingBagDesc& d, const EmbeddingBagArgs& a);
// Every index inside a bag in [0, num_embeddings). Stops at the first bad one (lowest position).
void embedding_bag_validate_indices(const EmbeddingBagCall& c);
// Whether indices[j0, j1) are all in [0, num_embeddings) (one min / max pass).
bool embedding_bag_indices_in_range(const EmbeddingBagCall& c, int64_t j0, int64_t j1);
// Tests: from how many threads a call checks its indices inside the bags' parallel region instead
// of on the calling thread (0 restores the default, 4 or XK_EB_PAR_CHECK_THREADS).
void embedding_bag_set_par_check_threads(int threads);
[[noreturn]] void embedding_bag_bad_index(const EmbeddingBagCall& c, int64_t position, int64_t bag, int64_t value);

struct EmbeddingBagKernel {
    virtual ~EmbeddingBagKernel() = default;
    // Bags [bag_begin, bag_end) of a validated call, single-threaded (the caller splits the bags).
    virtual void run(const EmbeddingBagCall& c, int64_t bag_begin, int64_t bag_end) const = 0;
};

const Registry<EmbeddingBagConfig, EmbeddingBagKernel>& embedding_bag_registry();

// Whether the forward and backward kernels prefetch the rows ahead into L2 (PREFETCHT1) instead of
// L1 (T0; the backward: PREFETCHW):
// on AMD (Zen 4: the gather loop 1.3-1.5x faster with T1 at 1 thread; T0 there gains nothing over
// no prefetch), T0 elsewhere (the device Xeon: T1 slower at 16 threads, f32 D 128 uniform bags
// 1.10 vs 0.85 ms, backward 6.2 vs 5.4 ms); XK_EB_PF_HINT=t0 / t1 overrides (tuning). Read once.
bool embedding_bag_prefetch_l2();

// Rows of the indices ahead whose lines the forward kernels (bags, lookup) prefetch for rows of
// row_bytes: kPrefetchBytes of rows, 4 to 16 rows (XK_EB_PF_BYTES / XK_EB_PF_ROWS override the
// bytes and the row cap, tuning; XK_EB_PF_ROWS=0: no prefetch). The gather loops of
// bench_embedding take the same distance.
int64_t embedding_bag_prefetch_rows(int64_t row_bytes);
// Overrides (tests, experiments): bytes > 0, row_cap >= 0, hint 0 = T0 / 1 = T1; -1 / 0: the default.
void embedding_bag_set_prefetch(int64_t bytes, int64_t row_cap, int hint);

// Vectorised kernels (embedding_bag_simd.cpp): isa = avx512 or avx2.
std::shared_ptr<const EmbeddingBagKernel> create_embedding_bag_simd(const EmbeddingBagConfig& k, Isa isa);

// The bag ranges of a call's parallel chunks, balanced by index count (entries + 1 per bag):
// chunk i of n covers bags [split(i), split(i+1)).
int64_t embedding_bag_split(const EmbeddingBagCall& c, int64_t i, int64_t n);

// Reference (specification): per bag, f32 accumulation in index order, then mean / bf16 rounding.
void embedding_bag_reference(const EmbeddingBagCall& c, int64_t bag_begin, int64_t bag_end);

// Bags per parallel chunk for a call (so tiny calls stay on one thread).
int64_t embedding_bag_grain(const EmbeddingBagCall& c);

// ---- backward fused with the update (backward.cpp, backward_simd.cpp) ----------------------------
constexpr int64_t kEmbBwdPrefetch = 8;  // unique rows ahead

struct EmbBwdConfig {
    bool out_bf16 = false;  // grad_out dtype
    EmbeddingOptimizer optimizer = EmbeddingOptimizer::sgd;
    std::string key() const;
};

// A validated backward call after the sort: unique row s has entries [seg[s], seg[s+1]) of
// `entries` ((row, position) pairs), position j belongs to bag bag_of[j] with scale scale[j].
struct EmbBwdCtx {
    float* table = nullptr;
    float* state = nullptr;  // adagrad
    int64_t ld_table = 0, ld_state = 0, dim = 0;
    const void* grad_out = nullptr;
    int64_t ld_out = 0;
    float lr = 0, eps = 0;
    const std::pair<int64_t, int64_t>* entries = nullptr;
    const int64_t* seg = nullptr;
    const int64_t* bag_of = nullptr;
    const float* scale = nullptr;
};

struct EmbBwdKernel {
    virtual ~EmbBwdKernel() = default;
    // Unique rows [u0, u1): acc = sum of scale * grad_out rows in entry order (f32, each product
    // rounded), then the update; single-threaded.
    virtual void run(const EmbBwdCtx& x, int64_t u0, int64_t u1) const = 0;
};

const Registry<EmbBwdConfig, EmbBwdKernel>& embedding_bag_backward_registry();
// xk::embedding_bag_backward_update with the public function's name for the messages (the C API's).
void embedding_bag_backward_update_impl(const char* fn, const EmbeddingBagDesc& desc, const EmbeddingBagArgs& args,
                                        const void* grad_out, const EmbeddingBagUpdate& update);
void embedding_bag_backward_rows_reference(const EmbBwdCtx& x, const EmbBwdConfig& k, int64_t u0, int64_t u1);
std::shared_ptr<const EmbBwdKernel> create_embedding_bag_backward_simd(const EmbBwdConfig& k, Isa isa);

}  // namespace xk::detail
