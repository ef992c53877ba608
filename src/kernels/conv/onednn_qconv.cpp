// int8 convolution through oneDNN 2.6's convolution primitive: the "onednn:qconv" entry.
//
// Mapping of QConvDesc / QConvArgs onto one primitive (forward_inference, convolution_direct):
//   src / dst   {N, C, H, W} u8|s8 / {N, OC, OH, OW} u8|s8|f32, NHWC ("acdb"), used in place
//   weights     s8 {OC, C, KH, KW} ({G, OC/G, C/G, KH, KW} grouped / depthwise), format "any" (oneDNN's blocked layout, with its s8-source or zero-point
//               compensation where the primitive wants one): reordered once by pack_weights
//               (lazily once more per other layout a call needs), else per call
//   scales      oneDNN 2.6 has no runtime output scales for convolutions (primitive creation
//               fails with DNNL_RUNTIME_F32_VAL), so the quantization parameters are baked into
//               the primitive: output scales (mask 2) m[o] = src_scale * weight_scales[o], and
//               for u8 / s8 dst with no activation or ReLU also * (1 / dst_scale) (ReLU commutes
//               with a positive scale); other activations: eltwise post-op with scale 1/dst_scale
//   bias        oneDNN adds its f32 bias before the output scale: bias'[o] = bias[o] / m[o],
//               computed per call (OC divisions) into a per-thread buffer
//   zero points src / dst zero points as attributes (only when non-zero: a source zero point
//               moves oneDNN from brgconv to its jit_int8 kernels)
// A primitive is made per (thread count, parameters) on first use and kept (8 most recent):
// static quantization calls a plan with the same parameters every time, so the steady state
// creates nothing. A call whose scales, zero points, weight scales and bias equal the thread's last
// call of the kernel (two memcmp of OC floats) reuses that call's primitive and bias'; otherwise
// the parameters are computed (OC multiplies and divisions), checked and looked up under a lock.
//
// Results: the int32 sums are exact (the entry needs AVX-512 VNNI or AMX: without VNNI oneDNN
// 2.6 goes through VPMADDUBSW's saturating int16 pairs and halves s8 weights), the epilogue is
// f32 in another order than ours: (acc + b / m) * m vs m * acc + b, and requantization rounds
// (x + dst_zp) rather than x then adds dst_zp. u8 / s8 dst may differ from gemm:qconv / the
// reference by 1; f32 dst by a few ulps of max(|m * acc|, |bias|) (tests/kernels/test_qconv.cpp).
//
// Calls oneDNN cannot express (an m[o] that is zero / subnormal after the f32 product, a bias
// quotient or scale that overflows) or for which oneDNN offers only a reference implementation
// (e.g. with a source zero point on some shapes) run on "gemm:qconv" instead (logged at
// XK_VERBOSE=1).
#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "common/parallel.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/conv/conv.hpp"
#include "common/onednn_util.hpp"

namespace xk::detail {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;

dt to_dt(DType t) { return t == DType::u8 ? dt::u8 : t == DType::s8 ? dt::s8 : dt::f32; }

bool int8_dst(const QConvDesc& d) { return d.dst_dtype != DType::f32; }
// 1 / dst_scale folds into the output scales (no post-op) for no activation and ReLU.
bool fold_dst_scale(const QConvDesc& d) {
    return int8_dst(d) && (d.activation == Activation::none || d.activation == Activation::relu);
}

// The quantization parameters a primitive is made for.
struct QParams {
    int threads = 1;
    int32_t szp = 0, dzp = 0;
    float post_scale = 1.0f;  // the eltwise post-op's scale (1 / dst_scale when not folded)
    std::vector<float> scales;
    bool operator==(const QParams& o) const {
        return threads == o.threads && szp == o.szp && dzp == o.dzp &&
               std::memcmp(&post_scale, &o.post_scale, sizeof(float)) == 0 && scales.size() == o.scales.size() &&
               std::memcmp(scales.data(), o.scales.data(), scales.size() * sizeof(float)) == 0;
    }
};

QParams unit_params(const QConvProblem& p, int threads) {
    QParams q;
    q.threads = threads;
    q.scales.assign(static_cast<size_t>(p.d.oc), 1.0f);
    return q;
}

// The parameters of one call, and bias' = bias / m when `bias_out`. false: not expressible.
bool call_params(const QConvProblem& p, const QConvArgs& a, QParams& q, float* bias_out) {
    const QConvDesc& d = p.d;
    q.threads = get_num_threads();
    q.szp = a.src_zero_point;
    q.dzp = int8_dst(d) ? a.dst_zero_point : 0;
    const float inv = int8_dst(d) ? 1.0f / a.dst_scale : 1.0f;
    if (!std::isnormal(inv)) return false;
    const bool fold = fold_dst_scale(d);
    q.post_scale = fold ? 1.0f : inv;
    q.scales.resize(static_cast<size_t>(d.oc));
    // Branch-free loops (they vectorise; a scalar loop with a test per element cost ~1 us a call
    // at OC = 512) checking normality / finiteness as |x| in range (NaN fails `<=`); nothing is
    // used unless all pass.
    const float src_scale = a.src_scale, mul = fold ? inv : 1.0f;
    const float* ws = a.weight_scales;
    float* sc = q.scales.data();
    int bad = 0;
    for (int64_t o = 0; o < d.oc; ++o) {
        const float m = src_scale * ws[o];  // the product as the reference forms it
        const float s = m * mul;            // fold: m * (1 / dst_scale); else m * 1 (exact)
        sc[o] = s;
        const float am = std::fabs(m), as = std::fabs(s);
        bad |= (am < FLT_MIN) | !(am <= FLT_MAX) | (as < FLT_MIN) | !(as <= FLT_MAX);
    }
    if (bad) return false;
    if (bias_out) {
        const float* bias = a.bias;
        for (int64_t o = 0; o < d.oc; ++o) {
            const float b = bias[o] / (src_scale * ws[o]);
            bias_out[o] = b;
            bad |= !(std::fabs(b) <= FLT_MAX);
        }
    }
    return bad == 0;
}

// The weights' dims: {OC, C, KH, KW}, or {G, OC/G, C/G, KH, KW} for groups > 1.
dims wei_dims(const QConvDesc& d) {
    if (d.groups == 1) return {d.oc, d.c, d.kh, d.kw};
    return {d.groups, d.oc / d.groups, d.c / d.groups, d.kh, d.kw};
}

// The user's OHWI weights ([OC][KH][KW][C/G]) as a memory descriptor of wei_dims.
dnnl::memory::desc user_wei_md(const QConvDesc& d) {
    if (d.groups == 1) return dnnl::memory::desc(wei_dims(d), dt::s8, tag::ohwi);
    const int64_t og = d.oc / d.groups, cg = d.c / d.groups;
    return dnnl::memory::desc(wei_dims(d), dt::s8, dims{og * d.kh * d.kw * cg, d.kh * d.kw * cg, 1, d.kw * cg, cg});
}

dnnl::convolution_forward::primitive_desc make_pd(const QConvProblem& p, const QParams& q) {
    const QConvDesc& d = p.d;
    const dnnl::memory::desc src({d.n, d.c, d.h, d.w}, to_dt(d.src_dtype), tag::nhwc);
    const dnnl::memory::desc dst({d.n, d.oc, p.oh, p.ow}, to_dt(d.dst_dtype), tag::nhwc);
    const dnnl::memory::desc wei(wei_dims(d), dt::s8, tag::any);
    const dnnl::memory::desc bias({d.oc}, dt::f32, tag::a);
    const dims strides{d.stride_h, d.stride_w}, dil{d.dilation_h - 1, d.dilation_w - 1};
    const dims pl{d.pad_top, d.pad_left}, pr{d.pad_bottom, d.pad_right};
    const auto fwd = dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    const auto desc = d.with_bias ? dnnl::convolution_forward::desc(fwd, alg, src, wei, bias, dst, strides, dil, pl, pr)
                                  : dnnl::convolution_forward::desc(fwd, alg, src, wei, dst, strides, dil, pl, pr);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_output_scales(2, q.scales);
    if (q.szp) attr.set_zero_points(DNNL_ARG_SRC, 0, {q.szp});
    if (q.dzp) attr.set_zero_points(DNNL_ARG_DST, 0, {q.dzp});
    dnnl::post_ops po;
    float alpha = 0.0f;
    const dnnl::algorithm act = dnn::eltwise_alg(d.activation, alpha);  // sets alpha (swish): before the call
    if (d.activation != Activation::none) {
        po.append_eltwise(q.post_scale, act, alpha, 0.0f);
    } else if (q.post_scale != 1.0f) {
        po.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, q.post_scale, 0.0f);
    }
    attr.set_post_ops(po);
    return dnnl::convolution_forward::primitive_desc(desc, attr, dnn::engine());
}

struct QPrim {
    QParams q;
    uint64_t id = dnn::new_prim_id();  // execute_cached()'s key, OnednnQPacked's hint
    bool reference = false;  // oneDNN offers only a reference implementation: run ours
    dnnl::memory::desc src_md, wei_md, bias_md, dst_md, scratch_md;
    size_t scratch_bytes = 0;
    dnnl::convolution_forward prim;
    std::string impl;
};

struct AlignedBytes {
    void* p = nullptr;
    explicit AlignedBytes(size_t n) {
        p = std::aligned_alloc(64, std::max<size_t>(64, (n + 63) / 64 * 64));
        if (!p) throw std::bad_alloc();
    }
    ~AlignedBytes() { std::free(p); }
    AlignedBytes(const AlignedBytes&) = delete;
    AlignedBytes& operator=(const AlignedBytes&) = delete;
};

void reorder(const dnnl::memory::desc& from_md, const void* from, const dnnl::memory::desc& to_md, void* to,
             int threads) {
    dnn::OmpThreads omp(threads);
    dnnl::stream& st = dnn::thread_stream();
    dnnl::memory f(from_md, dnn::engine(), const_cast<void*>(from)), t(to_md, dnn::engine(), to);
    dnnl::reorder(f, t).execute(st, f, t);
    st.wait();
}

// Packed weights: the plain OHWI copy (the source of every other layout, and what a call that
// falls back to gemm:qconv reads) and oneDNN's layouts, the plan's first one made by pack(),
// others (a source zero point's compensated layout, another thread count's) once, when needed.
struct OnednnQPacked final : QConvPackedData {
    std::vector<int8_t> plain;
    dnnl::memory::desc plain_md;
    // The weights in a primitive's layout: a lock-free hint (the last primitive asked for, by its
    // never reused id) before the list of layouts made so far under mu — compared as memory
    // descriptors; a call no longer formats and compares layout strings.
    struct Hint {
        uint64_t prim_id;
        const void* p;
    };
    mutable std::atomic<const Hint*> hint{nullptr};
    mutable std::mutex mu;
    mutable std::vector<std::pair<dnnl::memory::desc, std::shared_ptr<AlignedBytes>>> layouts;
    mutable std::vector<std::unique_ptr<const Hint>> hints;  // owners of every hint published

    const void* get(const QPrim& pr, int threads) const {
        if (const Hint* h = hint.load(std::memory_order_acquire); h && h->prim_id == pr.id) return h->p;
        std::lock_guard<std::mutex> lock(mu);
        const void* p = nullptr;
        for (const auto& x : layouts)
            if (x.first == pr.wei_md) p = x.second->p;
        if (!p) {
            auto b = std::make_shared<AlignedBytes>(pr.wei_md.get_size());
            reorder(plain_md, plain.data(), pr.wei_md, b->p, threads);
            layouts.emplace_back(pr.wei_md, b);
            p = b->p;
        }
        if (hints.size() < 64) {  // bounded: past that, the list above answers
            hints.push_back(std::make_unique<const Hint>(Hint{pr.id, p}));
            hint.store(hints.back().get(), std::memory_order_release);
        }
        return p;
    }
};

class OnednnQConv final : public QConvKernel {
public:
    explicit OnednnQConv(const QConvProblem& p)
        : p_(p), user_wei_md_(user_wei_md(p.d)) {
        first_ = create(unit_params(p, get_num_threads()));
        if (first_->reference)
            throw Error(Status::unsupported, "qconv2d onednn: oneDNN has only " + first_->impl + " for " + p.key());
    }

    void run(const QConvArgs& a, const QConvPackedData* packed) const override {
        const QConvDesc& d = p_.d;
        // Static quantization passes the same parameters every call: the thread's last call of
        // this kernel is remembered (its inputs, primitive and bias'), and a call with the same
        // inputs skips the products, quotients, checks and the lock of prim_for().
        thread_local CallMemo memo;
        const int threads = get_num_threads();
        const size_t oc = static_cast<size_t>(d.oc), ocb = oc * sizeof(float);
        const bool same = memo.kernel == id_ && memo.threads == threads && memo.same(a) &&
                          std::memcmp(memo.ws.data(), a.weight_scales, ocb) == 0 &&
                          (!d.with_bias || std::memcmp(memo.bias.data(), a.bias, ocb) == 0);
        if (!same) {
            memo.kernel = 0;  // until this call's parameters are known to run on oneDNN
            thread_local QParams q;
            memo.bias_q.resize(oc);
            if (!call_params(p_, a, q, d.with_bias ? memo.bias_q.data() : nullptr))
                return fallback(a, packed, "parameters oneDNN cannot express");
            std::shared_ptr<const QPrim> found = prim_for(q);
            if (found->reference) return fallback(a, packed, "oneDNN has only " + found->impl);
            memo.pr = std::move(found);
            memo.set(a);
            memo.threads = threads;
            memo.ws.assign(a.weight_scales, a.weight_scales + oc);
            if (d.with_bias) memo.bias.assign(a.bias, a.bias + oc);
            memo.kernel = id_;
        }
        const QPrim* pr = memo.pr.get();
        float* bias = d.with_bias ? memo.bias_q.data() : nullptr;
        try {
            dnn::OmpThreads omp(threads);
            dnnl::stream& st = dnn::thread_stream();
            void* w;
            if (packed) {
                w = const_cast<void*>(static_cast<const OnednnQPacked*>(packed)->get(*pr, threads));
            } else {
                w = dnn::thread_buffer(dnn::Buf::weights, pr->wei_md.get_size());
                dnnl::memory from(user_wei_md_, dnn::engine(), const_cast<int8_t*>(a.weights)), to(pr->wei_md, dnn::engine(), w);
                dnnl::reorder(from, to).execute(st, from, to);
            }
            // The thread's memory objects of this primitive, their handles set when they change
            // (setting the blocked weights' writes the layout's zero padding).
            dnn::ExecArg args[5];
            int n = 0;
            args[n++] = {DNNL_ARG_SRC, &pr->src_md, const_cast<void*>(a.src)};
            args[n++] = {DNNL_ARG_WEIGHTS, &pr->wei_md, w};
            args[n++] = {DNNL_ARG_DST, &pr->dst_md, a.dst};
            if (bias) args[n++] = {DNNL_ARG_BIAS, &pr->bias_md, bias};
            if (pr->scratch_bytes)
                args[n++] = {DNNL_ARG_SCRATCHPAD, &pr->scratch_md,
                             dnn::thread_buffer(dnn::Buf::scratchpad, pr->scratch_bytes)};
            dnn::execute_cached(pr->id, pr->prim, st, args, n);
            st.wait();
        } catch (const dnnl::error& e) {
            throw Error(Status::runtime_error,
                        "qconv2d onednn: oneDNN convolution for " + p_.key() + " failed to execute: " + e.what());
        }
    }

    std::shared_ptr<const QConvPackedData> pack(const int8_t* weights) const override {
        auto pk = std::make_shared<OnednnQPacked>();
        pk->key = qconv_packed_key("onednn:qconv", p_);
        pk->plain.assign(weights, weights + p_.d.oc * p_.d.kh * p_.d.kw * (p_.d.c / p_.d.groups));
        pk->plain_md = user_wei_md_;
        try {
            pk->get(*first_, first_->q.threads);
        } catch (const dnnl::error& e) {
            throw Error(Status::runtime_error, "qconv2d onednn: weight reorder for " + p_.key() + " failed: " + e.what());
        }
        return pk;
    }

    std::string backend_info() const override { return "onednn:" + first_->impl; }

private:
    // A thread's last call of one kernel (see run()). Holds the primitive, so it outlives an
    // eviction from prims_ (and the kernel) until the thread's next new parameters.
    struct CallMemo {
        uint64_t kernel = 0;  // id_ of the kernel, 0: none
        int threads = 0;
        uint32_t src_scale = 0, dst_scale = 0;  // the bits: -0.0 / NaN never compare equal by value
        int32_t szp = 0, dzp = 0;
        std::vector<float> ws, bias, bias_q;  // weight scales and bias as given; bias / m
        std::shared_ptr<const QPrim> pr;
        static uint32_t bits(float f) {
            uint32_t u;
            std::memcpy(&u, &f, sizeof u);
            return u;
        }
        bool same(const QConvArgs& a) const {
            return src_scale == bits(a.src_scale) && dst_scale == bits(a.dst_scale) && szp == a.src_zero_point &&
                   dzp == a.dst_zero_point;
        }
        void set(const QConvArgs& a) {
            src_scale = bits(a.src_scale), dst_scale = bits(a.dst_scale);
            szp = a.src_zero_point, dzp = a.dst_zero_point;
        }
    };

    std::shared_ptr<const QPrim> create(const QParams& q) const {
        auto pr = std::make_shared<QPrim>();
        pr->q = q;
        try {
            dnn::OmpThreads omp(q.threads);
            const auto pd = make_pd(p_, q);
            pr->impl = pd.impl_info_str();
            pr->reference = dnn::is_reference_impl(pr->impl);
            if (pr->reference) return pr;
            pr->src_md = pd.src_desc();
            pr->wei_md = pd.weights_desc();
            pr->bias_md = pd.bias_desc();
            pr->dst_md = pd.dst_desc();
            pr->scratch_md = pd.scratchpad_desc();
            pr->scratch_bytes = pr->scratch_md.get_size();
            pr->prim = dnnl::convolution_forward(pd);
        } catch (const dnnl::error& e) {
            // Nothing for these parameters (unimplemented), or a primitive its JIT could not make
            // (seen: 1x1 groups 8, s8 dst, silu, a source zero point: "could not create a
            // primitive"): ours runs them.
            pr->reference = true;
            pr->impl = e.status == dnnl_unimplemented ? "no implementation" : std::string("no primitive (") + e.what() + ")";
        }
        return pr;
    }

    std::shared_ptr<const QPrim> prim_for(const QParams& q) const {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t i = 0; i < prims_.size(); ++i)
            if (prims_[i]->q == q) {
                if (i) std::rotate(prims_.begin(), prims_.begin() + static_cast<std::ptrdiff_t>(i),
                                   prims_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
                return prims_.front();
            }
        auto pr = create(q);
        if (prims_.size() >= 8) prims_.pop_back();
        prims_.insert(prims_.begin(), pr);
        return pr;
    }

    void fallback(const QConvArgs& a, const QConvPackedData* packed, const std::string& why) const {
        std::call_once(gemm_once_, [&] {
            const auto& reg = qconv_registry();
            gemm_ = reg.get(p_, reg.find("gemm:qconv")).kernel;
        });
        if (verbose_level() >= 1) verbose_log("fallback", "qconv2d", "onednn:qconv->gemm:qconv," + p_.key() + "," + why, 0.0);
        QConvArgs b = a;
        if (packed) b.weights = static_cast<const OnednnQPacked*>(packed)->plain.data();
        gemm_->run(b);
    }

    QConvProblem p_;
    const uint64_t id_ = dnn::new_prim_id();  // CallMemo's key (never reused)
    dnnl::memory::desc user_wei_md_;
    std::shared_ptr<const QPrim> first_;
    mutable std::mutex mu_;
    mutable std::vector<std::shared_ptr<const QPrim>> prims_;
    mutable std::once_flag gemm_once_;
    mutable std::shared_ptr<const QConvKernel> gemm_;
};

}  // namespace

bool onednn_qconv_supports(const QConvProblem& p) {
    if (!dnn::shape_supported(p.d, p.oh, p.ow)) return false;
    return dnn::jit_available("qconv|" + p.key() + "|t" + std::to_string(get_num_threads()), [&] {
        dnn::OmpThreads omp(get_num_threads());
        const auto pd = make_pd(p, unit_params(p, get_num_threads()));
        // Made too: for a few descriptors oneDNN 2.6 describes a JIT primitive it then cannot create
        // (1x1, groups 8, s8 dst, silu: "could not create a primitive"). Its primitive cache keeps
        // it for the kernel's first creation.
        dnnl::convolution_forward prim(pd);
        return pd.impl_info_str();
    });
}

std::shared_ptr<const QConvKernel> create_onednn_qconv(const QConvProblem& p) { return std::make_shared<OnednnQConv>(p); }

}  // namespace xk::detail
