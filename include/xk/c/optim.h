/* xkernels C API — fused optimizer steps (see xk/xk.h for xk_status and xk_last_error).
 * Semantics, formulas and checks are those of xk/optim.hpp. f32 gradients; param is float[n]
 * (XK_OPTIM_PARAM_F32) or the bf16 top halves uint16_t[n] with param_lo the bottom halves
 * (XK_OPTIM_PARAM_BF16_SPLIT, split SGD's fp32 master); param_lo is NULL for f32 params.
 * step counts from 1. A rejected call writes nothing. */
#ifndef XK_C_OPTIM_H
#define XK_C_OPTIM_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

enum { XK_OPTIM_PARAM_F32 = 0, XK_OPTIM_PARAM_BF16_SPLIT = 1 };

typedef struct xk_sgd_options {
    double lr, momentum, dampening, weight_decay;
    int nesterov, maximize;
} xk_sgd_options;
typedef struct xk_adam_options {
    double lr, beta1, beta2, eps, weight_decay;
    int adamw, amsgrad, maximize;
} xk_adam_options;
typedef struct xk_adagrad_options {
    double lr, lr_decay, weight_decay, eps;
    int maximize;
} xk_adagrad_options;
typedef struct xk_lamb_options {
    double lr, beta1, beta2, eps, weight_decay;
} xk_lamb_options;

/* PyTorch's defaults: SGD lr 1e-3, rest 0; Adam lr 1e-3, betas (0.9, 0.999), eps 1e-8, wd 0;
 * Adagrad lr 1e-2, lr_decay 0, wd 0, eps 1e-10. */
xk_status xk_sgd_options_init(xk_sgd_options* o);
xk_status xk_adam_options_init(xk_adam_options* o);
xk_status xk_adagrad_options_init(xk_adagrad_options* o);
/* Lamb: lr 1e-3, betas (0.9, 0.999), eps 1e-6, wd 0 (IPEX's Lamb defaults). */
xk_status xk_lamb_options_init(xk_lamb_options* o);

/* momentum_buffer: float[n], NULL iff momentum == 0. */
xk_status xk_sgd_step(const xk_sgd_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                      const float* grad, float* momentum_buffer, int64_t step);
/* max_exp_avg_sq: float[n] iff amsgrad, else NULL. */
xk_status xk_adam_step(const xk_adam_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                       const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t step);
xk_status xk_adagrad_step(const xk_adagrad_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                          const float* grad, float* state_sum, int64_t step);

/* One Lamb step of one parameter tensor (trust ratio over the whole tensor; xk/optim.hpp has the
 * formula). trust_ratio (may be NULL) receives the ratio applied. */
xk_status xk_lamb_step(const xk_lamb_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                       const float* grad, float* exp_avg, float* exp_avg_sq, int64_t step, float* trust_ratio);

#ifdef __cplusplus
}
#endif
#endif
