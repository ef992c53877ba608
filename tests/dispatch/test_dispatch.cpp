// CPU features, ISA ranking and cap, kernel cache (exactly-once under contention, bounded),
// registry selection, parallel-for, JIT write-xor-execute.
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/parallel.hpp"
#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "dispatch/jit_generator.hpp"
#include "dispatch/kernel_cache.hpp"
#include "dispatch/registry.hpp"
#include "xk/eltwise.hpp"
#include "xk/runtime.hpp"

using namespace xk;
using xk::test::for_each_isa;

TEST(Isa, NamesRoundTrip) {
    for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx2_vnni, Isa::avx512, Isa::avx512_vnni, Isa::avx512_bf16, Isa::amx})
        EXPECT_EQ(parse_isa(isa_name(i)), i);
    EXPECT_EQ(parse_isa("AVX2"), Isa::avx2);
    EXPECT_EQ(parse_isa("all"), Isa::amx);
}

TEST(Isa, UnknownNameListsValidOnes) {
    XK_EXPECT_INVALID(parse_isa("avx3"), "avx3");
    XK_EXPECT_INVALID(parse_isa("sse"), "valid values: scalar, avx2, avx2_vnni, avx512");
}

TEST(Isa, OrderingAndAvailability) {
    EXPECT_LT(Isa::scalar, Isa::avx2);
    EXPECT_LT(Isa::avx2, Isa::avx2_vnni);
    EXPECT_LT(Isa::avx2_vnni, Isa::avx512);
    EXPECT_LT(Isa::avx512, Isa::avx512_vnni);
    EXPECT_LT(Isa::avx512_vnni, Isa::avx512_bf16);
    EXPECT_LT(Isa::avx512_bf16, Isa::amx);
    const auto av = available_isas();
    ASSERT_FALSE(av.empty());
    EXPECT_EQ(av.front(), Isa::scalar);
    EXPECT_EQ(av.back(), max_isa());
    for (size_t i = 1; i < av.size(); ++i) EXPECT_LT(av[i - 1], av[i]);
    for (Isa i : av) EXPECT_TRUE(isa_supported(i));
    // Levels are cumulative.
    const CpuInfo& c = cpu_info();
    if (isa_supported(Isa::avx512)) EXPECT_TRUE(isa_supported(Isa::avx2));
    if (isa_supported(Isa::avx2)) EXPECT_TRUE(c.avx2 && c.fma && c.f16c && c.os_ymm);
    if (isa_supported(Isa::avx512)) EXPECT_TRUE(c.avx512f && c.avx512bw && c.avx512vl && c.avx512dq && c.os_zmm);
    // avx2_vnni: avx2 plus VPDPBUSD on ymm (AVX-VNNI, or AVX512-VNNI + VL); implied by avx512_vnni,
    // not by avx512 (Skylake-X has AVX-512 without VNNI).
    if (isa_supported(Isa::avx2_vnni))
        EXPECT_TRUE(isa_supported(Isa::avx2) && (c.avx_vnni || (c.avx512_vnni && c.avx512vl)));
    if (isa_supported(Isa::avx2) && c.avx_vnni) EXPECT_TRUE(isa_supported(Isa::avx2_vnni));
    if (isa_supported(Isa::avx512_vnni)) EXPECT_TRUE(isa_supported(Isa::avx2_vnni));
    if (isa_supported(Isa::amx)) EXPECT_TRUE(c.amx_tile && c.amx_permission && c.os_tile);
}

TEST(Isa, CpuInfoAgreesWithProcCpuinfo) {
    std::ifstream f("/proc/cpuinfo");
    if (!f) GTEST_SKIP() << "no /proc/cpuinfo";
    std::string line, flags;
    while (std::getline(f, line))
        if (line.rfind("flags", 0) == 0) {
            flags = " " + line.substr(line.find(':') + 1) + " ";
            break;
        }
    auto has = [&](const char* name) { return flags.find(std::string(" ") + name + " ") != std::string::npos; };
    const CpuInfo& c = cpu_info();
    EXPECT_EQ(c.avx2, has("avx2"));
    EXPECT_EQ(c.fma, has("fma"));
    EXPECT_EQ(c.f16c, has("f16c"));
    EXPECT_EQ(c.avx512f, has("avx512f"));
    EXPECT_EQ(c.avx512_vnni, has("avx512_vnni"));
    EXPECT_EQ(c.avx512_bf16, has("avx512_bf16"));
    EXPECT_EQ(c.amx_tile, has("amx_tile"));
    EXPECT_FALSE(c.vendor.empty());
    EXPECT_GT(c.l1d_bytes, 0);
    EXPECT_GT(c.l2_bytes, 0);
    EXPECT_GE(c.logical_cpus, 1);
}

TEST(Isa, StreamingThresholdFollowsTheL3Share) {
    // The default (no XK_NT_STORE_THRESHOLD): max(8 MiB, min(L3 / 2, L3 / its sharers, 32 MiB)),
    // from the cache figures xk-info prints; the test override wins and -1 restores it.
    if (std::getenv("XK_NT_STORE_THRESHOLD")) GTEST_SKIP() << "XK_NT_STORE_THRESHOLD is set";
    const CpuInfo& c = cpu_info();
    const int64_t mib = int64_t(1) << 20, t = detail::nt_store_threshold();
    EXPECT_GE(t, 8 * mib);
    EXPECT_LE(t, std::max(8 * mib, std::min<int64_t>(32 * mib, c.l3_bytes / 2)));
    EXPECT_LE(t, std::max(8 * mib, c.l3_bytes / std::max(1, c.l3_shared_by)));
    detail::set_nt_store_threshold(12345);
    EXPECT_EQ(detail::nt_store_threshold(), 12345);
    EXPECT_TRUE(detail::use_nt_stores(12345));
    EXPECT_FALSE(detail::use_nt_stores(12344));
    detail::set_nt_store_threshold(-1);
    EXPECT_EQ(detail::nt_store_threshold(), t);
}

TEST(Isa, ScopedCapNestsAndRestores) {
    const Isa top = max_isa();
    {
        IsaCap a(Isa::scalar);
        EXPECT_EQ(max_isa(), Isa::scalar);
        EXPECT_EQ(available_isas().size(), 1u);
        {
            IsaCap b(Isa::scalar);
            EXPECT_EQ(max_isa(), Isa::scalar);
        }
        EXPECT_EQ(max_isa(), Isa::scalar);
    }
    EXPECT_EQ(max_isa(), top);
}

TEST(Isa, CapAboveMachineIsRejected) {
    if (hardware_isa() == Isa::amx) GTEST_SKIP() << "machine has every level";
    const Isa above = static_cast<Isa>(static_cast<int>(hardware_isa()) + 1);
    XK_EXPECT_ERROR(set_max_isa(above), Status::isa_unavailable, isa_name(above));
    XK_EXPECT_ERROR(IsaCap cap(above), Status::isa_unavailable, isa_name(above));
    XK_EXPECT_ERROR(require_isa(above, "test"), Status::isa_unavailable, "not supported by this machine");
    XK_EXPECT_ERROR(set_max_isa(static_cast<Isa>(42)), Status::invalid_argument, "cap=42");
}

TEST(Isa, RequireIsaHonoursCap) {
    require_isa(Isa::scalar, "test");
    if (hardware_isa() >= Isa::avx2) {
        IsaCap cap(Isa::scalar);
        XK_EXPECT_ERROR(require_isa(Isa::avx2, "test"), Status::isa_unavailable, "above the current cap");
    }
}

// XK_MAX_ISA is read from the environment of a child process (the value is read once per process).
TEST(Isa, EnvironmentCap) {
    char selfbuf[4096] = {};
    ASSERT_GT(readlink("/proc/self/exe", selfbuf, sizeof selfbuf - 1), 0);
    const std::string self = selfbuf;
    auto run = [&](const std::string& env) {
        std::string cmd = env + " " + self + " --gtest_filter=Isa.PrintMaxIsaForParent 2>&1";
        FILE* p = popen(cmd.c_str(), "r");
        std::string out;
        char buf[512];
        while (p && fgets(buf, sizeof buf, p)) out += buf;
        if (p) pclose(p);
        return out;
    };
    EXPECT_NE(run("XK_MAX_ISA=scalar").find("MAXISA=scalar"), std::string::npos);
    EXPECT_NE(run("XK_MAX_ISA=amx").find(std::string("MAXISA=") + isa_name(hardware_isa())), std::string::npos);
    const std::string bad = run("XK_MAX_ISA=bogus");
    EXPECT_NE(bad.find("XK_MAX_ISA: unknown ISA 'bogus'; valid values"), std::string::npos) << bad;
}

TEST(Isa, PrintMaxIsaForParent) {
    try {
        std::printf("MAXISA=%s\n", isa_name(max_isa()));
    } catch (const Error& e) {
        std::printf("ERROR=%s\n", e.what());
    }
}

// ---- kernel cache ------------------------------------------------------------------------------

TEST(KernelCache, GeneratesEachKeyOnceUnderContention) {
    auto& cache = detail::KernelCache::instance();
    constexpr int kKeys = 64, kThreads = 8, kRounds = 20;
    std::atomic<int> created[kKeys];
    for (auto& c : created) c = 0;
    std::atomic<bool> go{false};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
        ts.emplace_back([&, t] {
            while (!go.load()) std::this_thread::yield();
            for (int r = 0; r < kRounds; ++r)
                for (int k = 0; k < kKeys; ++k) {
                    const int key = (k + t * 7) % kKeys;
                    auto v = cache.get_or_create<int>("test.contention|" + std::to_string(key), [&] {
                        created[key].fetch_add(1);
                        std::this_thread::sleep_for(std::chrono::microseconds(200));
                        return std::make_shared<const int>(key * 3);
                    });
                    ASSERT_EQ(*v, key * 3);
                }
        });
    go = true;
    for (auto& t : ts) t.join();
    for (int k = 0; k < kKeys; ++k) EXPECT_EQ(created[k].load(), 1) << "key " << k;
}

TEST(KernelCache, ConcurrentJitGenerationSharesOneKernel) {
    // Many threads, many descriptors, real JIT code: every thread gets the same function pointer
    // per key and each key is generated once.
    struct Add : detail::JitGenerator {
        explicit Add(int c) : JitGenerator(Isa::scalar) {
            mov(rax, rdi);
            add(rax, c);
            ret();
        }
    };
    struct K {
        explicit K(int c) : gen(c), fn(gen.finalize<int64_t (*)(int64_t)>()) {}
        Add gen;
        int64_t (*fn)(int64_t);
    };
    auto& cache = detail::KernelCache::instance();
    std::atomic<int> gens{0};
    std::vector<std::thread> ts;
    std::vector<std::vector<const void*>> seen(6, std::vector<const void*>(32));
    for (int t = 0; t < 6; ++t)
        ts.emplace_back([&, t] {
            for (int c = 0; c < 32; ++c) {
                auto k = cache.get_or_create<K>("test.jit|" + std::to_string(c), [&] {
                    gens.fetch_add(1);
                    return std::make_shared<const K>(c);
                });
                ASSERT_EQ(k->fn(100), 100 + c);
                seen[t][c] = reinterpret_cast<const void*>(k->fn);
            }
        });
    for (auto& t : ts) t.join();
    EXPECT_EQ(gens.load(), 32);
    for (int t = 1; t < 6; ++t) EXPECT_EQ(seen[t], seen[0]);
}

TEST(KernelCache, FactoryErrorIsNotCached) {
    auto& cache = detail::KernelCache::instance();
    int calls = 0;
    auto f = [&]() -> std::shared_ptr<const int> {
        if (++calls == 1) throw Error(Status::runtime_error, "first try fails");
        return std::make_shared<const int>(7);
    };
    EXPECT_THROW(cache.get_or_create<int>("test.error", f), Error);
    EXPECT_EQ(*cache.get_or_create<int>("test.error", f), 7);
    EXPECT_EQ(calls, 2);
}

TEST(KernelCache, BoundedWithLruEviction) {
    auto& cache = detail::KernelCache::instance();
    const auto before = kernel_cache_stats();
    set_kernel_cache_capacity(4);
    std::shared_ptr<const int> held = cache.get_or_create<int>("test.lru|0", [] { return std::make_shared<const int>(0); });
    for (int i = 1; i < 10; ++i)
        cache.get_or_create<int>("test.lru|" + std::to_string(i), [i] { return std::make_shared<const int>(i); });
    const auto s = kernel_cache_stats();
    EXPECT_LE(s.size, 4u);
    EXPECT_GE(s.evictions, before.evictions + 6);
    EXPECT_EQ(*held, 0);  // an evicted kernel held by its user stays alive
    XK_EXPECT_INVALID(set_kernel_cache_capacity(0), "entries=0");
    set_kernel_cache_capacity(1024);
}

// ---- registry ----------------------------------------------------------------------------------

namespace {
struct ToyDesc {
    int n;
    std::string key() const { return "n=" + std::to_string(n); }
};
struct ToyKernel {
    std::string impl;
};
std::shared_ptr<const ToyKernel> make_toy(const char* name) { return std::make_shared<const ToyKernel>(ToyKernel{name}); }
}  // namespace

TEST(Registry, FirstFittingImplUnderCapWins) {
    detail::Registry<ToyDesc, ToyKernel> reg(
        "toy", {
                   {"amx", Isa::amx, nullptr, [](const ToyDesc&) { return make_toy("amx"); }},
                   {"avx2-even", Isa::avx2, [](const ToyDesc& d) { return d.n % 2 == 0; },
                    [](const ToyDesc&) { return make_toy("avx2-even"); }},
                   {"ref", Isa::scalar, nullptr, [](const ToyDesc&) { return make_toy("ref"); }},
               });
    for_each_isa([&](Isa isa) {
        const auto& even = reg.select(ToyDesc{4}, max_isa());
        const auto& odd = reg.select(ToyDesc{3}, max_isa());
        EXPECT_STREQ(odd.name, isa == Isa::amx ? "amx" : "ref");
        if (isa == Isa::amx)
            EXPECT_STREQ(even.name, "amx");
        else if (isa >= Isa::avx2)
            EXPECT_STREQ(even.name, "avx2-even");
        else
            EXPECT_STREQ(even.name, "ref");
        EXPECT_EQ(reg.get(ToyDesc{4}).kernel->impl, even.name);
    });
    XK_EXPECT_INVALID(reg.find("nope"), "unknown implementation 'nope'");
}

TEST(Registry, NoImplementationIsAClearError) {
    detail::Registry<ToyDesc, ToyKernel> reg(
        "toy2", {{"only-even", Isa::scalar, [](const ToyDesc& d) { return d.n % 2 == 0; },
                  [](const ToyDesc&) { return make_toy("e"); }}});
    XK_EXPECT_ERROR(reg.get(ToyDesc{3}), Status::unsupported, "toy2: no implementation supports n=3");
}

// ---- JIT base: write-xor-execute ---------------------------------------------------------------

static std::string protection_of(const void* p) {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    const auto addr = reinterpret_cast<uintptr_t>(p);
    while (std::getline(maps, line)) {
        uintptr_t lo = 0, hi = 0;
        char perms[5] = {};
        if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi) return perms;
    }
    return "?";
}

TEST(Jit, PagesAreWriteXorExecute) {
    struct Ret42 : detail::JitGenerator {
        Ret42() : JitGenerator(Isa::scalar, 4096) {
            preamble({rbx});
            mov(rbx, 42);
            mov(rax, rbx);
            postamble();
        }
    } gen;
    EXPECT_EQ(protection_of(gen.getCode()).substr(0, 3), "rw-");  // writable, not executable while emitting
    auto fn = gen.finalize<int64_t (*)()>();
    EXPECT_EQ(protection_of(reinterpret_cast<const void*>(fn)).substr(0, 3), "r-x");
    EXPECT_EQ(fn(), 42);
}

TEST(Jit, DumpWritesEachKernelsCode) {
    struct Ret42 : detail::JitGenerator {
        Ret42() : JitGenerator(Isa::scalar, 4096) {
            mov(rax, 42);
            ret();
        }
    };
    char tmpl[] = "/tmp/xk_jit_dump_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    setenv("XK_JIT_DUMP", dir.c_str(), 1);
    Ret42 gen;
    auto fn = gen.finalize<int64_t (*)()>();
    unsetenv("XK_JIT_DUMP");
    EXPECT_EQ(fn(), 42);
    // One file, xk_jit_<pid>_<n>.bin, holding exactly the finished code.
    std::vector<std::string> files;
    if (DIR* d = opendir(dir.c_str())) {
        while (const dirent* e = readdir(d))
            if (e->d_name[0] != '.') files.push_back(e->d_name);
        closedir(d);
    }
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].rfind("xk_jit_" + std::to_string(getpid()) + "_", 0), 0u) << files[0];
    std::ifstream in(dir + "/" + files[0], std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(bytes.size(), gen.getSize());
    EXPECT_EQ(std::memcmp(bytes.data(), reinterpret_cast<const void*>(fn), bytes.size()), 0);
    std::remove((dir + "/" + files[0]).c_str());
    // A directory that cannot be written: reported on stderr, the kernel still finalizes and runs.
    setenv("XK_JIT_DUMP", (dir + "/missing").c_str(), 1);
    Ret42 gen2;
    auto fn2 = gen2.finalize<int64_t (*)()>();
    unsetenv("XK_JIT_DUMP");
    EXPECT_EQ(fn2(), 42);
    EXPECT_EQ(detail::jit_dump(reinterpret_cast<const void*>(fn2), gen2.getSize()), "");  // not dumping: unset
    rmdir(dir.c_str());
}

// ---- parallel-for ------------------------------------------------------------------------------

TEST(Parallel, CoversRangeExactlyOnce) {
    for (int threads : {1, 2, 3, 8}) {
        set_num_threads(threads);
        for (int64_t n : {0, 1, 7, 17, 1023, 100000}) {
            std::vector<std::atomic<int>> hit(static_cast<size_t>(n));
            for (auto& h : hit) h = 0;
            detail::parallel_for(n, 5, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; ++i) hit[static_cast<size_t>(i)].fetch_add(1);
            });
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hit[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
        }
    }
    set_num_threads(0);
    XK_EXPECT_INVALID(set_num_threads(-1), "n=-1");
}

TEST(Parallel, SmallWorkRunsInline) {
    set_num_threads(4);
    const auto caller = std::this_thread::get_id();
    bool same = false;
    detail::parallel_for(10, 100, [&](int64_t, int64_t) { same = std::this_thread::get_id() == caller; });
    EXPECT_TRUE(same);
    EXPECT_EQ(detail::parallel_threads(10, 100), 1);
    set_num_threads(0);
}

TEST(Parallel, WorkerExceptionReachesCaller) {
    set_num_threads(2);
    EXPECT_THROW(detail::parallel_for(100, 1, [](int64_t b, int64_t) {
                     if (b > 0) throw Error(Status::runtime_error, "boom");
                 }),
                 Error);
    set_num_threads(0);
}

// XK_VERBOSE=1 logs each generation with the implementation, the descriptor and microseconds
// (checked in a child process: the level is read once per process).
TEST(Verbose, LogsGenerationWithImplDescriptorAndTime) {
    char selfbuf[4096] = {};
    ASSERT_GT(readlink("/proc/self/exe", selfbuf, sizeof selfbuf - 1), 0);
    const std::string cmd = std::string("XK_VERBOSE=1 ") + selfbuf + " --gtest_filter=Verbose.ChildRunsAxpby 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
    const std::string want = std::string("xk_verbose,create,axpby,") +
                             (hardware_isa() >= Isa::avx512 ? "jit:avx512" : hardware_isa() >= Isa::avx2 ? "jit:avx2" : "ref:scalar") +
                             ",f32,";
    EXPECT_NE(out.find(want), std::string::npos) << out;
}

TEST(Verbose, ChildRunsAxpby) {
    float x[4] = {1, 2, 3, 4}, y[4] = {};
    xk::axpby(4, 1.0f, x, 0.0f, y);
    EXPECT_EQ(y[3], 4.0f);
}
