// Internal interface of the conv family, shared by its implementations and the tests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/conv.hpp"

namespace xk::detail {

// A validated descriptor plus the derived output extents: what implementations are selected and
// created for. Every field of the public descriptor is part of the key (a kernel may specialise
// on any of them: shapes, strides, layouts, dtypes, epilogue).
struct ConvProblem {
    ConvDesc d;
    int64_t oh = 0, ow = 0;

    int64_t icg() const { return d.c / d.groups; }   // input channels per group
    int64_t ocg() const { return d.oc / d.groups; }  // output channels per group
    std::string key() const;
};

// Validates every field of the descriptor (sizes, enums, dtype combination, products) and
// returns the problem. fn names the caller in messages.
ConvProblem conv_validate_desc(const char* fn, const ConvDesc& d);
// Validates the pointers of one call against a validated problem: required ones non-null,
// aligned to their element size, dst not overlapping an input (residual == dst is allowed).
void conv_validate_args(const char* fn, const ConvProblem& p, const ConvArgs& a);

struct ConvKernel {
    virtual ~ConvKernel() = default;
    // The whole convolution of the problem it was created for, on validated arguments. The
    // kernel splits the work itself (detail::parallel_for, or oneDNN's own threading).
    virtual void run(const ConvArgs& a) const = 0;
};

const Registry<ConvProblem, ConvKernel>& conv_registry();

// Reference (specification): direct convolution, fp32 accumulation over (ic, kh, kw) in that
// order, then the epilogue in the order documented in xk/conv.hpp. Parallel over (N, OC-block).
void conv2d_reference(const ConvProblem& p, const ConvArgs& a);

}  // namespace xk::detail
