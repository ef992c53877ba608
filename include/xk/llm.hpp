// xkernels — the elementwise / row-wise LLM ops between the GEMMs of a transformer block:
// gated activations (SwiGLU, GeGLU) over a fused gate+up projection, and softmax over the last
// dimension with a scale and an optional causal mask. (RMSNorm / LayerNorm: xk/norm.hpp; RoPE:
// xk/rope.hpp.)
//
// Data types: f32 or bf16 in and out (independently); math in fp32; bf16 values are widened
// exactly. Outputs are rounded once, to nearest even, except where an op's accuracy note below
// says otherwise (bf16 GLU output of silu / gelu). bf16 outputs of the JIT kernels (every op): to nearest, but an exact tie may go away from zero
// (the AVX2 / AVX-512 paths' cheaper rounding), and at avx512_bf16 results below FLT_MIN are
// flushed to +-0 (VCVTNEPS2BF16); the scalar reference (XK_MAX_ISA=scalar) rounds ties to even
// and keeps subnormals. Found by the fuzz targets; differences are one bf16 ulp on exact ties.
//
// ---- GLU: y = act(gate) * up ------------------------------------------------------------------
// x is [rows x 2*inner] (row stride ld_x >= 2*inner), the concatenation [gate | up] of one fused
// projection (vLLM's silu_and_mul / gelu_and_mul convention); y is [rows x inner] (ld_y >= inner):
//   y[r, i] = act(x[r, i]) * x[r, inner + i]
// act: silu (SwiGLU: x * sigmoid(x)), gelu_erf (GeGLU), gelu_tanh (GeGLU, tanh approximation),
// relu (ReGLU) or none (bilinear GLU), with the definitions of xk::Activation.
// Accuracy, with w = act(g) * u exact and u = 2^-24:
//   f32 y: the vectorised activations of the JIT kernels are within a few fp32 ulps of the exact
//          value (silu 4u|w|, gelu_tanh (4 + 3|2y|)u|w|, gelu_erf (8 + 2x^2)u|w|; see
//          src/kernels/common/jit_activation.hpp); the product adds half an ulp.
//   bf16 y, relu and none: the fp32 product rounded to nearest (half a bf16 ulp of it; ties go
//          either way).
//   Tails: gelu (erf and tanh) also carries an absolute error of 5u |g u| (its tail is 0 below
//          g ~ -5.7 where the exact value is tiny: src/kernels/common/jit_activation.hpp); the
//          JIT kernels clamp silu's gate at -86 (below it |y| <= 4e-36 |u| instead of g e^g u),
//          and silu / gelu_tanh form g u before the division by 1 + e^-X: where |g u| overflows
//          fp32, y is +-inf even if act(g) u is finite (|g u| > 3.4e38; the scalar reference,
//          taken under XK_MAX_ISA=scalar, computes act(g) first).
//   bf16 y, silu, gelu_erf, gelu_tanh: the fast paths compute the activation only to bf16's need
//          and round once without a correction step, so y is within (2^-8 + 2^-10)|w| of w
//          (gelu: plus 8u|g u|), which is up to one bf16 ulp from w correctly rounded — not half
//          an ulp (silu: g = 0.245117188, u = 2.578125, w = 0.354503649 gives 0.353515625; the
//          nearest bf16 is 0.35546875). tests/kernels/test_glu.cpp checks these bounds over every
//          bf16 gate.
// Aliasing: y may be exactly x's gate half (y == x, ld_y == ld_x, same dtype: in place); any other
// overlap of y with x is an xk::Error.
//
// ---- softmax ------------------------------------------------------------------------------------
// x and y are [rows x cols] with row strides. With t[j] = scale * x[r, j] (exact) over the visible
// columns j of row r:
//   y[r, j] = exp(t[j] - m) / sum_k exp(t[k] - m),  m = max_k t[k]   (j, k visible)
//   y[r, j] = 0                                                       (j masked)
// Without a causal mask every column is visible. With causal = true, row r is the query at
// position p = r + causal_offset (e.g. causal_offset = kv_len - q_len for q_len new tokens
// attending to a kv cache of kv_len; 0 for a square prefill block) and column j, the key at
// position j, is visible iff j <= p. A row with no visible column (p < 0) is all zeros.
// scale must be finite and > 0 (e.g. 1/sqrt(head_dim)).
// Accuracy: exp(t - m) is computed as 2^(c x - c m_x), c = scale log2(e), through a table and a
// degree-3 polynomial (within 0.31 ulp, src/kernels/softmax/jit_softmax.cpp): the rounding of
// the argument adds ~|t - m| ulp and the fp32 per-lane sums of the exps up to ~v/8 ulps for v
// visible columns, so each y is within ~(6 + v/8) fp32 ulps of the exact softmax near the row's
// max and within ~(6 + |t - m| + v/8) ulps further down (bf16: plus half a bf16 ulp). Arguments
// below -127 ln 2 ~ -88.0 (up to ln(2) / 2 higher: the rounding of the row's bias c m_x) give
// exp = 0 exactly (between there and ln(FLT_MIN) ~ -87.3: values below ~1.5 FLT_MIN, not the
// exact ones). Rows whose max has |scale m_x| >= 2^24 / log2(e)
// ~ 1.16e7 take the scalar reference (in double: right for every finite logit, e.g.
// {1e10, 0, 1, 2} gives {1, 0, 0, 0}).
// Aliasing: y may be exactly x (same pointer, stride and dtype: in place); any other overlap is
// an xk::Error.
#pragma once
#include <cstdint>
#include <memory>

#include "xk/types.hpp"

namespace xk {

struct GluDesc {
    Activation activation = Activation::silu;  // silu, gelu_erf, gelu_tanh, relu or none
    int64_t rows = 0;    // >= 0 (0 is a no-op)
    int64_t inner = 0;   // >= 1: I, the width of y (x has 2*I columns)
    DType x_dtype = DType::f32;  // f32 or bf16
    DType y_dtype = DType::f32;  // f32 or bf16
    int64_t ld_x = 0;    // row stride of x in elements, 0 = 2*inner
    int64_t ld_y = 0;    // row stride of y in elements, 0 = inner
};

struct GluArgs {
    const void* x = nullptr;  // [rows x ld_x]
    void* y = nullptr;        // [rows x ld_y]
};

namespace detail {
struct GluKernel;
struct SoftmaxKernel;
}  // namespace detail

// Validates the descriptor and selects the implementation once; run() validates the pointers and
// runs, split over rows by the library's thread pool. Immutable, safe to run concurrently.
class GluPlan {
public:
    explicit GluPlan(const GluDesc& desc);
    void run(const GluArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const GluDesc& desc() const { return desc_; }  // strides resolved (no 0 left)

private:
    GluDesc desc_;
    std::shared_ptr<const detail::GluKernel> kernel_;
    const char* impl_name_ = "";
};

// One-shot: validates, fetches the kernel through the kernel cache, runs.
void glu(const GluDesc& desc, const GluArgs& args);

// vLLM's silu_and_mul / gelu_and_mul / gelu_tanh_and_mul on packed rows: x [rows x 2*inner],
// y [rows x inner].
void silu_and_mul(int64_t rows, int64_t inner, const float* x, float* y);
void silu_and_mul(int64_t rows, int64_t inner, const bf16* x, bf16* y);
void gelu_and_mul(int64_t rows, int64_t inner, const float* x, float* y, bool tanh_approximation = false);
void gelu_and_mul(int64_t rows, int64_t inner, const bf16* x, bf16* y, bool tanh_approximation = false);

struct SoftmaxDesc {
    int64_t rows = 0;   // >= 0 (0 is a no-op)
    int64_t cols = 0;   // >= 1
    DType x_dtype = DType::f32;  // f32 or bf16
    DType y_dtype = DType::f32;  // f32 or bf16
    int64_t ld_x = 0, ld_y = 0;  // row strides in elements, 0 = cols
    float scale = 1.0f;          // finite, > 0
    bool causal = false;
    int64_t causal_offset = 0;   // causal only: row r is the query at position r + causal_offset; |offset| <= 2^60
    // Additive mask (f32, finite or -inf): t_j = scale * x_j + mask[(r % mask_rows) * ld_mask + j]
    // (mask_rows 0 = rows; e.g. rows = heads x queries head-major with mask_rows = queries: one
    // [queries x cols] mask broadcast over the heads). Runs the reference kernel.
    bool has_mask = false;
    int64_t ld_mask = 0;         // >= cols (0 = cols)
    int64_t mask_rows = 0;       // >= 0 (0 = rows)
};

struct SoftmaxArgs {
    const void* x = nullptr;  // [rows x ld_x]
    void* y = nullptr;        // [rows x ld_y]
    const float* mask = nullptr;         // iff has_mask: [mask_rows x ld_mask]
    const int64_t* valid_lens = nullptr;  // optional [rows]: row r uses columns [0, valid_lens[r])
                                          // (padding; with causal: the shorter), in [0, cols]; the
                                          // other columns are 0; a row with none visible is all 0
};

class SoftmaxPlan {
public:
    explicit SoftmaxPlan(const SoftmaxDesc& desc);
    void run(const SoftmaxArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const SoftmaxDesc& desc() const { return desc_; }  // strides resolved (no 0 left)

private:
    SoftmaxDesc desc_;
    std::shared_ptr<const detail::SoftmaxKernel> kernel_;
    const char* impl_name_ = "";
};

void softmax(const SoftmaxDesc& desc, const SoftmaxArgs& args);

// Packed rows, no mask: y = softmax(scale * x) over each row of cols.
void softmax(int64_t rows, int64_t cols, const float* x, float* y, float scale = 1.0f);
void softmax(int64_t rows, int64_t cols, const bf16* x, bf16* y, float scale = 1.0f);

}  // namespace xk
