// C API: int8 Linear and SmoothQuant helpers.
#include <algorithm>

#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/qlinear.hpp"

struct xk_qlinear {
    xk::QLinearPlan plan;
};

namespace {

using xk::detail::c_enum;
using xk::detail::capi_call;

template <class T>
void require(const char* fn, const char* arg, const T* p) {
    if (!p) throw xk::Error(xk::Status::invalid_argument, std::string(fn) + ": " + arg + "=null must not be a null pointer");
}

xk::DType to_dtype(const xk_dtype& t) { return static_cast<xk::DType>(c_enum(t)); }

xk::QLinearDesc to_desc(const xk_qlinear_desc& c) {
    xk::QLinearDesc d;
    d.N = c.N, d.K = c.K;
    d.quant = static_cast<xk::QLinearQuant>(c_enum(c.quant));
    d.x_type = to_dtype(c.x_type), d.y_type = to_dtype(c.y_type);
    d.ldx = c.ldx, d.ldy = c.ldy;
    d.smooth = c.smooth != 0;
    d.epilogue.bias = c.bias != 0;
    d.epilogue.act = static_cast<xk::Activation>(c_enum(c.act));
    d.epilogue.residual = c.residual != 0;
    d.residual_type = to_dtype(c.residual_type);
    d.ld_residual = c.ld_residual;
    return d;
}

}  // namespace

extern "C" {

void xk_qlinear_desc_init(xk_qlinear_desc* d) {
    if (!d) return;
    *d = xk_qlinear_desc{};
    d->quant = XK_QLINEAR_DYNAMIC_PER_TOKEN;
    d->x_type = d->y_type = d->residual_type = XK_DTYPE_F32;
    d->act = XK_ACT_NONE;
}

void xk_qlinear_args_init(xk_qlinear_args* a) {
    if (!a) return;
    *a = xk_qlinear_args{};
    a->x_scale = a->y_scale = 1.0f;
}

xk_status xk_qlinear_create(const xk_qlinear_desc* desc, const xk_qlinear_weight* weight, xk_qlinear** plan) {
    if (plan) *plan = nullptr;
    return capi_call([&] {
        require("xk_qlinear_create", "plan", plan);
        require("xk_qlinear_create", "desc", desc);
        require("xk_qlinear_create", "weight", weight);
        xk::QLinearWeight w;
        w.type = to_dtype(weight->type);
        w.data = weight->data, w.ld = weight->ld, w.scales = weight->scales;
        *plan = new xk_qlinear{xk::QLinearPlan(to_desc(*desc), w)};
    });
}

void xk_qlinear_destroy(xk_qlinear* plan) { delete plan; }

xk_status xk_qlinear_run(const xk_qlinear* plan, int64_t M, const xk_qlinear_args* args) {
    return capi_call([&] {
        require("xk_qlinear_run", "plan", plan);
        require("xk_qlinear_run", "args", args);
        xk::QLinearArgs a;
        a.x = args->x, a.y = args->y, a.bias = args->bias, a.residual = args->residual, a.smooth = args->smooth;
        a.x_scale = args->x_scale, a.x_zero_point = args->x_zero_point;
        a.y_scale = args->y_scale, a.y_zero_point = args->y_zero_point;
        plan->plan.run(M, a);
    });
}

const float* xk_qlinear_weight_scales(const xk_qlinear* plan) { return plan ? plan->plan.weight_scales() : nullptr; }
const char* xk_qlinear_impl_name(const xk_qlinear* plan) { return plan ? plan->plan.impl_name() : ""; }

xk_status xk_smoothquant_observe_f32(int64_t rows, int64_t K, const float* x, int64_t ld, float* absmax) {
    return capi_call([&] {
        xk::detail::check_nonnegative("xk_smoothquant_observe_f32", "K", K);
        if (K > 0) require("xk_smoothquant_observe_f32", "absmax", absmax);
        xk::SmoothQuantCalibrator c(K);
        c.observe(rows, x, ld);
        for (int64_t k = 0; k < K; ++k) absmax[k] = std::max(absmax[k], c.absmax()[k]);
    });
}

xk_status xk_smoothquant_observe_bf16(int64_t rows, int64_t K, const uint16_t* x, int64_t ld, float* absmax) {
    return capi_call([&] {
        xk::detail::check_nonnegative("xk_smoothquant_observe_bf16", "K", K);
        if (K > 0) require("xk_smoothquant_observe_bf16", "absmax", absmax);
        xk::SmoothQuantCalibrator c(K);
        c.observe(rows, reinterpret_cast<const xk::bf16*>(x), ld);
        for (int64_t k = 0; k < K; ++k) absmax[k] = std::max(absmax[k], c.absmax()[k]);
    });
}

xk_status xk_smoothquant_weight_absmax(int64_t N, int64_t K, const float* W, int64_t ld, float* absmax) {
    return capi_call([&] { xk::smoothquant_weight_absmax(N, K, W, ld, absmax); });
}

xk_status xk_smoothquant_factors(int64_t K, const float* act_absmax, const float* weight_absmax, float alpha, float* s) {
    return capi_call([&] {
        if (K > 0) require("xk_smoothquant_factors", "s", s);
        const auto v = xk::smoothquant_factors(K, act_absmax, weight_absmax, alpha);
        std::copy(v.begin(), v.end(), s);
    });
}

xk_status xk_smoothquant_fold_weight(int64_t N, int64_t K, float* W, int64_t ld, const float* s) {
    return capi_call([&] { xk::smoothquant_fold_weight(N, K, W, ld, s); });
}

xk_status xk_smoothquant_fold_norm(int64_t K, float* gamma, float* beta, const float* s) {
    return capi_call([&] { xk::smoothquant_fold_norm(K, gamma, beta, s); });
}

}  // extern "C"
