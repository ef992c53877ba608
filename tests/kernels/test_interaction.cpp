// DLRM interaction (xk/interaction.hpp): forward and backward of every ISA (public entry points
// under each cap, and each registry entry forced) against a double-precision oracle of the
// header's formulas, over odd N / D, f32 and bf16, self-interaction on and off, strided and
// misaligned features, 1 and 2 threads; the backward against central finite differences of the
// forward (exact for a quadratic, up to rounding); errors before anything is written; C API.
//
// Tolerances (vs the double oracle on the same widened inputs):
//   f32   |got - want| <= 1e-6 * (D + 4) * sum_k |terms|      (f32 sums of D (N) products in
//                                                               any order: a few ulps of the sum of |terms|)
//   bf16  the same plus 2^-8 * |want| (one rounding to bf16)
//   finite differences: 1e-3 * (1 + |grad|)  (h = 0.5, f32 forward, loss summed in double)
#include <cstring>

#include "common/test_util.hpp"
#include "kernels/interaction/interaction.hpp"
#include "xk/c/interaction.h"
#include "xk/interaction.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

namespace {

struct Problem {
    int64_t N = 1, D = 1, batch = 1;
    bool self = false, bf = false;
    int64_t ld_pad = 0, out_pad = 0, misalign = 0;  // misalign in elements
    std::vector<Buffer<uint16_t>> f16;  // bf16 features
    std::vector<Buffer<float>> f32;
    std::vector<int64_t> ld;
    std::vector<const void*> ptr;
    int64_t P() const { return self ? N * (N + 1) / 2 : N * (N - 1) / 2; }
    int64_t od() const { return D + P(); }
    int64_t ld_out() const { return od() + out_pad; }
    InteractionDesc desc() const {
        InteractionDesc d;
        d.num_features = N;
        d.dim = D;
        d.dtype = bf ? DType::bf16 : DType::f32;
        d.self_interaction = self;
        return d;
    }
    void make(uint64_t seed) {
        f16.clear();
        f32.clear();
        ld.clear();
        ptr.clear();
        for (int64_t f = 0; f < N; ++f) {
            const int64_t l = D + (f % 2 ? ld_pad : 0);
            ld.push_back(l);
            const size_t n = static_cast<size_t>(batch * l);
            if (bf) {
                f16.emplace_back(n, static_cast<size_t>(misalign * 2));
                std::vector<float> tmp(n);
                xk::test::fill_uniform(tmp.data(), n, -1.0, 1.0, seed + static_cast<uint64_t>(f));
                for (size_t i = 0; i < n; ++i) f16.back()[i] = bf16::from_float(tmp[i]);
                ptr.push_back(f16.back().data());
            } else {
                f32.emplace_back(n, static_cast<size_t>(misalign * 4));
                xk::test::fill_uniform(f32.back().data(), n, -1.0, 1.0, seed + static_cast<uint64_t>(f));
                ptr.push_back(f32.back().data());
            }
        }
    }
    double x(int64_t f, int64_t b, int64_t k) const {
        const size_t i = static_cast<size_t>(b * ld[static_cast<size_t>(f)] + k);
        return bf ? bf16::to_float(f16[static_cast<size_t>(f)][i]) : f32[static_cast<size_t>(f)][i];
    }
};

double load(const void* p, int64_t i, bool bf) {
    return bf ? bf16::to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// Pair index p (from 0) -> (i, j).
std::vector<std::pair<int64_t, int64_t>> pairs(int64_t N, bool self) {
    std::vector<std::pair<int64_t, int64_t>> v;
    for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < (self ? i + 1 : i); ++j) v.emplace_back(i, j);
    return v;
}

::testing::AssertionResult check_forward(const Problem& pr, const void* out) {
    const auto pp = pairs(pr.N, pr.self);
    const double rt = pr.bf ? 1.0 / 256 : 0.0;
    for (int64_t b = 0; b < pr.batch; ++b) {
        for (int64_t k = 0; k < pr.D; ++k) {
            const double got = load(out, b * pr.ld_out() + k, pr.bf);
            if (got != pr.x(0, b, k)) return ::testing::AssertionFailure() << "dense copy b=" << b << " k=" << k;
        }
        for (size_t p = 0; p < pp.size(); ++p) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < pr.D; ++k) {
                const double t = pr.x(pp[p].first, b, k) * pr.x(pp[p].second, b, k);
                want += t;
                mag += std::fabs(t);
            }
            const double got = load(out, b * pr.ld_out() + pr.D + static_cast<int64_t>(p), pr.bf);
            if (!(std::fabs(got - want) <= 1e-6 * static_cast<double>(pr.D + 4) * mag + rt * std::fabs(want)))
                return ::testing::AssertionFailure() << "b=" << b << " pair " << p << " (" << pp[p].first << ","
                                                     << pp[p].second << ") got " << got << " want " << want;
        }
    }
    return ::testing::AssertionSuccess();
}

// grad_out random; the analytic gradient in double.
::testing::AssertionResult check_backward(const Problem& pr, const void* gout, const std::vector<const void*>& grads) {
    const auto pp = pairs(pr.N, pr.self);
    const double rt = pr.bf ? 1.0 / 256 : 0.0;
    const int64_t N = pr.N;
    for (int64_t b = 0; b < pr.batch; ++b) {
        // The pair gradients as a symmetric matrix (diagonal: d/dx of x.x = 2x).
        std::vector<double> S(static_cast<size_t>(N * N), 0.0);
        for (size_t p = 0; p < pp.size(); ++p) {
            const double g = load(gout, b * pr.ld_out() + pr.D + static_cast<int64_t>(p), pr.bf);
            const auto [a, c] = pp[p];
            if (a == c) S[static_cast<size_t>(a * N + a)] = 2 * g;
            else S[static_cast<size_t>(a * N + c)] = S[static_cast<size_t>(c * N + a)] = g;
        }
        for (int64_t i = 0; i < N; ++i)
            for (int64_t k = 0; k < pr.D; ++k) {
                double want = i == 0 ? load(gout, b * pr.ld_out() + k, pr.bf) : 0.0;
                double mag = std::fabs(want);
                for (int64_t j = 0; j < N; ++j) {
                    const double t = S[static_cast<size_t>(i * N + j)] * pr.x(j, b, k);
                    want += t;
                    mag += std::fabs(t);
                }
                const double got = load(grads[static_cast<size_t>(i)], b * pr.D + k, pr.bf);
                if (!(std::fabs(got - want) <= 1e-6 * static_cast<double>(pr.N + 4) * mag + rt * std::fabs(want)))
                    return ::testing::AssertionFailure() << "b=" << b << " feature " << i << " k=" << k << " got " << got
                                                         << " want " << want;
            }
    }
    return ::testing::AssertionSuccess();
}

struct Io {
    Buffer<uint16_t> o16, g16;
    Buffer<float> o32, g32;
    std::vector<Buffer<uint16_t>> d16;
    std::vector<Buffer<float>> d32;
    std::vector<void*> dptr;
    void* out = nullptr;
    void* gout = nullptr;
    void make(const Problem& pr, uint64_t seed) {
        const size_t n = static_cast<size_t>(pr.batch * pr.ld_out());
        std::vector<float> g(n);
        xk::test::fill_uniform(g.data(), n, -1.0, 1.0, seed);
        if (pr.bf) {
            o16.resize(n, static_cast<size_t>(pr.misalign * 2));
            g16.resize(n);
            for (size_t i = 0; i < n; ++i) g16[i] = bf16::from_float(g[i]);
            out = o16.data();
            gout = g16.data();
        } else {
            o32.resize(n, static_cast<size_t>(pr.misalign * 4));
            g32.resize(n);
            for (size_t i = 0; i < n; ++i) g32[i] = g[i];
            out = o32.data();
            gout = g32.data();
        }
        d16.clear();
        d32.clear();
        dptr.clear();
        for (int64_t f = 0; f < pr.N; ++f) {
            const size_t m = static_cast<size_t>(pr.batch * pr.D);
            if (pr.bf) {
                d16.emplace_back(m);
                dptr.push_back(d16.back().data());
            } else {
                d32.emplace_back(m);
                dptr.push_back(d32.back().data());
            }
        }
    }
    std::vector<const void*> grads() const { return {dptr.begin(), dptr.end()}; }
};

InteractionArgs fwd_args(const Problem& pr, Io& io) {
    InteractionArgs a;
    a.batch = pr.batch;
    a.features = pr.ptr.data();
    a.ld_features = pr.ld.data();
    a.out = io.out;
    a.ld_out = pr.ld_out();
    return a;
}
InteractionBackwardArgs bwd_args(const Problem& pr, Io& io) {
    InteractionBackwardArgs a;
    a.batch = pr.batch;
    a.features = pr.ptr.data();
    a.ld_features = pr.ld.data();
    a.grad_out = io.gout;
    a.ld_grad_out = pr.ld_out();
    a.grad_features = io.dptr.data();
    return a;
}

std::vector<Problem> sweep() {
    std::vector<Problem> v;
    uint64_t k = 0;
    for (int64_t N : {1, 2, 3, 5, 8, 27})
        for (int64_t D : {1, 7, 16, 17, 64, 128}) {
            if (N == 27 && D < 64 && D != 17) continue;
            for (int s = 0; s < 2; ++s)
                for (int bf = 0; bf < 2; ++bf) {
                    Problem pr;
                    pr.N = N;
                    pr.D = D;
                    pr.batch = ++k % 3 == 0 ? 1 : 5;
                    pr.self = s;
                    pr.bf = bf;
                    pr.ld_pad = k % 2 ? 3 : 0;
                    pr.out_pad = k % 4 == 1 ? 5 : 0;
                    pr.misalign = k % 5 == 2 ? 1 : 0;
                    v.push_back(std::move(pr));
                }
        }
    return v;
}

}  // namespace

TEST(Interaction, PublicForwardBackwardEveryIsaAndThreads) {
    for_each_isa([&](Isa) {
        for (int threads : {1, 2}) {
            set_num_threads(threads);
            uint64_t seed = 0;
            std::vector<Problem> probs = sweep();
            for (Problem& pr : probs) {
                if (threads == 2) pr.batch = 9;
                pr.make(++seed * 131);
                Io io;
                io.make(pr, seed * 7);
                InteractionPlan plan(pr.desc());
                SCOPED_TRACE(plan.impl_name() + std::string(" N=") + std::to_string(pr.N) + " D=" + std::to_string(pr.D) +
                             (pr.self ? " self" : "") + (pr.bf ? " bf16" : " f32") + " threads=" + std::to_string(threads));
                ASSERT_EQ(plan.out_dim(), pr.od());
                plan.forward(fwd_args(pr, io));
                ASSERT_TRUE(check_forward(pr, io.out));
                interaction_backward(pr.desc(), bwd_args(pr, io));
                ASSERT_TRUE(check_backward(pr, io.gout, io.grads()));
            }
        }
    });
    set_num_threads(0);
}

TEST(Interaction, EveryRegistryEntryMatchesOracle) {
    const auto& reg = detail::interaction_registry();
    uint64_t seed = 0;
    for (const auto& impl : reg.impls()) {
        if (!isa_supported(impl.isa) || impl.isa > max_isa()) continue;
        std::vector<Problem> probs = sweep();
        for (Problem& pr : probs) {
            pr.make(++seed * 17);
            Io io;
            io.make(pr, seed * 3);
            const auto k = detail::interaction_validate_desc("test", pr.desc());
            const auto kern = reg.get(k, impl).kernel;
            SCOPED_TRACE(std::string(impl.name) + " " + k.key());
            const auto fc = detail::interaction_validate_forward("test", k, fwd_args(pr, io));
            kern->forward(fc, 0, pr.batch);
            ASSERT_TRUE(check_forward(pr, io.out));
            const auto bc = detail::interaction_validate_backward("test", k, bwd_args(pr, io));
            kern->backward(bc, 0, pr.batch);
            ASSERT_TRUE(check_backward(pr, io.gout, io.grads()));
        }
    }
}

// L = sum(out * grad_out) in double over the f32 forward; dL/dx by central differences (the
// output is quadratic in each input: exact up to rounding) vs the backward.
TEST(Interaction, BackwardMatchesFiniteDifferences) {
    for_each_isa([&](Isa) {
        for (int self = 0; self < 2; ++self) {
            Problem pr;
            pr.N = 6;
            pr.D = 19;
            pr.batch = 2;
            pr.self = self;
            pr.make(77);
            Io io;
            io.make(pr, 78);
            interaction_backward(pr.desc(), bwd_args(pr, io));
            auto loss = [&]() {
                interaction_forward(pr.desc(), fwd_args(pr, io));
                double L = 0;
                for (int64_t i = 0; i < pr.batch * pr.ld_out(); ++i) L += static_cast<double>(io.o32[static_cast<size_t>(i)]) * io.g32[static_cast<size_t>(i)];
                return L;
            };
            const float h = 0.5f;
            for (int64_t f = 0; f < pr.N; ++f)
                for (int64_t b = 0; b < pr.batch; ++b)
                    for (int64_t k = 0; k < pr.D; k += 3) {
                        float& x = pr.f32[static_cast<size_t>(f)][static_cast<size_t>(b * pr.ld[static_cast<size_t>(f)] + k)];
                        const float x0 = x;
                        x = x0 + h;
                        const double lp = loss();
                        x = x0 - h;
                        const double lm = loss();
                        x = x0;
                        const double fd = (lp - lm) / (2.0 * h);
                        const double an = io.d32[static_cast<size_t>(f)][static_cast<size_t>(b * pr.D + k)];
                        ASSERT_NEAR(an, fd, 1e-3 * (1 + std::fabs(an))) << "feature " << f << " b=" << b << " k=" << k;
                    }
        }
    });
}

TEST(Interaction, BadInputIsRejectedBeforeWriting) {
    Problem pr;
    pr.N = 4;
    pr.D = 8;
    pr.batch = 3;
    pr.make(5);
    Io io;
    io.make(pr, 6);
    for (size_t i = 0; i < io.o32.size(); ++i) io.o32[i] = -7.0f;
    auto untouched = [&] {
        for (size_t i = 0; i < io.o32.size(); ++i)
            if (io.o32[i] != -7.0f) return false;
        return true;
    };
    InteractionDesc d = pr.desc();
    d.num_features = 0;
    XK_EXPECT_INVALID(InteractionPlan{d}, "num_features=0");
    d = pr.desc();
    d.dim = 0;
    XK_EXPECT_INVALID(interaction_forward(d, fwd_args(pr, io)), "dim=0");
    d = pr.desc();
    d.dtype = DType::s8;
    XK_EXPECT_ERROR(interaction_forward(d, fwd_args(pr, io)), Status::unsupported, "dtype=s8");
    d.num_features = int64_t(1) << 40;
    d.dtype = DType::f32;
    XK_EXPECT_INVALID(interaction_out_dim(d), "overflows");
    d.num_features = std::numeric_limits<int64_t>::max();  // (a fuzz_interaction finding: N + 1 overflowed)
    XK_EXPECT_INVALID(interaction_out_dim(d), "overflows");

    InteractionArgs a = fwd_args(pr, io);
    std::vector<int64_t> ld = pr.ld;
    ld[2] = 7;
    a.ld_features = ld.data();
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "ld_features[2]=7 must be >= dim=8");
    a = fwd_args(pr, io);
    std::vector<const void*> ptr = pr.ptr;
    ptr[1] = nullptr;
    a.features = ptr.data();
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "features[1]=null");
    ptr = pr.ptr;
    ptr[3] = io.o32.data() + 4;  // overlaps out
    a.features = ptr.data();
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "overlaps features[3]");
    ptr[3] = reinterpret_cast<const char*>(pr.ptr[3]) + 2;
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "features[3]");
    a = fwd_args(pr, io);
    a.ld_out = pr.od() - 1;
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "ld_out");
    a = fwd_args(pr, io);
    a.batch = -1;
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "batch=-1");
    a.batch = 3;
    a.out = nullptr;
    XK_EXPECT_INVALID(interaction_forward(pr.desc(), a), "out=null");
    EXPECT_TRUE(untouched());

    // Backward: written gradients overlapping each other / a feature / grad_out.
    for (auto& g : io.d32) std::fill(g.begin(), g.end(), -3.0f);
    InteractionBackwardArgs ba = bwd_args(pr, io);
    std::vector<void*> gp = io.dptr;
    gp[2] = static_cast<float*>(gp[1]) + 1;
    ba.grad_features = gp.data();
    XK_EXPECT_INVALID(interaction_backward(pr.desc(), ba), "grad_features[1]");
    gp = io.dptr;
    gp[0] = const_cast<void*>(pr.ptr[2]);
    ba.grad_features = gp.data();
    XK_EXPECT_INVALID(interaction_backward(pr.desc(), ba), "overlaps features[2]");
    gp = io.dptr;
    gp[3] = io.gout;
    ba.grad_features = gp.data();
    XK_EXPECT_INVALID(interaction_backward(pr.desc(), ba), "grad_features[3]");
    ba = bwd_args(pr, io);
    std::vector<int64_t> lg(4, 8);
    lg[1] = 2;
    ba.ld_grad_features = lg.data();
    XK_EXPECT_INVALID(interaction_backward(pr.desc(), ba), "ld_grad_features[1]=2");
    ba = bwd_args(pr, io);
    ba.grad_out = nullptr;
    XK_EXPECT_INVALID(interaction_backward(pr.desc(), ba), "grad_out=null");
    ba = bwd_args(pr, io);
    ba.grad_features = nullptr;
    XK_EXPECT_INVALID(interaction_backward(pr.desc(), ba), "grad_features=null");
    for (const auto& g : io.d32)
        for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], -3.0f);

    // Batch 0: no pointer needed.
    InteractionArgs z;
    interaction_forward(pr.desc(), z);
    InteractionBackwardArgs zb;
    interaction_backward(pr.desc(), zb);
}

TEST(Interaction, CApi) {
    Problem pr;
    pr.N = 5;
    pr.D = 33;
    pr.batch = 4;
    pr.self = true;
    pr.make(9);
    Io io;
    io.make(pr, 10);
    xk_interaction_desc d{pr.N, pr.D, XK_DTYPE_F32, 1};
    int64_t od = 0;
    ASSERT_EQ(xk_interaction_out_dim(&d, &od), XK_SUCCESS);
    EXPECT_EQ(od, pr.od());
    ASSERT_EQ(xk_interaction_forward(&d, pr.batch, pr.ptr.data(), pr.ld.data(), io.out, 0), XK_SUCCESS) << xk_last_error();
    EXPECT_TRUE(check_forward(pr, io.out));
    ASSERT_EQ(xk_interaction_backward(&d, pr.batch, pr.ptr.data(), pr.ld.data(), io.gout, 0, io.dptr.data(), nullptr),
              XK_SUCCESS)
        << xk_last_error();
    EXPECT_TRUE(check_backward(pr, io.gout, io.grads()));
    int bad = 77;
    std::memcpy(&d.dtype, &bad, sizeof bad);
    EXPECT_EQ(xk_interaction_forward(&d, pr.batch, pr.ptr.data(), pr.ld.data(), io.out, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("dtype=77"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_interaction_forward(nullptr, 1, pr.ptr.data(), nullptr, io.out, 0), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("desc=null"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_interaction_out_dim(&d, nullptr), XK_INVALID_ARGUMENT);
}
