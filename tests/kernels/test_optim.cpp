// Fused optimizer steps (xk/optim.hpp): every implementation (each ISA) bit for bit the scalar
// reference over odd sizes, misaligned pointers, f32 / bf16-split params, f32 / bf16 grads, 1 and
// 2 threads; the reference against a double-precision oracle written from PyTorch's documented
// formulas over several steps; split-SGD round trip (the split master equals the f32 run);
// errors before anything is written; the C API.
//
// Tolerance of the f32 reference vs the double oracle after s steps:
//   |got - want| <= 4e-6 * |want| + 1e-4 * lr * s   (each step moves p by ~lr; its f32 rounding is
//   a few ulps of the update plus one of p).
#include <cstring>
#include <functional>

#include "common/streaming.hpp"
#include "common/test_util.hpp"
#include "kernels/optim/optim.hpp"
#include "xk/c/optim.h"
#include "xk/optim.hpp"
#include "xk/runtime.hpp"
#include "xk/xk.h"

using namespace xk;
using xk::test::Buffer;
using xk::test::for_each_isa;

namespace {

struct OptSetup {
    int kind = 0;  // 0 sgd, 1 adam, 2 adagrad
    SgdOptions sgd;
    AdamOptions adam;
    AdagradOptions ada;
};

std::vector<OptSetup> setups() {
    std::vector<OptSetup> v;
    for (int i = 0; i < 5; ++i) {
        OptSetup s;
        s.kind = 0;
        s.sgd.lr = 0.05;
        s.sgd.momentum = i == 0 ? 0 : 0.9;
        s.sgd.dampening = i == 2 ? 0.1 : 0;
        s.sgd.weight_decay = i >= 3 ? 1e-2 : 0;
        s.sgd.nesterov = i == 3;
        s.sgd.maximize = i == 4;
        v.push_back(s);
    }
    for (int i = 0; i < 4; ++i) {
        OptSetup s;
        s.kind = 1;
        s.adam.lr = 1e-2;
        s.adam.adamw = i % 2 == 1;
        s.adam.weight_decay = i == 0 ? 0 : 1e-2;
        s.adam.amsgrad = i == 2;
        s.adam.maximize = i == 3;
        v.push_back(s);
    }
    for (int i = 0; i < 2; ++i) {
        OptSetup s;
        s.kind = 2;
        s.ada.lr = 0.1;
        s.ada.lr_decay = i ? 0.01 : 0;
        s.ada.weight_decay = i ? 1e-2 : 0;
        s.ada.maximize = i == 1;
        v.push_back(s);
    }
    return v;
}

std::string name(const OptSetup& s) {
    if (s.kind == 0)
        return "sgd mom=" + std::to_string(s.sgd.momentum) + " damp=" + std::to_string(s.sgd.dampening) +
               " wd=" + std::to_string(s.sgd.weight_decay) + (s.sgd.nesterov ? " nesterov" : "") + (s.sgd.maximize ? " max" : "");
    if (s.kind == 1)
        return std::string(s.adam.adamw ? "adamw" : "adam") + " wd=" + std::to_string(s.adam.weight_decay) +
               (s.adam.amsgrad ? " amsgrad" : "") + (s.adam.maximize ? " max" : "");
    return "adagrad decay=" + std::to_string(s.ada.lr_decay) + (s.ada.maximize ? " max" : "");
}

// One parameter set and its states.
struct State {
    int64_t n = 0;
    OptimParamType pt = OptimParamType::f32;
    DType gt = DType::f32;
    Buffer<float> p, g, s0, s1, s2;
    Buffer<uint16_t> hi, lo, gb;
    // aligned: every array 64-byte aligned (else mis and a few more elements of misalignment).
    void make(int64_t n_, OptimParamType pt_, DType gt_, size_t mis, uint64_t seed, bool aligned = false) {
        n = n_;
        pt = pt_;
        gt = gt_;
        const size_t un = static_cast<size_t>(n);
        std::vector<float> pv(un), gv(un);
        test::fill_uniform(pv.data(), un, -1, 1, seed);
        test::fill_uniform(gv.data(), un, -0.5, 0.5, seed + 1);
        p.resize(un, mis * 4);
        hi.resize(un, mis * 2);
        lo.resize(un, aligned ? 0 : (mis + 1) * 2);
        for (size_t i = 0; i < un; ++i) {
            p[i] = pv[i];
            uint32_t u;
            std::memcpy(&u, &pv[i], 4);
            hi[i] = static_cast<uint16_t>(u >> 16);
            lo[i] = static_cast<uint16_t>(u);
        }
        g.resize(un, aligned ? 0 : (mis + 2) * 4);
        gb.resize(un, mis * 2);
        for (size_t i = 0; i < un; ++i) {
            gb[i] = bf16::from_float(gv[i]);
            g[i] = gt == DType::bf16 ? bf16::to_float(gb[i]) : gv[i];
        }
        s0.resize(un, mis * 4);
        s1.resize(un, aligned ? 0 : (mis + 3) * 4);
        s2.resize(un, mis * 4);
        for (size_t i = 0; i < un; ++i) s0[i] = s1[i] = s2[i] = 0.0f;
    }
    // Fresh gradients for the next step.
    void regrad(uint64_t seed) {
        std::vector<float> gv(static_cast<size_t>(n));
        test::fill_uniform(gv.data(), gv.size(), -0.5, 0.5, seed);
        for (int64_t i = 0; i < n; ++i) {
            gb[i] = bf16::from_float(gv[i]);
            g[i] = gt == DType::bf16 ? bf16::to_float(gb[i]) : gv[i];
        }
    }
    OptimTensors tensors() {
        OptimTensors t;
        t.n = n;
        t.param_type = pt;
        t.param = pt == OptimParamType::bf16_split ? static_cast<void*>(hi.data()) : p.data();
        t.param_lo = pt == OptimParamType::bf16_split ? lo.data() : nullptr;
        t.grad_dtype = gt;
        t.grad = gt == DType::bf16 ? static_cast<const void*>(gb.data()) : g.data();
        return t;
    }
    float master(int64_t i) const {
        if (pt == OptimParamType::f32) return p[i];
        const uint32_t u = (static_cast<uint32_t>(hi[i]) << 16) | lo[i];
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
};

detail::OptimCall make_call(const OptSetup& s, State& st, int64_t step) {
    const OptimTensors t = st.tensors();
    if (s.kind == 0)
        return detail::optim_sgd_call("test", s.sgd, t, s.sgd.momentum != 0 ? st.s0.data() : nullptr, step);
    if (s.kind == 1)
        return detail::optim_adam_call("test", s.adam, t, st.s0.data(), st.s1.data(), s.adam.amsgrad ? st.s2.data() : nullptr, step);
    return detail::optim_adagrad_call("test", s.ada, t, st.s0.data(), step);
}

void public_step(const OptSetup& s, State& st, int64_t step) {
    const OptimTensors t = st.tensors();
    if (s.kind == 0) sgd_step(s.sgd, t, s.sgd.momentum != 0 ? st.s0.data() : nullptr, step);
    else if (s.kind == 1) adam_step(s.adam, t, st.s0.data(), st.s1.data(), s.adam.amsgrad ? st.s2.data() : nullptr, step);
    else adagrad_step(s.ada, t, st.s0.data(), step);
}

bool same_bits(const State& a, const State& b) {
    const size_t n = static_cast<size_t>(a.n);
    if (a.pt == OptimParamType::f32) {
        if (std::memcmp(a.p.data(), b.p.data(), n * 4)) return false;
    } else if (std::memcmp(a.hi.data(), b.hi.data(), n * 2) || std::memcmp(a.lo.data(), b.lo.data(), n * 2)) {
        return false;
    }
    return !std::memcmp(a.s0.data(), b.s0.data(), n * 4) && !std::memcmp(a.s1.data(), b.s1.data(), n * 4) &&
           !std::memcmp(a.s2.data(), b.s2.data(), n * 4);
}

// PyTorch's documented algorithms, in double, for one element over `steps` steps.
struct Oracle {
    double p, b = 0, m = 0, v = 0, vmax = 0, sum = 0;
    void step(const OptSetup& s, double g, int64_t t) {
        if (s.kind == 0) {
            const SgdOptions& o = s.sgd;
            if (o.maximize) g = -g;
            if (o.weight_decay != 0) g += o.weight_decay * p;
            if (o.momentum != 0) {
                b = t == 1 ? g : o.momentum * b + (1 - o.dampening) * g;
                g = o.nesterov ? g + o.momentum * b : b;
            }
            p -= o.lr * g;
        } else if (s.kind == 1) {
            const AdamOptions& o = s.adam;
            if (o.maximize) g = -g;
            if (o.adamw) p -= o.lr * o.weight_decay * p;
            else if (o.weight_decay != 0) g += o.weight_decay * p;
            m = o.beta1 * m + (1 - o.beta1) * g;
            v = o.beta2 * v + (1 - o.beta2) * g * g;
            const double mh = m / (1 - std::pow(o.beta1, double(t)));
            // amsgrad: the running max of v itself, then the bias correction (PyTorch 2.x's docs
            // and implementation).
            if (o.amsgrad) vmax = std::max(vmax, v);
            const double vh = (o.amsgrad ? vmax : v) / (1 - std::pow(o.beta2, double(t)));
            p -= o.lr * mh / (std::sqrt(vh) + o.eps);
        } else {
            const AdagradOptions& o = s.ada;
            if (o.maximize) g = -g;
            const double clr = o.lr / (1 + double(t - 1) * o.lr_decay);
            if (o.weight_decay != 0) g += o.weight_decay * p;
            sum += g * g;
            p -= clr * g / (std::sqrt(sum) + o.eps);
        }
    }
};

double lr_of(const OptSetup& s) { return s.kind == 0 ? s.sgd.lr : s.kind == 1 ? s.adam.lr : s.ada.lr; }

}  // namespace

TEST(Optim, EveryImplementationMatchesReferenceBitForBit) {
    const auto& reg = detail::optim_registry();
    uint64_t k = 0;
    for (const OptSetup& s : setups())
        for (OptimParamType pt : {OptimParamType::f32, OptimParamType::bf16_split})
            for (DType gt : {DType::f32, DType::bf16})
                for (int64_t n : {1, 7, 17, 64, 1023}) {
                    ++k;
                    State ref;
                    ref.make(n, pt, gt, k % 3, 100 + k);
                    for (const auto& impl : reg.impls()) {
                        if (!isa_supported(impl.isa) || impl.isa > max_isa()) continue;
                        State st;
                        st.make(n, pt, gt, (k + 1) % 3, 100 + k);
                        State r2;
                        r2.make(n, pt, gt, 0, 100 + k);
                        for (int64_t step = 1; step <= 3; ++step) {
                            const detail::OptimCall c = make_call(s, st, step);
                            reg.get(c.cfg, impl).kernel->run(c, 0, n);
                            const detail::OptimCall cr = make_call(s, r2, step);
                            detail::optim_reference(cr, 0, n);
                            ASSERT_TRUE(same_bits(st, r2)) << impl.name << " " << name(s) << " " << c.cfg.key()
                                                           << " n=" << n << " step=" << step;
                            st.regrad(900 + step);
                            r2.regrad(900 + step);
                        }
                    }
                }
}

TEST(Optim, PublicStepsAllIsasAndThreads) {
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t k = 0;
            for (const OptSetup& s : setups())
                for (OptimParamType pt : {OptimParamType::f32, OptimParamType::bf16_split}) {
                    ++k;
                    if (threads == 2 && k % 3 != 0) continue;  // a third of the setups split over threads
                    // Two threads: several 64 Ki-element chunks; one thread: odd sizes.
                    const int64_t n = threads == 2 ? 70001 + static_cast<int64_t>(k % 5) : 1029 + static_cast<int64_t>(k % 7);
                    State st, r;
                    st.make(n, pt, DType::f32, k % 2, 7 + k);
                    r.make(n, pt, DType::f32, 0, 7 + k);
                    for (int64_t step = 1; step <= 2; ++step) {
                        public_step(s, st, step);
                        detail::optim_reference(make_call(s, r, step), 0, n);
                        ASSERT_TRUE(same_bits(st, r)) << name(s) << " threads=" << threads;
                    }
                }
        });
    }
    set_num_threads(0);
}

// Non-temporal stores of the written arrays and software prefetch (OptimCall::nt /
// prefetch_bytes, the opt-in knobs XK_OPTIM_NT / XK_OPTIM_PF): every kernel bit for bit the
// reference, odd sizes (the tail through the reference); then the public steps with 64-byte
// aligned arrays and the threshold at 0 (streaming when XK_OPTIM_NT=1 is set) on 1 and 2 threads,
// Lamb included.
TEST(Optim, StreamingStoresMatchReference) {
    const auto& reg = detail::optim_registry();
    uint64_t k = 0;
    for (const OptSetup& s : setups())
        for (OptimParamType pt : {OptimParamType::f32, OptimParamType::bf16_split})
            for (DType gt : {DType::f32, DType::bf16})
                for (int64_t n : {17, 1023}) {
                    ++k;
                    if (k % 2) continue;  // half the combinations (the other half next time round)
                    for (const auto& impl : reg.impls()) {
                        if (!isa_supported(impl.isa) || impl.isa > max_isa() || impl.isa == Isa::scalar) continue;
                        State st, r;
                        st.make(n, pt, gt, 0, 500 + k, true);
                        r.make(n, pt, gt, 0, 500 + k);
                        for (int64_t step = 1; step <= 2; ++step) {
                            detail::OptimCall c = make_call(s, st, step);
                            c.nt = true;
                            c.prefetch_bytes = 256 * (1 + step % 2);
                            reg.get(c.cfg, impl).kernel->run(c, 0, n);
                            detail::optim_reference(make_call(s, r, step), 0, n);
                            ASSERT_TRUE(same_bits(st, r)) << impl.name << " " << name(s) << " n=" << n;
                            st.regrad(40 + step);
                            r.regrad(40 + step);
                        }
                    }
                }
    detail::set_nt_store_threshold(0);
    for (int threads : {1, 2}) {
        set_num_threads(threads);
        for_each_isa([&](Isa) {
            uint64_t j = 0;
            for (const OptSetup& s : setups()) {
                if (++j % 3 != threads) continue;
                const OptimParamType pt = j % 2 ? OptimParamType::f32 : OptimParamType::bf16_split;
                const int64_t n = threads == 2 ? 70001 : 1029;
                State st, r;
                st.make(n, pt, DType::f32, 0, 60 + j, true);
                r.make(n, pt, DType::f32, 0, 60 + j);
                for (int64_t step = 1; step <= 2; ++step) {
                    public_step(s, st, step);
                    detail::optim_reference(make_call(s, r, step), 0, n);
                    ASSERT_TRUE(same_bits(st, r)) << name(s) << " threads=" << threads;
                }
            }
            // Lamb (both passes stream): the same as its reference kernel with regular stores.
            LambOptions o;
            o.weight_decay = 1e-2;
            State st, r;
            st.make(70001, OptimParamType::f32, DType::f32, 0, 77, true);
            r.make(70001, OptimParamType::f32, DType::f32, 0, 77, true);
            detail::OptimConfig cfg;
            cfg.kind = detail::OptimKind::lamb;
            const auto& reg2 = detail::optim_registry();
            const auto ref = reg2.get(cfg, reg2.find("ref:scalar")).kernel;
            lamb_step(o, st.tensors(), st.s0.data(), st.s1.data(), 1);
            detail::run_lamb(detail::optim_lamb_call("test", o, r.tensors(), r.s0.data(), r.s1.data(), 1), ref.get());
            ASSERT_EQ(0, std::memcmp(st.s0.data(), r.s0.data(), 70001 * 4));
            ASSERT_EQ(0, std::memcmp(st.s1.data(), r.s1.data(), 70001 * 4));
            for (int64_t i = 0; i < 70001; ++i) ASSERT_NEAR(st.master(i), r.master(i), 1e-6 * std::fabs(r.master(i)) + 1e-12);
        });
    }
    detail::set_nt_store_threshold(-1);
    set_num_threads(0);
}

TEST(Optim, ReferenceMatchesPyTorchFormulasInDouble) {
    const int64_t n = 257, steps = 5;
    for (const OptSetup& s : setups()) {
        State st;
        st.make(n, OptimParamType::f32, DType::f32, 0, 31);
        std::vector<Oracle> o(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) o[i].p = st.p[i];
        for (int64_t t = 1; t <= steps; ++t) {
            for (int64_t i = 0; i < n; ++i) o[i].step(s, st.g[i], t);
            public_step(s, st, t);
            st.regrad(40 + t);
        }
        for (int64_t i = 0; i < n; ++i) {
            const double want = o[i].p, tol = 4e-6 * std::fabs(want) + 1e-4 * lr_of(s) * steps;
            ASSERT_NEAR(st.p[i], want, tol) << name(s) << " i=" << i;
        }
    }
}

// Split SGD: the master kept as bf16 top half + 16-bit bottom half evolves exactly as the f32
// parameter, and the top half is the bf16 truncation of it (what the forward reads).
TEST(Optim, SplitParamsRoundTripTheF32Master) {
    for (const OptSetup& s : setups()) {
        State f, sp;
        f.make(1000, OptimParamType::f32, DType::bf16, 0, 5);
        sp.make(1000, OptimParamType::bf16_split, DType::bf16, 1, 5);
        for (int64_t t = 1; t <= 4; ++t) {
            public_step(s, f, t);
            public_step(s, sp, t);
            f.regrad(60 + t);
            sp.regrad(60 + t);
        }
        for (int64_t i = 0; i < 1000; ++i) {
            const float m = sp.master(i);
            ASSERT_EQ(0, std::memcmp(&m, &f.p[i], 4)) << name(s) << " i=" << i;
            uint32_t u;
            std::memcpy(&u, &f.p[i], 4);
            ASSERT_EQ(sp.hi[i], u >> 16);
        }
    }
}

TEST(Optim, BadInputWritesNothing) {
    State st;
    st.make(100, OptimParamType::f32, DType::f32, 0, 1);
    auto expect_reject = [&](const std::function<void(OptimTensors&)>& call, const std::string& needle) {
        State before;
        before.make(100, OptimParamType::f32, DType::f32, 0, 1);
        for (int64_t i = 0; i < 100; ++i) st.s0[i] = st.s1[i] = st.s2[i] = 0.5f;
        for (int64_t i = 0; i < 100; ++i) before.s0[i] = before.s1[i] = before.s2[i] = 0.5f;
        std::memcpy(st.p.data(), before.p.data(), 400);
        OptimTensors t = st.tensors();
        try {
            call(t);
            ADD_FAILURE() << "accepted: " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        EXPECT_TRUE(same_bits(st, before)) << needle;
    };
    SgdOptions sgd;
    sgd.lr = -1;
    expect_reject([&](OptimTensors& t) { sgd_step(sgd, t, nullptr, 1); }, "xk::sgd_step: lr=-1 must be in [0, inf)");
    sgd.lr = 0.1;
    sgd.nesterov = true;
    expect_reject([&](OptimTensors& t) { sgd_step(sgd, t, nullptr, 1); }, "nesterov=true requires momentum > 0");
    sgd.nesterov = false;
    sgd.momentum = 0.9;
    expect_reject([&](OptimTensors& t) { sgd_step(sgd, t, nullptr, 1); }, "momentum_buffer=null");
    expect_reject([&](OptimTensors& t) { sgd_step(sgd, t, st.s0.data(), 0); }, "step=0 must be >= 1");
    AdamOptions adam;
    adam.beta1 = 1.0;
    expect_reject([&](OptimTensors& t) { adam_step(adam, t, st.s0.data(), st.s1.data(), nullptr, 1); }, "beta1=1 must be in [0, 1)");
    adam.beta1 = 0.9;
    expect_reject([&](OptimTensors& t) { adam_step(adam, t, st.s0.data(), st.s0.data() + 10, nullptr, 1); },
                  "exp_avg=");  // exp_avg overlaps exp_avg_sq
    expect_reject([&](OptimTensors& t) { adam_step(adam, t, st.s0.data(), st.s1.data(), st.s2.data(), 1); },
                  "max_exp_avg_sq=");  // given without amsgrad
    expect_reject(
        [&](OptimTensors& t) {
            t.grad = st.p.data() + 1;  // grad overlaps param
            adam_step(adam, t, st.s0.data(), st.s1.data(), nullptr, 1);
        },
        "param=");
    expect_reject(
        [&](OptimTensors& t) {
            t.grad_dtype = DType::s8;
            adagrad_step(AdagradOptions{}, t, st.s0.data(), 1);
        },
        "grad_dtype=s8 is not supported");
    AdagradOptions ada;
    ada.eps = -1;
    expect_reject([&](OptimTensors& t) { adagrad_step(ada, t, st.s0.data(), 1); }, "eps=-1");
    // Nothing to do is fine with null pointers.
    OptimTensors empty;
    sgd_step(SgdOptions{}, empty, nullptr, 1);
    adam_step(AdamOptions{}, empty, nullptr, nullptr, nullptr, 1);
}

TEST(Optim, CApi) {
    const int64_t n = 333;
    for (int kind = 0; kind < 3; ++kind)
        for (int split = 0; split < 2; ++split) {
            OptSetup s;
            s.kind = kind;
            s.sgd.lr = 0.1;
            s.sgd.momentum = 0.5;
            s.sgd.nesterov = true;
            s.sgd.weight_decay = 0.01;
            s.adam.adamw = true;
            s.adam.weight_decay = 0.01;
            s.ada.lr_decay = 0.1;
            const OptimParamType pt = split ? OptimParamType::bf16_split : OptimParamType::f32;
            State a, b;
            a.make(n, pt, DType::f32, 0, 3);
            b.make(n, pt, DType::f32, 0, 3);
            for (int64_t t = 1; t <= 2; ++t) {
                public_step(s, a, t);
                xk_status st = XK_SUCCESS;
                void* p = split ? static_cast<void*>(b.hi.data()) : b.p.data();
                uint16_t* lo = split ? b.lo.data() : nullptr;
                const int ptype = split ? XK_OPTIM_PARAM_BF16_SPLIT : XK_OPTIM_PARAM_F32;
                if (kind == 0) {
                    xk_sgd_options o;
                    xk_sgd_options_init(&o);
                    o.lr = 0.1;
                    o.momentum = 0.5;
                    o.nesterov = 1;
                    o.weight_decay = 0.01;
                    st = xk_sgd_step(&o, ptype, n, p, lo, b.g.data(), b.s0.data(), t);
                } else if (kind == 1) {
                    xk_adam_options o;
                    xk_adam_options_init(&o);
                    o.adamw = 1;
                    o.weight_decay = 0.01;
                    st = xk_adam_step(&o, ptype, n, p, lo, b.g.data(), b.s0.data(), b.s1.data(), nullptr, t);
                } else {
                    xk_adagrad_options o;
                    xk_adagrad_options_init(&o);
                    o.lr_decay = 0.1;
                    st = xk_adagrad_step(&o, ptype, n, p, lo, b.g.data(), b.s0.data(), t);
                }
                ASSERT_EQ(st, XK_SUCCESS) << xk_last_error();
                ASSERT_TRUE(same_bits(a, b)) << kind << " " << split;
            }
        }
    xk_sgd_options o;
    xk_sgd_options_init(&o);
    o.lr = -2;
    float p = 1, g = 1;
    EXPECT_EQ(xk_sgd_step(&o, XK_OPTIM_PARAM_F32, 1, &p, nullptr, &g, nullptr, 1), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("lr=-2"), std::string::npos);
    EXPECT_EQ(p, 1.0f);
    o.lr = 1;
    EXPECT_EQ(xk_sgd_step(&o, 7, 1, &p, nullptr, &g, nullptr, 1), XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("param_type=7"), std::string::npos) << xk_last_error();
}

// ---- Lamb ---------------------------------------------------------------------------------------
// Every implementation against the scalar reference (both passes): m, v bit for bit, the trust
// ratio to 1e-12 (the double sums of squares in another lane order), p to 1e-6 relative; the
// reference against the paper's formula in double over 5 steps (tolerance as the other steps);
// f32 vs split-bf16 masters bit for bit; 1 vs 2 threads bit for bit; a zero tensor's trust is 1.
namespace {
float lamb_via(const LambOptions& o, State& st, int64_t step, const detail::OptimKernel* k) {
    return detail::run_lamb(detail::optim_lamb_call("test", o, st.tensors(), st.s0.data(), st.s1.data(), step), k);
}
}  // namespace

TEST(Optim, LambEveryImplementationMatchesReference) {
    const auto& reg = detail::optim_registry();
    uint64_t k = 0;
    for (double wd : {0.0, 1e-2})
        for (OptimParamType pt : {OptimParamType::f32, OptimParamType::bf16_split})
            for (DType gt : {DType::f32, DType::bf16})
                for (int64_t n : {1, 7, 17, 1023, 70001}) {
                    if (n == 70001 && (pt != OptimParamType::f32 || gt != DType::f32)) continue;  // chunks: once
                    ++k;
                    LambOptions o;
                    o.lr = 1e-2;
                    o.weight_decay = wd;
                    detail::OptimConfig cfg;
                    cfg.kind = detail::OptimKind::lamb;
                    cfg.param_type = pt;
                    cfg.grad_dtype = gt;
                    const auto ref = reg.get(cfg, reg.find("ref:scalar")).kernel;
                    for (const auto& impl : reg.impls()) {
                        if (!isa_supported(impl.isa) || impl.isa > max_isa() || impl.isa == Isa::scalar) continue;
                        const auto kern = reg.get(cfg, impl).kernel;
                        State st, r;
                        st.make(n, pt, gt, k % 3, 300 + k);
                        r.make(n, pt, gt, 0, 300 + k);
                        for (int64_t step = 1; step <= 3; ++step) {
                            const float t1 = lamb_via(o, st, step, kern.get());
                            const float t2 = lamb_via(o, r, step, ref.get());
                            ASSERT_NEAR(t1, t2, 1e-6 * std::fabs(t2)) << impl.name << " n=" << n;
                            ASSERT_EQ(0, std::memcmp(st.s0.data(), r.s0.data(), static_cast<size_t>(n) * 4)) << impl.name;
                            ASSERT_EQ(0, std::memcmp(st.s1.data(), r.s1.data(), static_cast<size_t>(n) * 4)) << impl.name;
                            for (int64_t i = 0; i < n; ++i)
                                ASSERT_NEAR(st.master(i), r.master(i), 1e-6 * std::fabs(r.master(i)) + 1e-12)
                                    << impl.name << " " << cfg.key() << " n=" << n << " i=" << i << " step=" << step;
                            st.regrad(700 + step);
                            r.regrad(700 + step);
                        }
                    }
                }
}

TEST(Optim, LambMatchesPaperFormulaInDouble) {
    const int64_t n = 257, steps = 5;
    for (double wd : {0.0, 1e-2}) {
        for_each_isa([&](Isa) {
            LambOptions o;
            o.lr = 1e-2;
            o.weight_decay = wd;
            State st;
            st.make(n, OptimParamType::f32, DType::f32, 0, 41);
            std::vector<double> p(static_cast<size_t>(n)), m(p.size(), 0.0), v(p.size(), 0.0), u(p.size());
            for (int64_t i = 0; i < n; ++i) p[i] = st.p[i];
            for (int64_t t = 1; t <= steps; ++t) {
                double pn = 0, un = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const double g = st.g[i];
                    m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
                    v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
                    const double mh = m[i] / (1 - std::pow(o.beta1, double(t))), vh = v[i] / (1 - std::pow(o.beta2, double(t)));
                    u[i] = mh / (std::sqrt(vh) + o.eps) + wd * p[i];
                    pn += p[i] * p[i];
                    un += u[i] * u[i];
                }
                const double trust = pn > 0 && un > 0 ? std::sqrt(pn) / std::sqrt(un) : 1.0;
                for (int64_t i = 0; i < n; ++i) p[i] -= o.lr * trust * u[i];
                const float got = lamb_step(o, st.tensors(), st.s0.data(), st.s1.data(), t);
                ASSERT_NEAR(got, trust, 1e-5 * trust) << "step " << t;
                st.regrad(50 + t);
            }
            for (int64_t i = 0; i < n; ++i)
                ASSERT_NEAR(st.p[i], p[i], 4e-6 * std::fabs(p[i]) + 1e-4 * o.lr * steps) << "wd=" << wd << " i=" << i;
        });
    }
}

TEST(Optim, LambSplitThreadsAndZeroTensor) {
    LambOptions o;
    o.lr = 5e-3;
    o.weight_decay = 1e-2;
    const int64_t n = 200003;  // several 64 Ki chunks
    State f, sp, f2;
    f.make(n, OptimParamType::f32, DType::bf16, 0, 9);
    sp.make(n, OptimParamType::bf16_split, DType::bf16, 1, 9);
    f2.make(n, OptimParamType::f32, DType::bf16, 2, 9);
    for (int64_t t = 1; t <= 3; ++t) {
        set_num_threads(1);
        lamb_step(o, f.tensors(), f.s0.data(), f.s1.data(), t);
        lamb_step(o, sp.tensors(), sp.s0.data(), sp.s1.data(), t);
        set_num_threads(2);
        lamb_step(o, f2.tensors(), f2.s0.data(), f2.s1.data(), t);
        f.regrad(80 + t);
        sp.regrad(80 + t);
        f2.regrad(80 + t);
    }
    set_num_threads(0);
    for (int64_t i = 0; i < n; ++i) {
        const float m = sp.master(i);
        ASSERT_EQ(0, std::memcmp(&m, &f.p[i], 4)) << "split i=" << i;
        ASSERT_EQ(0, std::memcmp(&f2.p[i], &f.p[i], 4)) << "threads i=" << i;
    }
    State z;
    z.make(100, OptimParamType::f32, DType::f32, 0, 3);
    for (int64_t i = 0; i < 100; ++i) z.p[i] = 0.0f;
    EXPECT_EQ(lamb_step(o, z.tensors(), z.s0.data(), z.s1.data(), 1), 1.0f);  // ||p|| = 0: ratio 1
    for (int64_t i = 0; i < 100; ++i) EXPECT_NE(z.p[i], 0.0f);
}

TEST(Optim, LambBadInputAndCApi) {
    State st;
    st.make(33, OptimParamType::f32, DType::f32, 0, 1);
    std::vector<float> p0(st.p.begin(), st.p.end());
    LambOptions o;
    o.beta1 = 1.0;
    XK_EXPECT_INVALID(lamb_step(o, st.tensors(), st.s0.data(), st.s1.data(), 1), "beta1=1");
    o = LambOptions{};
    o.eps = -1;
    XK_EXPECT_INVALID(lamb_step(o, st.tensors(), st.s0.data(), st.s1.data(), 1), "eps=-1");
    o = LambOptions{};
    XK_EXPECT_INVALID(lamb_step(o, st.tensors(), nullptr, st.s1.data(), 1), "exp_avg=null");
    XK_EXPECT_INVALID(lamb_step(o, st.tensors(), st.s0.data(), st.s0.data() + 1, 1), "overlaps");
    XK_EXPECT_INVALID(lamb_step(o, st.tensors(), st.s0.data(), st.s1.data(), 0), "step=0");
    for (int64_t i = 0; i < 33; ++i) ASSERT_EQ(st.p[i], p0[static_cast<size_t>(i)]);

    xk_lamb_options co;
    ASSERT_EQ(xk_lamb_options_init(&co), XK_SUCCESS);
    EXPECT_EQ(co.eps, 1e-6);
    float trust = 0;
    State c1, c2;
    c1.make(100, OptimParamType::f32, DType::f32, 0, 2);
    c2.make(100, OptimParamType::f32, DType::f32, 0, 2);
    ASSERT_EQ(xk_lamb_step(&co, XK_OPTIM_PARAM_F32, 100, c1.p.data(), nullptr, c1.g.data(), c1.s0.data(), c1.s1.data(), 1, &trust),
              XK_SUCCESS)
        << xk_last_error();
    LambOptions d;
    EXPECT_EQ(trust, lamb_step(d, c2.tensors(), c2.s0.data(), c2.s1.data(), 1));
    EXPECT_EQ(0, std::memcmp(c1.p.data(), c2.p.data(), 400));
    EXPECT_EQ(xk_lamb_step(&co, 7, 100, c1.p.data(), nullptr, c1.g.data(), c1.s0.data(), c1.s1.data(), 2, nullptr),
              XK_INVALID_ARGUMENT);
    EXPECT_NE(std::string(xk_last_error()).find("param_type=7"), std::string::npos) << xk_last_error();
    EXPECT_EQ(xk_lamb_step(nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 1, nullptr), XK_INVALID_ARGUMENT);
}
