#include "kernels/eltwise/eltwise.hpp"

namespace xk::detail {

void axpby_reference(int64_t n, float alpha, const float* x, float beta, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * y[i];
}

}  // namespace xk::detail
