// Softmax family: validation, registry and public entry points.
#include "kernels/softmax/softmax.hpp"

#include <cmath>
#include <sstream>
#include <type_traits>

#include "common/check.hpp"
#include "common/overlap.hpp"
#include "common/parallel.hpp"

namespace xk {
namespace detail {
namespace {

struct RefSoftmax final : SoftmaxKernel {
    void run(const SoftmaxDesc& d, const SoftmaxArgs& a, int64_t row_begin, int64_t row_end) const override {
        softmax_reference(d, a, row_begin, row_end);
    }
};

void check_args(const char* fn, const SoftmaxDesc& d, const SoftmaxArgs& a) {
    if (!d.has_mask && a.mask) fail_arg(fn, "mask", ptr_str(a.mask), "is given but has_mask is false");
    if (d.rows == 0) return;  // nothing is read or written
    check_not_null(fn, "x", a.x);
    check_not_null(fn, "y", a.y);
    if (d.has_mask) check_not_null(fn, "mask", a.mask);
    if (a.valid_lens)
        for (int64_t r = 0; r < d.rows; ++r)
            if (a.valid_lens[r] < 0 || a.valid_lens[r] > d.cols)
                fail_arg(fn, ("valid_lens[" + std::to_string(r) + "]").c_str(), std::to_string(a.valid_lens[r]),
                         "must be in [0, cols=" + std::to_string(d.cols) + "]");
    const MemRegion x = matrix_region(a.x, d.rows, d.cols, d.ld_x, dtype_size(d.x_dtype));
    const MemRegion y = matrix_region(a.y, d.rows, d.cols, d.ld_y, dtype_size(d.y_dtype));
    if (same_region(x, y) && d.x_dtype == d.y_dtype) return;  // in place
    if (regions_overlap(x, y))
        fail_arg(fn, "y", ptr_str(a.y), "partially overlaps x=" + ptr_str(a.x) +
                                            " (in place needs y == x with the same stride and dtype)");
}

void execute(const SoftmaxKernel& k, const SoftmaxDesc& d, const SoftmaxArgs& a) {
    parallel_for(d.rows, softmax_row_grain(d.cols), [&](int64_t b, int64_t e) { k.run(d, a, b, e); });
}

}  // namespace

SoftmaxDesc softmax_resolve(const char* fn, const SoftmaxDesc& in) {
    SoftmaxDesc d = in;
    check_nonnegative(fn, "rows", d.rows);
    check_positive(fn, "cols", d.cols);
    check_io_dtype(fn, "x_dtype", d.x_dtype);
    check_io_dtype(fn, "y_dtype", d.y_dtype);
    if (d.ld_x == 0) d.ld_x = d.cols;
    else check_ld(fn, "ld_x", d.ld_x, d.cols, "cols");
    if (d.ld_y == 0) d.ld_y = d.cols;
    else check_ld(fn, "ld_y", d.ld_y, d.cols, "cols");
    if (d.rows > 0) {
        checked_add(fn, "(rows-1)*ld_x", checked_mul(fn, "(rows-1)*ld_x", d.rows - 1, d.ld_x), d.cols);
        checked_add(fn, "(rows-1)*ld_y", checked_mul(fn, "(rows-1)*ld_y", d.rows - 1, d.ld_y), d.cols);
    }
    if (!(std::isfinite(d.scale) && d.scale > 0.0f)) fail_arg(fn, "scale", float_str(d.scale), "must be finite and > 0");
    if (d.causal) check_range(fn, "causal_offset", d.causal_offset, -(int64_t(1) << 60), int64_t(1) << 60);
    else d.causal_offset = 0;
    check_nonnegative(fn, "ld_mask", d.ld_mask);
    check_nonnegative(fn, "mask_rows", d.mask_rows);
    if (d.has_mask) {
        if (d.ld_mask == 0) d.ld_mask = d.cols;
        else check_ld(fn, "ld_mask", d.ld_mask, d.cols, "cols");
        if (d.mask_rows == 0) d.mask_rows = std::max<int64_t>(d.rows, 1);
        checked_mul(fn, "mask_rows*ld_mask", d.mask_rows, d.ld_mask);
    } else {
        d.ld_mask = d.mask_rows = 0;
    }
    return d;
}

std::string SoftmaxKernelDesc::key() const {
    return std::string("x=") + dtype_name(x_dtype) + ",y=" + dtype_name(y_dtype) + (mask ? ",mask" : "");
}

SoftmaxKernelDesc softmax_kernel_desc(const SoftmaxDesc& d) {
    SoftmaxKernelDesc k;
    k.x_dtype = d.x_dtype;
    k.y_dtype = d.y_dtype;
    k.mask = d.has_mask;
    return k;
}

const Registry<SoftmaxKernelDesc, SoftmaxKernel>& softmax_registry() {
    static const Registry<SoftmaxKernelDesc, SoftmaxKernel> r(
        "softmax", {
                       {"jit:avx512_bf16", Isa::avx512_bf16,
                        [](const SoftmaxKernelDesc& kd) { return kd.y_dtype == DType::bf16 && !kd.mask; },
                        [](const SoftmaxKernelDesc& kd) { return create_jit_softmax(kd, Isa::avx512_bf16); }},
                       {"jit:avx512", Isa::avx512, [](const SoftmaxKernelDesc& kd) { return !kd.mask; },
                        [](const SoftmaxKernelDesc& kd) { return create_jit_softmax(kd, Isa::avx512); }},
                       {"jit:avx2", Isa::avx2, [](const SoftmaxKernelDesc& kd) { return !kd.mask; },
                        [](const SoftmaxKernelDesc& kd) { return create_jit_softmax(kd, Isa::avx2); }},
                       {"ref:scalar", Isa::scalar, nullptr,
                        [](const SoftmaxKernelDesc&) -> std::shared_ptr<const SoftmaxKernel> {
                            return std::make_shared<RefSoftmax>();
                        }},
                   });
    return r;
}

void softmax_one_shot(const char* fn, const SoftmaxDesc& desc, const SoftmaxArgs& args) {
    const SoftmaxDesc d = softmax_resolve(fn, desc);
    check_args(fn, d, args);
    if (d.rows == 0) return;
    const auto sel = softmax_registry().get(softmax_kernel_desc(d));
    execute(*sel.kernel, d, args);
}

}  // namespace detail

SoftmaxPlan::SoftmaxPlan(const SoftmaxDesc& desc) : desc_(detail::softmax_resolve("xk::SoftmaxPlan", desc)) {
    const auto sel = detail::softmax_registry().get(detail::softmax_kernel_desc(desc_));
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

void SoftmaxPlan::run(const SoftmaxArgs& args) const {
    detail::check_args("xk::SoftmaxPlan::run", desc_, args);
    if (desc_.rows == 0) return;
    detail::execute(*kernel_, desc_, args);
}

void softmax(const SoftmaxDesc& desc, const SoftmaxArgs& args) { detail::softmax_one_shot("xk::softmax", desc, args); }

namespace {
template <class T>
void softmax_packed(int64_t rows, int64_t cols, const T* x, T* y, float scale) {
    constexpr DType t = std::is_same_v<T, bf16> ? DType::bf16 : DType::f32;
    SoftmaxDesc d;
    d.rows = rows;
    d.cols = cols;
    d.x_dtype = d.y_dtype = t;
    d.scale = scale;
    detail::softmax_one_shot("xk::softmax", d, SoftmaxArgs{x, y});
}
}  // namespace

void softmax(int64_t rows, int64_t cols, const float* x, float* y, float scale) { softmax_packed(rows, cols, x, y, scale); }
void softmax(int64_t rows, int64_t cols, const bf16* x, bf16* y, float scale) { softmax_packed(rows, cols, x, y, scale); }

}  // namespace xk
