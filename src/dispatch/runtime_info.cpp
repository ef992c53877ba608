// Library and dependency versions.
#include <hwloc.h>
#include <oneapi/dnnl/dnnl.h>

#include <string>

#include "dispatch/xbyak_config.hpp"
#include "xk/runtime.hpp"

#if XK_WITH_OPENCL
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#endif

namespace xk {

const char* version_string() noexcept { return "0.1.0"; }

std::string dependency_versions() {
    std::string s;
    const dnnl_version_t* v = dnnl_version();
    s += "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         " (" + (v->hash ? v->hash : "") + ")\n";
    const unsigned xv = Xbyak::VERSION;
    s += "xbyak " + std::to_string(xv >> 12) + "." + std::to_string((xv >> 8) & 0xf) + std::to_string((xv >> 4) & 0xf) +
         "\n";
    const unsigned hv = hwloc_get_api_version();
    s += "hwloc API " + std::to_string(hv >> 16) + "." + std::to_string((hv >> 8) & 0xff) + "." + std::to_string(hv & 0xff) +
         "\n";
#if XK_WITH_OPENCL
    s += "OpenCL headers " + std::to_string(CL_TARGET_OPENCL_VERSION / 100) + "." +
         std::to_string((CL_TARGET_OPENCL_VERSION / 10) % 10) + " (ICD loader)\n";
#else
    s += "OpenCL: not built\n";
#endif
    s += std::string("threading: ") + threading_backend() + "\n";
    s += "compiler: GCC " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "\n";
    return s;
}

}  // namespace xk
