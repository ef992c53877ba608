// GPU GEMM: xk::gpu::gemm beside CLBlast 1.5 (clblast::Gemm, SGEMM) in the same process, on the
// same context and queue, on gpu::Context()'s device (XK_GPU_DEVICE picks another).
//
// Rows gpu_gemm/<dtype>/<provider>/MxNxK: C = A B, row-major, A M x K, B K x N (no transposes),
// alpha 1, beta 0, f32; plus xk's f16 (f32 accumulation, f16 C) where the device runs it: its
// table column xk/f32 compares it with xk's f32 row. Counter GFLOPS = 2 M N K / the wall time of
// one call from enqueue to clFinish (launch overhead included for both; CLBlast may run several
// kernels per call, so one profiling event would not cover its work).
// Shapes: the cubes 1024^3 .. 8192^3 and BERT / LLM shapes (384x768x768, 384x3072x768,
// 128x4096x4096, 1x4096x4096). On a CPU device (PoCL) shapes above 2^31 M N K are skipped unless
// XK_BENCH_GPU_ALL=1 (8192^3 takes a minute per call there). The first call of each row (ours:
// tuning on a new shape class, then both: program builds) runs before the timing.
// gpu_gemm/f32/xk_splitk[_fresh_ws]/<config>/128x4096x4096: a forced split-K configuration with the
// workspace of calls (the context's scratch) or a Buffer per call (before; a diagnostic).
#include <benchmark/benchmark.h>

#include <clblast.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/gemm/gpu_gemm.hpp"
#include "gpu/runtime.hpp"
#include "xk/gpu.hpp"
#include "xk/gpu_gemm.hpp"

namespace {

namespace gpu = xk::gpu;

struct Shape {
    int64_t M, N, K;
    std::string name() const { return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K); }
    double flops() const { return 2.0 * double(M) * double(N) * double(K); }
};

gpu::Context& ctx() {
    static gpu::Context c;
    return c;
}

struct Operands {
    gpu::Buffer A, B, C;
};

Operands make(const Shape& s, xk::DType t) {
    const int64_t e = xk::dtype_size(t);
    Operands o{gpu::Buffer(ctx(), s.M * s.K * e), gpu::Buffer(ctx(), s.K * s.N * e), gpu::Buffer(ctx(), s.M * s.N * e)};
    // Small values (0.25 in every type; the bits differ): the data does not change the speed.
    std::vector<uint8_t> host(size_t(std::max(s.M * s.K, s.K * s.N) * e));
    for (size_t i = 0; i < host.size(); i += size_t(e)) {
        if (e == 4) {
            const float f = 0.25f;
            std::memcpy(&host[i], &f, 4);
        } else {
            const uint16_t h = 0x3400;  // f16 0.25
            std::memcpy(&host[i], &h, 2);
        }
    }
    o.A.write(host.data(), o.A.bytes());
    o.B.write(host.data(), o.B.bytes());
    return o;
}

void bench_xk(benchmark::State& state, Shape s, xk::DType t) {
    Operands o = make(s, t);
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    d.a_type = d.b_type = d.c_type = t;
    const gpu::GemmTensors ts{o.A, o.B, o.C};
    std::string name;
    gpu::detail::gemm_ex(ctx(), d, ts, {}, &name).wait();  // tunes (new shape class) and builds
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        gpu::gemm(ctx(), d, ts);
        ctx().finish();
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    xk::bench::set_gflops(state, s.flops());
    state.SetLabel(name);
}

// Split-K diagnostic rows: one forced split-K configuration, its workspace the context's scratch
// (as calls run) or a new Buffer per call (how calls ran before: a sub-buffer created and released
// each call). Wall time from enqueue to clFinish, like the other rows.
void bench_xk_forced(benchmark::State& state, Shape s, gpu::detail::GemmConfig cfg, bool fresh_ws) {
    Operands o = make(s, xk::DType::f32);
    xk::GemmDesc d;
    d.M = s.M, d.N = s.N, d.K = s.K;
    const gpu::GemmTensors ts{o.A, o.B, o.C};
    gpu::detail::GemmOptions opt;
    opt.kind = gpu::detail::GemmKernelKind::tiled;
    opt.force_config = true;
    opt.config = cfg;
    opt.splitk_fresh_workspace = fresh_ws;
    std::string name;
    gpu::detail::gemm_ex(ctx(), d, ts, opt, &name).wait();
    double enqueue_s = 0;
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        gpu::detail::gemm_ex(ctx(), d, ts, opt);
        const auto t1 = std::chrono::steady_clock::now();
        ctx().finish();
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        enqueue_s += std::chrono::duration<double>(t1 - t0).count();
    }
    xk::bench::set_gflops(state, s.flops());
    // Host ms until gemm returned (enqueue, and the old path's workspace release), per call.
    state.counters["enqueue_ms"] = 1e3 * enqueue_s / double(std::max<int64_t>(state.iterations(), 1));
    state.SetLabel(name);
}

void bench_clblast(benchmark::State& state, Shape s) {
    Operands o = make(s, xk::DType::f32);
    cl_command_queue q = gpu::detail::cl_queue(ctx());
    cl_mem a = gpu::detail::cl_buffer(o.A), b = gpu::detail::cl_buffer(o.B), c = gpu::detail::cl_buffer(o.C);
    auto run = [&](cl_event* ev) {
        const auto st = clblast::Gemm<float>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo,
                                             size_t(s.M), size_t(s.N), size_t(s.K), 1.0f, a, 0, size_t(s.K), b, 0,
                                             size_t(s.N), 0.0f, c, 0, size_t(s.N), &q, ev);
        return st == clblast::StatusCode::kSuccess;
    };
    cl_event ev = nullptr;
    if (!run(&ev)) {
        state.SkipWithError("clblast::Gemm failed");
        return;
    }
    clWaitForEvents(1, &ev);
    clReleaseEvent(ev);
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        run(nullptr);
        clFinish(q);
        state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    xk::bench::set_gflops(state, s.flops());
}

bool register_all() {
    if (!gpu::built_with_opencl() || gpu::devices().empty()) return false;
    const auto devs = gpu::devices();
    int idx = 0;
    try {
        idx = gpu::selected_device_index();
    } catch (...) {
        return false;
    }
    const bool cpu = devs[size_t(idx)].type == "cpu";
    const bool all = std::getenv("XK_BENCH_GPU_ALL") && std::string(std::getenv("XK_BENCH_GPU_ALL")) == "1";
    const std::vector<Shape> shapes = {{1024, 1024, 1024}, {2048, 2048, 2048}, {4096, 4096, 4096}, {8192, 8192, 8192},
                                       {384, 768, 768},    {384, 3072, 768},   {128, 4096, 4096}, {1, 4096, 4096}};
    for (const Shape& s : shapes) {
        if (cpu && !all && s.flops() > 2.0 * 2147483648.0) continue;
        benchmark::RegisterBenchmark(("gpu_gemm/f32/xk/" + s.name()).c_str(),
                                     [s](benchmark::State& st) { bench_xk(st, s, xk::DType::f32); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("gpu_gemm/f32/clblast/" + s.name()).c_str(),
                                     [s](benchmark::State& st) { bench_clblast(st, s); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("gpu_gemm/f16/xk/" + s.name()).c_str(),
                                     [s](benchmark::State& st) { bench_xk(st, s, xk::DType::f16); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
    }
    // Split-K by 4 of each tile the tuner splits for 128x4096x4096 (a CPU device: the default
    // tile), scratch vs a Buffer per call.
    const Shape sk{128, 4096, 4096};
    {
        xk::GemmDesc d;
        d.M = sk.M, d.N = sk.N, d.K = sk.K;
        std::vector<gpu::detail::GemmConfig> cs = gpu::detail::gemm_candidates(ctx(), d);
        if (cpu) cs = {gpu::detail::gemm_default_config(ctx())}, cs[0].splitk = 4;  // the tuner splits on GPUs only
        for (const gpu::detail::GemmConfig& c : cs) {
            if (c.splitk != 4) continue;
            for (bool fresh : {false, true}) {
                const std::string row = std::string("gpu_gemm/f32/") + (fresh ? "xk_splitk_fresh_ws/" : "xk_splitk/") +
                                        c.str() + "/" + sk.name();
                benchmark::RegisterBenchmark(row.c_str(), [sk, c, fresh](benchmark::State& st) { bench_xk_forced(st, sk, c, fresh); })
                    ->UseManualTime()
                    ->Unit(benchmark::kMillisecond);
            }
        }
    }
    return true;
}

[[maybe_unused]] const bool g_registered = register_all();

}  // namespace
