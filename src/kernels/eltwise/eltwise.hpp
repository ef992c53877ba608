// Internal interface of the eltwise family, shared by its implementations and the tests.
#pragma once
#include <cstdint>
#include <string>

#include "dispatch/registry.hpp"

namespace xk::detail {

struct AxpbyDesc {
    // The kernel is generic in n / alpha / beta; the descriptor only fixes the data type.
    std::string key() const { return "f32"; }
};

struct AxpbyKernel {
    virtual ~AxpbyKernel() = default;
    // y = alpha*x + beta*y over [0, n), single-threaded (the caller splits the range).
    virtual void run(int64_t n, float alpha, const float* x, float beta, float* y) const = 0;
};

const Registry<AxpbyDesc, AxpbyKernel>& axpby_registry();

// Reference (specification).
void axpby_reference(int64_t n, float alpha, const float* x, float beta, float* y);

// JIT generator entry (jit_axpby.cpp): isa is avx2 or avx512.
std::shared_ptr<const AxpbyKernel> create_jit_axpby(Isa isa);

}  // namespace xk::detail
