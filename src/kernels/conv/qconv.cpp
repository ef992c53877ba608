// int8 convolution (xk/conv.hpp QConvDesc): validation, the reference, and "gemm:qconv" — xk's
// int8 GEMM (u8|s8 x s8, per-channel weight scales, bias / activation / requantization fused) on
// the NHWC rows: one GEMM per group for 1x1 / stride 1 / unpadded, else im2col row blocks (~256 KiB,
// padded with the source zero point) in one parallel region, each block one GEMM per group.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "common/parallel.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/conv/conv.hpp"
#include "kernels/conv/route_tune.hpp"
#include "xk/gemm.hpp"

namespace xk {
namespace detail {
namespace {

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

ConvDesc geometry(const QConvDesc& q) {
    ConvDesc d;
    d.n = q.n; d.c = q.c; d.h = q.h; d.w = q.w; d.oc = q.oc; d.kh = q.kh; d.kw = q.kw;
    d.stride_h = q.stride_h; d.stride_w = q.stride_w;
    d.pad_top = q.pad_top; d.pad_bottom = q.pad_bottom; d.pad_left = q.pad_left; d.pad_right = q.pad_right;
    d.dilation_h = q.dilation_h; d.dilation_w = q.dilation_w;
    d.groups = q.groups;
    d.layout = ConvLayout::nhwc;
    d.weight_layout = ConvWeightLayout::ohwi;
    return d;
}

bool direct_1x1(const QConvProblem& p) {
    const QConvDesc& d = p.d;
    return d.kh == 1 && d.kw == 1 && d.stride_h == 1 && d.stride_w == 1 && d.pad_top == 0 && d.pad_bottom == 0 &&
           d.pad_left == 0 && d.pad_right == 0;
}

// One group's GEMM over `rows` rows of A (lda: the row stride of the NHWC source or im2col buffer),
// C = the group's OC/groups columns of the NHWC dst rows.
GemmDesc gemm_desc(const QConvProblem& p, int64_t rows, int64_t lda) {
    const QConvDesc& d = p.d;
    GemmDesc g;
    g.M = rows;
    g.N = d.oc / d.groups;
    g.K = d.kh * d.kw * (d.c / d.groups);
    if (d.groups > 1) g.lda = lda, g.ldc = d.oc;
    g.trans_b = Trans::T;  // OHWI weights = B^T [OC/groups][K] per group
    g.a_type = d.src_dtype;
    g.b_type = DType::s8;
    g.c_type = d.dst_dtype;
    g.b_scale_per_channel = true;
    g.epilogue.bias = d.with_bias;
    g.epilogue.act = d.activation;
    return g;
}

// Group `grp` (of OCg output channels): its weights / scales / bias / dst columns.
GemmArgs gemm_args(const QConvArgs& a, const void* A, void* C, int64_t grp, int64_t ocg, int64_t kg) {
    GemmArgs g;
    g.A = A;
    g.B = a.weights ? a.weights + grp * ocg * kg : nullptr;
    g.C = C;
    g.bias = a.bias ? a.bias + grp * ocg : nullptr;
    g.a_scale = &a.src_scale;
    g.b_scales = a.weight_scales + grp * ocg;
    g.a_zero_point = a.src_zero_point;
    g.c_scale = &a.dst_scale;
    g.c_zero_point = a.dst_zero_point;
    return g;
}

struct GemmQPacked final : QConvPackedData {
    std::vector<PackedB> full, tail;  // per group
};

struct PlainQPacked final : QConvPackedData {
    std::vector<int8_t> w;
};

class GemmQConv final : public QConvKernel {
public:
    explicit GemmQConv(const QConvProblem& p) : p_(p) {
        const QConvDesc& d = p.d;
        rows_ = d.n * p.oh * p.ow;
        k_ = d.kh * d.kw * d.c;  // an im2col row: every group's taps, group after group
        groups_ = d.groups;
        ocg_ = d.oc / d.groups;
        kg_ = k_ / d.groups;
        if (direct_1x1(p)) {
            block_ = rows_;
        } else {
            block_ = std::clamp<int64_t>((int64_t{256} << 10) / std::max<int64_t>(1, k_), 32, 1024);
            block_ = std::min(block_, rows_);
        }
        const int64_t lda = direct_1x1(p) ? d.c : k_;
        full_ = std::make_shared<GemmPlan>(gemm_desc(p, block_, lda));
        if (rows_ % block_) tail_ = std::make_shared<GemmPlan>(gemm_desc(p, rows_ % block_, lda));
    }

    std::shared_ptr<const QConvPackedData> pack(const int8_t* weights) const override {
        auto pk = std::make_shared<GemmQPacked>();
        pk->key = qconv_packed_key("gemm:qconv", p_);
        for (int64_t g = 0; g < groups_; ++g) {
            const int8_t* wg = weights + g * ocg_ * kg_;
            pk->full.push_back(full_->pack_b(wg));
            if (tail_) pk->tail.push_back(tail_->pack_b(wg));
        }
        return pk;
    }

    void run(const QConvArgs& a, const QConvPackedData* packed) const override {
        // Without a pack: B packed once per call (the GEMM's transposed-B packing otherwise runs
        // per row block and dominated the 7x7x512 layer).
        std::shared_ptr<const QConvPackedData> own;
        if (!packed) {
            own = pack(a.weights);
            packed = own.get();
        }
        const auto& pk = static_cast<const GemmQPacked&>(*packed);
        const QConvDesc& d = p_.d;
        const int64_t es_dst = dtype_size(d.dst_dtype);
        if (direct_1x1(p_)) {
            for (int64_t g = 0; g < groups_; ++g)
                full_->run(gemm_args(a, static_cast<const uint8_t*>(a.src) + g * kg_,
                                     static_cast<char*>(a.dst) + g * ocg_ * es_dst, g, ocg_, kg_),
                           pk.full[static_cast<size_t>(g)]);
            return;
        }
        const int64_t nblocks = (rows_ + block_ - 1) / block_;
        const uint8_t pad = static_cast<uint8_t>(a.src_zero_point);  // u8 or s8 bit pattern
        parallel_for(nblocks, 1, [&](int64_t b0, int64_t b1) {
            thread_local std::vector<uint8_t> col;
            col.resize(static_cast<size_t>(block_ * k_));
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t r0 = b * block_, r1 = std::min(rows_, r0 + block_);
                im2col(a, col.data(), r0, r1, pad);
                const bool full = r1 - r0 == block_;
                for (int64_t g = 0; g < groups_; ++g)
                    (full ? *full_ : *tail_)
                        .run(gemm_args(a, col.data() + g * kg_, static_cast<char*>(a.dst) + (r0 * d.oc + g * ocg_) * es_dst,
                                       g, ocg_, kg_),
                             full ? pk.full[static_cast<size_t>(g)] : pk.tail[static_cast<size_t>(g)]);
            }
        });
    }

private:
    // Rows [r0, r1) of the im2col matrix: per tap (ky, kx), group g's C/groups channels at
    // g*kg_ + (ky*KW + kx)*(C/groups) (the OHWI order of its weights); padding reads `pad`.
    void im2col(const QConvArgs& a, uint8_t* col, int64_t r0, int64_t r1, uint8_t pad) const {
        const QConvDesc& d = p_.d;
        const int64_t cg = d.c / groups_;
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / (p_.oh * p_.ow), oy = (r / p_.ow) % p_.oh, ox = r % p_.ow;
            uint8_t* row = col + (r - r0) * k_;
            for (int64_t ky = 0; ky < d.kh; ++ky) {
                const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                for (int64_t kx = 0; kx < d.kw; ++kx) {
                    const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                    const bool in = y >= 0 && y < d.h && x >= 0 && x < d.w;
                    const uint8_t* s = in ? static_cast<const uint8_t*>(a.src) + ((n * d.h + y) * d.w + x) * d.c : nullptr;
                    if (groups_ == 1) {
                        uint8_t* t = row + (ky * d.kw + kx) * d.c;
                        if (in) std::memcpy(t, s, static_cast<size_t>(d.c));
                        else std::memset(t, pad, static_cast<size_t>(d.c));
                        continue;
                    }
                    for (int64_t g = 0; g < groups_; ++g) {
                        uint8_t* t = row + g * kg_ + (ky * d.kw + kx) * cg;
                        if (in) std::memcpy(t, s + g * cg, static_cast<size_t>(cg));
                        else std::memset(t, pad, static_cast<size_t>(cg));
                    }
                }
            }
        }
    }

    QConvProblem p_;
    int64_t rows_ = 0, k_ = 0, block_ = 1, groups_ = 1, ocg_ = 1, kg_ = 1;
    std::shared_ptr<GemmPlan> full_, tail_;
};

struct RefQConv final : QConvKernel {
    explicit RefQConv(const QConvProblem& p) : p_(p) {}
    void run(const QConvArgs& a, const QConvPackedData* packed) const override {
        QConvArgs b = a;
        if (packed) b.weights = static_cast<const PlainQPacked*>(packed)->w.data();
        qconv2d_reference(p_, b);
    }
    std::shared_ptr<const QConvPackedData> pack(const int8_t* weights) const override {
        auto pk = std::make_shared<PlainQPacked>();
        pk->key = qconv_packed_key("ref:scalar", p_);
        pk->w.assign(weights, weights + p_.d.oc * p_.d.kh * p_.d.kw * (p_.d.c / p_.d.groups));
        return pk;
    }
    QConvProblem p_;
};

}  // namespace

std::string QConvProblem::key() const {
    std::ostringstream os;
    os << ConvProblem{geometry(d), oh, ow}.key() << "_q" << dtype_name(d.src_dtype) << ":" << dtype_name(d.dst_dtype)
       << (d.with_bias ? "_bias" : "") << "_act:" << activation_name(d.activation);
    return os.str();
}

QConvProblem qconv_validate_desc(const char* fn, const QConvDesc& d) {
    if (!valid_activation(d.activation))
        fail_arg(fn, "activation", std::to_string(static_cast<int>(d.activation)),
                 "is not a valid value (valid: none=0, relu=1, gelu_erf=2, gelu_tanh=3, silu=4)");
    if (d.src_dtype != DType::u8 && d.src_dtype != DType::s8)
        fail(Status::unsupported, std::string(fn) + ": src_dtype=" + dtype_name(d.src_dtype) + " is not supported (u8 or s8)");
    if (d.dst_dtype != DType::u8 && d.dst_dtype != DType::s8 && d.dst_dtype != DType::f32)
        fail(Status::unsupported,
             std::string(fn) + ": dst_dtype=" + dtype_name(d.dst_dtype) + " is not supported (u8, s8 or f32)");
    const ConvProblem g = conv_validate_desc(fn, geometry(d));
    const int64_t K = d.kh * d.kw * (d.c / d.groups);  // groups validated above (divides C and OC)
    if (K > 33025)
        fail_arg(fn, "KH*KW*C/groups", std::to_string(K), "must be <= 33025 (the int32 accumulation could overflow)");
    QConvProblem p;
    p.d = d;
    p.oh = g.oh;
    p.ow = g.ow;
    return p;
}

void qconv_validate_args(const char* fn, const QConvProblem& p, const QConvArgs& a, bool weights_packed) {
    const QConvDesc& d = p.d;
    check_not_null(fn, "src", a.src);
    if (!weights_packed) check_not_null(fn, "weights", a.weights);
    check_not_null(fn, "dst", a.dst);
    check_not_null(fn, "weight_scales", a.weight_scales);
    if (d.with_bias) check_not_null(fn, "bias", a.bias);
    else if (a.bias) fail_arg(fn, "bias", ptr_str(a.bias), "is given but with_bias is false");
    if (reinterpret_cast<uintptr_t>(a.weight_scales) % 4) fail_arg(fn, "weight_scales", ptr_str(a.weight_scales), "must be aligned to 4 bytes");
    if (a.bias && reinterpret_cast<uintptr_t>(a.bias) % 4) fail_arg(fn, "bias", ptr_str(a.bias), "must be aligned to 4 bytes");
    if (reinterpret_cast<uintptr_t>(a.dst) % static_cast<uintptr_t>(dtype_size(d.dst_dtype)))
        fail_arg(fn, "dst", ptr_str(a.dst), "must be aligned to its element size");
    if (!std::isfinite(a.src_scale) || !(a.src_scale > 0.0f)) fail_arg(fn, "src_scale", float_str(a.src_scale), "must be finite and > 0");
    const bool su8 = d.src_dtype == DType::u8;
    if (a.src_zero_point < (su8 ? 0 : -128) || a.src_zero_point > (su8 ? 255 : 127))
        fail_arg(fn, "src_zero_point", std::to_string(a.src_zero_point), su8 ? "must be in [0, 255]" : "must be in [-128, 127]");
    if (d.dst_dtype == DType::u8 || d.dst_dtype == DType::s8) {
        if (!std::isfinite(a.dst_scale) || !(a.dst_scale > 0.0f)) fail_arg(fn, "dst_scale", float_str(a.dst_scale), "must be finite and > 0");
        const bool du8 = d.dst_dtype == DType::u8;
        if (a.dst_zero_point < (du8 ? 0 : -128) || a.dst_zero_point > (du8 ? 255 : 127))
            fail_arg(fn, "dst_zero_point", std::to_string(a.dst_zero_point), du8 ? "must be in [0, 255]" : "must be in [-128, 127]");
    }
    const int64_t src_b = d.n * d.h * d.w * d.c, wei_b = d.oc * d.kh * d.kw * (d.c / d.groups);
    const int64_t dst_b = d.n * p.oh * p.ow * d.oc * dtype_size(d.dst_dtype);
    if (overlaps(a.dst, dst_b, a.src, src_b)) fail_arg(fn, "dst", ptr_str(a.dst), "overlaps src=" + ptr_str(a.src));
    if (!weights_packed && overlaps(a.dst, dst_b, a.weights, wei_b)) fail_arg(fn, "dst", ptr_str(a.dst), "overlaps weights");
    if (overlaps(a.dst, dst_b, a.weight_scales, d.oc * 4)) fail_arg(fn, "dst", ptr_str(a.dst), "overlaps weight_scales");
    if (a.bias && overlaps(a.dst, dst_b, a.bias, d.oc * 4)) fail_arg(fn, "dst", ptr_str(a.dst), "overlaps bias");
    // Every scale finite and > 0: a branch-free pass (it vectorises), then the first bad one named.
    int bad = 0;
    for (int64_t o = 0; o < d.oc; ++o) bad |= !(a.weight_scales[o] > 0.0f) | !(a.weight_scales[o] <= FLT_MAX);
    if (bad)
        for (int64_t o = 0; o < d.oc; ++o)
            if (!std::isfinite(a.weight_scales[o]) || !(a.weight_scales[o] > 0.0f))
                fail_arg(fn, "weight_scales", "weight_scales[" + std::to_string(o) + "]=" + float_str(a.weight_scales[o]),
                         "must be finite and > 0");
}

void qconv2d_reference(const QConvProblem& p, const QConvArgs& a) {
    const QConvDesc& d = p.d;
    const bool su8 = d.src_dtype == DType::u8;
    const float inv = 1.0f / a.dst_scale;
    const int64_t cg = d.c / d.groups, ocg = d.oc / d.groups;
    parallel_for(d.n * p.oh, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const int64_t n = r / p.oh, oy = r % p.oh;
            for (int64_t ox = 0; ox < p.ow; ++ox)
                for (int64_t o = 0; o < d.oc; ++o) {
                    const int64_t c0 = (o / ocg) * cg;  // the group's first input channel
                    int32_t acc = 0;
                    for (int64_t ky = 0; ky < d.kh; ++ky) {
                        const int64_t y = oy * d.stride_h - d.pad_top + ky * d.dilation_h;
                        if (y < 0 || y >= d.h) continue;
                        for (int64_t kx = 0; kx < d.kw; ++kx) {
                            const int64_t x = ox * d.stride_w - d.pad_left + kx * d.dilation_w;
                            if (x < 0 || x >= d.w) continue;
                            for (int64_t c = 0; c < cg; ++c) {
                                const int64_t si = ((n * d.h + y) * d.w + x) * d.c + c0 + c;
                                const int32_t s = su8 ? static_cast<const uint8_t*>(a.src)[si] : static_cast<const int8_t*>(a.src)[si];
                                acc += (s - a.src_zero_point) * a.weights[((o * d.kh + ky) * d.kw + kx) * cg + c];
                            }
                        }
                    }
                    float v = a.src_scale * a.weight_scales[o] * static_cast<float>(acc);
                    if (d.with_bias) v += a.bias[o];
                    v = apply_activation(d.activation, v);
                    const int64_t di = ((n * p.oh + oy) * p.ow + ox) * d.oc + o;
                    if (d.dst_dtype == DType::f32) {
                        static_cast<float*>(a.dst)[di] = v;
                    } else {
                        const bool du8 = d.dst_dtype == DType::u8;
                        const float lo = du8 ? 0.0f : -128.0f, hi = du8 ? 255.0f : 127.0f;
                        float q = std::nearbyint(v * inv) + static_cast<float>(a.dst_zero_point);
                        q = std::isnan(q) ? lo : std::min(hi, std::max(lo, q));
                        if (du8) static_cast<uint8_t*>(a.dst)[di] = static_cast<uint8_t>(q);
                        else static_cast<int8_t*>(a.dst)[di] = static_cast<int8_t>(q);
                    }
                }
        }
    });
}

std::string qconv_packed_key(const char* impl, const QConvProblem& p) { return std::string(impl) + "|" + p.key(); }

const Registry<QConvProblem, QConvKernel>& qconv_registry() {
    static const Registry<QConvProblem, QConvKernel> r(
        "qconv2d", {
                       // Reached through qconv_select() only (measured routing), never by select().
                       {"onednn:qconv", Isa::avx512_vnni, onednn_qconv_supports, create_onednn_qconv, /*selectable=*/false},
                       {"gemm:qconv", Isa::avx2, nullptr,
                        [](const QConvProblem& p) -> std::shared_ptr<const QConvKernel> { return std::make_shared<GemmQConv>(p); }},
                       {"ref:scalar", Isa::scalar, nullptr,
                        [](const QConvProblem& p) -> std::shared_ptr<const QConvKernel> { return std::make_shared<RefQConv>(p); }},
                   });
    return r;
}

// ---- routing: gemm:qconv or onednn:qconv, by a one-time timing (route_tune.hpp) ----
namespace {

using QReg = Registry<QConvProblem, QConvKernel>;

route::Decisions<QReg::ImplT>& qdecisions() {
    static route::Decisions<QReg::ImplT> d;
    return d;
}

// Times gemm:qconv against onednn:qconv (route::time_routes) on scratch operands of the
// descriptor's extents (u8 / s8 source with zero point 0, unit-ish scales, packed weights on both
// sides). oneDNN is kept only when >= 5% faster (ours is exact).
const QReg::ImplT* qtune_run(const QConvProblem& p, const QReg::ImplT& gemm, const QReg::ImplT& dnn,
                             const std::string& key) {
    const QReg& reg = qconv_registry();
    const QConvDesc& d = p.d;
    const double t_start = now_us();
    const int64_t src_b = d.n * d.h * d.w * d.c, wei_b = d.oc * d.kh * d.kw * (d.c / d.groups);
    const int64_t dst_b = d.n * p.oh * p.ow * d.oc * dtype_size(d.dst_dtype);
    const QReg::ImplT* best = &gemm;
    std::string why;
    try {
        if (src_b + wei_b + dst_b > route::kMaxTuneBytes) {
            best = &dnn;  // too large to time here: oneDNN's JIT kernel (the measured rule)
            why = ",not timed (operands > 256 MiB)";
        } else {
            const auto kg = reg.get(p, gemm).kernel;
            const auto kd = reg.get(p, dnn).kernel;
            std::vector<uint8_t> src(static_cast<size_t>(src_b)), dst(static_cast<size_t>(dst_b) + 64);
            std::vector<int8_t> wei(static_cast<size_t>(wei_b));
            std::vector<float> bias(static_cast<size_t>(d.oc), 0.25f), ws(static_cast<size_t>(d.oc), 1.0f / 512);
            for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 37) % 127);
            for (size_t i = 0; i < wei.size(); ++i) wei[i] = static_cast<int8_t>(static_cast<int>((i * 29) % 255) - 127);
            QConvArgs a;
            a.src = src.data();
            a.bias = d.with_bias ? bias.data() : nullptr;
            a.dst = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(dst.data()) + 63) / 64 * 64);
            a.weight_scales = ws.data();
            a.src_scale = 1.0f / 64;
            a.dst_scale = 0.5f;
            a.dst_zero_point = d.dst_dtype == DType::u8 ? 1 : 0;
            const auto pg = kg->pack(wei.data());
            const auto pd = kd->pack(wei.data());
            const route::Timing t = route::time_routes([&] { kg->run(a, pg.get()); }, [&] { kd->run(a, pd.get()); });
            if (t.b_us < (1.0 - route::kMinGain) * t.a_us) best = &dnn;
            why = ",gemm:qconv=" + route::us_str(t.a_us) + ",onednn:qconv(" + kd->backend_info().substr(7) +
                  ")=" + route::us_str(t.b_us) + ",rounds:" + std::to_string(t.rounds);
        }
    } catch (const std::exception& e) {
        best = &gemm;  // oneDNN could not make or run it, or scratch memory ran out: ours
        why = std::string(",not timed: ") + e.what();
    }
    verbose_log("tune", "qconv2d", key + why + ",pick:" + best->name, now_us() - t_start);
    return best;
}

}  // namespace

QReg::Selected qconv_select(const QConvProblem& p, const char** how) {
    const QReg& reg = qconv_registry();
    const QReg::ImplT& pick = reg.select(p, max_isa());
    const char* h = "registry";
    const QReg::ImplT* impl = &pick;
    if (std::strcmp(pick.name, "gemm:qconv") == 0) {
        const QReg::ImplT& dnn = reg.find("onednn:qconv");
        const char* env = std::getenv("XK_QCONV_IMPL");
        const std::string force = env ? env : "";
        if (force == "gemm") {
            h = "forced";
        } else if (dnn.isa <= max_isa() && isa_supported(dnn.isa) && onednn_qconv_supports(p)) {
            if (force == "onednn") {
                h = "forced", impl = &dnn;
            } else if (p.d.groups > 1) {
                // Grouped / depthwise: oneDNN, not timed — ours runs one GEMM of OC/groups columns
                // per group and block (56x56x144 depthwise, 1 thread: 497 ms against oneDNN's
                // brdgmm_dw 0.19 ms), so the timing alone would cost seconds.
                h = "grouped", impl = &dnn;
            } else {
                const std::string key = route::decision_key(p.key());
                impl = qdecisions().get(key, [&] { return qtune_run(p, pick, dnn, key); }, &h);
            }
        }
    }
    if (how) *how = h;
    return reg.get(p, *impl);
}

void qconv_tune_clear() { qdecisions().clear(); }

struct QConvPlanState {
    QConvProblem p;
    const char* impl = nullptr;
    std::string backend, packed_key;
    std::shared_ptr<const QConvKernel> kernel;
};

}  // namespace detail

QConvPlan::QConvPlan(const QConvDesc& desc) {
    auto s = std::make_shared<detail::QConvPlanState>();
    s->p = detail::qconv_validate_desc("xk::QConvPlan", desc);
    const char* how = "";
    const auto sel = detail::qconv_select(s->p, &how);
    s->impl = sel.impl->name;
    s->kernel = sel.kernel;
    s->backend = sel.kernel->backend_info();
    s->packed_key = detail::qconv_packed_key(s->impl, s->p);
    if (detail::verbose_level() >= 1)
        detail::verbose_log("plan", "qconv2d",
                            std::string(s->impl) + (s->backend.empty() ? "" : "(" + s->backend + ")") + "," + s->p.key() +
                                ",route:" + how,
                            0.0);
    s_ = std::move(s);
}

void QConvPlan::run(const QConvArgs& args) const {
    detail::qconv_validate_args("xk::QConvPlan::run", s_->p, args);
    s_->kernel->run(args);
}

void QConvPlan::run(const QConvArgs& args, const QConvPackedWeights& packed_weights) const {
    constexpr const char* fn = "xk::QConvPlan::run";
    if (packed_weights.empty()) detail::fail_arg(fn, "packed_weights", "empty", "must come from QConvPlan::pack_weights");
    if (packed_weights.data_->key != s_->packed_key)
        detail::fail_arg(fn, "packed_weights", packed_weights.data_->key,
                         "was packed by a plan of another descriptor or implementation (this plan: " + s_->packed_key + ")");
    detail::qconv_validate_args(fn, s_->p, args, /*weights_packed=*/true);
    s_->kernel->run(args, packed_weights.data_.get());
}

QConvPackedWeights QConvPlan::pack_weights(const int8_t* weights) const {
    detail::check_not_null("xk::QConvPlan::pack_weights", "weights", weights);
    QConvPackedWeights w;
    w.data_ = s_->kernel->pack(weights);
    return w;
}

const char* QConvPlan::impl_name() const { return s_->impl; }
std::string QConvPlan::backend_info() const { return s_->backend; }

void qconv2d(const QConvDesc& desc, const QConvArgs& args) {
    constexpr const char* fn = "xk::qconv2d";
    const detail::QConvProblem p = detail::qconv_validate_desc(fn, desc);
    detail::qconv_validate_args(fn, p, args);
    detail::qconv_select(p).kernel->run(args);
}

const char* qconv2d_impl_name(const QConvDesc& desc) {
    const detail::QConvProblem p = detail::qconv_validate_desc("xk::qconv2d_impl_name", desc);
    return detail::qconv_select(p).impl->name;
}

}  // namespace xk
