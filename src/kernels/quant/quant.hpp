// Internal interface of the quant family, shared by its implementations and the tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/quant.hpp"

namespace xk::detail {

// What a kernel is generated for: everything in QuantDesc except the runtime values (shape, row
// strides).
struct QuantKernelDesc {
    DType src_dtype = DType::f32, dst_dtype = DType::u8;
    QuantGranularity granularity = QuantGranularity::per_tensor;
    int axis = 1;  // per_channel only (1 otherwise)
    bool symmetric = false, smooth = false;

    std::string key() const;
};

QuantKernelDesc quant_kernel_desc(const QuantDesc& d);

// Per-call parameters prepared once by the caller (execute) before the parallel loop.
// Quantize: inv[c] = 1.0f / scale of channel c (per_tensor: [1], per_channel: [rows] or [cols],
// per_token_dynamic: [rows], from the rows' computed scales) and zp[c] its zero point (the
// implied one when symmetric). Dequantize: unused (null).
struct QuantPrep {
    const float* inv = nullptr;
    const int32_t* zp = nullptr;
};

struct QuantKernel {
    virtual ~QuantKernel() = default;
    // The block rows [r0, r1) x cols [c0, c1), single-threaded (the caller tiles the matrix;
    // per_token_dynamic is always called with whole rows). d has its strides resolved; a and
    // every scale / zero point are validated.
    virtual void run(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                     const QuantPrep& p) const = 0;
    // The range of rows [r0, r1): mn[r] / mx[r] = a range of the row's finite values v = x (*
    // smooth) that gives the same quant_params_from_range as their exact min / max (it may include
    // 0; NaN / +-inf are left out), finite[r] = 0 when some v is NaN or +-inf.
    virtual void minmax(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, float* mn, float* mx,
                        uint8_t* finite) const;
    // per_token_dynamic, rows [r0, r1) (d resolved, a validated): each row's range, its
    // parameters (dynamic_row_params: scales_out / zero_points_out, inv[r] = 1 / scale, zp[r]) and
    // its quantized row, the row's second read coming from cache (one read of x from DRAM).
    virtual void run_dynamic(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, float* inv,
                             int32_t* zp) const = 0;
};

const Registry<QuantKernelDesc, QuantKernel>& quant_registry();

// JIT generator entry (jit_quant.cpp): isa is avx2 (ymm) or avx512 (zmm).
std::shared_ptr<const QuantKernel> create_jit_quant(const QuantKernelDesc& kd, Isa isa);

// The one-shot path (validate, kernel cache, run) with the caller's name in error messages;
// want_quantize says which direction the caller accepts.
void quant_one_shot(const char* fn, const QuantDesc& desc, const QuantArgs& args, bool want_quantize);

// per_token_dynamic the old way, for bench_quant's before / after rows (process-wide; default
// off): the range pass over all rows, then the quantize pass (two reads of x from DRAM).
void set_quant_dynamic_two_pass(bool on);

// Reference (specification); d must be resolved.
void quant_reference(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

// Integer range of u8 / s8.
inline int32_t quant_qmin(DType t) { return t == DType::s8 ? -128 : 0; }
inline int32_t quant_qmax(DType t) { return t == DType::s8 ? 127 : 255; }
// The implied zero point of symmetric quantization.
inline int32_t quant_symmetric_zero_point(DType t) { return t == DType::s8 ? 0 : 128; }

// Round to nearest, ties to even, independent of the floating-point environment.
inline float round_half_even(float v) {
    if (!(std::fabs(v) < 8388608.0f)) return v;  // |v| >= 2^23 is an integer already (or inf / NaN)
    float f = std::floor(v);
    const float diff = v - f;  // exact
    if (diff > 0.5f || (diff == 0.5f && std::fmod(f, 2.0f) != 0.0f)) f += 1.0f;
    return f;
}
inline double round_half_even(double v) {
    if (!(std::fabs(v) < 4503599627370496.0)) return v;  // 2^52
    double f = std::floor(v);
    const double diff = v - f;
    if (diff > 0.5 || (diff == 0.5 && std::fmod(f, 2.0) != 0.0)) f += 1.0;
    return f;
}

// The one quantization formula: saturate(zp + round_half_even(v * inv_scale)); NaN -> zp.
inline int32_t quantize_value(float v, float inv_scale, int32_t zp, int32_t qmin, int32_t qmax) {
    const float t = v * inv_scale;
    if (std::isnan(t)) return zp;
    const double q = static_cast<double>(round_half_even(t)) + zp;
    return static_cast<int32_t>(std::min<double>(std::max<double>(q, qmin), qmax));
}

// compute_quant_params without the argument checks (min, max finite, min <= max, qtype u8 / s8);
// per_token_dynamic kernels call this for each row.
QuantParams quant_params_from_range(float min, float max, DType qtype, bool symmetric);

// per_token_dynamic: row r's parameters from the range [mn, mx] of its finite values (a row
// without one: [0, 0]), written to a.scales_out[r] / a.zero_points_out[r] (when given) and to
// inv[r] = 1.0f / scale, zp[r].
inline QuantParams dynamic_row_params(const QuantDesc& d, const QuantArgs& a, int64_t r, float mn, float mx, float* inv,
                                      int32_t* zp) {
    const QuantParams p = quant_params_from_range(mn, mx, d.dst_dtype, d.symmetric);
    a.scales_out[r] = p.scale;
    if (a.zero_points_out) a.zero_points_out[r] = p.zero_point;
    inv[r] = 1.0f / p.scale;
    zp[r] = p.zero_point;
    return p;
}

// Elements per parallel block of the static modes.
constexpr int64_t kQuantColBlock = 16384;

}  // namespace xk::detail
