// Shared test helpers: the per-ISA sweep, random data, misaligned buffers, tolerant comparison,
// and error expectations.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "xk/error.hpp"
#include "xk/isa.hpp"
#include "xk/types.hpp"

namespace xk::test {

// Sets (value) or unsets (nullptr) an environment variable for a scope, restoring it after.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const char* value) : name_(name) {
        if (const char* o = std::getenv(name)) had_ = true, old_ = o;
        if (value) setenv(name, value, 1);
        else unsetenv(name);
    }
    ~ScopedEnv() {
        if (had_) setenv(name_, old_.c_str(), 1);
        else unsetenv(name_);
    }

private:
    const char* name_;
    bool had_ = false;
    std::string old_;
};

// ISAs the sweep has exercised in this process (printed by test_main at exit).
std::set<Isa>& exercised_isas();

// Runs body once per ISA in xk::available_isas(), with the cap set to that ISA, so that the
// registry picks the best variant of that level. SCOPED_TRACE names the ISA in failures.
// avx2_vnni is swept only with with_avx2_vnni: only the int8 GEMM has kernels at that level, so
// for every other family it would repeat the avx2 run.
// Under ThreadSanitizer (which looks for races in the threading code every ISA shares, at 5-15x
// the run time) the sweep visits only the best ISA and avx2; the Release and ASan builds visit all.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kTsanSweep = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kTsanSweep = true;
#else
inline constexpr bool kTsanSweep = false;
#endif
#else
inline constexpr bool kTsanSweep = false;
#endif

inline void for_each_isa(const std::function<void(Isa)>& body, bool with_avx2_vnni = false) {
    const std::vector<Isa> all = available_isas();
    for (Isa isa : all) {
        if (isa == Isa::avx2_vnni && !with_avx2_vnni) continue;
        if (kTsanSweep && isa != Isa::avx2 && isa != all.back()) continue;
        IsaCap cap(isa);
        SCOPED_TRACE(std::string("isa=") + isa_name(isa));
        exercised_isas().insert(isa);
        body(isa);
    }
}

// A buffer whose data() is `misalign` bytes past a 64-byte boundary (misalign must keep the
// element alignment the API requires, e.g. a multiple of sizeof(T) — or not, where the API
// accepts unaligned elements).
template <class T>
class Buffer {
public:
    explicit Buffer(size_t n = 0, size_t misalign_bytes = 0) { resize(n, misalign_bytes); }
    void resize(size_t n, size_t misalign_bytes = 0) {
        n_ = n;
        raw_.reset(new unsigned char[n * sizeof(T) + 128]);
        auto base = reinterpret_cast<uintptr_t>(raw_.get());
        auto aligned = (base + 63) & ~uintptr_t(63);
        ptr_ = reinterpret_cast<T*>(aligned + misalign_bytes);
        std::memset(raw_.get(), 0, n * sizeof(T) + 128);
    }
    T* data() { return ptr_; }
    const T* data() const { return ptr_; }
    size_t size() const { return n_; }
    T& operator[](size_t i) { return ptr_[i]; }
    const T& operator[](size_t i) const { return ptr_[i]; }
    T* begin() { return ptr_; }
    T* end() { return ptr_ + n_; }

private:
    std::unique_ptr<unsigned char[]> raw_;
    T* ptr_ = nullptr;
    size_t n_ = 0;
};

inline std::mt19937_64& rng() {
    static thread_local std::mt19937_64 g(12345);
    return g;
}

template <class T>
void fill_uniform(T* p, size_t n, double lo, double hi, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    for (size_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, bf16>)
            p[i] = bf16(static_cast<float>(d(g)));
        else if constexpr (std::is_integral_v<T>)
            p[i] = static_cast<T>(std::lround(d(g)));
        else
            p[i] = static_cast<T>(d(g));
    }
}

inline double to_double(float v) { return v; }
inline double to_double(double v) { return v; }
inline double to_double(bf16 v) { return v.to_float(); }
inline double to_double(int32_t v) { return v; }
inline double to_double(int8_t v) { return v; }
inline double to_double(uint8_t v) { return v; }

// Passes when |got - want| <= atol + rtol*|want| elementwise (NaN must match NaN). Reports the
// first few mismatches with their index.
template <class G, class W>
::testing::AssertionResult all_close(const G* got, const W* want, size_t n, double atol, double rtol) {
    size_t bad = 0;
    std::string msg;
    for (size_t i = 0; i < n; ++i) {
        const double g = to_double(got[i]), w = to_double(want[i]);
        const bool ok = (std::isnan(g) && std::isnan(w)) || std::fabs(g - w) <= atol + rtol * std::fabs(w);
        if (!ok) {
            if (bad < 5) msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + " want " + std::to_string(w);
            ++bad;
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << n << " elements differ (atol=" << atol
                                         << ", rtol=" << rtol << "):" << msg;
}

// Runs stmt, expects an xk::Error with this status whose message contains `needle`.
#define XK_EXPECT_ERROR(stmt, status, needle)                                                         \
    do {                                                                                              \
        bool xk_thrown_ = false;                                                                      \
        try {                                                                                         \
            stmt;                                                                                     \
        } catch (const ::xk::Error& e) {                                                              \
            xk_thrown_ = true;                                                                        \
            EXPECT_EQ(e.code(), status) << "message: " << e.what();                                   \
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)                          \
                << "message '" << e.what() << "' does not name '" << (needle) << "'";                 \
        }                                                                                             \
        EXPECT_TRUE(xk_thrown_) << #stmt " did not throw xk::Error";                                  \
    } while (0)

#define XK_EXPECT_INVALID(stmt, needle) XK_EXPECT_ERROR(stmt, ::xk::Status::invalid_argument, needle)

}  // namespace xk::test
