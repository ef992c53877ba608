// xbyak generator of RMSNorm / LayerNorm rows for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16
// conversions at the avx512_bf16 level), specialised on the kernel descriptor (kind, hidden,
// dtypes, weight / bias / fused residual): every trip count and tail is known when generating.
//
// A row takes two passes with a few lines of C++ in between:
//   stats  over the row from memory: h = x (+ residual, stored to residual_out and read back
//          rounded), per-lane partial sums in fp32 over independent accumulator chains:
//            rms_norm    S2 = sum h^2
//            layer_norm  S1 = sum d, S2 = sum d^2, d = h - c with c the previous row's mean (0
//                        for the first row of a call): M2 = S2 - S1^2/n
//   var    layer_norm, only when M2 < S2/2 (the shift was far from this row's mean, relative to
//          its spread, so that the one-pass sums may have lost digits): S1 = sum e, S2 = sum e^2
//          with e = h - mean, from L1/L2 — the corrected two-pass algorithm (mean += S1/n,
//          var = S2/n - (S1/n)^2), repeated (up to kMaxVarPasses) while its own sums fail the
//          same test, so that the result does not depend on how far the shift was
//   C++    the lanes summed in double: mean, rstd = 1 / sqrt(var + eps)
//   apply  y = (h - mean) * rstd * weight + bias over the row again, now from L1/L2 (a row of
//          up to ~8K fp32 elements stays in L1/L2 between the passes), h from x or, when fused,
//          from residual_out (the rounded sum the norm is defined on).
// Rows are software-pipelined: a call over rows [b, e) runs stats(b), then the *fused* pass —
// apply of a row and stats of the next in one loop — so the DRAM read stream (the next row) and
// the write stream (this row's y) run together, like a copy, rather than in alternating phases.
// The fused pass loops over the rows itself and finishes each summed row's mean and rstd in
// registers (double, the C++ finish's operations in their order, lanes_sum's tree): calling it per
// row and finishing in C++ cost ~100-170 TSC cycles a row outside the loop (Zen 3: 3.4% of a
// 4096-float row, 13% of a 1024 one). It returns to C++ only for a LayerNorm row that needs the
// variance pass. x and residual are read from memory once, y and residual_out written once.
// f32 x without a fused residual takes the fused pass two rows a trip (Pass::fused2): the call's
// rows split into two runs walked side by side, a trip applying a row of each and summing the
// next row of each, in turns of kFused2Chunk elements. Each weight and bias line is then brought
// to L1 once for two rows: one row a trip streams h, w, b and the next x (64 KiB at hidden 4096)
// through a 32 KiB L1, and w and b alone are half of that. LayerNorm scale_shift 4096x4096, % of
// copy, one thread: Zen 3 83 -> 89, Xeon (AVX-512) 70 -> 79.
// When the call's output exceeds nt_store_threshold() (it cannot stay in the cache anyway) and
// y's rows are aligned, y is written with non-temporal stores (no read-for-ownership); so is a
// fused residual's residual_out of its own (not in place) with aligned rows, the fused pass
// keeping h for its apply in two scratch rows in the cache (the scratch mode, see JitNorm).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "common/float_io.hpp"
#include "common/streaming.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/norm/norm.hpp"

namespace xk::detail {
namespace {

// Variance passes a LayerNorm row may take (each gains ~-log10(n u) digits on the mean).
constexpr int kMaxVarPasses = 8;


using namespace Xbyak;

// The per-row arguments of both functions.
struct RowArgs {
    const void* x = nullptr;        // 0
    const void* r = nullptr;        // 8   residual (fused)
    void* ro = nullptr;             // 16  residual_out (fused)
    float* partial = nullptr;       // 24  out: [2][16] floats: S1, S2 per lane (stats, var)
    const void* h = nullptr;        // 32  apply: where h is read (x or residual_out)
    void* y = nullptr;              // 40
    const void* w = nullptr;        // 48
    const void* b = nullptr;        // 56
    float mean = 0, rstd = 0;       // 64, 68  (stats of layer_norm: mean = the shift c)
    // The fused pass runs `rows` rows (see Pass::fused): row strides in bytes, n and eps for the
    // statistics it finishes itself, and what it did.
    int64_t ld_x = 0, ld_r = 0, ld_ro = 0, ld_y = 0;  // 72 .. 96
    int64_t rows = 0;                                 // 104 >= 1
    int64_t done = 0;                                 // 112 out: rows applied (and next rows summed)
    int64_t need_finish = 0;                          // 120 out: 1 if the last summed row's mean / rstd
                                                      //     are left to the caller (finish(), from
                                                      //     partial and the shift in mean)
    double nn = 0, eps = 0;                           // 128, 136
    float mean2 = 0, rstd2 = 0;                       // 144, 148  Pass::fused2: the second row's
    const void* x2 = nullptr;                         // 152  Pass::fused2: the second row sequence
    const void* h2 = nullptr;                         // 160
    void* y2 = nullptr;                               // 168
    // The scratch mode of the fused pass (residual_out streamed, see JitNorm): where the next
    // summed row's h goes; out: where the h of the row left to apply is. sc_xor: the two
    // scratch rows' addresses XORed (each summed row takes the other one).
    void* sc = nullptr;                               // 176
    uint64_t sc_xor = 0;                              // 184
};
static_assert(offsetof(RowArgs, mean) == 64 && offsetof(RowArgs, rstd) == 68, "RowArgs layout");
static_assert(offsetof(RowArgs, mean2) == 144 && offsetof(RowArgs, rstd2) == 148, "RowArgs layout");

using RowFn = void (*)(RowArgs*);

// The lanes of a statistics sum (vlen floats) added in double as a tree: 16 lanes first fold to 8
// (v[j] + v[j + 8]), then 8 to 4 (v[j] + v[j + 4]), 4 to 2 (v[j] + v[j + 2]), 2 to 1. The fused
// pass's generated code adds them in exactly this order, so from the same lane sums both sides
// give the same mean and rstd. (The lane sums themselves differ in rounding between the
// statistics pass alone and the fused pass, whose accumulator chains differ: a row's f32 result
// may differ in its last bits between the first row of a call and a row inside one.)
double lanes_sum(const float* v, int vlen) {
    double t[16] = {};
    for (int j = 0; j < vlen && j < 16; ++j) t[j] = static_cast<double>(v[j]);
    for (int w = vlen / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) t[j] = t[j] + t[j + w];
    return t[0];
}

struct alignas(16) FinishConsts {
    double one = 1.0, half = 0.5;
};
const FinishConsts& finish_consts() {
    static const FinishConsts c;
    return c;
}

constexpr int kPrefetchBytes = 2048;       // software prefetch distance of bf16 x (see the row loop)
constexpr int kLnF32PrefetchBytes = 1024;  // ... and of f32 x in LayerNorm's fused pass
// Pass::fused2 runs its two rows in turns of this many elements. Two rows' non-temporal stores
// interleaved finely lose most of the bandwidth: Zen 3, one thread, RMSNorm 4096x4096 at % of
// copy, one row a trip 80-86; two rows alternating every 64 bytes 42-44 (with regular stores
// instead 69, against 61 for one row), every 128 bytes 49; in turns of 64 elements 60, 128
// elements 85-89, 256 elements 89-91, 512 elements 85-86, 1024 elements 81.
constexpr int kFused2Chunk = 256;
// Which rows Pass::fused2 pairs: rows of at least this many bytes in pairs of neighbours (row,
// row + 1), shorter ones from the two halves of the call's rows. Zen 3, one thread, % of copy,
// RMSNorm / LayerNorm scale_shift, halves against neighbours (3-4 rounds, medians): hidden 1024
// 85 / 91 against 80 / 70, 2048 86 / 94 against 89 / 79, 4096 88-95 / 91-95 against 94 / 86-91,
// 6144 90 / 91 against 95 / 93, 8192 79-89 / 82-86 against 96 / 97 (two threads at 8192: halves
// 90 / 97, neighbours 87 / 90; one row a trip 84 / 87 at one thread, 88 / 92 at two).
constexpr int64_t kFused2AdjacentBytes = 24 * 1024;

// The even / odd bf16 split (see JitNorm): bf16 x, and a bf16 residual when it is fused (AVX2
// and AVX-512: blocks of 2 * vlen = 16 / 32 elements); y bf16 as well for the normalising passes.
bool norm_eo_stats(const NormKernelDesc& kd, Isa isa) {
    return isa >= Isa::avx2 && kd.x_dtype == DType::bf16 && (!kd.fused_residual || kd.residual_dtype == DType::bf16);
}
bool norm_eo_apply(const NormKernelDesc& kd, Isa isa) { return norm_eo_stats(kd, isa) && kd.y_dtype == DType::bf16; }

// f32 weights in the order the even / odd passes read them: within every full block of
// `block` = 2 * vlen elements (16 AVX2, 32 AVX-512: one load2_eo), the block / 2 even-indexed
// elements first, then the odd ones (the rest, a tail shorter than a block, in order). NaNs become
// the default quiet NaN: the even / odd apply rounds with JitIo::store2_eo_away, whose + 0x8000
// needs NaN payloads with zero low words (x is bf16 there, so only the weights could bring others).
void norm_eo_permute(float* v, int64_t n, int block) {
    if (block < 2 || block > 32 || block % 2) throw Error(Status::runtime_error, "norm_eo_permute: block");
    for (int64_t i = 0; i < n; ++i)
        if (v[i] != v[i]) v[i] = std::numeric_limits<float>::quiet_NaN();
    float tmp[32];
    const int half = block / 2;
    for (int64_t b = 0; b + block <= n; b += block) {
        for (int j = 0; j < half; ++j) {
            tmp[j] = v[b + 2 * j];
            tmp[half + j] = v[b + 2 * j + 1];
        }
        std::memcpy(v + b, tmp, sizeof(float) * block);
    }
}

// What one generated function does with a row (RowArgs): the statistics pass of x/r/ro, the
// variance pass of h (layer_norm), the normalising pass of h into y, or stats and apply at once
// on two different rows (fused: the statistics of the next row while this one is normalised —
// one DRAM read stream and one write stream in a single loop, like a copy, instead of
// alternating read and write phases), which repeats over RowArgs::rows rows: after each it
// finishes the summed row's mean / rstd and moves every pointer one row on (done / need_finish
// say where it stopped).
enum class Pass { stats, var, apply, fused, fused2 };

class JitNorm : public JitGenerator {
public:
    // wt: the dtype of the weight / bias pointers the call passes (f32 copies of bf16 weights are
    // passed whenever the call covers two rows or more, so fused passes always get f32).
    // eo (bf16 x, and a bf16 residual if fused): full blocks of 2 * vlen bf16 (16 AVX2, 32 AVX-512:
    // a pair of vectors, k even and k + 1) are read split into even / odd elements
    // (JitIo::load2_eo: the statistics do not depend on the order; a fused residual's sum is
    // rounded in that split and stored back in element order, JitIo::round2_eo_keep; Zen 3, RMSNorm
    // / LayerNorm scale_shift 4096x4096 bf16 in place, % of copy, 1 / 2 threads: 59 / 49 and 58 /
    // 49 per vector with a read-back of the rounded sum, 87 / 79 and 95 / 95 split, 100-107 / 93-95
    // and 103-108 / 96-104 with r prefetched too) and, when y is bf16 too, normalised and written
    // back in that split (JitIo::store2_eo_away): f32 weights must then be passed permuted the same
    // way (norm_eo_permute with block 2 * vlen), bf16 weights are split as loaded. Pairs start at
    // multiples of 2 * vlen elements (every unroll is even), so the blocks are those of the
    // permute.
    // scm (scratch mode; Pass::fused with a fused residual, x and residual both f32 or both bf16
    // on the even / odd path): residual_out is written with non-temporal stores when nt (whole
    // vectors / pairs; rows aligned as y's), and h also to a scratch row in the cache
    // (RowArgs::sc, two rows used in turn), which the apply reads instead of residual_out. For a
    // residual_out apart from residual: regular stores to it read every line for ownership first
    // (a fifth stream), which capped those rows near 80% of copy. Zen 3, 4096x4096 apart, % of
    // copy, 1 / 2 threads, 3 rounds: RMSNorm f32 80 -> 92 / 81 -> 93, LayerNorm f32 scale_shift
    // 75 -> 82 / 78 -> 92, RMSNorm bf16 80 -> 95 / 83 -> 105, LayerNorm bf16 76 -> 85 / 80 -> 94.
    JitNorm(const NormKernelDesc& kd, Isa isa, Pass pass, bool nt, DType wt, bool eo = false, bool scm = false)
        : JitGenerator(isa) {
        using namespace Xbyak;
        const Reg64 p = abi_param1, r = rdx, ro = rcx, idx = r8, cnt = r9, tbl = r10, w = rbp, b = r12;
        // x, hp, y (and mean, rstd, the accumulators below): those of the row being run; Pass::fused2
        // switches them between its two rows (half()).
        Reg64 x = rsi, hp = r11, y = rbx;
        const bool two = pass == Pass::fused2;
        const Reg64 scr = r14;  // scm: the scratch row being written
        const bool fz = pass == Pass::fused || two;  // a fused pass (one or two rows a trip)
        if (two && (kd.fused_residual || kd.x_dtype != DType::f32 || wt != DType::f32))
            throw Error(Status::runtime_error, "JitNorm: fused2 takes f32 x and weights, no residual");
        // fused2: the second row's x / h / y (r and ro are free without a fused residual)
        const Reg64 x2 = rdx, hp2 = rcx, y2 = r14;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        const int vl = io.vlen();
        const int64_t n = kd.hidden, nvec = n / vl;
        const int tail = static_cast<int>(n % vl);
        const bool ln = kd.kind == NormKind::layer_norm, fused = kd.fused_residual;
        const bool do_stats = pass == Pass::stats || fz, do_apply = pass == Pass::apply || fz;
        const bool do_var = pass == Pass::var;
        const DType xt = kd.x_dtype, rt = kd.residual_dtype, ht = fused ? rt : xt, yt = kd.y_dtype;
        const int xs = dtype_size(xt), rs = dtype_size(rt), hs = dtype_size(ht), ys = dtype_size(yt), ws = dtype_size(wt);
        if (scm && !(pass == Pass::fused && fused &&
                     ((xt == DType::f32 && rt == DType::f32) || (xt == DType::bf16 && rt == DType::bf16 && eo && norm_eo_stats(kd, isa)))))
            throw Error(Status::runtime_error, "JitNorm: scratch mode needs the fused pass, a fused residual, x and residual f32 or bf16 (even / odd)");

        // Registers. Statistics / variance: accumulator chains (one sum: S1 or S2), temporaries.
        // Apply: the results of one unrolled block, weight / bias temporaries, mean and rstd.
        // Fused: fewer chains, weights as memory operands (f32). fused2: one row's chains in
        // V(0..1), the other's in V(2..3) (acc_base), h and d in V(4..5), the second row's mean
        // and rstd in V(6..7).
        // layer_norm statistics keep two sums (S1, S2) per chain.
        const bool two_sums = ln && (do_stats || do_var);
        const int chains = two ? (two_sums ? 1 : 2) : pass == Pass::fused ? (two_sums ? 2 : 4) : (two_sums ? 4 : 8);
        const int unroll = fz ? 2 : pass == Pass::apply ? 4 : chains;
        int acc_base = 0;
        auto acc = [&](int k) { return V(acc_base + k % chains); };            // S1 (two sums) or the one sum
        auto acc2 = [&](int k) { return V(acc_base + chains + k % chains); };  // S2 (two sums)
        const int row_regs = two_sums ? 2 * chains : chains;                  // a row's accumulators
        const int sb = two ? 2 * row_regs : row_regs;  // first register after the chains
        const Xmm h = two ? V(4) : V(sb + 1), t = two ? V(5) : V(sb + 2), d = two ? V(5) : V(sb + 3);  // (fused2: t unused)
        // apply registers: results res(k), weight temps tw(k), tb(k), mean, rstd
        const int ab = fz ? (two ? 8 : sb + 4) : 0;  // fused: after the stats registers (<= 8)
        auto res = [&](int k) { return V(ab + k); };
        auto tw = [&](int k) { return fz ? V(ab + 2) : V(4 + k); };
        auto tb = [&](int k) { return fz ? V(ab + 3) : V(8 + k); };
        Xmm mean = V(12), rstd = V(13);
        const Xmm mean_a = V(12), rstd_a = V(13), mean_b = V(6), rstd_b = V(7);  // fused2's two rows
        if (fz && ab + 4 > 12) throw Error(Status::runtime_error, "JitNorm: registers");
        // LayerNorm's fused one-row pass on the even / odd apply, with bf16 weights split as loaded
        // or none: y = (h rstd + nmr) w + b with nmr = -mean rstd (two FMAs a vector instead of a
        // subtraction, a multiply and an FMA), nmr in V(sb) (free in that pass), the bias pair in
        // the statistics' h / t (free while a pair is applied). The product mean rstd adds one
        // rounding of |mean| rstd, within the fp32 cancellation of h - mean the tests allow
        // (cancellation_tol). Zen 3, bf16 scale_shift, % of copy, 1 / 2 threads, 4 rounds
        // alternating (a noisy phase): 4096x4096 65 -> 78 / 82 -> 88, 16384x8192 71 -> 80 / 75 ->
        // 83; decode t:16 16.2 -> 14.1 us. Without weight and bias (plain) one FMA a vector instead
        // of two (4 rounds, 1 / 2 threads: 4096x4096 87.7 -> 87.2 / 90.3 -> 98.8, 16384x8192 84.3
        // -> 91.8 / 94.4 -> 98.4).
        const bool nmr_apply = pass == Pass::fused && ln && (wt == DType::bf16 || (!kd.has_weight && !kd.has_bias)) && eo &&
                               norm_eo_apply(kd, isa);
        const Xmm nmr = V(sb);
        // The fused one-row pass on the AVX2 even / odd path (bf16 x and y) without a fused
        // residual keeps the split's two constants in registers in its main loop (JitIo::
        // set_eo_regs): the 0xffff0000 mask in d's register (LayerNorm's statistics subtract the
        // shift in place instead), the 0x8000 of the rounding in nmr's register where the pass
        // has no nmr, else in acc(1), LayerNorm's second S1 chain (the main loop then sums S1 in
        // one chain: d_e + d_o, then into acc(0); the same operation count). Six table loads
        // fewer a pair: Zen 3 loads at most two ymm a cycle. Zen 3, one thread, 16 x 4096 bf16 in
        // the cache (a harness outside bench/), ns / element: LayerNorm scale_shift 0.173 ->
        // 0.160, plain 0.121 -> 0.116, RMSNorm 0.131 -> 0.122; bench_llm decode t:16 LayerNorm 10.15 -> 9.96 us, RMSNorm 7.89 -> 7.70 (5
        // rounds); DRAM rows within the host's noise (LayerNorm scale_shift 4096x4096 73.7 ->
        // 74.4% of copy, 16384x8192 74.4 -> 73.9, 4 rounds: at ~25 GB/s that row is compute-bound
        // there, with its 22 vector operations a pair).
        // With a fused residual the sum's rounding (JitIo::round2_eo_keep) takes the mask from
        // the same register, the residual pair is loaded into the apply's weight temporaries
        // (free until the apply), and RMSNorm (one sum: two of its four chains idle in the main
        // loop) also keeps the rounding's 0x7fff and 1 in acc(2) / acc(3). Zen 3, 4096x4096 bf16,
        // % of copy, 3 rounds alternating, medians, one thread: residual apart RMSNorm 88.6 ->
        // 95.0, LayerNorm scale_shift 72.5 -> 76.8; in place and two threads within the noise
        // (112.6 -> 115.4, 87.2 -> 86.1; 98-110 either way).
        const bool eo_regs = pass == Pass::fused && eo && norm_eo_apply(kd, isa) && !io.zmm();
        bool eo_main = false;
        auto set_nmr = [&] {
            if (!nmr_apply) return;
            vxorps(nmr, nmr, nmr);
            vfnmadd231ps(nmr, mean, rstd);  // -(mean rstd)
        };
        if (two && sb > 4) throw Error(Status::runtime_error, "JitNorm: registers");
        // fused2: run the first (0) or the second (1) row of the trip
        auto half = [&](int row) {
            x = row ? x2 : rsi;
            hp = row ? hp2 : r11;
            y = row ? y2 : rbx;
            mean = row ? mean_b : mean_a;
            rstd = row ? rstd_b : rstd_a;
            acc_base = row ? row_regs : 0;
        };

        const Reg64 rows_left = r13;  // the fused pass: rows (fused2: trips) still to run
        std::vector<Reg64> saved = {rbx, rbp, r12};
        if (fz) saved.push_back(r13);
        if (scm) saved.push_back(r14);
        if (two) {
            saved.push_back(r14);
            saved.push_back(r15);
        }
        preamble(saved);
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        if (do_stats) {
            mov(x, ptr[p + offsetof(RowArgs, x)]);
            if (fused) {
                mov(r, ptr[p + offsetof(RowArgs, r)]);
                mov(ro, ptr[p + offsetof(RowArgs, ro)]);
            }
            if (scm) mov(scr, ptr[p + offsetof(RowArgs, sc)]);
        }
        if (do_var || (ln && do_stats)) vbroadcastss(mean, ptr[p + offsetof(RowArgs, mean)]);  // var: mean; stats: c
        if (do_var) mov(hp, ptr[p + offsetof(RowArgs, h)]);
        if (do_apply) {
            mov(hp, ptr[p + offsetof(RowArgs, h)]);
            mov(y, ptr[p + offsetof(RowArgs, y)]);
            if (kd.has_weight) mov(w, ptr[p + offsetof(RowArgs, w)]);
            if (kd.has_bias) mov(b, ptr[p + offsetof(RowArgs, b)]);
            if (ln && !do_stats) vbroadcastss(mean, ptr[p + offsetof(RowArgs, mean)]);
            vbroadcastss(rstd, ptr[p + offsetof(RowArgs, rstd)]);
            set_nmr();
        }
        if (two) {  // the second run's row
            vbroadcastss(mean_b, ptr[p + offsetof(RowArgs, mean2)]);
            vbroadcastss(rstd_b, ptr[p + offsetof(RowArgs, rstd2)]);
            mov(x2, ptr[p + offsetof(RowArgs, x2)]);
            mov(hp2, ptr[p + offsetof(RowArgs, h2)]);
            mov(y2, ptr[p + offsetof(RowArgs, y2)]);
        }
        // The fused pass loops over rows (see Pass::fused): each trip applies one row and sums
        // the next, then finishes that next row's mean and rstd here in registers.
        Label row_loop, leave;
        if (fz) {
            mov(rows_left, ptr[p + offsetof(RowArgs, rows)]);
            L(row_loop);
        }
        if (do_stats || do_var)
            for (int k = 0; k < sb; ++k) vxorps(V(k), V(k), V(k));  // every row's chains
        xor_(idx, idx);

        const bool eo_stats = eo && norm_eo_stats(kd, isa) && (do_stats || do_var);
        const bool eo_apply = eo && norm_eo_apply(kd, isa) && do_apply;
        // Both vectors of a pair (k even, k + 1) through the even / odd split.
        auto stats_pair = [&](int k, int64_t off) {
            if (do_var) {
                io.load2_eo(h, t, hp + idx * hs + off * hs);
            } else {
                io.load2_eo(h, t, x + idx * xs + off * xs);
                if (fused) {
                    // h = x + r, rounded to bf16 in registers and stored to residual_out as one
                    // pair (the norm is defined on the rounded h, which the sums then take
                    // without reading it back). x and r are bf16, so a NaN sum has zero low
                    // words (round2_eo_keep's precondition). Temporaries: V(sb) and d, free
                    // in every statistics pass until the sums.
                    const Xmm re = nmr_apply || eo_regs ? tw(k) : V(sb), rod = eo_regs ? tb(k) : d;
                    io.load2_eo(re, rod, r + idx * rs + off * rs);
                    vaddps(h, h, re);
                    vaddps(t, t, rod);
                    const RegExp sc_at = scr + idx * rs + off * rs;
                    io.round2_eo_keep(ro + idx * rs + off * rs, h, t, re, scm && nt, scm ? &sc_at : nullptr);
                }
            }
            if (ln && eo_main && nmr_apply) {  // S1 in one chain (acc(1) holds a constant)
                vsubps(h, h, mean);
                vsubps(t, t, mean);
                vfmadd231ps(acc2(k), h, h);
                vfmadd231ps(acc2(k + 1), t, t);
                vaddps(h, h, t);
                vaddps(acc(0), acc(0), h);
                return;
            }
            for (int j = 0; j < 2; ++j) {
                const Xmm v = j ? t : h;
                if (ln) {
                    const Xmm dd = eo_regs ? v : d;  // eo_regs: d holds a constant
                    vsubps(dd, v, mean);
                    vaddps(acc(k + j), acc(k + j), dd);
                    vfmadd231ps(acc2(k + j), dd, dd);
                } else {
                    vfmadd231ps(acc(k + j), v, v);
                }
            }
        };
        auto apply_pair = [&](int k, int64_t off) {
            io.load2_eo(res(k), res(k + 1), hp + idx * hs + off * hs);
            if (nmr_apply) {
                const Xmm we = tw(k), wo = tb(k), be = h, bo = t;
                for (int j = 0; j < 2; ++j) vfmadd213ps(res(k + j), rstd, nmr);  // h rstd - mean rstd
                if (kd.has_weight) io.load2_eo(we, wo, w + idx * ws + off * ws);
                if (kd.has_bias) io.load2_eo(be, bo, b + idx * ws + off * ws);
                for (int j = 0; j < 2; ++j) {
                    if (kd.has_weight && kd.has_bias) vfmadd213ps(res(k + j), j ? wo : we, j ? bo : be);
                    else if (kd.has_weight) vmulps(res(k + j), res(k + j), j ? wo : we);
                    else if (kd.has_bias) vaddps(res(k + j), res(k + j), j ? bo : be);
                }
                return;
            }
            if (fz && wt == DType::bf16) {
                // bf16 weights in the fused pass (as given: half the bytes of the f32 copies
                // that the apply reads from L2 beside x's DRAM stream): one pair of temporaries
                // takes the weight, then the bias; the same operations as below.
                const Xmm e = tw(k), o = tb(k);
                if (ln)
                    for (int j = 0; j < 2; ++j) vsubps(res(k + j), res(k + j), mean);
                if (!kd.has_bias)
                    for (int j = 0; j < 2; ++j) vmulps(res(k + j), res(k + j), rstd);
                if (kd.has_weight) {
                    io.load2_eo(e, o, w + idx * ws + off * ws);
                    vmulps(res(k), res(k), e);
                    vmulps(res(k + 1), res(k + 1), o);
                }
                if (kd.has_bias) {
                    io.load2_eo(e, o, b + idx * ws + off * ws);
                    vfmadd213ps(res(k), rstd, e);
                    vfmadd213ps(res(k + 1), rstd, o);
                }
                return;
            }
            if (kd.has_weight && wt == DType::bf16) io.load2_eo(tw(k), tw(k + 1), w + idx * ws + off * ws);
            if (kd.has_bias && wt == DType::bf16) io.load2_eo(tb(k), tb(k + 1), b + idx * ws + off * ws);
            for (int j = 0; j < 2; ++j) {
                const Xmm v = res(k + j);
                const int64_t o = off + j * vl;
                if (ln) vsubps(v, v, mean);
                if (kd.has_bias) {  // (h - mean) w rstd + b: the last two in one FMA
                    if (kd.has_weight) {
                        if (wt == DType::f32) vmulps(v, v, ptr[w + idx * ws + o * ws]);
                        else vmulps(v, v, tw(k + j));
                    }
                    if (wt == DType::f32) vfmadd213ps(v, rstd, ptr[b + idx * ws + o * ws]);
                    else vfmadd213ps(v, rstd, tb(k + j));
                    continue;
                }
                vmulps(v, v, rstd);
                if (kd.has_weight) {
                    if (wt == DType::f32) vmulps(v, v, ptr[w + idx * ws + o * ws]);
                    else vmulps(v, v, tw(k + j));
                }
                if (kd.has_bias) {
                    if (wt == DType::f32) vaddps(v, v, ptr[b + idx * ws + o * ws]);
                    else vaddps(v, v, tb(k + j));
                }
            }
        };
        if (fz && wt != DType::f32 && !eo_apply) throw Error(Status::runtime_error, "JitNorm: fused weights");
        auto stats_body = [&](int k, int64_t off, int count) {
            io.load(h, x + idx * xs + off * xs, xt, count);
            if (fused) {
                io.load(t, r + idx * rs + off * rs, rt, count);
                vaddps(h, h, t);
                if (scm && rt == DType::f32) {
                    io.store(ro + idx * rs + off * rs, h, rt, count, nt && count == vl);
                    io.store(scr + idx * rs + off * rs, h, rt, count);
                } else if (scm) {  // bf16: the even / odd path's rest (a vector and a tail)
                    io.store(scr + idx * rs + off * rs, h, rt, count);
                    io.load(h, scr + idx * rs + off * rs, rt, count);  // the rounded sum
                    vmovaps(t, h);
                    io.store(ro + idx * rs + off * rs, t, rt, count);
                } else {
                    io.store(ro + idx * rs + off * rs, h, rt, count);
                    if (rt == DType::bf16) io.load(h, ro + idx * rs + off * rs, rt, count);  // the rounded sum
                }
            }
            if (ln) {
                vsubps(d, h, mean);  // d = h - c
                if (count < vl) io.keep_lanes(d, count);
                vaddps(acc(k), acc(k), d);
                vfmadd231ps(acc2(k), d, d);
            } else {
                vfmadd231ps(acc(k), h, h);  // lanes past a tail load are 0: they add nothing
            }
        };
        auto var_body = [&](int k, int64_t off, int count) {
            io.load(h, hp + idx * hs + off * hs, ht, count);
            vsubps(d, h, mean);
            if (count < vl) io.keep_lanes(d, count);
            vaddps(acc(k), acc(k), d);
            vfmadd231ps(acc2(k), d, d);
        };
        // y = (h - mean) * rstd * w + b into res(k) (stored by `block`).
        auto apply_body = [&](int k, int64_t off, int count) {
            const Xmm v = res(k);
            const bool fma_bias = kd.has_bias;  // (h - mean) w rstd + b: the last two in one FMA
            // RMSNorm, f32 h: the load folded into the multiply by rstd (one instruction a vector
            // fewer, the same product). Zen 3, DRAM rows, one thread, % of copy, medians of 5
            // rounds alternating: 4096x4096 78.9 -> 84.6, 16384x8192 81.6 -> 85.8 (two threads 89.6
            // -> 88.4 and 84.8 -> 89.3). LayerNorm scale_shift the same way ((mean - h) w, then
            // VFNMADD with rstd and b: the same result) measured no gain: not done.
            if (!ln && !fma_bias && ht == DType::f32 && count == vl) {
                vmulps(v, rstd, ptr[hp + idx * hs + off * hs]);
            } else {
                io.load(v, hp + idx * hs + off * hs, ht, count);
                if (ln) vsubps(v, v, mean);
                if (!fma_bias) vmulps(v, v, rstd);
            }
            if (kd.has_weight) {
                if (wt == DType::f32 && count == vl) {
                    vmulps(v, v, ptr[w + idx * ws + off * ws]);
                } else {
                    io.load(tw(k), w + idx * ws + off * ws, wt, count);
                    vmulps(v, v, tw(k));
                }
            }
            if (kd.has_bias) {
                if (wt == DType::f32 && count == vl) {
                    if (fma_bias) vfmadd213ps(v, rstd, ptr[b + idx * ws + off * ws]);
                    else vaddps(v, v, ptr[b + idx * ws + off * ws]);
                } else {
                    io.load(tb(k), b + idx * ws + off * ws, wt, count);
                    if (fma_bias) vfmadd213ps(v, rstd, tb(k));
                    else vaddps(v, v, tb(k));
                }
            }
        };
        // nv vectors from element idx + off (the last one `last` elements long); results stored in pairs.
        auto block = [&](int nv, int64_t off, int last) {
            // A full pair: vectors k & ~1 and its successor, both whole.
            auto full_pair = [&](int k) {
                const int k0 = k & ~1;
                return k0 + 1 < nv && (k0 + 1 < nv - 1 || last == vl);
            };
            for (int k = 0; k < nv; ++k) {
                const int c = k == nv - 1 ? last : vl;
                const bool pair = full_pair(k);
                if (do_stats) {
                    if (!(eo_stats && pair)) stats_body(k, off + k * vl, c);
                    else if (k % 2 == 0) stats_pair(k, off + k * vl);
                }
                if (do_var) {
                    if (!(eo_stats && pair)) var_body(k, off + k * vl, c);
                    else if (k % 2 == 0) stats_pair(k, off + k * vl);
                }
                if (do_apply) {
                    if (!(eo_apply && pair)) apply_body(k, off + k * vl, c);
                    else if (k % 2 == 0) apply_pair(k, off + k * vl);
                }
            }
            if (!do_apply) return;
            for (int k = 0; k < nv; k += 2) {
                const int64_t o = off + k * vl;
                if (eo_apply && full_pair(k)) io.store2_eo_away(y + idx * ys + o * ys, res(k), res(k + 1), nt);
                else if (k + 1 < nv) io.store2(y + idx * ys + o * ys, res(k), res(k + 1), yt, vl + (k + 1 == nv - 1 ? last : vl), nt);
                else io.store(y + idx * ys + o * ys, res(k), yt, last, nt && last == vl);
            }
        };
        // fused2: a block of one row, then the same block of the other (the rest of a row past its
        // chunks, below; w and b, read by the first, are in L1 for the second).
        auto rows_block = [&](int nv, int64_t off, int last) {
            if (!two) return block(nv, off, last);
            half(0);
            block(nv, off, last);
            half(1);
            block(nv, off, last);
            half(0);
        };
        // f32 LayerNorm's software prefetch of x in the fused passes (the row loop below says why).
        const bool ln_f32_prefetch = fz && xt == DType::f32 && !fused && ln;
        auto prefetch_ln_f32 = [&](const Reg64& xr) {
            for (int o = 0; o < unroll * vl * xs; o += 64) prefetcht0(ptr[xr + idx * xs + kLnF32PrefetchBytes + o]);
        };
        // fused2: turns of kFused2Chunk elements, one row's then the other's, so that each row's
        // stores stay one stream for a while (see kFused2Chunk); the rest of the row below.
        int64_t nblk = nvec / unroll;
        if (two && n >= kFused2Chunk) {
            constexpr int64_t chunk = kFused2Chunk;
            if (chunk % (unroll * vl)) throw Error(Status::runtime_error, "JitNorm: chunk");
            const int64_t nch = n / chunk, per = chunk / (unroll * vl);
            Label chunk_loop;
            mov(r15, nch);
            L(chunk_loop);
            for (int h2 = 0; h2 < 2; ++h2) {
                half(h2);
                Label inner;
                mov(cnt, per);
                align(64);
                L(inner);
                if (ln_f32_prefetch) prefetch_ln_f32(x);
                block(unroll, 0, vl);
                add(idx, unroll * vl);
                dec(cnt);
                jnz(inner);
                if (h2 == 0) sub(idx, chunk);
            }
            half(0);
            dec(r15);
            jnz(chunk_loop, T_NEAR);
            nblk -= nch * per;
        }
        // Apply blocks must fit the result registers: up to 4 (2 fused) vectors per block.
        if (nblk > 0) {
            Label loop;
            mov(cnt, nblk);
            // The loop starts on a cache line: where it fell with the row loop around the fused
            // pass, LayerNorm f32 scale_shift lost 9% (Zen 3, one thread: 70-72% of copy at offsets
            // 0 / 16, 77-82% at 32 / 64).
            const bool rms_regs = eo_regs && !ln && fused && chains == 4;  // acc(2), acc(3) idle here
            if (eo_regs)
                io.set_eo_regs(d.getIdx(), nmr_apply ? acc(1).getIdx() : nmr.getIdx(), rms_regs ? acc(2).getIdx() : -1,
                               rms_regs ? acc(3).getIdx() : -1);
            eo_main = eo_regs;
            align(64);
            L(loop);
            // bf16 x from DRAM: software prefetch 2 KiB ahead of the statistics' read stream.
            // Measured on Zen 3 (DRAM rows, one thread): +20-35% for bf16 RMSNorm / LayerNorm,
            // whose conversions leave fewer lines in flight per instruction window than a copy.
            // Rechecked against a copy run between the calls (3 rounds): none 53-68%, 1 KiB
            // 60-82%, 2 KiB 62-89%. Past the row's end it touches the next row.
            // With a fused bf16 residual (the even / odd path), r is prefetched the same way:
            // Zen 3, RMSNorm / LayerNorm scale_shift 4096x4096 in place (vLLM's pattern), % of
            // copy, 1 / 2 threads, 2-3 rounds: none 87-94 / 76-82 and 95-101 / 93-95; x alone 2 KiB
            // 94 / 82 and 102 / 95; x and r 1 KiB 107 / 86 and 101 / 91; 2 KiB 100-107 / 93-95 and
            // 103-108 / 96-104; 4 KiB 105 / 89 and 101 / 92.
            if (do_stats && xt == DType::bf16 && (!fused || eo_stats))
                for (int o = 0; o < unroll * vl * xs; o += 64) prefetcht0(ptr[x + idx * xs + kPrefetchBytes + o]);
            if (do_stats && fused && eo_stats)
                for (int o = 0; o < unroll * vl * rs; o += 64) prefetcht0(ptr[r + idx * rs + kPrefetchBytes + o]);
            // f32 LayerNorm (the fused pass): software prefetch of x 1 KiB ahead. The apply half
            // reads h (and w, b) from L1 / L2 beside the DRAM stream of x, and the hardware
            // prefetcher keeps fewer lines of x in flight. Measured on Zen 3 (DRAM rows, one
            // thread, % of a copy run between the calls, 2 rounds, 4096x4096 / 16384x8192, rows
            // run inside the pass): scale_shift none 71-72 / 73-74, 0.5 KiB 70-72 / 72, 1 KiB
            // 75-76 / 73, 2 KiB 67-70 / 66-72, 4 KiB 66-68 / 66; plain none 78-80 / 82, 0.5 KiB 85
            // / 86-87, 1 KiB 90 / 89-93, 2 KiB 92-95 / 88-95, 4 KiB 85-87 / 84. RMSNorm (which
            // reads w in the apply half too) lost 3-8% at 0.5-2 KiB: none.
            if (ln_f32_prefetch) {
                prefetch_ln_f32(x);
                if (two) prefetch_ln_f32(x2);
            }
            rows_block(unroll, 0, vl);
            add(idx, unroll * vl);
            dec(cnt);
            jnz(loop);
            if (eo_regs) io.clear_eo_regs();
            if (eo_regs && nmr_apply) vxorps(acc(1), acc(1), acc(1));  // S1's second chain again
            if (rms_regs)
                for (int k = 2; k < 4; ++k) vxorps(acc(k), acc(k), acc(k));  // the idle chains again
            eo_main = false;
        }
        int rem = static_cast<int>(nvec % unroll);
        int64_t off = 0;
        while (rem + (tail ? 1 : 0) > 0) {  // the rest, in blocks of at most `unroll` vectors
            const int nv = std::min(unroll, rem + (tail ? 1 : 0));
            const bool ends_with_tail = tail && nv == rem + 1;
            rows_block(nv, off, ends_with_tail ? tail : vl);
            off += static_cast<int64_t>(nv) * vl;
            rem -= ends_with_tail ? nv - 1 : nv;
            if (ends_with_tail) break;
        }

        auto store_partial = [&] {
            mov(cnt, ptr[p + offsetof(RowArgs, partial)]);
            if (two_sums) {
                vmovups(ptr[cnt], acc(0));
                vmovups(ptr[cnt + 64], acc2(0));
            } else {
                vmovups(ptr[cnt + 64], acc(0));  // S2
            }
        };
        if (do_stats || do_var) {
            for (int h2 = 0; h2 < (two ? 2 : 1); ++h2) {
                half(h2);
                for (int k = 1; k < chains; ++k) {
                    vaddps(acc(0), acc(0), acc(k));
                    if (two_sums) vaddps(acc2(0), acc2(0), acc2(k));
                }
            }
            half(0);
            if (!fz) store_partial();
        }
        if (fz) {
            // The summed row's mean and rstd, in double, as finish() computes them from the same
            // lane sums (lanes_sum's tree, then the same operations in the same order): scratch V(8..11) (the apply's
            // registers, free here), the results into mean / rstd for the next trip.
            const Xmm s1 = Xmm(8), s2 = Xmm(9), t0 = Xmm(10), t1 = Xmm(11);
            mov(cnt, reinterpret_cast<uintptr_t>(&finish_consts()));
            auto lane_tree = [&](const Xmm& out, const Xmm& v) {  // out (scalar double) = lanes_sum(v)
                if (io.zmm()) {
                    vextractf64x4(Ymm(t0.getIdx()), Zmm(v.getIdx()), 1);       // lanes 8..15
                    vcvtps2pd(Zmm(t1.getIdx()), Ymm(t0.getIdx()));
                    vcvtps2pd(Zmm(out.getIdx()), Ymm(v.getIdx()));             // lanes 0..7
                    vaddpd(Zmm(out.getIdx()), Zmm(out.getIdx()), Zmm(t1.getIdx()));
                    vextractf64x4(Ymm(t0.getIdx()), Zmm(out.getIdx()), 1);
                    vaddpd(Ymm(out.getIdx()), Ymm(out.getIdx()), Ymm(t0.getIdx()));
                } else {
                    vextractf128(t0, Ymm(v.getIdx()), 1);                      // lanes 4..7
                    vcvtps2pd(Ymm(t1.getIdx()), t0);
                    vcvtps2pd(Ymm(out.getIdx()), Xmm(v.getIdx()));             // lanes 0..3
                    vaddpd(Ymm(out.getIdx()), Ymm(out.getIdx()), Ymm(t1.getIdx()));
                }
                vextractf128(t0, Ymm(out.getIdx()), 1);
                vaddpd(out, out, t0);
                vunpckhpd(t0, out, out);
                vaddsd(out, out, t0);
            };
            for (int h2 = 0; h2 < (two ? 2 : 1); ++h2) {  // fused2: each summed row
                half(h2);
                if (ln) {
                    lane_tree(s1, acc(0));
                    lane_tree(s2, acc2(0));
                    // mean = c + s1 / n; m2 = s2 - s1 * s1 / n; var = m2 / n unless !(m2 > 0.5 s2)
                    vcvtss2sd(t0, Xmm(mean.getIdx()), Xmm(mean.getIdx()));
                    vdivsd(t1, s1, ptr[p + offsetof(RowArgs, nn)]);
                    vaddsd(t0, t0, t1);                                       // mean (double)
                    vmulsd(t1, s1, s1);
                    vdivsd(t1, t1, ptr[p + offsetof(RowArgs, nn)]);
                    vsubsd(t1, s2, t1);                                       // m2
                    vmulsd(s1, s2, ptr[cnt + offsetof(FinishConsts, half)]);  // 0.5 s2
                    vucomisd(t1, s1);
                    Label ok;
                    ja(ok, T_NEAR);
                    // The shift was far from the row's mean: finish() runs the variance pass. It
                    // needs the partial sums and the shift c (still in mean). fused2: the caller
                    // sums both rows of the trip again.
                    if (!two) {
                        store_partial();
                        vmovss(ptr[p + offsetof(RowArgs, mean)], Xmm(mean.getIdx()));
                    }
                    mov(qword[p + offsetof(RowArgs, need_finish)], 1);
                    if (scm) mov(ptr[p + offsetof(RowArgs, sc)], scr);  // the summed row's h
                    mov(cnt, ptr[p + offsetof(RowArgs, rows)]);
                    sub(cnt, rows_left);
                    inc(cnt);
                    mov(ptr[p + offsetof(RowArgs, done)], cnt);
                    jmp(leave, T_NEAR);
                    L(ok);
                    vdivsd(s2, t1, ptr[p + offsetof(RowArgs, nn)]);           // var
                    vcvtsd2ss(Xmm(mean.getIdx()), Xmm(mean.getIdx()), t0);
                    vbroadcastss(mean, Xmm(mean.getIdx()));
                } else {
                    lane_tree(s2, acc(0));
                    vdivsd(s2, s2, ptr[p + offsetof(RowArgs, nn)]);           // var
                }
                vaddsd(s2, s2, ptr[p + offsetof(RowArgs, eps)]);
                vsqrtsd(s2, s2, s2);
                vmovsd(t0, ptr[cnt + offsetof(FinishConsts, one)]);
                vdivsd(t0, t0, s2);
                vcvtsd2ss(Xmm(rstd.getIdx()), Xmm(rstd.getIdx()), t0);
                vbroadcastss(rstd, Xmm(rstd.getIdx()));
                set_nmr();
            }
            half(0);
            // The summed row is applied next: h from it, then every pointer one row on
            // (fused2: both rows, every pointer two rows on).
            if (two) {
                mov(hp, x);
                mov(hp2, x2);
                add(x, ptr[p + offsetof(RowArgs, ld_x)]);
                add(x2, ptr[p + offsetof(RowArgs, ld_x)]);
                add(y, ptr[p + offsetof(RowArgs, ld_y)]);
                add(y2, ptr[p + offsetof(RowArgs, ld_y)]);
            } else {
                if (scm) {  // the scratch row just written; the next row takes the other
                    mov(hp, scr);
                    xor_(scr, ptr[p + offsetof(RowArgs, sc_xor)]);
                } else {
                    mov(hp, fused ? ro : x);
                }
                add(x, ptr[p + offsetof(RowArgs, ld_x)]);
                if (fused) {
                    add(r, ptr[p + offsetof(RowArgs, ld_r)]);
                    add(ro, ptr[p + offsetof(RowArgs, ld_ro)]);
                }
                add(y, ptr[p + offsetof(RowArgs, ld_y)]);
            }
            dec(rows_left);
            jnz(row_loop, T_NEAR);
            vmovss(ptr[p + offsetof(RowArgs, mean)], Xmm(mean.getIdx()));
            vmovss(ptr[p + offsetof(RowArgs, rstd)], Xmm(rstd.getIdx()));
            if (two) {
                vmovss(ptr[p + offsetof(RowArgs, mean2)], Xmm(mean_b.getIdx()));
                vmovss(ptr[p + offsetof(RowArgs, rstd2)], Xmm(rstd_b.getIdx()));
            }
            mov(qword[p + offsetof(RowArgs, need_finish)], 0);
            if (scm) mov(ptr[p + offsetof(RowArgs, sc)], hp);  // the last summed row's h
            mov(cnt, ptr[p + offsetof(RowArgs, rows)]);
            mov(ptr[p + offsetof(RowArgs, done)], cnt);
            L(leave);
        }
        postamble();
        fn = finalize<RowFn>();
    }
    RowFn fn = nullptr;

private:
    Xbyak::Xmm V(int i) const { return isa() >= Isa::avx512 ? Xbyak::Xmm(Xbyak::Zmm(i)) : Xbyak::Xmm(Xbyak::Ymm(i)); }
};

class JitNormKernel final : public NormKernel {
public:
    static constexpr int64_t kWidenRows = 32;

    JitNormKernel(const NormKernelDesc& kd, Isa isa)
        : vlen_(isa >= Isa::avx512 ? 16 : 8),
          eo_w_(norm_eo_apply(kd, isa) && (kd.has_weight || kd.has_bias)),
          bf16w_eo_(eo_w_ && kd.weight_dtype == DType::bf16),
          stats_(kd, isa, Pass::stats, false, DType::f32, true),
          var_(kd, isa, Pass::var, false, DType::f32, true),
          // calls of one row read the weights as given: split as loaded when bf16; f32 weights
          // would need the permuted copy, so that apply keeps the element order
          apply_{JitNorm(kd, isa, Pass::apply, false, kd.weight_dtype, !eo_w_ || kd.weight_dtype == DType::bf16),
                 JitNorm(kd, isa, Pass::apply, true, kd.weight_dtype, !eo_w_ || kd.weight_dtype == DType::bf16)},
          // the fused passes: f32 weights (copies where the call's are bf16), or bf16 weights
          // split as loaded (bf16w_eo_: no copy)
          fused_{JitNorm(kd, isa, Pass::fused, false, bf16w_eo_ ? DType::bf16 : DType::f32, true),
                 JitNorm(kd, isa, Pass::fused, true, bf16w_eo_ ? DType::bf16 : DType::f32, true)} {
        if ((((kd.has_weight || kd.has_bias) && kd.weight_dtype == DType::bf16) || eo_w_) && !bf16w_eo_) {
            apply_f32w_[0] = std::make_unique<JitNorm>(kd, isa, Pass::apply, false, DType::f32, true);
            apply_f32w_[1] = std::make_unique<JitNorm>(kd, isa, Pass::apply, true, DType::f32, true);
        }
        const bool sc_dtypes = (kd.x_dtype == DType::f32 && kd.residual_dtype == DType::f32) ||
                               (kd.x_dtype == DType::bf16 && kd.residual_dtype == DType::bf16 && norm_eo_stats(kd, isa));
        if (kd.fused_residual && sc_dtypes)
            fused_sc_ = std::make_unique<JitNorm>(kd, isa, Pass::fused, true, bf16w_eo_ ? DType::bf16 : DType::f32, true, true);
        if (!kd.fused_residual && kd.x_dtype == DType::f32) {
            fused2_[0] = std::make_unique<JitNorm>(kd, isa, Pass::fused2, false, DType::f32, true);
            fused2_[1] = std::make_unique<JitNorm>(kd, isa, Pass::fused2, true, DType::f32, true);
        }
    }

    void run(const NormDesc& d, const NormArgs& a, int64_t row_begin, int64_t row_end) const override {
        const int64_t n = d.hidden;
        // Streaming stores for y: a large output whose rows all start on the stored width.
        const int ys = dtype_size(d.y_dtype);
        // Every streamed store is aligned to its width: a full f32 vector or a bf16 pair (one
        // register of 32 / 64 bytes), so the rows must start on the register width.
        const int64_t align = static_cast<int64_t>(vlen_) * 4;
        const bool nt = use_nt_stores(d.rows * n * ys) && rows_aligned(a.y, d.ld_y, ys, align) && n >= vlen_;

        alignas(64) float part[2][16];
        RowArgs ra;
        ra.partial = &part[0][0];
        ra.w = a.weight;
        ra.b = a.bias;
        // The fused passes take f32 weights: bf16 weights are widened once per call (and with the
        // even / odd split, f32 weights are copied permuted) when there are rows enough to repay
        // the copy (kWidenRows); calls of fewer rows then run stats and apply per row with the
        // weights as given (decode: the rows are in the cache anyway). bf16 weights with the
        // even / odd split need no copy: the fused pass splits them as it loads them
        // (fused_).
        const bool has_w = d.has_weight || d.has_bias;
        const bool needs_copy = has_w && (d.weight_dtype == DType::bf16 || eo_w_) && !bf16w_eo_;
        const bool many = row_end - row_begin >= (needs_copy ? kWidenRows : 2);
        if (many && needs_copy) {
            thread_local std::vector<float> wb;
            wb.resize(static_cast<size_t>(2 * n));
            if (d.has_weight) {
                load_f32(a.weight, d.weight_dtype, n, wb.data());
                if (eo_w_) norm_eo_permute(wb.data(), n, 2 * vlen_);
                ra.w = wb.data();
            }
            if (d.has_bias) {
                load_f32(a.bias, d.weight_dtype, n, wb.data() + n);
                if (eo_w_) norm_eo_permute(wb.data() + n, n, 2 * vlen_);
                ra.b = wb.data() + n;
            }
        }
        auto set_stats_row = [&](int64_t row) {
            ra.x = elem_ptr(a.x, d.x_dtype, row * d.ld_x);
            if (d.fused_residual) {
                ra.r = elem_ptr(a.residual, d.residual_dtype, row * d.ld_residual);
                ra.ro = elem_ptr(a.residual_out, d.residual_dtype, row * d.ld_residual_out);
            }
        };
        auto h_row = [&](int64_t row) {
            return d.fused_residual ? elem_ptr(a.residual_out, d.residual_dtype, row * d.ld_residual_out)
                                    : elem_ptr(a.x, d.x_dtype, row * d.ld_x);
        };
        auto lanes = [&](const float* v) { return lanes_sum(v, vlen_); };
        // mean and rstd of `row` into ra, from the stats pass just run on it (plus, for
        // layer_norm, the variance pass around the mean), in double.
        // hp: where the row's h is when not at h_row(row) (a scratch row of the fused pass).
        auto finish = [&](int64_t row, const void* hp = nullptr) {
            double var;
            if (d.kind == NormKind::layer_norm) {
                const double nn = static_cast<double>(n), s1 = lanes(part[0]), s2 = lanes(part[1]);
                const double mean = static_cast<double>(ra.mean) + s1 / nn;  // ra.mean held the shift c
                const double m2 = s2 - s1 * s1 / nn;
                ra.mean = static_cast<float>(mean);
                if (m2 > 0.5 * s2) {
                    var = m2 / nn;
                } else {  // c was far from the mean: the corrected two-pass moments, from the cache
                    ra.h = hp ? hp : h_row(row);
                    // Around the row's own first element rather than the estimate from the far
                    // shift: h - c rounded to fp32 can keep nothing of h (c = 1e17 beside a row of
                    // 1e-35: fuzz_norm on the Xeon), and no number of passes around such an
                    // estimate gets the digits back; h[0] is within the row's own range.
                    const DType ht = d.fused_residual ? d.residual_dtype : d.x_dtype;
                    const float h0 = ht == DType::bf16 ? bf16::to_float(*static_cast<const uint16_t*>(ra.h))
                                                       : *static_cast<const float*>(ra.h);
                    if (std::isfinite(h0)) ra.mean = h0;
                    if (!std::isfinite(ra.mean)) {
                        // The shift was not finite (c: the mean of a previous row holding an inf
                        // or a NaN): a first variance pass around 0 for the mean, so that one bad
                        // row does not turn every later row of the call into NaN.
                        ra.mean = 0.0f;
                        var_.fn(&ra);
                        ra.mean = static_cast<float>(lanes(part[0]) / nn);
                    }
                    // The corrected two-pass moments around the estimate, repeated while the
                    // pass's own sums still show it far from the row's mean relative to the
                    // spread (each pass divides its error by ~1 / (n u)). One pass around the
                    // estimate from a far shift (an earlier row's mean: 1e13 beside a row of
                    // small values, found by fuzz_norm) was not enough: the row's y then
                    // depended on the row before it.
                    double e1 = 0, t2 = 0;
                    for (int pass = 0; pass < kMaxVarPasses; ++pass) {
                        var_.fn(&ra);
                        const double t1 = lanes(part[0]);
                        t2 = lanes(part[1]);
                        e1 = t1 / nn;
                        ra.mean = static_cast<float>(static_cast<double>(ra.mean) + e1);
                        if (!(t2 - t1 * e1 <= 0.5 * t2) || t2 == 0.0) break;  // close enough (or NaN)
                    }
                    // A row holding an inf or a NaN: NaN (its y is NaN; max(0, NaN) would be 0).
                    var = std::isfinite(t2) && std::isfinite(e1) ? std::max(0.0, t2 / nn - e1 * e1)
                                                                 : std::numeric_limits<double>::quiet_NaN();
                }
            } else {
                ra.mean = 0.0f;
                var = lanes(part[1]) / static_cast<double>(n);
            }
            ra.rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(d.eps)));
        };
        set_stats_row(row_begin);
        ra.mean = 0.0f;  // layer_norm: the first row's shift
        stats_.fn(&ra);
        finish(row_begin);
        auto y_row = [&](int64_t row) { return elem_ptr(a.y, d.y_dtype, row * d.ld_y); };
        if (!many) {  // a few rows with weights that would need the copy: unfused
            for (int64_t row = row_begin; row < row_end; ++row) {
                ra.h = h_row(row);
                ra.y = y_row(row);
                apply_[nt ? 1 : 0].fn(&ra);
                if (row + 1 < row_end) {
                    set_stats_row(row + 1);
                    stats_.fn(&ra);
                    finish(row + 1);
                }
            }
        } else {
            // The fused pass runs the rows itself: it normalises row, row + 1, ... and sums the
            // row after each, finishing its mean and rstd in registers (no return between rows),
            // until the last row is summed, or a LayerNorm row needs the variance pass (then
            // finish() here, and on).
            const int xs = dtype_size(d.x_dtype), rs = dtype_size(d.residual_dtype);
            ra.ld_x = d.ld_x * xs;
            ra.ld_r = d.fused_residual ? d.ld_residual * rs : 0;
            ra.ld_ro = d.fused_residual ? d.ld_residual_out * rs : 0;
            ra.ld_y = d.ld_y * ys;
            ra.nn = static_cast<double>(n);
            ra.eps = static_cast<double>(d.eps);
            int64_t row = row_begin;
            const JitNorm& apply_last = needs_copy ? *apply_f32w_[nt ? 1 : 0] : apply_[nt ? 1 : 0];
            if (fused2_[0] && row_end - row >= 4) {
                // Two rows a trip (fused2): the rows split into two runs walked side by side, a trip
                // applying a row of each and summing the next row of each: rows of 24 KiB or more
                // in neighbours (run a: row, row + 2, ...; run b: row + 1, row + 3, ...), shorter
                // rows by halves (run a: [row, mid), run b: [mid, ...)); see kFused2AdjacentBytes.
                // Both runs are len rows long; the call's last row, if their count is odd, and run
                // b's last row go to the one-row pass below.
                const bool adj = n * xs >= kFused2AdjacentBytes;
                const int64_t len = (row_end - row) / 2, mid = adj ? row + 1 : row + len, st = adj ? 2 : 1;
                auto ra_row = [&](int64_t i) { return row + st * i; };
                auto rb_row = [&](int64_t i) { return mid + st * i; };
                int64_t i = 0;  // the rows ra_row(i) and rb_row(i) are summed, mean / rstd in ra
                auto sum_b = [&](int64_t ib) {  // rb_row(ib) into mean2 / rstd2 (shift: ra.mean)
                    const float m = ra.mean, s = ra.rstd;
                    set_stats_row(rb_row(ib));
                    stats_.fn(&ra);
                    finish(rb_row(ib));
                    ra.mean2 = ra.mean;
                    ra.rstd2 = ra.rstd;
                    ra.mean = m;
                    ra.rstd = s;
                };
                sum_b(0);  // ra_row(0) = row is summed (the call's first statistics)
                ra.ld_x = st * d.ld_x * xs;
                ra.ld_y = st * d.ld_y * ys;
                while (i + 1 < len) {
                    ra.h = h_row(ra_row(i));
                    ra.y = y_row(ra_row(i));
                    ra.h2 = h_row(rb_row(i));
                    ra.y2 = y_row(rb_row(i));
                    set_stats_row(rb_row(i + 1));
                    ra.x2 = ra.x;
                    set_stats_row(ra_row(i + 1));
                    ra.rows = len - 1 - i;
                    fused2_[nt ? 1 : 0]->fn(&ra);
                    i += ra.done;
                    if (ra.need_finish) {  // a LayerNorm row needs the variance pass: both again
                        ra.mean = 0.0f;
                        set_stats_row(ra_row(i));
                        stats_.fn(&ra);
                        finish(ra_row(i));
                        sum_b(i);
                    }
                }
                ra.ld_x = d.ld_x * xs;
                ra.ld_y = d.ld_y * ys;
                // ra_row(len - 1) alone, then rb_row(len - 1) and the call's last row, if any, below
                ra.h = h_row(ra_row(i));
                ra.y = y_row(ra_row(i));
                apply_last.fn(&ra);
                row = rb_row(i);
                ra.mean = ra.mean2;
                ra.rstd = ra.rstd2;
            }
            // A residual_out of its own, streamed like y: the scratch mode (see JitNorm), its
            // two scratch rows per thread; h_sc: where the h of `row` is then (after a pass).
            const int rsz = dtype_size(d.residual_dtype);
            const bool sc_mode = fused_sc_ && nt && a.residual_out != a.residual && rows_aligned(a.residual_out, d.ld_residual_out, rsz, align);
            const void* h_sc = nullptr;
            unsigned char* sc_buf[2] = {nullptr, nullptr};
            if (sc_mode) {
                thread_local std::vector<unsigned char> scb;
                const size_t row_bytes = (static_cast<size_t>(n * rsz) + 63) / 64 * 64;
                scb.resize(2 * row_bytes + 64);
                sc_buf[0] = scb.data() + (64 - reinterpret_cast<uintptr_t>(scb.data()) % 64) % 64;
                sc_buf[1] = sc_buf[0] + row_bytes;
                ra.sc_xor = reinterpret_cast<uintptr_t>(sc_buf[0]) ^ reinterpret_cast<uintptr_t>(sc_buf[1]);
            }
            while (row + 1 < row_end) {
                ra.h = h_sc ? h_sc : h_row(row);
                ra.y = y_row(row);
                set_stats_row(row + 1);
                ra.rows = row_end - 1 - row;
                if (sc_mode) {
                    ra.sc = ra.h == sc_buf[0] ? sc_buf[1] : sc_buf[0];
                    fused_sc_->fn(&ra);
                    h_sc = ra.sc;
                } else {
                    fused_[nt ? 1 : 0].fn(&ra);
                }
                row += ra.done;
                if (ra.need_finish) finish(row, h_sc);
            }
            ra.h = h_sc ? h_sc : h_row(row);  // the last row
            ra.y = y_row(row);
            apply_last.fn(&ra);  // with the widened weights where they were copied
        }
        if (nt) _mm_sfence();  // order the streaming stores before the caller's synchronisation
    }

private:
    int vlen_;
    bool eo_w_;  // weights / bias permuted for the even / odd split (norm_eo_permute)
    bool bf16w_eo_;  // ... unless they are bf16: split as loaded, also by the fused pass
    JitNorm stats_, var_;
    JitNorm apply_[2];  // [nt], weights in the descriptor's dtype (calls of one row)
    JitNorm fused_[2];  // [nt], f32 weights, or bf16 ones split as loaded (bf16w_eo_)
    std::unique_ptr<JitNorm> fused_sc_;  // nt, the scratch mode (a fused residual streamed; see JitNorm)
    std::unique_ptr<JitNorm> fused2_[2];  // [nt], two rows a trip (f32 x and weights, no residual)
    std::unique_ptr<JitNorm> apply_f32w_[2];  // [nt], f32 copies of bf16 weights (last row of a call; not with bf16w_eo_)
};

}  // namespace

std::shared_ptr<const NormKernel> create_jit_norm(const NormKernelDesc& kd, Isa isa) {
    return std::make_shared<JitNormKernel>(kd, isa);
}

}  // namespace xk::detail
