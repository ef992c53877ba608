// xkernels — RMSNorm and LayerNorm over the last dimension, with the optional fused residual add
// of pre-norm transformer blocks.
//
// Shapes and layouts. x, y, residual and residual_out are [rows x hidden] row-major matrices,
// each with its own row stride in elements (0 = packed, i.e. hidden). weight and bias are
// [hidden] vectors.
//
// Math (all arithmetic in fp32 or better; bf16 values are widened exactly, and each output is
// rounded to its dtype once, round-to-nearest-even):
//   h      = x                                 (fused_residual = false)
//   h      = round_residual(x + residual)      (fused_residual = true: the sum, in fp32, rounded
//   residual_out = h                            to residual_dtype; the norm sees that rounded h,
//                                               as an unfused x + residual in that dtype would)
//   rms_norm:   y = h * rstd * weight,            rstd = 1 / sqrt(mean(h^2) + eps)
//   layer_norm: y = (h - mean) * rstd * weight + bias,
//                                                 rstd = 1 / sqrt(mean((h - mean)^2) + eps)
// The weight factor is 1 when has_weight is false, the bias 0 when has_bias is false. Row
// statistics (mean, mean of squares) are accumulated in at least fp32 precision; the reference
// implementation accumulates them in double. y is rounded once, unlike HF's LlamaRMSNorm, which
// rounds h*rstd to the input dtype before multiplying by a bf16 weight (a difference of at most
// one bf16 ulp).
// Range: the JIT LayerNorm with a bias forms (h - mean) * weight before the rstd, so where that
// product leaves the fp32 range y loses it: +-inf above 3.4e38 although the exact y may be
// finite, and digits (down to 0) below FLT_MIN ~ 1.2e-38 although (h - mean) rstd weight may be
// normal (the scalar reference scales by rstd first).
// Rounding: bf16 outputs of the JIT kernels (every op): to nearest, but an exact tie may go away from zero
// (the AVX2 / AVX-512 paths' cheaper rounding), and at avx512_bf16 results below FLT_MIN are
// flushed to +-0 (VCVTNEPS2BF16); the scalar reference (XK_MAX_ISA=scalar) rounds ties to even
// and keeps subnormals. Found by the fuzz targets; differences are one bf16 ulp on exact ties.
//
// Data types: x / y / residual (in and out) / weight+bias each f32 or bf16, independently
// (x_dtype, y_dtype, residual_dtype, weight_dtype). HF checkpoints keep the weight in the model
// dtype: for a bf16 model use bf16 everywhere; fp32 weights with bf16 activations work as well.
//
// Aliasing: y may be exactly x (same pointer, stride and dtype: in place), residual_out may be
// exactly residual (vLLM's fused_add_rms_norm updates both in place). Any other overlap between
// two of x, residual, residual_out, y, or of an output with weight / bias, is an xk::Error; so is
// a partial overlap of y with x. Disjoint interleaved layouts (e.g. rows of x and y alternating
// in one buffer) are fine.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "xk/types.hpp"

namespace xk {

enum class NormKind : int { rms_norm = 0, layer_norm = 1 };

constexpr const char* norm_kind_name(NormKind k) noexcept {
    switch (k) {
        case NormKind::rms_norm: return "rms_norm";
        case NormKind::layer_norm: return "layer_norm";
    }
    return "?";
}

struct NormDesc {
    NormKind kind = NormKind::rms_norm;
    int64_t rows = 0;    // >= 0 (0 is a no-op)
    int64_t hidden = 0;  // >= 1: the normalized (last) dimension
    DType x_dtype = DType::f32;         // f32 or bf16
    DType y_dtype = DType::f32;         // f32 or bf16
    DType residual_dtype = DType::f32;  // f32 or bf16: residual and residual_out (fused_residual)
    DType weight_dtype = DType::f32;    // f32 or bf16: weight and bias
    int64_t ld_x = 0, ld_y = 0, ld_residual = 0, ld_residual_out = 0;  // row strides, 0 = hidden
    float eps = 1e-5f;                  // finite, >= 0, added to the variance
    bool has_weight = true;             // multiply by weight (gamma)
    bool has_bias = false;              // add bias (beta): LayerNorm usually, allowed for RMSNorm
    bool fused_residual = false;        // h = x + residual, residual_out = h, y = norm(h)
};

struct NormArgs {
    const void* x = nullptr;       // [rows x ld_x]
    void* y = nullptr;             // [rows x ld_y]
    const void* weight = nullptr;  // [hidden]; required iff has_weight
    const void* bias = nullptr;    // [hidden]; required iff has_bias
    const void* residual = nullptr;  // [rows x ld_residual]; required iff fused_residual
    void* residual_out = nullptr;    // [rows x ld_residual_out]; required iff fused_residual
};

namespace detail {
struct NormKernel;
}

// Validates the descriptor and selects the implementation once; run() validates the pointers and
// runs, split over rows by the library's thread pool. Immutable, safe to run concurrently.
class NormPlan {
public:
    explicit NormPlan(const NormDesc& desc);
    void run(const NormArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const NormDesc& desc() const { return desc_; }  // strides resolved (no 0 left)

private:
    NormDesc desc_;
    std::shared_ptr<const detail::NormKernel> kernel_;
    const char* impl_name_ = "";
};

// One-shot: validates, fetches the kernel through the kernel cache, runs.
void norm(const NormDesc& desc, const NormArgs& args);

// Convenience forms on packed rows. A null weight / bias means none (like torch's None).
void rms_norm(int64_t rows, int64_t hidden, const float* x, const float* weight, float eps, float* y);
void rms_norm(int64_t rows, int64_t hidden, const bf16* x, const bf16* weight, float eps, bf16* y);
void layer_norm(int64_t rows, int64_t hidden, const float* x, const float* weight, const float* bias, float eps,
                float* y);
void layer_norm(int64_t rows, int64_t hidden, const bf16* x, const bf16* weight, const bf16* bias, float eps,
                bf16* y);
// vLLM's fused_add_rms_norm, in place on both buffers: residual += x; x = rms_norm(residual) * weight.
void fused_add_rms_norm(int64_t rows, int64_t hidden, float* x, float* residual, const float* weight, float eps);
void fused_add_rms_norm(int64_t rows, int64_t hidden, bf16* x, bf16* residual, const bf16* weight, float eps);

}  // namespace xk
