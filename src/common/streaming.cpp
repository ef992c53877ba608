#include "common/streaming.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <emmintrin.h>

#include "xk/isa.hpp"

namespace xk::detail {
namespace {
std::atomic<int64_t> g_override{-1};

int64_t default_threshold() {
    static const int64_t t = [] {
        if (const char* e = std::getenv("XK_NT_STORE_THRESHOLD")) {  // bytes; for tuning
            char* end = nullptr;
            const long long v = std::strtoll(e, &end, 10);
            if (end && end != e && *end == '\0' && v >= 0) return static_cast<int64_t>(v);
        }
        // The share of the L3 one CPU can count on, at most half of it and at most 32 MiB: an
        // output past that is evicted before its consumer reads it on a shared last-level cache
        // (the Xeon: 300 MiB shared by 16 CPUs; with its L3 / 2 = 150 MiB the 32-64 MiB bench
        // outputs went through regular stores and the norms, RoPE and GLU ran at 66-83% of
        // copy, 88-118% streamed).
        const CpuInfo& c = cpu_info();
        const int64_t share = c.l3_bytes / std::max(1, c.l3_shared_by);
        return std::max<int64_t>(int64_t(8) << 20, std::min({c.l3_bytes / 2, share, int64_t(32) << 20}));
    }();
    return t;
}
}  // namespace

int64_t nt_store_threshold() {
    const int64_t o = g_override.load(std::memory_order_relaxed);
    return o >= 0 ? o : default_threshold();
}

void zero_fill(void* p, size_t bytes, bool nt) {
    auto* c = static_cast<char*>(p);
    if (!nt || bytes < 64) {
        std::memset(c, 0, bytes);
        return;
    }
    const size_t head = (16 - reinterpret_cast<uintptr_t>(c) % 16) % 16;
    std::memset(c, 0, head);
    const size_t body = (bytes - head) / 16 * 16;
    const __m128i z = _mm_setzero_si128();
    for (size_t i = 0; i < body; i += 16) _mm_stream_si128(reinterpret_cast<__m128i*>(c + head + i), z);
    std::memset(c + head + body, 0, bytes - head - body);
}

void set_nt_store_threshold(int64_t bytes) { g_override.store(bytes < 0 ? -1 : bytes, std::memory_order_relaxed); }

}  // namespace xk::detail
