// The program cache: per context in memory (source name + options + source hash -> built
// cl_program, kernels per thread), and on disk (program binaries keyed by platform, device,
// driver version, source hash and options, under gpu::cache_dir()).
//
// Disk file <dir>/<16 hex of the key hash>.bin:
//   "XKCLBIN1" | u64 key length | key text | u64 binary length | binary | u64 FNV-1a of the binary
// The key text is compared in full on load (a hash collision or a file of another driver is a
// miss), the checksum guards against truncation; a file that fails any check, or whose binary
// does not build, is ignored and replaced by a source build. Files are written to a temporary
// name and renamed, so readers never see a partial file.
#if XK_WITH_OPENCL
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dispatch/verbose.hpp"
#include "gpu/cl_sources.hpp"
#include "gpu/context_impl.hpp"

namespace xk::gpu::detail {

namespace {

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

std::string hex(uint64_t v) {
    char b[17];
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
    return b;
}

std::string disk_key(const ContextImpl& c, const std::string& source, const std::string& options) {
    std::ostringstream k;
    k << "xk-cl-v1\nplatform=" << c.info.platform_name << " " << c.info.platform_version << "\ndevice=" << c.info.name
      << "\ndriver=" << c.info.driver_version << "\nsource=" << hex(fnv1a(source.data(), source.size())) << ":"
      << source.size() << "\noptions=" << options << "\n";
    return k.str();
}

bool read_u64(std::istream& is, uint64_t& v) { return static_cast<bool>(is.read(reinterpret_cast<char*>(&v), 8)); }

// The binary stored for `key`, or empty (missing / corrupt / another key). rejected: a file existed.
std::vector<unsigned char> load_binary(const std::string& path, const std::string& key, bool& rejected) {
    rejected = false;
    std::ifstream f(path, std::ios::binary);
    if (!f) return {};
    rejected = true;
    char magic[8];
    if (!f.read(magic, 8) || std::memcmp(magic, "XKCLBIN1", 8) != 0) return {};
    uint64_t klen = 0, blen = 0, sum = 0;
    if (!read_u64(f, klen) || klen != key.size()) return {};
    std::string k(klen, '\0');
    if (!f.read(k.data(), static_cast<std::streamsize>(klen)) || k != key) return {};
    if (!read_u64(f, blen) || blen == 0 || blen > (1ull << 31)) return {};
    std::vector<unsigned char> bin(blen);
    if (!f.read(reinterpret_cast<char*>(bin.data()), static_cast<std::streamsize>(blen))) return {};
    if (!read_u64(f, sum) || sum != fnv1a(bin.data(), bin.size())) return {};
    rejected = false;
    return bin;
}

bool store_binary(const std::string& dir, const std::string& path, const std::string& key,
                  const std::vector<unsigned char>& bin) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                            hex(std::hash<std::thread::id>()(std::this_thread::get_id()));
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return false;
        const uint64_t klen = key.size(), blen = bin.size(), sum = fnv1a(bin.data(), bin.size());
        f.write("XKCLBIN1", 8);
        f.write(reinterpret_cast<const char*>(&klen), 8);
        f.write(key.data(), static_cast<std::streamsize>(key.size()));
        f.write(reinterpret_cast<const char*>(&blen), 8);
        f.write(reinterpret_cast<const char*>(bin.data()), static_cast<std::streamsize>(bin.size()));
        f.write(reinterpret_cast<const char*>(&sum), 8);
        if (!f.flush()) {
            f.close();
            std::filesystem::remove(tmp, ec);
            return false;
        }
    }
    std::filesystem::rename(tmp, path, ec);
    if (ec) std::filesystem::remove(tmp, ec);
    return !ec;
}

std::string build_log(cl_program p, cl_device_id d) {
    size_t n = 0;
    if (clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
    std::string s(n, '\0');
    clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, s.data(), nullptr);
    while (!s.empty() && (s.back() == '\0' || s.back() == '\n')) s.pop_back();
    return s;
}

// Builds entry->program; sets build_error on failure. Counts into c.pstats under programs_mu.
// XK_GPU_CL_OPTIONS: appended to every build's options (part of the disk key); the build log of
// each source build then goes to stderr (e.g. "-cl-nv-verbose": NVIDIA's registers per kernel).
void build_entry(ContextImpl& c, ProgramEntry& e, std::string_view name, const std::string& source,
                 const std::string& base_options) {
    const double t0 = xk::detail::now_us();
    const char* extra = std::getenv("XK_GPU_CL_OPTIONS");
    const std::string options = extra && *extra ? base_options + " " + extra : base_options;
    const std::string dir = cache_dir();
    const std::string key = disk_key(c, source, options);
    const std::string path = dir.empty() ? std::string() : dir + "/" + hex(fnv1a(key.data(), key.size())) + ".bin";
    const char* from = "source";
    if (!path.empty()) {
        bool rejected = false;
        const auto bin = load_binary(path, key, rejected);
        if (!bin.empty()) {
            const unsigned char* ptr = bin.data();
            const size_t len = bin.size();
            cl_int bst = CL_SUCCESS, rc = CL_SUCCESS;
            cl_program p = clCreateProgramWithBinary(c.context, 1, &c.device, &len, &ptr, &bst, &rc);
            if (rc == CL_SUCCESS && bst == CL_SUCCESS && p &&
                clBuildProgram(p, 1, &c.device, options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
                e.program = p;
                from = "disk";
            } else {
                if (p) clReleaseProgram(p);
                rejected = true;
            }
        }
        if (rejected) ++c.disk_rejects;
    }
    bool wrote = false;
    if (!e.program) {
        const char* src = source.c_str();
        const size_t len = source.size();
        cl_int rc = CL_SUCCESS;
        cl_program p = clCreateProgramWithSource(c.context, 1, &src, &len, &rc);
        check_cl(rc, "xk::gpu::get_kernel", "clCreateProgramWithSource");
        rc = clBuildProgram(p, 1, &c.device, options.c_str(), nullptr, nullptr);
        if (rc != CL_SUCCESS) {
            e.build_error = "xk::gpu::get_kernel: building \"" + std::string(name) + "\" with options \"" + options +
                            "\" for " + c.info.name + " failed: " + cl_error_name(rc) + "\n--- build log ---\n" +
                            build_log(p, c.device);
            clReleaseProgram(p);
            return;
        }
        e.program = p;
        if (extra && *extra)
            std::fprintf(stderr, "[xk] build log of \"%.*s\" (options \"%s\"):\n%s\n", static_cast<int>(name.size()), name.data(),
                         options.c_str(), build_log(p, c.device).c_str());
        if (!path.empty()) {
            size_t bsize = 0;
            if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bsize, &bsize, nullptr) == CL_SUCCESS && bsize > 0) {
                std::vector<unsigned char> bin(bsize);
                unsigned char* bp = bin.data();
                if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bp, &bp, nullptr) == CL_SUCCESS)
                    wrote = store_binary(dir, path, key, bin);
            }
        }
    }
    if (std::strcmp(from, "disk") == 0)
        ++c.disk_hits;
    else
        ++c.source_builds;
    if (wrote) ++c.disk_writes;
    if (xk::detail::verbose_level() >= 1)
        xk::detail::verbose_log("gpu_build", "gpu", std::string(name) + ",from=" + from + ",options=" + options + ",device=" + c.info.name,
                    xk::detail::now_us() - t0);
}

cl_kernel kernel_of(ContextImpl& c, ProgramEntry& e, std::string_view kernel_name) {
    std::lock_guard<std::mutex> lk(e.kernels_mu);
    auto key = std::make_pair(std::string(kernel_name), std::this_thread::get_id());
    auto it = e.kernels.find(key);
    if (it != e.kernels.end()) return it->second;
    cl_int rc = CL_SUCCESS;
    cl_kernel k = clCreateKernel(e.program, key.first.c_str(), &rc);
    if (rc != CL_SUCCESS)
        throw Error(Status::runtime_error, "xk::gpu::get_kernel: kernel \"" + key.first + "\": clCreateKernel failed: " +
                                               cl_error_name(rc));
    e.kernels.emplace(key, k);
    ++c.kernels_created;
    return k;
}

// hash_text: the source text is hashed into the memory key (caller-made sources); embedded
// sources are fixed at build time, their name suffices.
cl_kernel get_kernel_impl(const Context& ctx, std::string_view name, const char* text, size_t len, bool hash_text,
                          std::string_view kernel_name, const std::string& options) {
    if (!ctx.impl()) throw Error(Status::invalid_argument, "xk::gpu::get_kernel: context=(empty)");
    ContextImpl& c = *ctx.impl();
    std::string key;
    key.reserve(name.size() + options.size() + 20);
    key.append(name).append("\n").append(options);
    if (hash_text) key.append("\n").append(hex(fnv1a(text, len)));
    std::shared_ptr<ProgramEntry> e;
    {
        std::lock_guard<std::mutex> lk(c.programs_mu);
        auto& slot = c.programs[key];
        if (!slot) slot = std::make_shared<ProgramEntry>();
        e = slot;
    }
    {
        std::lock_guard<std::mutex> lk(e->build_mu);
        if (!e->program && e->build_error.empty()) {
            build_entry(c, *e, name, std::string(text, len), options);
        } else if (e->program) {
            ++c.memory_hits;
        }
        if (!e->program) throw Error(Status::runtime_error, e->build_error);
    }
    return kernel_of(c, *e, kernel_name);
}

void release_entry(ProgramEntry& e) {
    for (auto& kv : e.kernels) clReleaseKernel(kv.second);
    e.kernels.clear();
    if (e.program) clReleaseProgram(e.program);
    e.program = nullptr;
}

}  // namespace

cl_kernel get_kernel(const Context& ctx, std::string_view source_name, std::string_view kernel_name,
                     const std::string& build_options) {
    const std::string name(source_name);
    const char* src = embedded_source(name.c_str());
    if (!src)
        throw Error(Status::invalid_argument,
                    "xk::gpu::get_kernel: source_name=\"" + name + "\" is not an embedded .cl file (src/gpu/kernels)");
    return get_kernel_impl(ctx, source_name, src, std::strlen(src), false, kernel_name, build_options);
}

cl_kernel get_kernel_from_source(const Context& ctx, std::string_view source_key, const std::string& source,
                                 std::string_view kernel_name, const std::string& build_options) {
    return get_kernel_impl(ctx, source_key, source.data(), source.size(), true, kernel_name, build_options);
}

ProgramCacheStats program_cache_stats(const Context& ctx) {
    const ContextImpl& c = *ctx.impl();
    ProgramCacheStats s;
    s.memory_hits = c.memory_hits;
    s.disk_hits = c.disk_hits;
    s.source_builds = c.source_builds;
    s.disk_writes = c.disk_writes;
    s.disk_rejects = c.disk_rejects;
    s.kernels_created = c.kernels_created;
    return s;
}

void clear_program_memory_cache(const Context& ctx) {
    ContextImpl& c = *ctx.impl();
    std::unordered_map<std::string, std::shared_ptr<ProgramEntry>> old;
    {
        std::lock_guard<std::mutex> lk(c.programs_mu);
        old.swap(c.programs);
        ++c.programs_gen;
    }
    for (auto& kv : old) {
        std::lock_guard<std::mutex> lk(kv.second->build_mu);
        std::lock_guard<std::mutex> lk2(kv.second->kernels_mu);
        release_entry(*kv.second);
    }
}

void release_programs(ContextImpl& c) {
    for (auto& kv : c.programs) release_entry(*kv.second);
    c.programs.clear();
}

}  // namespace xk::gpu::detail
#endif
