// Internal interface of the fused optimizer steps (xk/optim.hpp), shared by the reference, the
// vectorised kernels and the tests.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/optim.hpp"

namespace xk::detail {

enum class OptimKind : int { sgd = 0, adam = 1, adagrad = 2, lamb = 3 };

// What a kernel specialises on (the kernel-cache key).
struct OptimConfig {
    OptimKind kind = OptimKind::sgd;
    OptimParamType param_type = OptimParamType::f32;
    DType grad_dtype = DType::f32;
    std::string key() const;
};

// One validated step: f32 scalars of the formulas (computed once, in double, then rounded).
struct OptimCall {
    OptimConfig cfg;
    OptimTensors t;
    float* s0 = nullptr;  // sgd: momentum buffer; adam: exp_avg; adagrad: state_sum
    float* s1 = nullptr;  // adam: exp_avg_sq
    float* s2 = nullptr;  // adam: max_exp_avg_sq (amsgrad)
    bool maximize = false, first = false, nesterov = false, amsgrad = false, adamw = false;
    bool has_wd = false, has_momentum = false;
    float lr = 0, wd = 0, momentum = 0, one_minus_dampening = 1;  // sgd (lr also adagrad's clr)
    float one_minus_beta1 = 0, beta2 = 0, one_minus_beta2 = 0, bc2_sqrt = 1, step_size = 0, eps = 0;
    float decay = 1;  // adamw: 1 - lr * wd
    float beta1 = 0, bc1 = 1, bc2 = 1, lamb_coef = 0;  // lamb (lamb_coef = lr * trust, set between the passes)
    // Set by run_optim / run_lamb from two tuning knobs, both off by default (measured slower on
    // the device Xeon): XK_OPTIM_NT=1 stores the written arrays (param, param_lo, states) with
    // non-temporal stores in calls past nt_store_threshold() whose written arrays are 64-byte
    // aligned; XK_OPTIM_PF=<bytes> prefetches every read array that many bytes (of f32 elements)
    // ahead.
    bool nt = false;
    int64_t prefetch_bytes = 0;
};

void optim_lamb_norms_reference(const OptimCall& c, int64_t i0, int64_t i1, double* p2, double* u2);

struct OptimKernel {
    virtual ~OptimKernel() = default;
    // Elements [i0, i1) of a validated call.
    virtual void run(const OptimCall& c, int64_t i0, int64_t i1) const = 0;
    // Lamb's first pass over [i0, i1): updates m, v; adds sum p^2 to *p2 and sum u^2 to *u2.
    virtual void lamb_norms(const OptimCall& c, int64_t i0, int64_t i1, double* p2, double* u2) const {
        optim_lamb_norms_reference(c, i0, i1, p2, u2);
    }
};

const Registry<OptimConfig, OptimKernel>& optim_registry();
void optim_reference(const OptimCall& c, int64_t i0, int64_t i1);
std::shared_ptr<const OptimKernel> create_optim_simd(const OptimConfig& k, Isa isa);

// The validated calls (throw naming the argument); run_optim runs one with the selected kernel
// (or `kernel` when given), split over the threads.
OptimCall optim_sgd_call(const char* fn, const SgdOptions& o, const OptimTensors& t, float* buf, int64_t step);
OptimCall optim_adam_call(const char* fn, const AdamOptions& o, const OptimTensors& t, float* m, float* v, float* vmax,
                          int64_t step);
OptimCall optim_adagrad_call(const char* fn, const AdagradOptions& o, const OptimTensors& t, float* sum, int64_t step);
OptimCall optim_lamb_call(const char* fn, const LambOptions& o, const OptimTensors& t, float* m, float* v, int64_t step);
void run_optim(const OptimCall& c, const OptimKernel* kernel = nullptr);
// Both Lamb passes; returns the trust ratio.
float run_lamb(const OptimCall& c, const OptimKernel* kernel = nullptr);

}  // namespace xk::detail
