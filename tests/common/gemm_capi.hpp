// The C API's GEMM structs from the C++ ones, every field (batch strides, requantization
// included): tests that run one problem through both APIs compare like with like.
#pragma once
#include "xk/gemm.hpp"
#include "xk/xk.h"

namespace xk::test {

inline xk_gemm_desc to_c(const GemmDesc& d) {
    xk_gemm_desc c;
    xk_gemm_desc_init(&c);
    c.M = d.M, c.N = d.N, c.K = d.K;
    c.trans_a = static_cast<xk_trans>(static_cast<int>(d.trans_a));
    c.trans_b = static_cast<xk_trans>(static_cast<int>(d.trans_b));
    c.lda = d.lda, c.ldb = d.ldb, c.ldc = d.ldc;
    c.a_type = static_cast<xk_dtype>(static_cast<int>(d.a_type));
    c.b_type = static_cast<xk_dtype>(static_cast<int>(d.b_type));
    c.c_type = static_cast<xk_dtype>(static_cast<int>(d.c_type));
    c.alpha = d.alpha, c.beta = d.beta;
    c.bias = d.epilogue.bias ? 1 : 0;
    c.act = static_cast<xk_activation>(static_cast<int>(d.epilogue.act));
    c.residual = d.epilogue.residual ? 1 : 0;
    c.residual_type = static_cast<xk_dtype>(static_cast<int>(d.residual_type));
    c.ld_residual = d.ld_residual;
    c.b_scale_per_channel = d.b_scale_per_channel ? 1 : 0;
    c.batch = d.batch;
    c.batch_stride_a = d.batch_stride_a, c.batch_stride_b = d.batch_stride_b;
    c.batch_stride_c = d.batch_stride_c, c.batch_stride_residual = d.batch_stride_residual;
    return c;
}

inline xk_gemm_args to_c(const GemmArgs& g) {
    xk_gemm_args a;
    xk_gemm_args_init(&a);
    a.A = g.A, a.B = g.B, a.C = g.C, a.bias = g.bias, a.residual = g.residual;
    a.a_scale = g.a_scale, a.b_scales = g.b_scales;
    a.a_zero_point = g.a_zero_point, a.b_zero_point = g.b_zero_point;
    a.c_scale = g.c_scale, a.c_zero_point = g.c_zero_point;
    return a;
}

}  // namespace xk::test
