// Shared pieces of the libFuzzer targets (tests/fuzz/fuzz_<family>.cpp; README.md there).
//
// Each target decodes its input into a *sequence* of C API calls — plans created, packed, run and
// destroyed, one-shot calls, ISA cap and thread count changes — of two kinds:
//   valid:   a descriptor and buffers the API documents as correct (sizes small, strides, offsets,
//            values from ordinary to extreme but finite, e.g. 1e30); the call must succeed with an
//            empty xk_last_error(), and its output is checked against an oracle (the target's own
//            double-precision loop, or the same call with the cap at scalar: the reference);
//   hostile: the same with exactly one argument made wrong (a negative or overflowing size, a
//            null pointer, a stride too small, an enum value the API does not know, an index out
//            of range, an output overlapping an input, ...); the call must fail with a non-empty
//            message and leave every output byte as it was.
// Every output buffer sits between guard bands of a sentinel byte (checked after each call), and
// every call runs under a wall-clock limit (kCallLimitSeconds): a stall is a finding too.
// A finding prints "xk-fuzz finding: ..." and aborts, so libFuzzer saves the input.
#pragma once
#include <fuzzer/FuzzedDataProvider.h>

#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

#include "xk/xk.h"

namespace fz {

// A call that takes longer than this is a stall (sizes here are small; the sanitizers and a busy
// 2-core host slow calls down by ~20x at most).
inline double& call_limit_seconds() {
    static double s = [] {
        const char* e = std::getenv("XK_FUZZ_CALL_LIMIT");
        return e ? std::atof(e) : 2.0;
    }();
    return s;
}

[[noreturn]] inline void finding(const char* fmt, ...) {
    std::fprintf(stderr, "xk-fuzz finding: ");
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\n");
    std::fflush(stderr);
    std::abort();
}

// ---- input decoding ------------------------------------------------------------------------------
struct In {
    FuzzedDataProvider p;
    In(const uint8_t* d, size_t n) : p(d, n) {}
    bool more() { return p.remaining_bytes() > 0; }
    int pick(int n) { return p.ConsumeIntegralInRange<int>(0, n - 1); }
    bool coin() { return p.ConsumeBool(); }
    // A dimension in [lo, hi], small values likelier (odd sizes 1, 7, 17 ... come up often).
    int64_t dim(int64_t lo, int64_t hi) {
        switch (pick(4)) {
            case 0: return lo;
            case 1: return std::min(hi, lo + pick(4));
            default: return p.ConsumeIntegralInRange<int64_t>(lo, hi);
        }
    }
    // Extra stride padding (0 = packed, passed as 0 or as the minimum).
    int64_t pad() { return pick(3) == 0 ? p.ConsumeIntegralInRange<int64_t>(1, 5) : 0; }
    // A finite float: ordinary values mostly, some extremes (|x| up to `big`), zeros of both signs,
    // denormals.
    float value(float big = 1e30f) {
        switch (pick(16)) {
            case 0: return 0.0f;
            case 1: return -0.0f;
            case 2: return big;
            case 3: return -big;
            case 4: return std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + pick(1000));
            case 5: return static_cast<float>(p.ConsumeFloatingPointInRange<double>(-big, big));
            default: return static_cast<float>(p.ConsumeIntegralInRange<int>(-8000, 8000)) / 1000.0f;
        }
    }
    // A value that may be non-finite (NaN, +-inf) some of the time (never from an exhausted input,
    // which reads 0s).
    float any_value(float big = 1e30f) {
        switch (pick(24)) {
            case 21: return std::numeric_limits<float>::quiet_NaN();
            case 22: return std::numeric_limits<float>::infinity();
            case 23: return -std::numeric_limits<float>::infinity();
            default: return value(big);
        }
    }
    // A hostile size: negative, or so large that a product of it overflows or cannot exist.
    int64_t bad_size() {
        static const int64_t v[] = {-1, -7, std::numeric_limits<int64_t>::min(), int64_t(1) << 40, int64_t(1) << 62,
                                    std::numeric_limits<int64_t>::max(), int64_t(1) << 32, int64_t(3) << 31};
        return v[pick(static_cast<int>(sizeof v / sizeof v[0]))];
    }
    // An enum value the API does not define.
    int bad_enum(int first_invalid) {
        static const int v[] = {-1, 77, 1000, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                                static_cast<int>(0x80000000u)};
        const int k = pick(7);
        return k == 6 ? first_invalid : v[k];
    }
};

inline uint16_t to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}
inline float from_bf16(uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// bf16 buffers hold uint16_t bit patterns: the element types of the typed targets (float or
// uint16_t), widened / rounded.
template <class T>
constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
template <class T>
double val(T v) {
    if constexpr (kBf16<T>) return from_bf16(v);
    else return v;
}
template <class T>
T enc(float f) {
    if constexpr (kBf16<T>) return to_bf16(f);
    else return f;
}

// The fused activations (xk::Activation, values of xk_activation) in double: act(g) (gelu_tanh as g / (1 + e^(-2y)) = 0.5 g (1 + tanh y), gelu_erf through erfc: no
// cancellation for g < 0).
inline double act_exact(int act, double g) {
    switch (act) {
        case XK_ACT_RELU: return g > 0 ? g : 0.0;
        case XK_ACT_GELU_ERF: return 0.5 * g * std::erfc(-g / std::sqrt(2.0));
        case XK_ACT_GELU_TANH: return g / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
        case XK_ACT_SILU: return g / (1.0 + std::exp(-g));
        default: return g;
    }
}

// ---- guarded buffers -----------------------------------------------------------------------------
constexpr unsigned char kSentinel = 0xA5;
constexpr size_t kGuard = 64;

// n elements of T between two guard bands of kSentinel bytes; data() is `mis` elements past a
// 64-byte boundary (misaligned for vectors, aligned for the element).
template <class T>
class Buf {
public:
    Buf() = default;
    explicit Buf(size_t n, size_t mis = 0) : n_(n), mis_(mis) {
        mem_.assign(kGuard * 2 + (n + mis) * sizeof(T) + 64, kSentinel);
        base_ = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(mem_.data()) + kGuard + 63) / 64 * 64);
    }
    // Copies and moves keep data() at the same offset inside their own storage.
    Buf(const Buf& o) : mem_(o.mem_), base_(o.base_ ? mem_.data() + (o.base_ - o.mem_.data()) : nullptr), n_(o.n_), mis_(o.mis_) {}
    Buf& operator=(const Buf& o) {
        if (this != &o) {
            mem_ = o.mem_;
            base_ = o.base_ ? mem_.data() + (o.base_ - o.mem_.data()) : nullptr;
            n_ = o.n_, mis_ = o.mis_;
        }
        return *this;
    }
    Buf(Buf&& o) noexcept { *this = static_cast<const Buf&>(o); }
    Buf& operator=(Buf&& o) noexcept { return *this = static_cast<const Buf&>(o); }

    T* data() { return reinterpret_cast<T*>(base_) + mis_; }
    const T* data() const { return reinterpret_cast<const T*>(base_) + mis_; }
    size_t size() const { return n_; }
    T& operator[](size_t i) { return data()[i]; }
    const T& operator[](size_t i) const { return data()[i]; }
    unsigned char* bytes() { return reinterpret_cast<unsigned char*>(data()); }
    const unsigned char* bytes() const { return reinterpret_cast<const unsigned char*>(data()); }
    size_t nbytes() const { return n_ * sizeof(T); }
    // Every byte outside [data(), data() + n) still the sentinel.
    bool guards_ok() const {
        const unsigned char* b = bytes();
        for (const unsigned char* q = mem_.data(); q < b; ++q)
            if (*q != kSentinel) return false;
        for (const unsigned char* q = b + nbytes(); q < mem_.data() + mem_.size(); ++q)
            if (*q != kSentinel) return false;
        return true;
    }
    std::vector<unsigned char> snapshot() const { return std::vector<unsigned char>(bytes(), bytes() + nbytes()); }
    bool same_as(const std::vector<unsigned char>& s) const { return s.size() == nbytes() && (nbytes() == 0 || std::memcmp(s.data(), bytes(), nbytes()) == 0); }
    void fill(T v) {
        for (size_t i = 0; i < n_; ++i) data()[i] = v;
    }

private:
    std::vector<unsigned char> mem_;
    unsigned char* base_ = nullptr;
    size_t n_ = 0, mis_ = 0;
};

// Values for long buffers: from the input itself (the fuzzer steers each one) or from
// pseudo-random bytes seeded by it (long buffers get varied values without exhausting the input;
// both are read through In, so the distributions are the same).
class Values {
public:
    Values(In& in, size_t count) : in_(in) {
        if (!in.coin()) return;  // (an exhausted input reads false: values from the input, zeros)
        uint64_t s = in.p.ConsumeIntegral<uint32_t>() * 0x9E3779B97F4A7C15ull + 1;
        bytes_.resize(count * 12 + 64);
        for (uint8_t& b : bytes_) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            b = static_cast<uint8_t>(s >> 32);
        }
        rng_.emplace(bytes_.data(), bytes_.size());
    }
    In& operator()() { return rng_ ? *rng_ : in_; }

private:
    In& in_;
    std::vector<uint8_t> bytes_;
    std::optional<In> rng_;
};

// ---- calls ----------------------------------------------------------------------------------------
// Counts for the summary printed when the process exits (libFuzzer exits through exit()).
struct Counts {
    long long calls = 0, valid = 0, rejected = 0;
    ~Counts() {
        if (calls) std::fprintf(stderr, "xk-fuzz: %lld C API calls: %lld valid (checked), %lld hostile (rejected)\n", calls, valid, rejected);
    }
};
inline Counts& counts() {
    static Counts c;
    return c;
}

inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs f() (returning xk_status) under the wall-clock limit.
template <class F>
xk_status timed(const char* what, F&& f) {
    ++counts().calls;
    const double t0 = now_s();
    const xk_status s = f();
    const double dt = now_s() - t0;
    if (dt > call_limit_seconds()) finding("%s took %.2f s (limit %.1f s): a stall", what, dt, call_limit_seconds());
    return s;
}

inline void expect_ok(xk_status s, const char* what) {
    ++counts().valid;
    if (s != XK_SUCCESS) finding("%s: a valid call failed with status %d: %s", what, static_cast<int>(s), xk_last_error());
    if (xk_last_error()[0] != '\0') finding("%s: succeeded but xk_last_error() = '%s'", what, xk_last_error());
}

inline void expect_rejected(xk_status s, const char* what, const char* wrong) {
    ++counts().rejected;
    if (s == XK_SUCCESS) finding("%s: a hostile call (%s) was accepted", what, wrong);
    if (xk_last_error()[0] == '\0') finding("%s: rejected (%s, status %d) without a message", what, wrong, static_cast<int>(s));
    if (s == XK_OUT_OF_MEMORY) finding("%s: hostile call (%s) ran out of memory instead of being rejected: %s", what, wrong, xk_last_error());
}

template <class T>
void expect_guards(const Buf<T>& b, const char* what, const char* name) {
    if (!b.guards_ok()) finding("%s: wrote outside %s (guard band changed)", what, name);
}

template <class T>
void expect_unchanged(const Buf<T>& b, const std::vector<unsigned char>& before, const char* what, const char* name) {
    if (!b.same_as(before)) finding("%s: a rejected call changed %s", what, name);
    expect_guards(b, what, name);
}

// ---- comparisons ---------------------------------------------------------------------------------
// got against want (double) within rtol |want| + atol; NaN must match NaN; an infinity must match
// (or want beyond the float range, where got may be +-inf or the largest floats: `big` = where
// rounding to float may overflow).
inline bool close(double got, double want, double rtol, double atol) {
    if (std::isnan(want)) return std::isnan(got);
    if (std::isnan(got)) return false;
    if (std::fabs(want) >= 3.3e38) return std::isinf(got) ? (got > 0) == (want > 0) : std::fabs(got) >= 3.0e38;
    if (std::isinf(got) || std::isinf(want)) return got == want;
    return std::fabs(got - want) <= rtol * std::fabs(want) + atol;
}

// ISA levels this machine allows (for cap changes in the call sequence).
inline std::vector<xk_isa> isas() {
    static const std::vector<xk_isa> v = [] {
        std::vector<xk_isa> r;
        for (int i = 0; i <= XK_ISA_AMX; ++i)
            if (xk_set_max_isa(static_cast<xk_isa>(i)) == XK_SUCCESS) r.push_back(static_cast<xk_isa>(i));
        if (!r.empty()) xk_set_max_isa(r.back());
        return r;
    }();
    return v;
}

inline void set_cap(xk_isa cap) {
    if (xk_set_max_isa(cap) != XK_SUCCESS) finding("xk_set_max_isa(%d) failed: %s", static_cast<int>(cap), xk_last_error());
}

// Once per process: one thread (the sanitizers make thread start-up slow; thread counts are
// switched by the call sequence) and quiet logging.
inline void init_once() {
    static bool done = [] {
        xk_set_num_threads(1);
        (void)isas();
        return true;
    }();
    (void)done;
}

// Elements as stored: float, or bf16 bits (uint16_t).
template <class T>
float widen(T v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return from_bf16(v);
}
template <class T>
T narrow(float v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return to_bf16(v);
}

// The ISA cap in effect, and its name (for messages).
inline xk_isa current_cap(const char** name) {
    xk_isa cap = XK_ISA_SCALAR;
    expect_ok(timed("xk_get_max_isa", [&] { return xk_get_max_isa(&cap); }), "xk_get_max_isa");
    *name = xk_isa_name(cap);
    return cap;
}

}  // namespace fz
