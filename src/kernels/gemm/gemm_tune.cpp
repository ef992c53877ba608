// Measured routing between the registry's pick and oneDNN's matmul for fp32 GEMM.
//
// When autotuning is on (xk::set_gemm_autotune / XK_GEMM_TUNE=1; off by default), a GemmPlan
// built for an eligible spec (f32, M, N, K > 0, kGemmTuneMinFlops <= 2 M N K <= kGemmTuneMaxFlops,
// operands of at most kGemmTuneMaxBytes) times both
// candidates on scratch buffers of the spec's extents (same spec, same thread count): one
// untimed warm-up run of each, then up to three rounds of one timed run of each, alternating (one
// round only when a run took more than kLongRunUs or one candidate was more than 3x slower; no
// timing at all when oneDNN fell back to its reference implementation), and keeps the faster by
// the minimum time — oneDNN only when it is at least kMinGain (5%) faster. The decision is
// cached process-wide by (spec key, ISA cap, thread count); a later plan, and a one-shot
// xk::gemm / xk::sgemm (which never tunes and never allocates), use it. Each measurement is
// logged at XK_VERBOSE=1:
//   xk_verbose,tune,gemm,<spec>,cap:avx2,threads:2,jit:avx2=812.3us,onednn(gemm:jit)=790.1us,rounds:3,pick:onednn,<tuning us>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "common/parallel.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/runtime.hpp"

namespace xk {
namespace {

std::atomic<int> g_tune{-1};  // -1: not read from the environment yet

int tune_flag() {
    int v = g_tune.load(std::memory_order_relaxed);
    if (v >= 0) return v;
    const char* e = std::getenv("XK_GEMM_TUNE");
    v = e && std::atoi(e) > 0 ? 1 : 0;
    int expected = -1;
    g_tune.compare_exchange_strong(expected, v);
    return g_tune.load(std::memory_order_relaxed);
}

}  // namespace

void set_gemm_autotune(bool on) { g_tune.store(on ? 1 : 0, std::memory_order_relaxed); }
bool get_gemm_autotune() { return tune_flag() != 0; }

namespace detail {
namespace {

using Reg = Registry<GemmSpec, GemmKernel>;

constexpr double kLongRunUs = 25000.0;  // a warm-up this long: one timed run each, not three
// oneDNN must be this much faster to be picked: closer calls are within the noise of a few runs
// (a shared host varies by several percent between runs), and xk's kernel keeps its own packed
// layout (the decode / small kernels of other M read it) and its determinism across threads.
constexpr double kMinGain = 0.05;
constexpr size_t kMaxDecisions = 4096;  // the cache is cleared when it reaches this size

struct Decision {
    const Reg::ImplT* impl;
};

struct Cache {
    std::mutex mu;        // guards map
    std::mutex tune_mu;   // one tuning at a time (concurrent timings would disturb each other)
    std::unordered_map<std::string, Decision> map;
    std::atomic<size_t> size{0};
    std::atomic<uint64_t> tunings{0}, hits{0};
};

Cache& cache() {
    static Cache c;
    return c;
}

std::string decision_key(const GemmSpec& s, Isa cap) {
    return s.key() + ",cap:" + isa_name(cap) + ",threads:" + std::to_string(get_num_threads());
}

const Reg::ImplT* lookup(const std::string& key) {
    Cache& c = cache();
    if (c.size.load(std::memory_order_relaxed) == 0) return nullptr;
    std::lock_guard<std::mutex> lock(c.mu);
    const auto it = c.map.find(key);
    return it == c.map.end() ? nullptr : it->second.impl;
}

void store(const std::string& key, const Reg::ImplT* impl) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.map.size() >= kMaxDecisions) c.map.clear();
    c.map[key] = Decision{impl};
    c.size.store(c.map.size(), std::memory_order_relaxed);
}

// A 64-byte aligned, zero-initialised-then-filled buffer of `bytes` (at least 64).
struct Scratch {
    void* p = nullptr;
    explicit Scratch(int64_t bytes) {
        const size_t n = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
        p = std::aligned_alloc(64, n);
        if (!p) throw std::bad_alloc();
        std::memset(p, 0, n);
    }
    ~Scratch() { std::free(p); }
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void fill_f32(int64_t bytes, float scale) {
        float* f = static_cast<float*>(p);
        for (int64_t i = 0; i < bytes / 4; ++i) f[i] = scale * static_cast<float>(static_cast<int>(i % 13) - 6);
    }
};

double time_once(const GemmKernel& k, const GemmCall& call) {
    const double t0 = now_us();
    k.run(call);
    return now_us() - t0;
}

std::string us_str(double us) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1fus", us);
    return b;
}

// Times the registry's pick against oneDNN for s; returns the faster (the pick on any doubt).
const Reg::ImplT* tune(const GemmSpec& s, const Reg::ImplT& pick, const std::string& key) {
    const Reg& reg = gemm_registry();
    const Reg::ImplT& dnn = reg.find("onednn");
    const double t_start = now_us();
    std::string why;
    double t_pick = -1, t_dnn = -1;
    const Reg::ImplT* best = &pick;
    try {
        const auto kp = reg.get(s, pick).kernel;
        const auto kd = reg.get(s, dnn).kernel;
        const std::string info = kd->backend_info();
        if (info.find(":ref") != std::string::npos) {
            why = ",onednn(" + info + ")=not timed (reference implementation)";
        } else {
            // Scratch operands of the spec's extents, small finite values (beta != 0 reads C).
            const GemmExtents x = gemm_extents("xk::GemmPlan", s);
            Scratch A(x.a), B(x.b), C(x.c), bias(x.bias), R(x.res);
            A.fill_f32(x.a, 1.0f / 64), B.fill_f32(x.b, 1.0f / 64), C.fill_f32(x.c, 1.0f / 1024);
            bias.fill_f32(x.bias, 1.0f / 256);
            if (s.residual_type == DType::f32) R.fill_f32(x.res, 1.0f / 256);  // bf16: zeros
            GemmCall call;
            call.args.A = A.p, call.args.B = B.p, call.args.C = C.p;
            call.args.bias = static_cast<const float*>(bias.p), call.args.residual = R.p;
            call.alpha = s.alpha_one ? 1.0f : 0.5f;
            call.beta = s.beta == BetaKind::zero ? 0.0f : s.beta == BetaKind::one ? 1.0f : 0.5f;

            // Warm-up (untimed: oneDNN generates its GEMM code on its first call in the process,
            // and both touch their buffers first), then rounds of one run each, alternating so that
            // drifts of a noisy host hit both; the minimum of each. One round when a run is long or
            // one candidate is more than 3x slower.
            time_once(*kp, call);
            time_once(*kd, call);
            t_pick = t_dnn = 1e300;
            int rounds = 0;
            for (; rounds < 3; ++rounds) {
                t_pick = std::min(t_pick, time_once(*kp, call));
                t_dnn = std::min(t_dnn, time_once(*kd, call));
                if (std::max(t_pick, t_dnn) > kLongRunUs || t_dnn > 3 * t_pick || t_pick > 3 * t_dnn) {
                    ++rounds;
                    break;
                }
            }
            if (t_dnn < (1.0 - kMinGain) * t_pick) best = &dnn;
            why = "," + std::string(pick.name) + "=" + us_str(t_pick) + ",onednn(" + info.substr(7) + ")=" +
                  us_str(t_dnn) + ",rounds:" + std::to_string(rounds);
        }
    } catch (const std::exception& e) {
        // oneDNN could not make or run it (or scratch memory ran out): keep the registry's pick.
        best = &pick;
        why = std::string(",not timed: ") + e.what();
    }
    store(key, best);
    cache().tunings.fetch_add(1, std::memory_order_relaxed);
    verbose_log("tune", "gemm", key + why + ",pick:" + best->name, now_us() - t_start);
    return best;
}

}  // namespace

bool gemm_tune_eligible(const GemmSpec& s) {
    if (!onednn_gemm_supports(s)) return false;
    const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    if (flops < kGemmTuneMinFlops || flops > kGemmTuneMaxFlops) return false;
    // The scratch operands (A, B, C, residual) of the spec's extents, before allocating them.
    const double bytes = 4.0 * (static_cast<double>(s.M) * static_cast<double>(s.K) +
                                static_cast<double>(s.K) * static_cast<double>(s.N) +
                                static_cast<double>(s.M) * static_cast<double>(s.N) *
                                    (s.epilogue.residual ? 2.0 : 1.0));
    return bytes <= kGemmTuneMaxBytes;
}

Reg::Selected gemm_select(const GemmSpec& s, bool may_tune) { return gemm_select(s, may_tune, max_isa()); }

Reg::Selected gemm_select(const GemmSpec& s, bool may_tune, Isa cap) {
    if (cap > max_isa()) cap = max_isa();
    const Reg& reg = gemm_registry();
    const Reg::ImplT& pick = reg.select(s, cap);
    if (!get_gemm_autotune() || !gemm_tune_eligible(s)) return reg.get(s, pick);
    // oneDNN runs under any cap that allows the entry's ISA (avx2): below it, the registry's pick.
    const Reg::ImplT& dnn = reg.find("onednn");
    if (dnn.isa > cap || !isa_supported(dnn.isa)) return reg.get(s, pick);
    const std::string key = decision_key(s, cap);
    if (const Reg::ImplT* d = lookup(key)) {
        cache().hits.fetch_add(1, std::memory_order_relaxed);
        if (verbose_level() >= 2) verbose_log("tuned", "gemm", key + ",pick:" + d->name, 0.0);
        return reg.get(s, *d);
    }
    if (!may_tune) return reg.get(s, pick);
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.tune_mu);
    if (const Reg::ImplT* d = lookup(key)) {  // tuned by another thread meanwhile
        c.hits.fetch_add(1, std::memory_order_relaxed);
        return reg.get(s, *d);
    }
    return reg.get(s, *tune(s, pick, key));
}

GemmTuneStats gemm_tune_stats() {
    Cache& c = cache();
    GemmTuneStats st;
    st.tunings = c.tunings.load();
    st.hits = c.hits.load();
    st.size = c.size.load();
    return st;
}

void gemm_tune_clear() {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    c.map.clear();
    c.size.store(0);
    c.tunings.store(0);
    c.hits.store(0);
}

void gemm_tune_record(const GemmSpec& s, const char* impl) {
    store(decision_key(s, max_isa()), &gemm_registry().find(impl));
}

}  // namespace detail
}  // namespace xk
