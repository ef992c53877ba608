// C API: errors, ISA, threads, axpby.
#include "capi/capi_common.hpp"
#include "xk/eltwise.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace xk::detail {
namespace {
thread_local std::string g_last_error;
}
void set_last_error(const std::string& msg) { g_last_error = msg; }
}  // namespace xk::detail

using xk::detail::capi_call;

extern "C" {

const char* xk_last_error(void) { return xk::detail::g_last_error.c_str(); }
const char* xk_version(void) { return xk::version_string(); }

xk_status xk_get_max_isa(xk_isa* out) {
    return capi_call([&] {
        if (!out) throw xk::Error(xk::Status::invalid_argument, "xk_get_max_isa: out=null must not be a null pointer");
        *out = static_cast<xk_isa>(static_cast<int>(xk::max_isa()));
    });
}

xk_status xk_set_max_isa(xk_isa cap) { return capi_call([&] { xk::set_max_isa(static_cast<xk::Isa>(xk::detail::c_enum(cap))); }); }

const char* xk_isa_name(xk_isa isa) { return xk::isa_name(static_cast<xk::Isa>(xk::detail::c_enum(isa))); }

xk_status xk_set_num_threads(int n) { return capi_call([&] { xk::set_num_threads(n); }); }

xk_status xk_axpby(int64_t n, float alpha, const float* x, float beta, float* y) {
    return capi_call([&] { xk::axpby(n, alpha, x, beta, y); });
}

}  // extern "C"
