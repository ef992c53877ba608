// Blocked fp32 GEMM (BLIS-style) around the generated microkernel (jit_gemm_ukernel.cpp).
//
// Blocking (derived from xk::cpu_info()'s cache sizes):
//   kc  K block: AVX2, a kc x NR packed B panel fills 3/4 of L1 (32 KiB L1: 384 — fewer passes
//       over C than half of L1 gave, at the same microkernel speed); AVX-512, 512 whatever the
//       L1: a K step of the 14 x 32 tile loads 2 B vectors for 28 FMAs, which L2 feeds, and
//       fewer K blocks mean fewer passes over C and fewer A packings (Xeon, 48 KiB L1: the L1
//       rule's 256 ran at 63-79% of the FMA peak, 512 at 71-88%, 1 and 2 threads). K is split
//       into equal blocks of at most that (rounded to 8), so e.g. K = 768 runs as 2 x 384.
//   mc  A block: mc x kc packed A fills half of L2 (512 KiB: 168 rows = 28 panels of 6),
//       balanced over the part of M a thread owns.
//   nc  B block: kc x nc packed B fills half of this core's share of L3.
// Loops per thread: jc (nc) > pc (kc: pack B, unless prepacked) > ic (mc: pack A) > jr (NR
// columns: one microkernel call runs every MR-row panel of the A block against this B panel).
// K blocks: the first applies beta, later ones accumulate into C, the last one runs the rest of
// the epilogue (bias, activation, residual) — a single block does everything in one pass.
// Threads: the (M, N) grid of tiles is cut into pm x pn rectangles, one per thread, choosing the
// split with the least (compute + packing) per thread; fewer threads when the work is small.
// Then three parts per thread, handed out dynamically (a thread on a busy core takes fewer),
// where the extra cuts repack nothing (see run()).
// An operand that several parts read (all of A when the parts cut N, all of B when they cut M;
// up to 16 MiB or half the L3 share) is packed once, cooperatively, at the start of the parallel
// region: each thread packs its share of every K block's panels into one shared buffer (A in
// GemmBLayout's arrangement, B in it exactly), then all parts read from it, packing nothing of
// it (before, both threads packed all of A at 256^3, ~8% of their time). Otherwise a thread
// keeps the A rows (or B columns) it packed for one part, all of K, and its next part of the
// same rows (columns) reuses them, so the extra cuts add no packing (they did: on the zmm path,
// 512^3 with 2 threads repacked all of A in each of 6 parts).
//
// bf16 (bf16 x bf16 -> f32 | bf16): the same kernel. (At avx512_bf16, where gemm_bf16_dp_fast(),
// the pairs variant instead: A and B packed as 32-bit k-pairs of bf16 (gemm_pack_{a,b}_pairs; an
// odd K's last pair padded with 0, so every K block but the last has an even kc), kc counting
// pairs in the microkernel, VDPBF16PS for the FMA; offsets in 4-byte slots: ku(), boff().)
// Otherwise A and B are widened to f32 as they are
// packed (a 16-bit shift, exact: the panels are f32) and the fp32 microkernel runs on them, so
// the products are exact and the sums fp32 as the reference's. A PackedB of bf16 keeps bf16
// panels (half the bytes of f32 weights; layout "jit:<isa>:bf16:..."), widened per K block and
// column block into the thread's B panels as unpacked B would be packed. A bf16 C cannot carry
// the sums between K blocks: with one K block the fused store reads beta * C as bf16 and writes
// bf16 (rounded to nearest even once); with several, the K blocks accumulate into an f32 scratch
// block per thread (rows x nc columns, at most kCsFloats; longer row ranges go in chunks of
// rows) and the last K block's store adds it (GemmEpi::partial), then beta * C (bf16), the
// epilogue, and writes bf16. Results do not depend on the blocking or the thread count.
//
// Tuning overrides for experiments (not an API; read when a plan is created): XK_GEMM_KC (the
// largest K block; also changes the packed-B layout), XK_GEMM_MC, XK_GEMM_NC (rounded up to MR /
// NR), XK_GEMM_EXTRA (parts per thread, default 3), XK_GEMM_COOP=0 (no cooperative packing),
// XK_GEMM_CS (floats of the f32 accumulator block of a bf16 C, default kCsFloats), XK_GEMM_F32_SPLIT
// (the rule of the base thread grid: gemm_split_policy, jit_gemm_common.hpp).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/parallel.hpp"
#include "kernels/gemm/jit_gemm_common.hpp"
#include "dispatch/verbose.hpp"
#include "kernels/gemm/jit_gemm_ukernel.hpp"
#include "xk/runtime.hpp"

namespace xk::detail {
namespace {

// Below this many multiply-adds per thread, adding a thread costs more than it gains.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 21;
// bf16 C over several K blocks: the most floats of a thread's f32 accumulator block (8 MiB).
constexpr int64_t kCsFloats = int64_t(2) << 20;

// Tuning override for experiments (XK_GEMM_KC / _MC / _NC / _EXTRA): 0 = not set.
int64_t env_tune(const char* name) {
    const char* e = std::getenv(name);
    return e ? std::atoll(e) : 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

struct Caches {
    int64_t l1, l2, l3;  // bytes available to one core
};

Caches caches() {
    const CpuInfo& ci = cpu_info();
    Caches c;
    c.l1 = ci.l1d_bytes > 0 ? ci.l1d_bytes : 32 * 1024;
    c.l2 = ci.l2_bytes > 0 ? ci.l2_bytes / std::max(1, ci.l2_shared_by) : 256 * 1024;
    c.l3 = ci.l3_bytes > 0 ? ci.l3_bytes / std::max(1, ci.l3_shared_by) : 1024 * 1024;
    c.l2 = std::max<int64_t>(c.l2, 64 * 1024);
    c.l3 = std::max<int64_t>(c.l3, c.l2);
    return c;
}

// The most floats a thread keeps packed between its parts (or packs cooperatively for all).
int64_t keep_floats_all() { return std::max<int64_t>(caches().l3 / 2, int64_t(16) << 20) / 4; }

int64_t kc_for(const GemmGeometry& g, int64_t K) {
    int64_t kc_max = g.vlen > 8 ? 512 : std::clamp<int64_t>(caches().l1 * 3 / 4 / (g.nr * 4) / 8 * 8, 64, 512);
    if (env_tune("XK_GEMM_KC") > 0) kc_max = env_tune("XK_GEMM_KC");
    const int64_t nkb = ceil_div(K, kc_max);
    return std::min(kc_max, round_up(ceil_div(K, nkb), 8));
}

enum Phase { kOnly = 0, kFirst = 1, kMiddle = 2, kLast = 3 };

class JitGemm final : public GemmKernel {
public:
    // plain: the kernel's PackedB is the reference's plain layout (op(B) as a K x N array of
    // b_type), read as an unpacked B — for a PackedB made by a plan that runs the reference.
    JitGemm(const GemmSpec& s, Isa isa, bool plain = false)
        : s_(s),
          plain_(plain),
          g_(gemm_geometry(isa)),
          layout_(gemm_b_layout(isa, s.K, s.N, s.b_type == DType::bf16 ? DType::bf16 : DType::f32)) {
        a16_ = s.a_type == DType::bf16;
        b16_ = s.b_type == DType::bf16;
        pair_ = layout_.pairs;
        const int64_t eb = pair_ ? 2 : 4;  // bytes of one packed element
        const Caches c = caches();
        kc_ = layout_.kc;
        nkb_ = ceil_div(s.K, kc_);
        mc_ = std::clamp<int64_t>(c.l2 / 2 / (kc_ * eb) / g_.mr * g_.mr, g_.mr, 1024 / g_.mr * g_.mr);  // (a multiple of MR: A blocks are packed in whole panels)
        // A short K makes each C tile's stores the bulk of the work: keep the C block a column
        // strip sweeps (mc rows x N) within L2, so that its lines and pages stay cached / mapped
        // (tall strips over a wide C walk a new page per row). Measured on 2048 x 2048 x 16.
        if (s.K <= 64)
            mc_ = std::clamp<int64_t>(c.l2 / (std::min<int64_t>(s.N, 8192) * 4) / g_.mr * g_.mr, 8 * g_.mr, mc_);
        nc_ = std::clamp<int64_t>(c.l3 / 2 / (kc_ * eb) / g_.nr * g_.nr, g_.nr, 8192);
        if (env_tune("XK_GEMM_MC") > 0) mc_ = round_up(env_tune("XK_GEMM_MC"), g_.mr);
        if (env_tune("XK_GEMM_NC") > 0) nc_ = round_up(env_tune("XK_GEMM_NC"), g_.nr);
        // bf16 C over several K blocks: the f32 accumulator of an mc x nc block within kCsFloats.
        cs_ = s.c_type == DType::bf16 && nkb_ > 1;
        cs_floats_ = env_tune("XK_GEMM_CS") > 0 ? env_tune("XK_GEMM_CS") : kCsFloats;
        if (cs_) nc_ = std::clamp<int64_t>(std::min(nc_, cs_floats_ / mc_ / g_.nr * g_.nr), g_.nr, 8192);
        extra_ = env_tune("XK_GEMM_EXTRA") > 0 ? static_cast<int>(env_tune("XK_GEMM_EXTRA")) : 3;
        coop_ = !(std::getenv("XK_GEMM_COOP") && env_tune("XK_GEMM_COOP") == 0);
        split_ = gemm_split_policy();

        const GemmEpi full = gemm_epi(s);
        GemmEpi epi[4];
        epi[kOnly] = full;
        epi[kFirst] = GemmEpi{full.alpha_one, full.beta, false, Activation::none, DType::s32};
        epi[kMiddle] = GemmEpi{full.alpha_one, BetaKind::one, false, Activation::none, DType::s32};
        epi[kLast] = GemmEpi{full.alpha_one, BetaKind::one, full.bias, full.act, full.residual};
        if (cs_) {
            // K blocks into the f32 scratch (beta * C is added by the last one, from the bf16 C);
            // the last adds the scratch as the partial sum and stores bf16.
            epi[kFirst].beta = BetaKind::zero;
            epi[kLast] = full;
            epi[kLast].partial = true;
        }
        const int m_tail = static_cast<int>(s.M % g_.mr), n_tail = static_cast<int>(s.N % g_.nr);
        for (int ph = 0; ph < 4; ++ph) {
            const bool used = nkb_ == 1 ? ph == kOnly : (ph != kOnly && (ph != kMiddle || nkb_ > 2));
            if (!used) continue;
            for (int mt = 0; mt < 2; ++mt) {
                const int mr = mt ? m_tail : g_.mr;
                if (mr == 0 || (mt == 0 && s.M < g_.mr)) continue;
                for (int nt = 0; nt < 2; ++nt) {
                    const int ncols = nt ? n_tail : g_.nr;
                    if (ncols == 0 || (nt == 0 && s.N < g_.nr)) continue;
                    GemmUkSpec us;
                    us.isa = g_.isa, us.mr = mr, us.ncols = ncols, us.epi = epi[ph];
                    us.dp = pair_;
                    uk_[ph][mt][nt] = gemm_ukernel(us);
                }
            }
        }
    }

    void run(const GemmCall& call_in) const override {
        // A plain-layout PackedB is an unpacked K x N B.
        GemmCall plain_call;
        if (plain_ && call_in.packed_b) {
            plain_call = call_in;
            plain_call.args.B = call_in.packed_b->data;
            plain_call.packed_b = nullptr;
        }
        const bool plain_b = plain_ && call_in.packed_b;
        const GemmCall& call = plain_b ? plain_call : call_in;
        alignas(64) GemmScalars sc;
        sc.set(call.alpha, call.beta);
        const int64_t M = s_.M, N = s_.N, K = s_.K, MR = g_.mr, NR = g_.nr;
        const int64_t mt = ceil_div(M, MR), nt = ceil_div(N, NR);
        // (A bf16 PackedB is widened into each thread's B panels, as an unpacked B is packed.)
        const bool prepacked = call.packed_b != nullptr && (!b16_ || pair_);

        // Threads and the pm x pn split of the tile grid (gemm_split, below).
        const GemmSplit split = gemm_split(M, N, K, MR, NR, get_num_threads(), prepacked, extra_, split_);
        const int nthr = split.nthr, pm = split.pm, pn = split.pn;
        const int64_t keep_floats = keep_floats_all();
        const int parts = pm * pn;
        // With several threads, an operand that several parts read (all of A when the parts cut
        // N, all of B when they cut M) is packed once, cooperatively, before any part runs: each
        // thread packs its share of the panels into one buffer, then every part reads from it
        // (kept operands still cost each thread a packing of every row range it ran, e.g. both
        // threads packed all of A at 256^3, ~8% of their time). Same panels, same K blocks, same
        // microkernel calls: results are bit-identical to the single-thread path.
        const bool coop = coop_ && nthr > 1 && parts > 1;
        const bool coop_a = coop && pn > 1 && mt * MR * K <= keep_floats;
        const bool coop_b = coop && pm > 1 && !prepacked && nt * NR * K <= keep_floats;
        const bool keep_a =
            !coop_a && parts > nthr && pn > 1 && round_up(ceil_div(mt, pm) * MR, MR) * K <= keep_floats;
        const bool keep_b = !coop_b && parts > nthr && pm > 1 && !prepacked &&
                            round_up(ceil_div(nt, pn) * NR, NR) * K <= keep_floats;
        // Shared packed operands (the calling thread's slots 2 and 3; workers use 0 and 1): A as
        // K blocks of kc (block pc at pc * mt * MR) of mt panels, like GemmBLayout; B in layout_.
        Shared sh;
        sh.plain_b = plain_b;
        if (coop_a) sh.a = gemm_thread_buffer(2, static_cast<size_t>(mt * MR * ku(K) + kPackSlack));
        if (coop_b) sh.b = gemm_thread_buffer(3, static_cast<size_t>(boff(K, 0, 0)));
        auto part = [&](int64_t t, PartCache& pcache) {
            const int64_t i = t / pn, j = t % pn;
            const int64_t m0 = std::min(M, i * mt / pm * MR), m1 = std::min(M, (i + 1) * mt / pm * MR);
            const int64_t n0 = std::min(N, j * nt / pn * NR), n1 = std::min(N, (j + 1) * nt / pn * NR);
            if (m0 < m1 && n0 < n1) run_part(call, sc, m0, m1, n0, n1, pcache, sh);
        };
        if (nthr <= 1 || parts == 1) {
            PartCache pcache;
            pcache.keep_a = keep_a, pcache.keep_b = keep_b;
            for (int t = 0; t < parts; ++t) part(t, pcache);
        } else {
            // One parallel region: the packing shares are claimed like the parts, and a thread
            // that finds none left waits until the claimed ones are done. It only waits on
            // shares another running thread has claimed, so this never deadlocks, however many
            // threads the region really gets (the parts then read the shared operands: the
            // release / acquire on `packed` orders the packing before them).
            const int64_t shares = sh.a || sh.b ? nthr : 0;
            // (A share that throws still counts as done, so that no thread waits forever; the
            // others then skip the parts and parallel_for rethrows the exception.)
            std::atomic<int64_t> next{0}, claim{0}, packed{0};
            std::atomic<bool> failed{false};
            parallel_for(nthr, 1, [&](int64_t, int64_t) {
                if (shares) {
                    for (int64_t t = claim.fetch_add(1); t < shares; t = claim.fetch_add(1)) {
                        try {
                            pack_shared(call, sh, t, shares);
                        } catch (...) {
                            failed.store(true);
                            packed.fetch_add(1, std::memory_order_release);
                            throw;
                        }
                        packed.fetch_add(1, std::memory_order_release);
                    }
                    for (int spin = 0; packed.load(std::memory_order_acquire) < shares; ++spin)
                        if (spin >= 64) std::this_thread::yield();
                    if (failed.load()) return;
                }
                PartCache pcache;
                pcache.keep_a = keep_a, pcache.keep_b = keep_b;
                for (int64_t t = next.fetch_add(1); t < parts; t = next.fetch_add(1)) part(t, pcache);
            });
        }
    }

    std::shared_ptr<const GemmPacked> pack_b(const void* B) const override {
        return plain_ ? gemm_reference_pack_b(s_, B) : gemm_jit_pack_b(s_, layout_, B);
    }
    std::string packed_layout() const override { return plain_ ? gemm_reference_packed_layout(s_) : layout_.name; }

private:
    // Operands packed once for every part (nullptr: each part packs its own).
    struct Shared {
        float* a = nullptr;
        float* b = nullptr;
        bool plain_b = false;  // args.B is a plain-layout PackedB (K x N, trans N, ldb N)
    };

    // Share t of nthr of the cooperative packing: panels [t * n / nthr, (t + 1) * n / nthr) of
    // every K block of the shared A (n = its panels) and B. The A packing's vector stores run up
    // to kPackSlack floats past its last panel, into the next share's: that panel is packed into
    // this thread's own buffer and copied exactly. (B packing stays within its panels.)
    void pack_shared(const GemmCall& call, const Shared& sh, int64_t t, int64_t nthr) const {
        const GemmSpec& s = s_;
        const int64_t M = s.M, N = s.N, K = s.K, MR = g_.mr, NR = g_.nr;
        const int64_t mt = ceil_div(M, MR), nt = ceil_div(N, NR);
        const int64_t pa0 = t * mt / nthr, pa1 = (t + 1) * mt / nthr;
        const int64_t pb0 = t * nt / nthr, pb1 = (t + 1) * nt / nthr;
        float* last = sh.a && pa0 < pa1 ? gemm_thread_buffer(0, static_cast<size_t>(ku(kc_) * MR + kPackSlack)) : nullptr;
        for (int64_t kb = 0; kb < nkb_; ++kb) {
            const int64_t pc = kb * kc_, kcb = std::min(kc_, K - pc);
            if (last) {
                float* dst = sh.a + ku(pc) * mt * MR;
                if (pa1 - 1 > pa0) pack_a_block(call, pa0 * MR, pc, (pa1 - 1 - pa0) * MR, kcb, dst + pa0 * ku(kcb) * MR);
                const int64_t r = (pa1 - 1) * MR;
                pack_a_block(call, r, pc, std::min(MR, M - r), kcb, last);
                std::memcpy(dst + (pa1 - 1) * ku(kcb) * MR, last, static_cast<size_t>(ku(kcb) * MR) * sizeof(float));
            }
            if (sh.b && pb0 < pb1) {
                const int64_t c0 = pb0 * NR, c1 = std::min(N, pb1 * NR);
                pack_b_block(call, sh.plain_b, c0, pc, kcb, c1 - c0, sh.b + boff(pc, pb0, kcb));
            }
        }
    }

    // op(A) rows [r, r + rows) x k [pc, pc + kcb) into panels at dst (gemm_pack_a; bf16 widened).
    void pack_a_block(const GemmCall& call, int64_t r, int64_t pc, int64_t rows, int64_t kcb, float* dst) const {
        const bool at = s_.trans_a == Trans::T;
        const int64_t off = at ? pc * s_.lda + r : r * s_.lda + pc;
        if (pair_)
            gemm_pack_a_pairs(static_cast<const uint16_t*>(call.args.A) + off, s_.lda, at, rows, kcb, g_.mr,
                              reinterpret_cast<uint32_t*>(dst));
        else if (a16_)
            gemm_pack_a(static_cast<const uint16_t*>(call.args.A) + off, s_.lda, at, rows, kcb, g_.mr, dst);
        else
            gemm_pack_a(static_cast<const float*>(call.args.A) + off, s_.lda, at, rows, kcb, g_.mr, dst);
    }

    // op(B) k [pc, pc + kcb) x columns [c0, c0 + ncols) into f32 panels at dst: packed from the
    // user's B (bf16 widened), or widened from a bf16 PackedB's panels (c0 a multiple of NR).
    void pack_b_block(const GemmCall& call, bool plain_b, int64_t c0, int64_t pc, int64_t kcb, int64_t ncols,
                      float* dst) const {
        const int64_t NR = g_.nr;
        if (call.packed_b) {  // (only a bf16 one reaches here)
            const auto* src = static_cast<const uint16_t*>(call.packed_b->data) + layout_.offset(pc, c0 / NR, kcb);
            gemm_widen_bf16(src, kcb * round_up(ncols, NR), dst);
            return;
        }
        const bool bt = !plain_b && s_.trans_b == Trans::T;
        const int64_t ldb = plain_b ? s_.N : s_.ldb;
        const int64_t off = bt ? c0 * ldb + pc : pc * ldb + c0;
        if (pair_)
            gemm_pack_b_pairs(static_cast<const uint16_t*>(call.args.B) + off, ldb, bt, kcb, ncols, static_cast<int>(NR),
                              reinterpret_cast<uint32_t*>(dst));
        else if (b16_)
            gemm_pack_b(static_cast<const uint16_t*>(call.args.B) + off, ldb, bt, kcb, ncols, static_cast<int>(NR), dst);
        else
            gemm_pack_b(static_cast<const float*>(call.args.B) + off, ldb, bt, kcb, ncols, static_cast<int>(NR), dst);
    }

    // What one thread keeps packed between its parts: op(A) rows [a_m0, a_m1) x all of K (K
    // blocks of kc, block pc at pc * round_up(rows, MR), its panels as gemm_pack_a writes them),
    // op(B) columns [b_n0, b_n1) x all of K in the GemmBLayout arrangement over those columns.
    struct PartCache {
        bool keep_a = false, keep_b = false;
        int64_t a_m0 = -1, a_m1 = -1, b_n0 = -1, b_n1 = -1;
    };

    void run_part(const GemmCall& call, const GemmScalars& sc, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                  PartCache& pcache, const Shared& sh) const {
        const GemmSpec& s = s_;
        const int64_t N = s.N, K = s.K, MR = g_.mr, NR = g_.nr;
        auto* C = static_cast<unsigned char*>(call.args.C);
        const int64_t c_es = dtype_size(s.c_type);
        const float* packed = call.packed_b && (!b16_ || pair_) ? static_cast<const float*>(call.packed_b->data) : sh.b;
        const int64_t mpad_all = ceil_div(s.M, MR) * MR;  // (shared A: rows per K block)
        const auto* res = static_cast<const unsigned char*>(call.args.residual);
        const int64_t res_es = dtype_size(s.residual_type);
        const int64_t ldr_bytes = s.ld_residual * res_es;

        // Balanced A blocks over this part's rows.
        const int64_t mparts = ceil_div(m1 - m0, mc_);
        const int64_t mc = std::min(mc_, round_up(ceil_div(m1 - m0, mparts), MR));
        // Kept operands (PartCache): packed once per range, reused by the thread's later parts.
        const int64_t mpad = round_up(m1 - m0, MR), npad = round_up(n1 - n0, NR);
        const bool keep_a = pcache.keep_a, keep_b = pcache.keep_b && !packed;
        const bool have_a = keep_a && pcache.a_m0 == m0 && pcache.a_m1 == m1;
        const bool have_b = keep_b && pcache.b_n0 == n0 && pcache.b_n1 == n1;
        pcache.a_m0 = pcache.a_m1 = pcache.b_n0 = pcache.b_n1 = -1;  // (valid again once this part is done)
        float* bufA = sh.a ? nullptr
                           : gemm_thread_buffer(0, static_cast<size_t>((keep_a ? mpad * ku(K) : mc * ku(kc_)) + kPackSlack));
        float* bufB = packed   ? nullptr
                      : keep_b ? gemm_thread_buffer(1, static_cast<size_t>(npad * ku(K)))
                               : gemm_thread_buffer(1, static_cast<size_t>(round_up(std::min(nc_, n1 - n0), NR) * ku(kc_)));
        // bf16 C over several K blocks: the f32 accumulator of `chunk` rows x the column block
        // (row stride lds floats, off multiples of 4 KiB), rows in chunks of a multiple of mc.
        int64_t chunk = m1 - m0, lds = 0;
        float* Cs = nullptr;
        if (cs_) {
            lds = round_up(std::min(nc_, n1 - n0), 16);
            if (lds % 1024 == 0) lds += 16;
            if (chunk * lds > cs_floats_) chunk = std::max<int64_t>(1, cs_floats_ / lds / mc) * mc;
            Cs = gemm_thread_buffer(4, static_cast<size_t>(std::min(chunk, m1 - m0) * lds));
        }

        GemmUkArgs ua;
        ua.ldr = ldr_bytes;
        ua.scal = &sc;
        for (int64_t r0 = m0; r0 < m1; r0 += chunk) {
            const int64_t r1 = std::min(m1, r0 + chunk);
            for (int64_t jc = n0; jc < n1; jc += nc_) {
                const int64_t ncb = std::min(nc_, n1 - jc);
                for (int64_t kb = 0; kb < nkb_; ++kb) {
                    const int64_t pc = kb * kc_, kcb = std::min(kc_, K - pc);
                    const int ph = nkb_ == 1 ? kOnly : kb == 0 ? kFirst : kb == nkb_ - 1 ? kLast : kMiddle;
                    const bool to_cs = cs_ && ph != kLast;  // this K block stores into the scratch
                    const float* Bp;
                    if (packed) {
                        Bp = packed + boff(pc, jc / NR, kcb);
                    } else {
                        float* dst = keep_b ? bufB + ku(pc) * npad + (jc - n0) * ku(kcb) : bufB;
                        // (kept: the first row chunk packs B, the later ones reuse it)
                        if (!have_b && !(keep_b && r0 > m0)) pack_b_block(call, sh.plain_b, jc, pc, kcb, ncb, dst);
                        Bp = dst;
                    }
                    ua.kc = ku(kcb);
                    ua.ldc = to_cs ? lds * 4 : s.ldc * c_es;
                    ua.ldp = lds * 4;
                    for (int64_t ic = r0; ic < r1; ic += mc) {
                        const int64_t mcb = std::min(mc, r1 - ic);
                        const float* Ap;
                        if (sh.a) {
                            Ap = sh.a + ku(pc) * mpad_all + ic * ku(kcb);  // (ic is a multiple of MR)
                        } else {
                            float* dst = keep_a ? bufA + ku(pc) * mpad + (ic - m0) * ku(kcb) : bufA;
                            // (kept: the first column block packs A, the later ones reuse it)
                            if (!have_a && !(keep_a && jc > n0)) pack_a_block(call, ic, pc, mcb, kcb, dst);
                            Ap = dst;
                        }
                        const int64_t full = mcb / MR, mrest = mcb % MR;
                        for (int64_t jr = 0; jr < ncb; jr += NR) {
                            const int64_t n = jc + jr;
                            const int nt = N - n < NR ? 1 : 0;
                            ua.b = Bp + (jr / NR) * ku(kcb) * NR;
                            ua.bias = call.args.bias ? call.args.bias + n : nullptr;
                            auto tile = [&](int64_t r, int mt, int64_t panels) {
                                ua.a = Ap + (r - ic) * ku(kcb);
                                ua.part = cs_ ? Cs + (r - r0) * lds + jr : nullptr;
                                ua.c = to_cs ? static_cast<void*>(Cs + (r - r0) * lds + jr) : C + (r * s.ldc + n) * c_es;
                                ua.res = res ? res + (r * s.ld_residual + n) * res_es : nullptr;
                                ua.m_panels = panels;
                                uk_[ph][mt][nt]->fn(&ua);
                            };
                            if (full) tile(ic, 0, full);
                            if (mrest) tile(ic + full * MR, 1, 1);
                        }
                    }
                }
            }
        }
        if (keep_a) pcache.a_m0 = m0, pcache.a_m1 = m1;
        if (keep_b) pcache.b_n0 = n0, pcache.b_n1 = n1;
    }

    // Packed elements (4-byte slots) per k: 1, or in pairs (pair_: a 32-bit slot holds two bf16 k;
    // every K block but the last starts at an even k).
    int64_t ku(int64_t k) const { return pair_ ? (k + 1) / 2 : k; }
    // layout_.offset in 4-byte slots.
    int64_t boff(int64_t pc, int64_t panel, int64_t kcb) const {
        const int64_t o = layout_.offset(pc, panel, kcb);
        return pair_ ? o / 2 : o;
    }

    GemmSpec s_;
    bool plain_ = false;
    bool pair_ = false;  // bf16 pairs for the VDPBF16PS microkernel (avx512_bf16)
    GemmGeometry g_;
    GemmBLayout layout_;
    int64_t kc_ = 0, nkb_ = 0, mc_ = 0, nc_ = 0;
    int extra_ = 3;
    bool coop_ = true;                // cooperative packing of shared operands (XK_GEMM_COOP=0: off)
    GemmSplitPolicy split_;           // the base grid's rule (XK_GEMM_F32_SPLIT)
    bool a16_ = false, b16_ = false;  // bf16 A / B (widened as they are packed)
    bool cs_ = false;                 // bf16 C over several K blocks: an f32 accumulator block per thread
    int64_t cs_floats_ = kCsFloats;   // its largest size (XK_GEMM_CS)
    std::shared_ptr<const GemmUkernel> uk_[4][2][2];  // [phase][m tail][n tail]
};

}  // namespace

GemmSplitPolicy gemm_split_policy() {
    GemmSplitPolicy p;
    const char* e = std::getenv("XK_GEMM_F32_SPLIT");
    if (!e || !*e || std::strcmp(e, "cost") == 0) return p;
    int a = 0, b = 0, used = 0;
    if (std::sscanf(e, "%dx%d%n", &a, &b, &used) == 2 && e[used] == 0 && a >= 1 && b >= 1 && a <= 4096 && b <= 4096) {
        p.kind = GemmSplitPolicy::grid, p.pm = a, p.pn = b;
        return p;
    }
    throw Error(Status::invalid_argument,
                std::string("XK_GEMM_F32_SPLIT: unknown value '") + e + "' (cost or <a>x<b>, e.g. 4x4)");
}

GemmSplit gemm_split(int64_t M, int64_t N, int64_t K, int64_t MR, int64_t NR, int threads, bool prepacked, int extra,
                     const GemmSplitPolicy& policy) {
    const int64_t mt = ceil_div(M, MR), nt = ceil_div(N, NR);
    const double macs = double(M) * double(N) * double(K);  // (the product may leave int64)
    int nthr = static_cast<int>(std::clamp<double>(macs / double(kMinMacsPerThread), 1.0, std::max(1, threads)));
    int pm = 1, pn = 1;
    const bool grid = policy.kind == GemmSplitPolicy::grid && policy.pm * policy.pn <= std::max(1, threads) &&
                      policy.pm <= mt && policy.pn <= nt;
    if (grid) {
        nthr = policy.pm * policy.pn, pm = policy.pm, pn = policy.pn;
    } else {
        // The split with the least estimated time per thread: its tile rectangle's FMAs plus the
        // packing of its A rows and (unless prepacked) B columns. Fewer threads if the grid is
        // too small for them.
        double best = -1;
        for (int t = nthr; t >= 1 && best < 0; --t) {
            nthr = t;
            for (int a = 1; a <= t; ++a) {
                if (t % a) continue;
                const int b = t / a;
                if (a > mt || b > nt) continue;
                const double mp = double(ceil_div(mt, a) * MR), np = double(ceil_div(nt, b) * NR);
                const double cost = mp * np / 16.0 + (mp + (prepacked ? 0.0 : np)) / 4.0;
                if (best < 0 || cost < best) best = cost, pm = a, pn = b;
            }
        }
    }
    // With several threads, three times as many parts as threads, handed out as threads
    // become free: a thread slowed down (a busy core, another process) takes fewer. The
    // extra cuts go where re-packing is cheaper: across N when A (M x K) is the smaller
    // operand to pack again (or B is prepacked and cutting M is free), else across M.
    // A thread running several parts keeps what it packed for one part's rows (all of K) and
    // reuses it for the next part of the same rows (parts are numbered row-major: a thread's
    // consecutive parts mostly share their rows); likewise B for parts of the same columns.
    // Reading a kept panel back (even from DRAM) costs less than packing it again; the cap bounds
    // the memory a thread keeps. An extra cut is only made where it repacks nothing: across N
    // when the A rows of a part can be kept (or shared), across M when the B columns can (or B is
    // prepacked). Past the cap every extra part packs its rows' A (columns' B) again: at 4096^3
    // with 2 threads, 3 parts per thread packed A 3 times per thread, 2-3% of the run (measured
    // on Zen 3: 180-185 GFLOP/s against 186-189 with one part per thread).
    if (nthr > 1 && extra > 1) {
        const int64_t keep_floats = keep_floats_all();
        const bool cut_n = !prepacked && M <= N;
        const bool a_ok = ceil_div(mt, pm) * MR * K <= keep_floats;
        const bool b_ok = prepacked || ceil_div(nt, pn) * NR * K <= keep_floats;
        if (cut_n && a_ok && nt >= 2 * extra * pn)
            pn *= extra;
        else if (b_ok && mt >= 2 * extra * pm)
            pm *= extra;
        else if (a_ok && nt >= 2 * extra * pn)
            pn *= extra;
    }
    GemmSplit r;
    r.nthr = nthr, r.pm = pm, r.pn = pn;
    return r;
}

GemmBLayout gemm_b_layout(Isa isa, int64_t K, int64_t N, DType dtype) {
    const GemmGeometry g = gemm_geometry(isa);
    GemmBLayout l;
    l.K = K, l.N = N, l.nr = g.nr;
    l.kc = K > 0 ? kc_for(g, K) : 8;
    l.npad = round_up(N, g.nr);
    l.dtype = dtype;
    l.pairs = dtype == DType::bf16 && isa >= Isa::avx512_bf16;
    if (l.pairs) l.kc = round_up(l.kc, 2);  // (XK_GEMM_KC may be odd)
    l.name = std::string("jit:") + (l.pairs ? "avx512_bf16" : isa_name(g.isa)) + ":" + dtype_name(dtype) +
             (l.pairs ? "x2" : "") + ":K" + std::to_string(K) + ":N" + std::to_string(N) + ":kc" +
             std::to_string(l.kc) + ":nr" + std::to_string(l.nr);
    return l;
}

std::shared_ptr<const GemmPacked> gemm_jit_pack_b(const GemmSpec& s, const GemmBLayout& l, const void* Bv) {
    const size_t es = l.dtype == DType::bf16 ? 2 : 4;
    auto p = std::make_shared<GemmPacked>(l.name, l.floats() * es);
    if (s.K == 0 || s.N == 0) return p;
    const bool bt = s.trans_b == Trans::T;
    if (l.pairs) {
        const auto* B = static_cast<const uint16_t*>(Bv);
        auto* dst = static_cast<uint16_t*>(p->data);
        for (int64_t pc = 0; pc < s.K; pc += l.kc) {
            const int64_t kcb = std::min(l.kc, s.K - pc);
            gemm_pack_b_pairs(bt ? B + pc : B + pc * s.ldb, s.ldb, bt, kcb, s.N, static_cast<int>(l.nr),
                              reinterpret_cast<uint32_t*>(dst + l.offset(pc, 0, kcb)));
        }
        return p;
    }
    if (l.dtype == DType::bf16) {
        // Packed (widened) a group of panels at a time into f32, then narrowed back: exact.
        const auto* B = static_cast<const uint16_t*>(Bv);
        auto* dst = static_cast<uint16_t*>(p->data);
        const int64_t group = 32 * l.nr;  // columns
        std::vector<float> tmp(static_cast<size_t>(std::min(group, l.npad) * std::min(l.kc, s.K)));
        for (int64_t pc = 0; pc < s.K; pc += l.kc) {
            const int64_t kcb = std::min(l.kc, s.K - pc);
            for (int64_t c0 = 0; c0 < s.N; c0 += group) {
                const int64_t nc = std::min(group, s.N - c0);
                gemm_pack_b(bt ? B + c0 * s.ldb + pc : B + pc * s.ldb + c0, s.ldb, bt, kcb, nc, static_cast<int>(l.nr),
                            tmp.data());
                gemm_narrow_bf16(tmp.data(), kcb * round_up(nc, l.nr), dst + l.offset(pc, c0 / l.nr, kcb));
            }
        }
        return p;
    }
    const auto* B = static_cast<const float*>(Bv);
    auto* dst = static_cast<float*>(p->data);
    for (int64_t pc = 0; pc < s.K; pc += l.kc) {
        const int64_t kcb = std::min(l.kc, s.K - pc);
        gemm_pack_b(bt ? B + pc : B + pc * s.ldb, s.ldb, bt, kcb, s.N, static_cast<int>(l.nr), dst + l.offset(pc, 0, kcb));
    }
    return p;
}

bool gemm_jit_supports(const GemmSpec& s) {
    return s.a_type == DType::f32 && s.b_type == DType::f32 && s.c_type == DType::f32 && s.M > 0 && s.N > 0 && s.K > 0;
}

bool gemm_jit_bf16_any_supports(const GemmSpec& s) {
    return s.a_type == DType::bf16 && s.b_type == DType::bf16 && (s.c_type == DType::f32 || s.c_type == DType::bf16) &&
           s.M > 0 && s.N > 0 && s.K > 0;
}

// Measured (1 thread, AVX2 and AVX-512 code on the Xeon; cubes 1..8, M 1..16 x N 1..64 x K
// 1..256, and M = 1, 2 x N 1..16 x K up to 4096 with B plain and transposed): the reference's
// loops beat the blocked kernel's fixed cost (~120 ns: blocking, packing, a microkernel call)
// and its packing of B in NR-column panels for one or two narrow rows: where M = 1 and N <= 16
// (1.4-3x: 1 x 4 x 4096, 19 against 61 us), M = 2 and N <= 8 (0.6-1.1x), and where M N K <= 64
// (cubes up to 4^3: 0.4-0.9x). From 5^3 up, and for M = 1 with N > 16 when B is transposed
// (PyTorch's weights: 1 x 3072 x 768, 1.3 against 5.1 ms), the blocked kernel is faster; at
// M = 1 with a wide plain B the reference's row sweep is (1 x 3072 x 768: 0.3 against 0.9 ms;
// 1 x 1024 x 1024: 0.22 against 0.29 ms, 1 x 4096 x 4096: 4.0 against 7.4 ms; from M = 4 the
// blocked kernel wins: 0.33 against 0.92 ms), so M = 1 with a plain B keeps the reference. (With
// AVX-512 the bf16 decode kernel, gemv_bf16.cpp, is selected first for every M <= 16; this rule
// decides for AVX2 and for the small shapes above M = 16.)
bool gemm_bf16_ref_preferred(const GemmSpec& s) {
    return (s.M == 1 && (s.N <= 16 || s.trans_b == Trans::N)) || (s.M == 2 && s.N <= 8) ||
           double(s.M) * double(s.N) * double(s.K) <= 64.0;
}

bool gemm_jit_bf16_supports(const GemmSpec& s) { return gemm_jit_bf16_any_supports(s) && !gemm_bf16_ref_preferred(s); }

namespace {

// Throughput probe: `iters` x 12 independent zmm VDPBF16PS (dp) or VFMADD231PS on zeroed registers.
class JitBf16Probe : public JitGenerator {
    using Zmm = Xbyak::Zmm;
    using Label = Xbyak::Label;

public:
    explicit JitBf16Probe(bool dp) : JitGenerator(Isa::avx512_bf16, 4096) {
        for (int i = 0; i < 14; ++i) vpxord(Zmm(i), Zmm(i), Zmm(i));
        Label l;
        L(l);
        for (int u = 0; u < 2; ++u)
            for (int i = 0; i < 12; ++i) {
                if (dp)
                    vdpbf16ps(Zmm(i), Zmm(12), Zmm(13));
                else
                    vfmadd231ps(Zmm(i), Zmm(12), Zmm(13));
            }
        dec(rdi);
        jnz(l);
        vzeroupper();
        ret();
        fn = finalize<void (*)(int64_t)>();
    }
    void (*fn)(int64_t) = nullptr;
};

bool measure_bf16_dp_fast() {
    if (!isa_supported(Isa::avx512_bf16)) return false;
    const JitBf16Probe dp(true), fma(false);
    double best[2] = {1e30, 1e30};
    constexpr int64_t kIters = 400;  // 9600 instructions a run
    for (int rep = 0; rep < 9; ++rep)
        for (int k = 0; k < 2; ++k) {
            const double t0 = now_us();
            (k ? fma.fn : dp.fn)(kIters);
            best[k] = std::min(best[k], now_us() - t0);
        }
    return best[0] < 1.5 * best[1];
}

}  // namespace

// Whether the VDPBF16PS kernel beats the widening one on this CPU: a VDPBF16PS does twice an
// FMA's flops, but where it issues at a quarter of the FMA rate (Sapphire Rapids class: measured
// ~0.6 G/s against ~2.3 G/s FMAs per core, so 41 against 74 GFLOP/s of bench_peak, and the
// kernels 40 against 68-98 GFLOP/s, 384x768x768 and 1024^3, one thread) the widened FMA path is
// faster (1.6-1.8x oneDNN, which runs VDPBF16PS at the AVX512_CORE_BF16 cap, against 1.0x).
// Measured once per process (a ~20 us probe of both instructions' throughput, the best of 9
// alternating runs): the pair kernel when a VDPBF16PS costs less than 1.5 FMAs (Zen 4 / 5: about
// one). XK_GEMM_BF16_DP=1 / 0 forces it (read at every selection; tests, experiments).
bool gemm_bf16_dp_fast() {
    if (const char* e = std::getenv("XK_GEMM_BF16_DP"); e && *e) return e[0] == '1' && isa_supported(Isa::avx512_bf16);
    static const bool fast = measure_bf16_dp_fast();
    return fast;
}

bool gemm_jit_bf16_dp_supports(const GemmSpec& s) { return gemm_jit_bf16_supports(s) && gemm_bf16_dp_fast(); }
bool gemm_jit_bf16_dp_any_supports(const GemmSpec& s) { return gemm_jit_bf16_any_supports(s) && gemm_bf16_dp_fast(); }

std::shared_ptr<const GemmKernel> create_gemm_jit(const GemmSpec& s, Isa isa) {
    if (!gemm_jit_supports(s) && !gemm_jit_bf16_any_supports(s))
        throw Error(Status::unsupported, "gemm jit: " + s.key() + " is not supported");
    return std::make_shared<JitGemm>(s, isa);
}

std::shared_ptr<const GemmKernel> create_gemm_jit_plain(const GemmSpec& s, Isa isa) {
    if (!gemm_jit_bf16_any_supports(s)) throw Error(Status::unsupported, "gemm jit (plain B): " + s.key() + " is not supported");
    return std::make_shared<JitGemm>(s, isa, /*plain=*/true);
}

}  // namespace xk::detail
