// xkernels — OpenCL backend: devices seen by the OpenCL ICD loader.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace xk::gpu {

struct DeviceInfo {
    int platform_index = 0, device_index = 0;
    std::string platform_name, platform_version;
    std::string name, vendor, device_version, driver_version;
    std::string type;  // "gpu", "cpu", "accelerator", "other"
    int compute_units = 0;
    int64_t global_mem_bytes = 0, local_mem_bytes = 0, max_alloc_bytes = 0;
    int max_work_group_size = 0;
    bool fp16 = false, fp64 = false;
    bool intel_subgroups = false;          // cl_intel_subgroups
    bool intel_subgroup_matrix = false;    // cl_intel_subgroup_matrix_multiply_accumulate (XMX / DPAS)
    bool intel_required_subgroup_size = false;
    std::vector<int> subgroup_sizes;       // cl_intel_required_subgroup_size sizes, when reported
};

// True when the library was built with the OpenCL backend.
bool built_with_opencl() noexcept;
// Every device of every platform the ICD loader reports; empty (no throw) when there is none or
// OpenCL is absent. `error` (optional) receives why the list is empty when the loader failed.
std::vector<DeviceInfo> devices(std::string* error = nullptr);

}  // namespace xk::gpu
