// The objects behind Context / Buffer / Event handles (runtime.cpp, program_cache.cpp).
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu/allocator.hpp"
#include "gpu/runtime.hpp"

namespace xk::gpu::detail {

struct ProgramEntry {
    std::mutex build_mu;          // one build per entry, others wait
    cl_program program = nullptr;  // built
    std::string build_error;       // non-empty: the build failed (rethrown for later callers)
    // kernels of this program, per (kernel name, thread)
    std::mutex kernels_mu;
    std::map<std::pair<std::string, std::thread::id>, cl_kernel> kernels;
};

struct ContextImpl {
    DeviceInfo info;
    cl_platform_id platform = nullptr;
    cl_device_id device = nullptr;
    cl_context context = nullptr;
    cl_command_queue queue = nullptr;
    std::unique_ptr<CachingAllocator> alloc;

    std::mutex programs_mu;
    std::unordered_map<std::string, std::shared_ptr<ProgramEntry>> programs;  // key: name \n options \n hash
    std::atomic<int64_t> memory_hits{0}, disk_hits{0}, source_builds{0}, disk_writes{0}, disk_rejects{0};
    std::atomic<int64_t> kernels_created{0};
    // Callers that keep a cl_kernel of this context across calls (ops.cpp's per-thread form cache)
    // check both: uid is unique per ContextImpl of the process, programs_gen grows when the
    // memory program cache is cleared (its kernels released).
    const uint64_t uid = next_uid();
    std::atomic<uint64_t> programs_gen{0};
    static uint64_t next_uid() {
        static std::atomic<uint64_t> n{0};
        return ++n;
    }

    // Scratch device memory kept between calls (split-K partial sums): a block of the allocator and
    // its one sub-buffer, grown on demand, released with the context or by empty_cache().
    std::mutex scratch_mu;
    CachingAllocator::Block* scratch_block = nullptr;
    cl_mem scratch_mem = nullptr;
    int64_t scratch_bytes = 0, scratch_grows = 0;
    void release_scratch_locked();

    ~ContextImpl();
};

struct BufferImpl {
    std::shared_ptr<ContextImpl> ctx;
    CachingAllocator::Block* block = nullptr;
    cl_mem mem = nullptr;  // sub-buffer of the block's segment
    int64_t bytes = 0;
    std::mutex uses_mu;
    std::vector<cl_event> uses;
    ~BufferImpl();
};

struct EventImpl {
    cl_event ev = nullptr;
    explicit EventImpl(cl_event e) : ev(e) {}
    ~EventImpl() {
        if (ev) clReleaseEvent(ev);
    }
    static const std::shared_ptr<EventImpl>& get(const Event& e) { return e.impl_; }
    static Event make(cl_event e) {
        Event r;
        if (e) r.impl_ = std::make_shared<EventImpl>(e);
        return r;
    }
};

void release_programs(ContextImpl& c);  // program_cache.cpp

}  // namespace xk::gpu::detail
