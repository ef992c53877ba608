// JitIo's even / odd bf16 path (src/kernels/common/jit_io.hpp), per ISA, with its constants taken
// from the table and from registers (set_eo_regs): a small JIT harness sums two bf16 arrays pair by
// pair (load2_eo, VADDPS), stores the sum rounded to nearest even and keeps it (round2_eo_keep),
// scales the kept sum by 0.75 and stores that rounded to nearest with ties away (store2_eo_away).
// Both outputs are compared bit for bit with a scalar model (xk::bf16 for the first; + 0x8000 on
// the bits for the second), and the two constant sources must give the same bits. The data
// holds ties of both roundings (sums of bf16 values of nearby exponents), +-0, denormals, +-inf,
// the largest finite values (their sums overflow to inf) and NaNs (bf16 payloads: the
// precondition of both roundings). set_eo_regs rejects JitIo's scratch registers and a register
// named twice.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/test_util.hpp"
#include "dispatch/jit_generator.hpp"
#include "kernels/common/jit_io.hpp"

using namespace xk;
using detail::JitIo;

namespace {

// void fn(const bf16* a, const bf16* b, bf16* sum, bf16* scaled, int64_t npairs) (a pair: 2 vlen)
using HarnessFn = void (*)(const uint16_t*, const uint16_t*, uint16_t*, uint16_t*, int64_t);

const float kScale = 0.75f;

class Harness : public detail::JitGenerator {
public:
    Harness(Isa isa, bool regs) : JitGenerator(isa) {
        using namespace Xbyak;
        const bool z = isa >= Isa::avx512;
        auto V = [&](int i) -> Xmm { return z ? Xmm(Zmm(i)) : Xmm(Ymm(i)); };
        const Reg64 a = abi_param1, b = abi_param2, sum = abi_param3, scaled = abi_param4, n = abi_param5, tbl = r10,
                    tmp = r11;
        preamble();
        mov(tbl, reinterpret_cast<uintptr_t>(JitIo::table()));
        JitIo io(*this, isa, tbl, {V(14), V(15), k1, rax});
        vlen_ = io.vlen();
        mov(tmp, reinterpret_cast<uintptr_t>(&kScale));
        vbroadcastss(V(5), ptr[tmp]);
        if (regs) io.set_eo_regs(8, 9, 10, 11);
        Label loop, done;
        test(n, n);
        jz(done);
        L(loop);
        io.load2_eo(V(0), V(1), a);
        io.load2_eo(V(2), V(3), b);
        vaddps(V(0), V(0), V(2));
        vaddps(V(1), V(1), V(3));
        io.round2_eo_keep(sum, V(0), V(1), V(4));
        vmulps(V(0), V(0), V(5));
        vmulps(V(1), V(1), V(5));
        io.store2_eo_away(scaled, V(0), V(1));
        add(a, io.vbytes());
        add(b, io.vbytes());
        add(sum, io.vbytes());
        add(scaled, io.vbytes());
        dec(n);
        jnz(loop);
        L(done);
        if (regs) io.clear_eo_regs();
        postamble();
        fn = finalize<HarnessFn>();
    }
    HarnessFn fn = nullptr;
    int vlen() const { return vlen_; }

private:
    int vlen_ = 0;
};

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
uint16_t round_away(float f) { return static_cast<uint16_t>((bits_of(f) + 0x8000u) >> 16); }

// a / b operands: random values of nearby exponents (sums with ties), and special values.
void make_data(size_t n, std::vector<uint16_t>& a, std::vector<uint16_t>& b) {
    auto& g = test::rng();
    std::uniform_int_distribution<int> man(0, 127), ex(-3, 3), sgn(0, 1), kind(0, 15);
    const float specials[] = {0.0f, -0.0f, 1e-40f, -3e-39f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), 3.3895314e38f, -3.3895314e38f,
                              std::numeric_limits<float>::quiet_NaN(), 1.0f, 65280.0f};
    a.resize(n);
    b.resize(n);
    for (size_t i = 0; i < n; ++i) {
        for (uint16_t* v : {&a[i], &b[i]}) {
            if (kind(g) == 0) {
                *v = bf16(specials[static_cast<size_t>(g() % (sizeof(specials) / sizeof(specials[0])))]).bits;
            } else {
                const float m = 1.0f + static_cast<float>(man(g)) / 128.0f;
                *v = bf16((sgn(g) ? -1.0f : 1.0f) * std::ldexp(m, ex(g))).bits;
            }
        }
    }
}

}  // namespace

TEST(JitIo, EvenOddRoundingsWithConstantsFromTableOrRegisters) {
    int checked = 0;
    test::for_each_isa([&](Isa isa) {
        if (isa < Isa::avx2) return;
        const Harness table_h(isa, false), regs_h(isa, true);
        const int pair = 2 * table_h.vlen();
        const int64_t npairs = 257;
        const size_t n = static_cast<size_t>(npairs * pair);
        std::vector<uint16_t> a, b;
        make_data(n, a, b);
        std::vector<uint16_t> s1(n), s2(n), y1(n), y2(n);
        table_h.fn(a.data(), b.data(), s1.data(), y1.data(), npairs);
        regs_h.fn(a.data(), b.data(), s2.data(), y2.data(), npairs);
        int ties = 0;
        for (size_t i = 0; i < n; ++i) {
            const float exact = bf16::from_bits(a[i]).to_float() + bf16::from_bits(b[i]).to_float();
            const uint16_t want_sum = bf16(exact).bits;
            const float kept = bf16::from_bits(want_sum).to_float() * kScale;
            if ((bits_of(exact) & 0xffffu) == 0x8000u) ++ties;
            for (const auto* s : {&s1, &s2}) {
                if (std::isnan(exact)) {
                    ASSERT_TRUE(std::isnan(bf16::from_bits((*s)[i]).to_float())) << "element " << i;
                } else {
                    ASSERT_EQ((*s)[i], want_sum) << "element " << i << ": " << bf16::from_bits(a[i]).to_float() << " + "
                                                 << bf16::from_bits(b[i]).to_float();
                }
            }
            for (const auto* y : {&y1, &y2}) {
                if (std::isnan(kept)) ASSERT_TRUE(std::isnan(bf16::from_bits((*y)[i]).to_float())) << "element " << i;
                else ASSERT_EQ((*y)[i], round_away(kept)) << "element " << i << ": " << kept;
            }
            ASSERT_EQ(s1[i], s2[i]) << "element " << i;
            ASSERT_EQ(y1[i], y2[i]) << "element " << i;
            ++checked;
        }
        EXPECT_GT(ties, 50) << "the data should hold ties of the sum's rounding";
    });
    EXPECT_GT(checked, 0);
}

TEST(JitIo, SetEoRegsRejectsScratchAndRepeatedRegisters) {
    if (max_isa() < Isa::avx2) GTEST_SKIP() << "no AVX2 here";
    using namespace Xbyak;
    class Gen : public detail::JitGenerator {
    public:
        Gen() : JitGenerator(Isa::avx2) {}
        void check() {
            JitIo io(*this, Isa::avx2, r10, {Ymm(14), Ymm(15), k1, rax});
            EXPECT_THROW(io.set_eo_regs(14, -1), xk::Error);
            EXPECT_THROW(io.set_eo_regs(8, 15), xk::Error);
            EXPECT_THROW(io.set_eo_regs(8, 9, 8), xk::Error);
            EXPECT_THROW(io.set_eo_regs(-1, 9, 10, 9), xk::Error);
            EXPECT_NO_THROW(io.set_eo_regs(8, 9, 10, 11));
            EXPECT_NO_THROW(io.set_eo_regs(-1, -1));
            io.clear_eo_regs();
        }
    };
    Gen g;
    g.check();
}
