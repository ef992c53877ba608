// Internal interface of the weight-only quantized GEMM family (include/xk/woq.hpp), shared by its
// implementations and the tests.
//
// Packed layout (one for every kernel): N in blocks of kWoqBlockN = 16 output channels (the last
// block padded with q = 0, scale 0, offset 0). Block b holds
//   q:       s8: K rows of 16 int8 (row k: channels 16b..16b+15 at k);
//            u4: K/2 rows of 16 bytes, byte c of row j = q[16b+c][2j] | q[16b+c][2j+1] << 4
//   scales:  G rows of 16 f32 (G = K / gs groups), and offsets likewise (when has_offset).
// Blocks are contiguous, so a thread owning a range of blocks reads one stream.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/parallel.hpp"
#include "dispatch/registry.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/woq.hpp"

namespace xk::detail {

constexpr int64_t kWoqBlockN = 16;
constexpr int64_t kWoqMaxDecodeM = 16;  // M <= this: the decode kernels

struct WoqPacked {
    WoqPacked(int64_t N, int64_t K, int64_t gs, WoqWeightType type, bool has_offset);
    ~WoqPacked();
    WoqPacked(const WoqPacked&) = delete;
    WoqPacked& operator=(const WoqPacked&) = delete;

    int64_t N = 0, K = 0, gs = 0, G = 0, nblk = 0;
    WoqWeightType type = WoqWeightType::s8;
    bool has_offset = false;
    bool sym8 = false;  // u4 with every offset -8 * scale (woq_pack without zero points): w = (q - 8) * scale
    int64_t q_block_bytes = 0;  // bytes of one block's q (K*16 or K*8)
    std::string layout;
    size_t bytes = 0;
    uint8_t* q = nullptr;        // nblk * q_block_bytes (64-byte aligned)
    float* scales = nullptr;     // nblk * G * 16
    float* offsets = nullptr;    // nblk * G * 16 (null without offsets)

    const uint8_t* qb(int64_t b) const { return q + b * q_block_bytes; }
    const float* sb(int64_t b) const { return scales + b * G * kWoqBlockN; }
    const float* ob(int64_t b) const { return offsets ? offsets + b * G * kWoqBlockN : nullptr; }
    // Element access (packing, reference): q value (s8 -128..127, u4 0..15), scale, offset.
    int q_at(int64_t n, int64_t k) const;
    float scale_at(int64_t n, int64_t g) const { return scales[(n / 16 * G + g) * 16 + n % 16]; }
    float offset_at(int64_t n, int64_t g) const { return offsets ? offsets[(n / 16 * G + g) * 16 + n % 16] : 0.0f; }
    float w_at(int64_t n, int64_t k) const;  // fma(q, scale, offset)
};

// The packed data of a weight (null when empty), for tests.
const WoqPacked* woq_packed(const WoqPackedWeight& w);

// Writable view used while packing.
std::shared_ptr<WoqPacked> woq_alloc(const char* fn, int64_t N, int64_t K, int64_t gs, WoqWeightType type,
                                     bool has_offset);
void woq_set_q(WoqPacked& p, int64_t n, int64_t k, int q);

// The validated problem (leading dimensions resolved). alpha / beta classes as GemmSpec's.
struct WoqSpec {
    int64_t M = 0, N = 0, K = 0;
    WoqWeightType wtype = WoqWeightType::u4;
    DType a_type = DType::f32, c_type = DType::f32;
    int64_t lda = 0, ldc = 0, ld_residual = 0;
    bool alpha_one = true;
    BetaKind beta = BetaKind::zero;
    GemmEpilogue epilogue;
    DType residual_type = DType::f32;
    WoqCompute compute = WoqCompute::exact;
    std::string key() const;
};

struct WoqCall {
    WoqArgs args;
    float alpha = 1.0f, beta = 0.0f;
    const WoqPacked* w = nullptr;
};

struct WoqKernel {
    virtual ~WoqKernel() = default;
    virtual void run(const WoqCall& call) const = 0;  // threads itself
};

const Registry<WoqSpec, WoqKernel>& woq_registry();
WoqSpec woq_check_desc(const char* fn, const WoqDesc& d);

// Reference: w dequantized (fma(q, s, o)), plain fp32 sums in increasing k, the GEMM epilogue.
void woq_reference(const WoqSpec& s, const WoqCall& call);

// The epilogue and store of rows [m0, m0 + mb) x columns [n0, n1) from acc[(m - m0) * ld + (n - n0)]
// (the reference's expressions).
void woq_epilogue(const WoqSpec& s, const WoqCall& call, const float* acc, int64_t ld, int64_t m0, int64_t mb,
                  int64_t n0, int64_t n1);

// Per-ISA kernels (woq_avx512.cpp / woq_avx2.cpp, one template compiled twice):
//   decode: M <= 16, the weights dequantized in registers;
//   prefill: blocks of W dequantized (f32 or bf16) and run through the GEMM kernels.
std::shared_ptr<const WoqKernel> create_woq_gemv_avx512(const WoqSpec& s);
std::shared_ptr<const WoqKernel> create_woq_gemv_avx2(const WoqSpec& s);
std::shared_ptr<const WoqKernel> create_woq_prefill_avx512(const WoqSpec& s);
std::shared_ptr<const WoqKernel> create_woq_prefill_avx2(const WoqSpec& s);
// The decode kernels' per-call preparation of X (widening / pairing, group sums) over n items
// (work = elements touched): inline when small, else over all threads in equal slices, so that the
// region has the team size of the weight loop's region right after it. (A region of 2 threads
// before the 16-thread one made the VDPBF16PS kernel's M = 1 call at 16 threads on the device Xeon
// 1.58 ms against the FMA kernel's 131 us, whose preparation ran inline; the FMA kernel's own
// M = 16 call took 2.1 ms there with its 8-thread preparation region.)
inline void woq_prep_for(int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& f) {
    const int64_t T = get_num_threads();
    if (n <= 0) return;
    if (T <= 1 || n == 1 || work <= 16384) {
        f(0, n);
        return;
    }
    parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
        const int64_t b = n * t0 / T, e = n * t1 / T;
        if (b < e) f(b, e);
    });
}

// Decode with VDPBF16PS (woq_bf16.cpp): bf16 X, exact, M <= 16 (s8: M >= 6).
// By default on AMD CPUs with AVX512-BF16 + VBMI (woq_dp_enabled); set_woq_dp(1 / 0 / -1): on
// wherever the instructions are / off / the default (tests; XK_WOQ_DP=0/1 sets the start).
bool woq_dp_enabled();
void set_woq_dp(int mode);
bool woq_u4_dp_supports(const WoqSpec& s);
bool woq_s8_dp_supports(const WoqSpec& s);
std::shared_ptr<const WoqKernel> create_woq_dp(const WoqSpec& s);
// Exact s8 decode with VPDPBUSD on bf16 X split into base-128 digit planes (woq_planes.cpp), M <= 4.
// On wherever AVX512-VNNI + VBMI are unless XK_WOQ_PLANES=0 (read once); set_woq_planes(1 / 0 /
// -1): on / off / that start (tests).
bool woq_planes_enabled();
void set_woq_planes(int mode);
bool woq_planes_supports(const WoqSpec& s);
std::shared_ptr<const WoqKernel> create_woq_planes(const WoqSpec& s);
// On AMX (woq_amx.cpp): bf16 X, M >= 12: one call of the AMX bf16 GEMM kernel whose B column
// blocks (32 columns = two of ours) are produced straight in its tile layout (woq_amx_pack_block:
// GemmCall::b_block_fn) inside the GEMM's one parallel region: dequantized and rounded to bf16, or
// at decode M the integer weights with each window's sums scaled per group (woq_amx_acc).
struct WoqAmxCtx {
    const WoqPacked* w = nullptr;
    int64_t nkb = 0;  // k steps of 32 (ceil(K / 32))
    // raw: bf16 of the integer weight itself (exact: s8 q, u4 q - 8 when sym8 else q), each window's
    // sums scaled per group by woq_amx_acc (GemmCall::b_acc_fn); xsum [M x G]: the groups' sums of X
    // (the offsets' term; null when there are no offsets or sym8).
    bool raw = false;
    int64_t m = 0;  // rows of X (raw)
    const float* xsum = nullptr;
};
void woq_amx_acc(const void* ctx, int64_t nb, int64_t kb0, int64_t kb1, int64_t rows, const float* win, float* acc);
// Writes the k steps [kb0, kb1) of column block nb (2048 bytes a step) at `packed`: bf16 by
// VCVTNE2PS2BF16 (AVX512-BF16, which every AMX CPU has), which flushes a denormal weight to a zero
// of its sign — the tile products treat a denormal bf16 input as that zero anyway (AMX-BF16 has
// DAZ), so the GEMM's results are those of the AMX packer's bf16 B.
void woq_amx_pack_block(const void* ctx, int64_t nb, int64_t kb0, int64_t kb1, void* packed);
bool woq_amx_prefill_supports(const WoqSpec& s);  // M > 16, or M >= woq_amx_decode_min_m()
int64_t woq_amx_decode_min_m();
std::shared_ptr<const WoqKernel> create_woq_amx_prefill(const WoqSpec& s);

// WoqCompute::int8 (woq_vnni.cpp): X quantized per row to s8, VPDPBUSD on the packed q, any M.
bool woq_vnni_supported();
std::shared_ptr<const WoqKernel> create_woq_vnni(const WoqSpec& s);
// WoqCompute::int8 on AVX2 (woq_int8_avx2.cpp): the same sums with VEX VPDPBUSD ymm (AVX-VNNI) or
// VPMADDUBSW / VPMADDWD (plain AVX2), bit for bit the reference's.
bool woq_avx_vnni_supported();
std::shared_ptr<const WoqKernel> create_woq_int8_avx_vnni(const WoqSpec& s);
std::shared_ptr<const WoqKernel> create_woq_int8_avx2(const WoqSpec& s);
// The int8 mode's activation quantization of one row (the reference's, shared by the kernels):
// sx = max|x| / 127 (1 when 0), q[k] = clamp(round_half_even(x[k] * (1 / sx)), -127, 127).
float woq_quantize_row(const WoqSpec& s, const void* a_row, int8_t* q);

}  // namespace xk::detail
