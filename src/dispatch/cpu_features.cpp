// CPUID / XGETBV / hwloc detection of the machine, and the Linux AMX permission request.
#include <cpuid.h>
#include <hwloc.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "xk/isa.hpp"
#include "common/cpu_vendor.hpp"
#include "dispatch/xbyak_config.hpp"

namespace xk {
namespace {

uint64_t xgetbv0() {
    uint32_t eax = 0, edx = 0;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return (static_cast<uint64_t>(edx) << 32) | eax;
}

// Linux: ask once for permission to use the AMX tile data state (XFEATURE_XTILEDATA = 18).
bool request_amx_permission() {
#if defined(__linux__)
    constexpr int ARCH_GET_XCOMP_PERM = 0x1022;
    constexpr int ARCH_REQ_XCOMP_PERM = 0x1023;
    constexpr int XFEATURE_XTILEDATA = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return false;
    unsigned long bitmask = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0) return false;
    return (bitmask & (1ul << XFEATURE_XTILEDATA)) != 0;
#else
    return false;
#endif
}

void detect_topology(CpuInfo& c) {
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) return;
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    auto count = [&](hwloc_obj_type_t t) { return hwloc_get_nbobjs_by_type(topo, t); };
    c.packages = std::max(1, count(HWLOC_OBJ_PACKAGE));
    c.numa_nodes = std::max(1, count(HWLOC_OBJ_NUMANODE));
    c.cores = std::max(1, count(HWLOC_OBJ_CORE));
    c.logical_cpus = std::max(1, count(HWLOC_OBJ_PU));
    auto cache = [&](hwloc_obj_type_t t, int64_t& bytes, int* shared) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, t, 0);
        if (!o || !o->attr) return;
        bytes = static_cast<int64_t>(o->attr->cache.size);
        if (shared && o->cpuset) *shared = std::max(1, hwloc_bitmap_weight(o->cpuset));
    };
    cache(HWLOC_OBJ_L1CACHE, c.l1d_bytes, nullptr);
    cache(HWLOC_OBJ_L2CACHE, c.l2_bytes, &c.l2_shared_by);
    cache(HWLOC_OBJ_L3CACHE, c.l3_bytes, &c.l3_shared_by);
    c.topology_source = "hwloc";
    hwloc_topology_destroy(topo);
}

CpuInfo detect() {
    CpuInfo c;
    Xbyak::util::Cpu x;
    using X = Xbyak::util::Cpu;
    uint32_t a, b, cc, d;
    __cpuid(0, a, b, cc, d);
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &cc, 4);
    c.vendor = vendor;
    c.family = x.displayFamily;
    c.model = x.displayModel;
    c.stepping = static_cast<int>(x.stepping);
    __cpuid(0x80000000u, a, b, cc, d);
    if (a >= 0x80000004u) {
        char brand[49] = {};
        for (uint32_t i = 0; i < 3; ++i) {
            uint32_t r[4];
            __cpuid(0x80000002u + i, r[0], r[1], r[2], r[3]);
            std::memcpy(brand + 16 * i, r, 16);
        }
        c.brand = brand;
        while (!c.brand.empty() && c.brand.back() == ' ') c.brand.pop_back();
        while (!c.brand.empty() && c.brand.front() == ' ') c.brand.erase(c.brand.begin());
    }
    __cpuid(1, a, b, cc, d);
    const bool osxsave = (cc >> 27) & 1u;
    const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    c.os_ymm = (xcr0 & 0x6) == 0x6;
    c.os_zmm = c.os_ymm && ((xcr0 >> 5) & 7) == 7;
    c.os_tile = ((xcr0 >> 17) & 3) == 3;

    c.sse42 = x.has(X::tSSE42);
    c.avx = x.has(X::tAVX) && c.os_ymm;
    c.avx2 = x.has(X::tAVX2) && c.os_ymm;
    c.fma = x.has(X::tFMA) && c.os_ymm;
    c.f16c = x.has(X::tF16C) && c.os_ymm;
    c.bmi2 = x.has(X::tBMI2);
    c.avx512f = x.has(X::tAVX512F) && c.os_zmm;
    c.avx512bw = x.has(X::tAVX512BW) && c.os_zmm;
    c.avx512vl = x.has(X::tAVX512VL) && c.os_zmm;
    c.avx512dq = x.has(X::tAVX512DQ) && c.os_zmm;
    c.avx512cd = x.has(X::tAVX512CD) && c.os_zmm;
    c.avx512_vnni = x.has(X::tAVX512_VNNI) && c.os_zmm;
    c.avx512_bf16 = x.has(X::tAVX512_BF16) && c.os_zmm;
    c.avx512_fp16 = x.has(X::tAVX512_FP16) && c.os_zmm;
    c.avx_vnni = x.has(X::tAVX_VNNI) && c.os_ymm;
    c.amx_tile = x.has(X::tAMX_TILE) && c.os_tile;
    c.amx_bf16 = x.has(X::tAMX_BF16) && c.os_tile;
    c.amx_int8 = x.has(X::tAMX_INT8) && c.os_tile;
    c.amx_permission = c.amx_tile && request_amx_permission();

    // CPUID cache sizes as a fallback when hwloc knows nothing.
    // (xbyak 6.68 reads the Intel leaf 4 only and throws for levels it did not find, e.g. on AMD.)
    int64_t* sizes[3] = {&c.l1d_bytes, &c.l2_bytes, &c.l3_bytes};
    for (uint32_t i = 0; i < 3; ++i) {
        try {
            *sizes[i] = x.getDataCacheSize(i);
        } catch (const Xbyak::Error&) {
        }
    }
    c.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    c.cores = c.logical_cpus;
    c.topology_source = "cpuid";
    detect_topology(c);
    return c;
}

}  // namespace

const CpuInfo& cpu_info() {
    static const CpuInfo info = detect();
    return info;
}

namespace detail {
bool cpu_is_amd() {
    static const bool v = cpu_info().vendor == "AuthenticAMD";
    return v;
}
bool cpu_is_intel() {
    static const bool v = cpu_info().vendor == "GenuineIntel";
    return v;
}
}  // namespace detail

}  // namespace xk
