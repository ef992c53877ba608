// The AMX GEMM's bf16 tile kernel (jit_gemm_amx.cpp), shared with other families (the attention
// prefill). Internal.
//
// One call computes a 32 x 32 f32 block C = A[32 x K] * B[K x 32] over `steps` k steps of 32
// (TDPBF16PS, all eight tiles configured 16 rows x 64 bytes by amx_tile_config()):
//   A: row m of k step s at  a + s*a_step + m*lda  (32 bf16 = 64 bytes; a_step 64 for rows in
//      place, 2048 for a packed [step][32 rows][32 k] block); optionally one more step from a_tail
//      (a packed [32 rows][32 k] bf16 buffer);
//   B: packed, per k step 2048 bytes = two 1 KiB tiles (columns 0-15, 16-31), tile row p
//      (p < 16) = 16 dwords, dword c = (B[2p][c] in the low half, B[2p+1][c] in the high half)
//      (VNNI pairs), zero-padded in K and N;
//   C: acc, 32 rows of 32 f32 (128-byte rows); accumulate != 0 adds to acc's values, else
//      starts from 0; the sums are stored to acc, or to c_out (rows ldc_out bytes apart) where
//      c_out is set.
// Per element and k pair: c += a[2p]*b[2p]; c += a[2p+1]*b[2p+1] in f32 (products exact,
// round-to-nearest-even adds, bf16 / f32 denormals flushed).
//
// Call only where isa_supported(Isa::amx) (the registry's amx level): the tiles must be
// configured (configure(amx_tile_config())) on the calling thread before fn, released after.
#pragma once
#include <cstdint>

namespace xk::detail {

struct AmxTileArgs {
    const void* a = nullptr;       // row 0, k 0 of the block's A
    int64_t lda = 0;               // bytes between A rows
    const void* b = nullptr;       // the packed B block
    float* acc = nullptr;          // 32 x 32 f32 (128-byte rows)
    int64_t steps = 0;             // k steps read from a (>= 0)
    const void* a_tail = nullptr;  // one more k step from a packed [32][32] bf16 buffer, or null
    int64_t accumulate = 0;        // non-zero: start from acc's sums (earlier K blocks), else 0
    int64_t a_step = 64;           // bytes between k steps of a (64 in place, 2048 packed)
    void* c_out = nullptr;         // non-null: the sums go to c_out (32 rows of 32 f32 / s32,
    int64_t ldc_out = 0;           //   ldc_out bytes apart) instead of acc
    int64_t b_next = 0;            // (the GEMM's 16-row kernel of two column blocks: bytes from
                                   //  the first block's B to the second's; unused by fn)
};
using AmxTileFn = void (*)(const AmxTileArgs*);
using AmxCfgFn = void (*)(const void*);

constexpr int kAmxTileStepBytes = 2048;  // one k step of a packed B block

struct AmxBf16Tile {
    AmxTileFn fn = nullptr;
    AmxCfgFn configure = nullptr;  // LDTILECFG of its argument
    void (*release)() = nullptr;   // TILERELEASE
};

// The JIT bf16 tile kernel (generated once, cached for the process). Generating it executes no
// tile instruction; calling it does.
AmxBf16Tile amx_bf16_tile();
// The 64-byte LDTILECFG block the tile kernel expects.
const void* amx_tile_config();

// A scalar model of fn (same arguments, same packed layouts, the per-pair order above), for tests
// of the tile data flow on machines without AMX (attn_amx.cpp).
void amx_tile_emulate(const AmxTileArgs* args);

}  // namespace xk::detail
