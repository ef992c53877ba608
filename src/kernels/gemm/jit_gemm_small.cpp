// placeholder (next commit)
#include "kernels/gemm/jit_gemm_common.hpp"
namespace xk::detail {
bool gemm_small_supports(const GemmSpec&) { return false; }
std::shared_ptr<const GemmKernel> create_gemm_small(const GemmSpec& s, Isa isa) { return create_gemm_jit(s, isa); }
}
