// A row-major matrix whose element type is a runtime xk::DType, for tests of ops with runtime
// dtypes (norm, rope, quant): strided rows, a misaligned base, a sentinel byte pattern in the
// padding between rows and in a 64-byte tail, and element access through double.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "common/test_util.hpp"

namespace xk::test {

class TypedMatrix {
public:
    static constexpr unsigned char kSentinel = 0xA5;
    static constexpr size_t kTail = 64;

    TypedMatrix() = default;
    // misalign_elems: the data starts that many elements past a 64-byte boundary.
    TypedMatrix(DType t, int64_t rows, int64_t cols, int64_t ld = 0, size_t misalign_elems = 0)
        : t_(t), rows_(rows), cols_(cols), ld_(ld == 0 ? cols : ld) {
        const size_t es = dtype_size(t);
        elems_ = rows > 0 ? static_cast<size_t>((rows - 1) * ld_ + cols) : 0;
        buf_.resize(elems_ * es + kTail, misalign_elems * es);
        std::memset(buf_.data(), kSentinel, elems_ * es + kTail);
    }

    DType dtype() const { return t_; }
    int64_t rows() const { return rows_; }
    int64_t cols() const { return cols_; }
    int64_t ld() const { return ld_; }
    void* data() { return buf_.data(); }
    const void* data() const { return buf_.data(); }
    size_t elems() const { return elems_; }  // span in elements, padding included

    double get(int64_t r, int64_t c) const { return get_at(r * ld_ + c); }
    void set(int64_t r, int64_t c, double v) { set_at(r * ld_ + c, v); }

    double get_at(int64_t i) const {
        const unsigned char* p = buf_.data() + i * dtype_size(t_);
        switch (t_) {
            case DType::f32: { float f; std::memcpy(&f, p, 4); return f; }
            case DType::bf16: { uint16_t b; std::memcpy(&b, p, 2); return bf16::to_float(b); }
            case DType::s8: return static_cast<int8_t>(*p);
            case DType::u8: return *p;
            case DType::s32: { int32_t v; std::memcpy(&v, p, 4); return v; }
        }
        return 0;
    }
    // Stores v rounded to the dtype (f32: to nearest; bf16: to nearest even; integers: exact).
    void set_at(int64_t i, double v) {
        unsigned char* p = buf_.data() + i * dtype_size(t_);
        switch (t_) {
            case DType::f32: { const float f = static_cast<float>(v); std::memcpy(p, &f, 4); break; }
            case DType::bf16: { const uint16_t b = bf16::from_float(static_cast<float>(v)); std::memcpy(p, &b, 2); break; }
            case DType::s8: *p = static_cast<unsigned char>(static_cast<int8_t>(v)); break;
            case DType::u8: *p = static_cast<unsigned char>(v); break;
            case DType::s32: { const int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
        }
    }

    // Uniform values in [lo, hi) (rounded to the dtype) in the rows' elements.
    void fill_uniform(double lo, double hi, uint64_t seed) {
        std::mt19937_64 g(seed);
        std::uniform_real_distribution<double> d(lo, hi);
        for (int64_t r = 0; r < rows_; ++r)
            for (int64_t c = 0; c < cols_; ++c) set(r, c, d(g));
    }

    // Every byte outside the rows' elements (row padding and the tail) still holds the sentinel.
    ::testing::AssertionResult padding_intact() const {
        const size_t es = dtype_size(t_);
        const unsigned char* p = buf_.data();
        for (int64_t r = 0; r + 1 < rows_; ++r)
            for (size_t b = (r * ld_ + cols_) * es; b < static_cast<size_t>((r + 1) * ld_) * es; ++b)
                if (p[b] != kSentinel) return ::testing::AssertionFailure() << "padding byte " << b << " of row " << r << " written";
        for (size_t b = elems_ * es; b < elems_ * es + kTail; ++b)
            if (p[b] != kSentinel) return ::testing::AssertionFailure() << "tail byte " << (b - elems_ * es) << " written";
        return ::testing::AssertionSuccess();
    }

    // Copy of the contents (same layout and dtype, fresh buffer).
    TypedMatrix clone() const {
        TypedMatrix m(t_, rows_, cols_, ld_);
        std::memcpy(m.buf_.data(), buf_.data(), elems_ * dtype_size(t_) + kTail);
        return m;
    }

private:
    DType t_ = DType::f32;
    int64_t rows_ = 0, cols_ = 0, ld_ = 0;
    size_t elems_ = 0;
    Buffer<unsigned char> buf_;
};

// Rounds v to the dtype and back (what storing it would keep).
inline double round_to(DType t, double v) {
    if (t == DType::bf16) return bf16::to_float(bf16::from_float(static_cast<float>(v)));
    if (t == DType::f32) return static_cast<float>(v);
    return v;
}

}  // namespace xk::test
