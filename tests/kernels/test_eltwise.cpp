// axpby / scale: every ISA variant against the reference, odd sizes, misaligned pointers,
// in-place, beta == 0 semantics, bad input.
#include <limits>

#include "common/test_util.hpp"
#include "kernels/eltwise/eltwise.hpp"
#include "xk/eltwise.hpp"
#include "xk/runtime.hpp"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

// fp32 tolerance: one FMA vs multiply+add can differ by 1 ulp of each product.
constexpr double kAtol = 1e-6, kRtol = 1e-6;

TEST(Axpby, EveryIsaMatchesReference) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            for (int64_t n : {1, 2, 7, 8, 15, 16, 17, 31, 33, 63, 64, 65, 127, 1023, 4097, 200003}) {
                for (size_t mis : {0, 4, 12}) {
                    Buffer<float> x(n, mis), y(n, (mis + 4) % 16), want(n);
                    test::fill_uniform(x.data(), n, -2, 2, 1 + n);
                    test::fill_uniform(y.data(), n, -2, 2, 2 + n);
                    std::copy(y.begin(), y.end(), want.begin());
                    detail::axpby_reference(n, 1.5f, x.data(), -0.75f, want.data());
                    axpby(n, 1.5f, x.data(), -0.75f, y.data());
                    ASSERT_TRUE(test::all_close(y.data(), want.data(), n, kAtol, kRtol))
                        << "n=" << n << " misalign=" << mis << " threads=" << threads;
                }
            }
            // The selected implementation is the one of this ISA level.
            const auto& impl = detail::axpby_registry().select(detail::AxpbyDesc{}, isa);
            EXPECT_EQ(impl.isa, isa >= Isa::avx512 ? Isa::avx512 : isa);
        });
    }
    set_num_threads(0);
}

TEST(Axpby, TailDoesNotTouchMemoryPastTheEnd) {
    for_each_isa([&](Isa) {
        for (int64_t n = 1; n <= 40; ++n) {
            Buffer<float> x(n + 16), y(n + 16);
            test::fill_uniform(x.data(), n + 16, -1, 1, n);
            for (int64_t i = 0; i < n + 16; ++i) y[i] = 1000.0f + i;
            axpby(n, 2.0f, x.data(), 1.0f, y.data());
            for (int64_t i = n; i < n + 16; ++i) ASSERT_EQ(y[i], 1000.0f + i) << "n=" << n << " wrote past end at " << i;
            for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 2.0f * x[i] + 1000.0f + i);
        }
    });
}

TEST(Axpby, BetaZeroIgnoresGarbageAndInPlaceWorks) {
    for_each_isa([&](Isa) {
        const int64_t n = 77;
        Buffer<float> x(n), y(n);
        test::fill_uniform(x.data(), n, -1, 1, 9);
        for (int64_t i = 0; i < n; ++i) y[i] = std::numeric_limits<float>::quiet_NaN();
        scale(n, 3.0f, x.data(), y.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 3.0f * x[i]);
        scale(n, 0.5f, y.data(), y.data());  // in place
        for (int64_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], 1.5f * x[i]);
        // beta = NaN is not "zero": y is read and the result is NaN.
        axpby(n, 1.0f, x.data(), std::numeric_limits<float>::quiet_NaN(), y.data());
        for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isnan(y[i]));
    });
}

TEST(Axpby, BadInput) {
    float a[8] = {}, b[8] = {};
    XK_EXPECT_INVALID(axpby(-1, 1, a, 1, b), "n=-1 must be >= 0");
    XK_EXPECT_INVALID(axpby(4, 1, nullptr, 1, b), "x=null");
    XK_EXPECT_INVALID(axpby(4, 1, a, 1, nullptr), "y=null");
    XK_EXPECT_INVALID(axpby(4, 1, a, 1, a + 1), "partially overlaps");
    XK_EXPECT_INVALID(axpby(std::numeric_limits<int64_t>::max() / 2, 1, a, 1, b), "overflows");
    axpby(0, 1, nullptr, 1, nullptr);  // n == 0 is a no-op, pointers unused
}
