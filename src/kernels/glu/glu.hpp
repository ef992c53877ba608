// Internal interface of the GLU family (SwiGLU / GeGLU ...), shared by its implementations and
// the tests.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/llm.hpp"

namespace xk::detail {

// What a kernel is generated for: the activation, inner and the dtypes (rows and strides are
// runtime values).
struct GluKernelDesc {
    Activation activation = Activation::silu;
    int64_t inner = 0;
    DType x_dtype = DType::f32, y_dtype = DType::f32;

    std::string key() const;
};

GluKernelDesc glu_kernel_desc(const GluDesc& d);

struct GluKernel {
    virtual ~GluKernel() = default;
    // Rows [row_begin, row_end), single-threaded; d resolved, a validated.
    virtual void run(const GluDesc& d, const GluArgs& a, int64_t row_begin, int64_t row_end) const = 0;
};

const Registry<GluKernelDesc, GluKernel>& glu_registry();

// Validation (exposed for the tests' and tools' descriptors): resolved descriptor.
GluDesc glu_resolve(const char* fn, const GluDesc& d);
void glu_one_shot(const char* fn, const GluDesc& desc, const GluArgs& args);

// Reference (specification): rows [row_begin, row_end); d resolved.
void glu_reference(const GluDesc& d, const GluArgs& a, int64_t row_begin, int64_t row_end);

// JIT generator entry (jit_glu.cpp): isa is avx2, avx512 or avx512_bf16.
std::shared_ptr<const GluKernel> create_jit_glu(const GluKernelDesc& kd, Isa isa);

// Rows per parallel chunk: at least ~16K outputs per chunk (a decode step runs inline).
inline int64_t glu_row_grain(int64_t inner) { return std::max<int64_t>(1, (16384 + inner - 1) / std::max<int64_t>(inner, 1)); }

}  // namespace xk::detail
