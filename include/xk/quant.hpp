// xkernels — int8 quantization and dequantization of [rows x cols] matrices: per tensor, per
// channel (per row or per column), and dynamic per token (per row, parameters computed from each
// row's range: IPEX's dynamic quantization / SmoothQuant's activation path).
//
// Quantize ({f32, bf16} -> {u8, s8}), PyTorch's quantize_per_tensor / quantize_per_channel
// formula, all in fp32:
//   v = x                       (x * smooth[col] when desc.smooth: SmoothQuant, smooth = 1/s)
//   q = saturate(zero_point + round_half_even(v * (1.0f / scale)))
// The reciprocal 1.0f/scale is an fp32 division and the product an fp32 multiply, as in PyTorch
// and IPEX (oneDNN v3 divides instead: at exact ties the two may differ by one step).
// round_half_even is round to nearest, ties to even (std::nearbyint in the default mode:
// 2.5 -> 2, 3.5 -> 4, -2.5 -> -2), independent of the floating-point environment. saturate clamps
// to the dtype range: u8 [0, 255], s8 [-128, 127]; +-inf saturate, NaN quantizes to zero_point.
//
// Dequantize ({u8, s8} -> {f32, bf16}): x = float(q - zero_point) * scale, in fp32 (rounded once
// more to bf16 for a bf16 output).
//
// Zero points. symmetric = false: zero points come from QuantArgs::zero_points (static) or are
// computed and written to zero_points_out (dynamic). symmetric = true: the zero point is implied,
// 0 for s8 and 128 for u8; no zero point array is read (zero_points must be null; for dynamic,
// zero_points_out is optional and receives the implied value).
//
// Scales: positive, finite, with a finite fp32 reciprocal (checked per channel before any work).
#pragma once
#include <cstdint>
#include <memory>

#include "xk/types.hpp"

namespace xk {

enum class QuantGranularity : int {
    per_tensor = 0,         // one scale (and zero point)
    per_channel = 1,        // one per column (axis = 1) or per row (axis = 0)
    per_token_dynamic = 2,  // quantize only: one per row, from the min / max of the row's finite values
};

constexpr const char* quant_granularity_name(QuantGranularity g) noexcept {
    switch (g) {
        case QuantGranularity::per_tensor: return "per_tensor";
        case QuantGranularity::per_channel: return "per_channel";
        case QuantGranularity::per_token_dynamic: return "per_token_dynamic";
    }
    return "?";
}

struct QuantParams {
    float scale = 1.0f;
    int32_t zero_point = 0;
};

// Quantization parameters covering [min, max] for qtype (u8 or s8), as PyTorch's observers /
// choose_qparams compute them (min, max finite, min <= max):
//   asymmetric: the range is widened to include 0 (lo = min(min, 0), hi = max(max, 0));
//               scale = (hi - lo) / (qmax - qmin); zero_point = clamp(round_half_even(qmin - lo /
//               scale), qmin, qmax), so 0 is exactly representable.
//   symmetric:  scale = max(|min|, |max|) / 127; zero_point = 0 (s8) or 128 (u8).
// scale is computed in double and rounded to fp32; a scale that is 0 in fp32 or whose reciprocal
// overflows (an all-zero or denormal range) becomes 1.0. |dequantize(quantize(x)) - x| <= scale/2
// (up to fp32 rounding) for every x in [min, max].
QuantParams compute_quant_params(float min, float max, DType qtype, bool symmetric);

struct QuantDesc {
    int64_t rows = 0, cols = 0;    // >= 0 (an empty matrix is a no-op)
    DType src_dtype = DType::f32;  // quantize: f32 / bf16 -> u8 / s8; dequantize: u8 / s8 -> f32 / bf16
    DType dst_dtype = DType::u8;
    int64_t ld_src = 0, ld_dst = 0;  // row strides in elements, 0 = cols
    QuantGranularity granularity = QuantGranularity::per_tensor;
    int axis = 1;            // per_channel: 1 = one (scale, zero point) per column, 0 = per row
    bool symmetric = false;  // zero point implied (s8: 0, u8: 128) instead of read / computed
    bool smooth = false;     // quantize only: multiply x by smooth[col] first (SmoothQuant)
};

struct QuantArgs {
    const void* src = nullptr;             // [rows x ld_src]
    void* dst = nullptr;                   // [rows x ld_dst]; must not overlap src
    const float* scales = nullptr;         // static: [1] per_tensor, [cols] or [rows] per_channel
    const int32_t* zero_points = nullptr;  // static asymmetric: as scales; null when symmetric
    float* scales_out = nullptr;           // per_token_dynamic: [rows]
    int32_t* zero_points_out = nullptr;    // per_token_dynamic: [rows]; optional when symmetric
    const float* smooth = nullptr;         // [cols] when desc.smooth, else null
};

namespace detail {
struct QuantKernel;
}

// Validates the descriptor and selects the implementation once; run() validates pointers, scales
// and zero points (before any work) and runs in parallel. per_token_dynamic: each row's parameters
// come from the min / max of its finite values v = x (* smooth) (a row without one: those of
// [0, 0]); NaN / +-inf values quantize as in the static modes (NaN -> zero point, +-inf
// saturate), no error. Immutable, safe to run concurrently.
class QuantPlan {
public:
    explicit QuantPlan(const QuantDesc& desc);
    void run(const QuantArgs& args) const;
    const char* impl_name() const { return impl_name_; }
    const QuantDesc& desc() const { return desc_; }  // strides resolved
    bool is_quantize() const;                        // false: dequantize

private:
    QuantDesc desc_;
    std::shared_ptr<const detail::QuantKernel> kernel_;
    const char* impl_name_ = "";
};

// One-shot forms of QuantPlan: quantize() needs a float -> int desc, dequantize() int -> float.
void quantize(const QuantDesc& desc, const QuantArgs& args);
void dequantize(const QuantDesc& desc, const QuantArgs& args);

// Per tensor, n contiguous elements, explicit zero point (asymmetric form).
void quantize_per_tensor(int64_t n, const float* x, float scale, int32_t zero_point, uint8_t* q);
void quantize_per_tensor(int64_t n, const float* x, float scale, int32_t zero_point, int8_t* q);
void quantize_per_tensor(int64_t n, const bf16* x, float scale, int32_t zero_point, uint8_t* q);
void quantize_per_tensor(int64_t n, const bf16* x, float scale, int32_t zero_point, int8_t* q);
void dequantize_per_tensor(int64_t n, const uint8_t* q, float scale, int32_t zero_point, float* x);
void dequantize_per_tensor(int64_t n, const int8_t* q, float scale, int32_t zero_point, float* x);
void dequantize_per_tensor(int64_t n, const uint8_t* q, float scale, int32_t zero_point, bf16* x);
void dequantize_per_tensor(int64_t n, const int8_t* q, float scale, int32_t zero_point, bf16* x);

// Dynamic per token on packed rows: scales[r] / zero_points[r] receive each row's parameters
// (compute_quant_params of the min / max of the row's finite values; none: [0, 0]); NaN -> zero
// point, +-inf saturate. zero_points may be null when symmetric.
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const float* x, uint8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric = false);
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const float* x, int8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric = false);
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const bf16* x, uint8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric = false);
void quantize_dynamic_per_token(int64_t rows, int64_t cols, const bf16* x, int8_t* q, float* scales,
                                int32_t* zero_points, bool symmetric = false);

}  // namespace xk
