// Conv family: validation, registry and public entry points.
#include "kernels/conv/conv.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <vector>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/conv/route_tune.hpp"

namespace xk {

const char* conv_layout_name(ConvLayout l) noexcept {
    switch (l) {
        case ConvLayout::nchw: return "nchw";
        case ConvLayout::nhwc: return "nhwc";
    }
    return "?";
}

const char* conv_weight_layout_name(ConvWeightLayout l) noexcept {
    switch (l) {
        case ConvWeightLayout::oihw: return "oihw";
        case ConvWeightLayout::ohwi: return "ohwi";
    }
    return "?";
}

const char* conv_residual_name(ConvResidual r) noexcept {
    switch (r) {
        case ConvResidual::none: return "none";
        case ConvResidual::add_before_activation: return "add_before_activation";
        case ConvResidual::add_after_activation: return "add_after_activation";
    }
    return "?";
}

namespace detail {
namespace {

struct ExtentNames {
    const char* input;
    const char* kernel;
    const char* stride;
    const char* pad_begin;
    const char* pad_end;
    const char* dilation;
    const char* output;
};

int64_t output_extent(const char* fn, const ExtentNames& nm, int64_t input, int64_t kernel, int64_t stride,
                      int64_t pad_begin, int64_t pad_end, int64_t dilation) {
    check_positive(fn, nm.input, input);
    check_positive(fn, nm.kernel, kernel);
    check_positive(fn, nm.stride, stride);
    check_nonnegative(fn, nm.pad_begin, pad_begin);
    check_nonnegative(fn, nm.pad_end, pad_end);
    check_positive(fn, nm.dilation, dilation);
    // The names of the sums are formatted only when one overflows (checked_* then throw): a call
    // of xk::conv2d validates its descriptor every time.
    constexpr int64_t kLim = std::numeric_limits<int64_t>::max() / 16;  // checked_*'s default limit
    int64_t padded = 0, span = 0;
    if (__builtin_add_overflow(input, pad_begin, &padded) || padded > kLim ||
        __builtin_add_overflow(padded, pad_end, &padded) || padded > kLim) {
        const std::string w = std::string(nm.input) + "+" + nm.pad_begin + "+" + nm.pad_end;
        checked_add(fn, w.c_str(), checked_add(fn, w.c_str(), input, pad_begin), pad_end);
    }
    if (__builtin_mul_overflow(dilation, kernel - 1, &span) || span > kLim ||
        __builtin_add_overflow(span, int64_t{1}, &span) || span > kLim) {
        const std::string w = std::string(nm.dilation) + "*(" + nm.kernel + "-1)";
        checked_add(fn, w.c_str(), checked_mul(fn, w.c_str(), dilation, kernel - 1), 1);  // effective kernel extent
    }
    if (span > padded) {
        const std::string padded_what = std::string(nm.input) + "+" + nm.pad_begin + "+" + nm.pad_end;
        std::ostringstream os;
        os << "must be >= 1: the effective kernel " << nm.dilation << "*(" << nm.kernel << "-1)+1=" << span
           << " exceeds the padded input " << padded_what << "=" << padded << " (" << nm.input << "=" << input << ", "
           << nm.kernel << "=" << kernel << ", " << nm.pad_begin << "=" << pad_begin << ", " << nm.pad_end << "="
           << pad_end << ", " << nm.dilation << "=" << dilation << ")";
        // The output size the formula gives, floor(num / stride) + 1 with num = padded - span < 0,
        // as -((-num - 1) / stride): no intermediate overflows (-num + stride did for a stride near
        // INT64_MAX: found by fuzz_conv).
        const int64_t num = padded - span;
        fail_arg(fn, nm.output, std::to_string(-((-num - 1) / stride)), os.str());
    }
    return (padded - span) / stride + 1;
}

constexpr ExtentNames kNamesH{"H", "KH", "stride_h", "pad_top", "pad_bottom", "dilation_h", "OH"};
constexpr ExtentNames kNamesW{"W", "KW", "stride_w", "pad_left", "pad_right", "dilation_w", "OW"};

bool valid_dtype(DType t) { return static_cast<int>(t) >= 0 && static_cast<int>(t) <= static_cast<int>(DType::s32); }

void check_enum(const char* fn, const char* arg, int v, bool ok, const char* valid) {
    if (!ok) fail_arg(fn, arg, std::to_string(v), std::string("is not a valid value (valid: ") + valid + ")");
}

int64_t elem_size(DType t) { return dtype_size(t); }

void check_aligned(const char* fn, const char* arg, const void* p, int64_t align) {
    if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) != 0)
        fail_arg(fn, arg, ptr_str(p), "must be aligned to its element size (" + std::to_string(align) + " bytes)");
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

struct RefConv final : ConvKernel {
    explicit RefConv(const ConvProblem& p) : ConvKernel(p) {}
    void run(const ConvArgs& a, const ConvPacked* packed) const override {
        ConvArgs b = a;
        b.weights = conv_plain_weights(a, packed);
        conv2d_reference(p_, b);
    }
};

struct PlainPacked final : ConvPacked {
    PlainPacked(std::string l, const void* w, size_t n) : ConvPacked(std::move(l)), buf(n) {
        std::memcpy(buf.data(), w, n);
        data = buf.data();
        bytes = n;
    }
    std::vector<unsigned char> buf;
};

}  // namespace

std::string ConvProblem::key() const {
    std::ostringstream os;
    os << "n" << d.n << "c" << d.c << "h" << d.h << "w" << d.w << "_oc" << d.oc << "_k" << d.kh << "x" << d.kw << "_s"
       << d.stride_h << "x" << d.stride_w << "_p" << d.pad_top << "," << d.pad_bottom << "," << d.pad_left << ","
       << d.pad_right << "_d" << d.dilation_h << "x" << d.dilation_w << "_g" << d.groups << "_"
       << conv_layout_name(d.layout) << "_" << conv_weight_layout_name(d.weight_layout) << "_"
       << dtype_name(d.src_dtype) << ":" << dtype_name(d.weight_dtype) << ":" << dtype_name(d.dst_dtype)
       << (d.with_bias ? "_bias" : "_nobias") << "_res:" << conv_residual_name(d.residual)
       << "_act:" << activation_name(d.activation);
    return os.str();
}

ConvProblem conv_validate_desc(const char* fn, const ConvDesc& d) {
    // Enumerations first: nothing else can be interpreted with a bad one.
    check_enum(fn, "layout", static_cast<int>(d.layout),
               d.layout == ConvLayout::nchw || d.layout == ConvLayout::nhwc, "nchw=0, nhwc=1");
    check_enum(fn, "weight_layout", static_cast<int>(d.weight_layout),
               d.weight_layout == ConvWeightLayout::oihw || d.weight_layout == ConvWeightLayout::ohwi,
               "oihw=0, ohwi=1");
    check_enum(fn, "residual", static_cast<int>(d.residual),
               static_cast<int>(d.residual) >= 0 && static_cast<int>(d.residual) <= 2,
               "none=0, add_before_activation=1, add_after_activation=2");
    check_enum(fn, "activation", static_cast<int>(d.activation), valid_activation(d.activation),
               "none=0, relu=1, gelu_erf=2, gelu_tanh=3, silu=4");
    check_enum(fn, "src_dtype", static_cast<int>(d.src_dtype), valid_dtype(d.src_dtype), "a DType");
    check_enum(fn, "weight_dtype", static_cast<int>(d.weight_dtype), valid_dtype(d.weight_dtype), "a DType");
    check_enum(fn, "dst_dtype", static_cast<int>(d.dst_dtype), valid_dtype(d.dst_dtype), "a DType");
    const bool f32 = d.src_dtype == DType::f32 && d.weight_dtype == DType::f32 && d.dst_dtype == DType::f32;
    const bool bf = d.src_dtype == DType::bf16 && d.weight_dtype == DType::bf16 &&
                    (d.dst_dtype == DType::bf16 || d.dst_dtype == DType::f32);
    if (!f32 && !bf)
        fail(Status::unsupported, std::string(fn) + ": src_dtype=" + dtype_name(d.src_dtype) +
                                      " weight_dtype=" + dtype_name(d.weight_dtype) + " dst_dtype=" +
                                      dtype_name(d.dst_dtype) +
                                      " is not supported (supported src/weights/dst: f32/f32/f32, bf16/bf16/bf16, "
                                      "bf16/bf16/f32)");

    check_positive(fn, "N", d.n);
    check_positive(fn, "C", d.c);
    check_positive(fn, "OC", d.oc);
    check_positive(fn, "groups", d.groups);
    if (d.c % d.groups != 0)
        fail_arg(fn, "groups", std::to_string(d.groups), "must divide C=" + std::to_string(d.c));
    if (d.oc % d.groups != 0)
        fail_arg(fn, "groups", std::to_string(d.groups), "must divide OC=" + std::to_string(d.oc));

    ConvProblem p;
    p.d = d;
    p.oh = output_extent(fn, kNamesH, d.h, d.kh, d.stride_h, d.pad_top, d.pad_bottom, d.dilation_h);
    p.ow = output_extent(fn, kNamesW, d.w, d.kw, d.stride_w, d.pad_left, d.pad_right, d.dilation_w);

    checked_mul(fn, "N*C*H*W", checked_mul(fn, "N*C*H*W", checked_mul(fn, "N*C*H*W", d.n, d.c), d.h), d.w);
    checked_mul(fn, "OC*(C/groups)*KH*KW",
                checked_mul(fn, "OC*(C/groups)*KH*KW", checked_mul(fn, "OC*(C/groups)*KH*KW", d.oc, p.icg()), d.kh),
                d.kw);
    checked_mul(fn, "N*OC*OH*OW", checked_mul(fn, "N*OC*OH*OW", checked_mul(fn, "N*OC*OH*OW", d.n, d.oc), p.oh), p.ow);
    return p;
}

void conv_validate_args(const char* fn, const ConvProblem& p, const ConvArgs& a) {
    const ConvDesc& d = p.d;
    const int64_t src_bytes = d.n * d.c * d.h * d.w * elem_size(d.src_dtype);
    const int64_t wei_bytes = d.oc * p.icg() * d.kh * d.kw * elem_size(d.weight_dtype);
    const int64_t dst_bytes = d.n * d.oc * p.oh * p.ow * elem_size(d.dst_dtype);

    check_not_null(fn, "src", a.src);
    check_not_null(fn, "weights", a.weights);
    check_not_null(fn, "dst", a.dst);
    if (d.with_bias) check_not_null(fn, "bias", a.bias);
    else if (a.bias) fail_arg(fn, "bias", ptr_str(a.bias), "is given but with_bias is false");
    if (d.residual != ConvResidual::none) check_not_null(fn, "residual", a.residual);
    else if (a.residual) fail_arg(fn, "residual", ptr_str(a.residual), "is given but residual is none");

    check_aligned(fn, "src", a.src, elem_size(d.src_dtype));
    check_aligned(fn, "weights", a.weights, elem_size(d.weight_dtype));
    check_aligned(fn, "dst", a.dst, elem_size(d.dst_dtype));
    if (a.bias) check_aligned(fn, "bias", a.bias, 4);
    if (a.residual) check_aligned(fn, "residual", a.residual, elem_size(d.dst_dtype));

    if (overlaps(a.dst, dst_bytes, a.src, src_bytes))
        fail_arg(fn, "dst", ptr_str(a.dst), "overlaps src=" + ptr_str(a.src));
    if (overlaps(a.dst, dst_bytes, a.weights, wei_bytes))
        fail_arg(fn, "dst", ptr_str(a.dst), "overlaps weights=" + ptr_str(a.weights));
    if (a.bias && overlaps(a.dst, dst_bytes, a.bias, d.oc * 4))
        fail_arg(fn, "dst", ptr_str(a.dst), "overlaps bias=" + ptr_str(a.bias));
    if (a.residual && a.residual != a.dst && overlaps(a.dst, dst_bytes, a.residual, dst_bytes))
        fail_arg(fn, "residual", ptr_str(a.residual),
                 "partially overlaps dst=" + ptr_str(a.dst) + " (only residual == dst is allowed)");
}

std::string conv_plain_layout(const ConvProblem& p) {
    std::ostringstream os;
    os << "plain:" << conv_weight_layout_name(p.d.weight_layout) << ":" << dtype_name(p.d.weight_dtype) << ":o"
       << p.d.oc << "i" << p.icg() << "k" << p.d.kh << "x" << p.d.kw;
    return os.str();
}

std::shared_ptr<const ConvPacked> ConvKernel::pack(const void* weights) const {
    const size_t n = static_cast<size_t>(p_.d.oc * p_.icg() * p_.d.kh * p_.d.kw * elem_size(p_.d.weight_dtype));
    return std::make_shared<PlainPacked>(packed_layout(), weights, n);
}

std::string ConvKernel::packed_layout() const { return conv_plain_layout(p_); }

const Registry<ConvProblem, ConvKernel>& conv_registry() {
    static const Registry<ConvProblem, ConvKernel> r(
        "conv2d", {
                      // oneDNN where it has a non-reference implementation (f32 and bf16 at
                      // AVX-512; its own ISA dispatch, so only offered under an avx512+ cap).
                      // Reached through conv_select() only (measured against our pick), never by
                      // select().
                      {"onednn:conv", Isa::avx512, onednn_conv_supports, create_onednn_conv, /*selectable=*/false},
                      // Depthwise NHWC: vectorised over channels (no GEMM in a depthwise conv).
                      {"avx512:dwconv", Isa::avx512, dw_conv_supports, create_dw_conv_avx512},
                      {"avx2:dwconv", Isa::avx2, dw_conv_supports, create_dw_conv_avx2},
                      // xk's GEMM on channels-last rows (1x1 direct, else im2col blocks).
                      {"gemm:conv", Isa::avx2, gemm_conv_supports, create_gemm_conv},
                      {"ref:scalar", Isa::scalar, nullptr,
                       [](const ConvProblem& p) -> std::shared_ptr<const ConvKernel> { return std::make_shared<RefConv>(p); }},
                  });
    return r;
}

// ---- routing: xk's own pick or onednn:conv, by a one-time timing (route_tune.hpp) ----
namespace {

using CReg = Registry<ConvProblem, ConvKernel>;

route::Decisions<CReg::ImplT>& cdecisions() {
    static route::Decisions<CReg::ImplT> d;
    return d;
}

// Times our pick against onednn:conv (route::time_routes) on scratch operands of the descriptor's
// extents (small finite values, weights packed on both sides, a residual in place in dst). Ours is
// kept only when >= 5% faster: oneDNN's primitive needs no im2col buffer, and a tie gives the same
// rate either way.
const CReg::ImplT* ctune_run(const ConvProblem& p, const CReg::ImplT& ours, const CReg::ImplT& dnn,
                             const std::string& key) {
    const CReg& reg = conv_registry();
    const ConvDesc& d = p.d;
    const double t_start = now_us();
    const int64_t es = elem_size(d.src_dtype), ed = elem_size(d.dst_dtype);
    const int64_t src_b = d.n * d.c * d.h * d.w * es, wei_b = d.oc * p.icg() * d.kh * d.kw * es;
    const int64_t dst_b = d.n * d.oc * p.oh * p.ow * ed;
    const CReg::ImplT* best = &dnn;
    std::string why;
    try {
        if (src_b + wei_b + dst_b > route::kMaxTuneBytes) {
            why = ",not timed (operands > 256 MiB)";  // oneDNN's JIT kernel
        } else {
            const auto ko = reg.get(p, ours).kernel;
            const auto kd = reg.get(p, dnn).kernel;
            auto fill = [](std::vector<unsigned char>& v, int64_t esize, int mul) {
                const size_t n = v.size() / static_cast<size_t>(esize);
                for (size_t i = 0; i < n; ++i) {
                    const float f = static_cast<float>((i * static_cast<size_t>(mul)) % 127) / 127.0f - 0.5f;
                    if (esize == 2) reinterpret_cast<uint16_t*>(v.data())[i] = bf16::from_float(f);
                    else reinterpret_cast<float*>(v.data())[i] = f;
                }
            };
            // std::vector's storage is 16-byte aligned: enough for f32 / bf16 elements.
            std::vector<unsigned char> src(static_cast<size_t>(src_b)), wei(static_cast<size_t>(wei_b)),
                dst(static_cast<size_t>(dst_b));
            fill(src, es, 37);
            fill(wei, es, 29);
            fill(dst, ed, 17);  // the residual, when there is one (in place)
            std::vector<float> bias(static_cast<size_t>(d.oc), 0.25f);
            ConvArgs a;
            a.src = src.data();
            a.weights = wei.data();
            a.bias = d.with_bias ? bias.data() : nullptr;
            a.dst = dst.data();
            a.residual = d.residual != ConvResidual::none ? dst.data() : nullptr;
            const auto po = ko->pack(wei.data());
            const auto pd = kd->pack(wei.data());
            const route::Timing t = route::time_routes([&] { ko->run(a, po.get()); }, [&] { kd->run(a, pd.get()); });
            if (t.a_us < (1.0 - route::kMinGain) * t.b_us) best = &ours;
            why = std::string(",") + ours.name + "=" + route::us_str(t.a_us) + ",onednn:conv(" +
                  kd->backend_info().substr(7) + ")=" + route::us_str(t.b_us) + ",rounds:" + std::to_string(t.rounds);
        }
    } catch (const std::exception& e) {
        best = &ours;  // oneDNN could not make or run it, or scratch memory ran out: ours
        why = std::string(",not timed: ") + e.what();
    }
    verbose_log("tune", "conv2d", key + why + ",pick:" + best->name, now_us() - t_start);
    return best;
}

}  // namespace

CReg::Selected conv_select(const ConvProblem& p, const char** how) {
    const CReg& reg = conv_registry();
    const CReg::ImplT& pick = reg.select(p, max_isa());
    const char* h = "registry";
    const CReg::ImplT* impl = &pick;
    if (pick.isa != Isa::scalar) {  // one of ours (the reference stays below avx2)
        const CReg::ImplT& dnn = reg.find("onednn:conv");
        const char* env = std::getenv("XK_CONV_IMPL");
        const std::string force = env ? env : "";
        if (force == "gemm") {
            h = "forced";
        } else if (dnn.isa <= max_isa() && isa_supported(dnn.isa) && onednn_conv_supports(p)) {
            if (force == "onednn") {
                h = "forced", impl = &dnn;
            } else {
                const std::string key = route::decision_key(p.key());
                impl = cdecisions().get(key, [&] { return ctune_run(p, pick, dnn, key); }, &h);
            }
        }
    }
    if (how) *how = h;
    return reg.get(p, *impl);
}

void conv_tune_clear() { cdecisions().clear(); }

}  // namespace detail

int64_t conv_output_size(int64_t input, int64_t kernel, int64_t stride, int64_t pad_begin, int64_t pad_end,
                         int64_t dilation) {
    static constexpr detail::ExtentNames names{"input", "kernel", "stride", "pad_begin", "pad_end", "dilation", "output"};
    return detail::output_extent("xk::conv_output_size", names, input, kernel, stride, pad_begin, pad_end, dilation);
}

int64_t ConvDesc::oh() const {
    return detail::output_extent("xk::ConvDesc::oh", detail::kNamesH, h, kh, stride_h, pad_top, pad_bottom, dilation_h);
}
int64_t ConvDesc::ow() const {
    return detail::output_extent("xk::ConvDesc::ow", detail::kNamesW, w, kw, stride_w, pad_left, pad_right, dilation_w);
}
int64_t ConvDesc::src_elements() const {
    detail::conv_validate_desc("xk::ConvDesc::src_elements", *this);
    return n * c * h * w;
}
int64_t ConvDesc::weight_elements() const {
    detail::conv_validate_desc("xk::ConvDesc::weight_elements", *this);
    return oc * (c / groups) * kh * kw;
}
int64_t ConvDesc::dst_elements() const {
    const detail::ConvProblem p = detail::conv_validate_desc("xk::ConvDesc::dst_elements", *this);
    return n * oc * p.oh * p.ow;
}

struct ConvPlan::State {
    detail::ConvProblem p;
    const char* impl = nullptr;
    std::shared_ptr<const detail::ConvKernel> kernel;
    std::string packed_layout;  // kernel->packed_layout(), what run(args, packed) accepts
};

ConvPlan::ConvPlan(const ConvDesc& desc) {
    auto s = std::make_shared<State>();
    s->p = detail::conv_validate_desc("xk::ConvPlan", desc);
    const char* how = "";
    const auto sel = detail::conv_select(s->p, &how);
    s->impl = sel.impl->name;
    s->kernel = sel.kernel;
    s->packed_layout = s->kernel->packed_layout();
    if (detail::verbose_level() >= 1) {
        const std::string be = s->kernel->backend_info();
        detail::verbose_log("plan", "conv2d",
                            std::string(s->impl) + (be.empty() ? "" : "(" + be + ")") + "," + s->p.key() + ",route:" + how,
                            0.0);
    }
    s_ = std::move(s);
}

void ConvPlan::run(const ConvArgs& args) const {
    detail::conv_validate_args("xk::ConvPlan::run", s_->p, args);
    s_->kernel->run(args);
}

void ConvPlan::run(const ConvArgs& args, const ConvPackedWeights& packed_weights) const {
    constexpr const char* fn = "xk::ConvPlan::run";
    if (packed_weights.empty()) detail::fail_arg(fn, "packed_weights", "empty", "must come from ConvPlan::pack_weights");
    if (packed_weights.data_->layout != s_->packed_layout)
        detail::fail_arg(fn, "packed_weights", packed_weights.data_->layout,
                         "was packed for another layout or shape (this plan, " + std::string(s_->impl) + ", needs " +
                             s_->packed_layout + ")");
    // Validate the other pointers as usual; the packed data stands in for args.weights.
    ConvArgs a = args;
    a.weights = packed_weights.data_->data;
    detail::conv_validate_args(fn, s_->p, a);
    s_->kernel->run(args, packed_weights.data_.get());
}

ConvPackedWeights ConvPlan::pack_weights(const void* weights) const {
    constexpr const char* fn = "xk::ConvPlan::pack_weights";
    detail::check_not_null(fn, "weights", weights);
    if (reinterpret_cast<uintptr_t>(weights) % static_cast<uintptr_t>(dtype_size(s_->p.d.weight_dtype)) != 0)
        detail::fail_arg(fn, "weights", detail::ptr_str(weights), "must be aligned to its element size");
    ConvPackedWeights w;
    w.data_ = s_->kernel->pack(weights);
    return w;
}

std::string ConvPlan::backend_info() const { return s_->kernel->backend_info(); }

std::string ConvPackedWeights::layout() const { return data_ ? data_->layout : std::string(); }
size_t ConvPackedWeights::size_bytes() const noexcept { return data_ ? data_->bytes : 0; }

void conv_fold_batchnorm(const ConvDesc& desc, const float* weights, const float* bias, const float* gamma,
                         const float* beta, const float* mean, const float* var, float eps, float* out_weights,
                         float* out_bias) {
    constexpr const char* fn = "xk::conv_fold_batchnorm";
    const detail::ConvProblem p = detail::conv_validate_desc(fn, desc);
    if (desc.weight_dtype != DType::f32)
        detail::fail(Status::unsupported, std::string(fn) + ": weight_dtype=" + dtype_name(desc.weight_dtype) +
                                              " is not supported (fold f32 weights, then convert)");
    detail::check_not_null(fn, "weights", weights);
    detail::check_not_null(fn, "gamma", gamma);
    detail::check_not_null(fn, "beta", beta);
    detail::check_not_null(fn, "mean", mean);
    detail::check_not_null(fn, "var", var);
    detail::check_not_null(fn, "out_weights", out_weights);
    detail::check_not_null(fn, "out_bias", out_bias);
    if (!(eps >= 0.0f)) detail::fail_arg(fn, "eps", std::to_string(eps), "must be >= 0");
    const int64_t per_oc = p.icg() * desc.kh * desc.kw;  // both weight layouts keep one output channel contiguous
    for (int64_t o = 0; o < desc.oc; ++o)
        if (!(var[o] + eps > 0.0f))
            detail::fail_arg(fn, "var", "var[" + std::to_string(o) + "]=" + std::to_string(var[o]),
                             "must satisfy var + eps > 0 (eps=" + std::to_string(eps) + ")");
    for (int64_t o = 0; o < desc.oc; ++o) {
        const float scale = gamma[o] / std::sqrt(var[o] + eps);
        const float b = bias ? bias[o] : 0.0f;
        for (int64_t i = 0; i < per_oc; ++i) out_weights[o * per_oc + i] = weights[o * per_oc + i] * scale;
        out_bias[o] = (b - mean[o]) * scale + beta[o];
    }
}

const ConvDesc& ConvPlan::desc() const { return s_->p.d; }
int64_t ConvPlan::oh() const { return s_->p.oh; }
int64_t ConvPlan::ow() const { return s_->p.ow; }
const char* ConvPlan::impl_name() const { return s_->impl; }

void conv2d(const ConvDesc& desc, const ConvArgs& args) {
    constexpr const char* fn = "xk::conv2d";
    const detail::ConvProblem p = detail::conv_validate_desc(fn, desc);
    detail::conv_validate_args(fn, p, args);
    detail::conv_select(p).kernel->run(args);
}

}  // namespace xk
