// libFuzzer target: the fused optimizer steps of the C API (include/xk/c/optim.h, semantics of
// xk/optim.hpp). See fuzz_common.hpp for the scheme. Calls:
//   xk_sgd_step (momentum, dampening, nesterov, weight decay, maximize), xk_adam_step (AdamW,
//     amsgrad, maximize), xk_adagrad_step (lr_decay, weight decay), xk_lamb_step, on f32 or split
//     bf16 parameters, n = 0 .. 300 (vector bodies and tails), element-misaligned buffers, 1..3
//     consecutive steps, values up to 1e3 and some NaN / inf; valid ones must equal the same call
//     with the cap at scalar (the reference) bit for bit (NaN = NaN; Lamb: to 1e-5, its trust
//     ratio's double sums are in another order), and a first step of each from zero states is
//     checked against a double loop of the documented formula;
//   hostile ones (n negative or overflowing, a null buffer, param_lo with f32 params, unknown
//     param_type, hyper-parameters out of range or NaN, nesterov without momentum, step 0, a state
//     over the parameters, misalignment, null options) rejected with every buffer as it was;
//   xk_*_options_init, ISA cap and thread count changes.
#include <algorithm>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

enum Kind { kSgd, kAdam, kAdagrad, kLamb };
const char* const kFn[] = {"xk_sgd_step", "xk_adam_step", "xk_adagrad_step", "xk_lamb_step"};

struct Opts {
    xk_sgd_options sgd{};
    xk_adam_options adam{};
    xk_adagrad_options ada{};
    xk_lamb_options lamb{};
};

struct State {
    int64_t n = 0;
    bool split = false;
    Buf<float> p, g, s0, s1, s2;
    Buf<uint16_t> hi, lo;
    bool same_as(const State& o, double rtol) const {
        auto eq = [&](float a, float b) {
            if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
            return rtol == 0 ? std::memcmp(&a, &b, 4) == 0 : fz::close(a, b, rtol, 1e-30);
        };
        for (int64_t i = 0; i < n; ++i) {
            if (!eq(master(i), o.master(i)) || !eq(s0[i], o.s0[i]) || !eq(s1[i], o.s1[i]) || !eq(s2[i], o.s2[i]))
                return false;
        }
        return true;
    }
    float master(int64_t i) const {
        if (!split) return p[i];
        const uint32_t u = (static_cast<uint32_t>(hi[i]) << 16) | lo[i];
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    }
    void* param() { return split ? static_cast<void*>(hi.data()) : p.data(); }
    uint16_t* param_lo() { return split ? lo.data() : nullptr; }
};

State make_state(In& in, int64_t n, bool split, bool nonfinite) {
    State s;
    s.n = n;
    s.split = split;
    const size_t mis = in.pick(3), un = static_cast<size_t>(n);
    s.p = Buf<float>(un, mis);
    s.g = Buf<float>(un, (mis + 1) % 3);
    s.s0 = Buf<float>(un, mis);
    s.s1 = Buf<float>(un, (mis + 2) % 3);
    s.s2 = Buf<float>(un, mis);
    s.hi = Buf<uint16_t>(un, mis);
    s.lo = Buf<uint16_t>(un, (mis + 1) % 3);
    fz::Values vals(in, un * 2);
    for (int64_t i = 0; i < n; ++i) {
        const float v = nonfinite ? vals().any_value(1e3f) : vals().value(1e3f);
        s.p[i] = v;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        s.hi[i] = static_cast<uint16_t>(u >> 16);
        s.lo[i] = static_cast<uint16_t>(u);
        s.g[i] = nonfinite ? vals().any_value(1e3f) : vals().value(1e3f);
        s.s0[i] = s.s1[i] = s.s2[i] = 0.0f;
    }
    return s;
}

Opts make_opts(In& in) {
    Opts o;
    xk_sgd_options_init(&o.sgd);
    xk_adam_options_init(&o.adam);
    xk_adagrad_options_init(&o.ada);
    xk_lamb_options_init(&o.lamb);
    static const double lrs[] = {0, 1e-3, 0.1, 1.0};
    o.sgd.lr = o.adam.lr = o.ada.lr = o.lamb.lr = lrs[in.pick(4)];
    const double wd = in.coin() ? 0.0 : 1e-2;
    o.sgd.momentum = in.coin() ? 0.0 : 0.9;
    o.sgd.nesterov = o.sgd.momentum != 0 && in.coin();
    o.sgd.dampening = o.sgd.nesterov || in.coin() ? 0.0 : 0.1;
    o.sgd.weight_decay = o.adam.weight_decay = o.ada.weight_decay = o.lamb.weight_decay = wd;
    o.sgd.maximize = o.adam.maximize = o.ada.maximize = in.coin();
    o.adam.adamw = in.coin();
    o.adam.amsgrad = in.coin();
    o.ada.lr_decay = in.coin() ? 0.0 : 0.01;
    return o;
}

// The arguments of one call (defaults: the state's own buffers, as the options need them).
struct Call {
    const xk_sgd_options* so;
    const xk_adam_options* ao;
    const xk_adagrad_options* go;
    const xk_lamb_options* lo;
    int pt;
    int64_t n, step;
    void* param;
    uint16_t* plo;
    float *st0, *st1, *st2;
    bool null_opts = false;
};
Call call_of(const Opts& o, State& s, int64_t n, int64_t step) {
    return Call{&o.sgd, &o.adam, &o.ada, &o.lamb, s.split ? XK_OPTIM_PARAM_BF16_SPLIT : XK_OPTIM_PARAM_F32, n, step,
                s.param(), s.param_lo(), s.s0.data(), s.s1.data(),
                o.adam.amsgrad ? s.s2.data() : nullptr};
}
xk_status call(Kind k, const Call& c, const float* g) {
    switch (k) {
        case kSgd: return xk_sgd_step(c.null_opts ? nullptr : c.so, c.pt, c.n, c.param, c.plo, g, c.st0, c.step);
        case kAdam: return xk_adam_step(c.null_opts ? nullptr : c.ao, c.pt, c.n, c.param, c.plo, g, c.st0, c.st1, c.st2, c.step);
        case kAdagrad: return xk_adagrad_step(c.null_opts ? nullptr : c.go, c.pt, c.n, c.param, c.plo, g, c.st0, c.step);
        default: return xk_lamb_step(c.null_opts ? nullptr : c.lo, c.pt, c.n, c.param, c.plo, g, c.st0, c.st1, c.step, nullptr);
    }
}
xk_status call(Kind k, const Opts& o, State& s, int64_t n, int64_t step) {
    Call c = call_of(o, s, n, step);
    if (o.sgd.momentum == 0 && k == kSgd) c.st0 = nullptr;
    return call(k, c, s.g.data());
}

// Lamb's first-step direction u of element (p, g) in double.
double lamb_u(const Opts& o, double p, double g) {
    const double m = (1 - o.lamb.beta1) * g, v = (1 - o.lamb.beta2) * g * g;
    return (m / (1 - o.lamb.beta1)) / (std::sqrt(v / (1 - o.lamb.beta2)) + o.lamb.eps) + o.lamb.weight_decay * p;
}

// The first step from zero states of element i, in double (the headers' formulas); Lamb's trust
// ratio is given.
double first_step(Kind k, const Opts& o, double p, double g, double trust) {
    switch (k) {
        case kSgd: {
            if (o.sgd.maximize) g = -g;
            g += o.sgd.weight_decay * p;
            if (o.sgd.momentum != 0 && o.sgd.nesterov) g = g + o.sgd.momentum * g;
            return p - o.sgd.lr * g;
        }
        case kAdam: {
            if (o.adam.maximize) g = -g;
            if (o.adam.adamw) p *= 1 - o.adam.lr * o.adam.weight_decay;
            else g += o.adam.weight_decay * p;
            const double m = (1 - o.adam.beta1) * g, v = (1 - o.adam.beta2) * g * g;
            return p - o.adam.lr / (1 - o.adam.beta1) * m / (std::sqrt(v) / std::sqrt(1 - o.adam.beta2) + o.adam.eps);
        }
        case kAdagrad: {
            if (o.ada.maximize) g = -g;
            g += o.ada.weight_decay * p;
            return p - o.ada.lr * g / (std::sqrt(g * g) + o.ada.eps);
        }
        default: {
            // The header: lr * trust rounded to f32 once (inf when it overflows, as PyTorch's
            // add_(u, alpha=-lr * trust) on a float tensor).
            const double coef = static_cast<float>(o.lamb.lr * trust);
            return p - coef * lamb_u(o, p, g);
        }
    }
}

void op_valid(In& in) {
    const Kind k = static_cast<Kind>(in.pick(4));
    const char* what = kFn[k];
    const int64_t n = in.dim(0, 300);
    const bool split = in.coin(), nonfinite = in.pick(8) == 7;
    const Opts o = make_opts(in);
    State s = make_state(in, n, split, nonfinite);
    State r = s;
    const State s0 = s;
    const int steps = 1 + in.pick(3);
    const auto& isas = fz::isas();
    xk_isa cap = isas.back();
    xk_get_max_isa(&cap);
    for (int64_t step = 1; step <= steps; ++step) {
        fz::expect_ok(fz::timed(what, [&] { return call(k, o, s, n, step); }), what);
        fz::set_cap(XK_ISA_SCALAR);
        fz::expect_ok(fz::timed(what, [&] { return call(k, o, r, n, step); }), what);
        fz::set_cap(cap);
        if (!s.same_as(r, k == kLamb ? 1e-5 : 0.0))
            fz::finding("%s: n=%lld split=%d step=%lld: the result differs from the scalar reference's", what, (long long)n, split,
                        (long long)step);
        for (const auto* b : {&s.p, &s.g, &s.s0, &s.s1, &s.s2}) fz::expect_guards(*b, what, "a buffer");
        fz::expect_guards(s.hi, what, "param"), fz::expect_guards(s.lo, what, "param_lo");
        // (Lamb normalises the update by ||u||: with gradients in the f32 denormal range, m's
        // rounding there changes u by up to ~1 %, so its oracle check needs normal gradients.)
        bool tiny_g = false;
        for (int64_t i = 0; i < n; ++i) tiny_g = tiny_g || (s0.g[i] != 0 && std::fabs(s0.g[i]) < 1e-30f);
        if (step == 1 && !nonfinite && !(k == kLamb && tiny_g)) {
            double trust = 1;
            if (k == kLamb) {
                double pn = 0, un = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const double p = s0.master(i), u = lamb_u(o, p, s0.g[i]);
                    pn += p * p, un += u * u;
                }
                trust = pn > 0 && un > 0 ? std::sqrt(pn) / std::sqrt(un) : 1.0;
            }
            for (int64_t i = 0; i < n; ++i) {
                const double p = s0.master(i), want = first_step(k, o, p, s0.g[i], trust);
                // f32 evaluation: a few ulps of p and of the update (g up to 1e3, wd * p ...).
                const double tol = 1e-5 * (std::fabs(p) + std::fabs(want - p)) + 1e-30;
                if (!fz::close(s.master(i), want, 0, tol))
                    fz::finding("%s: n=%lld split=%d: first step of element %lld = %.9g, want %.9g (p %.9g g %.9g)", what,
                                (long long)n, split, (long long)i, (double)s.master(i), want, p, (double)s0.g[i]);
            }
        }
        for (int64_t i = 0; i < n; ++i) s.g[i] = r.g[i] = in.value(1e3f);
    }
}

void op_hostile(In& in) {
    const Kind k = static_cast<Kind>(in.pick(4));
    const char* what = kFn[k];
    const int64_t n = in.dim(1, 40);
    State s = make_state(in, n, in.coin(), false);
    Opts o = make_opts(in);
    Call c = call_of(o, s, n, 1 + in.pick(3));
    if (k == kSgd && o.sgd.momentum == 0) c.st0 = nullptr;
    const char* wrong;
    static const double bad[] = {-1e-3, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()};
    const double b = bad[in.pick(5)];
    switch (in.pick(10)) {
        case 0: {
            static const int64_t v[] = {-1, -7, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                        int64_t(1) << 62};
            c.n = v[in.pick(5)];
            wrong = "n negative or overflowing";
            break;
        }
        case 1: c.pt = in.bad_enum(2); wrong = "param_type"; break;
        case 2:
            if (s.split) c.plo = nullptr, wrong = "param_lo null with split params";
            else c.plo = s.lo.data(), wrong = "param_lo with f32 params";
            break;
        case 3:
            o.sgd.lr = o.adam.lr = o.ada.lr = o.lamb.lr = b;
            wrong = "lr";
            break;
        case 4:
            if (k == kAdam || k == kLamb) {
                const double v = in.coin() ? 1.0 + in.pick(2) : b;
                if (in.coin()) o.adam.beta1 = o.lamb.beta1 = v;
                else o.adam.beta2 = o.lamb.beta2 = v;
                wrong = "beta";
            } else if (k == kSgd) {
                if (in.coin()) {
                    o.sgd.momentum = b, o.sgd.nesterov = 0;
                    c.st0 = s.s0.data();
                } else {
                    o.sgd.nesterov = 1, o.sgd.momentum = in.coin() ? 0.0 : 0.9, o.sgd.dampening = o.sgd.momentum != 0 ? 0.5 : 0.0;
                    c.st0 = o.sgd.momentum != 0 ? s.s0.data() : nullptr;
                }
                wrong = "momentum / nesterov";
            } else {
                o.ada.lr_decay = b;
                wrong = "lr_decay";
            }
            break;
        case 5: c.step = in.coin() ? 0 : -1 - in.pick(100); wrong = "step < 1"; break;
        case 6:
            o.sgd.weight_decay = o.adam.weight_decay = o.ada.weight_decay = o.lamb.weight_decay = b;
            wrong = "weight_decay";
            break;
        case 7:
            if (k != kSgd || o.sgd.momentum != 0) {
                c.st0 = s.split ? reinterpret_cast<float*>(s.hi.data()) : s.p.data();
                wrong = "a state over the parameters";
            } else {
                c.st0 = s.s0.data();
                wrong = "momentum_buffer without momentum";
            }
            break;
        case 8:
            if (k == kAdam || k == kLamb) c.st1 = nullptr, wrong = "exp_avg_sq null";
            else c.param = nullptr, wrong = "param null";
            break;
        default:
            if (!s.split && in.coin()) {
                c.param = reinterpret_cast<char*>(s.p.data()) + 2;
                wrong = "param misaligned";
            } else {
                c.null_opts = true;
                wrong = "options null";
            }
            break;
    }
    const std::vector<unsigned char> bp = s.p.snapshot(), bh = s.hi.snapshot(), bl = s.lo.snapshot(), b0 = s.s0.snapshot(),
                                     b1 = s.s1.snapshot(), b2 = s.s2.snapshot();
    const xk_status st = fz::timed(what, [&] { return call(k, c, s.g.data()); });
    fz::expect_rejected(st, what, wrong);
    fz::expect_unchanged(s.p, bp, what, "param");
    fz::expect_unchanged(s.hi, bh, what, "param (bf16 top halves)");
    fz::expect_unchanged(s.lo, bl, what, "param_lo");
    fz::expect_unchanged(s.s0, b0, what, "state 0");
    fz::expect_unchanged(s.s1, b1, what, "state 1");
    fz::expect_unchanged(s.s2, b2, what, "state 2");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 12 && in.more(); ++calls) {
        switch (in.pick(8)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: {
                const int t = 1 + in.pick(2);
                fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(t); }), "xk_set_num_threads");
                break;
            }
            case 2: case 3: op_hostile(in); break;
            default: op_valid(in); break;
        }
    }
    return 0;
}
