// C API core: status codes, per-thread last error, ISA functions.
#include <thread>

#include "common/test_util.hpp"
#include "xk/xk.h"

TEST(CApi, AxpbyAndErrors) {
    float x[3] = {1, 2, 3}, y[3] = {1, 1, 1};
    ASSERT_EQ(xk_axpby(3, 2.0f, x, 1.0f, y), XK_SUCCESS);
    EXPECT_EQ(y[2], 7.0f);
    EXPECT_STREQ(xk_last_error(), "");
    EXPECT_EQ(xk_axpby(-1, 1.0f, x, 1.0f, y), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("n=-1"), std::string::npos);
    EXPECT_EQ(xk_axpby(3, 1.0f, nullptr, 1.0f, y), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("x=null"), std::string::npos);
    // The message is per thread.
    std::string other;
    std::thread([&] { other = xk_last_error(); }).join();
    EXPECT_EQ(other, "");
}

TEST(CApi, Isa) {
    xk_isa isa;
    ASSERT_EQ(xk_get_max_isa(&isa), XK_SUCCESS);
    EXPECT_EQ(static_cast<int>(isa), static_cast<int>(xk::max_isa()));
    EXPECT_STREQ(xk_isa_name(XK_ISA_AVX2), "avx2");
    EXPECT_EQ(xk_get_max_isa(nullptr), XK_INVALID_ARGUMENT);
    ASSERT_EQ(xk_set_max_isa(XK_ISA_SCALAR), XK_SUCCESS);
    xk_get_max_isa(&isa);
    EXPECT_EQ(isa, XK_ISA_SCALAR);
    xk::reset_max_isa();
    if (xk::hardware_isa() != xk::Isa::amx) {
        EXPECT_EQ(xk_set_max_isa(XK_ISA_AMX), XK_ISA_UNAVAILABLE);
        EXPECT_NE(std::string(xk_last_error()).find("amx"), std::string::npos);
    }
    EXPECT_EQ(xk_set_num_threads(-2), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_set_num_threads(0), XK_SUCCESS);
}
