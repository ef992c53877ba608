#include "dispatch/verbose.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "xk/runtime.hpp"

namespace xk {
namespace {
std::atomic<int> g_level{-1};
}

namespace detail {
int verbose_level() {
    int v = g_level.load(std::memory_order_relaxed);
    if (v >= 0) return v;
    const char* e = std::getenv("XK_VERBOSE");
    v = e ? std::atoi(e) : 0;
    if (v < 0) v = 0;
    int expected = -1;
    g_level.compare_exchange_strong(expected, v);
    return g_level.load(std::memory_order_relaxed);
}

void verbose_log(const char* event, const std::string& op, const std::string& what, double us) {
    if (verbose_level() <= 0) return;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::fprintf(stderr, "xk_verbose,%s,%s,%s,%.2f\n", event, op.c_str(), what.c_str(), us);
}
}  // namespace detail

void set_verbose(int level) { g_level.store(level < 0 ? 0 : level, std::memory_order_relaxed); }
int get_verbose() { return detail::verbose_level(); }

}  // namespace xk
