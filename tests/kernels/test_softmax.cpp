// Softmax: every ISA's selection and every registry entry against a naive double-precision
// oracle; row lengths 1..300 (sampled) and 4095; scales; the causal mask with zero, positive and
// negative offsets (rows with no visible column); strides, misaligned pointers, f32 / bf16 (and
// mixed) dtypes, in place, streaming stores, 1 and 2 threads, bad input for every entry point
// (C API included).
#include <cmath>
#include <limits>
#include <vector>

#include "common/parallel.hpp"
#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/softmax/softmax.hpp"
#include "kernels/typed_matrix.hpp"
#include "xk/llm.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;
using xk::test::TypedMatrix;

// Tolerances against the exact softmax (double) of scale * x over the stored inputs:
//   f32:  |err| <= 1e-5 |w| + 1e-12. The kernels round t = scale * x and t - max to fp32 (relative
//         error of exp(t - max) ~ |t - max| 2^-24 <= 2e-6 for |t - max| <= 32 here), the
//         vectorised exp is within 2 ulp, the sum and 1/sum a few ulps more.
//   bf16 output: half a bf16 ulp (2^-8 relative) on top.
//   Masked columns: exactly 0.
constexpr double kF32Rtol = 1e-5, kBf16Rtol = 1.0 / 256 + 1e-5, kAtol = 1e-12;

namespace {

const std::vector<int64_t> kCols = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 255, 300, 4095};

struct Problem {
    SoftmaxDesc d;
    TypedMatrix x, y;
};

Problem make(DType xt, DType yt, int64_t rows, int64_t cols, int64_t pad_x, int64_t pad_y, size_t mis, uint64_t seed) {
    Problem p;
    p.d.rows = rows;
    p.d.cols = cols;
    p.d.x_dtype = xt;
    p.d.y_dtype = yt;
    p.d.ld_x = pad_x ? cols + pad_x : 0;
    p.d.ld_y = pad_y ? cols + pad_y : 0;
    p.x = TypedMatrix(xt, rows, cols, p.d.ld_x, mis);
    p.y = TypedMatrix(yt, rows, cols, p.d.ld_y, mis + 1);
    p.x.fill_uniform(-8.0, 8.0, seed);
    return p;
}

SoftmaxArgs args_of(Problem& p) { return SoftmaxArgs{p.x.data(), p.y.data()}; }

::testing::AssertionResult check(const Problem& p, const TypedMatrix& x) {
    const SoftmaxDesc& d = p.d;
    const double rtol = d.y_dtype == DType::bf16 ? kBf16Rtol : kF32Rtol;
    for (int64_t r = 0; r < d.rows; ++r) {
        const int64_t v = d.causal ? std::clamp<int64_t>(r + d.causal_offset + 1, 0, d.cols) : d.cols;
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < v; ++j) m = std::max(m, static_cast<double>(d.scale) * x.get(r, j));
        for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(d.scale) * x.get(r, j) - m);
        for (int64_t j = 0; j < d.cols; ++j) {
            const double got = p.y.get(r, j);
            const double w = j < v ? std::exp(static_cast<double>(d.scale) * x.get(r, j) - m) / sum : 0.0;
            const bool ok = j < v ? std::fabs(got - w) <= rtol * w + kAtol : got == 0.0;
            if (!ok)
                return ::testing::AssertionFailure() << "y[" << r << "][" << j << "]=" << got << " want " << w
                                                     << " (visible " << v << " of " << d.cols << ")";
        }
    }
    return p.y.padding_intact();
}

std::string describe(const SoftmaxDesc& d) {
    return detail::softmax_kernel_desc(d).key() + " rows=" + std::to_string(d.rows) + " cols=" + std::to_string(d.cols) +
           " ld_x=" + std::to_string(d.ld_x) + " ld_y=" + std::to_string(d.ld_y) + " scale=" + std::to_string(d.scale) +
           (d.causal ? " causal offset=" + std::to_string(d.causal_offset) : "");
}

struct DTypes {
    DType x, y;
};
const DTypes kDTypes[] = {{DType::f32, DType::f32}, {DType::bf16, DType::bf16}, {DType::bf16, DType::f32}, {DType::f32, DType::bf16}};
const float kScales[] = {1.0f, 0.125f, 2.0f};

}  // namespace

TEST(Softmax, EveryIsaMatchesOracle) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa isa) {
            int variant = 0;
            for (const DTypes& dt : kDTypes)
                for (int64_t cols : kCols)
                    for (int mask = 0; mask < 3; ++mask) {  // none, causal square, causal with an offset
                        ++variant;
                        const int64_t rows = cols >= 1000 ? 3 : 6;
                        Problem p = make(dt.x, dt.y, rows, cols, variant % 2 ? 3 : 0, variant % 2 ? 1 : 0, variant % 4,
                                         300 + variant);
                        p.d.scale = kScales[variant % 3];
                        p.d.causal = mask > 0;
                        p.d.causal_offset = mask == 2 ? (variant % 2 ? cols - rows : -2) : 0;
                        const TypedMatrix x0 = p.x.clone();
                        const SoftmaxPlan plan(p.d);
                        EXPECT_STREQ(plan.impl_name(),
                                     detail::softmax_registry().select(detail::softmax_kernel_desc(plan.desc()), isa).name);
                        plan.run(args_of(p));
                        ASSERT_TRUE(check(p, x0)) << describe(p.d) << " isa=" << isa_name(isa) << " threads=" << threads;
                        ASSERT_EQ(std::memcmp(x0.data(), p.x.data(), x0.elems() * dtype_size(dt.x)), 0) << "x changed";
                    }
        });
    }
    set_num_threads(0);
}

TEST(Softmax, EveryRegistryEntry) {
    // Each implementation forced: run and checked where this machine has its ISA, generated only
    // elsewhere (a machine with AVX-512 / AVX512-BF16 runs them all).
    const auto& reg = detail::softmax_registry();
    for (const auto& impl : reg.impls()) {
        SCOPED_TRACE(impl.name);
        const bool runs = isa_supported(impl.isa);
        int variant = 0;
        for (const DTypes& dt : kDTypes) {
            const auto kd = detail::softmax_kernel_desc(make(dt.x, dt.y, 1, 1, 0, 0, 0, 0).d);
            if (impl.supports && !impl.supports(kd)) continue;
            const auto sel = reg.get(kd, impl);
            ASSERT_TRUE(sel.kernel);
            if (!runs) continue;
            for (int64_t cols : {1, 5, 8, 16, 17, 23, 40, 129, 300}) {
                ++variant;
                Problem p = make(dt.x, dt.y, 5, cols, variant % 2 ? 2 : 0, 0, variant % 3, 700 + variant);
                p.d.causal = variant % 2 == 0;
                p.d.causal_offset = cols - 5;
                p.d.scale = kScales[variant % 3];
                const SoftmaxDesc d = detail::softmax_resolve("test", p.d);
                const TypedMatrix x0 = p.x.clone();
                sel.kernel->run(d, args_of(p), 0, d.rows);
                ASSERT_TRUE(check(p, x0)) << describe(d);
            }
        }
        if (!runs) std::printf("[ generated only ] %s (needs %s)\n", impl.name, isa_name(impl.isa));
    }
}

TEST(Softmax, ExtremeInputs) {
    // Large spreads (exp underflows to 0 for most columns), equal values, one dominant column.
    for_each_isa([&](Isa) {
        for (DType t : {DType::f32, DType::bf16}) {
            Problem p = make(t, DType::f32, 4, 37, 0, 0, 0, 5);
            for (int64_t j = 0; j < 37; ++j) {
                p.x.set(0, j, j * 10.0);        // spread of 360: all but the last few are 0
                p.x.set(1, j, 3.0);             // uniform: 1/37 each
                p.x.set(2, j, j == 20 ? 100.0 : -100.0);
                p.x.set(3, j, -1000.0 + j);     // large negative values: max subtraction keeps it finite
            }
            const TypedMatrix x0 = p.x.clone();
            softmax(p.d, args_of(p));
            ASSERT_TRUE(check(p, x0));
            for (int64_t j = 0; j < 37; ++j) ASSERT_NEAR(p.y.get(1, j), 1.0 / 37, 1e-7);
            ASSERT_NEAR(p.y.get(2, 20), 1.0, 1e-7);
        }
    });
}

TEST(Softmax, RowMaxOfEverySign) {
    // The row max decides every exp's range (a max below the true one overflows them): rows all
    // negative (-inf masks among them), mixed signs with the max far above the other positive
    // values and those nearest to zero, -0.0 / +0.0 as the max, the max at every position (the AVX2 bf16 -> bf16 kernel takes
    // the max of the row after next on the bf16 words, signed max and unsigned min; the rest of a
    // row, past its whole pairs of vectors, by VMAXPS), several rows so every pass sees each kind.
    const double ninf = -std::numeric_limits<double>::infinity();
    for_each_isa([&](Isa) {
        for (DType yt : {DType::bf16, DType::f32})
            for (int64_t cols : {16, 33, 48, 100, 4095}) {
                const int64_t rows = 12;
                Problem p = make(DType::bf16, yt, rows, cols, 0, 0, 0, 3);
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t k = (r * 37 + 5) % cols;  // the max's column
                    for (int64_t j = 0; j < cols; ++j) {
                        double v = 0;
                        switch (r % 6) {
                            case 0: v = j == k ? -1.0 : -2.0 - static_cast<double>((j * 37) % 200); break;
                            case 1: v = j == k ? 120.0 : (j % 2 ? 0.25 + static_cast<double>(j % 5) : -0.5 - static_cast<double>(j % 7)); break;
                            case 2: v = j == k ? -0.0 : -1.0 - static_cast<double>(j % 50) * 3; break;
                            case 3: v = j == k ? 0.0 : -100.0 - static_cast<double>(j % 9); break;
                            case 4: v = j == k ? -5.0 : (j % 3 ? ninf : -6.0 - static_cast<double>(j % 11) * 9); break;
                            default: v = j == k ? 0.5 : -150.0; break;
                        }
                        p.x.set(r, j, v);
                    }
                }
                const TypedMatrix x0 = p.x.clone();
                softmax(p.d, args_of(p));
                ASSERT_TRUE(check(p, x0)) << describe(p.d);
            }
    });
}

TEST(Softmax, MaskedLogitsGiveExactZeros) {
    // -inf logits (an additive attention mask) give exactly 0, and logits so far below the max
    // that exp underflows (x - max < ln FLT_MIN) give less than FLT_MIN (the kernels flush them to
    // 0, the scalar reference may return a denormal), in the unrolled loop, the single-vector loop
    // and the tail alike (row lengths with every remainder).
    for_each_isa([&](Isa) {
        for (DType t : {DType::f32, DType::bf16})
            for (int64_t cols : {1, 7, 8, 17, 24, 31, 37, 100, 4095}) {
                Problem p = make(t, DType::f32, 3, cols, 0, 0, 0, 11);
                const double ninf = -std::numeric_limits<double>::infinity();
                for (int64_t j = 0; j < cols; ++j) {
                    p.x.set(0, j, j % 3 == 1 ? ninf : 0.25 * (j % 5));
                    p.x.set(1, j, j % 2 ? -90.0 : (j % 4 ? -86.5 : 0.0));  // -90: exp underflows
                    p.x.set(2, j, j == cols - 1 ? 1.0 : ninf);             // one visible logit
                }
                const TypedMatrix x0 = p.x.clone();
                softmax(p.d, args_of(p));
                ASSERT_TRUE(check(p, x0)) << describe(p.d);
                for (int64_t j = 0; j < cols; ++j) {
                    if (j % 3 == 1) ASSERT_EQ(p.y.get(0, j), 0.0) << "masked column " << j << " " << describe(p.d);
                    if (j % 2)
                        ASSERT_LT(std::fabs(p.y.get(1, j)), std::numeric_limits<float>::min()) << "column " << j << " "
                                                                                             << describe(p.d);
                    ASSERT_EQ(p.y.get(2, j), j == cols - 1 ? 1.0 : 0.0) << "column " << j << " " << describe(p.d);
                }
            }
    });
}

TEST(Softmax, LogitsNearTheTopOfTheRange) {
    // The kernels compute exp(scale x - m) as 2^(c x - c m_x) with c = scale log2(e): a row whose
    // |scale m_x| exceeds FLT_MAX / log2(e) (~2.36e38) takes the reference, and every row does
    // when c itself overflows. Such rows between ordinary ones (the pipeline keeps its place), in
    // calls of several lengths, every row kind first and last, 1 and 2 threads.
    const float big = 3.0e38f;
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (const DTypes& dt : kDTypes)
                for (int64_t cols : {7, 16, 40, 300}) {
                    const double top = dt.x == DType::bf16 ? 2.99e38 : big;  // (bf16 rounds 3e38 up to inf)
                    Problem p = make(dt.x, dt.y, 9, cols, 0, 0, 0, 17 + cols);
                    for (int64_t r = 0; r < 9; ++r) {
                        if (r % 3 == 2) continue;  // ordinary rows (uniform in [-8, 8])
                        for (int64_t j = 0; j < cols; ++j)  // two maxima, the rest far below or -top
                            p.x.set(r, j, j == 1 || j == cols - 1 ? top : (j % 2 ? -top : top * 0.5));
                    }
                    for (bool causal : {false, true}) {
                        p.d.causal = causal;
                        p.d.causal_offset = cols - 4;
                        const TypedMatrix x0 = p.x.clone();
                        softmax(p.d, args_of(p));
                        ASSERT_TRUE(check(p, x0)) << describe(p.d) << " threads " << threads;
                    }
                }
            // c = scale log2(e) overflows: every row through the reference.
            Problem q = make(DType::f32, DType::f32, 5, 33, 0, 0, 0, 3);
            for (int64_t r = 0; r < 5; ++r)
                for (int64_t j = 0; j < 33; ++j) q.x.set(r, j, (j % 7 - 3) * 1e-38);
            q.d.scale = big;
            const TypedMatrix x0 = q.x.clone();
            softmax(q.d, args_of(q));
            ASSERT_TRUE(check(q, x0)) << describe(q.d);
        });
    }
    set_num_threads(0);
}

TEST(Softmax, LargeFiniteMax) {
    // Issue 33, case 1: a row holding one large finite logit, {1e10, 0, 1, 2}, gave NaN with
    // success (the bias -c m_x is rounded once; its error, up to ulp(c m_x) / 2, is a common factor
    // 2^d of the row's exps that overflowed once |c m_x| passed ~2^37). Row maxima of every decade
    // from 1e3 to 1e38 at every position of rows of several lengths, next to ties and near-ties at
    // the same magnitude, ordinary rows between them (the pipeline keeps its place), scale 1 and
    // 2 (scale x above FLT_MAX: {3e38, 0} with scale 2 is {1, 0}), 1 and 2 threads; plus the
    // C API call the campaign reported.
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (const DTypes& dt : kDTypes)
                for (float scale : {1.0f, 2.0f})
                    for (int64_t cols : {4, 17, 40}) {
                        const int64_t rows = 36;
                        Problem p = make(dt.x, dt.y, rows, cols, 0, 0, 0, 5 + cols);
                        p.d.scale = scale;
                        for (int64_t r = 0; r < rows; ++r) {
                            if (r % 4 == 3) continue;  // ordinary rows (uniform in [-8, 8])
                            const double big = std::pow(10.0, 3 + (r * 7) % 36);  // 1e3 .. 1e38
                            const int64_t k = r % cols;
                            for (int64_t j = 0; j < cols; ++j) {
                                double v = static_cast<double>(j % 3);  // 0, 1, 2
                                if (j == k) v = big;
                                else if (r % 4 == 1 && j == (k + 1) % cols) v = big;  // a tie
                                else if (r % 4 == 2 && j == (k + 1) % cols)
                                    v = dt.x == DType::bf16 ? big * (1 - 0x1p-7) : big * (1 - 0x1p-23);  // near-tie
                                p.x.set(r, j, v);
                            }
                        }
                        const TypedMatrix x0 = p.x.clone();
                        softmax(p.d, args_of(p));
                        ASSERT_TRUE(check(p, x0)) << describe(p.d) << " threads " << threads;
                    }
        });
    }
    set_num_threads(0);
    const float x[4] = {1e10f, 0, 1, 2};
    float y[4] = {-1, -1, -1, -1};
    ASSERT_EQ(xk_softmax_f32(1, 4, x, 0, y, 0, 1.0f, 0, 0), XK_SUCCESS) << xk_last_error();
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_EQ(y[2], 0.0f);
    EXPECT_EQ(y[3], 0.0f);
}

TEST(Softmax, InPlace) {
    for_each_isa([&](Isa) {
        for (DType t : {DType::f32, DType::bf16})
            for (int64_t cols : {1, 9, 64, 300}) {
                Problem p = make(t, t, 5, cols, 3, 0, 1, cols);
                p.d.ld_y = p.d.ld_x;
                p.d.causal = true;
                p.d.causal_offset = 1;
                const TypedMatrix x0 = p.x.clone();
                softmax(p.d, SoftmaxArgs{p.x.data(), p.x.data()});
                Problem q = make(t, t, 5, cols, 3, 3, 1, cols);  // the same values, out of place, for the check
                q.d = p.d;
                q.y = p.x.clone();
                ASSERT_TRUE(check(q, x0)) << cols;
            }
    });
}

TEST(Softmax, StreamingStores) {
    detail::set_nt_store_threshold(0);
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            for (const DTypes& dt : kDTypes)
                for (int64_t cols : {64, 72, 100, 1024})  // 72 bf16: odd rows 16-byte aligned only
                    for (size_t mis : {0, 1}) {
                        Problem p = make(dt.x, dt.y, 40, cols, 0, 0, mis, 11 + cols);
                        if (!mis) p.y = TypedMatrix(dt.y, 40, cols, 0, 0);  // aligned (make's y is one element past)
                        p.d.causal = cols == 100;
                        const TypedMatrix x0 = p.x.clone();
                        softmax(p.d, args_of(p));
                        ASSERT_TRUE(check(p, x0)) << describe(p.d) << " misaligned " << mis;
                    }
        });
    }
    set_num_threads(0);
    detail::set_nt_store_threshold(-1);
}

TEST(Softmax, Bf16YEitherWay) {
    // bf16 y is scaled inside the fused pass on some machines and by its own pass on others
    // (detail::softmax_set_bf16_fused_y): both, on this machine, with streaming stores and
    // without, 1 and 2 threads, causal rows (their common columns change row to row) and tails.
    for (int mode : {0, 1}) {
        detail::softmax_set_bf16_fused_y(mode);
        for (int64_t nt_threshold : {int64_t(0), int64_t(-1)}) {
            detail::set_nt_store_threshold(nt_threshold);
            for (int threads : {1, 2}) {
                set_num_threads(threads);
                for_each_isa([&](Isa isa) {
                    int variant = 0;
                    for (DType xt : {DType::f32, DType::bf16})
                        for (int64_t cols : {1, 17, 64, 100, 300, 1024}) {
                            ++variant;
                            Problem p = make(xt, DType::bf16, 12, cols, 0, variant % 3 == 0 ? 8 : 0, variant % 2 ? 0 : 2, 40 + variant);
                            if (variant % 2) p.y = TypedMatrix(DType::bf16, 12, cols, p.d.ld_y, 0);  // aligned rows where ld allows
                            p.d.causal = variant % 3 != 1;
                            p.d.causal_offset = variant % 3 == 2 ? cols - 12 : 1;
                            p.d.scale = kScales[variant % 3];
                            const TypedMatrix x0 = p.x.clone();
                            softmax(p.d, args_of(p));
                            ASSERT_TRUE(check(p, x0)) << describe(p.d) << " mode " << mode << " isa " << isa_name(isa)
                                                      << " threads " << threads;
                        }
                });
            }
        }
    }
    detail::softmax_set_bf16_fused_y(-1);
    detail::set_nt_store_threshold(-1);
    set_num_threads(0);
}

TEST(Softmax, SplitAcrossThreadsIsBitwiseIdentical) {
    // f32 y: the fused pass writes y; bf16 y: the scale pass does (the fused pass only where
    // detail::softmax_set_bf16_fused_y's default chooses it, see Bf16YEitherWay).
    for_each_isa([&](Isa) {
        for (DType yt : {DType::bf16, DType::f32}) {
            Problem a = make(DType::f32, yt, 64, 1000, 0, 0, 0, 3);
            Problem b = make(DType::f32, yt, 64, 1000, 0, 0, 0, 3);
            a.d.causal = b.d.causal = true;
            a.d.causal_offset = b.d.causal_offset = 900;
            set_num_threads(1);
            softmax(a.d, args_of(a));
            set_num_threads(2);
            EXPECT_EQ(detail::parallel_threads(a.d.rows, detail::softmax_row_grain(a.d.cols)), 2);
            softmax(b.d, args_of(b));
            set_num_threads(0);
            ASSERT_EQ(std::memcmp(a.y.data(), b.y.data(), a.y.elems() * dtype_size(yt)), 0);
        }
    });
    EXPECT_EQ(detail::parallel_threads(1, detail::softmax_row_grain(4096)), 1);
}

TEST(Softmax, KernelIsKeyedByDtypesOnly) {
    Problem p = make(DType::bf16, DType::f32, 3, 77, 0, 0, 0, 1);
    softmax(p.d, args_of(p));
    const uint64_t created = kernel_cache_stats().creations;
    Problem q = make(DType::bf16, DType::f32, 9, 500, 4, 2, 1, 2);
    q.d.causal = true;
    q.d.scale = 0.3f;
    const TypedMatrix x0 = q.x.clone();
    softmax(q.d, args_of(q));
    EXPECT_EQ(kernel_cache_stats().creations, created);
    ASSERT_TRUE(check(q, x0));
}

TEST(Softmax, ConvenienceForms) {
    for_each_isa([&](Isa) {
        for (DType t : {DType::f32, DType::bf16}) {
            Problem p = make(t, t, 4, 50, 0, 0, 0, 30);
            p.d.scale = 0.5f;
            const TypedMatrix x0 = p.x.clone();
            if (t == DType::f32)
                softmax(4, 50, static_cast<const float*>(p.x.data()), static_cast<float*>(p.y.data()), 0.5f);
            else
                softmax(4, 50, static_cast<const bf16*>(p.x.data()), static_cast<bf16*>(p.y.data()), 0.5f);
            ASSERT_TRUE(check(p, x0));
        }
    });
}

TEST(Softmax, ZeroRowsIsANoOp) {
    SoftmaxDesc d;
    d.rows = 0;
    d.cols = 8;
    softmax(d, SoftmaxArgs{});
    SoftmaxPlan(d).run(SoftmaxArgs{});
    EXPECT_EQ(xk_softmax_f32(0, 8, nullptr, 0, nullptr, 0, 1.0f, 0, 0), XK_SUCCESS);
}

TEST(Softmax, BadInput) {
    auto plan = [](const SoftmaxDesc& d) { SoftmaxPlan p(d); };
    SoftmaxDesc ok;
    ok.rows = 2;
    ok.cols = 8;
    SoftmaxDesc d = ok;
    d.rows = -3;
    XK_EXPECT_INVALID(plan(d), "xk::SoftmaxPlan: rows=-3 must be >= 0");
    d = ok;
    d.cols = 0;
    XK_EXPECT_INVALID(plan(d), "cols=0 must be >= 1");
    d = ok;
    d.x_dtype = DType::u8;
    XK_EXPECT_ERROR(plan(d), Status::unsupported, "x_dtype=u8 is not supported");
    d = ok;
    d.y_dtype = static_cast<DType>(-1);
    XK_EXPECT_INVALID(plan(d), "y_dtype=-1 is not a valid DType");
    d = ok;
    d.ld_x = 7;
    XK_EXPECT_INVALID(plan(d), "ld_x=7 must be >= cols=8");
    d = ok;
    d.ld_y = -8;
    XK_EXPECT_INVALID(plan(d), "ld_y=-8 must be >= cols=8");
    d = ok;
    d.scale = 0.0f;
    XK_EXPECT_INVALID(plan(d), "scale=0 must be finite and > 0");
    d.scale = -0.5f;
    XK_EXPECT_INVALID(plan(d), "scale=-0.5");
    d.scale = std::numeric_limits<float>::infinity();
    XK_EXPECT_INVALID(plan(d), "scale=inf");
    d = ok;
    d.causal = true;
    d.causal_offset = std::numeric_limits<int64_t>::min();
    XK_EXPECT_INVALID(plan(d), "causal_offset=");
    d = ok;
    d.rows = std::numeric_limits<int64_t>::max() / 4;
    d.ld_y = 1 << 22;
    XK_EXPECT_INVALID(plan(d), "overflows");
    d = ok;
    d.cols = -1;
    XK_EXPECT_INVALID(softmax(d, SoftmaxArgs{}), "xk::softmax: cols=-1");

    std::vector<float> buf(64, 0.0f);
    const SoftmaxPlan p(ok);
    XK_EXPECT_INVALID(p.run(SoftmaxArgs{nullptr, buf.data()}), "xk::SoftmaxPlan::run: x=null");
    XK_EXPECT_INVALID(p.run(SoftmaxArgs{buf.data(), nullptr}), "y=null");
    XK_EXPECT_INVALID(p.run(SoftmaxArgs{buf.data(), buf.data() + 3}), "partially overlaps x=");
    p.run(SoftmaxArgs{buf.data(), buf.data()});       // in place
    p.run(SoftmaxArgs{buf.data(), buf.data() + 16});  // disjoint
    {
        SoftmaxDesc t = ok;
        t.ld_y = 9;
        XK_EXPECT_INVALID(softmax(t, SoftmaxArgs{buf.data(), buf.data()}), "partially overlaps x=");
        t = ok;
        t.y_dtype = DType::bf16;
        XK_EXPECT_INVALID(softmax(t, SoftmaxArgs{buf.data(), buf.data()}), "in place needs y == x with the same stride and dtype");
    }
    XK_EXPECT_INVALID(softmax(2, 8, buf.data(), buf.data() + 4, 1.0f), "xk::softmax: y=");
    XK_EXPECT_INVALID(softmax(2, 8, buf.data(), buf.data() + 16, -1.0f), "scale=-1");
}

TEST(Softmax, CApi) {
    for (int form = 0; form < 4; ++form) {
        const DType t = form % 2 ? DType::bf16 : DType::f32;
        Problem p = make(t, t, 6, 29, 2, 3, 1, 80 + form);
        p.d.scale = 0.25f;
        p.d.causal = form >= 2;
        p.d.causal_offset = form >= 2 ? 20 : 0;
        const TypedMatrix x0 = p.x.clone();
        const xk_status s =
            t == DType::f32
                ? xk_softmax_f32(6, 29, static_cast<const float*>(p.x.data()), p.d.ld_x, static_cast<float*>(p.y.data()),
                                 p.d.ld_y, 0.25f, p.d.causal, p.d.causal_offset)
                : xk_softmax_bf16(6, 29, static_cast<const uint16_t*>(p.x.data()), p.d.ld_x,
                                  static_cast<uint16_t*>(p.y.data()), p.d.ld_y, 0.25f, p.d.causal, p.d.causal_offset);
        ASSERT_EQ(s, XK_SUCCESS) << xk_last_error();
        ASSERT_TRUE(check(p, x0)) << form;
    }
    float x[32] = {}, y[32] = {};
    EXPECT_EQ(xk_softmax_f32(2, 8, x, 4, y, 8, 1.0f, 0, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_softmax_f32: ld_x=4 must be >= cols=8"), std::string::npos)
        << xk_last_error();
    uint16_t bx[32] = {};
    EXPECT_EQ(xk_softmax_bf16(2, 8, bx, 0, bx + 1, 0, 1.0f, 1, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("xk_softmax_bf16: y="), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_softmax_bf16(2, 8, bx, 0, bx, 0, 0.5f, 1, -1), XK_SUCCESS);
    EXPECT_STREQ(xk_last_error(), "");
}
