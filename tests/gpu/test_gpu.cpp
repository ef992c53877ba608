// OpenCL backend runtime: device enumeration and selection, contexts, buffers and copies, events,
// the program cache (memory and disk), the caching allocator (split / merge / reuse / stats /
// out of memory), error messages. Every test that needs a device skips (GTEST_SKIP, saying so)
// when there is none; PoCL's CPU device serves in CI.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_util.hpp"
#include "gpu/cl_sources.hpp"
#include "gpu/context_impl.hpp"
#include "xk/gpu.hpp"

#if __has_include(<CL/cl.h>)
#include "gpu/runtime.hpp"
#define XK_TEST_HAVE_CL 1
#endif

namespace gpu = xk::gpu;

namespace {

// One context for the whole executable (PoCL contexts are not free), or null without a device.
gpu::Context* shared_ctx() {
    static gpu::Context* ctx = []() -> gpu::Context* {
        if (!gpu::built_with_opencl() || gpu::devices().empty()) return nullptr;
        return new gpu::Context();
    }();
    return ctx;
}

#define XK_NEED_GPU()                                                                                            \
    if (!shared_ctx()) GTEST_SKIP() << "no OpenCL device (or built without OpenCL): GPU tests skipped";          \
    const gpu::Context& ctx = *shared_ctx()

// A fresh cache directory per test process.
struct TempCacheDir {
    std::string path;
    std::string old;
    bool had_old = false;
    TempCacheDir() {
        path = (std::filesystem::temp_directory_path() / ("xk_cl_cache_test_" + std::to_string(::getpid()))).string();
        std::filesystem::remove_all(path);
        if (const char* o = std::getenv("XK_GPU_CACHE_DIR")) {
            old = o;
            had_old = true;
        }
        setenv("XK_GPU_CACHE_DIR", path.c_str(), 1);
    }
    ~TempCacheDir() {
        if (had_old)
            setenv("XK_GPU_CACHE_DIR", old.c_str(), 1);
        else
            unsetenv("XK_GPU_CACHE_DIR");
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

struct EnvGuard {
    std::string name, old;
    bool had = false;
    EnvGuard(const char* n, const char* v) : name(n) {
        if (const char* o = std::getenv(n)) {
            old = o;
            had = true;
        }
        if (v)
            setenv(n, v, 1);
        else
            unsetenv(n);
    }
    ~EnvGuard() {
        if (had)
            setenv(name.c_str(), old.c_str(), 1);
        else
            unsetenv(name.c_str());
    }
};

}  // namespace

TEST(Gpu, DeviceEnumeration) {
    std::string err;
    const auto devs = gpu::devices(&err);
    if (!gpu::built_with_opencl()) {
        EXPECT_TRUE(devs.empty());
        EXPECT_NE(err.find("without OpenCL"), std::string::npos);
        return;
    }
    std::printf("[xk] OpenCL devices: %zu%s\n", devs.size(), devs.empty() ? (" (" + err + ")").c_str() : "");
    for (const auto& d : devs) {
        std::printf("[xk]   %s / %s (%s)\n", d.platform_name.c_str(), d.name.c_str(), d.type.c_str());
        EXPECT_FALSE(d.name.empty());
        EXPECT_GE(d.compute_units, 1);
        EXPECT_GT(d.global_mem_bytes, 0);
        EXPECT_GE(d.max_work_group_size, 1);
        EXPECT_NE(d.device_version.find("OpenCL"), std::string::npos);
    }
}

TEST(Gpu, KernelSourcesAreEmbedded) {
    if (!gpu::built_with_opencl()) GTEST_SKIP() << "built without OpenCL";
    const char* src = gpu::detail::embedded_source("copy");
    ASSERT_NE(src, nullptr);
    EXPECT_NE(std::strstr(src, "__kernel void xk_copy_f32x4"), nullptr);
    EXPECT_EQ(gpu::detail::embedded_source("no_such_kernel"), nullptr);
}

TEST(Gpu, DeviceSelection) {
    XK_NEED_GPU();
    const auto devs = gpu::devices();
    {
        EnvGuard g("XK_GPU_DEVICE", nullptr);
        const int def = gpu::selected_device_index();
        ASSERT_GE(def, 0);
        bool any_gpu = false;
        for (const auto& d : devs) any_gpu |= d.type == "gpu";
        if (any_gpu) EXPECT_EQ(devs[static_cast<size_t>(def)].type, "gpu");
        else EXPECT_EQ(def, 0);
    }
    {
        EnvGuard g("XK_GPU_DEVICE", "0");
        EXPECT_EQ(gpu::selected_device_index(), 0);
    }
    {
        // a substring of the name, case-insensitive
        std::string sub = devs[0].name.substr(0, std::min<size_t>(6, devs[0].name.size()));
        for (auto& c : sub) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        EnvGuard g("XK_GPU_DEVICE", sub.c_str());
        EXPECT_EQ(gpu::selected_device_index(), gpu::find_device(sub));
    }
    {
        EnvGuard g("XK_GPU_DEVICE", "no-such-device-xyz");
        XK_EXPECT_INVALID(gpu::selected_device_index(), "matches no OpenCL device");
        XK_EXPECT_INVALID(gpu::Context(), "XK_GPU_DEVICE=\"no-such-device-xyz\"");
    }
    {
        EnvGuard g("XK_GPU_DEVICE", "99");
        XK_EXPECT_INVALID(gpu::selected_device_index(), "matches no OpenCL device");
    }
    XK_EXPECT_INVALID(gpu::Context(-1), "device_index=-1");
    XK_EXPECT_INVALID(gpu::Context(static_cast<int>(devs.size())), "device_index=");
}

TEST(Gpu, BufferCopiesAndEvents) {
    XK_NEED_GPU();
    const int n = 1000;
    std::vector<float> h(n), back(n, -1.0f);
    for (int i = 0; i < n; ++i) h[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f - 3.0f;
    gpu::Buffer a(ctx, n * 4), b(ctx, n * 4);
    EXPECT_EQ(a.bytes(), n * 4);
    EXPECT_EQ(a.context(), ctx);
    a.write(h.data(), n * 4);
    a.read(back.data(), n * 4);
    EXPECT_EQ(back, h);
    // async write at an offset, device copy, async read
    std::vector<float> part(10, 42.0f);
    gpu::Event we = a.write_async(part.data(), 40, 400);
    gpu::Event ce = b.copy_from(a, n * 4);
    std::vector<float> back2(n);
    gpu::Event re = b.read_async(back2.data(), n * 4);
    re.wait();
    EXPECT_TRUE(re.complete() && ce.complete() && we.complete());
    for (int i = 0; i < n; ++i)
        EXPECT_EQ(back2[static_cast<size_t>(i)], i >= 100 && i < 110 ? 42.0f : h[static_cast<size_t>(i)]) << i;
    EXPECT_GE(ce.end_ns(), ce.start_ns());
    EXPECT_GT(ce.start_ns(), 0);
    // typed helpers, fill_zero
    auto c = gpu::Buffer::from_host(ctx, h);
    EXPECT_EQ(c.to_host<float>(), h);
    c.fill_zero().wait();
    EXPECT_EQ(c.to_host<float>(), std::vector<float>(n, 0.0f));
    // the float4 copy kernel
    gpu::Event k = gpu::copy_f32x4(ctx, a, c, 992 * 4);
    ctx.finish();
    EXPECT_TRUE(k.complete());
    const auto cc = c.to_host<float>();
    for (int i = 0; i < n; ++i) EXPECT_EQ(cc[static_cast<size_t>(i)], i < 992 ? back2[static_cast<size_t>(i)] : 0.0f);
    // empty buffers and events
    gpu::Buffer e(ctx, 0);
    EXPECT_TRUE(e.empty());
    gpu::Event none;
    none.wait();
    EXPECT_TRUE(none.complete());
}

TEST(Gpu, BadInput) {
    XK_NEED_GPU();
    gpu::Buffer a(ctx, 64);
    std::vector<char> h(128);
    XK_EXPECT_INVALID(gpu::Buffer(ctx, -1), "xk::gpu::Buffer: bytes=-1");
    XK_EXPECT_INVALID(a.write(h.data(), 65), "xk::gpu::Buffer::write: bytes=65 at offset=0 exceeds the buffer's 64 bytes");
    XK_EXPECT_INVALID(a.read(h.data(), 8, 60), "offset=60 exceeds");
    XK_EXPECT_INVALID(a.write(nullptr, 8), "src=null");
    XK_EXPECT_INVALID(a.copy_from(a, 32, 0, 16), "overlaps");
    XK_EXPECT_INVALID(gpu::copy_f32x4(ctx, a, a, 20), "multiple of 16");
    XK_EXPECT_INVALID(gpu::copy_f32x4(ctx, a, gpu::Buffer(), 16), "dst=(empty buffer)");
    XK_EXPECT_INVALID(gpu::copy_f32x4(ctx, a, gpu::Buffer(ctx, 64), 80), "exceeds src's 64 bytes");
    // a buffer of another context
    gpu::Context other(gpu::selected_device_index());
    gpu::Buffer foreign(other, 64);
    XK_EXPECT_INVALID(gpu::copy_f32x4(ctx, a, foreign, 16), "belongs to another gpu::Context");
    XK_EXPECT_INVALID(a.copy_from(foreign, 16), "another gpu::Context");
    // past the device's max allocation
    const int64_t huge = ctx.device().max_alloc_bytes + 1;
    try {
        gpu::Buffer big(ctx, huge);
        ADD_FAILURE() << "no error";
    } catch (const xk::Error& e) {
        EXPECT_NE(std::string(e.what()).find("bytes=" + std::to_string(huge) + " exceeds the device's max allocation"),
                  std::string::npos)
            << e.what();
    }
}

#ifdef XK_TEST_HAVE_CL
TEST(Gpu, ClErrorNames) {
    EXPECT_STREQ(gpu::detail::cl_error_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
    EXPECT_STREQ(gpu::detail::cl_error_name(CL_INVALID_KERNEL_NAME), "CL_INVALID_KERNEL_NAME");
    EXPECT_STREQ(gpu::detail::cl_error_name(-12345), "CL error -12345");
    try {
        gpu::detail::throw_cl("xk::gpu::test", "clFoo", CL_MEM_OBJECT_ALLOCATION_FAILURE);
    } catch (const xk::Error& e) {
        EXPECT_EQ(e.code(), xk::Status::out_of_memory);
        EXPECT_NE(std::string(e.what()).find("clFoo failed: CL_MEM_OBJECT_ALLOCATION_FAILURE"), std::string::npos);
    }
}

TEST(Gpu, BuildErrorShowsLog) {
    XK_NEED_GPU();
    TempCacheDir dir;
    const std::string bad = "__kernel void k(__global float* x) { x[0] = undeclared_thing; }\n";
    try {
        gpu::detail::get_kernel_from_source(ctx, "test_bad", bad, "k", "");
        ADD_FAILURE() << "no error";
    } catch (const xk::Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("building \"test_bad\""), std::string::npos) << m;
        EXPECT_NE(m.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << m;
        EXPECT_NE(m.find("undeclared_thing"), std::string::npos) << m;  // the compiler's log
    }
    XK_EXPECT_INVALID(gpu::detail::get_kernel(ctx, "no_such_source", "k", ""), "source_name=\"no_such_source\"");
    EXPECT_THROW(gpu::detail::get_kernel(ctx, "copy", "no_such_kernel", ""), xk::Error);
}

// A fresh context + disk cache: the first get_kernel builds from source and writes the binary; a
// second context (no memory cache) loads it from disk; a corrupt file falls back to the source.
TEST(Gpu, ProgramCacheOnDisk) {
    XK_NEED_GPU();
    TempCacheDir dir;
    const std::string src = "__kernel void add1(__global float* x) { x[get_global_id(0)] += 1.0f; }\n";
    auto run_add1 = [&](const gpu::Context& c) {
        cl_kernel k = gpu::detail::get_kernel_from_source(c, "test_add1", src, "add1", "-DXK_TEST=1");
        gpu::Buffer b(c, 16 * 4);
        std::vector<float> h(16, 1.0f);
        b.write(h.data(), 64);
        gpu::detail::set_arg(k, 0, gpu::detail::cl_buffer(b));
        const size_t g = 16;
        gpu::detail::enqueue(c, k, 1, &g, nullptr, "test").wait();
        EXPECT_EQ(b.to_host<float>(), std::vector<float>(16, 2.0f));
    };
    gpu::Context c1(gpu::selected_device_index());
    run_add1(c1);
    auto s1 = gpu::detail::program_cache_stats(c1);
    EXPECT_EQ(s1.source_builds, 1);
    EXPECT_EQ(s1.disk_writes, 1);
    run_add1(c1);
    EXPECT_EQ(gpu::detail::program_cache_stats(c1).memory_hits, 1);
    int files = 0;
    std::string file;
    for (auto& f : std::filesystem::directory_iterator(dir.path)) {
        ++files;
        file = f.path().string();
    }
    ASSERT_EQ(files, 1);
    // the memory cache cleared: from disk
    gpu::detail::clear_program_memory_cache(c1);
    const auto t0 = std::chrono::steady_clock::now();
    run_add1(c1);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto s2 = gpu::detail::program_cache_stats(c1);
    EXPECT_EQ(s2.disk_hits, 1);
    EXPECT_EQ(s2.source_builds, 1);
    std::printf("[xk] warm-disk-cache first call (build from binary + run): %.2f ms\n", ms);
    // another context: from disk as well
    gpu::Context c2(gpu::selected_device_index());
    run_add1(c2);
    EXPECT_EQ(gpu::detail::program_cache_stats(c2).disk_hits, 1);
    EXPECT_EQ(gpu::detail::program_cache_stats(c2).source_builds, 0);
    // corrupt the file: rejected, rebuilt from source, rewritten
    {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(-4, std::ios::end);
        f.write("XXXX", 4);
    }
    gpu::Context c3(gpu::selected_device_index());
    run_add1(c3);
    auto s3 = gpu::detail::program_cache_stats(c3);
    EXPECT_EQ(s3.disk_rejects, 1);
    EXPECT_EQ(s3.source_builds, 1);
    EXPECT_EQ(s3.disk_writes, 1);
    // truncated file
    std::filesystem::resize_file(file, 20);
    gpu::Context c4(gpu::selected_device_index());
    run_add1(c4);
    EXPECT_EQ(gpu::detail::program_cache_stats(c4).disk_rejects, 1);
    EXPECT_EQ(gpu::detail::program_cache_stats(c4).source_builds, 1);
    // the disk cache off
    {
        EnvGuard off("XK_GPU_CACHE_DIR", "off");
        EXPECT_EQ(gpu::cache_dir(), "");
        gpu::Context c5(gpu::selected_device_index());
        run_add1(c5);
        EXPECT_EQ(gpu::detail::program_cache_stats(c5).disk_writes, 0);
    }
}

// Many threads asking for the same kernel: one build, each thread its own cl_kernel.
TEST(Gpu, ProgramCacheThreads) {
    XK_NEED_GPU();
    gpu::Context c(gpu::selected_device_index());
    const int T = 4;
    std::vector<std::thread> th;
    std::vector<cl_kernel> ks(T);
    std::atomic<int> errors{0};
    for (int t = 0; t < T; ++t)
        th.emplace_back([&, t] {
            try {
                gpu::Buffer a(c, 256), b(c, 256);
                std::vector<float> h(64, static_cast<float>(t));
                a.write(h.data(), 256);
                ks[static_cast<size_t>(t)] = gpu::detail::get_kernel(c, "copy", "xk_copy_f32x4", "");
                gpu::copy_f32x4(c, a, b, 256).wait();
                if (b.to_host<float>() != h) ++errors;
            } catch (...) {
                ++errors;
            }
        });
    for (auto& x : th) x.join();
    EXPECT_EQ(errors.load(), 0);
    const auto s = gpu::detail::program_cache_stats(c);
    EXPECT_EQ(s.source_builds + s.disk_hits, 1);
    for (int i = 0; i < T; ++i)
        for (int j = i + 1; j < T; ++j) EXPECT_NE(ks[static_cast<size_t>(i)], ks[static_cast<size_t>(j)]);
}
#endif  // XK_TEST_HAVE_CL

// ---- the caching allocator ---------------------------------------------------------------------
TEST(GpuAllocator, SplitMergeReuseStats) {
    XK_NEED_GPU();
    gpu::Context c(gpu::selected_device_index());
    EXPECT_EQ(c.memory_stats().reserved_bytes, 0);
    {
        gpu::Buffer a(c, 1000);  // small pool: one 2 MiB segment, split
        auto s = c.memory_stats();
        EXPECT_EQ(s.allocated_bytes, 1024);
        EXPECT_EQ(s.reserved_bytes, 2 << 20);
        EXPECT_EQ(s.num_segments, 1);
        EXPECT_EQ(s.num_allocs, 1);
        gpu::Buffer b(c, 3000);  // the remainder of the same segment
        s = c.memory_stats();
        EXPECT_EQ(s.allocated_bytes, 1024 + 3072);
        EXPECT_EQ(s.num_segments, 1);
        EXPECT_EQ(s.num_cache_hits, 1);
        // the buffers are distinct memory
        std::vector<uint8_t> ha(1000, 1), hb(3000, 2);
        a.write(ha.data(), 1000);
        b.write(hb.data(), 3000);
        EXPECT_EQ(a.to_host<uint8_t>(), ha);
        EXPECT_EQ(b.to_host<uint8_t>(), hb);
    }
    // both freed and merged back: one whole free segment, reused by a 2 MiB request
    auto s = c.memory_stats();
    EXPECT_EQ(s.allocated_bytes, 0);
    EXPECT_EQ(s.reserved_bytes, 2 << 20);
    EXPECT_EQ(s.peak_allocated_bytes, 1024 + 3072);
    {
        gpu::Buffer whole(c, 1 << 20);  // 1 MiB: still the small pool, takes the merged block
        EXPECT_EQ(c.memory_stats().num_segments, 1);
    }
    {
        gpu::Buffer x(c, 512);
        gpu::Buffer y(c, 512);
        gpu::Buffer z(c, 512);
        std::vector<float> h(128, 3.0f);
        y.write(h.data(), 512);
        // free the middle one: the next 512-byte request reuses exactly it (best fit). The block is
        // identified by its segment and offset, not by its old contents: a freed block's bytes are
        // not specified (NVIDIA's driver did not show y's bytes through the new sub-buffer).
        const auto* yb = y.impl()->block;
        const void* yseg = yb->seg;
        const int64_t yoff = yb->offset;
        gpu::Buffer y2 = y;
        y = gpu::Buffer();
        EXPECT_EQ(c.memory_stats().allocated_bytes, 3 * 512);  // y2 still holds it
        y2 = gpu::Buffer();
        EXPECT_EQ(c.memory_stats().allocated_bytes, 2 * 512);
        const auto before = c.memory_stats().num_segments;
        gpu::Buffer w(c, 500);
        EXPECT_EQ(static_cast<const void*>(w.impl()->block->seg), yseg);  // the same block
        EXPECT_EQ(w.impl()->block->offset, yoff);
        EXPECT_EQ(c.memory_stats().num_segments, before);
        w.write(h.data(), 500);
        EXPECT_EQ(w.to_host<float>(), std::vector<float>(h.begin(), h.begin() + 125));
    }
    // a large request: its own pool and segment (20 MiB for < 10 MiB)
    {
        gpu::Buffer big(c, 3 << 20);
        s = c.memory_stats();
        EXPECT_EQ(s.reserved_bytes, (2 << 20) + (20 << 20));
        gpu::Buffer big2(c, 5 << 20);  // split from the same 20 MiB segment
        EXPECT_EQ(c.memory_stats().num_segments, 2);
    }
    EXPECT_EQ(c.memory_stats().allocated_bytes, 0);
    c.empty_cache();
    s = c.memory_stats();
    EXPECT_EQ(s.reserved_bytes, 0);
    EXPECT_EQ(s.peak_reserved_bytes, (2 << 20) + (20 << 20));
    c.reset_peak_stats();
    EXPECT_EQ(c.memory_stats().peak_reserved_bytes, 0);
    EXPECT_EQ(s.num_allocs, s.num_frees);
}

#ifdef XK_TEST_HAVE_CL
// A block whose buffer recorded an event of outside work is not handed out until it completed.
TEST(GpuAllocator, RecordedEventsDelayReuse) {
    XK_NEED_GPU();
    gpu::Context c(gpu::selected_device_index());
    cl_int rc = CL_SUCCESS;
    cl_event user = clCreateUserEvent(gpu::detail::cl_ctx(c), &rc);
    ASSERT_EQ(rc, CL_SUCCESS);
    clRetainEvent(user);
    gpu::Event ev = gpu::detail::make_event(user);  // ev owns one reference, we keep the other
    cl_mem first = nullptr;
    {
        gpu::Buffer a(c, 4096);
        a.record_use(ev);
        first = gpu::detail::cl_buffer(a);
        (void)first;
    }
    auto s = c.memory_stats();
    EXPECT_EQ(s.num_pending_blocks, 1);
    EXPECT_EQ(s.allocated_bytes, 0);
    {
        gpu::Buffer b(c, 4096);  // cannot take the pending block: another offset of the segment
        gpu::Buffer probe(c, 4096);
        EXPECT_EQ(c.memory_stats().num_pending_blocks, 1);
    }
    clSetUserEventStatus(user, CL_COMPLETE);
    clReleaseEvent(user);
    {
        gpu::Buffer b(c, 4096);  // pending block processed and merged
        EXPECT_EQ(c.memory_stats().num_pending_blocks, 0);
    }
    c.empty_cache();
    EXPECT_EQ(c.memory_stats().reserved_bytes, 0);  // everything merged back into whole segments
}
#endif

TEST(GpuAllocator, OutOfMemoryIsAnError) {
    XK_NEED_GPU();
    gpu::Context c(gpu::selected_device_index());
    c.set_memory_limit(48 << 20);
    std::vector<gpu::Buffer> held;
    held.emplace_back(c, 12 << 20);  // segment of 12 MiB (>= 10 MiB: the request rounded to 2 MiB)
    held.emplace_back(c, 12 << 20);
    held.emplace_back(c, 12 << 20);
    {
        gpu::Buffer cached(c, 8 << 20);  // a 20 MiB segment would pass the cap: exact size fallback
    }
    // 44 MiB reserved, 8 MiB of it cached: a 4 MiB request is served from the cache
    const auto segs = c.memory_stats().num_segments;
    gpu::Buffer ok(c, 4 << 20);
    EXPECT_EQ(c.memory_stats().num_segments, segs);
    EXPECT_GT(c.memory_stats().reserved_bytes, 0);
    try {
        gpu::Buffer fail(c, 24 << 20);
        ADD_FAILURE() << "no error";
    } catch (const xk::Error& e) {
        EXPECT_EQ(e.code(), xk::Status::out_of_memory);
        EXPECT_NE(std::string(e.what()).find("xk::gpu::Buffer: bytes=25165824 out of device memory"), std::string::npos)
            << e.what();
        EXPECT_NE(std::string(e.what()).find("limit 50331648 bytes"), std::string::npos) << e.what();
    }
    EXPECT_EQ(c.memory_stats().num_ooms, 1);
    held.clear();  // 36 MiB cached in three 12 MiB segments: no fit for 24 MiB, and 44 + 24 > 48
    gpu::Buffer after(c, 24 << 20);  // so the cache is emptied and the allocation retried: fits
    EXPECT_EQ(after.bytes(), 24 << 20);
    // a huge request: past max allocation, invalid_argument (checked first)
    XK_EXPECT_INVALID(gpu::Buffer(c, int64_t(1) << 60), "exceeds the device's max allocation");
}
