// Strided batched GEMM (GemmDesc::batch, batch_stride_a / _b / _c / _residual), under every ISA the
// machine allows (for_each_isa; avx2_vnni too for int8), for every dtype combination:
//   f32 -> f32, bf16 -> f32 | bf16, u8 | s8 x s8 -> s32 | f32 (zero points, scales).
// The oracle is the per-item loop of single GEMMs (batch = 1) on the offset pointers, run at one
// thread; batched results must equal it BIT FOR BIT (tolerance 0 for every dtype: each item runs
// the same kernel on the same pointers) over the whole C buffer, so the padding between and
// around the items must stay untouched too. Swept:
//   - odd shapes (1, 7, 17, 33, 65) and items large enough for the kernel to thread itself (the
//     remainder of a batch that does not divide over the threads), K = 0, batch 1 and 0 (nothing
//     written, null pointers accepted), odd batch counts,
//   - strides: packed, padded, 0 (broadcast A, B, residual), C padded and C items side by side
//     within the rows (attention heads into one [tokens x heads*d] matrix), transposes,
//     misaligned pointers, leading dimensions above the minimum,
//   - epilogues (bias + gelu + residual f32 / bf16, batched and broadcast), beta 0 / 1 / other,
//   - GemmPlan::run, run with a PackedB (one per item, and one shared), the one-shot xk::gemm and
//     the C API (xk_gemm, plan run, plan run packed), at 1 and 2 threads,
//   - bad input: negative batch / strides, overlapping C items, spans past int64, C overlapping
//     an input anywhere in the batch, PackedB of the wrong kind / count — rejected with messages
//     naming the argument, nothing written,
//   - the parallel-for nesting guard (a parallel_for inside a multi-threaded one runs inline,
//     get_num_threads() is 1 there, restored afterwards and after an exception).
// A few items are also checked against a double-precision oracle (f32, |err| <= 2 (K + 2) u sum |ab|)
// so that the per-item loop is not trusted blindly.
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.hpp"
#include "common/test_util.hpp"
#include "common/gemm_capi.hpp"
#include "kernels/gemm/gemm.hpp"
#include "xk/gemm.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::for_each_isa;

namespace {

using xk::test::to_c;  // the GEMM C structs (common/gemm_capi.hpp)

constexpr double kU = 1.0 / 16777216.0;  // 2^-24

struct ThreadsGuard {
    ~ThreadsGuard() { set_num_threads(0); }
};

bool under_sanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return true;
#else
    return false;
#endif
}

struct Types {
    DType a, b, c;
};
const Types kTypes[] = {{DType::f32, DType::f32, DType::f32},  {DType::bf16, DType::bf16, DType::f32},
                        {DType::bf16, DType::bf16, DType::bf16}, {DType::u8, DType::s8, DType::s32},
                        {DType::s8, DType::s8, DType::f32},    {DType::u8, DType::s8, DType::f32}};

bool is_int8(DType t) { return t == DType::u8 || t == DType::s8; }

// Random elements of type t into raw bytes.
void fill(DType t, void* p, int64_t n, uint64_t seed) {
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i) {
        switch (t) {
            case DType::f32: static_cast<float*>(p)[i] = u(g); break;
            case DType::bf16: static_cast<bf16*>(p)[i] = bf16(u(g)); break;
            case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(g() & 255); break;
            case DType::s8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(g() & 255); break;
            case DType::s32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(g() % 2001) - 1000; break;
            default: break;
        }
    }
}

// How an operand's items are placed.
enum class Place { shared, packed, padded, side };  // side: C items side by side within the rows

struct Case {
    Types t;
    int64_t M, N, K, batch;
    Trans ta = Trans::N, tb = Trans::N;
    Place pa = Place::packed, pb = Place::packed, pc = Place::packed, pr = Place::packed;
    int64_t pad_ld = 0;      // added to every leading dimension
    bool epilogue = false;   // bias + gelu_erf + residual (float C only)
    DType residual_type = DType::f32;
    float alpha = 1.0f, beta = 0.0f;
    size_t misalign = 0;     // bytes, a multiple of the largest element in use... per operand below

    std::string str() const {
        auto pl = [](Place p) { return p == Place::shared ? "0" : p == Place::packed ? "packed" : p == Place::padded ? "pad" : "side"; };
        return std::string(dtype_name(t.a)) + dtype_name(t.b) + dtype_name(t.c) + " M" + std::to_string(M) + "N" +
               std::to_string(N) + "K" + std::to_string(K) + " batch" + std::to_string(batch) + " " + trans_name(ta) +
               trans_name(tb) + " a:" + pl(pa) + " b:" + pl(pb) + " c:" + pl(pc) + " r:" + pl(pr) + " pad" +
               std::to_string(pad_ld) + (epilogue ? " ep" : "") + " alpha" + std::to_string(alpha) + " beta" +
               std::to_string(beta) + " mis" + std::to_string(misalign);
    }
};

// A batched problem: descriptor, operand buffers, the initial C.
struct Problem {
    GemmDesc d;
    test::Buffer<unsigned char> A, B, C0, R;
    std::vector<float> bias, b_scales;
    float a_scale = 0.03125f;
    int32_t azp = 0, bzp = 0;
    int64_t c_bytes = 0;

    explicit Problem(const Case& c) {
        d.M = c.M, d.N = c.N, d.K = c.K;
        d.trans_a = c.ta, d.trans_b = c.tb;
        d.a_type = c.t.a, d.b_type = c.t.b, d.c_type = c.t.c;
        d.batch = c.batch;
        const bool an = c.ta == Trans::N, bn = c.tb == Trans::N;
        d.lda = (an ? c.K : c.M) + c.pad_ld;
        d.ldb = (bn ? c.N : c.K) + c.pad_ld;
        d.ldc = c.N + c.pad_ld;
        if (c.pc == Place::side) d.ldc = c.batch * (c.N + 2) + c.pad_ld;  // items 2 apart in each row
        if (c.t.c == DType::s32) {
            d.alpha = 1.0f;
            d.beta = c.beta == 0.0f ? 0.0f : 1.0f;
        } else {
            d.alpha = c.alpha, d.beta = c.beta;
        }
        if (c.epilogue && c.t.c != DType::s32) {
            d.epilogue.bias = true;
            d.epilogue.act = Activation::gelu_erf;
            d.epilogue.residual = true;
            d.residual_type = c.residual_type;
            d.ld_residual = c.N + c.pad_ld + 1;
        }
        const bool deq = is_int8(c.t.a) && c.t.c == DType::f32;
        d.b_scale_per_channel = deq;
        const int64_t ra = an ? c.M : c.K, ca = an ? c.K : c.M, rb = bn ? c.K : c.N, cb = bn ? c.N : c.K;
        auto item_extent = [](int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; };
        auto stride = [&](Place p, int64_t rows, int64_t cols, int64_t ld) -> int64_t {
            if (p == Place::shared) return 0;
            const int64_t e = rows * ld;
            return p == Place::padded ? e + 13 : e;
        };
        d.batch_stride_a = stride(c.pa, ra, ca, d.lda);
        d.batch_stride_b = stride(c.pb, rb, cb, d.ldb);
        d.batch_stride_c = c.pc == Place::side ? c.N + 2 : c.pc == Place::padded ? c.M * d.ldc + 5 : 0;
        if (d.epilogue.residual) d.batch_stride_residual = stride(c.pr, c.M, c.N, d.ld_residual);
        const int64_t n1 = std::max<int64_t>(c.batch - 1, 0);
        const int64_t na = n1 * d.batch_stride_a + item_extent(ra, ca, d.lda);
        const int64_t nb = n1 * d.batch_stride_b + item_extent(rb, cb, d.ldb);
        const int64_t sc = d.batch_stride_c ? d.batch_stride_c : c.M * d.ldc;
        const int64_t nc = n1 * sc + item_extent(c.M, c.N, d.ldc) + 7;  // + a guard past the end
        const int64_t nr = d.epilogue.residual ? n1 * d.batch_stride_residual + item_extent(c.M, c.N, d.ld_residual) : 0;
        const size_t mis_a = c.misalign % dtype_size(c.t.a) == 0 ? c.misalign : 0;
        const size_t mis_b = c.misalign % dtype_size(c.t.b) == 0 ? c.misalign : 0;
        const size_t mis_c = c.misalign % dtype_size(c.t.c) == 0 ? c.misalign : 0;
        A.resize(static_cast<size_t>(std::max<int64_t>(na, 1)) * dtype_size(c.t.a), mis_a);
        B.resize(static_cast<size_t>(std::max<int64_t>(nb, 1)) * dtype_size(c.t.b), mis_b);
        c_bytes = nc * static_cast<int64_t>(dtype_size(c.t.c));
        C0.resize(static_cast<size_t>(c_bytes), mis_c);
        fill(c.t.a, A.data(), na, 1 + c.M);
        fill(c.t.b, B.data(), nb, 2 + c.N);
        fill(c.t.c, C0.data(), nc, 3 + c.K);
        if (nr) {
            R.resize(static_cast<size_t>(nr) * dtype_size(c.residual_type));
            fill(c.residual_type, R.data(), nr, 4);
        }
        if (d.epilogue.bias) {
            bias.resize(static_cast<size_t>(c.N));
            fill(DType::f32, bias.data(), c.N, 5);
        }
        if (is_int8(c.t.a)) {
            azp = c.t.a == DType::u8 ? 7 : -3;
            bzp = 2;
        }
        if (deq) {
            b_scales.resize(static_cast<size_t>(std::max<int64_t>(c.N, 1)));
            for (size_t i = 0; i < b_scales.size(); ++i) b_scales[i] = 0.01f + 0.001f * float(i % 17);
        }
    }

    GemmArgs args(void* C) const {
        GemmArgs a;
        a.A = A.data(), a.B = B.data(), a.C = C;
        a.bias = bias.empty() ? nullptr : bias.data();
        a.residual = R.size() ? R.data() : nullptr;
        if (!b_scales.empty()) a.a_scale = &a_scale, a.b_scales = b_scales.data();
        a.a_zero_point = azp, a.b_zero_point = bzp;
        return a;
    }

    // A fresh copy of the initial C.
    std::vector<unsigned char> c_init() const { return std::vector<unsigned char>(C0.data(), C0.data() + c_bytes); }

    // The oracle: one single GEMM (batch = 1) per item, at one thread.
    // packed: each item through a plan of its own with B packed by it (a kernel may read a packed
    // B in another order than a plain one: the decode kernels do), else the one-shot xk::gemm.
    std::vector<unsigned char> per_item(bool packed = false) const {
        std::vector<unsigned char> C = c_init();
        set_num_threads(1);
        GemmDesc d1 = d;
        d1.batch = 1;
        d1.batch_stride_a = d1.batch_stride_b = d1.batch_stride_c = d1.batch_stride_residual = 0;
        const int64_t sc = d.batch_stride_c ? d.batch_stride_c : d.M * (d.ldc ? d.ldc : d.N);
        for (int64_t i = 0; i < d.batch; ++i) {
            GemmArgs a = args(C.data());
            a.A = static_cast<const char*>(a.A) + i * d.batch_stride_a * int64_t(dtype_size(d.a_type));
            a.B = static_cast<const char*>(a.B) + i * d.batch_stride_b * int64_t(dtype_size(d.b_type));
            a.C = static_cast<char*>(a.C) + i * sc * int64_t(dtype_size(d.c_type));
            if (a.residual) a.residual = static_cast<const char*>(a.residual) + i * d.batch_stride_residual * int64_t(dtype_size(d.residual_type));
            if (packed) {
                const GemmPlan p1(d1);
                const PackedB w = p1.pack_b(a.B);
                a.B = nullptr;
                p1.run(a, w);
            } else {
                xk::gemm(d1, a);
            }
        }
        set_num_threads(0);
        return C;
    }
};

// C buffers compared byte for byte; the first differing element is reported.
::testing::AssertionResult same_bytes(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                                      DType t) {
    if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
    const size_t es = dtype_size(t);
    for (size_t i = 0; i < got.size(); i += es)
        if (std::memcmp(&got[i], &want[i], es) != 0)
            return ::testing::AssertionFailure() << "element " << i / es << " of " << got.size() / es << " differs";
    return ::testing::AssertionSuccess();
}

// Every entry point on one problem, at 1 and 2 threads, against the per-item loop.
void check_case(const Case& c, bool c_api = true) {
    SCOPED_TRACE(c.str());
    ThreadsGuard tg;
    const Problem p(c);
    const std::vector<unsigned char> want = p.per_item(), want_packed = p.per_item(true);
    const GemmPlan plan(p.d);
    const bool b_items = p.d.batch > 1 && p.d.batch_stride_b != 0;
    const PackedB packed = plan.pack_b(p.B.data());
    for (int threads : {1, 2}) {
        SCOPED_TRACE("threads=" + std::to_string(threads));
        set_num_threads(threads);
        {
            std::vector<unsigned char> C = p.c_init();
            plan.run(p.args(C.data()));
            EXPECT_TRUE(same_bytes(C, want, c.t.c)) << "GemmPlan::run (" << plan.impl_name() << ")";
        }
        {
            std::vector<unsigned char> C = p.c_init();
            GemmArgs a = p.args(C.data());
            a.B = nullptr;  // not read
            plan.run(a, packed);
            EXPECT_TRUE(same_bytes(C, want_packed, c.t.c)) << "GemmPlan::run with a " << (b_items ? "batched" : "shared")
                                                    << " PackedB (" << packed.layout() << ")";
        }
        {
            std::vector<unsigned char> C = p.c_init();
            xk::gemm(p.d, p.args(C.data()));
            EXPECT_TRUE(same_bytes(C, want, c.t.c)) << "xk::gemm";
        }
        if (c_api) {
            const xk_gemm_desc cd = to_c(p.d);
            std::vector<unsigned char> C = p.c_init();
            xk_gemm_args ca = to_c(p.args(C.data()));
            ASSERT_EQ(xk_gemm(&cd, &ca), XK_SUCCESS) << xk_last_error();
            EXPECT_TRUE(same_bytes(C, want, c.t.c)) << "xk_gemm";
            xk_gemm_plan* cp = nullptr;
            ASSERT_EQ(xk_gemm_plan_create(&cd, &cp), XK_SUCCESS) << xk_last_error();
            std::memcpy(C.data(), p.C0.data(), C.size());  // (C keeps its buffer: ca points into it)
            ASSERT_EQ(xk_gemm_plan_run(cp, &ca), XK_SUCCESS) << xk_last_error();
            EXPECT_TRUE(same_bytes(C, want, c.t.c)) << "xk_gemm_plan_run";
            xk_gemm_packed_b* cpb = nullptr;
            ASSERT_EQ(xk_gemm_plan_pack_b(cp, p.B.data(), &cpb), XK_SUCCESS) << xk_last_error();
            std::memcpy(C.data(), p.C0.data(), C.size());
            ca.B = nullptr;
            ASSERT_EQ(xk_gemm_plan_run_packed(cp, &ca, cpb), XK_SUCCESS) << xk_last_error();
            EXPECT_TRUE(same_bytes(C, want_packed, c.t.c)) << "xk_gemm_plan_run_packed";
            xk_gemm_packed_b_destroy(cpb);
            xk_gemm_plan_destroy(cp);
        }
    }
}

// The sweep of one type combination under the current cap.
void sweep(const Types& t) {
    const bool fc = t.c != DType::s32;
    // (The large items run at the top ISA level only, and not under the sanitizers: seconds each
    // on the scalar reference.)
    const bool big = !under_sanitizer() && max_isa() == available_isas().back();
    std::vector<Case> cases;
    auto add = [&](Case c) { cases.push_back(c); };
    // Shapes x batch counts, packed.
    for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{{1, 19, 5}, {7, 17, 33}, {33, 1, 65}, {17, 40, 0}, {16, 64, 32}})
        for (int64_t batch : {0, 1, 5}) add(Case{t, M, N, K, batch});
    // Broadcast A / B, padded strides, transposes, padded leading dimensions, misaligned.
    {
        Case c{t, 9, 23, 31, 4};
        c.pa = Place::shared;
        c.pb = Place::padded;
        add(c);
        c.pa = Place::padded, c.pb = Place::shared, c.pc = Place::padded;
        c.ta = Trans::T, c.tb = Trans::T, c.pad_ld = 3;
        add(c);
        c.pa = Place::padded, c.pb = Place::padded, c.ta = Trans::N, c.misalign = 2;
        add(c);
        c.pa = Place::shared, c.pb = Place::shared, c.pc = Place::padded, c.misalign = 4;
        add(c);
    }
    // C items side by side within the rows (attention heads into one [tokens x heads*d] matrix).
    {
        Case c{t, 12, 8, 16, 6};
        c.pc = Place::side;
        add(c);
        c.tb = Trans::T, c.pb = Place::shared;
        add(c);
    }
    // beta: C read per item; scalars.
    {
        Case c{t, 10, 20, 30, 3};
        c.beta = 1.0f;
        add(c);
        if (fc) {
            c.alpha = -0.75f, c.beta = 0.5f, c.pc = Place::padded;
            add(c);
        }
    }
    // Epilogue: bias + gelu + residual, batched and broadcast residual, f32 and bf16.
    if (fc) {
        Case c{t, 11, 21, 13, 4};
        c.epilogue = true;
        add(c);
        c.pr = Place::shared, c.residual_type = DType::bf16, c.beta = 0.5f;
        add(c);
        c.pr = Place::padded, c.pc = Place::side, c.pb = Place::shared;
        add(c);
    }
    // Items large enough for the kernel to thread itself: at 2 threads 3 items run as 2 spread
    // over the threads and the third threaded by its kernel; also the attention shapes.
    if (big) {
        add(Case{t, 256, 128, 128, 3});
        Case c{t, 128, 64, 128, 8};
        c.tb = Trans::T;
        add(c);
    }
    for (size_t i = 0; i < cases.size(); ++i) check_case(cases[i], i % 3 == 0);
}

}  // namespace

// ---- results: every dtype at every ISA ---------------------------------------------------------

TEST(GemmBatched, F32) {
    for_each_isa([&](Isa) { sweep(kTypes[0]); });
}
TEST(GemmBatched, Bf16F32) {
    for_each_isa([&](Isa) { sweep(kTypes[1]); });
}
TEST(GemmBatched, Bf16Bf16) {
    for_each_isa([&](Isa) { sweep(kTypes[2]); });
}
TEST(GemmBatched, U8S8S32) {
    for_each_isa([&](Isa) { sweep(kTypes[3]); }, /*with_avx2_vnni=*/true);
}
TEST(GemmBatched, Int8F32) {
    for_each_isa(
        [&](Isa) {
            sweep(kTypes[4]);
            sweep(kTypes[5]);
        },
        /*with_avx2_vnni=*/true);
}

// The per-item loop is itself right: a few f32 items against a double-precision oracle.
TEST(GemmBatched, F32AgainstDouble) {
    for_each_isa([&](Isa) {
        Case c{kTypes[0], 13, 29, 37, 5};
        c.pa = Place::padded, c.pb = Place::shared, c.pc = Place::side, c.tb = Trans::T;
        const Problem p(c);
        std::vector<unsigned char> Cb = p.c_init();
        GemmPlan(p.d).run(p.args(Cb.data()));
        const auto* A = reinterpret_cast<const float*>(p.A.data());
        const auto* B = reinterpret_cast<const float*>(p.B.data());
        const auto* C = reinterpret_cast<const float*>(Cb.data());
        const auto* C0 = reinterpret_cast<const float*>(p.C0.data());
        int bad = 0;
        for (int64_t i = 0; i < c.batch; ++i)
            for (int64_t m = 0; m < c.M; ++m)
                for (int64_t n = 0; n < c.N; ++n) {
                    double acc = 0, sabs = 0;
                    for (int64_t k = 0; k < c.K; ++k) {
                        const double a = A[i * p.d.batch_stride_a + m * p.d.lda + k];
                        const double b = B[n * p.d.ldb + k];
                        acc += a * b, sabs += std::fabs(a * b);
                    }
                    const int64_t ci = i * p.d.batch_stride_c + m * p.d.ldc + n;
                    if (std::fabs(C[ci] - acc) > 2 * (c.K + 2) * kU * sabs + 1e-30) ++bad;
                }
        EXPECT_EQ(bad, 0);
        // Everything outside the items is untouched (side by side: the gaps of 2 in each row).
        int64_t touched = 0;
        for (size_t e = 0; e < Cb.size() / 4; ++e) touched += std::memcmp(&C[e], &C0[e], 4) != 0;
        EXPECT_LE(touched, c.batch * c.M * c.N);
    });
}

// batch = 0 and M = 0 write nothing and read no pointer; batch = 1 with strides is one GEMM.
TEST(GemmBatched, EmptyAndSingle) {
    GemmDesc d;
    d.M = 4, d.N = 5, d.K = 6;
    d.batch = 0;
    d.batch_stride_a = 100, d.batch_stride_b = 100, d.batch_stride_c = 100;
    xk::gemm(d, GemmArgs{});
    GemmPlan plan(d);
    plan.run(GemmArgs{});
    const PackedB pb = plan.pack_b(nullptr);
    EXPECT_FALSE(pb.empty());
    plan.run(GemmArgs{}, pb);
    xk_gemm_desc cd = to_c(d);
    xk_gemm_args ca;
    xk_gemm_args_init(&ca);
    EXPECT_EQ(xk_gemm(&cd, &ca), XK_SUCCESS) << xk_last_error();
    // batch 1: the strides are not used.
    std::vector<float> A(24, 1.0f), B(30, 2.0f), C(20, -1.0f), C1(20, -1.0f);
    d.batch = 1;
    d.batch_stride_a = int64_t(1) << 60, d.batch_stride_c = 3;
    xk::gemm(d, {A.data(), B.data(), C.data()});
    GemmDesc d1;
    d1.M = 4, d1.N = 5, d1.K = 6;
    xk::gemm(d1, {A.data(), B.data(), C1.data()});
    EXPECT_EQ(C, C1);
    // M = 0 with a batch: nothing read or written.
    d.M = 0, d.batch = 7, d.batch_stride_a = 1, d.batch_stride_c = 0;
    xk::gemm(d, GemmArgs{});
}

// The resolved descriptor, PackedB sizes and layouts.
TEST(GemmBatched, PlanAndPackedB) {
    GemmDesc d;
    d.M = 8, d.N = 16, d.K = 24, d.batch = 3;
    d.batch_stride_b = 24 * 16;
    const GemmPlan plan(d);
    EXPECT_EQ(plan.desc().batch_stride_c, 8 * 16);
    EXPECT_EQ(plan.desc().batch, 3);
    std::vector<float> B(3 * 24 * 16, 0.5f);
    const PackedB pb = plan.pack_b(B.data());
    GemmDesc d1 = d;
    d1.batch = 1;
    const PackedB one = GemmPlan(d1).pack_b(B.data());
    EXPECT_EQ(pb.size_bytes(), 3 * one.size_bytes());
    EXPECT_EQ(pb.layout(), one.layout() + ":batch3");
    // A plan of another M with the same batch reads it; a shared-B plan and another count do not.
    GemmDesc d2 = d;
    d2.M = 100;
    std::vector<float> A(3 * 100 * 24, 1.0f), C(3 * 100 * 16);
    GemmPlan(d2).run({A.data(), nullptr, C.data()}, pb);
    EXPECT_EQ(C[0], 24 * 0.5f);
    EXPECT_EQ(C.back(), 24 * 0.5f);
    GemmDesc shared = d;
    shared.batch_stride_b = 0;
    XK_EXPECT_INVALID(GemmPlan(shared).run({A.data(), nullptr, C.data()}, pb), "packed_b");
    XK_EXPECT_INVALID(GemmPlan(d).run({A.data(), nullptr, C.data()}, one), "reads one B per item");
    XK_EXPECT_INVALID(GemmPlan(d1).run({A.data(), nullptr, C.data()}, pb), "packed_b");  // an unbatched plan
    GemmDesc four = d;
    four.batch = 4;
    std::vector<float> B4(4 * 24 * 16), C4(4 * 8 * 16);
    XK_EXPECT_INVALID(GemmPlan(four).run({A.data(), nullptr, C4.data()}, pb), "holds 3 packed items");
    // A shared PackedB serves a shared-B plan of any batch count.
    GemmPlan(shared).run({A.data(), nullptr, C.data()}, one);
    four.batch_stride_b = 0;
    GemmPlan(four).run({A.data(), nullptr, C4.data()}, one);
    EXPECT_EQ(C4.back(), 24 * 0.5f);
    // An empty B (K = 0) with a batched stride: one empty pack stands for every item, whatever
    // the count (a huge batch allocates nothing per item); its runs write C = 0.
    GemmDesc k0 = d;
    k0.K = 0, k0.batch_stride_b = 7;
    const PackedB e3 = GemmPlan(k0).pack_b(nullptr);
    std::vector<float> Ck(3 * 8 * 16, 5.0f);
    GemmPlan(k0).run({nullptr, nullptr, Ck.data()}, e3);
    EXPECT_EQ(Ck, std::vector<float>(Ck.size(), 0.0f));
    k0.batch = int64_t(1) << 40;
    const PackedB huge = GemmPlan(k0).pack_b(nullptr);
    EXPECT_EQ(huge.layout(), GemmPlan(k0).pack_b(nullptr).layout());
    EXPECT_LE(huge.size_bytes(), 1024u);
    XK_EXPECT_INVALID(GemmPlan(k0).run({nullptr, nullptr, Ck.data()}, e3), "holds 3 packed items");
}

// ---- bad input ------------------------------------------------------------------------------

TEST(GemmBatched, BadInput) {
    GemmDesc d;
    d.M = 4, d.N = 5, d.K = 6, d.batch = 3;
    std::vector<float> A(1000, 1.0f), B(1000, 1.0f), C(1000, 7.0f);
    const std::vector<float> C0 = C;
    const GemmArgs args{A.data(), B.data(), C.data()};
    auto bad = [&](GemmDesc b, const char* needle) {
        XK_EXPECT_INVALID(xk::gemm(b, args), needle);
        XK_EXPECT_INVALID(GemmPlan{b}, needle);
        const xk_gemm_desc cd = to_c(b);
        const xk_gemm_args ca = to_c(args);
        EXPECT_EQ(xk_gemm(&cd, &ca), XK_INVALID_ARGUMENT);
        EXPECT_NE(std::string(xk_last_error()).find(needle), std::string::npos) << xk_last_error();
        EXPECT_EQ(C, C0);  // nothing written
    };
    GemmDesc b = d;
    b.batch = -1;
    bad(b, "batch=-1 must be >= 0");
    b = d, b.batch_stride_a = -5;
    bad(b, "batch_stride_a=-5 must be >= 0");
    b = d, b.batch_stride_b = -1;
    bad(b, "batch_stride_b=-1");
    b = d, b.batch_stride_c = -20;
    bad(b, "batch_stride_c=-20");
    b = d, b.batch_stride_residual = -1;
    bad(b, "batch_stride_residual=-1");
    // C items that overlap: stride below the extent (3*5+5 = 20), and side by side past ldc.
    b = d, b.batch_stride_c = 19;
    bad(b, "batch_stride_c=19 makes the items of C overlap");
    b = d, b.batch_stride_c = 4;  // < N
    bad(b, "batch_stride_c=4 makes the items of C overlap");
    b = d, b.ldc = 14, b.batch_stride_c = 5;  // (3-1)*5+5 = 15 > 14
    bad(b, "batch_stride_c=5 makes the items of C overlap");
    // Spans past int64 (bytes): batch * stride.
    b = d, b.batch = int64_t(1) << 40, b.batch_stride_a = int64_t(1) << 30;
    bad(b, "(batch-1)*batch_stride_a");
    b = d, b.batch = int64_t(1) << 40, b.batch_stride_b = int64_t(1) << 30;
    bad(b, "(batch-1)*batch_stride_b");
    b = d, b.batch = int64_t(1) << 40, b.batch_stride_c = int64_t(1) << 30;
    bad(b, "(batch-1)*batch_stride_c");
    b = d, b.batch = int64_t(1) << 60;  // packed C: (batch-1)*M*ldc
    bad(b, "(batch-1)*batch_stride_c");
    b = d, b.epilogue.residual = true, b.batch = int64_t(1) << 40, b.batch_stride_residual = int64_t(1) << 30;
    bad(b, "(batch-1)*batch_stride_residual");
    // With batch 1 the strides are never used: any value >= 0 passes.
    b = d, b.batch = 1, b.batch_stride_a = int64_t(1) << 62;
    EXPECT_NO_THROW(GemmPlan{b});

    // C overlapping an input anywhere in the batch (A sits in C's third item).
    {
        std::vector<float> buf(200, 3.0f);
        const std::vector<float> buf0 = buf;
        GemmArgs a{buf.data() + 2 * 20 + 1, B.data(), buf.data()};
        XK_EXPECT_INVALID(xk::gemm(d, a), "overlaps A");
        XK_EXPECT_INVALID(GemmPlan(d).run(a), "overlaps A");
        EXPECT_EQ(buf, buf0);
        // B's third item in C's first: B's span over the batch counts.
        GemmDesc e = d;
        e.batch_stride_b = 30;
        GemmArgs a2{A.data(), buf.data() + 100 - 2 * 30, buf.data() + 90};
        XK_EXPECT_INVALID(xk::gemm(e, a2), "overlaps B");
        EXPECT_EQ(buf, buf0);
        // The residual, batched.
        e = d;
        e.epilogue.residual = true;
        e.batch_stride_residual = 40;
        GemmArgs a3{A.data(), B.data(), buf.data() + 100};
        a3.residual = buf.data() + 100 - 2 * 40 - 1;
        XK_EXPECT_INVALID(GemmPlan(e).run(a3), "overlaps residual");
        EXPECT_EQ(buf, buf0);
        // Disjoint: fine.
        a3.residual = buf.data();
        e.batch_stride_residual = 20;
        GemmPlan(e).run(a3);
    }
    // Null pointers with batch > 0.
    XK_EXPECT_INVALID(xk::gemm(d, GemmArgs{nullptr, B.data(), C.data()}), "A=null");
    XK_EXPECT_INVALID(GemmPlan(d).pack_b(nullptr), "B=null");
    GemmDesc e = d;
    e.batch_stride_b = 30;
    XK_EXPECT_INVALID(GemmPlan(e).pack_b(nullptr), "B=null");
    EXPECT_EQ(C, C0);
}

// ---- the nesting guard of parallel_for ------------------------------------------------------

TEST(GemmBatched, ParallelNesting) {
    ThreadsGuard tg;
    set_num_threads(2);
    EXPECT_FALSE(detail::in_parallel_region());
    EXPECT_EQ(get_num_threads(), 2);
    std::atomic<int> inside{0}, nested_inline{0}, nested_calls{0}, ones{0};
    detail::parallel_for(2, 1, [&](int64_t, int64_t) {
        inside += detail::in_parallel_region();
        ones += get_num_threads() == 1;
        const auto me = std::this_thread::get_id();
        detail::parallel_for(100, 1, [&](int64_t b, int64_t e) {
            ++nested_calls;
            nested_inline += std::this_thread::get_id() == me && b == 0 && e == 100;
        });
    });
    EXPECT_EQ(inside.load(), 2);
    EXPECT_EQ(ones.load(), 2);
    EXPECT_EQ(nested_calls.load(), 2);
    EXPECT_EQ(nested_inline.load(), 2);
    EXPECT_FALSE(detail::in_parallel_region());
    EXPECT_EQ(get_num_threads(), 2);
    // An inline run (one chunk) is not a region: a kernel inside may thread itself.
    detail::parallel_for(1, 1, [&](int64_t, int64_t) { EXPECT_FALSE(detail::in_parallel_region()); });
    // Restored after an exception.
    EXPECT_THROW(detail::parallel_for(2, 1, [](int64_t b, int64_t) {
                     if (b == 0) throw std::runtime_error("x");
                 }),
                 std::runtime_error);
    EXPECT_FALSE(detail::in_parallel_region());
    EXPECT_EQ(get_num_threads(), 2);
}
