// C API: DLRM interaction.
#include "capi/capi_common.hpp"
#include "common/check.hpp"
#include "xk/c/interaction.h"
#include "xk/interaction.hpp"

using xk::detail::capi_call;

namespace {
xk::InteractionDesc desc_of(const char* fn, const xk_interaction_desc* d) {
    xk::detail::check_not_null(fn, "desc", d);
    xk::InteractionDesc r;
    r.num_features = d->num_features;
    r.dim = d->dim;
    r.dtype = static_cast<xk::DType>(xk::detail::c_enum(d->dtype));  // validated by the C++ layer
    r.self_interaction = d->self_interaction != 0;
    return r;
}
}  // namespace

extern "C" {

xk_status xk_interaction_out_dim(const xk_interaction_desc* desc, int64_t* out_dim) {
    return capi_call([&] {
        const xk::InteractionDesc d = desc_of("xk_interaction_out_dim", desc);
        xk::detail::check_not_null("xk_interaction_out_dim", "out_dim", out_dim);
        *out_dim = xk::interaction_out_dim(d);
    });
}

xk_status xk_interaction_forward(const xk_interaction_desc* desc, int64_t batch, const void* const* features,
                                 const int64_t* ld_features, void* out, int64_t ld_out) {
    return capi_call([&] {
        xk::InteractionArgs a;
        a.batch = batch;
        a.features = features;
        a.ld_features = ld_features;
        a.out = out;
        a.ld_out = ld_out;
        xk::interaction_forward(desc_of("xk_interaction_forward", desc), a);
    });
}

xk_status xk_interaction_backward(const xk_interaction_desc* desc, int64_t batch, const void* const* features,
                                  const int64_t* ld_features, const void* grad_out, int64_t ld_grad_out,
                                  void* const* grad_features, const int64_t* ld_grad_features) {
    return capi_call([&] {
        xk::InteractionBackwardArgs a;
        a.batch = batch;
        a.features = features;
        a.ld_features = ld_features;
        a.grad_out = grad_out;
        a.ld_grad_out = ld_grad_out;
        a.grad_features = grad_features;
        a.ld_grad_features = ld_grad_features;
        xk::interaction_backward(desc_of("xk_interaction_backward", desc), a);
    });
}

}  // extern "C"
