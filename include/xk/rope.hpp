// xkernels — rotary position embedding (RoPE), applied in place to q and k in one call.
//
// Layout. q is [tokens x q_heads x head_dim] with a token stride and a head stride in elements
// (0 = packed: head_stride = head_dim, token_stride = heads * head_stride); k likewise with its
// own head count (GQA / MQA) and strides. Token-major ([tokens, heads, head_dim], vLLM, q / k as
// column slices of a packed qkv buffer) and head-major ([heads, tokens, head_dim], HF's
// [heads, seq, head_dim] for one sequence) layouts both work; heads must not overlap. A head
// count of 0 skips that tensor (its pointer must then be null).
//
// Rounding: bf16 outputs of the JIT kernels (every op): to nearest, but an exact tie may go away from zero
// (the AVX2 / AVX-512 paths' cheaper rounding), and at avx512_bf16 results below FLT_MIN are
// flushed to +-0 (VCVTNEPS2BF16); the scalar reference (XK_MAX_ISA=scalar) rounds ties to even
// and keeps subnormals. Found by the fuzz targets; differences are one bf16 ulp on exact ties.
//
// Rotation (fp32 math; bf16 q / k widened exactly and rounded once, to nearest even). For token t
// at position p = positions[t], and i in [0, rotary_dim / 2):
//   neox (GPT-NeoX, Llama, HF rotate_half):  pairs (x[i], x[i + rotary_dim/2])
//   gptj (GPT-J, interleaved):               pairs (x[2i], x[2i + 1])
//   (x1, x2) -> (x1 * cos_i - x2 * sin_i,  x2 * cos_i + x1 * sin_i)
// Elements [rotary_dim, head_dim) are left untouched (partial rotary, e.g. GPT-NeoX / Phi).
//
// cos / sin, per position p and frequency i:
//   cache:    a [max_position x rotary_dim] table (f32 or bf16), row p = concat(cos_p[0 .. r/2),
//             sin_p[0 .. r/2)) — vLLM's cos_sin_cache. Any frequency scaling (NTK, YaRN,
//             Llama-3, ...) is whatever the caller baked into the table. Positions must lie in
//             [0, max_position).
//   compute:  theta_i = (p / scaling_factor) * base^(-2i / rotary_dim) (linear position
//             interpolation when scaling_factor > 1); cos / sin of theta_i are the exact values
//             rounded to fp32 (the reference evaluates them in double; HF, which forms theta in
//             fp32, differs by up to ~1e-3 at positions around 32K). Positions must be >= 0.
#pragma once
#include <cstdint>
#include <memory>

#include "xk/types.hpp"

namespace xk {

enum class RopeStyle : int { neox = 0, gptj = 1 };
enum class RopeCosSin : int { cache = 0, compute = 1 };
enum class RopePositionType : int { s64 = 0, s32 = 1 };

constexpr const char* rope_style_name(RopeStyle s) noexcept {
    switch (s) {
        case RopeStyle::neox: return "neox";
        case RopeStyle::gptj: return "gptj";
    }
    return "?";
}

struct RopeDesc {
    RopeStyle style = RopeStyle::neox;
    int64_t tokens = 0;      // >= 0 (0 is a no-op)
    int64_t q_heads = 0;     // >= 0
    int64_t k_heads = 0;     // >= 0; when both are > 0 it must divide q_heads (GQA / MQA)
    int64_t head_dim = 0;    // >= 1
    int64_t rotary_dim = 0;  // even, in [2, head_dim]; 0 = head_dim
    DType dtype = DType::f32;  // q and k: f32 or bf16
    int64_t q_token_stride = 0, q_head_stride = 0;  // elements; 0 = packed
    int64_t k_token_stride = 0, k_head_stride = 0;  // elements; 0 = packed
    RopePositionType position_type = RopePositionType::s64;
    RopeCosSin cos_sin = RopeCosSin::cache;
    // cos_sin == cache
    DType cache_dtype = DType::f32;  // f32 or bf16
    int64_t max_position = 0;        // rows of the cache, >= 1
    // cos_sin == compute
    float base = 10000.0f;           // theta base, finite, > 0
    float scaling_factor = 1.0f;     // linear scaling: positions are divided by it; finite, > 0
};

struct RopeArgs {
    void* q = nullptr;                    // rotated in place; required iff tokens and q_heads > 0
    void* k = nullptr;                    // rotated in place; required iff tokens and k_heads > 0
    const void* positions = nullptr;      // [tokens], int64_t or int32_t (position_type)
    const void* cos_sin_cache = nullptr;  // [max_position x rotary_dim] (cos_sin == cache only)
};

namespace detail {
struct RopeKernel;
}

// Validates the descriptor and selects the implementation once; run() validates pointers and
// positions (all of them, before touching q or k) and runs, split over tokens. Immutable, safe
// to run concurrently.
class RopePlan {
public:
    explicit RopePlan(const RopeDesc& desc);
    void run(const RopeArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const RopeDesc& desc() const { return desc_; }  // strides and rotary_dim resolved

private:
    RopeDesc desc_;
    std::shared_ptr<const detail::RopeKernel> kernel_;
    const char* impl_name_ = "";
};

// One-shot: validates, fetches the kernel through the kernel cache, runs.
void rope(const RopeDesc& desc, const RopeArgs& args);

// vLLM's rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox): packed
// q [tokens, q_heads*head_dim] and k [tokens, k_heads*head_dim] rotated in place (k may be null
// with k_heads == 0); rotary_dim 0 = head_dim.
void rope(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim,
          float* q, float* k, const int64_t* positions, const float* cos_sin_cache, int64_t max_position);
void rope(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim,
          bf16* q, bf16* k, const int64_t* positions, const float* cos_sin_cache, int64_t max_position);
void rope(RopeStyle style, int64_t tokens, int64_t q_heads, int64_t k_heads, int64_t head_dim, int64_t rotary_dim,
          bf16* q, bf16* k, const int64_t* positions, const bf16* cos_sin_cache, int64_t max_position);

}  // namespace xk
