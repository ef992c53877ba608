// Internal interface of the attention family, shared by its implementations and the tests.
//
// Every public entry point (attention, cached_attention) is cut by the driver (attention.cpp)
// into tasks: one kv head of one sequence, a block of query tokens (rows = tokens x the q heads
// sharing the kv head, so K / V bytes are read once for the whole group), and a range of keys.
// A kernel runs one task and returns the unnormalised flash state per row: the running max m,
// the sum l = sum_j exp(s_j - m) and acc = sum_j exp(s_j - m) v_j. The driver merges the states
// of a split key range exactly (flash-decoding) and writes o = acc / l, lse = m + log(l).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "dispatch/registry.hpp"
#include "xk/attention.hpp"

namespace xk::detail {

// Which head_dims the vector / tile kernels are compiled for. Release builds: every multiple of their
// step up to 256. Sanitizer builds (XK_SANITIZER_BUILD, set by cmake/XkSanitizers.cmake): 16-96, 128
// and 256 only — the head_dims models use and the tests sweep; the others run the reference there
// (the kernels are one template per head_dim: all of them took attn_avx512.cpp 13 minutes to compile
// under clang's ASan + UBSan + coverage, the longest step of CI).
constexpr bool attn_hd_compiled(int64_t hd) {
#if defined(XK_SANITIZER_BUILD) && XK_SANITIZER_BUILD
    return hd <= 96 || hd == 128 || hd == 256;
#else
    return hd > 0;
#endif
}

struct AmxTileArgs;  // kernels/gemm/amx_tile.hpp

// What a kernel is created for.
struct AttnKernelDesc {
    int64_t head_dim = 0;
    DType kv_dtype = DType::f32;
    std::string key() const;
};

// Where the keys / values of one (sequence, kv head) live. Key j's row:
//   strided (blocks == nullptr): k + j*k_stride
//   paged: k + blocks[j / block_size]*block_elems + (j % block_size)*k_stride
// (k / v already offset to the kv head). Elements of kv_dtype.
struct AttnKvSource {
    const void* k = nullptr;
    const void* v = nullptr;
    int64_t k_stride = 0, v_stride = 0;  // elements between consecutive keys (inside a block)
    const int32_t* blocks = nullptr;     // paged: the sequence's block-table row
    int64_t block_size = 0;              // paged: a multiple of kAttnTile
    int64_t block_elems = 0;             // paged: elements between blocks of the pool
    // s8 only: the scale of key j's row at k_scale[j] (paged: k_scale[blocks[j / block_size] *
    // scale_block_elems + j % block_size]), likewise v_scale (already offset to the kv head).
    const float* k_scale = nullptr;
    const float* v_scale = nullptr;
    int64_t scale_block_elems = 0;
};

inline int64_t attn_scale_index(const AttnKvSource& s, int64_t j) {
    return s.blocks ? static_cast<int64_t>(s.blocks[j / s.block_size]) * s.scale_block_elems + j % s.block_size : j;
}

// Keys are processed in tiles of kAttnTile; a task's key range starts at a multiple of it, so a
// tile never crosses a block of a paged cache.
constexpr int64_t kAttnTile = 16;

struct AttnTask {
    int64_t tokens = 0;         // query tokens; rows r = t*group + g
    int64_t group = 0;          // q heads per kv head
    int64_t head_dim = 0;
    const float* q = nullptr;   // [tokens*group x head_dim] f32, already multiplied by the scale
    float scale = 1.0f;         // that scale (the AMX kernel divides it out before rounding q to bf16)
    const int64_t* limit = nullptr;  // [tokens]: token t sees keys j < limit[t] (and in the range)
    const float* mask = nullptr;     // optional: additive, token t / key j at mask[t*mask_stride + j]
    int64_t mask_stride = 0;
    AttnKvSource kv;
    int64_t j_begin = 0, j_end = 0;  // the key range (j_begin a multiple of kAttnTile)
    float* scratch = nullptr;        // attn_scratch_floats(rows, head_dim) floats for the kernel
};

// A task's online-softmax state at its start: m = -inf, l = 0, acc [R x hd] = 0.
inline void attn_state_reset(int64_t R, int64_t hd, float* m, float* l, float* acc) {
    for (int64_t r = 0; r < R; ++r) {
        m[r] = -__builtin_inff();
        l[r] = 0.0f;
    }
    for (int64_t i = 0; i < R * hd; ++i) acc[i] = 0.0f;
}

// The range of a task's limits: every token sees keys j < hi (at most j_end); all see j < lo.
inline void attn_limit_range(const AttnTask& t, int64_t& lo, int64_t& hi) {
    lo = t.j_end, hi = 0;
    for (int64_t i = 0; i < t.tokens; ++i) {
        if (t.limit[i] > hi) hi = t.limit[i];
        if (t.limit[i] < lo) lo = t.limit[i];
    }
}

// The end of the keys any token of the task sees: min(j_end, the largest limit).
// The masked lanes of one tile of 16 keys from j0 (n of them valid) in the scores of rows r < R
// (row r's at s0 + r * ld): keys past n or past the row's limit to -inf, the additive mask
// (times mask_scale: the kernels that keep scores in log2 units) added to the rest. Nothing to do
// where every lane is plainly visible (no mask, a full tile below lim_min of attn_limit_range).
inline void attn_mask_tile(const AttnTask& t, int64_t R, int64_t j0, int64_t n, int64_t lim_min, float* s0, int64_t ld,
                           float mask_scale = 1.0f) {
    if (!t.mask && n == kAttnTile && j0 + kAttnTile <= lim_min) return;
    for (int64_t r = 0; r < R; ++r) {
        const int64_t tok = r / t.group;
        const int64_t lim = t.limit[tok];
        const float* mrow = t.mask ? t.mask + tok * t.mask_stride + j0 : nullptr;
        float* s = s0 + r * ld;
        for (int64_t jj = 0; jj < kAttnTile; ++jj) {
            if (jj >= n || j0 + jj >= lim)
                s[jj] = -__builtin_inff();
            else if (mrow)
                s[jj] += mrow[jj] * mask_scale;
        }
    }
}

inline int64_t attn_key_end(const AttnTask& t) {
    int64_t lo, hi;
    attn_limit_range(t, lo, hi);
    return t.j_end < hi ? t.j_end : hi;
}

// Scratch of a task of `rows` rows: the decode path's tiles, or the prefill path's K^T / V tiles
// (64 keys x head_dim each) and its [rows x 64] scores.
// Keys per softmax step of the decode path (rows < 16): a multiple of kAttnTile.
constexpr int64_t kAttnDecodeChunk = 256;

// Rows from which a task takes the prefill kernels (fewer: the decode code).
constexpr int64_t kAttnPrefillRows = 16;

// Keys per softmax step of the sequential-order f32 decode (attn_seq_decode.hpp).
constexpr int64_t kAttnSeqChunk = 2048;

// Scratch of the AMX prefill kernel (attn_amx.cpp): q in bf16, the packed K / V tiles, one row
// block's scores / probabilities.
int64_t attn_amx_scratch_floats(int64_t rows, int64_t head_dim);

inline int64_t attn_scratch_floats(int64_t rows, int64_t head_dim) {
    return rows * (kAttnTile + 2) + 256 * kAttnTile + 64 + 2 * head_dim * 64 + rows * (65 + head_dim) + 64 +
           (rows < kAttnPrefillRows ? rows * kAttnSeqChunk : attn_amx_scratch_floats(rows, head_dim));
}

struct AttnKernel {
    virtual ~AttnKernel() = default;
    // Writes m[rows], l[rows] and acc[rows x head_dim] for the task's key range (rows that see no
    // key there: m = -inf, l = 0, acc = 0). Single-threaded.
    virtual void run(const AttnTask& t, float* m, float* l, float* acc) const = 0;
    // Query rows (tokens x group) per task the driver starts from for a prefill (it takes fewer
    // while that leaves under 4 tasks a thread): K / V tiles a task packs are shared by its rows.
    virtual int64_t task_rows() const { return 256; }
};

const Registry<AttnKernelDesc, AttnKernel>& attention_registry();

// The driver's row conversions with AVX-512 (attn_amx.cpp; call where isa_supported(avx512)),
// bit for bit its scalar loops: dst[d] = q[d] * scale (q f32 or bf16); o[d] = acc[d] * inv into
// f32 or bf16 (round to nearest even).
void attn_q_row_avx512(const void* src, bool bf16_in, float scale, float* dst, int64_t n);
void attn_o_row_avx512(const float* acc, float inv, bool bf16_out, void* dst, int64_t n);

// Decode prefetch distance in tiles of kAttnTile keys (0 = none): XK_ATTN_PF if set (read once,
// clamped to [0, 64]), else 2 (4 with XK_ATTN_PF_SPREAD=0). A tuning knob for the device runs.
int64_t attn_prefetch_tiles();
// How the decode prefetches are issued for a cache of elem_bytes (XK_ATTN_PF_SPREAD, read once, sets
// it for every dtype; default: 2 on AMD CPUs (better for bf16, f32 and s8 on the dev host's Zen 4),
// 1 elsewhere (on the device Xeon the two forms are within run-to-run noise per dtype; form 1 has
// the longest record there), docs/attention.md):
//   2 = split by phase: the score loop prefetches the K rows a distance ahead into L1
//     (PREFETCHT0, 4 keys' rows per 4-key group), the P.V loop the V rows of the next chunk of
//     kAttnDecodeChunk keys (XK_ATTN_PF_VHINT: the locality of __builtin_prefetch, default 2 =
//     PREFETCHT1, L2), each pass over the chunk its own lines — the stream runs through both phases
//     at the rate the compute consumes it (K and V bytes are equal, as the two phases' work is);
//   1 = K and V rows of the tile a distance ahead, both from the score loop into L1 (nothing during
//     P.V: the stream idles there);
//   0 = the earlier form, a whole tile's rows at once into L2 (PREFETCHT1) before its scores (a
//     burst of up to 128 prefetches that stalls the loop behind the core's fill buffers).
int attn_prefetch_mode(int elem_bytes = 4);
bool attn_prefetch_spread();  // mode != 0 (f32)
int attn_prefetch_vhint();
// The locality of the score loop's prefetches (forms 1 and 2): XK_ATTN_PF_KHINT 2 = PREFETCHT1 (the
// default on AMD CPUs: on the dev host's Zen 4 the decode stream ran 25-40% faster than with T0,
// likely as a T0 prefetch holds one of the few L1 miss buffers until its line arrives from DRAM),
// 3 = PREFETCHT0 (the default elsewhere). Read once.
int attn_prefetch_khint();
// The sequential-order f32 decode (attn_seq_decode.hpp) for f32 caches on AVX-512: override (tests /
// benches: 1 / 0; -1 = back to the default), else XK_ATTN_DECODE_SEQ (1 / 0, read once), else on for
// AMD CPUs (Zen 4: its hardware-prefetched stream beats the form-2 decode's) and off elsewhere.
bool attn_decode_seq();
void attn_decode_seq_override(int v);
bool attn_amd();  // cpu_info().vendor is AuthenticAMD (the prefetch defaults above)
// Prefill (AVX-512, >= 16 rows): the next 64-key tile's K / V rows prefetched into L2 during this
// tile's scores (XK_ATTN_PREFILL_PF=1: on; default off: no gain measured on the dev VM; read once). attn_prefill_prefetch_override: tests /
// measurement (0 / 1; -1: back to the env / default).
bool attn_prefill_prefetch();
void attn_prefill_prefetch_override(int v);
// Tests only: tiles >= 0 / spread (the mode) >= 0 replace the two settings above (-1: back to the env / defaults).
void attn_prefetch_override(int64_t tiles, int spread);

// Reference (specification): plain fp32 loops, the whole range at once (two passes).
void attention_reference(const AttnKernelDesc& kd, const AttnTask& t, float* m, float* l, float* acc);

// Vector kernels (attn_avx512.cpp, attn_avx2.cpp): head_dim a multiple of 16, up to 256; s8
// caches: avx512 only (the decode code for every row count).
std::shared_ptr<const AttnKernel> create_attention_avx512(const AttnKernelDesc& kd);
std::shared_ptr<const AttnKernel> create_attention_avx2(const AttnKernelDesc& kd);

// AMX kernel (attn_amx.cpp, registry "amx:bf16" at Isa::amx): bf16 caches with head_dim a multiple
// of 32 up to 256 and >= kAttnPrefillRows rows run both products on the GEMM's bf16 tile kernel
// (q and p rounded to bf16); every other task runs the avx512 kernel. emulate_tiles (tests only,
// never selected by dispatch): the tile kernel replaced by amx_tile_emulate, so the data flow runs
// on any AVX-512 BF16 machine without AMX.
// tile_acc: 1 = P V added on the tiles into acc in the C layout, 0 = a temporary block added with
// AVX-512, -1 = XK_ATTN_AMX_ACC (default 1).
std::shared_ptr<const AttnKernel> create_attention_amx(const AttnKernelDesc& kd, bool emulate_tiles, int tile_acc = -1);
std::shared_ptr<const AttnKernel> create_attention_amx_variant(const AttnKernelDesc& kd);  // (emulate_tiles = false)
// The same data flow with the tile kernel run on AVX512-BF16 (VDPBF16PS, attn_amx.cpp's dp_tile):
// registry "dpbf16:bf16" at Isa::avx512_bf16 (machines with AVX512-BF16 and no AMX, e.g. AMD Zen 4,
// where VDPBF16PS does twice the FMA's multiply-adds a cycle); the same roundings as amx:bf16.
// dp_decode: tasks of < 16 rows on VDPBF16PS too (attn_dp_decode.hpp: q and p rounded as above) —
// 1 on, 0 off (the intr:avx512 decode), -1 XK_ATTN_DP_DECODE (default: on for AMD CPUs).
std::shared_ptr<const AttnKernel> create_attention_dpbf16(const AttnKernelDesc& kd, int tile_acc = -1, int dp_decode = -1);
std::shared_ptr<const AttnKernel> create_attention_dpbf16_variant(const AttnKernelDesc& kd);
// Tests / profiling only: the tile kernel replaced by `tile` (an AmxTileFn of amx_tile.hpp; tile
// configure / release skipped), e.g. a no-op to time the rest of the kernel on machines without AMX.
std::shared_ptr<const AttnKernel> create_attention_amx_custom(const AttnKernelDesc& kd, void (*tile)(const AmxTileArgs*),
                                                              int tile_acc = -1);

}  // namespace xk::detail
