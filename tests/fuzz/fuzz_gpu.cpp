// libFuzzer target: the OpenCL backend's C API (include/xk/c/gpu.h). See fuzz_common.hpp for the
// scheme. Without a device (the fuzz preset builds without OpenCL) every entry point must reject
// its input cleanly: null handles, unknown dtype / activation values, device indices out of
// range, context creation (XK_UNSUPPORTED or XK_INVALID_ARGUMENT with a message). With a device,
// valid rms_norm / softmax / glu calls on small buffers are checked against a double-precision
// loop, hostile ones (a buffer too small, an offset past the end, a bad dtype, a bad stride) must
// fail and leave the output buffer as it was; blocking reads / writes out of range are rejected.
// xk_gpu_gemm: f32 products with odd sizes, transposes, padded leading dimensions, offsets, alpha /
// beta, bias and relu against a double loop; hostile ones (a short buffer, an offset past the end,
// a short leading dimension, an unknown dtype / trans / activation, C = an input, a missing bias,
// null desc / tensors) must fail and leave C as it was.
#include <algorithm>
#include <cmath>
#include <cstring>
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
    switch (in.pick(10)) {
        case 8: {
            xk_gemm_desc d;
            xk_gemm_desc_init(&d);
            d.M = rows, d.N = n, d.K = in.dim(0, 16);
            const xk_gpu_gemm_tensors t{none, none, none, none, none};
            expect_fail(xk_gpu_gemm(nullptr, &d, &t), "gemm(null ctx)");
            char buf[16];
            expect_fail(xk_gpu_gemm_kernel_name(nullptr, &d, buf, sizeof buf), "gemm_kernel_name(null ctx)");
            break;
        }
        case 9: {
            bool tried = false;
            xk_gpu_context ctx = shared_ctx(tried);
            xk_gemm_desc d;
            xk_gemm_desc_init(&d);
            const xk_gpu_gemm_tensors t{none, none, none, none, none};
            if (ctx) {  // null descriptor / tensors with a valid context
                expect_fail(xk_gpu_gemm(ctx, nullptr, &t), "gemm(null desc)");
                expect_fail(xk_gpu_gemm(ctx, &d, nullptr), "gemm(null tensors)");
                char buf[4];
                expect_fail(xk_gpu_gemm_kernel_name(ctx, &d, buf, 0), "gemm_kernel_name(size 0)");
            } else {
                expect_fail(xk_gpu_gemm(nullptr, nullptr, nullptr), "gemm(all null)");
            }
            break;
        }
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

// Valid and hostile xk_gpu_gemm on a device, f32.
void gemm_calls(In& in, xk_gpu_context ctx) {
    xk_gemm_desc d;
    xk_gemm_desc_init(&d);
    const int64_t M = in.dim(1, 20), N = in.dim(1, 40), K = in.dim(0, 40);
    const bool ta = in.coin(), tb = in.coin();
    d.M = M, d.N = N, d.K = K;
    d.trans_a = ta ? XK_TRANS_T : XK_TRANS_N;
    d.trans_b = tb ? XK_TRANS_T : XK_TRANS_N;
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    d.lda = std::max<int64_t>(ac, 1) + in.pad();
    d.ldb = std::max<int64_t>(bc, 1) + in.pad();
    d.ldc = N + in.pad();
    d.alpha = in.coin() ? 1.0f : rnd(in);
    d.beta = in.coin() ? 0.0f : rnd(in);
    d.bias = in.coin();
    d.act = in.coin() ? XK_ACT_RELU : XK_ACT_NONE;
    const int64_t off = in.pick(3);
    const int64_t na = off + std::max<int64_t>(ar - 1, 0) * d.lda + ac, nb = off + std::max<int64_t>(br - 1, 0) * d.ldb + bc;
    const int64_t nc = off + (M - 1) * d.ldc + N;
    std::vector<float> a(static_cast<size_t>(std::max<int64_t>(na, 1))), b(static_cast<size_t>(std::max<int64_t>(nb, 1)));
    std::vector<float> c0(static_cast<size_t>(nc)), bias(static_cast<size_t>(N));
    for (auto& v : a) v = rnd(in);
    for (auto& v : b) v = rnd(in);
    for (auto& v : c0) v = rnd(in);
    for (auto& v : bias) v = rnd(in);
    const bool hostile = in.coin();
    const int how = in.pick(8);
    xk_gpu_buffer ba = nullptr, bb = nullptr, bcm = nullptr, bbias = nullptr;
    expect_ok(xk_gpu_buffer_create(ctx, int64_t(a.size()) * 4, &ba), "gemm buffer A");
    expect_ok(xk_gpu_buffer_create(ctx, int64_t(b.size()) * 4, &bb), "gemm buffer B");
    expect_ok(xk_gpu_buffer_create(ctx, nc * 4, &bcm), "gemm buffer C");
    expect_ok(xk_gpu_buffer_create(ctx, N * 4, &bbias), "gemm buffer bias");
    expect_ok(xk_gpu_buffer_write(ba, 0, a.data(), int64_t(a.size()) * 4), "write A");
    expect_ok(xk_gpu_buffer_write(bb, 0, b.data(), int64_t(b.size()) * 4), "write B");
    expect_ok(xk_gpu_buffer_write(bcm, 0, c0.data(), nc * 4), "write C");
    expect_ok(xk_gpu_buffer_write(bbias, 0, bias.data(), N * 4), "write bias");
    const xk_gpu_tensor none{nullptr, 0};
    xk_gpu_gemm_tensors t{{ba, off}, {bb, off}, {bcm, off}, d.bias ? xk_gpu_tensor{bbias, 0} : none, none};
    bool must_fail = hostile;
    if (hostile) {
        switch (how) {
            case 0: t.C.offset = off + 1; break;                                    // C one element past its buffer
            case 1: if (K > 0) t.A.offset = off + 1; else must_fail = false; break;  // A past its buffer
            case 2: d.ldc = N - 1; must_fail = N > 1; break;                        // ld 0 is packed: valid
            case 3: d.a_type = static_cast<xk_dtype>(77); break;
            case 4: d.trans_b = static_cast<xk_trans>(2 + in.pick(100)); break;
            case 5: d.act = static_cast<xk_activation>(50 + in.pick(50)); break;
            case 6: if (K > 0) t.C = {ba, 0}; else must_fail = false; break;        // C = A's buffer
            default: d.bias = 1; t.bias = none; break;                             // bias without a buffer
        }
    }
    const xk_status st = xk_gpu_gemm(ctx, &d, &t);
    if (must_fail) expect_fail(st, "hostile gpu gemm");
    else if (!hostile) expect_ok(st, "gpu gemm");
    if (st == XK_SUCCESS) expect_ok(xk_gpu_finish(ctx), "finish");
    std::vector<float> got(static_cast<size_t>(nc));
    expect_ok(xk_gpu_buffer_read(bcm, 0, got.data(), nc * 4), "read C");
    if (st != XK_SUCCESS) {
        if (std::memcmp(got.data(), c0.data(), got.size() * 4) != 0) fz::finding("rejected gpu gemm wrote C");
    } else if (!hostile) {
        for (int64_t m = 0; m < M; ++m)
            for (int64_t nn = 0; nn < N; ++nn) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const double p = double(a[size_t(off + (ta ? k * d.lda + m : m * d.lda + k))]) *
                                     b[size_t(off + (tb ? nn * d.ldb + k : k * d.ldb + nn))];
                    acc += p;
                    mag += std::fabs(p);
                }
                const size_t ci = size_t(off + m * d.ldc + nn);
                double x = double(d.alpha) * acc, xm = std::fabs(double(d.alpha)) * mag;
                if (d.beta != 0.0f) x += double(d.beta) * c0[ci], xm += std::fabs(double(d.beta) * c0[ci]);
                if (d.bias) x += bias[size_t(nn)], xm += std::fabs(bias[size_t(nn)]);
                if (d.act == XK_ACT_RELU) x = std::max(0.0, x);
                // fp32 sums in the kernel's order: error bound relative to the sum of magnitudes
                const double tol = 1e-30 + 2e-6 * double(K + 3) * xm;
                if (!(std::fabs(got[ci] - x) <= tol) && std::isfinite(xm))
                    fz::finding("gpu gemm %lldx%lldx%lld (%lld,%lld): %g vs %g", (long long)M, (long long)N, (long long)K,
                                (long long)m, (long long)nn, got[ci], x);
            }
    }
    for (xk_gpu_buffer bf : {ba, bb, bcm, bbias}) xk_gpu_buffer_destroy(bf);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    bool tried = false;
    xk_gpu_context ctx = shared_ctx(tried);
    for (int calls = 0; in.more() && calls < 16; ++calls) {
        fz::timed("gpu calls", [&] {
            if (ctx && in.coin()) {
                if (in.coin()) device_calls(in, ctx);
                else gemm_calls(in, ctx);
            }
            else no_device_calls(in);
            return XK_SUCCESS;
        });
    }
    return 0;
}
