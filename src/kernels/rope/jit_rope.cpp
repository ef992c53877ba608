// xbyak generator of RoPE for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16 stores at the
// avx512_bf16 level), specialised on the kernel descriptor (style, head_dim, rotary_dim, dtype,
// position type, cache dtype): the rotation of one head is straight-line code.
//
// One call rotates a range of tokens of q and k in place: for each token, its position picks
// the cos / sin row of the cache (read from L1 after the first head), then every q head and
// every k head is rotated:
//   neox  pairs (x[i], x[i + r/2]): vectors of x1 = x[i..], x2 = x[r/2 + i..] with cos_i, sin_i
//         o1 = x1 cos - x2 sin,  o2 = x2 cos + x1 sin
//   gptj  pairs (x[2i], x[2i+1]): a vector v of vlen/2 pairs, cos / sin widened to
//         (c0 c0 c1 c1 ...) by VPERMPS and sin signed (-s0 s0 -s1 s1 ...) once per token into a
//         scratch row (Args::eo_row); with v' = v with the two elements of each pair swapped
//         (VPERMILPS):  o = v cos + v' sin
//         (bf16: whole blocks of vlen pairs, 2 vlen elements, are split into the pairs' first
//         and second elements instead, JitIo::load2_eo / store2_eo, and rotated as neox: no
//         permutes)
//   bf16 neox: whole blocks of 2 vlen elements of x1 and x2 are split into even and odd
//         elements the same way; the token's cos / sin row is split once into a scratch row
//         (Args::eo_row) for all its heads, in blocks of 2 vlen (16 floats AVX2, 32 AVX-512).
// The even / odd split (AVX2 and AVX-512 without AVX512-BF16 alike: lane j of the even vector is
// element 2j of the block, of the odd one element 2j + 1) trades the loads' widening shuffles and
// the stores' pack and lane permute for a shift / AND and a word merge; its stores round to
// nearest with ties away from zero (JitIo::store2_eo_away, + 0x8000: 3 instructions a pair
// instead of ~12 for the emulated round to nearest even; within the same half ulp, denormals
// kept). That needs NaN payloads with zero low words: bf16 q / k and a bf16 cache have them, the
// arithmetic's own NaNs too, and an f32 cache's NaNs get them (quiet bit set, low word cleared,
// as a bf16 conversion would) when the token's cos / sin are prepared (GPT-J: its split blocks'
// cos / sin are copied to eo_row for that). Zen 3, one core: bf16 NeoX decode 16 tokens 28.9 ->
// 34.0 GB/s, 2048x32x128 NeoX 23.5 -> 26.6, GPT-J 26.2 -> 31.0. At avx512_bf16 the split is not
// used: VCVTNE2PS2BF16 converts natively (measured faster there).
// The compute mode (cos / sin from base and scaling) evaluates cos / sin per token in double
// exactly as the reference does, into a one-row f32 table, and calls the same code for that
// token.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/float_io.hpp"
#include "common/streaming.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/rope/rope.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

struct Args {
    void* q = nullptr;          // 0   first token of the range
    int64_t q_heads = 0;        // 8
    int64_t q_ts = 0, q_hs = 0; // 16, 24  bytes
    void* k = nullptr;          // 32
    int64_t k_heads = 0;        // 40
    int64_t k_ts = 0, k_hs = 0; // 48, 56  bytes
    const void* positions = nullptr;  // 64  of the range's first token
    int64_t tokens = 0;         // 72  >= 1
    const void* cache = nullptr;  // 80  rows of rotary_dim elements: cos, then sin
    float* eo_row = nullptr;      // 88  2 * rotary_dim floats of scratch: the token's cos / sin prepared
};
using RopeFn = void (*)(const Args*);

// Constants of the GPT-J path: the pair-widening permutation and the alternating sign; of the
// NeoX even / odd split of an f32 cos / sin row on AVX-512: VPERMT2PS indices of the even and
// the odd elements of 32 (two zmm).
struct alignas(64) RopeConsts {
    int32_t dup[16];
    uint32_t alt_sign[16];
    int32_t even[16], odd[16];
};
const RopeConsts& rope_consts() {
    static const RopeConsts c = [] {
        RopeConsts c{};
        for (int i = 0; i < 16; ++i) {
            c.dup[i] = i / 2;
            c.alt_sign[i] = i % 2 == 0 ? 0x80000000u : 0u;
            c.even[i] = 2 * i;
            c.odd[i] = 2 * i + 1;
        }
        return c;
    }();
    return c;
}

// The rotation of a head is straight-line code, emitted twice (q and k): rotary_dim is capped by
// rope_jit_supports() so that it fits this buffer.
constexpr size_t kRopeCodeBytes = 256 * 1024;
constexpr int kRopePrefetchBytes = 8192;  // software prefetch distance of q / k (see `heads`)

class JitRope : public JitGenerator {
public:
    // pf: software prefetch of q / k ahead of the rotation (bf16 tensors too large for the cache).
    JitRope(const RopeKernelDesc& kd, Isa isa, bool pf) : JitGenerator(isa, kRopeCodeBytes) {
        const Reg64 a = abi_param1, cs = rsi, sn = rdx, head = rcx, pos = r8, ntok = r9, cache = r10, tbl = r11,
                    nheads = r12, qbase = r13, kbase = r14, tmp = r15, consts = rbx;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        const int vl = io.vlen();
        const int64_t rot = kd.rotary_dim, half = rot / 2;
        const DType dt = kd.dtype, ct = kd.cache_dtype;
        const int es = dtype_size(dt), csz = dtype_size(ct);
        const bool neox = kd.style == RopeStyle::neox;
        // The even / odd split (JitIo::load2_eo), blocks of 2 vl — not where AVX512-BF16 converts
        // natively: there the emulated rounding of its stores cost more than the widening loads
        // saved (Xeon, 1 thread, bf16 NeoX decode 1 / 16 tokens 0.71-0.84 -> 1.16-1.70 / 9.5-12.0
        // -> 18.0-21.4 µs, 2048 tokens 4.0-4.6 -> 4.3-5.4 ms).
        const bool eo = dt == DType::bf16 && !io.native_bf16();
        const int64_t eo_half = neox && eo ? half / (2 * vl) * (2 * vl) : 0;  // neox: split blocks in [0, eo_half)
        const Reg64 eb = rbx;  // the token's cos / sin prepared (Args::eo_row); gptj loads consts through it first
        const int64_t gj_begin = eo ? rot / (2 * vl) * (2 * vl) : 0;  // gptj: vectors not split even / odd

        preamble({rbx, r12, r13, r14, r15});
        mov(pos, ptr[a + offsetof(Args, positions)]);
        mov(ntok, ptr[a + offsetof(Args, tokens)]);
        mov(cache, ptr[a + offsetof(Args, cache)]);
        mov(qbase, ptr[a + offsetof(Args, q)]);
        mov(kbase, ptr[a + offsetof(Args, k)]);
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        const Xmm dup = V(12), alt = V(13);  // gptj
        const Xmm eidx = V(12), oidx = V(13);  // neox even / odd split of an f32 row on AVX-512
        const bool eo_perm = eo_half > 0 && io.zmm() && ct == DType::f32;
        if (!neox) {
            mov(consts, reinterpret_cast<uintptr_t>(&rope_consts()));
            vmovups(dup, ptr[consts + offsetof(RopeConsts, dup)]);
            vmovups(alt, ptr[consts + offsetof(RopeConsts, alt_sign)]);
        } else if (eo_perm) {
            mov(consts, reinterpret_cast<uintptr_t>(&rope_consts()));
            vmovups(eidx, ptr[consts + offsetof(RopeConsts, even)]);
            vmovups(oidx, ptr[consts + offsetof(RopeConsts, odd)]);
        }

        // One head at [head]: straight-line code over [0, rotary_dim), two vector chunks at a
        // time (register sets 0 and 1) whose outputs are stored as pairs (one bf16 pair store).
        // AVX2 even / odd blocks: the split's 0xffff0000 mask and the rounding's 0x8000 in V(8) /
        // V(9) (JitIo::set_eo_regs) while a head's blocks run, not as table operands: a NeoX block
        // (32 elements) had 16 loads for 20 vector operations (Zen 3 loads two ymm a cycle), now 10.
        // Zen 3, one thread, 3-4 rounds alternating, medians: decode 16 tokens NeoX 16.0 -> 12.2
        // us; 2048 x 32 x 128 % of an in-place copy NeoX 69.6 -> 72.2 and 69.4 -> 73.6, GPT-J
        // 70.3 -> 77.6 and 68.9 -> 77.7 (two threads within that host's noise: 86-95 either way).
        // The rest of a head (V(6..11)) and the per-token preparation use the table.
        const bool eo_regs = eo && !io.zmm();
        // NeoX: also each cos / sin vector of a block loaded once into V(10..13) instead of as two
        // operands: 10 -> 6 loads a block. Zen 3, 4 rounds alternating, medians: decode 16 tokens
        // 12.3 -> 10.7 us; 2048 x 32 x 128 % of copy 77.0 -> 80.5 at one thread, 86.0 -> 91.9 at
        // two. (GPT-J's blocks the same way: 80.9 -> 80.5 / 90.8 -> 92.3, not done.)
        const bool cs_regs = eo_regs && neox;
        auto rotate_head = [&]() {
            if (neox) {
                if (eo_regs && eo_half > 0) io.set_eo_regs(8, 9);
                for (int64_t off = 0; off < eo_half; off += 2 * vl) {
                    // bf16, a whole block of x1 (and x2): split into even and odd
                    // elements, cos / sin read from the token's split copy (eb).
                    const Xmm x1e = V(0), x1o = V(1), x2e = V(2), x2o = V(3);
                    io.load2_eo(x1e, x1o, head + off * es);
                    io.load2_eo(x2e, x2o, head + (half + off) * es);
                    for (int j = 0; j < 2; ++j) {
                        const Xmm x1 = j ? x1o : x1e, x2 = j ? x2o : x2e, o1 = V(4 + j), o2 = V(6 + j);
                        const int64_t co = (off + j * vl) * 4, so = (half + off + j * vl) * 4;
                        if (cs_regs) {
                            const Xmm c = V(10 + 2 * j), sn2 = V(11 + 2 * j);
                            vmovups(c, ptr[eb + co]);
                            vmovups(sn2, ptr[eb + so]);
                            vmulps(o1, x1, c);
                            vmulps(o2, x2, c);
                            vfnmadd231ps(o1, x2, sn2);  // x1 c - x2 s
                            vfmadd231ps(o2, x1, sn2);   // x2 c + x1 s
                            continue;
                        }
                        vmulps(o1, x1, ptr[eb + co]);
                        vmulps(o2, x2, ptr[eb + co]);
                        vfnmadd231ps(o1, x2, ptr[eb + so]);  // x1 c - x2 s
                        vfmadd231ps(o2, x1, ptr[eb + so]);   // x2 c + x1 s
                    }
                    io.store2_eo_away(head + off * es, V(4), V(5));
                    io.store2_eo_away(head + (half + off) * es, V(6), V(7));
                }
                io.clear_eo_regs();
                for (int64_t off = eo_half; off < half; off += 2 * vl) {
                    int cnt[2] = {0, 0};
                    for (int set = 0; set < 2; ++set) {
                        const int64_t o = off + set * vl;
                        if (o >= half) break;
                        const int n = cnt[set] = static_cast<int>(std::min<int64_t>(vl, half - o));
                        const int b = set * 6;
                        const Xmm x1 = V(b), x2 = V(b + 1), c = V(b + 2), s = V(b + 3), o1 = V(b + 4), o2 = V(b + 5);
                        if (dt == DType::f32 && ct == DType::f32 && n == vl) {
                            // f32 q / k: x1 and x2 as the products' memory operands (each read
                            // twice, from L1 the second time), cos / sin in registers: no
                            // operation waits on a register loaded from q / k. Zen 3, one thread,
                            // 2048 x 32 x 128, 4 rounds alternating, medians of % of copy: 84.3 ->
                            // 86.0 (two threads 96.2 -> 96.1).
                            vmovups(c, ptr[cs + o * csz]);
                            vmovups(s, ptr[sn + o * csz]);
                            vmulps(o1, c, ptr[head + o * es]);
                            vmulps(o2, c, ptr[head + (half + o) * es]);
                            vfnmadd231ps(o1, s, ptr[head + (half + o) * es]);  // x1 c - x2 s
                            vfmadd231ps(o2, s, ptr[head + o * es]);            // x2 c + x1 s
                            continue;
                        }
                        io.load(x1, head + o * es, dt, n);
                        io.load(x2, head + (half + o) * es, dt, n);
                        if (ct == DType::f32 && n == vl) {
                            vmulps(o1, x1, ptr[cs + o * csz]);
                            vmulps(o2, x2, ptr[cs + o * csz]);
                            vfnmadd231ps(o1, x2, ptr[sn + o * csz]);  // x1 c - x2 s
                            vfmadd231ps(o2, x1, ptr[sn + o * csz]);   // x2 c + x1 s
                        } else {
                            io.load(c, cs + o * csz, ct, n);
                            io.load(s, sn + o * csz, ct, n);
                            vmulps(o1, x1, c);
                            vfnmadd231ps(o1, x2, s);
                            vmulps(o2, x2, c);
                            vfmadd231ps(o2, x1, s);
                        }
                    }
                    io.store2(head + off * es, V(4), V(10), dt, cnt[0] + cnt[1]);
                    io.store2(head + (half + off) * es, V(5), V(11), dt, cnt[0] + cnt[1]);
                }
            } else {
                if (eo_regs && 2 * vl <= rot) io.set_eo_regs(8, 9);
                for (int64_t off = 0; off < rot; off += 2 * vl) {
                    if (eo && off + 2 * vl <= rot) {
                        // bf16, a whole block of vlen pairs: split into the first (x[2i])
                        // and second (x[2i+1]) elements of the pairs, lane j = pair off/2 + j, so
                        // cos / sin are read as they are and no pair swap is needed.
                        const Xmm xe = V(0), xo = V(1), c = V(2), s = V(3), oe = V(4), oo = V(5);
                        io.load2_eo(xe, xo, head + off * es);
                        if (ct == DType::f32) {  // (the token's cos / sin, NaNs made default: eo_row)
                            vmulps(oe, xe, ptr[eb + off / 2 * 4]);
                            vmulps(oo, xo, ptr[eb + off / 2 * 4]);
                            vfnmadd231ps(oe, xo, ptr[eb + (rot + off / 2) * 4]);  // x0 c - x1 s
                            vfmadd231ps(oo, xe, ptr[eb + (rot + off / 2) * 4]);   // x1 c + x0 s
                        } else {
                            io.load(c, cs + off / 2 * csz, ct, vl);
                            io.load(s, sn + off / 2 * csz, ct, vl);
                            vmulps(oe, xe, c);
                            vmulps(oo, xo, c);
                            vfnmadd231ps(oe, xo, s);
                            vfmadd231ps(oo, xe, s);
                        }
                        io.store2_eo_away(head + off * es, oe, oo);
                        continue;
                    }
                    io.clear_eo_regs();  // the rest uses V(6..11)
                    int cnt[2] = {0, 0};
                    for (int set = 0; set < 2; ++set) {
                        const int64_t o = off + set * vl;
                        if (o >= rot) break;
                        const int n = cnt[set] = static_cast<int>(std::min<int64_t>(vl, rot - o));  // even
                        const int b = set * 6;
                        const Xmm v = V(b), sw = V(b + 1), c = V(b + 2), s = V(b + 3), out = V(b + 4);
                        // cos / sin widened and signed once per token (eb: (c0 c0 c1 c1 ...),
                        // then (-s0 s0 -s1 s1 ...) at rotary_dim)
                        io.load(v, head + o * es, dt, n);
                        // (x1 x0 x3 x2 ...); f32: from memory (the same line, from L1), not from v,
                        // so that the swap does not wait on v's load. Zen 3, one thread, 2048 x 32
                        // x 128, 4 rounds alternating, medians of % of copy: 81.2 -> 84.1 (two
                        // threads 90.6 -> 94.8).
                        if (dt == DType::f32 && n == vl) vpermilps(sw, ptr[head + o * es], 0xb1);
                        else vpermilps(sw, v, 0xb1);
                        if (n == vl) {
                            vmulps(out, v, ptr[eb + o * 4]);
                            vfmadd231ps(out, sw, ptr[eb + (rot + o) * 4]);
                        } else {
                            io.load(c, eb + o * 4, DType::f32, n);
                            io.load(s, eb + (rot + o) * 4, DType::f32, n);
                            vmulps(out, v, c);
                            vfmadd231ps(out, sw, s);
                        }
                    }
                    io.store2(head + off * es, V(4), V(10), dt, cnt[0] + cnt[1]);
                }
                io.clear_eo_regs();
            }
        };

        // Heads of one tensor for the current token: base in `base`, counts and strides from args.
        auto heads = [&](const Reg64& base, size_t heads_off, size_t hs_off) {
            Label loop, done;
            mov(nheads, ptr[a + heads_off]);
            test(nheads, nheads);
            jz(done);
            mov(head, base);
            L(loop);
            // Software prefetch 8 KiB ahead of the head being rotated (one per line of its rotary
            // part). Measured on Zen 3 (2048 tokens x 32 heads x 128, DRAM, bench_llm A/B): bf16
            // +20-25% at one thread, +15-30% at two; 4 KiB gave about half of that, 16 KiB no
            // more. f32, % of an in-place copy run between the calls (2 rounds), one thread: NeoX
            // 81 -> 85-86, GPT-J 76-79 -> 82-84; two threads unchanged (88-95). Decode calls
            // (cache-resident) ran 15-20% slower with it, so it is used only when the tensors
            // exceed nt_store_threshold(). Past the tensor's end it touches whatever follows (no
            // fault).
            if (pf)
                for (int64_t o = 0; o < rot * es; o += 64) prefetcht0(ptr[head + kRopePrefetchBytes + o]);
            rotate_head();
            add(head, ptr[a + hs_off]);
            dec(nheads);
            jnz(loop);
            L(done);
        };

        Label tok;
        L(tok);
        if (kd.position_type == RopePositionType::s32) movsxd(tmp, dword[pos]);
        else mov(tmp, qword[pos]);
        imul(tmp, tmp, static_cast<int>(rot * csz));
        lea(cs, ptr[cache + tmp]);
        lea(sn, ptr[cs + half * csz]);
        // The prefetching variant also prefetches the next token's cos / sin row (rax: JitIo's
        // scratch, free here): a row of the cache at an arbitrary position (decode batches, the
        // bench's random positions, packed sequences) is no stream the hardware prefetcher sees,
        // and each token's first head waited for it. Zen 3, 2048 x 32 x 128, random positions over
        // a 4096-row cache, % of an in-place copy run between the calls, old / new binaries
        // alternating, medians of 3, one thread: f32 NeoX 89.7 -> 91.5, GPT-J 85.4 -> 87.0; bf16
        // NeoX 84.0 -> 89.8, GPT-J 85.6 -> 92.1 (two threads +0-5). The decode rows (the other
        // variant) measured the same with it (4 rounds), so they go without.
        if (pf) {
            Label last;
            cmp(ntok, 1);
            jbe(last);
            if (kd.position_type == RopePositionType::s32) movsxd(rax, dword[pos + 4]);
            else mov(rax, qword[pos + 8]);
            imul(rax, rax, static_cast<int>(rot * csz));
            add(rax, cache);
            for (int64_t o = 0; o < rot * csz; o += 64) prefetcht0(ptr[rax + o]);
            L(last);
        }
        // The even / odd stores round with + 0x8000 (JitIo::store2_eo_away), which needs NaN
        // payloads with zero low words: bf16 q / k and a bf16 cache have them, and so do the NaNs
        // the arithmetic creates; an f32 cache's NaNs get them (JitIo::quiet_nan_hi_words) when
        // the token's cos / sin are prepared.
        if (!neox && eo && ct == DType::f32 && gj_begin > 0) {
            // GPT-J, f32 cache: the pairs' cos / sin of the split blocks copied to eo_row [0, ..)
            // and [rot, ..) (NaN lanes made safe for the + 0x8000).
            mov(eb, ptr[a + offsetof(Args, eo_row)]);
            for (int64_t off = 0; off < gj_begin / 2; off += vl) {
                vmovups(V(0), ptr[cs + off * 4]);
                vmovups(V(1), ptr[sn + off * 4]);
                io.quiet_nan_hi_words(V(0));
                io.quiet_nan_hi_words(V(1));
                vmovups(ptr[eb + off * 4], V(0));
                vmovups(ptr[eb + (rot + off) * 4], V(1));
            }
        }
        if (!neox && gj_begin < rot) {
            // GPT-J: cos / sin of this token widened to pairs and sin signed, once for all heads.
            mov(eb, ptr[a + offsetof(Args, eo_row)]);
            for (int64_t off = gj_begin; off < rot; off += vl) {
                const int n = static_cast<int>(std::min<int64_t>(vl, rot - off));  // even
                io.load(V(0), cs + off / 2 * csz, ct, n / 2);
                vpermps(Y(0), Y(dup.getIdx()), Y(0));  // (c0 c0 c1 c1 ...)
                io.store(eb + off * 4, V(0), DType::f32, n);
                io.load(V(1), sn + off / 2 * csz, ct, n / 2);
                vpermps(Y(1), Y(dup.getIdx()), Y(1));
                vxorps(V(1), V(1), alt);  // (-s0 s0 -s1 s1 ...)
                io.store(eb + (rot + off) * 4, V(1), DType::f32, n);
            }
        }
        if (eo_half > 0) {
            // This token's cos and sin, blocks of 2 vl split into even and odd elements (the
            // order load2_eo gives x), once for all its heads.
            mov(eb, ptr[a + offsetof(Args, eo_row)]);
            for (int part = 0; part < 2; ++part) {
                const Reg64& src = part ? sn : cs;
                for (int64_t off = 0; off < eo_half; off += 2 * vl) {
                    const Xmm e = V(0), o = V(1);
                    const int64_t dst = (part * half + off) * 4;
                    if (ct == DType::bf16) {
                        io.load2_eo(e, o, src + off * csz);
                    } else if (io.zmm()) {  // 32 floats: the even ones, the odd ones
                        vmovups(e, ptr[src + off * 4]);
                        vmovaps(o, e);
                        vpermt2ps(e, eidx, ptr[src + off * 4 + 64]);
                        vpermt2ps(o, oidx, ptr[src + off * 4 + 64]);
                    } else {
                        vmovups(V(2), ptr[src + off * 4]);
                        vshufps(e, V(2), ptr[src + off * 4 + 32], 0x88);  // (0 2 8 10 | 4 6 12 14)
                        vshufps(o, V(2), ptr[src + off * 4 + 32], 0xdd);  // (1 3 9 11 | 5 7 13 15)
                        vpermpd(Ymm(e.getIdx()), Ymm(e.getIdx()), 0xd8);
                        vpermpd(Ymm(o.getIdx()), Ymm(o.getIdx()), 0xd8);
                    }
                    if (ct == DType::f32) {
                        io.quiet_nan_hi_words(e);
                        io.quiet_nan_hi_words(o);
                    }
                    vmovups(ptr[eb + dst], e);
                    vmovups(ptr[eb + dst + vl * 4], o);
                }
            }
        }
        heads(qbase, offsetof(Args, q_heads), offsetof(Args, q_hs));
        heads(kbase, offsetof(Args, k_heads), offsetof(Args, k_hs));
        add(qbase, ptr[a + offsetof(Args, q_ts)]);
        add(kbase, ptr[a + offsetof(Args, k_ts)]);
        add(pos, kd.position_type == RopePositionType::s32 ? 4 : 8);
        dec(ntok);
        jnz(tok);
        postamble();
        fn = finalize<RopeFn>();
    }
    RopeFn fn = nullptr;

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
    Ymm Y(int i) const { return isa() >= Isa::avx512 ? Ymm(Zmm(i)) : Ymm(i); }
};

constexpr int64_t kRopeTokenBlock = 16;  // tokens of q, then of k, in the prefetching f32 variant (run())

class JitRopeKernel final : public RopeKernel {
public:
    JitRopeKernel(const RopeKernelDesc& kd, Isa isa)
        : kd_(kd), gen_(kd, isa, false),
          gen_pf_(kd, isa, true) {}

    void run(const RopeDesc& d, const RopeArgs& a, int64_t token_begin, int64_t token_end) const override {
        const int es = dtype_size(d.dtype);
        const int pos_size = d.position_type == RopePositionType::s32 ? 4 : 8;
        // Tensors that cannot stay in the cache: the prefetching variant.
        const JitRope& gen =
            use_nt_stores(d.tokens * (d.q_heads + d.k_heads) * d.head_dim * es) ? gen_pf_ : gen_;
        Args args;
        thread_local std::vector<float> eo_row;
        eo_row.resize(static_cast<size_t>(2 * d.rotary_dim));
        args.eo_row = eo_row.data();
        args.q_heads = d.q_heads;
        args.q_ts = d.q_token_stride * es;
        args.q_hs = d.q_head_stride * es;
        args.k_heads = d.k_heads;
        args.k_ts = d.k_token_stride * es;
        args.k_hs = d.k_head_stride * es;
        auto at_token = [&](int64_t t) {
            args.q = d.q_heads ? static_cast<char*>(a.q) + t * args.q_ts : nullptr;
            args.k = d.k_heads ? static_cast<char*>(a.k) + t * args.k_ts : nullptr;
        };
        if (d.cos_sin == RopeCosSin::cache) {
            args.cache = a.cos_sin_cache;
            // f32 tensors past the cache: q and k in turns of kRopeTokenBlock tokens (a call of
            // q alone, then one of k alone) instead of token by token. Token by token, the two
            // in-place streams alternate every q / k row (16 KiB at 32 x 128 f32), and an
            // in-place scale over two buffers alternating every 8-16 KiB ran 5-8% below one over
            // a buffer at a time, 64 KiB turns within 1-2% (Zen 3, one thread). RoPE 2048 x 32 x
            // 128, % of an in-place copy run between the calls, 3 rounds alternating, medians,
            // token by token -> turns of 8 / 16 / 32 tokens: f32 NeoX one thread 79.8 -> 84.0 and
            // 79.5 -> 83.7 / 82.6, GPT-J 77.5 -> 80.0 and 76.9 -> 81.1 / 80.5; two threads NeoX 93.6
            // -> 95.3 / 96.2, GPT-J 92.5 -> 94.3 / 93.4. bf16 (8 KiB rows, its cos / sin row
            // prepared once per call: twice per token here) measured within the noise either way
            // (one thread NeoX 80.8 -> 79.3 at 8, 74.5 -> 73.8 / 70.5 at 16 / 32): token by token.
            if (d.dtype == DType::f32 && &gen == &gen_pf_ && d.q_heads && d.k_heads) {
                for (int64_t t0 = token_begin; t0 < token_end; t0 += kRopeTokenBlock) {
                    const int64_t t1 = std::min(token_end, t0 + kRopeTokenBlock);
                    at_token(t0);
                    args.positions = static_cast<const char*>(a.positions) + t0 * pos_size;
                    args.tokens = t1 - t0;
                    args.k_heads = 0;  // q alone
                    gen.fn(&args);
                    args.k_heads = d.k_heads;
                    args.q_heads = 0;  // k alone
                    gen.fn(&args);
                    args.q_heads = d.q_heads;
                }
                return;
            }
            at_token(token_begin);
            args.positions = static_cast<const char*>(a.positions) + token_begin * pos_size;
            args.tokens = token_end - token_begin;
            gen.fn(&args);
            return;
        }
        // compute: cos / sin of this token's angles, as the reference evaluates them, in a
        // one-row table read at position 0.
        const int64_t rot = d.rotary_dim, half = rot / 2;
        std::vector<double> inv_freq(half);
        for (int64_t i = 0; i < half; ++i)
            inv_freq[i] = std::pow(static_cast<double>(d.base), -2.0 * static_cast<double>(i) / static_cast<double>(rot));
        std::vector<float> row(rot);
        const int64_t zero64 = 0;
        const int32_t zero32 = 0;
        args.positions = pos_size == 4 ? static_cast<const void*>(&zero32) : &zero64;
        args.tokens = 1;
        args.cache = row.data();
        for (int64_t t = token_begin; t < token_end; ++t) {
            const int64_t pos = pos_size == 4 ? static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[t])
                                              : static_cast<const int64_t*>(a.positions)[t];
            const double p = static_cast<double>(pos) / static_cast<double>(d.scaling_factor);
            for (int64_t i = 0; i < half; ++i) {
                const double theta = p * inv_freq[i];
                row[i] = static_cast<float>(std::cos(theta));
                row[half + i] = static_cast<float>(std::sin(theta));
            }
            at_token(t);
            gen.fn(&args);
        }
    }

private:
    RopeKernelDesc kd_;
    JitRope gen_;
    JitRope gen_pf_;  // with the software prefetch (tensors beyond the cache)
};

}  // namespace

std::shared_ptr<const RopeKernel> create_jit_rope(const RopeKernelDesc& kd, Isa isa) {
    return std::make_shared<JitRopeKernel>(kd, isa);
}

}  // namespace xk::detail
