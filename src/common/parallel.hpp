// The library's one parallel-for. Backend chosen at configure time: OpenMP (default; the runtime
// oneDNN and libtorch use) or std::thread (XK_THREADING=std, used by the TSan build because TSan
// does not understand libgomp's synchronisation).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>

#include "xk/runtime.hpp"

namespace xk::detail {

// Splits [0, n) into contiguous chunks of at least `grain` items over at most get_num_threads()
// threads and calls f(begin, end) for each. Runs inline when one chunk covers everything, so
// small problems never pay for threading. f must not throw across threads: exceptions from
// workers are caught and the first one is rethrown on the calling thread.
// Nesting: while a thread runs a chunk of a multi-threaded parallel_for, get_num_threads() is 1
// on it, so a parallel_for inside f runs inline on that thread (one level of parallelism, no
// oversubscription; in both backends). An inline run (one chunk) does not count as a region.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// Whether the calling thread runs a chunk of a multi-threaded parallel_for right now.
bool in_parallel_region() noexcept;

// Threads parallel_for would use for n items of this grain.
inline int parallel_threads(int64_t n, int64_t grain) {
    if (n <= 0) return 1;
    grain = std::max<int64_t>(grain, 1);
    const int64_t chunks = (n + grain - 1) / grain;
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(chunks, get_num_threads())));
}

}  // namespace xk::detail
