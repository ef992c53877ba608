// The float4 copy kernel: the bandwidth yardstick of bench_gpu and the program cache's smoke test.
#include "common/check.hpp"
#include "xk/gpu.hpp"

#if XK_WITH_OPENCL
#include "gpu/runtime.hpp"
#endif

namespace xk::gpu {

Event copy_f32x4(const Context& ctx, const Buffer& src, const Buffer& dst, int64_t bytes) {
    const char* fn = "xk::gpu::copy_f32x4";
#if XK_WITH_OPENCL
    xk::detail::check_nonnegative(fn, "bytes", bytes);
    if (bytes % 16 != 0) xk::detail::fail_arg(fn, "bytes", std::to_string(bytes), "must be a multiple of 16");
    if (bytes == 0) return {};
    detail::check_buffer_context(fn, "src", ctx, src);
    detail::check_buffer_context(fn, "dst", ctx, dst);
    if (bytes > src.bytes()) xk::detail::fail_arg(fn, "bytes", std::to_string(bytes), "exceeds src's " + std::to_string(src.bytes()) + " bytes");
    if (bytes > dst.bytes()) xk::detail::fail_arg(fn, "bytes", std::to_string(bytes), "exceeds dst's " + std::to_string(dst.bytes()) + " bytes");
    cl_kernel k = detail::get_kernel(ctx, "copy", "xk_copy_f32x4", "");
    const cl_ulong n4 = static_cast<cl_ulong>(bytes / 16);
    detail::set_arg(k, 0, detail::cl_buffer(src));
    detail::set_arg(k, 1, detail::cl_buffer(dst));
    detail::set_arg(k, 2, n4);
    const size_t local = 256;
    const size_t global = (static_cast<size_t>(n4) + local - 1) / local * local;
    return detail::enqueue(ctx, k, 1, &global, &local, fn);
#else
    throw Error(Status::unsupported, std::string(fn) + ": built without OpenCL (XK_WITH_OPENCL=OFF)");
#endif
}

}  // namespace xk::gpu
