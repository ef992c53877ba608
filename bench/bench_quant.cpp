// Quantize / dequantize and the f32 <-> bf16 <-> f16 conversions on DRAM-resident 4096 x 4096
// matrices (rotated over XK_BENCH_ROTATE_MB, default 1 GiB: beyond the last-level cache).
//
//   quantize/<f32|bf16>/xk/<per_tensor|per_channel|dynamic>/<u8|s8>/4096x4096/nt:<N>
//       per_tensor: asymmetric u8; per_channel: one scale per column (axis 1), symmetric s8;
//       dynamic: per token (row) asymmetric s8, scales / zero points computed (one read of x
//       from DRAM: each row's range pass and quantize pass while it is in cache)
//   quantize/<f32|bf16>/xk/dynamic_smooth/s8/...   the same with SmoothQuant's smooth vector
//   quantize/<f32|bf16>/xk/dynamic_2pass/s8/..., dynamic_smooth_2pass: the same op the old way
//       (detail::set_quant_dynamic_two_pass: the range of all rows, then the quantize pass — two
//       reads of x), for before / after in one process
//   dequantize/<f32|bf16>/xk/<per_tensor|per_channel>/<u8|s8>/4096x4096/nt:<N>
//   convert/<src>-><dst>/xk/4096x4096/nt:<N>       f32 -> bf16, bf16 -> f32, f32 -> f16, f16 -> f32, bf16 -> f16
//
// GBPS: bytes read + written per call, each array once (x and q; the parameter vectors are
// counted too; the dynamic rows' second read of x is not: their GB/s is the op's throughput).
// Copy%: the row's GB/s over that of a copy with non-temporal stores run between its calls on the
// same threads (xk::bench::CopyYardstick), CopyGBPS that copy's GB/s; cpu_Copy%: the same ratio
// from the process's CPU time of each call and each copy (on a loaded host the 1-thread rows' wall
// times include other processes' time slices). Pattern%, PatternGBPS, cpu_Pattern%: the same
// against a loop without arithmetic that reads and writes the row's bytes per element (quantize:
// 4 or 2 read, 1 streamed out; dequantize: 1 read, 4 or 2 streamed), also run between the calls:
// the memory pattern's own ceiling on these threads (one core reads slower than a copy moves data:
// a read-mostly row cannot reach 100% of the copy even without arithmetic). OpPattern%,
// OpPatternGBPS, cpu_OpPattern% (per channel and dynamic rows): against the op's own access pattern
// without arithmetic — per channel the 4-byte parameter vector re-read for every row of x, dynamic
// the previous row re-read from cache while the next one streams in. No peer row (PyTorch's figures come from
// bench/torch_peer.py where it has them).
#include <immintrin.h>
#include <time.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "kernels/quant/quant.hpp"
#include "xk/convert.hpp"
#include "xk/quant.hpp"

namespace {

namespace xb = xk::bench;
using xk::DType;

constexpr int64_t kRows = 4096, kCols = 4096;

double cpu_now() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// CopyYardstick's copy, its CPU time and bytes added up for cpu_Copy%.
struct CpuCopy {
    double op = 0, copy = 0, copy_bytes = 0;
    xb::Yardstick stick(benchmark::State& state, double bytes) {
        (void)xb::detail::copy_pool();
        return xb::Yardstick(state, true, bytes, "Copy%", "CopyGBPS", [this, floats = static_cast<int64_t>(bytes / 2 / sizeof(float))] {
            const double c0 = cpu_now();
            const double b = 2.0 * static_cast<double>(xb::detail::copy_pool().copy(floats, false)) * sizeof(float);
            copy += cpu_now() - c0;
            copy_bytes += b;
            return b;
        });
    }
    void finish(benchmark::State& state, double bytes) const {
        if (op > 0 && copy > 0) state.counters["cpu_Copy%"] = 100.0 * (bytes * double(state.iterations()) / op) / (copy_bytes / copy);
    }
};

// The pattern yardstick: over the copy pool's arrays, `in` bytes read and `out` bytes written
// (non-temporal) per element, 64 elements a step, no arithmetic but an OR that keeps the loads.
// The op's pattern (OpPattern%) adds the cache-resident reads the op cannot avoid, per row of kCols
// elements: `vec` (per channel: a 4-byte parameter per element, re-read for every row) or `prev`
// (dynamic per token in one read of x: row r re-read from cache while row r + 1 streams in).
__attribute__((target("avx2"))) void pattern_chunk(const char* x, char* y, int64_t elems, int in, int out,
                                                   const char* vec = nullptr, bool prev = false) {
    for (int64_t e = 0; e < elems; e += 64) {
        const char* s = x + e * in;
        __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(s));
        __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(s + 32));
        for (int o = 64; o < 64 * in; o += 64) {
            a = _mm256_or_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(s + o)));
            b = _mm256_or_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(s + o + 32)));
        }
        if (vec) {
            const char* v = vec + (e % kCols) * 4;
            for (int o = 0; o < 256; o += 64) {
                a = _mm256_or_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(v + o)));
                b = _mm256_or_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(v + o + 32)));
            }
        }
        if (prev && e >= kCols) {
            for (int o = 0; o < 64 * in; o += 64) {
                a = _mm256_or_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(s - kCols * in + o)));
                b = _mm256_or_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(s - kCols * in + o + 32)));
            }
        }
        char* d = y + e * out;
        for (int o = 0; o < 64 * out; o += 64) {
            _mm256_stream_si256(reinterpret_cast<__m256i*>(d + o), a);
            _mm256_stream_si256(reinterpret_cast<__m256i*>(d + o + 32), b);
        }
    }
}
double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Run between the row's calls (timer paused); Pattern% from the wall times of the row's calls and
// the pattern's, cpu_Pattern% from their process CPU times, PatternGBPS the pattern's wall rate.
struct Pattern {
    double cpu = 0, wall = 0, bytes = 0, op_wall = 0;
    int64_t cursor = 0;  // elements
    const char* prefix = "Pattern";
    const char* vec = nullptr;  // (pattern_chunk's op pattern)
    bool prev = false;
    void run(double row_bytes, int in, int out) {
        auto& pool = xb::detail::copy_pool();
        constexpr int64_t kChunk = 16384;  // elements a work item
        const int64_t elems = static_cast<int64_t>(row_bytes) / (in + out);
        const int64_t cap = pool.n * 4 / std::max(in, out) / kChunk * kChunk;
        const int64_t chunks = std::max<int64_t>(1, elems / kChunk);
        if (cursor + chunks * kChunk > cap) cursor = 0;
        const char* x = reinterpret_cast<const char*>(pool.x.get());
        char* y = reinterpret_cast<char*>(pool.y.get() + 64);
        const int64_t base = cursor;
        const double c0 = cpu_now(), w0 = wall_now();
        xk::detail::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
            for (int64_t c = b; c < e; ++c) pattern_chunk(x + (base + c * kChunk) * in, y + (base + c * kChunk) * out, kChunk, in, out, vec, prev);
            _mm_sfence();
        });
        cpu += cpu_now() - c0;
        wall += wall_now() - w0;
        cursor += chunks * kChunk;
        bytes += static_cast<double>(chunks * kChunk) * (in + out);
    }
    void finish(benchmark::State& state, double row_bytes, double op_cpu) const {
        const double done = row_bytes * double(state.iterations());
        if (wall <= 0 || bytes <= 0) return;
        const std::string p = prefix;
        state.counters[p + "GBPS"] = bytes / wall * 1e-9;
        if (op_wall > 0) state.counters[p + "%"] = 100.0 * (done / op_wall) / (bytes / wall);
        if (op_cpu > 0 && cpu > 0) state.counters["cpu_" + p + "%"] = 100.0 * (done / op_cpu) / (bytes / cpu);
    }
};

enum class Mode { per_tensor, per_channel, dynamic, dynamic_smooth, dynamic_2pass, dynamic_smooth_2pass };
const char* mode_name(Mode m) {
    switch (m) {
        case Mode::per_tensor: return "per_tensor";
        case Mode::per_channel: return "per_channel";
        case Mode::dynamic: return "dynamic";
        case Mode::dynamic_smooth: return "dynamic_smooth";
        case Mode::dynamic_2pass: return "dynamic_2pass";
        case Mode::dynamic_smooth_2pass: return "dynamic_smooth_2pass";
    }
    return "?";
}

struct QCase {
    bool quantize;
    DType ft, qt;
    Mode mode;
};

void BM_quant(benchmark::State& state, QCase c, int nt) {
    xb::ScopedThreads threads(nt);
    const size_t n = static_cast<size_t>(kRows * kCols), fs = xk::dtype_size(c.ft);
    const std::string key = std::string("quant/") + xk::dtype_name(c.ft) + (c.quantize ? "/q" : "/dq");
    // arrays: 0 float matrix, 1 int8 matrix, 2 scales [cols], 3 zero points [cols], 4 smooth, 5 scales_out, 6 zps_out
    xb::RotatingBuffers& bufs = xb::cached_rotating_buffers(
        key, {n * fs, n, kCols * 4, kCols * 4, kCols * 4, kRows * 4, kRows * 4}, xb::rotate_bytes(),
        [c, n](xb::RotatingBuffers& b) {
            if (c.ft == DType::bf16) b.fill_uniform<xk::bf16>(0, -3, 3, 1);
            else b.fill_uniform<float>(0, -3, 3, 1);
            b.fill_uniform<int8_t>(1, -100, 100, 2);
            b.fill_uniform<float>(2, 0.01, 0.03, 3);
            b.fill_uniform<int32_t>(3, 100, 150, 4);
            b.fill_uniform<float>(4, 0.5, 1.5, 5);
            b.fill_uniform<float>(5, 0, 0, 6);
            b.fill_uniform<int32_t>(6, 0, 0, 7);
            (void)n;
        });
    xk::QuantDesc d;
    d.rows = kRows;
    d.cols = kCols;
    d.src_dtype = c.quantize ? c.ft : c.qt;
    d.dst_dtype = c.quantize ? c.qt : c.ft;
    d.granularity = c.mode == Mode::per_tensor    ? xk::QuantGranularity::per_tensor
                    : c.mode == Mode::per_channel ? xk::QuantGranularity::per_channel
                                                  : xk::QuantGranularity::per_token_dynamic;
    d.symmetric = c.mode == Mode::per_channel;
    d.smooth = c.mode == Mode::dynamic_smooth || c.mode == Mode::dynamic_smooth_2pass;
    const bool two_pass = c.mode == Mode::dynamic_2pass || c.mode == Mode::dynamic_smooth_2pass;
    const xk::QuantPlan plan(d);
    double bytes = static_cast<double>(n * fs + n);
    if (c.mode == Mode::per_channel) bytes += kCols * 4.0;
    if (d.granularity == xk::QuantGranularity::per_token_dynamic) bytes += kRows * 8.0 + (d.smooth ? kCols * 4.0 : 0.0);
    CpuCopy cc;
    xb::Yardstick copy = cc.stick(state, bytes);
    Pattern pat, oppat;
    // (per channel / dynamic: the op's own pattern too; kChunk is a multiple of kCols)
    static_assert(16384 % kCols == 0, "the op pattern's rows lie within a chunk");
    auto vec = xb::alloc_aligned<char>(kCols * 4);
    std::memset(vec.get(), 1, kCols * 4);
    const bool op_pattern = c.mode == Mode::per_channel || d.granularity == xk::QuantGranularity::per_token_dynamic;
    oppat.prefix = "OpPattern";
    if (c.mode == Mode::per_channel) oppat.vec = vec.get();
    else oppat.prev = !two_pass;
    const int fsz = static_cast<int>(fs);
    for (auto _ : state) {
        const size_t s = bufs.next();
        xk::QuantArgs a;
        a.src = bufs.get<char>(s, c.quantize ? 0 : 1);
        a.dst = bufs.get<char>(s, c.quantize ? 1 : 0);
        if (c.mode == Mode::per_tensor || c.mode == Mode::per_channel) {
            a.scales = bufs.get<float>(s, 2);
            if (!d.symmetric) a.zero_points = bufs.get<int32_t>(s, 3);
        } else {
            a.scales_out = bufs.get<float>(s, 5);
            a.zero_points_out = bufs.get<int32_t>(s, 6);
        }
        if (d.smooth) a.smooth = bufs.get<float>(s, 4);
        copy.begin();
        const double c0 = cpu_now(), w0 = wall_now();
        xk::detail::set_quant_dynamic_two_pass(two_pass);
        plan.run(a);
        xk::detail::set_quant_dynamic_two_pass(false);
        cc.op += cpu_now() - c0;
        pat.op_wall += wall_now() - w0;
        oppat.op_wall = pat.op_wall;
        copy.end();
        state.PauseTiming();
        pat.run(bytes, c.quantize ? fsz : 1, c.quantize ? 1 : fsz);
        if (op_pattern) oppat.run(bytes, c.quantize ? fsz : 1, c.quantize ? 1 : fsz);
        state.ResumeTiming();
        benchmark::ClobberMemory();
    }
    copy.finish();
    cc.finish(state, bytes);
    pat.finish(state, bytes, cc.op);
    if (op_pattern) oppat.finish(state, bytes, cc.op);
    xb::set_gbps(state, bytes);
    state.SetLabel(std::string(plan.impl_name()) + ", " + std::to_string(bufs.sets()) + " sets");
}

void BM_convert(benchmark::State& state, DType st, DType dt, int nt) {
    xb::ScopedThreads threads(nt);
    const size_t n = static_cast<size_t>(kRows * kCols);
    const size_t ss = xk::dtype_size(st), ds = xk::dtype_size(dt);
    const std::string key = std::string("convert/") + xk::dtype_name(st) + "->" + xk::dtype_name(dt);
    xb::RotatingBuffers& bufs = xb::cached_rotating_buffers(key, {n * ss, n * ds}, xb::rotate_bytes(), [st](xb::RotatingBuffers& b) {
        if (st == DType::f32) b.fill_uniform<float>(0, -3, 3, 1);
        else b.fill_uniform<uint16_t>(0, 0x3000, 0x4400, 1);  // finite bf16 / f16 patterns
        b.fill_uniform<uint16_t>(1, 0, 0, 2);
    });
    const double bytes = static_cast<double>(n * (ss + ds));
    CpuCopy cc;
    xb::Yardstick copy = cc.stick(state, bytes);
    for (auto _ : state) {
        const size_t s = bufs.next();
        copy.begin();
        const double c0 = cpu_now();
        xk::convert(static_cast<int64_t>(n), st, bufs.get<char>(s, 0), dt, bufs.get<char>(s, 1));
        cc.op += cpu_now() - c0;
        copy.end();
        benchmark::ClobberMemory();
    }
    copy.finish();
    cc.finish(state, bytes);
    xb::set_gbps(state, bytes);
    state.SetLabel(std::to_string(bufs.sets()) + " sets");
}

const bool registered = [] {
    const std::vector<int> nts = xb::thread_counts();
    auto reg = [](const std::string& name, auto fn) { benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime(); };
    auto nt_s = [](int nt) { return "nt:" + std::to_string(nt); };
    const std::string shape = std::to_string(kRows) + "x" + std::to_string(kCols);
    for (DType ft : {DType::f32, DType::bf16}) {
        const QCase qs[] = {{true, ft, DType::u8, Mode::per_tensor},     {true, ft, DType::s8, Mode::per_channel},
                            {true, ft, DType::s8, Mode::dynamic},        {true, ft, DType::s8, Mode::dynamic_smooth},
                            {true, ft, DType::s8, Mode::dynamic_2pass},  {true, ft, DType::s8, Mode::dynamic_smooth_2pass},
                            {false, ft, DType::u8, Mode::per_tensor},    {false, ft, DType::s8, Mode::per_channel}};
        for (const QCase& c : qs)
            for (int nt : nts)
                reg(xb::join_name({c.quantize ? "quantize" : "dequantize", xk::dtype_name(ft), "xk", mode_name(c.mode),
                                   xk::dtype_name(c.qt), shape, nt_s(nt)}),
                    [c, nt](benchmark::State& s) { BM_quant(s, c, nt); });
    }
    const std::pair<DType, DType> convs[] = {{DType::f32, DType::bf16}, {DType::bf16, DType::f32}, {DType::f32, DType::f16},
                                             {DType::f16, DType::f32},  {DType::bf16, DType::f16}};
    for (auto [st, dt] : convs)
        for (int nt : nts)
            reg(xb::join_name({"convert", std::string(xk::dtype_name(st)) + "->" + xk::dtype_name(dt), "xk", shape, nt_s(nt)}),
                [st = st, dt = dt, nt](benchmark::State& s) { BM_convert(s, st, dt, nt); });
    return true;
}();

}  // namespace
