// INT8 GEMM JIT kernels (jit_gemm_int8.cpp): u8|s8 x s8 -> s32 | f32 | u8 | s8 on VPDPBUSD.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/gemm/gemm.hpp"

namespace xk::detail {

// The packed B of the int8 kernels: panels of nr columns, each kp / 4 groups of nr x 4 bytes
// (VNNI: 4 consecutive k per column as s8, K padded with zeros to kp, a multiple of 4; s16: 2
// consecutive k as int16, kp = 2 round_up(K, 2)), panel p at p * kp * nr; then npad int32 column
// sums (sum over k of op(B)[k][n], 0 for padding).
struct Int8BLayout {
    int64_t K = 0, N = 0, kp = 0, npad = 0;
    int nr = 32;
    bool s16 = false;  // AVX2: groups of 2 k as int16 (kp = 2 * round_up(K, 2) bytes per column)
    std::string name;
    size_t panel_bytes() const { return static_cast<size_t>(kp * npad); }
    size_t bytes() const { return panel_bytes() + static_cast<size_t>(npad) * 4; }
};
Int8BLayout gemm_int8_b_layout(int64_t K, int64_t N, int nr, bool s16);
// Columns [c0, c1) of op(B) (c0 a multiple of nr) into dst (the whole packed buffer).
void gemm_int8_pack_b_cols(const GemmSpec& s, const Int8BLayout& l, const int8_t* B, int64_t ldb, bool bt,
                           int64_t c0, int64_t c1, uint8_t* dst, bool sums_needed = true);

// int8 inputs with M, N, K > 0.
// isa avx2: the exact AVX2 kernel (A - a_zero_point and B widened to s16 as they are packed,
// VPMADDWD + VPADDD).
bool gemm_int8_vnni_supports(const GemmSpec& s);
// isa: avx512_vnni (zmm VPDPBUSD) or avx2_vnni (ymm: VEX VPDPBUSD where AVX-VNNI exists, else the
// EVEX encoding of AVX512-VNNI + VL).
std::shared_ptr<const GemmKernel> create_gemm_int8_vnni(const GemmSpec& s, Isa isa);

}  // namespace xk::detail
