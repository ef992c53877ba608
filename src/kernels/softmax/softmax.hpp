// Internal interface of the softmax family, shared by its implementations and the tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/llm.hpp"

namespace xk::detail {

// What a kernel is generated for: the dtypes only. The row length is a runtime value (each row
// has its own visible length under the causal mask), so one kernel serves every shape.
struct SoftmaxKernelDesc {
    DType x_dtype = DType::f32, y_dtype = DType::f32;
    bool mask = false;  // additive mask (the reference only)
    std::string key() const;
};

SoftmaxKernelDesc softmax_kernel_desc(const SoftmaxDesc& d);

struct SoftmaxKernel {
    virtual ~SoftmaxKernel() = default;
    // Rows [row_begin, row_end), single-threaded; d resolved, a validated.
    virtual void run(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end) const = 0;
};

const Registry<SoftmaxKernelDesc, SoftmaxKernel>& softmax_registry();

SoftmaxDesc softmax_resolve(const char* fn, const SoftmaxDesc& d);
void softmax_one_shot(const char* fn, const SoftmaxDesc& desc, const SoftmaxArgs& args);

// Columns of row r that are visible: [0, softmax_visible(d, a, r)) (causal and valid_lens).
inline int64_t softmax_visible(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t r) {
    int64_t v = d.cols;
    if (d.causal) v = std::clamp<int64_t>(r + d.causal_offset + 1, 0, d.cols);  // no overflow: validated
    if (a.valid_lens) v = std::min(v, a.valid_lens[r]);                          // validated in [0, cols]
    return v;
}

// Reference (specification): rows [row_begin, row_end); d resolved.
void softmax_reference(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end);

// JIT generator entry (jit_softmax.cpp): isa is avx2, avx512 or avx512_bf16.
// Tests: bf16 y scaled inside the fused pass (1) or by its own pass (0) on every machine; -1
// restores the default (the former on Intel at avx512_bf16 and up, see jit_softmax.cpp).
void softmax_set_bf16_fused_y(int mode);
std::shared_ptr<const SoftmaxKernel> create_jit_softmax(const SoftmaxKernelDesc& kd, Isa isa);

inline int64_t softmax_row_grain(int64_t cols) { return std::max<int64_t>(1, (16384 + cols - 1) / std::max<int64_t>(cols, 1)); }

}  // namespace xk::detail
