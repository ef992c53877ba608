// xk-info: what this machine has, the ISA cap, what each op family picks for a representative
// descriptor, the OpenCL devices seen, and library / dependency versions.
//   xk-info            human-readable report
//   xk-info --brief    CPU, ISA levels and the cap only
//   xk-info --json     everything, as one JSON object (for scripts)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/streaming.hpp"
#include "tools/selections.hpp"
#include "xk/xk.hpp"

namespace {

std::string json_escape(const std::string& s) {
    std::string o;
    for (char c : s) {
        if (c == '"' || c == '\\') o += '\\';
        if (static_cast<unsigned char>(c) < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
            continue;
        }
        o += c;
    }
    return o;
}

std::string human_bytes(int64_t b) {
    char buf[32];
    if (b >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.1f GiB", b / 1073741824.0);
    else if (b >= (int64_t(1) << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024) std::snprintf(buf, sizeof buf, "%lld KiB", static_cast<long long>(b / 1024));
    else std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
    return buf;
}

std::vector<std::pair<const char*, bool>> features(const xk::CpuInfo& c) {
    return {{"sse4.2", c.sse42},        {"avx", c.avx},           {"avx2", c.avx2},
            {"fma", c.fma},             {"f16c", c.f16c},         {"bmi2", c.bmi2},
            {"avx512f", c.avx512f},     {"avx512bw", c.avx512bw}, {"avx512vl", c.avx512vl},
            {"avx512dq", c.avx512dq},   {"avx512cd", c.avx512cd}, {"avx512_vnni", c.avx512_vnni},
            {"avx512_bf16", c.avx512_bf16}, {"avx512_fp16", c.avx512_fp16}, {"avx_vnni", c.avx_vnni},
            {"amx_tile", c.amx_tile},   {"amx_bf16", c.amx_bf16}, {"amx_int8", c.amx_int8}};
}

std::string isa_list(const std::vector<xk::Isa>& v) {
    std::string s;
    for (xk::Isa i : v) s += std::string(s.empty() ? "" : " ") + xk::isa_name(i);
    return s;
}

std::vector<xk::Isa> supported_levels() {
    std::vector<xk::Isa> v;
    for (int i = 0; i <= static_cast<int>(xk::Isa::amx); ++i)
        if (xk::isa_supported(static_cast<xk::Isa>(i))) v.push_back(static_cast<xk::Isa>(i));
    return v;
}

int print_text(bool brief) {
    const xk::CpuInfo& c = xk::cpu_info();
    const char* env_cap = std::getenv("XK_MAX_ISA");
    std::printf("xkernels %s\n", xk::version_string());
    std::printf("CPU        %s (%s, family %d model %d stepping %d)\n", c.brand.c_str(), c.vendor.c_str(), c.family,
                c.model, c.stepping);
    std::printf("ISA        machine: %s   cap: %s   effective: %s\n", xk::isa_name(xk::hardware_isa()),
                env_cap ? (std::string("XK_MAX_ISA=") + env_cap).c_str() : "none", xk::isa_name(xk::max_isa()));
    std::printf("levels     supported by the machine: %s\n", isa_list(supported_levels()).c_str());
    std::printf("           available under the cap:  %s\n", isa_list(xk::available_isas()).c_str());
    if (brief) return 0;
    std::string yes, no;
    for (auto& [name, on] : features(c)) (on ? yes : no) += std::string(" ") + name;
    std::printf("features   yes:%s\n           no: %s\n", yes.c_str(), no.empty() ? " -" : no.c_str());
    std::printf("OS state   ymm %s, zmm %s, AMX tiles %s, AMX permission %s\n", c.os_ymm ? "on" : "off",
                c.os_zmm ? "on" : "off", c.os_tile ? "on" : "off",
                c.amx_tile ? (c.amx_permission ? "granted" : "refused") : "n/a");
    std::printf("caches     L1d %s, L2 %s (shared by %d), L3 %s (shared by %d)   [%s]\n", human_bytes(c.l1d_bytes).c_str(),
                human_bytes(c.l2_bytes).c_str(), c.l2_shared_by, human_bytes(c.l3_bytes).c_str(), c.l3_shared_by,
                c.topology_source.c_str());
    std::printf("topology   %d package(s), %d NUMA node(s), %d core(s), %d logical CPU(s)\n", c.packages,
                c.numa_nodes, c.cores, c.logical_cpus);
    std::printf("threads    %d (%s)\n", xk::get_num_threads(), xk::threading_backend());
    std::printf("streaming  outputs of %s and more per call (memory-bound ops; XK_NT_STORE_THRESHOLD)\n",
                human_bytes(xk::detail::nt_store_threshold()).c_str());
    std::printf("\nop family selections (representative descriptor -> implementation under the cap)\n");
    for (const auto& s : xk::tools::selections())
        std::printf("  %-16s %-60s -> %s\n", s.family.c_str(), s.desc.c_str(), s.impl.c_str());
    std::printf("\nOpenCL devices\n");
    std::string err;
    const auto devs = xk::gpu::devices(&err);
    if (devs.empty()) std::printf("  none (%s)\n", err.c_str());
    for (const auto& d : devs) {
        std::printf("  [%d.%d] %s: %s (%s), %s, %d CUs, %s global, %s local%s%s\n", d.platform_index, d.device_index,
                    d.platform_name.c_str(), d.name.c_str(), d.type.c_str(), d.device_version.c_str(), d.compute_units,
                    human_bytes(d.global_mem_bytes).c_str(), human_bytes(d.local_mem_bytes).c_str(),
                    d.intel_subgroups ? ", cl_intel_subgroups" : "",
                    d.intel_subgroup_matrix ? ", XMX (subgroup matrix)" : "");
    }
    if (!devs.empty()) {
        try {
            const int sel = xk::gpu::selected_device_index();
            const auto& d = devs[static_cast<size_t>(sel)];
            const char* env = std::getenv("XK_GPU_DEVICE");
            std::printf("  selected: [%d] %s / %s (%s), driver %s, XMX %s\n", sel, d.platform_name.c_str(),
                        d.name.c_str(), env && *env ? (std::string("XK_GPU_DEVICE=") + env).c_str() : "default: first GPU, else first device",
                        d.driver_version.c_str(), d.intel_subgroup_matrix && d.intel_subgroups ? "yes" : "no");
            const char* xmx_env = std::getenv("XK_GPU_XMX");
            const std::string xe = xmx_env ? xmx_env : "";
            std::printf("  gpu::gemm bf16 / f16: %s; f32: gpu:tiled (tuned, %s)\n",
                        xe == "emulate" ? "gpu:xmx_emu (XK_GPU_XMX=emulate)"
                        : xe != "0" && xe != "off" && d.intel_subgroup_matrix && d.intel_subgroups ? "gpu:xmx (DPAS)"
                                                                                                  : "gpu:tiled",
                        xk::gpu::cache_dir().empty() ? "results not kept" : "results in <program cache>/gemm_tune.txt");
        } catch (const std::exception& e) {
            std::printf("  selected: none (%s)\n", e.what());
        }
    }
    const std::string gpu_cache = xk::gpu::cache_dir();
    std::printf("  program cache: %s\n", gpu_cache.empty() ? "off (XK_GPU_CACHE_DIR=off or no home)" : gpu_cache.c_str());
    std::printf("\nversions\n");
    std::istringstream is(xk::dependency_versions());
    std::string line;
    while (std::getline(is, line)) std::printf("  %s\n", line.c_str());
    return 0;
}

int print_json() {
    const xk::CpuInfo& c = xk::cpu_info();
    std::ostringstream o;
    o << "{\"version\":\"" << xk::version_string() << "\"";
    o << ",\"cpu\":{\"vendor\":\"" << json_escape(c.vendor) << "\",\"brand\":\"" << json_escape(c.brand)
      << "\",\"family\":" << c.family << ",\"model\":" << c.model << ",\"stepping\":" << c.stepping << "}";
    o << ",\"features\":{";
    bool first = true;
    for (auto& [name, on] : features(c)) {
        o << (first ? "" : ",") << "\"" << name << "\":" << (on ? "true" : "false");
        first = false;
    }
    o << "},\"os\":{\"ymm\":" << (c.os_ymm ? "true" : "false") << ",\"zmm\":" << (c.os_zmm ? "true" : "false")
      << ",\"tile\":" << (c.os_tile ? "true" : "false") << ",\"amx_permission\":" << (c.amx_permission ? "true" : "false")
      << "}";
    o << ",\"caches\":{\"l1d\":" << c.l1d_bytes << ",\"l2\":" << c.l2_bytes << ",\"l3\":" << c.l3_bytes << "}";
    o << ",\"topology\":{\"packages\":" << c.packages << ",\"numa_nodes\":" << c.numa_nodes << ",\"cores\":" << c.cores
      << ",\"logical_cpus\":" << c.logical_cpus << ",\"source\":\"" << c.topology_source << "\"}";
    const char* env_cap = std::getenv("XK_MAX_ISA");
    o << ",\"isa\":{\"hardware\":\"" << xk::isa_name(xk::hardware_isa()) << "\",\"cap_env\":"
      << (env_cap ? "\"" + json_escape(env_cap) + "\"" : std::string("null")) << ",\"effective\":\""
      << xk::isa_name(xk::max_isa()) << "\",\"available\":[";
    first = true;
    for (xk::Isa i : xk::available_isas()) {
        o << (first ? "" : ",") << "\"" << xk::isa_name(i) << "\"";
        first = false;
    }
    o << "]},\"threads\":" << xk::get_num_threads() << ",\"threading\":\"" << xk::threading_backend() << "\"";
    o << ",\"selections\":[";
    first = true;
    for (const auto& s : xk::tools::selections()) {
        o << (first ? "" : ",") << "{\"family\":\"" << json_escape(s.family) << "\",\"desc\":\"" << json_escape(s.desc)
          << "\",\"impl\":\"" << json_escape(s.impl) << "\"}";
        first = false;
    }
    o << "],\"opencl\":[";
    first = true;
    for (const auto& d : xk::gpu::devices()) {
        o << (first ? "" : ",") << "{\"platform\":\"" << json_escape(d.platform_name) << "\",\"name\":\""
          << json_escape(d.name) << "\",\"type\":\"" << d.type << "\",\"version\":\"" << json_escape(d.device_version)
          << "\",\"compute_units\":" << d.compute_units << ",\"global_mem\":" << d.global_mem_bytes
          << ",\"intel_subgroups\":" << (d.intel_subgroups ? "true" : "false")
          << ",\"intel_subgroup_matrix\":" << (d.intel_subgroup_matrix ? "true" : "false") << "}";
        first = false;
    }
    int gpu_sel = -1;
    try {
        if (!xk::gpu::devices().empty()) gpu_sel = xk::gpu::selected_device_index();
    } catch (const std::exception&) {
    }
    o << "],\"opencl_selected\":" << gpu_sel << ",\"opencl_cache_dir\":\"" << json_escape(xk::gpu::cache_dir()) << "\"";
    o << ",\"dependencies\":\"" << json_escape(xk::dependency_versions()) << "\"}";
    std::printf("%s\n", o.str().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    bool json = false, brief = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--json")) json = true;
        else if (!std::strcmp(argv[i], "--brief")) brief = true;
        else {
            std::fprintf(stderr, "usage: xk-info [--json | --brief]\n");
            return 2;
        }
    }
    try {
        return json ? print_json() : print_text(brief);
    } catch (const xk::Error& e) {
        std::fprintf(stderr, "xk-info: %s\n", e.what());
        return 1;
    }
}
