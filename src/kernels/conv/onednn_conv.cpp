// conv2d through oneDNN's convolution primitive: the "onednn:conv" registry entry.
//
// Mapping of ConvDesc onto one primitive (forward_inference, convolution_direct):
//   src / dst   {N, C, H, W} / {N, OC, OH, OW} in the user's layout (nhwc = "acdb", nchw =
//               "abcd"): read and written in place, never reordered
//   weights     format "any": oneDNN picks its preferred (blocked) layout; the user's oihw / ohwi
//               weights ({G,} OCg, ICg, KH, KW with explicit strides) are reordered into it once by
//               ConvPlan::pack_weights (the packing thread count's primitive's layout; another
//               count's primitive wanting another blocking gets a copy made once and kept with the
//               pack), or per call into a per-thread buffer when run unpacked
//   bias        the primitive's f32 bias
//   epilogue    post-ops: add_before_activation = [sum, eltwise], add_after_activation =
//               [eltwise, sum]; the sum reads dst, so a residual other than dst is first copied
//               into dst (residual == dst, the ResNet in-place case, costs nothing)
//   dilation    oneDNN counts from 0 (ours - 1)
// Gaps: a shape / dtype / epilogue for which oneDNN 2.6 offers only a reference implementation
// ("ref:any", "gemm:ref" ...) or nothing is refused by onednn_conv_supports() (checked once per
// descriptor when the primitive descriptor is created, the answer remembered), and the routing
// keeps xk's own path. Where both can run a descriptor, conv_select() (conv.cpp) times them once.
//
// Threads: like onednn_gemm.cpp, each primitive is created and executed with the calling thread's
// OpenMP thread count set to xk::get_num_threads(); one primitive per thread count, made on first
// use under a mutex and found afterwards without one. Each execution passes a per-thread
// scratchpad and stream, and memory objects its thread made on its first call of that primitive
// (dnn::execute_cached: only changed handles are set), so run() may be called from several threads
// at once and a call allocates nothing.
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <mutex>
#include <new>
#include <sstream>
#include <utility>
#include <vector>

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "kernels/conv/conv.hpp"
#include "common/onednn_util.hpp"

namespace xk::detail {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

using dnn::engine;
using dnn::is_reference_impl;
using dnn::md_layout;
using dnn::OmpThreads;
using dnn::thread_stream;

using dnn::eltwise_alg;

dt to_dt(DType t) { return t == DType::bf16 ? dt::bf16 : dt::f32; }

// The user's weights as a oneDNN memory descriptor (explicit strides).
dnnl::memory::desc user_weights_md(const ConvProblem& p) {
    const ConvDesc& d = p.d;
    const int64_t I = p.icg(), O = p.ocg(), KH = d.kh, KW = d.kw;
    const bool oihw = d.weight_layout == ConvWeightLayout::oihw;
    // Strides of (o, i, kh, kw) within one group; groups are outermost.
    const dims s4 = oihw ? dims{I * KH * KW, KH * KW, KW, 1} : dims{KH * KW * I, 1, KW * I, I};
    if (d.groups == 1) return dnnl::memory::desc({d.oc, I, KH, KW}, to_dt(d.weight_dtype), s4);
    return dnnl::memory::desc({d.groups, O, I, KH, KW}, to_dt(d.weight_dtype),
                              dims{O * I * KH * KW, s4[0], s4[1], s4[2], s4[3]});
}

dnnl::memory::desc act_md(const ConvProblem& p, int64_t C, int64_t H, int64_t W, DType t) {
    const auto tag = p.d.layout == ConvLayout::nhwc ? dnnl::memory::format_tag::nhwc : dnnl::memory::format_tag::nchw;
    return dnnl::memory::desc({p.d.n, C, H, W}, to_dt(t), tag);
}

struct Prim {
    int threads = 0;
    uint64_t id = 0;  // dnn::new_prim_id(): execute_cached()'s key
    dnnl::memory::desc src_md, wei_md, bias_md, dst_md, scratch_md;
    size_t scratch_bytes = 0;
    bool wei_is_user = false;  // the primitive reads the user's weights as they are
    dnnl::convolution_forward prim;
    std::string impl;
};

dnnl::convolution_forward::primitive_desc make_pd(const ConvProblem& p) {
    const ConvDesc& d = p.d;
    const dnnl::memory::desc src = act_md(p, d.c, d.h, d.w, d.src_dtype);
    const dnnl::memory::desc dst = act_md(p, d.oc, p.oh, p.ow, d.dst_dtype);
    const dims wdims = d.groups == 1 ? dims{d.oc, p.icg(), d.kh, d.kw} : dims{d.groups, p.ocg(), p.icg(), d.kh, d.kw};
    const dnnl::memory::desc wei(wdims, to_dt(d.weight_dtype), dnnl::memory::format_tag::any);
    const dnnl::memory::desc bias({d.oc}, dt::f32, dnnl::memory::format_tag::a);
    const dims strides{d.stride_h, d.stride_w}, dil{d.dilation_h - 1, d.dilation_w - 1};
    const dims pl{d.pad_top, d.pad_left}, pr{d.pad_bottom, d.pad_right};
    const auto desc = d.with_bias
                          ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                            dnnl::algorithm::convolution_direct, src, wei, bias, dst,
                                                            strides, dil, pl, pr)
                          : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                            dnnl::algorithm::convolution_direct, src, wei, dst,
                                                            strides, dil, pl, pr);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops po;
    float alpha = 0.0f;
    const dnnl::algorithm alg = eltwise_alg(d.activation, alpha);
    if (d.residual == ConvResidual::add_before_activation) po.append_sum(1.0f);
    if (d.activation != Activation::none) po.append_eltwise(1.0f, alg, alpha, 0.0f);
    if (d.residual == ConvResidual::add_after_activation) po.append_sum(1.0f);
    attr.set_post_ops(po);
    return dnnl::convolution_forward::primitive_desc(desc, attr, engine());
}

// 64-byte aligned bytes.
struct AlignedBuf {
    explicit AlignedBuf(size_t n) : p(std::aligned_alloc(64, (n + 63) / 64 * 64)) {
        if (!p) throw std::bad_alloc();
    }
    ~AlignedBuf() { std::free(p); }
    AlignedBuf(const AlignedBuf&) = delete;
    AlignedBuf& operator=(const AlignedBuf&) = delete;
    void* p;
};

// Weights reordered once into the blocked layout `md` of the packing thread count's primitive.
// oneDNN's blocking may depend on the thread count (brgconv: 32- or 64-wide output-channel blocks
// for the same layer at 16 and 1 threads), so the layout string names the weights only and a
// primitive wanting another layout gets a copy reordered once and kept here (`others`), never a
// reorder per call.
struct OnednnPacked final : ConvPacked {
    OnednnPacked(std::string l, const dnnl::memory::desc& m) : ConvPacked(std::move(l)), md(m), buf(m.get_size()) {
        data = buf.p;
        bytes = m.get_size();
    }
    dnnl::memory::desc md;
    AlignedBuf buf;
    // Prim::id of the last primitive found to read `md` as it is (a hint: ids are never reused).
    mutable std::atomic<uint64_t> direct_id{0};
    mutable std::mutex mu;
    mutable std::vector<std::pair<dnnl::memory::desc, std::unique_ptr<AlignedBuf>>> others;
};

void reorder_weights(const dnnl::memory::desc& from_md, const void* from, const dnnl::memory::desc& to_md, void* to,
                     dnnl::stream& st) {
    dnnl::memory a(from_md, engine(), const_cast<void*>(from)), b(to_md, engine(), to);
    dnnl::reorder(a, b).execute(st, a, b);
    st.wait();
}

class OnednnConv final : public ConvKernel {
public:
    explicit OnednnConv(const ConvProblem& p) : ConvKernel(p), user_wei_md_(user_weights_md(p)) {
        first_ = create(get_num_threads());
        // The weights' shape, type and the user's layout: packs hold them in some blocked layout
        // (OnednnPacked::md), which any of this descriptor's primitives can read.
        layout_ = "onednn:" + conv_plain_layout(p).substr(6) + ":g" + std::to_string(p.d.groups);
    }

    void run(const ConvArgs& a, const ConvPacked* packed) const override {
        const int nt = get_num_threads();
        const std::shared_ptr<const Prim> hold = prim_for(nt);  // no lock, no count for first_ / slots_
        const Prim* pr = hold.get();
        const ConvDesc& d = p_.d;
        // The sum post-op reads dst: a residual elsewhere is copied in first.
        if (d.residual != ConvResidual::none && a.residual != a.dst) {
            const int64_t bytes = d.n * d.oc * p_.oh * p_.ow * static_cast<int64_t>(dtype_size(d.dst_dtype));
            const auto* from = static_cast<const unsigned char*>(a.residual);
            auto* to = static_cast<unsigned char*>(a.dst);
            parallel_for(bytes, int64_t{1} << 18, [&](int64_t b, int64_t e) { std::memcpy(to + b, from + b, e - b); });
        }
        try {
            OmpThreads omp(pr->threads);
            dnnl::stream& st = thread_stream();
            // Weights in the primitive's layout: a pack as it is (or its copy in this
            // primitive's layout, made once), else the user's, reordered per call unless the
            // primitive reads them as they are.
            void* wptr;
            if (packed) {
                wptr = packed_for(*static_cast<const OnednnPacked*>(packed), *pr, st);
            } else if (pr->wei_is_user) {
                wptr = const_cast<void*>(a.weights);
            } else {
                wptr = dnn::thread_buffer(dnn::Buf::weights, pr->wei_md.get_size());
                reorder_weights(user_wei_md_, a.weights, pr->wei_md, wptr, st);
            }
            dnn::ExecArg args[5];
            int n = 0;
            args[n++] = {DNNL_ARG_SRC, &pr->src_md, const_cast<void*>(a.src)};
            args[n++] = {DNNL_ARG_WEIGHTS, &pr->wei_md, wptr};
            args[n++] = {DNNL_ARG_DST, &pr->dst_md, a.dst};
            if (d.with_bias) args[n++] = {DNNL_ARG_BIAS, &pr->bias_md, const_cast<float*>(a.bias)};
            if (pr->scratch_bytes)
                args[n++] = {DNNL_ARG_SCRATCHPAD, &pr->scratch_md,
                             dnn::thread_buffer(dnn::Buf::scratchpad, pr->scratch_bytes)};
            dnn::execute_cached(pr->id, pr->prim, st, args, n);
            st.wait();
        } catch (const dnnl::error& e) {
            throw Error(Status::runtime_error,
                        "conv2d onednn: oneDNN convolution for " + p_.key() + " failed to execute: " + e.what());
        }
    }

    std::shared_ptr<const ConvPacked> pack(const void* weights) const override {
        // Into the layout of this thread count's primitive (the plan's, usually).
        const std::shared_ptr<const Prim> pr = prim_for(get_num_threads());
        auto out = std::make_shared<OnednnPacked>(layout_, pr->wei_md);
        try {
            OmpThreads omp(pr->threads);
            reorder_weights(user_wei_md_, weights, out->md, out->buf.p, thread_stream());
        } catch (const dnnl::error& e) {
            throw Error(Status::runtime_error, "conv2d onednn: weight reorder for " + p_.key() + " failed: " + e.what());
        }
        out->direct_id.store(pr->id, std::memory_order_relaxed);
        return out;
    }
    std::string packed_layout() const override { return layout_; }
    std::string backend_info() const override { return "onednn:" + first_->impl; }

private:
    // The pack's bytes in pr's weight layout: as packed, or a copy reordered once and kept.
    static void* packed_for(const OnednnPacked& pk, const Prim& pr, dnnl::stream& st) {
        if (pk.direct_id.load(std::memory_order_relaxed) == pr.id) return pk.buf.p;
        if (pk.md == pr.wei_md) {
            pk.direct_id.store(pr.id, std::memory_order_relaxed);
            return pk.buf.p;
        }
        std::lock_guard<std::mutex> lock(pk.mu);
        for (const auto& o : pk.others)
            if (o.first == pr.wei_md) return o.second->p;
        auto b = std::make_unique<AlignedBuf>(pr.wei_md.get_size());
        reorder_weights(pk.md, pk.buf.p, pr.wei_md, b->p, st);
        pk.others.emplace_back(pr.wei_md, std::move(b));
        return pk.others.back().second->p;
    }

    std::shared_ptr<const Prim> create(int threads) const {
        auto pr = std::make_shared<Prim>();
        pr->threads = threads;
        pr->id = dnn::new_prim_id();
        try {
            OmpThreads omp(threads);
            const auto pd = make_pd(p_);
            pr->src_md = pd.src_desc();
            pr->wei_md = pd.weights_desc();
            pr->bias_md = pd.bias_desc();
            pr->dst_md = pd.dst_desc();
            pr->scratch_md = pd.scratchpad_desc();
            pr->scratch_bytes = pr->scratch_md.get_size();
            pr->wei_is_user = pr->wei_md == user_wei_md_;
            pr->impl = pd.impl_info_str();
            pr->prim = dnnl::convolution_forward(pd);
        } catch (const dnnl::error& e) {
            throw Error(e.status == dnnl_unimplemented ? Status::unsupported : Status::runtime_error,
                        "conv2d onednn: oneDNN convolution for " + p_.key() + " failed: " + e.what());
        }
        return pr;
    }

    // This thread count's primitive: first_, one of up to kSlots kept for the kernel's life (found
    // without a lock), else (more thread counts than that) one of the last 8 made, under mu_.
    std::shared_ptr<const Prim> prim_for(int threads) const {
        if (first_->threads == threads) return std::shared_ptr<const Prim>(std::shared_ptr<const Prim>(), first_.get());
        for (const auto& s : slots_) {
            const Prim* q = s.load(std::memory_order_acquire);
            if (!q) break;
            if (q->threads == threads) return std::shared_ptr<const Prim>(std::shared_ptr<const Prim>(), q);
        }
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& q : kept_)
            if (q->threads == threads) return q;
        for (const auto& q : prims_)
            if (q->threads == threads) return q;
        auto q = create(threads);
        if (kept_.size() < kSlots) {
            kept_.push_back(q);
            slots_[kept_.size() - 1].store(q.get(), std::memory_order_release);
        } else {
            if (prims_.size() >= 8) prims_.erase(prims_.begin());
            prims_.push_back(q);
        }
        return q;
    }

    static constexpr size_t kSlots = 8;
    dnnl::memory::desc user_wei_md_;
    std::string layout_;
    std::shared_ptr<const Prim> first_;
    mutable std::mutex mu_;
    mutable std::vector<std::shared_ptr<const Prim>> kept_;   // owners of slots_' primitives
    mutable std::atomic<const Prim*> slots_[kSlots] = {};
    mutable std::vector<std::shared_ptr<const Prim>> prims_;  // past kSlots thread counts
};

}  // namespace

bool onednn_conv_supports(const ConvProblem& p) {
    const ConvDesc& d = p.d;
    if (!dnn::shape_supported(d, p.oh, p.ow)) return false;
    // A residual (oneDNN's sum post-op, with an activation after it) crashed oneDNN 2.6's JIT the
    // same way on tiny shapes (fuzz_conv: 2 x 1 x 1 x 2 bf16, 2 x 2 kernel, dilation 2): residual
    // convolutions go to oneDNN only as 1x1, stride 1, unpadded (its brgconv_1x1 path: the ResNet
    // bottleneck's expand + shortcut; bf16 on the AMX device ran it 1.7-3.7x faster than our GEMM
    // path), the others take our GEMM path.
    const bool plain_1x1 = d.kh == 1 && d.kw == 1 && d.stride_h == 1 && d.stride_w == 1 && d.pad_top == 0 &&
                           d.pad_bottom == 0 && d.pad_left == 0 && d.pad_right == 0 && d.dilation_h == 1 &&
                           d.dilation_w == 1;
    if (d.residual != ConvResidual::none && !plain_1x1) return false;
    return dnn::jit_available("conv|" + p.key() + "|t" + std::to_string(get_num_threads()), [&] {
        OmpThreads omp(get_num_threads());
        const auto pd = make_pd(p);
        dnnl::convolution_forward prim(pd);  // made too (as onednn_qconv_supports): creation may fail
        return pd.impl_info_str();
    });
}

std::shared_ptr<const ConvKernel> create_onednn_conv(const ConvProblem& p) {
    return std::make_shared<OnednnConv>(p);
}

}  // namespace xk::detail
