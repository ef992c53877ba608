// Scalar activations: the specification the vectorised epilogues are tested against.
#pragma once
#include <cmath>

#include "xk/types.hpp"

namespace xk::detail {

inline float apply_activation(Activation a, float x) {
    switch (a) {
        case Activation::none: return x;
        case Activation::relu: return x > 0.0f ? x : 0.0f;
        case Activation::gelu_erf: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
        case Activation::gelu_tanh: {
            const float k = 0.79788456080286536f;  // sqrt(2/pi)
            return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
        }
        case Activation::silu: return x / (1.0f + std::exp(-x));
    }
    return x;
}

inline bool valid_activation(Activation a) {
    const int v = static_cast<int>(a);
    return v >= 0 && v <= static_cast<int>(Activation::silu);
}

}  // namespace xk::detail
