// libFuzzer target: the int8 Linear of the C API (include/xk/c/qlinear.h). See fuzz_common.hpp for
// the scheme. Calls: xk_qlinear_create / _run / _destroy in the three modes (dynamic per token,
// dynamic per tensor, static), f32 / bf16 / s8 weights, f32 / bf16 / u8 / s8 outputs, bias, relu,
// residual, smooth, strides, misaligned pointers; ISA cap and thread count changes. Valid outputs
// are checked bit for bit against the header's math written here (every step an integer or an fp32
// operation in the stated order); hostile calls must be rejected with y untouched.
#include <algorithm>
#include <vector>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;
using fz::Values;

constexpr int64_t kMaxM = 6, kMaxN = 40, kMaxK = 90;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

// compute_quant_params (quant.hpp) in double, rounded once; 1.0 for a zero / overflowing scale.
struct P {
    float scale;
    int32_t zp;
};
P params(float mn, float mx, bool u8, bool symmetric) {
    const double lo = std::min<double>(mn, 0.0), hi = std::max<double>(mx, 0.0);
    double s = symmetric ? std::max(std::fabs(double(mn)), std::fabs(double(mx))) / 127.0 : (hi - lo) / 255.0;
    P p{static_cast<float>(s), symmetric && u8 ? 128 : 0};
    if (p.scale == 0.0f || !std::isfinite(1.0f / p.scale)) p.scale = 1.0f;
    if (!symmetric) p.zp = static_cast<int32_t>(std::clamp<double>(std::nearbyint(0.0 - lo / double(p.scale)), 0, 255));
    return p;
}
int32_t quant(float v, float scale, int32_t zp, int32_t lo, int32_t hi) {
    const float t = v * (1.0f / scale);
    if (std::isnan(t)) return zp;
    return static_cast<int32_t>(std::clamp<double>(double(std::nearbyint(t)) + zp, lo, hi));
}
float requant(float x, float inv, int32_t zp, int32_t lo, int32_t hi) {
    float q = std::nearbyint(x * inv) + float(zp);
    if (!(q >= float(lo))) q = float(lo);
    if (q > float(hi)) q = float(hi);
    return q;
}

void op_qlinear(In& in) {
    const char* what = "xk_qlinear_run";
    const int mode = in.pick(3);
    const int64_t M = in.dim(0, kMaxM), N = in.dim(0, kMaxN), K = in.dim(0, kMaxK);
    static const xk_dtype kF[] = {XK_DTYPE_F32, XK_DTYPE_BF16}, kQ[] = {XK_DTYPE_U8, XK_DTYPE_S8};
    const xk_dtype xt = mode == 2 ? kQ[in.pick(2)] : kF[in.pick(2)];
    const xk_dtype yt = mode == 2 && in.coin() ? kQ[in.pick(2)] : kF[in.pick(2)];
    const xk_dtype wt = in.pick(3) == 0 ? XK_DTYPE_S8 : kF[in.pick(2)];
    const bool bias = in.coin(), residual = in.coin(), relu = in.coin(), smooth = mode != 2 && in.pick(3) == 0;
    const xk_dtype rt = kF[in.pick(2)];
    const int64_t ldx = K + in.pad(), ldy = N + in.pad(), ldr = N + in.pad(), ldw = K + in.pad();
    const bool xbf = xt == XK_DTYPE_BF16, ybf = yt == XK_DTYPE_BF16, rbf = rt == XK_DTYPE_BF16;
    const int xs = xt == XK_DTYPE_F32 ? 4 : xbf ? 2 : 1, ys = yt == XK_DTYPE_F32 ? 4 : ybf ? 2 : 1;
    const size_t mis = in.pick(2);
    Values vals(in, M * K + N * K + M * N + N + K);

    // weights
    std::vector<float> wf(N * ldw, 0.0f);
    const int wes = wt == XK_DTYPE_F32 ? 4 : wt == XK_DTYPE_BF16 ? 2 : 1;
    Buf<unsigned char> w(span(N, K, ldw) * wes, mis * wes);  // (misaligned by whole elements)
    Buf<float> wscales(wt == XK_DTYPE_S8 ? N : 0);
    std::vector<float> ws(N);
    std::vector<int32_t> wq(N * K);
    for (int64_t n = 0; n < N; ++n) {
        if (wt == XK_DTYPE_S8) {
            ws[n] = wscales[n] = std::ldexp(1.0f + vals().pick(64) / 64.0f, vals().pick(20) - 15);
            for (int64_t k = 0; k < K; ++k) {
                const int8_t v = static_cast<int8_t>(vals().p.ConsumeIntegral<int8_t>());
                reinterpret_cast<int8_t*>(w.data())[n * ldw + k] = v, wq[n * K + k] = v;
            }
            continue;
        }
        float amax = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            float v = vals().value(1e4f);
            if (wt == XK_DTYPE_BF16) {
                const uint16_t b = fz::to_bf16(v);
                std::memcpy(w.data() + (n * ldw + k) * 2, &b, 2);
                v = fz::from_bf16(b);
            } else {
                std::memcpy(w.data() + (n * ldw + k) * 4, &v, 4);
            }
            wf[n * ldw + k] = v;
            amax = std::max(amax, std::fabs(v));
        }
        ws[n] = params(-amax, amax, false, true).scale;
        for (int64_t k = 0; k < K; ++k) wq[n * K + k] = quant(wf[n * ldw + k], ws[n], 0, -128, 127);
    }
    // x, smooth, bias, residual
    Buf<unsigned char> x(span(M, K, ldx) * xs, mis * xs);
    std::vector<float> xf(M * K);
    std::vector<int32_t> xi(M * K);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) {
            unsigned char* p = x.data() + (m * ldx + k) * xs;
            if (xt == XK_DTYPE_F32) {
                const float v = vals().value(1e30f);
                std::memcpy(p, &v, 4), xf[m * K + k] = v;
            } else if (xbf) {
                const uint16_t b = fz::to_bf16(vals().value(1e30f));
                std::memcpy(p, &b, 2), xf[m * K + k] = fz::from_bf16(b);
            } else {
                *p = vals().p.ConsumeIntegral<uint8_t>();
                xi[m * K + k] = xt == XK_DTYPE_U8 ? int32_t(*p) : int32_t(static_cast<int8_t>(*p));
            }
        }
    Buf<float> sm(smooth ? K : 0), bs(bias ? N : 0);
    for (int64_t k = 0; k < K && smooth; ++k) sm[k] = 0.5f + vals().pick(64) / 32.0f;
    for (int64_t n = 0; n < N && bias; ++n) bs[n] = vals().value(1e3f);
    Buf<unsigned char> res(residual ? span(M, N, ldr) * (rbf ? 2 : 4) : 0, mis * (rbf ? 2 : 4));
    std::vector<float> rf(M * N);
    for (int64_t m = 0; m < M && residual; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const float v = vals().value(1e3f);
            if (rbf) {
                const uint16_t b = fz::to_bf16(v);
                std::memcpy(res.data() + (m * ldr + n) * 2, &b, 2), rf[m * N + n] = fz::from_bf16(b);
            } else {
                std::memcpy(res.data() + (m * ldr + n) * 4, &v, 4), rf[m * N + n] = v;
            }
        }
    Buf<unsigned char> y(span(M, N, ldy) * ys, in.pick(2) * ys);
    const float x_scale = std::ldexp(1.0f + in.pick(64) / 64.0f, in.pick(12) - 8);
    const int32_t x_zp = xt == XK_DTYPE_U8 ? in.pick(256) : in.pick(256) - 128;
    const float y_scale = std::ldexp(1.0f + in.pick(64) / 64.0f, in.pick(12) - 6);
    const int32_t y_zp = yt == XK_DTYPE_U8 ? in.pick(256) : in.pick(256) - 128;

    // the expected y
    std::vector<unsigned char> want = y.snapshot();
    {
        std::vector<float> rs(M, 1.0f);
        std::vector<int32_t> q(M * K), qzp(M, 0);
        if (mode == 0) {
            for (int64_t m = 0; m < M; ++m) {
                float mn = 0, mx = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const float v = xf[m * K + k] * (smooth ? sm[k] : 1.0f);
                    mn = std::min(mn, v), mx = std::max(mx, v);
                }
                const P p = params(mn, mx, false, true);
                rs[m] = p.scale;
                for (int64_t k = 0; k < K; ++k) q[m * K + k] = quant(xf[m * K + k] * (smooth ? sm[k] : 1.0f), p.scale, 0, -128, 127);
            }
        } else if (mode == 1) {
            float mn = 0, mx = 0;
            for (int64_t i = 0; i < M * K; ++i) {
                const float v = xf[i] * (smooth ? sm[i % std::max<int64_t>(K, 1)] : 1.0f);
                mn = std::min(mn, v), mx = std::max(mx, v);
            }
            const P p = params(mn, mx, true, false);
            std::fill(rs.begin(), rs.end(), p.scale);
            for (int64_t i = 0; i < M * K; ++i)
                q[i] = quant(xf[i] * (smooth ? sm[i % K] : 1.0f), p.scale, p.zp, 0, 255) - p.zp;
        } else {
            std::fill(rs.begin(), rs.end(), x_scale);
            for (int64_t i = 0; i < M * K; ++i) q[i] = xi[i] - x_zp;
        }
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
                int64_t acc = 0;
                for (int64_t k = 0; k < K; ++k) acc += int64_t(q[m * K + k]) * wq[n * K + k];
                float v = mode == 0 ? (float(int32_t(acc)) * ws[n]) * rs[m] : float(int32_t(acc)) * (rs[m] * ws[n]);
                if (bias) v = v + bs[n];
                if (relu) v = v > 0.0f ? v : 0.0f;  // (v is never NaN here: finite inputs, no overflow)
                if (residual) v = v + rf[m * N + n];
                unsigned char* o = want.data() + (m * ldy + n) * ys;
                if (yt == XK_DTYPE_F32) std::memcpy(o, &v, 4);
                else if (ybf) { const uint16_t b = fz::to_bf16(v); std::memcpy(o, &b, 2); }
                else if (yt == XK_DTYPE_U8) *o = static_cast<uint8_t>(requant(v, 1.0f / y_scale, y_zp, 0, 255));
                else *o = static_cast<uint8_t>(static_cast<int8_t>(requant(v, 1.0f / y_scale, y_zp, -128, 127)));
            }
    }

    xk_qlinear_desc d;
    xk_qlinear_desc_init(&d);
    d.N = N, d.K = K;
    int quant_i = mode;
    d.x_type = xt, d.y_type = yt, d.ldx = ldx, d.ldy = ldy, d.smooth = smooth;
    d.bias = bias, d.residual = residual, d.act = relu ? XK_ACT_RELU : XK_ACT_NONE, d.residual_type = rt, d.ld_residual = ldr;
    xk_qlinear_weight wd{wt, w.data(), ldw, wt == XK_DTYPE_S8 ? wscales.data() : nullptr};
    xk_qlinear_args a;
    xk_qlinear_args_init(&a);
    a.x = x.data(), a.y = y.data(), a.bias = bias ? bs.data() : nullptr, a.residual = residual ? res.data() : nullptr;
    a.smooth = smooth ? sm.data() : nullptr;
    a.x_scale = x_scale, a.x_zero_point = x_zp, a.y_scale = y_scale, a.y_zero_point = y_zp;
    int64_t m_run = M;

    const bool hostile = in.pick(3) == 2;
    const char* wrong = "";
    bool at_create = false;
    if (hostile) {
        const bool any = M > 0 && N > 0 && K > 0;
        switch (in.pick(8)) {
            case 0: m_run = in.coin() ? -1 : std::numeric_limits<int64_t>::min(); wrong = "negative M"; break;
            case 1: quant_i = in.coin() ? 3 : -1; wrong = "unknown quant"; at_create = true; break;
            case 2:
                if (any) { a.x = nullptr; wrong = "x null"; break; }
                [[fallthrough]];
            case 3:
                if (M > 0 && N > 0) { a.y = nullptr; wrong = "y null"; break; }
                [[fallthrough]];
            case 4:
                if (mode == 2) { a.x_scale = in.coin() ? 0.0f : kNaN; wrong = "bad x_scale"; break; }
                if (any) {  // a non-finite x (dynamic)
                    const int64_t m = in.pick(static_cast<int>(M)), k = in.pick(static_cast<int>(K));
                    if (xbf) { const uint16_t b = 0x7fc0; std::memcpy(x.data() + (m * ldx + k) * 2, &b, 2); }
                    else std::memcpy(x.data() + (m * ldx + k) * 4, &kNaN, 4);
                    wrong = "x not finite";
                    break;
                }
                [[fallthrough]];
            case 5:
                if (yt == XK_DTYPE_U8 || yt == XK_DTYPE_S8) { a.y_zero_point = 300; wrong = "y_zero_point out of range"; break; }
                [[fallthrough]];
            case 6:
                if (K > 1) { d.ldx = K - 1; wrong = "ldx < K"; at_create = true; break; }  // (0 would mean packed)
                [[fallthrough]];
            default:
                if (wt == XK_DTYPE_S8 && N > 0) { wscales[in.pick(static_cast<int>(N))] = -1.0f; wrong = "negative weight scale"; at_create = true; break; }
                d.N = -3, wrong = "negative N", at_create = true;
                break;
        }
    }
    std::memcpy(&d.quant, &quant_i, sizeof quant_i);
    xk_qlinear* plan = nullptr;
    const xk_status cs = fz::timed("xk_qlinear_create", [&] { return xk_qlinear_create(&d, &wd, &plan); });
    if (hostile && at_create) {
        fz::expect_rejected(cs, "xk_qlinear_create", wrong);
        if (plan) fz::finding("xk_qlinear_create: rejected but returned a plan");
        return;
    }
    fz::expect_ok(cs, "xk_qlinear_create");
    const auto before = y.snapshot();
    const xk_status s = fz::timed(what, [&] { return xk_qlinear_run(plan, m_run, &a); });
    xk_qlinear_destroy(plan);
    if (hostile) {
        fz::expect_rejected(s, what, wrong);
        fz::expect_unchanged(y, before, what, "y");
        return;
    }
    fz::expect_ok(s, what);
    fz::expect_guards(y, what, "y");
    if (y.same_as(want)) return;
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const unsigned char* g = y.data() + (m * ldy + n) * ys;
            const unsigned char* e = want.data() + (m * ldy + n) * ys;
            if (std::memcmp(g, e, ys) == 0) continue;
            float gv = 0, ev = 0;
            if (yt == XK_DTYPE_F32) std::memcpy(&gv, g, 4), std::memcpy(&ev, e, 4);
            if (yt == XK_DTYPE_F32 && std::isnan(gv) && std::isnan(ev)) continue;
            fz::finding("%s: y[%lld][%lld] differs (got %.9g want %.9g; mode %d M %lld N %lld K %lld x %d y %d w %d bias %d "
                        "relu %d residual %d smooth %d)",
                        what, (long long)m, (long long)n, gv, ev, mode, (long long)M, (long long)N, (long long)K, (int)xt,
                        (int)yt, (int)wt, bias, relu, residual, smooth);
        }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 8 && in.more(); ++calls) {
        switch (in.pick(8)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(1 + in.pick(2)); }), "xk_set_num_threads"); break;
            default: op_qlinear(in); break;
        }
    }
    return 0;
}
