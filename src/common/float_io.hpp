// Loads and stores of f32 / bf16 rows through fp32, for kernels whose math is fp32 and whose I/O
// dtype is a runtime choice (norm, rope, quant references).
#pragma once
#include <cstdint>

#include "xk/types.hpp"

namespace xk::detail {

// out[i] = float(p[i]) for i in [0, n); t is f32 or bf16 (exact widening).
inline void load_f32(const void* p, DType t, int64_t n, float* out) {
    if (t == DType::bf16) {
        const auto* s = static_cast<const bf16*>(p);
        for (int64_t i = 0; i < n; ++i) out[i] = s[i].to_float();
    } else {
        const auto* s = static_cast<const float*>(p);
        for (int64_t i = 0; i < n; ++i) out[i] = s[i];
    }
}

// p[i] = in[i] rounded to t (round to nearest even for bf16).
inline void store_f32(const float* in, int64_t n, void* p, DType t) {
    if (t == DType::bf16) {
        auto* d = static_cast<bf16*>(p);
        for (int64_t i = 0; i < n; ++i) d[i] = bf16(in[i]);
    } else {
        auto* d = static_cast<float*>(p);
        for (int64_t i = 0; i < n; ++i) d[i] = in[i];
    }
}

// Element i of a row (byte arithmetic in the element size of t).
inline const void* elem_ptr(const void* p, DType t, int64_t i) {
    return static_cast<const char*>(p) + i * dtype_size(t);
}
inline void* elem_ptr(void* p, DType t, int64_t i) { return static_cast<char*>(p) + i * dtype_size(t); }

}  // namespace xk::detail
