// The caching device allocator (see allocator.hpp for the policy).
#if XK_WITH_OPENCL
#include "gpu/allocator.hpp"

#include <algorithm>
#include <string>

namespace xk::gpu::detail {

namespace {
int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
std::string mib(int64_t b) { return std::to_string(b) + " bytes (" + std::to_string(b >> 20) + " MiB)"; }
}  // namespace

CachingAllocator::CachingAllocator(cl_context ctx, int64_t global_mem, int64_t max_alloc, int64_t base_align_bytes)
    : ctx_(ctx), global_mem_(global_mem), max_alloc_(max_alloc), round_(std::max<int64_t>(kRound, base_align_bytes)) {}

CachingAllocator::~CachingAllocator() {
    for (Block* b : pending_)
        for (cl_event e : b->uses) clReleaseEvent(e);
    // Every Block still reachable hangs off a segment: walk each segment's chain from its head.
    std::set<Block*> all;
    for (Block* b : small_pool_) all.insert(b);
    for (Block* b : large_pool_) all.insert(b);
    for (Block* b : pending_) all.insert(b);
    for (Block* b : all) delete b;
    for (auto& s : segments_) clReleaseMemObject(s->mem);
}

int64_t CachingAllocator::round_size(int64_t bytes) const { return round_up(std::max<int64_t>(bytes, 1), round_); }

CachingAllocator::Block* CachingAllocator::find_free(Pool& pool, int64_t size) {
    Block key;
    key.size = size;
    key.seg = nullptr;
    key.offset = 0;
    auto it = pool.lower_bound(&key);
    if (it == pool.end()) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(int64_t seg_size, bool small) {
    const int64_t lim = limit_ > 0 ? limit_ : global_mem_;
    if (lim > 0 && st_.reserved_bytes + seg_size > lim) return nullptr;
    cl_int rc = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(ctx_, CL_MEM_READ_WRITE, static_cast<size_t>(seg_size), nullptr, &rc);
    if (rc != CL_SUCCESS || !mem) {
        if (rc == CL_MEM_OBJECT_ALLOCATION_FAILURE || rc == CL_OUT_OF_RESOURCES || rc == CL_OUT_OF_HOST_MEMORY ||
            rc == CL_INVALID_BUFFER_SIZE)
            return nullptr;
        throw_cl("xk::gpu::Buffer", "clCreateBuffer", rc);
    }
    auto seg = std::make_unique<Segment>();
    seg->mem = mem;
    seg->size = seg_size;
    seg->small = small;
    Block* b = new Block;
    b->seg = seg.get();
    b->offset = 0;
    b->size = seg_size;
    segments_.push_back(std::move(seg));
    st_.reserved_bytes += seg_size;
    st_.peak_reserved_bytes = std::max(st_.peak_reserved_bytes, st_.reserved_bytes);
    ++st_.num_segments;
    return b;
}

void CachingAllocator::fail_oom(int64_t bytes, int64_t seg_size, cl_int rc) {
    ++st_.num_ooms;
    const int64_t lim = limit_ > 0 ? limit_ : global_mem_;
    throw Error(Status::out_of_memory,
                "xk::gpu::Buffer: bytes=" + std::to_string(bytes) + " out of device memory: a segment of " +
                    mib(seg_size) + " did not fit (allocated " + mib(st_.allocated_bytes) + ", reserved " +
                    mib(st_.reserved_bytes) + ", limit " + mib(lim) + ")" +
                    (rc != CL_SUCCESS ? std::string(", clCreateBuffer: ") + cl_error_name(rc) : std::string()) +
                    "; the cache was emptied and the allocation retried");
}

CachingAllocator::Block* CachingAllocator::allocate(int64_t bytes) {
    if (bytes > max_alloc_)
        throw Error(Status::invalid_argument, "xk::gpu::Buffer: bytes=" + std::to_string(bytes) +
                                                  " exceeds the device's max allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE = " +
                                                  std::to_string(max_alloc_) + ")");
    std::lock_guard<std::mutex> lk(mu_);
    process_pending();
    const int64_t size = round_size(bytes);
    const bool small = size <= kSmallSize;
    Pool& pool = pool_of(small);
    Block* b = find_free(pool, size);
    if (b) {
        ++st_.num_cache_hits;
    } else {
        int64_t seg_size = small ? kSmallSegment : (size < kMinLargeAlloc ? kLargeSegment : round_up(size, kSegmentRound));
        if (seg_size > max_alloc_) seg_size = size;
        b = new_segment(seg_size, small);
        if (!b) {
            release_cached();  // empty the cache, retry once
            b = new_segment(seg_size, small);
            if (!b && seg_size != size) {  // a smaller exact-size segment may still fit
                seg_size = size;
                b = new_segment(seg_size, small);
            }
            if (!b) fail_oom(bytes, seg_size, CL_SUCCESS);
        }
    }
    // split
    const int64_t rest = b->size - size;
    if ((small && rest >= kRound) || (!small && rest > kSmallSize)) {
        Block* r = new Block;
        r->seg = b->seg;
        r->offset = b->offset + size;
        r->size = rest;
        r->prev = b;
        r->next = b->next;
        if (b->next) b->next->prev = r;
        b->next = r;
        b->size = size;
        pool.insert(r);
    }
    b->allocated = true;
    st_.allocated_bytes += b->size;
    st_.peak_allocated_bytes = std::max(st_.peak_allocated_bytes, st_.allocated_bytes);
    ++st_.num_allocs;
    return b;
}

void CachingAllocator::free_block(Block* b) {
    b->allocated = false;
    b->pending = false;
    Pool& pool = pool_of(b->seg->small);
    auto mergeable = [](Block* n) { return n && !n->allocated && !n->pending; };
    if (mergeable(b->prev)) {
        Block* p = b->prev;
        pool.erase(p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        delete b;
        b = p;
    }
    if (mergeable(b->next)) {
        Block* n = b->next;
        pool.erase(n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        delete n;
    }
    pool.insert(b);
}

void CachingAllocator::free(Block* b, std::vector<cl_event> uses) {
    std::lock_guard<std::mutex> lk(mu_);
    st_.allocated_bytes -= b->size;
    ++st_.num_frees;
    if (!uses.empty()) {
        b->allocated = false;
        b->pending = true;
        b->uses = std::move(uses);
        pending_.push_back(b);
        return;
    }
    free_block(b);
}

void CachingAllocator::process_pending() {
    for (size_t i = 0; i < pending_.size();) {
        Block* b = pending_[i];
        bool done = true;
        for (cl_event e : b->uses) {
            cl_int status = CL_QUEUED;
            if (clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr) != CL_SUCCESS)
                status = CL_COMPLETE;  // an event we cannot query anymore: treat as done
            if (status > CL_COMPLETE) {  // CL_COMPLETE = 0; errors are negative (also terminal)
                done = false;
                break;
            }
        }
        if (!done) {
            ++i;
            continue;
        }
        for (cl_event e : b->uses) clReleaseEvent(e);
        b->uses.clear();
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        free_block(b);
    }
}

void CachingAllocator::release_cached() {
    process_pending();
    for (auto it = segments_.begin(); it != segments_.end();) {
        Segment* s = it->get();
        Pool& pool = pool_of(s->small);
        Block* whole = nullptr;
        for (Block* b : pool)
            if (b->seg == s && b->offset == 0 && b->size == s->size) {
                whole = b;
                break;
            }
        if (!whole) {
            ++it;
            continue;
        }
        pool.erase(whole);
        delete whole;
        clReleaseMemObject(s->mem);
        st_.reserved_bytes -= s->size;
        it = segments_.erase(it);
    }
}

void CachingAllocator::empty_cache() {
    std::lock_guard<std::mutex> lk(mu_);
    release_cached();
}

MemoryStats CachingAllocator::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    MemoryStats s = st_;
    s.num_pending_blocks = static_cast<int64_t>(pending_.size());
    return s;
}

void CachingAllocator::reset_peak() {
    std::lock_guard<std::mutex> lk(mu_);
    st_.peak_allocated_bytes = st_.allocated_bytes;
    st_.peak_reserved_bytes = st_.reserved_bytes;
}

void CachingAllocator::set_limit(int64_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    limit_ = bytes;
}

int64_t CachingAllocator::limit() const {
    std::lock_guard<std::mutex> lk(mu_);
    return limit_ > 0 ? limit_ : global_mem_;
}

}  // namespace xk::gpu::detail
#endif
