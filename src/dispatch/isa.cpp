// ISA ranking and the process-wide cap (XK_MAX_ISA, set_max_isa, IsaCap).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "xk/error.hpp"
#include "xk/isa.hpp"
#include "dispatch/verbose.hpp"

namespace xk {
namespace {

constexpr Isa kAll[] = {Isa::scalar, Isa::avx2, Isa::avx2_vnni, Isa::avx512, Isa::avx512_vnni, Isa::avx512_bf16, Isa::amx};
constexpr int kNoCap = 1000;
std::atomic<int> g_cpp_cap{kNoCap};

struct EnvCap {
    int level = kNoCap;
    std::string error;  // non-empty: XK_MAX_ISA holds an unknown value
};

const EnvCap& env_cap() {
    static const EnvCap cap = [] {
        EnvCap c;
        const char* v = std::getenv("XK_MAX_ISA");
        if (!v || !*v) return c;
        try {
            c.level = static_cast<int>(parse_isa(v));
        } catch (const Error& e) {
            c.error = std::string("XK_MAX_ISA: ") + e.what();
        }
        return c;
    }();
    return cap;
}

std::string valid_list() {
    std::string s;
    for (Isa i : kAll) s += std::string(s.empty() ? "" : ", ") + isa_name(i);
    return s + ", all";
}

}  // namespace

const char* status_name(Status s) noexcept {
    switch (s) {
        case Status::success: return "success";
        case Status::invalid_argument: return "invalid_argument";
        case Status::unsupported: return "unsupported";
        case Status::isa_unavailable: return "isa_unavailable";
        case Status::out_of_memory: return "out_of_memory";
        case Status::runtime_error: return "runtime_error";
    }
    return "unknown";
}

const char* isa_name(Isa isa) noexcept {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx2_vnni: return "avx2_vnni";
        case Isa::avx512: return "avx512";
        case Isa::avx512_vnni: return "avx512_vnni";
        case Isa::avx512_bf16: return "avx512_bf16";
        case Isa::amx: return "amx";
    }
    return "unknown";
}

Isa parse_isa(std::string_view name) {
    std::string s(name);
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (s == "all" || s == "max") return Isa::amx;
    for (Isa i : kAll)
        if (s == isa_name(i)) return i;
    throw Error(Status::invalid_argument,
                "unknown ISA '" + std::string(name) + "'; valid values: " + valid_list());
}

bool isa_supported(Isa isa) {
    const CpuInfo& c = cpu_info();
    switch (isa) {
        case Isa::scalar: return true;
        case Isa::avx2: return c.avx2 && c.fma && c.f16c;
        case Isa::avx2_vnni:
            return isa_supported(Isa::avx2) && (c.avx_vnni || (c.avx512_vnni && c.avx512vl && c.os_zmm));
        case Isa::avx512:
            return isa_supported(Isa::avx2) && c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq;
        case Isa::avx512_vnni: return isa_supported(Isa::avx512) && c.avx512_vnni;
        case Isa::avx512_bf16: return isa_supported(Isa::avx512_vnni) && c.avx512_bf16;
        case Isa::amx:
            return isa_supported(Isa::avx512_bf16) && c.amx_tile && c.amx_bf16 && c.amx_int8 &&
                   c.amx_permission;
    }
    return false;
}

Isa hardware_isa() {
    static const Isa best = [] {
        Isa b = Isa::scalar;
        for (Isa i : kAll)
            if (isa_supported(i)) b = i;
        return b;
    }();
    return best;
}

Isa max_isa() {
    const EnvCap& e = env_cap();
    if (!e.error.empty()) throw Error(Status::invalid_argument, e.error);
    int level = static_cast<int>(hardware_isa());
    level = std::min(level, e.level);
    level = std::min(level, g_cpp_cap.load(std::memory_order_acquire));
    return static_cast<Isa>(level);
}

std::vector<Isa> available_isas() {
    std::vector<Isa> v;
    const Isa top = max_isa();
    for (Isa i : kAll)
        if (i <= top && isa_supported(i)) v.push_back(i);
    return v;
}

void require_isa(Isa isa, const char* what) {
    if (!isa_supported(isa))
        throw Error(Status::isa_unavailable, std::string(what) + ": ISA " + isa_name(isa) +
                                                 " is not supported by this machine (best: " +
                                                 isa_name(hardware_isa()) + ")");
    if (isa > max_isa())
        throw Error(Status::isa_unavailable, std::string(what) + ": ISA " + isa_name(isa) +
                                                 " is above the current cap " + isa_name(max_isa()));
}

void set_max_isa(Isa cap) {
    if (static_cast<int>(cap) < 0 || static_cast<int>(cap) > static_cast<int>(Isa::amx))
        throw Error(Status::invalid_argument, "set_max_isa: cap=" + std::to_string(static_cast<int>(cap)) +
                                                  " is not an xk::Isa value");
    if (!isa_supported(cap))
        throw Error(Status::isa_unavailable, std::string("set_max_isa: cap=") + isa_name(cap) +
                                                 " is not supported by this machine (best: " +
                                                 isa_name(hardware_isa()) + ")");
    g_cpp_cap.store(static_cast<int>(cap), std::memory_order_release);
    detail::verbose_log("cap", "set_max_isa", isa_name(cap), 0.0);
}

void reset_max_isa() { g_cpp_cap.store(kNoCap, std::memory_order_release); }

IsaCap::IsaCap(Isa cap) : previous_(g_cpp_cap.load(std::memory_order_acquire)) { set_max_isa(cap); }
IsaCap::~IsaCap() { g_cpp_cap.store(previous_, std::memory_order_release); }

}  // namespace xk
