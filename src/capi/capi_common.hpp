// Helpers for the C API: translate C++ exceptions into xk_status + a per-thread message.
#pragma once
#include <cstring>
#include <new>
#include <string>

#include "xk/error.hpp"
#include "xk/xk.h"

namespace xk::detail {

void set_last_error(const std::string& msg);

// The int a C caller stored in an enum-typed argument or field. A C enum object may hold any int
// (77, 1000, INT_MIN ...): the value is read as an int, never loaded as the enumeration type
// (in C++ an out-of-range load is undefined behaviour, and a sanitized build stops there), and
// the C++ layer validates it (its enums are `enum class : int`, which hold any int).
template <class E>
inline int c_enum(const E& e) noexcept {
    static_assert(sizeof(E) == sizeof(int), "C API enums are int-sized");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

// Runs f(); returns XK_SUCCESS, or the status of the exception it threw (message stored).
template <class F>
xk_status capi_call(F&& f) noexcept {
    try {
        f();
        set_last_error("");
        return XK_SUCCESS;
    } catch (const xk::Error& e) {
        set_last_error(e.what());
        return static_cast<xk_status>(static_cast<int>(e.code()));
    } catch (const std::bad_alloc&) {
        set_last_error("out of memory");
        return XK_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        set_last_error(e.what());
        return XK_RUNTIME_ERROR;
    } catch (...) {
        set_last_error("unknown error");
        return XK_RUNTIME_ERROR;
    }
}

}  // namespace xk::detail
