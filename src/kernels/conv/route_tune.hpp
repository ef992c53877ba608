// The one-time measured routing shared by conv2d (onednn:conv vs xk's own path) and qconv2d
// (onednn:qconv vs gemm:qconv): per (descriptor, ISA cap, thread count) both routes are timed once on
// scratch operands, the faster is remembered process-wide, and plans and one-shot calls reuse it.
//
// The timing (time_routes): an untimed warm-up of each (oneDNN makes its primitive), then up to ten
// rounds; each round runs a route twice and keeps the second run, then the other route likewise —
// the first call after the other route pays for the switch (device Xeon, 16 threads: oneDNN's AMX
// conv right after our GEMM path took ~1 ms instead of 32-45 us, so alternating single runs picked
// ours at 0.2x of oneDNN's own rate); a network keeps one route per layer shape, so the steady rate
// is what a call sees. The minimum of each over the rounds: a preemption on a shared host inflates
// single runs many times over (seen: 23.8 ms for a 0.4 ms call; a process's first 2-thread timing
// saw both 10-20x slow for five rounds in a row), so no early exit on a large gap — fewer rounds
// only once the rounds have taken kRoundsBudgetUs.
#pragma once
#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "dispatch/verbose.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace xk::detail::route {

constexpr int kMaxRounds = 10;                     // timed rounds (two runs of each route, the second kept)
constexpr double kRoundsBudgetUs = 200000.0;       // no new round once the rounds took this long
constexpr int64_t kMaxTuneBytes = int64_t{256} << 20;  // scratch operands larger: not timed
constexpr double kMinGain = 0.05;  // the non-default route must be this much faster (noise)

struct Timing {
    double a_us = 1e300, b_us = 1e300;  // the minimum of each route's kept runs
    int rounds = 0;
};

// Times route a against route b (callables running one call each) as described above.
template <class A, class B>
Timing time_routes(A&& run_a, B&& run_b) {
    auto once = [](auto& f) {
        const double t0 = now_us();
        f();
        return now_us() - t0;
    };
    once(run_a);
    once(run_b);
    Timing t;
    const double t_rounds = now_us();
    while (t.rounds < kMaxRounds) {
        once(run_a);
        t.a_us = std::min(t.a_us, once(run_a));
        once(run_b);
        t.b_us = std::min(t.b_us, once(run_b));
        ++t.rounds;
        if (now_us() - t_rounds > kRoundsBudgetUs) break;
    }
    return t;
}

inline std::string us_str(double us) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1fus", us);
    return b;
}

// The remembered decisions of one op family: key -> the picked implementation (a registry entry,
// which lives as long as the process). At most one timing runs at a time per family.
template <class ImplT>
class Decisions {
public:
    const ImplT* lookup(const std::string& key) {
        std::lock_guard<std::mutex> lock(mu_);
        const auto it = map_.find(key);
        return it == map_.end() ? nullptr : it->second;
    }
    void store(const std::string& key, const ImplT* impl) {
        std::lock_guard<std::mutex> lock(mu_);
        if (map_.size() >= 4096) map_.clear();
        map_[key] = impl;
    }
    void clear() {
        std::lock_guard<std::mutex> lock(mu_);
        map_.clear();
    }
    // The remembered pick for `key`, else time() (run under the family's timing lock, the map checked
    // again first) and remember its answer. `how` receives "cached" or "timed".
    template <class TimeFn>
    const ImplT* get(const std::string& key, TimeFn&& time, const char** how) {
        if (const ImplT* c = lookup(key)) {
            *how = "cached";
            return c;
        }
        std::lock_guard<std::mutex> lock(tune_mu_);
        if (const ImplT* c = lookup(key)) {
            *how = "cached";
            return c;
        }
        const ImplT* pick = time();
        store(key, pick);
        *how = "timed";
        return pick;
    }

private:
    std::mutex mu_;       // guards map_
    std::mutex tune_mu_;  // one timing at a time
    std::unordered_map<std::string, const ImplT*> map_;
};

// "<descriptor key>,cap:<isa>,threads:<n>": what a decision is remembered per.
inline std::string decision_key(const std::string& desc_key) {
    return desc_key + ",cap:" + isa_name(max_isa()) + ",threads:" + std::to_string(get_num_threads());
}

}  // namespace xk::detail::route
