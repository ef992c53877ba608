// libFuzzer target: the embedding_bag family of the C API (include/xk/c/embedding_bag.h, semantics
// of xk/embedding_bag.hpp). See fuzz_common.hpp for the scheme. Calls:
//   xk_embedding_bag_f32 / xk_embedding_bag_f32_i32 / xk_embedding_bag_bf16_f32 /
//     xk_embedding_bag_q8_f32 / xk_embedding_bag_q4_f32 (row-wise quantized fused rows, any q,
//     f32 / fp16 scale and bias, padded byte strides) in every mode
//     (sum, mean, max), with and without include_last_offset (then indices past the last offset,
//     out of range on purpose, must not be read), padding_idx, per_sample_weights (sum), empty
//     bags, bags of padding only, padded row strides (0 = packed), NaN in the table's row padding
//     (never read), no bags / no indices / an empty table; valid ones are checked against a
//     double-precision loop of the header's math, hostile ones (one argument wrong, an index out
//     of range among them: rejected before anything is written) must leave out as it was;
//   calls of huge but representable extents (num_embeddings, ld_table, ld_out or num_indices up to
//     2^48, the rest small): valid, quick, checked like the others;
//   xk_embedding_bag_desc_init (any sizes: it only fills the struct; null desc: rejected);
//   xk_embedding_bag_backward_update_f32 / _f32_i32 / _f32_gbf16 (SGD / Adagrad, sum / mean,
//     weights, padding, hot rows, padded table / grad / state strides; num_embeddings up to 2^48
//     with SGD): every touched row checked against a double loop of the header's formulas, every
//     other byte (untouched rows, row padding, the inputs) unchanged; hostile ones (one argument
//     wrong) write nothing; xk_embedding_update_init;
//   ISA cap and thread count changes.
#include <algorithm>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

// Table values up to 1e30, per-sample weights up to 1e6: a bag sums at most 5 products of 1e36,
// far inside the fp32 range, so fp32 and the double oracle agree on what is finite.
constexpr float kBigTable = 1e30f;
constexpr float kBigWeight = 1e6f;

enum Kind { kF32, kF32I32, kBf16F32, kQ8, kQ4 };
const char* const kFn[] = {"xk_embedding_bag_f32", "xk_embedding_bag_f32_i32", "xk_embedding_bag_bf16_f32",
                           "xk_embedding_bag_q8_f32", "xk_embedding_bag_q4_f32"};

// IEEE half bits -> double (exact).
double from_f16(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double s = (h & 0x8000) ? -1.0 : 1.0;
    if (e == 31) return m ? std::numeric_limits<double>::quiet_NaN() : s * std::numeric_limits<double>::infinity();
    return s * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25));
}

// Which extent a call claims huge (its buffers stay small: only what the bags read exists).
enum Huge { kNone, kNumEmbeddings, kLdTable, kLdOut, kNumIndices };

// xk_embedding_bag_desc_init on a garbage-filled struct: every field must be the given size or
// the documented default.
xk_embedding_bag_desc init_desc(int64_t num_embeddings, int64_t dim) {
    xk_embedding_bag_desc d;
    std::memset(&d, 0xA5, sizeof d);
    const xk_status s = fz::timed("xk_embedding_bag_desc_init", [&] { return xk_embedding_bag_desc_init(&d, num_embeddings, dim); });
    fz::expect_ok(s, "xk_embedding_bag_desc_init");
    if (d.num_embeddings != num_embeddings || d.dim != dim || d.ld_table != 0 || d.ld_out != 0 ||
        d.mode != XK_EMBEDDING_BAG_SUM || d.include_last_offset != 0 || d.padding_idx != -1)
        fz::finding("xk_embedding_bag_desc_init(%lld, %lld) left a field other than the given size or its documented default",
                    static_cast<long long>(num_embeddings), static_cast<long long>(dim));
    return d;
}

// One valid call. Every buffer lies in one guarded arena, out first: the library checks out
// against the extent each input claims (num_embeddings rows of ld_table, num_indices indices ...),
// which for the huge calls is far more than is allocated; with out below every input, those
// extents never reach it. Between the buffers: 64-byte gaps of the sentinel. After a call every
// byte of the arena but out's elements (row padding included) must be as before.
struct Problem {
    Kind kind = kF32;
    xk_embedding_bag_desc d{};
    int64_t ldt = 1, ldo = 1;               // resolved row strides
    int64_t rows = 0;                       // table rows allocated (every index in a bag is below)
    int64_t num_bags = 0, num_indices = 0;  // as passed
    int64_t total = 0;                      // indices inside bags: positions [0, total)
    std::vector<int64_t> idx, off;          // as stored (idx: every allocated index)
    bool has_psw = false;
    std::vector<float> psw;
    Buf<unsigned char> arena;
    size_t o_out = 0, out_bytes = 0, o_tab = 0, tab_bytes = 0, o_idx = 0, o_off = 0, o_psw = 0;
    std::vector<double> want, tol;  // num_bags x dim
    std::vector<unsigned char> before;

    int isz() const { return kind == kF32I32 ? 4 : 8; }
    bool quant() const { return kind == kQ8 || kind == kQ4; }
    int tsz() const { return quant() ? 1 : kind == kBf16F32 ? 2 : 4; }
    // Bytes of a fused quantized row (values, then scale and bias).
    int64_t qbytes() const { return kind == kQ8 ? d.dim + 8 : (d.dim + 1) / 2 + 4; }
    // Bytes a row occupies (its values, or the fused row).
    int64_t row_bytes() const { return quant() ? qbytes() : d.dim * tsz(); }
    unsigned char* at(size_t o) { return arena.data() + o; }
    void* table() { return at(o_tab); }
    void* indices() { return at(o_idx); }
    void* offsets() { return at(o_off); }
    float* psw_ptr() { return has_psw ? reinterpret_cast<float*>(at(o_psw)) : nullptr; }
    float* out() { return reinterpret_cast<float*>(at(o_out)); }
    double out_at(int64_t b, int64_t k) const {
        float f;
        std::memcpy(&f, arena.data() + o_out + (b * ldo + k) * 4, 4);
        return f;
    }
    // Quantized rows: q, scale, bias of element (r, k).
    void qsb(int64_t r, int64_t k, int& q, float& sc, float& bi) const {
        const unsigned char* row = arena.data() + o_tab + r * ldt;
        if (kind == kQ8) {
            q = row[k];
            std::memcpy(&sc, row + d.dim, 4);
            std::memcpy(&bi, row + d.dim + 4, 4);
        } else {
            q = (row[k / 2] >> (4 * (k % 2))) & 15;
            uint16_t h[2];
            std::memcpy(h, row + (d.dim + 1) / 2, 4);
            sc = static_cast<float>(from_f16(h[0]));
            bi = static_cast<float>(from_f16(h[1]));
        }
    }
    double table_at(int64_t r, int64_t k) const {
        if (quant()) {  // max pooling's value: q * scale rounded to f32, then + bias in f32
            float sc, bi;
            int q;
            qsb(r, k, q, sc, bi);
            const float prod = static_cast<float>(q) * sc;
            const float v = prod + bi;
            return v;
        }
        const unsigned char* q = arena.data() + o_tab + (r * ldt + k) * tsz();
        if (kind == kBf16F32) { uint16_t b; std::memcpy(&b, q, 2); return fz::from_bf16(b); }
        float f;
        std::memcpy(&f, q, 4);
        return f;
    }
    void write_int(size_t o, int64_t j, int64_t v) {
        if (isz() == 4) { const int32_t x = static_cast<int32_t>(v); std::memcpy(at(o) + j * 4, &x, 4); }
        else std::memcpy(at(o) + j * 8, &v, 8);
    }
    void set_index(int64_t j, int64_t v) { idx[j] = v, write_int(o_idx, j, v); }
    void set_offset(int64_t i, int64_t v) { off[i] = v, write_int(o_off, i, v); }
};

// Offset of a buffer of `bytes` placed after `end` (64-aligned plus `mis` bytes, a gap of 64
// sentinel bytes before it); advances end.
size_t place(size_t& end, size_t bytes, size_t mis) {
    const size_t o = (end + 64 + 63) / 64 * 64 + mis;
    end = o + bytes;
    return o;
}

Problem make_problem(In& in, Huge huge) {
    static const int64_t kHuge[] = {int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 48};
    const int64_t H = kHuge[in.pick(3)];
    Problem p;
    p.kind = static_cast<Kind>(in.pick(5));
    const int64_t dim = in.dim(1, 20);
    p.rows = huge == kLdTable ? 1 : huge == kNumEmbeddings ? in.dim(1, 6) : in.dim(0, 12);
    p.d = init_desc(huge == kNumEmbeddings ? H : huge == kLdTable ? in.dim(1, 3) : p.rows, dim);
    xk_embedding_bag_desc& d = p.d;
    auto ld = [&](Huge h) {
        if (huge == h) return H;
        const int64_t pad = in.pad();
        return pad == 0 ? (in.coin() ? 0 : dim) : dim + pad;
    };
    d.ld_table = ld(kLdTable), d.ld_out = ld(kLdOut);
    if (p.quant() && huge != kLdTable && d.ld_table != 0) d.ld_table = p.qbytes() + (d.ld_table - dim);  // bytes
    p.ldt = d.ld_table ? d.ld_table : p.quant() ? p.qbytes() : dim, p.ldo = d.ld_out ? d.ld_out : dim;
    d.mode = static_cast<xk_embedding_bag_mode>(in.pick(3));
    d.include_last_offset = huge == kNumIndices || in.coin();
    d.padding_idx = p.rows > 0 && in.pick(3) == 2 ? in.pick(static_cast<int>(p.rows)) : -1;
    p.has_psw = d.mode == XK_EMBEDDING_BAG_SUM && in.coin();
    const bool nonfinite = in.pick(8) == 7;  // (an exhausted input reads 0s: finite values)

    // Bags: sizes 0..5 (empty without table rows), then indices that no bag covers (past the
    // last offset, or every index when there is no bag and no last offset): out of range on
    // purpose, never read.
    p.num_bags = in.dim(0, huge == kLdOut ? 1 : 6);
    const int64_t n_off = p.num_bags + (d.include_last_offset ? 1 : 0);
    p.off.assign(n_off, 0);
    for (int64_t b = 0; b < p.num_bags; ++b) {
        p.off[b] = p.total;
        p.total += p.rows == 0 ? 0 : in.dim(0, 5);
    }
    if (d.include_last_offset) p.off[p.num_bags] = p.total;
    const int64_t tail = d.include_last_offset || p.num_bags == 0 ? in.dim(0, 3) : 0;
    const int64_t n_idx = p.total + tail;
    p.num_indices = huge == kNumIndices ? H : n_idx;
    p.idx.assign(n_idx, 0);
    for (int64_t j = 0; j < n_idx; ++j) {
        if (j >= p.total) {
            static const int64_t bad[] = {-1, -1000, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
            p.idx[j] = bad[in.pick(4)];
        } else if (d.padding_idx >= 0 && in.pick(4) == 3) {
            p.idx[j] = d.padding_idx;
        } else {
            p.idx[j] = in.p.ConsumeIntegralInRange<int64_t>(0, p.rows - 1);
        }
    }
    auto value = [&](float big) { return nonfinite ? in.any_value(big) : in.value(big); };
    if (p.has_psw)
        for (int64_t j = 0; j < n_idx; ++j) p.psw.push_back(value(kBigWeight));

    // The arena: out, table, indices, offsets, per_sample_weights.
    const size_t mis = in.pick(3);
    p.out_bytes = p.num_bags == 0 ? 0 : static_cast<size_t>((p.num_bags - 1) * p.ldo + dim) * 4;
    p.tab_bytes = p.rows == 0 ? 0 : static_cast<size_t>(((p.rows - 1) * p.ldt) * (p.quant() ? 1 : p.tsz()) + p.row_bytes());
    size_t end = 0;
    p.o_out = place(end, p.out_bytes, mis * 4);
    p.o_tab = place(end, p.tab_bytes, mis * p.tsz());
    p.o_idx = place(end, n_idx * p.isz(), mis * p.isz());
    p.o_off = place(end, n_off * p.isz(), mis * p.isz());
    p.o_psw = place(end, p.psw.size() * 4, mis * 4);
    p.arena = Buf<unsigned char>(end + 64);
    // out: NaN or values (none read; row padding must stay).
    const bool out_nan = in.coin();
    for (size_t i = 0; i < p.out_bytes / 4; ++i) {
        const float v = out_nan ? std::numeric_limits<float>::quiet_NaN() : in.value();
        std::memcpy(p.at(p.o_out) + i * 4, &v, 4);
    }
    // table: values, NaN in the row padding (never read).
    if (p.quant()) {
        // Quantized rows: any q, scale / bias ordinary (up to 1e6; NaN / inf when nonfinite), 0xFF in
        // the row padding (never read).
        for (size_t i = 0; i < p.tab_bytes; ++i) p.at(p.o_tab)[i] = 0xFF;
        for (int64_t r = 0; r < p.rows; ++r) {
            unsigned char* row = p.at(p.o_tab) + r * p.ldt;
            const int64_t nq = p.kind == kQ8 ? dim : (dim + 1) / 2;
            for (int64_t k = 0; k < nq; ++k) row[k] = static_cast<unsigned char>(in.pick(256));
            if (p.kind == kQ4 && dim % 2) row[nq - 1] &= 0x0F;
            const float sc = value(1e6f), bi = value(1e6f);
            if (p.kind == kQ8) {
                std::memcpy(row + dim, &sc, 4);
                std::memcpy(row + dim + 4, &bi, 4);
            } else {
                // fp16 bits: finite (exponent < 31) unless nonfinite was drawn.
                uint16_t h[2];
                for (uint16_t& x : h) {
                    x = static_cast<uint16_t>(in.p.ConsumeIntegral<uint16_t>());
                    if (!nonfinite && ((x >> 10) & 31) == 31) x &= 0xBFFF;
                }
                std::memcpy(row + nq, h, 4);
            }
        }
    }
    for (size_t i = 0; !p.quant() && i < p.tab_bytes / p.tsz(); ++i) {
        const float v = static_cast<int64_t>(i) % p.ldt < dim ? value(kBigTable) : std::numeric_limits<float>::quiet_NaN();
        if (p.kind == kBf16F32) { const uint16_t b = fz::to_bf16(v); std::memcpy(p.at(p.o_tab) + i * 2, &b, 2); }
        else std::memcpy(p.at(p.o_tab) + i * 4, &v, 4);
    }
    for (int64_t j = 0; j < n_idx; ++j) p.write_int(p.o_idx, j, p.idx[j]);
    for (int64_t i = 0; i < n_off; ++i) p.write_int(p.o_off, i, p.off[i]);
    if (!p.psw.empty()) std::memcpy(p.at(p.o_psw), p.psw.data(), p.psw.size() * 4);

    // Expected out and its bound. The header: f32 accumulation in index order (each product
    // w * t rounded, each add rounded): |error| <= gamma_(cnt) sum |w t| <= (cnt + 1) * 2u *
    // sum |w t|, plus 1e-37 for denormal products (flushed or not); mean divides once more (2u
    // relative); max is exact (a copy of one table value; NaN propagates); a bag with no entry
    // that is not padding is all zeros. With NaN / inf among the inputs the double loop gives
    // the same non-finite results (the tolerance is then inf or the value NaN).
    constexpr double u = 0x1p-24;
    p.want.assign(p.num_bags * dim, 0.0);
    p.tol.assign(p.num_bags * dim, 0.0);
    for (int64_t b = 0; b < p.num_bags; ++b) {
        const int64_t end_b = b + 1 < p.num_bags || d.include_last_offset ? p.off[b + 1] : p.num_indices;
        for (int64_t k = 0; k < dim; ++k) {
            double acc = 0, sabs = 0;
            int64_t cnt = 0;
            for (int64_t j = p.off[b]; j < end_b; ++j) {
                if (p.idx[j] == d.padding_idx) continue;
                if (p.quant() && d.mode != XK_EMBEDDING_BAG_MAX) {
                    // The fused form (header): s = w * scale and c = w * bias rounded to f32 (as
                    // the kernel: an overflow to inf, and 0 * inf = NaN, included), fma(q, s, acc),
                    // the c summed apart; against the exact sum of q * s + c, errors relative to
                    // |q s| + |c|.
                    int q;
                    float sc, bi;
                    p.qsb(p.idx[j], k, q, sc, bi);
                    const float w = p.has_psw ? p.psw[j] : 1.0f;
                    volatile float sw = w * sc, bw = w * bi;  // (volatile: one f32 rounding each)
                    const double qs = static_cast<double>(q) * static_cast<double>(sw);
                    acc += qs + static_cast<double>(bw);
                    sabs += std::fabs(qs) + std::fabs(static_cast<double>(bw));
                    ++cnt;
                    continue;
                }
                const double t = p.table_at(p.idx[j], k);
                if (d.mode == XK_EMBEDDING_BAG_MAX) {
                    if (cnt == 0 || std::isnan(t) || (!std::isnan(acc) && t > acc)) acc = t;
                } else {
                    const double wt = (p.has_psw ? p.psw[j] : 1.0) * t;
                    acc += wt, sabs += std::fabs(wt);
                }
                ++cnt;
            }
            double e = 0;
            if (cnt > 0 && d.mode != XK_EMBEDDING_BAG_MAX) {
                e = (cnt + (p.quant() ? 3 : 1)) * 2 * u * sabs + 1e-37;
                if (d.mode == XK_EMBEDDING_BAG_MEAN) acc /= cnt, e = e / cnt + 2 * u * std::fabs(acc);
            }
            p.want[b * dim + k] = acc;
            p.tol[b * dim + k] = e;
        }
    }
    p.before = p.arena.snapshot();
    return p;
}

// The arguments of one call.
struct Args {
    const xk_embedding_bag_desc* desc;
    const void* table;
    int64_t num_indices;
    const void* indices;
    int64_t num_bags;
    const void* offsets;
    const float* psw;
    float* out;
};

Args args_of(Problem& p) {
    return Args{&p.d, p.table(), p.num_indices, p.indices(), p.num_bags, p.offsets(), p.psw_ptr(), p.out()};
}

xk_status call(Kind k, const Args& a) {
    switch (k) {
        case kF32:
            return xk_embedding_bag_f32(a.desc, static_cast<const float*>(a.table), a.num_indices,
                                        static_cast<const int64_t*>(a.indices), a.num_bags,
                                        static_cast<const int64_t*>(a.offsets), a.psw, a.out);
        case kF32I32:
            return xk_embedding_bag_f32_i32(a.desc, static_cast<const float*>(a.table), a.num_indices,
                                            static_cast<const int32_t*>(a.indices), a.num_bags,
                                            static_cast<const int32_t*>(a.offsets), a.psw, a.out);
        case kQ8:
            return xk_embedding_bag_q8_f32(a.desc, static_cast<const uint8_t*>(a.table), a.num_indices,
                                           static_cast<const int64_t*>(a.indices), a.num_bags,
                                           static_cast<const int64_t*>(a.offsets), a.psw, a.out);
        case kQ4:
            return xk_embedding_bag_q4_f32(a.desc, static_cast<const uint8_t*>(a.table), a.num_indices,
                                           static_cast<const int64_t*>(a.indices), a.num_bags,
                                           static_cast<const int64_t*>(a.offsets), a.psw, a.out);
        default:
            return xk_embedding_bag_bf16_f32(a.desc, static_cast<const uint16_t*>(a.table), a.num_indices,
                                             static_cast<const int64_t*>(a.indices), a.num_bags,
                                             static_cast<const int64_t*>(a.offsets), a.psw, a.out);
    }
}

const char* region(const Problem& p, size_t i) {
    if (i >= p.o_psw) return "per_sample_weights (or the gap before it)";
    if (i >= p.o_off) return "offsets (or the gap before it)";
    if (i >= p.o_idx) return "indices (or the gap before it)";
    if (i >= p.o_tab) return "table (or the gap before it)";
    return i >= p.o_out + p.out_bytes ? "the gap after out" : "out";
}

// Every arena byte as before, but out's elements when the call wrote them.
void check_arena(const Problem& p, const char* what, bool wrote) {
    fz::expect_guards(p.arena, what, "the buffers");
    const unsigned char* a = p.arena.data();
    for (size_t i = 0; i < p.before.size(); ++i) {
        if (a[i] == p.before[i]) continue;
        if (wrote && i >= p.o_out && i < p.o_out + p.out_bytes) {
            const int64_t e = static_cast<int64_t>(i - p.o_out) / 4;
            if (e % p.ldo < p.d.dim) continue;  // an element of a row (a row ends after dim)
        }
        fz::finding("%s: %s call changed byte %zu of %s", what, wrote ? "a valid" : "a rejected", i, region(p, i));
    }
}

void describe(const Problem& p, char* s, size_t n) {
    std::snprintf(s, n, "num_embeddings=%lld dim=%lld ld_table=%lld ld_out=%lld mode=%d include_last_offset=%d "
                  "padding_idx=%lld psw=%d num_bags=%lld num_indices=%lld",
                  (long long)p.d.num_embeddings, (long long)p.d.dim, (long long)p.d.ld_table, (long long)p.d.ld_out,
                  p.d.mode, p.d.include_last_offset, (long long)p.d.padding_idx, p.has_psw, (long long)p.num_bags,
                  (long long)p.num_indices);
}

void run_valid(Problem& p, const char* what) {
    const Args a = args_of(p);
    const xk_status s = fz::timed(what, [&] { return call(p.kind, a); });
    fz::expect_ok(s, what);
    check_arena(p, what, true);
    for (int64_t b = 0; b < p.num_bags; ++b)
        for (int64_t k = 0; k < p.d.dim; ++k) {
            const double got = p.out_at(b, k), want = p.want[b * p.d.dim + k], tol = p.tol[b * p.d.dim + k];
            if (fz::close(got, want, 0, tol)) continue;
            char s2[512];
            describe(p, s2, sizeof s2);
            fz::finding("%s: out[%lld][%lld] = %.9g, want %.9g (+- %.3g); %s", what, (long long)b, (long long)k, got,
                        want, tol, s2);
        }
}

// A value < lo (lo - 1 .. lo - 5, or INT64_MIN).
int64_t below(In& in, int64_t lo) { return in.pick(3) == 2 ? std::numeric_limits<int64_t>::min() : lo - 1 - in.pick(5); }

// Makes exactly one argument of a valid call wrong, in a way embedding_bag.hpp / embedding_bag.h
// call an error.
const char* spoil(In& in, Problem& p, xk_embedding_bag_desc& d, Args& a) {
    const int64_t n_off = static_cast<int64_t>(p.off.size());
    constexpr int64_t k62 = int64_t(1) << 62, kMax = std::numeric_limits<int64_t>::max();
    switch (in.pick(11)) {
        case 0: {
            const int v = in.bad_enum(3);
            std::memcpy(&d.mode, &v, 4);
            return "mode enum";
        }
        case 1:
            if (in.coin()) { d.num_embeddings = below(in, 0); return "num_embeddings < 0"; }
            d.dim = below(in, 1);
            return "dim < 1";
        case 2: {
            // A stride below dim (>= 1 when dim >= 2; else negative: 0 means dim).
            // (A quantized table's stride is in bytes: below its fused row size.)
            const bool tab = in.coin();
            int64_t& ld = tab ? d.ld_table : d.ld_out;
            const int64_t min_ld = tab && p.quant() ? p.qbytes() : d.dim;
            ld = min_ld >= 2 && in.coin() ? 1 + in.pick(static_cast<int>(min_ld - 1)) : below(in, 0);
            return "ld_table or ld_out below dim";
        }
        case 3: {
            const int64_t ne = d.num_embeddings;
            const int64_t v[] = {-2, -1 - 1 - in.pick(100), ne, ne + 1 + in.pick(100), kMax, std::numeric_limits<int64_t>::min()};
            d.padding_idx = v[in.pick(6)];
            return "padding_idx out of [-1, num_embeddings)";
        }
        case 4:
            // per_sample_weights given with mode mean or max (the region holds num_indices
            // floats when the problem has them; a pointer to the gap otherwise: never read).
            d.mode = static_cast<xk_embedding_bag_mode>(1 + in.pick(2));
            a.psw = reinterpret_cast<const float*>(p.at(p.o_psw));
            return "per_sample_weights with mode != sum";
        case 5: {
            const int64_t v = in.coin() ? below(in, 0) : in.coin() ? k62 : kMax;
            if (in.coin()) { a.num_bags = v; return "num_bags < 0 or num_bags * ld_out bytes overflow"; }
            a.num_indices = v;
            return "num_indices < 0 or num_indices * sizeof(index) overflows";
        }
        case 6:
            d.num_embeddings = in.coin() ? k62 : kMax;
            return "num_embeddings * ld_table bytes overflow";
        case 7:
            switch (in.pick(5)) {
                case 0: if (p.num_indices > 0) { a.table = nullptr; return "table null with indices"; } [[fallthrough]];
                case 1: if (p.num_indices > 0) { a.indices = nullptr; return "indices null with indices"; } [[fallthrough]];
                case 2: if (n_off > 0) { a.offsets = nullptr; return "offsets null with offsets"; } [[fallthrough]];
                case 3: if (p.num_bags > 0) { a.out = nullptr; return "out null with bags"; } [[fallthrough]];
                default: a.desc = nullptr; return "desc null";
            }
        case 8:
            if (n_off > 0) {
                switch (in.pick(3)) {
                    case 0:
                        p.set_offset(0, in.coin() ? 1 + in.pick(3) : -1 - in.pick(3));
                        return "offsets[0] != 0";
                    case 1:
                        if (n_off >= 2) {
                            const int64_t i = 1 + in.pick(static_cast<int>(n_off - 1));
                            p.set_offset(i, p.off[i - 1] - 1 - in.pick(2));
                            return "offsets decreasing";
                        }
                        [[fallthrough]];
                    default:
                        p.set_offset(n_off - 1, p.num_indices + 1 + in.pick(3));
                        return "an offset > num_indices";
                }
            }
            [[fallthrough]];
        case 9:
            if (p.total > 0) {
                // An index inside a bag out of [0, num_embeddings) (-1 too: padding_idx = -1 means
                // none), the last one or any: no bag may be written before it is found.
                const int64_t j = in.coin() ? p.total - 1 : in.pick(static_cast<int>(p.total));
                const int64_t ne = d.num_embeddings;
                const int64_t lo = p.isz() == 4 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
                const int64_t hi = p.isz() == 4 ? std::numeric_limits<int32_t>::max() : kMax;
                const int64_t v[] = {-1, -2 - in.pick(100), ne, ne + 1 + in.pick(100), lo, hi};
                p.set_index(j, v[in.pick(6)]);
                return "an index out of [0, num_embeddings)";
            }
            [[fallthrough]];
        default: {
            // out over an input (rejected by embedding_bag_validate_args; a rejected call must
            // leave that input as it was too).
            if (p.num_bags > 0) {
                void* over[4];
                int n = 0;
                if (p.tab_bytes > 0) over[n++] = p.table();
                if (p.num_indices > 0) over[n++] = p.indices();
                if (n_off > 0) over[n++] = p.offsets();
                if (p.has_psw && p.num_indices > 0) over[n++] = p.psw_ptr();
                if (n > 0) {
                    a.out = static_cast<float*>(over[in.pick(n)]);
                    return "out over an input";
                }
            }
            a.desc = nullptr;
            return "desc null";
        }
    }
}

void op_call(In& in) {
    Problem p = make_problem(in, kNone);
    const char* what = kFn[p.kind];
    if (in.pick(3) != 2) {  // (an exhausted input reads 0s: valid calls)
        run_valid(p, what);
        return;
    }
    xk_embedding_bag_desc d = p.d;
    Args a = args_of(p);
    a.desc = &d;
    const char* wrong = spoil(in, p, d, a);
    p.before = p.arena.snapshot();  // (with a spoiled offset or index)
    const xk_status s = fz::timed(what, [&] { return call(p.kind, a); });
    fz::expect_rejected(s, what, wrong);
    check_arena(p, what, false);
}

// A call with one extent huge, the buffers small: valid, quick, never out of memory.
void op_huge(In& in) {
    Problem p = make_problem(in, static_cast<Huge>(1 + in.pick(4)));
    run_valid(p, kFn[p.kind]);
}

// xk_embedding_bag_desc_init with any sizes (it only fills the struct), or a null desc.
void op_desc_init(In& in) {
    if (in.pick(4) == 3) {
        const xk_status s = fz::timed("xk_embedding_bag_desc_init", [&] { return xk_embedding_bag_desc_init(nullptr, 1, 1); });
        fz::expect_rejected(s, "xk_embedding_bag_desc_init", "desc null");
        return;
    }
    const int64_t ne = in.coin() ? in.dim(0, 9) : in.bad_size(), dim = in.coin() ? in.dim(0, 9) : in.bad_size();
    init_desc(ne, dim);
}

// ---- backward fused with SGD / Adagrad ------------------------------------------------------------
enum BwdKind { kBwdF32, kBwdI32, kBwdGbf16 };
const char* const kBwdFn[] = {"xk_embedding_bag_backward_update_f32", "xk_embedding_bag_backward_update_f32_i32",
                              "xk_embedding_bag_backward_update_f32_gbf16"};

// One valid backward call in one guarded arena: grad_out, indices, offsets, per_sample_weights,
// state, then table last (with num_embeddings huge only the table claims a huge extent, which then
// overlaps nothing). Values up to 1e4 (weights 1e3): every gradient, its square and the update stay
// far inside the f32 range.
struct BwdProblem {
    BwdKind kind = kBwdF32;
    xk_embedding_bag_desc d{};
    xk_embedding_update u{};
    int64_t ldt = 1, ldo = 1, lds = 1, rows = 0, num_bags = 0, num_indices = 0, total = 0;
    std::vector<int64_t> idx, off;
    bool has_psw = false;
    std::vector<float> psw;
    Buf<unsigned char> arena;
    size_t o_go = 0, go_bytes = 0, o_idx = 0, o_off = 0, o_psw = 0, o_st = 0, st_bytes = 0, o_tab = 0, tab_bytes = 0;
    std::vector<double> want_t, tol_t, want_s, tol_s;  // rows x dim (touched rows only)
    std::vector<bool> touched;
    std::vector<unsigned char> before;

    bool adagrad() const { return u.optimizer == XK_EMBEDDING_ADAGRAD; }
    int isz() const { return kind == kBwdI32 ? 4 : 8; }
    int gsz() const { return kind == kBwdGbf16 ? 2 : 4; }
    unsigned char* at(size_t o) { return arena.data() + o; }
    float f32_at(size_t o, int64_t e) const {
        float f;
        std::memcpy(&f, arena.data() + o + e * 4, 4);
        return f;
    }
    double go_at(int64_t b, int64_t k) const {
        if (kind == kBwdGbf16) {
            uint16_t h;
            std::memcpy(&h, arena.data() + o_go + (b * ldo + k) * 2, 2);
            return fz::from_bf16(h);
        }
        return f32_at(o_go, b * ldo + k);
    }
    void write_int(size_t o, int64_t j, int64_t v) {
        if (isz() == 4) { const int32_t x = static_cast<int32_t>(v); std::memcpy(at(o) + j * 4, &x, 4); }
        else std::memcpy(at(o) + j * 8, &v, 8);
    }
    void set_index(int64_t j, int64_t v) { idx[j] = v, write_int(o_idx, j, v); }
    void set_offset(int64_t i, int64_t v) { off[i] = v, write_int(o_off, i, v); }
};

BwdProblem make_bwd(In& in) {
    static const int64_t kHuge[] = {int64_t(1) << 31, int64_t(1) << 40, int64_t(1) << 48};
    BwdProblem p;
    p.kind = static_cast<BwdKind>(in.pick(3));
    const int64_t dim = in.dim(1, 20);
    p.rows = in.dim(0, 12);
    p.u.optimizer = in.coin() ? XK_EMBEDDING_ADAGRAD : XK_EMBEDDING_SGD;
    // (int64 indices only: an out-of-range index of a huge table does not fit int32)
    const bool huge = !p.adagrad() && p.kind != kBwdI32 && p.rows > 0 && in.pick(6) == 5;
    p.d = init_desc(huge ? kHuge[in.pick(3)] : p.rows, dim);
    xk_embedding_bag_desc& d = p.d;
    auto ld = [&] {
        const int64_t pad = in.pad();
        return pad == 0 ? (in.coin() ? 0 : dim) : dim + pad;
    };
    d.ld_table = ld(), d.ld_out = ld();
    p.ldt = d.ld_table ? d.ld_table : dim, p.ldo = d.ld_out ? d.ld_out : dim;
    d.mode = static_cast<xk_embedding_bag_mode>(in.pick(2));
    d.include_last_offset = in.coin();
    d.padding_idx = p.rows > 0 && in.pick(3) == 2 ? in.pick(static_cast<int>(p.rows)) : -1;
    p.has_psw = d.mode == XK_EMBEDDING_BAG_SUM && in.coin();
    static const float kLr[] = {0.01f, 0.0f, 0.5f, 1.0f, 3.0f}, kEps[] = {1e-10f, 1e-6f, 0.1f};
    p.u.lr = kLr[in.pick(5)];
    p.u.eps = kEps[in.pick(3)];
    p.u.ld_state = 0;
    if (p.adagrad()) {
        const int64_t pad = in.pad();
        p.u.ld_state = pad == 0 ? (in.coin() ? 0 : dim) : dim + pad;
    }
    p.lds = p.u.ld_state ? p.u.ld_state : dim;

    p.num_bags = in.dim(0, 6);
    const int64_t n_off = p.num_bags + (d.include_last_offset ? 1 : 0);
    p.off.assign(n_off, 0);
    for (int64_t b = 0; b < p.num_bags; ++b) {
        p.off[b] = p.total;
        p.total += p.rows == 0 ? 0 : in.dim(0, 5);
    }
    if (d.include_last_offset) p.off[p.num_bags] = p.total;
    const int64_t tail = d.include_last_offset || p.num_bags == 0 ? in.dim(0, 3) : 0;
    p.num_indices = p.total + tail;
    p.idx.assign(p.num_indices, 0);
    for (int64_t j = 0; j < p.num_indices; ++j) {
        if (j >= p.total) p.idx[j] = in.coin() ? -1 : std::numeric_limits<int32_t>::max();  // never read
        else if (d.padding_idx >= 0 && in.pick(4) == 3) p.idx[j] = d.padding_idx;
        else p.idx[j] = in.p.ConsumeIntegralInRange<int64_t>(0, p.rows - 1);
    }
    if (p.has_psw)
        for (int64_t j = 0; j < p.num_indices; ++j) p.psw.push_back(in.value(1e3f));

    const size_t mis = in.pick(3);
    p.go_bytes = p.num_bags == 0 ? 0 : static_cast<size_t>(((p.num_bags - 1) * p.ldo + dim) * p.gsz());
    p.tab_bytes = p.rows == 0 ? 0 : static_cast<size_t>(((p.rows - 1) * p.ldt + dim) * 4);
    p.st_bytes = !p.adagrad() || p.rows == 0 ? 0 : static_cast<size_t>(((p.rows - 1) * p.lds + dim) * 4);
    size_t end = 0;
    p.o_go = place(end, p.go_bytes, mis * p.gsz());
    p.o_idx = place(end, p.num_indices * p.isz(), mis * p.isz());
    p.o_off = place(end, n_off * p.isz(), mis * p.isz());
    p.o_psw = place(end, p.psw.size() * 4, mis * 4);
    p.o_st = place(end, p.st_bytes, mis * 4);
    p.o_tab = place(end, p.tab_bytes, mis * 4);
    p.arena = Buf<unsigned char>(end + 64);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < p.go_bytes / p.gsz(); ++i) {  // NaN in the row padding: never read
        const float v = static_cast<int64_t>(i) % p.ldo < dim ? in.value(1e4f) : nan;
        if (p.kind == kBwdGbf16) { const uint16_t h = fz::to_bf16(v); std::memcpy(p.at(p.o_go) + i * 2, &h, 2); }
        else std::memcpy(p.at(p.o_go) + i * 4, &v, 4);
    }
    for (size_t i = 0; i < p.tab_bytes / 4; ++i) {
        const float v = static_cast<int64_t>(i) % p.ldt < dim ? in.value(1e4f) : nan;
        std::memcpy(p.at(p.o_tab) + i * 4, &v, 4);
    }
    for (size_t i = 0; i < p.st_bytes / 4; ++i) {
        const float v = static_cast<int64_t>(i) % p.lds < dim ? std::fabs(in.value(1e4f)) : nan;
        std::memcpy(p.at(p.o_st) + i * 4, &v, 4);
    }
    for (int64_t j = 0; j < p.num_indices; ++j) p.write_int(p.o_idx, j, p.idx[j]);
    for (int64_t i = 0; i < n_off; ++i) p.write_int(p.o_off, i, p.off[i]);
    if (!p.psw.empty()) std::memcpy(p.at(p.o_psw), p.psw.data(), p.psw.size() * 4);
    p.u.state = p.adagrad() ? reinterpret_cast<float*>(p.at(p.o_st)) : nullptr;

    // The oracle: g = sum of s_j * grad_out (s_j = w_j, 1, or the f32 1.0f / count), in double;
    // the f32 sum errs by <= (cnt + 1) 2u sum |s_j go| (+ 1e-37 per product for denormals). Then
    // the update in double; its bounds: SGD t - lr g (lr times g's bound, a few roundings);
    // Adagrad through f(x) = x / (sqrt(st + x^2) + eps), non-decreasing in x: f over g's interval,
    // plus ~10 roundings of the terms.
    constexpr double u = 0x1p-24;
    std::vector<double> g(p.rows * dim, 0.0), ga(p.rows * dim, 0.0);
    std::vector<int64_t> cnt(p.rows, 0);
    p.touched.assign(p.rows, false);
    for (int64_t b = 0; b < p.num_bags; ++b) {
        const int64_t end_b = b + 1 < p.num_bags || d.include_last_offset ? p.off[b + 1] : p.num_indices;
        int64_t c = 0;
        for (int64_t j = p.off[b]; j < end_b; ++j) c += p.idx[j] != d.padding_idx;
        const float inv = c > 0 ? 1.0f / static_cast<float>(c) : 0.0f;
        for (int64_t j = p.off[b]; j < end_b; ++j) {
            const int64_t r = p.idx[j];
            if (r == d.padding_idx) continue;
            p.touched[r] = true;
            ++cnt[r];
            const double s = d.mode == XK_EMBEDDING_BAG_MEAN ? inv : p.has_psw ? p.psw[j] : 1.0;
            for (int64_t k = 0; k < dim; ++k) g[r * dim + k] += s * p.go_at(b, k), ga[r * dim + k] += std::fabs(s * p.go_at(b, k));
        }
    }
    p.want_t.assign(p.rows * dim, 0.0), p.tol_t = p.want_t, p.want_s = p.want_t, p.tol_s = p.want_t;
    const double lr = p.u.lr, eps = p.u.eps;
    for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t k = 0; k < dim && p.touched[r]; ++k) {
            const size_t i = static_cast<size_t>(r * dim + k);
            const double t = p.f32_at(p.o_tab, r * p.ldt + k), gv = g[i];
            const double e = (cnt[r] + 1) * 2 * u * ga[i] + 1e-37 * (cnt[r] + 1);
            if (!p.adagrad()) {
                p.want_t[i] = t - lr * gv;
                p.tol_t[i] = lr * e * (1 + 4 * u) + 4 * u * (std::fabs(t) + lr * std::fabs(gv)) + 1e-37;
                continue;
            }
            const double st = p.f32_at(p.o_st, r * p.lds + k);
            auto f = [&](double x) { return x / (std::sqrt(st + x * x) + eps); };
            p.want_s[i] = st + gv * gv;
            p.tol_s[i] = 2 * std::fabs(gv) * e + e * e + 4 * u * (st + gv * gv) + 1e-37;
            const double fv = f(gv), fl = f(gv - e), fh = f(gv + e);
            const double fmax = std::max({std::fabs(fv), std::fabs(fl), std::fabs(fh)});
            p.want_t[i] = t - lr * fv;
            p.tol_t[i] = lr * std::max(fh - fv, fv - fl) + 12 * u * lr * fmax + 4 * u * std::fabs(t) + 1e-37;
        }
    p.before = p.arena.snapshot();
    return p;
}

struct BwdArgs {
    const xk_embedding_bag_desc* desc;
    float* table;
    int64_t num_indices;
    const void* indices;
    int64_t num_bags;
    const void* offsets;
    const float* psw;
    const void* grad_out;
    const xk_embedding_update* update;
};

BwdArgs bwd_args_of(BwdProblem& p) {
    return BwdArgs{&p.d, reinterpret_cast<float*>(p.at(p.o_tab)), p.num_indices, p.at(p.o_idx), p.num_bags,
                   p.at(p.o_off), p.has_psw ? reinterpret_cast<const float*>(p.at(p.o_psw)) : nullptr, p.at(p.o_go), &p.u};
}

xk_status bwd_call(BwdKind k, const BwdArgs& a) {
    switch (k) {
        case kBwdF32:
            return xk_embedding_bag_backward_update_f32(a.desc, a.table, a.num_indices, static_cast<const int64_t*>(a.indices),
                                                        a.num_bags, static_cast<const int64_t*>(a.offsets), a.psw,
                                                        static_cast<const float*>(a.grad_out), a.update);
        case kBwdI32:
            return xk_embedding_bag_backward_update_f32_i32(a.desc, a.table, a.num_indices, static_cast<const int32_t*>(a.indices),
                                                            a.num_bags, static_cast<const int32_t*>(a.offsets), a.psw,
                                                            static_cast<const float*>(a.grad_out), a.update);
        default:
            return xk_embedding_bag_backward_update_f32_gbf16(a.desc, a.table, a.num_indices, static_cast<const int64_t*>(a.indices),
                                                              a.num_bags, static_cast<const int64_t*>(a.offsets), a.psw,
                                                              static_cast<const uint16_t*>(a.grad_out), a.update);
    }
}

const char* bwd_region(const BwdProblem& p, size_t i) {
    if (i >= p.o_tab) return "table (or the gap before it)";
    if (i >= p.o_st) return "state (or the gap before it)";
    if (i >= p.o_psw) return "per_sample_weights (or the gap before it)";
    if (i >= p.o_off) return "offsets (or the gap before it)";
    if (i >= p.o_idx) return "indices (or the gap before it)";
    return "grad_out (or the gap before it)";
}

// Every arena byte as before, but (valid calls) the values of touched table / state rows.
void bwd_check_arena(const BwdProblem& p, const char* what, bool wrote) {
    fz::expect_guards(p.arena, what, "the buffers");
    const unsigned char* a = p.arena.data();
    for (size_t i = 0; i < p.before.size(); ++i) {
        if (a[i] == p.before[i]) continue;
        if (wrote) {
            auto in_rows = [&](size_t o, size_t bytes, int64_t ld) {
                if (i < o || i >= o + bytes) return false;
                const int64_t e = static_cast<int64_t>(i - o) / 4;
                return e % ld < p.d.dim && p.touched[e / ld];
            };
            if (in_rows(p.o_tab, p.tab_bytes, p.ldt) || in_rows(p.o_st, p.st_bytes, p.lds)) continue;
        }
        fz::finding("%s: %s call changed byte %zu of %s", what, wrote ? "a valid" : "a rejected", i, bwd_region(p, i));
    }
}

void bwd_run_valid(BwdProblem& p, const char* what) {
    const BwdArgs a = bwd_args_of(p);
    const xk_status s = fz::timed(what, [&] { return bwd_call(p.kind, a); });
    fz::expect_ok(s, what);
    bwd_check_arena(p, what, true);
    const int64_t dim = p.d.dim;
    for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t k = 0; k < dim && p.touched[r]; ++k) {
            const size_t i = static_cast<size_t>(r * dim + k);
            const double t = p.f32_at(p.o_tab, r * p.ldt + k);
            const double st = p.adagrad() ? p.f32_at(p.o_st, r * p.lds + k) : 0.0;
            const bool ok_t = fz::close(t, p.want_t[i], 0, p.tol_t[i]);
            const bool ok_s = !p.adagrad() || fz::close(st, p.want_s[i], 0, p.tol_s[i]);
            if (ok_t && ok_s) continue;
            fz::finding("%s: row %lld col %lld: table %.9g want %.9g (+- %.3g), state %.9g want %.9g (+- %.3g); "
                        "optimizer=%d lr=%g eps=%g mode=%d dim=%lld rows=%lld bags=%lld psw=%d padding_idx=%lld",
                        what, (long long)r, (long long)k, t, p.want_t[i], p.tol_t[i], st, p.want_s[i], p.tol_s[i],
                        p.u.optimizer, p.u.lr, p.u.eps, p.d.mode, (long long)dim, (long long)p.rows,
                        (long long)p.num_bags, p.has_psw, (long long)p.d.padding_idx);
        }
}

// Makes exactly one argument of a valid backward call wrong.
const char* bwd_spoil(In& in, BwdProblem& p, xk_embedding_bag_desc& d, xk_embedding_update& u, BwdArgs& a) {
    const int64_t n_off = static_cast<int64_t>(p.off.size());
    switch (in.pick(11)) {
        case 0: {
            if (in.coin() && !p.has_psw) { d.mode = XK_EMBEDDING_BAG_MAX; return "mode max (unsupported)"; }
            const int v = in.bad_enum(3);
            std::memcpy(&d.mode, &v, 4);
            return "mode enum";
        }
        case 1: {
            const int v = in.bad_enum(2);
            std::memcpy(&u.optimizer, &v, 4);
            return "optimizer enum";
        }
        case 2: {
            static const float bad[] = {-1.0f, -1e-30f, std::numeric_limits<float>::quiet_NaN(),
                                        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
            (in.coin() ? u.lr : u.eps) = bad[in.pick(5)];
            return "lr or eps negative or not finite";
        }
        case 3:
            if (p.adagrad() && p.num_indices > 0) { u.state = nullptr; return "adagrad without state"; }
            if (!p.adagrad()) { u.state = reinterpret_cast<float*>(p.at(p.o_st)); return "sgd with a state"; }
            [[fallthrough]];
        case 4: {
            if (p.adagrad() && in.coin()) { u.ld_state = d.dim >= 2 && in.coin() ? 1 + in.pick(static_cast<int>(d.dim - 1)) : below(in, 0); return "ld_state below dim"; }
            int64_t& ld = in.coin() ? d.ld_table : d.ld_out;
            ld = d.dim >= 2 && in.coin() ? 1 + in.pick(static_cast<int>(d.dim - 1)) : below(in, 0);
            return "ld_table or ld_out below dim";
        }
        case 5:
            if (p.total > 0) {
                const int64_t j = in.coin() ? p.total - 1 : in.pick(static_cast<int>(p.total));
                const int64_t ne = d.num_embeddings;
                const int64_t v[] = {-1, -2 - in.pick(100), ne, ne + 1 + in.pick(100),
                                     p.isz() == 4 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min()};
                p.set_index(j, v[in.pick(5)]);
                return "an index out of [0, num_embeddings)";
            }
            [[fallthrough]];
        case 6:
            if (n_off > 0) {
                if (in.coin() || n_off < 2) { p.set_offset(0, in.coin() ? 1 + in.pick(3) : -1 - in.pick(3)); return "offsets[0] != 0"; }
                const int64_t i = 1 + in.pick(static_cast<int>(n_off - 1));
                p.set_offset(i, in.coin() ? p.off[i - 1] - 1 - in.pick(2) : p.num_indices + 1 + in.pick(3));
                return "offsets decreasing or past num_indices";
            }
            [[fallthrough]];
        case 7:
            switch (in.pick(6)) {
                case 0: if (p.num_bags > 0) { a.grad_out = nullptr; return "grad_out null with bags"; } [[fallthrough]];
                case 1: if (p.num_indices > 0) { a.table = nullptr; return "table null with indices"; } [[fallthrough]];
                case 2: if (p.num_indices > 0) { a.indices = nullptr; return "indices null with indices"; } [[fallthrough]];
                case 3: if (n_off > 0) { a.offsets = nullptr; return "offsets null"; } [[fallthrough]];
                case 4: a.update = nullptr; return "update null";
                default: a.desc = nullptr; return "desc null";
            }
        case 8:
            if (p.num_bags > 0 && p.rows > 0) { a.grad_out = p.at(p.o_tab); return "grad_out over the table"; }
            if (p.adagrad() && p.rows > 0) { u.state = reinterpret_cast<float*>(p.at(p.o_tab)); return "state over the table"; }
            [[fallthrough]];
        case 9:
            if (in.coin()) {
                const int64_t ne = d.num_embeddings;
                const int64_t v[] = {-2, ne, ne + 1 + in.pick(100), std::numeric_limits<int64_t>::min()};
                d.padding_idx = v[in.pick(4)];
                return "padding_idx out of [-1, num_embeddings)";
            }
            if (in.coin()) { a.num_bags = below(in, 0); return "num_bags < 0"; }
            a.num_indices = below(in, 0);
            return "num_indices < 0";
        default:
            d.mode = XK_EMBEDDING_BAG_MEAN;
            a.psw = reinterpret_cast<const float*>(p.at(p.o_psw));
            return "per_sample_weights with mode mean";
    }
}

void op_backward(In& in) {
    if (in.pick(8) == 7) {  // xk_embedding_update_init on garbage, or null
        if (in.coin()) {
            fz::expect_rejected(fz::timed("xk_embedding_update_init", [&] { return xk_embedding_update_init(nullptr); }),
                                "xk_embedding_update_init", "update null");
            return;
        }
        xk_embedding_update u;
        std::memset(&u, 0xA5, sizeof u);
        fz::expect_ok(fz::timed("xk_embedding_update_init", [&] { return xk_embedding_update_init(&u); }), "xk_embedding_update_init");
        if (u.optimizer != XK_EMBEDDING_SGD || u.lr != 0.01f || u.eps != 1e-10f || u.state || u.ld_state != 0)
            fz::finding("xk_embedding_update_init left a field other than its documented default");
        return;
    }
    BwdProblem p = make_bwd(in);
    const char* what = kBwdFn[p.kind];
    if (in.pick(3) != 2) {
        bwd_run_valid(p, what);
        return;
    }
    xk_embedding_bag_desc d = p.d;
    xk_embedding_update u = p.u;
    BwdArgs a = bwd_args_of(p);
    a.desc = &d;
    if (a.update) a.update = &u;
    const char* wrong = bwd_spoil(in, p, d, u, a);
    p.before = p.arena.snapshot();
    const xk_status s = fz::timed(what, [&] { return bwd_call(p.kind, a); });
    fz::expect_rejected(s, what, wrong);
    bwd_check_arena(p, what, false);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        switch (in.pick(12)) {
            case 10:
            case 11: op_backward(in); break;
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: {
                const int t = 1 + in.pick(2);
                fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(t); }), "xk_set_num_threads");
                break;
            }
            case 2: op_huge(in); break;
            case 3: op_desc_init(in); break;
            default: op_call(in); break;
        }
    }
    return 0;
}
