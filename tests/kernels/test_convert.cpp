// Conversions f32 <-> bf16 <-> f16: the scalar oracle (xk::f16) against an independent definition
// (exhaustive over the halves, nearest-value checks for floats); every ISA's kernels bit for bit
// against the oracle over every f16 pattern, random f32 bit patterns (NaN payloads, denormals,
// ties, overflow), odd n 1..1023 with misaligned pointers and a guard past the end, 2-D strides,
// 1 and 2 threads; bad input (C++ and C API). Tolerance: none (bit for bit everywhere).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/convert/convert.hpp"
#include "xk/convert.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;

namespace {

const DType kTypes[] = {DType::f32, DType::bf16, DType::f16};

bool is_nan_bits(DType t, uint32_t b) {
    if (t == DType::f32) return (b & 0x7fffffffu) > 0x7f800000u;
    if (t == DType::bf16) return (b & 0x7fffu) > 0x7f80u;
    return (b & 0x7fffu) > 0x7c00u;
}

// Random bit patterns of type t, a quarter of them special (zeros, denormals, infinities, NaNs
// with payloads, values at rounding ties of the narrower types, overflow to f16 inf).
std::vector<unsigned char> conv_data(DType t, int64_t n, uint64_t seed) {
    std::mt19937_64 g(seed);
    const int es = dtype_size(t);
    std::vector<unsigned char> v(static_cast<size_t>(n) * es);
    static const uint32_t f32_special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u,
                                           0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fffffffu, 0x3f808000u, 0x3f818000u,
                                           0x3f800fffu, 0x3f801000u, 0x3f803000u, 0x477ff000u, 0x477fefffu, 0x47800000u,
                                           0x33000000u, 0x33000001u, 0x387fc000u, 0x38800000u, 0x37800000u, 0x7f7fffffu,
                                           0x7f7f8000u, 0x00800000u, 0x0001ffffu};
    for (int64_t i = 0; i < n; ++i) {
        uint32_t b = static_cast<uint32_t>(g());
        if (t == DType::f32) {
            if (g() % 4 == 0) b = f32_special[g() % std::size(f32_special)];
            else if (g() % 2) b = (b & 0x80000000u) | ((0x67u + g() % 32) << 23) | (b & 0x7fffffu);  // f16 range
            std::memcpy(&v[i * 4], &b, 4);
        } else {
            const uint16_t h = static_cast<uint16_t>(b);
            std::memcpy(&v[i * 2], &h, 2);
        }
    }
    return v;
}

uint32_t bits_at(DType t, const void* p, int64_t i) {
    if (t == DType::f32) {
        uint32_t b;
        std::memcpy(&b, static_cast<const char*>(p) + 4 * i, 4);
        return b;
    }
    uint16_t h;
    std::memcpy(&h, static_cast<const char*>(p) + 2 * i, 2);
    return h;
}

}  // namespace

// xk::f16 against the definition: every half decodes to (-1)^s m 2^(e-25) exactly, NaNs to quiet
// NaNs; and back to the same bits (NaNs: made quiet).
TEST(Convert, F16OracleExhaustive) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = f16::to_float(static_cast<uint16_t>(h));
        const uint32_t e = (h >> 10) & 31, m = h & 0x3ff;
        const double sign = (h & 0x8000) ? -1.0 : 1.0;
        if (e == 31) {
            if (m == 0) {
                ASSERT_EQ(f, sign * std::numeric_limits<float>::infinity()) << h;
            } else {
                ASSERT_TRUE(std::isnan(f)) << h;
                uint32_t u;
                std::memcpy(&u, &f, 4);
                ASSERT_TRUE(u & 0x400000u) << "quiet " << h;
                ASSERT_EQ(f16::from_float(f), h | 0x200u) << h;
            }
            continue;
        }
        const double want = sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25));
        ASSERT_EQ(static_cast<double>(f), want) << h;
        ASSERT_TRUE(std::signbit(f) == ((h & 0x8000) != 0)) << h;
        ASSERT_EQ(f16::from_float(f), h) << h;
    }
}

// f32 -> f16 rounds to the nearest half, ties to even, overflow at 65520 to inf.
TEST(Convert, F16OracleNearestEven) {
    std::vector<unsigned char> data = conv_data(DType::f32, 200000, 3);
    for (size_t i = 0; i < data.size() / 4; ++i) {
        float x;
        std::memcpy(&x, &data[4 * i], 4);
        const uint16_t h = f16::from_float(x);
        if (std::isnan(x)) {
            ASSERT_TRUE(is_nan_bits(DType::f16, h));
            continue;
        }
        const double ax = std::fabs(static_cast<double>(x));
        ASSERT_EQ((h & 0x8000) != 0, std::signbit(x));
        const uint16_t mag = h & 0x7fff;
        if (ax >= 65520.0) {
            ASSERT_EQ(mag, 0x7c00) << x;
            continue;
        }
        ASSERT_LT(mag, 0x7c00) << x;
        const double got = f16::to_float(mag);
        const double err = std::fabs(got - ax);
        for (int d : {-1, 1}) {
            const int nb = mag + d;
            if (nb < 0 || nb >= 0x7c00) continue;
            const double other = std::fabs(std::fabs(static_cast<double>(f16::to_float(static_cast<uint16_t>(nb)))) - ax);
            ASSERT_LE(err, other) << "x=" << x << " h=" << h;
            if (err == other) ASSERT_EQ(mag & 1, 0) << "tie to even, x=" << x;
        }
    }
}

// Every ISA's kernel against the oracle, bit for bit: all 65536 halves and bf16s, and random f32
// patterns, every type pair; odd lengths and misalignment; nothing written past n.
TEST(Convert, EveryIsaBitExactWithOracle) {
  for (int64_t nt_threshold : {int64_t{-1}, int64_t{0}}) {  // default, then streaming stores always
    detail::set_nt_store_threshold(nt_threshold);
    SCOPED_TRACE("nt threshold " + std::to_string(nt_threshold));
    for_each_isa([&](Isa isa) {
        for (DType st : kTypes)
            for (DType dt : kTypes) {
                const int ss = dtype_size(st), ds = dtype_size(dt);
                // all patterns (16-bit sources) or 100000 random ones
                int64_t n = st == DType::f32 ? 100000 : 65536;
                std::vector<unsigned char> src = conv_data(st, n, 11 + static_cast<int>(st));
                if (st != DType::f32)
                    for (int64_t i = 0; i < n; ++i) {
                        const uint16_t h = static_cast<uint16_t>(i);
                        std::memcpy(&src[2 * i], &h, 2);
                    }
                std::vector<unsigned char> got(n * ds + 64, 0xA5), want(n * ds + 64, 0xA5);
                convert(n, st, src.data(), dt, got.data());
                detail::convert_scalar(n, st, src.data(), dt, want.data());
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(bits_at(dt, got.data(), i), bits_at(dt, want.data(), i))
                        << dtype_name(st) << "->" << dtype_name(dt) << " impl " << detail::convert_impl(st, dt, isa).name
                        << " src bits 0x" << std::hex << bits_at(st, src.data(), i);
                ASSERT_EQ(std::memcmp(got.data() + n * ds, want.data() + n * ds, 64), 0);
                // odd lengths, misaligned by an element, guard bytes after the end
                for (int64_t m = 1; m <= 1023; m += (m < 80 ? 1 : 37)) {
                    for (int mis : {0, 1, 3}) {
                        test::Buffer<unsigned char> s(static_cast<size_t>(m + 8) * ss, static_cast<size_t>(mis * ss));
                        test::Buffer<unsigned char> d(static_cast<size_t>(m + 8) * ds, static_cast<size_t>(mis * ds));
                        std::memcpy(s.data(), src.data() + (m * 7 % 1000) * ss, static_cast<size_t>(m) * ss);
                        std::memset(d.data(), 0xA5, static_cast<size_t>(m + 8) * ds);
                        convert(m, st, s.data(), dt, d.data());
                        std::vector<unsigned char> w(static_cast<size_t>(m) * ds);
                        detail::convert_scalar(m, st, s.data(), dt, w.data());
                        ASSERT_EQ(std::memcmp(d.data(), w.data(), w.size()), 0) << "n=" << m << " mis=" << mis;
                        for (size_t b = static_cast<size_t>(m) * ds; b < static_cast<size_t>(m + 8) * ds; ++b)
                            ASSERT_EQ(d.data()[b], 0xA5) << "written past n=" << m;
                    }
                }
            }
    });
  }
  detail::set_nt_store_threshold(-1);
}

TEST(Convert, TypedFormsAndSpecials) {
    for_each_isa([&](Isa) {
        const float inf = std::numeric_limits<float>::infinity();
        const std::vector<float> x = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65520.0f, -1e6f, inf, -inf, 1e-8f, 6e-8f,
                                      2.98023223876953125e-8f /*2^-25: tie -> 0*/, 1.00048828125f /*1 + 2^-11: f16 tie -> 1*/, 1.00146484375f /*tie -> up*/,
                                      std::numeric_limits<float>::quiet_NaN(), 1e-40f};
        std::vector<f16> h(x.size());
        std::vector<bf16> b(x.size());
        convert(static_cast<int64_t>(x.size()), x.data(), h.data());
        convert(static_cast<int64_t>(x.size()), x.data(), b.data());
        const std::vector<uint16_t> want_h = {0x0000, 0x8000, 0x3c00, 0xc100, 0x7bff, 0x7c00, 0xfc00, 0x7c00, 0xfc00,
                                              0x0000, 0x0001, 0x0000, 0x3c00, 0x3c02, 0x7e00, 0x0000};
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(h[i].bits, want_h[i]) << "x=" << x[i];
            EXPECT_EQ(b[i].bits, bf16::from_float(x[i])) << "x=" << x[i];
        }
        EXPECT_NE(b.back().bits, 0) << "bf16 keeps the f32 denormal 1e-40";
        std::vector<float> back(x.size());
        convert(static_cast<int64_t>(x.size()), h.data(), back.data());
        EXPECT_EQ(back[4], 65504.0f);
        EXPECT_EQ(back[10], 5.9604644775390625e-8f);
        EXPECT_TRUE(std::isnan(back[14]));
        std::vector<bf16> hb(x.size());
        convert(static_cast<int64_t>(x.size()), h.data(), hb.data());
        std::vector<f16> bh(x.size());
        convert(static_cast<int64_t>(x.size()), b.data(), bh.data());
        for (size_t i = 0; i < x.size(); ++i) {
            EXPECT_EQ(hb[i].bits, bf16::from_float(f16::to_float(h[i].bits)));
            EXPECT_EQ(bh[i].bits, f16::from_float(bf16::to_float(b[i].bits)));
        }
        std::vector<float> fb(x.size());
        convert(static_cast<int64_t>(x.size()), b.data(), fb.data());
        for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits_at(DType::f32, &fb[i], 0), static_cast<uint32_t>(b[i].bits) << 16);
    });
}

TEST(Convert, StridedAndThreads) {
    const int64_t rows = 37, cols = 301, lds = 311, ldd = 305;
    for (DType st : kTypes)
        for (DType dt : kTypes) {
            const std::vector<unsigned char> src = conv_data(st, rows * lds, 5);
            std::vector<unsigned char> want(rows * ldd * dtype_size(dt), 0x5A);
            for (int64_t r = 0; r < rows; ++r)
                detail::convert_scalar(cols, st, src.data() + r * lds * dtype_size(st), dt,
                                       want.data() + r * ldd * dtype_size(dt));
            for (int threads : {1, 2}) {
                set_num_threads(threads);
                std::vector<unsigned char> got(want.size(), 0x5A);
                convert_2d(rows, cols, st, src.data(), lds, dt, got.data(), ldd);
                ASSERT_EQ(got, want) << dtype_name(st) << "->" << dtype_name(dt) << " threads=" << threads;
                // a long contiguous run, split over the threads
                const int64_t n = 300001;
                const std::vector<unsigned char> big = conv_data(st, n, 9);
                std::vector<unsigned char> g1(n * dtype_size(dt)), w1(n * dtype_size(dt));
                convert(n, st, big.data(), dt, g1.data());
                detail::convert_scalar(n, st, big.data(), dt, w1.data());
                ASSERT_EQ(g1, w1) << dtype_name(st) << "->" << dtype_name(dt) << " threads=" << threads;
            }
        }
    set_num_threads(0);
}

TEST(Convert, BadInput) {
    std::vector<float> f(64, 1.0f);
    std::vector<uint16_t> h(64, 0x3c00);
    const std::vector<uint16_t> h0 = h;
    XK_EXPECT_INVALID(convert(-1, DType::f32, f.data(), DType::f16, h.data()), "xk::convert: n=-1");
    XK_EXPECT_INVALID(convert(4, DType::f32, nullptr, DType::f16, h.data()), "src=null");
    XK_EXPECT_INVALID(convert(4, DType::f32, f.data(), DType::f16, nullptr), "dst=null");
    convert(0, DType::f32, nullptr, DType::f16, nullptr);  // empty: nothing read
    XK_EXPECT_ERROR(convert(4, DType::u8, f.data(), DType::f16, h.data()), Status::unsupported, "src_type=u8 is not supported");
    XK_EXPECT_ERROR(convert(4, DType::f32, f.data(), DType::s32, h.data()), Status::unsupported, "dst_type=s32");
    XK_EXPECT_INVALID(convert(4, static_cast<DType>(77), f.data(), DType::f16, h.data()), "src_type=77 is not a valid DType");
    // overlap: dst's bytes shared with src
    XK_EXPECT_INVALID(convert(8, DType::bf16, h.data(), DType::f16, h.data() + 3), "overlaps src=");
    XK_EXPECT_INVALID(convert(8, DType::f32, f.data(), DType::bf16, reinterpret_cast<uint16_t*>(f.data()) + 15), "overlaps src=");
    XK_EXPECT_INVALID(convert_2d(2, 8, DType::f32, f.data(), 7, DType::f16, h.data(), 0), "ld_src=7");
    EXPECT_EQ(h, h0);  // nothing written by a rejected call
    // C API
    EXPECT_EQ(xk_convert(4, XK_DTYPE_F32, f.data(), XK_DTYPE_F16, h.data()), XK_SUCCESS);
    EXPECT_EQ(h[0], 0x3c00);
    EXPECT_EQ(xk_convert(-2, XK_DTYPE_F32, f.data(), XK_DTYPE_F16, h.data()), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("n=-2"), std::string::npos);
    EXPECT_EQ(xk_convert(4, XK_DTYPE_S8, f.data(), XK_DTYPE_F16, h.data()), XK_UNSUPPORTED);
    EXPECT_EQ(xk_convert(4, static_cast<xk_dtype>(1000), f.data(), XK_DTYPE_F16, h.data()), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_convert_2d(2, 3, XK_DTYPE_F16, h.data(), 3, XK_DTYPE_F32, f.data(), 4), XK_SUCCESS);
    EXPECT_EQ(f[0], 1.0f);
    EXPECT_EQ(xk_convert_2d(2, 3, XK_DTYPE_BF16, h.data(), 2, XK_DTYPE_F32, f.data(), 4), XK_INVALID_ARGUMENT);
}
