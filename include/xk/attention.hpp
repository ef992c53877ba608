// xkernels — attention for LLM inference: fused scaled-dot-product attention (flash-style, no
// [tokens x tokens] matrix in memory), a KV cache (contiguous or paged) with append, and
// attention of new queries over the cache (decode and chunked prefill, split over the sequence
// across threads — flash-decoding — and merged exactly).
//
// Math (every entry point). For query row q (a q head h of a token), key rows k_j and value rows
// v_j of kv head h / (q_heads / kv_heads) (MHA, GQA, MQA):
//   s_j = scale * (q . k_j) + mask[j]      over the keys j the query sees (causal, lengths)
//   o   = sum_j softmax(s)_j v_j,           lse = log(sum_j exp(s_j))   (natural log)
// fp32 accumulation; bf16 q / k / v are widened exactly, a bf16 o is rounded once to nearest even.
// A query that sees no key (all masked, -inf mask entries, a length of 0) gets o = 0, lse = -inf.
//
// Layouts (strides in elements, 0 = packed):
//   q, o:   [tokens x heads x head_dim], element (t, h, d) at t*token_stride + h*head_stride + d.
//   k, v:   (xk::attention) [kv_tokens x kv_heads x head_dim], same form.
//   batch:  variable-length sequences, flash-attn "varlen" style: cu_seqlens_q [batch + 1] and
//           cu_seqlens_k [batch + 1] (int64, start at 0, non-decreasing); sequence b owns query
//           tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]) and key tokens [cu_seqlens_k[b], ...+1).
//           Optional seqused_k [batch]: only the first seqused_k[b] keys of sequence b are used
//           (padding: a padded batch [B x S] is cu_seqlens_k = {0, S, 2S, ...} and the valid
//           lengths in seqused_k).
//   KV cache (KvCacheDesc):
//     contiguous: K and V each [batch x kv_heads x capacity x head_dim]; token t of sequence b,
//                 kv head h at ((b*kv_heads + h)*capacity + t)*head_dim.
//     paged:      K and V each a pool [num_blocks x kv_heads x block_size x head_dim] (block_size
//                 16, 32 or 64; the layout of Intel's PagedAttention); block_table
//                 [batch x max_blocks_per_seq] int32; token t of sequence b lives in block
//                 blk = block_table[b*max_blocks_per_seq + t/block_size] at
//                 ((blk*kv_heads + h)*block_size + t % block_size)*head_dim. Blocks may be shared
//                 between sequences (prefix sharing) and appear in any order.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>

#include "xk/rope.hpp"
#include "xk/types.hpp"

namespace xk {

namespace detail {
struct AttnKernel;
}

enum class KvLayout : int { contiguous = 0, paged = 1 };

constexpr const char* kv_layout_name(KvLayout l) noexcept {
    switch (l) {
        case KvLayout::contiguous: return "contiguous";
        case KvLayout::paged: return "paged";
    }
    return "?";
}

// ---- fused scaled-dot-product attention over q / k / v tensors (prefill) --------------------

struct AttentionDesc {
    int64_t batch = 1;           // sequences, >= 0
    int64_t q_tokens = 0;        // rows of q / o (= cu_seqlens_q[batch]), >= 0
    int64_t kv_tokens = 0;       // rows of k / v (= cu_seqlens_k[batch]), >= 0
    int64_t q_heads = 0;         // >= 1
    int64_t kv_heads = 0;        // >= 1, divides q_heads
    int64_t head_dim = 0;        // >= 1 (the vector kernels take multiples of 16 up to 256)
    DType dtype = DType::f32;    // q, k, v: f32 or bf16
    DType o_dtype = DType::f32;  // o: f32 or bf16
    float scale = 0.0f;          // finite; 0 = 1/sqrt(head_dim)
    bool causal = false;         // query i (index in its sequence) sees keys j <= i + causal_offset
    int64_t causal_offset = 0;   // 0 = top-left (PyTorch is_causal); len_k - len_q = bottom-right
    bool has_mask = false;       // additive f32 mask [q_tokens x mask_stride], broadcast over heads:
    int64_t mask_stride = 0;     //   row = query token (global), column = key index in its sequence;
                                 //   mask_stride >= the longest key sequence (0 = kv_tokens)
    int64_t q_token_stride = 0, q_head_stride = 0;
    int64_t k_token_stride = 0, k_head_stride = 0;
    int64_t v_token_stride = 0, v_head_stride = 0;
    int64_t o_token_stride = 0, o_head_stride = 0;
};

struct AttentionArgs {
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* o = nullptr;
    float* lse = nullptr;                   // optional [q_tokens x q_heads]
    const float* mask = nullptr;            // iff has_mask
    const int64_t* cu_seqlens_q = nullptr;  // [batch + 1]; may be null when batch == 1 (all tokens)
    const int64_t* cu_seqlens_k = nullptr;  // [batch + 1]; may be null when batch == 1 (all tokens)
    const int64_t* seqused_k = nullptr;     // optional [batch]: keys used per sequence (<= its length)
};

// Validates everything (sizes, strides, every cu_seqlens / seqused entry) before any write.
void attention(const AttentionDesc& desc, const AttentionArgs& args);

// The descriptor validated and the kernel chosen once (strides, mask_stride and scale resolved);
// run() checks the arguments and runs. Immutable; run may be called concurrently.
class AttentionPlan {
public:
    explicit AttentionPlan(const AttentionDesc& desc);
    void run(const AttentionArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const AttentionDesc& desc() const { return desc_; }

private:
    AttentionDesc desc_;
    std::shared_ptr<const detail::AttnKernel> kernel_;
    const char* impl_name_ = "";
};

// ---- KV cache --------------------------------------------------------------------------------

struct KvCacheDesc {
    KvLayout layout = KvLayout::contiguous;
    DType dtype = DType::f32;        // f32, bf16 or s8 (K and V alike; s8: int8 with a scale per
                                     // token and kv head, see KvCache::k_scale)
    int64_t batch = 0;               // sequences (contiguous: slots; paged: block-table rows), >= 1
    int64_t kv_heads = 0;            // >= 1
    int64_t head_dim = 0;            // >= 1
    int64_t capacity = 0;            // contiguous: tokens per sequence, >= 1
    int64_t block_size = 0;          // paged: 16, 32 or 64
    int64_t num_blocks = 0;          // paged: blocks in each pool, >= 1
    int64_t max_blocks_per_seq = 0;  // paged: columns of the block table, >= 1
};

struct KvCache {
    void* k = nullptr;
    void* v = nullptr;
    const int32_t* block_table = nullptr;  // paged only: [batch x max_blocks_per_seq]
    // s8 caches only: f32 scales, one per (token, kv head) row, laid out as the cache without
    // head_dim (contiguous [batch x kv_heads x capacity], paged [num_blocks x kv_heads x block_size]:
    // kv_cache_scale_elements). Row value = scale * int8 (symmetric: append stores
    // round(x / scale) with scale = max|x| / 127, 0 for an all-zero row).
    float* k_scale = nullptr;
    float* v_scale = nullptr;
};

// Tokens a sequence of this cache can hold (capacity, or max_blocks_per_seq * block_size).
int64_t kv_cache_capacity(const KvCacheDesc& cache);
// Elements of one of the K / V buffers (batch*kv_heads*capacity*head_dim, or
// num_blocks*kv_heads*block_size*head_dim).
int64_t kv_cache_elements(const KvCacheDesc& cache);

// Writes new K / V rows into the cache: token t (of `tokens`) goes to sequence seq_ids[t] at
// position positions[t]. k_new / v_new are [tokens x kv_heads x head_dim] with strides (0 =
// packed), f32 or bf16 (src_dtype; f32 into a bf16 cache rounds to nearest even; into an s8 cache
// each (token, head) row is quantized: scale = max|x| / 127, stored round(x / scale)). Every index is
// checked before anything is written (seq id in [0, batch), position in [0, capacity) or
// its block-table column in range, block index in [0, num_blocks)). Two tokens writing the same
// slot: one of them wins.
struct KvAppendArgs {
    int64_t tokens = 0;
    DType src_dtype = DType::f32;
    const void* k_new = nullptr;
    const void* v_new = nullptr;
    int64_t k_token_stride = 0, k_head_stride = 0;
    int64_t v_token_stride = 0, v_head_stride = 0;
    const int64_t* seq_ids = nullptr;    // [tokens]
    const int64_t* positions = nullptr;  // [tokens]
    // Optional RoPE fused into the append (one pass over k_new): when rope_cos_sin is given, each
    // K row is rotated (xk/rope.hpp's math: fp32, style neox / gptj, elements [rotary_dim,
    // head_dim) untouched) at its cache position positions[t] before it is stored, rounded once
    // into a bf16 cache. V is stored as is. rope_cos_sin: f32 [rope_max_position x rotary_dim]
    // (vLLM's cos_sin_cache, row p = cos_p | sin_p); positions must be < rope_max_position.
    const float* rope_cos_sin = nullptr;
    int64_t rope_max_position = 0;
    int64_t rope_rotary_dim = 0;  // even, in [2, head_dim]; 0 = head_dim
    RopeStyle rope_style = RopeStyle::neox;
};
// Scales in each of k_scale / v_scale of an s8 cache (kv_cache_elements / head_dim).
int64_t kv_cache_scale_elements(const KvCacheDesc& cache);
void kv_cache_append(const KvCacheDesc& cache_desc, const KvCache& cache, const KvAppendArgs& args);

// ---- attention of new queries over the cache (decode, chunked prefill) -----------------------
//
// Sequence b's queries are tokens [cu_seqlens_q[b], cu_seqlens_q[b+1]) (n_b of them, n_b may be
// 0) and its cache holds context_lens[b] tokens, the new ones included (append them first). Query
// i of the sequence stands at position p = context_lens[b] - n_b + i and sees cache tokens
// [0, p] (causal; decode: n_b = 1 sees the whole context). 0 <= n_b <= context_lens[b] <= the
// cache capacity. Chunked prefill in pieces equals one-shot prefill.
struct CachedAttentionDesc {
    KvCacheDesc cache;             // batch = sequences of the call
    int64_t q_tokens = 0;          // = cu_seqlens_q[batch]
    int64_t q_heads = 0;           // multiple of cache.kv_heads
    DType q_dtype = DType::f32;    // f32 or bf16
    DType o_dtype = DType::f32;    // f32 or bf16
    float scale = 0.0f;            // finite; 0 = 1/sqrt(head_dim)
    int64_t q_token_stride = 0, q_head_stride = 0;
    int64_t o_token_stride = 0, o_head_stride = 0;
    int64_t kv_splits = 0;         // pieces each sequence's keys are split into across threads
                                   // (flash-decoding); 0 = automatic, 1 = never split
};

struct CachedAttentionArgs {
    const void* q = nullptr;
    void* o = nullptr;
    float* lse = nullptr;                   // optional [q_tokens x q_heads]
    const int64_t* cu_seqlens_q = nullptr;  // [batch + 1]
    const int64_t* context_lens = nullptr;  // [batch]
    KvCache cache;
};

void cached_attention(const CachedAttentionDesc& desc, const CachedAttentionArgs& args);

// As AttentionPlan, for cached_attention (the cache descriptor, heads, dtypes, strides and scale
// validated once; run() checks pointers, cu_seqlens_q, context_lens and the block table entries
// the call reads).
class CachedAttentionPlan {
public:
    explicit CachedAttentionPlan(const CachedAttentionDesc& desc);
    void run(const CachedAttentionArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const CachedAttentionDesc& desc() const { return desc_; }

private:
    CachedAttentionDesc desc_;
    std::shared_ptr<const detail::AttnKernel> kernel_;
    const char* impl_name_ = "";
};

}  // namespace xk
