// GLU family: validation, registry and public entry points.
#include "kernels/glu/glu.hpp"

#include <type_traits>

#include "common/activation.hpp"
#include "common/check.hpp"
#include "common/overlap.hpp"
#include "common/parallel.hpp"

namespace xk {
namespace detail {
namespace {

struct RefGlu final : GluKernel {
    void run(const GluDesc& d, const GluArgs& a, int64_t row_begin, int64_t row_end) const override {
        glu_reference(d, a, row_begin, row_end);
    }
};

void check_args(const char* fn, const GluDesc& d, const GluArgs& a) {
    if (d.rows == 0) return;  // nothing is read or written
    check_not_null(fn, "x", a.x);
    check_not_null(fn, "y", a.y);
    const MemRegion x = matrix_region(a.x, d.rows, 2 * d.inner, d.ld_x, dtype_size(d.x_dtype));
    const MemRegion y = matrix_region(a.y, d.rows, d.inner, d.ld_y, dtype_size(d.y_dtype));
    if (a.x == a.y && (d.rows == 1 || d.ld_x == d.ld_y) && d.x_dtype == d.y_dtype) return;  // in place: the gate half
    if (regions_overlap(x, y))
        fail_arg(fn, "y", ptr_str(a.y), "overlaps x=" + ptr_str(a.x) +
                                            " (in place needs y == x with the same stride and dtype: y replaces the gate half)");
}

void execute(const GluKernel& k, const GluDesc& d, const GluArgs& a) {
    parallel_for(d.rows, glu_row_grain(d.inner), [&](int64_t b, int64_t e) { k.run(d, a, b, e); });
}

}  // namespace

GluDesc glu_resolve(const char* fn, const GluDesc& in) {
    GluDesc d = in;
    if (!valid_activation(d.activation))
        fail_arg(fn, "activation", std::to_string(static_cast<int>(d.activation)),
                 "is not an Activation (none=0, relu=1, gelu_erf=2, gelu_tanh=3, silu=4)");
    check_nonnegative(fn, "rows", d.rows);
    check_positive(fn, "inner", d.inner);
    const int64_t two_i = checked_mul(fn, "2*inner", 2, d.inner);
    check_io_dtype(fn, "x_dtype", d.x_dtype);
    check_io_dtype(fn, "y_dtype", d.y_dtype);
    if (d.ld_x == 0) d.ld_x = two_i;
    else check_ld(fn, "ld_x", d.ld_x, two_i, "2*inner");
    if (d.ld_y == 0) d.ld_y = d.inner;
    else check_ld(fn, "ld_y", d.ld_y, d.inner, "inner");
    if (d.rows > 0) {
        checked_add(fn, "(rows-1)*ld_x", checked_mul(fn, "(rows-1)*ld_x", d.rows - 1, d.ld_x), two_i);
        checked_add(fn, "(rows-1)*ld_y", checked_mul(fn, "(rows-1)*ld_y", d.rows - 1, d.ld_y), d.inner);
    }
    return d;
}

std::string GluKernelDesc::key() const {
    return std::string(activation_name(activation)) + ",inner=" + std::to_string(inner) + ",x=" + dtype_name(x_dtype) +
           ",y=" + dtype_name(y_dtype);
}

GluKernelDesc glu_kernel_desc(const GluDesc& d) {
    GluKernelDesc k;
    k.activation = d.activation;
    k.inner = d.inner;
    k.x_dtype = d.x_dtype;
    k.y_dtype = d.y_dtype;
    return k;
}

const Registry<GluKernelDesc, GluKernel>& glu_registry() {
    static const Registry<GluKernelDesc, GluKernel> r(
        "glu", {
                   {"jit:avx512_bf16", Isa::avx512_bf16,
                    [](const GluKernelDesc& kd) { return kd.y_dtype == DType::bf16; },
                    [](const GluKernelDesc& kd) { return create_jit_glu(kd, Isa::avx512_bf16); }},
                   {"jit:avx512", Isa::avx512, nullptr, [](const GluKernelDesc& kd) { return create_jit_glu(kd, Isa::avx512); }},
                   {"jit:avx2", Isa::avx2, nullptr, [](const GluKernelDesc& kd) { return create_jit_glu(kd, Isa::avx2); }},
                   {"ref:scalar", Isa::scalar, nullptr,
                    [](const GluKernelDesc&) -> std::shared_ptr<const GluKernel> { return std::make_shared<RefGlu>(); }},
               });
    return r;
}

void glu_one_shot(const char* fn, const GluDesc& desc, const GluArgs& args) {
    const GluDesc d = glu_resolve(fn, desc);
    check_args(fn, d, args);
    if (d.rows == 0) return;
    const auto sel = glu_registry().get(glu_kernel_desc(d));
    execute(*sel.kernel, d, args);
}

}  // namespace detail

GluPlan::GluPlan(const GluDesc& desc) : desc_(detail::glu_resolve("xk::GluPlan", desc)) {
    const auto sel = detail::glu_registry().get(detail::glu_kernel_desc(desc_));
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

void GluPlan::run(const GluArgs& args) const {
    detail::check_args("xk::GluPlan::run", desc_, args);
    if (desc_.rows == 0) return;
    detail::execute(*kernel_, desc_, args);
}

void glu(const GluDesc& desc, const GluArgs& args) { detail::glu_one_shot("xk::glu", desc, args); }

namespace {

template <class T>
void glu_packed(const char* fn, Activation act, int64_t rows, int64_t inner, const T* x, T* y) {
    constexpr DType t = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
    GluDesc d;
    d.activation = act;
    d.rows = rows;
    d.inner = inner;
    d.x_dtype = d.y_dtype = t;
    detail::glu_one_shot(fn, d, GluArgs{x, y});
}

}  // namespace

void silu_and_mul(int64_t rows, int64_t inner, const float* x, float* y) {
    glu_packed("xk::silu_and_mul", Activation::silu, rows, inner, x, y);
}
void silu_and_mul(int64_t rows, int64_t inner, const bf16* x, bf16* y) {
    glu_packed("xk::silu_and_mul", Activation::silu, rows, inner, x, y);
}
void gelu_and_mul(int64_t rows, int64_t inner, const float* x, float* y, bool tanh_approximation) {
    glu_packed("xk::gelu_and_mul", tanh_approximation ? Activation::gelu_tanh : Activation::gelu_erf, rows, inner, x, y);
}
void gelu_and_mul(int64_t rows, int64_t inner, const bf16* x, bf16* y, bool tanh_approximation) {
    glu_packed("xk::gelu_and_mul", tanh_approximation ? Activation::gelu_tanh : Activation::gelu_erf, rows, inner, x, y);
}

}  // namespace xk
