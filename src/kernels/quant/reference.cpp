// Quantize / dequantize reference: the specification (see include/xk/quant.hpp for the math).
#include <cmath>
#include <vector>

#include "common/float_io.hpp"
#include "kernels/quant/quant.hpp"

namespace xk::detail {

QuantParams quant_params_from_range(float min, float max, DType qtype, bool symmetric) {
    const int32_t qmin = quant_qmin(qtype), qmax = quant_qmax(qtype);
    QuantParams p;
    double scale;
    if (symmetric) {
        const double amax = std::max(std::fabs(static_cast<double>(min)), std::fabs(static_cast<double>(max)));
        scale = amax / 127.0;
        p.zero_point = quant_symmetric_zero_point(qtype);
    } else {
        const double lo = std::min(static_cast<double>(min), 0.0), hi = std::max(static_cast<double>(max), 0.0);
        scale = (hi - lo) / static_cast<double>(qmax - qmin);
    }
    p.scale = static_cast<float>(scale);
    if (p.scale == 0.0f || !std::isfinite(1.0f / p.scale)) p.scale = 1.0f;  // all-zero / denormal range
    if (!symmetric) {
        const double lo = std::min(static_cast<double>(min), 0.0);
        const double zp = round_half_even(static_cast<double>(qmin) - lo / static_cast<double>(p.scale));
        p.zero_point = static_cast<int32_t>(std::min<double>(std::max<double>(zp, qmin), qmax));
    }
    return p;
}

void quant_reference(const QuantDesc& d, const QuantArgs& a, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const bool quantize = d.dst_dtype == DType::u8 || d.dst_dtype == DType::s8;
    const DType qtype = quantize ? d.dst_dtype : d.src_dtype;
    const int32_t qmin = quant_qmin(qtype), qmax = quant_qmax(qtype);
    const int64_t n = c1 - c0;
    std::vector<float> v(n);

    // (scale, zero point) of element (row, col) in the static modes.
    auto channel = [&](int64_t row, int64_t col) -> int64_t {
        if (d.granularity == QuantGranularity::per_tensor) return 0;
        return d.axis == 0 ? row : col;
    };
    auto zero_point = [&](int64_t c) { return d.symmetric ? quant_symmetric_zero_point(qtype) : a.zero_points[c]; };

    for (int64_t row = r0; row < r1; ++row) {
        if (quantize) {
            load_f32(elem_ptr(a.src, d.src_dtype, row * d.ld_src + c0), d.src_dtype, n, v.data());
            if (d.smooth)
                for (int64_t j = 0; j < n; ++j) v[j] *= a.smooth[c0 + j];

            float row_scale = 0.0f;
            int32_t row_zp = 0;
            if (d.granularity == QuantGranularity::per_token_dynamic) {
                // The range of the row's finite values (none: [0, 0]); NaN / +-inf then quantize as
                // in the static modes (NaN -> zero point, +-inf saturate).
                float mn = 0.0f, mx = 0.0f;
                bool any = false;
                for (int64_t j = 0; j < n; ++j) {
                    if (!std::isfinite(v[j])) continue;
                    mn = any ? std::min(mn, v[j]) : v[j];
                    mx = any ? std::max(mx, v[j]) : v[j];
                    any = true;
                }
                const QuantParams p = quant_params_from_range(mn, mx, qtype, d.symmetric);
                row_scale = p.scale;
                row_zp = p.zero_point;
                a.scales_out[row] = p.scale;
                if (a.zero_points_out) a.zero_points_out[row] = p.zero_point;
            }

            for (int64_t j = 0; j < n; ++j) {
                float scale = row_scale;
                int32_t zp = row_zp;
                if (d.granularity != QuantGranularity::per_token_dynamic) {
                    const int64_t c = channel(row, c0 + j);
                    scale = a.scales[c];
                    zp = zero_point(c);
                }
                const int32_t q = quantize_value(v[j], 1.0f / scale, zp, qmin, qmax);
                const int64_t off = row * d.ld_dst + c0 + j;
                if (qtype == DType::u8)
                    static_cast<uint8_t*>(a.dst)[off] = static_cast<uint8_t>(q);
                else
                    static_cast<int8_t*>(a.dst)[off] = static_cast<int8_t>(q);
            }
        } else {
            for (int64_t j = 0; j < n; ++j) {
                const int64_t off = row * d.ld_src + c0 + j;
                const int32_t q = qtype == DType::u8 ? static_cast<const uint8_t*>(a.src)[off]
                                                     : static_cast<const int8_t*>(a.src)[off];
                const int64_t c = channel(row, c0 + j);
                v[j] = static_cast<float>(q - zero_point(c)) * a.scales[c];
            }
            store_f32(v.data(), n, elem_ptr(a.dst, d.dst_dtype, row * d.ld_dst + c0), d.dst_dtype);
        }
    }
}

}  // namespace xk::detail
