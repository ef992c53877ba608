// Internal interface of the GEMM family, shared by its implementations and the tests.
//
// A kernel is created from a GemmSpec (the validated descriptor with leading dimensions resolved)
// and runs the whole problem, threading itself with detail::parallel_for: blocking and the split
// over threads are the kernel's business. The spec does not hold alpha and beta — only whether
// alpha is 1 and whether beta is 0, 1 or anything else — so one kernel serves every value of the
// same class (sgemm with varying alpha/beta does not fill the cache); the values come with each
// call in GemmCall. Kernels may specialise on the classes.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dispatch/registry.hpp"
#include "xk/gemm.hpp"

namespace xk::detail {

enum class BetaKind : int { zero = 0, one = 1, other = 2 };

struct GemmSpec {
    int64_t M = 0, N = 0, K = 0;
    Trans trans_a = Trans::N, trans_b = Trans::N;
    int64_t lda = 0, ldb = 0, ldc = 0, ld_residual = 0;  // resolved (never "0 = packed")
    DType a_type = DType::f32, b_type = DType::f32, c_type = DType::f32;
    bool alpha_one = true;
    BetaKind beta = BetaKind::zero;
    GemmEpilogue epilogue;
    bool b_scale_per_channel = false;
    DType residual_type = DType::f32;
    // Internal (xk::QLinear's per-token dynamic quantization; not reachable through GemmDesc):
    // int8 -> f32 | bf16 | u8 | s8 with one A scale per row of C, GemmCall::a_row_scales[M]
    // instead of args.a_scale: x = (float(acc) * (alpha * b_scale[n])) * a_row_scales[m]. Only
    // the JIT int8 kernels and the reference support it (AMX's supports() is false). Internal specs
    // may also take c_type = bf16 with int8 inputs (rounded like the f32 kernels' bf16 C).
    bool a_scale_per_row = false;

    bool int8() const { return a_type == DType::u8 || a_type == DType::s8; }
    // Canonical and unique per kernel, e.g. "f32f32f32,NT,M64N64K64,lda64,ldb64,ldc64,a1,b0,ep:bias+relu".
    std::string key() const;
};

// A small number standing for a layout name, the same for equal names for the life of the process
// (interned: a table lookup under a lock, so call it when packing or planning, not per run). Never 0.
uint32_t gemm_layout_id(const std::string& layout);

// B in a kernel's own layout. The kernel that packs may derive from this to keep more (column
// sums for zero-point compensation, ...). `layout` names the layout (GemmKernel::packed_layout()),
// `layout_id` is gemm_layout_id(layout) (what GemmPlan::run compares).
struct GemmPacked {
    GemmPacked(std::string layout, size_t bytes);
    virtual ~GemmPacked();
    GemmPacked(const GemmPacked&) = delete;
    GemmPacked& operator=(const GemmPacked&) = delete;

    const std::string layout;
    const uint32_t layout_id;
    size_t bytes = 0;
    void* data = nullptr;  // 64-byte aligned, `bytes` long (never null, even for 0 bytes)
};

// One execution: the user's pointers (validated), the scalars, and the packed B if any.
struct GemmCall {
    GemmArgs args;
    float alpha = 1.0f, beta = 0.0f;
    const GemmPacked* packed_b = nullptr;  // non-null: use it instead of args.B
    const float* a_row_scales = nullptr;   // [M], read when the spec's a_scale_per_row (internal)
    // Internal (xk::woq, the AMX bf16 kernel only): with packed_b null, the k steps [kb0, kb1) of
    // column block nb of B are produced straight into the kernel's packed layout by
    // b_block_fn(b_block_ctx, nb, kb0, kb1, packed) (`packed` = where step kb0 goes: the whole
    // block in the buffer laid out as GemmKernel::pack_b does, each block once per call, claimed
    // inside the call's region; or, M one row block, a window of steps in a thread's own buffer
    // right before its tile products) instead of being packed from args.B (not read).
    void (*b_block_fn)(const void* ctx, int64_t nb, int64_t kb0, int64_t kb1, void* packed) = nullptr;
    const void* b_block_ctx = nullptr;
    // With b_block_fn and M one row block (<= 32 rows), the window's k steps (b_window > 0; else the
    // kernel's) and, with b_acc_fn, each window's tile products start from zero in a scratch block
    // `win` (32 x 32 f32, 128-byte rows: `rows` rows written) that b_acc_fn(ctx, nb, kb0, kb1, rows,
    // win, acc) folds into the column block's sums `acc` (same layout; kb0 == 0: acc holds nothing
    // yet), which the epilogue then reads: xk::woq's per-group scales on unscaled weights.
    void (*b_acc_fn)(const void* ctx, int64_t nb, int64_t kb0, int64_t kb1, int64_t rows, const float* win, float* acc) = nullptr;
    int64_t b_window = 0;
};

// A kernel's optional direct entry for plain runs (B unpacked): fn(A, B, C, &args, alpha_beta)
// with the GemmArgs' pointers and alpha_beta = {alpha, beta} does what run() would — for kernels
// whose whole call costs nanoseconds (the small JIT kernel: fn is its generated code, so a plan's
// run() is the argument checks and a tail call). fn == nullptr: none. Valid as long as the
// kernel lives.
using GemmSmallFn = void (*)(const void* A, const void* B, void* C, const GemmArgs* args, const float* alpha_beta);
struct GemmFastPath {
    GemmSmallFn fn = nullptr;
};

struct GemmKernel {
    virtual ~GemmKernel() = default;
    // The direct entry, if the kernel has one (valid as long as the kernel lives).
    virtual GemmFastPath fast_path() const { return {}; }
    // Computes the whole problem (threads itself with detail::parallel_for).
    virtual void run(const GemmCall& call) const = 0;
    // B (b_type, trans_b, ldb of the spec) in this kernel's layout.
    virtual std::shared_ptr<const GemmPacked> pack_b(const void* B) const = 0;
    // Packs are interchangeable between kernels that return equal strings here.
    virtual std::string packed_layout() const = 0;
    // What runs underneath when that is another library ("onednn:gemm:jit"); "" for xk's own.
    virtual std::string backend_info() const { return {}; }
};

const Registry<GemmSpec, GemmKernel>& gemm_registry();

// The best kernel allowed under the cap for `s` whose packed B has this layout, or null: lets a
// PackedB made by a plan of another M run (GemmPlan::run(args, packed)).
std::shared_ptr<const GemmKernel> gemm_kernel_for_layout(const GemmSpec& s, const std::string& layout);

// Validation shared by the entry points; `fn` names the entry point in messages.
GemmSpec gemm_check_desc(const char* fn, const GemmDesc& desc);
// Bytes each operand spans (0 where nothing is read / written), from a validated spec.
struct GemmExtents {
    int64_t a = 0, b = 0, c = 0, bias = 0, res = 0, b_scales = 0;
};
GemmExtents gemm_extents(const char* fn, const GemmSpec& s);
// Pointer checks of one call (null pointers, zero points, C overlapping an input).
void gemm_check_args(const char* fn, const GemmSpec& s, const GemmExtents& x, const GemmArgs& a, bool b_packed);
void gemm_check_args(const char* fn, const GemmSpec& s, const GemmArgs& a, bool b_packed);

// Strided batch (GemmDesc::batch ...), validated; kernels never see it: a GemmSpec is one item
// and the batch loop (gemm.cpp) runs the item's kernel once per item with offset pointers.
struct GemmBatch {
    int64_t count = 1;
    int64_t a = 0, b = 0, c = 0, res = 0;  // strides in bytes (c resolved: M*ldc for stride 0)
    bool b_items() const { return count != 1 && b != 0; }  // a PackedB holds one pack per item
};
// Checks the batch fields of desc against its validated spec s (negative values, C items that
// overlap, spans past int64 bytes); `fn` names the entry point.
GemmBatch gemm_check_batch(const char* fn, const GemmDesc& desc, const GemmSpec& s);
// Operand spans over every item of the batch (0 where nothing is read / written, count = 0 included).
GemmExtents gemm_extents(const char* fn, const GemmSpec& s, const GemmBatch& b);

// What a plan computes once so that run() only compares pointers.
// The kernels GemmPlan::run found for PackedBs of other plans' layouts (gemm_kernel_for_layout walks
// the registry: ~2 us a call), one entry per (layout, ISA cap) met, kept for the plan's life (a
// bounded set: layouts x caps). `last` points at the entry of the latest lookup: run() reads it
// with one atomic load and compares two integers (no lock, no string); a miss takes `mu` to find
// or add the entry (gemm_layout_memo_find) and republishes `last`.
struct GemmLayoutMemo {
    struct Entry {
        uint32_t layout_id = 0;
        int cap = -1;
        std::shared_ptr<const GemmKernel> kernel;  // never null
    };
    std::atomic<const Entry*> last{nullptr};
    std::mutex mu;
    std::vector<std::unique_ptr<const Entry>> entries;  // under mu; entries never move or die before the memo
};
struct GemmPlanState {
    GemmSpec spec;
    GemmExtents extents;            // spans over every item of the batch
    GemmFastPath fast;              // the kernel's direct entry for plain runs, if any (unbatched plans only)
    float alpha_beta[2] = {1, 0};   // the plan's scalars, for fast.fn
    GemmBatch batch;
    GemmFastPath item_fast;         // the kernel's direct entry, for the items of a batched plan
    std::shared_ptr<GemmLayoutMemo> other = std::make_shared<GemmLayoutMemo>();
    uint32_t layout_id = 0;         // gemm_layout_id of the kernel's packed layout
};
// The memo's entry for (pack's layout, cap): found among those kept, else gemm_kernel_for_layout's
// kernel added; null when no kernel under the cap reads that layout (not kept). Publishes `last`.
const GemmLayoutMemo::Entry* gemm_layout_memo_find(GemmLayoutMemo& memo, const GemmSpec& s, const GemmPacked& pack,
                                                   int cap);
// All of gemm_check_args' checks for a float (not int8) spec, branch-free: true when the
// arguments pass. (A plan runs this per call and the full check, for its message, only if not.)
bool gemm_args_ok(const GemmPlanState& st, const GemmArgs& a, bool b_packed);

// Reference (the specification): the plain loops, threaded over rows of C. Its packed form of B
// is op(B) copied into a contiguous K x N array of b_type.
void gemm_reference(const GemmSpec& s, const GemmCall& call);
std::shared_ptr<const GemmPacked> gemm_reference_pack_b(const GemmSpec& s, const void* B);
std::string gemm_reference_packed_layout(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_reference(const GemmSpec& s);
// The requantization of a u8 / s8 C (include/xk/gemm.hpp): nearbyint(x * inv) + zp clamped to
// [lo, hi], NaN -> lo; returns the integer value as a float.
float gemm_requantize(float x, float inv, float zp, float lo, float hi);

// fp32 JIT kernels; `isa` is the code shape (avx2: ymm, avx512: zmm). int8 has its own kernels
// (jit_gemm_int8.hpp: "jit:avx512_vnni:int8" VPDPBUSD zmm, "jit:avx2_vnni:int8" VPDPBUSD ymm,
// "jit:avx2:int8" s16 VPMADDWD; B in a VNNI layout with its column sums, zero points and the s8
// shift through row / column sums; every epilogue including the requantized u8 / s8 C); the
// kernels below do not take int8 (their supports() are false for it).
//   blocked (jit_gemm.cpp): packed A and B, cache blocking, threads over the (M, N) tile grid;
//   f32, and bf16 x bf16 -> f32 | bf16 (A and B widened to f32 as they are packed, the fp32
//   microkernel, a bf16 C written by the last K block's store; registry "jit:<isa>:bf16")
//   Selection (after the AVX-512 bf16 decode kernel, which takes M <= 16, below) sends bf16
//   shapes where the reference measured faster (gemm_bf16_ref_preferred:
//   M = 1 with N <= 16, M = 2 with N <= 8, or M N K <= 64) to the reference; "jit:<isa>:bf16:any" (not
//   selectable) runs those too when given a PackedB of the blocked kernel's layout, and
//   "jit:<isa>:bf16:plain" (not selectable; create_gemm_jit_plain) runs any bf16 shape from a
//   PackedB in the reference's plain layout (packed by such a plan).
bool gemm_jit_supports(const GemmSpec& s);
bool gemm_bf16_ref_preferred(const GemmSpec& s);
bool gemm_jit_bf16_supports(const GemmSpec& s);      // bf16, not ref-preferred
bool gemm_jit_bf16_any_supports(const GemmSpec& s);  // bf16, M, N, K > 0
//   At avx512_bf16, "jit:avx512_bf16:bf16" (and :any, :plain) is the same kernel on bf16 k-pairs
//   with the VDPBF16PS microkernel (GemmBLayout::pairs, layout "jit:avx512_bf16:bf16x2:..."),
//   selected where gemm_bf16_dp_fast(): the CPU issues VDPBF16PS fast enough to beat widening
//   (measured once; XK_GEMM_BF16_DP=0/1 forces). ":any" reads a pairs PackedB whatever the probe.
bool gemm_bf16_dp_fast();
//   bf16 decode (gemv_bf16.cpp, AVX-512): M <= kGemvBf16MaxM, the bf16 weights streamed once and
//   widened in registers; reads B plain (either transpose) or a PackedB of the blocked kernel's
//   layout at the same ISA (pack_b packs that layout: one PackedB serves every M). Registry
//   "avx512:bf16:gemv" (widened layout) and "avx512_bf16:bf16:gemv" (the pairs layout, where
//   gemm_bf16_dp_fast()).
constexpr int64_t kGemvBf16MaxM = 16;
bool gemv_bf16_supports(const GemmSpec& s);
bool gemv_bf16_dp_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemv_bf16(const GemmSpec& s, Isa isa);
// Shared by both: op(A) widened to f32 once per call (rows of kpad >= K floats, a multiple of
// `align`, zero past K; the calling thread's gemm_thread_buffer slot 2), and the reference's
// epilogue and store of acc[m * ld + j] into columns [c0, c1) of C.
float* gemv_bf16_widen_a(const GemmSpec& s, const void* A, int64_t align, int64_t& kpad);
void gemv_bf16_epilogue(const GemmSpec& s, const GemmCall& call, const float* acc, int64_t ld, int64_t c0, int64_t c1);
// The AVX2 + FMA form (gemv_bf16_avx2.cpp), same M range, the AVX2 blocked kernel's PackedB.
bool gemv_bf16_avx2_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemv_bf16_avx2(const GemmSpec& s);
bool gemm_jit_bf16_dp_supports(const GemmSpec& s);      // gemm_jit_bf16_supports and dp fast
bool gemm_jit_bf16_dp_any_supports(const GemmSpec& s);  // gemm_jit_bf16_any_supports and dp fast
std::shared_ptr<const GemmKernel> create_gemm_jit(const GemmSpec& s, Isa isa);
std::shared_ptr<const GemmKernel> create_gemm_jit_plain(const GemmSpec& s, Isa isa);
//   small (jit_gemm_small.cpp): M, N, K <= 64, generated for the exact shape, no packing
bool gemm_small_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_small(const GemmSpec& s, Isa isa);
//   its AVX-512 tiling with B read in place, an experiment override read by create_gemm_small:
//   XK_GEMM_SMALL_ZMM = 0 (default) .. kGemmSmallZmmVariants - 1 (jit_gemm_small.cpp says what each is)
constexpr int kGemmSmallZmmVariants = 6;
//   direct (jit_gemm_small.cpp): the same code for any M where B is small (K x N within 40% of
//   L2, one K block): tall-skinny and medium shapes, threaded over M
bool gemm_direct_supports(const GemmSpec& s, Isa isa);
std::shared_ptr<const GemmKernel> create_gemm_direct(const GemmSpec& s, Isa isa);

//   AMX (jit_gemm_amx.cpp, Isa::amx): bf16 x bf16 -> f32 | bf16 with TDPBF16PS on 32 x 32 blocks
//   of four f32 tiles, B packed into the tile layout ("amx:bf16:K<K>:N<N>"), A read in place by
//   the tile loads (trans_a = N, full 32-row blocks) or packed; selected from M = 32 up, and for
//   any M given a PackedB in its layout ("amx:bf16:any").
bool gemm_amx_bf16_supports(const GemmSpec& s);
bool gemm_amx_bf16_any_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_amx_bf16(const GemmSpec& s);
//   "amx:bf16:decode": M 1..31, the tiles for a B packed in their layout, else the avx512_bf16 pick.
bool gemm_amx_bf16_decode_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_amx_bf16_decode(const GemmSpec& s);
int64_t amx_bf16_decode_plain_m();  // a plain B with M >= this runs the tiles in amx:bf16:decode
//   and int8 (TDPBUSD for u8 A, TDPBSSD for s8 A: no shift), s32 accumulators, B in the same tile
//   arrangement of k quads with its column sums after the tiles ("amx:int8:K<K>:N<N>"), zero
//   points through row / column sums, the s32 / dequantizing / requantizing stores.
bool gemm_amx_int8_supports(const GemmSpec& s);
bool gemm_amx_int8_any_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_amx_int8(const GemmSpec& s);
//   "amx:int8:decode": M 1..31, the tiles for a B packed in their layout, else the avx512_vnni pick.
bool gemm_amx_int8_decode_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_amx_int8_decode(const GemmSpec& s);

//   oneDNN (onednn_gemm.cpp): the matmul primitive with the epilogue as post-ops, B packed in the
//   reference layout. Its registry entry ("onednn") is not selectable: only the autotuner (below)
//   and gemm_kernel_for_layout (a PackedB in the plain layout) route there.
bool onednn_gemm_supports(const GemmSpec& s);
std::shared_ptr<const GemmKernel> create_gemm_onednn(const GemmSpec& s);

// ---- routing and autotuning (gemm_tune.cpp) ---------------------------------------------------
// Specs with at least this many flops (2 M N K) are timed when autotuning is on: 2^25, a 256^3
// product, about 0.15-0.3 ms on this class of machine — long enough for a steady timing, and the
// tuning (two warm-ups and up to three timed runs of each candidate on scratch buffers) then costs
// a few milliseconds once per spec per process.
constexpr double kGemmTuneMinFlops = 33554432.0;
// Above these a plan never tunes (the registry's pick): 2^38 flops (an 8192^3 product would run
// for seconds per timing) or 1 GiB of scratch operands (a plan must not allocate in proportion to
// the problem: M = 2^40 would have asked for terabytes).
constexpr double kGemmTuneMaxFlops = 274877906944.0;
constexpr double kGemmTuneMaxBytes = 1073741824.0;

// The implementation a plan (may_tune) or a one-shot call (never tunes, uses a cached decision)
// runs for s: the registry's pick, unless autotuning is on and the decision for s (measured now
// or earlier in the process) is oneDNN.
Registry<GemmSpec, GemmKernel>::Selected gemm_select(const GemmSpec& s, bool may_tune);
// The same under an ISA cap below the process's (clamped to it): what a plan (may_tune) or a
// one-shot call would run with max_isa() == cap, the decision cached under that cap's key. The
// AMX decode kernel takes its plain-B kernel this way (cap avx512_bf16, never tuning: it is
// created for one-shot calls too).
Registry<GemmSpec, GemmKernel>::Selected gemm_select(const GemmSpec& s, bool may_tune, Isa cap);
// Whether s is worth timing: f32, both candidates apply, 2 M N K >= kGemmTuneMinFlops.
bool gemm_tune_eligible(const GemmSpec& s);

// Test hooks: counters of the decision cache, clearing it, and recording a decision as if
// measured (impl: a registry entry name).
struct GemmTuneStats {
    uint64_t tunings = 0;  // decisions measured
    uint64_t hits = 0;     // selections answered from the cache
    size_t size = 0;       // decisions held
};
GemmTuneStats gemm_tune_stats();
void gemm_tune_clear();
void gemm_tune_record(const GemmSpec& s, const char* impl);

}  // namespace xk::detail
