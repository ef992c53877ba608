// Internal interface of the norm family, shared by its implementations and the tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/norm.hpp"

namespace xk::detail {

// What a kernel is generated for: everything in NormDesc except the runtime values (rows, row
// strides, eps), so one kernel serves every batch size of a model.
struct NormKernelDesc {
    NormKind kind = NormKind::rms_norm;
    int64_t hidden = 0;
    DType x_dtype = DType::f32, y_dtype = DType::f32, residual_dtype = DType::f32, weight_dtype = DType::f32;
    bool has_weight = true, has_bias = false, fused_residual = false;

    std::string key() const;
};

NormKernelDesc norm_kernel_desc(const NormDesc& d);

struct NormKernel {
    virtual ~NormKernel() = default;
    // Rows [row_begin, row_end) of the problem, single-threaded (the caller splits the rows).
    // d has the strides resolved and the kernel desc this kernel was created for; a is validated.
    virtual void run(const NormDesc& d, const NormArgs& a, int64_t row_begin, int64_t row_end) const = 0;
};

const Registry<NormKernelDesc, NormKernel>& norm_registry();

// The one-shot path (validate, kernel cache, run) with the caller's name in error messages.
void norm_one_shot(const char* fn, const NormDesc& desc, const NormArgs& args);

// Reference (specification): rows [row_begin, row_end); d must have its strides resolved.
void norm_reference(const NormDesc& d, const NormArgs& a, int64_t row_begin, int64_t row_end);

// JIT generator entry (jit_norm.cpp): isa is avx2, avx512 or avx512_bf16 (native bf16 stores).
std::shared_ptr<const NormKernel> create_jit_norm(const NormKernelDesc& kd, Isa isa);
// Whether the descriptor reads or writes bf16 data (the avx512_bf16 entry only differs then).
bool norm_uses_bf16(const NormKernelDesc& kd);

// Rows per parallel chunk: at least ~16K elements per chunk, so a single row of 4096 (or a few
// rows) runs inline.
inline int64_t norm_row_grain(int64_t hidden) { return std::max<int64_t>(1, (16384 + hidden - 1) / std::max<int64_t>(hidden, 1)); }

}  // namespace xk::detail
