// C API: fused optimizer steps.
#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/c/optim.h"
#include "xk/optim.hpp"

using xk::detail::capi_call;

namespace {
xk::OptimTensors tensors(int param_type, int64_t n, void* param, uint16_t* param_lo, const float* grad) {
    xk::OptimTensors t;
    t.n = n;
    t.param_type = static_cast<xk::OptimParamType>(param_type);  // validated by the step (enum class : int)
    t.param = param;
    t.param_lo = param_lo;
    t.grad_dtype = xk::DType::f32;
    t.grad = grad;
    return t;
}
}  // namespace

extern "C" {

xk_status xk_sgd_options_init(xk_sgd_options* o) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_sgd_options_init", "o", o);
        *o = xk_sgd_options{};
        o->lr = 1e-3;
    });
}

xk_status xk_adam_options_init(xk_adam_options* o) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_adam_options_init", "o", o);
        *o = xk_adam_options{};
        o->lr = 1e-3;
        o->beta1 = 0.9;
        o->beta2 = 0.999;
        o->eps = 1e-8;
    });
}

xk_status xk_adagrad_options_init(xk_adagrad_options* o) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_adagrad_options_init", "o", o);
        *o = xk_adagrad_options{};
        o->lr = 1e-2;
        o->eps = 1e-10;
    });
}

xk_status xk_lamb_options_init(xk_lamb_options* o) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_lamb_options_init", "o", o);
        *o = xk_lamb_options{};
        o->lr = 1e-3;
        o->beta1 = 0.9;
        o->beta2 = 0.999;
        o->eps = 1e-6;
    });
}

xk_status xk_lamb_step(const xk_lamb_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                       const float* grad, float* exp_avg, float* exp_avg_sq, int64_t step, float* trust_ratio) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_lamb_step", "o", o);
        xk::LambOptions s;
        s.lr = o->lr;
        s.beta1 = o->beta1;
        s.beta2 = o->beta2;
        s.eps = o->eps;
        s.weight_decay = o->weight_decay;
        const float r = xk::lamb_step(s, tensors(param_type, n, param, param_lo, grad), exp_avg, exp_avg_sq, step);
        if (trust_ratio) *trust_ratio = r;
    });
}

xk_status xk_sgd_step(const xk_sgd_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                      const float* grad, float* momentum_buffer, int64_t step) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_sgd_step", "o", o);
        xk::SgdOptions s;
        s.lr = o->lr;
        s.momentum = o->momentum;
        s.dampening = o->dampening;
        s.weight_decay = o->weight_decay;
        s.nesterov = o->nesterov != 0;
        s.maximize = o->maximize != 0;
        xk::sgd_step(s, tensors(param_type, n, param, param_lo, grad), momentum_buffer, step);
    });
}

xk_status xk_adam_step(const xk_adam_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                       const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t step) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_adam_step", "o", o);
        xk::AdamOptions s;
        s.lr = o->lr;
        s.beta1 = o->beta1;
        s.beta2 = o->beta2;
        s.eps = o->eps;
        s.weight_decay = o->weight_decay;
        s.adamw = o->adamw != 0;
        s.amsgrad = o->amsgrad != 0;
        s.maximize = o->maximize != 0;
        xk::adam_step(s, tensors(param_type, n, param, param_lo, grad), exp_avg, exp_avg_sq, max_exp_avg_sq, step);
    });
}

xk_status xk_adagrad_step(const xk_adagrad_options* o, int param_type, int64_t n, void* param, uint16_t* param_lo,
                          const float* grad, float* state_sum, int64_t step) {
    return capi_call([&] {
        xk::detail::check_not_null("xk_adagrad_step", "o", o);
        xk::AdagradOptions s;
        s.lr = o->lr;
        s.lr_decay = o->lr_decay;
        s.weight_decay = o->weight_decay;
        s.eps = o->eps;
        s.maximize = o->maximize != 0;
        xk::adagrad_step(s, tensors(param_type, n, param, param_lo, grad), state_sum, step);
    });
}

}  // extern "C"
