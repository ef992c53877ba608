#include "common/parallel.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "xk/error.hpp"

#if XK_THREADING_OMP
#include <omp.h>
#endif

namespace xk {
namespace {
std::atomic<int> g_threads{0};
// True on a thread while it runs a chunk of a multi-threaded parallel_for (the caller's own chunk
// included): get_num_threads() is then 1, so a nested parallel_for (a kernel run per item of a
// batch that is itself spread over the threads) runs inline and kernels size their blocking for
// one thread.
thread_local bool t_in_region = false;

// Marks the current thread as inside a region for a scope (restores the previous value, also
// when f throws).
struct RegionMark {
    bool prev;
    RegionMark() : prev(t_in_region) { t_in_region = true; }
    ~RegionMark() { t_in_region = prev; }
};

int default_threads() {
    static const int n = [] {
        if (const char* e = std::getenv("OMP_NUM_THREADS")) {
            const int v = std::atoi(e);
            if (v > 0) return v;
        }
#if XK_THREADING_OMP
        return std::max(1, omp_get_max_threads());
#else
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
        return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
#endif
    }();
    return n;
}
}  // namespace

const char* threading_backend() noexcept {
#if XK_THREADING_OMP
    return "openmp";
#else
    return "std::thread";
#endif
}

void set_num_threads(int n) {
    if (n < 0) throw Error(Status::invalid_argument, "xk::set_num_threads: n=" + std::to_string(n) + " must be >= 0");
    g_threads.store(n, std::memory_order_relaxed);
}

int get_num_threads() {
    if (t_in_region) return 1;
    const int n = g_threads.load(std::memory_order_relaxed);
    return n > 0 ? n : default_threads();
}

namespace detail {

bool in_parallel_region() noexcept { return t_in_region; }

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
    if (n <= 0) return;
    const int nt = parallel_threads(n, grain);
    if (nt <= 1) {
        f(0, n);
        return;
    }
    auto chunk = [n, nt](int t, int64_t& b, int64_t& e) {
        const int64_t q = n / nt, r = n % nt;
        b = t * q + std::min<int64_t>(t, r);
        e = b + q + (t < r ? 1 : 0);
    };
    std::exception_ptr error;
    std::mutex error_mu;
    auto body = [&](int t) {
        int64_t b, e;
        chunk(t, b, e);
        if (b >= e) return;
        try {
            RegionMark mark;
            f(b, e);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mu);
            if (!error) error = std::current_exception();
        }
    };
#if XK_THREADING_OMP
#pragma omp parallel num_threads(nt)
    {
        // OpenMP may hand out fewer threads than asked (nesting, OMP_DYNAMIC): cover every chunk.
        const int nthr = omp_get_num_threads();
        for (int t = omp_get_thread_num(); t < nt; t += nthr) body(t);
    }
#else
    std::vector<std::thread> workers;
    workers.reserve(nt - 1);
    for (int t = 1; t < nt; ++t) workers.emplace_back(body, t);
    body(0);
    for (auto& w : workers) w.join();
#endif
    if (error) std::rethrow_exception(error);
}

}  // namespace detail
}  // namespace xk
