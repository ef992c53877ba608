// XK_VERBOSE logging: one CSV-ish line per event on stderr, like ONEDNN_VERBOSE.
//   XK_VERBOSE=1  selections (plan creation) and kernel generations, with microseconds
//   XK_VERBOSE=2  also every execution of a one-shot call
#pragma once
#include <chrono>
#include <string>

namespace xk::detail {

int verbose_level();
void verbose_log(const char* event, const std::string& op, const std::string& what, double us);

inline double now_us() {
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace xk::detail
