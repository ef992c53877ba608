// libFuzzer target: the OpenCL backend's C API (include/xk/c/gpu.h). See fuzz_common.hpp for the
// scheme. Without a device (the fuzz preset builds without OpenCL) every entry point must reject
// its input cleanly: null handles, unknown dtype / activation values, device indices out of
// range, context creation (XK_UNSUPPORTED or XK_INVALID_ARGUMENT with a message). With a device,
// valid rms_norm / softmax / glu calls on small buffers are checked against a double-precision
// loop, hostile ones (a buffer too small, an offset past the end, a bad dtype, a bad stride) must
// fail and leave the output buffer as it was; blocking reads / writes out of range are rejected.
#include <cmath>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "xk/c/gpu.h"

namespace {

using fz::In;

void expect_fail(xk_status st, const char* what) {
    if (st == XK_SUCCESS) fz::finding("%s: succeeded", what);
    if (std::string(xk_last_error()).empty()) fz::finding("%s: failed without a message", what);
}
void expect_ok(xk_status st, const char* what) {
    if (st != XK_SUCCESS) fz::finding("%s: %s", what, xk_last_error());
    if (!std::string(xk_last_error()).empty()) fz::finding("%s: success with a message", what);
}

xk_gpu_context shared_ctx(bool& tried) {
    static xk_gpu_context ctx = nullptr;
    static bool done = false;
    if (!done) {
        done = true;
        int n = 0;
        expect_ok(xk_gpu_device_count(&n), "xk_gpu_device_count");
        if (n > 0 && xk_gpu_context_create(-1, &ctx) != XK_SUCCESS) ctx = nullptr;
    }
    tried = done;
    return ctx;
}

// Hostile calls that need no device.
void no_device_calls(In& in) {
    const xk_gpu_tensor none{nullptr, 0};
    const int64_t rows = in.dim(0, 8), n = in.dim(1, 64);
    switch (in.pick(8)) {
        case 0: expect_fail(xk_gpu_rms_norm(nullptr, XK_DTYPE_F32, rows, n, none, 0, none, 0, none, 1e-5f, none, 0), "rms_norm(null ctx)"); break;
        case 1: expect_fail(xk_gpu_softmax(nullptr, XK_DTYPE_F32, rows, n, none, 0, none, 0, 1.0f, 0, 0), "softmax(null ctx)"); break;
        case 2: expect_fail(xk_gpu_glu(nullptr, XK_ACT_SILU, XK_DTYPE_F32, rows, n, none, 0, none, 0), "glu(null ctx)"); break;
        case 3: expect_fail(xk_gpu_rope(nullptr, XK_DTYPE_F32, 1, rows, 1, 0, 2 * n, 0, none, none, none, none, 4), "rope(null ctx)"); break;
        case 4: {
            char buf[8];
            int count = 0;
            expect_ok(xk_gpu_device_count(&count), "device_count");
            const int idx = in.coin() ? count + in.pick(3) : -1 - in.pick(3);
            expect_fail(xk_gpu_device_name(idx, buf, sizeof buf), "device_name(out of range)");
            expect_fail(xk_gpu_device_name(0, nullptr, 8), "device_name(null buf)");
            break;
        }
        case 5: {
            int64_t b = 0;
            expect_fail(xk_gpu_buffer_bytes(nullptr, &b), "buffer_bytes(null)");
            char h[4];
            expect_fail(xk_gpu_buffer_read(nullptr, 0, h, 4), "buffer_read(null)");
            expect_fail(xk_gpu_buffer_write(nullptr, 0, h, 4), "buffer_write(null)");
            break;
        }
        case 6: {
            xk_gpu_buffer b = nullptr;
            expect_fail(xk_gpu_buffer_create(nullptr, 16, &b), "buffer_create(null ctx)");
            if (b) fz::finding("buffer_create(null ctx) wrote a handle");
            expect_fail(xk_gpu_finish(nullptr), "finish(null)");
            expect_fail(xk_gpu_memory_stats_get(nullptr, nullptr), "memory_stats(null)");
            break;
        }
        default: {
            xk_gpu_context c = nullptr;
            const int idx = 1000 + in.pick(100);
            expect_fail(xk_gpu_context_create(idx, &c), "context_create(bad index)");
            if (c) fz::finding("context_create(bad index) wrote a handle");
            xk_gpu_context_destroy(nullptr);
            xk_gpu_buffer_destroy(nullptr);
        }
    }
}

float rnd(In& in) { return in.value(4.0f); }

// Valid and hostile rms_norm / softmax / glu on a device, f32.
void device_calls(In& in, xk_gpu_context ctx) {
    const int64_t rows = in.dim(1, 4), n = in.dim(1, 40), ld = n + in.pad();
    const int op = in.pick(3);
    const int64_t xw = op == 2 ? 2 * n : n, ldx = op == 2 ? 2 * n + in.pad() : ld;
    const int64_t nx = (rows - 1) * ldx + xw, ny = (rows - 1) * ld + n;
    std::vector<float> x(static_cast<size_t>(nx)), w(static_cast<size_t>(n));
    for (auto& v : x) v = rnd(in);
    for (auto& v : w) v = rnd(in);
    const bool hostile = in.coin();
    const int how = in.pick(4);
    xk_gpu_buffer bx = nullptr, bw = nullptr, by = nullptr;
    const int64_t ybytes = ny * 4 + 64;
    expect_ok(xk_gpu_buffer_create(ctx, nx * 4, &bx), "buffer_create x");
    expect_ok(xk_gpu_buffer_create(ctx, n * 4, &bw), "buffer_create w");
    expect_ok(xk_gpu_buffer_create(ctx, hostile && how == 0 ? ny * 4 - 4 : ybytes, &by), "buffer_create y");
    expect_ok(xk_gpu_buffer_write(bx, 0, x.data(), nx * 4), "write x");
    expect_ok(xk_gpu_buffer_write(bw, 0, w.data(), n * 4), "write w");
    int64_t yb = 0;
    expect_ok(xk_gpu_buffer_bytes(by, &yb), "buffer_bytes");
    std::vector<uint8_t> sentinel(static_cast<size_t>(yb), 0xA5);
    expect_ok(xk_gpu_buffer_write(by, 0, sentinel.data(), yb), "write y");
    xk_gpu_tensor tx{bx, 0}, ty{by, hostile && how == 1 ? 3 : 0}, tw{bw, 0}, none{nullptr, 0};
    const xk_dtype dt = hostile && how == 2 ? static_cast<xk_dtype>(77) : XK_DTYPE_F32;
    const int64_t use_ld = hostile && how == 3 ? n - 1 : ld;  // n - 1 < n: a stride too small
    xk_status st;
    const float scale = 0.5f;
    if (op == 0) st = xk_gpu_rms_norm(ctx, dt, rows, n, tx, ld, none, 0, tw, 1e-5f, ty, use_ld);
    else if (op == 1) st = xk_gpu_softmax(ctx, dt, rows, n, tx, ld, ty, use_ld, scale, 0, 0);
    else st = xk_gpu_glu(ctx, XK_ACT_RELU, dt, rows, n, tx, ldx, ty, use_ld);
    // how 1 (offset 3) fits in the 64 spare bytes; how 3 with n == 1 passes ld 0 (= packed): valid
    const bool should_fail = hostile && (how != 1 || ty.offset * 4 + ny * 4 > yb) && !(how == 3 && n == 1);
    if (should_fail) expect_fail(st, "hostile gpu op");
    if (st == XK_SUCCESS) expect_ok(xk_gpu_finish(ctx), "finish");
    std::vector<uint8_t> got(static_cast<size_t>(yb));
    expect_ok(xk_gpu_buffer_read(by, 0, got.data(), yb), "read y");
    if (st != XK_SUCCESS) {
        if (got != sentinel) fz::finding("rejected gpu op %d wrote its output", op);
    } else if (!hostile) {
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = x.data() + r * ldx;
            std::vector<double> ref(static_cast<size_t>(n));
            if (op == 0) {
                double ss = 0;
                for (int64_t i = 0; i < n; ++i) ss += double(xr[i]) * xr[i];
                const double rs = 1.0 / std::sqrt(ss / n + 1e-5);
                for (int64_t i = 0; i < n; ++i) ref[i] = xr[i] * rs * w[i];
            } else if (op == 1) {
                double m = -INFINITY, s = 0;
                for (int64_t i = 0; i < n; ++i) m = std::max(m, double(scale) * xr[i]);
                for (int64_t i = 0; i < n; ++i) s += std::exp(double(scale) * xr[i] - m);
                for (int64_t i = 0; i < n; ++i) ref[i] = std::exp(double(scale) * xr[i] - m) / s;
            } else {
                for (int64_t i = 0; i < n; ++i) ref[i] = std::max(0.0, double(xr[i])) * xr[n + i];
            }
            for (int64_t i = 0; i < n; ++i) {
                float g;
                std::memcpy(&g, got.data() + (r * ld + i) * 4, 4);
                const double tol = 1e-6 + 1e-4 * std::fabs(ref[i]) + (op == 0 ? 1e-5 * std::fabs(w[i]) : 0.0);
                if (!(std::fabs(g - ref[i]) <= tol)) fz::finding("gpu op %d row %lld col %lld: %g vs %g", op, (long long)r, (long long)i, g, ref[i]);
            }
        }
    }
    // out-of-range host copies
    char h[8];
    expect_fail(xk_gpu_buffer_read(bw, n * 4 - 4, h, 8), "read past the end");
    expect_fail(xk_gpu_buffer_write(bw, -1, h, 4), "write at a negative offset");
    xk_gpu_buffer_destroy(bx);
    xk_gpu_buffer_destroy(bw);
    xk_gpu_buffer_destroy(by);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    bool tried = false;
    xk_gpu_context ctx = shared_ctx(tried);
    for (int calls = 0; in.more() && calls < 16; ++calls) {
        fz::timed("gpu calls", [&] {
            if (ctx && in.coin()) device_calls(in, ctx);
            else no_device_calls(in);
            return XK_SUCCESS;
        });
    }
    return 0;
}
