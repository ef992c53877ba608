#include <algorithm>
// Fused optimizer steps: validation, the scalar reference, registry and entry points.
#include "kernels/optim/optim.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "common/streaming.hpp"

namespace xk::detail {
namespace {

const char* kind_name(OptimKind k) {
    switch (k) {
        case OptimKind::sgd: return "sgd";
        case OptimKind::adam: return "adam";
        case OptimKind::adagrad: return "adagrad";
        case OptimKind::lamb: return "lamb";
    }
    return "?";
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
    if (!a || !b || a_bytes <= 0 || b_bytes <= 0) return false;
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

void check_aligned(const char* fn, const char* arg, const void* p, int64_t align) {
    if (p && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) != 0)
        fail_arg(fn, arg, ptr_str(p), "must be aligned to its element size (" + std::to_string(align) + " bytes)");
}

std::string num(double v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

void check_hyper(const char* fn, const char* arg, double v, double lo, bool lo_open, double hi, bool hi_open) {
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok) {
        std::string range = std::string(lo_open ? "(" : "[") + num(lo) + ", " +
                            (std::isinf(hi) ? std::string("inf") : num(hi)) + (hi_open ? ")" : "]");
        fail_arg(fn, arg, num(v), "must be in " + range);
    }
}

constexpr double kInf = INFINITY;

// Tensors and states: sizes, enums, pointers, alignment, no written buffer overlapping another
// buffer. states: (name, pointer) of the f32[n] states the step writes.
OptimCall base_call(const char* fn, OptimKind kind, const OptimTensors& t,
                    std::initializer_list<std::pair<const char*, float*>> states, int64_t step) {
    OptimCall c;
    c.cfg.kind = kind;
    c.t = t;
    check_nonnegative(fn, "n", t.n);
    checked_mul(fn, "n*4", t.n, 4);
    const int pt = static_cast<int>(t.param_type);
    if (pt < 0 || pt > 1) fail_arg(fn, "param_type", std::to_string(pt), "is not a valid value (valid: f32=0, bf16_split=1)");
    const int gd = static_cast<int>(t.grad_dtype);
    if (gd < 0 || gd > static_cast<int>(DType::f16)) fail_arg(fn, "grad_dtype", std::to_string(gd), "is not a valid DType");
    if (t.grad_dtype != DType::f32 && t.grad_dtype != DType::bf16)
        fail(Status::unsupported, std::string(fn) + ": grad_dtype=" + dtype_name(t.grad_dtype) +
                                      " is not supported (supported: f32, bf16)");
    c.cfg.param_type = t.param_type;
    c.cfg.grad_dtype = t.grad_dtype;
    if (step < 1) fail_arg(fn, "step", std::to_string(step), "must be >= 1 (the step being taken, counted from 1)");
    const bool split = t.param_type == OptimParamType::bf16_split;
    if (!split && t.param_lo)
        fail_arg(fn, "param_lo", ptr_str(t.param_lo), "must be null unless param_type is bf16_split");
    struct Buf {
        const char* name;
        const void* p;
        int64_t bytes;
        bool written;
    };
    std::vector<Buf> bufs;
    bufs.push_back({"param", t.param, t.n * (split ? 2 : 4), true});
    if (split) bufs.push_back({"param_lo", t.param_lo, t.n * 2, true});
    bufs.push_back({"grad", t.grad, t.n * dtype_size(t.grad_dtype), false});
    for (const auto& s : states) bufs.push_back({s.first, s.second, t.n * 4, true});
    if (t.n > 0)
        for (const Buf& b : bufs) check_not_null(fn, b.name, b.p);
    check_aligned(fn, "param", t.param, split ? 2 : 4);
    check_aligned(fn, "param_lo", t.param_lo, 2);
    check_aligned(fn, "grad", t.grad, dtype_size(t.grad_dtype));
    for (const auto& s : states) check_aligned(fn, s.first, s.second, 4);
    for (size_t i = 0; i < bufs.size(); ++i)
        for (size_t j = 0; j < bufs.size(); ++j)
            if (i != j && bufs[i].written && (j > i || !bufs[j].written) &&
                overlaps(bufs[i].p, bufs[i].bytes, bufs[j].p, bufs[j].bytes))
                fail_arg(fn, bufs[i].name, ptr_str(bufs[i].p), std::string("overlaps ") + bufs[j].name + "=" + ptr_str(bufs[j].p));
    return c;
}

struct RefOptim final : OptimKernel {
    void run(const OptimCall& c, int64_t i0, int64_t i1) const override { optim_reference(c, i0, i1); }
};

}  // namespace

std::string OptimConfig::key() const {
    std::ostringstream os;
    os << kind_name(kind) << "_" << (param_type == OptimParamType::bf16_split ? "bf16split" : "f32") << "_g"
       << dtype_name(grad_dtype);
    return os.str();
}

namespace {
inline float load_param(const OptimCall& c, int64_t i) {
    if (c.cfg.param_type == OptimParamType::bf16_split) {
        const uint32_t u = (static_cast<uint32_t>(static_cast<const uint16_t*>(c.t.param)[i]) << 16) | c.t.param_lo[i];
        float p;
        std::memcpy(&p, &u, 4);
        return p;
    }
    return static_cast<const float*>(c.t.param)[i];
}
inline float load_grad(const OptimCall& c, int64_t i) {
    return c.cfg.grad_dtype == DType::bf16 ? bf16::to_float(static_cast<const uint16_t*>(c.t.grad)[i])
                                           : static_cast<const float*>(c.t.grad)[i];
}
// Lamb's update direction from the updated m, v and the old p.
inline float lamb_u(const OptimCall& c, float m, float v, float p) {
    float u = (m / c.bc1) / (std::sqrt(v / c.bc2) + c.eps);
    if (c.has_wd) u = u + c.wd * p;
    return u;
}
}  // namespace

void optim_lamb_norms_reference(const OptimCall& c, int64_t i0, int64_t i1, double* p2, double* u2) {
    double sp = 0, su = 0;
    for (int64_t i = i0; i < i1; ++i) {
        const float p = load_param(c, i), g = load_grad(c, i);
        const float m = c.beta1 * c.s0[i] + c.one_minus_beta1 * g;
        const float v = c.beta2 * c.s1[i] + c.one_minus_beta2 * (g * g);
        c.s0[i] = m;
        c.s1[i] = v;
        const float u = lamb_u(c, m, v, p);
        sp += static_cast<double>(p) * static_cast<double>(p);
        su += static_cast<double>(u) * static_cast<double>(u);
    }
    *p2 += sp;
    *u2 += su;
}

void optim_reference(const OptimCall& c, int64_t i0, int64_t i1) {
    const bool split = c.cfg.param_type == OptimParamType::bf16_split;
    for (int64_t i = i0; i < i1; ++i) {
        float p;
        if (split) {
            const uint32_t u = (static_cast<uint32_t>(static_cast<const uint16_t*>(c.t.param)[i]) << 16) | c.t.param_lo[i];
            std::memcpy(&p, &u, 4);
        } else {
            p = static_cast<const float*>(c.t.param)[i];
        }
        float g = c.cfg.grad_dtype == DType::bf16 ? bf16::to_float(static_cast<const uint16_t*>(c.t.grad)[i])
                                                  : static_cast<const float*>(c.t.grad)[i];
        if (c.maximize) g = -g;
        switch (c.cfg.kind) {
            case OptimKind::sgd: {
                if (c.has_wd) g = g + c.wd * p;
                if (c.has_momentum) {
                    float b;
                    if (c.first) b = g;
                    else {
                        const float mb = c.momentum * c.s0[i];
                        b = mb + c.one_minus_dampening * g;
                    }
                    c.s0[i] = b;
                    if (c.nesterov) g = g + c.momentum * b;
                    else g = b;
                }
                p = p - c.lr * g;
                break;
            }
            case OptimKind::adam: {
                if (c.adamw) p = p * c.decay;
                else if (c.has_wd) g = g + c.wd * p;
                float m = c.s0[i];
                m = m + c.one_minus_beta1 * (g - m);
                c.s0[i] = m;
                const float bv = c.beta2 * c.s1[i];
                float v = bv + c.one_minus_beta2 * (g * g);
                c.s1[i] = v;
                if (c.amsgrad) {
                    const float vm = c.s2[i];
                    v = v > vm ? v : vm;
                    c.s2[i] = v;
                }
                const float denom = std::sqrt(v) / c.bc2_sqrt + c.eps;
                p = p - c.step_size * (m / denom);
                break;
            }
            case OptimKind::lamb: {  // the second pass: m, v already updated
                p = p - c.lamb_coef * lamb_u(c, c.s0[i], c.s1[i], p);
                break;
            }
            case OptimKind::adagrad: {
                if (c.has_wd) g = g + c.wd * p;
                const float s = c.s0[i] + g * g;
                c.s0[i] = s;
                p = p - c.lr * (g / (std::sqrt(s) + c.eps));
                break;
            }
        }
        if (split) {
            uint32_t u;
            std::memcpy(&u, &p, 4);
            static_cast<uint16_t*>(c.t.param)[i] = static_cast<uint16_t>(u >> 16);
            c.t.param_lo[i] = static_cast<uint16_t>(u & 0xFFFFu);
        } else {
            static_cast<float*>(c.t.param)[i] = p;
        }
    }
}

OptimCall optim_sgd_call(const char* fn, const SgdOptions& o, const OptimTensors& t, float* buf, int64_t step) {
    check_hyper(fn, "lr", o.lr, 0, false, kInf, true);
    check_hyper(fn, "momentum", o.momentum, 0, false, kInf, true);
    check_hyper(fn, "dampening", o.dampening, -kInf, false, kInf, true);
    check_hyper(fn, "weight_decay", o.weight_decay, 0, false, kInf, true);
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        fail_arg(fn, "nesterov", "true", "requires momentum > 0 and dampening = 0 (as in PyTorch)");
    if (o.momentum == 0 && buf)
        fail_arg(fn, "momentum_buffer", ptr_str(buf), "must be null when momentum = 0");
    OptimCall c = o.momentum != 0 ? base_call(fn, OptimKind::sgd, t, {{"momentum_buffer", buf}}, step)
                                  : base_call(fn, OptimKind::sgd, t, {}, step);
    c.s0 = buf;
    c.maximize = o.maximize;
    c.first = step == 1;
    c.nesterov = o.nesterov;
    c.has_wd = o.weight_decay != 0;
    c.has_momentum = o.momentum != 0;
    c.lr = static_cast<float>(o.lr);
    c.wd = static_cast<float>(o.weight_decay);
    c.momentum = static_cast<float>(o.momentum);
    c.one_minus_dampening = static_cast<float>(1.0 - o.dampening);
    return c;
}

OptimCall optim_adam_call(const char* fn, const AdamOptions& o, const OptimTensors& t, float* m, float* v, float* vmax,
                          int64_t step) {
    check_hyper(fn, "lr", o.lr, 0, false, kInf, true);
    check_hyper(fn, "beta1", o.beta1, 0, false, 1, true);
    check_hyper(fn, "beta2", o.beta2, 0, false, 1, true);
    check_hyper(fn, "eps", o.eps, 0, false, kInf, true);
    check_hyper(fn, "weight_decay", o.weight_decay, 0, false, kInf, true);
    if (!o.amsgrad && vmax) fail_arg(fn, "max_exp_avg_sq", ptr_str(vmax), "must be null unless amsgrad");
    OptimCall c = o.amsgrad ? base_call(fn, OptimKind::adam, t, {{"exp_avg", m}, {"exp_avg_sq", v}, {"max_exp_avg_sq", vmax}}, step)
                            : base_call(fn, OptimKind::adam, t, {{"exp_avg", m}, {"exp_avg_sq", v}}, step);
    c.s0 = m;
    c.s1 = v;
    c.s2 = vmax;
    c.maximize = o.maximize;
    c.amsgrad = o.amsgrad;
    c.adamw = o.adamw;
    c.has_wd = o.weight_decay != 0;
    c.wd = static_cast<float>(o.weight_decay);
    c.decay = static_cast<float>(1.0 - o.lr * o.weight_decay);
    c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
    c.beta2 = static_cast<float>(o.beta2);
    c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    const double s = static_cast<double>(step);
    c.step_size = static_cast<float>(o.lr / (1.0 - std::pow(o.beta1, s)));
    c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, s)));
    c.eps = static_cast<float>(o.eps);
    return c;
}

OptimCall optim_adagrad_call(const char* fn, const AdagradOptions& o, const OptimTensors& t, float* sum, int64_t step) {
    check_hyper(fn, "lr", o.lr, 0, false, kInf, true);
    check_hyper(fn, "lr_decay", o.lr_decay, 0, false, kInf, true);
    check_hyper(fn, "weight_decay", o.weight_decay, 0, false, kInf, true);
    check_hyper(fn, "eps", o.eps, 0, false, kInf, true);
    OptimCall c = base_call(fn, OptimKind::adagrad, t, {{"state_sum", sum}}, step);
    c.s0 = sum;
    c.maximize = o.maximize;
    c.has_wd = o.weight_decay != 0;
    c.wd = static_cast<float>(o.weight_decay);
    c.lr = static_cast<float>(o.lr / (1.0 + static_cast<double>(step - 1) * o.lr_decay));
    c.eps = static_cast<float>(o.eps);
    return c;
}

OptimCall optim_lamb_call(const char* fn, const LambOptions& o, const OptimTensors& t, float* m, float* v, int64_t step) {
    check_hyper(fn, "lr", o.lr, 0, false, kInf, true);
    check_hyper(fn, "beta1", o.beta1, 0, false, 1, true);
    check_hyper(fn, "beta2", o.beta2, 0, false, 1, true);
    check_hyper(fn, "eps", o.eps, 0, false, kInf, true);
    check_hyper(fn, "weight_decay", o.weight_decay, 0, false, kInf, true);
    OptimCall c = base_call(fn, OptimKind::lamb, t, {{"exp_avg", m}, {"exp_avg_sq", v}}, step);
    c.s0 = m;
    c.s1 = v;
    c.has_wd = o.weight_decay != 0;
    c.wd = static_cast<float>(o.weight_decay);
    c.beta1 = static_cast<float>(o.beta1);
    c.one_minus_beta1 = static_cast<float>(1.0 - o.beta1);
    c.beta2 = static_cast<float>(o.beta2);
    c.one_minus_beta2 = static_cast<float>(1.0 - o.beta2);
    const double s = static_cast<double>(step);
    c.bc1 = static_cast<float>(1.0 - std::pow(o.beta1, s));
    c.bc2 = static_cast<float>(1.0 - std::pow(o.beta2, s));
    c.eps = static_cast<float>(o.eps);
    c.lr = static_cast<float>(o.lr);
    return c;
}

const Registry<OptimConfig, OptimKernel>& optim_registry() {
    static const Registry<OptimConfig, OptimKernel> r(
        "optim", {
                     {"intrin:avx512", Isa::avx512, nullptr,
                      [](const OptimConfig& k) { return create_optim_simd(k, Isa::avx512); }},
                     {"intrin:avx2", Isa::avx2, nullptr, [](const OptimConfig& k) { return create_optim_simd(k, Isa::avx2); }},
                     {"ref:scalar", Isa::scalar, nullptr,
                      [](const OptimConfig&) -> std::shared_ptr<const OptimKernel> { return std::make_shared<RefOptim>(); }},
                 });
    return r;
}

namespace {
int64_t env_int(const char* name, int64_t dflt) {
    const char* e = std::getenv(name);
    return e && *e ? std::strtoll(e, nullptr, 10) : dflt;
}
bool aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }
// The streaming / prefetch choices of one call (OptimCall::nt, prefetch_bytes).
OptimCall with_stores(const OptimCall& c0) {
    static const int64_t nt_env = env_int("XK_OPTIM_NT", -1), pf_env = env_int("XK_OPTIM_PF", 0);
    OptimCall c = c0;
    const bool split = c.cfg.param_type == OptimParamType::bf16_split;
    int64_t written = c.t.n * 4;  // param (or its two halves)
    bool aligned = aligned64(c.t.param) && (!split || aligned64(c.t.param_lo));
    for (const float* s : {c.s0, c.s1, c.s2})
        if (s) {
            written += c.t.n * 4;
            aligned = aligned && aligned64(s);
        }
    // Streaming stores are opt-in: on the device Xeon (1e8 params, AdamW) they ran 78 % of the
    // copy at 1 thread (regular stores 77 %) but 70 % at 16 (regular 99 %): p, m, v are read
    // first, so no read-for-ownership is saved, and the streamed lines leave the cache.
    c.nt = aligned && nt_env > 0 && use_nt_stores(written);
    c.prefetch_bytes = pf_env > 0 ? pf_env : 0;
    return c;
}
}  // namespace

void run_optim(const OptimCall& c_in, const OptimKernel* kernel) {
    const OptimCall c = with_stores(c_in);
    std::shared_ptr<const OptimKernel> sel;
    if (!kernel) {
        sel = optim_registry().get(c.cfg).kernel;
        kernel = sel.get();
    }
    // Chunks of >= 64 Ki elements (~1 MiB of traffic), boundaries on 64-element multiples.
    const int64_t blocks = (c.t.n + 63) / 64;
    parallel_for(blocks, 1024, [&](int64_t b0, int64_t b1) {
        kernel->run(c, b0 * 64, std::min(c.t.n, b1 * 64));
    });
}

float run_lamb(const OptimCall& c_in, const OptimKernel* kernel) {
    const OptimCall c0 = with_stores(c_in);
    std::shared_ptr<const OptimKernel> sel;
    if (!kernel) {
        sel = optim_registry().get(c0.cfg).kernel;
        kernel = sel.get();
    }
    // Fixed 64 Ki-element chunks, their sums added in chunk order (independent of the threads).
    constexpr int64_t kChunk = 65536;
    const int64_t chunks = (c0.t.n + kChunk - 1) / kChunk;
    std::vector<double> p2(static_cast<size_t>(chunks), 0.0), u2(static_cast<size_t>(chunks), 0.0);
    parallel_for(chunks, 1, [&](int64_t k0, int64_t k1) {
        for (int64_t k = k0; k < k1; ++k)
            kernel->lamb_norms(c0, k * kChunk, std::min(c0.t.n, (k + 1) * kChunk), &p2[static_cast<size_t>(k)],
                               &u2[static_cast<size_t>(k)]);
    });
    double sp = 0, su = 0;
    for (int64_t k = 0; k < chunks; ++k) {
        sp += p2[static_cast<size_t>(k)];
        su += u2[static_cast<size_t>(k)];
    }
    const double wn = std::sqrt(sp), un = std::sqrt(su);
    const double trust = (wn > 0 && un > 0) ? wn / un : 1.0;
    OptimCall c = c0;
    c.lamb_coef = static_cast<float>(static_cast<double>(c0.lr) * trust);
    run_optim(c, kernel);
    return static_cast<float>(trust);
}

}  // namespace xk::detail

namespace xk {

float lamb_step(const LambOptions& o, const OptimTensors& t, float* exp_avg, float* exp_avg_sq, int64_t step) {
    return detail::run_lamb(detail::optim_lamb_call("xk::lamb_step", o, t, exp_avg, exp_avg_sq, step));
}

void sgd_step(const SgdOptions& o, const OptimTensors& t, float* momentum_buffer, int64_t step) {
    detail::run_optim(detail::optim_sgd_call("xk::sgd_step", o, t, momentum_buffer, step));
}

void adam_step(const AdamOptions& o, const OptimTensors& t, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq,
               int64_t step) {
    detail::run_optim(detail::optim_adam_call("xk::adam_step", o, t, exp_avg, exp_avg_sq, max_exp_avg_sq, step));
}

void adagrad_step(const AdagradOptions& o, const OptimTensors& t, float* state_sum, int64_t step) {
    detail::run_optim(detail::optim_adagrad_call("xk::adagrad_step", o, t, state_sum, step));
}

}  // namespace xk
