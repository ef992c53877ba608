// Eltwise family: registry and public entry points.
#include "kernels/eltwise/eltwise.hpp"

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "xk/eltwise.hpp"

namespace xk {
namespace detail {
namespace {

struct RefAxpby final : AxpbyKernel {
    void run(int64_t n, float alpha, const float* x, float beta, float* y) const override {
        axpby_reference(n, alpha, x, beta, y);
    }
};

}  // namespace

const Registry<AxpbyDesc, AxpbyKernel>& axpby_registry() {
    static const Registry<AxpbyDesc, AxpbyKernel> r(
        "axpby", {
                     {"jit:avx512", Isa::avx512, nullptr, [](const AxpbyDesc&) { return create_jit_axpby(Isa::avx512); }},
                     {"jit:avx2", Isa::avx2, nullptr, [](const AxpbyDesc&) { return create_jit_axpby(Isa::avx2); }},
                     {"ref:scalar", Isa::scalar, nullptr,
                      [](const AxpbyDesc&) -> std::shared_ptr<const AxpbyKernel> { return std::make_shared<RefAxpby>(); }},
                 });
    return r;
}

}  // namespace detail

void axpby(int64_t n, float alpha, const float* x, float beta, float* y) {
    constexpr const char* fn = "xk::axpby";
    detail::check_nonnegative(fn, "n", n);
    if (n == 0) return;
    detail::check_not_null(fn, "x", x);
    detail::check_not_null(fn, "y", y);
    detail::checked_mul(fn, "n*sizeof(float)", n, 4);
    if (x != y && x < y + n && y < x + n)
        detail::fail_arg(fn, "x", detail::ptr_str(x), "partially overlaps y=" + detail::ptr_str(y) + " (only x == y is allowed)");
    const auto sel = detail::axpby_registry().get(detail::AxpbyDesc{});
    const detail::AxpbyKernel* k = sel.kernel.get();
    detail::parallel_for(n, 1 << 16, [&](int64_t b, int64_t e) { k->run(e - b, alpha, x + b, beta, y + b); });
}

void scale(int64_t n, float alpha, const float* x, float* y) { axpby(n, alpha, x, 0.0f, y); }

}  // namespace xk
