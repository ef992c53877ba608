// Helpers shared by every bench/bench_<family>.cpp: naming, counters, aligned and DRAM-resident
// buffers, deterministic fills, thread-count control of xk and of the peers.
//
// Naming rule (docs/benchmarks.md): <family>/<dtype>/<provider>/<shape>[/<k>:<v>...] with provider
// one of xk, onednn, openblas, libxsmm, clblast, torch. Library threads are a `nt:<N>` part
// (xk::set_num_threads + the peers' own setting, through set_threads); Google Benchmark's own
// ->Threads(N) appends `threads:<N>` (N benchmark threads each running the kernel).
// (bench_gemm names its library threads `threads:<N>`: it never uses ->Threads.)
// Counters: GFLOPS (compute-bound) or GBPS (memory-bound), set with set_gflops / set_gbps; both
// are rate counters, so the console, the JSON output and the ours-vs-peer table carry GFLOP/s or
// GB/s (10^9 per second) directly.
#pragma once
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
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
#include "xk/isa.hpp"
#include "xk/runtime.hpp"
#include "xk/types.hpp"

#if defined(_OPENMP)
#include <omp.h>
#else
extern "C" void omp_set_num_threads(int num_threads);  // the OpenMP runtime oneDNN runs on, linked in every bench
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
    omp_set_num_threads(n);  // before a oneDNN primitive is created: it sizes its work for this count
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

// ---- the copy yardstick of memory-bound rows --------------------------------------------------
// A copy y = x with non-temporal stores (the STREAM-style copy that memory-bound targets are stated
// against; bench_peak's copy_nt measures the same) over two arrays of rotate_bytes() / 4 each
// (256 MiB by default), run on xk's current thread count.
namespace detail {
__attribute__((target("avx"))) inline void copy_nt_avx(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {  // n a multiple of 32, both 32-byte aligned
        const __m256 a = _mm256_load_ps(x + i), b = _mm256_load_ps(x + i + 8), c = _mm256_load_ps(x + i + 16),
                     d = _mm256_load_ps(x + i + 24);
        _mm256_stream_ps(y + i, a);
        _mm256_stream_ps(y + i + 8, b);
        _mm256_stream_ps(y + i + 16, c);
        _mm256_stream_ps(y + i + 24, d);
    }
}
// x[i] = x[i] with regular stores: one read stream, its lines written back dirty.
// (The empty asm keeps the compiler from dropping the store of the value just loaded.)
__attribute__((target("avx"))) inline void rewrite_avx(float* x, int64_t n) {
    for (int64_t i = 0; i < n; i += 32) {
        __m256 a = _mm256_load_ps(x + i), b = _mm256_load_ps(x + i + 8), c = _mm256_load_ps(x + i + 16),
               d = _mm256_load_ps(x + i + 24);
        asm volatile("" : "+x"(a), "+x"(b), "+x"(c), "+x"(d));
        _mm256_store_ps(x + i, a);
        _mm256_store_ps(x + i + 8, b);
        _mm256_store_ps(x + i + 16, c);
        _mm256_store_ps(x + i + 24, d);
    }
}
inline void rewrite_sse(float* x, int64_t n) {
    for (int64_t i = 0; i < n; i += 4) {
        __m128 a = _mm_load_ps(x + i);
        asm volatile("" : "+x"(a));
        _mm_store_ps(x + i, a);
    }
}
inline void copy_nt_sse(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; i += 8) {
        const __m128 a = _mm_load_ps(x + i), b = _mm_load_ps(x + i + 4);
        _mm_stream_ps(y + i, a);
        _mm_stream_ps(y + i + 4, b);
    }
}

struct CopyPool {
    static constexpr int64_t kChunk = 16384;  // floats per work item (64 KiB)
    int64_t n = 0;                            // floats per array, a multiple of kChunk
    int64_t cursor = 0;                       // where the next copy starts (a multiple of kChunk)
    AlignedArray<float> x, y;
    CopyPool() {
        n = std::max<int64_t>(kChunk, static_cast<int64_t>(rotate_bytes() / 4 / sizeof(float)) / kChunk * kChunk);
        x = alloc_aligned<float>(static_cast<size_t>(n));
        y = alloc_aligned<float>(static_cast<size_t>(n) + 64);  // y staggered by 256 bytes from x
        fill_value(x.get(), static_cast<size_t>(n), 1.0f);
        fill_value(y.get(), static_cast<size_t>(n) + 64, 0.0f);
    }
    // Copies `floats` (rounded up to whole chunks) from the cursor on, wrapping around; returns
    // the floats copied. in_place: x[i] = x[i] with regular stores instead.
    int64_t copy(int64_t floats, bool in_place) {
        const bool avx = __builtin_cpu_supports("avx");
        const int64_t chunks = std::max<int64_t>(1, (floats + kChunk - 1) / kChunk), per = n / kChunk;
        float* dst = y.get() + 64;
        xk::detail::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
            for (int64_t c = b; c < e; ++c) {
                const int64_t off = ((cursor / kChunk + c) % per) * kChunk;
                if (in_place) {
                    if (avx) rewrite_avx(x.get() + off, kChunk);
                    else rewrite_sse(x.get() + off, kChunk);
                } else if (avx) copy_nt_avx(x.get() + off, dst + off, kChunk);
                else copy_nt_sse(x.get() + off, dst + off, kChunk);
            }
            _mm_sfence();
        });
        cursor = ((cursor / kChunk + chunks) % per) * kChunk;
        return chunks * kChunk;
    }
};
inline CopyPool& copy_pool() {
    static CopyPool pool;  // only when a DRAM row runs
    return pool;
}
}  // namespace detail

// The host's speed drifts (5-25% between phases on the shared machines here, within seconds), so a
// copy measured at another time is a poor yardstick for one row. DRAM rows interleave it with
// their iterations instead: after every call of the op, with the benchmark's timer paused, the
// same number of bytes is copied (half read, half written) and timed apart; the plain counter
// Copy% = 100 * the op's bytes / its own time, over the copies' bytes / their time — both
// measured in the same stretch of the run. CopyYardstick(state, false, ..) does nothing
// (cache-resident rows). Rows whose stores are regular ones, in place (RoPE), leave up to the
// last-level cache's size of dirty lines for whatever runs next to write back: against a copy
// with streaming stores that would charge their write-backs to the copy (Copy% up to ~25% high
// at 128 MiB a call). For them pass in_place: the yardstick is then x[i] = x[i] over the same
// bytes with regular stores, which leaves as many dirty lines for the row's next call as the
// row leaves for it. Use:
//   xb::CopyYardstick copy(state, dram, bytes_per_iter);
//   for (auto _ : state) { copy.begin(); run(); copy.end(); }
//   copy.finish();
// The interleaving of such a yardstick: begin() / end() around each call of the row; end()
// pauses the timer, runs `work` (which returns the units it did: bytes or flops) and times it
// apart; finish() sets `pct` = 100 * the row's units per second / the yardstick's, and `rate` =
// the yardstick's units per second * 1e-9.
class Yardstick {
public:
    Yardstick(benchmark::State& state, bool on, double units_per_iter, const char* pct, const char* rate,
              std::function<double()> work)
        : state_(state), on_(on), units_(units_per_iter), pct_(pct), rate_(rate), work_(std::move(work)) {}
    void begin() {
        if (on_) t0_ = std::chrono::steady_clock::now();
    }
    void end() {
        if (!on_) return;
        const auto t1 = std::chrono::steady_clock::now();
        op_sec_ += std::chrono::duration<double>(t1 - t0_).count();
        state_.PauseTiming();
        ref_units_ += work_();
        ref_sec_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        op_units_ += units_;
        state_.ResumeTiming();
    }
    void finish() {
        if (!on_ || op_sec_ <= 0 || ref_sec_ <= 0 || ref_units_ <= 0) return;
        state_.counters[pct_] = 100.0 * (op_units_ / op_sec_) / (ref_units_ / ref_sec_);
        state_.counters[rate_] = ref_units_ / ref_sec_ * 1e-9;
    }

private:
    benchmark::State& state_;
    bool on_;
    double units_;
    const char *pct_, *rate_;
    std::function<double()> work_;
    std::chrono::steady_clock::time_point t0_;
    double op_sec_ = 0, ref_sec_ = 0, op_units_ = 0, ref_units_ = 0;
};

class CopyYardstick : public Yardstick {
public:
    CopyYardstick(benchmark::State& state, bool on, double bytes_per_iter, bool in_place = false)
        : Yardstick(state, on, bytes_per_iter, "Copy%", "CopyGBPS",
                    [floats = static_cast<int64_t>(bytes_per_iter / 2 / sizeof(float)), in_place] {
                        return 2.0 * static_cast<double>(detail::copy_pool().copy(floats, in_place)) * sizeof(float);
                    }) {
        if (on) (void)detail::copy_pool();  // allocated and filled before the first timed call
    }
};

// ---- several yardsticks in one loop ----------------------------------------------------------
// The same interleaving with any number of yardsticks (bench_gemm: Peak% against an instruction
// loop of peak_loops.hpp, BW% against a streaming read): after each call of the row, with the timer
// paused, every stick's work runs once and is timed apart; finish() sets, per stick, `pct` = 100 *
// the row's units per second over its own time / the stick's units per second, and `rate` = the
// stick's units per second * 1e-9. With no stick added the loop only times the row's calls.
//   xb::InPhase ph(state);
//   ph.add("Peak%", "PeakGFLOPS", flops_per_iter, [&] { return run_peak(op, 0.5 * flops_per_iter); });
//   for (auto _ : state) { ph.begin(); run(); ph.end(); }
//   ph.finish();
class InPhase {
public:
    explicit InPhase(benchmark::State& state) : state_(state) {}
    void add(const char* pct, const char* rate, double units_per_iter, std::function<double()> work) {
        sticks_.push_back(Stick{pct, rate, units_per_iter, std::move(work)});
    }
    bool empty() const { return sticks_.empty(); }
    void begin() { t0_ = std::chrono::steady_clock::now(); }
    void end() {
        const auto t1 = std::chrono::steady_clock::now();
        op_sec_ += std::chrono::duration<double>(t1 - t0_).count();
        ++calls_;
        if (sticks_.empty()) return;
        state_.PauseTiming();
        for (Stick& s : sticks_) {
            const auto a = std::chrono::steady_clock::now();
            s.ref_units += s.work();
            s.ref_sec += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
        }
        state_.ResumeTiming();
    }
    void finish() {
        for (const Stick& s : sticks_) {
            if (op_sec_ <= 0 || s.ref_sec <= 0 || s.ref_units <= 0) continue;
            state_.counters[s.pct] = 100.0 * (s.units * double(calls_) / op_sec_) / (s.ref_units / s.ref_sec);
            state_.counters[s.rate] = s.ref_units / s.ref_sec * 1e-9;
        }
    }

private:
    struct Stick {
        const char *pct, *rate;
        double units;
        std::function<double()> work;
        double ref_units = 0, ref_sec = 0;
    };
    benchmark::State& state_;
    std::vector<Stick> sticks_;
    std::chrono::steady_clock::time_point t0_;
    double op_sec_ = 0;
    int64_t calls_ = 0;
};

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
