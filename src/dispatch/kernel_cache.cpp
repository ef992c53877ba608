#include "dispatch/kernel_cache.hpp"

#include <cstdlib>

#include "xk/error.hpp"

namespace xk {
namespace detail {

KernelCache& KernelCache::instance() {
    static KernelCache* cache = new KernelCache();  // never destroyed: kernels may outlive statics
    return *cache;
}

KernelCache::KernelCache() : capacity_(1024) {
    if (const char* e = std::getenv("XK_CACHE_CAPACITY")) {
        const long v = std::atol(e);
        if (v > 0) capacity_ = static_cast<size_t>(v);
    }
}

std::shared_ptr<const void> KernelCache::get_or_create_erased(
    const std::string& key, const std::function<std::shared_ptr<const void>()>& factory) {
    std::shared_ptr<Entry> e;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = map_.find(key);
        if (it != map_.end()) {
            e = it->second;
            lru_.splice(lru_.begin(), lru_, e->lru_pos);
        } else {
            e = std::make_shared<Entry>();
            lru_.push_front(key);
            e->lru_pos = lru_.begin();
            map_.emplace(key, e);
            evict_locked();
        }
    }
    {
        std::unique_lock<std::mutex> lock(e->mu);
        e->cv.wait(lock, [&] { return e->state != Entry::State::running; });
        if (e->state == Entry::State::ready) {
            std::lock_guard<std::mutex> g(mu_);
            ++hits_;
            return e->value;
        }
        e->state = Entry::State::running;  // this thread generates; the others wait
    }
    std::shared_ptr<const void> value;
    try {
        value = factory();
    } catch (...) {
        {
            std::lock_guard<std::mutex> lock(e->mu);
            e->state = Entry::State::empty;
        }
        e->cv.notify_all();
        throw;
    }
    {
        std::lock_guard<std::mutex> lock(e->mu);
        e->value = value;
        e->state = Entry::State::ready;
    }
    e->cv.notify_all();
    std::lock_guard<std::mutex> g(mu_);
    ++creations_;
    return value;
}

void KernelCache::evict_locked() {
    while (map_.size() > capacity_ && lru_.size() > 1) {
        const std::string& victim = lru_.back();
        map_.erase(victim);
        lru_.pop_back();
        ++evictions_;
    }
}

KernelCacheStats KernelCache::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    KernelCacheStats s;
    s.hits = hits_;
    s.creations = creations_;
    s.evictions = evictions_;
    s.size = map_.size();
    s.capacity = capacity_;
    return s;
}

void KernelCache::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    map_.clear();
    lru_.clear();
}

void KernelCache::set_capacity(size_t entries) {
    std::lock_guard<std::mutex> lock(mu_);
    capacity_ = entries;
    evict_locked();
}

}  // namespace detail

KernelCacheStats kernel_cache_stats() { return detail::KernelCache::instance().stats(); }
void clear_kernel_cache() { detail::KernelCache::instance().clear(); }
void set_kernel_cache_capacity(size_t entries) {
    if (entries == 0) throw Error(Status::invalid_argument, "set_kernel_cache_capacity: entries=0 must be >= 1");
    detail::KernelCache::instance().set_capacity(entries);
}

}  // namespace xk
