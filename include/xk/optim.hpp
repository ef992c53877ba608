// xkernels — fused optimizer steps for dense parameters (torch.optim.SGD / Adam / AdamW /
// Adagrad, and Lamb, one step): one pass over parameters, gradients and optimizer states, vectorised
// (AVX-512 / AVX2), split over the threads.
//
// Parameters are f32, or bf16 split (IPEX's split SGD, for bf16 training): the fp32 master weight
// is kept as two 16-bit halves — `param` holds the top halves (a valid bf16 tensor: what the
// forward reads; the truncation of the master) and `param_lo` the bottom halves. A step
// reassembles each master exactly, updates it in f32 and splits it back (no rounding). Gradients
// are f32 or bf16 (widened exactly). States are f32.
//
// Formulas: PyTorch's documented algorithms (torch.optim docs), evaluated element by element in
// f32 the way PyTorch's single-tensor implementation orders them; the per-step scalars (bias
// corrections, decayed learning rate) are computed in double once per call. Every ISA variant
// gives bit for bit the scalar reference's result.
//   g = maximize ? -grad : grad
//   SGD      if wd: g = g + wd * p
//            if momentum: b = (step == 1) ? g : momentum * b + (1 - dampening) * g
//                         g = nesterov ? g + momentum * b : b
//            p = p - lr * g
//   Adam     adamw ? p = p * (1 - lr * wd) : (wd ? g = g + wd * p)
//            m = m + (1 - beta1) * (g - m)                  (PyTorch's lerp_)
//            v = beta2 * v + (1 - beta2) * (g * g)
//            amsgrad: vmax = max(vmax, v), v' = vmax (else v' = v)
//            denom = sqrt(v') / sqrt(1 - beta2^step) + eps
//            p = p - (lr / (1 - beta1^step)) * (m / denom)
//   Adagrad  if wd: g = g + wd * p
//            s = s + g * g
//            p = p - (lr / (1 + (step - 1) * lr_decay)) * (g / (sqrt(s) + eps))
//   Lamb     (You et al. 2019, "Large Batch Optimization for Deep Learning"; IPEX's Lamb / apex's
//            FusedLAMB without gradient clipping), one trust ratio per call (= per parameter tensor):
//            m = beta1 * m + (1 - beta1) * g
//            v = beta2 * v + (1 - beta2) * (g * g)
//            u = (m / bc1) / (sqrt(v / bc2) + eps)      bc1 = 1 - beta1^step, bc2 = 1 - beta2^step
//            if wd: u = u + wd * p
//            trust = (||p|| > 0 and ||u|| > 0) ? ||p|| / ||u|| : 1   (norms over the whole tensor,
//                    the sums of squares in double, the old p)
//            p = p - (lr * trust) * u                  (lr * trust rounded to f32 once: inf if it
//                    overflows, as PyTorch's add_(u, alpha=-lr * trust) on an f32 tensor)
//          Two passes: the first updates m, v and sums p^2 and u^2, the second recomputes u from the
//          stored m, v and applies it (40 bytes per f32 element moved). The norms are summed in
//          fixed 64 Ki-element chunks, then in chunk order: the result does not depend on the
//          thread count; the vector kernels sum lanes in another order than the scalar reference,
//          so trust may differ from it in the last bits of the double sums.
// step counts from 1 (the step being taken, PyTorch's state['step'] after its increment).
// Hyper-parameters are checked as PyTorch checks them (lr >= 0, momentum >= 0, 0 <= beta < 1,
// eps >= 0, weight_decay >= 0, nesterov needs momentum > 0 and dampening 0); a rejected call
// writes nothing.
#pragma once
#include <cstdint>

#include "xk/types.hpp"

namespace xk {

enum class OptimParamType : int { f32 = 0, bf16_split = 1 };

struct OptimTensors {
    int64_t n = 0;                                  // elements (>= 0)
    OptimParamType param_type = OptimParamType::f32;
    void* param = nullptr;                          // f32[n], or bf16 top halves uint16[n]
    uint16_t* param_lo = nullptr;                   // bf16_split: bottom halves uint16[n]; else null
    DType grad_dtype = DType::f32;                  // f32 or bf16
    const void* grad = nullptr;                     // grad_dtype[n]
};

struct SgdOptions {
    double lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0;
    bool nesterov = false, maximize = false;
};
// momentum_buffer: f32[n], required iff momentum != 0 (written on step 1 = g).
void sgd_step(const SgdOptions& o, const OptimTensors& t, float* momentum_buffer, int64_t step);

struct AdamOptions {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
    bool adamw = false;  // decoupled weight decay (torch.optim.AdamW; its default weight_decay is 1e-2)
    bool amsgrad = false, maximize = false;
};
// exp_avg, exp_avg_sq: f32[n] (zeros before step 1); max_exp_avg_sq: f32[n] iff amsgrad.
void adam_step(const AdamOptions& o, const OptimTensors& t, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq,
               int64_t step);

struct AdagradOptions {
    double lr = 1e-2, lr_decay = 0, weight_decay = 0, eps = 1e-10;
    bool maximize = false;
};
// state_sum: f32[n] (initial_accumulator_value before step 1).
void adagrad_step(const AdagradOptions& o, const OptimTensors& t, float* state_sum, int64_t step);

struct LambOptions {
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0;
};
// exp_avg, exp_avg_sq: f32[n] (zeros before step 1). Returns the trust ratio applied.
float lamb_step(const LambOptions& o, const OptimTensors& t, float* exp_avg, float* exp_avg_sq, int64_t step);

}  // namespace xk
