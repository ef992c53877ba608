// The implementation each op family selects, under the current cap, for a representative
// descriptor (used by xk-info). One entry per family.
#pragma once
#include <string>
#include <vector>

namespace xk::tools {
struct Selection {
    std::string family, desc, impl;
};
std::vector<Selection> selections();
}  // namespace xk::tools
