// Norm reference: the specification (see include/xk/norm.hpp for the math).
#include <cmath>
#include <vector>

#include "common/float_io.hpp"
#include "kernels/norm/norm.hpp"

namespace xk::detail {

void norm_reference(const NormDesc& d, const NormArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t n = d.hidden;
    std::vector<float> h(n), r(n), w(n, 1.0f), b(n, 0.0f), y(n);
    if (d.has_weight) load_f32(a.weight, d.weight_dtype, n, w.data());
    if (d.has_bias) load_f32(a.bias, d.weight_dtype, n, b.data());

    for (int64_t row = row_begin; row < row_end; ++row) {
        // h = x, or x + residual rounded to the residual dtype (and stored as residual_out).
        load_f32(elem_ptr(a.x, d.x_dtype, row * d.ld_x), d.x_dtype, n, h.data());
        if (d.fused_residual) {
            load_f32(elem_ptr(a.residual, d.residual_dtype, row * d.ld_residual), d.residual_dtype, n, r.data());
            for (int64_t i = 0; i < n; ++i) h[i] += r[i];
            void* r_out = elem_ptr(a.residual_out, d.residual_dtype, row * d.ld_residual_out);
            store_f32(h.data(), n, r_out, d.residual_dtype);
            load_f32(r_out, d.residual_dtype, n, h.data());  // the norm sees the stored (rounded) sum
        }

        // Row statistics, accumulated in double.
        double mean = 0.0;
        if (d.kind == NormKind::layer_norm) {
            for (int64_t i = 0; i < n; ++i) mean += h[i];
            mean /= static_cast<double>(n);
        }
        double var = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const double c = h[i] - mean;
            var += c * c;
        }
        var /= static_cast<double>(n);
        const float mean_f = static_cast<float>(mean);
        const float rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(d.eps)));

        // y = (h - mean) * rstd * weight + bias, in fp32, rounded once to y's dtype.
        for (int64_t i = 0; i < n; ++i) y[i] = (h[i] - mean_f) * rstd * w[i] + b[i];
        store_f32(y.data(), n, elem_ptr(a.y, d.y_dtype, row * d.ld_y), d.y_dtype);
    }
}

}  // namespace xk::detail
