// xkernels — level-1 vector ops (JIT-generated per ISA; also the building block of epilogues).
#pragma once
#include <cstdint>

namespace xk {

// y[i] = alpha * x[i] + beta * y[i] for i in [0, n). x and y may be the same array (in place);
// partial overlap is an xk::Error. n == 0 is a no-op; beta == 0 ignores what y held (NaN too).
void axpby(int64_t n, float alpha, const float* x, float beta, float* y);

// y[i] = alpha * x[i]. x == y scales in place.
void scale(int64_t n, float alpha, const float* x, float* y);

}  // namespace xk
