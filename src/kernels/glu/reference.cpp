// GLU reference: the specification (see include/xk/llm.hpp).
#include <vector>

#include "common/activation.hpp"
#include "common/float_io.hpp"
#include "kernels/glu/glu.hpp"

namespace xk::detail {

void glu_reference(const GluDesc& d, const GluArgs& a, int64_t row_begin, int64_t row_end) {
    const int64_t n = d.inner;
    std::vector<float> x(2 * n), y(n);
    for (int64_t r = row_begin; r < row_end; ++r) {
        load_f32(elem_ptr(a.x, d.x_dtype, r * d.ld_x), d.x_dtype, 2 * n, x.data());
        for (int64_t i = 0; i < n; ++i) y[i] = apply_activation(d.activation, x[i]) * x[n + i];
        store_f32(y.data(), n, elem_ptr(a.y, d.y_dtype, r * d.ld_y), d.y_dtype);
    }
}

}  // namespace xk::detail
