// gtest main: prints the machine's ISA list first and, at exit, the ISAs the sweeps exercised,
// so a CI log shows what was covered.
#include <cstdio>

#include "common/test_util.hpp"
#include "xk/runtime.hpp"

namespace xk::test {
std::set<Isa>& exercised_isas() {
    static std::set<Isa> s;
    return s;
}
}  // namespace xk::test

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);
    std::string avail;
    for (xk::Isa i : xk::available_isas()) avail += std::string(" ") + xk::isa_name(i);
    std::printf("[xk] machine: %s; hardware ISA %s; available:%s; threads %d (%s)\n",
                xk::cpu_info().brand.c_str(), xk::isa_name(xk::hardware_isa()), avail.c_str(),
                xk::get_num_threads(), xk::threading_backend());
    const int rc = RUN_ALL_TESTS();
    std::string ex;
    for (xk::Isa i : xk::test::exercised_isas()) ex += std::string(" ") + xk::isa_name(i);
    std::printf("[xk] ISAs exercised by the sweeps:%s\n", ex.empty() ? " (none)" : ex.c_str());
    return rc;
}
