// RoPE family: registry, validation and public entry points.
#include "kernels/rope/rope.hpp"

#include <cmath>
#include <type_traits>

#include "common/check.hpp"
#include "common/overlap.hpp"
#include "common/parallel.hpp"

namespace xk {
namespace detail {
namespace {

struct RefRope final : RopeKernel {
    void run(const RopeDesc& d, const RopeArgs& a, int64_t token_begin, int64_t token_end) const override {
        rope_reference(d, a, token_begin, token_end);
    }
};

// Resolves and checks the strides of one [tokens x heads x head_dim] tensor (name = "q" or "k").
void resolve_layout(const char* fn, const std::string& name, int64_t tokens, int64_t heads, int64_t head_dim,
                    int64_t& token_stride, int64_t& head_stride) {
    const std::string ts_name = name + "_token_stride", hs_name = name + "_head_stride";
    check_nonnegative(fn, hs_name.c_str(), head_stride);
    check_nonnegative(fn, ts_name.c_str(), token_stride);
    if (heads == 0) {  // tensor absent
        token_stride = head_stride = 0;
        return;
    }
    if (head_stride == 0) head_stride = head_dim;
    if (token_stride == 0) token_stride = checked_mul(fn, (name + "_heads*" + hs_name).c_str(), heads, head_stride);
    const std::string heads_name = name + "_heads";
    if (heads > 1) check_ld(fn, hs_name.c_str(), head_stride, head_dim, "head_dim");
    if (tokens > 1) check_ld(fn, ts_name.c_str(), token_stride, head_dim, "head_dim");
    // Extent of the tensor: (tokens-1)*token_stride + (heads-1)*head_stride + head_dim elements.
    const int64_t head_span = checked_add(fn, "head extent", checked_mul(fn, (name + " head extent").c_str(), heads - 1, head_stride), head_dim);
    const int64_t token_span = checked_add(fn, "token extent", checked_mul(fn, (name + " token extent").c_str(), std::max<int64_t>(tokens - 1, 0), token_stride), head_dim);
    checked_add(fn, (name + " extent").c_str(), checked_mul(fn, (name + " extent").c_str(), std::max<int64_t>(tokens - 1, 0), token_stride), head_span);
    if (heads > 1 && tokens > 1) {
        const bool token_major = token_stride >= head_span;  // [tokens, heads, head_dim]
        const bool head_major = head_stride >= token_span;   // [heads, tokens, head_dim]
        if (!token_major && !head_major)
            fail_arg(fn, ts_name.c_str(), std::to_string(token_stride),
                     "and " + hs_name + "=" + std::to_string(head_stride) + " make heads of different tokens overlap: need " +
                         ts_name + " >= (" + heads_name + "-1)*" + hs_name + "+head_dim=" + std::to_string(head_span) +
                         " (token-major) or " + hs_name + " >= (tokens-1)*" + ts_name + "+head_dim=" +
                         std::to_string(token_span) + " (head-major)");
    }
}

// The tensor as a 2D byte region: rows = the outer dimension, width = the span of the inner one
// (exact for packed heads, the per-row hull otherwise).
MemRegion tensor_region(const void* p, int64_t tokens, int64_t heads, int64_t head_dim, int64_t ts, int64_t hs,
                        int esize) {
    if (tokens == 0 || heads == 0) return MemRegion{};
    const int64_t head_span = (heads - 1) * hs + head_dim;
    if (heads == 1 || (tokens > 1 && ts >= head_span) || tokens == 1)
        return MemRegion{reinterpret_cast<uintptr_t>(p), tokens, ts * esize, head_span * esize};
    return MemRegion{reinterpret_cast<uintptr_t>(p), heads, hs * esize, ((tokens - 1) * ts + head_dim) * esize};
}

RopeDesc resolve(const char* fn, const RopeDesc& in) {
    RopeDesc d = in;
    if (d.style != RopeStyle::neox && d.style != RopeStyle::gptj)
        fail_arg(fn, "style", std::to_string(static_cast<int>(d.style)), "is not a RopeStyle (neox=0, gptj=1)");
    if (d.cos_sin != RopeCosSin::cache && d.cos_sin != RopeCosSin::compute)
        fail_arg(fn, "cos_sin", std::to_string(static_cast<int>(d.cos_sin)), "is not a RopeCosSin (cache=0, compute=1)");
    if (d.position_type != RopePositionType::s64 && d.position_type != RopePositionType::s32)
        fail_arg(fn, "position_type", std::to_string(static_cast<int>(d.position_type)),
                 "is not a RopePositionType (s64=0, s32=1)");
    check_nonnegative(fn, "tokens", d.tokens);
    check_nonnegative(fn, "q_heads", d.q_heads);
    check_nonnegative(fn, "k_heads", d.k_heads);
    check_positive(fn, "head_dim", d.head_dim);
    if (d.q_heads > 0 && d.k_heads > 0 && d.q_heads % d.k_heads != 0)
        fail_arg(fn, "k_heads", std::to_string(d.k_heads),
                 "must divide q_heads=" + std::to_string(d.q_heads) + " (GQA / MQA: each k head serves q_heads/k_heads query heads)");
    if (d.rotary_dim < 0) fail_arg(fn, "rotary_dim", std::to_string(d.rotary_dim), "must be >= 0 (0 = head_dim)");
    const bool defaulted = d.rotary_dim == 0;
    if (defaulted) d.rotary_dim = d.head_dim;
    if (d.rotary_dim > d.head_dim)
        fail_arg(fn, "rotary_dim", std::to_string(d.rotary_dim), "must be <= head_dim=" + std::to_string(d.head_dim));
    if (d.rotary_dim % 2 != 0)
        fail_arg(fn, "rotary_dim", std::to_string(d.rotary_dim),
                 defaulted ? "(= head_dim, as rotary_dim is 0) must be even" : "must be even");
    check_io_dtype(fn, "dtype", d.dtype);
    resolve_layout(fn, "q", d.tokens, d.q_heads, d.head_dim, d.q_token_stride, d.q_head_stride);
    resolve_layout(fn, "k", d.tokens, d.k_heads, d.head_dim, d.k_token_stride, d.k_head_stride);
    if (d.cos_sin == RopeCosSin::cache) {
        check_io_dtype(fn, "cache_dtype", d.cache_dtype);
        check_positive(fn, "max_position", d.max_position);
        checked_mul(fn, "max_position*rotary_dim", d.max_position, d.rotary_dim);
    } else {
        if (!(std::isfinite(d.base) && d.base > 0.0f)) fail_arg(fn, "base", float_str(d.base), "must be finite and > 0");
        if (!(std::isfinite(d.scaling_factor) && d.scaling_factor > 0.0f))
            fail_arg(fn, "scaling_factor", float_str(d.scaling_factor), "must be finite and > 0");
        d.cache_dtype = DType::f32;
        d.max_position = 0;
    }
    return d;
}

void check_args(const char* fn, const RopeDesc& d, const RopeArgs& a) {
    // A pointer the descriptor says is not used must be null, whatever the token count (a k with
    // k_heads = 0 was accepted with tokens = 0 and rejected otherwise).
    auto unused = [&](const char* arg, const void* p, bool used, const char* why_not) {
        if (!used && p) fail_arg(fn, arg, ptr_str(p), std::string("is given but ") + why_not);
    };
    unused("q", a.q, d.q_heads > 0, "q_heads is 0");
    unused("k", a.k, d.k_heads > 0, "k_heads is 0");
    unused("cos_sin_cache", a.cos_sin_cache, d.cos_sin == RopeCosSin::cache, "cos_sin is compute");
    if (d.tokens == 0) return;  // nothing is read or written
    auto required = [&](const char* arg, const void* p, bool used) {
        if (used && !p) fail_arg(fn, arg, "null", "must not be a null pointer");
    };
    required("q", a.q, d.q_heads > 0);
    required("k", a.k, d.k_heads > 0);
    check_not_null(fn, "positions", a.positions);
    required("cos_sin_cache", a.cos_sin_cache, d.cos_sin == RopeCosSin::cache);

    const int esize = dtype_size(d.dtype);
    const MemRegion q = tensor_region(a.q, d.tokens, d.q_heads, d.head_dim, d.q_token_stride, d.q_head_stride, esize);
    const MemRegion k = tensor_region(a.k, d.tokens, d.k_heads, d.head_dim, d.k_token_stride, d.k_head_stride, esize);
    const int pos_size = d.position_type == RopePositionType::s32 ? 4 : 8;
    const MemRegion pos = matrix_region(a.positions, 1, d.tokens, d.tokens, pos_size);
    const MemRegion cache = d.cos_sin == RopeCosSin::cache
                                ? matrix_region(a.cos_sin_cache, 1, d.max_position * d.rotary_dim, 0, dtype_size(d.cache_dtype))
                                : MemRegion{};
    if (regions_overlap(q, k)) fail_arg(fn, "k", ptr_str(a.k), "overlaps q=" + ptr_str(a.q));
    if (regions_overlap(q, pos)) fail_arg(fn, "q", ptr_str(a.q), "overlaps positions=" + ptr_str(a.positions));
    if (regions_overlap(k, pos)) fail_arg(fn, "k", ptr_str(a.k), "overlaps positions=" + ptr_str(a.positions));
    if (regions_overlap(q, cache)) fail_arg(fn, "q", ptr_str(a.q), "overlaps cos_sin_cache=" + ptr_str(a.cos_sin_cache));
    if (regions_overlap(k, cache)) fail_arg(fn, "k", ptr_str(a.k), "overlaps cos_sin_cache=" + ptr_str(a.cos_sin_cache));

    // Every position, before any work.
    for (int64_t t = 0; t < d.tokens; ++t) {
        const int64_t p = d.position_type == RopePositionType::s32
                              ? static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t])
                              : static_cast<const int64_t*>(a.positions)[t];
        if (p < 0 || (d.cos_sin == RopeCosSin::cache && p >= d.max_position)) {
            const std::string arg = "positions[" + std::to_string(t) + "]";
            if (p < 0) fail_arg(fn, arg.c_str(), std::to_string(p), "must be >= 0");
            fail_arg(fn, arg.c_str(), std::to_string(p),
                     "is beyond the cos_sin_cache (max_position=" + std::to_string(d.max_position) + ")");
        }
    }
}

void execute(const RopeKernel& k, const RopeDesc& d, const RopeArgs& a) {
    parallel_for(d.tokens, rope_token_grain(d.q_heads + d.k_heads, d.rotary_dim),
                 [&](int64_t b, int64_t e) { k.run(d, a, b, e); });
}

}  // namespace

std::string RopeKernelDesc::key() const {
    std::string s = std::string(rope_style_name(style)) + ",head_dim=" + std::to_string(head_dim) +
                    ",rotary_dim=" + std::to_string(rotary_dim) + "," + dtype_name(dtype) +
                    (position_type == RopePositionType::s32 ? ",pos=s32" : ",pos=s64");
    s += cos_sin == RopeCosSin::cache ? std::string(",cache=") + dtype_name(cache_dtype) : std::string(",compute");
    return s;
}

RopeKernelDesc rope_kernel_desc(const RopeDesc& d) {
    RopeKernelDesc k;
    k.style = d.style;
    k.head_dim = d.head_dim;
    k.rotary_dim = d.rotary_dim;
    k.dtype = d.dtype;
    k.position_type = d.position_type;
    k.cos_sin = d.cos_sin;
    k.cache_dtype = d.cos_sin == RopeCosSin::cache ? d.cache_dtype : DType::f32;
    return k;
}

const Registry<RopeKernelDesc, RopeKernel>& rope_registry() {
    static const Registry<RopeKernelDesc, RopeKernel> r(
        "rope", {
                    {"jit:avx512_bf16", Isa::avx512_bf16,
                     [](const RopeKernelDesc& kd) { return kd.dtype == DType::bf16 && rope_jit_supports(kd); },
                     [](const RopeKernelDesc& kd) { return create_jit_rope(kd, Isa::avx512_bf16); }},
                    {"jit:avx512", Isa::avx512, rope_jit_supports,
                     [](const RopeKernelDesc& kd) { return create_jit_rope(kd, Isa::avx512); }},
                    {"jit:avx2", Isa::avx2, rope_jit_supports,
                     [](const RopeKernelDesc& kd) { return create_jit_rope(kd, Isa::avx2); }},
                    {"ref:scalar", Isa::scalar, nullptr,
                     [](const RopeKernelDesc&) -> std::shared_ptr<const RopeKernel> { return std::make_shared<RefRope>(); }},
                });
    return r;
}

}  // namespace detail

RopePlan::RopePlan(const RopeDesc& desc) : desc_(detail::resolve("xk::RopePlan", desc)) {
    const auto sel = detail::rope_registry().get(detail::rope_kernel_desc(desc_));
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

void RopePlan::run(const RopeArgs& args) const {
    detail::check_args("xk::RopePlan::run", desc_, args);
    detail::execute(*kernel_, desc_, args);
}

void detail::rope_one_shot(const char* fn, const RopeDesc& desc, const RopeArgs& args) {
    const RopeDesc d = detail::resolve(fn, desc);
    detail::check_args(fn, d, args);
    if (d.tokens == 0) return;
    const auto sel = detail::rope_registry().get(detail::rope_kernel_desc(d));
    detail::execute(*sel.kernel, d, args);
}

namespace {

template <class T, class C>
void rope_packed(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim,
                 int64_t rotary_dim, T* q, T* k, const int64_t* positions, const C* cache, int64_t max_position) {
    RopeDesc d;
    d.style = style;
    d.tokens = tokens;
    d.q_heads = q_heads;
    d.k_heads = k_heads;
    d.head_dim = head_dim;
    d.rotary_dim = rotary_dim;
    d.dtype = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
    d.cos_sin = RopeCosSin::cache;
    d.cache_dtype = std::is_same_v<C, bf16> ? DType::bf16 : DType::f32;
    d.max_position = max_position;
    RopeArgs a;
    a.q = q;
    a.k = k;
    a.positions = positions;
    a.cos_sin_cache = cache;
    detail::rope_one_shot("xk::rope", d, a);
}

}  // namespace

void rope(const RopeDesc& desc, const RopeArgs& args) { detail::rope_one_shot("xk::rope", desc, args); }

void rope(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim,
          float* q, float* k, const int64_t* positions, const float* cos_sin_cache, int64_t max_position) {
    rope_packed(style, tokens, q_heads, k_heads, head_dim, rotary_dim, q, k, positions, cos_sin_cache, max_position);
}
void rope(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim,
          bf16* q, bf16* k, const int64_t* positions, const float* cos_sin_cache, int64_t max_position) {
    rope_packed(style, tokens, q_heads, k_heads, head_dim, rotary_dim, q, k, positions, cos_sin_cache, max_position);
}
void rope(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim,
          bf16* q, bf16* k, const int64_t* positions, const bf16* cos_sin_cache, int64_t max_position) {
    rope_packed(style, tokens, q_heads, k_heads, head_dim, rotary_dim, q, k, positions, cos_sin_cache, max_position);
}

}  // namespace xk
