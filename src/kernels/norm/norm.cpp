// Norm family: registry, validation and public entry points.
#include "kernels/norm/norm.hpp"

#include <cmath>
#include <type_traits>

#include "common/check.hpp"
#include "common/overlap.hpp"
#include "common/parallel.hpp"

namespace xk {
namespace detail {
namespace {

struct RefNorm final : NormKernel {
    void run(const NormDesc& d, const NormArgs& a, int64_t row_begin, int64_t row_end) const override {
        norm_reference(d, a, row_begin, row_end);
    }
};

// ld == 0 -> hidden; otherwise ld >= hidden.
int64_t resolve_ld(const char* fn, const char* arg, int64_t ld, int64_t hidden) {
    if (ld == 0) return hidden;
    check_ld(fn, arg, ld, hidden, "hidden");
    return ld;
}

// Validates and resolves the descriptor (strides filled in).
NormDesc resolve(const char* fn, const NormDesc& in) {
    NormDesc d = in;
    if (d.kind != NormKind::rms_norm && d.kind != NormKind::layer_norm)
        fail_arg(fn, "kind", std::to_string(static_cast<int>(d.kind)), "is not a NormKind (rms_norm=0, layer_norm=1)");
    check_nonnegative(fn, "rows", d.rows);
    check_positive(fn, "hidden", d.hidden);
    check_io_dtype(fn, "x_dtype", d.x_dtype);
    check_io_dtype(fn, "y_dtype", d.y_dtype);
    if (d.has_weight || d.has_bias) check_io_dtype(fn, "weight_dtype", d.weight_dtype);
    if (!(std::isfinite(d.eps) && d.eps >= 0.0f)) fail_arg(fn, "eps", float_str(d.eps), "must be finite and >= 0");
    d.ld_x = resolve_ld(fn, "ld_x", d.ld_x, d.hidden);
    d.ld_y = resolve_ld(fn, "ld_y", d.ld_y, d.hidden);
    // Every matrix must be addressable: (rows-1)*ld + hidden elements of up to 4 bytes.
    auto check_extent = [&](const char* what, int64_t ld) {
        if (d.rows > 0) checked_add(fn, what, checked_mul(fn, what, d.rows - 1, ld), d.hidden);
    };
    check_extent("(rows-1)*ld_x", d.ld_x);
    check_extent("(rows-1)*ld_y", d.ld_y);
    if (d.fused_residual) {
        check_io_dtype(fn, "residual_dtype", d.residual_dtype);
        d.ld_residual = resolve_ld(fn, "ld_residual", d.ld_residual, d.hidden);
        d.ld_residual_out = resolve_ld(fn, "ld_residual_out", d.ld_residual_out, d.hidden);
        check_extent("(rows-1)*ld_residual", d.ld_residual);
        check_extent("(rows-1)*ld_residual_out", d.ld_residual_out);
    } else {
        d.ld_residual = d.ld_residual_out = 0;
    }
    return d;
}

// Pointers present iff used; outputs do not overlap anything but their allowed exact alias.
void check_args(const char* fn, const NormDesc& d, const NormArgs& a) {
    if (d.rows == 0) return;  // nothing is read or written
    check_not_null(fn, "x", a.x);
    check_not_null(fn, "y", a.y);
    auto presence = [&](const char* arg, const void* p, bool used, const char* flag) {
        if (used && !p) fail_arg(fn, arg, "null", std::string("must not be a null pointer (") + flag + " is true)");
        if (!used && p) fail_arg(fn, arg, ptr_str(p), std::string("is given but ") + flag + " is false");
    };
    presence("weight", a.weight, d.has_weight, "has_weight");
    presence("bias", a.bias, d.has_bias, "has_bias");
    presence("residual", a.residual, d.fused_residual, "fused_residual");
    presence("residual_out", a.residual_out, d.fused_residual, "fused_residual");

    const int64_t n = d.hidden;
    const MemRegion x = matrix_region(a.x, d.rows, n, d.ld_x, dtype_size(d.x_dtype));
    const MemRegion y = matrix_region(a.y, d.rows, n, d.ld_y, dtype_size(d.y_dtype));
    const MemRegion w = d.has_weight ? matrix_region(a.weight, 1, n, n, dtype_size(d.weight_dtype)) : MemRegion{};
    const MemRegion b = d.has_bias ? matrix_region(a.bias, 1, n, n, dtype_size(d.weight_dtype)) : MemRegion{};
    const MemRegion r = d.fused_residual ? matrix_region(a.residual, d.rows, n, d.ld_residual, dtype_size(d.residual_dtype)) : MemRegion{};
    const MemRegion ro = d.fused_residual ? matrix_region(a.residual_out, d.rows, n, d.ld_residual_out, dtype_size(d.residual_dtype)) : MemRegion{};

    auto no_overlap = [&](const char* out_name, const void* out_p, const MemRegion& out, const char* other_name,
                          const void* other_p, const MemRegion& other) {
        if (regions_overlap(out, other))
            fail_arg(fn, out_name, ptr_str(out_p), std::string("overlaps ") + other_name + "=" + ptr_str(other_p));
    };
    if (!(same_region(y, x) && d.y_dtype == d.x_dtype) && regions_overlap(y, x))
        fail_arg(fn, "y", ptr_str(a.y), "partially overlaps x=" + ptr_str(a.x) +
                                             " (in place needs y == x with the same stride and dtype)");
    no_overlap("y", a.y, y, "weight", a.weight, w);
    no_overlap("y", a.y, y, "bias", a.bias, b);
    if (d.fused_residual) {
        no_overlap("y", a.y, y, "residual", a.residual, r);
        no_overlap("y", a.y, y, "residual_out", a.residual_out, ro);
        if (!same_region(ro, r) && regions_overlap(ro, r))
            fail_arg(fn, "residual_out", ptr_str(a.residual_out),
                     "partially overlaps residual=" + ptr_str(a.residual) +
                         " (in place needs residual_out == residual with the same stride)");
        no_overlap("residual_out", a.residual_out, ro, "x", a.x, x);
        no_overlap("residual_out", a.residual_out, ro, "weight", a.weight, w);
        no_overlap("residual_out", a.residual_out, ro, "bias", a.bias, b);
    }
}

void execute(const NormKernel& k, const NormDesc& d, const NormArgs& a) {
    parallel_for(d.rows, norm_row_grain(d.hidden), [&](int64_t b, int64_t e) { k.run(d, a, b, e); });
}

}  // namespace

std::string NormKernelDesc::key() const {
    std::string s = std::string(norm_kind_name(kind)) + ",hidden=" + std::to_string(hidden) + ",x=" + dtype_name(x_dtype) +
                    ",y=" + dtype_name(y_dtype);
    if (has_weight || has_bias) s += std::string(",w=") + dtype_name(weight_dtype);
    if (fused_residual) s += std::string(",res=") + dtype_name(residual_dtype);
    s += has_weight ? ",weight" : ",noweight";
    if (has_bias) s += ",bias";
    return s;
}

NormKernelDesc norm_kernel_desc(const NormDesc& d) {
    NormKernelDesc k;
    k.kind = d.kind;
    k.hidden = d.hidden;
    k.x_dtype = d.x_dtype;
    k.y_dtype = d.y_dtype;
    k.residual_dtype = d.fused_residual ? d.residual_dtype : DType::f32;
    k.weight_dtype = (d.has_weight || d.has_bias) ? d.weight_dtype : DType::f32;
    k.has_weight = d.has_weight;
    k.has_bias = d.has_bias;
    k.fused_residual = d.fused_residual;
    return k;
}

bool norm_uses_bf16(const NormKernelDesc& kd) {
    return kd.x_dtype == DType::bf16 || kd.y_dtype == DType::bf16 ||
           (kd.fused_residual && kd.residual_dtype == DType::bf16) ||
           ((kd.has_weight || kd.has_bias) && kd.weight_dtype == DType::bf16);
}

const Registry<NormKernelDesc, NormKernel>& norm_registry() {
    static const Registry<NormKernelDesc, NormKernel> r(
        "norm", {
                    {"jit:avx512_bf16", Isa::avx512_bf16, norm_uses_bf16,
                     [](const NormKernelDesc& kd) { return create_jit_norm(kd, Isa::avx512_bf16); }},
                    {"jit:avx512", Isa::avx512, nullptr, [](const NormKernelDesc& kd) { return create_jit_norm(kd, Isa::avx512); }},
                    {"jit:avx2", Isa::avx2, nullptr, [](const NormKernelDesc& kd) { return create_jit_norm(kd, Isa::avx2); }},
                    {"ref:scalar", Isa::scalar, nullptr,
                     [](const NormKernelDesc&) -> std::shared_ptr<const NormKernel> { return std::make_shared<RefNorm>(); }},
                });
    return r;
}

}  // namespace detail

NormPlan::NormPlan(const NormDesc& desc) : desc_(detail::resolve("xk::NormPlan", desc)) {
    const auto sel = detail::norm_registry().get(detail::norm_kernel_desc(desc_));
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

void NormPlan::run(const NormArgs& args) const {
    detail::check_args("xk::NormPlan::run", desc_, args);
    detail::execute(*kernel_, desc_, args);
}

void detail::norm_one_shot(const char* fn, const NormDesc& desc, const NormArgs& args) {
    const NormDesc d = detail::resolve(fn, desc);
    detail::check_args(fn, d, args);
    if (d.rows == 0) return;
    const auto sel = detail::norm_registry().get(detail::norm_kernel_desc(d));
    detail::execute(*sel.kernel, d, args);
}

void norm(const NormDesc& desc, const NormArgs& args) { detail::norm_one_shot("xk::norm", desc, args); }

namespace {

template <class T>
void norm_packed(const char* fn, NormKind kind, int64_t rows, int64_t hidden, const T* x, const T* weight, const T* bias,
                 float eps, T* y, T* residual) {
    constexpr DType t = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
    NormDesc d;
    d.kind = kind;
    d.rows = rows;
    d.hidden = hidden;
    d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
    d.eps = eps;
    d.has_weight = weight != nullptr;
    d.has_bias = bias != nullptr;
    d.fused_residual = residual != nullptr;
    NormArgs a;
    a.x = x;
    a.y = y;
    a.weight = weight;
    a.bias = bias;
    a.residual = residual;
    a.residual_out = residual;
    detail::norm_one_shot(fn, d, a);
}

}  // namespace

void rms_norm(int64_t rows, int64_t hidden, const float* x, const float* weight, float eps, float* y) {
    norm_packed<float>("xk::rms_norm", NormKind::rms_norm, rows, hidden, x, weight, nullptr, eps, y, nullptr);
}
void rms_norm(int64_t rows, int64_t hidden, const bf16* x, const bf16* weight, float eps, bf16* y) {
    norm_packed<bf16>("xk::rms_norm", NormKind::rms_norm, rows, hidden, x, weight, nullptr, eps, y, nullptr);
}
void layer_norm(int64_t rows, int64_t hidden, const float* x, const float* weight, const float* bias, float eps,
                float* y) {
    norm_packed<float>("xk::layer_norm", NormKind::layer_norm, rows, hidden, x, weight, bias, eps, y, nullptr);
}
void layer_norm(int64_t rows, int64_t hidden, const bf16* x, const bf16* weight, const bf16* bias, float eps, bf16* y) {
    norm_packed<bf16>("xk::layer_norm", NormKind::layer_norm, rows, hidden, x, weight, bias, eps, y, nullptr);
}
void fused_add_rms_norm(int64_t rows, int64_t hidden, float* x, float* residual, const float* weight, float eps) {
    if (rows > 0) detail::check_not_null("xk::fused_add_rms_norm", "residual", residual);
    norm_packed<float>("xk::fused_add_rms_norm", NormKind::rms_norm, rows, hidden, x, weight, nullptr, eps, x, residual);
}
void fused_add_rms_norm(int64_t rows, int64_t hidden, bf16* x, bf16* residual, const bf16* weight, float eps) {
    if (rows > 0) detail::check_not_null("xk::fused_add_rms_norm", "residual", residual);
    norm_packed<bf16>("xk::fused_add_rms_norm", NormKind::rms_norm, rows, hidden, x, weight, nullptr, eps, x, residual);
}

}  // namespace xk
