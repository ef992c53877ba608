// xkernels — element types shared by every op family.
#pragma once
#include <cstdint>
#include <cstring>

namespace xk {

// f16 (IEEE binary16) is accepted by the conversions (xk/convert.hpp) only, so far.
enum class DType : int { f32 = 0, bf16 = 1, s8 = 2, u8 = 3, s32 = 4, f16 = 5 };

constexpr const char* dtype_name(DType t) noexcept {
    switch (t) {
        case DType::f32: return "f32";
        case DType::bf16: return "bf16";
        case DType::s8: return "s8";
        case DType::u8: return "u8";
        case DType::s32: return "s32";
        case DType::f16: return "f16";
    }
    return "?";
}

constexpr int dtype_size(DType t) noexcept {
    switch (t) {
        case DType::f32: case DType::s32: return 4;
        case DType::bf16: case DType::f16: return 2;
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

// IEEE binary16 (half) by its bits. Conversion from float rounds to nearest even (overflow to
// +-inf, denormal halves produced and read exactly); a NaN stays NaN, quiet, with the upper 10
// bits of its payload (F16C's VCVTPS2PH / VCVTPH2PS behaviour). Conversion to float is exact.
struct f16 {
    uint16_t bits = 0;
    f16() = default;
    explicit f16(float f) : bits(from_float(f)) {}
    static f16 from_bits(uint16_t b) { f16 r; r.bits = b; return r; }
    explicit operator float() const { return to_float(bits); }
    float to_float() const { return to_float(bits); }

    static uint16_t from_float(float f) noexcept {
        uint32_t u;
        std::memcpy(&u, &f, 4);
        const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
        const uint32_t a = u & 0x7fffffffu;
        if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN, quiet
        if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
        if (a >= 0x38800000u) {  // normal half
            const uint32_t r = a - (112u << 23);
            return static_cast<uint16_t>(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
        }
        if (a <= 0x33000000u) return sign;  // <= 2^-25 (a tie at 2^-25 goes to even: 0)
        // subnormal half: round a / 2^-24 to nearest even; mantissa with its hidden bit, shifted
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;
        const int shift = 126 - static_cast<int>(a >> 23);  // 14..24 (exponent 102..112)
        const uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        const uint32_t up = rem > half || (rem == half && (q & 1u));
        return static_cast<uint16_t>(sign | (q + up));
    }
    static float to_float(uint16_t h) noexcept {
        const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
        const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
        uint32_t u;
        if (e == 0) {
            const float f = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
            std::memcpy(&u, &f, 4);
            u |= sign;
        } else if (e == 31) {
            u = sign | 0x7f800000u | (m ? (0x400000u | (m << 13)) : 0u);  // NaN: quiet
        } else {
            u = sign | ((e + 112u) << 23) | (m << 13);
        }
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};
static_assert(sizeof(f16) == 2, "f16 must be 2 bytes");

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
