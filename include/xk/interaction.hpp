// xkernels — DLRM feature interaction ("dot" interaction), forward and backward (DLRM's
// interact_features, IPEX's torch.ops.torch_ipex.interaction_forward / _backward).
//
// Per sample b, N feature vectors of dimension D: T_0 (the dense feature, the bottom MLP's
// output) and T_1 .. T_{N-1} (the embedding bags' outputs). The output row is the dense feature
// followed by the lower triangle of Z = T T^T, row by row:
//   out[b][0 .. D)      = T_0[b]
//   out[b][D + p]       = dot(T_i[b], T_j[b])  for the p-th pair (i, j) in the order
//                         (1,0), (2,0), (2,1), (3,0), ... (i from 1, j < i)           [diagonal off]
//                         (0,0), (1,0), (1,1), (2,0), (2,1), (2,2), ...  (j <= i)    [self_interaction]
// i.e. torch.tril_indices(N, N, offset = -1 or 0) gathered from torch.bmm(T, T^T) — DLRM's
// `interaction_itself` (self_interaction) and IPEX's formula (diagonal off).
//   out_dim = D + P,  P = N(N-1)/2 (N(N+1)/2 with self_interaction).
//
// Backward, from grad_out (batch x out_dim):
//   grad_T_i = [i == 0] grad_out[b][0..D) + sum_{j != i} g(i,j) T_j + (self ? 2 g(i,i) T_i : 0)
// where g(i,j) = g(j,i) = grad_out[b][D + p] of the pair {i, j}. The gradients are written (not
// accumulated).
//
// dtype f32 or bf16 for the features, out, grad_out and the gradients; the dot products and the
// gradient sums are computed in f32 (bf16 values widened exactly) and a bf16 result is rounded
// to nearest even once. The f32 sum order is the implementation's (vector lanes, FMA): results
// agree with the double-precision formula to a few f32 ulps of the sum of |terms| (the dense copy
// is exact).
//
// Features are given as N pointers, each to batch rows with its own row stride (in elements), so
// that the dense MLP output and the columns of a merged embedding-bag output (xk::
// EmbeddingBagMultiPlan: table t at out + col_t, stride ld_out) are used in place.
// Validation: N >= 1, D >= 1, dtype, row strides >= D, no null pointer where something is read
// or written, the written buffers overlapping nothing else; a rejected call writes nothing. With
// batch = 0 nothing is read: the pointer and stride arrays are not either (and may be null).
#pragma once
#include <cstdint>
#include <memory>

#include "xk/types.hpp"

namespace xk {

struct InteractionDesc {
    int64_t num_features = 1;        // N (>= 1), feature 0 being the dense one
    int64_t dim = 1;                 // D (>= 1)
    DType dtype = DType::f32;        // f32 or bf16
    bool self_interaction = false;   // include the diagonal dot(T_i, T_i)
};

// D + P (see above); throws if the descriptor is invalid.
int64_t interaction_out_dim(const InteractionDesc& desc);

struct InteractionArgs {
    int64_t batch = 0;                       // >= 0
    const void* const* features = nullptr;   // N pointers (each required when batch > 0)
    const int64_t* ld_features = nullptr;    // N row strides in elements (>= D); null = all D
    void* out = nullptr;                     // batch rows of out_dim
    int64_t ld_out = 0;                      // 0 = out_dim
};

struct InteractionBackwardArgs {
    int64_t batch = 0;
    const void* const* features = nullptr;   // as forward
    const int64_t* ld_features = nullptr;
    const void* grad_out = nullptr;          // batch rows of out_dim
    int64_t ld_grad_out = 0;                 // 0 = out_dim
    void* const* grad_features = nullptr;    // N pointers: written, batch rows of D
    const int64_t* ld_grad_features = nullptr;  // N row strides (>= D); null = all D
};

// Validates the descriptor and selects the kernel once; immutable, run concurrently.
class InteractionPlan {
public:
    explicit InteractionPlan(const InteractionDesc& desc);
    void forward(const InteractionArgs& args) const;
    void backward(const InteractionBackwardArgs& args) const;
    const InteractionDesc& desc() const;
    int64_t out_dim() const;
    const char* impl_name() const;

private:
    struct State;
    std::shared_ptr<const State> s_;
};

void interaction_forward(const InteractionDesc& desc, const InteractionArgs& args);
void interaction_backward(const InteractionDesc& desc, const InteractionBackwardArgs& args);

}  // namespace xk
