// xbyak generator of RMSNorm / LayerNorm rows for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16
// conversions at the avx512_bf16 level), specialised on the kernel descriptor (kind, hidden,
// dtypes, weight / bias / fused residual): every trip count and tail is known when generating.
//
// One row = two generated functions and a few lines of C++ in between:
//   stats  one pass over the row from memory: h = x (+ residual, stored to residual_out and
//          read back rounded), per-lane partial sums in fp32 with 4 independent accumulators:
//            rms_norm    S2 = sum h^2
//            layer_norm  S1 = sum d, S2 = sum d^2 with d = h - c, c = the lane's first h
//                        (a per-lane shift: no cancellation when |mean| >> std)
//   C++    the lanes combined in double (Chan et al.'s pairwise formula for layer_norm):
//          mean, rstd = 1 / sqrt(var + eps)
//   apply  y = (h - mean) * rstd * weight + bias over the row again, now from L1/L2 (a row of
//          up to ~8K fp32 elements stays in L1/L2 between the passes), h from x or, when fused,
//          from residual_out (the rounded sum the norm is defined on).
// So x and residual are read from memory once and y and residual_out written once. When the
// call's output exceeds nt_store_threshold() (it cannot stay in the cache anyway) and y's rows
// are aligned, y is written with non-temporal stores (no read-for-ownership).
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/float_io.hpp"
#include "common/streaming.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/norm/norm.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

// The per-row arguments of both functions.
struct RowArgs {
    const void* x = nullptr;        // 0
    const void* r = nullptr;        // 8   residual (fused)
    void* ro = nullptr;             // 16  residual_out (fused)
    float* partial = nullptr;       // 24  out: [3][16] floats: S1, S2, c per lane
    const void* h = nullptr;        // 32  apply: where h is read (x or residual_out)
    void* y = nullptr;              // 40
    const void* w = nullptr;        // 48
    const void* b = nullptr;        // 56
    float mean = 0, rstd = 0;       // 64, 68
    const void* next_x = nullptr;   // 72  apply: prefetched (the next row's x and residual, or
    const void* next_r = nullptr;   // 80  this row's when there is none)
};
static_assert(offsetof(RowArgs, mean) == 64 && offsetof(RowArgs, rstd) == 68, "RowArgs layout");

using RowFn = void (*)(const RowArgs*);

constexpr int kUnroll = 4;

class JitNormStats : public JitGenerator {
public:
    JitNormStats(const NormKernelDesc& kd, Isa isa) : JitGenerator(isa) {
        const Reg64 p = abi_param1, x = rsi, r = rdx, ro = rcx, idx = r8, cnt = r9, tbl = r10;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        const int vl = io.vlen();
        const int64_t n = kd.hidden, nvec = n / vl, tail = static_cast<int>(n % vl);
        const bool ln = kd.kind == NormKind::layer_norm, fused = kd.fused_residual;
        const DType xt = kd.x_dtype, rt = kd.residual_dtype;
        const int xs = dtype_size(xt), rs = dtype_size(rt);
        // Accumulators: layer_norm 4 x (S1, S2) in V(0..7); rms_norm 8 x S2 in V(0..7) (FMA latency
        // x throughput: 8 chains keep both FMA pipes busy on a cache-resident row).
        const int unroll = ln ? 4 : 8;
        auto acc1 = [&](int k) { return V(k); };
        auto acc2 = [&](int k) { return ln ? V(4 + k) : V(k); };
        const Xmm shift = V(8), h = V(9), t = V(10), d = V(11);

        preamble();
        mov(x, ptr[p + offsetof(RowArgs, x)]);
        if (fused) {
            mov(r, ptr[p + offsetof(RowArgs, r)]);
            mov(ro, ptr[p + offsetof(RowArgs, ro)]);
        }
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        for (int k = 0; k < unroll; ++k) {
            vxorps(acc2(k), acc2(k), acc2(k));
            if (ln) vxorps(acc1(k), acc1(k), acc1(k));
        }
        if (ln) {  // c = x (+ residual) of the first vector, unrounded (any value near the data will do)
            const int c0 = static_cast<int>(std::min<int64_t>(n, vl));
            io.load(shift, x, xt, c0);
            if (fused) {
                io.load(t, r, rt, c0);
                vaddps(shift, shift, t);
            }
        }
        xor_(idx, idx);

        auto body = [&](int k, int64_t off, int count) {
            io.load(h, x + idx * xs + off * xs, xt, count);
            if (fused) {
                io.load(t, r + idx * rs + off * rs, rt, count);
                vaddps(h, h, t);
                io.store(ro + idx * rs + off * rs, h, rt, count);
                if (rt == DType::bf16) io.load(h, ro + idx * rs + off * rs, rt, count);  // the rounded sum
            }
            if (ln) {
                vsubps(d, h, shift);
                if (count < vl) io.keep_lanes(d, count);
                vaddps(acc1(k), acc1(k), d);
                vfmadd231ps(acc2(k), d, d);
            } else {
                vfmadd231ps(acc2(k), h, h);  // lanes past a tail load are 0
            }
        };

        const int64_t nblk = nvec / unroll;
        if (nblk > 0) {
            Label loop;
            mov(cnt, nblk);
            L(loop);
            for (int k = 0; k < unroll; ++k) body(k, k * vl, vl);
            add(idx, unroll * vl);
            dec(cnt);
            jnz(loop);
        }
        const int rem = static_cast<int>(nvec % unroll);
        for (int j = 0; j < rem; ++j) body(j, j * vl, vl);
        if (tail) body(rem % unroll, static_cast<int64_t>(rem) * vl, tail);

        for (int k = 1; k < unroll; ++k) {
            vaddps(acc2(0), acc2(0), acc2(k));
            if (ln) vaddps(acc1(0), acc1(0), acc1(k));
        }
        mov(cnt, ptr[p + offsetof(RowArgs, partial)]);
        vmovups(ptr[cnt + 64], acc2(0));
        if (ln) {
            vmovups(ptr[cnt], acc1(0));
            vmovups(ptr[cnt + 128], shift);
        }
        postamble();
        fn = finalize<RowFn>();
    }
    RowFn fn = nullptr;

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
};

class JitNormApply : public JitGenerator {
public:
    // wt: the dtype the weight / bias pointers hold (the kernel may pass f32 copies of bf16 ones).
    JitNormApply(const NormKernelDesc& kd, Isa isa, bool nt, DType wt) : JitGenerator(isa) {
        const Reg64 p = abi_param1, hp = rsi, y = rdx, w = rcx, b = r11, idx = r8, cnt = r9, tbl = r10, nx = rbx,
                    nr = rbp;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        const int vl = io.vlen();
        const int64_t n = kd.hidden, nvec = n / vl, tail = static_cast<int>(n % vl);
        const bool ln = kd.kind == NormKind::layer_norm;
        const DType ht = kd.fused_residual ? kd.residual_dtype : kd.x_dtype, yt = kd.y_dtype;
        const int hs = dtype_size(ht), ys = dtype_size(yt), ws = dtype_size(wt);
        const Xmm mean = V(12), rstd = V(13);

        const int xs = dtype_size(kd.x_dtype), rs = dtype_size(kd.residual_dtype);
        preamble({rbx, rbp});
        mov(nx, ptr[p + offsetof(RowArgs, next_x)]);
        if (kd.fused_residual) mov(nr, ptr[p + offsetof(RowArgs, next_r)]);
        mov(hp, ptr[p + offsetof(RowArgs, h)]);
        mov(y, ptr[p + offsetof(RowArgs, y)]);
        if (kd.has_weight) mov(w, ptr[p + offsetof(RowArgs, w)]);
        if (kd.has_bias) mov(b, ptr[p + offsetof(RowArgs, b)]);
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        if (ln) vbroadcastss(mean, ptr[p + offsetof(RowArgs, mean)]);
        vbroadcastss(rstd, ptr[p + offsetof(RowArgs, rstd)]);
        xor_(idx, idx);

        // While this row is normalised from the cache, the next row's inputs are fetched from
        // memory (one prefetch per 64-byte line of them), so that DRAM reads overlap this pass.
        auto prefetch_next = [&](const Reg64& base, int es, int64_t off, int count) {
            const int64_t first = off * es, last = (off + count) * es;  // bytes of this vector
            for (int64_t line = (first + 63) / 64 * 64; line < last; line += 64) prefetcht0(ptr[base + idx * es + line]);
        };
        // y = (h - mean) * rstd * w + b into V(k) (stored by `block`).
        auto body = [&](int k, int64_t off, int count) {
            const Xmm v = V(k), tw = V(4 + k), tb = V(8 + k);
            prefetch_next(nx, xs, off, count);
            if (kd.fused_residual) prefetch_next(nr, rs, off, count);
            io.load(v, hp + idx * hs + off * hs, ht, count);
            if (ln) vsubps(v, v, mean);
            vmulps(v, v, rstd);
            if (kd.has_weight) {
                if (wt == DType::f32 && count == vl) {
                    vmulps(v, v, ptr[w + idx * ws + off * ws]);
                } else {
                    io.load(tw, w + idx * ws + off * ws, wt, count);
                    vmulps(v, v, tw);
                }
            }
            if (kd.has_bias) {
                if (wt == DType::f32 && count == vl) {
                    vaddps(v, v, ptr[b + idx * ws + off * ws]);
                } else {
                    io.load(tb, b + idx * ws + off * ws, wt, count);
                    vaddps(v, v, tb);
                }
            }
        };
        // nv vectors from element idx + off (the last one `last` elements long), stored in pairs.
        auto block = [&](int nv, int64_t off, int last) {
            for (int k = 0; k < nv; ++k) body(k, off + k * vl, k == nv - 1 ? last : vl);
            for (int k = 0; k < nv; k += 2) {
                const int64_t o = off + k * vl;
                if (k + 1 < nv) io.store2(y + idx * ys + o * ys, V(k), V(k + 1), yt, vl + (k + 1 == nv - 1 ? last : vl), nt);
                else io.store(y + idx * ys + o * ys, V(k), yt, last, nt && last == vl);
            }
        };

        const int64_t nblk = nvec / kUnroll;
        if (nblk > 0) {
            Label loop;
            mov(cnt, nblk);
            L(loop);
            block(kUnroll, 0, vl);
            add(idx, kUnroll * vl);
            dec(cnt);
            jnz(loop);
        }
        const int rem = static_cast<int>(nvec % kUnroll);
        if (tail) block(rem + 1, 0, tail);
        else if (rem) block(rem, 0, vl);
        postamble();
        fn = finalize<RowFn>();
    }
    RowFn fn = nullptr;

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
};

class JitNormKernel final : public NormKernel {
public:
    JitNormKernel(const NormKernelDesc& kd, Isa isa)
        : kd_(kd),
          vlen_(isa >= Isa::avx512 ? 16 : 8),
          bf16_weights_((kd.has_weight || kd.has_bias) && kd.weight_dtype == DType::bf16),
          stats_(kd, isa),
          apply_{JitNormApply(kd, isa, false, kd.weight_dtype), JitNormApply(kd, isa, true, kd.weight_dtype)} {
        if (bf16_weights_) {
            apply_f32w_[0] = std::make_unique<JitNormApply>(kd, isa, false, DType::f32);
            apply_f32w_[1] = std::make_unique<JitNormApply>(kd, isa, true, DType::f32);
        }
    }

    void run(const NormDesc& d, const NormArgs& a, int64_t row_begin, int64_t row_end) const override {
        const int64_t n = d.hidden;
        const bool ln = d.kind == NormKind::layer_norm;
        // Streaming stores for y: a large output whose rows all start on the stored width.
        const int ys = dtype_size(d.y_dtype);
        const int64_t align = static_cast<int64_t>(vlen_) * ys;
        const bool nt = use_nt_stores(d.rows * n * ys) && reinterpret_cast<uintptr_t>(a.y) % align == 0 &&
                        (d.ld_y * ys) % align == 0 && n >= vlen_;
        RowFn apply = apply_[nt ? 1 : 0].fn;

        alignas(64) float part[3][16];
        RowArgs ra;
        ra.partial = &part[0][0];
        ra.w = a.weight;
        ra.b = a.bias;
        // bf16 weights are widened once per call when there are rows enough to repay it.
        if (bf16_weights_ && row_end - row_begin >= 2) {
            thread_local std::vector<float> wb;
            wb.resize(static_cast<size_t>(2 * n));
            if (d.has_weight) {
                load_f32(a.weight, DType::bf16, n, wb.data());
                ra.w = wb.data();
            }
            if (d.has_bias) {
                load_f32(a.bias, DType::bf16, n, wb.data() + n);
                ra.b = wb.data() + n;
            }
            apply = apply_f32w_[nt ? 1 : 0]->fn;
        }
        for (int64_t row = row_begin; row < row_end; ++row) {
            ra.x = elem_ptr(a.x, d.x_dtype, row * d.ld_x);
            if (d.fused_residual) {
                ra.r = elem_ptr(a.residual, d.residual_dtype, row * d.ld_residual);
                ra.ro = elem_ptr(a.residual_out, d.residual_dtype, row * d.ld_residual_out);
            }
            stats_.fn(&ra);
            double mean = 0.0, var = 0.0;
            if (ln) {
                // Lane j holds the elements i == j (mod vlen): count n_j, shifted sums S1, S2.
                double sum_nm = 0.0, m2 = 0.0, lane_mean[16];
                int64_t lane_n[16];
                for (int j = 0; j < vlen_; ++j) {
                    lane_n[j] = n > j ? (n - 1 - j) / vlen_ + 1 : 0;
                    if (lane_n[j] == 0) continue;
                    const double nj = static_cast<double>(lane_n[j]), s1 = part[0][j], s2 = part[1][j];
                    lane_mean[j] = static_cast<double>(part[2][j]) + s1 / nj;
                    m2 += std::max(0.0, s2 - s1 * s1 / nj);
                    sum_nm += nj * lane_mean[j];
                }
                mean = sum_nm / static_cast<double>(n);
                for (int j = 0; j < vlen_; ++j) {
                    if (lane_n[j] == 0) continue;
                    const double dm = lane_mean[j] - mean;
                    m2 += static_cast<double>(lane_n[j]) * dm * dm;
                }
                var = m2 / static_cast<double>(n);
            } else {
                double ss = 0.0;
                for (int j = 0; j < vlen_; ++j) ss += part[1][j];
                var = ss / static_cast<double>(n);
            }
            ra.mean = static_cast<float>(mean);
            ra.rstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(d.eps)));
            ra.h = d.fused_residual ? static_cast<const void*>(ra.ro) : ra.x;
            const int64_t next = row + 1 < row_end ? row + 1 : row;
            ra.next_x = elem_ptr(a.x, d.x_dtype, next * d.ld_x);
            if (d.fused_residual) ra.next_r = elem_ptr(a.residual, d.residual_dtype, next * d.ld_residual);
            ra.y = elem_ptr(a.y, d.y_dtype, row * d.ld_y);
            apply(&ra);
        }
        if (nt) _mm_sfence();  // order the streaming stores before the caller's synchronisation
    }

private:
    NormKernelDesc kd_;
    int vlen_;
    bool bf16_weights_;
    JitNormStats stats_;
    JitNormApply apply_[2];                        // [nt], weights as given
    std::unique_ptr<JitNormApply> apply_f32w_[2];  // [nt], f32 copies of bf16 weights
};

}  // namespace

std::shared_ptr<const NormKernel> create_jit_norm(const NormKernelDesc& kd, Isa isa) {
    return std::make_shared<JitNormKernel>(kd, isa);
}

}  // namespace xk::detail
