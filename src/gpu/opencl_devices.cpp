// OpenCL device enumeration (the rest of the OpenCL runtime builds on this).
#include "xk/gpu.hpp"

#if XK_WITH_OPENCL
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#endif

#include <sstream>

namespace xk::gpu {

bool built_with_opencl() noexcept {
#if XK_WITH_OPENCL
    return true;
#else
    return false;
#endif
}

#if XK_WITH_OPENCL
namespace {

std::string platform_str(cl_platform_id p, cl_platform_info what) {
    size_t n = 0;
    if (clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
    std::string s(n, '\0');
    clGetPlatformInfo(p, what, n, s.data(), nullptr);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

std::string device_str(cl_device_id d, cl_device_info what) {
    size_t n = 0;
    if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
    std::string s(n, '\0');
    clGetDeviceInfo(d, what, n, s.data(), nullptr);
    while (!s.empty() && s.back() == '\0') s.pop_back();
    return s;
}

template <class T>
T device_val(cl_device_id d, cl_device_info what) {
    T v{};
    if (clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) != CL_SUCCESS) return T{};
    return v;
}

bool has_ext(const std::string& exts, const char* name) {
    std::istringstream is(exts);
    std::string e;
    while (is >> e)
        if (e == name) return true;
    return false;
}

}  // namespace

std::vector<DeviceInfo> devices(std::string* error) {
    std::vector<DeviceInfo> out;
    cl_uint np = 0;
    cl_int rc = clGetPlatformIDs(0, nullptr, &np);
    if (rc != CL_SUCCESS || np == 0) {
        if (error) *error = rc == CL_SUCCESS ? "no OpenCL platform" : "clGetPlatformIDs failed: " + std::to_string(rc);
        return out;
    }
    std::vector<cl_platform_id> plats(np);
    clGetPlatformIDs(np, plats.data(), nullptr);
    for (cl_uint pi = 0; pi < np; ++pi) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0) continue;
        std::vector<cl_device_id> devs(nd);
        clGetDeviceIDs(plats[pi], CL_DEVICE_TYPE_ALL, nd, devs.data(), nullptr);
        for (cl_uint di = 0; di < nd; ++di) {
            cl_device_id d = devs[di];
            DeviceInfo info;
            info.platform_index = static_cast<int>(pi);
            info.device_index = static_cast<int>(di);
            info.platform_name = platform_str(plats[pi], CL_PLATFORM_NAME);
            info.platform_version = platform_str(plats[pi], CL_PLATFORM_VERSION);
            info.name = device_str(d, CL_DEVICE_NAME);
            info.vendor = device_str(d, CL_DEVICE_VENDOR);
            info.device_version = device_str(d, CL_DEVICE_VERSION);
            info.driver_version = device_str(d, CL_DRIVER_VERSION);
            const auto type = device_val<cl_device_type>(d, CL_DEVICE_TYPE);
            info.type = (type & CL_DEVICE_TYPE_GPU) ? "gpu"
                        : (type & CL_DEVICE_TYPE_CPU) ? "cpu"
                        : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator" : "other";
            info.compute_units = static_cast<int>(device_val<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS));
            info.global_mem_bytes = static_cast<int64_t>(device_val<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE));
            info.local_mem_bytes = static_cast<int64_t>(device_val<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE));
            info.max_alloc_bytes = static_cast<int64_t>(device_val<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE));
            info.max_work_group_size = static_cast<int>(device_val<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE));
            const std::string exts = device_str(d, CL_DEVICE_EXTENSIONS);
            info.fp16 = has_ext(exts, "cl_khr_fp16");
            info.fp64 = has_ext(exts, "cl_khr_fp64");
            info.intel_subgroups = has_ext(exts, "cl_intel_subgroups");
            info.intel_subgroup_matrix = has_ext(exts, "cl_intel_subgroup_matrix_multiply_accumulate");
            info.intel_required_subgroup_size = has_ext(exts, "cl_intel_required_subgroup_size");
            if (info.intel_required_subgroup_size) {
                constexpr cl_device_info CL_DEVICE_SUB_GROUP_SIZES_INTEL = 0x4108;
                size_t n = 0;
                if (clGetDeviceInfo(d, CL_DEVICE_SUB_GROUP_SIZES_INTEL, 0, nullptr, &n) == CL_SUCCESS && n > 0) {
                    std::vector<size_t> sizes(n / sizeof(size_t));
                    clGetDeviceInfo(d, CL_DEVICE_SUB_GROUP_SIZES_INTEL, n, sizes.data(), nullptr);
                    for (size_t s : sizes) info.subgroup_sizes.push_back(static_cast<int>(s));
                }
            }
            out.push_back(std::move(info));
        }
    }
    return out;
}
#else
std::vector<DeviceInfo> devices(std::string* error) {
    if (error) *error = "built without OpenCL (XK_WITH_OPENCL=OFF)";
    return {};
}
#endif

}  // namespace xk::gpu
