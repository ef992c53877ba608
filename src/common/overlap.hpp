// Exact overlap tests for strided 2D memory regions, used by entry points that must tell an
// allowed in-place call (the same matrix) from a partial overlap (an error) without rejecting
// disjoint interleaved layouts (e.g. q and k column slices of one packed qkv buffer).
#pragma once
#include <algorithm>
#include <cstdint>

namespace xk::detail {

// rows rows of width bytes each, row r starting at base + r*stride (bytes). rows == 0 or
// width == 0 is the empty region. The stride of a one-row region is irrelevant.
struct MemRegion {
    uintptr_t base = 0;
    int64_t rows = 0;
    int64_t stride = 0;
    int64_t width = 0;
    bool empty() const { return rows <= 0 || width <= 0; }
};

// A [rows x cols] matrix of esize-byte elements with a row stride of ld elements.
inline MemRegion matrix_region(const void* p, int64_t rows, int64_t cols, int64_t ld, int64_t esize) {
    return MemRegion{reinterpret_cast<uintptr_t>(p), rows, ld * esize, cols * esize};
}

// The same bytes, row for row (an exact alias: in-place operation).
inline bool same_region(const MemRegion& a, const MemRegion& b) {
    if (a.empty() || b.empty()) return false;
    return a.base == b.base && a.rows == b.rows && a.width == b.width && (a.rows == 1 || a.stride == b.stride);
}

namespace overlap_impl {
inline int64_t floor_div(int64_t a, int64_t b) {  // b > 0
    int64_t q = a / b;
    if ((a % b != 0) && (a < 0)) --q;
    return q;
}
// Is there an integer k in [kmin, kmax] with lo < k*s < hi? (s > 0)
inline bool exists_k(int64_t lo, int64_t hi, int64_t s, int64_t kmin, int64_t kmax) {
    const int64_t k_lo = std::max(kmin, floor_div(lo, s) + 1);
    const int64_t k_hi = std::min(kmax, floor_div(hi - 1, s));  // k*s <= hi-1  <=>  k*s < hi
    return k_lo <= k_hi;
}
// Does row interval [p, p+w) meet some row of region a?
inline bool row_meets(const MemRegion& a, int64_t p, int64_t w) {
    // a.base + i*s < p + w  and  a.base + i*s + a.width > p, i in [0, a.rows)
    const int64_t d = static_cast<int64_t>(p - a.base);  // two's complement difference
    if (a.rows == 1 || a.stride <= 0) return d - a.width < 0 && 0 < d + w;
    return exists_k(d - a.width, d + w, a.stride, 0, a.rows - 1);
}
}  // namespace overlap_impl

// True when some byte belongs to both regions. Exact for every pair of 2D regions (O(1) when
// the strides are equal or one region is a single row, O(min(rows)) otherwise).
inline bool regions_overlap(const MemRegion& a, const MemRegion& b) {
    using namespace overlap_impl;
    if (a.empty() || b.empty()) return false;
    // Hulls first: most disjoint pairs end here.
    const uintptr_t a_end = a.base + static_cast<uintptr_t>((a.rows - 1) * a.stride + a.width);
    const uintptr_t b_end = b.base + static_cast<uintptr_t>((b.rows - 1) * b.stride + b.width);
    if (a_end <= b.base || b_end <= a.base) return false;
    if (b.rows == 1) return row_meets(a, static_cast<int64_t>(b.base), b.width);
    if (a.rows == 1) return row_meets(b, static_cast<int64_t>(a.base), a.width);
    if (a.stride == b.stride && a.stride > 0) {
        // Rows i of a and j of b meet iff (j-i)*s lies in (a-b-wb, a-b+wa).
        const int64_t d = static_cast<int64_t>(a.base - b.base);
        return exists_k(d - b.width, d + a.width, a.stride, -(a.rows - 1), b.rows - 1);
    }
    const MemRegion& few = a.rows <= b.rows ? a : b;
    const MemRegion& many = a.rows <= b.rows ? b : a;
    for (int64_t r = 0; r < few.rows; ++r)
        if (row_meets(many, static_cast<int64_t>(few.base + static_cast<uintptr_t>(r * few.stride)), few.width))
            return true;
    return false;
}

}  // namespace xk::detail
