// Bounded, thread-safe cache of generated / created kernels. A key is generated exactly once
// even when many threads ask for it at the same moment: the first caller runs the factory, the
// others wait on the entry's condition variable and then share the result. A factory that throws
// leaves the entry empty, so a later call tries again. (Not std::call_once: libstdc++'s
// call_once over pthread_once hangs after an exceptional exit under TSan.)
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "xk/runtime.hpp"

namespace xk::detail {

class KernelCache {
public:
    static KernelCache& instance();

    template <class T>
    std::shared_ptr<const T> get_or_create(const std::string& key,
                                           const std::function<std::shared_ptr<const T>()>& factory) {
        auto v = get_or_create_erased(key, [&]() -> std::shared_ptr<const void> { return factory(); });
        return std::static_pointer_cast<const T>(v);
    }

    std::shared_ptr<const void> get_or_create_erased(const std::string& key,
                                                     const std::function<std::shared_ptr<const void>()>& factory);
    KernelCacheStats stats() const;
    void clear();
    void set_capacity(size_t entries);

private:
    KernelCache();
    struct Entry {
        enum class State { empty, running, ready };
        std::mutex mu;
        std::condition_variable cv;
        State state = State::empty;
        std::shared_ptr<const void> value;
        std::list<std::string>::iterator lru_pos;
    };
    void evict_locked();

    mutable std::mutex mu_;
    std::unordered_map<std::string, std::shared_ptr<Entry>> map_;
    std::list<std::string> lru_;  // front = most recently used
    size_t capacity_;
    uint64_t hits_ = 0, creations_ = 0, evictions_ = 0;
};

}  // namespace xk::detail
