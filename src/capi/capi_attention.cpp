// C API: attention family.
#include <cstring>

#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/attention.hpp"
#include "xk/c/attention.h"

using xk::detail::c_enum;
using xk::detail::capi_call;

struct xk_cached_attention_plan {
    xk::CachedAttentionPlan plan;
};
struct xk_attention_plan {
    xk::AttentionPlan plan;
};

namespace {

xk::KvCacheDesc to_cpp(const char* fn, const xk_kv_cache_desc* c) {
    xk::detail::check_not_null(fn, "desc", c);
    xk::KvCacheDesc d;
    d.layout = static_cast<xk::KvLayout>(c_enum(c->layout));
    d.dtype = static_cast<xk::DType>(c_enum(c->dtype));
    d.batch = c->batch;
    d.kv_heads = c->kv_heads;
    d.head_dim = c->head_dim;
    d.capacity = c->capacity;
    d.block_size = c->block_size;
    d.num_blocks = c->num_blocks;
    d.max_blocks_per_seq = c->max_blocks_per_seq;
    return d;
}

xk::KvCache to_cpp_cache(const xk_kv_cache* c) {
    return xk::KvCache{c->k, c->v, c->block_table, c->k_scale, c->v_scale};
}

// The descriptors and arguments of the plans, shared by the one-shot entry points (which fill a
// C descriptor from their parameters) and the plan entry points.
xk::CachedAttentionDesc to_cpp(const char* fn, const xk_cached_attention_desc& c) {
    xk::CachedAttentionDesc d;
    d.cache = to_cpp(fn, &c.cache);
    d.q_tokens = c.q_tokens;
    d.q_heads = c.q_heads;
    d.q_dtype = static_cast<xk::DType>(c_enum(c.q_dtype));
    d.o_dtype = static_cast<xk::DType>(c_enum(c.o_dtype));
    d.scale = c.scale;
    d.kv_splits = c.kv_splits;
    return d;
}

xk::CachedAttentionArgs cached_args(const xk::KvCache& cache, const void* q, void* o, float* lse, const int64_t* cu,
                                    const int64_t* ctx) {
    xk::CachedAttentionArgs a;
    a.q = q;
    a.o = o;
    a.lse = lse;
    a.cu_seqlens_q = cu;
    a.context_lens = ctx;
    a.cache = cache;
    return a;
}

xk::AttentionDesc to_cpp(const xk_attention_desc& c) {
    xk::AttentionDesc d;
    d.batch = c.batch;
    d.q_tokens = c.q_tokens;
    d.kv_tokens = c.kv_tokens;
    d.q_heads = c.q_heads;
    d.kv_heads = c.kv_heads;
    d.head_dim = c.head_dim;
    d.dtype = static_cast<xk::DType>(c_enum(c.dtype));
    d.o_dtype = static_cast<xk::DType>(c_enum(c.o_dtype));
    d.scale = c.scale;
    d.causal = c.causal != 0;
    d.causal_offset = c.causal_offset;
    d.has_mask = c.has_mask != 0;
    d.mask_stride = c.mask_stride;
    return d;
}

// The C strides into the C++ descriptor (NULL: all packed, as the descriptor already is).
xk::AttentionDesc with_strides(xk::AttentionDesc d, const xk_attention_strides* s) {
    if (s) {
        d.q_token_stride = s->q_token, d.q_head_stride = s->q_head;
        d.k_token_stride = s->k_token, d.k_head_stride = s->k_head;
        d.v_token_stride = s->v_token, d.v_head_stride = s->v_head;
        d.o_token_stride = s->o_token, d.o_head_stride = s->o_head;
    }
    return d;
}

xk::AttentionArgs sdpa_args(const void* q, const void* k, const void* v, void* o, float* lse, const float* mask,
                            const int64_t* cu_q, const int64_t* cu_k, const int64_t* seqused_k) {
    xk::AttentionArgs a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.mask = mask;
    a.cu_seqlens_q = cu_q;
    a.cu_seqlens_k = cu_k;
    a.seqused_k = seqused_k;
    return a;
}

void append(const char* fn, const xk_kv_cache_desc* desc, const xk_kv_cache* cache, const xk_kv_append_args* args) {
    const xk::KvCacheDesc d = to_cpp(fn, desc);
    xk::detail::check_not_null(fn, "cache", cache);
    xk::detail::check_not_null(fn, "args", args);
    xk::KvAppendArgs a;
    a.tokens = args->tokens;
    a.src_dtype = static_cast<xk::DType>(c_enum(args->src_dtype));
    a.k_new = args->k_new;
    a.v_new = args->v_new;
    a.seq_ids = args->seq_ids;
    a.positions = args->positions;
    a.rope_cos_sin = args->rope_cos_sin;
    a.rope_max_position = args->rope_max_position;
    a.rope_rotary_dim = args->rope_rotary_dim;
    a.rope_style = static_cast<xk::RopeStyle>(c_enum(args->rope_style));
    xk::kv_cache_append(d, to_cpp_cache(cache), a);
}

constexpr xk_dtype c_dtype(size_t elem) { return elem == 2 ? XK_DTYPE_BF16 : XK_DTYPE_F32; }

template <class T>
xk_status c_cached(const char* fn, const xk_kv_cache_desc* desc, const void* kc, const void* vc, const int32_t* table,
                   int64_t q_tokens, int64_t q_heads, const T* q, T* o, float* lse, const int64_t* cu,
                   const int64_t* ctx, float scale) {
    return capi_call([&] {
        xk::detail::check_not_null(fn, "desc", desc);
        xk_cached_attention_desc c;
        xk_cached_attention_desc_init(&c);
        c.cache = *desc;
        c.q_tokens = q_tokens;
        c.q_heads = q_heads;
        c.q_dtype = c.o_dtype = c_dtype(sizeof(T));
        c.scale = scale;
        const xk::KvCache cache{const_cast<void*>(kc), const_cast<void*>(vc), table};
        xk::cached_attention(to_cpp(fn, c), cached_args(cache, q, o, lse, cu, ctx));
    });
}

template <class T>
xk_status c_sdpa(int64_t batch, int64_t q_tokens, int64_t kv_tokens, int64_t q_heads, int64_t kv_heads,
                 int64_t head_dim, const T* q, const T* k, const T* v, T* o, float* lse, const int64_t* cu_q,
                 const int64_t* cu_k, float scale, int causal, int64_t causal_offset, const float* mask,
                 int64_t mask_stride) {
    return capi_call([&] {
        xk_attention_desc c;
        xk_attention_desc_init(&c);
        c.batch = batch;
        c.q_tokens = q_tokens;
        c.kv_tokens = kv_tokens;
        c.q_heads = q_heads;
        c.kv_heads = kv_heads;
        c.head_dim = head_dim;
        c.dtype = c.o_dtype = c_dtype(sizeof(T));
        c.scale = scale;
        c.causal = causal;
        c.causal_offset = causal_offset;
        c.has_mask = mask != nullptr;
        c.mask_stride = mask_stride;
        xk::attention(to_cpp(c), sdpa_args(q, k, v, o, lse, mask, cu_q, cu_k, nullptr));
    });
}

}  // namespace

extern "C" {

void xk_kv_cache_desc_init(xk_kv_cache_desc* desc) {
    if (desc) std::memset(desc, 0, sizeof *desc);
}

xk_status xk_kv_cache_append(const xk_kv_cache_desc* desc, void* k_cache, void* v_cache, const int32_t* block_table,
                             int64_t tokens, xk_dtype src_dtype, const void* k_new, const void* v_new,
                             const int64_t* seq_ids, const int64_t* positions) {
    return capi_call([&] {
        const xk_kv_cache cache{k_cache, v_cache, block_table, nullptr, nullptr};
        xk_kv_append_args a;
        xk_kv_append_args_init(&a);
        a.tokens = tokens;
        a.src_dtype = src_dtype;
        a.k_new = k_new;
        a.v_new = v_new;
        a.seq_ids = seq_ids;
        a.positions = positions;
        append("xk_kv_cache_append", desc, &cache, &a);
    });
}

xk_status xk_cached_attention_f32(const xk_kv_cache_desc* desc, const void* k_cache, const void* v_cache,
                                  const int32_t* block_table, int64_t q_tokens, int64_t q_heads, const float* q,
                                  float* o, float* lse, const int64_t* cu_seqlens_q, const int64_t* context_lens,
                                  float scale) {
    return c_cached("xk_cached_attention_f32", desc, k_cache, v_cache, block_table, q_tokens, q_heads, q, o, lse,
                    cu_seqlens_q, context_lens, scale);
}
xk_status xk_cached_attention_bf16(const xk_kv_cache_desc* desc, const void* k_cache, const void* v_cache,
                                   const int32_t* block_table, int64_t q_tokens, int64_t q_heads, const uint16_t* q,
                                   uint16_t* o, float* lse, const int64_t* cu_seqlens_q, const int64_t* context_lens,
                                   float scale) {
    return c_cached("xk_cached_attention_bf16", desc, k_cache, v_cache, block_table, q_tokens, q_heads, q, o, lse,
                    cu_seqlens_q, context_lens, scale);
}

xk_status xk_attention_f32(int64_t batch, int64_t q_tokens, int64_t kv_tokens, int64_t q_heads, int64_t kv_heads,
                           int64_t head_dim, const float* q, const float* k, const float* v, float* o, float* lse,
                           const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, float scale, int causal,
                           int64_t causal_offset, const float* mask, int64_t mask_stride) {
    return c_sdpa(batch, q_tokens, kv_tokens, q_heads, kv_heads, head_dim, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                  scale, causal, causal_offset, mask, mask_stride);
}
xk_status xk_attention_bf16(int64_t batch, int64_t q_tokens, int64_t kv_tokens, int64_t q_heads, int64_t kv_heads,
                            int64_t head_dim, const uint16_t* q, const uint16_t* k, const uint16_t* v, uint16_t* o,
                            float* lse, const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, float scale,
                            int causal, int64_t causal_offset, const float* mask, int64_t mask_stride) {
    return c_sdpa(batch, q_tokens, kv_tokens, q_heads, kv_heads, head_dim, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                  scale, causal, causal_offset, mask, mask_stride);
}

xk_status xk_kv_cache_sizes(const xk_kv_cache_desc* desc, int64_t* elements, int64_t* scale_elements,
                            int64_t* capacity) {
    return capi_call([&] {
        const xk::KvCacheDesc d = to_cpp("xk_kv_cache_sizes", desc);
        const int64_t e = xk::kv_cache_elements(d), s = xk::kv_cache_scale_elements(d), c = xk::kv_cache_capacity(d);
        if (elements) *elements = e;
        if (scale_elements) *scale_elements = s;
        if (capacity) *capacity = c;
    });
}

void xk_kv_append_args_init(xk_kv_append_args* args) {
    if (args) std::memset(args, 0, sizeof *args);
}

xk_status xk_kv_cache_append_ex(const xk_kv_cache_desc* desc, const xk_kv_cache* cache, const xk_kv_append_args* args) {
    return capi_call([&] { append("xk_kv_cache_append_ex", desc, cache, args); });
}

void xk_cached_attention_desc_init(xk_cached_attention_desc* desc) {
    if (desc) std::memset(desc, 0, sizeof *desc);
}

xk_status xk_cached_attention_plan_create(const xk_cached_attention_desc* desc, xk_cached_attention_plan** plan) {
    if (plan) *plan = nullptr;
    return capi_call([&] {
        const char* fn = "xk_cached_attention_plan_create";
        xk::detail::check_not_null(fn, "plan", plan);
        xk::detail::check_not_null(fn, "desc", desc);
        *plan = new xk_cached_attention_plan{xk::CachedAttentionPlan(to_cpp(fn, *desc))};
    });
}

void xk_cached_attention_plan_destroy(xk_cached_attention_plan* plan) { delete plan; }

xk_status xk_cached_attention_plan_run(const xk_cached_attention_plan* plan, const xk_kv_cache* cache, const void* q,
                                       void* o, float* lse, const int64_t* cu_seqlens_q, const int64_t* context_lens) {
    return capi_call([&] {
        const char* fn = "xk_cached_attention_plan_run";
        xk::detail::check_not_null(fn, "plan", plan);
        xk::detail::check_not_null(fn, "cache", cache);
        plan->plan.run(cached_args(to_cpp_cache(cache), q, o, lse, cu_seqlens_q, context_lens));
    });
}

const char* xk_cached_attention_plan_impl_name(const xk_cached_attention_plan* plan) {
    return plan ? plan->plan.impl_name() : "";
}

void xk_attention_desc_init(xk_attention_desc* desc) {
    if (desc) std::memset(desc, 0, sizeof *desc);
}

xk_status xk_attention_plan_create(const xk_attention_desc* desc, xk_attention_plan** plan) {
    if (plan) *plan = nullptr;
    return capi_call([&] {
        const char* fn = "xk_attention_plan_create";
        xk::detail::check_not_null(fn, "plan", plan);
        xk::detail::check_not_null(fn, "desc", desc);
        *plan = new xk_attention_plan{xk::AttentionPlan(to_cpp(*desc))};
    });
}

void xk_attention_plan_destroy(xk_attention_plan* plan) { delete plan; }

xk_status xk_attention_plan_run(const xk_attention_plan* plan, const void* q, const void* k, const void* v, void* o,
                                float* lse, const float* mask, const int64_t* cu_seqlens_q,
                                const int64_t* cu_seqlens_k, const int64_t* seqused_k) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_attention_plan_run", "plan", plan);
        plan->plan.run(sdpa_args(q, k, v, o, lse, mask, cu_seqlens_q, cu_seqlens_k, seqused_k));
    });
}

const char* xk_attention_plan_impl_name(const xk_attention_plan* plan) { return plan ? plan->plan.impl_name() : ""; }

// ---- strided q / k / v / o ----

void xk_attention_strides_init(xk_attention_strides* strides) {
    if (strides) std::memset(strides, 0, sizeof *strides);
}

xk_status xk_attention_plan_create_strided(const xk_attention_desc* desc, const xk_attention_strides* strides,
                                           xk_attention_plan** plan) {
    if (plan) *plan = nullptr;
    return capi_call([&] {
        const char* fn = "xk_attention_plan_create_strided";
        xk::detail::check_not_null(fn, "plan", plan);
        xk::detail::check_not_null(fn, "desc", desc);
        *plan = new xk_attention_plan{xk::AttentionPlan(with_strides(to_cpp(*desc), strides))};
    });
}

xk_status xk_attention_strided(const xk_attention_desc* desc, const xk_attention_strides* strides, const void* q,
                               const void* k, const void* v, void* o, float* lse, const float* mask,
                               const int64_t* cu_seqlens_q, const int64_t* cu_seqlens_k, const int64_t* seqused_k) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_attention_strided", "desc", desc);
        xk::attention(with_strides(to_cpp(*desc), strides),
                      sdpa_args(q, k, v, o, lse, mask, cu_seqlens_q, cu_seqlens_k, seqused_k));
    });
}

}  // extern "C"
