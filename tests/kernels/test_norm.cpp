// RMSNorm / LayerNorm: every ISA's selection against a naive double-precision oracle, hidden sizes
// 1..4095, strides, misaligned pointers, f32 / bf16 (and mixed) dtypes, fused residual with and
// without aliasing, 1 and 2 threads, the kernel cache key, bad input for every entry point (C API
// included).
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "common/overlap.hpp"
#include "common/parallel.hpp"
#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/norm/norm.hpp"
#include "kernels/typed_matrix.hpp"
#include "xk/norm.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;
using xk::test::TypedMatrix;

// Tolerances, against the exact (double) result of the same rounded inputs:
//   f32 output:  statistics and products in fp32 (a few ulps) -> rtol 1e-5, atol 1e-5 (outputs
//                are O(1): normalized values times weights near 1).
//   bf16 output: one rounding of the fp32 result to bf16 = half an ulp <= 2^-8 relative, plus the
//                fp32 error -> rtol 2^-8 + 1e-5, atol 1e-5.
//                (The even / odd path rounds to nearest with ties away from zero: the same half ulp.)
//   residual_out: exact (the fp32 sum x + residual, rounded once to the residual dtype; NaN where
//                 that sum is NaN).
constexpr double kF32Atol = 1e-5, kF32Rtol = 1e-5;
constexpr double kBf16Atol = 1e-5, kBf16Rtol = 1.0 / 256 + 1e-5;

namespace {

// Around the even / odd blocks of bf16 x (16 elements AVX2, 32 AVX-512): every tail of each.
const std::vector<int64_t> kHiddenSizes = {1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 255, 300, 4095, 4096};

double atol_of(DType t) { return t == DType::bf16 ? kBf16Atol : kF32Atol; }
double rtol_of(DType t) { return t == DType::bf16 ? kBf16Rtol : kF32Rtol; }

struct Tensors {
    TypedMatrix x, y, r, ro, w, b;
};

// Random inputs for d (strides as in d, 0 = packed), misaligned by `mis` elements.
Tensors make_tensors(const NormDesc& d, size_t mis, uint64_t seed) {
    Tensors t;
    t.x = TypedMatrix(d.x_dtype, d.rows, d.hidden, d.ld_x, mis);
    t.y = TypedMatrix(d.y_dtype, d.rows, d.hidden, d.ld_y, mis + 1);
    t.x.fill_uniform(-2.0, 2.5, seed);
    if (d.fused_residual) {
        t.r = TypedMatrix(d.residual_dtype, d.rows, d.hidden, d.ld_residual, mis + 2);
        t.ro = TypedMatrix(d.residual_dtype, d.rows, d.hidden, d.ld_residual_out, mis + 3);
        t.r.fill_uniform(-1.0, 1.0, seed + 1);
    }
    if (d.has_weight) {
        t.w = TypedMatrix(d.weight_dtype, 1, d.hidden, 0, mis);
        t.w.fill_uniform(0.5, 1.5, seed + 2);
    }
    if (d.has_bias) {
        t.b = TypedMatrix(d.weight_dtype, 1, d.hidden, 0, mis + 1);
        t.b.fill_uniform(-0.5, 0.5, seed + 3);
    }
    return t;
}

NormArgs args_of(const NormDesc& d, Tensors& t) {
    NormArgs a;
    a.x = t.x.data();
    a.y = t.y.data();
    if (d.has_weight) a.weight = t.w.data();
    if (d.has_bias) a.bias = t.b.data();
    if (d.fused_residual) {
        a.residual = t.r.data();
        a.residual_out = t.ro.data();
    }
    return a;
}

// The oracle: everything in double from the stored (rounded) inputs. h is the fused sum rounded
// to the residual dtype (part of the definition); y is left unrounded.
struct Expected {
    std::vector<double> h, y;  // [rows x hidden], packed
};
Expected oracle(const NormDesc& d, const TypedMatrix& x, const TypedMatrix* r, const TypedMatrix* w,
                const TypedMatrix* b) {
    const int64_t n = d.hidden;
    Expected e;
    e.h.resize(d.rows * n);
    e.y.resize(d.rows * n);
    for (int64_t row = 0; row < d.rows; ++row) {
        double* h = &e.h[row * n];
        for (int64_t i = 0; i < n; ++i) {
            h[i] = x.get(row, i);
            if (d.fused_residual)
                h[i] = test::round_to(d.residual_dtype, static_cast<float>(static_cast<float>(h[i]) + static_cast<float>(r->get(row, i))));
        }
        double mean = 0;
        if (d.kind == NormKind::layer_norm) {
            for (int64_t i = 0; i < n; ++i) mean += h[i];
            mean /= n;
        }
        double var = 0;
        for (int64_t i = 0; i < n; ++i) var += (h[i] - mean) * (h[i] - mean);
        var /= n;
        const double rstd = 1.0 / std::sqrt(var + d.eps);
        for (int64_t i = 0; i < n; ++i) {
            double v = (h[i] - mean) * rstd;
            if (d.has_weight) v *= w->get(0, i);
            if (d.has_bias) v += b->get(0, i);
            e.y[row * n + i] = v;
        }
    }
    return e;
}

::testing::AssertionResult matches(const NormDesc& d, const Tensors& t, const Expected& e) {
    std::vector<double> y(d.rows * d.hidden), ro;
    for (int64_t r = 0; r < d.rows; ++r)
        for (int64_t i = 0; i < d.hidden; ++i) y[r * d.hidden + i] = t.y.get(r, i);
    auto res = test::all_close(y.data(), e.y.data(), y.size(), atol_of(d.y_dtype), rtol_of(d.y_dtype));
    if (!res) return res << " (y)";
    if (!t.y.padding_intact()) return t.y.padding_intact() << " (y)";
    if (d.fused_residual) {
        for (int64_t r = 0; r < d.rows; ++r)
            for (int64_t i = 0; i < d.hidden; ++i) {
                const double got = t.ro.get(r, i), want = e.h[r * d.hidden + i];
                if (got != want && !(std::isnan(got) && std::isnan(want)))
                    return ::testing::AssertionFailure() << "residual_out[" << r << "][" << i << "]=" << got << " want " << want;
            }
        if (!t.ro.padding_intact()) return t.ro.padding_intact() << " (residual_out)";
    }
    return ::testing::AssertionSuccess();
}

std::string describe(const NormDesc& d) {
    return detail::norm_kernel_desc(d).key() + " rows=" + std::to_string(d.rows) + " ld_x=" + std::to_string(d.ld_x) +
           " ld_y=" + std::to_string(d.ld_y) + " eps=" + std::to_string(d.eps);
}

struct DTypes {
    DType x, y, r, w;
};
const DTypes kDTypeCombos[] = {
    {DType::f32, DType::f32, DType::f32, DType::f32},
    {DType::bf16, DType::bf16, DType::bf16, DType::bf16},
    {DType::bf16, DType::bf16, DType::f32, DType::f32},  // fp32 residual stream and weights
    {DType::f32, DType::bf16, DType::bf16, DType::bf16},
};

// A descriptor of `kind` over rows x hidden with the dtypes of dt (weight and, for layer_norm, a
// bias; the callers set the rest).
NormDesc desc_of(NormKind kind, const DTypes& dt, int64_t rows, int64_t hidden) {
    NormDesc d;
    d.kind = kind;
    d.rows = rows;
    d.hidden = hidden;
    d.x_dtype = dt.x;
    d.y_dtype = dt.y;
    d.residual_dtype = dt.r;
    d.weight_dtype = dt.w;
    d.has_weight = true;
    d.has_bias = kind == NormKind::layer_norm;
    return d;
}

}  // namespace

// The fp32 rounding of h - mean relative to the std, for rows far from zero: 4 ulps of |mean| over
// the row's std (h(i): the row's values, in double).
template <typename H>
double cancellation_tol(int64_t hidden, double eps, H h) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < hidden; ++i) mean += h(i) / hidden;
    for (int64_t i = 0; i < hidden; ++i) var += (h(i) - mean) * (h(i) - mean) / hidden;
    return 4.0 * std::ldexp(1.0, -24) * std::fabs(mean) / std::sqrt(var + eps);
}

TEST(Norm, EveryIsaMatchesOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            int variant = 0;
            for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm}) {
                for (const DTypes& dt : kDTypeCombos) {
                    for (int64_t hidden : kHiddenSizes) {
                        for (bool fused : {false, true}) {
                            ++variant;
                            NormDesc d;
                            d.kind = kind;
                            d.rows = hidden >= 1000 ? 2 : 3;
                            d.hidden = hidden;
                            d.x_dtype = dt.x;
                            d.y_dtype = dt.y;
                            d.residual_dtype = dt.r;
                            d.weight_dtype = dt.w;
                            d.has_weight = variant % 5 != 0;
                            d.has_bias = kind == NormKind::layer_norm ? variant % 3 != 0 : variant % 7 == 0;
                            d.fused_residual = fused;
                            d.eps = variant % 2 ? 1e-5f : 1e-6f;
                            // Strides: packed, or padded by a few elements (different per matrix).
                            if (variant % 2) {
                                d.ld_x = hidden + 3;
                                d.ld_y = hidden + 1;
                                d.ld_residual = hidden + 5;
                                d.ld_residual_out = hidden + 2;
                            }
                            const size_t mis = variant % 4;  // elements past a 64-byte boundary
                            Tensors t = make_tensors(d, mis, 1000 + variant);
                            const NormPlan plan(d);
                            EXPECT_STREQ(plan.impl_name(), detail::norm_registry().select(detail::norm_kernel_desc(plan.desc()), isa).name);
                            plan.run(args_of(d, t));
                            const Expected e = oracle(d, t.x, &t.r, &t.w, &t.b);
                            ASSERT_TRUE(matches(d, t, e)) << describe(d) << " threads=" << threads;
                        }
                    }
                }
            }
        });
    }
    set_num_threads(0);
}

TEST(Norm, RowCountsAroundTheFusedPath) {
    // Calls of few rows whose weights would need an f32 (or, with bf16 x and y and f32 weights,
    // a permuted: the even / odd split) copy run unfused with the weights as given; from
    // JitNormKernel::kWidenRows rows on, the copy and the fused passes (bf16 weights on the
    // even / odd path need no copy: fused from 2 rows on, split as loaded): both sides of that
    // switch, every dtype combination, hidden sizes with whole even / odd blocks (16 elements
    // AVX2, 32 AVX-512) and tails. f32 x without a fused residual runs two rows a trip from 4
    // rows on (two runs of rows side by side, the second as long as the first or one longer; rows
    // in turns of 256 elements, then the rest): 3..7 rows and hidden sizes of whole turns, turns
    // and a rest, and a rest alone.
    for_each_isa([&](Isa) {
        int variant = 0;
        for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
            for (const DTypes& dt : kDTypeCombos)
                for (int64_t hidden : {16, 17, 32, 33, 48, 65, 256, 300, 527})
                    for (int64_t rows : {2, 3, 4, 5, 6, 7, 31, 32, 40}) {
                        ++variant;
                        NormDesc d = desc_of(kind, dt, rows, hidden);
                        d.has_bias = variant % 2 == 0;
                        d.fused_residual = variant % 3 == 0;
                        d.eps = 1e-5f;
                        Tensors t = make_tensors(d, variant % 4, 3000 + variant);
                        const NormPlan plan(d);
                        plan.run(args_of(d, t));
                        const Expected e = oracle(d, t.x, &t.r, &t.w, &t.b);
                        ASSERT_TRUE(matches(d, t, e)) << describe(d);
                    }
    });
}

TEST(Norm, EvenOddBlocksEveryTail) {
    // bf16 x and y without a fused residual: the even / odd path (blocks of 16 elements on AVX2,
    // 32 on AVX-512; the rest through the tail code). Hidden sizes at every block boundary of
    // both widths, decode-like calls (1, 4, 16 rows: bf16 weights fused from 2 rows, split as
    // loaded; f32 weights unfused, row by row) and a call of 40 rows (>= kWidenRows: the fused
    // passes, f32 weights through the permuted copy), bf16 and f32 weights, every weight / bias
    // combination, packed and padded rows, misaligned pointers. One thread, so that the 40 rows
    // stay one call of the kernel.
    set_num_threads(1);
    for_each_isa([&](Isa isa) {
        int variant = 0;
        for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
            for (DType wt : {DType::bf16, DType::f32})
                for (int64_t hidden : {31, 32, 33, 63, 64, 65, 95, 96, 97, 4095, 4096})
                    for (int64_t rows : {1, 4, 16, 40})
                        for (int wb = 0; wb < 4; ++wb) {  // weight + bias, weight, bias, neither
                            ++variant;
                            NormDesc d;
                            d.kind = kind;
                            d.rows = rows;
                            d.hidden = hidden;
                            d.x_dtype = d.y_dtype = DType::bf16;
                            d.weight_dtype = wt;
                            d.has_weight = wb < 2;
                            d.has_bias = wb == 0 || wb == 2;
                            d.eps = 1e-5f;
                            if (variant % 2) {
                                d.ld_x = hidden + 5;
                                d.ld_y = hidden + 3;
                            }
                            Tensors t = make_tensors(d, variant % 3, 4000 + variant);
                            norm(d, args_of(d, t));
                            ASSERT_TRUE(matches(d, t, oracle(d, t.x, nullptr, &t.w, &t.b))) << describe(d) << " " << isa_name(isa);
                        }
    });
    set_num_threads(0);
}

TEST(Norm, EveryRegistryEntry) {
    // Each implementation forced, whatever the cap: run against the oracle where this machine has
    // its ISA, generated only elsewhere (a machine with AVX-512 / AVX512-BF16 runs them all).
    const auto& reg = detail::norm_registry();
    for (const auto& impl : reg.impls()) {
        SCOPED_TRACE(impl.name);
        const bool runs = isa_supported(impl.isa);
        int variant = 0;
        for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
            for (const DTypes& dt : kDTypeCombos)
                for (int64_t hidden : {1, 5, 8, 16, 17, 31, 32, 33, 40, 63, 64, 65, 129, 300, 4095, 4096})
                    for (bool fused : {false, true}) {
                        ++variant;
                        NormDesc d;
                        d.kind = kind;
                        d.rows = variant % 3 == 0 ? 1 : 2;  // one row: bf16 weights used as they are
                        d.hidden = hidden;
                        d.x_dtype = dt.x;
                        d.y_dtype = dt.y;
                        d.residual_dtype = dt.r;
                        d.weight_dtype = dt.w;
                        d.has_weight = variant % 3 != 0;
                        d.has_bias = variant % 4 == 1;
                        d.fused_residual = fused;
                        if (variant % 2) d.ld_x = d.ld_y = d.ld_residual = d.ld_residual_out = hidden + 1;
                        const auto kd = detail::norm_kernel_desc(d);
                        if (impl.supports && !impl.supports(kd)) continue;
                        const auto sel = reg.get(kd, impl);
                        ASSERT_TRUE(sel.kernel);
                        if (!runs) continue;
                        Tensors t = make_tensors(d, variant % 3, 900 + variant);
                        NormDesc rd = d;
                        rd.ld_x = rd.ld_x ? rd.ld_x : hidden;
                        rd.ld_y = rd.ld_y ? rd.ld_y : hidden;
                        rd.ld_residual = fused ? (rd.ld_residual ? rd.ld_residual : hidden) : 0;
                        rd.ld_residual_out = fused ? (rd.ld_residual_out ? rd.ld_residual_out : hidden) : 0;
                        sel.kernel->run(rd, args_of(d, t), 0, d.rows);
                        ASSERT_TRUE(matches(d, t, oracle(d, t.x, &t.r, &t.w, &t.b))) << describe(d);
                    }
        if (!runs) std::printf("[ generated only ] %s (needs %s)\n", impl.name, isa_name(impl.isa));
    }
}

TEST(Norm, LayerNormLargeMeanAndOutliers) {
    // Rows far from zero (mean 100, std ~1), rows with an outlier, consecutive rows with very
    // different means (the JIT kernels shift a row's one-pass moments by the previous row's mean
    // and fall back to a two-pass variance when that shift is far off), and a row like its
    // predecessor (the one-pass path, outlier included): the statistics must not cancel.
    // Tolerance: the fp32 rounding of mean and of h - mean, relative to the std, on top.
    for_each_isa([&](Isa) {
        for (int64_t hidden : {7, 64, 1000, 4095}) {
            NormDesc d;
            d.kind = NormKind::layer_norm;
            d.rows = 5;
            d.hidden = hidden;
            d.has_weight = false;
            Tensors t = make_tensors(d, 0, 77 + hidden);
            for (int64_t i = 0; i < hidden; ++i) {
                t.x.set(0, i, 100.0 + t.x.get(0, i));
                t.x.set(1, i, t.x.get(1, i) + (i == 0 ? 1000.0 : 0.0));
                t.x.set(2, i, t.x.get(2, i) + (i == 0 ? 1000.0 : 0.0));
                t.x.set(3, i, -3000.0 + 0.01 * t.x.get(3, i));
                t.x.set(4, i, -3000.0 + 0.01 * t.x.get(4, i));
            }
            norm(d, args_of(d, t));
            const Expected e = oracle(d, t.x, nullptr, nullptr, nullptr);
            for (int64_t r = 0; r < d.rows; ++r) {
                const double tol = 1e-5 + cancellation_tol(hidden, d.eps, [&](int64_t i) { return t.x.get(r, i); });
                for (int64_t i = 0; i < hidden; ++i)
                    ASSERT_NEAR(t.y.get(r, i), e.y[r * hidden + i], tol + 1e-5 * std::fabs(e.y[r * hidden + i]))
                        << "row " << r << " i " << i << " hidden " << hidden;
            }
        }
    });
}

TEST(Norm, TwoRowPassVariancePassAtEveryRow) {
    // LayerNorm, f32 x (the two-row fused pass): one row of the call far from its predecessor's
    // mean (the one-pass moments shifted by it cancel, so that row takes the variance pass), at
    // every position of calls of 4..9 rows: in either run of rows, on either row of a trip, in
    // the first trip, a middle one and the last. Rows shorter than 24 KiB (the runs are the
    // call's two halves) and longer (neighbouring rows: 6150 floats, turns of 256 and a tail).
    // Weights and bias, f32 and bf16 y, 1 and 2 threads.
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            for (DType yt : {DType::f32, DType::bf16})
                for (int64_t hidden : {64, 300, 6150})
                    for (int64_t rows = 4; rows <= 9; ++rows)
                        for (int64_t far = 0; far < rows; ++far) {
                            if (xk::test::kTsanSweep && (rows + far) % 3 != 0) continue;  // (TSan: a third)
                            NormDesc d;
                            d.kind = NormKind::layer_norm;
                            d.rows = rows;
                            d.hidden = hidden;
                            d.y_dtype = yt;
                            d.has_bias = true;
                            Tensors t = make_tensors(d, 0, 500 + 16 * rows + far);
                            for (int64_t i = 0; i < hidden; ++i) t.x.set(far, i, t.x.get(far, i) + 3000.0);
                            norm(d, args_of(d, t));
                            const Expected e = oracle(d, t.x, nullptr, &t.w, &t.b);
                            for (int64_t r = 0; r < rows; ++r) {
                                // the fp32 rounding of h - mean relative to the std, on top (as above)
                                const double cancel =
                                    1.5 * cancellation_tol(hidden, d.eps, [&](int64_t i) { return t.x.get(r, i); });
                                for (int64_t i = 0; i < hidden; ++i) {
                                    const double want = e.y[r * hidden + i];
                                    ASSERT_NEAR(t.y.get(r, i), want, atol_of(yt) + rtol_of(yt) * std::fabs(want) + cancel)
                                        << isa_name(isa) << " threads " << threads << " rows " << rows << " far row " << far
                                        << ": row " << r << " i " << i;
                                }
                            }
                        }
        });
    }
    set_num_threads(0);
}

TEST(Norm, StreamingStores) {
    // Force the non-temporal path (threshold 0): aligned rows stream, misaligned ones fall back.
    detail::set_nt_store_threshold(0);
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
                for (const DTypes& dt : kDTypeCombos)
                    // bf16 rows of 72: odd rows 16-byte aligned only; of 80: 32-byte (AVX2
                    // streams, AVX-512 not); of 96: 64-byte (3 even / odd blocks on AVX-512)
                    for (int64_t hidden : {64, 72, 80, 96, 100, 1024})
                        for (size_t mis : {0, 1}) {
                            NormDesc d = desc_of(kind, dt, 24, hidden);
                            d.fused_residual = hidden == 100;
                            Tensors t = make_tensors(d, 0, 5 + hidden);
                            // y 64-byte aligned, or one element past (make_tensors' default)
                            if (!mis) t.y = TypedMatrix(d.y_dtype, d.rows, hidden, 0, 0);
                            norm(d, args_of(d, t));
                            ASSERT_TRUE(matches(d, t, oracle(d, t.x, &t.r, &t.w, &t.b))) << describe(d) << " mis " << mis;
                        }
        });
    }
    set_num_threads(0);
    detail::set_nt_store_threshold(-1);
}

TEST(Norm, ResidualOutApartStreamed) {
    // A fused residual whose residual_out is an array of its own, rows aligned, streaming on
    // (threshold 0): the fused pass writes residual_out with non-temporal stores and h to two
    // scratch rows in turn, which the apply (and a LayerNorm row's variance pass) reads. Every 7th
    // row shifted by +500 (the variance pass inside such calls), calls of 2 / 7 / 40 rows, f32 and
    // bf16 (the even / odd path, with y and weights in either dtype), 1 and 2 threads.
    detail::set_nt_store_threshold(0);
    const DTypes combos[] = {{DType::f32, DType::f32, DType::f32, DType::f32},
                             {DType::bf16, DType::bf16, DType::bf16, DType::bf16},
                             {DType::bf16, DType::f32, DType::bf16, DType::bf16},
                             {DType::bf16, DType::bf16, DType::bf16, DType::f32}};
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
                for (const DTypes& dt : combos)
                    for (int64_t hidden : {64, 100, 300, 1024})
                        for (int64_t rows : {2, 7, 40}) {
                            NormDesc d = desc_of(kind, dt, rows, hidden);
                            d.fused_residual = true;
                            const int64_t ld = (hidden + 31) / 32 * 32;  // rows on 64 bytes
                            d.ld_y = d.ld_residual_out = ld;
                            Tensors t = make_tensors(d, 1, 61 + hidden + rows);
                            t.y = TypedMatrix(d.y_dtype, rows, hidden, ld, 0);
                            t.ro = TypedMatrix(d.residual_dtype, rows, hidden, ld, 0);
                            for (int64_t r = 0; r < rows; r += 7)
                                for (int64_t i = 0; i < hidden; ++i) t.x.set(r, i, t.x.get(r, i) + 500.0);
                            norm(d, args_of(d, t));
                            const Expected e = oracle(d, t.x, &t.r, &t.w, &t.b);
                            const std::string what = std::string(isa_name(isa)) + " " + describe(d) + " threads " + std::to_string(threads);
                            for (int64_t r = 0; r < rows; ++r) {
                                const double cancel = 1.5 * cancellation_tol(hidden, d.eps, [&](int64_t i) { return e.h[r * hidden + i]; });
                                for (int64_t i = 0; i < hidden; ++i) {
                                    ASSERT_EQ(t.ro.get(r, i), e.h[r * hidden + i]) << what << " residual_out[" << r << "][" << i << "]";
                                    const double want = e.y[r * hidden + i];
                                    ASSERT_NEAR(t.y.get(r, i), want, atol_of(d.y_dtype) + rtol_of(d.y_dtype) * std::fabs(want) + cancel)
                                        << what << " y[" << r << "][" << i << "]";
                                }
                            }
                            ASSERT_TRUE(t.ro.padding_intact()) << what;
                            ASSERT_TRUE(t.y.padding_intact()) << what;
                        }
        });
    }
    set_num_threads(0);
    detail::set_nt_store_threshold(-1);
}

TEST(Norm, NaNWeightsStayNaNInBf16Output) {
    // f32 weights / bias holding NaNs with every low payload bit set (a bf16 rounding by
    // + 0x8000 on the bits would carry them into the sign): y is NaN in those columns, whatever
    // path runs (calls of >= 32 rows take the even / odd apply with the weights copied).
    for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
        for (int64_t rows : {1, 40}) {
            NormDesc d;
            d.kind = kind;
            d.rows = rows;
            d.hidden = 64;
            d.x_dtype = d.y_dtype = DType::bf16;
            d.has_bias = true;
            for_each_isa([&](Isa isa) {
                Tensors t = make_tensors(d, 0, 11);
                const uint32_t bits[] = {0x7fffffffu, 0xffffffffu, 0x7fff8000u};
                const int64_t cols[] = {5, 20, 33};
                for (int j = 0; j < 3; ++j)
                    std::memcpy(static_cast<float*>(j == 2 ? t.b.data() : t.w.data()) + cols[j], &bits[j], 4);
                norm(d, args_of(d, t));
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t i = 0; i < d.hidden; ++i) {
                        const bool nan_col = i == 5 || i == 20 || i == 33;
                        ASSERT_EQ(std::isnan(t.y.get(r, i)), nan_col) << isa_name(isa) << " rows " << rows << " [" << r << "][" << i << "]";
                    }
            });
        }
}

TEST(Norm, Bf16ResidualSumSpecialValues) {
    // bf16 x and residual: the even / odd path forms h = x + r and rounds it in registers by the
    // bit arithmetic of round to nearest even without a NaN test (JitIo::round2_eo_keep). NaN and
    // inf inputs, inf - inf, and sums that overflow on the rounding (max + max; max + half an ulp,
    // a tie that rounds to the even inf) must give residual_out exactly as the reference does
    // (NaN where it is NaN), and y NaN exactly where the oracle's is. Rows 1 and 40 (the fused
    // passes), hidden with and without a tail, y and weights in both dtypes.
    const double big = std::ldexp(255.0, 120), half_ulp = std::ldexp(1.0, 119);  // max bf16, its half ulp
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
        for (DType yt : {DType::bf16, DType::f32})
            for (DType wt : {DType::bf16, DType::f32})
                for (int64_t rows : {1, 40})
                    for (int64_t hidden : {64, 71}) {
                        NormDesc d = desc_of(kind, {DType::bf16, yt, DType::bf16, wt}, rows, hidden);
                        d.fused_residual = true;
                        for_each_isa([&](Isa isa) {
                            Tensors t = make_tensors(d, 1, 17 + hidden);
                            // row 0: NaN + finite, inf + -inf, inf + finite
                            t.x.set(0, 3, nan);
                            t.x.set(0, 18, inf);
                            t.r.set(0, 18, -inf);
                            t.x.set(0, 35, inf);
                            t.r.set(0, 35, 1.0);
                            if (rows > 1) {  // row 1: overflows and a tie at the top of the range
                                t.x.set(1, 5, big);
                                t.r.set(1, 5, big);
                                t.x.set(1, 6, big);
                                t.r.set(1, 6, half_ulp);
                                t.x.set(1, 7, -big);
                                t.r.set(1, 7, -half_ulp);
                                t.x.set(1, hidden - 1, -inf);  // in the tail when hidden = 71
                            }
                            norm(d, args_of(d, t));
                            const Expected e = oracle(d, t.x, &t.r, &t.w, &t.b);
                            if (rows > 1) {
                                ASSERT_EQ(e.h[1 * hidden + 5], inf);
                                ASSERT_EQ(e.h[1 * hidden + 6], inf);
                                ASSERT_EQ(e.h[1 * hidden + 7], -inf);
                            }
                            ASSERT_TRUE(matches(d, t, e)) << isa_name(isa) << " " << describe(d);
                        });
                    }
}

TEST(Norm, NonFiniteRowLeavesTheOtherRowsAlone) {
    // LayerNorm's statistics are shifted by the previous row's mean: after a row holding a NaN or
    // an inf (whose y is NaN) that shift is not finite, and the next rows must still come out
    // right. One such row at the start, inside or at the end of calls of 5 (the two-row pass for
    // f32 x) and 40 rows (the fused passes), f32 and bf16 x, with and without a fused residual.
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
        for (DType xt : {DType::f32, DType::bf16})
            for (bool fused : {false, true})
                for (int64_t rows : {5, 40})
                    for (int64_t bad : {int64_t{0}, int64_t{2}, rows - 1})
                        for (double v : {nan, inf}) {
                            NormDesc d = desc_of(kind, {xt, xt, xt, xt}, rows, 96);
                            d.fused_residual = fused;
                            for_each_isa([&](Isa isa) {
                                Tensors t = make_tensors(d, 0, 23 + bad);
                                t.x.set(bad, 40, v);
                                norm(d, args_of(d, t));
                                ASSERT_TRUE(matches(d, t, oracle(d, t.x, &t.r, &t.w, &t.b)))
                                    << isa_name(isa) << " " << describe(d) << " bad row " << bad << " value " << v;
                            });
                        }
}

TEST(Norm, ReferenceAgreesWithPlanAndIsSplitAcrossThreads) {
    // 64 rows of 300: two chunks of rows, so 2 threads really split the work; the result must be
    // bitwise identical to the single-threaded run and to the reference called directly. Without
    // the fused residual (bf16 x, y and weights: the even / odd path, whose fused pass
    // reads the bf16 weights as given) the chunks' last rows run the apply pass alone.
    for (bool fused : {true, false}) {
    NormDesc d;
    d.kind = NormKind::layer_norm;
    d.rows = 64;
    d.hidden = 300;
    d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = DType::bf16;
    d.has_bias = true;
    d.fused_residual = fused;
    for_each_isa([&](Isa) {
        Tensors t1 = make_tensors(d, 0, 7), t2 = make_tensors(d, 0, 7), tr = make_tensors(d, 0, 7);
        set_num_threads(1);
        norm(d, args_of(d, t1));
        set_num_threads(2);
        EXPECT_EQ(detail::parallel_threads(d.rows, detail::norm_row_grain(d.hidden)), 2);
        norm(d, args_of(d, t2));
        set_num_threads(0);
        NormDesc rd = d;
        rd.ld_x = rd.ld_y = rd.ld_residual = rd.ld_residual_out = d.hidden;
        detail::norm_reference(rd, args_of(d, tr), 0, d.rows);
        ASSERT_EQ(std::memcmp(t1.y.data(), t2.y.data(), t1.y.elems() * 2), 0);
        if (fused) {
            ASSERT_EQ(std::memcmp(t1.ro.data(), t2.ro.data(), t1.ro.elems() * 2), 0);
            ASSERT_EQ(std::memcmp(t1.ro.data(), tr.ro.data(), t1.ro.elems() * 2), 0);  // the sum is exact everywhere
        }
        if (NormPlan(d).impl_name() == std::string("ref:scalar"))
            ASSERT_EQ(std::memcmp(t1.y.data(), tr.y.data(), t1.y.elems() * 2), 0);
        ASSERT_TRUE(matches(d, tr, oracle(d, tr.x, &tr.r, &tr.w, &tr.b)));
        ASSERT_TRUE(matches(d, t2, oracle(d, t2.x, &t2.r, &t2.w, &t2.b)));
    });
    }
    // A single row of 4096 runs inline.
    EXPECT_EQ(detail::parallel_threads(1, detail::norm_row_grain(4096)), 1);
}

TEST(Norm, RowsOfOneCallMatchRowsNormedAlone) {
    // The JIT kernels finish a row's mean and rstd in C++ (the first row of a call, a row normed
    // alone, a LayerNorm row that needs the variance pass) or inside the fused pass, which loops
    // over the rows and returns to C++ only for such a variance-pass row. 40 rows (past the
    // weight-widening threshold) in one call against 40 calls of one row, every 7th row shifted by
    // +500 (LayerNorm then falls back to the variance pass for it and for its successor, in the
    // middle of the call): both against the oracle, with the fp32 rounding of h - mean relative to
    // the std on top of the dtype's tolerance (as LayerNormLargeMeanAndOutliers). The two are not
    // bitwise equal in general: the statistics pass alone and the fused pass add a row's vectors
    // over different accumulator chains. residual_out is exact either way.
    set_num_threads(1);
    for_each_isa([&](Isa) {
        for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm})
            for (const DTypes& dt : kDTypeCombos)
                for (bool fused : {false, true})
                    for (int64_t hidden : {300, 4096}) {
                        NormDesc d = desc_of(kind, dt, 40, hidden);
                        d.fused_residual = fused;
                        Tensors all = make_tensors(d, 0, 31 + hidden);
                        for (int64_t r = 0; r < d.rows; r += 7)
                            for (int64_t i = 0; i < hidden; ++i) all.x.set(r, i, all.x.get(r, i) + 500.0);
                        Tensors one = make_tensors(d, 0, 31 + hidden);
                        for (int64_t r = 0; r < d.rows; ++r)
                            for (int64_t i = 0; i < hidden; ++i) one.x.set(r, i, all.x.get(r, i));
                        norm(d, args_of(d, all));
                        NormDesc d1 = d;
                        d1.rows = 1;
                        for (int64_t r = 0; r < d.rows; ++r) {
                            NormArgs a = args_of(d, one);
                            a.x = static_cast<const char*>(a.x) + r * hidden * dtype_size(d.x_dtype);
                            a.y = static_cast<char*>(a.y) + r * hidden * dtype_size(d.y_dtype);
                            if (fused) {
                                a.residual = static_cast<const char*>(a.residual) + r * hidden * dtype_size(d.residual_dtype);
                                a.residual_out = static_cast<char*>(a.residual_out) + r * hidden * dtype_size(d.residual_dtype);
                            }
                            norm(d1, a);
                        }
                        SCOPED_TRACE(std::string(norm_kind_name(kind)) + " x=" + dtype_name(dt.x) + " y=" + dtype_name(dt.y) +
                                     " r=" + dtype_name(dt.r) + " w=" + dtype_name(dt.w) + (fused ? " fused" : "") +
                                     " hidden " + std::to_string(hidden));
                        const Expected e = oracle(d, all.x, fused ? &all.r : nullptr, &all.w, &all.b);
                        for (int64_t r = 0; r < d.rows; ++r) {
                            const double cancel =
                                1.5 * cancellation_tol(hidden, d.eps, [&](int64_t i) { return e.h[r * hidden + i]; });
                            for (int64_t i = 0; i < hidden; ++i) {
                                const double want = e.y[r * hidden + i];
                                const double tol = atol_of(d.y_dtype) + rtol_of(d.y_dtype) * std::fabs(want) + cancel;
                                ASSERT_NEAR(all.y.get(r, i), want, tol) << "one call: row " << r << " i " << i;
                                ASSERT_NEAR(one.y.get(r, i), want, tol) << "rows alone: row " << r << " i " << i;
                            }
                        }
                        if (fused) {
                            ASSERT_EQ(std::memcmp(all.ro.data(), one.ro.data(), all.ro.elems() * dtype_size(d.residual_dtype)), 0);
                            for (int64_t r = 0; r < d.rows; ++r)
                                for (int64_t i = 0; i < hidden; ++i) ASSERT_EQ(all.ro.get(r, i), e.h[r * hidden + i]);
                        }
                    }
    });
    set_num_threads(0);
}

TEST(Norm, LayerNormRowAfterAFarRow) {
    // A JIT LayerNorm row's sums are shifted by the previous row's mean; when that shift is far
    // from the row's own mean (relative to its spread), one variance pass around the first
    // estimate was not enough and the row's y depended on the row before it (fuzz_norm: a row of
    // (i % 7) - 3 after a row of 1e9 came out 2.96e-3 off, 965 off after 1e13; zeros after a row
    // {-1e17, 0, ...} gave 16.7 where 0 is right; on the Xeon, a row of tiny values after a huge
    // one kept an error of 1e-29 after 8 passes). Rows far apart in every order, both dtypes,
    // fused or not, every ISA: each row against the oracle.
    set_num_threads(1);
    for_each_isa([&](Isa) {
        for (const DTypes& dt : kDTypeCombos)
            for (bool fused : {false, true})
                for (int64_t hidden : {300, 4096})
                    for (double big : {1e9, 1e13, 1e17, -1e17}) {
                        NormDesc d = desc_of(NormKind::layer_norm, dt, 8, hidden);
                        d.fused_residual = fused;
                        d.eps = 1e-6f;
                        Tensors t = make_tensors(d, 0, 7 + hidden);
                        for (int64_t i = 0; i < hidden; ++i) {
                            t.x.set(0, i, big);                          // far row
                            t.x.set(1, i, static_cast<double>(i % 7) - 3);  // small spread
                            t.x.set(2, i, i == 0 ? big : 0.0);           // an outlier row
                            t.x.set(3, i, 0.0);                          // constant
                            t.x.set(4, i, 0.0);
                            t.x.set(5, i, static_cast<double>(i % 5) * 0.25);
                            t.x.set(6, i, big);
                            t.x.set(7, i, 1e-30 * static_cast<double>(1 + i % 2));  // far below the shift
                            if (fused) for (int64_t r = 0; r < 8; ++r) t.r.set(r, i, 0.0);
                        }
                        norm(d, args_of(d, t));
                        SCOPED_TRACE(std::string("x=") + dtype_name(dt.x) + " y=" + dtype_name(dt.y) + (fused ? " fused" : "") +
                                     " hidden " + std::to_string(hidden) + " big " + std::to_string(big));
                        const Expected e = oracle(d, t.x, fused ? &t.r : nullptr, &t.w, &t.b);
                        for (int64_t r = 1; r < d.rows; ++r) {
                            const double cancel =
                                1.5 * cancellation_tol(hidden, d.eps, [&](int64_t i) { return e.h[r * hidden + i]; });
                            for (int64_t i = 0; i < hidden; ++i) {
                                const double want = e.y[r * hidden + i];
                                const double tol = atol_of(d.y_dtype) + rtol_of(d.y_dtype) * std::fabs(want) + cancel;
                                ASSERT_NEAR(t.y.get(r, i), want, tol) << "row " << r << " i " << i;
                            }
                        }
                    }
    });
    set_num_threads(0);
}

TEST(Norm, InPlaceAliasing) {
    for_each_isa([&](Isa) {
        for (DType t : {DType::f32, DType::bf16}) {
            for (int64_t hidden : {1, 17, 300}) {
                // y == x (same stride), residual_out == residual, both with padded rows.
                NormDesc d;
                d.kind = NormKind::rms_norm;
                d.rows = 5;
                d.hidden = hidden;
                d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
                d.ld_x = d.ld_y = hidden + 4;
                d.ld_residual = d.ld_residual_out = hidden + 2;
                d.fused_residual = true;
                Tensors tt = make_tensors(d, 1, 50 + hidden);
                const TypedMatrix x0 = tt.x.clone(), r0 = tt.r.clone();
                NormArgs a = args_of(d, tt);
                a.y = tt.x.data();
                a.residual_out = tt.r.data();
                norm(d, a);
                const Expected e = oracle(d, x0, &r0, &tt.w, nullptr);
                Tensors view;  // compare the in-place buffers through `matches`
                view.y = tt.x.clone();
                view.ro = tt.r.clone();
                ASSERT_TRUE(matches(d, view, e)) << "in place, " << describe(d);

                // vLLM's fused_add_rms_norm convenience: packed, both in place.
                TypedMatrix x(t, 3, hidden), r(t, 3, hidden), w(t, 1, hidden);
                x.fill_uniform(-2, 2, 1);
                r.fill_uniform(-2, 2, 2);
                w.fill_uniform(0.5, 1.5, 3);
                NormDesc pd;
                pd.rows = 3;
                pd.hidden = hidden;
                pd.x_dtype = pd.y_dtype = pd.residual_dtype = pd.weight_dtype = t;
                pd.fused_residual = true;
                pd.eps = 1e-6f;
                const Expected pe = oracle(pd, x, &r, &w, nullptr);
                if (t == DType::f32)
                    fused_add_rms_norm(3, hidden, static_cast<float*>(x.data()), static_cast<float*>(r.data()),
                                       static_cast<const float*>(w.data()), 1e-6f);
                else
                    fused_add_rms_norm(3, hidden, static_cast<bf16*>(x.data()), static_cast<bf16*>(r.data()),
                                       static_cast<const bf16*>(w.data()), 1e-6f);
                Tensors pv;
                pv.y = x.clone();
                pv.ro = r.clone();
                ASSERT_TRUE(matches(pd, pv, pe)) << "fused_add_rms_norm " << dtype_name(t) << " hidden=" << hidden;
            }
        }
    });
}

TEST(Norm, ConvenienceFormsMatchOracle) {
    for_each_isa([&](Isa) {
        for (DType t : {DType::f32, DType::bf16}) {
            for (int64_t hidden : {7, 64, 4095}) {
                for (int variant = 0; variant < 3; ++variant) {  // weight+bias, weight only, neither
                    NormDesc d;
                    d.rows = 2;
                    d.hidden = hidden;
                    d.x_dtype = d.y_dtype = d.weight_dtype = t;
                    d.eps = 1e-5f;
                    d.has_weight = variant < 2;
                    for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm}) {
                        d.kind = kind;
                        d.has_bias = kind == NormKind::layer_norm && variant == 0;
                        Tensors tt = make_tensors(d, 0, 90 + variant);
                        const void* w = d.has_weight ? tt.w.data() : nullptr;
                        const void* b = d.has_bias ? tt.b.data() : nullptr;
                        if (t == DType::f32) {
                            auto* x = static_cast<const float*>(tt.x.data());
                            auto* y = static_cast<float*>(tt.y.data());
                            if (kind == NormKind::rms_norm)
                                rms_norm(2, hidden, x, static_cast<const float*>(w), d.eps, y);
                            else
                                layer_norm(2, hidden, x, static_cast<const float*>(w), static_cast<const float*>(b), d.eps, y);
                        } else {
                            auto* x = static_cast<const bf16*>(tt.x.data());
                            auto* y = static_cast<bf16*>(tt.y.data());
                            if (kind == NormKind::rms_norm)
                                rms_norm(2, hidden, x, static_cast<const bf16*>(w), d.eps, y);
                            else
                                layer_norm(2, hidden, x, static_cast<const bf16*>(w), static_cast<const bf16*>(b), d.eps, y);
                        }
                        ASSERT_TRUE(matches(d, tt, oracle(d, tt.x, nullptr, &tt.w, &tt.b))) << describe(d);
                    }
                }
            }
        }
    });
}

TEST(Norm, DisjointInterleavedRowsAreAccepted) {
    // x in the even half-rows and y in the odd half-rows of one buffer: spans overlap, elements do not.
    const int64_t rows = 4, hidden = 33;
    TypedMatrix buf(DType::f32, rows, 2 * hidden);
    buf.fill_uniform(-1, 1, 3);
    const TypedMatrix x0 = buf.clone();
    NormDesc d;
    d.rows = rows;
    d.hidden = hidden;
    d.ld_x = d.ld_y = 2 * hidden;
    d.has_weight = false;
    NormArgs a;
    a.x = buf.data();
    a.y = static_cast<float*>(buf.data()) + hidden;
    norm(d, a);
    TypedMatrix x(DType::f32, rows, hidden, 2 * hidden);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < hidden; ++i) x.set(r, i, x0.get(r, i));
    const Expected e = oracle(d, x, nullptr, nullptr, nullptr);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < hidden; ++i) {
            ASSERT_EQ(buf.get(r, i), x0.get(r, i)) << "x changed";
            ASSERT_NEAR(buf.get(r, hidden + i), e.y[r * hidden + i], kF32Atol + kF32Rtol * std::fabs(e.y[r * hidden + i]));
        }
}

TEST(Norm, KernelIsKeyedWithoutRuntimeValues) {
    // Rows, strides and eps are runtime values: changing them must not create a new kernel.
    NormDesc d;
    d.kind = NormKind::rms_norm;
    d.hidden = 77;
    d.x_dtype = d.y_dtype = d.weight_dtype = DType::bf16;
    d.rows = 3;
    Tensors t = make_tensors(d, 0, 1);
    norm(d, args_of(d, t));
    const uint64_t created = kernel_cache_stats().creations;
    d.rows = 2;
    d.ld_x = 80;
    d.eps = 1e-3f;
    Tensors t2 = make_tensors(d, 0, 2);
    norm(d, args_of(d, t2));
    EXPECT_EQ(kernel_cache_stats().creations, created);
    ASSERT_TRUE(matches(d, t2, oracle(d, t2.x, nullptr, &t2.w, nullptr)));
}

TEST(Norm, PlanRunsConcurrently) {
    // One immutable plan, run from two threads at once on different buffers (each run itself
    // split over 2 threads), and the one-shot form racing on the kernel cache.
    NormDesc d;
    d.kind = NormKind::layer_norm;
    d.rows = 40;
    d.hidden = 700;
    d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = DType::bf16;
    d.fused_residual = true;
    d.has_bias = true;
    const NormPlan plan(d);
    set_num_threads(2);
    Tensors t[4] = {make_tensors(d, 0, 1), make_tensors(d, 0, 2), make_tensors(d, 0, 3), make_tensors(d, 0, 4)};
    std::thread a([&] { plan.run(args_of(d, t[0])); });
    std::thread b([&] { plan.run(args_of(d, t[1])); });
    std::thread c([&] { norm(d, args_of(d, t[2])); });
    std::thread e([&] { norm(d, args_of(d, t[3])); });
    a.join();
    b.join();
    c.join();
    e.join();
    set_num_threads(0);
    for (Tensors& tt : t) ASSERT_TRUE(matches(d, tt, oracle(d, tt.x, &tt.r, &tt.w, &tt.b)));
}

TEST(Norm, OverlapHelperIsExact) {
    // detail::regions_overlap (used by every aliasing check) against a brute-force byte set, over
    // random small regions: equal strides, different strides, single rows, interleavings.
    std::mt19937_64 g(11);
    auto rnd = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(g() % static_cast<uint64_t>(hi - lo + 1)); };
    for (int iter = 0; iter < 20000; ++iter) {
        detail::MemRegion r[2];
        for (auto& m : r) {
            m.rows = rnd(1, 5);
            m.width = rnd(1, 6);
            m.stride = iter % 3 == 0 ? 8 : m.width + rnd(0, 6);
            m.base = 1000 + static_cast<uintptr_t>(rnd(0, 40));
        }
        std::vector<int> bytes(200, 0);
        for (int k = 0; k < 2; ++k)
            for (int64_t row = 0; row < r[k].rows; ++row)
                for (int64_t b = 0; b < r[k].width; ++b) bytes[r[k].base - 1000 + row * r[k].stride + b] |= 1 << k;
        bool want = false;
        for (int v : bytes) want = want || v == 3;
        ASSERT_EQ(detail::regions_overlap(r[0], r[1]), want)
            << "a={" << r[0].base << "," << r[0].rows << "," << r[0].stride << "," << r[0].width << "} b={" << r[1].base << ","
            << r[1].rows << "," << r[1].stride << "," << r[1].width << "}";
        ASSERT_EQ(detail::regions_overlap(r[1], r[0]), want);
    }
}

TEST(Norm, ZeroRowsIsANoOp) {
    NormDesc d;
    d.rows = 0;
    d.hidden = 8;
    d.fused_residual = true;
    norm(d, NormArgs{});  // no pointer is read
    NormPlan(d).run(NormArgs{});
    rms_norm(0, 8, static_cast<const float*>(nullptr), nullptr, 1e-5f, static_cast<float*>(nullptr));
    EXPECT_EQ(xk_rms_norm_f32(0, 8, nullptr, 0, nullptr, 1e-5f, nullptr, 0), XK_SUCCESS);
}

TEST(Norm, BadDescriptor) {
    auto plan = [](const NormDesc& d) { NormPlan p(d); };
    NormDesc ok;
    ok.rows = 4;
    ok.hidden = 7;
    NormDesc d = ok;
    d.kind = static_cast<NormKind>(5);
    XK_EXPECT_INVALID(plan(d), "xk::NormPlan: kind=5 is not a NormKind");
    d = ok;
    d.rows = -1;
    XK_EXPECT_INVALID(plan(d), "rows=-1 must be >= 0");
    d = ok;
    d.hidden = 0;
    XK_EXPECT_INVALID(plan(d), "hidden=0 must be >= 1");
    d = ok;
    d.x_dtype = DType::s8;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "x_dtype=s8 is not supported");
    d = ok;
    d.y_dtype = static_cast<DType>(42);
    XK_EXPECT_INVALID(plan(d), "y_dtype=42 is not a valid DType");
    d = ok;
    d.weight_dtype = DType::u8;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "weight_dtype=u8");
    d = ok;
    d.fused_residual = true;
    d.residual_dtype = DType::s32;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "residual_dtype=s32");
    d = ok;
    d.ld_x = 3;
    XK_EXPECT_INVALID(plan(d), "ld_x=3 must be >= hidden=7");
    d = ok;
    d.ld_y = -8;
    XK_EXPECT_INVALID(plan(d), "ld_y=-8 must be >= hidden=7");
    d = ok;
    d.fused_residual = true;
    d.ld_residual = 6;
    XK_EXPECT_INVALID(plan(d), "ld_residual=6");
    d = ok;
    d.fused_residual = true;
    d.ld_residual_out = 2;
    XK_EXPECT_INVALID(plan(d), "ld_residual_out=2");
    d = ok;
    d.eps = -1e-5f;
    XK_EXPECT_INVALID(plan(d), "eps=-1e-05 must be finite and >= 0");
    d = ok;
    d.eps = std::numeric_limits<float>::quiet_NaN();
    XK_EXPECT_INVALID(plan(d), "eps=nan");
    d = ok;
    d.rows = std::numeric_limits<int64_t>::max() / 4;
    d.ld_x = 1 << 20;
    XK_EXPECT_INVALID(plan(d), "overflows");
    d = ok;
    d.hidden = std::numeric_limits<int64_t>::max();
    XK_EXPECT_INVALID(plan(d), "overflows");
    // The one-shot form names itself.
    d = ok;
    d.hidden = -3;
    XK_EXPECT_INVALID(norm(d, NormArgs{}), "xk::norm: hidden=-3");
}

TEST(Norm, BadPointersAndAliasing) {
    NormDesc d;
    d.kind = NormKind::layer_norm;
    d.rows = 3;
    d.hidden = 8;
    d.has_bias = true;
    d.fused_residual = true;
    Tensors t = make_tensors(d, 0, 4);
    const NormArgs good = args_of(d, t);
    const NormPlan plan(d);
    plan.run(good);
    auto run = [&](const NormArgs& a) { plan.run(a); };
    NormArgs a = good;
    a.x = nullptr;
    XK_EXPECT_INVALID(run(a), "xk::NormPlan::run: x=null");
    a = good;
    a.y = nullptr;
    XK_EXPECT_INVALID(run(a), "y=null");
    a = good;
    a.weight = nullptr;
    XK_EXPECT_INVALID(run(a), "weight=null must not be a null pointer (has_weight is true)");
    a = good;
    a.bias = nullptr;
    XK_EXPECT_INVALID(run(a), "bias=null");
    a = good;
    a.residual = nullptr;
    XK_EXPECT_INVALID(run(a), "residual=null");
    a = good;
    a.residual_out = nullptr;
    XK_EXPECT_INVALID(run(a), "residual_out=null");
    {
        NormDesc nd = d;
        nd.has_bias = false;
        nd.has_weight = false;
        nd.fused_residual = false;
        XK_EXPECT_INVALID(norm(nd, good), "is given but has_weight is false");
        NormArgs b = good;
        b.weight = nullptr;
        XK_EXPECT_INVALID(norm(nd, b), "bias=");
        b.bias = nullptr;
        XK_EXPECT_INVALID(norm(nd, b), "residual=");
    }

    // Aliasing: partial overlaps and overlaps between different roles.
    a = good;
    a.y = static_cast<float*>(const_cast<void*>(good.x)) + 1;
    XK_EXPECT_INVALID(run(a), "partially overlaps x=");
    a = good;
    a.residual_out = static_cast<float*>(const_cast<void*>(good.residual)) + 1;
    XK_EXPECT_INVALID(run(a), "partially overlaps residual=");
    a = good;
    a.y = good.residual_out;
    XK_EXPECT_INVALID(run(a), "y=");
    XK_EXPECT_INVALID(run(a), "overlaps residual_out=");
    a = good;
    a.y = const_cast<void*>(good.residual);
    XK_EXPECT_INVALID(run(a), "overlaps residual=");
    a = good;
    a.residual_out = const_cast<void*>(good.x);
    XK_EXPECT_INVALID(run(a), "residual_out=");
    a = good;
    a.y = const_cast<void*>(good.weight);
    XK_EXPECT_INVALID(run(a), "overlaps weight=");
    a = good;
    a.residual_out = const_cast<void*>(good.bias);
    XK_EXPECT_INVALID(run(a), "overlaps bias=");
    {
        // y == x but with another stride, or another dtype: not an exact alias.
        NormDesc sd = d;
        sd.ld_y = 9;
        Tensors st = make_tensors(sd, 0, 4);
        NormArgs sa = args_of(sd, st);
        sa.y = st.x.data();
        XK_EXPECT_INVALID(norm(sd, sa), "partially overlaps x=");
        NormDesc td = d;
        td.y_dtype = DType::bf16;
        Tensors tt = make_tensors(td, 0, 4);
        NormArgs ta = args_of(td, tt);
        ta.y = tt.x.data();
        XK_EXPECT_INVALID(norm(td, ta), "partially overlaps x=");
    }
}

TEST(Norm, BadConvenienceInput) {
    float x[16] = {}, y[16] = {}, w[16] = {}, r[16] = {};
    XK_EXPECT_INVALID(rms_norm(2, 0, x, w, 1e-5f, y), "xk::rms_norm: hidden=0");
    XK_EXPECT_INVALID(rms_norm(2, 8, static_cast<const float*>(nullptr), w, 1e-5f, y), "xk::rms_norm: x=null");
    XK_EXPECT_INVALID(rms_norm(2, 8, x, w, -1.0f, y), "eps=-1");
    XK_EXPECT_INVALID(layer_norm(-2, 8, x, w, w, 1e-5f, y), "xk::layer_norm: rows=-2");
    XK_EXPECT_INVALID(layer_norm(2, 8, x, w, w, 1e-5f, static_cast<float*>(nullptr)), "y=null");
    XK_EXPECT_INVALID(layer_norm(2, 8, x, w, w, 1e-5f, x + 1), "partially overlaps");
    XK_EXPECT_INVALID(fused_add_rms_norm(2, 8, x, static_cast<float*>(nullptr), w, 1e-5f),
                      "xk::fused_add_rms_norm: residual=null");
    XK_EXPECT_INVALID(fused_add_rms_norm(2, 8, x, x, w, 1e-5f), "overlaps residual=");
    XK_EXPECT_INVALID(fused_add_rms_norm(2, 8, x, r, r + 3, 1e-5f), "overlaps weight=");
    bf16 bx[16], by[16];
    XK_EXPECT_INVALID(rms_norm(1, 16, bx, static_cast<const bf16*>(nullptr), std::numeric_limits<float>::infinity(), by),
                      "eps=inf");
}

TEST(Norm, CApi) {
    const int64_t rows = 3, hidden = 19, ld = 21;
    for (DType t : {DType::f32, DType::bf16}) {
        for (NormKind kind : {NormKind::rms_norm, NormKind::layer_norm}) {
            for (bool fused : {false, true}) {
                NormDesc d;
                d.kind = kind;
                d.rows = rows;
                d.hidden = hidden;
                d.x_dtype = d.y_dtype = d.residual_dtype = d.weight_dtype = t;
                d.ld_x = d.ld_y = d.ld_residual = d.ld_residual_out = ld;
                d.has_bias = kind == NormKind::layer_norm;
                d.fused_residual = fused;
                d.eps = 1e-5f;
                Tensors tt = make_tensors(d, 1, 33);
                const Expected e = oracle(d, tt.x, &tt.r, &tt.w, &tt.b);
                xk_status s;
                if (t == DType::f32) {
                    auto* x = static_cast<const float*>(tt.x.data());
                    auto* y = static_cast<float*>(tt.y.data());
                    auto* w = static_cast<const float*>(tt.w.data());
                    auto* b = d.has_bias ? static_cast<const float*>(tt.b.data()) : nullptr;
                    auto* r = static_cast<float*>(tt.r.data());
                    if (kind == NormKind::rms_norm)
                        s = fused ? xk_fused_add_rms_norm_f32(rows, hidden, x, ld, r, ld, w, d.eps, y, ld)
                                  : xk_rms_norm_f32(rows, hidden, x, ld, w, d.eps, y, ld);
                    else
                        s = fused ? xk_fused_add_layer_norm_f32(rows, hidden, x, ld, r, ld, w, b, d.eps, y, ld)
                                  : xk_layer_norm_f32(rows, hidden, x, ld, w, b, d.eps, y, ld);
                } else {
                    auto* x = static_cast<const uint16_t*>(tt.x.data());
                    auto* y = static_cast<uint16_t*>(tt.y.data());
                    auto* w = static_cast<const uint16_t*>(tt.w.data());
                    auto* b = d.has_bias ? static_cast<const uint16_t*>(tt.b.data()) : nullptr;
                    auto* r = static_cast<uint16_t*>(tt.r.data());
                    if (kind == NormKind::rms_norm)
                        s = fused ? xk_fused_add_rms_norm_bf16(rows, hidden, x, ld, r, ld, w, d.eps, y, ld)
                                  : xk_rms_norm_bf16(rows, hidden, x, ld, w, d.eps, y, ld);
                    else
                        s = fused ? xk_fused_add_layer_norm_bf16(rows, hidden, x, ld, r, ld, w, b, d.eps, y, ld)
                                  : xk_layer_norm_bf16(rows, hidden, x, ld, w, b, d.eps, y, ld);
                }
                ASSERT_EQ(s, XK_SUCCESS) << xk_last_error();
                if (fused) tt.ro = tt.r.clone();  // the C API updates residual in place
                ASSERT_TRUE(matches(d, tt, e)) << describe(d);
            }
        }
    }
    // Bad input: status and message naming the C function and the argument.
    float x[32] = {}, y[32] = {}, w[32] = {}, r[32] = {};
    EXPECT_EQ(xk_rms_norm_f32(2, 8, nullptr, 8, w, 1e-5f, y, 8), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_rms_norm_f32: x=null"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_layer_norm_f32(2, 8, x, 4, w, w, 1e-5f, y, 8), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_layer_norm_f32: ld_x=4 must be >= hidden=8"), std::string::npos);
    EXPECT_EQ(xk_fused_add_rms_norm_f32(2, 8, x, 8, nullptr, 8, w, 1e-5f, y, 8), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("residual=null"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_fused_add_layer_norm_f32(2, 8, x, 8, r, 8, w, w, 1e-5f, r + 1, 8), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("overlaps residual"), std::string::npos) << xk_last_error();
    uint16_t bx[32] = {}, by[32] = {};
    EXPECT_EQ(xk_rms_norm_bf16(2, 8, bx, 8, nullptr, -1.0f, by, 8), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_rms_norm_bf16: eps=-1"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_layer_norm_bf16(-1, 8, bx, 8, nullptr, nullptr, 1e-5f, by, 8), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_fused_add_rms_norm_bf16(2, 8, bx, 8, by, 8, nullptr, 1e-5f, nullptr, 8), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_fused_add_layer_norm_bf16(2, 8, bx, 8, nullptr, 8, nullptr, nullptr, 1e-5f, by, 8), XK_INVALID_ARGUMENT);
    EXPECT_EQ(xk_rms_norm_f32(2, 8, x, 8, w, 1e-5f, y, 8), XK_SUCCESS);
    EXPECT_STREQ(xk_last_error(), "");
}
