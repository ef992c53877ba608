#include "tools/selections.hpp"

#include <tuple>

#include "kernels/attention/attention.hpp"
#include "kernels/conv/conv.hpp"
#include "kernels/eltwise/eltwise.hpp"
#include "kernels/embedding_bag/embedding_bag.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/glu/glu.hpp"
#include "kernels/norm/norm.hpp"
#include "kernels/optim/optim.hpp"
#include "kernels/interaction/interaction.hpp"
#include "kernels/convert/convert.hpp"
#include "kernels/quant/quant.hpp"
#include "kernels/rope/rope.hpp"
#include "kernels/softmax/softmax.hpp"
#include "kernels/woq/woq.hpp"
#include "kernels/vision/vision.hpp"
#include "xk/isa.hpp"
#include "xk/qlinear.hpp"

namespace xk::tools {

namespace {
template <class Reg, class MakeDesc>
Selection pick(const char* family, const Reg& reg, MakeDesc make) {
    try {
        const auto d = make();
        try {
            return {family, d.key(), reg.select(d, max_isa()).name};
        } catch (const std::exception& e) {
            return {family, d.key(), std::string("none (") + e.what() + ")"};
        }
    } catch (const std::exception& e) {
        return {family, "?", std::string("invalid descriptor (") + e.what() + ")"};
    }
}

GemmDesc gemm_desc(int64_t m, int64_t n, int64_t k, DType a, DType b, DType c) {
    GemmDesc d;
    d.M = m;
    d.N = n;
    d.K = k;
    d.a_type = a;
    d.b_type = b;
    d.c_type = c;
    return d;
}
}  // namespace

std::vector<Selection> selections() {
    using namespace detail;
    std::vector<Selection> v;
    v.push_back(pick("axpby", axpby_registry(), [] { return AxpbyDesc{}; }));
    v.push_back(pick("gemm f32", gemm_registry(), [] {
        auto d = gemm_desc(384, 3072, 768, DType::f32, DType::f32, DType::f32);
        d.trans_b = Trans::T;
        d.epilogue.bias = true;
        d.epilogue.act = Activation::gelu_erf;
        return gemm_check_desc("xk-info", d);
    }));
    v.push_back(pick("gemm f32 small", gemm_registry(),
                     [] { return gemm_check_desc("xk-info", gemm_desc(32, 32, 32, DType::f32, DType::f32, DType::f32)); }));
    v.push_back(pick("gemm f32 decode", gemm_registry(), [] {
        auto d = gemm_desc(1, 4096, 4096, DType::f32, DType::f32, DType::f32);
        d.trans_b = Trans::T;
        return gemm_check_desc("xk-info", d);
    }));
    v.push_back(pick("gemm bf16", gemm_registry(),
                     [] { return gemm_check_desc("xk-info", gemm_desc(384, 3072, 768, DType::bf16, DType::bf16, DType::f32)); }));
    v.push_back(pick("gemm u8s8", gemm_registry(),
                     [] { return gemm_check_desc("xk-info", gemm_desc(384, 3072, 768, DType::u8, DType::s8, DType::s32)); }));
    // conv2d routes like qconv2d (xk's pick vs onednn:conv, timed once): the route and what decided it.
    try {
        ConvDesc d;
        d.n = 1; d.c = 64; d.h = 56; d.w = 56; d.oc = 64; d.kh = 3; d.kw = 3;
        d.set_padding(1, 1);
        d.layout = ConvLayout::nhwc;
        d.weight_layout = ConvWeightLayout::ohwi;
        d.with_bias = true;
        d.activation = Activation::relu;
        const ConvProblem p = conv_validate_desc("xk-info", d);
        const char* how = "";
        try {
            const auto sel = conv_select(p, &how);
            v.push_back({"conv2d", p.key(), std::string(sel.impl->name) + " (" + how + ")"});
        } catch (const std::exception& e) {
            v.push_back({"conv2d", p.key(), std::string("none (") + e.what() + ")"});
        }
    } catch (const std::exception& e) {
        v.push_back({"conv2d", "?", std::string("invalid descriptor (") + e.what() + ")"});
    }
    v.push_back(pick("embedding_bag", embedding_bag_registry(), [] {
        EmbeddingBagDesc d;
        d.num_embeddings = 1000000;
        d.dim = 128;
        return embedding_bag_config(embedding_bag_validate_desc("xk-info", d));
    }));
    v.push_back(pick("optim", optim_registry(), [] {
        OptimConfig k;
        k.kind = OptimKind::adam;
        return k;
    }));
    v.push_back(pick("embedding_bag_backward", embedding_bag_backward_registry(), [] { return EmbBwdConfig{}; }));
    v.push_back(pick("interaction", interaction_registry(), [] {
        InteractionDesc d;
        d.num_features = 27;
        d.dim = 128;
        return interaction_validate_desc("xk-info", d);
    }));
    v.push_back(pick("rms_norm", norm_registry(), [] {
        NormDesc d;
        d.rows = 16;
        d.hidden = 4096;
        d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = DType::bf16;
        d.fused_residual = true;
        return norm_kernel_desc(d);
    }));
    v.push_back(pick("rope", rope_registry(), [] {
        RopeDesc d;
        d.tokens = 16;
        d.q_heads = 32;
        d.k_heads = 8;
        d.head_dim = 128;
        d.max_position = 4096;
        return rope_kernel_desc(d);
    }));
    v.push_back(pick("quant", quant_registry(), [] {
        QuantDesc d;
        d.rows = 16;
        d.cols = 4096;
        d.granularity = QuantGranularity::per_token_dynamic;
        return quant_kernel_desc(d);
    }));
    for (auto [st, dt] : {std::pair{DType::f32, DType::bf16}, std::pair{DType::f32, DType::f16}, std::pair{DType::f16, DType::f32}})
        v.push_back({"convert", std::string(dtype_name(st)) + "->" + dtype_name(dt), convert_impl(st, dt, max_isa()).name});
    try {  // int8 Linear: the int8 GEMM kernel its weights are packed for (a small plan)
        std::vector<float> w(64 * 64, 0.5f);
        QLinearDesc d;
        d.N = d.K = 64;
        const QLinearPlan p(d, {DType::f32, w.data(), 0, nullptr});
        v.push_back({"qlinear", "dynamic_per_token,f32->f32", p.impl_name()});
    } catch (const std::exception& e) {
        v.push_back({"qlinear", "dynamic_per_token,f32->f32", std::string("none (") + e.what() + ")"});
    }
    v.push_back(pick("glu", glu_registry(), [] {
        GluDesc d;
        d.rows = 16;
        d.inner = 11008;
        d.x_dtype = d.y_dtype = DType::bf16;
        return glu_kernel_desc(glu_resolve("xk-info", d));
    }));
    v.push_back(pick("softmax", softmax_registry(), [] {
        SoftmaxDesc d;
        d.rows = 32;
        d.cols = 4096;
        d.x_dtype = d.y_dtype = DType::bf16;
        return softmax_kernel_desc(softmax_resolve("xk-info", d));
    }));
    for (auto [name, wt, m] : {std::tuple{"woq int4 decode", WoqWeightType::u4, int64_t(1)},
                               std::tuple{"woq int8 decode", WoqWeightType::s8, int64_t(1)},
                               std::tuple{"woq int4 prefill", WoqWeightType::u4, int64_t(512)}})
        v.push_back(pick(name, woq_registry(), [wt = wt, m = m] {
            WoqDesc d;
            d.M = m, d.N = 4096, d.K = 4096, d.weight_type = wt, d.a_type = DType::bf16;
            return woq_check_desc("xk-info", d);
        }));
    v.push_back(pick("woq int4 int8-compute", woq_registry(), [] {
        WoqDesc d;
        d.M = 16, d.N = 4096, d.K = 4096, d.weight_type = WoqWeightType::u4, d.a_type = DType::bf16;
        d.compute = WoqCompute::int8;
        return woq_check_desc("xk-info", d);
    }));
    v.push_back(pick("attention", attention_registry(), [] {
        AttnKernelDesc d;  // decode / prefill of head_dim 128 over a bf16 cache
        d.head_dim = 128;
        d.kv_dtype = DType::bf16;
        return d;
    }));
    v.push_back(pick("roi_align", roi_align_registry(), [] {
        RoiAlignDesc d;  // Mask R-CNN box head, channels-last
        d.c = 256; d.h = 200; d.w = 272; d.num_rois = 1000; d.pooled_h = d.pooled_w = 7;
        d.layout = ConvLayout::nhwc;
        return roi_align_validate_desc("xk-info", d);
    }));
    v.push_back(pick("nms", nms_registry(), [] {
        NmsDesc d;
        d.num_boxes = 5000;
        return nms_validate_desc("xk-info", d);
    }));
    v.push_back(pick("frozen_batch_norm", frozen_bn_registry(), [] {
        FrozenBatchNormDesc d;
        d.c = 256; d.h = 56; d.w = 56; d.layout = ConvLayout::nhwc; d.activation = Activation::relu;
        return frozen_bn_validate_desc("xk-info", d);
    }));
    // qconv2d routes by a one-time timing (gemm:qconv vs onednn:qconv): the route and what decided it.
    try {
        QConvDesc q;  // ResNet-50 conv2_x 3x3, u8 -> u8, bias + ReLU
        q.c = 64; q.h = 56; q.w = 56; q.oc = 64; q.kh = q.kw = 3;
        q.pad_top = q.pad_bottom = q.pad_left = q.pad_right = 1;
        q.dst_dtype = DType::u8; q.with_bias = true; q.activation = Activation::relu;
        const QConvProblem p = qconv_validate_desc("xk-info", q);
        const char* how = "";
        const auto sel = qconv_select(p, &how);
        const std::string be = sel.kernel->backend_info();
        v.push_back({"qconv2d", p.key(), std::string(sel.impl->name) + (be.empty() ? "" : " " + be) + " (" + how + ")"});
    } catch (const std::exception& e) {
        v.push_back({"qconv2d", "?", std::string("none (") + e.what() + ")"});
    }
    return v;
}

}  // namespace xk::tools
