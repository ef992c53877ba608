// embedding_bag: every implementation against the reference, the reference against a double
// oracle written here; all modes, per-sample weights, padding_idx, empty / all-padding bags,
// include_last_offset (with unread garbage after the last offset), int32 and int64 indices, f32
// and bf16 tables and outputs, row strides > dim, dim in {1, 7, 16, 17, 128}, misaligned
// pointers, 1 and 2 threads, plans, the merged (multi-table) op, bad input, the C API.
#include <cstring>
#include <thread>

#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/embedding_bag/embedding_bag.hpp"
#include "xk/embedding_bag.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

namespace {

// Tolerances. u = 2^-24. A bag of L entries accumulated in f32 errs by at most ~L*u*S with
// S = sum_j |w_j * row_j[k]| (the oracle computes S); mean divides S by the count and adds one
// rounding. We allow
//   sum / mean, f32 out:  |got - want| <= 2 * (L + 3) * u * S(/count)
//   max, f32 out:         exact (a max of exactly converted values)
//   bf16 out:             the above + 2^-8 * |want|  (one rounding to bf16, half-ulp is 2^-9)
// bf16 tables convert exactly to f32, so they need nothing more. Empty and all-padding bags
// must be exactly 0 (S = 0).
constexpr double kU = 1.0 / (1 << 24);
constexpr double kBf16Rel = 1.0 / 256;

struct Case {
    EmbeddingBagDesc d;
    int64_t num_bags = 0;
    std::vector<int64_t> indices;  // num_indices (incl. unread trailing garbage with include_last_offset)
    std::vector<int64_t> offsets;  // num_bags (+1)
    std::vector<float> psw;        // num_indices when weighted
};

// Random bags: lengths 0..6 (every 5th bag empty), ~1/5 of entries the padding index, and with
// include_last_offset a few out-of-range indices after the last offset (they must not be read).
Case make_case(const EmbeddingBagDesc& d, int64_t num_bags, uint64_t seed) {
    std::mt19937_64 g(seed);
    Case c;
    c.d = d;
    c.num_bags = num_bags;
    for (int64_t b = 0; b < num_bags; ++b) {
        c.offsets.push_back(static_cast<int64_t>(c.indices.size()));
        const int64_t len = b % 5 == 4 ? 0 : static_cast<int64_t>(g() % 7);
        for (int64_t j = 0; j < len; ++j) {
            int64_t v = static_cast<int64_t>(g() % static_cast<uint64_t>(d.num_embeddings));
            if (d.padding_idx >= 0 && g() % 5 == 0) v = d.padding_idx;
            c.indices.push_back(v);
        }
    }
    if (d.include_last_offset) {
        c.offsets.push_back(static_cast<int64_t>(c.indices.size()));
        for (int j = 0; j < 3; ++j) c.indices.push_back(j % 2 ? -7 : d.num_embeddings + 100);
    }
    c.psw.resize(c.indices.size());
    test::fill_uniform(c.psw.data(), c.psw.size(), -2, 2, seed + 1);
    return c;
}

// Table values as doubles (exactly what the kernel sees), row stride ld.
struct Table {
    DType t = DType::f32;
    int64_t ld = 0;
    Buffer<float> f;
    Buffer<bf16> h;
    void make(const EmbeddingBagDesc& d, size_t misalign_elems, uint64_t seed) {
        t = d.table_dtype;
        ld = d.ld_table ? d.ld_table : d.dim;
        const size_t n = static_cast<size_t>(d.num_embeddings * ld);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        if (t == DType::bf16) {
            h.resize(n, misalign_elems * 2);
            for (size_t i = 0; i < n; ++i) h[i] = bf16(nan);  // the gap columns must never be used
        } else {
            f.resize(n, misalign_elems * 4);
            for (size_t i = 0; i < n; ++i) f[i] = nan;
        }
        std::mt19937_64 g(seed);
        std::uniform_real_distribution<float> u(-1, 1);
        for (int64_t r = 0; r < d.num_embeddings; ++r)
            for (int64_t k = 0; k < d.dim; ++k) {
                if (t == DType::bf16) h[r * ld + k] = bf16(u(g));
                else f[r * ld + k] = u(g);
            }
    }
    const void* data() const { return t == DType::bf16 ? static_cast<const void*>(h.data()) : f.data(); }
    double at(int64_t r, int64_t k) const { return t == DType::bf16 ? h[r * ld + k].to_float() : f[r * ld + k]; }
};

// The oracle: PyTorch's definition, in double.
void oracle(const Case& c, const Table& tab, std::vector<double>& want, std::vector<double>& tol) {
    const EmbeddingBagDesc& d = c.d;
    const int64_t dim = d.dim, n_off = static_cast<int64_t>(c.offsets.size());
    const int64_t n_idx = static_cast<int64_t>(c.indices.size());
    want.assign(static_cast<size_t>(c.num_bags * dim), 0.0);
    tol.assign(want.size(), 0.0);
    for (int64_t b = 0; b < c.num_bags; ++b) {
        const int64_t start = c.offsets[b], end = b + 1 < n_off ? c.offsets[b + 1] : n_idx;
        for (int64_t k = 0; k < dim; ++k) {
            double acc = 0, mag = 0;
            int64_t count = 0;
            for (int64_t j = start; j < end; ++j) {
                const int64_t r = c.indices[j];
                if (r == d.padding_idx) continue;
                const double v = tab.at(r, k) * (d.per_sample_weights ? c.psw[j] : 1.0);
                if (d.mode == EmbeddingBagMode::max) acc = count == 0 ? v : std::max(acc, v);
                else acc += v;
                mag += std::fabs(v);
                ++count;
            }
            double t = 2.0 * static_cast<double>(end - start + 3) * kU * mag;
            if (d.mode == EmbeddingBagMode::mean && count > 0) {
                acc /= static_cast<double>(count);
                t /= static_cast<double>(count);
            }
            if (d.mode == EmbeddingBagMode::max) t = 0;
            if (d.out_dtype == DType::bf16) t += kBf16Rel * std::fabs(acc);
            want[b * dim + k] = acc;
            tol[b * dim + k] = t;
        }
    }
}

// Index / offset arrays in the descriptor's type, misaligned by whole elements.
struct Ints {
    Buffer<int32_t> i32;
    Buffer<int64_t> i64;
    IndexType t = IndexType::i64;
    void make(IndexType type, const std::vector<int64_t>& v, size_t misalign_elems) {
        t = type;
        if (t == IndexType::i32) {
            i32.resize(v.size(), misalign_elems * 4);
            for (size_t i = 0; i < v.size(); ++i) i32[i] = static_cast<int32_t>(v[i]);
        } else {
            i64.resize(v.size(), misalign_elems * 8);
            for (size_t i = 0; i < v.size(); ++i) i64[i] = v[i];
        }
    }
    const void* data() const { return t == IndexType::i32 ? static_cast<const void*>(i32.data()) : i64.data(); }
};

struct Out {
    DType t = DType::f32;
    int64_t ld = 0;
    Buffer<float> f;
    Buffer<bf16> h;
    static constexpr float kGuard = 640.0f;  // exact in bf16
    void make(DType type, int64_t rows, int64_t ld_, size_t misalign_elems) {
        t = type;
        ld = ld_;
        const size_t n = static_cast<size_t>(rows * ld + 8);
        if (t == DType::bf16) {
            h.resize(n, misalign_elems * 2);
            for (size_t i = 0; i < n; ++i) h[i] = bf16(kGuard);
        } else {
            f.resize(n, misalign_elems * 4);
            for (size_t i = 0; i < n; ++i) f[i] = kGuard;
        }
    }
    void* data() { return t == DType::bf16 ? static_cast<void*>(h.data()) : f.data(); }
    double at(size_t i) const { return t == DType::bf16 ? h[i].to_float() : f[i]; }
    size_t size() const { return t == DType::bf16 ? h.size() : f.size(); }
};

std::string describe(const EmbeddingBagDesc& d) {
    return detail::embedding_bag_config(detail::embedding_bag_validate_desc("test", d)).key() +
           " E=" + std::to_string(d.num_embeddings) + " pad=" + std::to_string(d.padding_idx);
}

// Checks columns [col, col+dim) of every row of `out` against the oracle; the rest of each row up
// to `cols_total` that this table does not own is left to the caller.
::testing::AssertionResult check_out(const Out& out, int64_t col, int64_t dim, int64_t num_bags,
                                     const std::vector<double>& want, const std::vector<double>& tol) {
    size_t bad = 0;
    std::string msg;
    for (int64_t b = 0; b < num_bags; ++b)
        for (int64_t k = 0; k < dim; ++k) {
            const double got = out.at(static_cast<size_t>(b * out.ld + col + k)), w = want[b * dim + k];
            if (!(std::fabs(got - w) <= tol[b * dim + k])) {
                if (bad < 5)
                    msg += "\n  bag " + std::to_string(b) + " col " + std::to_string(k) + ": got " + std::to_string(got) +
                           " want " + std::to_string(w);
                ++bad;
            }
        }
    if (bad) return ::testing::AssertionFailure() << bad << " values differ:" << msg;
    return ::testing::AssertionSuccess();
}

// One full run: random case, buffers, call (plan or one-shot), compare, guards untouched.
void run_case(const EmbeddingBagDesc& d, int64_t num_bags, size_t misalign, bool use_plan, uint64_t seed) {
    const Case c = make_case(d, num_bags, seed);
    Table tab;
    tab.make(d, misalign, seed + 2);
    Ints idx, off;
    idx.make(d.index_type, c.indices, misalign + 1);
    off.make(d.index_type, c.offsets, misalign);
    Buffer<float> psw(c.psw.size(), (misalign % 4) * 4);
    std::copy(c.psw.begin(), c.psw.end(), psw.begin());
    const int64_t ld_out = d.ld_out ? d.ld_out : d.dim;
    Out out;
    out.make(d.out_dtype, num_bags, ld_out, misalign + 2);

    EmbeddingBagArgs a;
    a.num_bags = num_bags;
    a.num_indices = static_cast<int64_t>(c.indices.size());
    a.table = tab.data();
    a.indices = idx.data();
    a.offsets = off.data();
    a.per_sample_weights = d.per_sample_weights ? psw.data() : nullptr;
    a.out = out.data();
    if (use_plan) EmbeddingBagPlan(d).run(a);
    else embedding_bag(d, a);

    std::vector<double> want, tol;
    oracle(c, tab, want, tol);
    EXPECT_TRUE(check_out(out, 0, d.dim, num_bags, want, tol))
        << describe(d) << " bags=" << num_bags << " misalign=" << misalign << " plan=" << use_plan;
    for (int64_t b = 0; b < num_bags; ++b)
        for (int64_t k = d.dim; k < ld_out; ++k) ASSERT_EQ(out.at(b * ld_out + k), Out::kGuard) << "gap written";
    for (size_t i = static_cast<size_t>(num_bags * ld_out); i < out.size(); ++i)
        ASSERT_EQ(out.at(i), Out::kGuard) << "wrote past out";
}

const EmbeddingBagMode kModes[] = {EmbeddingBagMode::sum, EmbeddingBagMode::mean, EmbeddingBagMode::max};

}  // namespace

TEST(EmbeddingBag, SweepMatchesOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        SCOPED_TRACE("threads=" + std::to_string(threads));
        for_each_isa([&](Isa) {
            uint64_t k = 0;
            for (int64_t dim : {1, 7, 16, 17, 128})
                for (EmbeddingBagMode mode : kModes)
                    for (IndexType it : {IndexType::i32, IndexType::i64})
                        for (bool last : {false, true})
                            for (bool pad : {false, true})
                                for (DType tdt : {DType::f32, DType::bf16})
                                    for (DType odt : {DType::f32, DType::bf16}) {
                                        EmbeddingBagDesc d;
                                        d.num_embeddings = 23;
                                        d.dim = dim;
                                        d.ld_table = k % 3 == 0 ? 0 : (k % 3 == 1 ? dim : dim + 3);
                                        d.ld_out = k % 4 < 2 ? 0 : dim + 5;
                                        d.mode = mode;
                                        d.index_type = it;
                                        d.include_last_offset = last;
                                        d.padding_idx = pad ? static_cast<int64_t>(k % 23) : -1;
                                        d.per_sample_weights = mode == EmbeddingBagMode::sum && k % 2 == 0;
                                        d.table_dtype = tdt;
                                        d.out_dtype = odt;
                                        run_case(d, static_cast<int64_t>(k % 17), k % 3, k % 5 == 0, 1000 + k);
                                        ++k;
                                    }
        });
    }
    set_num_threads(0);
}

// Enough bags that two threads split them; a large table.
TEST(EmbeddingBag, ManyBagsTwoThreads) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (EmbeddingBagMode mode : kModes) {
                EmbeddingBagDesc d;
                d.num_embeddings = 5000;
                d.dim = 64;
                d.mode = mode;
                d.padding_idx = 17;
                d.per_sample_weights = mode == EmbeddingBagMode::sum;
                run_case(d, 3000, 1, mode == EmbeddingBagMode::mean, 77);
            }
        });
    }
    set_num_threads(0);
}

TEST(EmbeddingBag, MaxPropagatesNaNAndKeepsNegatives) {
    for_each_isa([&](Isa) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        // Row 0 is negative; row 1 has a NaN in column 1; row 2 is larger elsewhere.
        const float table[3 * 3] = {-5, -4, -3, 0, nan, 0, 1, 1, 1};
        for (auto order : {std::vector<int64_t>{0, 1, 2}, std::vector<int64_t>{2, 1, 0}, std::vector<int64_t>{1, 0}}) {
            const int64_t offsets[3] = {0, 1, 1};  // bag 0 = {first}, bag 1 empty, bag 2 = the rest
            EmbeddingBagDesc d;
            d.num_embeddings = 3;
            d.dim = 3;
            d.mode = EmbeddingBagMode::max;
            float out[9];
            EmbeddingBagArgs a;
            a.num_bags = 3;
            a.num_indices = static_cast<int64_t>(order.size());
            a.table = table;
            a.indices = order.data();
            a.offsets = offsets;
            a.out = out;
            embedding_bag(d, a);
            for (int k = 0; k < 3; ++k) {
                const float first = table[order[0] * 3 + k];
                if (std::isnan(first)) EXPECT_TRUE(std::isnan(out[k]));
                else EXPECT_EQ(out[k], first);
            }
            for (int k = 0; k < 3; ++k) EXPECT_EQ(out[3 + k], 0.0f);  // empty bag
            bool has_nan_row = false;
            for (size_t j = 1; j < order.size(); ++j) has_nan_row |= order[j] == 1;
            if (has_nan_row) EXPECT_TRUE(std::isnan(out[7])) << "NaN must propagate through max";
        }
    });
}

// Max-pooling ties: equal values keep the first entry's (so +0 / -0 keep the sign of the first).
TEST(EmbeddingBag, MaxTiesKeepTheFirst) {
    for_each_isa([&](Isa) {
        for (int64_t dim : {3, 40}) {
            std::vector<float> table(static_cast<size_t>(2 * dim));
            for (int64_t k = 0; k < dim; ++k) {
                table[k] = k % 2 ? 0.0f : 1.5f;
                table[dim + k] = k % 2 ? -0.0f : 1.5f;
            }
            for (auto order : {std::vector<int64_t>{0, 1}, std::vector<int64_t>{1, 0}}) {
                const int64_t offsets[1] = {0};
                EmbeddingBagDesc d;
                d.num_embeddings = 2;
                d.dim = dim;
                d.mode = EmbeddingBagMode::max;
                std::vector<float> out(static_cast<size_t>(dim));
                EmbeddingBagArgs a{1, 2, table.data(), order.data(), offsets, nullptr, out.data()};
                embedding_bag(d, a);
                for (int64_t k = 0; k < dim; ++k) {
                    EXPECT_EQ(out[k], table[order[0] * dim + k]);
                    EXPECT_EQ(std::signbit(out[k]), std::signbit(table[order[0] * dim + k])) << "k=" << k;
                }
            }
        }
    });
}

TEST(EmbeddingBag, NullPointersAllowedWhereNothingIsRead) {
    EmbeddingBagDesc d;
    d.num_embeddings = 4;
    d.dim = 5;
    EmbeddingBagArgs a;  // no bags at all
    embedding_bag(d, a);
    d.include_last_offset = true;  // one offset, no bags
    const int64_t zero = 0;
    a.offsets = &zero;
    embedding_bag(d, a);
    // Bags but no indices: table and indices may be null, every bag is zero.
    d.include_last_offset = false;
    const int64_t offs[3] = {0, 0, 0};
    float out[15];
    for (float& v : out) v = 9;
    a.num_bags = 3;
    a.offsets = offs;
    a.out = out;
    embedding_bag(d, a);
    for (float v : out) EXPECT_EQ(v, 0.0f);
    // An empty table is fine when no bag reads it.
    d.num_embeddings = 0;
    embedding_bag(d, a);
}

TEST(EmbeddingBag, EveryImplementationMatchesReference) {
    const auto& reg = detail::embedding_bag_registry();
    for (const auto& impl : reg.impls()) {
        if (!isa_supported(impl.isa) || impl.isa > max_isa()) continue;
        SCOPED_TRACE(impl.name);
        uint64_t k = 0;
        for (int64_t dim : {1, 7, 16, 17, 33, 64, 128, 300})
            for (EmbeddingBagMode mode : kModes)
                for (IndexType it : {IndexType::i32, IndexType::i64})
                    for (DType tdt : {DType::f32, DType::bf16}) {
                        EmbeddingBagDesc d0;
                        d0.num_embeddings = 31;
                        d0.dim = dim;
                        d0.ld_table = dim + (k % 2);
                        d0.mode = mode;
                        d0.index_type = it;
                        d0.table_dtype = tdt;
                        d0.padding_idx = k % 3 == 0 ? 3 : -1;
                        d0.include_last_offset = k % 2 == 1;
                        d0.per_sample_weights = mode == EmbeddingBagMode::sum && k % 4 < 2;
                        const EmbeddingBagDesc d = detail::embedding_bag_validate_desc("test", d0);
                        const detail::EmbeddingBagConfig cfg = detail::embedding_bag_config(d);
                        ++k;
                        if (impl.supports && !impl.supports(cfg)) continue;
                        const Case c = make_case(d, 19, 500 + k);
                        Table tab;
                        tab.make(d, 0, 600 + k);
                        Ints idx, off;
                        idx.make(it, c.indices, 0);
                        off.make(it, c.offsets, 0);
                        std::vector<float> got(19 * dim, -1), want(19 * dim, -2);
                        EmbeddingBagArgs a{19, static_cast<int64_t>(c.indices.size()), tab.data(), idx.data(), off.data(),
                                           d.per_sample_weights ? c.psw.data() : nullptr, got.data()};
                        const detail::EmbeddingBagCall call = detail::embedding_bag_validate_args("test", d, a);
                        reg.get(cfg, impl).kernel->run(call, 0, 19);
                        detail::EmbeddingBagCall ref = call;
                        ref.a.out = want.data();
                        detail::embedding_bag_reference(ref, 0, 19);
                        // Same accumulation order as the reference: bit for bit.
                        EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << cfg.key();
                    }
    }
}

TEST(EmbeddingBag, PlanIsReusableAcrossBatchesAndThreads) {
    EmbeddingBagDesc d;
    d.num_embeddings = 100;
    d.dim = 16;
    d.mode = EmbeddingBagMode::mean;
    d.index_type = IndexType::i32;
    for_each_isa([&](Isa isa) {
        const EmbeddingBagPlan plan(d);
        EXPECT_LE(detail::embedding_bag_registry().find(plan.impl_name()).isa, isa);
        EXPECT_EQ(plan.desc().ld_table, 16);  // resolved
        Table tab;
        tab.make(d, 0, 3);
        for (int64_t bags : {0, 1, 9, 40}) {  // one plan, many batch shapes
            const Case c = make_case(d, bags, 40 + bags);
            Ints idx, off;
            idx.make(d.index_type, c.indices, 0);
            off.make(d.index_type, c.offsets, 0);
            std::vector<float> want(bags * 16 + 1, -1);
            EmbeddingBagArgs a{bags, static_cast<int64_t>(c.indices.size()), tab.data(), idx.data(), off.data(), nullptr,
                               want.data()};
            plan.run(a);
            std::vector<std::vector<float>> outs(4, std::vector<float>(bags * 16 + 1, -1));
            std::vector<std::thread> th;
            for (int t = 0; t < 4; ++t)
                th.emplace_back([&, t] {
                    EmbeddingBagArgs at = a;
                    at.out = outs[t].data();
                    plan.run(at);
                });
            for (auto& t : th) t.join();
            for (int t = 0; t < 4; ++t) EXPECT_EQ(outs[t], want);
            std::vector<double> w, tol;
            oracle(c, tab, w, tol);
            Out o;
            o.make(DType::f32, bags, 16, 0);
            std::copy(want.begin(), want.end() - 1, o.f.begin());
            EXPECT_TRUE(check_out(o, 0, 16, bags, w, tol));
        }
    });
}

TEST(EmbeddingBag, MergedTablesMatchSingleTables) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (DType odt : {DType::f32, DType::bf16}) {
                std::vector<EmbeddingBagDesc> ds(4);
                const int64_t dims[4] = {17, 1, 16, 7};
                for (int t = 0; t < 4; ++t) {
                    ds[t].num_embeddings = 10 + 7 * t;
                    ds[t].dim = dims[t];
                    ds[t].ld_table = dims[t] + t % 2;
                    ds[t].mode = kModes[t % 3];
                    ds[t].table_dtype = t == 2 ? DType::bf16 : DType::f32;
                    ds[t].out_dtype = odt;
                    ds[t].index_type = t == 1 ? IndexType::i32 : IndexType::i64;
                    ds[t].include_last_offset = t == 3;
                    ds[t].padding_idx = t == 0 ? 4 : -1;
                    ds[t].per_sample_weights = t == 0;
                }
                const int64_t B = 37, total = 17 + 1 + 16 + 7, ld = total + 3;
                const EmbeddingBagMultiPlan plan(ds, ld);
                ASSERT_EQ(plan.num_tables(), 4);
                ASSERT_EQ(plan.total_dim(), total);
                ASSERT_EQ(plan.ld_out(), ld);
                std::vector<Case> cs;
                std::vector<Table> tabs(4);
                std::vector<Ints> idx(4), off(4);
                std::vector<EmbeddingBagArgs> args(4);
                for (int t = 0; t < 4; ++t) {
                    cs.push_back(make_case(ds[t], B, 90 + t));
                    tabs[t].make(ds[t], t % 2, 95 + t);
                    idx[t].make(ds[t].index_type, cs[t].indices, 1);
                    off[t].make(ds[t].index_type, cs[t].offsets, 0);
                    args[t] = {B, static_cast<int64_t>(cs[t].indices.size()), tabs[t].data(), idx[t].data(),
                               off[t].data(), ds[t].per_sample_weights ? cs[t].psw.data() : nullptr, nullptr};
                }
                Out out;
                out.make(odt, B, ld, 1);
                plan.run(args.data(), 4, out.data());
                for (int t = 0; t < 4; ++t) {
                    std::vector<double> want, tol;
                    oracle(cs[t], tabs[t], want, tol);
                    EXPECT_EQ(plan.column(t), t == 0 ? 0 : (t == 1 ? 17 : (t == 2 ? 18 : 34)));
                    EXPECT_TRUE(check_out(out, plan.column(t), ds[t].dim, B, want, tol)) << "table " << t;
                }
                for (int64_t b = 0; b < B; ++b)
                    for (int64_t k = total; k < ld; ++k) ASSERT_EQ(out.at(b * ld + k), Out::kGuard);
                // The one-shot form gives the same bits.
                Out out2;
                out2.make(odt, B, ld, 0);
                embedding_bag_multi(ds, args.data(), 4, out2.data(), ld);
                for (size_t i = 0; i < static_cast<size_t>(B * ld); ++i) ASSERT_EQ(out2.at(i), out.at(i));
            }
        });
    }
    set_num_threads(0);
}

// Row-wise quantized tables (FBGEMM's fused 8-bit / 4-bit rows), odd dims (4-bit: a garbage high
// nibble in the last byte of odd rows), row strides with garbage padding bytes, a byte-misaligned
// table, 1 and 2 threads. Max pooling: bit for bit the same call on the dequantized f32 table
// (v = q * scale + bias in f32, the product rounded first). Sum / mean (the fused form: acc =
// fma(q, w * scale, acc), the w * bias summed apart): every implementation bit for bit the
// reference, and the reference within the sum tolerance of the exact q * scale + bias in double.
namespace {
struct QTable {
    std::vector<uint8_t> bytes;  // E rows of ld bytes (+1 for the misalignment)
    std::vector<float> deq;      // E x dim
    std::vector<double> exact;   // E x dim: q * scale + bias in double
    std::vector<double> mag;     // E x dim: |q * scale| + |bias|
    int64_t ld = 0;
};
QTable make_qtable(EmbeddingRowQuant q, int64_t E, int64_t dim, int64_t extra, uint64_t seed) {
    QTable t;
    const int64_t rb = embedding_row_quant_bytes(q, dim);
    t.ld = rb + extra;
    std::mt19937_64 g(seed);
    t.bytes.resize(static_cast<size_t>(E * t.ld + 1));
    for (auto& b : t.bytes) b = static_cast<uint8_t>(g());  // garbage everywhere first
    t.deq.resize(static_cast<size_t>(E * dim));
    t.exact.resize(t.deq.size());
    t.mag.resize(t.deq.size());
    std::uniform_real_distribution<float> u(-1, 1);
    for (int64_t r = 0; r < E; ++r) {
        uint8_t* row = t.bytes.data() + 1 + r * t.ld;
        float scale = u(g) * 0.05f, bias = u(g);
        if (q == EmbeddingRowQuant::int8_rowwise) {
            std::memcpy(row + dim, &scale, 4);
            std::memcpy(row + dim + 4, &bias, 4);
        } else {
            const uint16_t hs = f16::from_float(scale), hb = f16::from_float(bias);
            scale = f16::to_float(hs);
            bias = f16::to_float(hb);
            std::memcpy(row + (dim + 1) / 2, &hs, 2);
            std::memcpy(row + (dim + 1) / 2 + 2, &hb, 2);
        }
        for (int64_t k = 0; k < dim; ++k) {
            const int qv = q == EmbeddingRowQuant::int8_rowwise ? row[k] : (row[k / 2] >> (4 * (k % 2))) & 15;
            volatile float p = static_cast<float>(qv) * scale;  // rounded, then the sum
            t.deq[r * dim + k] = p + bias;
            t.exact[r * dim + k] = static_cast<double>(qv) * scale + bias;
            t.mag[r * dim + k] = std::fabs(static_cast<double>(qv) * scale) + std::fabs(bias);
        }
    }
    return t;
}
}  // namespace

TEST(EmbeddingBag, QuantizedTablesMatchDequantizedReference) {
    const auto& reg = detail::embedding_bag_registry();
    const int64_t E = 29;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        uint64_t k = 0;
        for (EmbeddingRowQuant q : {EmbeddingRowQuant::int8_rowwise, EmbeddingRowQuant::int4_rowwise})
            for (int64_t dim : {1, 7, 16, 17, 33, 64, 128, 300})
                for (EmbeddingBagMode mode : kModes)
                    for (IndexType it : {IndexType::i32, IndexType::i64}) {
                        ++k;
                        const QTable qt = make_qtable(q, E, dim, k % 3 == 0 ? 5 : 0, 700 + k);
                        EmbeddingBagDesc d;
                        d.num_embeddings = E;
                        d.dim = dim;
                        d.mode = mode;
                        d.index_type = it;
                        d.padding_idx = k % 4 == 0 ? 2 : -1;
                        d.include_last_offset = k % 2 == 1;
                        d.per_sample_weights = mode == EmbeddingBagMode::sum && k % 3 != 2;
                        d.out_dtype = k % 5 == 0 ? DType::bf16 : DType::f32;
                        EmbeddingBagDesc dq = d;  // the quantized table
                        dq.row_quant = q;
                        dq.table_dtype = DType::u8;
                        dq.ld_table = k % 3 == 0 ? qt.ld : 0;
                        const Case c = make_case(d, 23, 800 + k);
                        Ints idx, off;
                        idx.make(it, c.indices, 0);
                        off.make(it, c.offsets, 0);
                        const int64_t n = 23 * dim;
                        Out want, got;
                        want.make(d.out_dtype, 23, dim, 0);
                        EmbeddingBagArgs a{23, static_cast<int64_t>(c.indices.size()), qt.deq.data(), idx.data(),
                                           off.data(), d.per_sample_weights ? c.psw.data() : nullptr, want.data()};
                        embedding_bag(d, a);  // f32 table
                        a.table = qt.bytes.data() + 1;
                        const EmbeddingBagDesc rq = detail::embedding_bag_validate_desc("test", dq);
                        const detail::EmbeddingBagConfig cfg = detail::embedding_bag_config(rq);
                        if (mode != EmbeddingBagMode::max) {
                            // want = the reference on the quantized table, checked against the
                            // double oracle of the exact values.
                            a.out = want.data();
                            const detail::EmbeddingBagCall call = detail::embedding_bag_validate_args("test", rq, a);
                            detail::embedding_bag_reference(call, 0, 23);
                            std::vector<double> ow(static_cast<size_t>(n), 0.0), ot(static_cast<size_t>(n), 0.0);
                            const int64_t n_off = static_cast<int64_t>(c.offsets.size()), n_idx = static_cast<int64_t>(c.indices.size());
                            for (int64_t b = 0; b < 23; ++b) {
                                const int64_t j0 = c.offsets[b], j1 = b + 1 < n_off ? c.offsets[b + 1] : n_idx;
                                for (int64_t col = 0; col < dim; ++col) {
                                    double acc = 0, m = 0;
                                    int64_t cnt = 0;
                                    for (int64_t j = j0; j < j1; ++j) {
                                        const int64_t r = c.indices[j];
                                        if (r == d.padding_idx) continue;
                                        const double w = d.per_sample_weights ? c.psw[j] : 1.0;
                                        acc += w * qt.exact[r * dim + col];
                                        m += std::fabs(w) * qt.mag[r * dim + col];
                                        ++cnt;
                                    }
                                    double t = 2.0 * static_cast<double>(j1 - j0 + 4) * kU * m;
                                    if (mode == EmbeddingBagMode::mean && cnt > 0) {
                                        acc /= static_cast<double>(cnt);
                                        t /= static_cast<double>(cnt);
                                    }
                                    if (d.out_dtype == DType::bf16) t += kBf16Rel * std::fabs(acc);
                                    ow[b * dim + col] = acc;
                                    ot[b * dim + col] = t;
                                }
                            }
                            ASSERT_TRUE(check_out(want, 0, dim, 23, ow, ot)) << cfg.key();
                        }
                        for (const auto& impl : reg.impls()) {
                            if (!isa_supported(impl.isa) || impl.isa > max_isa()) continue;
                            got.make(d.out_dtype, 23, dim, 1);
                            a.out = got.data();
                            const detail::EmbeddingBagCall call = detail::embedding_bag_validate_args("test", rq, a);
                            reg.get(cfg, impl).kernel->run(call, 0, 23);
                            const size_t bytes = static_cast<size_t>(n) * (d.out_dtype == DType::bf16 ? 2 : 4);
                            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), bytes)) << impl.name << " " << cfg.key();
                        }
                        // Through the public entry (the selected kernel, threads).
                        got.make(d.out_dtype, 23, dim, 0);
                        a.out = got.data();
                        EmbeddingBagPlan(dq).run(a);
                        const size_t bytes = static_cast<size_t>(n) * (d.out_dtype == DType::bf16 ? 2 : 4);
                        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), bytes)) << cfg.key();
                    }
    }
    set_num_threads(0);
}

// The prefetch distance and hint (per CPU: embedding_bag_prefetch_rows / _l2) change no result:
// every kernel, f32 / bf16 / int8 / int4 rows, with no prefetch, 4 rows, the default and 200 rows
// ahead (bags of 0-90 entries: shorter and longer than the distance, the chunk's end inside the
// distance), T0 and T1, bit for bit the reference; the lookup's row copy the same.
TEST(EmbeddingBag, PrefetchDistanceChangesNoResult) {
    const auto& reg = detail::embedding_bag_registry();
    const int64_t E = 300, B = 9;
    std::mt19937_64 g(77);
    std::vector<int64_t> idx, off;
    for (int64_t b = 0; b < B; ++b) {
        off.push_back(static_cast<int64_t>(idx.size()));
        const int64_t len = b % 4 == 3 ? 0 : static_cast<int64_t>(g() % 91);
        for (int64_t j = 0; j < len; ++j) idx.push_back(static_cast<int64_t>(g() % E));
    }
    const int64_t n = static_cast<int64_t>(idx.size());
    std::vector<float> psw(static_cast<size_t>(n));
    test::fill_uniform(psw.data(), psw.size(), -2, 2, 78);
    struct Pf {
        int64_t bytes, cap;
        int hint;
    };
    const Pf settings[] = {{0, 0, 0}, {64, 4, 1}, {0, -1, 0}, {0, -1, 1}, {1 << 20, 200, 1}, {1 << 20, 200, 0}};
    for (int64_t dim : {16, 33, 64, 128})
        for (int table : {0, 1, 2, 3})  // f32, bf16, int8 rows, int4 rows
            for (EmbeddingBagMode mode : {EmbeddingBagMode::sum, EmbeddingBagMode::max}) {
                EmbeddingBagDesc d;
                d.num_embeddings = E;
                d.dim = dim;
                d.mode = mode;
                d.per_sample_weights = mode == EmbeddingBagMode::sum && dim != 64;
                d.table_dtype = table == 1 ? DType::bf16 : DType::f32;
                Table tab;
                QTable qt;
                const void* tp = nullptr;
                if (table >= 2) {
                    d.row_quant = table == 2 ? EmbeddingRowQuant::int8_rowwise : EmbeddingRowQuant::int4_rowwise;
                    d.table_dtype = DType::u8;
                    qt = make_qtable(d.row_quant, E, dim, 0, 90 + dim);
                    tp = qt.bytes.data() + 1;
                } else {
                    tab.make(d, 0, 91 + dim);
                    tp = tab.data();
                }
                const EmbeddingBagDesc rd = detail::embedding_bag_validate_desc("test", d);
                const detail::EmbeddingBagConfig cfg = detail::embedding_bag_config(rd);
                std::vector<float> want(static_cast<size_t>(B * dim), -2), got(want.size());
                EmbeddingBagArgs a{B, n, tp, idx.data(), off.data(), d.per_sample_weights ? psw.data() : nullptr, want.data()};
                detail::embedding_bag_reference(detail::embedding_bag_validate_args("test", rd, a), 0, B);
                for (const Pf& pf : settings) {
                    detail::embedding_bag_set_prefetch(pf.bytes, pf.cap, pf.hint);
                    for (const auto& impl : reg.impls()) {
                        if (!isa_supported(impl.isa) || impl.isa > max_isa()) continue;
                        std::fill(got.begin(), got.end(), -1.0f);
                        a.out = got.data();
                        const detail::EmbeddingBagCall call = detail::embedding_bag_validate_args("test", rd, a);
                        for (int64_t b0 : {int64_t(0), int64_t(4)}) reg.get(cfg, impl).kernel->run(call, b0, b0 ? B : 4);
                        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
                            << impl.name << " " << cfg.key() << " pf " << pf.bytes << "/" << pf.cap << "/" << pf.hint;
                    }
                    if (table == 0 && mode == EmbeddingBagMode::sum) {  // the lookup's row copy
                        EmbeddingBagDesc ld;
                        ld.num_embeddings = E;
                        ld.dim = dim;
                        std::vector<float> rows(static_cast<size_t>(n * dim), -1);
                        embedding(ld, EmbeddingArgs{n, tp, idx.data(), rows.data()});
                        for (int64_t i = 0; i < n; ++i)
                            ASSERT_EQ(0, std::memcmp(&rows[i * dim], &tab.f[idx[i] * dim], dim * 4)) << "row " << i;
                    }
                }
                detail::embedding_bag_set_prefetch(0, -1, -1);
            }
}

TEST(EmbeddingBag, QuantizedDescriptorErrors) {
    EmbeddingBagDesc d;
    d.num_embeddings = 4;
    d.dim = 6;
    d.row_quant = EmbeddingRowQuant::int8_rowwise;  // table_dtype still f32
    try {
        EmbeddingBagPlan p(d);
        FAIL() << "accepted a f32 table_dtype with row_quant";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("table_dtype=f32 must be u8"), std::string::npos) << e.what();
    }
    d.table_dtype = DType::u8;
    d.ld_table = 13;  // < 6 + 8
    try {
        EmbeddingBagPlan p(d);
        FAIL() << "accepted a short ld_table";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("ld_table=13 must be >= the fused row size 14"), std::string::npos) << e.what();
    }
    d.ld_table = 0;
    EXPECT_EQ(EmbeddingBagPlan(d).desc().ld_table, 14);
    d.row_quant = EmbeddingRowQuant::int4_rowwise;
    EXPECT_EQ(EmbeddingBagPlan(d).desc().ld_table, 7);
    d.row_quant = static_cast<EmbeddingRowQuant>(3);
    EXPECT_THROW(EmbeddingBagPlan p(d), Error);
    d.row_quant = EmbeddingRowQuant::none;  // u8 without row_quant
    try {
        EmbeddingBagPlan p(d);
        FAIL();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), Status::unsupported);
    }
}

// Embedding lookup: every row copied exactly (-0 and NaN kept), converted to bf16 by rounding to
// nearest even, quantized rows as their dequantized copy; odd dims up to 1023, int32 / int64
// indices, misaligned table and out, out rows strided (ld_out > dim, the gaps untouched), regular
// and (threshold 0) non-temporal stores of the row copy; 1 and 2 threads, every ISA; a bad index
// is rejected naming its position before anything is written.
TEST(EmbeddingBag, LookupGathersRows) {
    const int64_t E = 37;
    for (int threads : {1, 2}) {
        for (int64_t nt_threshold : {int64_t(-1), int64_t(0)}) {
        set_num_threads(threads);
        detail::set_nt_store_threshold(nt_threshold);
        for_each_isa([&](Isa) {
            uint64_t k = 0;
            for (int64_t dim : {1, 7, 16, 17, 64, 300, 1023})
                for (int tt = 0; tt < 4; ++tt)  // f32, bf16, int8 rows, int4 rows
                    for (IndexType it : {IndexType::i32, IndexType::i64})
                        for (DType odt : {DType::f32, DType::bf16}) {
                            ++k;
                            EmbeddingBagDesc d;
                            d.num_embeddings = E;
                            d.dim = dim;
                            d.index_type = it;
                            d.out_dtype = odt;
                            d.padding_idx = k % 3 == 0 ? 5 : -1;  // returned like any row
                            const int64_t ld = k % 4 == 1 ? dim + 5 : dim;
                            d.ld_out = k % 4 == 1 ? ld : 0;
                            const size_t mis = k % 2;  // elements: out, f32 / bf16 table
                            std::vector<float> rows(static_cast<size_t>(E * dim));  // the values (f32)
                            Buffer<float> tf;
                            Buffer<bf16> tb;
                            QTable qt;
                            const void* table = nullptr;
                            if (tt == 0 || tt == 1) {
                                test::fill_uniform(rows.data(), rows.size(), -3, 3, 40 + k);
                                rows[0] = -0.0f;
                                if (rows.size() > 3) rows[3] = std::numeric_limits<float>::quiet_NaN();
                                if (tt == 0) {
                                    tf.resize(rows.size(), mis * 4);
                                    std::copy(rows.begin(), rows.end(), tf.data());
                                    table = tf.data();
                                } else {
                                    d.table_dtype = DType::bf16;
                                    tb.resize(rows.size(), mis * 2);
                                    for (size_t i = 0; i < rows.size(); ++i) {
                                        tb[i] = bf16(rows[i]);
                                        rows[i] = tb[i].to_float();
                                    }
                                    table = tb.data();
                                }
                            } else {
                                d.table_dtype = DType::u8;
                                d.row_quant = tt == 2 ? EmbeddingRowQuant::int8_rowwise : EmbeddingRowQuant::int4_rowwise;
                                qt = make_qtable(d.row_quant, E, dim, 0, 50 + k);
                                rows = qt.deq;
                                table = qt.bytes.data() + 1;
                            }
                            const int64_t n = static_cast<int64_t>(k % 40);
                            std::vector<int64_t> iv(static_cast<size_t>(n));
                            for (int64_t i = 0; i < n; ++i) iv[i] = (i * 7 + static_cast<int64_t>(k)) % E;
                            Ints idx;
                            idx.make(it, iv, 0);
                            Out out;
                            out.make(odt, n, ld, mis);
                            embedding(d, EmbeddingArgs{n, table, idx.data(), out.data()});
                            for (int64_t i = 0; i < n; ++i)
                                for (int64_t c = 0; c < dim; ++c) {
                                    const float v = rows[iv[i] * dim + c];
                                    if (odt == DType::f32) {
                                        const float g = out.f[i * ld + c];
                                        ASSERT_EQ(0, std::memcmp(&g, &v, 4)) << "k=" << k << " i=" << i << " c=" << c;
                                    } else {
                                        ASSERT_EQ(out.h[i * ld + c].bits, bf16::from_float(v)) << "k=" << k;
                                    }
                                }
                            for (size_t i = 0; i < out.size(); ++i)  // the gaps between rows and past the last
                                if (static_cast<int64_t>(i) >= n * ld || static_cast<int64_t>(i) % ld >= dim)
                                    ASSERT_EQ(out.at(i), Out::kGuard) << "k=" << k << " i=" << i;
                            if (n > 2) {  // a bad index: rejected, nothing written
                                iv[2] = k % 2 ? -1 : E;
                                idx.make(it, iv, 0);
                                out.make(odt, n, ld, mis);
                                try {
                                    embedding(d, EmbeddingArgs{n, table, idx.data(), out.data()});
                                    FAIL() << "accepted a bad index";
                                } catch (const Error& e) {
                                    EXPECT_NE(std::string(e.what()).find("indices[2]=" + std::to_string(iv[2])), std::string::npos)
                                        << e.what();
                                }
                                for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out.at(i), Out::kGuard);
                            }
                        }
        });
        }  // nt_threshold
    }
    detail::set_nt_store_threshold(-1);
    set_num_threads(0);
    EmbeddingBagDesc d;
    d.num_embeddings = 3;
    d.mode = EmbeddingBagMode::mean;
    EXPECT_THROW(embedding(d, EmbeddingArgs{}), Error);
}

// A lookup of >= 8 MiB of output (non-temporal stores from the default threshold's floor on; the
// threshold forced to 0 as well) with an aligned and a misaligned output (the rows' unaligned ends
// through regular stores): the rows bit for bit; 1 and 2 threads.
TEST(EmbeddingBag, LargeLookupStreams) {
    const int64_t E = 1000, dim = 32, n = (int64_t(8) << 20) / (dim * 4) + 3;
    std::vector<float> t(static_cast<size_t>(E * dim));
    test::fill_uniform(t.data(), t.size(), -1, 1, 99);
    std::vector<int64_t> iv(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) iv[i] = (i * 7919) % E;
    EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (size_t mis : {0, 4, 8}) {
                detail::set_nt_store_threshold(mis == 8 ? 0 : -1);
                Buffer<float> out(static_cast<size_t>(n * dim), mis);
                embedding(d, EmbeddingArgs{n, t.data(), iv.data(), out.data()});
                for (int64_t i = 0; i < n; ++i)
                    ASSERT_EQ(0, std::memcmp(out.data() + i * dim, t.data() + iv[i] * dim, dim * 4)) << "i=" << i << " mis=" << mis;
            }
        });
    }
    detail::set_nt_store_threshold(-1);
    set_num_threads(0);
}

TEST(EmbeddingBag, CApiQuantizedAndLookup) {
    const int64_t E = 11, dim = 9;
    xk_embedding_bag_desc cd;
    ASSERT_EQ(xk_embedding_bag_desc_init(&cd, E, dim), XK_SUCCESS);
    EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    const std::vector<int64_t> idx = {3, 1, 10, 0, 3}, off = {0, 2, 2};
    const std::vector<float> psw = {0.5f, -1.0f, 2.0f, 1.0f, 0.25f};
    for (EmbeddingRowQuant q : {EmbeddingRowQuant::int8_rowwise, EmbeddingRowQuant::int4_rowwise}) {
        const QTable qt = make_qtable(q, E, dim, 0, 9);
        std::vector<float> want(3 * dim), got(3 * dim);
        // want: the C++ call on the same quantized table (the C API is that call)
        EmbeddingBagDesc dq = d;
        dq.table_dtype = DType::u8;
        dq.row_quant = q;
        embedding_bag(dq, EmbeddingBagArgs{3, 5, qt.bytes.data() + 1, idx.data(), off.data(), nullptr, want.data()});
        const auto fn = q == EmbeddingRowQuant::int8_rowwise ? xk_embedding_bag_q8_f32 : xk_embedding_bag_q4_f32;
        ASSERT_EQ(fn(&cd, qt.bytes.data() + 1, 5, idx.data(), 3, off.data(), nullptr, got.data()), XK_SUCCESS) << xk_last_error();
        EXPECT_EQ(got, want);
        dq.per_sample_weights = true;
        embedding_bag(dq, EmbeddingBagArgs{3, 5, qt.bytes.data() + 1, idx.data(), off.data(), psw.data(), want.data()});
        ASSERT_EQ(fn(&cd, qt.bytes.data() + 1, 5, idx.data(), 3, off.data(), psw.data(), got.data()), XK_SUCCESS);
        EXPECT_EQ(got, want);
        const std::vector<int64_t> badidx = {3, 1, 11, 0, 3};
        EXPECT_EQ(fn(&cd, qt.bytes.data() + 1, 5, badidx.data(), 3, off.data(), nullptr, got.data()), XK_INVALID_ARGUMENT);
        EXPECT_NE(std::string(xk_last_error()).find("indices[2]=11 (bag 2)"), std::string::npos) << xk_last_error();
    }
    std::vector<float> table(E * dim), out(5 * dim);
    test::fill_uniform(table.data(), table.size(), -1, 1, 3);
    ASSERT_EQ(xk_embedding_f32(&cd, table.data(), 5, idx.data(), out.data()), XK_SUCCESS) << xk_last_error();
    for (int64_t i = 0; i < 5; ++i)
        for (int64_t c = 0; c < dim; ++c) EXPECT_EQ(out[i * dim + c], table[idx[i] * dim + c]);
    cd.mode = XK_EMBEDDING_BAG_MAX;
    EXPECT_EQ(xk_embedding_f32(&cd, table.data(), 5, idx.data(), out.data()), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk::embedding: mode=max must be sum"), std::string::npos) << xk_last_error();
}

// Enough merged work that two threads split it (balanced by bytes, chunks crossing tables):
// bit for bit the single-table calls.
TEST(EmbeddingBag, MergedManyBagsTwoThreads) {
    const int64_t B = 600, T = 5;
    const int64_t dims[T] = {64, 16, 128, 7, 64};
    std::vector<EmbeddingBagDesc> ds(T);
    std::vector<Case> cs;
    std::vector<Table> tabs(T);
    std::vector<Ints> idx(T), off(T);
    std::vector<EmbeddingBagArgs> args(T);
    int64_t total = 0;
    for (int64_t t = 0; t < T; ++t) {
        ds[t].num_embeddings = 300 + 50 * t;
        ds[t].dim = dims[t];
        ds[t].mode = kModes[t % 3];
        ds[t].table_dtype = t == 1 ? DType::bf16 : DType::f32;
        total += dims[t];
    }
    for (int64_t t = 0; t < T; ++t) {
        cs.push_back(make_case(ds[t], B, 300 + t));
        tabs[t].make(ds[t], 0, 310 + t);
        idx[t].make(ds[t].index_type, cs[t].indices, 0);
        off[t].make(ds[t].index_type, cs[t].offsets, 0);
        args[t] = {B, static_cast<int64_t>(cs[t].indices.size()), tabs[t].data(), idx[t].data(), off[t].data(), nullptr, nullptr};
    }
    // A bad index in table 3 (and a later one in table 4): the error names table 3, nothing written.
    std::vector<int64_t> bad3 = cs[3].indices, bad4 = cs[4].indices;
    const int64_t pos3 = static_cast<int64_t>(bad3.size()) / 2 + 1;
    bad3[pos3] = ds[3].num_embeddings;
    bad4[1] = -1;
    std::vector<EmbeddingBagArgs> bad_args = args;
    bad_args[3].indices = bad3.data();
    bad_args[4].indices = bad4.data();
    const std::string needle = "tables[3]: indices[" + std::to_string(pos3) + "]=" + std::to_string(ds[3].num_embeddings);
    for (int threads : {1, 2}) {
        for (int par : {0, 2}) {  // the index check on the calling thread / in the chunks' region
            detail::embedding_bag_set_par_check_threads(par);
            set_num_threads(threads);
            for_each_isa([&](Isa) {
                std::vector<float> out(static_cast<size_t>(B * total), -1.0f), one(static_cast<size_t>(B * total), -2.0f);
                embedding_bag_multi(ds, args.data(), T, out.data());
                int64_t col = 0;
                for (int64_t t = 0; t < T; ++t) {
                    EmbeddingBagDesc d = ds[t];
                    d.ld_out = total;
                    EmbeddingBagArgs a = args[t];
                    a.out = one.data() + col;
                    embedding_bag(d, a);
                    col += dims[t];
                }
                EXPECT_EQ(0, std::memcmp(out.data(), one.data(), out.size() * 4));
                std::fill(out.begin(), out.end(), -3.0f);
                XK_EXPECT_INVALID(embedding_bag_multi(ds, bad_args.data(), T, out.data()), needle.c_str());
                for (float v : out) ASSERT_EQ(v, -3.0f);
            });
        }
    }
    detail::embedding_bag_set_par_check_threads(0);
    set_num_threads(0);
}

// Backward + fused SGD / Adagrad: against a double oracle of the documented formulas (gradient
// per row summed over its entries, then the update), with hot rows (a third of the entries hit
// row 0), padding, weights, mean, bf16 grad_out; untouched rows unchanged; 1 and 2 threads give
// the same bits; bad input writes nothing.
TEST(EmbeddingBag, BackwardFusedUpdateMatchesOracle) {
    const int64_t B = 300;
    uint64_t k = 0;
    for (EmbeddingOptimizer opt : {EmbeddingOptimizer::sgd, EmbeddingOptimizer::adagrad})
        for (EmbeddingBagMode mode : {EmbeddingBagMode::sum, EmbeddingBagMode::mean})
            for (int64_t dim : {1, 17, 64})
                for (DType gdt : {DType::f32, DType::bf16}) {
                    ++k;
                    const int64_t E = (k % 2 || dim > 17) ? 50 : 70001;  // 70001: two radix passes over the rows
                    EmbeddingBagDesc d;
                    d.num_embeddings = E;
                    d.dim = dim;
                    d.mode = mode;
                    d.out_dtype = gdt;
                    d.padding_idx = k % 2 ? 7 : -1;
                    d.per_sample_weights = mode == EmbeddingBagMode::sum && k % 4 < 2;
                    d.ld_table = k % 3 == 0 ? dim + 2 : 0;
                    Case c = make_case(d, B, 1200 + k);
                    for (size_t j = 0; j < c.indices.size(); j += 3)
                        if (c.indices[j] != d.padding_idx) c.indices[j] = 0;  // a hot row
                    const int64_t ldt = d.ld_table ? d.ld_table : dim;
                    std::vector<float> t0(static_cast<size_t>(E * ldt)), st0(static_cast<size_t>(E * dim));
                    test::fill_uniform(t0.data(), t0.size(), -1, 1, 5 + k);
                    test::fill_uniform(st0.data(), st0.size(), 0, 0.5, 6 + k);
                    std::vector<float> gof(static_cast<size_t>(B * dim));
                    test::fill_uniform(gof.data(), gof.size(), -1, 1, 7 + k);
                    std::vector<bf16> gob(gof.size());
                    for (size_t i = 0; i < gof.size(); ++i) {
                        gob[i] = bf16(gof[i]);
                        if (gdt == DType::bf16) gof[i] = gob[i].to_float();
                    }
                    const void* go = gdt == DType::bf16 ? static_cast<const void*>(gob.data()) : gof.data();
                    // Oracle.
                    std::vector<double> grad(static_cast<size_t>(E * dim), 0.0);
                    std::vector<bool> touched(static_cast<size_t>(E), false);
                    const int64_t n_idx = static_cast<int64_t>(c.indices.size());
                    for (int64_t b = 0; b < B; ++b) {
                        const int64_t j0 = c.offsets[b], j1 = b + 1 < B ? c.offsets[b + 1] : n_idx;
                        int64_t count = 0;
                        for (int64_t j = j0; j < j1; ++j) count += c.indices[j] != d.padding_idx;
                        for (int64_t j = j0; j < j1; ++j) {
                            const int64_t r = c.indices[j];
                            if (r == d.padding_idx) continue;
                            touched[r] = true;
                            const double w = mode == EmbeddingBagMode::mean ? 1.0 / count : (d.per_sample_weights ? c.psw[j] : 1.0);
                            for (int64_t q = 0; q < dim; ++q) grad[r * dim + q] += w * gof[b * dim + q];
                        }
                    }
                    EmbeddingBagUpdate u;
                    u.optimizer = opt;
                    u.lr = 0.05f;
                    std::vector<float> results[2], states[2];
                    // Every ISA (the embedding_bag_backward registry's entries) the same bits as the
                    // scalar one, at 1 and 2 threads.
                    bool first = true;
                    for_each_isa([&](Isa) {
                        for (int threads : {1, 2}) {
                            set_num_threads(threads);
                            std::vector<float> t = t0, st = st0;
                            u.state = opt == EmbeddingOptimizer::adagrad ? st.data() : nullptr;
                            EmbeddingBagArgs a{B, n_idx, t.data(), c.indices.data(), c.offsets.data(),
                                               d.per_sample_weights ? c.psw.data() : nullptr, nullptr};
                            embedding_bag_backward_update(d, a, go, u);
                            if (first) {
                                results[threads - 1] = t;
                                states[threads - 1] = st;
                            } else {
                                ASSERT_EQ(t, results[0]) << "differs from the scalar run, threads=" << threads;
                                ASSERT_EQ(st, states[0]);
                            }
                        }
                        first = false;
                        ASSERT_EQ(results[0], results[1]) << "thread count changed the result";
                        ASSERT_EQ(states[0], states[1]);
                    });
                    set_num_threads(0);
                    const std::vector<float>& t = results[0];
                    for (int64_t r = 0; r < E; ++r)
                        for (int64_t q = 0; q < ldt; ++q) {
                            const size_t ti = static_cast<size_t>(r * ldt + q);
                            if (!touched[r] || q >= dim) {
                                ASSERT_EQ(t[ti], t0[ti]) << "untouched value changed r=" << r;
                                continue;
                            }
                            const double g = grad[r * dim + q];
                            double want;
                            if (opt == EmbeddingOptimizer::sgd) {
                                want = t0[ti] - 0.05 * g;
                            } else {
                                const double s = st0[r * dim + q] + g * g;
                                want = t0[ti] - 0.05 * g / (std::sqrt(s) + 1e-10);
                                ASSERT_NEAR(states[0][r * dim + q], s, 1e-5 * (1 + s));
                            }
                            ASSERT_NEAR(t[ti], want, 2e-6 * (1 + std::fabs(want)) + 1e-5 * std::fabs(g)) << "r=" << r << " k=" << k;
                        }
                }
    // Bad input: nothing written.
    EmbeddingBagDesc d;
    d.num_embeddings = 4;
    d.dim = 3;
    std::vector<float> t(12, 1.0f), go(6, 1.0f);
    const std::vector<int64_t> idx = {0, 4}, off = {0, 1};
    EmbeddingBagArgs a{2, 2, t.data(), idx.data(), off.data(), nullptr, nullptr};
    try {
        embedding_bag_backward_update(d, a, go.data(), EmbeddingBagUpdate{});
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("indices[1]=4 (bag 1)"), std::string::npos) << e.what();
    }
    for (float v : t) EXPECT_EQ(v, 1.0f);
    d.mode = EmbeddingBagMode::max;
    EXPECT_THROW(embedding_bag_backward_update(d, a, go.data(), EmbeddingBagUpdate{}), Error);
}

TEST(EmbeddingBag, BadDescriptor) {
    EmbeddingBagDesc good;
    good.num_embeddings = 10;
    good.dim = 4;
    auto bad = [&](auto mutate, const char* needle, Status st = Status::invalid_argument) {
        EmbeddingBagDesc d = good;
        mutate(d);
        XK_EXPECT_ERROR(EmbeddingBagPlan{d}, st, needle);
        XK_EXPECT_ERROR(embedding_bag(d, EmbeddingBagArgs{}), st, needle);
        XK_EXPECT_ERROR(EmbeddingBagMultiPlan({good, d}), st, needle);
    };
    bad([](EmbeddingBagDesc& d) { d.num_embeddings = -1; }, "num_embeddings=-1 must be >= 0");
    bad([](EmbeddingBagDesc& d) { d.dim = 0; }, "dim=0 must be >= 1");
    bad([](EmbeddingBagDesc& d) { d.ld_table = 3; }, "ld_table=3 must be >= dim=4");
    bad([](EmbeddingBagDesc& d) { d.ld_table = -1; }, "ld_table=-1 must be >= 0");
    bad([](EmbeddingBagDesc& d) { d.mode = static_cast<EmbeddingBagMode>(3); }, "mode=3 is not a valid value");
    bad([](EmbeddingBagDesc& d) { d.index_type = static_cast<IndexType>(-1); }, "index_type=-1 is not a valid value");
    bad([](EmbeddingBagDesc& d) { d.table_dtype = DType::s8; }, "table_dtype=s8 is not supported", Status::unsupported);
    bad([](EmbeddingBagDesc& d) { d.out_dtype = DType::s32; }, "out_dtype=s32 is not supported", Status::unsupported);
    bad([](EmbeddingBagDesc& d) { d.table_dtype = static_cast<DType>(77); }, "table_dtype=77 is not a valid DType");
    bad([](EmbeddingBagDesc& d) { d.padding_idx = -2; }, "padding_idx=-2 must be -1 (none) or in [0, num_embeddings=10)");
    bad([](EmbeddingBagDesc& d) { d.padding_idx = 10; }, "padding_idx=10");
    bad([](EmbeddingBagDesc& d) { d.per_sample_weights = true; d.mode = EmbeddingBagMode::mean; },
        "per_sample_weights=true is only supported with mode=sum (as in PyTorch), not mode=mean");
    bad([](EmbeddingBagDesc& d) { d.per_sample_weights = true; d.mode = EmbeddingBagMode::max; }, "not mode=max");
    bad([](EmbeddingBagDesc& d) { d.num_embeddings = int64_t{1} << 62; }, "num_embeddings*ld_table");
    // ld_out is checked by the single-table entry points (the merged plan requires 0).
    EmbeddingBagDesc d = good;
    d.ld_out = 2;
    XK_EXPECT_INVALID(EmbeddingBagPlan{d}, "ld_out=2 must be >= dim=4");
    XK_EXPECT_INVALID(EmbeddingBagMultiPlan({d}), "tables[0]: ld_out=2 must be 0");
    XK_EXPECT_INVALID(EmbeddingBagMultiPlan(std::vector<EmbeddingBagDesc>{}), "tables.size()=0 must be >= 1");
    XK_EXPECT_INVALID(EmbeddingBagMultiPlan({good}, -1), "ld_out=-1 must be >= 0");
    XK_EXPECT_INVALID(EmbeddingBagMultiPlan({good, good}, 7), "ld_out=7 must be >= sum of dims=8");
    d = good;
    d.out_dtype = DType::bf16;
    XK_EXPECT_INVALID(EmbeddingBagMultiPlan({good, d}), "tables[1]: out_dtype=bf16 must equal tables[0].out_dtype=f32");
}

TEST(EmbeddingBag, BadArguments) {
    EmbeddingBagDesc d;
    d.num_embeddings = 10;
    d.dim = 4;
    std::vector<float> table(40, 1.0f), out(64), psw(8, 1.0f);
    std::vector<int64_t> idx = {1, 2, 3, 4, 5, 6};
    std::vector<int64_t> off = {0, 2, 4};
    EmbeddingBagArgs good{3, 6, table.data(), idx.data(), off.data(), nullptr, out.data()};
    embedding_bag(d, good);  // baseline valid

    auto bad = [&](const EmbeddingBagDesc& dd, const EmbeddingBagArgs& a, const char* needle) {
        XK_EXPECT_INVALID(embedding_bag(dd, a), needle);
        XK_EXPECT_INVALID(EmbeddingBagPlan(dd).run(a), needle);
    };
    auto with = [&](auto mutate) {
        EmbeddingBagArgs a = good;
        mutate(a);
        return a;
    };
    bad(d, with([](auto& a) { a.num_bags = -1; }), "num_bags=-1 must be >= 0");
    bad(d, with([](auto& a) { a.num_indices = -5; }), "num_indices=-5 must be >= 0");
    bad(d, with([](auto& a) { a.offsets = nullptr; }), "offsets=null");
    bad(d, with([](auto& a) { a.indices = nullptr; }), "indices=null");
    bad(d, with([](auto& a) { a.table = nullptr; }), "table=null");
    bad(d, with([](auto& a) { a.out = nullptr; }), "out=null");
    bad(d, with([&](auto& a) { a.per_sample_weights = psw.data(); }),
        "is given but the descriptor's per_sample_weights is false");
    EmbeddingBagDesc dw = d;
    dw.per_sample_weights = true;
    bad(dw, good, "per_sample_weights=null");
    bad(d, with([](auto& a) { a.num_bags = int64_t{1} << 61; }), "num_bags*ld_out");
    bad(d, with([](auto& a) { a.num_indices = int64_t{1} << 61; }), "overflows");
    // Offsets.
    std::vector<int64_t> o1 = {1, 2, 4}, o2 = {0, 4, 2}, o3 = {0, 2, 7};
    bad(d, with([&](auto& a) { a.offsets = o1.data(); }), "offsets[0]=1 must be 0");
    bad(d, with([&](auto& a) { a.offsets = o2.data(); }), "offsets[2]=2 must be >= offsets[1]=4");
    bad(d, with([&](auto& a) { a.offsets = o3.data(); }), "offsets[2]=7 must be <= num_indices=6");
    EmbeddingBagDesc dl = d;
    dl.include_last_offset = true;  // offsets[2] is then the end of bag 1
    bad(dl, with([&](auto& a) { a.num_bags = 2; a.offsets = o3.data(); }), "offsets[2]=7 must be <= num_indices=6");
    // Indices: position, bag and value are named.
    std::vector<int64_t> i1 = {1, 2, 3, 10, 5, 6}, i2 = {1, 2, 3, 4, 5, -1};
    bad(d, with([&](auto& a) { a.indices = i1.data(); }), "indices[3]=10 (bag 1) must be in [0, num_embeddings=10)");
    bad(d, with([&](auto& a) { a.indices = i2.data(); }), "indices[5]=-1 (bag 2) must be in [0, num_embeddings=10)");
    std::vector<int32_t> i3 = {1, 2, 3, 4, 2147483647, 6}, o4 = {0, 2, 4};
    EmbeddingBagDesc d32 = d;
    d32.index_type = IndexType::i32;
    bad(d32, with([&](auto& a) { a.indices = i3.data(); a.offsets = o4.data(); }), "indices[4]=2147483647 (bag 2)");
    // Alignment and overlap.
    bad(d, with([&](auto& a) { a.indices = reinterpret_cast<const char*>(idx.data()) + 4; }),
        "indices=");
    bad(d, with([&](auto& a) { a.indices = reinterpret_cast<const char*>(idx.data()) + 4; }),
        "must be aligned to its element size (8 bytes)");
    bad(d, with([&](auto& a) { a.out = reinterpret_cast<char*>(out.data()) + 2; }), "out=");
    bad(d, with([&](auto& a) { a.out = table.data() + 4; }), "overlaps table");
    bad(d, with([&](auto& a) { a.out = idx.data(); }), "overlaps indices");

    // Merged: per-call checks.
    const EmbeddingBagMultiPlan mp({d, d});
    std::vector<float> mout(3 * 8);
    EmbeddingBagArgs ma[2] = {good, good};
    ma[0].out = ma[1].out = nullptr;
    mp.run(ma, 2, mout.data());
    XK_EXPECT_INVALID(mp.run(ma, 3, mout.data()), "num_tables=3 must equal the plan's 2 tables");
    XK_EXPECT_INVALID(mp.run(nullptr, 2, mout.data()), "args=null");
    XK_EXPECT_INVALID(mp.run(ma, 2, nullptr), "tables[0]: out=null");
    EmbeddingBagArgs mb[2] = {ma[0], ma[1]};
    mb[1].out = mout.data();
    XK_EXPECT_INVALID(mp.run(mb, 2, mout.data()), "args[1].out=");
    mb[1] = ma[1];
    mb[1].num_bags = 2;
    XK_EXPECT_INVALID(mp.run(mb, 2, mout.data()), "args[1].num_bags=2 must equal args[0].num_bags=3");
    mb[1] = ma[1];
    mb[1].indices = i1.data();
    XK_EXPECT_INVALID(mp.run(mb, 2, mout.data()), "tables[1]: indices[3]=10 (bag 1)");
    XK_EXPECT_INVALID(embedding_bag_multi({d, d}, mb, 2, mout.data()), "tables[1]: indices[3]=10");
    XK_EXPECT_INVALID(mp.column(2), "t=2 must be in [0, 1]");
    XK_EXPECT_INVALID(mp.impl_name(-1), "t=-1");
}

TEST(EmbeddingBag, CApi) {
    xk_embedding_bag_desc cd;
    ASSERT_EQ(xk_embedding_bag_desc_init(&cd, 20, 9), XK_SUCCESS);
    EXPECT_EQ(cd.padding_idx, -1);
    EXPECT_EQ(cd.mode, XK_EMBEDDING_BAG_SUM);
    cd.ld_table = 11;
    cd.ld_out = 10;
    cd.padding_idx = 3;
    cd.include_last_offset = 1;

    EmbeddingBagDesc d;
    d.num_embeddings = 20;
    d.dim = 9;
    d.ld_table = 11;
    d.ld_out = 10;
    d.padding_idx = 3;
    d.include_last_offset = true;
    d.per_sample_weights = true;
    const Case c = make_case(d, 12, 5);
    Table tab;
    tab.make(d, 0, 6);
    std::vector<int32_t> i32(c.indices.begin(), c.indices.end()), o32(c.offsets.begin(), c.offsets.end());
    const int64_t ni = static_cast<int64_t>(c.indices.size());
    std::vector<float> want(120), got(120);
    EmbeddingBagArgs a{12, ni, tab.data(), c.indices.data(), c.offsets.data(), c.psw.data(), want.data()};
    embedding_bag(d, a);
    ASSERT_EQ(xk_embedding_bag_f32(&cd, tab.f.data(), ni, c.indices.data(), 12, c.offsets.data(), c.psw.data(), got.data()),
              XK_SUCCESS)
        << xk_last_error();
    EXPECT_EQ(got, want);
    std::fill(got.begin(), got.end(), 0.0f);
    ASSERT_EQ(xk_embedding_bag_f32_i32(&cd, tab.f.data(), ni, i32.data(), 12, o32.data(), c.psw.data(), got.data()),
              XK_SUCCESS);
    EXPECT_EQ(got, want);
    // bf16 table, mean mode (no weights).
    cd.mode = XK_EMBEDDING_BAG_MEAN;
    d.mode = EmbeddingBagMode::mean;
    d.per_sample_weights = false;
    d.table_dtype = DType::bf16;
    Table tb;
    tb.make(d, 0, 7);
    a.table = tb.data();
    a.per_sample_weights = nullptr;
    embedding_bag(d, a);
    ASSERT_EQ(xk_embedding_bag_bf16_f32(&cd, reinterpret_cast<const uint16_t*>(tb.h.data()), ni, c.indices.data(), 12,
                                        c.offsets.data(), nullptr, got.data()),
              XK_SUCCESS);
    EXPECT_EQ(got, want);

    auto expect = [](xk_status st, xk_status want_st, const char* needle) {
        EXPECT_EQ(st, want_st);
        EXPECT_NE(std::string(xk_last_error()).find(needle), std::string::npos) << xk_last_error();
    };
    expect(xk_embedding_bag_desc_init(nullptr, 1, 1), XK_INVALID_ARGUMENT, "desc=null");
    expect(xk_embedding_bag_f32(nullptr, tab.f.data(), ni, c.indices.data(), 12, c.offsets.data(), nullptr, got.data()),
           XK_INVALID_ARGUMENT, "xk_embedding_bag_f32: desc=null");
    // Weights with mean mode.
    expect(xk_embedding_bag_f32(&cd, tab.f.data(), ni, c.indices.data(), 12, c.offsets.data(), c.psw.data(), got.data()),
           XK_INVALID_ARGUMENT, "only supported with mode=sum");
    xk_embedding_bag_desc bad = cd;
    bad.mode = static_cast<xk_embedding_bag_mode>(3);
    expect(xk_embedding_bag_f32(&bad, tab.f.data(), ni, c.indices.data(), 12, c.offsets.data(), nullptr, got.data()),
           XK_INVALID_ARGUMENT, "mode=3 is not a valid value");
    bad = cd;
    bad.dim = -2;
    expect(xk_embedding_bag_f32(&bad, tab.f.data(), ni, c.indices.data(), 12, c.offsets.data(), nullptr, got.data()),
           XK_INVALID_ARGUMENT, "dim=-2 must be >= 1");
    bad = cd;
    bad.num_embeddings = 2;  // indices now out of range
    bad.padding_idx = -1;
    expect(xk_embedding_bag_f32(&bad, tab.f.data(), ni, c.indices.data(), 12, c.offsets.data(), nullptr, got.data()),
           XK_INVALID_ARGUMENT, "must be in [0, num_embeddings=2)");
    expect(xk_embedding_bag_f32_i32(&cd, tab.f.data(), ni, i32.data(), 12, nullptr, nullptr, got.data()),
           XK_INVALID_ARGUMENT, "offsets=null");
    expect(xk_embedding_bag_bf16_f32(&cd, nullptr, ni, c.indices.data(), 12, c.offsets.data(), nullptr, got.data()),
           XK_INVALID_ARGUMENT, "table=null");
    expect(xk_embedding_bag_f32(&cd, tab.f.data(), -1, c.indices.data(), 12, c.offsets.data(), nullptr, got.data()),
           XK_INVALID_ARGUMENT, "num_indices=-1");
}

// The backward's parallel sort: enough entries (> 2 sort blocks of 16384) for the 2-thread run to
// split every radix pass and the segment scan over both threads; rows of 2 radix digits (E >
// 2^12), a Zipf-like hot head, padding. 1 and 2 threads must give the same bits, and both the
// double oracle of the gradient sums (SGD with lr 1: table - grad).
TEST(EmbeddingBag, BackwardParallelSortMatchesOracle) {
    const int64_t E = 70001, dim = 3, B = 4000;
    std::mt19937_64 g(91);
    std::vector<int64_t> idx, off;
    for (int64_t b = 0; b < B; ++b) {
        off.push_back(static_cast<int64_t>(idx.size()));
        const int64_t len = static_cast<int64_t>(g() % 20);
        for (int64_t j = 0; j < len; ++j) {
            const uint64_t u = g();
            idx.push_back(u % 4 == 0 ? static_cast<int64_t>(u >> 40) % 5 : u % 3 == 0 ? 11 : static_cast<int64_t>((u >> 8) % E));
        }
    }
    ASSERT_GT(idx.size(), 2u * 16384);
    EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    d.padding_idx = 11;
    d.per_sample_weights = true;
    const int64_t n = static_cast<int64_t>(idx.size());
    std::vector<float> psw(static_cast<size_t>(n)), go(static_cast<size_t>(B * dim)), t0(static_cast<size_t>(E * dim), 0.0f);
    test::fill_uniform(psw.data(), psw.size(), -2, 2, 92);
    test::fill_uniform(go.data(), go.size(), -1, 1, 93);
    std::vector<double> grad(static_cast<size_t>(E * dim), 0.0), sabs(grad.size(), 0.0);
    std::vector<int64_t> cnt(static_cast<size_t>(E), 0);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = off[b]; j < (b + 1 < B ? off[b + 1] : n); ++j) {
            if (idx[j] == d.padding_idx) continue;
            ++cnt[idx[j]];
            for (int64_t q = 0; q < dim; ++q) {
                grad[idx[j] * dim + q] += static_cast<double>(psw[j]) * go[b * dim + q];
                sabs[idx[j] * dim + q] += std::fabs(static_cast<double>(psw[j]) * go[b * dim + q]);
            }
        }
    EmbeddingBagUpdate u;
    u.lr = 1.0f;
    std::vector<float> res[2];
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        res[threads - 1] = t0;
        EmbeddingBagArgs a{B, n, res[threads - 1].data(), idx.data(), off.data(), psw.data(), nullptr};
        embedding_bag_backward_update(d, a, go.data(), u);
    }
    set_num_threads(0);
    ASSERT_EQ(res[0], res[1]) << "thread count changed the result";
    for (int64_t i = 0; i < E * dim; ++i)
        ASSERT_NEAR(res[0][i], -grad[i], 2 * (cnt[i / dim] + 3) * kU * sabs[i]) << "row " << i / dim;
}

// The backward's C API: the same bits as the C++ entry point (SGD / Adagrad, int64 / int32
// indices, f32 / bf16 grad_out), and a rejected call names its argument and writes nothing.
TEST(EmbeddingBag, BackwardCApi) {
    xk_embedding_update cu;
    std::memset(&cu, 0x5A, sizeof cu);
    ASSERT_EQ(xk_embedding_update_init(&cu), XK_SUCCESS);
    EXPECT_EQ(cu.optimizer, XK_EMBEDDING_SGD);
    EXPECT_EQ(cu.lr, 0.01f);
    EXPECT_EQ(cu.eps, 1e-10f);
    EXPECT_EQ(cu.state, nullptr);
    EXPECT_EQ(cu.ld_state, 0);
    const int64_t E = 30, dim = 19, B = 40;
    EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = dim;
    d.ld_table = 21;
    d.ld_out = 20;
    d.padding_idx = 4;
    d.include_last_offset = true;
    d.per_sample_weights = true;
    const Case c = make_case(d, B, 31);
    const int64_t ni = static_cast<int64_t>(c.indices.size());
    std::vector<int32_t> i32(c.indices.begin(), c.indices.end()), o32(c.offsets.begin(), c.offsets.end());
    xk_embedding_bag_desc cd;
    ASSERT_EQ(xk_embedding_bag_desc_init(&cd, E, dim), XK_SUCCESS);
    cd.ld_table = 21;
    cd.ld_out = 20;
    cd.padding_idx = 4;
    cd.include_last_offset = 1;
    std::vector<float> t0(static_cast<size_t>(E * 21)), st0(static_cast<size_t>(E * dim)), gof(static_cast<size_t>(B * 20));
    test::fill_uniform(t0.data(), t0.size(), -1, 1, 32);
    test::fill_uniform(st0.data(), st0.size(), 0, 1, 33);
    test::fill_uniform(gof.data(), gof.size(), -1, 1, 34);
    std::vector<uint16_t> gob(gof.size());
    for (size_t i = 0; i < gof.size(); ++i) gob[i] = bf16(gof[i]).bits;
    for (int kind = 0; kind < 3; ++kind)
        for (EmbeddingOptimizer opt : {EmbeddingOptimizer::sgd, EmbeddingOptimizer::adagrad}) {
            EmbeddingBagDesc dd = d;
            if (kind == 2) dd.out_dtype = DType::bf16;
            std::vector<float> tw = t0, sw = st0, tg = t0, sg = st0;
            EmbeddingBagUpdate u;
            u.optimizer = opt;
            u.lr = 0.3f;
            u.state = opt == EmbeddingOptimizer::adagrad ? sw.data() : nullptr;
            const void* go = kind == 2 ? static_cast<const void*>(gob.data()) : gof.data();
            embedding_bag_backward_update(dd, EmbeddingBagArgs{B, ni, tw.data(), c.indices.data(), c.offsets.data(), c.psw.data(), nullptr},
                                          go, u);
            cu.optimizer = opt == EmbeddingOptimizer::sgd ? XK_EMBEDDING_SGD : XK_EMBEDDING_ADAGRAD;
            cu.lr = 0.3f;
            cu.state = opt == EmbeddingOptimizer::adagrad ? sg.data() : nullptr;
            xk_status s;
            if (kind == 0)
                s = xk_embedding_bag_backward_update_f32(&cd, tg.data(), ni, c.indices.data(), B, c.offsets.data(), c.psw.data(),
                                                         gof.data(), &cu);
            else if (kind == 1)
                s = xk_embedding_bag_backward_update_f32_i32(&cd, tg.data(), ni, i32.data(), B, o32.data(), c.psw.data(),
                                                             gof.data(), &cu);
            else
                s = xk_embedding_bag_backward_update_f32_gbf16(&cd, tg.data(), ni, c.indices.data(), B, c.offsets.data(),
                                                               c.psw.data(), gob.data(), &cu);
            ASSERT_EQ(s, XK_SUCCESS) << xk_last_error();
            EXPECT_EQ(tg, tw) << "kind " << kind;
            EXPECT_EQ(sg, sw) << "kind " << kind;
            EXPECT_NE(tg, t0);
        }
    // Rejected calls: the message names the argument; table and state unchanged.
    std::vector<float> t = t0, st = st0;
    cu.optimizer = XK_EMBEDDING_ADAGRAD;
    cu.state = st.data();
    auto expect = [&](xk_status s, xk_status want, const char* needle) {
        EXPECT_EQ(s, want) << needle;
        EXPECT_NE(std::string(xk_last_error()).find(needle), std::string::npos) << xk_last_error();
        EXPECT_EQ(t, t0) << needle;
        EXPECT_EQ(st, st0) << needle;
    };
    auto f32 = [&](const xk_embedding_bag_desc* pd, const xk_embedding_update* pu, const int64_t* ix, const float* g) {
        return xk_embedding_bag_backward_update_f32(pd, t.data(), ni, ix, B, c.offsets.data(), c.psw.data(), g, pu);
    };
    expect(xk_embedding_update_init(nullptr), XK_INVALID_ARGUMENT, "xk_embedding_update_init: update=null");
    expect(f32(nullptr, &cu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "xk_embedding_bag_backward_update_f32: desc=null");
    expect(f32(&cd, nullptr, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "xk_embedding_bag_backward_update_f32: update=null");
    expect(f32(&cd, &cu, c.indices.data(), nullptr), XK_INVALID_ARGUMENT, "grad_out=null");
    xk_embedding_update bu = cu;
    bu.lr = -1.0f;
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.lr=");
    bu = cu;
    bu.eps = std::numeric_limits<float>::quiet_NaN();
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.eps=");
    bu = cu;
    const int bad_opt = 5;
    std::memcpy(&bu.optimizer, &bad_opt, sizeof bad_opt);
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.optimizer=5 is not a valid value");
    bu = cu;
    bu.state = nullptr;
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.state=null");
    bu = cu;
    bu.ld_state = dim - 1;
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.ld_state=18 must be >= dim=19");
    bu = cu;
    bu.optimizer = XK_EMBEDDING_SGD;
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.state");
    bu = cu;
    bu.state = t.data() + 5;
    expect(f32(&cd, &bu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "update.state");
    expect(f32(&cd, &cu, c.indices.data(), t.data() + 3), XK_INVALID_ARGUMENT, "overlaps table");
    xk_embedding_bag_desc bd = cd;
    bd.mode = XK_EMBEDDING_BAG_MAX;
    expect(xk_embedding_bag_backward_update_f32(&bd, t.data(), ni, c.indices.data(), B, c.offsets.data(), nullptr, gof.data(), &cu),
           XK_UNSUPPORTED, "mode=max is not supported");
    bd = cd;
    bd.mode = static_cast<xk_embedding_bag_mode>(9);
    expect(f32(&bd, &cu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "mode=9 is not a valid value");
    bd = cd;
    bd.ld_out = 3;
    expect(f32(&bd, &cu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "ld_out=3 must be >= dim=19");
    std::vector<int64_t> bad_idx = c.indices;
    const int64_t last = c.offsets[B] - 1;
    bad_idx[last] = E;
    expect(f32(&cd, &cu, bad_idx.data(), gof.data()), XK_INVALID_ARGUMENT,
           ("xk_embedding_bag_backward_update_f32: indices[" + std::to_string(last) + "]=30 (bag").c_str());
    std::vector<int32_t> bad_off = o32;
    bad_off[3] = bad_off[2] - 1;
    expect(xk_embedding_bag_backward_update_f32_i32(&cd, t.data(), ni, i32.data(), B, bad_off.data(), c.psw.data(), gof.data(), &cu),
           XK_INVALID_ARGUMENT, "xk_embedding_bag_backward_update_f32_i32: offsets[3]=");
    cd.mode = XK_EMBEDDING_BAG_MEAN;  // weights with mean
    expect(f32(&cd, &cu, c.indices.data(), gof.data()), XK_INVALID_ARGUMENT, "only supported with mode=sum");
}

// The min / max pass over every length from 1 to 80 (int64: 8 lanes, int32: 16; whole blocks of four
// vectors, single vectors, the overlapping last vector, the scalar loop): a bad index first, in the
// middle or last is found, at every ISA cap.
TEST(EmbeddingBag, IndexCheckEveryShortLength) {
    const int64_t E = 50;
    EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = 1;
    std::vector<float> table(static_cast<size_t>(E), 1.0f), out(80);
    for_each_isa([&](Isa) {
        for (int64_t n = 1; n <= 80; ++n)
            for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
                std::vector<int64_t> i64(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) i64[i] = (i * 7) % E;
                const int64_t bad = (n + pos) % 2 ? int64_t(-1) : E;
                i64[pos] = bad;
                const std::vector<int32_t> i32(i64.begin(), i64.end());
                const std::string needle = "indices[" + std::to_string(pos) + "]=" + std::to_string(bad);
                d.index_type = IndexType::i64;
                XK_EXPECT_INVALID(embedding(d, EmbeddingArgs{n, table.data(), i64.data(), out.data()}), needle.c_str());
                d.index_type = IndexType::i32;
                XK_EXPECT_INVALID(embedding(d, EmbeddingArgs{n, table.data(), i32.data(), out.data()}), needle.c_str());
            }
    });
}

// The per-call index check's min / max pass (AVX-512 where the cap allows): an out-of-range index
// at the start, the middle or in a tail of fewer than a vector is found and named, with int64 and
// int32 indices, at every ISA cap and 1 / 2 threads, and out is left as it was.
TEST(EmbeddingBag, IndexCheckFindsBadIndexInEveryChunk) {
    const int64_t n = 32768 + 21, E = 1000, B = 7;
    std::vector<int64_t> idx(static_cast<size_t>(n)), off(B);
    for (int64_t j = 0; j < n; ++j) idx[j] = (j * 7919) % E;
    for (int64_t b = 0; b < B; ++b) off[b] = b * (n / B);
    EmbeddingBagDesc d;
    d.num_embeddings = E;
    d.dim = 1;
    std::vector<float> table(static_cast<size_t>(E), 1.0f), out(B, -3.0f);
    const std::vector<int32_t> o32(off.begin(), off.end());
    for (int threads : {1, 2}) {
        for (int par : {0, 2}) {  // the pass on the calling thread / over the 2 threads (2 chunks)
        detail::embedding_bag_set_par_check_threads(par);
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            int k = 0;
            for (int64_t pos : {n - 1, n / 2, n / 2 - 1, int64_t(0)}) {
                const int64_t bad = k++ % 2 ? int64_t(-1) : E;
                std::vector<int64_t> i64 = idx;
                i64[pos] = bad;
                const std::vector<int32_t> i32(i64.begin(), i64.end());
                const std::string needle = "indices[" + std::to_string(pos) + "]=" + std::to_string(bad);
                d.index_type = IndexType::i64;
                XK_EXPECT_INVALID(embedding_bag(d, EmbeddingBagArgs{B, n, table.data(), i64.data(), off.data(), nullptr, out.data()}),
                                  needle.c_str());
                d.index_type = IndexType::i32;
                XK_EXPECT_INVALID(embedding_bag(d, EmbeddingBagArgs{B, n, table.data(), i32.data(), o32.data(), nullptr, out.data()}),
                                  needle.c_str());
                for (float v : out) ASSERT_EQ(v, -3.0f);
            }
            d.index_type = IndexType::i64;  // and a valid call
            embedding_bag(d, EmbeddingBagArgs{B, n, table.data(), idx.data(), off.data(), nullptr, out.data()});
            for (int64_t b = 0; b < B; ++b)
                ASSERT_EQ(out[b], static_cast<float>((b + 1 < B ? off[b + 1] : n) - off[b]));
            std::fill(out.begin(), out.end(), -3.0f);
        });
        }  // par
    }
    detail::embedding_bag_set_par_check_threads(0);
    set_num_threads(0);
}
