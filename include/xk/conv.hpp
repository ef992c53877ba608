// xkernels — 2-D convolution (forward, inference) with fused bias, residual add and activation.
//
// Shapes (PyTorch naming; every size is int64_t):
//   src      N x C  x H  x W     activations, layout ConvLayout::nchw or ::nhwc (dense, packed)
//   weights  OC x C/groups x KH x KW, layout ConvWeightLayout::oihw or ::ohwi (dense, packed)
//   bias     OC                  always f32 (optional)
//   dst      N x OC x OH x OW    same layout as src
//   residual N x OC x OH x OW    same layout and dtype as dst (optional)
// with OH = conv_output_size(H, KH, stride_h, pad_top, pad_bottom, dilation_h) and likewise OW.
//
// Layouts: any activation layout may be combined with any weight layout. The natural pairings are
// nchw + oihw (PyTorch's default) and nhwc + ohwi (PyTorch channels_last; oneDNN's "acdb" for
// activations and weights); optimised implementations target those and the reference covers all.
//
// Groups: channels are split into `groups` equal groups; output channel o belongs to group
// g = o / (OC/groups) and reads input channels [g*C/groups, (g+1)*C/groups). groups == C == OC is
// a depthwise convolution (use OC = k*C for a channel multiplier k).
//
// Dilation follows PyTorch: 1 is a dense kernel (oneDNN's "0"); tap (kh, kw) reads input row
// oh*stride_h - pad_top + kh*dilation_h, column ow*stride_w - pad_left + kw*dilation_w; taps
// outside the input read zero.
//
// Epilogue (order fixed; matches oneDNN's post-ops [sum, eltwise] or [eltwise, sum]):
//   acc  = sum over (ic, kh, kw) of src * weights           fp32 accumulation
//   v    = acc + bias[oc]                                   if with_bias
//   v    = v + residual                                     if residual == add_before_activation
//   v    = act(v)                                           xk::Activation (none = identity)
//   v    = v + residual                                     if residual == add_after_activation
//   dst  = v converted to dst_dtype (round to nearest even for bf16)
// add_before_activation is the ResNet block: relu(conv(x) + b + shortcut). `residual` may be the
// same pointer as `dst` (oneDNN's in-place sum: dst holds the residual on entry); any other
// overlap of dst with an input is an error.
//
// Data types (src, weights, dst): f32/f32/f32, bf16/bf16/bf16, bf16/bf16/f32. bf16 inputs are
// converted exactly to f32; accumulation and the epilogue are f32. Others: Status::unsupported.
//
// Pointers must be aligned to their element size. Errors are xk::Error naming the argument.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "xk/types.hpp"

namespace xk {

enum class ConvLayout : int {
    nchw = 0,  // [N][C][H][W]
    nhwc = 1,  // [N][H][W][C]  channels-last
};

enum class ConvWeightLayout : int {
    oihw = 0,  // [OC][C/groups][KH][KW]
    ohwi = 1,  // [OC][KH][KW][C/groups]  channels-last weights
};

enum class ConvResidual : int {
    none = 0,
    add_before_activation = 1,  // dst = act(conv + bias + residual)
    add_after_activation = 2,   // dst = act(conv + bias) + residual
};

const char* conv_layout_name(ConvLayout l) noexcept;
const char* conv_weight_layout_name(ConvWeightLayout l) noexcept;
const char* conv_residual_name(ConvResidual r) noexcept;

// Output extent of one spatial dimension:
//   (input + pad_begin + pad_end - dilation*(kernel - 1) - 1) / stride + 1
// Throws xk::Error(invalid_argument) naming the argument when input, kernel, stride or dilation
// is < 1, a padding is < 0, the sum overflows, or the output would be < 1 (kernel larger than the
// padded input).
int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad_begin, int64_t pad_end,
                         int64_t dilation = 1);

struct ConvDesc {
    int64_t n = 1, c = 1, h = 1, w = 1;  // src
    int64_t oc = 1;                      // output channels
    int64_t kh = 1, kw = 1;              // kernel
    int64_t stride_h = 1, stride_w = 1;
    int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
    int64_t dilation_h = 1, dilation_w = 1;  // 1 = dense
    int64_t groups = 1;
    ConvLayout layout = ConvLayout::nchw;
    ConvWeightLayout weight_layout = ConvWeightLayout::oihw;
    DType src_dtype = DType::f32, weight_dtype = DType::f32, dst_dtype = DType::f32;
    bool with_bias = false;
    ConvResidual residual = ConvResidual::none;
    Activation activation = Activation::none;

    // Chainable setters for the common cases.
    ConvDesc& set_stride(int64_t sh, int64_t sw) { stride_h = sh; stride_w = sw; return *this; }
    ConvDesc& set_padding(int64_t ph, int64_t pw) { pad_top = pad_bottom = ph; pad_left = pad_right = pw; return *this; }
    ConvDesc& set_padding(int64_t top, int64_t bottom, int64_t left, int64_t right) {
        pad_top = top; pad_bottom = bottom; pad_left = left; pad_right = right; return *this;
    }
    ConvDesc& set_dilation(int64_t dh, int64_t dw) { dilation_h = dh; dilation_w = dw; return *this; }

    // Output extents (validate the spatial arguments; throw like conv_output_size).
    int64_t oh() const;
    int64_t ow() const;
    // Element counts of each tensor (validate the whole descriptor first).
    int64_t src_elements() const;
    int64_t weight_elements() const;
    int64_t dst_elements() const;
};

struct ConvArgs {
    const void* src = nullptr;       // src_dtype[N*C*H*W]
    const void* weights = nullptr;   // weight_dtype[OC*(C/groups)*KH*KW]
    const float* bias = nullptr;     // f32[OC]; required iff with_bias
    void* dst = nullptr;             // dst_dtype[N*OC*OH*OW]
    const void* residual = nullptr;  // dst_dtype[N*OC*OH*OW]; required iff residual != none; may == dst
};

namespace detail {
struct ConvPacked;
}

// Weights repacked once into the layout a plan's implementation prefers (ConvPlan::pack_weights;
// oneDNN's blocked layout for "onednn:conv"), reused across calls. Immutable, opaque; copies share
// the data. Accepted by plans whose implementation uses the same packed layout (same weight
// shape; typically any batch size / spatial size / epilogue), rejected with an xk::Error naming
// `packed_weights` by any other plan.
class ConvPackedWeights {
public:
    ConvPackedWeights() = default;
    bool empty() const noexcept { return !data_; }
    std::string layout() const;  // "" when empty
    size_t size_bytes() const noexcept;

private:
    friend class ConvPlan;
    std::shared_ptr<const detail::ConvPacked> data_;
};

// Validates the descriptor, selects the best implementation for this machine and ISA cap and
// creates its kernel once (through the process-wide kernel cache). Immutable; run() may be
// called concurrently from several threads.
class ConvPlan {
public:
    explicit ConvPlan(const ConvDesc& desc);  // copies share the kernel

    // Validates the pointers (null, alignment, overlap) and runs the convolution.
    void run(const ConvArgs& args) const;
    // Same with the weights taken from `packed_weights` (args.weights is not read and may be null).
    void run(const ConvArgs& args, const ConvPackedWeights& packed_weights) const;
    // Repacks weights (weight_dtype, weight_layout of the descriptor) once for run(args, packed).
    ConvPackedWeights pack_weights(const void* weights) const;

    const ConvDesc& desc() const;
    int64_t oh() const;
    int64_t ow() const;
    const char* impl_name() const;  // e.g. "onednn:conv", "gemm:conv", "ref:scalar"
    std::string backend_info() const;  // e.g. oneDNN's implementation "brg:avx512_core"; may be ""

private:
    struct State;
    std::shared_ptr<const State> s_;
};

// One-shot: validate, select (kernel cached per descriptor), run.
void conv2d(const ConvDesc& desc, const ConvArgs& args);

// Folds an inference BatchNorm that follows the convolution into its weights and bias:
//   scale[o]   = gamma[o] / sqrt(var[o] + eps)
//   w'[o, ...] = w[o, ...] * scale[o]
//   b'[o]      = (b[o] - mean[o]) * scale[o] + beta[o]      (b = 0 when bias is null)
// so conv(x, w', b') == bn(conv(x, w, b)) up to rounding. desc gives the weight shape and layout
// (weight_dtype must be f32; fold in f32, then convert). out_weights / out_bias may equal weights
// / bias (in place). Errors: null pointers, eps < 0 or NaN, var[o] + eps <= 0.
void conv_fold_batchnorm(const ConvDesc& desc, const float* weights, const float* bias, const float* gamma,
                         const float* beta, const float* mean, const float* var, float eps, float* out_weights,
                         float* out_bias);

}  // namespace xk

namespace xk {

// ---- int8 convolution (static quantization of CNNs) ------------------------------------------
// NHWC activations (u8 or s8, one scale and zero point per tensor), OHWI s8 weights (symmetric,
// one scale per output channel). Geometry (stride, padding, dilation) as ConvDesc; groups as
// ConvDesc (output channel o reads input channels [g*C/groups, (g+1)*C/groups), g =
// o / (OC/groups); weights [OC][KH][KW][C/groups]; depthwise: groups == C == OC, or OC = k*C).
//   acc[n,oy,ox,o] = sum over (ky, kx, ic of o's group) of (src - src_zero_point) * w   (exact
//                    int32; a tap in the padding reads src_zero_point, i.e. the real value 0)
//   x = (src_scale * weight_scales[o]) * float(acc) + bias[o]   (bias f32, optional)
//   x = act(x)
//   dst = x (f32), or, for u8 / s8 dst,
//         clamp(nearbyint(x / dst_scale) + dst_zero_point) to the type's range.
// K = KH*KW*C/groups must be <= 33025 (the int32 sum cannot overflow). dst: u8, s8 or f32.
// Two implementations, routed per descriptor (docs/conv.md):
//   "gemm:qconv"   xk's int8 GEMM (u8|s8 x s8, requantizing epilogue) on the NHWC rows, one per
//                  group: directly for 1x1 / stride 1 / no padding, else over im2col row blocks
//                  padded with src_zero_point. Its results are those of the formula above (f32
//                  epilogue). Grouped / depthwise shapes run here only where oneDNN cannot (a GEMM
//                  of OC/groups columns is slow for depthwise).
//   "onednn:qconv" oneDNN's int8 convolution primitive (AVX-512 VNNI / AMX machines): exact int32
//                  sums, but oneDNN adds the bias before its output scale and rounds after adding
//                  the zero point, so a u8 / s8 dst may differ by 1 from the formula (f32 dst: by a
//                  few ulps of max(|scale * acc|, |bias|)). The quantization parameters are baked
//                  into its primitive (oneDNN 2.6 has no runtime output scales): the first call
//                  with new scales / zero points creates one (kept, 8 per plan).
// The route is timed once per (descriptor, ISA cap, thread count) in the process (the faster,
// oneDNN only when >= 5% faster); XK_QCONV_IMPL=gemm or =onednn forces one (where supported).
// XK_VERBOSE=1 logs the timing and each plan's route, QConvPlan::impl_name() / backend_info()
// name them.
struct QConvDesc {
    int64_t n = 1, c = 1, h = 1, w = 1;
    int64_t oc = 1;
    int64_t kh = 1, kw = 1;
    int64_t stride_h = 1, stride_w = 1;
    int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
    int64_t dilation_h = 1, dilation_w = 1;
    int64_t groups = 1;            // divides C and OC; depthwise: groups == C
    DType src_dtype = DType::u8;   // u8 or s8
    DType dst_dtype = DType::f32;  // u8, s8 or f32
    bool with_bias = false;
    Activation activation = Activation::none;
};

struct QConvArgs {
    const void* src = nullptr;              // src_dtype[N*H*W*C]
    const int8_t* weights = nullptr;        // s8[OC*KH*KW*(C/groups)]
    const float* bias = nullptr;            // f32[OC] iff with_bias
    void* dst = nullptr;                    // dst_dtype[N*OH*OW*OC]
    float src_scale = 1.0f;                 // finite, > 0
    int32_t src_zero_point = 0;             // in src_dtype's range
    const float* weight_scales = nullptr;   // f32[OC], finite, > 0
    float dst_scale = 1.0f;                 // u8 / s8 dst: finite, > 0
    int32_t dst_zero_point = 0;             // u8 / s8 dst: in dst_dtype's range
};

namespace detail {
struct QConvPlanState;
struct QConvPackedData;
}  // namespace detail

// s8 weights packed once by QConvPlan::pack_weights for plans of the same descriptor and
// implementation (the GEMM's packed B of each row block, or oneDNN's blocked layout plus a plain
// copy); opaque, immutable, copies share the data.
class QConvPackedWeights {
public:
    bool empty() const noexcept { return !data_; }

private:
    friend class QConvPlan;
    std::shared_ptr<const detail::QConvPackedData> data_;
};

// Validates the descriptor and creates the kernel once (GEMM plans of the row blocks). Immutable;
// run() may be called concurrently.
class QConvPlan {
public:
    explicit QConvPlan(const QConvDesc& desc);
    void run(const QConvArgs& args) const;  // packs the weights per call
    // args.weights is not read (may be null); packed_weights from a plan of another descriptor is
    // rejected naming `packed_weights`.
    void run(const QConvArgs& args, const QConvPackedWeights& packed_weights) const;
    QConvPackedWeights pack_weights(const int8_t* weights) const;
    const char* impl_name() const;      // "onednn:qconv", "gemm:qconv" or "ref:scalar"
    std::string backend_info() const;   // e.g. "onednn:brgconv:avx512_core_vnni"; "" for ours

private:
    std::shared_ptr<const detail::QConvPlanState> s_;
};

// One-shot: validates, routes like QConvPlan (same timed decision), runs. "ref:scalar" below avx2.
void qconv2d(const QConvDesc& desc, const QConvArgs& args);
const char* qconv2d_impl_name(const QConvDesc& desc);

}  // namespace xk
