// fp32 GEMM through oneDNN's matmul primitive: the "onednn" registry entry, which normal selection
// never picks by itself — the autotuner (gemm_tune.cpp) routes a spec here when it measured
// oneDNN faster, and a PackedB in the plain layout may run here (gemm_kernel_for_layout).
//
// The whole GemmSpec contract for f32, mapped onto one primitive:
//   A, B, C    memory descriptors with strides: op(A) {M, K} strides {lda, 1} (N) / {1, lda} (T),
//              op(B) {K, N} strides {ldb, 1} / {1, ldb}, C {M, N} strides {ldc, 1}
//   alpha      a runtime output scale (one primitive serves every alpha); none when alpha is 1
//   beta       a sum post-op with scale beta (only when beta != 0: beta == 0 never reads C); the
//              scale is fixed at creation, so each beta value has its own primitive (below)
//   bias       a binary-add post-op broadcast over rows — not matmul's bias argument, which oneDNN
//              adds before the output scale (alpha * (acc + bias)); the post-op comes after the
//              sum, in the order of the math: alpha * acc + beta * C + bias
//   act        an eltwise post-op: relu (alpha 0; max(x, 0), so relu(NaN) = 0 as ours), gelu_erf,
//              gelu_tanh, swish with alpha 1 (= silu) — oneDNN defines each as src/common/activation.hpp
//              does; all of xk::Activation is expressible
//   residual   a binary-add post-op reading R {M, N} (f32 or bf16) with strides {ld_residual, 1}
//   packed B   the reference layout (op(B) copied into a contiguous K x N array): oneDNN reads it as
//              plain weights {K, N} strides {N, 1}, and packs are interchangeable with ref:scalar's
//
// Primitives: oneDNN (built with OpenMP here) sizes its work split by the calling thread's OpenMP
// thread count, so each primitive is created and executed with omp_set_num_threads(n) for n =
// xk::get_num_threads() on the calling thread (restored afterwards; the OpenMP ICV is per thread,
// so concurrent callers do not disturb each other) — one thread under the std::thread backend (the
// TSan build: oneDNN's OpenMP pool synchronises inside the uninstrumented libgomp); the engine,
// streams, scratchpads and this rule are common/onednn_util.hpp's, shared with the conv family.
// A kernel holds its primitives by (threads, beta value, B packed or not): the one of the creation-time
// thread count, the spec's beta class and unpacked B is created with the kernel; others on first
// use (under a mutex; at most kMaxPrims, the oldest dropped). Every execution passes its own
// scratchpad (scratchpad_mode::user, a per-thread buffer) and its own stream (per thread), and
// primitives are immutable, so GemmPlan::run may be called from several threads at once.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dnnl.hpp>
#include <mutex>
#include <new>
#include <unordered_map>

#include "common/onednn_util.hpp"
#include "common/parallel.hpp"
#include "kernels/gemm/gemm.hpp"

namespace xk::detail {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

constexpr size_t kMaxPrims = 16;

using dnn::eltwise_alg;
using dnn::engine;
using dnn::OmpThreads;
using dnn::thread_stream;

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

struct Prim {
    int threads = 0;
    bool has_sum = false;
    uint32_t beta_bits = 0;  // the sum's scale (when has_sum)
    bool packed = false;
    dnnl::memory::desc a_md, b_md, c_md, bias_md, res_md, scratch_md;
    int bias_arg = 0, res_arg = 0;  // post-op argument ids (0: none)
    size_t scratch_bytes = 0;
    dnnl::matmul prim;
    std::string impl;  // oneDNN's implementation name, e.g. "gemm:jit"
};

class OnednnGemm final : public GemmKernel {
public:
    explicit OnednnGemm(const GemmSpec& s) : s_(s), layout_(gemm_reference_packed_layout(s)) {
        const float beta = s.beta == BetaKind::one ? 1.0f : 0.5f;  // "other": a representative value
        first_ = create(get_num_threads(), s.beta != BetaKind::zero, beta, false);
        // (beta "other" primitives are made per value on first use; this one seeds the cache.)
        prims_.push_back(first_);
    }

    void run(const GemmCall& call) const override {
        const int threads = get_num_threads();
        const bool sum = s_.beta != BetaKind::zero;
        const float beta = s_.beta == BetaKind::one ? 1.0f : call.beta;
        const std::shared_ptr<const Prim> p = prim_for(threads, sum, beta, call.packed_b != nullptr);
        execute(*p, call);
    }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return gemm_reference_pack_b(s_, B); }
    std::string packed_layout() const override { return layout_; }
    std::string backend_info() const override { return "onednn:" + first_->impl; }

private:
    std::shared_ptr<const Prim> create(int threads, bool sum, float beta, bool packed) const {
        auto p = std::make_shared<Prim>();
        p->threads = threads, p->has_sum = sum, p->beta_bits = sum ? bits(beta) : 0, p->packed = packed;
        const bool at = s_.trans_a == Trans::T, bt = s_.trans_b == Trans::T && !packed;
        const int64_t ldb = packed ? s_.N : s_.ldb;
        p->a_md = dnnl::memory::desc({s_.M, s_.K}, dt::f32, at ? dims{1, s_.lda} : dims{s_.lda, 1});
        p->b_md = dnnl::memory::desc({s_.K, s_.N}, dt::f32, bt ? dims{1, ldb} : dims{ldb, 1});
        p->c_md = dnnl::memory::desc({s_.M, s_.N}, dt::f32, dims{s_.ldc, 1});

        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (!s_.alpha_one) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
        dnnl::post_ops po;
        int idx = 0;
        if (sum) po.append_sum(beta), ++idx;
        if (s_.epilogue.bias) {
            p->bias_md = dnnl::memory::desc({1, s_.N}, dt::f32, dims{s_.N, 1});
            po.append_binary(dnnl::algorithm::binary_add, p->bias_md);
            p->bias_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1;
            ++idx;
        }
        if (s_.epilogue.act != Activation::none) {
            float alpha = 0.0f;
            const dnnl::algorithm alg = eltwise_alg(s_.epilogue.act, alpha);
            po.append_eltwise(1.0f, alg, alpha, 0.0f);
            ++idx;
        }
        if (s_.epilogue.residual) {
            const dt rt = s_.residual_type == DType::bf16 ? dt::bf16 : dt::f32;
            p->res_md = dnnl::memory::desc({s_.M, s_.N}, rt, dims{s_.ld_residual, 1});
            po.append_binary(dnnl::algorithm::binary_add, p->res_md);
            p->res_arg = DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1;
            ++idx;
        }
        attr.set_post_ops(po);
        try {
            OmpThreads omp(threads);
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->a_md, p->b_md, p->c_md), attr, engine());
            p->scratch_md = pd.scratchpad_desc();
            p->scratch_bytes = p->scratch_md.get_size();
            p->impl = pd.impl_info_str();
            p->prim = dnnl::matmul(pd);
        } catch (const dnnl::error& e) {
            throw Error(e.status == dnnl_unimplemented ? Status::unsupported : Status::runtime_error,
                        std::string("gemm onednn: oneDNN matmul for ") + s_.key() + " failed: " + e.what());
        }
        return p;
    }

    std::shared_ptr<const Prim> prim_for(int threads, bool sum, float beta, bool packed) const {
        const uint32_t bb = sum ? bits(beta) : 0;
        auto match = [&](const Prim& p) {
            return p.threads == threads && p.has_sum == sum && p.beta_bits == bb && p.packed == packed;
        };
        if (match(*first_)) return first_;
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto& p : prims_)
            if (match(*p)) return p;
        // Created under the lock: concurrent first uses of one configuration create it once.
        auto p = create(threads, sum, beta, packed);
        if (prims_.size() >= kMaxPrims) prims_.erase(prims_.begin() + 1);  // keep first_ (index 0)
        prims_.push_back(p);
        return p;
    }

    void execute(const Prim& p, const GemmCall& call) const {
        const GemmArgs& a = call.args;
        const dnnl::engine& eng = engine();
        const void* B = call.packed_b ? call.packed_b->data : a.B;
        std::unordered_map<int, dnnl::memory> args;
        args.reserve(8);
        args.emplace(DNNL_ARG_SRC, dnnl::memory(p.a_md, eng, const_cast<void*>(a.A)));
        args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(p.b_md, eng, const_cast<void*>(B)));
        args.emplace(DNNL_ARG_DST, dnnl::memory(p.c_md, eng, a.C));
        float alpha = call.alpha;
        if (!s_.alpha_one)
            args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES,
                         dnnl::memory(dnnl::memory::desc({1}, dt::f32, dims{1}), eng, &alpha));
        if (p.bias_arg) args.emplace(p.bias_arg, dnnl::memory(p.bias_md, eng, const_cast<float*>(a.bias)));
        if (p.res_arg) args.emplace(p.res_arg, dnnl::memory(p.res_md, eng, const_cast<void*>(a.residual)));
        if (p.scratch_bytes) args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.scratch_md, eng, dnn::thread_buffer(dnn::Buf::scratchpad, p.scratch_bytes)));
        try {
            OmpThreads omp(p.threads);
            dnnl::stream& st = thread_stream();
            p.prim.execute(st, args);
            st.wait();
        } catch (const dnnl::error& e) {
            throw Error(Status::runtime_error, std::string("gemm onednn: oneDNN matmul for ") + s_.key() +
                                                   " failed to execute: " + e.what());
        }
    }

    GemmSpec s_;
    std::string layout_;
    std::shared_ptr<const Prim> first_;
    mutable std::mutex mu_;
    mutable std::vector<std::shared_ptr<const Prim>> prims_;
};

}  // namespace

bool onednn_gemm_supports(const GemmSpec& s) {
    // f32 only (bf16 / int8 keep xk's own kernels), and a non-empty product: K == 0 (C = beta C +
    // epilogue) and empty outputs stay on xk's kernels. Every activation is expressible.
    // Sizes below 2^31 each: oneDNN 2.6 died of SIGFPE creating the primitive for M = 2^40, N =
    // K = 1 (a plan with autotuning on asked for it before tuning was bounded); such shapes keep
    // xk's kernels.
    constexpr int64_t kMax = (int64_t(1) << 31) - 1;
    return s.a_type == DType::f32 && s.b_type == DType::f32 && s.c_type == DType::f32 && s.M > 0 && s.N > 0 &&
           s.K > 0 && s.M <= kMax && s.N <= kMax && s.K <= kMax;
}

std::shared_ptr<const GemmKernel> create_gemm_onednn(const GemmSpec& s) {
    if (!onednn_gemm_supports(s))
        throw Error(Status::unsupported, "gemm onednn: " + s.key() + " is not supported (f32 with M, N, K > 0 only)");
    return std::make_shared<OnednnGemm>(s);
}

}  // namespace xk::detail
