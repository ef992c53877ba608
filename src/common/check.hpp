// Argument validation helpers used at the door of every public entry point. Messages read
// "<function>: <argument>=<value> <what is wrong>", e.g. "xk::gemm: lda=3 must be >= K=7".
#pragma once
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "xk/error.hpp"
#include "xk/types.hpp"

namespace xk::detail {

[[noreturn]] inline void fail(Status code, const std::string& msg) { throw Error(code, msg); }

[[noreturn]] inline void fail_arg(const char* fn, const char* arg, const std::string& value, const std::string& why) {
    throw Error(Status::invalid_argument, std::string(fn) + ": " + arg + "=" + value + " " + why);
}

inline void check(bool ok, const char* fn, const std::string& msg) {
    if (!ok) throw Error(Status::invalid_argument, std::string(fn) + ": " + msg);
}

inline std::string ptr_str(const void* p) {
    if (!p) return "null";
    std::ostringstream os;
    os << p;
    return os.str();
}

inline void check_not_null(const char* fn, const char* arg, const void* p) {
    if (!p) fail_arg(fn, arg, "null", "must not be a null pointer");
}

// v >= 1
inline void check_positive(const char* fn, const char* arg, int64_t v) {
    if (v < 1) fail_arg(fn, arg, std::to_string(v), "must be >= 1");
}

// v >= 0
inline void check_nonnegative(const char* fn, const char* arg, int64_t v) {
    if (v < 0) fail_arg(fn, arg, std::to_string(v), "must be >= 0");
}

// lo <= v <= hi
inline void check_range(const char* fn, const char* arg, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        fail_arg(fn, arg, std::to_string(v), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

// Leading dimension / stride: ld >= min_ld (what = name of the minimum, e.g. "K").
inline void check_ld(const char* fn, const char* arg, int64_t ld, int64_t min_ld, const char* what) {
    if (ld < min_ld)
        fail_arg(fn, arg, std::to_string(ld), std::string("must be >= ") + what + "=" + std::to_string(min_ld));
}

// Sizes stop at INT64_MAX / 16 by default, so that their byte counts (elements of up to 16
// bytes) fit in int64 too: the message says so when that limit, not int64 itself, was passed.
inline std::string limit_note(int64_t limit) {
    return limit == std::numeric_limits<int64_t>::max() ? std::string()
                                                        : " (sizes are limited to " + std::to_string(limit) + ")";
}

// a * b without overflow, and the result must fit in `limit` (default: int64 max / 16 so that a
// byte count of up to 16-byte elements still fits). `what` names the product, e.g. "M*K".
inline int64_t checked_mul(const char* fn, const char* what, int64_t a, int64_t b,
                           int64_t limit = std::numeric_limits<int64_t>::max() / 16) {
    int64_t r = 0;
    if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r > limit)
        throw Error(Status::invalid_argument, std::string(fn) + ": " + what + " = " + std::to_string(a) + "*" +
                                                  std::to_string(b) + " overflows" + limit_note(limit));
    return r;
}

inline int64_t checked_add(const char* fn, const char* what, int64_t a, int64_t b,
                           int64_t limit = std::numeric_limits<int64_t>::max() / 16) {
    int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r) || r > limit)
        throw Error(Status::invalid_argument, std::string(fn) + ": " + what + " = " + std::to_string(a) + "+" +
                                                  std::to_string(b) + " overflows" + limit_note(limit));
    return r;
}

// A float as operator<< prints it, for error messages.
inline std::string float_str(float v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

// Element types of the float-I/O ops (norm, rope, glu, softmax): f32 or bf16.
inline void check_io_dtype(const char* fn, const char* arg, DType t) {
    switch (t) {
        case DType::f32: case DType::bf16: return;
        case DType::s8: case DType::u8: case DType::s32: case DType::f16:
            fail(Status::unsupported, std::string(fn) + ": " + arg + "=" + dtype_name(t) + " is not supported (f32 or bf16)");
    }
    fail_arg(fn, arg, std::to_string(static_cast<int>(t)), "is not a valid DType");
}

}  // namespace xk::detail
