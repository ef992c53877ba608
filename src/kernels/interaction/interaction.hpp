// Internal interface of the DLRM interaction (xk/interaction.hpp), shared by the reference, the
// vectorised kernels and the tests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dispatch/registry.hpp"
#include "xk/interaction.hpp"

namespace xk::detail {

// What a kernel specialises on (the kernel-cache key).
struct InteractionConfig {
    int64_t num_features = 1, dim = 1;
    DType dtype = DType::f32;
    bool self_interaction = false;
    std::string key() const;
    int64_t pairs() const { return self_interaction ? num_features * (num_features + 1) / 2 : num_features * (num_features - 1) / 2; }
    int64_t out_dim() const { return dim + pairs(); }
};

// One validated call (forward: grad_* unused; backward: out unused). Strides resolved.
struct InteractionCall {
    InteractionConfig cfg;
    int64_t batch = 0;
    std::vector<const void*> feat;
    std::vector<int64_t> ld_feat;
    void* out = nullptr;
    int64_t ld_out = 0;
    const void* grad_out = nullptr;
    int64_t ld_grad_out = 0;
    std::vector<void*> grad;
    std::vector<int64_t> ld_grad;
};

struct InteractionKernel {
    virtual ~InteractionKernel() = default;
    // Samples [b0, b1) of a validated call, single-threaded.
    virtual void forward(const InteractionCall& c, int64_t b0, int64_t b1) const = 0;
    virtual void backward(const InteractionCall& c, int64_t b0, int64_t b1) const = 0;
};

const Registry<InteractionConfig, InteractionKernel>& interaction_registry();
std::shared_ptr<const InteractionKernel> create_interaction_simd(const InteractionConfig& k, Isa isa);

// Reference (specification): dot products and gradient sums in f32, in index order (k for the
// dot; dense, then j = 0..N-1 for the gradient), a bf16 result rounded once.
void interaction_forward_reference(const InteractionCall& c, int64_t b0, int64_t b1);
void interaction_backward_reference(const InteractionCall& c, int64_t b0, int64_t b1);

InteractionConfig interaction_validate_desc(const char* fn, const InteractionDesc& d);
InteractionCall interaction_validate_forward(const char* fn, const InteractionConfig& k, const InteractionArgs& a);
InteractionCall interaction_validate_backward(const char* fn, const InteractionConfig& k, const InteractionBackwardArgs& a);
// Runs a validated call split over the threads.
void interaction_run(const InteractionCall& c, const InteractionKernel& kernel, bool backward);

}  // namespace xk::detail
