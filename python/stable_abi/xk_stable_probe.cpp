// Probe: one xk op (rms_norm, f32) registered through PyTorch's stable ABI (torch/csrc/stable,
// STABLE_TORCH_LIBRARY / _IMPL, TORCH_TARGET_VERSION 2.10), to measure the per-call overhead a
// compiled registration would save over the ctypes path. Not built by CMake, not used by the
// package: python/stable_abi/build_probe.sh builds it against an installed torch >= 2.10 and
// bench/py/overhead.py's numbers sit beside it in docs/python.md.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include "xk/c/norm.h"

using torch::stable::Tensor;

static Tensor rms_norm(Tensor x, Tensor weight, double eps) {
    STD_TORCH_CHECK(x.scalar_type() == torch::headeronly::ScalarType::Float &&
                        weight.scalar_type() == torch::headeronly::ScalarType::Float,
                    "xkstable.rms_norm: float32 only (probe)");
    STD_TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(x.dim() - 1),
                    "xkstable.rms_norm: weight must have x.shape[-1] elements");
    Tensor xc = x.is_contiguous() ? x : torch::stable::contiguous(x);
    Tensor wc = weight.is_contiguous() ? weight : torch::stable::contiguous(weight);
    Tensor out = torch::stable::empty_like(xc);
    const int64_t H = xc.size(xc.dim() - 1);
    const int64_t rows = H ? xc.numel() / H : 0;
    if (rows) {
        xk_status st = xk_rms_norm_f32(rows, H, static_cast<const float*>(xc.data_ptr()), 0,
                                       static_cast<const float*>(wc.data_ptr()), static_cast<float>(eps),
                                       static_cast<float*>(out.data_ptr()), 0);
        STD_TORCH_CHECK(st == XK_SUCCESS, xk_last_error());
    }
    return out;
}

STABLE_TORCH_LIBRARY(xkstable, m) { m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(xkstable, CPU, m) { m.impl("rms_norm", TORCH_BOX(&rms_norm)); }
