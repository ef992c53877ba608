// The caching device allocator of a gpu::Context (like the CUDA / XPU caching allocators of
// PyTorch and Intel's extension).
//
// - Requests are rounded up to kRound (512 bytes; at least the device's sub-buffer alignment).
// - Two pools: small blocks (<= 1 MiB) are cut from 2 MiB segments; large requests from segments
//   of 20 MiB (requests below 10 MiB) or of the request rounded up to 2 MiB.
// - Best fit: the smallest free block of the pool that holds the request (ties: lowest address);
//   the remainder is split off when it is >= 512 bytes (small pool) or > 1 MiB (large pool).
// - Free: the block merges with free neighbours of its segment.
// - Reuse ordering: every command of a context runs on its one in-order queue, so a block freed
//   on the host is handed out again at once — later commands that use the new owner run after
//   the commands issued for the old owner (queue order, like PyTorch's single-stream case).
//   Commands outside that queue record their events on the buffer (Buffer::record_use): such a
//   block waits in a pending list until every recorded event completed.
// - Out of memory (the memory limit reached, or clCreateBuffer failing with
//   CL_MEM_OBJECT_ALLOCATION_FAILURE / CL_OUT_OF_RESOURCES / CL_OUT_OF_HOST_MEMORY): release
//   every cached segment and retry once; then xk::Error(Status::out_of_memory).
// - empty_cache(): returns segments with no allocated or pending block to OpenCL.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "gpu/runtime.hpp"

namespace xk::gpu::detail {

class CachingAllocator {
public:
    static constexpr int64_t kRound = 512;
    static constexpr int64_t kSmallSize = 1 << 20;        // small-pool requests: <= 1 MiB
    static constexpr int64_t kSmallSegment = 2 << 20;     // small-pool segments
    static constexpr int64_t kLargeSegment = 20 << 20;    // for large requests < kMinLargeAlloc
    static constexpr int64_t kMinLargeAlloc = 10 << 20;
    static constexpr int64_t kSegmentRound = 2 << 20;

    struct Segment;
    struct Block {
        Segment* seg = nullptr;
        int64_t offset = 0, size = 0;
        bool allocated = false, pending = false;
        Block *prev = nullptr, *next = nullptr;
        std::vector<cl_event> uses;  // recorded events (pending blocks)
    };
    struct Segment {
        cl_mem mem = nullptr;
        int64_t size = 0;
        bool small = false;
    };

    CachingAllocator(cl_context ctx, int64_t global_mem, int64_t max_alloc, int64_t base_align_bytes);
    ~CachingAllocator();
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    // A block of at least `bytes` (> 0). Throws xk::Error (invalid_argument past the device's max
    // allocation, out_of_memory when even an emptied cache cannot serve it).
    Block* allocate(int64_t bytes);
    // Returns a block; `uses` (owned, released later) delay its reuse until they completed.
    void free(Block* b, std::vector<cl_event> uses);
    void empty_cache();
    MemoryStats stats() const;
    void reset_peak();
    void set_limit(int64_t bytes);
    int64_t limit() const;
    int64_t round_size(int64_t bytes) const;

private:
    struct BySize {
        bool operator()(const Block* a, const Block* b) const {
            if (a->size != b->size) return a->size < b->size;
            if (a->seg != b->seg) return a->seg < b->seg;
            return a->offset < b->offset;
        }
    };
    using Pool = std::set<Block*, BySize>;

    Pool& pool_of(bool small) { return small ? small_pool_ : large_pool_; }
    Block* find_free(Pool& pool, int64_t size);
    Block* new_segment(int64_t seg_size, bool small);  // null on OOM (limit or CL failure)
    void free_block(Block* b);                          // merge + insert (lock held)
    void process_pending();                             // lock held
    void release_cached();                              // lock held
    [[noreturn]] void fail_oom(int64_t bytes, int64_t seg_size, cl_int rc);

    cl_context ctx_;
    int64_t global_mem_, max_alloc_, round_;
    int64_t limit_ = 0;  // 0 = global_mem_
    mutable std::mutex mu_;
    Pool small_pool_, large_pool_;
    std::vector<Block*> pending_;
    std::vector<std::unique_ptr<Segment>> segments_;
    MemoryStats st_;
};

}  // namespace xk::gpu::detail
