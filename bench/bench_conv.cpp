// conv2d on ResNet-50 layers, channels-last (NHWC activations, OHWI weights), bias + ReLU fused,
// weights prepacked once (ConvPlan::pack_weights / oneDNN's reorder into its preferred layout).
//
//   conv/<f32|bf16>/xk/<layer>/n:<N>/nt:<T>        xk::ConvPlan, the implementation selection picks;
//                                                  counter vsOneDNN% = 100 * its rate / the oneDNN
//                                                  row's primitive's, run interleaved in the same
//                                                  loop (timer paused around it, own dst): the ratio
//                                                  a shared, noisy host still gives
//   conv/<f32|bf16>/onednn/<layer>/n:<N>/nt:<T>    oneDNN 2.6's convolution primitive used directly
//                                                  (weights "any" reordered once, NHWC src / dst,
//                                                  bias, eltwise_relu post-op), same process
//   convgemm/<f32|bf16>/xk/<layer>/n:<N>/nt:<T>    xk's own path forced ("gemm:conv": 1x1 as one
//                                                  GEMM, 3x3 im2col row blocks over xk's GEMM)
//   convcall/<f32|bf16>/<xk|onednn>/r50_7x7x64_k1_oc64/n:1/nt:<T>
//   convcallgemm/<f32|bf16>/xk/...              per-call cost on a 0.4 MFLOP 1x1 layer: the plan
//                                                forced to oneDNN (XK_CONV_IMPL=onednn while it is
//                                                made) beside oneDNN's primitive used directly, and
//                                                gemm:conv forced
//   convstack/<f32|bf16>/<xk|onednn>/r50_5layers/n:<N>/nt:<T>
//                                                  the five layers below one after another (each its
//                                                  own buffers), GFLOPS = their sum: the whole-stack
//                                                  row beside torch_peer.py's (conv + bn + relu per
//                                                  layer; BN folded into our weights and bias); the
//                                                  xk row has the interleaved vsOneDNN% too
// layers: r50_<H>x<W>x<C>_k<K>_oc<OC> (stride 1, padding (K-1)/2). GFLOPS = 2*N*OH*OW*OC*C*K*K
// (/ groups); the int8 rows also run depthwise 3x3 layers dw_<H>x<W>x<C>_k3_oc<C> (groups = C).
// The 1x1 expand layer (56x56x64 -> 256) ends a ResNet bottleneck: it adds the shortcut before the
// ReLU (ours: residual add_before_activation in place in dst; oneDNN: sum post-op before ReLU).
// The label names the implementation that ran (oneDNN's impl_info_str for both oneDNN rows).
// Batches 1 and 8 (XK_BENCH_CONV_BATCHES="1,8,32" to change; torch_peer.py reads it too).
//   qconv/u8s8u8/xk/<layer>/n:<N>/nt:<T>        xk::QConvPlan, weights packed once: u8 src (zero point 0, as after a
//                                                ReLU), s8 weights with per-channel scales, bias,
//                                                ReLU, requantized u8 dst; the plan's route
//                                                (label: onednn:qconv + oneDNN's kernel, or
//                                                gemm:qconv). Counter vsOneDNN% = 100 * its rate /
//                                                oneDNN's own primitive's (below) run interleaved
//                                                in the same loop (timer paused around the peer)
//   qconvgemm/u8s8u8/xk/<layer>/n:<N>/nt:<T>    xk's own int8 path forced ("gemm:qconv"), same
//                                                interleaved vsOneDNN% counter
//   qconvcall/u8s8u8/<xk|onednn>/r50_7x7x64_k1_oc64/n:1/nt:<T>
//                                                per call: the plan forced to oneDNN
//                                                (XK_QCONV_IMPL=onednn) beside the primitive alone
//   qconv/u8s8u8/onednn/<layer>/n:<N>/nt:<T>    oneDNN 2.6's int8 convolution primitive alone, same
//                                                types, static per-channel output scales, bias, ReLU
//                                                post-op, weights reordered once
#include <dnnl.hpp>
#include <algorithm>
#include <cstdlib>
#include <new>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_util.hpp"
#include "kernels/conv/conv.hpp"
#include "xk/conv.hpp"

namespace {

namespace xb = xk::bench;
using xk::DType;

struct Layer {
    int64_t h, w, c, oc, k;
    bool residual = false;  // + shortcut before the ReLU (the bottleneck's last conv)
    int64_t groups = 1;     // depthwise rows (int8): groups == C == OC
    std::string name() const {
        return (groups > 1 ? "dw_" : "r50_") + std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c) + "_k" + std::to_string(k) +
               "_oc" + std::to_string(oc);
    }
};

// Per-call cost: a 1x1 layer small enough (0.4 MFLOP) that the call's fixed work shows (convcall rows).
const Layer kCallLayers[] = {{7, 7, 64, 64, 1}};

const Layer kLayers[] = {
    {56, 56, 64, 64, 3},    // conv2_x 3x3
    {56, 56, 64, 256, 1, true},  // conv2_x 1x1 expand (+ shortcut)
    {28, 28, 128, 128, 3},  // conv3_x 3x3
    {14, 14, 256, 256, 3},  // conv4_x 3x3
    {7, 7, 512, 512, 3},    // conv5_x 3x3
};

// Depthwise 3x3 layers (MobileNetV2's expanded blocks), int8 rows only.
const Layer kDwLayers[] = {
    {56, 56, 144, 144, 3, false, 144},
    {28, 28, 192, 192, 3, false, 192},
    {14, 14, 576, 576, 3, false, 576},
};

xk::ConvDesc desc_of(const Layer& l, int64_t n, DType t) {
    xk::ConvDesc d;
    d.n = n, d.c = l.c, d.h = l.h, d.w = l.w, d.oc = l.oc, d.kh = d.kw = l.k;
    d.groups = l.groups;
    d.set_padding((l.k - 1) / 2, (l.k - 1) / 2);
    d.layout = xk::ConvLayout::nhwc;
    d.weight_layout = xk::ConvWeightLayout::ohwi;
    d.src_dtype = d.weight_dtype = d.dst_dtype = t;
    d.with_bias = true;
    d.activation = xk::Activation::relu;
    if (l.residual) d.residual = xk::ConvResidual::add_before_activation;
    return d;
}

double flops(const xk::ConvDesc& d) { return 2.0 * d.n * d.oh() * d.ow() * d.oc * d.c * d.kh * d.kw / d.groups; }

// Operand storage 64-byte aligned on both sides (std::vector's 16-byte alignment gave ours and
// the interleaved peer different cache-line phases of the same tensors: split-line loads on one
// side only).
template <class T>
struct Align64 {
    using value_type = T;
    Align64() = default;
    template <class U>
    Align64(const Align64<U>&) {}
    T* allocate(size_t n) {
        void* p = std::aligned_alloc(64, std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64));
        if (!p) throw std::bad_alloc();
        return static_cast<T*>(p);
    }
    void deallocate(T* p, size_t) { std::free(p); }
    template <class U>
    bool operator==(const Align64<U>&) const { return true; }
    template <class U>
    bool operator!=(const Align64<U>&) const { return false; }
};
template <class T>
using AVec = std::vector<T, Align64<T>>;

struct Data {
    AVec<unsigned char> src, wei, dst;
    AVec<float> bias;
};

Data make_data(const xk::ConvDesc& d) {
    const size_t es = xk::dtype_size(d.src_dtype);
    Data x;
    x.src.resize(static_cast<size_t>(d.src_elements()) * es);
    x.wei.resize(static_cast<size_t>(d.weight_elements()) * es);
    x.dst.resize(static_cast<size_t>(d.dst_elements()) * es);
    x.bias.resize(static_cast<size_t>(d.oc));
    auto fill = [&](AVec<unsigned char>& v, uint64_t seed) {
        const size_t n = v.size() / es;
        for (size_t i = 0; i < n; ++i) {
            const float f = static_cast<float>(xb::detail::unit(seed, i) * 2 - 1);
            if (es == 2) reinterpret_cast<uint16_t*>(v.data())[i] = xk::bf16::from_float(f);
            else reinterpret_cast<float*>(v.data())[i] = f;
        }
    };
    fill(x.src, 1);
    fill(x.wei, 2);
    for (size_t i = 0; i < x.bias.size(); ++i) x.bias[i] = static_cast<float>(xb::detail::unit(3, i) - 0.5);
    return x;
}

// oneDNN 2.6's convolution primitive for a layer, used directly: NHWC src / dst, weights "any"
// reordered once, f32 bias, [sum,] eltwise_relu post-ops.
struct DnnConv {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream st{eng};
    dnnl::convolution_forward prim;
    std::unordered_map<int, dnnl::memory> args;
    std::string impl;

    DnnConv(const Layer& l, const xk::ConvDesc& d, Data& x) {
        using tag = dnnl::memory::format_tag;
        const auto dtt = d.src_dtype == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
        const dnnl::memory::desc src({d.n, l.c, l.h, l.w}, dtt, tag::nhwc), dst({d.n, l.oc, d.oh(), d.ow()}, dtt, tag::nhwc),
            wany({l.oc, l.c, l.k, l.k}, dtt, tag::any), wuser({l.oc, l.c, l.k, l.k}, dtt, tag::ohwi),
            bias({l.oc}, dnnl::memory::data_type::f32, tag::a);
        dnnl::post_ops po;
        if (l.residual) po.append_sum(1.0f);
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        dnnl::primitive_attr attr;
        attr.set_post_ops(po);
        const int64_t p = (l.k - 1) / 2;
        const dnnl::convolution_forward::primitive_desc pd(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                            wany, bias, dst, {1, 1}, {0, 0}, {p, p}, {p, p}),
            attr, eng);
        dnnl::memory wu(wuser, eng, x.wei.data()), wp(pd.weights_desc(), eng);
        dnnl::reorder(wu, wp).execute(st, wu, wp);
        st.wait();
        prim = dnnl::convolution_forward(pd);
        args = {{DNNL_ARG_SRC, dnnl::memory(src, eng, x.src.data())},
                {DNNL_ARG_WEIGHTS, wp},
                {DNNL_ARG_BIAS, dnnl::memory(bias, eng, x.bias.data())},
                {DNNL_ARG_DST, dnnl::memory(dst, eng, x.dst.data())}};
        impl = pd.impl_info_str();
    }
    void run() {
        prim.execute(st, args);
        st.wait();
    }
};

// Ours: the plan (routed, or its route forced to oneDNN through XK_CONV_IMPL while it is made) or
// gemm:conv forced, with weights packed once; a residual in place in dst.
enum class Route { routed, gemm, onednn };
void BM_xk(benchmark::State& state, Layer l, int64_t n, DType t, int nt, Route route) {
    xb::ScopedThreads threads(nt);
    const xk::ConvDesc d = desc_of(l, n, t);
    Data x = make_data(d);
    const xk::ConvArgs a{x.src.data(), nullptr, x.bias.data(), x.dst.data(), l.residual ? x.dst.data() : nullptr};
    const bool force_gemm = route == Route::gemm;
    if (force_gemm) {
        const auto& reg = xk::detail::conv_registry();
        const auto p = xk::detail::conv_validate_desc("bench", d);
        const auto k = reg.get(p, reg.find("gemm:conv")).kernel;
        const auto pw = k->pack(x.wei.data());
        for (auto _ : state) k->run(a, pw.get());
        state.SetLabel("gemm:conv " + k->backend_info());
    } else {
        const char* prev = std::getenv("XK_CONV_IMPL");
        const std::string saved = prev ? prev : "";
        if (route == Route::onednn) setenv("XK_CONV_IMPL", "onednn", 1);
        const xk::ConvPlan plan(d);
        if (route == Route::onednn) prev ? setenv("XK_CONV_IMPL", saved.c_str(), 1) : unsetenv("XK_CONV_IMPL");
        const xk::ConvPackedWeights pw = plan.pack_weights(x.wei.data());
        // oneDNN's primitive used directly (own dst), interleaved: counter vsOneDNN%.
        Data y = x;
        std::unique_ptr<DnnConv> peer;
        try {
            peer = std::make_unique<DnnConv>(l, d, y);
        } catch (const dnnl::error&) {
        }
        xb::InPhase ph(state);
        if (peer)
            ph.add("vsOneDNN%", "OneDNN_GFLOPS", flops(d), [&] {
                peer->run();
                return flops(d);
            });
        plan.run(a, pw);
        for (auto _ : state) {
            ph.begin();
            plan.run(a, pw);
            ph.end();
        }
        ph.finish();
        state.SetLabel(std::string(plan.impl_name()) + " " + plan.backend_info());
    }
    xb::set_gflops(state, flops(d));
}

void BM_onednn(benchmark::State& state, Layer l, int64_t n, DType t, int nt) {
    xb::ScopedThreads threads(nt);
    const xk::ConvDesc d = desc_of(l, n, t);
    Data x = make_data(d);
    try {
        DnnConv c(l, d, x);
        for (auto _ : state) c.run();
        state.SetLabel(c.impl);
    } catch (const dnnl::error& e) {
        state.SkipWithError(e.what());
        return;
    }
    xb::set_gflops(state, flops(d));
}

xk::QConvDesc qdesc_of(const Layer& l, int64_t n) {
    xk::QConvDesc q;
    q.n = n, q.c = l.c, q.h = l.h, q.w = l.w, q.oc = l.oc, q.kh = q.kw = l.k;
    q.groups = l.groups;
    q.pad_top = q.pad_bottom = q.pad_left = q.pad_right = (l.k - 1) / 2;
    q.src_dtype = DType::u8;
    q.dst_dtype = DType::u8;
    q.with_bias = true;
    q.activation = xk::Activation::relu;
    return q;
}

struct QData {
    AVec<uint8_t> src, dst, dst2;  // dst2: the interleaved oneDNN peer's
    AVec<int8_t> wei;
    AVec<float> bias, ws;
};

QData make_qdata(const xk::QConvDesc& q, int64_t oh, int64_t ow) {
    QData x;
    x.src.resize(static_cast<size_t>(q.n * q.h * q.w * q.c));
    x.wei.resize(static_cast<size_t>(q.oc * q.kh * q.kw * (q.c / q.groups)));
    x.dst.resize(static_cast<size_t>(q.n * oh * ow * q.oc));
    x.dst2.resize(x.dst.size());
    x.bias.resize(static_cast<size_t>(q.oc));
    x.ws.resize(static_cast<size_t>(q.oc));
    for (size_t i = 0; i < x.src.size(); ++i) x.src[i] = static_cast<uint8_t>(xb::detail::unit(1, i) * 255);
    for (size_t i = 0; i < x.wei.size(); ++i) x.wei[i] = static_cast<int8_t>(xb::detail::unit(2, i) * 255 - 127);
    for (size_t i = 0; i < x.bias.size(); ++i) {
        x.bias[i] = static_cast<float>(xb::detail::unit(3, i) - 0.5);
        x.ws[i] = 1e-3f * static_cast<float>(1 + xb::detail::unit(4, i) * 10);
    }
    return x;
}

// oneDNN 2.6's own int8 convolution for the layer, used directly: u8 src / dst NHWC, s8 weights
// "any" reordered once, f32 bias, static per-channel output scales, ReLU post-op.
struct QOnednn {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream st{eng};
    dnnl::convolution_forward prim;
    std::unordered_map<int, dnnl::memory> args;
    std::string impl;

    QOnednn(const Layer& l, int64_t n, QData& x, int64_t oh, int64_t ow) {
        using tag = dnnl::memory::format_tag;
        using dtp = dnnl::memory::data_type;
        const int64_t G = l.groups, og = l.oc / G, cg = l.c / G;
        const dnnl::memory::dims wd = G == 1 ? dnnl::memory::dims{l.oc, l.c, l.k, l.k} : dnnl::memory::dims{G, og, cg, l.k, l.k};
        const dnnl::memory::desc src({n, l.c, l.h, l.w}, dtp::u8, tag::nhwc), dst({n, l.oc, oh, ow}, dtp::u8, tag::nhwc),
            wany(wd, dtp::s8, tag::any),
            wuser = G == 1 ? dnnl::memory::desc(wd, dtp::s8, tag::ohwi)
                           : dnnl::memory::desc(wd, dtp::s8, {og * l.k * l.k * cg, l.k * l.k * cg, 1, l.k * cg, cg}),
            bias({l.oc}, dtp::f32, tag::a);
        std::vector<float> scales(static_cast<size_t>(l.oc));
        for (size_t o = 0; o < scales.size(); ++o) scales[o] = 0.05f * x.ws[o] / 0.1f;
        dnnl::primitive_attr attr;
        attr.set_output_scales(2, scales);
        dnnl::post_ops po;
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(po);
        const int64_t p = (l.k - 1) / 2;
        const dnnl::convolution_forward::primitive_desc pd(
            dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src,
                                            wany, bias, dst, {1, 1}, {p, p}, {p, p}),
            attr, eng);
        dnnl::memory wu(wuser, eng, x.wei.data()), wp(pd.weights_desc(), eng);
        dnnl::reorder(wu, wp).execute(st, wu, wp);
        st.wait();
        prim = dnnl::convolution_forward(pd);
        args = {{DNNL_ARG_SRC, dnnl::memory(src, eng, x.src.data())},
                {DNNL_ARG_WEIGHTS, wp},
                {DNNL_ARG_BIAS, dnnl::memory(bias, eng, x.bias.data())},
                {DNNL_ARG_DST, dnnl::memory(dst, eng, x.dst2.data())}};
        impl = pd.impl_info_str();
    }
    void run() {
        prim.execute(st, args);
        st.wait();
    }
};

// Ours (the routed plan, or gemm:qconv forced) with oneDNN's own primitive interleaved in the same
// loop (xb::InPhase, timer paused around it): counter vsOneDNN% = 100 * our rate / oneDNN's.
void BM_qxk(benchmark::State& state, Layer l, int64_t n, int nt, bool force_gemm, bool force_onednn = false) {
    xb::ScopedThreads threads(nt);
    const xk::QConvDesc q = qdesc_of(l, n);
    const xk::ConvDesc d = desc_of(l, n, DType::f32);
    QData x = make_qdata(q, d.oh(), d.ow());
    xk::QConvArgs a;
    a.src = x.src.data(); a.weights = x.wei.data(); a.bias = x.bias.data(); a.dst = x.dst.data();
    a.weight_scales = x.ws.data(); a.src_scale = 0.05f; a.dst_scale = 0.1f;
    try {
        QOnednn peer(l, n, x, d.oh(), d.ow());
        xb::InPhase ph(state);
        ph.add("vsOneDNN%", "OneDNN_GFLOPS", flops(d), [&] {
            peer.run();
            return flops(d);
        });
        std::string label;
        if (force_gemm) {
            const auto& reg = xk::detail::qconv_registry();
            const auto p = xk::detail::qconv_validate_desc("bench", q);
            const auto k = reg.get(p, reg.find("gemm:qconv")).kernel;
            const auto pw = k->pack(x.wei.data());
            k->run(a, pw.get());
            for (auto _ : state) {
                ph.begin();
                k->run(a, pw.get());
                ph.end();
            }
            label = "gemm:qconv";
        } else {
            const char* prev = std::getenv("XK_QCONV_IMPL");
            const std::string saved = prev ? prev : "";
            if (force_onednn) setenv("XK_QCONV_IMPL", "onednn", 1);
            const xk::QConvPlan plan(q);
            if (force_onednn) prev ? setenv("XK_QCONV_IMPL", saved.c_str(), 1) : unsetenv("XK_QCONV_IMPL");
            const xk::QConvPackedWeights pw = plan.pack_weights(x.wei.data());  // once, like oneDNN's reorder
            plan.run(a, pw);  // oneDNN's route makes its primitive for these scales on the first call
            for (auto _ : state) {
                ph.begin();
                plan.run(a, pw);
                ph.end();
            }
            label = std::string(plan.impl_name()) + (plan.backend_info().empty() ? "" : " " + plan.backend_info());
        }
        ph.finish();
        state.SetLabel(label + " | peer " + peer.impl);
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
        return;
    }
    xb::set_gflops(state, flops(d));
}

void BM_qonednn(benchmark::State& state, Layer l, int64_t n, int nt) {
    xb::ScopedThreads threads(nt);
    const xk::QConvDesc q = qdesc_of(l, n);
    const xk::ConvDesc d = desc_of(l, n, DType::f32);
    QData x = make_qdata(q, d.oh(), d.ow());
    try {
        QOnednn peer(l, n, x, d.oh(), d.ow());
        for (auto _ : state) peer.run();
        state.SetLabel(peer.impl);
    } catch (const dnnl::error& e) {
        state.SkipWithError(e.what());
        return;
    }
    xb::set_gflops(state, flops(d));
}

// The whole stack: every layer once per iteration, in order (ours: plans with packed weights;
// oneDNN: its primitives).
void BM_stack(benchmark::State& state, int64_t n, DType t, int nt, bool onednn) {
    xb::ScopedThreads threads(nt);
    std::vector<xk::ConvDesc> ds;
    std::vector<Data> xs;
    double total = 0;
    for (const Layer& l : kLayers) {
        ds.push_back(desc_of(l, n, t));
        xs.push_back(make_data(ds.back()));
        total += flops(ds.back());
    }
    std::string label;
    try {
        if (onednn) {
            std::vector<std::unique_ptr<DnnConv>> cs;
            for (size_t i = 0; i < ds.size(); ++i) {
                cs.push_back(std::make_unique<DnnConv>(kLayers[i], ds[i], xs[i]));
                label += (i ? "," : "") + cs.back()->impl;
            }
            for (auto _ : state)
                for (auto& c : cs) c->run();
        } else {
            std::vector<xk::ConvPlan> plans;
            std::vector<xk::ConvPackedWeights> pws;
            std::vector<xk::ConvArgs> as;
            for (size_t i = 0; i < ds.size(); ++i) {
                plans.emplace_back(ds[i]);
                pws.push_back(plans.back().pack_weights(xs[i].wei.data()));
                as.push_back({xs[i].src.data(), nullptr, xs[i].bias.data(), xs[i].dst.data(),
                              kLayers[i].residual ? xs[i].dst.data() : nullptr});
                label += (i ? "," : "") + std::string(plans.back().impl_name());
            }
            // oneDNN's stack (own buffers) interleaved: counter vsOneDNN%.
            std::vector<Data> ys = xs;
            std::vector<std::unique_ptr<DnnConv>> peers;
            try {
                for (size_t i = 0; i < ds.size(); ++i) peers.push_back(std::make_unique<DnnConv>(kLayers[i], ds[i], ys[i]));
            } catch (const dnnl::error&) {
                peers.clear();
            }
            xb::InPhase ph(state);
            if (!peers.empty())
                ph.add("vsOneDNN%", "OneDNN_GFLOPS", total, [&] {
                    for (auto& c : peers) c->run();
                    return total;
                });
            for (auto _ : state) {
                ph.begin();
                for (size_t i = 0; i < plans.size(); ++i) plans[i].run(as[i], pws[i]);
                ph.end();
            }
            ph.finish();
        }
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
        return;
    }
    state.SetLabel(label);
    xb::set_gflops(state, total);
}

std::vector<int64_t> batches() {
    std::vector<int64_t> v;
    if (const char* e = std::getenv("XK_BENCH_CONV_BATCHES")) {
        std::string s(e);
        size_t pos = 0;
        while (pos <= s.size()) {
            const size_t comma = std::min(s.find(',', pos), s.size());
            const long n = std::atol(s.substr(pos, comma - pos).c_str());
            if (n > 0) v.push_back(n);
            pos = comma + 1;
        }
    }
    if (v.empty()) v = {1, 8};
    return v;
}

const bool registered = [] {
    auto reg = [](const std::string& name, auto fn) { benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime(); };
    for (DType t : {DType::f32, DType::bf16})
        for (const Layer& l : kLayers)
            for (int64_t n : batches())
                for (int nt : xb::thread_counts()) {
                    const std::string dt = xk::dtype_name(t), sh = l.name(), ns = "n:" + std::to_string(n),
                                      nts = "nt:" + std::to_string(nt);
                    reg(xb::join_name({"conv", dt, "xk", sh, ns, nts}),
                        [=](benchmark::State& s) { BM_xk(s, l, n, t, nt, Route::routed); });
                    reg(xb::join_name({"conv", dt, "onednn", sh, ns, nts}),
                        [=](benchmark::State& s) { BM_onednn(s, l, n, t, nt); });
                    reg(xb::join_name({"convgemm", dt, "xk", sh, ns, nts}),
                        [=](benchmark::State& s) { BM_xk(s, l, n, t, nt, Route::gemm); });
                }
    // Per call: the plan forced to oneDNN's primitive (convcall/xk) beside that primitive used
    // directly (convcall/onednn), and gemm:conv (convcallgemm/xk), N = 1.
    for (DType t : {DType::f32, DType::bf16})
        for (const Layer& l : kCallLayers)
            for (int nt : xb::thread_counts()) {
                const std::string dt = xk::dtype_name(t), sh = l.name(), nts = "nt:" + std::to_string(nt);
                reg(xb::join_name({"convcall", dt, "xk", sh, "n:1", nts}),
                    [=](benchmark::State& s) { BM_xk(s, l, 1, t, nt, Route::onednn); });
                reg(xb::join_name({"convcall", dt, "onednn", sh, "n:1", nts}),
                    [=](benchmark::State& s) { BM_onednn(s, l, 1, t, nt); });
                reg(xb::join_name({"convcallgemm", dt, "xk", sh, "n:1", nts}),
                    [=](benchmark::State& s) { BM_xk(s, l, 1, t, nt, Route::gemm); });
            }
    for (DType t : {DType::f32, DType::bf16})
        for (int64_t n : batches())
            for (int nt : xb::thread_counts()) {
                const std::string dt = xk::dtype_name(t), ns = "n:" + std::to_string(n), nts = "nt:" + std::to_string(nt);
                reg(xb::join_name({"convstack", dt, "xk", "r50_5layers", ns, nts}),
                    [=](benchmark::State& s) { BM_stack(s, n, t, nt, false); });
                reg(xb::join_name({"convstack", dt, "onednn", "r50_5layers", ns, nts}),
                    [=](benchmark::State& s) { BM_stack(s, n, t, nt, true); });
            }
    // int8 per call: the plan forced to oneDNN beside its own primitive (interleaved vsOneDNN%), N = 1.
    for (const Layer& l : kCallLayers)
        for (int nt : xb::thread_counts()) {
            const std::string sh = l.name(), nts = "nt:" + std::to_string(nt);
            reg(xb::join_name({"qconvcall", "u8s8u8", "xk", sh, "n:1", nts}),
                [=](benchmark::State& s) { BM_qxk(s, l, 1, nt, false, true); });
            reg(xb::join_name({"qconvcall", "u8s8u8", "onednn", sh, "n:1", nts}),
                [=](benchmark::State& s) { BM_qonednn(s, l, 1, nt); });
        }
    std::vector<Layer> qlayers(std::begin(kLayers), std::end(kLayers));
    qlayers.insert(qlayers.end(), std::begin(kDwLayers), std::end(kDwLayers));
    for (const Layer& l : qlayers)
        for (int64_t n : batches())
            for (int nt : xb::thread_counts()) {
                const std::string sh = l.name(), ns = "n:" + std::to_string(n), nts = "nt:" + std::to_string(nt);
                reg(xb::join_name({"qconv", "u8s8u8", "xk", sh, ns, nts}),
                    [=](benchmark::State& s) { BM_qxk(s, l, n, nt, false); });
                reg(xb::join_name({"qconvgemm", "u8s8u8", "xk", sh, ns, nts}),
                    [=](benchmark::State& s) { BM_qxk(s, l, n, nt, true); });
                reg(xb::join_name({"qconv", "u8s8u8", "onednn", sh, ns, nts}),
                    [=](benchmark::State& s) { BM_qonednn(s, l, n, nt); });
            }
    return true;
}();

}  // namespace
