#pragma once
#include <string>
#include <vector>

namespace xk::gpu::detail {
// Source text of src/gpu/kernels/<name>.cl, or nullptr.
const char* embedded_source(const char* name);
std::vector<std::string> embedded_names();
}  // namespace xk::gpu::detail
