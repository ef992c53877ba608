#include <xk/xk.hpp>

#include <cstdio>
#include <vector>

int main() {
    std::vector<float> x(1000, 2.0f), y(1000, 1.0f);
    xk::axpby(static_cast<int64_t>(x.size()), 3.0f, x.data(), 0.5f, y.data());
    for (float v : y)
        if (v != 6.5f) {
            std::printf("consumer: wrong result %f\n", v);
            return 1;
        }
    try {
        xk::axpby(-1, 1.0f, x.data(), 1.0f, y.data());
        std::printf("consumer: no error for n=-1\n");
        return 1;
    } catch (const xk::Error& e) {
        std::printf("consumer (C++): xkernels %s on %s, max ISA %s; error path ok: %s\n", xk::version_string(),
                    xk::cpu_info().brand.c_str(), xk::isa_name(xk::max_isa()), e.what());
    }
    return 0;
}
