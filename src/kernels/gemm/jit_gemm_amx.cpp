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
// B is packed once (GemmPlan::pack_b, or per call) into the tile layout: 32-column blocks, each
// ceil(K/32) k steps of two 1 KiB tiles [k-pair][16 columns][2], zero-padded in K and N. A is read
// in place by the tile loads (stride lda) for trans_a = N in full 32-row blocks, with its K tail
// (K % 32 columns) copied into a zero-padded 2 KiB buffer, unless rows lie a multiple of 2 KiB
// apart (K = 1024, 2048, ...: in place, a block's rows would meet in a few L1 sets); otherwise
// (and for trans_a = T, the last rows) the block is packed [k step][32 rows][32 k], zero-padded.
// The tile kernel keeps the four C tiles for K blocks of 8 k steps (A's 32 x 256 block stays in L1
// while the task's column blocks pass) and parks their sums in per-thread 32 x 32 f32 buffers; a
// generated AVX-512 epilogue (JitGemmBase::emit_epilogue: alpha, beta, bias, activation,
// residual, bf16 rounding) writes C from them.
//
// Blocking: B in chunks of up to 16 32-column blocks and about 1 MiB (the 2 MiB L2 of the Xeon's
// cores), fewer where that leaves some thread fewer than four tasks; the (chunk, 32-row block)
// grid split over threads chunk-major, so a thread keeps its chunk of B in L2 while it walks the
// row blocks. The tile state is configured once per thread per call and released at its end.
// Measured on the device Xeon (16 cores, one run, plain B packed per call as oneDNN reorders it):
// K blocks of 8, 16, 32 steps or none, A packed or in place, all within that host's noise.

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/parallel.hpp"
#include "xk/runtime.hpp"
#include "dispatch/kernel_cache.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/gemm/gemm.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "xk/error.hpp"

namespace xk::detail {

using namespace Xbyak;

namespace {

constexpr int kBlk = 32;             // rows / columns of a C block, k per step
constexpr int kStepBytes = 2048;     // one k step of a packed B block (two tiles)
constexpr int64_t kChunkBytes = 1 << 20;  // packed B per chunk (L2)
constexpr int64_t kMaxChunk = 16;         // column blocks per task (their accumulators: 64 KiB)
constexpr int64_t kKSteps = 8;            // k steps per K block (A: 32 x 256 bf16, 16 KiB)

// Experiment overrides, read once: XK_AMX_KSTEPS (k steps per K block, default kKSteps) and
// XK_AMX_PACKA (0: A in place wherever possible, 1: always packed, default: packed when the rows'
// stride is a multiple of 2 KiB, where in place rows meet in a few L1 sets).
int64_t env_int(const char* name, int64_t def) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoll(v) : def;
}
int64_t k_steps() {
    static const int64_t v = std::max<int64_t>(1, env_int("XK_AMX_KSTEPS", kKSteps));
    return v;
}
int64_t pack_a_mode() {
    static const int64_t v = env_int("XK_AMX_PACKA", -1);
    return v;
}

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

// One 32 x 32 block: acc = A[32 x K] * B[K x 32] (all k steps), stored to acc (f32, 128-byte rows).
struct AmxTileArgs {
    const void* a = nullptr;       // row 0, k 0 of the block's A
    int64_t lda = 0;               // bytes between A rows
    const void* b = nullptr;       // the packed B block
    float* acc = nullptr;          // 32 x 32 f32 (128-byte rows)
    int64_t steps = 0;             // k steps read from a (>= 0)
    const void* a_tail = nullptr;  // one more k step from a packed [32][32] bf16 buffer, or null
    int64_t accumulate = 0;        // non-zero: start from acc's sums (earlier K blocks), else 0
    int64_t a_step = 64;           // bytes between k steps of a (64 in place, 2048 packed)
};
using AmxTileFn = void (*)(const AmxTileArgs*);
using AmxCfgFn = void (*)(const void*);

class JitAmxTile : public JitGenerator {
public:
    JitAmxTile() : JitGenerator(Isa::amx, 4096) {
        const Reg64 rP = rdi, rA = rsi, rA16 = rdx, rB = rcx, rK = r8, rS = r9, rT = r10, rC = r11;
        mov(rA, ptr[rP + offsetof(AmxTileArgs, a)]);
        mov(rS, ptr[rP + offsetof(AmxTileArgs, lda)]);
        mov(rB, ptr[rP + offsetof(AmxTileArgs, b)]);
        mov(rK, ptr[rP + offsetof(AmxTileArgs, steps)]);
        mov(rT, ptr[rP + offsetof(AmxTileArgs, a_tail)]);
        mov(rC, ptr[rP + offsetof(AmxTileArgs, acc)]);
        mov(rA16, rS);
        shl(rA16, 4);
        add(rA16, rA);
        Label l_zero, l_go;
        cmp(qword[rP + offsetof(AmxTileArgs, accumulate)], 0);
        je(l_zero);
        mov(eax, 128);
        tileloadd(tmm0, ptr[rC + rax]);
        tileloadd(tmm1, ptr[rC + rax + 64]);
        tileloadd(tmm2, ptr[rC + rax + 16 * 128]);
        tileloadd(tmm3, ptr[rC + rax + 16 * 128 + 64]);
        jmp(l_go);
        L(l_zero);
        for (int t = 0; t < 4; ++t) tilezero(Tmm(t));
        L(l_go);
        auto step = [&](const Reg64& a0, const Reg64& a1, int a1_off, const Reg64& stride) {
            tileloadd(tmm4, ptr[a0 + stride]);
            tileloadd(tmm6, ptr[rB + rax]);
            tileloadd(tmm5, ptr[a1 + stride + a1_off]);
            tileloadd(tmm7, ptr[rB + rax + 1024]);
            tdpbf16ps(tmm0, tmm4, tmm6);
            tdpbf16ps(tmm1, tmm4, tmm7);
            tdpbf16ps(tmm2, tmm5, tmm6);
            tdpbf16ps(tmm3, tmm5, tmm7);
            add(rB, kStepBytes);
        };
        mov(eax, 64);  // B tiles: 64-byte rows
        Label l_loop, l_tail, l_store;
        test(rK, rK);
        jz(l_tail);
        align(16);
        L(l_loop);
        step(rA, rA16, 0, rS);
        add(rA, ptr[rP + offsetof(AmxTileArgs, a_step)]);
        add(rA16, ptr[rP + offsetof(AmxTileArgs, a_step)]);
        dec(rK);
        jnz(l_loop);
        L(l_tail);
        test(rT, rT);
        jz(l_store);
        step(rT, rT, 1024, rax);
        L(l_store);
        mov(eax, 128);
        tilestored(ptr[rC + rax], tmm0);
        tilestored(ptr[rC + rax + 64], tmm1);
        tilestored(ptr[rC + rax + 16 * 128], tmm2);
        tilestored(ptr[rC + rax + 16 * 128 + 64], tmm3);
        ret();
    }
};

class JitAmxCfg : public JitGenerator {
public:
    explicit JitAmxCfg(bool release) : JitGenerator(Isa::amx, 256) {
        if (release)
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
    JitAmxTile tile;
    JitAmxCfg cfg{false}, rel{true};
    AmxTileFn fn = nullptr;
    AmxCfgFn configure = nullptr;
    void (*release)() = nullptr;
    TileCode() {
        fn = tile.finalize<AmxTileFn>();
        configure = cfg.finalize<AmxCfgFn>();
        release = rel.finalize<void (*)()>();
    }
};
struct EpiCode final : AmxCode {
    EpiCode(const GemmEpi& e, int ncols) : gen(e, ncols) { fn = gen.finalize<AmxEpiFn>(); }
    JitAmxEpi gen;
    AmxEpiFn fn = nullptr;
};

std::shared_ptr<const TileCode> tile_code() {
    return KernelCache::instance().get_or_create<TileCode>("gemm_amx_tile|bf16", [] {
        const double t0 = now_us();
        auto k = std::make_shared<TileCode>();
        verbose_log("create", "gemm_amx_tile", "bf16", now_us() - t0);
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

std::string amx_layout(const GemmSpec& s) { return "amx:bf16:K" + std::to_string(s.K) + ":N" + std::to_string(s.N); }

// Per-thread scratch (heap, made on first use): a packed A block, the K tail of an A block in
// place, and the accumulators of a task's column blocks (32 x 32 f32 each).
struct AmxScratch {
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    std::unique_ptr<uint16_t, Free> a, tail_mem;
    std::unique_ptr<float, Free> acc_mem;
    size_t a_elems = 0;
    float* acc = nullptr;
    uint16_t* tail = nullptr;
    static void* alloc(size_t bytes) {
        void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
        if (!p) throw std::bad_alloc();
        return p;
    }
    AmxScratch() {
        acc_mem.reset(static_cast<float*>(alloc(kMaxChunk * kBlk * kBlk * 4)));
        tail_mem.reset(static_cast<uint16_t*>(alloc(kBlk * kBlk * 2)));
        acc = acc_mem.get();
        tail = tail_mem.get();
    }
    uint16_t* a_buf(size_t elems) {
        if (elems > a_elems) {
            a.reset(static_cast<uint16_t*>(alloc(elems * 2)));
            a_elems = elems;
        }
        return a.get();
    }
};

AmxScratch& scratch() {
    thread_local AmxScratch s;
    return s;
}

class AmxGemm final : public GemmKernel {
public:
    explicit AmxGemm(const GemmSpec& s) : s_(s), layout_(amx_layout(s)), tile_(tile_code()) {
        const GemmEpi e = gemm_epi(s);
        epi_full_ = epi_code(e, std::min<int64_t>(kBlk, s.N));
        const int tail = static_cast<int>(s.N % kBlk);
        if (tail && s.N > kBlk) epi_tail_ = epi_code(e, tail);
        nkb_ = (s.K + kBlk - 1) / kBlk;
        nblocks_ = (s.N + kBlk - 1) / kBlk;
    }

    std::string packed_layout() const override { return layout_; }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override {
        auto p = std::make_shared<GemmPacked>(layout_, static_cast<size_t>(nblocks_ * nkb_ * kStepBytes));
        auto* dst = static_cast<uint16_t*>(p->data);
        const auto* src = static_cast<const uint16_t*>(B);
        const bool bt = s_.trans_b == Trans::T;
        const int64_t K = s_.K, N = s_.N, ldb = s_.ldb;
        parallel_for(nblocks_, 1, [&](int64_t b0, int64_t b1) {
            for (int64_t nb = b0; nb < b1; ++nb) {
                // Tile row (kb, p) of the half t: 16 columns x the k-pair (2p, 2p + 1) as uint32
                // words (k even in the low half), zero beyond K and N.
                auto* blk = reinterpret_cast<uint32_t*>(dst + nb * nkb_ * (kStepBytes / 2));
                const int64_t n0 = nb * kBlk, nn = std::min<int64_t>(kBlk, N - n0);
                for (int64_t kb = 0; kb < nkb_; ++kb)
                    for (int p = 0; p < 16; ++p) {
                        const int64_t k = kb * kBlk + 2 * p;
                        const bool k0 = k < K, k1 = k + 1 < K;
                        for (int t = 0; t < 2; ++t) {
                            uint32_t* d = blk + kb * (kStepBytes / 4) + t * 256 + p * 16;
                            const int64_t c0 = t * 16, cn = std::max<int64_t>(0, std::min<int64_t>(16, nn - c0));
                            if (!bt) {
                                const uint16_t* r0 = src + k * ldb + n0 + c0;
                                const uint16_t* r1 = r0 + ldb;
                                if (k1 && cn == 16) {
                                    for (int c = 0; c < 16; ++c) d[c] = r0[c] | (uint32_t(r1[c]) << 16);
                                } else {
                                    for (int c = 0; c < 16; ++c)
                                        d[c] = c < cn && k0 ? r0[c] | (k1 ? uint32_t(r1[c]) << 16 : 0u) : 0u;
                                }
                            } else {
                                const uint16_t* col = src + (n0 + c0) * ldb + k;
                                if (k1) {
                                    for (int c = 0; c < 16; ++c) {
                                        uint32_t w = 0;
                                        if (c < cn) std::memcpy(&w, col + c * ldb, 4);
                                        d[c] = w;
                                    }
                                } else {
                                    for (int c = 0; c < 16; ++c) d[c] = c < cn && k0 ? col[c * ldb] : 0u;
                                }
                            }
                        }
                    }
            }
        });
        return p;
    }

    void run(const GemmCall& call) const override {
        std::shared_ptr<const GemmPacked> own;
        const GemmPacked* pb = call.packed_b;
        if (!pb) {
            own = pack_b(call.args.B);
            pb = own.get();
        }
        const auto* bp = static_cast<const uint8_t*>(pb->data);
        alignas(64) GemmScalars sc;
        sc.set(call.alpha, call.beta);
        const int64_t M = s_.M, K = s_.K;
        const int64_t mblocks = (M + kBlk - 1) / kBlk;
        const int64_t block_bytes = nkb_ * kStepBytes;
        // Column blocks per task: B of the chunk within kChunkBytes (L2), at most kMaxChunk (the
        // accumulators of a task), and enough tasks to give every thread about four.
        const int64_t threads = get_num_threads();
        int64_t per_chunk = std::max<int64_t>(1, std::min<int64_t>({nblocks_, kChunkBytes / block_bytes, kMaxChunk}));
        while (per_chunk > 1 && mblocks * ((nblocks_ + per_chunk - 1) / per_chunk) < 4 * threads) --per_chunk;
        const int64_t nchunks = (nblocks_ + per_chunk - 1) / per_chunk;
        const auto* A = static_cast<const uint16_t*>(call.args.A);
        const bool at = s_.trans_a == Trans::T;
        const int64_t kfull = K / kBlk, krem = K % kBlk;
        const int c_es = s_.c_type == DType::bf16 ? 2 : 4;
        const int r_es = s_.residual_type == DType::bf16 ? 2 : 4;
        const TileCode& tc = *tile_;
        parallel_for(nchunks * mblocks, 1, [&](int64_t t0, int64_t t1) {
            AmxScratch& scr = scratch();
            tc.configure(&tile_config());
            struct Release {
                const TileCode& tc;
                ~Release() { tc.release(); }
            } rel{tc};
            for (int64_t t = t0; t < t1; ++t) {
                const int64_t chunk = t / mblocks, mb = t % mblocks;
                const int64_t m0 = mb * kBlk, rows = std::min<int64_t>(kBlk, M - m0);
                // A of the block: in place (stride lda) with its K tail packed, or packed whole.
                const uint8_t* a_base;
                int64_t a_ld, a_steps, a_step = 64;  // bytes between rows; k steps in a; bytes between them
                const void* a_tail = nullptr;
                const int64_t pm = pack_a_mode();
                const bool in_place = !at && rows == kBlk && (pm == 0 || (pm < 0 && (s_.lda * 2) % 2048 != 0));
                if (in_place) {
                    a_base = reinterpret_cast<const uint8_t*>(A + m0 * s_.lda);
                    a_ld = s_.lda * 2;
                    a_steps = kfull;
                    if (krem) {
                        std::memset(scr.tail, 0, kBlk * kBlk * 2);
                        for (int64_t r = 0; r < kBlk; ++r)
                            std::memcpy(scr.tail + r * kBlk, A + (m0 + r) * s_.lda + kfull * kBlk, static_cast<size_t>(krem) * 2);
                        a_tail = scr.tail;
                    }
                } else {
                    // Packed: k step kb's two tiles contiguous, [kb][32 rows][32 k] (rows 64 bytes
                    // apart: every row of a step in its own L1 set), zeros beyond M and K.
                    uint16_t* buf = scr.a_buf(static_cast<size_t>(nkb_ * kBlk * kBlk));
                    if (rows < kBlk || krem) std::memset(buf, 0, static_cast<size_t>(nkb_ * kBlk * kBlk) * 2);
                    if (!at) {
                        for (int64_t r = 0; r < rows; ++r) {
                            const uint16_t* src = A + (m0 + r) * s_.lda;
                            for (int64_t kb = 0; kb < kfull; ++kb) std::memcpy(buf + (kb * kBlk + r) * kBlk, src + kb * kBlk, 64);
                            if (krem) std::memcpy(buf + (kfull * kBlk + r) * kBlk, src + kfull * kBlk, static_cast<size_t>(krem) * 2);
                        }
                    } else {
                        for (int64_t k = 0; k < K; ++k) {
                            const uint16_t* src = A + k * s_.lda + m0;
                            uint16_t* d = buf + (k / kBlk) * kBlk * kBlk + (k % kBlk);
                            for (int64_t r = 0; r < rows; ++r) d[r * kBlk] = src[r];
                        }
                    }
                    a_base = reinterpret_cast<const uint8_t*>(buf);
                    a_ld = 64;
                    a_step = kStepBytes;
                    a_steps = nkb_;
                }
                const int64_t nb0 = chunk * per_chunk, nb1 = std::min(nblocks_, nb0 + per_chunk);
                // K in blocks of kKSteps steps: A's 32 x 256 block (16 KiB) stays in L1 while the
                // chunk's column blocks pass; their sums wait in the per-block accumulators.
                const int64_t total_steps = a_steps + (a_tail ? 1 : 0);
                const int64_t ks = k_steps();
                for (int64_t s0 = 0; s0 < total_steps; s0 += ks) {
                    const int64_t s1 = std::min(total_steps, s0 + ks);
                    AmxTileArgs ta;
                    ta.a = a_base + s0 * a_step;
                    ta.a_step = a_step;
                    ta.lda = a_ld;
                    ta.steps = std::min(s1, a_steps) - std::min(s0, a_steps);
                    ta.a_tail = a_tail && s1 == total_steps ? a_tail : nullptr;
                    ta.accumulate = s0 > 0;
                    for (int64_t nb = nb0; nb < nb1; ++nb) {
                        ta.b = bp + nb * block_bytes + s0 * kStepBytes;
                        ta.acc = scr.acc + (nb - nb0) * kBlk * kBlk;
                        tc.fn(&ta);
                    }
                }
                for (int64_t nb = nb0; nb < nb1; ++nb) {
                    const int64_t n0 = nb * kBlk;
                    AmxEpiArgs ea;
                    ea.acc = scr.acc + (nb - nb0) * kBlk * kBlk;
                    ea.c = static_cast<uint8_t*>(call.args.C) + (m0 * s_.ldc + n0) * c_es;
                    ea.ldc = s_.ldc * c_es;
                    ea.bias = call.args.bias ? call.args.bias + n0 : nullptr;
                    if (s_.epilogue.residual) {
                        ea.res = static_cast<const uint8_t*>(call.args.residual) + (m0 * s_.ld_residual + n0) * r_es;
                        ea.ldr = s_.ld_residual * r_es;
                    }
                    ea.scal = &sc;
                    ea.rows = rows;
                    const bool tail = n0 + kBlk > s_.N && epi_tail_;
                    (tail ? epi_tail_ : epi_full_)->fn(&ea);
                }
            }
        });
    }

private:
    GemmSpec s_;
    std::string layout_;
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

}  // namespace xk::detail
