// xkernels — OpenCL backend: devices, contexts, buffers, events, the caching allocator, and the
// memory-bound LLM ops (RMSNorm / LayerNorm, RoPE, GLU, softmax) on the GPU with the CPU ops'
// descriptors. See docs/gpu.md.
//
// Handles. Context, Buffer and Event are cheap, copyable handles (shared ownership): a Buffer
// keeps its Context alive, an Event its OpenCL event. Every command goes to the context's one
// in-order queue (profiling enabled), so commands run in the order they were issued; calls
// return after enqueueing (asynchronously) unless they say "blocking".
//
// Device selection (Context() with no index): XK_GPU_DEVICE = an index into devices() or a
// substring of "<platform name> / <device name>" (case-insensitive); unset: the first GPU, else
// the first device. A selection that matches nothing is an xk::Error listing the devices.
//
// Errors: xk::Error naming the thing ("xk::gpu::Buffer: bytes=... exceeds the device's max
// allocation ..."); OpenCL failures carry the call and the CL error name (CL_OUT_OF_RESOURCES);
// a kernel that fails to build shows the compiler log; out of device memory is
// Status::out_of_memory (after the allocator emptied its cache and retried once).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "xk/types.hpp"

namespace xk {
struct NormDesc;
struct RopeDesc;
struct GluDesc;
struct SoftmaxDesc;
}  // namespace xk

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
// The index into devices() that Context() would use (XK_GPU_DEVICE, else first GPU, else 0).
// Throws xk::Error when there is no device or XK_GPU_DEVICE matches none.
int selected_device_index();
// Index of the first device whose "<platform> / <name>" contains `name_or_index` (case-
// insensitive), or the index it spells; throws xk::Error listing the devices when none matches.
int find_device(const std::string& name_or_index);
// The program-cache directory ($XK_GPU_CACHE_DIR, else $XDG_CACHE_HOME/xkernels/cl, else
// ~/.cache/xkernels/cl); empty when the disk cache is off (XK_GPU_CACHE_DIR=off).
std::string cache_dir();

namespace detail {
struct ContextImpl;
struct BufferImpl;
struct EventImpl;
}  // namespace detail

// A completed-or-pending command. Default-constructed: empty (wait() returns at once).
class Event {
public:
    Event() = default;
    bool valid() const { return impl_ != nullptr; }
    void wait() const;          // blocks until the command completed
    bool complete() const;      // true when complete (or empty); does not block
    // Profiling timestamps of the command on the device clock, nanoseconds (waits first).
    int64_t start_ns() const;
    int64_t end_ns() const;
    double elapsed_ms() const { return static_cast<double>(end_ns() - start_ns()) * 1e-6; }

private:
    friend struct detail::EventImpl;
    std::shared_ptr<detail::EventImpl> impl_;
};

// Statistics of a context's caching allocator (bytes are rounded block sizes).
struct MemoryStats {
    int64_t allocated_bytes = 0;       // held by live Buffers
    int64_t reserved_bytes = 0;        // held by the allocator from OpenCL (allocated + cached)
    int64_t peak_allocated_bytes = 0;
    int64_t peak_reserved_bytes = 0;
    int64_t num_allocs = 0;            // Buffer allocations served (cache hits included)
    int64_t num_frees = 0;
    int64_t num_segments = 0;          // clCreateBuffer calls made (segments reserved), ever
    int64_t num_cache_hits = 0;        // allocations served from reserved memory
    int64_t num_ooms = 0;              // allocations that failed, even after emptying the cache
    int64_t num_pending_blocks = 0;    // freed blocks waiting for recorded events
};

// An OpenCL context on one device with one in-order, profiling-enabled queue, its program cache
// and its caching allocator. Copies share them.
class Context {
public:
    Context();                              // the selected device (see above)
    explicit Context(int device_index);     // an index into devices()
    const DeviceInfo& device() const;
    void finish() const;                    // waits for every command issued so far
    void flush() const;

    // Caching allocator.
    MemoryStats memory_stats() const;
    void reset_peak_stats() const;
    void empty_cache() const;                // returns every cached (free) segment to OpenCL
                                             // (and the context's scratch: split-K's workspace)
    // Caps what the allocator reserves from OpenCL (0 = the device's global memory); reaching the
    // cap is out of memory. Like torch.xpu.set_per_process_memory_fraction, in bytes.
    void set_memory_limit(int64_t bytes) const;
    int64_t memory_limit() const;

    bool operator==(const Context& o) const { return impl_ == o.impl_; }
    bool operator!=(const Context& o) const { return impl_ != o.impl_; }
    const std::shared_ptr<detail::ContextImpl>& impl() const { return impl_; }
    explicit Context(std::shared_ptr<detail::ContextImpl> impl) : impl_(std::move(impl)) {}  // internal

private:
    std::shared_ptr<detail::ContextImpl> impl_;
};

// Device memory of `bytes` bytes from the context's caching allocator (a sub-buffer of a
// reserved segment). Copies share the memory; the block returns to the allocator when the last
// copy goes away (it is reused at once by later commands of the same in-order queue; see
// record_use for other queues). Offsets and byte counts of the copies must lie inside the buffer.
class Buffer {
public:
    Buffer() = default;                             // empty: bytes() == 0
    Buffer(const Context& ctx, int64_t bytes);
    int64_t bytes() const;
    bool empty() const { return bytes() == 0; }
    Context context() const;

    // Host -> device / device -> host. Blocking forms return when the host memory may be reused /
    // read; async forms return an Event, and the host memory must stay valid until it completes.
    void write(const void* src, int64_t bytes, int64_t offset = 0) const;
    Event write_async(const void* src, int64_t bytes, int64_t offset = 0) const;
    void read(void* dst, int64_t bytes, int64_t offset = 0) const;
    Event read_async(void* dst, int64_t bytes, int64_t offset = 0) const;
    // Device -> device, enqueued.
    Event copy_from(const Buffer& src, int64_t bytes, int64_t src_offset = 0, int64_t dst_offset = 0) const;
    Event fill_zero() const;

    // Typed conveniences (element counts).
    template <class T>
    static Buffer from_host(const Context& ctx, const std::vector<T>& v) {
        Buffer b(ctx, static_cast<int64_t>(v.size() * sizeof(T)));
        if (!v.empty()) b.write(v.data(), b.bytes());
        return b;
    }
    template <class T>
    std::vector<T> to_host() const {
        std::vector<T> v(static_cast<size_t>(bytes()) / sizeof(T));
        if (!v.empty()) read(v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
        return v;
    }

    // When commands outside the context's queue (another queue, interop) use this buffer, record
    // their completion events: the block is not handed out again until they completed.
    void record_use(const Event& e) const;

    bool same_memory(const Buffer& o) const { return impl_ == o.impl_; }
    const std::shared_ptr<detail::BufferImpl>& impl() const { return impl_; }

private:
    std::shared_ptr<detail::BufferImpl> impl_;
};

// ---- memory-bound ops (the CPU descriptors; storage f32 / bf16 / f16, math in f32) ----------
// A tensor argument: a buffer and an offset into it in elements of the tensor's dtype. The
// descriptor's shape and strides must fit inside buffer.bytes() from there, and the buffer must
// belong to the context. Each op returns the Event of its (last) kernel; the CPU descriptors'
// aliasing rules apply (in place = the same buffer and offset).
struct Tensor {
    Buffer buffer;
    int64_t offset = 0;
    Tensor() = default;
    Tensor(const Buffer& b, int64_t off = 0) : buffer(b), offset(off) {}  // NOLINT: implicit
};

struct NormTensors { Tensor x, y, weight, bias, residual, residual_out; };
struct RopeTensors { Tensor q, k, positions, cos_sin_cache; };
struct GluTensors { Tensor x, y; };
struct SoftmaxTensors { Tensor x, y; };

// RMSNorm / LayerNorm (+ fused residual), xk/norm.hpp's NormDesc (dtypes f32, bf16 or f16).
Event norm(const Context& ctx, const NormDesc& desc, const NormTensors& t);
// RoPE in place on q / k, xk/rope.hpp's RopeDesc. A position outside [0, max_position) (cache)
// or below 0 (compute) leaves that token's q / k untouched (the GPU does not check positions).
Event rope(const Context& ctx, const RopeDesc& desc, const RopeTensors& t);
// Gated activations (SwiGLU = silu_and_mul, GeGLU ...), xk/llm.hpp's GluDesc.
Event glu(const Context& ctx, const GluDesc& desc, const GluTensors& t);
// Softmax over the last dimension with scale and causal mask, xk/llm.hpp's SoftmaxDesc
// (has_mask and valid_lens are not offered on the GPU: Status::unsupported).
Event softmax(const Context& ctx, const SoftmaxDesc& desc, const SoftmaxTensors& t);
// float4 copy of `bytes` (a multiple of 16) from src to dst: the bandwidth yardstick.
Event copy_f32x4(const Context& ctx, const Buffer& src, const Buffer& dst, int64_t bytes);

}  // namespace xk::gpu
