// OpenCL runtime: device selection, Context (context + in-order profiling queue + allocator),
// Buffer, Event, enqueue helpers, CL error names.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "common/check.hpp"
#include "xk/gpu.hpp"

#if XK_WITH_OPENCL
#include "gpu/context_impl.hpp"
#include "gpu/runtime.hpp"
#endif

namespace xk::gpu {

namespace {
std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

std::string device_list(const std::vector<DeviceInfo>& devs) {
    std::string s;
    for (size_t i = 0; i < devs.size(); ++i)
        s += (i ? "; " : "") + std::to_string(i) + ": " + devs[i].platform_name + " / " + devs[i].name + " (" +
             devs[i].type + ")";
    return s.empty() ? "none" : s;
}

int find_in(const std::vector<DeviceInfo>& devs, const std::string& sel, const char* what) {
    if (devs.empty()) throw Error(Status::unsupported, std::string(what) + ": no OpenCL device");
    const bool digits = !sel.empty() && std::all_of(sel.begin(), sel.end(), [](unsigned char c) { return std::isdigit(c); });
    if (digits) {
        const long v = sel.size() > 9 ? -1 : std::strtol(sel.c_str(), nullptr, 10);
        if (v >= 0 && v < static_cast<long>(devs.size())) return static_cast<int>(v);
    } else if (!sel.empty()) {
        const std::string needle = lower(sel);
        for (size_t i = 0; i < devs.size(); ++i)
            if (lower(devs[i].platform_name + " / " + devs[i].name).find(needle) != std::string::npos)
                return static_cast<int>(i);
    }
    throw Error(Status::invalid_argument,
                std::string(what) + "=\"" + sel + "\" matches no OpenCL device (devices: " + device_list(devs) + ")");
}
}  // namespace

int find_device(const std::string& name_or_index) {
    return find_in(devices(), name_or_index, "xk::gpu::find_device: name_or_index");
}

int selected_device_index() {
    const auto devs = devices();
    const char* env = std::getenv("XK_GPU_DEVICE");
    if (env && *env) return find_in(devs, env, "xk::gpu: XK_GPU_DEVICE");
    if (devs.empty()) throw Error(Status::unsupported, "xk::gpu: no OpenCL device");
    for (size_t i = 0; i < devs.size(); ++i)
        if (devs[i].type == "gpu") return static_cast<int>(i);
    return 0;
}

std::string cache_dir() {
    const char* env = std::getenv("XK_GPU_CACHE_DIR");
    if (env && *env) return std::string(env) == "off" ? std::string() : std::string(env);
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    if (xdg && *xdg) return std::string(xdg) + "/xkernels/cl";
    const char* home = std::getenv("HOME");
    if (home && *home) return std::string(home) + "/.cache/xkernels/cl";
    return {};
}

#if XK_WITH_OPENCL
namespace detail {

const char* cl_error_name(cl_int rc) noexcept {
    switch (rc) {
#define XK_CL_ERR(x) case x: return #x;
        XK_CL_ERR(CL_SUCCESS) XK_CL_ERR(CL_DEVICE_NOT_FOUND) XK_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
        XK_CL_ERR(CL_COMPILER_NOT_AVAILABLE) XK_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        XK_CL_ERR(CL_OUT_OF_RESOURCES) XK_CL_ERR(CL_OUT_OF_HOST_MEMORY) XK_CL_ERR(CL_PROFILING_INFO_NOT_AVAILABLE)
        XK_CL_ERR(CL_MEM_COPY_OVERLAP) XK_CL_ERR(CL_IMAGE_FORMAT_MISMATCH) XK_CL_ERR(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        XK_CL_ERR(CL_BUILD_PROGRAM_FAILURE) XK_CL_ERR(CL_MAP_FAILURE) XK_CL_ERR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        XK_CL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST) XK_CL_ERR(CL_COMPILE_PROGRAM_FAILURE)
        XK_CL_ERR(CL_LINKER_NOT_AVAILABLE) XK_CL_ERR(CL_LINK_PROGRAM_FAILURE) XK_CL_ERR(CL_DEVICE_PARTITION_FAILED)
        XK_CL_ERR(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) XK_CL_ERR(CL_INVALID_VALUE) XK_CL_ERR(CL_INVALID_DEVICE_TYPE)
        XK_CL_ERR(CL_INVALID_PLATFORM) XK_CL_ERR(CL_INVALID_DEVICE) XK_CL_ERR(CL_INVALID_CONTEXT)
        XK_CL_ERR(CL_INVALID_QUEUE_PROPERTIES) XK_CL_ERR(CL_INVALID_COMMAND_QUEUE) XK_CL_ERR(CL_INVALID_HOST_PTR)
        XK_CL_ERR(CL_INVALID_MEM_OBJECT) XK_CL_ERR(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) XK_CL_ERR(CL_INVALID_IMAGE_SIZE)
        XK_CL_ERR(CL_INVALID_SAMPLER) XK_CL_ERR(CL_INVALID_BINARY) XK_CL_ERR(CL_INVALID_BUILD_OPTIONS)
        XK_CL_ERR(CL_INVALID_PROGRAM) XK_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE) XK_CL_ERR(CL_INVALID_KERNEL_NAME)
        XK_CL_ERR(CL_INVALID_KERNEL_DEFINITION) XK_CL_ERR(CL_INVALID_KERNEL) XK_CL_ERR(CL_INVALID_ARG_INDEX)
        XK_CL_ERR(CL_INVALID_ARG_VALUE) XK_CL_ERR(CL_INVALID_ARG_SIZE) XK_CL_ERR(CL_INVALID_KERNEL_ARGS)
        XK_CL_ERR(CL_INVALID_WORK_DIMENSION) XK_CL_ERR(CL_INVALID_WORK_GROUP_SIZE) XK_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
        XK_CL_ERR(CL_INVALID_GLOBAL_OFFSET) XK_CL_ERR(CL_INVALID_EVENT_WAIT_LIST) XK_CL_ERR(CL_INVALID_EVENT)
        XK_CL_ERR(CL_INVALID_OPERATION) XK_CL_ERR(CL_INVALID_GL_OBJECT) XK_CL_ERR(CL_INVALID_BUFFER_SIZE)
        XK_CL_ERR(CL_INVALID_MIP_LEVEL) XK_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE) XK_CL_ERR(CL_INVALID_PROPERTY)
        XK_CL_ERR(CL_INVALID_IMAGE_DESCRIPTOR) XK_CL_ERR(CL_INVALID_COMPILER_OPTIONS) XK_CL_ERR(CL_INVALID_LINKER_OPTIONS)
        XK_CL_ERR(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef XK_CL_ERR
        default: break;
    }
    thread_local char buf[32];
    std::snprintf(buf, sizeof buf, "CL error %d", static_cast<int>(rc));
    return buf;
}

void throw_cl(const char* where, const char* call, cl_int rc) {
    const bool oom = rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES || rc == CL_OUT_OF_HOST_MEMORY;
    throw Error(oom ? Status::out_of_memory : Status::runtime_error,
                std::string(where) + ": " + call + " failed: " + cl_error_name(rc));
}

ContextImpl::~ContextImpl() {
    if (queue) clFinish(queue);
    release_scratch_locked();
    release_programs(*this);
    alloc.reset();
    if (queue) clReleaseCommandQueue(queue);
    if (context) clReleaseContext(context);
}

void ContextImpl::release_scratch_locked() {
    if (scratch_mem) clReleaseMemObject(scratch_mem);
    // Commands still queued that use the block run before any later user (one in-order queue).
    if (scratch_block) alloc->free(scratch_block, {});
    scratch_mem = nullptr;
    scratch_block = nullptr;
    scratch_bytes = 0;
}

ScratchLease::ScratchLease(const Context& ctx, int64_t bytes) : lock_(ctx.impl()->scratch_mu) {
    ContextImpl& c = *ctx.impl();
    if (c.scratch_bytes < bytes) {
        c.release_scratch_locked();
        // Grow by at least a quarter: a few sizes in turn settle on one block.
        const int64_t want = std::max(bytes, c.scratch_bytes + c.scratch_bytes / 4);
        c.scratch_block = c.alloc->allocate(want);
        cl_buffer_region region{static_cast<size_t>(c.scratch_block->offset), static_cast<size_t>(want)};
        cl_int rc = CL_SUCCESS;
        cl_mem m = clCreateSubBuffer(c.scratch_block->seg->mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &rc);
        if (rc != CL_SUCCESS || !m) {
            c.alloc->free(c.scratch_block, {});
            c.scratch_block = nullptr;
            throw_cl("xk::gpu scratch", "clCreateSubBuffer", rc);
        }
        c.scratch_mem = m;
        c.scratch_bytes = want;
        ++c.scratch_grows;
    }
    mem_ = c.scratch_mem;
}

ScratchStats scratch_stats(const Context& ctx) {
    ContextImpl& c = *ctx.impl();
    std::lock_guard<std::mutex> lk(c.scratch_mu);
    return {c.scratch_bytes, c.scratch_grows};
}

BufferImpl::~BufferImpl() {
    if (mem) clReleaseMemObject(mem);
    if (block) ctx->alloc->free(block, std::move(uses));
}

cl_context cl_ctx(const Context& c) { return c.impl()->context; }
cl_device_id cl_dev(const Context& c) { return c.impl()->device; }
cl_command_queue cl_queue(const Context& c) { return c.impl()->queue; }
cl_platform_id cl_platform(const Context& c) { return c.impl()->platform; }
cl_mem cl_buffer(const Buffer& b) { return b.impl() ? b.impl()->mem : nullptr; }
Event make_event(cl_event e) { return EventImpl::make(e); }
cl_event cl_event_of(const Event& e) {
    const auto& p = EventImpl::get(e);
    return p ? p->ev : nullptr;
}

Event enqueue(const Context& ctx, cl_kernel k, cl_uint dims, const size_t* global, const size_t* local,
              const char* what) {
    cl_event ev = nullptr;
    check_cl(clEnqueueNDRangeKernel(ctx.impl()->queue, k, dims, nullptr, global, local, 0, nullptr, &ev), what,
             "clEnqueueNDRangeKernel");
    return make_event(ev);
}

void check_buffer_context(const char* fn, const char* arg, const Context& ctx, const Buffer& b) {
    if (!b.impl()) xk::detail::fail_arg(fn, arg, "(empty buffer)", "must be a buffer of bytes > 0");
    if (b.impl()->ctx != ctx.impl())
        xk::detail::fail_arg(fn, arg, "(buffer of another context)",
                             "belongs to another gpu::Context (device " + b.impl()->ctx->info.name +
                                 "): buffers work only with the context that allocated them");
}

}  // namespace detail

using detail::check_cl;

namespace {
const char* kCtx = "xk::gpu::Context";

std::shared_ptr<detail::ContextImpl> open_context(int index) {
    std::string err;
    const auto devs = devices(&err);
    if (devs.empty()) throw Error(Status::unsupported, std::string(kCtx) + ": no OpenCL device (" + err + ")");
    if (index < 0 || index >= static_cast<int>(devs.size()))
        xk::detail::fail_arg(kCtx, "device_index", std::to_string(index),
                             "must be in [0, " + std::to_string(devs.size() - 1) + "] (devices: " + device_list(devs) + ")");
    auto c = std::make_shared<detail::ContextImpl>();
    c->info = devs[static_cast<size_t>(index)];
    cl_uint np = 0;
    check_cl(clGetPlatformIDs(0, nullptr, &np), kCtx, "clGetPlatformIDs");
    std::vector<cl_platform_id> plats(np);
    check_cl(clGetPlatformIDs(np, plats.data(), nullptr), kCtx, "clGetPlatformIDs");
    if (c->info.platform_index >= static_cast<int>(np)) throw Error(Status::runtime_error, std::string(kCtx) + ": platform list changed");
    c->platform = plats[static_cast<size_t>(c->info.platform_index)];
    cl_uint nd = 0;
    check_cl(clGetDeviceIDs(c->platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd), kCtx, "clGetDeviceIDs");
    std::vector<cl_device_id> ds(nd);
    check_cl(clGetDeviceIDs(c->platform, CL_DEVICE_TYPE_ALL, nd, ds.data(), nullptr), kCtx, "clGetDeviceIDs");
    if (c->info.device_index >= static_cast<int>(nd)) throw Error(Status::runtime_error, std::string(kCtx) + ": device list changed");
    c->device = ds[static_cast<size_t>(c->info.device_index)];
    const cl_context_properties props[] = {CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(c->platform), 0};
    cl_int rc = CL_SUCCESS;
    c->context = clCreateContext(props, 1, &c->device, nullptr, nullptr, &rc);
    check_cl(rc, kCtx, "clCreateContext");
    const cl_queue_properties qprops[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    c->queue = clCreateCommandQueueWithProperties(c->context, c->device, qprops, &rc);
    if (rc != CL_SUCCESS || !c->queue)  // OpenCL 1.2 platforms
        c->queue = clCreateCommandQueue(c->context, c->device, CL_QUEUE_PROFILING_ENABLE, &rc);
    check_cl(rc, kCtx, "clCreateCommandQueue");
    cl_uint align_bits = 0;
    clGetDeviceInfo(c->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, nullptr);
    c->alloc = std::make_unique<detail::CachingAllocator>(c->context, c->info.global_mem_bytes, c->info.max_alloc_bytes,
                                                          static_cast<int64_t>(align_bits / 8));
    return c;
}

const char* kBuf = "xk::gpu::Buffer";

void check_range(const char* fn, const Buffer& b, int64_t bytes, int64_t offset) {
    xk::detail::check_nonnegative(fn, "bytes", bytes);
    xk::detail::check_nonnegative(fn, "offset", offset);
    int64_t end = 0;
    if (__builtin_add_overflow(bytes, offset, &end) || end > b.bytes())
        xk::detail::fail_arg(fn, "bytes", std::to_string(bytes),
                             "at offset=" + std::to_string(offset) + " exceeds the buffer's " + std::to_string(b.bytes()) +
                                 " bytes");
}
}  // namespace

Context::Context() : impl_(open_context(selected_device_index())) {}
Context::Context(int device_index) : impl_(open_context(device_index)) {}
const DeviceInfo& Context::device() const { return impl_->info; }
void Context::finish() const { check_cl(clFinish(impl_->queue), kCtx, "clFinish"); }
void Context::flush() const { check_cl(clFlush(impl_->queue), kCtx, "clFlush"); }
MemoryStats Context::memory_stats() const { return impl_->alloc->stats(); }
void Context::reset_peak_stats() const { impl_->alloc->reset_peak(); }
void Context::empty_cache() const {
    {
        std::lock_guard<std::mutex> lk(impl_->scratch_mu);
        impl_->release_scratch_locked();
    }
    impl_->alloc->empty_cache();
}
void Context::set_memory_limit(int64_t bytes) const {
    xk::detail::check_nonnegative("xk::gpu::Context::set_memory_limit", "bytes", bytes);
    impl_->alloc->set_limit(bytes);
}
int64_t Context::memory_limit() const { return impl_->alloc->limit(); }

// ---- Event -------------------------------------------------------------------------------------
void Event::wait() const {
    if (impl_) check_cl(clWaitForEvents(1, &impl_->ev), "xk::gpu::Event::wait", "clWaitForEvents");
}
bool Event::complete() const {
    if (!impl_) return true;
    cl_int st = CL_QUEUED;
    check_cl(clGetEventInfo(impl_->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, nullptr),
             "xk::gpu::Event::complete", "clGetEventInfo");
    return st <= CL_COMPLETE;
}
static int64_t prof(const std::shared_ptr<detail::EventImpl>& e, cl_profiling_info what, const char* fn) {
    if (!e) xk::detail::fail_arg(fn, "event", "(empty)", "has no command to time");
    check_cl(clWaitForEvents(1, &e->ev), fn, "clWaitForEvents");
    cl_ulong t = 0;
    check_cl(clGetEventProfilingInfo(e->ev, what, sizeof t, &t, nullptr), fn, "clGetEventProfilingInfo");
    return static_cast<int64_t>(t);
}
int64_t Event::start_ns() const { return prof(impl_, CL_PROFILING_COMMAND_START, "xk::gpu::Event::start_ns"); }
int64_t Event::end_ns() const { return prof(impl_, CL_PROFILING_COMMAND_END, "xk::gpu::Event::end_ns"); }

// ---- Buffer ------------------------------------------------------------------------------------
Buffer::Buffer(const Context& ctx, int64_t bytes) {
    if (!ctx.impl()) xk::detail::fail_arg(kBuf, "context", "(empty)", "must be a gpu::Context");
    xk::detail::check_nonnegative(kBuf, "bytes", bytes);
    if (bytes == 0) return;
    auto b = std::make_shared<detail::BufferImpl>();
    b->ctx = ctx.impl();
    b->block = ctx.impl()->alloc->allocate(bytes);
    b->bytes = bytes;
    cl_buffer_region region{static_cast<size_t>(b->block->offset), static_cast<size_t>(bytes)};
    cl_int rc = CL_SUCCESS;
    b->mem = clCreateSubBuffer(b->block->seg->mem, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region, &rc);
    if (rc != CL_SUCCESS) {
        b->mem = nullptr;
        detail::throw_cl(kBuf, "clCreateSubBuffer", rc);  // the block goes back through ~BufferImpl
    }
    impl_ = std::move(b);
}

int64_t Buffer::bytes() const { return impl_ ? impl_->bytes : 0; }

Context Buffer::context() const {
    if (!impl_) xk::detail::fail_arg("xk::gpu::Buffer::context", "buffer", "(empty)", "has no context");
    return Context(impl_->ctx);
}

void Buffer::write(const void* src, int64_t bytes, int64_t offset) const {
    check_range("xk::gpu::Buffer::write", *this, bytes, offset);
    if (bytes == 0) return;
    xk::detail::check_not_null("xk::gpu::Buffer::write", "src", src);
    check_cl(clEnqueueWriteBuffer(impl_->ctx->queue, impl_->mem, CL_TRUE, static_cast<size_t>(offset),
                                  static_cast<size_t>(bytes), src, 0, nullptr, nullptr),
             "xk::gpu::Buffer::write", "clEnqueueWriteBuffer");
}
Event Buffer::write_async(const void* src, int64_t bytes, int64_t offset) const {
    check_range("xk::gpu::Buffer::write_async", *this, bytes, offset);
    if (bytes == 0) return {};
    xk::detail::check_not_null("xk::gpu::Buffer::write_async", "src", src);
    cl_event ev = nullptr;
    check_cl(clEnqueueWriteBuffer(impl_->ctx->queue, impl_->mem, CL_FALSE, static_cast<size_t>(offset),
                                  static_cast<size_t>(bytes), src, 0, nullptr, &ev),
             "xk::gpu::Buffer::write_async", "clEnqueueWriteBuffer");
    return detail::make_event(ev);
}
void Buffer::read(void* dst, int64_t bytes, int64_t offset) const {
    check_range("xk::gpu::Buffer::read", *this, bytes, offset);
    if (bytes == 0) return;
    xk::detail::check_not_null("xk::gpu::Buffer::read", "dst", dst);
    check_cl(clEnqueueReadBuffer(impl_->ctx->queue, impl_->mem, CL_TRUE, static_cast<size_t>(offset),
                                 static_cast<size_t>(bytes), dst, 0, nullptr, nullptr),
             "xk::gpu::Buffer::read", "clEnqueueReadBuffer");
}
Event Buffer::read_async(void* dst, int64_t bytes, int64_t offset) const {
    check_range("xk::gpu::Buffer::read_async", *this, bytes, offset);
    if (bytes == 0) return {};
    xk::detail::check_not_null("xk::gpu::Buffer::read_async", "dst", dst);
    cl_event ev = nullptr;
    check_cl(clEnqueueReadBuffer(impl_->ctx->queue, impl_->mem, CL_FALSE, static_cast<size_t>(offset),
                                 static_cast<size_t>(bytes), dst, 0, nullptr, &ev),
             "xk::gpu::Buffer::read_async", "clEnqueueReadBuffer");
    return detail::make_event(ev);
}
Event Buffer::copy_from(const Buffer& src, int64_t bytes, int64_t src_offset, int64_t dst_offset) const {
    const char* fn = "xk::gpu::Buffer::copy_from";
    check_range(fn, *this, bytes, dst_offset);
    check_range(fn, src, bytes, src_offset);
    if (bytes == 0) return {};
    if (src.impl_->ctx != impl_->ctx)
        xk::detail::fail_arg(fn, "src", "(buffer of another context)", "belongs to another gpu::Context");
    if (src.impl_ == impl_ && src_offset < dst_offset + bytes && dst_offset < src_offset + bytes)
        xk::detail::fail_arg(fn, "src_offset", std::to_string(src_offset), "overlaps the destination range");
    cl_event ev = nullptr;
    check_cl(clEnqueueCopyBuffer(impl_->ctx->queue, src.impl_->mem, impl_->mem, static_cast<size_t>(src_offset),
                                 static_cast<size_t>(dst_offset), static_cast<size_t>(bytes), 0, nullptr, &ev),
             fn, "clEnqueueCopyBuffer");
    return detail::make_event(ev);
}
Event Buffer::fill_zero() const {
    if (!impl_) return {};
    const cl_uchar zero = 0;
    cl_event ev = nullptr;
    check_cl(clEnqueueFillBuffer(impl_->ctx->queue, impl_->mem, &zero, 1, 0, static_cast<size_t>(impl_->bytes), 0,
                                 nullptr, &ev),
             "xk::gpu::Buffer::fill_zero", "clEnqueueFillBuffer");
    return detail::make_event(ev);
}
void Buffer::record_use(const Event& e) const {
    if (!impl_ || !e.valid()) return;
    cl_event ev = detail::cl_event_of(e);
    check_cl(clRetainEvent(ev), "xk::gpu::Buffer::record_use", "clRetainEvent");
    std::lock_guard<std::mutex> lk(impl_->uses_mu);
    impl_->uses.push_back(ev);
}

#else  // !XK_WITH_OPENCL ----------------------------------------------------------------------------

namespace {
[[noreturn]] void no_cl(const char* fn) {
    throw Error(Status::unsupported, std::string(fn) + ": built without OpenCL (XK_WITH_OPENCL=OFF)");
}
}  // namespace
Context::Context() { no_cl("xk::gpu::Context"); }
Context::Context(int) { no_cl("xk::gpu::Context"); }
const DeviceInfo& Context::device() const { no_cl("xk::gpu::Context"); }
void Context::finish() const { no_cl("xk::gpu::Context"); }
void Context::flush() const { no_cl("xk::gpu::Context"); }
MemoryStats Context::memory_stats() const { no_cl("xk::gpu::Context"); }
void Context::reset_peak_stats() const { no_cl("xk::gpu::Context"); }
void Context::empty_cache() const { no_cl("xk::gpu::Context"); }
void Context::set_memory_limit(int64_t) const { no_cl("xk::gpu::Context"); }
int64_t Context::memory_limit() const { no_cl("xk::gpu::Context"); }
void Event::wait() const {}
bool Event::complete() const { return true; }
int64_t Event::start_ns() const { no_cl("xk::gpu::Event"); }
int64_t Event::end_ns() const { no_cl("xk::gpu::Event"); }
Buffer::Buffer(const Context&, int64_t) { no_cl("xk::gpu::Buffer"); }
int64_t Buffer::bytes() const { return 0; }
Context Buffer::context() const { no_cl("xk::gpu::Buffer"); }
void Buffer::write(const void*, int64_t, int64_t) const { no_cl("xk::gpu::Buffer"); }
Event Buffer::write_async(const void*, int64_t, int64_t) const { no_cl("xk::gpu::Buffer"); }
void Buffer::read(void*, int64_t, int64_t) const { no_cl("xk::gpu::Buffer"); }
Event Buffer::read_async(void*, int64_t, int64_t) const { no_cl("xk::gpu::Buffer"); }
Event Buffer::copy_from(const Buffer&, int64_t, int64_t, int64_t) const { no_cl("xk::gpu::Buffer"); }
Event Buffer::fill_zero() const { no_cl("xk::gpu::Buffer"); }
void Buffer::record_use(const Event&) const { no_cl("xk::gpu::Buffer"); }
#endif

}  // namespace xk::gpu
