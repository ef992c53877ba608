// fp32 GEMM decode / GEMV path (see jit_gemv.hpp for the layout and the structure): xbyak
// micro-kernel and transposer generators, and the driver (A packing, K blocking, the split of
// panels over threads, the epilogue).
#include "kernels/gemm/jit_gemv.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <vector>

#include "common/activation.hpp"
#include "common/parallel.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "dispatch/kernel_cache.hpp"

namespace xk::detail {
namespace {

constexpr int64_t kP = kGemvPanel;           // floats per panel row
constexpr int64_t kRowBytes = kP * 4;        // bytes per panel row
constexpr int64_t kDefaultKc = 128;          // K block: 128 rows x 128 B = 16 KiB of B (L1-resident)
constexpr int64_t kMultiKc = 64;             // K block of a row block of several tiles (see block_kc)
constexpr int64_t kDecodeKc = 16;            // the same with AVX2 and M <= 16 (see block_kc)
constexpr int64_t kDecodeKc512 = 32;         // the same with AVX-512 and M <= 16 (see block_kc)
constexpr int64_t kMultiPf = 32768;          // their dense prefetch distance (bytes, into L2)
constexpr int64_t kDefaultPf = 8192;         // sparse prefetch distance in a one-tile packed stream (bytes)
constexpr int64_t kDefaultKs = 2048;         // M > 16: rows of an unpacked B^T transposed at once
constexpr int64_t kDefaultPfT = 0;           // transposer prefetch distance along the rows of B^T
constexpr int64_t kDefaultKsN = 64;          // rows of an unpacked [K x N] B copied at once (M <= 16: also
                                             // its K block; M > 16: rounded up to one K block)
constexpr int64_t kDefaultChunkN = 128;      // panels of an unpacked [K x N] B copied together (16 KiB of a row)
constexpr int64_t kRowsCols = 4096;          // columns per row sweep, one row tile (<= 4 x 16 KiB of accumulators)
constexpr int64_t kRowsColsTiled = 256;      // columns per row sweep, several row tiles (16 x 1 KiB)
constexpr int64_t kRowsKb = 16;              // rows per K block, several row tiles (16 x 1 KiB of B)
constexpr int kRowsStepBytes = 128;         // one-row sweep (M = 1): bytes of each row per loop step
constexpr int64_t kRowsAccBytes = 128 * 1024;  // accumulators of a one-tile row sweep (in L2)
constexpr int64_t kRowsSliceRows = 1024;     // one-tile row sweep: K slices of at least this many rows
constexpr int64_t kRowsMaxSlices = 4;        //   and at most this many
constexpr int64_t kDotKc = 1024;             // dot path K block (4 rows of W x 4 KiB) when M has several tiles
constexpr int64_t kMBlockRows = 48;          // rows of M per work item when M is large (fallback path)

// Overrides of the defaults (GemvTuning; tests and benchmarks only): a size <= 0 / a distance < 0
// means "the default".
std::atomic<int64_t> g_kc{0}, g_pf{-1}, g_ks{0}, g_pf_t{-1}, g_ks_n{0}, g_chunk_n{0}, g_streams{0};
std::atomic<int> g_hint{0};

int64_t size_knob(const std::atomic<int64_t>& v, int64_t def) {
    const int64_t x = v.load(std::memory_order_relaxed);
    return x > 0 ? x : def;
}
int64_t dist_knob(const std::atomic<int64_t>& v, int64_t def) {
    const int64_t x = v.load(std::memory_order_relaxed);
    return x >= 0 ? x : def;
}
int64_t cur_kc() { return size_knob(g_kc, kDefaultKc); }
int64_t cur_pf() { return dist_knob(g_pf, kDefaultPf); }
int64_t cur_ks() { return size_knob(g_ks, kDefaultKs); }
int64_t cur_pf_t() { return dist_knob(g_pf_t, kDefaultPfT); }
int64_t cur_ks_n() { return size_knob(g_ks_n, kDefaultKsN); }
int64_t cur_chunk_n() { return size_knob(g_chunk_n, kDefaultChunkN); }
int stream_count(Isa isa);
int64_t cur_streams(Isa isa) { return std::min<int64_t>(stream_count(isa), size_knob(g_streams, stream_count(isa))); }

// Every generator checks that its vector registers exist on its ISA: with AVX2 an index >= 16
// would be EVEX-encoded by xbyak, which only faults at run time on a machine without AVX-512.
void check_vector_regs(Isa isa, int used, const char* what) {
    const int have = isa >= Isa::avx512 ? 32 : 16;
    if (used > have)
        throw Error(Status::unsupported, std::string("gemm decode: ") + what + " needs " + std::to_string(used) +
                                             " vector registers, " + isa_name(isa) + " has " + std::to_string(have));
}

// ---- micro-kernel --------------------------------------------------------------------------------

// One call: acc[mr x 32] (row stride 128 B) = (load_acc ? acc : 0) + Apack[k x mr] * B[k x 32],
// B row r at b + r * b_stride (bytes), A packed k-major: a[r * mr + i] = op(A)[m0 + i, k0 + r].
struct MicroArgs {
    const float* a;    // +0
    const float* b;    // +8
    int64_t b_stride;  // +16 bytes between rows of B
    int64_t pf_off;    // +24 prefetch address = row address + pf_off (prefetch variants only)
    float* acc;        // +32
    int64_t k;         // +40 rows (>= 1)
    int64_t load_acc;  // +48 nonzero: accumulate onto acc
};
using MicroFn = void (*)(const MicroArgs*);

// Accumulator sets over alternating k (FMA latency hiding when the tile is small). One row (M = 1)
// keeps one set: there the independent accumulators come from several panels at once (the stream
// kernel below), and a panel's sums must not depend on whether it was computed alone or in a
// group (else the result would depend on the thread count).
int acc_sets(Isa isa, int mr) { return isa >= Isa::avx512 && mr == 2 ? 2 : 1; }

class JitMicro : public JitGenerator {
public:
    // pf_mode: 0 none; 1 dense (both lines of every row: a block re-read from L1 by later passes
    // has to be fetched whole); 2 sparse (one line per 8 rows = 1 KiB of a packed stream: a hint
    // that keeps the hardware prefetchers going across 4 KiB pages, measured best on Zen 3).
    JitMicro(Isa isa, int mr, int pf_mode, int hint) : JitGenerator(isa) {
        const bool prefetch = pf_mode != 0;
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        const int vbytes = z ? 64 : 32;
        const int V = static_cast<int>(kRowBytes) / vbytes;  // vectors per panel row
        const int S = acc_sets(isa, mr);
        constexpr int U = 4;                                 // rows per unrolled step (multiple of S)
        const Reg64 args = abi_param1, a = rsi, b = rdx, bs = rcx, pfb = r8, acc = r9, k = r10, bs3 = r11;
        auto vr = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        auto accr = [&](int s, int m, int v) { return vr((s * mr + m) * V + v); };
        const int nacc = S * mr * V;
        auto vptr = [&](const RegExp& e) { return z ? zword[e] : yword[e]; };
        check_vector_regs(isa, nacc + (mr == 1 ? 1 : z ? V : mr + 1), "micro-kernel");

        preamble();
        mov(a, ptr[args]);
        mov(b, ptr[args + 8]);
        mov(bs, ptr[args + 16]);
        if (prefetch) {
            mov(pfb, ptr[args + 24]);
            add(pfb, b);
        }
        mov(acc, ptr[args + 32]);
        mov(k, ptr[args + 40]);
        lea(bs3, ptr[bs + bs * 2]);

        Label l_zero, l_init, l_loop, l_tail, l_tail_loop, l_done;
        cmp(qword[args + 48], 0);
        je(l_zero);
        for (int m = 0; m < mr; ++m)
            for (int v = 0; v < V; ++v) vmovups(accr(0, m, v), vptr(acc + m * kRowBytes + v * vbytes));
        jmp(l_init);
        L(l_zero);
        for (int m = 0; m < mr; ++m)
            for (int v = 0; v < V; ++v) vxorps(accr(0, m, v), accr(0, m, v), accr(0, m, v));
        L(l_init);
        for (int s = 1; s < S; ++s)
            for (int m = 0; m < mr; ++m)
                for (int v = 0; v < V; ++v) vxorps(accr(s, m, v), accr(s, m, v), accr(s, m, v));

        // One row of B: row address `row`, A values at a + (u*mr + i)*4, accumulator set s.
        auto body_row = [&](const RegExp& row, int u, int s) {
            const int aoff = u * mr * 4;
            if (mr == 1) {
                // B used once per row: FMAs straight from memory.
                const Xmm bc = vr(nacc);
                vbroadcastss(bc, ptr[a + aoff]);
                for (int v = 0; v < V; ++v) vfmadd231ps(accr(s, 0, v), bc, vptr(row + v * vbytes));
            } else if (z) {
                // B rows in registers, A through embedded broadcasts.
                for (int v = 0; v < V; ++v) vmovups(vr(nacc + v), vptr(row + v * vbytes));
                for (int m = 0; m < mr; ++m)
                    for (int v = 0; v < V; ++v)
                        vfmadd231ps(Zmm(accr(s, m, v).getIdx()), Zmm(nacc + v), ptr_b[a + aoff + m * 4]);
            } else {
                for (int m = 0; m < mr; ++m) vbroadcastss(vr(nacc + m), ptr[a + aoff + m * 4]);
                const Xmm bv = vr(nacc + mr);
                for (int v = 0; v < V; ++v) {
                    vmovups(bv, vptr(row + v * vbytes));
                    for (int m = 0; m < mr; ++m) vfmadd231ps(accr(s, m, v), vr(nacc + m), bv);
                }
            }
        };
        auto pf_line = [&](const RegExp& row, std::initializer_list<int> offs) {
            for (int off : offs) {
                if (hint == 1)
                    prefetcht1(ptr[row + off]);
                else if (hint == 2)
                    prefetchnta(ptr[row + off]);
                else
                    prefetcht0(ptr[row + off]);
            }
        };

        L(l_loop);
        cmp(k, U);
        jl(l_tail, T_NEAR);
        {
            const RegExp rows[U] = {RegExp(b), b + bs, b + bs * 2, b + bs3};
            const RegExp prow[U] = {RegExp(pfb), pfb + bs, pfb + bs * 2, pfb + bs3};
            if (pf_mode == 2) {
                Label l_skip;
                test(k, 4);  // every other group of 4 rows
                jz(l_skip);
                pf_line(RegExp(pfb), {0});
                L(l_skip);
            }
            for (int u = 0; u < U; ++u) {
                if (pf_mode == 1) pf_line(prow[u], {0, 64});
                body_row(rows[u], u, u % S);
            }
        }
        lea(b, ptr[b + bs * 4]);
        if (prefetch) lea(pfb, ptr[pfb + bs * 4]);
        add(a, U * mr * 4);
        sub(k, U);
        jmp(l_loop);

        L(l_tail);
        L(l_tail_loop);
        test(k, k);
        jz(l_done, T_NEAR);
        if (pf_mode == 1) pf_line(RegExp(pfb), {0, 64});
        body_row(RegExp(b), 0, 0);
        add(b, bs);
        if (prefetch) add(pfb, bs);
        add(a, mr * 4);
        dec(k);
        jmp(l_tail_loop);

        L(l_done);
        // Sum the sets into set 0 (pairwise), store the tile.
        for (int step = 1; step < S; step *= 2)
            for (int s = 0; s + step < S; s += 2 * step)
                for (int m = 0; m < mr; ++m)
                    for (int v = 0; v < V; ++v) vaddps(accr(s, m, v), accr(s, m, v), accr(s + step, m, v));
        for (int m = 0; m < mr; ++m)
            for (int v = 0; v < V; ++v) vmovups(vptr(acc + m * kRowBytes + v * vbytes), accr(0, m, v));
        postamble();
    }
};

struct Micro {
    Micro(Isa isa, int mr, int pf_mode, int hint) : gen(isa, mr, pf_mode, hint), fn(gen.finalize<MicroFn>()) {}
    JitMicro gen;
    MicroFn fn;
};

// ---- stream micro-kernel (packed B, M = 1) --------------------------------------------------------

// acc[s*32 .. s*32+32) (+)= sum_{r < k} a[r] * P_s[r][0..32) for s < ns: ns panels read in
// lockstep, one 128-byte row of each per step (P_s at b + s * stream_bytes). Each thread thus
// keeps ns DRAM streams in flight, which the hardware prefetchers serve faster than one, and the
// FMAs have ns x 4 (ymm) / ns x 2 (zmm) independent accumulators. Per panel the sums are those of
// the one-panel micro-kernel (one set, k in order). Sparse prefetch (one line per KiB of each
// stream, pf_off ahead) when pf_off > 0.
struct StreamArgs {
    const float* a;        // +0 k values of the row of op(A)
    const float* b;        // +8 row 0 of stream 0
    int64_t stream_bytes;  // +16 between streams
    float* acc;            // +24 ns x 32 floats
    int64_t k;             // +32 rows (>= 1)
    int64_t load_acc;      // +40
    int64_t pf_off;        // +48 bytes, 0 = no prefetch
};
using StreamFn = void (*)(const StreamArgs*);

// Streams per thread (also the most the generator takes: ns x V accumulators + 1 must fit in the
// 16 ymm of AVX2, and p[] has 4 pointers).
int stream_count(Isa isa) { return isa >= Isa::avx512 ? 4 : 3; }

class JitStream : public JitGenerator {
public:
    JitStream(Isa isa, int ns) : JitGenerator(isa) {
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        const int vbytes = z ? 64 : 32, V = static_cast<int>(kRowBytes) / vbytes;
        const Reg64 args = abi_param1, a = rsi, k = r10, acc = r11, pf = rax, t = rcx;
        const Reg64 p[4] = {rdx, r8, r9, rbx};
        auto vr = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        auto vptr = [&](const RegExp& e) { return z ? zword[e] : yword[e]; };
        auto accr = [&](int st, int v) { return vr(st * V + v); };
        const Xmm bc = vr(ns * V);
        constexpr int U = 4;
        check_vector_regs(isa, ns * V + 1, "stream kernel");
        if (ns < 1 || ns > 4) throw Error(Status::unsupported, "gemm decode: stream kernel takes 1..4 streams");

        preamble({rbx});
        mov(a, ptr[args]);
        mov(p[0], ptr[args + 8]);
        mov(t, ptr[args + 16]);
        for (int st = 1; st < ns; ++st) lea(p[st], ptr[p[st - 1] + t]);
        mov(acc, ptr[args + 24]);
        mov(k, ptr[args + 32]);
        mov(pf, ptr[args + 48]);

        Label l_zero, l_init, l_loop, l_tail, l_done, l_nopf;
        cmp(qword[args + 40], 0);
        je(l_zero);
        for (int st = 0; st < ns; ++st)
            for (int v = 0; v < V; ++v) vmovups(accr(st, v), vptr(acc + st * kRowBytes + v * vbytes));
        jmp(l_init);
        L(l_zero);
        for (int st = 0; st < ns; ++st)
            for (int v = 0; v < V; ++v) vxorps(accr(st, v), accr(st, v), accr(st, v));
        L(l_init);

        auto row = [&](int u) {
            vbroadcastss(bc, ptr[a + u * 4]);
            for (int st = 0; st < ns; ++st)
                for (int v = 0; v < V; ++v) vfmadd231ps(accr(st, v), bc, vptr(p[st] + u * kRowBytes + v * vbytes));
        };
        L(l_loop);
        cmp(k, U);
        jl(l_tail, T_NEAR);
        {
            Label l_skip;
            test(pf, pf);
            jz(l_skip);
            test(k, 4);  // every other group of 4 rows: one line per KiB of each stream
            jz(l_skip);
            for (int st = 0; st < ns; ++st) prefetcht0(ptr[p[st] + pf]);
            L(l_skip);
        }
        for (int u = 0; u < U; ++u) row(u);
        for (int st = 0; st < ns; ++st) add(p[st], U * kRowBytes);
        add(a, U * 4);
        sub(k, U);
        jmp(l_loop);
        L(l_tail);
        test(k, k);
        jz(l_done, T_NEAR);
        row(0);
        for (int st = 0; st < ns; ++st) add(p[st], kRowBytes);
        add(a, 4);
        dec(k);
        jmp(l_tail);
        L(l_done);
        for (int st = 0; st < ns; ++st)
            for (int v = 0; v < V; ++v) vmovups(vptr(acc + st * kRowBytes + v * vbytes), accr(st, v));
        postamble();
    }
};

struct Stream {
    Stream(Isa isa, int ns) : gen(isa, ns), fn(gen.finalize<StreamFn>()) {}
    JitStream gen;
    StreamFn fn;
};

// ---- transposer (unpacked Trans::T B) ------------------------------------------------------------

// dst row r (r = 0 .. 8*kblocks-1, 128 B apart) columns 0..7 = src rows 0..7 (ld_bytes apart),
// column r. Prefetches src rows pf_bytes ahead.
struct TransArgs {
    const float* src;  // +0
    int64_t ld_bytes;  // +8
    float* dst;        // +16
    int64_t kblocks;   // +24 (>= 1)
    int64_t pf_bytes;  // +32
};
using TransFn = void (*)(const TransArgs*);

class JitTranspose : public JitGenerator {
public:
    JitTranspose() : JitGenerator(Isa::avx2) {
        using namespace Xbyak;
        const Reg64 args = abi_param1, s0 = rsi, s4 = rdx, ld = rcx, dst = r8, n = r9, ld3 = r10, p0 = r11, p4 = rax;
        preamble();
        mov(s0, ptr[args]);
        mov(ld, ptr[args + 8]);
        mov(dst, ptr[args + 16]);
        mov(n, ptr[args + 24]);
        mov(p0, ptr[args + 32]);
        lea(ld3, ptr[ld + ld * 2]);
        lea(s4, ptr[s0 + ld * 4]);
        add(p0, s0);               // prefetch pointers: the source rows, pf_bytes ahead
        lea(p4, ptr[p0 + ld * 4]);
        const RegExp rows[8] = {RegExp(s0), s0 + ld, s0 + ld * 2, s0 + ld3, RegExp(s4), s4 + ld, s4 + ld * 2, s4 + ld3};
        const RegExp prows[8] = {RegExp(p0), p0 + ld, p0 + ld * 2, p0 + ld3, RegExp(p4), p4 + ld, p4 + ld * 2, p4 + ld3};
        Label l_loop;
        L(l_loop);
        for (int i = 0; i < 8; ++i) prefetcht0(ptr[prows[i]]);
        for (int i = 0; i < 8; ++i) vmovups(Ymm(i), yword[rows[i]]);
        for (int i = 0; i < 4; ++i) {
            vunpcklps(Ymm(8 + 2 * i), Ymm(2 * i), Ymm(2 * i + 1));
            vunpckhps(Ymm(9 + 2 * i), Ymm(2 * i), Ymm(2 * i + 1));
        }
        // s0..s3 from t0..t3 (rows 0-3), s4..s7 from t4..t7 (rows 4-7), into ymm0..7.
        for (int h = 0; h < 2; ++h) {
            const int t = 8 + 4 * h, s = 4 * h;
            vshufps(Ymm(s + 0), Ymm(t + 0), Ymm(t + 2), 0x44);
            vshufps(Ymm(s + 1), Ymm(t + 0), Ymm(t + 2), 0xEE);
            vshufps(Ymm(s + 2), Ymm(t + 1), Ymm(t + 3), 0x44);
            vshufps(Ymm(s + 3), Ymm(t + 1), Ymm(t + 3), 0xEE);
        }
        for (int i = 0; i < 4; ++i) {
            vperm2f128(Ymm(8 + i), Ymm(i), Ymm(4 + i), 0x20);
            vperm2f128(Ymm(12 + i), Ymm(i), Ymm(4 + i), 0x31);
        }
        for (int i = 0; i < 8; ++i) vmovups(yword[dst + i * kRowBytes], Ymm(8 + i));
        add(s0, 32);
        add(s4, 32);
        add(p0, 32);
        add(p4, 32);
        add(dst, 8 * kRowBytes);
        dec(n);
        jnz(l_loop, T_NEAR);
        postamble();
    }
};

struct Transposer {
    Transposer() : fn(gen.finalize<TransFn>()) {}
    JitTranspose gen;
    TransFn fn;
};

// ---- dot micro-kernel (unpacked Trans::T B, M <= 16) ----------------------------------------------

// out[i * 32 + j] (+)= sum_{k < kn} A_i[k] * W_j[k] for i < mr, j < nj: rows of A at a + i*a_stride,
// rows of W (= B^T, PyTorch's weight layout) at w + j*w_stride (bytes), both read along k with
// vectors (masked tail), reduced horizontally at the end. W streams row by row from memory: nj
// (8 for mr = 1, else 4) sequential streams, no transposition.
struct DotArgs {
    const float* a;    // +0
    int64_t a_stride;  // +8 bytes
    const float* w;    // +16
    int64_t w_stride;  // +24 bytes
    float* out;        // +32 row stride 128 B
    int64_t k;         // +40 (>= 1)
    int64_t load;      // +48 nonzero: add onto out
};
using DotFn = void (*)(const DotArgs*);

alignas(64) constexpr int32_t kLaneIndex[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

int dot_nj(int mr) { return mr == 1 ? 8 : 4; }
// AVX-512: mr x nj <= 16 accumulators, so that they stay in zmm0..15 (the horizontal sums use
// vhaddps / vextractf128, which have no EVEX form for registers 16..31).
int dot_max_mr(Isa isa) { return isa >= Isa::avx512 ? 4 : 3; }

class JitDot : public JitGenerator {
public:
    JitDot(Isa isa, int mr, int nj) : JitGenerator(isa) {
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        const int vlen = z ? 16 : 8, vbytes = vlen * 4;
        const Reg64 args = abi_param1, a = rsi, as = rdx, w0 = rcx, ws = r8, ws3 = r9, w4 = r10, k = r11, t = rax,
                    as3 = rbx, a4 = r12;
        auto vr = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        auto vptr = [&](const RegExp& e) { return z ? zword[e] : yword[e]; };
        auto acc = [&](int i, int j) { return vr(i * nj + j); };
        const int xbase = mr * nj, wreg = mr * nj + mr;
        check_vector_regs(isa, wreg + 1, "dot kernel");
        if (z && mr * nj > 16) throw Error(Status::unsupported, "gemm decode: dot kernel accumulators past zmm15");
        const RegExp arow[8] = {RegExp(a), a + as, a + as * 2, a + as3, RegExp(a4), a4 + as, a4 + as * 2, a4 + as3};
        const RegExp wrow[8] = {RegExp(w0), w0 + ws, w0 + ws * 2, w0 + ws3, RegExp(w4), w4 + ws, w4 + ws * 2, w4 + ws3};

        preamble({rbx, r12});
        mov(a, ptr[args]);
        mov(as, ptr[args + 8]);
        mov(w0, ptr[args + 16]);
        mov(ws, ptr[args + 24]);
        mov(k, ptr[args + 40]);
        lea(ws3, ptr[ws + ws * 2]);
        lea(as3, ptr[as + as * 2]);
        lea(w4, ptr[w0 + ws * 4]);
        lea(a4, ptr[a + as * 4]);
        for (int i = 0; i < mr * nj; ++i) vxorps(vr(i), vr(i), vr(i));

        Label l_loop, l_tail, l_reduce;
        L(l_loop);
        cmp(k, vlen);
        jl(l_tail, T_NEAR);
        for (int i = 0; i < mr; ++i) vmovups(vr(xbase + i), vptr(arow[i]));
        for (int j = 0; j < nj; ++j) {
            if (mr == 1) {
                vfmadd231ps(acc(0, j), vr(xbase), vptr(wrow[j]));
            } else {
                vmovups(vr(wreg), vptr(wrow[j]));
                for (int i = 0; i < mr; ++i) vfmadd231ps(acc(i, j), vr(xbase + i), vr(wreg));
            }
        }
        add(a, vbytes);
        add(a4, vbytes);
        add(w0, vbytes);
        add(w4, vbytes);
        sub(k, vlen);
        jmp(l_loop);

        // 0 < k < vlen left: masked loads (nothing past the rows is read).
        L(l_tail);
        test(k, k);
        jz(l_reduce, T_NEAR);
        if (z) {
            mov(t, 1);
            shlx(t, t, k);
            sub(t, 1);
            kmovw(k1, t.cvt32());
            for (int i = 0; i < mr; ++i) vmovups(Zmm(xbase + i) | k1 | T_z, zword[arow[i]]);
            for (int j = 0; j < nj; ++j) {
                vmovups(Zmm(wreg) | k1 | T_z, zword[wrow[j]]);
                for (int i = 0; i < mr; ++i) vfmadd231ps(Zmm(acc(i, j).getIdx()), Zmm(xbase + i), Zmm(wreg));
            }
        } else {
            // ymm registers are all taken by the accumulators when mr = 3: one A row at a time,
            // the mask in the first free register, x and w after it.
            const Ymm mask = Ymm(xbase), x = Ymm(xbase + 1), wv = Ymm(xbase + 2);
            mov(t, reinterpret_cast<uintptr_t>(kLaneIndex));
            vmovq(Xmm(mask.getIdx()), k);
            vpbroadcastd(mask, Xmm(mask.getIdx()));
            vpcmpgtd(mask, mask, yword[t]);  // lane l: k > l
            for (int i = 0; i < mr; ++i) {
                vmaskmovps(x, mask, yword[arow[i]]);
                for (int j = 0; j < nj; ++j) {
                    vmaskmovps(wv, mask, yword[wrow[j]]);
                    vfmadd231ps(Ymm(acc(i, j).getIdx()), x, wv);
                }
            }
        }

        // Horizontal sums, 4 outputs of a row at a time: [a b c d] -> out[i*32 + j .. j+3].
        L(l_reduce);
        mov(t, ptr[args + 32]);
        for (int i = 0; i < mr; ++i) {
            for (int j0 = 0; j0 < nj; j0 += 4) {
                int r[4];
                for (int q = 0; q < 4; ++q) r[q] = acc(i, j0 + q).getIdx();
                if (z)
                    for (int q = 0; q < 4; ++q) {
                        vextractf32x8(Ymm(wreg), Zmm(r[q]), 1);
                        vaddps(Ymm(r[q]), Ymm(r[q]), Ymm(wreg));
                    }
                vhaddps(Ymm(r[0]), Ymm(r[0]), Ymm(r[1]));
                vhaddps(Ymm(r[2]), Ymm(r[2]), Ymm(r[3]));
                vhaddps(Ymm(r[0]), Ymm(r[0]), Ymm(r[2]));
                vextractf128(Xmm(r[1]), Ymm(r[0]), 1);
                vaddps(Xmm(r[0]), Xmm(r[0]), Xmm(r[1]));
            }
        }
        // Add onto out when asked, then store.
        Label l_plain;
        cmp(qword[args + 48], 0);
        je(l_plain, T_NEAR);
        for (int i = 0; i < mr; ++i)
            for (int j0 = 0; j0 < nj; j0 += 4) {
                const Xmm r0 = Xmm(acc(i, j0).getIdx());
                vaddps(r0, r0, xword[t + i * kRowBytes + j0 * 4]);
            }
        L(l_plain);
        for (int i = 0; i < mr; ++i)
            for (int j0 = 0; j0 < nj; j0 += 4) vmovups(xword[t + i * kRowBytes + j0 * 4], Xmm(acc(i, j0).getIdx()));
        postamble();
    }
};

struct Dot {
    Dot(Isa isa, int mr, int nj) : gen(isa, mr, nj), fn(gen.finalize<DotFn>()) {}
    JitDot gen;
    DotFn fn;
};

// ---- row-sweep micro-kernel (unpacked Trans::N B, M <= 2 / 4) ------------------------------------

// acc[i][0..cw) += sum_{r < k} a[r * mr + i] * B_r[0..cw) for i < mr: rows of B (the user's
// [K x N] rows, ldb bytes apart) swept left to right four at a time, the mr x cw accumulators in
// memory (L1): B is read exactly in its memory order (a DRAM stream per row range), which the
// 32-column panels of the other kernels cannot do without copying. Column tail masked.
struct RowsArgs {
    const float* a;      // +0 op(A) k-major: a[r * mr + i]
    const float* b;      // +8 row 0, column 0
    int64_t ldb;         // +16 bytes
    float* acc;          // +24 row i at acc + i * acc_stride
    int64_t acc_stride;  // +32 bytes
    int64_t cw;          // +40 columns (>= 1)
    int64_t k;           // +48 rows (>= 1)
};
using RowsFn = void (*)(const RowsArgs*);

int rows_max_mr(Isa isa) { return isa >= Isa::avx512 ? 4 : 2; }

class JitRows : public JitGenerator {
public:
    JitRows(Isa isa, int mr) : JitGenerator(isa) {
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        const int vlen = z ? 16 : 8, vbytes = vlen * 4;
        const Reg64 args = abi_param1, a = rsi, bp = rdx, ldb = rcx, ldb3 = r8, k = r9, cp = r10, ap = r11, n = rax,
                    as = rbx, as3 = r12, ctail = r13, cp4 = r14;
        auto vr = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        auto vptr = [&](const RegExp& e) { return z ? zword[e] : yword[e]; };
        // One row (M = 1): 8 rows of B per group (8 DRAM streams), each FMA reading B from memory,
        // kRowsStepBytes of each row per step (2 cache lines: 4 ymm / 2 zmm accumulators, so the
        // loop's instructions and accumulator loads and stores per byte of B are few and the
        // out-of-order window reaches further down the streams); no software prefetch. Measured
        // on one Zen 3 core, ratio to oneDNN's plain-B decode in the same process: 0.83-0.95x with
        // one vector per step and a sparse prefetch (one line per KiB, 4 KiB ahead), 0.87-1.00x
        // with the prefetch off, 1.00-1.02x with both changes (1x4096x11008, 1x4096x4096,
        // 1x11008x4096; 2 threads 1.04-1.10x). Else 4 rows per group, loaded into registers once
        // for the mr rows of A.
        const bool mem_b = mr == 1;
        const int U = mem_b ? 8 : 4;
        const int nstep = mem_b ? kRowsStepBytes / vbytes : 1;  // vectors per step of the main loop
        // x[u][i] in 0 .. U*mr-1, B rows after (one temporary for the masked tail when mem_b), the
        // accumulator, the AVX2 tail mask last.
        auto xr = [&](int u, int i) { return vr(u * mr + i); };
        const int bbase = U * mr, areg = bbase + (mem_b ? 1 : U), mreg = areg + 1;
        // Accumulators of a multi-vector step (mem_b): areg, the tail temporary, then past mreg.
        auto acc_reg = [&](int j) { return j == 0 ? vr(areg) : j == 1 ? vr(bbase) : vr(mreg + j - 1); };
        check_vector_regs(isa, std::max(z ? areg + 1 : mreg + 1, nstep > 2 ? mreg + nstep - 1 : 0), "row-sweep kernel");
        const RegExp brow[8] = {RegExp(cp), cp + ldb, cp + ldb * 2, cp + ldb3,
                                RegExp(cp4), cp4 + ldb, cp4 + ldb * 2, cp4 + ldb3};
        const RegExp arow[4] = {RegExp(ap), ap + as, ap + as * 2, ap + as3};

        preamble({rbx, r12, r13, r14});
        mov(a, ptr[args]);
        mov(bp, ptr[args + 8]);
        mov(ldb, ptr[args + 16]);
        mov(as, ptr[args + 32]);
        mov(k, ptr[args + 48]);
        lea(ldb3, ptr[ldb + ldb * 2]);
        lea(as3, ptr[as + as * 2]);
        // Tail columns (cw % vlen) and their mask.
        mov(ctail, ptr[args + 40]);
        and_(ctail, vlen - 1);
        if (z) {
            mov(n, 1);
            shlx(n, n, ctail);
            sub(n, 1);
            kmovw(k1, n.cvt32());
        } else {
            mov(n, reinterpret_cast<uintptr_t>(kLaneIndex));
            vmovq(Xmm(mreg), ctail);
            vpbroadcastd(Ymm(mreg), Xmm(mreg));
            vpcmpgtd(Ymm(mreg), Ymm(mreg), yword[n]);
        }

        // A group of `rows` rows of B over all the columns.
        auto group = [&](int rows, Label& l_next) {
            for (int u = 0; u < rows; ++u)
                for (int i = 0; i < mr; ++i) vbroadcastss(xr(u, i), ptr[a + (u * mr + i) * 4]);
            mov(cp, bp);
            if (rows > 4) lea(cp4, ptr[bp + ldb * 4]);
            mov(ap, ptr[args + 24]);
            mov(n, ptr[args + 40]);
            shr(n, z ? 4 : 3);  // full vectors
            auto load_b = [&](const Xmm& dst, int u) {
                if (z)
                    vmovups(Zmm(dst.getIdx()) | k1 | T_z, zword[brow[u]]);
                else
                    vmaskmovps(Ymm(dst.getIdx()), Ymm(mreg), yword[brow[u]]);
            };
            auto column = [&](bool masked) {
                if (!mem_b)
                    for (int u = 0; u < rows; ++u) {
                        if (!masked)
                            vmovups(vr(bbase + u), vptr(brow[u]));
                        else
                            load_b(vr(bbase + u), u);
                    }
                for (int i = 0; i < mr; ++i) {
                    if (!masked)
                        vmovups(vr(areg), vptr(arow[i]));
                    else if (z)
                        vmovups(Zmm(areg) | k1 | T_z, zword[arow[i]]);
                    else
                        vmaskmovps(Ymm(areg), Ymm(mreg), yword[arow[i]]);
                    for (int u = 0; u < rows; ++u) {
                        if (!mem_b) {
                            vfmadd231ps(vr(areg), xr(u, i), vr(bbase + u));
                        } else if (!masked) {
                            vfmadd231ps(vr(areg), xr(u, i), vptr(brow[u]));
                        } else {
                            load_b(vr(bbase), u);
                            vfmadd231ps(vr(areg), xr(u, i), vr(bbase));
                        }
                    }
                    if (!masked)
                        vmovups(vptr(arow[i]), vr(areg));
                    else if (z)
                        vmovups(zword[arow[i]] | k1, Zmm(areg));
                    else
                        vmaskmovps(yword[arow[i]], Ymm(mreg), Ymm(areg));
                }
            };
            Label l_col, l_tail;
            if (nstep > 1) {
                // Steps of nstep vectors per row while that many remain.
                Label l_step, l_step_end;
                L(l_step);
                cmp(n, nstep);
                jl(l_step_end, T_NEAR);
                for (int j = 0; j < nstep; ++j) vmovups(acc_reg(j), vptr(arow[0] + j * vbytes));
                for (int u = 0; u < rows; ++u)
                    for (int j = 0; j < nstep; ++j) vfmadd231ps(acc_reg(j), xr(u, 0), vptr(brow[u] + j * vbytes));
                for (int j = 0; j < nstep; ++j) vmovups(vptr(arow[0] + j * vbytes), acc_reg(j));
                add(cp, nstep * vbytes);
                if (rows > 4) add(cp4, nstep * vbytes);
                add(ap, nstep * vbytes);
                sub(n, nstep);
                jmp(l_step);
                L(l_step_end);
            }
            L(l_col);
            test(n, n);
            jz(l_tail, T_NEAR);
            column(false);
            add(cp, vbytes);
            if (rows > 4) add(cp4, vbytes);
            add(ap, vbytes);
            dec(n);
            jmp(l_col);
            L(l_tail);
            test(ctail, ctail);
            jz(l_next, T_NEAR);
            column(true);
        };

        Label l_gu, l_gu_next, l_g1, l_g1_next, l_done;
        L(l_gu);
        cmp(k, U);
        jl(l_g1, T_NEAR);
        group(U, l_gu_next);
        L(l_gu_next);
        lea(bp, ptr[bp + ldb * U]);
        add(a, U * mr * 4);
        sub(k, U);
        jmp(l_gu);
        L(l_g1);
        test(k, k);
        jz(l_done, T_NEAR);
        group(1, l_g1_next);
        L(l_g1_next);
        add(bp, ldb);
        add(a, mr * 4);
        dec(k);
        jmp(l_g1);
        L(l_done);
        postamble();
    }
};

struct Rows {
    Rows(Isa isa, int mr) : gen(isa, mr), fn(gen.finalize<RowsFn>()) {}
    JitRows gen;
    RowsFn fn;
};

// ---- per-thread scratch --------------------------------------------------------------------------

struct AlignedFloats {
    float* p = nullptr;
    size_t n = 0;
    ~AlignedFloats() { std::free(p); }
    float* get(size_t need) {
        if (need > n) {
            std::free(p);
            const size_t bytes = ((need * 4 + 63) / 64) * 64;
            p = static_cast<float*>(std::aligned_alloc(64, bytes));
            if (!p) {
                n = 0;
                throw std::bad_alloc();
            }
            n = bytes / 4;
        }
        return p;
    }
};

struct Scratch {
    AlignedFloats tile, pack, apack;
};
Scratch& scratch() {
    thread_local Scratch s;
    return s;
}

// ---- the kernel ----------------------------------------------------------------------------------

struct Tile {
    int64_t m0;
    int mr;
};

// [0, n) over the threads parallel_for would use, in chunks of about n / (4 threads) taken from a
// shared counter: when a CPU is shared with other work, the other threads take over its chunks,
// where a static split would wait for it. Every item is computed by the same code whichever thread
// takes it (results do not depend on the split).
void dynamic_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
    const int nt = parallel_threads(n, grain);
    if (nt <= 1) {
        f(0, n);
        return;
    }
    const int64_t chunk = std::max<int64_t>(grain, (n + 4 * nt - 1) / (4 * nt));
    std::atomic<int64_t> next{0};
    parallel_for(nt, 1, [&](int64_t, int64_t) {
        for (int64_t b = next.fetch_add(chunk); b < n; b = next.fetch_add(chunk)) f(b, std::min(n, b + chunk));
    });
}

// M rows in ceil(M / mr_max) tiles of balanced sizes.
std::vector<Tile> split_rows(int64_t M, int mr_max) {
    std::vector<Tile> tiles;
    const int64_t nt = std::max<int64_t>(1, (M + mr_max - 1) / mr_max), base = M / nt, rem = M % nt;
    int64_t m0 = 0;
    for (int64_t t = 0; t < nt && m0 < M; ++t) {
        const int mr = static_cast<int>(base + (t < rem ? 1 : 0));
        tiles.push_back({m0, mr});
        m0 += mr;
    }
    return tiles;
}

class GemvKernel final : public GemmKernel {
public:
    // blocked: the kernel's PackedB is the AVX-512 blocked kernel's (gemm_b_layout: K blocks of
    // 32-column panels), so that one packed weight serves decode and prefill.
    GemvKernel(const GemmSpec& s, Isa isa, bool blocked = false)
        : spec_(s), isa_(isa), blocked_(blocked), layout_(gemm_f32_panel_layout(s.K, s.N)) {
        require_isa(isa, "gemm decode kernel");
        if (blocked_) {
            bl_ = gemm_b_layout(isa, s.K, s.N, DType::f32);
            if (bl_.nr != kP)
                throw Error(Status::unsupported, std::string("gemm decode: the blocked layout of ") + isa_name(isa) +
                                                     " has " + std::to_string(bl_.nr) + "-column panels, not 32");
            layout_ = bl_.name;
        }
        const int mr_max = gemv_max_mr(isa);
        // Row tiles, then groups of tiles (M blocks).
        tiles_ = split_rows(s.M, mr_max);
        size_t first = 0;
        int64_t rows = 0;
        for (size_t t = 0; t < tiles_.size(); ++t) {
            if (rows > 0 && rows + tiles_[t].mr > std::max<int64_t>(kMBlockRows, kGemvMaxM)) {
                mblocks_.push_back({first, t});
                first = t, rows = 0;
            }
            rows += tiles_[t].mr;
        }
        if (!tiles_.empty()) mblocks_.push_back({first, tiles_.size()});
        // Micro-kernels, shared by every shape through the cache.
        micro_.assign(static_cast<size_t>(mr_max + 1) * 3, nullptr);
        const int g_h = g_hint.load(std::memory_order_relaxed);
        for (const Tile& t : tiles_)
            for (int pf = 0; pf < 3; ++pf) {  // prefetch modes: none, dense, sparse
                auto& slot = micro_[static_cast<size_t>(t.mr) * 3 + pf];
                if (slot) continue;
                // The dense prefetch (several row tiles) goes to L2 unless a hint was set: it runs
                // kMultiPf ahead, and in L1 it would evict the block the later tiles re-read.
                const int hint = pf == 0 ? 0 : pf == 1 && g_h == 0 ? 1 : g_h;
                const std::string key = std::string("gemm_f32_gemv_micro|") + isa_name(isa) + "|mr" +
                                        std::to_string(t.mr) + "|pf" + std::to_string(pf) + "|h" +
                                        std::to_string(hint);
                slot = KernelCache::instance().get_or_create<Micro>(
                    key, [&] { return std::make_shared<const Micro>(isa, t.mr, pf, hint); });
            }
        // Unpacked B^T with M <= 16: the dot kernels read the rows of W = B^T in place.
        if (s.trans_b == Trans::T && s.M <= kGemvMaxM && s.M > 0) {
            const int dmax = dot_max_mr(isa);
            dtiles_ = split_rows(s.M, dmax);
            dot_gw_ = s.M == 1 ? 8 : 4;
            dot_.assign(static_cast<size_t>(dmax + 1), nullptr);
            for (const Tile& t : dtiles_) {
                auto& slot = dot_[static_cast<size_t>(t.mr)];
                if (slot) continue;
                const int nj = dot_nj(t.mr);
                const std::string key = std::string("gemm_f32_gemv_dot|") + isa_name(isa) + "|mr" +
                                        std::to_string(t.mr) + "|nj" + std::to_string(nj);
                slot = KernelCache::instance().get_or_create<Dot>(
                    key, [&] { return std::make_shared<const Dot>(isa, t.mr, nj); });
            }
        }
        // Unpacked [K x N] B with one row tile (M <= 2 / 4): the row-sweep kernels read B in
        // memory order. More rows: B copied into panels a run of columns at a time (run_chunk_n),
        // where the micro-kernel's tiles re-read it from L1 (measured: 16 x 4096 x 4096 at
        // 46 GFLOP/s on one Zen 3 core, 26 with row sweeps of several tiles).
        if (s.trans_b == Trans::N && s.M <= rows_max_mr(isa) && s.M > 0) {
            rtiles_ = split_rows(s.M, rows_max_mr(isa));
            rows_.assign(static_cast<size_t>(rows_max_mr(isa) + 1), nullptr);
            for (const Tile& t : rtiles_) {
                auto& slot = rows_[static_cast<size_t>(t.mr)];
                if (slot) continue;
                const std::string key =
                    std::string("gemm_f32_gemv_rows|") + isa_name(isa) + "|mr" + std::to_string(t.mr);
                slot = KernelCache::instance().get_or_create<Rows>(
                    key, [&] { return std::make_shared<const Rows>(isa, t.mr); });
            }
        }
        // M = 1 with a packed B: several panels streamed in lockstep.
        const int ns = static_cast<int>(cur_streams(isa));
        if (s.M == 1 && ns > 1) {
            const std::string key = std::string("gemm_f32_gemv_stream|") + isa_name(isa) + "|ns" + std::to_string(ns);
            stream_ = KernelCache::instance().get_or_create<Stream>(
                key, [&] { return std::make_shared<const Stream>(isa, ns); });
            ns_ = ns;
        }
        transposer_ = KernelCache::instance().get_or_create<Transposer>(
            "gemm_f32_gemv_transpose|avx2", [] { return std::make_shared<const Transposer>(); });
    }

    std::string packed_layout() const override { return layout_; }

    std::shared_ptr<const GemmPacked> pack_b(const void* Bv) const override {
        const GemmSpec& s = spec_;
        if (blocked_) return gemm_jit_pack_b(s, bl_, Bv);
        const int64_t np = (s.N + kP - 1) / kP;
        auto p = std::make_shared<GemmPacked>(layout_, static_cast<size_t>(np * s.K * kP) * 4);
        if (s.K == 0 || s.N == 0) return p;
        const float* B = static_cast<const float*>(Bv);
        float* dst = static_cast<float*>(p->data);
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 18) / (s.K * kP));
        parallel_for(np, grain, [&](int64_t p0, int64_t p1) {
            for (int64_t pp = p0; pp < p1; ++pp)
                for (int64_t k0 = 0; k0 < s.K; k0 += 256)
                    pack_block(B, pp, k0, std::min<int64_t>(256, s.K - k0), dst + (pp * s.K + k0) * kP, 0);
        });
        return p;
    }

    void run(const GemmCall& call) const override {
        const GemmSpec& s = spec_;
        if (s.M == 0 || s.N == 0) return;
        const int64_t np = (s.N + kP - 1) / kP;
        const int64_t kc = cur_kc(), pf = cur_pf();

        const float* A = static_cast<const float*>(call.args.A);
        if (!call.packed_b && !dtiles_.empty()) {
            // Dot path: rows of op(A) with k contiguous (A itself unless it is transposed).
            const float* Ar = A;
            int64_t ars = s.lda;
            if (s.trans_a == Trans::T && s.K > 0) {
                float* buf = scratch().apack.get(static_cast<size_t>(s.M * s.K));
                for (int64_t k = 0; k < s.K; ++k)
                    for (int64_t m = 0; m < s.M; ++m) buf[m * s.K + k] = A[k * s.lda + m];
                Ar = buf, ars = s.K;
            }
            const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 20) / (std::max<int64_t>(1, s.K) * kP * (s.M + 8)));
            dynamic_for(np, grain, [&](int64_t p0, int64_t p1) {
                Scratch& sc = scratch();
                for (int64_t p = p0; p < p1; ++p) run_dot_item(call, Ar, ars, p, sc);
            });
            return;
        }

        if (!call.packed_b && !rtiles_.empty()) {
            run_rows(call);
            return;
        }

        // op(A) packed per row tile, k-major (A itself when M == 1 and A is a plain row).
        const float* Ap = A;
        if (s.K > 0 && !(s.M == 1 && s.trans_a == Trans::N)) {
            float* buf = scratch().apack.get(static_cast<size_t>(s.M * s.K));
            pack_a(A, tiles_, buf);
            Ap = buf;
        }

        if (call.packed_b && stream_) {
            run_streams(call, Ap, kc, pf);
            return;
        }

        const int64_t nmb = static_cast<int64_t>(mblocks_.size());
        const int64_t items = nmb * np;
        // Enough work per thread to pay for waking it: ~2^20 "units" of weight bytes + MACs.
        const int64_t per_item = std::max<int64_t>(1, s.K) * kP * (s.M / nmb + 8);
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 20) / per_item);
        if (!call.packed_b && s.trans_b == Trans::N) {
            // Unpacked [K x N] B: runs of up to cur_chunk_n() panels of one row block, copied
            // into panels a super-block of rows at a time (the longer the run, the longer the
            // segment of each row of B read from DRAM). Runs of equal length, as many per
            // thread: a run taken from a shared counter as threads become free. M <= 16 (the
            // copy is the decode kernel's own business: no packed B shares its bits) uses short
            // K blocks, so that the copied super-block of a long run stays in L2.
            const int nt = parallel_threads(items, grain);
            const int64_t per = (np + nt - 1) / nt;
            const int64_t grabs = (per + cur_chunk_n() - 1) / cur_chunk_n();
            const int64_t run = std::max<int64_t>(1, (per + grabs - 1) / grabs);
            const int64_t runs_mb = (np + run - 1) / run, nruns = nmb * runs_mb;
            const int64_t kcn = s.M <= kGemvMaxM ? std::min(kc, cur_ks_n()) : kc;
            std::atomic<int64_t> next{0};
            auto work = [&](int64_t, int64_t) {
                Scratch& sc = scratch();
                for (int64_t r = next.fetch_add(1); r < nruns; r = next.fetch_add(1)) {
                    const int64_t mb = r / runs_mb, p = (r % runs_mb) * run;
                    const MBlock& b = mblocks_[static_cast<size_t>(mb)];
                    run_chunk_n(call, Ap, b, p, std::min(np, p + run), s.M <= kGemvMaxM ? kcn : block_kc(b, kc), sc);
                }
            };
            if (nt <= 1)
                work(0, 1);
            else
                parallel_for(nt, 1, work);
            return;
        }
        dynamic_for(items, grain, [&](int64_t i0, int64_t i1) {
            Scratch& sc = scratch();
            if (blocked_ && call.packed_b) {  // runs of panels of one row block, K block by K block
                for (int64_t it = i0; it < i1;) {
                    const int64_t mb = it / np, pe = std::min(i1 - mb * np, np);
                    run_range_blocked(call, Ap, mblocks_[static_cast<size_t>(mb)], it % np, pe, kc, pf, sc);
                    it = mb * np + pe;
                }
                return;
            }
            for (int64_t it = i0; it < i1; ++it)
                run_item(call, Ap, mblocks_[static_cast<size_t>(it / np)], it % np, kc, pf, sc);
        });
    }

private:
    struct MBlock {
        size_t first, last;  // tiles [first, last)
    };

    // Row k of panel p of a packed B, and (rows) how many rows follow it contiguously (128 B apart):
    // the panel layout holds all of K in one run; the blocked layout one K block of bl_.kc rows.
    const float* prow(const float* packed, int64_t p, int64_t k, int64_t* rows = nullptr) const {
        const int64_t K = spec_.K;
        if (!blocked_) {
            if (rows) *rows = K - k;
            return packed + (p * K + k) * kP;
        }
        const int64_t pc = k / bl_.kc * bl_.kc, kcb = std::min(bl_.kc, K - pc);
        if (rows) *rows = pc + kcb - k;
        return packed + bl_.offset(pc, p, kcb) + (k - pc) * kP;
    }

    // Prefetch offset (bytes from bsrc, row k0 of panel p) of the row `ahead` bytes further along
    // the panel stream (panel p's rows, then panel p + 1's): the panel layout's constant distance;
    // in the blocked layout the address of that row, wherever its K block lies.
    int64_t pf_offset(const float* packed, const float* bsrc, int64_t p, int64_t k0, int64_t ahead) const {
        if (!blocked_ || ahead <= 0) return ahead;
        const int64_t K = spec_.K, np = (spec_.N + kP - 1) / kP;
        int64_t r = k0 + ahead / kRowBytes;
        int64_t q = p;
        if (r >= K) r -= K, q += 1;
        if (q >= np || r >= K) return ahead;  // past the last panel: the constant distance (a hint only)
        return reinterpret_cast<const char*>(prow(packed, q, r)) - reinterpret_cast<const char*>(bsrc);
    }

    // Packs rows k0..k0+kn of panel p of the user's B (trans_b, ldb of the spec) into dst
    // (kn rows of 32 floats), zero-padding columns past N. pf_bytes: transposer prefetch distance.
    void pack_block(const float* B, int64_t p, int64_t k0, int64_t kn, float* dst, int64_t pf_bytes) const {
        const GemmSpec& s = spec_;
        const int64_t n0 = p * kP, nv = std::min<int64_t>(kP, s.N - n0);
        if (s.trans_b == Trans::N) {
            for (int64_t k = 0; k < kn; ++k) {
                const float* src = B + (k0 + k) * s.ldb + n0;
                float* d = dst + k * kP;
                if (nv == kP) {
                    std::memcpy(d, src, kRowBytes);
                } else {
                    std::memcpy(d, src, static_cast<size_t>(nv) * 4);
                    std::memset(d + nv, 0, static_cast<size_t>(kP - nv) * 4);
                }
            }
            return;
        }
        // Trans::T: B[n * ldb + k]; groups of 8 columns through the 8x8 transposer.
        const int64_t kfull = kn / 8 * 8;
        for (int64_t g = 0; g < kP; g += 8) {
            if (g + 8 <= nv && kfull > 0) {
                TransArgs ta{B + (n0 + g) * s.ldb + k0, s.ldb * 4, dst + g, kfull / 8, pf_bytes};
                transposer_->fn(&ta);
                for (int64_t k = kfull; k < kn; ++k)
                    for (int64_t j = 0; j < 8; ++j) dst[k * kP + g + j] = B[(n0 + g + j) * s.ldb + k0 + k];
            } else {
                for (int64_t k = 0; k < kn; ++k)
                    for (int64_t j = 0; j < 8; ++j)
                        dst[k * kP + g + j] = g + j < nv ? B[(n0 + g + j) * s.ldb + k0 + k] : 0.0f;
            }
        }
    }

    // Packed B, M = 1: each thread's range of panels cut into ns_ equal runs, walked in lockstep
    // by the stream kernel (the leftover panels one at a time: the same sums either way).
    void run_streams(const GemmCall& call, const float* Ap, int64_t kc, int64_t pf) const {
        const GemmSpec& s = spec_;
        const int64_t K = s.K, np = (s.N + kP - 1) / kP;
        const float* packed = static_cast<const float*>(call.packed_b->data);
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 20) / (std::max<int64_t>(1, K) * kP * 9));
        dynamic_for(np, grain, [&](int64_t p0, int64_t p1) {
            Scratch& sc = scratch();
            const int64_t len = (p1 - p0) / ns_;
            if (blocked_ && len > 0) {
                // Blocked layout: K block by K block, so that each stream reads its len panels' rows
                // of the block as one contiguous run (panel by panel ran 5-15% slower: 64 KiB runs).
                float* tiles = sc.tile.get(static_cast<size_t>(len * ns_ * kP));
                for (int64_t pc = 0; pc < K; pc += bl_.kc) {
                    const int64_t kcb = std::min(bl_.kc, K - pc);
                    for (int64_t j = 0; j < len; ++j) {
                        const float* b = packed + bl_.offset(pc, p0 + j, kcb);
                        for (int64_t r = 0; r < kcb; r += kc) {
                            StreamArgs sa{Ap + pc + r, b + r * kP, len * kcb * kRowBytes, tiles + j * ns_ * kP,
                                          std::min(kc, kcb - r), pc + r > 0, pf};
                            stream_->fn(&sa);
                        }
                    }
                }
                for (int64_t j = 0; j < len; ++j)
                    for (int st = 0; st < ns_; ++st) {
                        const int64_t n0 = (p0 + st * len + j) * kP;
                        epilogue(call, tiles + (j * ns_ + st) * kP, 0, 1, n0, std::min<int64_t>(kP, s.N - n0));
                    }
                for (int64_t p = p0 + ns_ * len; p < p1; ++p) run_item(call, Ap, mblocks_[0], p, kc, pf, sc);
                return;
            }
            for (int64_t j = 0; j < len; ++j) {
                float* tile = sc.tile.get(static_cast<size_t>(ns_ * kP));
                if (K == 0) std::memset(tile, 0, static_cast<size_t>(ns_ * kRowBytes));
                // Runs of rows (all of K, or one K block of the blocked layout), kc rows per call;
                // the streams' panels lie len runs apart.
                for (int64_t k0 = 0; k0 < K;) {
                    int64_t run = 0;
                    const float* b = prow(packed, p0 + j, k0, &run);
                    const int64_t sb = reinterpret_cast<const char*>(prow(packed, p0 + len + j, k0)) -
                                       reinterpret_cast<const char*>(b);
                    for (int64_t r = 0; r < run; r += kc) {
                        StreamArgs sa{Ap + k0 + r, b + r * kP, sb, tile, std::min(kc, run - r), k0 + r > 0, pf};
                        stream_->fn(&sa);
                    }
                    k0 += run;
                }
                for (int st = 0; st < ns_; ++st) {
                    const int64_t n0 = (p0 + st * len + j) * kP;
                    epilogue(call, tile + st * kP, 0, 1, n0, std::min<int64_t>(kP, s.N - n0));
                }
            }
            for (int64_t p = p0 + ns_ * len; p < p1; ++p) run_item(call, Ap, mblocks_[0], p, kc, pf, sc);
        });
    }

    // Unpacked [K x N] B, M <= 16: row sweeps. Each thread takes a range of whole panels (its
    // columns) and sweeps every row of B over chunks of them, in memory order. One row tile: the
    // whole K in one sweep per chunk of kRowsCols columns. Several row tiles: chunks of
    // kRowsColsTiled columns, K blocks of kRowsKb rows re-read from L1 by each tile.
    void run_rows(const GemmCall& call) const {
        const GemmSpec& s = spec_;
        const int64_t np = (s.N + kP - 1) / kP;
        // op(A) k-major per row tile (A itself for one plain row).
        const float* A = static_cast<const float*>(call.args.A);
        const float* Ap = A;
        if (s.K > 0 && !(s.M == 1 && s.trans_a == Trans::N)) {
            float* buf = scratch().apack.get(static_cast<size_t>(s.M * s.K));
            pack_a(A, rtiles_, buf);
            Ap = buf;
        }
        const bool one = rtiles_.size() == 1;
        if (one && s.K > 0) {
            run_rows_sliced(call, Ap);
            return;
        }
        const int64_t cols = one ? kRowsCols : kRowsColsTiled, kb = one ? std::max<int64_t>(1, s.K) : kRowsKb;
        const int64_t grain = std::max<int64_t>(1, (int64_t(1) << 20) / (std::max<int64_t>(1, s.K) * kP * (s.M + 8)));
        // A static split: a sweep wants the widest column range (the row segments it reads).
        parallel_for(np, grain, [&](int64_t p0, int64_t p1) {
            Scratch& sc = scratch();
            for (int64_t q0 = p0; q0 < p1; q0 += cols / kP) {
                const int64_t q1 = std::min(p1, q0 + cols / kP);
                const int64_t c0 = q0 * kP, cw = std::min(s.N, q1 * kP) - c0;
                float* acc = sc.tile.get(static_cast<size_t>(s.M * cw));
                std::memset(acc, 0, static_cast<size_t>(s.M * cw) * 4);
                const float* B = static_cast<const float*>(call.args.B) + c0;
                for (int64_t k0 = 0; k0 < s.K; k0 += kb) {
                    const int64_t kn = std::min(kb, s.K - k0);
                    for (const Tile& t : rtiles_) {
                        RowsArgs ra{Ap + t.m0 * s.K + k0 * t.mr, B + k0 * s.ldb, s.ldb * 4, acc + t.m0 * cw, cw * 4, cw,
                                    kn};
                        rows_[static_cast<size_t>(t.mr)]->fn(&ra);
                    }
                }
                for (int64_t n0 = c0; n0 < c0 + cw; n0 += kP)
                    epilogue(call, acc + (n0 - c0), cw, 0, s.M, n0, std::min<int64_t>(kP, s.N - n0));
            }
        });
    }

    // One row tile (M <= 2 / 4): B streamed in its memory order. Work items are (column chunk,
    // K slice): a chunk is as wide as the accumulators allow (whole rows when M x N floats fit in
    // kRowsAccBytes, which L2 holds: a sweep then reads B as one linear stream), narrowed only
    // so that every thread gets items; K is cut into slices whose count depends on K alone
    // (never on the thread count, so the bits do not either), each summed into its own
    // accumulators and added in slice order at the end. With two threads each thread thus reads
    // whole contiguous slices of B instead of half of every row.
    void run_rows_sliced(const GemmCall& call, const float* Ap) const {
        const GemmSpec& s = spec_;
        const Tile& t = rtiles_[0];
        const int64_t M = s.M, N = s.N, K = s.K;
        const int64_t nks = std::clamp<int64_t>(K / kRowsSliceRows, 1, kRowsMaxSlices);
        const int64_t ks = (K + nks - 1) / nks;
        // Column chunks: multiples of 32 columns.
        const int64_t np = (N + kP - 1) / kP;
        int64_t ncc = std::max<int64_t>(1, (M * N * 4 + kRowsAccBytes - 1) / kRowsAccBytes);
        const int64_t work = K * N * (M + 8);  // bytes-and-MACs units, as the grains elsewhere
        const int nt = work >= (int64_t(1) << 22) ? get_num_threads() : 1;
        if (ncc * nks < nt) ncc = std::min<int64_t>(np, (nt + nks - 1) / nks);
        const int64_t ppc = (np + ncc - 1) / ncc;  // panels per chunk
        ncc = (np + ppc - 1) / ppc;
        const int64_t items = ncc * nks;
        // Accumulators of every slice: slice j's rows at acc + j * M * N (row stride N).
        float* acc = scratch().pack.get(static_cast<size_t>(nks * M * N));
        const float* B = static_cast<const float*>(call.args.B);
        auto item = [&](int64_t it) {
            const int64_t c = it / nks, j = it % nks;
            const int64_t c0 = c * ppc * kP, cw = std::min(N, (c + 1) * ppc * kP) - c0;
            const int64_t k0 = j * ks, kn = std::min(ks, K - k0);
            float* a = acc + j * M * N + c0;
            for (int64_t m = 0; m < M; ++m) std::memset(a + m * N, 0, static_cast<size_t>(cw) * 4);
            if (kn <= 0) return;
            RowsArgs ra{Ap + k0 * t.mr, B + k0 * s.ldb + c0, s.ldb * 4, a, N * 4, cw, kn};
            rows_[static_cast<size_t>(t.mr)]->fn(&ra);
        };
        if (nt <= 1 || items == 1) {
            for (int64_t it = 0; it < items; ++it) item(it);
        } else {
            std::atomic<int64_t> next{0};
            parallel_for(std::min<int64_t>(nt, items), 1, [&](int64_t, int64_t) {
                for (int64_t it = next.fetch_add(1); it < items; it = next.fetch_add(1)) item(it);
            });
        }
        // Slices added in order (into slice 0), then the epilogue, 32 columns at a time.
        for (int64_t j = 1; j < nks; ++j) {
            const float* src = acc + j * M * N;
            for (int64_t i = 0; i < M * N; ++i) acc[i] += src[i];
        }
        for (int64_t n0 = 0; n0 < N; n0 += kP) epilogue(call, acc + n0, N, 0, M, n0, std::min<int64_t>(kP, N - n0));
    }

    // op(A) rows of each tile, k-major: dst[t.m0 * K + k * t.mr + i] = op(A)[t.m0 + i, k].
    void pack_a(const float* A, const std::vector<Tile>& tiles, float* dst) const {
        const GemmSpec& s = spec_;
        for (const Tile& t : tiles) {
            float* d = dst + t.m0 * s.K;
            for (int i = 0; i < t.mr; ++i) {
                const int64_t m = t.m0 + i;
                if (s.trans_a == Trans::N) {
                    const float* src = A + m * s.lda;
                    for (int64_t k = 0; k < s.K; ++k) d[k * t.mr + i] = src[k];
                } else {
                    for (int64_t k = 0; k < s.K; ++k) d[k * t.mr + i] = A[k * s.lda + m];
                }
            }
        }
    }

    // Unpacked Trans::N B ([K x N] rows): panels [p0, p1) of row block mb together. Each super-block
    // of ks rows (a multiple of kc) is copied into panel rows first, reading every row of B over
    // (p1 - p0) * 128 contiguous bytes (a DRAM-friendly pattern, unlike 128 bytes per row and
    // panel), then computed panel by panel exactly as a packed B (same K blocks: same bits).
    void run_chunk_n(const GemmCall& call, const float* Ap, const MBlock& mb, int64_t p0, int64_t p1, int64_t kc,
                     Scratch& sc) const {
        const GemmSpec& s = spec_;
        const int64_t K = s.K, cw = p1 - p0;
        const int64_t m_first = tiles_[mb.first].m0;
        const int64_t m_rows = tiles_[mb.last - 1].m0 + tiles_[mb.last - 1].mr - m_first;
        float* tiles = sc.tile.get(static_cast<size_t>(cw * m_rows * kP));
        if (K == 0) std::memset(tiles, 0, static_cast<size_t>(cw * m_rows * kRowBytes));
        const int64_t ks = std::max<int64_t>(1, cur_ks_n() / kc) * kc;
        float* buf = sc.pack.get(static_cast<size_t>(cw * std::min(ks, K) * kP));
        const int64_t ksb = std::min(ks, K);  // rows per panel in buf
        const float* B = static_cast<const float*>(call.args.B);
        const int64_t n_first = p0 * kP, n_valid = std::min(s.N, p1 * kP) - n_first;
        for (int64_t k0s = 0; k0s < K; k0s += ks) {
            const int64_t ksn = std::min(ks, K - k0s);
            for (int64_t k = 0; k < ksn; ++k) {
                const float* src = B + (k0s + k) * s.ldb + n_first;
                for (int64_t j = 0; j < cw; ++j) {
                    float* d = buf + (j * ksb + k) * kP;
                    const int64_t nv = std::min<int64_t>(kP, n_valid - j * kP);
                    if (nv == kP) {
                        std::memcpy(d, src + j * kP, kRowBytes);
                    } else {
                        std::memcpy(d, src + j * kP, static_cast<size_t>(nv) * 4);
                        std::memset(d + nv, 0, static_cast<size_t>(kP - nv) * 4);
                    }
                }
            }
            for (int64_t j = 0; j < cw; ++j)
                for (int64_t kb = 0; kb < ksn; kb += kc) {
                    const int64_t kn = std::min(kc, ksn - kb), k0 = k0s + kb;
                    for (size_t t = mb.first; t < mb.last; ++t) {
                        const Tile& tl = tiles_[t];
                        MicroArgs ma{Ap + tl.m0 * K + k0 * tl.mr, buf + (j * ksb + kb) * kP, kRowBytes, 0,
                                     tiles + (j * m_rows + tl.m0 - m_first) * kP, kn, k0 > 0};
                        micro_[static_cast<size_t>(tl.mr) * 3]->fn(&ma);
                    }
                }
        }
        for (int64_t j = 0; j < cw; ++j) {
            const int64_t n0 = (p0 + j) * kP;
            epilogue(call, tiles + j * m_rows * kP, m_first, m_rows, n0, std::min<int64_t>(kP, s.N - n0));
        }
    }

    // K block of a row block: several row tiles re-read it from L1 beside the block prefetched
    // kMultiPf ahead, so a shorter one unless the K block was tuned (measured on Zen 3, 16 x 11008
    // x 4096 packed, one thread: 44-51 GFLOP/s with 128 rows and a prefetcht0 of the next block,
    // 50-57 with 64 rows and a prefetcht1 32 KiB ahead).
    // K block of a row block of several tiles (unless the tuning sets one). AVX2 decode (M <= 16,
    // 3..6 tiles of <= 3 rows): 16 rows (2 KiB of B per pass). Measured on Zen 3, packed B from
    // DRAM, 1 / 2 threads: 16 x 4096 x 4096 at 62 / 96 GFLOP/s (mean of 8 interleaved runs) with
    // 16-row blocks against 50 / 82 with 64, 47 with 128; 16 x 11008 x 4096 and 16 x 4096 x 11008
    // 68 / 65 against 53 / 52; M = 6..15: +15..45% (M = 4: +4%); 12 and 24 rows within noise of
    // 16, 8 worse. AVX-512 (2 tiles of <= 12 rows: M = 13..16): 32 rows, measured on a Xeon
    // (Sapphire Rapids class), packed B from DRAM, one process per block size, 1 / 2 threads
    // GFLOP/s for 16 x {4096x4096, 11008x4096, 4096x11008}: 64 rows 71 / 118, 60 / 110, 68 / 116;
    // 16 rows 67 / 147, 61 / 131, 59 / 143; 32 rows 79 / 135, 77 / 148, 78 / 132 (oneDNN 50-61 /
    // 92-117 in the same runs). M > 16 keeps 64 rows.
    int64_t block_kc(const MBlock& mb, int64_t kc) const {
        if (mb.last - mb.first <= 1 || g_kc.load(std::memory_order_relaxed) > 0) return kc;
        if (spec_.M > kGemvMaxM) return std::min(kc, kMultiKc);
        // XK_GEMV_DECODE_KC (an experiment override, not an API; read once) sets the decode block
        // for both ISAs, so that the AVX-512 choice can be measured without a rebuild.
        static const int64_t env_kc = [] {
            const char* e = std::getenv("XK_GEMV_DECODE_KC");
            return e ? std::max<int64_t>(0, std::atoll(e)) : int64_t(0);
        }();
        return std::min(kc, env_kc > 0 ? env_kc : isa_ < Isa::avx512 ? kDecodeKc : kDecodeKc512);
    }

    // One item: row block mb x panel p, K block by K block, then the epilogue.
    void run_item(const GemmCall& call, const float* Ap, const MBlock& mb, int64_t p, int64_t kc, int64_t pf,
                  Scratch& sc) const {
        const GemmSpec& s = spec_;
        const int64_t K = s.K;
        const int64_t m_first = tiles_[mb.first].m0;
        const int64_t m_rows = tiles_[mb.last - 1].m0 + tiles_[mb.last - 1].mr - m_first;
        float* tile = sc.tile.get(static_cast<size_t>(m_rows * kP));
        const int64_t n0 = p * kP, nv = std::min<int64_t>(kP, s.N - n0);
        if (K == 0) std::memset(tile, 0, static_cast<size_t>(m_rows * kRowBytes));

        const float* packed = call.packed_b ? static_cast<const float*>(call.packed_b->data) : nullptr;
        const float* B = static_cast<const float*>(call.args.B);
        const size_t ntiles = mb.last - mb.first;
        const int64_t ks_rows = cur_ks(), pf_t = cur_pf_t();
        kc = block_kc(mb, kc);
        for (int64_t k0 = 0, kn = 0; k0 < K; k0 += kn) {
            int64_t run = K - k0;
            const float* prow0 = packed ? prow(packed, p, k0, &run) : nullptr;
            kn = std::min(kc, run);  // (a K block of the blocked layout ends a block here)
            // Software prefetch. One row tile: the tile's pass is the only reader of the weight
            // stream; a sparse prefetch (one line per KiB, `pf` bytes ahead) keeps the hardware
            // prefetchers streaming across pages. Several row tiles: the first pass pulls the K
            // block from DRAM and the later passes re-read it from L1, so the second pass prefetches
            // the whole next K block: DRAM keeps streaming while the later passes compute.
            const float* bsrc;
            int64_t bstride;
            int64_t pfo = 0;                  // prefetch offset from the row being read
            size_t pf_tile = ~size_t(0);      // the tile (index in the block) whose pass prefetches
            int pf_mode = 0;
            if (packed) {
                bsrc = prow0, bstride = kRowBytes;
                if (ntiles > 1)
                    pfo = pf_offset(packed, bsrc, p, k0, kMultiPf), pf_tile = 1, pf_mode = 1;  // blocks ahead (into the next panel at the end)
                else if (pf > 0)
                    pfo = pf_offset(packed, bsrc, p, k0, pf), pf_tile = 0, pf_mode = 2;
            } else {
                // Packed on the fly, a super-block of ks rows (a multiple of kc) at a time, so that
                // the transposer streams each group of 8 rows of B^T over ks contiguous floats.
                const int64_t ks = std::max<int64_t>(1, ks_rows / kc) * kc;
                float* buf = sc.pack.get(static_cast<size_t>(std::min(ks, K) * kP));
                if (k0 % ks == 0) pack_block(B, p, k0, std::min(ks, K - k0), buf, pf_t);
                bsrc = buf + (k0 % ks) * kP, bstride = kRowBytes;
            }
            for (size_t t = mb.first; t < mb.last; ++t) {
                const Tile& tl = tiles_[t];
                const bool use_pf = t - mb.first == pf_tile;
                MicroArgs ma{Ap + tl.m0 * K + k0 * tl.mr, bsrc, bstride, pfo, tile + (tl.m0 - m_first) * kP, kn,
                             k0 > 0};
                micro_[static_cast<size_t>(tl.mr) * 3 + (use_pf ? pf_mode : 0)]->fn(&ma);
            }
        }
        epilogue(call, tile, m_first, m_rows, n0, nv);
    }

    // Blocked layout: panels [pa, pb) of row block mb, walked K block by K block and, in each, panel
    // by panel: the rows of one K block of consecutive panels are contiguous, so the weights are
    // read as one stream per K block (one panel at a time, 64 KiB runs between 8 MiB jumps, ran
    // 1.4x slower at M = 4). Accumulators of every panel of the range (in L2: M x 128 B a panel);
    // each element's sums run in increasing k in the same K sub-blocks as run_item's: the bits do
    // not depend on the range, hence on the threads.
    void run_range_blocked(const GemmCall& call, const float* Ap, const MBlock& mb, int64_t pa, int64_t pb,
                           int64_t kc, int64_t pf, Scratch& sc) const {
        const GemmSpec& s = spec_;
        const int64_t K = s.K;
        const int64_t m_first = tiles_[mb.first].m0;
        const int64_t m_rows = tiles_[mb.last - 1].m0 + tiles_[mb.last - 1].mr - m_first;
        const int64_t tsz = m_rows * kP;  // floats of one panel's accumulators
        float* tiles = sc.tile.get(static_cast<size_t>((pb - pa) * tsz));
        if (K == 0) std::memset(tiles, 0, static_cast<size_t>((pb - pa) * tsz) * 4);
        const float* packed = static_cast<const float*>(call.packed_b->data);
        const size_t ntiles = mb.last - mb.first;
        const int64_t kcs = block_kc(mb, kc);
        // Prefetch as run_item: several row tiles, the next blocks kMultiPf ahead (dense, the second
        // tile's pass); one tile, sparse, pf ahead. Along this range's stream (the range's panels of a
        // K block, then those of the next K block): the distance is constant but where it crosses
        // the range's end in a K block, whose next bytes are another range's (the offset then points
        // into the next K block's part of the range).
        const int64_t ahead = ntiles > 1 ? kMultiPf : pf;
        const int pf_mode = ntiles > 1 ? 1 : pf > 0 ? 2 : 0;
        const size_t pf_tile = ntiles > 1 ? 1 : 0;
        for (int64_t pc = 0; pc < K; pc += bl_.kc) {
            const int64_t kcb = std::min(bl_.kc, K - pc);
            const float* kb_base = packed + bl_.offset(pc, 0, kcb);  // panel 0 of this K block
            const int64_t range_end = (pb * kcb) * kP;               // floats from kb_base: end of the range
            for (int64_t p = pa; p < pb; ++p) {
                const float* base = kb_base + p * kcb * kP;
                float* acc = tiles + (p - pa) * tsz;
                for (int64_t sub = 0; sub < kcb; sub += kcs) {
                    const int64_t kn = std::min(kcs, kcb - sub), k0 = pc + sub;
                    const float* bsrc = base + sub * kP;
                    int64_t pfo = ahead;
                    if (pf_mode) {
                        const int64_t at = (bsrc - kb_base) + ahead / 4;  // floats from kb_base
                        if (at >= range_end && pc + kcb < K) {  // into the next K block's part of the range
                            const int64_t kcb2 = std::min(bl_.kc, K - pc - kcb);
                            const float* nb = packed + bl_.offset(pc + kcb, pa, kcb2);
                            pfo = reinterpret_cast<const char*>(nb + std::min(at - range_end, (pb - pa) * kcb2 * kP - 1)) -
                                  reinterpret_cast<const char*>(bsrc);
                        }
                    }
                    for (size_t t = mb.first; t < mb.last; ++t) {
                        const Tile& tl = tiles_[t];
                        const bool use_pf = pf_mode && t - mb.first == pf_tile;
                        MicroArgs ma{Ap + tl.m0 * K + k0 * tl.mr, bsrc, kRowBytes, pfo, acc + (tl.m0 - m_first) * kP, kn,
                                     k0 > 0};
                        micro_[static_cast<size_t>(tl.mr) * 3 + (use_pf ? pf_mode : 0)]->fn(&ma);
                    }
                }
            }
        }
        for (int64_t p = pa; p < pb; ++p) {
            const int64_t n0 = p * kP;
            epilogue(call, tiles + (p - pa) * tsz, m_first, m_rows, n0, std::min<int64_t>(kP, s.N - n0));
        }
    }

    // Panel p with the dot kernels: groups of dot_gw_ rows of W = B^T, each streamed once per row
    // tile (K blocks of kDotKc when there are several row tiles, so that the group stays in L1).
    void run_dot_item(const GemmCall& call, const float* Ar, int64_t ars, int64_t p, Scratch& sc) const {
        const GemmSpec& s = spec_;
        const int64_t K = s.K;
        const int64_t n0 = p * kP, nv = std::min<int64_t>(kP, s.N - n0);
        float* tile = sc.tile.get(static_cast<size_t>(s.M * kP));
        if (K == 0) {
            std::memset(tile, 0, static_cast<size_t>(s.M * kRowBytes));
            epilogue(call, tile, 0, s.M, n0, nv);
            return;
        }
        const float* B = static_cast<const float*>(call.args.B);
        const int64_t gw = dot_gw_;
        const int64_t kd = dtiles_.size() == 1 ? K : kDotKc;
        for (int64_t g = 0; g < nv; g += gw) {
            const int64_t valid = std::min<int64_t>(gw, nv - g);
            const float* w = B + (n0 + g) * s.ldb;
            int64_t wst = s.ldb * 4;
            if (valid < gw) {  // the last rows of W: copy them, zero rows after (nothing past N is read)
                float* buf = sc.pack.get(static_cast<size_t>(gw * K));
                for (int64_t j = 0; j < gw; ++j) {
                    if (j < valid)
                        std::memcpy(buf + j * K, w + j * s.ldb, static_cast<size_t>(K) * 4);
                    else
                        std::memset(buf + j * K, 0, static_cast<size_t>(K) * 4);
                }
                w = buf, wst = K * 4;
            }
            for (int64_t k0 = 0; k0 < K; k0 += kd) {
                const int64_t kn = std::min(kd, K - k0);
                for (const Tile& t : dtiles_) {
                    DotArgs da{Ar + t.m0 * ars + k0, ars * 4, w + k0, wst, tile + t.m0 * kP + g, kn, k0 > 0};
                    dot_[static_cast<size_t>(t.mr)]->fn(&da);
                }
            }
        }
        epilogue(call, tile, 0, s.M, n0, nv);
    }

    // C[m, n0 .. n0+nv) from the tile: the reference's epilogue, element by element.
    // TODO(gemmjit): switch to the shared vectorised activation injector
    // (src/kernels/common/jit_activation.hpp) once it lands; for now the activation is the scalar
    // definition, applied on the L1-hot tile (M x 32 outputs per K x 32 weights streamed).
    void epilogue(const GemmCall& call, const float* tile, int64_t m_first, int64_t m_rows, int64_t n0,
                  int64_t nv) const {
        epilogue(call, tile, kP, m_first, m_rows, n0, nv);
    }
    // The same with the tile's rows `ts` floats apart.
    void epilogue(const GemmCall& call, const float* tile, int64_t ts, int64_t m_first, int64_t m_rows, int64_t n0,
                  int64_t nv) const {
        const GemmSpec& s = spec_;
        const GemmArgs& a = call.args;
        const float alpha = call.alpha, beta = call.beta;
        const bool read_c = s.beta != BetaKind::zero;
        const float* bias = s.epilogue.bias ? a.bias + n0 : nullptr;
        const Activation act = s.epilogue.act;
        for (int64_t r = 0; r < m_rows; ++r) {
            const int64_t m = m_first + r;
            const float* t = tile + r * ts;
            float* c = static_cast<float*>(a.C) + m * s.ldc + n0;
            float x[kP];
            for (int64_t j = 0; j < nv; ++j) x[j] = alpha * t[j];
            if (read_c)
                for (int64_t j = 0; j < nv; ++j) x[j] = x[j] + beta * c[j];
            if (bias)
                for (int64_t j = 0; j < nv; ++j) x[j] = x[j] + bias[j];
            if (act != Activation::none)
                for (int64_t j = 0; j < nv; ++j) x[j] = apply_activation(act, x[j]);
            if (s.epilogue.residual) {
                if (s.residual_type == DType::bf16) {
                    const bf16* rp = static_cast<const bf16*>(a.residual) + m * s.ld_residual + n0;
                    for (int64_t j = 0; j < nv; ++j) x[j] = x[j] + rp[j].to_float();
                } else {
                    const float* rp = static_cast<const float*>(a.residual) + m * s.ld_residual + n0;
                    for (int64_t j = 0; j < nv; ++j) x[j] = x[j] + rp[j];
                }
            }
            std::memcpy(c, x, static_cast<size_t>(nv) * 4);
        }
    }

    GemmSpec spec_;
    Isa isa_;
    bool blocked_ = false;  // PackedB in the blocked kernel's layout (bl_), else the panel layout
    GemmBLayout bl_;
    std::string layout_;
    std::vector<Tile> tiles_;
    std::vector<MBlock> mblocks_;
    std::vector<std::shared_ptr<const Micro>> micro_;  // [mr * 3 + prefetch mode]
    std::shared_ptr<const Transposer> transposer_;
    std::vector<Tile> dtiles_;                     // row tiles of the dot path (empty: not used)
    int64_t dot_gw_ = 4;                           // rows of W per dot call
    std::vector<std::shared_ptr<const Dot>> dot_;  // [mr]
    std::shared_ptr<const Stream> stream_;         // M = 1, packed B: ns_ panels in lockstep (null: not used)
    int ns_ = 1;
    std::vector<Tile> rtiles_;                     // row tiles of the row sweeps (empty: not used)
    std::vector<std::shared_ptr<const Rows>> rows_;  // [mr]
};

bool f32_types(const GemmSpec& s) {
    return s.a_type == DType::f32 && s.b_type == DType::f32 && s.c_type == DType::f32;
}

}  // namespace

std::vector<std::string> gemv_generate_all(Isa isa) {
    std::vector<std::string> out;
    auto note = [&](const std::string& what, size_t bytes) { out.push_back(what + ":" + std::to_string(bytes)); };
    for (int mr = 1; mr <= gemv_max_mr(isa); ++mr)
        for (int pf = 0; pf < 3; ++pf)
            for (int hint = 0; hint < 3; ++hint) {
                JitMicro g(isa, mr, pf, hint);
                note("micro mr" + std::to_string(mr) + " pf" + std::to_string(pf) + " h" + std::to_string(hint), g.getSize());
            }
    for (int mr = 1; mr <= dot_max_mr(isa); ++mr) {
        JitDot g(isa, mr, dot_nj(mr));
        note("dot mr" + std::to_string(mr), g.getSize());
    }
    for (int mr = 1; mr <= rows_max_mr(isa); ++mr) {
        JitRows g(isa, mr);
        note("rows mr" + std::to_string(mr), g.getSize());
    }
    for (int ns = 2; ns <= stream_count(isa); ++ns) {
        JitStream g(isa, ns);
        note("stream ns" + std::to_string(ns), g.getSize());
    }
    JitTranspose t;
    note("transpose", t.getSize());
    return out;
}

std::string gemm_f32_panel_layout(int64_t K, int64_t N) {
    return "f32:panel32:K" + std::to_string(K) + ":N" + std::to_string(N);
}

bool gemv_supports(const GemmSpec& s) { return f32_types(s) && s.M <= kGemvMaxM; }
// Non-empty products only: an empty one (K = 0: C = act(beta C + bias) + residual) is the
// reference's, and the panel kernel's row tiles cost memory in proportion to M (M = 2^40 with
// K = 0 took 40-90 s to create, then failed for lack of memory).
bool gemm_panel_supports(const GemmSpec& s) { return f32_types(s) && s.M > 0 && s.N > 0 && s.K > 0; }

int gemv_max_mr(Isa isa) { return isa >= Isa::avx512 ? 12 : 3; }

void gemv_set_tuning(const GemvTuning& t) {
    g_kc.store(t.kc, std::memory_order_relaxed);
    g_pf.store(t.pf_bytes, std::memory_order_relaxed);
    g_hint.store(t.pf_hint, std::memory_order_relaxed);
    g_ks.store(t.ks, std::memory_order_relaxed);
    g_pf_t.store(t.pf_transpose, std::memory_order_relaxed);
    g_ks_n.store(t.ks_n, std::memory_order_relaxed);
    g_chunk_n.store(t.chunk_n, std::memory_order_relaxed);
    g_streams.store(t.streams, std::memory_order_relaxed);
}

GemvTuning gemv_tuning() { return {cur_kc(), cur_pf(), g_hint.load(std::memory_order_relaxed), cur_ks(), cur_pf_t(), cur_ks_n(), cur_chunk_n(), g_streams.load(std::memory_order_relaxed)}; }

std::shared_ptr<const GemmKernel> create_gemv_avx2(const GemmSpec& s) {
    return std::make_shared<GemvKernel>(s, Isa::avx2);
}
std::shared_ptr<const GemmKernel> create_gemv_avx512(const GemmSpec& s) {
    return std::make_shared<GemvKernel>(s, Isa::avx512);
}
std::shared_ptr<const GemmKernel> create_gemv_avx512_blocked(const GemmSpec& s) {
    return std::make_shared<GemvKernel>(s, Isa::avx512, true);
}

}  // namespace xk::detail
