// xkernels — int8 Linear layers: Y = X W^T + bias (then activation, residual) with int8 weights
// quantized once, and SmoothQuant's calibration / smoothing recipe.
//
// QLinearPlan holds the layer: the weights W [N x K] (PyTorch's Linear.weight: out_features x
// in_features), quantized when the plan is made to s8, symmetric, one scale per output channel
//   w_scale[n] = max_k |W[n,k]| / 127   (compute_quant_params(-amax, amax, s8, symmetric); 1.0 for an all-zero row)
//   Wq[n,k]    = saturate(round_half_even(W[n,k] * (1.0f / w_scale[n])))
// (or given already quantized with their scales), packed once into the int8 GEMM's layout. One
// plan serves every batch size M: run(M, args) computes, per row m of X and output channel n,
//
//   dynamic_per_token  (x f32 | bf16): each row quantized inside the call, s8 symmetric:
//                      x_scale[m] = max_k |v[m,k]| / 127,  q[m,k] = saturate(round_half_even(v * (1/x_scale[m])))
//                      with v = x (or x[m,k] * smooth[k] with desc.smooth: SmoothQuant's 1/s),
//                      acc = sum_k q[m,k] * Wq[n,k]  (exact, s32),
//                      y   = (float(acc) * w_scale[n]) * x_scale[m]
//   dynamic_per_tensor (x f32 | bf16): one u8 asymmetric (scale, zero point) over all of X (the
//                      PyTorch observer formula on its min / max), computed inside the call:
//                      y = (x_scale * w_scale[n]) * float(sum_k (q[m,k] - x_zero_point) * Wq[n,k])
//   static_per_tensor  (x u8 | s8, quantized by the caller with args.x_scale / x_zero_point):
//                      y as for dynamic_per_tensor with the given parameters
//   then               y = y + bias[n]; y = act(y); y = y + residual[m,n]   (desc.epilogue)
//   and stored as      f32 or bf16 (rounded to nearest even); static also u8 / s8, requantized:
//                      saturate(round_half_even(y * (1.0f / args.y_scale)) + y_zero_point), NaN
//                      -> the type's minimum (the int8 GEMM's requantization, include/xk/gemm.hpp).
//
// The quantize step is xk::quantize's (include/xk/quant.hpp) bit for bit, the integer products are
// the int8 GEMM's (exact), the dequantization is one fp32 product per scale in the order above.
// A NaN or +-inf in x (dynamic) is an xk::Error naming it, raised before y is written. The
// quantized activations live in a per-thread scratch buffer of the calling thread (grown on first
// use, reused after: no allocation per call); the GEMM threads itself (xk::set_num_threads).
//
// Usage (dynamic int8 Linear of a BERT FFN):
//   xk::QLinearDesc d;  d.N = 3072; d.K = 768;  d.epilogue.bias = true;
//   d.epilogue.act = xk::Activation::gelu_erf;
//   xk::QLinearPlan fc1(d, {xk::DType::f32, w});      // quantizes and packs w once
//   fc1.run(tokens, {x, y, bias});                      // any number of tokens, from any thread
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xk/gemm.hpp"
#include "xk/types.hpp"

namespace xk {

enum class QLinearQuant : int {
    dynamic_per_token = 0,   // x f32 | bf16 -> s8 symmetric per row, inside the call
    dynamic_per_tensor = 1,  // x f32 | bf16 -> u8 asymmetric over all of X, inside the call
    static_per_tensor = 2,   // x already u8 | s8 with args.x_scale / x_zero_point
};

constexpr const char* qlinear_quant_name(QLinearQuant q) noexcept {
    switch (q) {
        case QLinearQuant::dynamic_per_token: return "dynamic_per_token";
        case QLinearQuant::dynamic_per_tensor: return "dynamic_per_tensor";
        case QLinearQuant::static_per_tensor: return "static_per_tensor";
    }
    return "?";
}

struct QLinearDesc {
    int64_t N = 0, K = 0;  // out_features, in_features (>= 0)
    QLinearQuant quant = QLinearQuant::dynamic_per_token;
    DType x_type = DType::f32;  // dynamic: f32 | bf16; static: u8 | s8
    DType y_type = DType::f32;  // f32 | bf16; static also u8 | s8 (requantized)
    int64_t ldx = 0, ldy = 0;   // row strides in elements, 0 = K / N
    bool smooth = false;        // dynamic: multiply x[m,k] by args.smooth[k] before quantizing
    GemmEpilogue epilogue;      // bias (f32[N]), activation, residual
    DType residual_type = DType::f32;  // f32 | bf16
    int64_t ld_residual = 0;           // 0 = N
};

// The weights: [N x K] row-major, rows ld apart (0 = K).
struct QLinearWeight {
    DType type = DType::f32;       // f32 | bf16 (quantized by the plan) or s8 (already quantized)
    const void* data = nullptr;    // [N x ld]; finite values (checked)
    int64_t ld = 0;
    const float* scales = nullptr;  // s8 only: [N] per-output-channel scales, finite and > 0
};

struct QLinearArgs {
    const void* x = nullptr;         // [M x ldx] of x_type
    void* y = nullptr;               // [M x ldy] of y_type; must not overlap x, bias, residual, smooth
    const float* bias = nullptr;     // [N] when epilogue.bias
    const void* residual = nullptr;  // [M x ld_residual] when epilogue.residual
    const float* smooth = nullptr;   // [K] when desc.smooth (finite; SmoothQuant's 1/s_k)
    float x_scale = 1.0f;            // static: finite, > 0
    int32_t x_zero_point = 0;        // static: in x_type's range
    float y_scale = 1.0f;            // u8 | s8 y: finite, > 0
    int32_t y_zero_point = 0;        // u8 | s8 y: in y_type's range
};

namespace detail {
struct QLinearState;
}

// A validated int8 Linear with its weights quantized and packed (the constructor does all of it
// once: checks desc and weight, quantizes, packs). Immutable; run() is const and safe to call from
// several threads at once (on different y).
class QLinearPlan {
public:
    QLinearPlan(const QLinearDesc& desc, const QLinearWeight& weight);
    ~QLinearPlan();
    QLinearPlan(const QLinearPlan&) = default;
    QLinearPlan& operator=(const QLinearPlan&) = default;
    QLinearPlan(QLinearPlan&&) noexcept = default;
    QLinearPlan& operator=(QLinearPlan&&) noexcept = default;

    // M rows of x -> M rows of y (M >= 0; 0 does nothing). Validates every pointer and scalar
    // (and, dynamic, the finiteness of x) before writing anything.
    void run(int64_t M, const QLinearArgs& args) const;

    const QLinearDesc& desc() const noexcept { return desc_; }  // strides resolved
    // The weights' per-output-channel scales [N] (computed or given).
    const float* weight_scales() const noexcept;
    // The int8 GEMM implementation the weights were packed for, e.g. "jit:avx512_vnni:int8".
    const char* impl_name() const noexcept;
    // Bytes held for the packed weights (and their column sums).
    size_t weight_bytes() const noexcept;

private:
    QLinearDesc desc_;
    std::shared_ptr<const detail::QLinearState> st_;
};

// ---- SmoothQuant (Xiao et al. 2023) ------------------------------------------------------------
// Recipe: collect each input channel's activation abs-max over calibration batches, compute
//   s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)   (max|W_j| over every Linear that reads X)
// and fold it in: W[:, j] *= s_j (each such Linear), and either the preceding LayerNorm / RMSNorm
// weight (and bias) gamma_j /= s_j, or, with no norm to fold into, QLinearDesc::smooth with
// args.smooth[j] = 1 / s_j. X diag(1/s) (diag(s) W^T) = X W^T, with the activation outliers moved
// into the weights, which quantize per channel.

// Per-input-channel abs-max of activations over every observe() call.
class SmoothQuantCalibrator {
public:
    explicit SmoothQuantCalibrator(int64_t K);  // K >= 0 channels
    // rows x K activations, rows ld apart (0 = K). NaN values are ignored; +-inf are an error
    // naming the first one (nothing recorded from that call).
    void observe(int64_t rows, const float* x, int64_t ld = 0);
    void observe(int64_t rows, const bf16* x, int64_t ld = 0);
    const std::vector<float>& absmax() const noexcept { return absmax_; }  // [K], 0 before any data
    int64_t K() const noexcept { return static_cast<int64_t>(absmax_.size()); }
    int64_t batches() const noexcept { return batches_; }
    void reset();

private:
    std::vector<float> absmax_;
    int64_t batches_ = 0;
};

// out[j] = max(out[j], max_n |W[n, j]|) for W [N x K] (rows ld apart, 0 = K): call it for each
// Linear that reads the same X (Q, K and V of one LayerNorm) on one zero-initialised out[K].
void smoothquant_weight_absmax(int64_t N, int64_t K, const float* W, int64_t ld, float* out);

// s[j] = act_absmax[j]^alpha / weight_absmax[j]^(1 - alpha) computed in double, alpha in [0, 1];
// a channel whose act or weight abs-max is 0 gets s = 1; s is clamped to [1e-5, 1e5].
// act_absmax / weight_absmax finite and >= 0 (checked, naming the first bad one).
std::vector<float> smoothquant_factors(int64_t K, const float* act_absmax, const float* weight_absmax,
                                       float alpha = 0.5f);

// W[n, j] *= s[j] for W [N x K] (rows ld apart, 0 = K), in place.
void smoothquant_fold_weight(int64_t N, int64_t K, float* W, int64_t ld, const float* s);
// gamma[j] /= s[j] and, when beta is not null, beta[j] /= s[j] (LayerNorm / RMSNorm weight, bias).
void smoothquant_fold_norm(int64_t K, float* gamma, float* beta, const float* s);
// 1 / s[j], for QLinearDesc::smooth when no norm takes the factors.
std::vector<float> smoothquant_inverse(int64_t K, const float* s);

}  // namespace xk
