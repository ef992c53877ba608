// xkernels — CPU features, ISA levels and the process-wide / scoped ISA cap.
//
// ISA levels are cumulative: each one requires everything below it.
//   scalar       portable C++ (the reference kernels)
//   avx2         AVX2 + FMA + F16C, ymm state enabled by the OS
//   avx2_vnni    + VPDPBUSD / VPDPWSSD on ymm: AVX-VNNI (VEX: Alder Lake and later, Zen 5), or
//                AVX512-VNNI with AVX512-VL (the EVEX encoding of the same ymm instructions: Cascade
//                Lake, Ice Lake, Zen 4). Kernels at this level emit the VEX form when the machine has
//                AVX-VNNI (cpu_info().avx_vnni) and the EVEX form otherwise.
//   avx512       AVX-512 F/BW/VL/DQ, zmm state enabled by the OS
//   avx512_vnni  + AVX512-VNNI (VPDPBUSD)
//   avx512_bf16  + AVX512-BF16 (VCVTNE2PS2BF16, VDPBF16PS)
//   amx          + AMX-TILE/BF16/INT8, tile state enabled by the OS and the Linux XTILEDATA
//                permission granted (arch_prctl ARCH_REQ_XCOMP_PERM)
// One exception to "cumulative": avx512 does not require avx2_vnni (Skylake-SP / -X have AVX-512
// without any VNNI); there the avx2_vnni level is simply not supported and is skipped
// (available_isas() leaves it out, a registry never picks its kernels). avx512_vnni and above
// imply it. AVX512-FP16 is an extra feature flag, not a level: kernels may test it directly.
//
// The cap: XK_MAX_ISA=<level> in the environment (read once, on first use; a value above this
// machine's level is clamped to it, an unknown value is an xk::Error listing the valid ones), or
// xk::set_max_isa() / xk::IsaCap from C++ (which reject a level this machine lacks).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace xk {

enum class Isa : int { scalar = 0, avx2 = 1, avx2_vnni = 2, avx512 = 3, avx512_vnni = 4, avx512_bf16 = 5, amx = 6 };

const char* isa_name(Isa isa) noexcept;
// Parses "scalar", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx" (case-insensitive; "all"
// means no cap). Throws xk::Error(invalid_argument) naming the valid values otherwise.
Isa parse_isa(std::string_view name);

struct CpuInfo {
    std::string vendor;   // "AuthenticAMD", "GenuineIntel", ...
    std::string brand;    // processor brand string
    int family = 0, model = 0, stepping = 0;  // display family / model
    // Instruction-set features (already masked by OS support where that applies).
    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, avx512cd = false;
    bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false, avx_vnni = false;
    bool amx_tile = false, amx_bf16 = false, amx_int8 = false;
    // OS state (XCR0 through XGETBV) and the Linux AMX permission.
    bool os_ymm = false, os_zmm = false, os_tile = false;
    bool amx_permission = false;  // ARCH_REQ_XCOMP_PERM(XTILEDATA) granted
    // Topology and caches (hwloc where it knows, CPUID otherwise). Sizes in bytes, per instance.
    int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;
    int l2_shared_by = 1, l3_shared_by = 1;  // logical CPUs sharing one instance
    int packages = 1, numa_nodes = 1, cores = 1, logical_cpus = 1;
    std::string topology_source;  // "hwloc" or "cpuid"
};

// The machine's features, detected once (thread-safe). Also asks for the AMX permission once.
const CpuInfo& cpu_info();

// Highest level this machine supports, ignoring the cap.
Isa hardware_isa();
// Whether the machine supports this level (ignoring the cap).
bool isa_supported(Isa isa);
// Effective level: min(hardware_isa(), cap). Throws if XK_MAX_ISA holds an unknown value.
Isa max_isa();
// Every level <= max_isa(), lowest first: what a test should sweep.
std::vector<Isa> available_isas();
// Throws xk::Error(isa_unavailable) naming the ISA when the machine or the cap does not allow it.
void require_isa(Isa isa, const char* what);

// Process-wide cap. Throws xk::Error(isa_unavailable) for a level this machine does not support.
void set_max_isa(Isa cap);
// Removes the C++-set cap (the XK_MAX_ISA cap still applies).
void reset_max_isa();

// Scoped cap, for tests and callers that want a lower variant for a while. Caps nest; the
// previous cap is restored on destruction. Not meant to be used from several threads at once
// with different values (the cap is process-wide, like oneDNN's).
class IsaCap {
public:
    explicit IsaCap(Isa cap);
    ~IsaCap();
    IsaCap(const IsaCap&) = delete;
    IsaCap& operator=(const IsaCap&) = delete;

private:
    int previous_;
};

}  // namespace xk
