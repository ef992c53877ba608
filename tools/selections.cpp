#include "tools/selections.hpp"

#include "kernels/eltwise/eltwise.hpp"
#include "xk/isa.hpp"

namespace xk::tools {

namespace {
template <class Reg, class Desc>
Selection pick(const char* family, const Reg& reg, const Desc& d) {
    try {
        return {family, d.key(), reg.select(d, max_isa()).name};
    } catch (const std::exception& e) {
        return {family, d.key(), std::string("none (") + e.what() + ")"};
    }
}
}  // namespace

std::vector<Selection> selections() {
    std::vector<Selection> v;
    v.push_back(pick("axpby", detail::axpby_registry(), detail::AxpbyDesc{}));
    return v;
}

}  // namespace xk::tools
