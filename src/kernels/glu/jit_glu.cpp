// xbyak generator of GLU rows (y = act(gate) * up) for AVX2 (ymm) and AVX-512 (zmm; AVX512-BF16
// stores at the avx512_bf16 level), specialised on (activation, inner, dtypes). The activation is
// the shared vectorised injector (kernels/common/jit_activation.hpp); two vectors per iteration
// with separate scratch registers so their exp / division chains overlap. The whole row range is
// one call. Outputs larger than nt_store_threshold() are written with non-temporal stores when
// every row of y is aligned.
#include <immintrin.h>

#include <cstdint>

#include "common/streaming.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_activation.hpp"
#include "kernels/common/jit_io.hpp"
#include "kernels/glu/glu.hpp"

namespace xk::detail {
namespace {

using namespace Xbyak;

struct Args {
    const void* x = nullptr;  // 0   first row
    void* y = nullptr;        // 8
    int64_t rows = 0;         // 16  >= 1
    int64_t ld_x = 0;         // 24  bytes
    int64_t ld_y = 0;         // 32  bytes
};
using GluFn = void (*)(const Args*);

constexpr int kUnroll = 2;

class JitGlu : public JitGenerator {
public:
    JitGlu(const GluKernelDesc& kd, Isa isa, bool nt) : JitGenerator(isa) {
        const Reg64 a = abi_param1, x = rsi, y = rdx, rows = rcx, idx = r8, cnt = r9, tbl = r10, act_tbl = r11,
                    up = rbx;
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        JitActivation act(*this, isa, k2);
        const bool has_act = kd.activation != Activation::none;
        const JitFn f = has_act ? jit_fn(kd.activation) : JitFn::relu;
        const int vl = io.vlen();
        const int64_t n = kd.inner, nvec = n / vl;
        const int tail = static_cast<int>(n % vl);
        const DType xt = kd.x_dtype, yt = kd.y_dtype;
        const int xs = dtype_size(xt), ys = dtype_size(yt);

        preamble({rbx});
        mov(x, ptr[a + offsetof(Args, x)]);
        mov(y, ptr[a + offsetof(Args, y)]);
        mov(rows, ptr[a + offsetof(Args, rows)]);
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        if (has_act) mov(act_tbl, reinterpret_cast<uintptr_t>(JitActivation::table()));

        // act(gate) * up into V(6k).
        auto body = [&](int k, int64_t off, int count) {
            const int b = k * 6;
            const Xmm g = V(b), u = V(b + 1);
            const std::vector<Xmm> s = {V(b + 2), V(b + 3), V(b + 4), V(b + 5)};
            io.load(g, x + idx * xs + off * xs, xt, count);
            if (has_act) act.apply(f, g, s, act_tbl);
            if (xt == DType::f32 && count == vl) {
                vmulps(g, g, ptr[up + idx * xs + off * xs]);
            } else {
                io.load(u, up + idx * xs + off * xs, xt, count);
                vmulps(g, g, u);
            }
        };
        // nv (1 or 2) vectors from element idx + off, the last `last` elements long, stored as a pair.
        auto block = [&](int nv, int64_t off, int last) {
            for (int k = 0; k < nv; ++k) body(k, off + k * vl, k == nv - 1 ? last : vl);
            if (nv == 2) io.store2(y + idx * ys + off * ys, V(0), V(6), yt, vl + last, nt);
            else io.store(y + idx * ys + off * ys, V(0), yt, last, nt && last == vl);
        };

        Label row_loop;
        L(row_loop);
        mov(up, n * xs);
        add(up, x);
        xor_(idx, idx);
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
        const int rem = static_cast<int>(nvec % kUnroll);  // 0 or 1
        if (tail) block(rem + 1, 0, tail);
        else if (rem) block(1, 0, vl);
        add(x, ptr[a + offsetof(Args, ld_x)]);
        add(y, ptr[a + offsetof(Args, ld_y)]);
        dec(rows);
        jnz(row_loop);
        postamble();
        fn = finalize<GluFn>();
    }
    GluFn fn = nullptr;

private:
    Xmm V(int i) const { return isa() >= Isa::avx512 ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
};

class JitGluKernel final : public GluKernel {
public:
    JitGluKernel(const GluKernelDesc& kd, Isa isa)
        : vlen_(isa >= Isa::avx512 ? 16 : 8), gen_(kd, isa, false), gen_nt_(kd, isa, true) {}

    void run(const GluDesc& d, const GluArgs& a, int64_t row_begin, int64_t row_end) const override {
        if (row_end <= row_begin) return;
        const int xs = dtype_size(d.x_dtype), ys = dtype_size(d.y_dtype);
        const int64_t align = static_cast<int64_t>(vlen_) * ys;
        // Streaming stores: a large output, every row aligned, and not in place (y is x's memory).
        const bool nt = use_nt_stores(d.rows * d.inner * ys) && a.y != a.x &&
                        reinterpret_cast<uintptr_t>(a.y) % align == 0 && (d.ld_y * ys) % align == 0 && d.inner >= vlen_;
        Args args;
        args.x = static_cast<const char*>(a.x) + row_begin * d.ld_x * xs;
        args.y = static_cast<char*>(a.y) + row_begin * d.ld_y * ys;
        args.rows = row_end - row_begin;
        args.ld_x = d.ld_x * xs;
        args.ld_y = d.ld_y * ys;
        (nt ? gen_nt_ : gen_).fn(&args);
        if (nt) _mm_sfence();
    }

private:
    int vlen_;
    JitGlu gen_, gen_nt_;
};

}  // namespace

std::shared_ptr<const GluKernel> create_jit_glu(const GluKernelDesc& kd, Isa isa) {
    return std::make_shared<JitGluKernel>(kd, isa);
}

}  // namespace xk::detail
