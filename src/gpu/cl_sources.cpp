// The .cl files of src/gpu/kernels, embedded at build time (cmake/XkEmbedKernels.cmake).
#include <cstring>
#include <string>

#include "gpu/cl_sources.hpp"

namespace xk::gpu::detail {
namespace {
struct Embedded {
    const char* name;
    const char* source;
};
const Embedded kSources[] = {
#if XK_WITH_OPENCL
#include "xk_cl_sources.inc"
#endif
    {nullptr, nullptr}};
}  // namespace

const char* embedded_source(const char* name) {
    for (const Embedded* e = kSources; e->name; ++e)
        if (std::strcmp(e->name, name) == 0) return e->source;
    return nullptr;
}

std::vector<std::string> embedded_names() {
    std::vector<std::string> v;
    for (const Embedded* e = kSources; e->name; ++e) v.emplace_back(e->name);
    return v;
}

}  // namespace xk::gpu::detail
