// xkernels — process-wide runtime settings: threads, verbosity, the kernel cache, versions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace xk {

// Library version.
constexpr int version_major = 0;
constexpr int version_minor = 1;
constexpr int version_patch = 0;
const char* version_string() noexcept;
// Versions of the dependencies this build was compiled against ("oneDNN 2.6.3", ...), one per line.
std::string dependency_versions();
// "openmp" or "std::thread": the parallel-for backend chosen at configure time.
const char* threading_backend() noexcept;

// Threads used by xk's parallel-for. 0 (default) means every logical CPU the process may use
// (or OMP_NUM_THREADS when set). Negative values are an xk::Error. get_num_threads() is 1 on a
// thread that runs part of one of xk's own parallel loops (e.g. an item of a batched GEMM spread
// over the threads): nested loops run inline.
void set_num_threads(int n);
int get_num_threads();

// XK_VERBOSE from C++: 0 off, 1 selections and generations, 2 also every one-shot execution.
void set_verbose(int level);
int get_verbose();

// Measured GEMM routing (XK_GEMM_TUNE=1 from the environment; off by default). When on, a
// GemmPlan for an fp32 problem of at least 2^25 flops (2 M N K) times the registry's kernel and
// oneDNN's matmul on scratch buffers once per (problem, ISA cap, thread count) and process, and
// keeps the faster (XK_VERBOSE=1 logs both times and the pick); one-shot xk::gemm / xk::sgemm use
// a decision already made but never time. Off: the registry's choice, deterministic. See docs/gemm.md.
void set_gemm_autotune(bool on);
bool get_gemm_autotune();

// The kernel cache holds generated / created kernels keyed by (op, implementation, descriptor).
// It is bounded (XK_CACHE_CAPACITY, default 1024 entries, least recently used evicted first);
// kernels held by a plan stay alive after eviction.
struct KernelCacheStats {
    uint64_t hits = 0;
    uint64_t creations = 0;  // kernels generated / created
    uint64_t evictions = 0;
    size_t size = 0;
    size_t capacity = 0;
};
KernelCacheStats kernel_cache_stats();
void clear_kernel_cache();
void set_kernel_cache_capacity(size_t entries);  // 0 is an xk::Error

}  // namespace xk
