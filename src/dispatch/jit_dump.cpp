// XK_JIT_DUMP: every generated kernel's code written to a file, for objdump / llvm-mca (the
// counterpart of ONEDNN_JIT_DUMP). See jit_generator.hpp.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <unistd.h>

#include "dispatch/jit_generator.hpp"
#include "dispatch/verbose.hpp"

namespace xk::detail {

std::string jit_dump(const void* code, size_t size) {
    const char* e = std::getenv("XK_JIT_DUMP");
    if (!e || !*e || std::string(e) == "0") return {};
    static std::atomic<int> counter{0};
    const std::string dir = std::string(e) == "1" ? "." : std::string(e);
    char name[64];
    std::snprintf(name, sizeof name, "/xk_jit_%d_%04d.bin", static_cast<int>(::getpid()), counter++);
    const std::string path = dir + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) {
        std::fprintf(stderr, "xk: XK_JIT_DUMP: cannot write %s\n", path.c_str());
        return {};
    }
    const bool ok = std::fwrite(code, 1, size, f) == size;
    if (std::fclose(f) != 0 || !ok) {
        std::fprintf(stderr, "xk: XK_JIT_DUMP: short write to %s\n", path.c_str());
        return {};
    }
    verbose_log("jit_dump", path, std::to_string(size) + " bytes", 0.0);
    return path;
}

}  // namespace xk::detail
