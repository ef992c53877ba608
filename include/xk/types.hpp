// xkernels — element types shared by every op family.
#pragma once
#include <cstdint>
#include <cstring>

namespace xk {

enum class DType : int { f32 = 0, bf16 = 1, s8 = 2, u8 = 3, s32 = 4 };

constexpr const char* dtype_name(DType t) noexcept {
    switch (t) {
        case DType::f32: return "f32";
        case DType::bf16: return "bf16";
        case DType::s8: return "s8";
        case DType::u8: return "u8";
        case DType::s32: return "s32";
    }
    return "?";
}

constexpr int dtype_size(DType t) noexcept {
    switch (t) {
        case DType::f32: case DType::s32: return 4;
        case DType::bf16: return 2;
        case DType::s8: case DType::u8: return 1;
    }
    return 0;
}

// bfloat16 stored as the upper 16 bits of an IEEE float. Conversion from float rounds to nearest
// even (NaN stays NaN), as AVX512-BF16's VCVTNEPS2BF16 and oneDNN do.
struct bf16 {
    uint16_t bits = 0;
    bf16() = default;
    explicit bf16(float f) : bits(from_float(f)) {}
    static bf16 from_bits(uint16_t b) { bf16 r; r.bits = b; return r; }
    explicit operator float() const { return to_float(bits); }
    float to_float() const { return to_float(bits); }

    static uint16_t from_float(float f) noexcept {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
        const uint32_t lsb = (u >> 16) & 1u;
        u += 0x7fffu + lsb;
        return static_cast<uint16_t>(u >> 16);
    }
    static float to_float(uint16_t b) noexcept {
        const uint32_t u = static_cast<uint32_t>(b) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};
static_assert(sizeof(bf16) == 2, "bf16 must be 2 bytes");

}  // namespace xk

namespace xk {

// Activation applied by fused epilogues (GEMM, conv) — one definition for every family.
enum class Activation : int {
    none = 0,
    relu = 1,
    gelu_erf = 2,   // 0.5 x (1 + erf(x / sqrt 2))
    gelu_tanh = 3,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    silu = 4,       // x * sigmoid(x)
};

constexpr const char* activation_name(Activation a) noexcept {
    switch (a) {
        case Activation::none: return "none";
        case Activation::relu: return "relu";
        case Activation::gelu_erf: return "gelu_erf";
        case Activation::gelu_tanh: return "gelu_tanh";
        case Activation::silu: return "silu";
    }
    return "?";
}

}  // namespace xk
