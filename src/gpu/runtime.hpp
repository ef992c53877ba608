// Internal OpenCL runtime: raw handles for kernels (src/gpu/*.cpp, gpugemm's GEMM), the program
// cache, CL error helpers. Only compiled with XK_WITH_OPENCL.
#pragma once
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#ifndef CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#endif
#include <CL/cl.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "xk/error.hpp"
#include "xk/gpu.hpp"

namespace xk::gpu::detail {

// "CL_OUT_OF_RESOURCES" ... ("CL error -9999" for unknown codes).
const char* cl_error_name(cl_int rc) noexcept;
// Throws xk::Error(runtime_error, or out_of_memory for the allocation failures) reading
// "<where>: <call> failed: CL_...".
[[noreturn]] void throw_cl(const char* where, const char* call, cl_int rc);
inline void check_cl(cl_int rc, const char* where, const char* call) {
    if (rc != CL_SUCCESS) throw_cl(where, call, rc);
}

// Raw handles. The context keeps them alive; don't release them.
cl_context cl_ctx(const Context& ctx);
cl_device_id cl_dev(const Context& ctx);
cl_command_queue cl_queue(const Context& ctx);
cl_platform_id cl_platform(const Context& ctx);
// The buffer's own cl_mem (a sub-buffer: offset 0 is the buffer's first byte); null when empty.
cl_mem cl_buffer(const Buffer& b);
// Wraps an event we own (the Event takes over the reference; null gives an empty Event).
Event make_event(cl_event e);
cl_event cl_event_of(const Event& e);  // null when empty

// A built kernel from the embedded source `source_name` (src/gpu/kernels/<name>.cl) compiled
// with `build_options`, through the per-context program cache (memory, then disk, then a source
// build). The cl_kernel belongs to the cache and to the calling thread (one per thread, so
// clSetKernelArg + enqueue need no lock); valid while the context lives. Thread safe.
// A failed build is an xk::Error with the build log.
cl_kernel get_kernel(const Context& ctx, std::string_view source_name, std::string_view kernel_name,
                     const std::string& build_options);
// The same for a source text given by the caller (the tuner's generated kernels): `source_key`
// names it in messages and cache keys; the text itself is hashed into the key.
cl_kernel get_kernel_from_source(const Context& ctx, std::string_view source_key, const std::string& source,
                                 std::string_view kernel_name, const std::string& build_options);

// The row kernels' (norm / softmax) form override, XK_GPU_ROW_VARIANT's syntax (src/gpu/ops.cpp):
// the environment variable is read once, at the first call; this replaces it for the calls that
// follow (benches and tests comparing forms in one process; "" = the defaults). Not while another
// thread runs norm / softmax calls whose form matters to it.
void set_row_variant(const std::string& spec);

// Program-cache statistics of a context (tests, XK_VERBOSE).
struct ProgramCacheStats {
    int64_t memory_hits = 0, disk_hits = 0, source_builds = 0, disk_writes = 0, disk_rejects = 0;
    int64_t kernels_created = 0;  // clCreateKernel calls (one per program, kernel name and thread)
};
ProgramCacheStats program_cache_stats(const Context& ctx);
// Drops the context's in-memory programs and kernels (tests: the next get_kernel goes to disk).
// Only while no other thread uses kernels of this context.
void clear_program_memory_cache(const Context& ctx);

// The context's scratch memory (split-K's partial sums): one device block kept between calls and
// grown when a call needs more, so a steady-state call creates no OpenCL object. A lease holds the
// context's scratch lock: enqueue every command that uses mem() before the lease ends — the
// in-order queue then runs them before any later lease's commands (which may overwrite it).
class ScratchLease {
public:
    ScratchLease(const Context& ctx, int64_t bytes);  // bytes > 0
    cl_mem mem() const { return mem_; }
    ScratchLease(const ScratchLease&) = delete;
    ScratchLease& operator=(const ScratchLease&) = delete;

private:
    std::unique_lock<std::mutex> lock_;
    cl_mem mem_ = nullptr;
};
struct ScratchStats {
    int64_t bytes = 0;  // held now
    int64_t grows = 0;  // (re)allocations, ever
};
ScratchStats scratch_stats(const Context& ctx);

// Kernel-argument helpers.
inline void set_arg(cl_kernel k, cl_uint i, cl_mem m) { check_cl(clSetKernelArg(k, i, sizeof(cl_mem), &m), "xk::gpu", "clSetKernelArg"); }
template <class T>
inline void set_arg(cl_kernel k, cl_uint i, const T& v) {
    check_cl(clSetKernelArg(k, i, sizeof(T), &v), "xk::gpu", "clSetKernelArg");
}
// Enqueues a 1-D or 2-D NDRange (local may be null) on the context's queue; returns its Event.
Event enqueue(const Context& ctx, cl_kernel k, cl_uint dims, const size_t* global, const size_t* local,
              const char* what);

// Throws xk::Error naming `fn` / `arg` when b is empty or belongs to another context.
void check_buffer_context(const char* fn, const char* arg, const Context& ctx, const Buffer& b);

}  // namespace xk::gpu::detail
