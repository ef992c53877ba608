// xk-info: what this machine has and what each op family picks. --json for scripts.
#include <cstdio>
#include <cstring>
#include <string>

#include "xk/xk.hpp"

int main(int argc, char** argv) {
    const bool json = argc > 1 && std::strcmp(argv[1], "--json") == 0;
    try {
        const xk::CpuInfo& c = xk::cpu_info();
        if (json) {
            std::printf("{\"brand\":\"%s\",\"max_isa\":\"%s\",\"hardware_isa\":\"%s\"}\n", c.brand.c_str(),
                        xk::isa_name(xk::max_isa()), xk::isa_name(xk::hardware_isa()));
        } else {
            std::printf("xkernels %s\nCPU: %s\nhardware ISA: %s\nmax ISA (cap applied): %s\n", xk::version_string(),
                        c.brand.c_str(), xk::isa_name(xk::hardware_isa()), xk::isa_name(xk::max_isa()));
        }
    } catch (const xk::Error& e) {
        std::fprintf(stderr, "xk-info: %s\n", e.what());
        return 1;
    }
    return 0;
}
