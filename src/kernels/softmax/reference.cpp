// Softmax reference: the specification (see include/xk/llm.hpp).
#include <cmath>
#include <cstring>
#include <vector>

#include "common/float_io.hpp"
#include "kernels/softmax/softmax.hpp"

namespace xk::detail {

void softmax_reference(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end) {
    std::vector<float> t(d.cols), y(d.cols);
    std::vector<double> s(d.cols);
    for (int64_t r = row_begin; r < row_end; ++r) {
        const int64_t v = softmax_visible(d, a, r);
        std::fill(y.begin(), y.end(), 0.0f);
        if (v > 0) {
            load_f32(elem_ptr(a.x, d.x_dtype, r * d.ld_x), d.x_dtype, v, t.data());
            const float* mrow = d.has_mask ? a.mask + (r % d.mask_rows) * d.ld_mask : nullptr;
            // s = scale * x (+ mask) in double: exact, and finite for every finite x (scale x may
            // exceed FLT_MAX: {3e38, 0} with scale 2 is {1, 0}).
            double m = -INFINITY;
            for (int64_t j = 0; j < v; ++j) {
                s[j] = static_cast<double>(d.scale) * t[j] + (mrow ? static_cast<double>(mrow[j]) : 0.0);
                m = std::max(m, s[j]);
            }
            if (m != -INFINITY) {  // (every visible column masked with -inf: the row stays 0)
                double sum = 0.0;
                for (int64_t j = 0; j < v; ++j) sum += std::exp(s[j] - m);
                for (int64_t j = 0; j < v; ++j) y[j] = static_cast<float>(std::exp(s[j] - m) / sum);
            }
        }
        store_f32(y.data(), d.cols, elem_ptr(a.y, d.y_dtype, r * d.ld_y), d.y_dtype);
    }
}

}  // namespace xk::detail
