/* xkernels C API — DLRM feature interaction (see xk/xk.h for xk_status and xk_last_error).
 * Semantics, pair order and checks are those of xk/interaction.hpp: out = [T_0, lower triangle of
 * T T^T] per sample. dtype is XK_DTYPE_F32 or XK_DTYPE_BF16 (raw bfloat16 bits) for every tensor.
 * features: num_features pointers, each batch rows of ld_features[f] elements (ld_features NULL =
 * all dim); ld_out / ld_grad_out 0 = packed (xk_interaction_out_dim). A rejected call writes
 * nothing. */
#ifndef XK_C_INTERACTION_H
#define XK_C_INTERACTION_H
#include "xk/xk.h"
#ifdef __cplusplus
extern "C" {
#endif

typedef struct xk_interaction_desc {
    int64_t num_features, dim;
    xk_dtype dtype;
    int self_interaction; /* include dot(T_i, T_i) (DLRM's interaction_itself) */
} xk_interaction_desc;

/* out_dim = dim + num_features*(num_features -+ 1)/2. */
xk_status xk_interaction_out_dim(const xk_interaction_desc* desc, int64_t* out_dim);
xk_status xk_interaction_forward(const xk_interaction_desc* desc, int64_t batch, const void* const* features,
                                 const int64_t* ld_features, void* out, int64_t ld_out);
/* grad_features (written, not accumulated): num_features pointers of batch x dim. */
xk_status xk_interaction_backward(const xk_interaction_desc* desc, int64_t batch, const void* const* features,
                                  const int64_t* ld_features, const void* grad_out, int64_t ld_grad_out,
                                  void* const* grad_features, const int64_t* ld_grad_features);

#ifdef __cplusplus
}
#endif
#endif
