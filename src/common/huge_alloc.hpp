#pragma once
// Allocation of large read-mostly buffers (packed weights) on transparent huge pages.
//
// A decode kernel streams its packed weights once per call from DRAM; on 4 KiB pages every 4 KiB
// of the stream is a TLB miss and a new page for the hardware prefetchers. Zen 4, one core, a
// 1 GiB sweep in 16 MiB calls (CPU time): the read loop 19-20 GB/s on 4 KiB pages against 24-25
// on 2 MiB pages, the int8 WOQ decode loop 16-18 against 24-25. Linux's default THP mode is
// "madvise", so the buffer is asked for by madvise(MADV_HUGEPAGE) (a hint: ignored where THP is
// off). Buffers of >= 2 MiB are 2 MiB aligned and rounded up to whole 2 MiB pages (< 2 MiB more);
// smaller ones 64-byte aligned, as before. (Device Xeon, WOQ M = 1 at 1 and 16 threads: neutral.)
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

namespace xk::detail {

constexpr size_t kHugePageBytes = size_t(2) << 20;

// XK_HUGE_PAGES=0 (read once): no hint, 64-byte alignment (for before / after runs).
inline bool huge_pages_on() {
    static const bool on = [] {
        const char* e = std::getenv("XK_HUGE_PAGES");
        return !(e && *e && std::atoi(e) == 0);
    }();
    return on;
}

// Buffer of at least `bytes` (>= 1), 64-byte aligned, not initialised; free with std::free.
inline void* alloc_huge(size_t bytes) {
    bytes = bytes < 64 ? 64 : (bytes + 63) / 64 * 64;
    const bool huge = bytes >= kHugePageBytes && huge_pages_on();
    const size_t align = huge ? kHugePageBytes : 64;
    const size_t size = huge ? (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes : bytes;
    void* p = nullptr;
    if (posix_memalign(&p, align, size) != 0 || !p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (huge) madvise(p, size, MADV_HUGEPAGE);  // before the first touch: the faults take 2 MiB pages
#endif
    return p;
}

// The same, zero-filled.
inline void* alloc_huge_zeroed(size_t bytes) {
    void* p = alloc_huge(bytes);
    std::memset(p, 0, bytes < 64 ? 64 : (bytes + 63) / 64 * 64);
    return p;
}

}  // namespace xk::detail
