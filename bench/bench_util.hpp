// Helpers shared by every bench/bench_<family>.cpp: naming, counters, aligned and DRAM-resident
// buffers, deterministic fills, thread-count control of xk and of the peers.
//
// Naming rule (docs/benchmarks.md): <family>/<dtype>/<provider>/<shape>[/<k>:<v>...] with provider
// one of xk, onednn, openblas, libxsmm, clblast, torch. Library threads are a `nt:<N>` part
// (xk::set_num_threads + the peers' own setting, through set_threads); Google Benchmark's own
// ->Threads(N) appends `threads:<N>` (N benchmark threads each running the kernel).
// Counters: GFLOPS (compute-bound) or GBPS (memory-bound), set with set_gflops / set_gbps; both
// are rate counters, so the console, the JSON output and the ours-vs-peer table carry GFLOP/s or
// GB/s (10^9 per second) directly.
#pragma once
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "common/parallel.hpp"
#include "xk/runtime.hpp"
#include "xk/types.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

extern "C" void openblas_set_num_threads(int num_threads);  // OpenBLAS (cblas.h), linked in every bench

namespace xk::bench {

// ---- naming -----------------------------------------------------------------------------------
// join_name({"eltwise", "f32", "xk", "axpby", "n:" + std::to_string(n)}) == "eltwise/f32/xk/axpby/n:4096"
inline std::string join_name(std::initializer_list<std::string> parts) {
    std::string s;
    for (const auto& p : parts) {
        if (p.empty()) continue;
        if (!s.empty()) s += '/';
        s += p;
    }
    return s;
}

// ---- counters ---------------------------------------------------------------------------------
// Call after the timing loop, in every benchmark thread: each thread adds its own work, Google
// Benchmark sums the threads and divides by the time (use UseRealTime() for multi-threaded runs,
// so that the rate is the aggregate one and not a per-CPU-second one).
inline void set_gflops(benchmark::State& state, double flops_per_iter) {
    state.counters["GFLOPS"] =
        benchmark::Counter(flops_per_iter * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}
// Bytes moved per iteration: bytes read + bytes written (STREAM convention: the read-for-ownership
// of a written line is not counted).
inline void set_gbps(benchmark::State& state, double bytes_per_iter) {
    state.counters["GBPS"] =
        benchmark::Counter(bytes_per_iter * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

// ---- environment ------------------------------------------------------------------------------
inline int64_t env_int(const char* name, int64_t fallback) {
    const char* e = std::getenv(name);
    if (!e || !*e) return fallback;
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    return (end && *end == '\0') ? static_cast<int64_t>(v) : fallback;
}

// Working set a memory-bound benchmark streams through so that its data comes from DRAM and not
// from the last-level cache: XK_BENCH_ROTATE_MB (MiB), default 1024 (1 GiB, well above any L3).
inline size_t rotate_bytes() {
    static const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, env_int("XK_BENCH_ROTATE_MB", 1024))) << 20;
    return bytes;
}

// Whether XK_BENCH_QUICK=1 (the README's quick run: short min time; benches may also trim sweeps).
inline bool quick() {
    static const bool q = env_int("XK_BENCH_QUICK", 0) != 0;
    return q;
}

// Library thread counts a benchmark should sweep (the `nt:<N>` part): XK_BENCH_THREADS="1,2,8"
// when set, else {1, 2} (just {1} on a one-CPU machine).
inline std::vector<int> thread_counts() {
    std::vector<int> v;
    if (const char* e = std::getenv("XK_BENCH_THREADS")) {
        std::string s(e);
        size_t pos = 0;
        while (pos <= s.size()) {
            const size_t comma = std::min(s.find(',', pos), s.size());
            const int n = std::atoi(s.substr(pos, comma - pos).c_str());
            if (n > 0 && std::find(v.begin(), v.end(), n) == v.end()) v.push_back(n);
            pos = comma + 1;
        }
    }
    if (v.empty()) {
        v.push_back(1);
        if (xk::get_num_threads() >= 2) v.push_back(2);
    }
    return v;
}

// ---- threads ----------------------------------------------------------------------------------
// Sets the thread count of xk, OpenBLAS and OpenMP (oneDNN and libxsmm use the calling thread's
// OpenMP setting) at once, so every provider of one benchmark runs with the same number.
inline void set_threads(int n) {
    xk::set_num_threads(n);
    openblas_set_num_threads(n);
#if defined(_OPENMP)
    omp_set_num_threads(n);
#endif
}

// set_threads(n) for a scope; restores the counts that were in effect before.
class ScopedThreads {
public:
    explicit ScopedThreads(int n) : prev_(xk::get_num_threads()) { set_threads(n); }
    ~ScopedThreads() { set_threads(prev_); }
    ScopedThreads(const ScopedThreads&) = delete;
    ScopedThreads& operator=(const ScopedThreads&) = delete;

private:
    int prev_;
};

// ---- aligned memory ---------------------------------------------------------------------------
struct FreeDeleter {
    void operator()(void* p) const noexcept { std::free(p); }
};
template <class T>
using AlignedArray = std::unique_ptr<T[], FreeDeleter>;

// Uninitialised storage for n elements of T, aligned to `alignment` bytes (a power of two >=
// alignof(void*)). Blocks of 2 MiB or more are 2 MiB-aligned and advised as transparent huge
// pages, so DRAM-bandwidth numbers are not TLB-bound.
template <class T>
AlignedArray<T> alloc_aligned(size_t n, size_t alignment = 64) {
    static_assert(std::is_trivially_copyable<T>::value, "alloc_aligned holds trivially copyable types only");
    constexpr size_t huge = size_t(2) << 20;
    const size_t bytes = std::max<size_t>(n * sizeof(T), 1);
    if (bytes >= huge) alignment = std::max(alignment, huge);
    void* p = nullptr;
    if (posix_memalign(&p, alignment, (bytes + alignment - 1) / alignment * alignment) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (bytes >= huge) madvise(p, (bytes + huge - 1) / huge * huge, MADV_HUGEPAGE);  // a hint; failure is harmless
#endif
    return AlignedArray<T>(static_cast<T*>(p));
}

// ---- deterministic fills ----------------------------------------------------------------------
namespace detail {
inline uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
inline double unit(uint64_t seed, uint64_t i) {  // [0, 1)
    return static_cast<double>(splitmix64(seed * 0x100000001b3ull + i) >> 11) * 0x1.0p-53;
}
template <class T>
T from_double(double v) {
    if constexpr (std::is_same<T, xk::bf16>::value) {
        return xk::bf16(static_cast<float>(v));
    } else if constexpr (std::is_integral<T>::value) {
        return static_cast<T>(v < 0 ? v - 0.5 : v + 0.5);  // round half away from zero
    } else {
        return static_cast<T>(v);
    }
}
}  // namespace detail

// p[i] = uniform in [lo, hi] (integers: rounded), a pure function of (seed, i): the same data on
// every run and thread count. Runs on xk's threads (first touch spreads pages like the benchmark).
template <class T>
void fill_uniform(T* p, size_t n, double lo, double hi, uint64_t seed = 1) {
    xk::detail::parallel_for(static_cast<int64_t>(n), int64_t(1) << 18, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) p[i] = detail::from_double<T>(lo + (hi - lo) * detail::unit(seed, uint64_t(i)));
    });
}

template <class T>
void fill_value(T* p, size_t n, T v) {
    xk::detail::parallel_for(static_cast<int64_t>(n), int64_t(1) << 18, [&](int64_t b, int64_t e) {
        std::fill(p + b, p + e, v);
    });
}

// ---- rotating buffers (DRAM-resident operands) ------------------------------------------------
// N copies ("sets") of a benchmark's operands, N chosen so that N * set bytes >= min_total_bytes
// (pass rotate_bytes() for a DRAM case, 0 for a cache-resident case: one set). Each iteration
// takes the next set, so by the time a set comes back its lines have left every cache.
//
//   RotatingBuffers bufs({n * sizeof(float), n * sizeof(float)}, rotate_bytes());   // x, y
//   bufs.fill_uniform<float>(0, -1, 1); bufs.fill_uniform<float>(1, -1, 1);
//   for (auto _ : state) { const size_t s = bufs.next(); run(bufs.get<float>(s, 0), bufs.get<float>(s, 1)); }
//
// Arrays start 4 KiB-aligned plus a 256-byte stagger per array index (so x[i] and y[i] of one set
// never share their low 12 address bits: no 4K-aliasing stalls between loads and stores).
class RotatingBuffers {
public:
    RotatingBuffers(std::vector<size_t> array_bytes, size_t min_total_bytes) : bytes_(std::move(array_bytes)) {
        if (bytes_.empty()) throw std::invalid_argument("RotatingBuffers: no arrays");
        size_t end = 0;
        for (size_t j = 0; j < bytes_.size(); ++j) {
            const size_t start = round_up(end, kPage) + j * kStagger;
            offsets_.push_back(start);
            end = start + bytes_[j];
        }
        set_bytes_ = std::max(round_up(end, kPage), kPage);
        const size_t sets = std::max<size_t>(1, (min_total_bytes + set_bytes_ - 1) / set_bytes_);
        for (size_t s = 0; s < sets; ++s) sets_.push_back(alloc_aligned<unsigned char>(set_bytes_, kPage));
    }

    size_t sets() const { return sets_.size(); }
    size_t set_bytes() const { return set_bytes_; }
    size_t total_bytes() const { return set_bytes_ * sets_.size(); }

    template <class T>
    T* get(size_t set, size_t array) const {
        return reinterpret_cast<T*>(sets_.at(set).get() + offsets_.at(array));
    }
    // The set for this iteration (0, 1, ..., sets()-1, 0, ...).
    size_t next() {
        const size_t s = cursor_;
        cursor_ = (cursor_ + 1 == sets_.size()) ? 0 : cursor_ + 1;
        return s;
    }

    // Fills array `array` of every set (each set with its own seed).
    template <class T>
    void fill_uniform(size_t array, double lo, double hi, uint64_t seed = 1) {
        for (size_t s = 0; s < sets_.size(); ++s)
            bench::fill_uniform(get<T>(s, array), bytes_.at(array) / sizeof(T), lo, hi, seed + 7919 * s + 104729 * array);
    }

private:
    static constexpr size_t kPage = 4096, kStagger = 256;
    static size_t round_up(size_t v, size_t m) { return (v + m - 1) / m * m; }
    std::vector<size_t> bytes_, offsets_;
    size_t set_bytes_ = 0, cursor_ = 0;
    std::vector<AlignedArray<unsigned char>> sets_;
};

// Google Benchmark calls a benchmark function several times (it grows the iteration count until
// the min time is reached): keep its DRAM-sized buffers across those calls. One slot: the buffers
// of the last key stay alive until a call with another key frees them and builds (and init()s)
// new ones. The reference stays valid until such a call. Thread-safe.
inline RotatingBuffers& cached_rotating_buffers(const std::string& key, std::vector<size_t> array_bytes,
                                                size_t min_total_bytes,
                                                const std::function<void(RotatingBuffers&)>& init = nullptr) {
    static std::mutex mu;
    static std::string cached_key;
    static std::unique_ptr<RotatingBuffers> cached;
    std::lock_guard<std::mutex> lock(mu);
    if (!cached || cached_key != key) {
        cached.reset();  // free the old buffers before allocating the new ones
        cached = std::make_unique<RotatingBuffers>(std::move(array_bytes), min_total_bytes);
        if (init) init(*cached);
        cached_key = key;
    }
    return *cached;
}

}  // namespace xk::bench
