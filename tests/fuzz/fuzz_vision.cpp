// libFuzzer target: the vision family of the C API (include/xk/c/vision.h, semantics of
// xk/vision.hpp). See fuzz_common.hpp for the scheme. Calls:
//   xk_roi_align_f32 / _bf16, both layouts, aligned or not, adaptive or fixed sampling, boxes inside,
//     across and far outside the map (up to 1e30: only the samples near the map are visited, so the
//     call stays quick); valid ones checked against a double-precision loop of the header's math
//     (sample positions in f32 as torchvision computes them) when the boxes are moderate, else
//     against the same call with the cap at scalar (the reference);
//   xk_nms / xk_batched_nms with ties, zero-area and NaN / inf boxes, infinite scores, score
//     threshold, max_output, class ids (negative, huge); checked exactly against "kept iff no kept
//     box of its class overlaps it by more than the threshold" in f32;
//   xk_frozen_batch_norm_f32 / _bf16, both layouts, every activation, in place; checked against
//     double math with an error bound;
//   hostile variants of each (one argument wrong: batch index out of range or fractional, NaN / inf
//     coordinates, negative or overflowing sizes, NaN thresholds / scores, var + eps <= 0, bad enums,
//     null pointers, overlapping outputs): rejected, outputs untouched;
//   xk_qconv2d (int8 convolution, u8 / s8 src, u8 / s8 / f32 dst, 1x1 and padded / strided /
//     dilated kernels, groups and depthwise, zero points, per-channel weight scales, bias, activations) against an exact
//     int64 sum and a double epilogue (requantized outputs within 1), and its hostile variants;
//   ISA cap and thread count changes.
#include <algorithm>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Negative sizes, or sizes every product of which overflows (never a large size the API must
// accept: it cannot know how big the caller's buffers are).
int64_t hostile_size(In& in) {
    static const int64_t v[] = {-1, -7, std::numeric_limits<int64_t>::min(), int64_t(1) << 62, kMax};
    return v[in.pick(5)];
}

// ---- ROIAlign ------------------------------------------------------------------------------------

struct Map {
    bool bf = false;
    Buf<unsigned char> buf;
    Map() = default;
    Map(bool b, int64_t n, size_t mis) : bf(b), buf(static_cast<size_t>(n) * (b ? 2 : 4), mis * (b ? 2 : 4)) {}
    double get(int64_t i) const {
        const unsigned char* q = buf.data() + i * (bf ? 2 : 4);
        if (bf) { uint16_t u; std::memcpy(&u, q, 2); return fz::from_bf16(u); }
        float f;
        std::memcpy(&f, q, 4);
        return f;
    }
    void set(int64_t i, float v) {
        unsigned char* q = buf.data() + i * (bf ? 2 : 4);
        if (bf) { const uint16_t u = fz::to_bf16(v); std::memcpy(q, &u, 2); }
        else std::memcpy(q, &v, 4);
    }
};

// The header's definition, sample by sample; sum in double. Also returns sum |w v| / count per
// output (the error scale).
void roi_oracle(const xk_roi_align_desc& d, const Map& src, const float* boxes, std::vector<double>& out,
                std::vector<double>& mag, std::vector<double>& terms) {
    const int64_t C = d.c, H = d.h, W = d.w, PH = d.pooled_h, PW = d.pooled_w;
    const bool nhwc = d.layout == XK_CONV_NHWC;
    out.assign(static_cast<size_t>(d.num_rois * C * PH * PW), 0.0);
    mag.assign(out.size(), 0.0);
    terms.assign(out.size(), 0.0);
    for (int64_t k = 0; k < d.num_rois; ++k) {
        const float* r = boxes + k * 5;
        const int64_t b = static_cast<int64_t>(r[0]);
        const float off = d.aligned ? 0.5f : 0.0f;
        const float sx = r[1] * d.spatial_scale - off, sy = r[2] * d.spatial_scale - off;
        float rw = (r[3] * d.spatial_scale - off) - sx, rh = (r[4] * d.spatial_scale - off) - sy;
        if (!d.aligned) { rw = std::max(rw, 1.0f); rh = std::max(rh, 1.0f); }
        const float bw = rw / static_cast<float>(PW), bh = rh / static_cast<float>(PH);
        const int64_t gh = d.sampling_ratio > 0 ? d.sampling_ratio : static_cast<int64_t>(std::ceil(rh / static_cast<float>(PH)));
        const int64_t gw = d.sampling_ratio > 0 ? d.sampling_ratio : static_cast<int64_t>(std::ceil(rw / static_cast<float>(PW)));
        const double count = (gh >= 1 && gw >= 1) ? static_cast<double>(gh * gw) : 1.0;
        for (int64_t c = 0; c < C; ++c)
            for (int64_t ph = 0; ph < PH; ++ph)
                for (int64_t pw = 0; pw < PW; ++pw) {
                    double acc = 0, am = 0, nt = 0;
                    for (int64_t iy = 0; iy < gh; ++iy)
                        for (int64_t ix = 0; ix < gw; ++ix) {
                            float y = sy + static_cast<float>(ph) * bh + (static_cast<float>(iy) + 0.5f) * bh / static_cast<float>(gh);
                            float x = sx + static_cast<float>(pw) * bw + (static_cast<float>(ix) + 0.5f) * bw / static_cast<float>(gw);
                            if (y < -1.0f || y > static_cast<float>(H) || x < -1.0f || x > static_cast<float>(W)) continue;
                            y = std::max(y, 0.0f);
                            x = std::max(x, 0.0f);
                            int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1 = y0 + 1, x1 = x0 + 1;
                            if (y0 >= H - 1) { y0 = y1 = H - 1; y = static_cast<float>(y0); }
                            if (x0 >= W - 1) { x0 = x1 = W - 1; x = static_cast<float>(x0); }
                            const double ly = static_cast<double>(y) - y0, lx = static_cast<double>(x) - x0;
                            auto at = [&](int64_t yy, int64_t xx) {
                                return src.get(nhwc ? ((b * H + yy) * W + xx) * C + c : ((b * C + c) * H + yy) * W + xx);
                            };
                            const double t[4] = {(1 - ly) * (1 - lx) * at(y0, x0), (1 - ly) * lx * at(y0, x1),
                                                 ly * (1 - lx) * at(y1, x0), ly * lx * at(y1, x1)};
                            for (double v : t) { acc += v; am += std::fabs(v); }
                            nt += 4;
                        }
                    const size_t o = static_cast<size_t>(nhwc ? ((k * PH + ph) * PW + pw) * C + c : ((k * C + c) * PH + ph) * PW + pw);
                    out[o] = acc / count;
                    mag[o] = am / count;
                    terms[o] = nt;
                }
    }
}

void op_roi_align(In& in) {
    xk_roi_align_desc d;
    const int64_t n = in.dim(1, 2), c = in.dim(1, 20), h = in.dim(1, 9), w = in.dim(1, 9), k = in.dim(0, 6);
    const int64_t ph = in.dim(1, 5), pw = in.dim(1, 5);
    if (xk_roi_align_desc_init(&d, n, c, h, w, k, ph, pw) != XK_SUCCESS) fz::finding("xk_roi_align_desc_init failed");
    static const float scales[] = {0.25f, 0.5f, 1.0f, 2.0f};
    d.spatial_scale = scales[in.pick(4)];
    d.sampling_ratio = in.pick(5) - 1;  // -1 .. 3
    d.aligned = in.coin() ? 1 : 0;
    d.layout = in.coin() ? XK_CONV_NHWC : XK_CONV_NCHW;
    const bool bf = in.coin();
    const char* fn = bf ? "xk_roi_align_bf16" : "xk_roi_align_f32";
    Map src(bf, n * c * h * w, in.pick(3));
    {
        fz::Values vals(in, static_cast<size_t>(n * c * h * w));
        for (int64_t i = 0; i < n * c * h * w; ++i) src.set(i, vals().value(1e20f));
    }
    Buf<float> boxes(static_cast<size_t>(k * 5), in.pick(2));
    bool moderate = true;
    for (int64_t i = 0; i < k; ++i) {
        boxes[i * 5] = static_cast<float>(in.pick(static_cast<int>(n)));
        const bool far = in.pick(6) == 0;
        for (int j = 1; j <= 4; ++j) {
            const float v = far ? in.value(1e30f) : static_cast<float>(in.p.ConsumeIntegralInRange<int>(-80, 400)) / 16.0f;
            boxes[i * 5 + j] = v;
            if (std::fabs(v) > 64) moderate = false;
        }
    }
    const int64_t no = k * c * ph * pw;
    Map dst(bf, no, in.pick(3));
    // Hostile: one argument wrong.
    if (in.pick(3) == 0) {
        xk_roi_align_desc e = d;
        Buf<float> bx = boxes;
        const void* s = src.buf.data();
        const float* bp = bx.data();
        void* dp = dst.buf.data();
        const char* what = "?";
        switch (in.pick(k > 0 ? 12 : 8)) {
            case 0: e.n = hostile_size(in); what = "N"; break;
            case 1: e.c = hostile_size(in); what = "C"; break;
            case 2: (in.coin() ? e.h : e.w) = hostile_size(in); what = "H / W"; break;
            case 3: (in.coin() ? e.pooled_h : e.pooled_w) = in.coin() ? 0 : hostile_size(in); what = "pooled"; break;
            case 4: e.spatial_scale = in.coin() ? -in.value(4) * in.value(4) - 0.0f : std::numeric_limits<float>::quiet_NaN();
                    if (e.spatial_scale > 0) e.spatial_scale = -e.spatial_scale;
                    what = "spatial_scale"; break;
            case 5: e.sampling_ratio = 1025 + in.p.ConsumeIntegralInRange<int64_t>(0, kMax - 1025); what = "sampling_ratio"; break;
            case 6: { const int bad = in.bad_enum(2); std::memcpy(&e.layout, &bad, sizeof bad); what = "layout"; break; }
            case 7: e.num_rois = k > 0 ? -k : hostile_size(in); if (e.num_rois == 0) e.num_rois = -1; what = "num_rois"; break;
            case 8: {
                const int64_t i = in.pick(static_cast<int>(k));
                static const float bad[] = {-1.0f, 0.5f, 2.5f, 1e9f, std::numeric_limits<float>::quiet_NaN(),
                                            std::numeric_limits<float>::infinity()};
                bx[i * 5] = bad[in.pick(6)];
                if (bx[i * 5] == 2.5f || bx[i * 5] == 1e9f) bx[i * 5] = static_cast<float>(n) + (bx[i * 5] == 2.5f ? 0.0f : 1e9f);
                what = "box batch index"; break;
            }
            case 9: {
                const int64_t i = in.pick(static_cast<int>(k));
                bx[i * 5 + 1 + in.pick(4)] = in.coin() ? std::numeric_limits<float>::quiet_NaN() : -std::numeric_limits<float>::infinity();
                what = "box coordinate"; break;
            }
            case 10: switch (in.pick(3)) { case 0: s = nullptr; break; case 1: bp = nullptr; break; default: dp = nullptr; } what = "null"; break;
            default: dp = const_cast<unsigned char*>(src.buf.data()); what = "dst == src"; break;
        }
        const auto before = dst.buf.snapshot();
        const xk_status st = fz::timed(fn, [&] {
            return bf ? xk_roi_align_bf16(&e, static_cast<const uint16_t*>(s), bp, static_cast<uint16_t*>(dp))
                      : xk_roi_align_f32(&e, static_cast<const float*>(s), bp, static_cast<float*>(dp));
        });
        fz::expect_rejected(st, fn, what);
        fz::expect_unchanged(dst.buf, before, fn, "dst");
        return;
    }
    const xk_status st = fz::timed(fn, [&] {
        return bf ? xk_roi_align_bf16(&d, reinterpret_cast<const uint16_t*>(src.buf.data()), boxes.data(),
                                      reinterpret_cast<uint16_t*>(dst.buf.data()))
                  : xk_roi_align_f32(&d, reinterpret_cast<const float*>(src.buf.data()), boxes.data(),
                                     reinterpret_cast<float*>(dst.buf.data()));
    });
    fz::expect_ok(st, fn);
    fz::expect_guards(dst.buf, fn, "dst");
    // Error bound: (terms + 8) * 2^-24 * sum |w v| / count (an f32 sum of `terms` products; FMA or
    // not), plus one bf16 rounding.
    std::vector<double> want, mag, terms;
    if (moderate) {
        roi_oracle(d, src, boxes.data(), want, mag, terms);
    } else {
        // Boxes far out (the oracle would visit ~1e29 samples): the reference (cap scalar) on the
        // same call, and on |src| for the error scale, with the bound of 2 x 484 visible taps.
        Map ref(bf, no, 0), aref(bf, no, 0), asrc = src;
        for (int64_t i = 0; i < n * c * h * w; ++i) asrc.set(i, static_cast<float>(std::fabs(src.get(i))));
        xk_isa cap;
        xk_get_max_isa(&cap);
        fz::set_cap(XK_ISA_SCALAR);
        auto run = [&](const Map& m, Map& o) {
            return bf ? xk_roi_align_bf16(&d, reinterpret_cast<const uint16_t*>(m.buf.data()), boxes.data(),
                                          reinterpret_cast<uint16_t*>(o.buf.data()))
                      : xk_roi_align_f32(&d, reinterpret_cast<const float*>(m.buf.data()), boxes.data(),
                                         reinterpret_cast<float*>(o.buf.data()));
        };
        fz::expect_ok(run(src, ref), "reference");
        fz::expect_ok(run(asrc, aref), "reference on |src|");
        fz::set_cap(cap);
        want.resize(static_cast<size_t>(no));
        mag.resize(static_cast<size_t>(no));
        terms.assign(static_cast<size_t>(no), 2 * 4 * 484.0);
        for (int64_t i = 0; i < no; ++i) { want[i] = ref.get(i); mag[i] = aref.get(i) * 1.01; }
    }
    for (int64_t i = 0; i < no; ++i) {
        const double g = dst.get(i);
        const double tol = (terms[i] + 8) * 6e-8 * mag[i] + (bf ? std::fabs(want[i]) / 128 + mag[i] / 128 : 0.0) + 1e-37;
        if (!(std::fabs(g - want[i]) <= tol))
            fz::finding("%s: dst[%lld] = %.9g, want %.9g (tol %.3g, %s)", fn, static_cast<long long>(i), g, want[i], tol,
                        moderate ? "oracle" : "reference");
    }
}

// ---- NMS -----------------------------------------------------------------------------------------

std::vector<int64_t> nms_oracle(int64_t m, const float* b, const float* s, const int64_t* cls, float thr, float sthr,
                                int64_t max_out) {
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < m; ++i)
        if (s[i] > sthr) idx.push_back(i);
    std::sort(idx.begin(), idx.end(), [&](int64_t x, int64_t y) { return s[x] != s[y] ? s[x] > s[y] : x < y; });
    std::vector<int64_t> kept;
    for (int64_t j : idx) {
        if (max_out > 0 && static_cast<int64_t>(kept.size()) >= max_out) break;
        bool ok = true;
        for (int64_t i : kept) {
            if (cls && cls[i] != cls[j]) continue;
            const float* p = b + i * 4;
            const float* q = b + j * 4;
            const float ai = (p[2] - p[0]) * (p[3] - p[1]);
            const float aj = (q[2] - q[0]) * (q[3] - q[1]);
            const float w = std::max(0.0f, std::min(p[2], q[2]) - std::max(p[0], q[0]));
            const float h = std::max(0.0f, std::min(p[3], q[3]) - std::max(p[1], q[1]));
            const float inter = w * h;
            const float ovr = inter / (ai + aj - inter);
            if (ovr > thr) { ok = false; break; }
        }
        if (ok) kept.push_back(j);
    }
    return kept;
}

void op_nms(In& in) {
    const int64_t m = in.dim(0, 40);
    const bool batched = in.coin();
    const char* fn = batched ? "xk_batched_nms" : "xk_nms";
    Buf<float> b(static_cast<size_t>(m * 4), in.pick(2)), s(static_cast<size_t>(m), in.pick(2));
    Buf<int64_t> cls(static_cast<size_t>(m), in.pick(2));
    for (int64_t i = 0; i < m; ++i) {
        const float x = static_cast<float>(in.pick(16)), y = static_cast<float>(in.pick(16));
        if (in.pick(8) == 0) {
            for (int j = 0; j < 4; ++j) b[i * 4 + j] = in.any_value();
        } else {
            b[i * 4] = x; b[i * 4 + 1] = y;
            b[i * 4 + 2] = x + static_cast<float>(in.pick(8)); b[i * 4 + 3] = y + static_cast<float>(in.pick(8));
        }
        static const float sc[] = {0.0f, 0.25f, 0.5f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                                   -std::numeric_limits<float>::infinity()};
        s[i] = in.pick(2) ? sc[in.pick(7)] : in.value();
        static const int64_t cv[] = {0, 1, 2, -1, kMax, std::numeric_limits<int64_t>::min()};
        cls[i] = cv[in.pick(6)];
    }
    float thr = static_cast<float>(in.p.ConsumeIntegralInRange<int>(-4, 12)) / 8.0f;
    float sthr = in.coin() ? -std::numeric_limits<float>::infinity() : static_cast<float>(in.pick(5)) / 4.0f - 0.25f;
    int64_t max_out = in.coin() ? 0 : in.dim(0, m + 2);
    Buf<int64_t> keep(static_cast<size_t>(std::max<int64_t>(m, 0)), in.pick(2));
    keep.fill(-5);
    Buf<int64_t> nk(1);
    nk[0] = -9;
    const float* bp = b.data();
    const float* sp = s.data();
    const int64_t* cp = cls.data();
    int64_t* kp = keep.data();
    int64_t* np = nk.data();
    int64_t mm = m;
    const char* what = nullptr;
    if (in.pick(3) == 0) {
        switch (in.pick(m > 0 ? 6 : 3)) {
            case 0: thr = std::numeric_limits<float>::quiet_NaN(); what = "iou_threshold NaN"; break;
            case 1: sthr = std::numeric_limits<float>::quiet_NaN(); what = "score_threshold NaN"; break;
            case 2: mm = hostile_size(in); what = "num_boxes"; break;
            case 3: s[in.pick(static_cast<int>(m))] = std::numeric_limits<float>::quiet_NaN(); what = "NaN score"; break;
            case 4: switch (in.pick(batched ? 5 : 4)) {
                        case 0: bp = nullptr; break; case 1: sp = nullptr; break; case 2: kp = nullptr; break;
                        case 3: np = nullptr; break; default: cp = nullptr;
                    }
                    what = "null"; break;
            default: kp = reinterpret_cast<int64_t*>(b.data()); what = "keep overlaps boxes"; break;
        }
    }
    const auto kb = keep.snapshot(), nb = nk.snapshot(), bb = b.snapshot();
    const xk_status st = fz::timed(fn, [&] {
        return batched ? xk_batched_nms(mm, bp, sp, cp, thr, sthr, max_out, kp, np)
                       : xk_nms(mm, bp, sp, thr, sthr, max_out, kp, np);
    });
    if (what) {
        fz::expect_rejected(st, fn, what);
        fz::expect_unchanged(keep, kb, fn, "keep");
        fz::expect_unchanged(nk, nb, fn, "num_kept");
        fz::expect_unchanged(b, bb, fn, "boxes");
        return;
    }
    fz::expect_ok(st, fn);
    fz::expect_guards(keep, fn, "keep");
    const auto want = nms_oracle(m, b.data(), s.data(), batched ? cls.data() : nullptr, thr, sthr, max_out);
    if (nk[0] != static_cast<int64_t>(want.size()))
        fz::finding("%s: kept %lld boxes, want %zu", fn, static_cast<long long>(nk[0]), want.size());
    for (size_t i = 0; i < want.size(); ++i)
        if (keep[i] != want[i]) fz::finding("%s: keep[%zu] = %lld, want %lld", fn, i, static_cast<long long>(keep[i]), static_cast<long long>(want[i]));
}

// ---- FrozenBatchNorm2d ---------------------------------------------------------------------------

void op_frozen_bn(In& in) {
    xk_frozen_bn_desc d;
    const int64_t n = in.dim(1, 2), c = in.dim(1, 40), h = in.dim(1, 6), w = in.dim(1, 6);
    if (xk_frozen_bn_desc_init(&d, n, c, h, w) != XK_SUCCESS) fz::finding("xk_frozen_bn_desc_init failed");
    d.layout = in.coin() ? XK_CONV_NHWC : XK_CONV_NCHW;
    d.activation = static_cast<xk_activation>(in.pick(5));
    d.eps = in.coin() ? 1e-5f : static_cast<float>(in.pick(100)) / 100.0f;
    const bool bf = in.coin();
    const char* fn = bf ? "xk_frozen_batch_norm_bf16" : "xk_frozen_batch_norm_f32";
    const int64_t ne = n * c * h * w;
    Map src(bf, ne, in.pick(3));
    {
        fz::Values vals(in, static_cast<size_t>(ne));
        for (int64_t i = 0; i < ne; ++i) src.set(i, vals().value(1e6f));
    }
    Buf<float> g(static_cast<size_t>(c)), be(static_cast<size_t>(c)), mu(static_cast<size_t>(c)), var(static_cast<size_t>(c));
    for (int64_t i = 0; i < c; ++i) {
        g[i] = in.value(1e3f); be[i] = in.value(1e6f); mu[i] = in.value(1e6f);
        var[i] = std::fabs(in.value(1e6f));
        if (!(var[i] + d.eps > 0)) var[i] = 1.0f;
    }
    const bool inplace = in.pick(4) == 0;
    Map dst = inplace ? src : Map(bf, ne, in.pick(3));
    const Map orig = src;
    const void* sp = inplace ? dst.buf.data() : src.buf.data();
    void* dp = dst.buf.data();
    const float* gp = g.data();
    xk_frozen_bn_desc e = d;
    const char* what = nullptr;
    if (in.pick(3) == 0) {
        switch (in.pick(7)) {
            case 0: var[in.pick(static_cast<int>(c))] = -d.eps - 1.0f - std::fabs(in.value(10)); what = "var + eps <= 0"; break;
            case 1: e.eps = in.coin() ? -1e-3f : std::numeric_limits<float>::quiet_NaN(); what = "eps"; break;
            case 2: (in.coin() ? e.c : (in.coin() ? e.n : e.h)) = hostile_size(in); what = "size"; break;
            case 3: { const int bad = in.bad_enum(2); std::memcpy(&e.layout, &bad, sizeof bad); what = "layout"; break; }
            case 4: { const int bad = in.bad_enum(5); std::memcpy(&e.activation, &bad, sizeof bad); what = "activation"; break; }
            case 5: if (in.coin()) gp = nullptr; else sp = nullptr; what = "null"; break;
            default:
                if (ne < 2) { gp = nullptr; what = "null"; break; }
                sp = dst.buf.data() + (bf ? 2 : 4); what = "dst partially overlaps src"; break;
        }
    }
    const auto before = dst.buf.snapshot();
    const xk_status st = fz::timed(fn, [&] {
        return bf ? xk_frozen_batch_norm_bf16(&e, static_cast<const uint16_t*>(sp), gp, be.data(), mu.data(), var.data(),
                                              static_cast<uint16_t*>(dp))
                  : xk_frozen_batch_norm_f32(&e, static_cast<const float*>(sp), gp, be.data(), mu.data(), var.data(),
                                             static_cast<float*>(dp));
    });
    if (what) {
        fz::expect_rejected(st, fn, what);
        fz::expect_unchanged(dst.buf, before, fn, "dst");
        return;
    }
    fz::expect_ok(st, fn);
    fz::expect_guards(dst.buf, fn, "dst");
    const int64_t HW = h * w;
    for (int64_t i = 0; i < ne; ++i) {
        const int64_t ch = d.layout == XK_CONV_NHWC ? i % c : (i / HW) % c;
        const double sc = g[ch] / std::sqrt(static_cast<double>(var[ch]) + d.eps);
        const double x = orig.get(i), shift = be[ch] - mu[ch] * sc;
        const double v = x * sc + shift;
        const double want = fz::act_exact(d.activation, v);
        const double scale_err = 4e-7 * (std::fabs(x * sc) + std::fabs(mu[ch] * sc) + std::fabs(be[ch]));
        const double tol = scale_err * (d.activation == XK_ACT_NONE || d.activation == XK_ACT_RELU ? 4 : 16) +
                           1e-6 * std::fabs(want) + (bf ? std::fabs(want) / 128 : 0.0) + 1e-37;
        if (std::isinf(v) || std::fabs(v) > 1e37) continue;  // past the f32 range: not compared
        const double got = dst.get(i);
        if (!(std::fabs(got - want) <= tol))
            fz::finding("%s: dst[%lld] = %.9g, want %.9g (tol %.3g, act %d)", fn, static_cast<long long>(i), got, want, tol,
                        static_cast<int>(d.activation));
    }
}

// ---- int8 convolution ----------------------------------------------------------------------------

void op_qconv(In& in) {
    xk_conv2d_desc d;
    const int64_t n = in.dim(1, 2), c = in.dim(1, 9), h = in.dim(1, 7), w = in.dim(1, 7);
    int64_t oc = in.dim(1, 9);
    const int64_t kh = in.dim(1, 3), kw = in.dim(1, 3);
    // Groups: 1, depthwise (OC = C or 2C), or a common divisor of C and OC.
    int64_t groups = 1;
    switch (in.pick(3)) {
        case 1: groups = c; oc = c * in.dim(1, 2); break;
        case 2:
            for (int64_t g = std::min(c, oc); g > 1; --g)
                if (c % g == 0 && oc % g == 0 && in.coin()) { groups = g; break; }
            break;
        default: break;
    }
    const int64_t cg = c / groups, ocg = oc / groups;
    if (xk_conv2d_desc_init(&d, n, c, h, w, oc, kh, kw) != XK_SUCCESS) fz::finding("xk_conv2d_desc_init failed");
    d.groups = groups;
    d.layout = XK_CONV_NHWC;
    d.weight_layout = XK_CONV_OHWI;
    d.stride_h = in.dim(1, 3); d.stride_w = in.dim(1, 3);
    d.dilation_h = in.dim(1, 2); d.dilation_w = in.dim(1, 2);
    d.pad_top = in.pick(3); d.pad_bottom = in.pick(3); d.pad_left = in.pick(3); d.pad_right = in.pick(3);
    d.activation = static_cast<xk_activation>(in.pick(5));
    // Keep the output non-empty: shrink the kernel until it fits.
    auto fits = [&](int64_t in_, int64_t k, int64_t dil, int64_t p0, int64_t p1) { return dil * (k - 1) + 1 <= in_ + p0 + p1; };
    while (d.kh > 1 && !fits(h, d.kh, d.dilation_h, d.pad_top, d.pad_bottom)) --d.kh;
    while (d.kw > 1 && !fits(w, d.kw, d.dilation_w, d.pad_left, d.pad_right)) --d.kw;
    const int64_t oh = (h + d.pad_top + d.pad_bottom - d.dilation_h * (d.kh - 1) - 1) / d.stride_h + 1;
    const int64_t ow = (w + d.pad_left + d.pad_right - d.dilation_w * (d.kw - 1) - 1) / d.stride_w + 1;
    const bool su8 = in.coin();
    const int dk = in.pick(3);  // 0 u8, 1 s8, 2 f32
    const xk_dtype st = su8 ? XK_DTYPE_U8 : XK_DTYPE_S8;
    const xk_dtype dt = dk == 0 ? XK_DTYPE_U8 : (dk == 1 ? XK_DTYPE_S8 : XK_DTYPE_F32);
    const int64_t ns = n * h * w * c, nw = oc * d.kh * d.kw * cg, nd = n * oh * ow * oc;
    Buf<uint8_t> src(static_cast<size_t>(ns), in.pick(3));
    Buf<int8_t> wt(static_cast<size_t>(nw), in.pick(3));
    {
        fz::Values vals(in, static_cast<size_t>(ns + nw));
        for (int64_t i = 0; i < ns; ++i) src[i] = static_cast<uint8_t>(vals().p.ConsumeIntegral<uint8_t>());
        for (int64_t i = 0; i < nw; ++i) wt[i] = static_cast<int8_t>(vals().p.ConsumeIntegral<uint8_t>());
    }
    Buf<float> ws(static_cast<size_t>(oc)), bias(static_cast<size_t>(oc));
    for (int64_t o = 0; o < oc; ++o) {
        ws[o] = static_cast<float>(1 + in.pick(1000)) / 1000.0f;
        bias[o] = in.value(1e6f);
    }
    const bool with_bias = in.coin();
    static const float scales[] = {0.01f, 0.5f, 1.0f, 3.0f};
    float ss = scales[in.pick(4)], ds = scales[in.pick(4)];
    int32_t szp = su8 ? in.pick(256) : in.pick(256) - 128;
    int32_t dzp = dk == 0 ? in.pick(256) : in.pick(256) - 128;
    const size_t des = dk == 2 ? 4 : 1;
    Buf<uint8_t> dst(static_cast<size_t>(nd) * des, dk == 2 ? 4 * in.pick(2) : in.pick(3));
    xk_conv2d_desc e = d;
    xk_dtype est = st, edt = dt;
    const void* sp = src.data();
    const int8_t* wp = wt.data();
    void* dp = dst.data();
    const float* wsp = ws.data();
    const char* what = nullptr;
    if (in.pick(3) == 0) {
        switch (in.pick(9)) {
            case 0: szp = su8 ? (in.coin() ? -1 : 256) : (in.coin() ? -129 : 128); what = "src_zero_point"; break;
            case 1: ss = in.coin() ? 0.0f : (in.coin() ? -1.0f : std::numeric_limits<float>::quiet_NaN()); what = "src_scale"; break;
            case 2: ws[in.pick(static_cast<int>(oc))] = in.coin() ? 0.0f : std::numeric_limits<float>::infinity(); what = "weight_scales"; break;
            case 3: if (dk == 2) { wsp = nullptr; what = "null weight_scales"; }
                    else { ds = in.coin() ? -2.0f : std::numeric_limits<float>::quiet_NaN(); what = "dst_scale"; }
                    break;
            case 4: e.layout = XK_CONV_NCHW; what = "layout"; break;
            case 5: e.groups = in.coin() ? 0 : c + 1; what = "groups"; break;  // does not divide C
            case 6: { const int bad = in.coin() ? 0 /* f32 */ : in.bad_enum(6); std::memcpy(&est, &bad, sizeof bad); what = "src_type"; break; }
            case 7: e.kh = h + e.pad_top + e.pad_bottom + 1 + in.pick(3); e.dilation_h = 1; what = "kernel past the input"; break;
            default: switch (in.pick(3)) { case 0: sp = nullptr; break; case 1: wp = nullptr; break; default: dp = nullptr; }
                     what = "null"; break;
        }
    }
    const auto before = dst.snapshot();
    const xk_status stt = fz::timed("xk_qconv2d", [&] {
        return xk_qconv2d(&e, est, edt, sp, ss, szp, wp, wsp, with_bias ? bias.data() : nullptr, dp, ds, dzp);
    });
    if (what) {
        fz::expect_rejected(stt, "xk_qconv2d", what);
        fz::expect_unchanged(dst, before, "xk_qconv2d", "dst");
        return;
    }
    fz::expect_ok(stt, "xk_qconv2d");
    fz::expect_guards(dst, "xk_qconv2d", "dst");
    for (int64_t b = 0; b < n; ++b)
        for (int64_t oy = 0; oy < oh; ++oy)
            for (int64_t ox = 0; ox < ow; ++ox)
                for (int64_t o = 0; o < oc; ++o) {
                    int64_t acc = 0;
                    for (int64_t ky = 0; ky < d.kh; ++ky)
                        for (int64_t kx = 0; kx < d.kw; ++kx) {
                            const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                            const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                            if (y < 0 || y >= h || x < 0 || x >= w) continue;
                            for (int64_t ic = 0; ic < cg; ++ic) {  // o's group
                                const uint8_t raw = src[((b * h + y) * w + x) * c + (o / ocg) * cg + ic];
                                const int64_t sv = su8 ? raw : static_cast<int8_t>(raw);
                                acc += (sv - szp) * wt[((o * d.kh + ky) * d.kw + kx) * cg + ic];
                            }
                        }
                    const double pre = static_cast<double>(ss) * ws[o] * static_cast<double>(acc);
                    const double v = pre + (with_bias ? bias[o] : 0.0);
                    const double want = fz::act_exact(d.activation, v);
                    const double mag = std::fabs(pre) + (with_bias ? std::fabs(bias[o]) : 0.0);
                    const int64_t i = ((b * oh + oy) * ow + ox) * oc + o;
                    if (dk == 2) {
                        float g;
                        std::memcpy(&g, dst.data() + i * 4, 4);
                        const double tol = 1e-5 * mag + 1e-6 * std::fabs(want) + 1e-30;
                        if (!(std::fabs(g - want) <= tol))
                            fz::finding("xk_qconv2d: dst[%lld] = %.9g, want %.9g (tol %.3g)", static_cast<long long>(i), g, want, tol);
                    } else {
                        const double lo = dk == 0 ? 0 : -128, hi = dk == 0 ? 255 : 127;
                        const double x = want / ds;
                        const double tolq = 1.0 + (1e-5 * mag + 1e-6 * std::fabs(want)) / ds;
                        const double q = std::min(hi, std::max(lo, std::nearbyint(x) + dzp));
                        const double g = dk == 0 ? static_cast<double>(dst[i]) : static_cast<double>(static_cast<int8_t>(dst[i]));
                        if (!(std::fabs(g - q) <= tolq))
                            fz::finding("xk_qconv2d: dst[%lld] = %g, want %g (x %.9g)", static_cast<long long>(i), g, q, x);
                    }
                }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        switch (in.pick(9)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: {
                const int t = 1 + in.pick(2);
                fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(t); }), "xk_set_num_threads");
                break;
            }
            case 2: case 3: op_roi_align(in); break;
            case 4: case 5: op_nms(in); break;
            case 6: case 7: op_frozen_bn(in); break;
            default: op_qconv(in); break;
        }
    }
    return 0;
}
