// Internal interface of the rope family, shared by its implementations and the tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/rope.hpp"

namespace xk::detail {

// What a kernel is generated for: everything in RopeDesc except the runtime values (tokens, head
// counts, strides, max_position, base, scaling_factor).
struct RopeKernelDesc {
    RopeStyle style = RopeStyle::neox;
    int64_t head_dim = 0, rotary_dim = 0;
    DType dtype = DType::f32;
    RopePositionType position_type = RopePositionType::s64;
    RopeCosSin cos_sin = RopeCosSin::cache;
    DType cache_dtype = DType::f32;  // cache only

    std::string key() const;
};

RopeKernelDesc rope_kernel_desc(const RopeDesc& d);

struct RopeKernel {
    virtual ~RopeKernel() = default;
    // Tokens [token_begin, token_end), single-threaded (the caller splits the tokens). d has the
    // strides and rotary_dim resolved; a and every position are validated.
    virtual void run(const RopeDesc& d, const RopeArgs& a, int64_t token_begin, int64_t token_end) const = 0;
};

const Registry<RopeKernelDesc, RopeKernel>& rope_registry();

// The one-shot path (validate, kernel cache, run) with the caller's name in error messages.
void rope_one_shot(const char* fn, const RopeDesc& desc, const RopeArgs& args);

// Reference (specification): tokens [token_begin, token_end); d must be resolved.
void rope_reference(const RopeDesc& d, const RopeArgs& a, int64_t token_begin, int64_t token_end);

// JIT generator entry (jit_rope.cpp): isa is avx2, avx512 or avx512_bf16 (native bf16 stores).
std::shared_ptr<const RopeKernel> create_jit_rope(const RopeKernelDesc& kd, Isa isa);
// The JIT kernels unroll one head's rotation: rotary_dim up to 1024 (larger: the reference).
constexpr int64_t kRopeJitMaxRotaryDim = 1024;
inline bool rope_jit_supports(const RopeKernelDesc& kd) { return kd.rotary_dim <= kRopeJitMaxRotaryDim; }

// Tokens per parallel chunk: at least ~16K rotated elements per chunk.
inline int64_t rope_token_grain(int64_t heads, int64_t rotary_dim) {
    const int64_t per_token = std::max<int64_t>(1, heads * rotary_dim);
    return std::max<int64_t>(1, (16384 + per_token - 1) / per_token);
}

}  // namespace xk::detail
