// AMX bf16 GEMM (Isa::amx): bf16 x bf16 -> f32 | bf16 on Intel's tile engine (TDPBF16PS).
//
// Tiles (one configuration for all eight, 16 rows x 64 bytes): C is computed in blocks of
// 32 x 32 f32 held in four accumulator tiles (tmm0..3, 2 x 2), fed per k step of 32 by two A
// tiles (tmm4, 5: rows 0-15 and 16-31, 32 bf16 each) and two B tiles (tmm6, 7: columns 0-15 and
// 16-31, 16 k-pairs each). TDPBF16PS adds, per k-pair, both products of bf16 values (exact) to the
// f32 accumulator with RNE and denormals flushed (as VDPBF16PS): not the reference's
// one-k-at-a-time order, so results differ from it within a few ulps of the dot product's
// magnitude (docs/gemm.md).
//
// B is packed once (GemmPlan::pack_b, or per call: see run()) into the tile layout: 32-column blocks, each
// ceil(K/32) k steps of two 1 KiB tiles [k-pair][16 columns][2], zero-padded in K and N; a
// row-major B by one two-source permute per tile row (VPERMT2W / VPERMT2B). Device Xeon, int8
// plain B at 16 threads, xk / oneDNN, the permutes and shared pieces (run()) against the 128-bit
// unpacks with each block packed by the first task alone (XK_AMX_BPACK=0), two slots: 384x768x768
// 1.00 / 1.04 -> 1.07 / 1.08x, 1024^3 1.20 / 1.20 -> 1.38 / 1.35x, 384x3072x768 1.20 / 1.27 -> 1.33 /
// 1.33x, 384x768x3072 1.34 / 1.63 -> 1.63 / 1.45x; yet a thread's own packing did not get faster
// (XK_AMX_PROFILE: 1024^3 64 -> 72 us a call, 384x768x768 7 -> 11 us, waiting 7 -> 2 / 2 -> 1 us):
// about 1 GB/s a thread at 16 threads: not the instructions (the permutes take a third of the
// unpacks'), the reads (32 bytes of each B row, rows ldb apart) are the suspect. A's
// 32-row block is packed [k step][32 rows][32 k] (zero-padded), once per row block by each thread
// that works on it: contiguous tile loads beat strided ones from A in place (device Xeon, one
// run, prepacked rows: bf16 at 16 threads 0.98-1.59x oneDNN in place, 1.21-1.54x packed; int8 K =
// 1024 in place meets few L1 sets). XK_AMX_PACKA=0 reads A in place where it can (trans_a = N,
// full 32-row blocks, the K tail copied to a zero-padded 2 KiB buffer).
// The tile kernel keeps the four C tiles for K blocks of 64 k steps (bf16 K 2048, int8 K 4096: the
// whole K of most layers; A's 32-row block stays in L2 while the task's column blocks pass) and
// parks their sums in per-thread 32 x 32 f32 buffers; a generated AVX-512 epilogue
// (JitGemmBase::emit_epilogue: alpha, beta, bias, activation, residual, bf16 rounding) writes C
// from them — or, where that would change nothing (f32 / s32 C, alpha 1, beta 0, no epilogue or
// zero points), the tiles of a full block are stored straight into C.
//
// Blocking: B in chunks of up to 16 32-column blocks and about 1 MiB (the 2 MiB L2 of the Xeon's
// cores). Every thread (one too) takes one rectangle of the (32-row block x column block) grid
// (tm x tn threads, the most even split, then the least A + B traffic), walked chunk-major (with a
// B packed in the call, the tm threads of a grid column claim its row blocks one at a time); A
// packed per thread and row block, or, where a thread's columns span several B chunks (it would
// re-pack each row block per chunk), once per call into a buffer the threads share, each row block
// by the first thread that needs it.
// Row blocks of up to 16 rows run the 16-row kernels (one A tile against one or two column blocks;
// A packed [step][16 rows][64 bytes]): no products on padding rows.
// Measured on the device Xeon (16 cores, bench_gemm's `_vs_onednn` rows, one run each): the
// rectangles against the earlier chunk-major task list took 16-thread bf16 from 0.89-1.36x oneDNN
// to 0.97-1.49x; K blocks of 64 steps against 8 took 16-thread int8 from 0.77-1.13x to 0.81-1.35x
// and bf16 from 0.98-1.40x to 0.96-1.56x (1 thread within the host's noise).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>
#include <immintrin.h>

// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands) when they are
// inlined into target-attribute functions: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "common/parallel.hpp"
#include "xk/runtime.hpp"
#include "dispatch/kernel_cache.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/amx_tile.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "xk/error.hpp"

namespace xk::detail {

using namespace Xbyak;

namespace {

// 16 rows of 64 bytes (row stride `stride` bytes) into 16 rows of 16 dwords: out[p * 16 + c] =
// dword p of row c.
__attribute__((target("avx512f,avx512bw"))) void amx_transpose16x64(const uint8_t* src, int64_t stride, uint32_t* out) {
    __m512i r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(src + i * stride);
    transpose16x16_epi32(r, t);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + p * 16, t[p]);
}

// The plain B's interleave of nblk full 32-column blocks side by side (B[.][n0 .. n0 + 32 nblk)),
// k steps [kb0, kb1): per tile row p, each block's 32 columns of the p-th k group (int8: 4 rows of
// 32 bytes, two per 512-bit register; bf16: 2 rows of 64 bytes) into both 16-column tiles by one
// two-source byte / word permute each (VPERMT2B / VPERMT2W): 2 or 4 loads, 2 permutes and 2 stores
// a tile row, where the 128-bit unpack ladder took 8 loads, 12 unpacks and 8 stores (int8); tile
// row by tile row across the blocks, so each B row is read once, whole lines in order. src:
// B[kb0 * kk][n0]; out: block 0's step kb0, block b's at out + b * bstride bytes.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void amx_pack_s8_rows(const uint8_t* src, int64_t ldb, int64_t nsteps,
                                                                             int64_t nblk, uint8_t* out, int64_t bstride) {
    alignas(64) uint8_t i0[64], i1[64];
    for (int j = 0; j < 64; ++j) i0[j] = static_cast<uint8_t>((j % 4) * 32 + j / 4), i1[j] = static_cast<uint8_t>(i0[j] + 16);
    const __m512i x0 = _mm512_load_si512(i0), x1 = _mm512_load_si512(i1);
    for (int64_t s = 0; s < nsteps; ++s)
        for (int p = 0; p < 16; ++p) {
            const uint8_t* r = src + (s * 64 + 4 * p) * ldb;
            uint8_t* o = out + s * kAmxTileStepBytes + p * 64;
            for (int64_t b = 0; b < nblk; ++b, r += 32, o += bstride) {
                const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r))),
                                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + ldb)), 1);
                const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 2 * ldb))),
                                                     _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 3 * ldb)), 1);
                _mm512_storeu_si512(o, _mm512_permutex2var_epi8(a, x0, c));
                _mm512_storeu_si512(o + 1024, _mm512_permutex2var_epi8(a, x1, c));
            }
        }
}
__attribute__((target("avx512f,avx512bw"))) void amx_pack_bf16_rows(const uint16_t* src, int64_t ldb, int64_t nsteps, int64_t nblk,
                                                                    uint8_t* out, int64_t bstride) {
    alignas(64) uint16_t i0[32], i1[32];
    for (int j = 0; j < 32; ++j) i0[j] = static_cast<uint16_t>((j % 2) * 32 + j / 2), i1[j] = static_cast<uint16_t>(i0[j] + 16);
    const __m512i x0 = _mm512_load_si512(i0), x1 = _mm512_load_si512(i1);
    for (int64_t s = 0; s < nsteps; ++s)
        for (int p = 0; p < 16; ++p) {
            const uint16_t* r = src + (s * 32 + 2 * p) * ldb;
            uint8_t* o = out + s * kAmxTileStepBytes + p * 64;
            for (int64_t b = 0; b < nblk; ++b, r += 32, o += bstride) {
                const __m512i a = _mm512_loadu_si512(r), c = _mm512_loadu_si512(r + ldb);
                _mm512_storeu_si512(o, _mm512_permutex2var_epi16(a, x0, c));
                _mm512_storeu_si512(o + 1024, _mm512_permutex2var_epi16(a, x1, c));
            }
        }
}

// Column sums (wrapping int32) of a packed int8 block's 32 columns: VPDPBUSD of ones with each
// tile row (4 signed k values per column).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void amx_block_colsums(const uint32_t* blk, int64_t nkb, int32_t* out) {
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int64_t kb = 0; kb < nkb; ++kb)
        for (int p = 0; p < 16; ++p) {
            s0 = _mm512_dpbusd_epi32(s0, ones, _mm512_loadu_si512(blk + kb * 512 + p * 16));
            s1 = _mm512_dpbusd_epi32(s1, ones, _mm512_loadu_si512(blk + kb * 512 + 256 + p * 16));
        }
    _mm512_storeu_si512(out, s0);
    _mm512_storeu_si512(out + 16, s1);
}

constexpr int kBlk = 32;             // rows / columns of a C block, k per step
constexpr int kStepBytes = 2048;     // one k step of a packed B block (two tiles)
constexpr int64_t kChunkBytes = 1 << 20;  // packed B per chunk (L2)
constexpr int64_t kMaxChunk = 16;         // column blocks per task (their accumulators: 64 KiB)
constexpr int64_t kKSteps = 64;           // k steps per K block (A: 32 x 2048 bf16, 128 KiB)

// Experiment overrides, read once: XK_AMX_KSTEPS (k steps per K block, default kKSteps),
// XK_AMX_PACKA (0: A in place wherever possible, 1 (default): always packed, -1: packed when the
// rows' stride is a multiple of 2 KiB, the earlier default) and XK_AMX_R16 (0: row blocks of up to
// 16 rows through the 32-row kernel, as before the 16-row one).
int64_t env_int(const char* name, int64_t def) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoll(v) : def;
}
int64_t k_steps() {
    static const int64_t v = std::max<int64_t>(1, env_int("XK_AMX_KSTEPS", kKSteps));
    return v;
}
// Row blocks of up to 16 rows (M <= 16, the last block of other M): the 16-row kernels, two column
// blocks a call (default 2; 1: one column block a call; 0: the 32-row kernel).
int64_t amx_r16() {
    static const int64_t v = std::max<int64_t>(0, std::min<int64_t>(2, env_int("XK_AMX_R16", 2)));
    return v;
}
constexpr int kPrefetch = 2;  // the tile kernels prefetch A and B this many k steps ahead
// XK_AMX_PROFILE=1 (a measurement aid): TSC cycles per phase, summed over calls and threads,
// printed per call at exit: the call, the fork (call start -> a thread's region start), the tile
// configuration, A packing + row terms, B packing (own pieces), waiting for B, the decode ring's
// producer (xk::woq), the tile products, the stores, the release, a thread's region (mean and the
// slowest thread's).
struct AmxProfile {
    enum { call, fork, cfg, apack, bpack, bwait, bprod, tiles, epi, rel, region, region_max, calls, thr, n };
    std::atomic<uint64_t> v[n] = {};
    static bool on() {
        static const bool b = env_int("XK_AMX_PROFILE", 0) != 0;
        return b;
    }
    static AmxProfile& get() {
        static AmxProfile* p = [] {
            auto* q = new AmxProfile;
            std::atexit([] { get().print(); });
            return q;
        }();
        return *p;
    }
    void add(int i, uint64_t x) { v[i].fetch_add(x, std::memory_order_relaxed); }
    void max(int i, uint64_t x) {
        uint64_t c = v[i].load(std::memory_order_relaxed);
        while (x > c && !v[i].compare_exchange_weak(c, x, std::memory_order_relaxed)) {
        }
    }
    void print() const {
        const uint64_t nc = v[calls].load(), nt = v[thr].load();
        if (!nc || !nt) return;
        const auto t0 = std::chrono::steady_clock::now();
        const uint64_t c0 = __rdtsc();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20)) {
        }
        const double ghz = double(__rdtsc() - c0) / std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
        auto us = [&](int i, uint64_t d) { return double(v[i].load()) / double(d) / ghz / 1000.0; };
        std::fprintf(stderr,
                     "[xk amx profile] %llu calls, %.1f threads/call, us per call: call %.1f | per thread: fork %.1f cfg %.2f "
                     "apack %.2f bpack %.2f bwait %.2f ring-producer %.1f tiles %.1f epi %.2f rel %.2f region %.1f (sum of "
                     "slowest-thread regions / calls %.1f)\n",
                     static_cast<unsigned long long>(nc), double(nt) / double(nc), us(call, nc), us(fork, nt), us(cfg, nt),
                     us(apack, nt), us(bpack, nt), us(bwait, nt), us(bprod, nt), us(tiles, nt), us(epi, nt), us(rel, nt), us(region, nt),
                     us(region_max, nc));
    }
};

int64_t pack_a_mode() {
    static const int64_t v = env_int("XK_AMX_PACKA", 1);
    return v;
}
constexpr int64_t kSharedAMaxBytes = int64_t(64) << 20;  // the shared packed A, at most

struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

const TileConfig& tile_config() {
    static const TileConfig c = [] {
        TileConfig t;
        for (int i = 0; i < 8; ++i) t.colsb[i] = 64, t.rows[i] = 16;
        return t;
    }();
    return c;
}

// One 32 x 32 block: acc = A[32 x K] * B[K x 32] (all k steps): AmxTileArgs (amx_tile.hpp).

// The tile product of a kernel: bf16 pairs, u8 x s8 or s8 x s8 quads (s32 accumulators, wrapping).
enum class TileOp : int { bf16 = 0, u8s8 = 1, s8s8 = 2 };
const char* tile_op_name(TileOp op) { return op == TileOp::bf16 ? "bf16" : op == TileOp::u8s8 ? "u8s8" : "s8s8"; }

class JitAmxTile : public JitGenerator {
public:
    // rows16 = false: the 32 x 32 block (AmxTileArgs). rows16 = true: 16 rows (one A tile a k step,
    // packed [step][16 rows][64 bytes] or in place) against nblk = 1 or 2 column blocks (the second
    // one's B at b + b_next, its sums at acc + 4 KiB / c_out + 128 bytes): 2 or 4 C tiles, no
    // product on padding rows (the 32-row block computes 32 rows for M <= 16).
    JitAmxTile(TileOp op, bool rows16 = false, int nblk = 1) : JitGenerator(Isa::amx, 8192) {
        const Reg64 rP = rdi, rA = rsi, rA16 = rdx, rB = rcx, rK = r8, rS = r9, rT = r10, rC = r11;
        const Reg64 rB1 = rdx;  // rows16, nblk 2: the second column block's B
        const int nc = rows16 ? 2 * nblk : 4;  // C tiles
        // C tile t: rows16: column block t / 2, half t % 2; else row half t / 2, column half t % 2.
        auto acc_off = [&](int t) { return rows16 ? (t / 2) * 4096 + (t % 2) * 64 : (t / 2) * 16 * 128 + (t % 2) * 64; };
        auto dp = [&](const Tmm& c, const Tmm& a, const Tmm& b) {
            if (op == TileOp::bf16)
                tdpbf16ps(c, a, b);
            else if (op == TileOp::u8s8)
                tdpbusd(c, a, b);
            else
                tdpbssd(c, a, b);
        };
        mov(rA, ptr[rP + offsetof(AmxTileArgs, a)]);
        mov(rS, ptr[rP + offsetof(AmxTileArgs, lda)]);
        mov(rB, ptr[rP + offsetof(AmxTileArgs, b)]);
        mov(rK, ptr[rP + offsetof(AmxTileArgs, steps)]);
        mov(rT, ptr[rP + offsetof(AmxTileArgs, a_tail)]);
        mov(rC, ptr[rP + offsetof(AmxTileArgs, acc)]);
        if (!rows16) {
            mov(rA16, rS);
            shl(rA16, 4);
            add(rA16, rA);
        } else if (nblk == 2) {
            mov(rB1, ptr[rP + offsetof(AmxTileArgs, b_next)]);
            add(rB1, rB);
        }
        Label l_zero, l_go;
        cmp(qword[rP + offsetof(AmxTileArgs, accumulate)], 0);
        je(l_zero);
        mov(eax, 128);
        for (int t = 0; t < nc; ++t) tileloadd(Tmm(t), ptr[rC + rax + acc_off(t)]);
        jmp(l_go);
        L(l_zero);
        for (int t = 0; t < nc; ++t) tilezero(Tmm(t));
        L(l_go);
        // B streams from L2 (or DRAM): the k step kPrefetch steps ahead of A and B is prefetched
        // into L1 beside the products. Device Xeon, bf16 paired rows, one run: distance 2 took 16
        // threads from 0.99 / 1.32x oneDNN to 1.24 / 1.48x at 1024^3 / 2048^3 (1 and 4: no better).
        // Each tile load sits right before the first product that reads it (A0 B0 | A0 B1 | A1 B0 |
        // A1 B1 with B1 and A1 loaded between the products), as oneDNN's brgemm: with the A
        // prefetch, the direct stores and the one-thread rectangle, geometric mean of bf16 + u8s8s32
        // prepacked xk / oneDNN at 1 and 16 threads 1.18x -> 1.30x (device Xeon, one run).
        const int pf = kPrefetch;
        auto step = [&](const Reg64& a0, const Reg64& a1, int a1_off, const Reg64& stride, bool main) {
            int q = 0, qa = 0;
            auto pref = [&] {
                if (!main) return;
                for (int l = 0; l < 8; ++l, ++q) prefetcht0(ptr[rB + pf * kStepBytes + q * 64]);
                for (int l = 0; l < 8; ++l, ++qa) prefetcht0(ptr[a0 + pf * kStepBytes + qa * 64]);
            };
            tileloadd(tmm4, ptr[a0 + stride]);
            tileloadd(tmm6, ptr[rB + rax]);
            dp(tmm0, tmm4, tmm6);
            pref();
            tileloadd(tmm7, ptr[rB + rax + 1024]);
            dp(tmm1, tmm4, tmm7);
            pref();
            tileloadd(tmm5, ptr[a1 + stride + a1_off]);
            dp(tmm2, tmm5, tmm6);
            pref();
            dp(tmm3, tmm5, tmm7);
            pref();
            add(rB, kStepBytes);
        };
        // rows16: k steps in pairs, the A tile alternating between tmm4 and tmm5 (a tile load waits
        // for the products still reading its register: none of the step before); B tiles: nblk 1
        // tmm6, 7 then tmm2, 3 (free: two C tiles), nblk 2 tmm6, 7, 6, 7 (each load two products
        // after the one that read the register last). A packed: 1 KiB a step (its prefetch distance).
        auto step16 = [&](int u, const Reg64& a, const Reg64& stride, bool main) {
            const Tmm ta = Tmm(4 + u);
            int qb = 0, qa = 0;
            const int a_lines_per = 16 / (2 * nblk);
            auto pref = [&](const Reg64& bb, int half) {
                if (!main) return;
                for (int l = 0; l < 16; ++l, ++qb) prefetcht0(ptr[bb + pf * kStepBytes + half * 1024 + l * 64]);
                for (int l = 0; l < a_lines_per; ++l, ++qa) prefetcht0(ptr[a + pf * 1024 + qa * 64]);
            };
            tileloadd(ta, ptr[a + stride]);
            for (int j = 0; j < nblk; ++j) {
                const Reg64& bb = j == 0 ? rB : rB1;
                for (int h = 0; h < 2; ++h) {
                    const Tmm tb = nblk == 1 ? Tmm(u == 0 ? 6 + h : 2 + h) : Tmm(6 + h);
                    tileloadd(tb, ptr[bb + rax + h * 1024]);
                    dp(Tmm(2 * j + h), ta, tb);
                    pref(bb, h);
                }
            }
            add(rB, kStepBytes);
            if (nblk == 2) add(rB1, kStepBytes);
        };
        mov(eax, 64);  // B tiles: 64-byte rows
        Label l_loop, l_tail, l_store, l_acc;
        if (!rows16) {
            test(rK, rK);
            jz(l_tail);
            align(16);
            L(l_loop);
            step(rA, rA16, 0, rS, true);
            add(rA, ptr[rP + offsetof(AmxTileArgs, a_step)]);
            add(rA16, ptr[rP + offsetof(AmxTileArgs, a_step)]);
            dec(rK);
            jnz(l_loop);
            L(l_tail);
            test(rT, rT);
            jz(l_store);
            step(rT, rT, 1024, rax, false);
        } else {
            Label l_one;
            cmp(rK, 2);
            jl(l_one);
            align(16);
            L(l_loop);
            for (int u = 0; u < 2; ++u) {
                step16(u, rA, rS, true);
                add(rA, ptr[rP + offsetof(AmxTileArgs, a_step)]);
            }
            sub(rK, 2);
            cmp(rK, 2);
            jge(l_loop);
            L(l_one);
            test(rK, rK);
            jz(l_tail);
            step16(0, rA, rS, true);
            L(l_tail);
            test(rT, rT);
            jz(l_store);
            step16(1, rT, rax, false);
        }
        L(l_store);
        // The sums: to c_out (rows ldc_out bytes apart) where set, else to acc (128-byte rows).
        mov(rT, ptr[rP + offsetof(AmxTileArgs, c_out)]);
        test(rT, rT);
        jz(l_acc);
        mov(rax, ptr[rP + offsetof(AmxTileArgs, ldc_out)]);
        if (rows16) {
            for (int t = 0; t < nc; ++t) tilestored(ptr[rT + rax + (t / 2) * 128 + (t % 2) * 64], Tmm(t));
        } else {
            tilestored(ptr[rT + rax], tmm0);
            tilestored(ptr[rT + rax + 64], tmm1);
            mov(rK, rax);
            shl(rK, 4);
            add(rT, rK);
            tilestored(ptr[rT + rax], tmm2);
            tilestored(ptr[rT + rax + 64], tmm3);
        }
        ret();
        L(l_acc);
        mov(eax, 128);
        for (int t = 0; t < nc; ++t) tilestored(ptr[rC + rax + acc_off(t)], Tmm(t));
        ret();
    }
};

class JitAmxCfg : public JitGenerator {
public:
    // 0: LDTILECFG [rdi], 1: TILERELEASE
    explicit JitAmxCfg(int what) : JitGenerator(Isa::amx, 256) {
        if (what == 1)
            tilerelease();
        else
            ldtilecfg(ptr[rdi]);
        ret();
    }
};

// The fused store of a block: rows x ncols of the 32 x 32 f32 buffer -> C.
struct AmxEpiArgs {
    const float* acc = nullptr;  // 128-byte rows
    void* c = nullptr;           // C[0, 0] of the block
    int64_t ldc = 0;             // bytes
    const float* bias = nullptr; // bias[0] of the block's first column
    const void* res = nullptr;   // residual[0, 0] of the block
    int64_t ldr = 0;             // bytes
    const GemmScalars* scal = nullptr;
    int64_t rows = 0;            // 1..32
};
using AmxEpiFn = void (*)(const AmxEpiArgs*);

class JitAmxEpi : public JitGemmBase {
public:
    JitAmxEpi(const GemmEpi& e, int ncols) : JitGemmBase(Isa::avx512, 64 * 1024) {
        const int nv = (ncols + 15) / 16;
        const Reg64 rP = rdi, rAcc = rsi, rC = rdx, rLdc = rcx, rBias = r8, rRes = r9, rScal = r10, rRows = r11,
                    rTbl = r12, rTmp = rax;
        preamble({r12});
        push(rbp);
        mov(rbp, rsp);
        and_(rsp, -64);
        const int spill = (spill_bytes(8, nv) + 63) / 64 * 64;
        sub(rsp, spill);
        mov(rAcc, ptr[rP + offsetof(AmxEpiArgs, acc)]);
        mov(rC, ptr[rP + offsetof(AmxEpiArgs, c)]);
        mov(rLdc, ptr[rP + offsetof(AmxEpiArgs, ldc)]);
        mov(rBias, ptr[rP + offsetof(AmxEpiArgs, bias)]);
        mov(rRes, ptr[rP + offsetof(AmxEpiArgs, res)]);
        mov(rScal, ptr[rP + offsetof(AmxEpiArgs, scal)]);
        mov(rRows, ptr[rP + offsetof(AmxEpiArgs, rows)]);
        set_tail_mask(ncols - (nv - 1) * 16);
        const Address ldr = ptr[rP + offsetof(AmxEpiArgs, ldr)];
        EpiRegs er;
        er.c_row = rC, er.res_row = rRes, er.bias = rBias, er.scal = rScal, er.tbl = rTbl, er.gtmp = rTmp;
        er.ldc = &rLdc;
        er.ldr = &ldr;
        auto rows = [&](int mr) {
            for (int i = 0; i < mr; ++i)
                for (int j = 0; j < nv; ++j) vmovups(V(acc_idx(i, j, nv)), ptr[rAcc + i * 128 + j * 64]);
            emit_epilogue(e, mr, nv, ncols, er, 0);
            add(rAcc, mr * 128);
        };
        Label l8, l1, l_done;
        L(l8);
        cmp(rRows, 8);
        jl(l1);
        rows(8);
        sub(rRows, 8);
        jmp(l8);
        L(l1);
        test(rRows, rRows);
        jz(l_done);
        rows(1);
        dec(rRows);
        jmp(l1);
        L(l_done);
        mov(rsp, rbp);
        pop(rbp);
        postamble();
    }
};

struct AmxCode {
    virtual ~AmxCode() = default;
};
struct TileCode final : AmxCode {
    JitAmxTile tile, tile16_1, tile16_2;  // 32 x 32; 16 rows x 1 / 2 column blocks
    JitAmxCfg cfg{0}, rel{1};
    AmxTileFn fn = nullptr, fn16[2] = {};
    AmxCfgFn configure = nullptr;
    void (*release)() = nullptr;
    explicit TileCode(TileOp op) : tile(op), tile16_1(op, true, 1), tile16_2(op, true, 2) {
        fn = tile.finalize<AmxTileFn>();
        fn16[0] = tile16_1.finalize<AmxTileFn>();
        fn16[1] = tile16_2.finalize<AmxTileFn>();
        configure = cfg.finalize<AmxCfgFn>();
        release = rel.finalize<void (*)()>();
    }
};
struct EpiCode final : AmxCode {
    EpiCode(const GemmEpi& e, int ncols) : gen(e, ncols) { fn = gen.finalize<AmxEpiFn>(); }
    JitAmxEpi gen;
    AmxEpiFn fn = nullptr;
};

std::shared_ptr<const TileCode> tile_code(TileOp op) {
    return KernelCache::instance().get_or_create<TileCode>(std::string("gemm_amx_tile|") + tile_op_name(op), [op] {
        const double t0 = now_us();
        auto k = std::make_shared<TileCode>(op);
        verbose_log("create", "gemm_amx_tile", tile_op_name(op), now_us() - t0);
        return k;
    });
}

std::shared_ptr<const EpiCode> epi_code(const GemmEpi& e, int ncols) {
    const std::string key = e.key() + ",n" + std::to_string(ncols);
    return KernelCache::instance().get_or_create<EpiCode>("gemm_amx_epi|" + key, [&] {
        const double t0 = now_us();
        auto k = std::make_shared<EpiCode>(e, ncols);
        verbose_log("create", "gemm_amx_epi", key, now_us() - t0);
        return k;
    });
}

std::string amx_layout(const GemmSpec& s) {
    return std::string("amx:") + (s.int8() ? "int8" : "bf16") + ":K" + std::to_string(s.K) + ":N" + std::to_string(s.N);
}


#define XK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

// int8 block stores (AVX-512; the amx level implies it). acc: 32 x 32 s32 (128-byte rows) of
// sum a b; rowc / colc: the zero-point terms (wrapping adds, as the reference's s32 sums).
XK_AVX512 void int8_store_s32(const int32_t* acc, const int32_t* rowc, const int32_t* colc, int64_t rows, int ncols,
                              int32_t* C, int64_t ldc, bool add_c) {
    const __mmask16 m0 = ncols >= 16 ? __mmask16(0xffff) : __mmask16((1u << ncols) - 1);
    const __mmask16 m1 = ncols >= 32 ? __mmask16(0xffff) : ncols > 16 ? __mmask16((1u << (ncols - 16)) - 1) : 0;
    const __m512i c0 = _mm512_loadu_si512(colc), c1 = _mm512_loadu_si512(colc + 16);
    for (int64_t r = 0; r < rows; ++r) {
        const __m512i rc = _mm512_set1_epi32(rowc[r]);
        __m512i x0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(acc + r * 32), rc), c0);
        __m512i x1 = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(acc + r * 32 + 16), rc), c1);
        int32_t* c = C + r * ldc;
        if (add_c) {
            x0 = _mm512_add_epi32(x0, _mm512_maskz_loadu_epi32(m0, c));
            x1 = _mm512_add_epi32(x1, _mm512_maskz_loadu_epi32(m1, c + 16));
        }
        _mm512_mask_storeu_epi32(c, m0, x0);
        _mm512_mask_storeu_epi32(c + 16, m1, x1);
    }
}

// In place: acc (s32) -> f[n] * float(acc + rowc + colc) as f32, the reference's order
// (f[n] = (alpha * a_scale) * b_scale[n]).
XK_AVX512 void int8_dequant(float* acc, const int32_t* rowc, const int32_t* colc, const float* f, int64_t rows) {
    const __m512i c0 = _mm512_loadu_si512(colc), c1 = _mm512_loadu_si512(colc + 16);
    const __m512 f0 = _mm512_loadu_ps(f), f1 = _mm512_loadu_ps(f + 16);
    for (int64_t r = 0; r < rows; ++r) {
        const __m512i rc = _mm512_set1_epi32(rowc[r]);
        auto* p = reinterpret_cast<int32_t*>(acc + r * 32);
        const __m512i x0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(p), rc), c0);
        const __m512i x1 = _mm512_add_epi32(_mm512_add_epi32(_mm512_load_si512(p + 16), rc), c1);
        _mm512_store_ps(acc + r * 32, _mm512_mul_ps(f0, _mm512_maskz_cvtepi32_ps(0xffff, x0)));
        _mm512_store_ps(acc + r * 32 + 16, _mm512_mul_ps(f1, _mm512_maskz_cvtepi32_ps(0xffff, x1)));
    }
}

// x (f32, 128-byte rows) -> u8 / s8: clamp(nearbyint(x * inv) + zp) with NaN -> lo, as
// gemm_requantize.
XK_AVX512 void int8_requant(const float* x, int64_t rows, int ncols, float inv, float zp, float lo, float hi, bool s8,
                            void* C, int64_t ldc) {
    const __m512 vinv = _mm512_set1_ps(inv), vzp = _mm512_set1_ps(zp), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
    for (int64_t r = 0; r < rows; ++r) {
        auto* c = static_cast<uint8_t*>(C) + r * ldc;
        for (int h = 0; h < 2; ++h) {
            const int w = std::min(16, ncols - h * 16);
            if (w <= 0) break;
            __m512 q = _mm512_maskz_roundscale_ps(0xffff, _mm512_mul_ps(_mm512_load_ps(x + r * 32 + h * 16), vinv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q = _mm512_add_ps(q, vzp);
            q = _mm512_max_ps(q, vlo);  // a NaN first operand gives the second: lo
            q = _mm512_min_ps(q, vhi);
            const __m512i qi = _mm512_maskz_cvtps_epi32(0xffff, q);
            const __mmask16 m = w >= 16 ? __mmask16(0xffff) : __mmask16((1u << w) - 1);
            if (s8)
                _mm512_mask_cvtepi32_storeu_epi8(c + h * 16, m, qi);
            else
                _mm512_mask_cvtusepi32_storeu_epi8(c + h * 16, m, qi);
        }
    }
}

// Rows [0, rows) of a block: sum over k of a (u8 or s8), wrapping.
int32_t row_sum(const uint8_t* a, int64_t K, bool s8) {
    uint32_t t = 0;
    if (s8)
        for (int64_t k = 0; k < K; ++k) t += static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(a[k])));
    else
        for (int64_t k = 0; k < K; ++k) t += a[k];
    return static_cast<int32_t>(t);
}

class AmxGemm final : public GemmKernel {
public:
    explicit AmxGemm(const GemmSpec& s)
        : s_(s),
          layout_(amx_layout(s)),
          int8_(s.int8()),
          es_(s.int8() ? 1 : 2),
          kk_(s.int8() ? 64 : 32),
          tile_(tile_code(!s.int8() ? TileOp::bf16 : s.a_type == DType::u8 ? TileOp::u8s8 : TileOp::s8s8)) {
        avx512_ = cpu_info().avx512f && cpu_info().avx512bw;
        vbmi_ = avx512_ && __builtin_cpu_supports("avx512vbmi");
        vnni_ = avx512_ && cpu_info().avx512_vnni;
        GemmEpi e = gemm_epi(s);
        if (int8_) e.alpha_one = true;  // the dequantization applies alpha with the scales
        epi_full_ = epi_code(e, static_cast<int>(std::min<int64_t>(kBlk, s.N)));
        const int tail = static_cast<int>(s.N % kBlk);
        if (tail && s.N > kBlk) epi_tail_ = epi_code(e, tail);
        nkb_ = (s.K + kk_ - 1) / kk_;
        nblocks_ = (s.N + kBlk - 1) / kBlk;
    }

    std::string packed_layout() const override { return layout_; }

    // A B packed in the call: 2 (default) the permutes, in k pieces of a task's whole chunk packed
    // row by row across its blocks (pack_chunk); 1 the permutes in k pieces of each block; 0 the
    // earlier packing (128-bit unpacks, each block by the first task alone). XK_AMX_BPACK, for
    // measurements.
    static int64_t bpack_mode() {
        static const int64_t v = env_int("XK_AMX_BPACK", 2);
        return v;
    }
    bool perm_pack() const { return bpack_mode() != 0 && (int8_ ? vbmi_ : avx512_); }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override {
        auto p = std::make_shared<GemmPacked>(layout_, packed_bytes());
        pack_into(B, static_cast<uint8_t*>(p->data));
        return p;
    }

    // The packed B: the tiles, then (int8) the column sums, nblocks * 32 int32 after them.
    size_t packed_bytes() const {
        return static_cast<size_t>(nblocks_ * nkb_ * kStepBytes) + (int8_ ? static_cast<size_t>(nblocks_ * kBlk * 4) : 0);
    }

    // (groups of 4 blocks: a row-major B read row by row across them)
    void pack_into(const void* B, uint8_t* dst) const {
        const int64_t ng = (nblocks_ + 3) / 4;
        parallel_for(ng, 1, [&](int64_t g0, int64_t g1) {
            for (int64_t g = g0; g < g1; ++g) {
                const int64_t nb0 = 4 * g, nb1 = std::min(nblocks_, nb0 + 4);
                pack_chunk(B, nb0, nb1, 0, nkb_, dst);
                for (int64_t nb = nb0; int8_ && nb < nb1; ++nb) block_sums(nb, dst);
            }
        });
    }

    // Column block nb of op(B) into the tile layout at dst (the whole packed buffer), k steps
    // [kb0, kb1). Tile row (kb, p) of the half t: 16 columns x one k group (bf16: the pair 2p,
    // 2p + 1; int8: the quad 4p .. 4p + 3) as 32-bit words, the lower k in the low bits, zero
    // beyond K and N. Whole k steps go through vector code (B^T: a 16 x 16 dword transpose of
    // 64-byte rows per 16-column half; B: the permutes above for a whole 32-column block, else
    // 16-bit / 8-bit unpacks of 2 / 4 rows per half), the edges through the scalar loops.
    // Only k steps [kb0, kb1) (the pieces several threads pack of one block in a call, a window
    // of the ring), step kb0 to out (the others after it).
    // Blocks nb .. nb + nc - 1, steps [kb0, kb1), each into out + j * bstride (the decode ring's
    // windows). Two whole blocks of a plain B with whole k steps in one pass of the permutes, so each
    // 64-byte line of a B row (both blocks' columns for int8) is read once, back to back. Device
    // Xeon, 16x4096x4096 u8s8s32 plain, XK_AMX_PROFILE: B packing 2409 us of a 2948 us call at 1
    // thread (7 GB/s of B; bf16 11.4) with one block a pass. A/B (two runs each, xk / oneDNN, 1 |
    // 16 threads): u8s8s32 8x4096x4096 1.14 / 1.14 vs 0.77 / 0.77 | 1.06 / 1.06 vs 0.77 / 1.02,
    // 16x4096x4096 1.10 / 1.09 vs 0.73 / 0.72 | 1.10 / 1.17 vs 0.93 / 0.76; bf16 8x 1.16 / 1.21 vs
    // 1.05 / 1.02, 16x 1.24 / 1.24 vs 1.09 / 1.02 at 1 thread, a draw at 16. XK_AMX_RING_PAIR=0 (read
    // once): one block a pass.
    static bool ring_pair() {
        static const bool on = env_int("XK_AMX_RING_PAIR", 1) != 0;
        return on;
    }
    void pack_blocks(const void* B, int64_t nb, int64_t nc, int64_t kb0, int64_t kb1, uint8_t* out, int64_t bstride) const {
        const int64_t k1 = std::min(kb1, s_.K / kk_);
        if (ring_pair() && nc == 2 && s_.trans_b == Trans::N && perm_pack() && (nb + 2) * kBlk <= s_.N && k1 == kb1 && kb1 > kb0) {
            const int64_t ldb = s_.ldb, n0 = nb * kBlk;
            if (int8_)
                amx_pack_s8_rows(static_cast<const uint8_t*>(B) + kb0 * kk_ * ldb + n0, ldb, kb1 - kb0, 2, out, bstride);
            else
                amx_pack_bf16_rows(static_cast<const uint16_t*>(B) + kb0 * kk_ * ldb + n0, ldb, kb1 - kb0, 2, out, bstride);
            return;
        }
        for (int64_t j = 0; j < nc; ++j) pack_block(B, nb + j, kb0, kb1, out + j * bstride);
    }

    void pack_block(const void* B, int64_t nb, int64_t kb0, int64_t kb1, uint8_t* out) const {
        const bool bt = s_.trans_b == Trans::T;
        const int64_t K = s_.K, N = s_.N, ldb = s_.ldb;
        const int64_t kfirst = kb0;
        auto* blk = reinterpret_cast<uint32_t*>(out);  // (step kb at blk + (kb - kfirst) * 512)
        // (A software prefetch of the next k step's rows measured no faster: device, plain B at
        // 384x768x768 / 1024^3, 16 threads, bf16 / int8, one run.)
        const int64_t n0 = nb * kBlk, nn = std::min<int64_t>(kBlk, N - n0);
        const auto* src8 = static_cast<const uint8_t*>(B);
        const auto* src16 = static_cast<const uint16_t*>(B);
        if (!bt && nn == kBlk && perm_pack()) {  // whole steps of a whole block: the permutes
            const int64_t k1 = std::min(kb1, K / kk_);
            if (k1 > kb0) {
                if (int8_)
                    amx_pack_s8_rows(src8 + kb0 * kk_ * ldb + n0, ldb, k1 - kb0, 1, reinterpret_cast<uint8_t*>(blk), 0);
                else
                    amx_pack_bf16_rows(src16 + kb0 * kk_ * ldb + n0, ldb, k1 - kb0, 1, reinterpret_cast<uint8_t*>(blk), 0);
            }
            kb0 = std::max(kb0, k1);
        }
        for (int64_t kb = kb0; kb < kb1; ++kb) {
            const int64_t kbase = kb * kk_;
            const bool kfull = kbase + kk_ <= K;
            for (int t = 0; t < 2; ++t) {
                uint32_t* d0 = blk + (kb - kfirst) * (kStepBytes / 4) + t * 256;
                const int64_t c0 = n0 + t * 16, cn = std::max<int64_t>(0, std::min<int64_t>(16, nn - t * 16));
                if (kfull && cn == 16) {
                    if (bt && avx512_) {
                        amx_transpose16x64(src8 + (c0 * ldb + kbase) * es_, ldb * es_, d0);
                        continue;
                    }
                    if (!bt && !int8_) {
                        for (int p = 0; p < 16; ++p) {
                            const uint16_t* r0 = src16 + (kbase + 2 * p) * ldb + c0;
                            const uint16_t* r1 = r0 + ldb;
                            const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
                            const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + 8));
                            const __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
                            const __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + 8));
                            auto* d = reinterpret_cast<__m128i*>(d0 + p * 16);
                            _mm_storeu_si128(d, _mm_unpacklo_epi16(a0, b0));
                            _mm_storeu_si128(d + 1, _mm_unpackhi_epi16(a0, b0));
                            _mm_storeu_si128(d + 2, _mm_unpacklo_epi16(a1, b1));
                            _mm_storeu_si128(d + 3, _mm_unpackhi_epi16(a1, b1));
                        }
                        continue;
                    }
                    if (!bt && int8_) {
                        for (int p = 0; p < 16; ++p) {
                            const uint8_t* r = src8 + (kbase + 4 * p) * ldb + c0;
                            const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r));
                            const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + ldb));
                            const __m128i r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * ldb));
                            const __m128i r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 3 * ldb));
                            const __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
                            const __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
                            auto* d = reinterpret_cast<__m128i*>(d0 + p * 16);
                            _mm_storeu_si128(d, _mm_unpacklo_epi16(t0, t2));
                            _mm_storeu_si128(d + 1, _mm_unpackhi_epi16(t0, t2));
                            _mm_storeu_si128(d + 2, _mm_unpacklo_epi16(t1, t3));
                            _mm_storeu_si128(d + 3, _mm_unpackhi_epi16(t1, t3));
                        }
                        continue;
                    }
                }
                for (int p = 0; p < 16; ++p) {
                    uint32_t* d = d0 + p * 16;
                    if (!int8_) {
                        const int64_t k = kbase + 2 * p;
                        const bool k0 = k < K, k1 = k + 1 < K;
                        for (int c = 0; c < 16; ++c) {
                            uint32_t w = 0;
                            if (c < cn && k0) {
                                const uint32_t lo = bt ? src16[(c0 + c) * ldb + k] : src16[k * ldb + c0 + c];
                                const uint32_t hi = !k1 ? 0u : bt ? src16[(c0 + c) * ldb + k + 1] : src16[(k + 1) * ldb + c0 + c];
                                w = lo | hi << 16;
                            }
                            d[c] = w;
                        }
                    } else {
                        const int64_t k = kbase + 4 * p;
                        const int64_t kn = std::max<int64_t>(0, std::min<int64_t>(4, K - k));  // valid k of the quad
                        for (int c = 0; c < 16; ++c) {
                            uint32_t w = 0;
                            for (int64_t j = 0; c < cn && j < kn; ++j)
                                w |= uint32_t(bt ? src8[(c0 + c) * ldb + k + j] : src8[(k + j) * ldb + c0 + c]) << (8 * j);
                            d[c] = w;
                        }
                    }
                }
            }
        }
    }

    // Blocks [nb0, nb1) of op(B), k steps [kb0, kb1), into the packed buffer dst: whole blocks and
    // steps of a row-major B row by row across the blocks (amx_pack_*_rows), the rest per block.
    void pack_chunk(const void* B, int64_t nb0, int64_t nb1, int64_t kb0, int64_t kb1, uint8_t* dst) const {
        const int64_t bb = nkb_ * kStepBytes;
        const int64_t nbf = std::min(nb1, s_.N / kBlk);  // blocks below nbf are whole
        int64_t kr = kb0;                                 // whole blocks' steps [kb0, kr): the rows path
        if (s_.trans_b == Trans::N && perm_pack() && nbf > nb0) {
            const int64_t k1 = std::min(kb1, s_.K / kk_);
            if (k1 > kb0) {
                if (int8_)
                    amx_pack_s8_rows(static_cast<const uint8_t*>(B) + kb0 * kk_ * s_.ldb + nb0 * kBlk, s_.ldb, k1 - kb0, nbf - nb0,
                                     dst + nb0 * bb + kb0 * kStepBytes, bb);
                else
                    amx_pack_bf16_rows(static_cast<const uint16_t*>(B) + kb0 * kk_ * s_.ldb + nb0 * kBlk, s_.ldb, k1 - kb0,
                                       nbf - nb0, dst + nb0 * bb + kb0 * kStepBytes, bb);
                kr = k1;
            }
        }
        for (int64_t nb = nb0; nb < nb1; ++nb) {
            const int64_t k0 = nb < nbf ? kr : kb0;
            if (k0 < kb1) pack_block(B, nb, k0, kb1, dst + nb * bb + k0 * kStepBytes);
        }
    }

    // int8: block nb's column sums of op(B) (0 for padding), wrapping, from its packed quads in
    // dst (the whole packed buffer), stored after the tiles.
    void block_sums(int64_t nb, uint8_t* dst) const {
        const size_t tiles = static_cast<size_t>(nblocks_ * nkb_ * kStepBytes);
        const auto* blk = reinterpret_cast<const uint32_t*>(dst + nb * nkb_ * kStepBytes);
        {
            auto* out = reinterpret_cast<int32_t*>(dst + tiles) + nb * kBlk;
            if (vnni_) {
                amx_block_colsums(blk, nkb_, out);
            } else {
                int32_t acc[kBlk] = {};
                for (int64_t kb = 0; kb < nkb_; ++kb)
                    for (int t = 0; t < 2; ++t)
                        for (int p = 0; p < 16; ++p)
                            for (int c = 0; c < 16; ++c) {
                                const uint32_t w = blk[kb * (kStepBytes / 4) + t * 256 + p * 16 + c];
                                uint32_t sum = 0;
                                for (int j = 0; j < 4; ++j) sum += static_cast<uint32_t>(int32_t(int8_t(w >> (8 * j))));
                                acc[t * 16 + c] = static_cast<int32_t>(static_cast<uint32_t>(acc[t * 16 + c]) + sum);
                            }
                std::memcpy(out, acc, sizeof acc);
            }
        }
    }

    void run(const GemmCall& call) const override {
        // An unpacked B is packed per call into the calling thread's buffer (slot 2: the operands
        // it shares with the workers for one call; slot 3 holds the int8 column terms), each column
        // block right before its first tile products, in k pieces claimed one at a time by the
        // tasks that need the block (flags after the packed B: pieces claimed, pieces packed),
        // inside the one parallel region of the call — or, with one row block, into each thread's
        // ring (below).
        const GemmArgs& args = call.args;
        const uint8_t* bp = nullptr;
        uint8_t* lazy = nullptr;
        std::atomic<uint32_t>* flags = nullptr;
        const int64_t mblocks = (s_.M + kBlk - 1) / kBlk;
        // xk::woq's producer (b_block_fn) with one row block (decode M): each column block is read
        // by one task only, so it is produced a window of ring_steps k steps at a time (16 KiB at 8)
        // into the thread's buffer (slot 2, reused: L1) right before that window's tile products,
        // instead of into the N-wide buffer below, written and read back once per call (88 MB at
        // 11008 x 4096: DRAM traffic). XK_AMX_B_RING (read once): 0 = the N-wide buffer always
        // (before / after on the device), n > 0 = n k steps a window (default 8). A plain B with one
        // row block goes the same way, each window packed from B (int8 without an A zero point:
        // the column sums are not needed; XK_AMX_PLAIN_RING=0: the N-wide buffer). With b_acc_fn
        // (woq's integer weights) always the ring, windows of call.b_window steps (one group).
        static const int64_t ring_steps = env_int("XK_AMX_B_RING", 8);
        static const bool plain_ring = env_int("XK_AMX_PLAIN_RING", 1) != 0;
        const bool ring_on = ring_steps > 0 || call.b_acc_fn;
        const bool ring = ring_on && !call.packed_b && mblocks == 1 &&
                          (call.b_block_fn ? !int8_ : plain_ring && !(int8_ && args.a_zero_point != 0));
        const int64_t ring_ks = call.b_window > 0 ? call.b_window : std::max<int64_t>(1, ring_steps);
        if (call.packed_b) {
            bp = static_cast<const uint8_t*>(call.packed_b->data);
        } else if (ring) {
        } else {
            const size_t pbytes = (packed_bytes() + 63) / 64 * 64;
            auto* buf = reinterpret_cast<uint8_t*>(
                gemm_thread_buffer(2, (pbytes + static_cast<size_t>(2 * nblocks_) * sizeof(std::atomic<uint32_t>) + 3) / 4));
            flags = reinterpret_cast<std::atomic<uint32_t>*>(buf + pbytes);  // per block: pieces claimed, packed
            for (int64_t b = 0; b < 2 * nblocks_; ++b) new (flags + b) std::atomic<uint32_t>(0);
            lazy = buf;
            bp = buf;
        }
        alignas(64) GemmScalars sc;
        sc.set(call.alpha, call.beta);
        const int64_t M = s_.M, K = s_.K;
        const int64_t block_bytes = nkb_ * kStepBytes;
        const int64_t threads = get_num_threads();
        const auto* A = static_cast<const uint8_t*>(args.A);
        const bool at = s_.trans_a == Trans::T;
        const int64_t kfull = K / kk_, krem = K % kk_;
        const int64_t lda_b = s_.lda * es_;  // bytes
        const int c_es = static_cast<int>(dtype_size(s_.c_type));
        const int r_es = s_.residual_type == DType::bf16 ? 2 : 4;
        const TileCode& tc = *tile_;

        // int8: the zero-point terms (wrapping), the per-column dequantization factors, the
        // requantization constants.
        const int32_t za = int8_ ? args.a_zero_point : 0, zb = int8_ ? args.b_zero_point : 0;
        int32_t* colc = nullptr;
        float* fcol = nullptr;
        const bool requant = s_.c_type == DType::u8 || s_.c_type == DType::s8;
        float inv = 0, czp = 0, lo = 0, hi = 0;
        if (int8_) {
            const auto* sums = bp ? reinterpret_cast<const int32_t*>(bp + nblocks_ * nkb_ * kStepBytes) : nullptr;  // (null: the ring)
            float* terms = gemm_thread_buffer(3, static_cast<size_t>(2 * nblocks_ * kBlk));
            colc = reinterpret_cast<int32_t*>(terms);
            fcol = terms + nblocks_ * kBlk;
            std::fill(colc, colc + nblocks_ * kBlk, 0);
            std::fill(fcol, fcol + nblocks_ * kBlk, 0.0f);
            const uint32_t kzz = static_cast<uint32_t>(K) * static_cast<uint32_t>(za) * static_cast<uint32_t>(zb);
            if (!lazy && !ring)  // (else each block's terms as it is packed; the ring: no A zero point)
                for (int64_t n = 0; n < s_.N; ++n)
                    colc[n] = static_cast<int32_t>(kzz - static_cast<uint32_t>(za) * static_cast<uint32_t>(sums[n]));
            if (s_.c_type != DType::s32) {
                const float aa = call.alpha * args.a_scale[0];
                for (int64_t n = 0; n < s_.N; ++n) fcol[n] = aa * args.b_scales[s_.b_scale_per_channel ? n : 0];
            }
            if (requant) {
                inv = 1.0f / args.c_scale[0];
                czp = static_cast<float>(args.c_zero_point);
                lo = s_.c_type == DType::u8 ? 0.0f : -128.0f;
                hi = s_.c_type == DType::u8 ? 255.0f : 127.0f;
            }
        }

        // The grid: per-thread rectangles (tm x tn threads over the 32-row blocks x the column
        // blocks, every thread one rectangle walked chunk-major).
        int64_t tm = 1, tn = 1;
        {
            // A's bytes count twice against a prepacked B's in the tie-break (each thread packs its
            // row blocks' A: read, written, read again; the tiles read B once), once against a B
            // packed in the call (XK_AMX_AW: a fixed weight, for measurements). Device, 384x768x768
            // at 16 threads (12 x 24 blocks: 4 x 4 threads instead of 2 x 8), xk / oneDNN, three
            // runs: prepacked int8 1.23 / 0.94 / 0.97x -> 1.40 / 1.23 / 1.12x, bf16 1.59 / 1.39 /
            // 1.53x -> 1.69 / 1.83 / 1.48x; a plain B no better (int8 1.47 / 1.51x -> 1.18 / 1.03x).
            static const int64_t aw_env = env_int("XK_AMX_AW", 0);
            const int64_t a_weight = aw_env > 0 ? aw_env : call.packed_b ? 2 : 1;
            int64_t best = -1, best_traffic = 0;
            const int64_t a_bytes = M * K * es_, b_bytes = block_bytes * nblocks_;
            for (int64_t i = 1; i <= std::min<int64_t>(threads, mblocks); ++i) {
                const int64_t j = std::min<int64_t>(nblocks_, threads / i);
                const int64_t work = ((mblocks + i - 1) / i) * ((nblocks_ + j - 1) / j);
                const int64_t traffic = j * a_bytes * a_weight + i * b_bytes;
                if (best < 0 || work < best || (work == best && traffic < best_traffic)) {
                    best = work;
                    best_traffic = traffic;
                    tm = i;
                    tn = j;
                }
            }
        }
        const int64_t ntasks = tm * tn;
        // A B packed in the call: each block in `pieces` k ranges, claimed one at a time by the
        // tasks that reach the block (the tm grid rows share its columns: they pack it together,
        // where the first one alone packed it and the others waited); 1 without sharing.
        const int64_t pieces = !lazy ? 1 : bpack_mode() == 0 || tm == 1 ? 1 : std::min<int64_t>(nkb_, 2 * tm);
        const bool lazy_sums = int8_ && za != 0;
        const bool chunk_pieces = lazy && bpack_mode() == 2 && !call.b_block_fn;
        // One packed A for the call (the default packing, several threads per row block): each row
        // block is packed once, by the first thread that reaches it (the others wait on its flag),
        // instead of once per (thread, B chunk). The threads of one grid row start at different row
        // blocks, so they pack different blocks at first. Llama's M = 512 Linear shapes at 16
        // threads had spent ~24% of a thread's time re-packing A (K = 4096; more at K = 14336).
        const int64_t a_blk_bytes = nkb_ * kStepBytes;
        uint8_t* a_shared = nullptr;
        std::atomic<uint32_t>* a_flags = nullptr;
        // Only where a thread would pack a row block more than once (its columns span two B chunks
        // or more): else each thread packs each of its row blocks once anyway, and the blocks another
        // core packed arrive slower than the ones a core packs itself (device, 16 threads:
        // 384x768x768 and 512x1024x4096 lost 20-40% shared; 512x4096x14336 gained 2.9x, 512x14336x4096
        // 1.25x).
        const int64_t cols_t = (nblocks_ + tn - 1) / tn;
        const int64_t pc_t = std::max<int64_t>(1, std::min<int64_t>({cols_t, kChunkBytes / block_bytes, kMaxChunk}));
        const bool repacks = (cols_t + pc_t - 1) / pc_t >= 2;
        if (repacks && pack_a_mode() > 0 && mblocks * a_blk_bytes <= kSharedAMaxBytes) {
            const size_t abytes = static_cast<size_t>(mblocks * a_blk_bytes);
            auto* buf = reinterpret_cast<uint8_t*>(
                gemm_thread_buffer(5, (abytes + static_cast<size_t>(mblocks) * sizeof(std::atomic<uint32_t>) + 3) / 4));
            a_flags = reinterpret_cast<std::atomic<uint32_t>*>(buf + abytes);
            for (int64_t b = 0; b < mblocks; ++b) new (a_flags + b) std::atomic<uint32_t>(0);
            a_shared = buf;
        }
        // A block's sums straight from the tiles into C where the store would change nothing, at
        // full blocks (32 x 32, or 16 x 32 of the 16-row kernels) of the last K block.
        const bool direct = !(ring && call.b_acc_fn) && s_.beta == BetaKind::zero && call.beta == 0.0f &&
                            (int8_ ? s_.c_type == DType::s32 && za == 0 && zb == 0
                                   : s_.c_type == DType::f32 && s_.alpha_one && call.alpha == 1.0f && !s_.epilogue.bias &&
                                         s_.epilogue.act == Activation::none && !s_.epilogue.residual);
        const int64_t r16_blocks = amx_r16();

        // With a B packed in the call in chunk pieces, the tm tasks of a grid column claim its row
        // blocks one at a time (per B chunk) instead of each taking a fixed tm-th: a slow thread does
        // fewer. Device Xeon, 16 threads, one slot, plain B, 384x768x768 / 1024^3 / 384x3072x768 /
        // 384x768x3072, xk / oneDNN, int8: per-block pieces, fixed rows (two runs) 1.11-1.14 /
        // 1.12-1.19 / 1.12-1.15 / 1.69-1.71x; chunk pieces 1.21 / 1.17 / 1.07 / 1.80x; per-block
        // pieces and claims 1.07 / 1.03 / 1.02 / 1.61x; chunk pieces and claims (the default) 1.15 /
        // 1.28 / 1.28 / 1.70x (XK_AMX_PROFILE, 1024^3: 321 / 303 -> 240 us a call); bf16 per-block
        // fixed 1.33 / 1.49 / 1.57 / 1.45x, chunk and claims 1.69 / 1.90 / 1.56 / 1.72x. A prepacked
        // B: fixed 1.45 / 1.61 / 1.46 / 1.49x, claims 1.38 / 1.67 / 1.28 / 1.65x (fixed there).
        // XK_AMX_DYN=0 / 1: never / always.
        static const int64_t dyn_env = env_int("XK_AMX_DYN", -1);
        const bool dyn = dyn_env < 0 ? chunk_pieces : dyn_env != 0;
        struct alignas(64) RowClaim {
            std::atomic<int64_t> v{0};
        };
        std::unique_ptr<RowClaim[]> row_claims_buf;
        RowClaim* row_claims = nullptr;
        if (dyn && tm > 1) {
            row_claims_buf.reset(new RowClaim[static_cast<size_t>(nblocks_)]);
            row_claims = row_claims_buf.get();
        }
        const bool prof = AmxProfile::on();
        const uint64_t call_t0 = prof ? __rdtsc() : 0;
        std::atomic<uint64_t> region_max{0};
        parallel_for(ntasks, 1, [&](int64_t t0, int64_t t1) {
            uint64_t pt[AmxProfile::n] = {};
            uint64_t tnow = prof ? __rdtsc() : 0, tregion = tnow;
            if (prof) pt[AmxProfile::fork] = tnow - call_t0;
            auto lap = [&](int phase) {
                if (!prof) return;
                const uint64_t x = __rdtsc();
                pt[phase] += x - tnow;
                tnow = x;
            };
            // A worker's buffers: the packed A block (slot 0), the K tail of an A block read in
            // place and the f32 tile of the requantizing store (slot 1), the accumulators of a
            // task's column blocks (slot 4), the int8 row terms of the block.
            auto* a_pack = reinterpret_cast<uint8_t*>(gemm_thread_buffer(0, static_cast<size_t>(nkb_ * kStepBytes / 4)));
            float* small = gemm_thread_buffer(1, kBlk * 64 / 4 + kBlk * kBlk);
            auto* a_tail_buf = reinterpret_cast<uint8_t*>(small);
            float* tmp = small + kBlk * 64 / 4;
            float* accs = gemm_thread_buffer(4, static_cast<size_t>(kMaxChunk * kBlk * kBlk));
            // the ring: two windows (a plain B's pair of column blocks), then b_acc_fn's f32 tile
            uint8_t* b_ring = ring ? reinterpret_cast<uint8_t*>(gemm_thread_buffer(2, static_cast<size_t>((2 * ring_ks * kStepBytes + kBlk * kBlk * 4) / 4))) : nullptr;
            float* b_win = ring ? reinterpret_cast<float*>(b_ring + 2 * ring_ks * kStepBytes) : nullptr;  // (b_acc_fn's)
            int32_t rowc[kBlk] = {};
            // (LDTILECFG per call and thread, TILERELEASE at its end: keeping the tiles configured
            // between calls measured no faster on the device, 384x768x768 / 1024^3 at 16 threads)
            tc.configure(&tile_config());
            lap(AmxProfile::cfg);
            struct Release {
                const TileCode& tc;
                bool prof;
                uint64_t* pt;
                uint64_t tregion;
                std::atomic<uint64_t>& region_max;
                ~Release() {
                    const uint64_t x = prof ? __rdtsc() : 0;
                    tc.release();
                    if (!prof) return;
                    const uint64_t y = __rdtsc();
                    pt[AmxProfile::rel] = y - x;
                    pt[AmxProfile::region] = y - tregion;
                    AmxProfile& P = AmxProfile::get();
                    for (int i = AmxProfile::fork; i <= AmxProfile::region; ++i) P.add(i, pt[i]);
                    P.add(AmxProfile::thr, 1);
                    uint64_t c = region_max.load(std::memory_order_relaxed);
                    while (pt[AmxProfile::region] > c && !region_max.compare_exchange_weak(c, pt[AmxProfile::region])) {
                    }
                }
            } rel{tc, prof, pt, tregion, region_max};
            int64_t a_packed_mb = -1, rowc_mb = -1;  // the row block a_pack / rowc hold (a thread's
                                                      // tasks of one row block share them)
            auto block_task = [&](int64_t mb, int64_t nb0, int64_t nb1) {
                const int64_t m0 = mb * kBlk, rows = std::min<int64_t>(kBlk, M - m0);
                // A of the block: in place (stride lda) with its K tail packed, or packed whole.
                const uint8_t* a_base;
                int64_t a_ld, a_steps, a_step = 64;  // bytes between rows; k steps in a; bytes between them
                const void* a_tail = nullptr;
                const int64_t pm = pack_a_mode();
                // Up to 16 rows: the 16-row kernels, A packed [step][16 rows][64 bytes] (1 KiB a step;
                // read in place instead, decode M = 16 at 16 threads from DRAM ran no faster: 87% of
                // the read against 94%, device, one run).
                const bool r16 = r16_blocks > 0 && rows <= 16;
                const bool in_place = !at && rows == kBlk && (pm == 0 || (pm < 0 && lda_b % 2048 != 0));
                const int64_t astep = r16 ? 1024 : kStepBytes, full_rows = r16 ? 16 : kBlk;
                if (in_place) {
                    a_base = A + m0 * lda_b;
                    a_ld = lda_b;
                    a_steps = kfull;
                    if (krem) {
                        std::memset(a_tail_buf, 0, kBlk * 64);
                        for (int64_t r = 0; r < rows; ++r)
                            std::memcpy(a_tail_buf + r * 64, a_base + r * lda_b + kfull * 64, static_cast<size_t>(krem * es_));
                        a_tail = a_tail_buf;
                    }
                } else {
                    // Packed: k step kb's two tiles contiguous, [kb][32 rows][64 bytes] (rows 64 bytes
                    // apart: every row of a step in its own L1 set), zeros beyond M and K.
                    uint8_t* buf = a_pack;
                    bool fresh = a_packed_mb != mb;
                    if (a_shared) {
                        buf = a_shared + mb * a_blk_bytes;
                        std::atomic<uint32_t>& f = a_flags[mb];
                        uint32_t st = f.load(std::memory_order_acquire);
                        fresh = st == 0 && f.compare_exchange_strong(st, 1, std::memory_order_acq_rel);
                        if (!fresh)
                            while (f.load(std::memory_order_acquire) != 2) _mm_pause();
                    } else {
                        a_packed_mb = mb;
                    }
                    // (16-row blocks: rows past M are never stored, so only the K tail needs its
                    // zeros — a bf16 Inf / NaN times the padded B's zeros would reach valid rows)
                    if (fresh && r16 && krem) std::memset(buf + kfull * astep, 0, static_cast<size_t>(astep));
                    if (fresh && !r16 && (rows < kBlk || krem)) std::memset(buf, 0, static_cast<size_t>(nkb_ * kStepBytes));
                    if (!fresh) {
                    } else if (!at) {
                        for (int64_t r = 0; r < rows; ++r) {
                            const uint8_t* src = A + (m0 + r) * lda_b;
                            for (int64_t kb = 0; kb < kfull; ++kb) std::memcpy(buf + kb * astep + r * 64, src + kb * 64, 64);
                            if (krem) std::memcpy(buf + kfull * astep + r * 64, src + kfull * 64, static_cast<size_t>(krem * es_));
                        }
                    } else {
                        for (int64_t k = 0; k < K; ++k) {
                            const uint8_t* src = A + k * lda_b + m0 * es_;
                            uint8_t* d = buf + (k / kk_) * astep + (k % kk_) * es_;
                            if (es_ == 2) {
                                for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * 64, src + r * 2, 2);
                            } else {
                                for (int64_t r = 0; r < rows; ++r) d[r * 64] = src[r];
                            }
                        }
                    }
                    if (fresh && a_shared) a_flags[mb].store(2, std::memory_order_release);
                    a_base = buf;
                    a_ld = 64;
                    a_step = astep;
                    a_steps = nkb_;
                }
                if (int8_ && rowc_mb != mb) {
                    rowc_mb = mb;
                    // Row terms: -zb * sum_k a[m][k] (only with a B zero point).
                    for (int64_t r = 0; r < kBlk; ++r) {
                        int32_t rs = 0;
                        if (zb != 0 && r < rows) {
                            if (!at) {
                                rs = row_sum(A + (m0 + r) * lda_b, K, s_.a_type == DType::s8);
                            } else {
                                uint32_t tsum = 0;
                                for (int64_t k = 0; k < K; ++k) {
                                    const uint8_t v = A[k * lda_b + m0 + r];
                                    tsum += s_.a_type == DType::s8 ? static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(v))) : v;
                                }
                                rs = static_cast<int32_t>(tsum);
                            }
                        }
                        rowc[r] = static_cast<int32_t>(0u - static_cast<uint32_t>(zb) * static_cast<uint32_t>(rs));
                    }
                }
                lap(AmxProfile::apack);
                if (lazy) {
                    // The chunk's blocks: claim and pack their free pieces, then wait for the pieces
                    // others claimed (a claimed piece is being packed: no task waits on one that
                    // nobody works on, whatever the number of threads). The task that packs a
                    // block's last piece takes its column sums (int8 with an A zero point) and marks
                    // the block ready (packed = pieces + 1).
                    const uint32_t np = static_cast<uint32_t>(pieces), ready = np + (lazy_sums ? 1 : 0);
                    if (chunk_pieces) {
                        // (the default: the pieces are k ranges of the whole chunk, packed row by row
                        // across its blocks; the chunk's flags are its first block's. Device, int8
                        // 1 thread, plain 384x768x768 / 1024^3, against per-block pieces: 1.53 /
                        // 1.61x -> 1.62 / 1.65x oneDNN)
                        std::atomic<uint32_t>& claimed = flags[2 * nb0];
                        std::atomic<uint32_t>& packed = flags[2 * nb0 + 1];
                        while (claimed.load(std::memory_order_relaxed) < np) {
                            const uint32_t q = claimed.fetch_add(1, std::memory_order_acq_rel);
                            if (q >= np) break;
                            pack_chunk(args.B, nb0, nb1, q * nkb_ / pieces, (q + 1) * nkb_ / pieces, lazy);
                            if (packed.fetch_add(1, std::memory_order_acq_rel) + 1 == np && lazy_sums) {
                                const auto* sums = reinterpret_cast<const int32_t*>(lazy + nblocks_ * nkb_ * kStepBytes);
                                const uint32_t kzz = static_cast<uint32_t>(K) * static_cast<uint32_t>(za) * static_cast<uint32_t>(zb);
                                for (int64_t nb = nb0; nb < nb1; ++nb) {
                                    block_sums(nb, lazy);
                                    for (int64_t n = nb * kBlk; n < std::min<int64_t>(s_.N, nb * kBlk + kBlk); ++n)
                                        colc[n] = static_cast<int32_t>(kzz - static_cast<uint32_t>(za) * static_cast<uint32_t>(sums[n]));
                                }
                                packed.store(ready, std::memory_order_release);
                            }
                        }
                        lap(AmxProfile::bpack);
                        while (packed.load(std::memory_order_acquire) != ready) _mm_pause();
                    }
                    for (int64_t nb = nb0; nb < nb1 && !chunk_pieces; ++nb) {
                        std::atomic<uint32_t>& claimed = flags[2 * nb];
                        std::atomic<uint32_t>& packed = flags[2 * nb + 1];
                        while (claimed.load(std::memory_order_relaxed) < np) {
                            const uint32_t q = claimed.fetch_add(1, std::memory_order_acq_rel);
                            if (q >= np) break;
                            const int64_t kb0 = q * nkb_ / pieces, kb1 = (q + 1) * nkb_ / pieces;
                            if (call.b_block_fn && !int8_) {
                                call.b_block_fn(call.b_block_ctx, nb, kb0, kb1, lazy + nb * block_bytes + kb0 * kStepBytes);  // (xk::woq's)
                            } else {
                                // (non-temporal stores here measured slower: device, 1024^3 int8 at 16
                                // threads, own packing 72 -> 100 us a call, tile products 127 -> 146 us)
                                pack_block(args.B, nb, kb0, kb1, lazy + nb * block_bytes + kb0 * kStepBytes);
                            }
                            if (packed.fetch_add(1, std::memory_order_acq_rel) + 1 == np && lazy_sums) {
                                block_sums(nb, lazy);
                                const auto* sums = reinterpret_cast<const int32_t*>(lazy + nblocks_ * nkb_ * kStepBytes);
                                const uint32_t kzz = static_cast<uint32_t>(K) * static_cast<uint32_t>(za) * static_cast<uint32_t>(zb);
                                for (int64_t n = nb * kBlk; n < std::min<int64_t>(s_.N, nb * kBlk + kBlk); ++n)
                                    colc[n] = static_cast<int32_t>(kzz - static_cast<uint32_t>(za) * static_cast<uint32_t>(sums[n]));
                                packed.store(ready, std::memory_order_release);
                            }
                        }
                    }
                    if (!chunk_pieces) {
                        lap(AmxProfile::bpack);
                        for (int64_t nb = nb0; nb < nb1; ++nb)
                            while (flags[2 * nb + 1].load(std::memory_order_acquire) != ready) _mm_pause();
                    }
                }
                lap(AmxProfile::bwait);
                // K in blocks of k_steps() steps: A's 32 x 64-byte-step block stays in cache while the
                // chunk's column blocks pass; their sums wait in the per-block accumulators.
                const int64_t total_steps = a_steps + (a_tail ? 1 : 0);
                const int64_t ks = ring ? ring_ks : k_steps();
                for (int64_t s0 = 0; s0 < total_steps; s0 += ks) {
                    const int64_t s1 = std::min(total_steps, s0 + ks);
                    AmxTileArgs ta;
                    ta.a = a_base + s0 * a_step;
                    ta.a_step = a_step;
                    ta.lda = a_ld;
                    ta.steps = std::min(s1, a_steps) - std::min(s0, a_steps);
                    ta.a_tail = a_tail && s1 == total_steps ? a_tail : nullptr;
                    ta.accumulate = s0 > 0;
                    const bool last = s1 == total_steps;
                    ta.b_next = ring ? ring_ks * kStepBytes : block_bytes;
                    for (int64_t nb = nb0; nb < nb1;) {
                        // 16-row blocks: two full column blocks a call where there are two (the A
                        // tile of a step serves four products), else one.
                        // (The ring of a plain B holds two windows: a pair's rows are read whole.)
                        const int64_t nc = r16 && r16_blocks >= 2 && (!ring || !call.b_block_fn) && nb + 1 < nb1 && (nb + 2) * kBlk <= s_.N ? 2 : 1;
                        // A plain B in the ring with one block a tile call (32-row blocks): two
                        // blocks packed in one pass all the same (pack_blocks), then a call each.
                        // Device, u8s8s32 plain 20 / 24 / 31 x 4096 x 4096, xk / oneDNN, 1 | 16
                        // threads (two runs): 1.13-1.25 / 1.21-1.33 / 1.10-1.27 vs 0.72-0.80 /
                        // 0.77-0.84 / 0.75 | 1.15-1.16 / 1.14-1.15 / 1.22-1.29 vs 0.94-0.99 /
                        // 0.88-1.01 / 0.91-1.06x (bf16 1.12-1.36 vs 1.06-1.27x).
                        const bool pair1 = ring && !call.b_block_fn && nc == 1 && ring_pair() && nb + 1 < nb1 && (nb + 2) * kBlk <= s_.N;
                        for (int64_t h = 0; h < (pair1 ? 2 : 1); ++h) {
                            const int64_t nbh = nb + h;
                            ta.c_out = nullptr;
                            if (direct && last && rows == full_rows && (nbh + nc) * kBlk <= s_.N) {
                                ta.c_out = static_cast<uint8_t*>(args.C) + (m0 * s_.ldc + nbh * kBlk) * c_es;
                                ta.ldc_out = s_.ldc * c_es;
                            }
                            if (ring) {  // (total_steps = nkb_)
                                if (h == 0) {
                                    lap(AmxProfile::tiles);
                                    if (call.b_block_fn) {
                                        call.b_block_fn(call.b_block_ctx, nb, s0, s1, b_ring);
                                        lap(AmxProfile::bprod);
                                    } else {
                                        pack_blocks(args.B, nb, pair1 ? 2 : nc, s0, s1, b_ring, ring_ks * kStepBytes);
                                        lap(AmxProfile::bpack);
                                    }
                                }
                                ta.b = b_ring + h * ring_ks * kStepBytes;
                            } else {
                                ta.b = bp + nbh * block_bytes + s0 * kStepBytes;
                            }
                            ta.acc = accs + (nbh - nb0) * kBlk * kBlk;
                            if (ring && call.b_acc_fn) {  // the window from zero, folded in by b_acc_fn
                                ta.acc = b_win;
                                ta.accumulate = 0;
                                (r16 ? tc.fn16[nc - 1] : tc.fn)(&ta);
                                call.b_acc_fn(call.b_block_ctx, nb, s0, s1, rows, b_win, accs + (nb - nb0) * kBlk * kBlk);
                                ta.accumulate = s0 > 0;
                            } else {
                                (r16 ? tc.fn16[nc - 1] : tc.fn)(&ta);
                            }
                        }
                        nb += pair1 ? 2 : nc;
                    }
                }
                lap(AmxProfile::tiles);
                for (int64_t nb = nb0; nb < nb1; ++nb) {
                    const int64_t n0 = nb * kBlk;
                    const int ncols = static_cast<int>(std::min<int64_t>(kBlk, s_.N - n0));
                    if (direct && rows == full_rows && ncols == kBlk) continue;  // (stored by the tiles)
                    float* acc = accs + (nb - nb0) * kBlk * kBlk;
                    uint8_t* c_blk = static_cast<uint8_t*>(args.C) + (m0 * s_.ldc + n0) * c_es;
                    if (int8_ && s_.c_type == DType::s32) {
                        int8_store_s32(reinterpret_cast<const int32_t*>(acc), rowc, colc + n0, rows, ncols,
                                       reinterpret_cast<int32_t*>(c_blk), s_.ldc, s_.beta == BetaKind::one);
                        continue;
                    }
                    if (int8_) int8_dequant(acc, rowc, colc + n0, fcol + n0, rows);
                    AmxEpiArgs ea;
                    ea.acc = acc;
                    ea.c = requant ? static_cast<void*>(tmp) : static_cast<void*>(c_blk);
                    ea.ldc = requant ? kBlk * 4 : s_.ldc * c_es;
                    ea.bias = args.bias ? args.bias + n0 : nullptr;
                    if (s_.epilogue.residual) {
                        ea.res = static_cast<const uint8_t*>(args.residual) + (m0 * s_.ld_residual + n0) * r_es;
                        ea.ldr = s_.ld_residual * r_es;
                    }
                    ea.scal = &sc;
                    ea.rows = rows;
                    const bool tail = n0 + kBlk > s_.N && epi_tail_;
                    (tail ? epi_tail_ : epi_full_)->fn(&ea);
                    if (requant)
                        int8_requant(tmp, rows, ncols, inv, czp, lo, hi, s_.c_type == DType::s8, c_blk, s_.ldc);
                }
                lap(AmxProfile::epi);
            };
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t i = t / tn, j = t % tn;
                const int64_t m_lo = i * mblocks / tm, m_hi = (i + 1) * mblocks / tm;
                const int64_t n_lo = j * nblocks_ / tn, n_hi = (j + 1) * nblocks_ / tn;
                const int64_t pc = std::max<int64_t>(1, std::min<int64_t>({n_hi - n_lo, kChunkBytes / block_bytes, kMaxChunk}));
                if (row_claims) {
                    // the grid column's row blocks, claimed one at a time per chunk by its tm tasks
                    const int64_t first = (j * mblocks / tn) % mblocks;
                    for (int64_t nb0 = n_lo; nb0 < n_hi; nb0 += pc)
                        for (;;) {
                            const int64_t q = row_claims[nb0].v.fetch_add(1, std::memory_order_relaxed);
                            if (q >= mblocks) break;
                            block_task((first + q) % mblocks, nb0, std::min(n_hi, nb0 + pc));
                        }
                    continue;
                }
                // (the threads of one grid row start at different row blocks: with a shared A they
                // pack different blocks first; results do not depend on the order)
                const int64_t nm = m_hi - m_lo, first = nm > 0 ? (j * nm / tn) % nm : 0;
                for (int64_t nb0 = n_lo; nb0 < n_hi; nb0 += pc)
                    for (int64_t q = 0; q < nm; ++q)
                        block_task(m_lo + (first + q) % nm, nb0, std::min(n_hi, nb0 + pc));
            }
        });
        if (prof) {
            AmxProfile& P = AmxProfile::get();
            P.add(AmxProfile::call, __rdtsc() - call_t0);
            P.add(AmxProfile::region_max, region_max.load());
            P.add(AmxProfile::calls, 1);
        }
    }

private:
    GemmSpec s_;
    std::string layout_;
    bool int8_ = false;
    bool avx512_ = false, vnni_ = false, vbmi_ = false;  // the vector packing paths
    int64_t es_ = 2, kk_ = 32;  // bytes per element of A / B; k per step
    std::shared_ptr<const TileCode> tile_;
    std::shared_ptr<const EpiCode> epi_full_, epi_tail_;
    int64_t nkb_ = 0, nblocks_ = 0;
};

}  // namespace

bool gemm_amx_bf16_any_supports(const GemmSpec& s) {
    return s.a_type == DType::bf16 && s.b_type == DType::bf16 && (s.c_type == DType::f32 || s.c_type == DType::bf16) &&
           s.M > 0 && s.N > 0 && s.K > 0;
}

// Selected from 32 rows up (a full A tile pair); smaller M takes the vector kernels unless a
// PackedB in the tile layout is given (the ":any" entry).
bool gemm_amx_bf16_supports(const GemmSpec& s) {
    return gemm_amx_bf16_any_supports(s) && s.M >= kBlk && !gemm_bf16_ref_preferred(s);
}

std::shared_ptr<const GemmKernel> create_gemm_amx_bf16(const GemmSpec& s) {
    if (!gemm_amx_bf16_any_supports(s)) throw Error(Status::unsupported, "gemm amx bf16: " + s.key() + " is not supported");
    return std::make_shared<AmxGemm>(s);
}

// Decode-sized M (1..31) with bf16: the tiles run when B comes packed in their layout (a plan's
// pack_b), where the vector kernels are FMA-bound from M = 16 up (M = 1 too: a PackedB made by an
// M = 1 plan must be the tile layout, or every larger M reading it would run the vector kernels —
// a bf16 prefill through weights packed once for decode ran 0.40x PyTorch on the device); a plain B
// with M >= amx_bf16_decode_plain_m() (8) runs the tiles too, each window of B packed into an
// L1 ring right before its products (no extra DRAM traffic); below that the kernel the avx512_bf16
// cap would run, routed as a one-shot call under that cap is: gemm_select, so a measured decision
// recorded under that cap applies (the kernel is shared with one-shot calls: it never tunes).
namespace {
class AmxDecode final : public GemmKernel {
public:
    // plain_tiles: a plain B runs the tiles too (packed per call, block by block).
    AmxDecode(const GemmSpec& s, Isa vec_cap, bool plain_tiles)
        : amx_(std::make_shared<AmxGemm>(s)), vec_(plain_tiles ? nullptr : gemm_select(s, false, vec_cap).kernel) {}
    void run(const GemmCall& call) const override {
        (call.packed_b || !vec_ ? static_cast<const GemmKernel&>(*amx_) : *vec_).run(call);
    }
    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override { return amx_->pack_b(B); }
    std::string packed_layout() const override { return amx_->packed_layout(); }

private:
    std::shared_ptr<const AmxGemm> amx_;
    std::shared_ptr<const GemmKernel> vec_;
};
}  // namespace

bool gemm_amx_bf16_decode_supports(const GemmSpec& s) {
    static const bool on = env_int("XK_AMX_DECODE", 1) != 0;  // (XK_AMX_DECODE=0: the vector kernels)
    return on && gemm_amx_bf16_any_supports(s) && s.M >= 1 && s.M < kBlk && !gemm_bf16_ref_preferred(s) &&
           isa_supported(Isa::avx512_bf16);
}

std::shared_ptr<const GemmKernel> create_gemm_amx_bf16_decode(const GemmSpec& s) {
    if (!gemm_amx_bf16_decode_supports(s))
        throw Error(Status::unsupported, "gemm amx bf16 decode: " + s.key() + " is not supported");
    return std::make_shared<AmxDecode>(s, Isa::avx512_bf16, s.M >= amx_bf16_decode_plain_m());
}

// A plain bf16 B with M >= this many rows runs the tiles (packed per call a ring window at a time,
// as int8's), below it what the avx512_bf16 cap runs. Device Xeon, xk / oneDNN (plain B packed per
// call by both), 4096 x 4096, 1 | 16 threads, tiles vs the vector kernel (two runs each):
// M = 1 2.7-2.8 vs 2.9 | 1.40-1.61 vs 1.67-1.87x (the same GFLOP/s within the runs' spread), M = 4
// 1.01-1.03 vs 1.47-1.68 | 0.97 vs 0.94-1.23x, M = 8 1.02-1.07 vs 0.86-0.88 | 0.96-0.97 vs 0.75-0.90x,
// M = 16 1.09-1.10 vs 0.61-0.67 | 0.99-1.01 vs 0.46-0.48x, M = 24 1.06-1.27 vs 0.48-0.53 | 1.09-1.16
// vs 0.54-0.61x (16 x 11008 x 4096: 0.88-0.90 vs 0.80-0.81 | 1.09-1.30 vs 0.61-0.70x).
// XK_AMX_BF16_DECODE_PLAIN_M (read once) overrides it (1: always the tiles, 32: never).
int64_t amx_bf16_decode_plain_m() {
    static const int64_t v = env_int("XK_AMX_BF16_DECODE_PLAIN_M", 8);
    return v;
}

bool gemm_amx_int8_any_supports(const GemmSpec& s) {
    return s.int8() && s.b_type == DType::s8 && s.M > 0 && s.N > 0 && s.K > 0 && !s.a_scale_per_row &&
           s.c_type != DType::bf16;  // (internal QLinear specs: per-row A scales, bf16 C)
}

bool gemm_amx_int8_supports(const GemmSpec& s) { return gemm_amx_int8_any_supports(s) && s.M >= kBlk; }

// int8 M 1..31 (the 16-row kernels for M <= 16): the tiles, for a PackedB in their layout (a plan's
// pack_b, as amx:bf16:decode) and for a plain B (packed per call, a ring window at a time without
// an A zero point): device Xeon, 16x4096x4096 u8s8s32 plain, one run, xk / oneDNN 1 / 16 threads:
// VPDPBUSD kernel 0.58 / 0.59x, tiles 0.76 / 0.86x. XK_AMX_INT8_DECODE_PLAIN=0: a plain B runs
// what a call capped at avx512_vnni runs.
bool gemm_amx_int8_decode_supports(const GemmSpec& s) {
    static const bool on = env_int("XK_AMX_DECODE", 1) != 0;
    return on && gemm_amx_int8_any_supports(s) && s.M >= 1 && s.M < kBlk && isa_supported(Isa::avx512_vnni);
}

std::shared_ptr<const GemmKernel> create_gemm_amx_int8_decode(const GemmSpec& s) {
    if (!gemm_amx_int8_decode_supports(s))
        throw Error(Status::unsupported, "gemm amx int8 decode: " + s.key() + " is not supported");
    static const bool plain_tiles = env_int("XK_AMX_INT8_DECODE_PLAIN", 1) != 0;
    return std::make_shared<AmxDecode>(s, Isa::avx512_vnni, plain_tiles);
}

std::shared_ptr<const GemmKernel> create_gemm_amx_int8(const GemmSpec& s) {
    if (!gemm_amx_int8_any_supports(s)) throw Error(Status::unsupported, "gemm amx int8: " + s.key() + " is not supported");
    return std::make_shared<AmxGemm>(s);
}

// The bf16 tile kernel for other families (amx_tile.hpp): the GEMM's cached code, held for the
// process.
AmxBf16Tile amx_bf16_tile() {
    static const std::shared_ptr<const TileCode> code = tile_code(TileOp::bf16);
    return AmxBf16Tile{code->fn, code->configure, code->release};
}

const void* amx_tile_config() { return &tile_config(); }

}  // namespace xk::detail
