// OpenCL backend: device enumeration never throws, reports sane values, and the .cl sources are
// embedded in the library at build time.
#include <cstring>

#include "common/test_util.hpp"
#include "gpu/cl_sources.hpp"
#include "xk/gpu.hpp"

TEST(Gpu, DeviceEnumeration) {
    std::string err;
    const auto devs = xk::gpu::devices(&err);
    if (!xk::gpu::built_with_opencl()) {
        EXPECT_TRUE(devs.empty());
        EXPECT_NE(err.find("without OpenCL"), std::string::npos);
        return;
    }
    std::printf("[xk] OpenCL devices: %zu%s\n", devs.size(), devs.empty() ? (" (" + err + ")").c_str() : "");
    for (const auto& d : devs) {
        std::printf("[xk]   %s / %s (%s)\n", d.platform_name.c_str(), d.name.c_str(), d.type.c_str());
        EXPECT_FALSE(d.name.empty());
        EXPECT_GE(d.compute_units, 1);
        EXPECT_GT(d.global_mem_bytes, 0);
        EXPECT_GE(d.max_work_group_size, 1);
        EXPECT_NE(d.device_version.find("OpenCL"), std::string::npos);
    }
}

TEST(Gpu, KernelSourcesAreEmbedded) {
    if (!xk::gpu::built_with_opencl()) GTEST_SKIP() << "built without OpenCL";
    const char* src = xk::gpu::detail::embedded_source("copy");
    ASSERT_NE(src, nullptr);
    EXPECT_NE(std::strstr(src, "__kernel void xk_copy_f32x4"), nullptr);
    EXPECT_EQ(xk::gpu::detail::embedded_source("no_such_kernel"), nullptr);
}
