// The OpenCL backend's memory-bound ops beside a float4 copy of the same bytes, and the program
// cache's first-call time. Device time from the queue's profiling events (UseManualTime).
//
//   gpu_copy/f32/xk/<MiB>MiB          our float4 copy kernel (the yardstick)
//   gpu_copy/f32/clblast/<MiB>MiB     CLBlast's SCOPY (libclblast.so.1, loaded at run time)
//   gpu_rms_norm/<f32|bf16>/xk/<rows>x<hidden>           y = rms_norm(x) * w
//   gpu_layer_norm/<f32|bf16>/xk/<rows>x<hidden>         with weight and bias
//   gpu_rms_norm/<f32|bf16>/xk/<rows>x<hidden>/residual  h = x + r (in place on r), y = norm(h) in place on x
//   gpu_swiglu/<f32|bf16>/xk/<rows>x<inner>               y = silu(gate) * up
//   gpu_softmax/<f32|bf16>/xk/<rows>x<cols>[/causal]
//   gpu_rope/<f32|bf16>/xk/<tokens>x<heads>x<head_dim>    q (32 heads) and k (8 heads) in place, f32 cache
//   gpu_first_call/f32/xk/<op>        ms of the first call of an op in a context whose memory
//                                     program cache was cleared: the binary comes from the disk
//                                     cache (warm after the first run), plus the run of the op
//
// GBPS: bytes read + written per call (weights / cache rows / positions counted once per call).
// Copy%: the op's GB/s over our float4 copy's GB/s moving the same number of bytes (half read,
// half written), the copy run after each call of the op (so both see the same device state).
// XK_GPU_DEVICE picks the device (default: the first GPU, else the first device).
// XK_BENCH_GPU_VARIANTS="name=spec;name=spec;..." adds .../xk_<name>/... rows of the row kernels
// (norms, softmax; f32 and bf16; 4096-element rows and 1024-element ones) with
// that form (src/gpu/ops.cpp lists XK_GPU_ROW_VARIANT's keys: rv, pre, split, persist, occ,
// seg, wg, ptx, cvt, fixwg, spec, rexp), measured in the same process as the default rows.
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "xk/gpu.hpp"
#include "xk/llm.hpp"
#include "xk/norm.hpp"
#include "xk/rope.hpp"

#if __has_include(<CL/cl.h>)
#include "gpu/runtime.hpp"
#define XK_BENCH_HAVE_CL 1
#endif

namespace xk::gpu::detail {
void set_row_variant(const std::string& spec);  // src/gpu/ops.cpp (gpu/runtime.hpp)
}

namespace {

namespace gpu = xk::gpu;
using xk::DType;

gpu::Context* ctx_or_null() {
    static gpu::Context* c = []() -> gpu::Context* {
        try {
            if (gpu::devices().empty()) return nullptr;
            auto* p = new gpu::Context();
            std::fprintf(stderr, "[xk] OpenCL device: %s / %s (driver %s)\n", p->device().platform_name.c_str(),
                         p->device().name.c_str(), p->device().driver_version.c_str());
            return p;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "[xk] no OpenCL context: %s\n", e.what());
            return nullptr;
        }
    }();
    return c;
}

gpu::Buffer filled(const gpu::Context& ctx, int64_t bytes, DType t, float lo = -1.0f, float hi = 1.0f) {
    std::vector<uint8_t> h(static_cast<size_t>(bytes));
    const int es = xk::dtype_size(t);
    uint32_t s = 12345;
    for (int64_t i = 0; i + es <= bytes; i += es) {
        s = s * 1664525u + 1013904223u;
        const float v = lo + (hi - lo) * static_cast<float>(s >> 8) * (1.0f / 16777216.0f);
        if (t == DType::f32) std::memcpy(&h[static_cast<size_t>(i)], &v, 4);
        else {
            const uint16_t b = t == DType::bf16 ? xk::bf16::from_float(v) : xk::f16::from_float(v);
            std::memcpy(&h[static_cast<size_t>(i)], &b, 2);
        }
    }
    gpu::Buffer b(ctx, bytes);
    b.write(h.data(), bytes);
    return b;
}

// Runs `op` (returns the Event of its kernel) and a copy of the same bytes after each call.
template <class Op>
void run_rows(benchmark::State& state, const gpu::Context& ctx, double bytes, Op op) {
    const int64_t half = std::max<int64_t>(16, static_cast<int64_t>(bytes / 2) / 16 * 16);
    gpu::Buffer cs(ctx, half), cd(ctx, half);
    op().wait();  // warm-up (program build / load)
    double op_s = 0, copy_s = 0;
    for (auto _ : state) {
        gpu::Event e = op();
        gpu::Event c = gpu::copy_f32x4(ctx, cs, cd, half);
        c.wait();
        const double t = static_cast<double>(e.end_ns() - e.start_ns()) * 1e-9;
        state.SetIterationTime(t);
        op_s += t;
        copy_s += static_cast<double>(c.end_ns() - c.start_ns()) * 1e-9;
    }
    state.counters["GBPS"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
    const double copy_gbps = static_cast<double>(2 * half) * static_cast<double>(state.iterations()) / copy_s * 1e-9;
    state.counters["CopyGBPS"] = copy_gbps;
    state.counters["Copy%"] = 100.0 * (bytes * static_cast<double>(state.iterations()) / op_s * 1e-9) / copy_gbps;
}

#define XK_BENCH_CTX()                                                                    \
    gpu::Context* pctx = ctx_or_null();                                                   \
    if (!pctx) {                                                                          \
        state.SkipWithError("no OpenCL device (or built without OpenCL): nothing to measure"); \
        return;                                                                           \
    }                                                                                     \
    const gpu::Context& ctx = *pctx

void bm_copy(benchmark::State& state, int64_t mib) {
    XK_BENCH_CTX();
    const int64_t bytes = mib << 20;
    gpu::Buffer a = filled(ctx, bytes, DType::f32), b(ctx, bytes);
    gpu::copy_f32x4(ctx, a, b, bytes).wait();
    for (auto _ : state) {
        gpu::Event e = gpu::copy_f32x4(ctx, a, b, bytes);
        state.SetIterationTime(static_cast<double>(e.end_ns() - e.start_ns()) * 1e-9);
    }
    state.counters["GBPS"] = benchmark::Counter(2.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
}

#ifdef XK_BENCH_HAVE_CL
using ScopyFn = int (*)(size_t, cl_mem, size_t, size_t, cl_mem, size_t, size_t, cl_command_queue*, cl_event*);
ScopyFn clblast_scopy() {
    static ScopyFn f = []() -> ScopyFn {
        void* h = dlopen("libclblast.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libclblast.so", RTLD_NOW | RTLD_LOCAL);
        return h ? reinterpret_cast<ScopyFn>(dlsym(h, "CLBlastScopy")) : nullptr;
    }();
    return f;
}

void bm_copy_clblast(benchmark::State& state, int64_t mib) {
    XK_BENCH_CTX();
    ScopyFn scopy = clblast_scopy();
    if (!scopy) {
        state.SkipWithError("libclblast.so.1 not found");
        return;
    }
    const int64_t bytes = mib << 20;
    gpu::Buffer a = filled(ctx, bytes, DType::f32), b(ctx, bytes);
    cl_command_queue q = gpu::detail::cl_queue(ctx);
    auto run = [&]() {
        cl_event ev = nullptr;
        const int st = scopy(static_cast<size_t>(bytes / 4), gpu::detail::cl_buffer(a), 0, 1, gpu::detail::cl_buffer(b), 0, 1, &q, &ev);
        if (st != 0) throw std::runtime_error("CLBlastScopy failed: " + std::to_string(st));
        return gpu::detail::make_event(ev);
    };
    try {
        run().wait();
        for (auto _ : state) {
            gpu::Event e = run();
            state.SetIterationTime(static_cast<double>(e.end_ns() - e.start_ns()) * 1e-9);
        }
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
        return;
    }
    state.counters["GBPS"] = benchmark::Counter(2.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()) * 1e-9,
                                                benchmark::Counter::kIsRate);
}
#endif

void bm_norm(benchmark::State& state, xk::NormKind kind, DType t, int64_t rows, int64_t hidden, bool residual) {
    XK_BENCH_CTX();
    const int es = xk::dtype_size(t);
    xk::NormDesc d;
    d.kind = kind;
    d.rows = rows;
    d.hidden = hidden;
    d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
    d.has_bias = kind == xk::NormKind::layer_norm;
    d.fused_residual = residual;
    gpu::Buffer x = filled(ctx, rows * hidden * es, t), y(ctx, rows * hidden * es), w = filled(ctx, hidden * es, t, 0.5f, 1.5f);
    gpu::Buffer b = filled(ctx, hidden * es, t), r = filled(ctx, residual ? rows * hidden * es : 16, t);
    gpu::NormTensors g;
    g.x = x;
    g.y = residual ? x : y;  // the pre-norm block in place (vLLM's fused_add_rms_norm)
    g.weight = w;
    if (d.has_bias) g.bias = b;
    if (residual) g.residual = g.residual_out = r;
    const double bytes = static_cast<double>(rows * hidden * es) * (residual ? 4 : 2) + static_cast<double>(hidden * es) * (d.has_bias ? 2 : 1);
    try {
        run_rows(state, ctx, bytes, [&] { return gpu::norm(ctx, d, g); });
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

void bm_swiglu(benchmark::State& state, DType t, int64_t rows, int64_t inner) {
    XK_BENCH_CTX();
    const int es = xk::dtype_size(t);
    xk::GluDesc d;
    d.rows = rows;
    d.inner = inner;
    d.x_dtype = d.y_dtype = t;
    gpu::Buffer x = filled(ctx, rows * 2 * inner * es, t, -4.0f, 4.0f), y(ctx, rows * inner * es);
    const double bytes = static_cast<double>(rows * inner * es) * 3;
    try {
        run_rows(state, ctx, bytes, [&] { return gpu::glu(ctx, d, {x, y}); });
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

void bm_softmax(benchmark::State& state, DType t, int64_t rows, int64_t cols, bool causal) {
    XK_BENCH_CTX();
    const int es = xk::dtype_size(t);
    xk::SoftmaxDesc d;
    d.rows = rows;
    d.cols = cols;
    d.x_dtype = d.y_dtype = t;
    d.scale = 0.125f;
    d.causal = causal;
    d.causal_offset = cols - rows;
    gpu::Buffer x = filled(ctx, rows * cols * es, t, -8.0f, 8.0f), y(ctx, rows * cols * es);
    const double bytes = static_cast<double>(rows * cols * es) * 2;  // causal rows still write every column
    try {
        run_rows(state, ctx, bytes, [&] { return gpu::softmax(ctx, d, {x, y}); });
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

void bm_rope(benchmark::State& state, DType t, int64_t tokens, int64_t qh, int64_t kh, int64_t hd) {
    XK_BENCH_CTX();
    const int es = xk::dtype_size(t);
    const int64_t maxp = 4096;
    xk::RopeDesc d;
    d.tokens = tokens;
    d.q_heads = qh;
    d.k_heads = kh;
    d.head_dim = hd;
    d.dtype = t;
    d.max_position = maxp;
    gpu::Buffer q = filled(ctx, tokens * qh * hd * es, t), k = filled(ctx, tokens * kh * hd * es, t);
    std::vector<int64_t> pos(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) pos[static_cast<size_t>(i)] = i % maxp;
    gpu::Buffer p = gpu::Buffer::from_host(ctx, pos), cache = filled(ctx, maxp * hd * 4, DType::f32);
    const double bytes = static_cast<double>(tokens * (qh + kh) * hd * es) * 2 + static_cast<double>(tokens) * (8 + hd * 4);
    try {
        run_rows(state, ctx, bytes, [&] { return gpu::rope(ctx, d, {q, k, p, cache}); });
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

#ifdef XK_BENCH_HAVE_CL
// First call of an op with the memory program cache cleared (the disk cache warm): load + build
// from the binary, create the kernel, run. Wall time of the call until its event completed.
void bm_first_call(benchmark::State& state, int op) {
    XK_BENCH_CTX();
    gpu::Context c(gpu::selected_device_index());  // a context of its own (clears don't touch the others)
    const DType t = DType::f32;
    const int64_t rows = 4, n = 4096;
    gpu::Buffer x = filled(c, rows * 2 * n * 4, t), y(c, rows * 2 * n * 4), w = filled(c, n * 4, t);
    std::vector<int64_t> pos(rows, 3);
    gpu::Buffer p = gpu::Buffer::from_host(c, pos), cache = filled(c, 16 * 128 * 4, t);
    auto call = [&]() -> gpu::Event {
        switch (op) {
            case 0: { xk::NormDesc d; d.rows = rows; d.hidden = n; return gpu::norm(c, d, {x, y, w, {}, {}, {}}); }
            case 1: { xk::GluDesc d; d.rows = rows; d.inner = n; return gpu::glu(c, d, {x, y}); }
            case 2: { xk::SoftmaxDesc d; d.rows = rows; d.cols = n; return gpu::softmax(c, d, {x, y}); }
            case 3: { xk::RopeDesc d; d.tokens = rows; d.q_heads = 8; d.head_dim = 128; d.max_position = 16;
                      return gpu::rope(c, d, {x, {}, p, cache}); }
            default: return gpu::copy_f32x4(c, x, y, rows * n * 4);
        }
    };
    call().wait();  // the disk cache now holds the binary
    double total = 0;
    for (auto _ : state) {
        state.PauseTiming();
        c.finish();
        gpu::detail::clear_program_memory_cache(c);
        state.ResumeTiming();
        const auto t0 = std::chrono::steady_clock::now();
        call().wait();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        state.SetIterationTime(s);
        total += s;
    }
    const auto st = gpu::detail::program_cache_stats(c);
    state.counters["ms"] = total / static_cast<double>(state.iterations()) * 1e3;
    state.counters["disk_hits"] = static_cast<double>(st.disk_hits);
    state.counters["source_builds"] = static_cast<double>(st.source_builds);
}
#endif

void register_all() {
    auto reg = [](const std::string& name, auto fn) { benchmark::RegisterBenchmark(name.c_str(), fn)->UseManualTime(); };
    const bool quick = xk::bench::quick();
    const int64_t mib = quick ? 64 : 256;
    reg("gpu_copy/f32/xk/" + std::to_string(mib) + "MiB", [=](benchmark::State& s) { bm_copy(s, mib); });
#ifdef XK_BENCH_HAVE_CL
    reg("gpu_copy/f32/clblast/" + std::to_string(mib) + "MiB", [=](benchmark::State& s) { bm_copy_clblast(s, mib); });
#endif
    for (DType t : {DType::f32, DType::bf16}) {
        const std::string dn = xk::dtype_name(t);
        const int64_t R = 4096, H = 4096;
        reg("gpu_rms_norm/" + dn + "/xk/4096x4096", [=](benchmark::State& s) { bm_norm(s, xk::NormKind::rms_norm, t, R, H, false); });
        reg("gpu_layer_norm/" + dn + "/xk/4096x4096", [=](benchmark::State& s) { bm_norm(s, xk::NormKind::layer_norm, t, R, H, false); });
        reg("gpu_rms_norm/" + dn + "/xk/4096x4096/residual", [=](benchmark::State& s) { bm_norm(s, xk::NormKind::rms_norm, t, R, H, true); });
        reg("gpu_swiglu/" + dn + "/xk/4096x11008", [=](benchmark::State& s) { bm_swiglu(s, t, 4096, 11008); });
        reg("gpu_softmax/" + dn + "/xk/16384x4096", [=](benchmark::State& s) { bm_softmax(s, t, 16384, 4096, false); });
        reg("gpu_softmax/" + dn + "/xk/16384x4096/causal", [=](benchmark::State& s) { bm_softmax(s, t, 16384, 4096, true); });
        reg("gpu_rope/" + dn + "/xk/4096x32x128", [=](benchmark::State& s) { bm_rope(s, t, 4096, 32, 8, 128); });
    }
    // XK_BENCH_GPU_VARIANTS: the row kernels' rows again under each XK_GPU_ROW_VARIANT spec.
    std::vector<std::pair<std::string, std::string>> variants{{"", ""}};  // the defaults first
    if (const char* vs = std::getenv("XK_BENCH_GPU_VARIANTS")) {
        std::string all(vs);
        size_t pos = 0;
        while (pos < all.size()) {
            size_t end = all.find(';', pos);
            if (end == std::string::npos) end = all.size();
            const std::string item = all.substr(pos, end - pos);
            const size_t eq = item.find('=');
            if (eq != std::string::npos && eq > 0) variants.emplace_back(item.substr(0, eq), item.substr(eq + 1));
            pos = end + 1;
        }
    }
    // (The library reads XK_GPU_ROW_VARIANT once; set_row_variant replaces it per row, the
    // default rows run under the environment's value.)
    const char* env_spec = std::getenv("XK_GPU_ROW_VARIANT");
    const std::string initial = env_spec ? env_spec : "";
    for (const auto& [vname, spec] : variants) {
        auto with = [spec = spec, initial](auto fn) {
            return [fn, spec, initial](benchmark::State& s) {
                if (!spec.empty()) gpu::detail::set_row_variant(spec);
                try {
                    fn(s);
                } catch (const std::exception& e) {  // a form that does not build here: its rows say why
                    s.SkipWithError(e.what());
                }
                gpu::detail::set_row_variant(initial);
            };
        };
        const std::string tag = vname.empty() ? "/xk/" : "/xk_" + vname + "/";
        for (DType t : {DType::f32, DType::bf16}) {
            const std::string dn = xk::dtype_name(t);
            for (int64_t H : {int64_t(4096), int64_t(1024)}) {
                if (vname.empty() && H == 4096) continue;  // registered above
                const int64_t R = H == 4096 ? 4096 : 16384;
                const std::string sz = std::to_string(R) + "x" + std::to_string(H);
                reg("gpu_rms_norm/" + dn + tag + sz, with([=](benchmark::State& s) { bm_norm(s, xk::NormKind::rms_norm, t, R, H, false); }));
                reg("gpu_layer_norm/" + dn + tag + sz, with([=](benchmark::State& s) { bm_norm(s, xk::NormKind::layer_norm, t, R, H, false); }));
                reg("gpu_rms_norm/" + dn + tag + sz + "/residual", with([=](benchmark::State& s) { bm_norm(s, xk::NormKind::rms_norm, t, R, H, true); }));
                const int64_t SR = H == 4096 ? 16384 : 65536;
                const std::string ss = std::to_string(SR) + "x" + std::to_string(H);
                reg("gpu_softmax/" + dn + tag + ss, with([=](benchmark::State& s) { bm_softmax(s, t, SR, H, false); }));
                reg("gpu_softmax/" + dn + tag + ss + "/causal", with([=](benchmark::State& s) { bm_softmax(s, t, SR, H, true); }));
            }
        }
    }
#ifdef XK_BENCH_HAVE_CL
    const char* ops[] = {"norm", "glu", "softmax", "rope", "copy"};
    for (int i = 0; i < 5; ++i)
        reg(std::string("gpu_first_call/f32/xk/") + ops[i], [=](benchmark::State& s) { bm_first_call(s, i); });
#endif
}

const bool registered = (register_all(), true);

}  // namespace
