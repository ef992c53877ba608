// Vision ops (ROIAlign, NMS, FrozenBatchNorm2d): xk's selection beside `tvref`, the scalar
// transcription of torchvision's CPU kernels in xk (the registry's ref:scalar entries: the same
// loops torchvision runs, compiled here) — the stand-in peer on machines without torchvision. The
// real torchvision rows come from bench/py/bench_vision.py (same shapes, one process).
// Shapes: Mask R-CNN box head (1000 boxes, 256 channels, 7 x 7, FPN level 200 x 272 of an
// 800 x 1088 image, sampling_ratio 2), mask head (100 boxes, 14 x 14); NMS 5000 boxes (IoU 0.5,
// plain and batched over 80 classes); FrozenBatchNorm2d + ReLU on 1 x 256 x 200 x 272.
// Counter GBPS: bytes of the map / boxes read once + dst written, per second.
#include <random>

#include "bench_util.hpp"
#include "kernels/vision/vision.hpp"
#include "xk/vision.hpp"

namespace {

enum class Provider { xk, tvref };

std::vector<float> boxes_for(int64_t k, float img_h, float img_w, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> b(static_cast<size_t>(k * 5));
    for (int64_t i = 0; i < k; ++i) {
        const float x = u(g) * img_w, y = u(g) * img_h;
        const float w = (u(g) * 0.3f + 0.02f) * img_w, h = (u(g) * 0.3f + 0.02f) * img_h;
        b[i * 5] = 0; b[i * 5 + 1] = x; b[i * 5 + 2] = y;
        b[i * 5 + 3] = std::min(x + w, img_w - 1); b[i * 5 + 4] = std::min(y + h, img_h - 1);
    }
    return b;
}

void BM_roi_align(benchmark::State& state, Provider pv, xk::RoiAlignDesc d, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const int64_t es = xk::dtype_size(d.dtype);
    std::vector<char> src(static_cast<size_t>(d.n * d.c * d.h * d.w * es)), dst(static_cast<size_t>(d.num_rois * d.c * d.pooled_h * d.pooled_w * es));
    std::mt19937 g(1);
    for (size_t i = 0; i + 1 < src.size(); i += 2) src[i + 1] = static_cast<char>(0x3f - (g() & 1));  // ~[0.5, 2)
    const std::vector<float> boxes = boxes_for(d.num_rois, static_cast<float>(d.h) / d.spatial_scale,
                                               static_cast<float>(d.w) / d.spatial_scale, 2);
    xk::RoiAlignPlan plan(d);
    const xk::RoiAlignArgs a{src.data(), boxes.data(), dst.data()};
    const xk::detail::RoiAlignProblem p{d};
    for (auto _ : state) {
        if (pv == Provider::xk) plan.run(a);
        else xk::detail::roi_align_reference(p, a);
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, static_cast<double>(src.size() + dst.size() + boxes.size() * 4));
    state.SetLabel(pv == Provider::xk ? plan.impl_name() : "ref:scalar");
}

void BM_nms(benchmark::State& state, Provider pv, int64_t m, int64_t ncls, int nt) {
    xk::bench::ScopedThreads threads(nt);
    std::mt19937_64 g(3);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> b(static_cast<size_t>(m * 4)), s(static_cast<size_t>(m));
    std::vector<int64_t> cls(static_cast<size_t>(m)), keep(static_cast<size_t>(m));
    for (int64_t i = 0; i < m; ++i) {
        const float x = u(g) * 800, y = u(g) * 800;
        b[i * 4] = x; b[i * 4 + 1] = y; b[i * 4 + 2] = x + 10 + 150 * u(g); b[i * 4 + 3] = y + 10 + 150 * u(g);
        s[i] = u(g);
        cls[i] = ncls ? static_cast<int64_t>(g() % static_cast<uint64_t>(ncls)) : 0;
    }
    xk::NmsDesc d;
    d.num_boxes = m;
    d.iou_threshold = 0.5f;
    d.batched = ncls > 0;
    const xk::NmsArgs a{b.data(), s.data(), ncls ? cls.data() : nullptr, keep.data()};
    int64_t kept = 0;
    for (auto _ : state) {
        kept = pv == Provider::xk ? xk::nms(d, a) : xk::detail::nms_reference(xk::detail::NmsProblem{d}, a);
        benchmark::DoNotOptimize(kept);
    }
    xk::bench::set_gbps(state, static_cast<double>(m * 20));
    state.SetLabel((pv == Provider::xk ? std::string(xk::nms_impl_name(d)) : std::string("ref:scalar")) + ", kept " +
                   std::to_string(kept));
}

void BM_frozen_bn(benchmark::State& state, Provider pv, xk::FrozenBatchNormDesc d, int nt) {
    xk::bench::ScopedThreads threads(nt);
    const size_t n = static_cast<size_t>(d.n * d.c * d.h * d.w);
    std::vector<float> src(n, 0.5f), dst(n), g(static_cast<size_t>(d.c), 1.1f), be(static_cast<size_t>(d.c), 0.1f),
        mu(static_cast<size_t>(d.c), 0.2f), var(static_cast<size_t>(d.c), 0.9f);
    const xk::FrozenBatchNormArgs a{src.data(), g.data(), be.data(), mu.data(), var.data(), dst.data()};
    for (auto _ : state) {
        if (pv == Provider::xk) xk::frozen_batch_norm(d, a);
        else xk::detail::frozen_bn_reference(xk::detail::FrozenBnProblem{d}, a);
        benchmark::ClobberMemory();
    }
    xk::bench::set_gbps(state, 8.0 * static_cast<double>(n));
    state.SetLabel(pv == Provider::xk ? xk::frozen_batch_norm_impl_name(d) : "ref:scalar");
}

const bool registered = [] {
    const std::pair<Provider, const char*> providers[] = {{Provider::xk, "xk"}, {Provider::tvref, "tvref"}};
    for (int nt : xk::bench::thread_counts()) {
        const std::string t = "nt:" + std::to_string(nt);
        struct R { const char* tag; int64_t k, p, sr; };
        for (R r : {R{"box7_sr2", 1000, 7, 2}, R{"mask14_sr2", 100, 14, 2}, R{"box7_adaptive", 1000, 7, 0}})
            for (xk::ConvLayout lay : {xk::ConvLayout::nchw, xk::ConvLayout::nhwc})
                for (xk::DType dt : {xk::DType::f32, xk::DType::bf16}) {
                    if (lay == xk::ConvLayout::nchw && dt == xk::DType::bf16) continue;
                    xk::RoiAlignDesc d;
                    d.c = 256; d.h = 200; d.w = 272; d.num_rois = r.k; d.pooled_h = d.pooled_w = r.p;
                    d.sampling_ratio = r.sr; d.spatial_scale = 0.25f; d.layout = lay; d.dtype = dt;
                    for (const auto& pv : providers) {
                        if (pv.first == Provider::tvref && r.sr == 0) continue;  // ~30 s a call
                        const std::string name = xk::bench::join_name(
                            {"roi_align", xk::dtype_name(dt), pv.second,
                             std::string(r.tag) + "_" + xk::conv_layout_name(lay) + "_c256_200x272_k" + std::to_string(r.k), t});
                        benchmark::RegisterBenchmark(name.c_str(), BM_roi_align, pv.first, d, nt)->UseRealTime();
                    }
                }
        for (int64_t ncls : {int64_t{0}, int64_t{80}})
            for (const auto& pv : providers) {
                const std::string name = xk::bench::join_name(
                    {"nms", "f32", pv.second, std::string("m5000_iou0.5") + (ncls ? "_80cls" : ""), t});
                benchmark::RegisterBenchmark(name.c_str(), BM_nms, pv.first, int64_t{5000}, ncls, nt)->UseRealTime();
            }
        for (xk::ConvLayout lay : {xk::ConvLayout::nchw, xk::ConvLayout::nhwc})
            for (const auto& pv : providers) {
                xk::FrozenBatchNormDesc d;
                d.c = 256; d.h = 200; d.w = 272; d.layout = lay; d.activation = xk::Activation::relu;
                const std::string name = xk::bench::join_name(
                    {"frozen_bn", "f32", pv.second, std::string("relu_") + xk::conv_layout_name(lay) + "_1x256x200x272", t});
                benchmark::RegisterBenchmark(name.c_str(), BM_frozen_bn, pv.first, d, nt)->UseRealTime();
            }
    }
    return true;
}();

}  // namespace
