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
// (K % 32 columns) copied into a zero-padded 2 KiB buffer; otherwise (trans_a = T, the last
// rows) the block is packed into a zero-padded row-major [32][Kp] buffer. The tile kernel stores
// the four C tiles to a per-thread 32 x 32 f32 buffer and a generated AVX-512 epilogue
// (JitGemmBase::emit_epilogue: alpha, beta, bias, activation, residual, bf16 rounding) writes C.
//
// Blocking: B in chunks of 32-column blocks of about 1 MiB (the 2 MiB L2 of the Xeon's cores),
// the (chunk, 32-row block) grid split over threads chunk-major so a thread keeps its chunk of B in
// L2 while it walks the row blocks. The tile state is configured once per thread per call and
// released at its end.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#include "common/parallel.hpp"
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
    float* acc = nullptr;          // 32 x 32 f32
    int64_t steps = 0;             // k steps read from a (>= 0)
    const void* a_tail = nullptr;  // one more k step from a packed [32][32] bf16 buffer, or null
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
        for (int t = 0; t < 4; ++t) tilezero(Tmm(t));
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
        add(rA, 64);
        add(rA16, 64);
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

// Per-thread scratch: a packed A block and the 32 x 32 accumulator buffer.
struct AmxScratch {
    std::unique_ptr<uint16_t, decltype(&std::free)> a{nullptr, &std::free};
    size_t a_elems = 0;
    alignas(64) float acc[kBlk * kBlk];
    alignas(64) uint16_t tail[kBlk * kBlk];
    uint16_t* a_buf(size_t elems) {
        if (elems > a_elems) {
            void* p = std::aligned_alloc(64, (elems * 2 + 63) / 64 * 64);
            if (!p) throw std::bad_alloc();
            a.reset(static_cast<uint16_t*>(p));
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
                uint16_t* blk = dst + nb * nkb_ * (kStepBytes / 2);
                std::memset(blk, 0, static_cast<size_t>(nkb_ * kStepBytes));
                const int64_t n0 = nb * kBlk, nn = std::min<int64_t>(kBlk, N - n0);
                for (int64_t k = 0; k < K; ++k) {
                    const int64_t kb = k / kBlk, kp = (k % kBlk) / 2, odd = k & 1;
                    uint16_t* row = blk + kb * (kStepBytes / 2) + kp * 32 + odd;
                    for (int64_t c = 0; c < nn; ++c) {
                        const uint16_t v = bt ? src[(n0 + c) * ldb + k] : src[k * ldb + n0 + c];
                        row[(c / 16) * 512 + (c % 16) * 2] = v;
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
        const int64_t per_chunk = std::max<int64_t>(1, std::min<int64_t>(nblocks_, kChunkBytes / block_bytes));
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
                AmxTileArgs ta;
                if (!at && rows == kBlk) {
                    ta.a = A + m0 * s_.lda;
                    ta.lda = s_.lda * 2;
                    ta.steps = kfull;
                    if (krem) {
                        std::memset(scr.tail, 0, sizeof scr.tail);
                        for (int64_t r = 0; r < kBlk; ++r)
                            std::memcpy(scr.tail + r * kBlk, A + (m0 + r) * s_.lda + kfull * kBlk, static_cast<size_t>(krem) * 2);
                        ta.a_tail = scr.tail;
                    }
                } else {
                    const int64_t kp = nkb_ * kBlk;
                    uint16_t* buf = scr.a_buf(static_cast<size_t>(kBlk * kp));
                    std::memset(buf, 0, static_cast<size_t>(kBlk * kp) * 2);
                    if (!at) {
                        for (int64_t r = 0; r < rows; ++r)
                            std::memcpy(buf + r * kp, A + (m0 + r) * s_.lda, static_cast<size_t>(K) * 2);
                    } else {
                        for (int64_t k = 0; k < K; ++k)
                            for (int64_t r = 0; r < rows; ++r) buf[r * kp + k] = A[k * s_.lda + m0 + r];
                    }
                    ta.a = buf;
                    ta.lda = kp * 2;
                    ta.steps = nkb_;
                }
                ta.acc = scr.acc;
                const int64_t nb0 = chunk * per_chunk, nb1 = std::min(nblocks_, nb0 + per_chunk);
                for (int64_t nb = nb0; nb < nb1; ++nb) {
                    ta.b = bp + nb * block_bytes;
                    tc.fn(&ta);
                    const int64_t n0 = nb * kBlk;
                    AmxEpiArgs ea;
                    ea.acc = scr.acc;
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
