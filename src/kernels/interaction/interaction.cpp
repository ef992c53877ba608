// DLRM interaction: validation, the scalar reference, registry and entry points.
#include "kernels/interaction/interaction.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/check.hpp"
#include "common/parallel.hpp"

namespace xk::detail {
namespace {

bool span_overlaps(const void* a, int64_t an, const void* b, int64_t bn) {
    if (!a || !b || an <= 0 || bn <= 0) return false;
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(bn) && pb < pa + static_cast<uintptr_t>(an);
}

// Bytes from the first to one past the last element of `rows` rows of `cols` with stride ld.
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t esz) {
    return rows == 0 ? 0 : ((rows - 1) * ld + cols) * esz;
}

float load_elem(const void* p, int64_t i, bool bf) {
    return bf ? bf16::to_float(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}
void store_elem(void* p, int64_t i, float v, bool bf) {
    if (bf) static_cast<uint16_t*>(p)[i] = bf16::from_float(v);
    else static_cast<float*>(p)[i] = v;
}

struct Buf {
    std::string name;
    const void* p;
    int64_t bytes;
    bool written;
};

// Feature pointers / strides: resolved into the call, checked (null, alignment, stride).
void read_features(const char* fn, const InteractionConfig& k, int64_t batch, const void* const* feats,
                   const int64_t* lds, InteractionCall& c, std::vector<Buf>& bufs) {
    const int64_t esz = dtype_size(k.dtype);
    if (batch > 0) check_not_null(fn, "features", feats);
    if (batch == 0) return;  // nothing is read: the pointer arrays are not either (N may be huge)
    c.feat.assign(static_cast<size_t>(k.num_features), nullptr);
    c.ld_feat.assign(static_cast<size_t>(k.num_features), k.dim);
    for (int64_t f = 0; f < k.num_features; ++f) {
        const std::string nm = "features[" + std::to_string(f) + "]";
        const std::string ln = "ld_features[" + std::to_string(f) + "]";
        const int64_t ld = lds ? lds[f] : k.dim;
        check_ld(fn, ln.c_str(), ld, k.dim, "dim");
        checked_mul(fn, (ln + "*batch").c_str(), ld, batch);
        const void* p = feats[f];
        if (batch > 0) check_not_null(fn, nm.c_str(), p);
        if (p && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(esz) != 0)
            fail_arg(fn, nm.c_str(), ptr_str(p), "must be aligned to its element size (" + std::to_string(esz) + " bytes)");
        c.feat[static_cast<size_t>(f)] = p;
        c.ld_feat[static_cast<size_t>(f)] = ld;
        bufs.push_back({nm, p, span(batch, k.dim, ld, esz), false});
    }
}

void check_overlaps(const char* fn, const std::vector<Buf>& bufs) {
    for (size_t i = 0; i < bufs.size(); ++i) {
        if (!bufs[i].written) continue;
        for (size_t j = 0; j < bufs.size(); ++j)
            if (i != j && (j > i || !bufs[j].written) && span_overlaps(bufs[i].p, bufs[i].bytes, bufs[j].p, bufs[j].bytes))
                fail_arg(fn, bufs[i].name.c_str(), ptr_str(bufs[i].p), "overlaps " + bufs[j].name + "=" + ptr_str(bufs[j].p));
    }
}

struct RefInteraction final : InteractionKernel {
    void forward(const InteractionCall& c, int64_t b0, int64_t b1) const override { interaction_forward_reference(c, b0, b1); }
    void backward(const InteractionCall& c, int64_t b0, int64_t b1) const override { interaction_backward_reference(c, b0, b1); }
};

}  // namespace

std::string InteractionConfig::key() const {
    std::ostringstream os;
    os << "n" << num_features << "_d" << dim << "_" << dtype_name(dtype) << (self_interaction ? "_self" : "");
    return os.str();
}

InteractionConfig interaction_validate_desc(const char* fn, const InteractionDesc& d) {
    check_positive(fn, "num_features", d.num_features);
    check_positive(fn, "dim", d.dim);
    check_io_dtype(fn, "dtype", d.dtype);
    // out_dim = dim + N(N+1)/2 must fit (with room for byte counts).
    const int64_t n1 = checked_add(fn, "num_features+1", d.num_features, 1);
    const int64_t nn = checked_mul(fn, "num_features*(num_features+1)", d.num_features, n1);
    checked_add(fn, "dim+pairs", d.dim, nn / 2);
    InteractionConfig k;
    k.num_features = d.num_features;
    k.dim = d.dim;
    k.dtype = d.dtype;
    k.self_interaction = d.self_interaction;
    return k;
}

InteractionCall interaction_validate_forward(const char* fn, const InteractionConfig& k, const InteractionArgs& a) {
    InteractionCall c;
    c.cfg = k;
    check_nonnegative(fn, "batch", a.batch);
    c.batch = a.batch;
    const int64_t esz = dtype_size(k.dtype), od = k.out_dim();
    std::vector<Buf> bufs;
    check_nonnegative(fn, "ld_out", a.ld_out);
    c.ld_out = a.ld_out == 0 ? od : a.ld_out;
    check_ld(fn, "ld_out", c.ld_out, od, "out_dim");
    checked_mul(fn, "batch*ld_out", a.batch, c.ld_out);
    if (a.batch > 0) check_not_null(fn, "out", a.out);
    if (a.out && reinterpret_cast<uintptr_t>(a.out) % static_cast<uintptr_t>(esz) != 0)
        fail_arg(fn, "out", ptr_str(a.out), "must be aligned to its element size (" + std::to_string(esz) + " bytes)");
    c.out = a.out;
    bufs.push_back({"out", a.out, span(a.batch, od, c.ld_out, esz), true});
    read_features(fn, k, a.batch, a.features, a.ld_features, c, bufs);
    check_overlaps(fn, bufs);
    return c;
}

InteractionCall interaction_validate_backward(const char* fn, const InteractionConfig& k, const InteractionBackwardArgs& a) {
    InteractionCall c;
    c.cfg = k;
    check_nonnegative(fn, "batch", a.batch);
    c.batch = a.batch;
    const int64_t esz = dtype_size(k.dtype), od = k.out_dim();
    std::vector<Buf> bufs;
    check_nonnegative(fn, "ld_grad_out", a.ld_grad_out);
    c.ld_grad_out = a.ld_grad_out == 0 ? od : a.ld_grad_out;
    check_ld(fn, "ld_grad_out", c.ld_grad_out, od, "out_dim");
    checked_mul(fn, "batch*ld_grad_out", a.batch, c.ld_grad_out);
    if (a.batch > 0) check_not_null(fn, "grad_out", a.grad_out);
    if (a.grad_out && reinterpret_cast<uintptr_t>(a.grad_out) % static_cast<uintptr_t>(esz) != 0)
        fail_arg(fn, "grad_out", ptr_str(a.grad_out), "must be aligned to its element size (" + std::to_string(esz) + " bytes)");
    c.grad_out = a.grad_out;
    bufs.push_back({"grad_out", a.grad_out, span(a.batch, od, c.ld_grad_out, esz), false});
    if (a.batch > 0) check_not_null(fn, "grad_features", a.grad_features);
    if (a.batch > 0) {
        c.grad.assign(static_cast<size_t>(k.num_features), nullptr);
        c.ld_grad.assign(static_cast<size_t>(k.num_features), k.dim);
        for (int64_t f = 0; f < k.num_features; ++f) {
            const std::string nm = "grad_features[" + std::to_string(f) + "]";
            const std::string ln = "ld_grad_features[" + std::to_string(f) + "]";
            const int64_t ld = a.ld_grad_features ? a.ld_grad_features[f] : k.dim;
            check_ld(fn, ln.c_str(), ld, k.dim, "dim");
            checked_mul(fn, (ln + "*batch").c_str(), ld, a.batch);
            void* p = a.grad_features[f];
            if (a.batch > 0) check_not_null(fn, nm.c_str(), p);
            if (p && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(esz) != 0)
                fail_arg(fn, nm.c_str(), ptr_str(p), "must be aligned to its element size (" + std::to_string(esz) + " bytes)");
            c.grad[static_cast<size_t>(f)] = p;
            c.ld_grad[static_cast<size_t>(f)] = ld;
            bufs.push_back({nm, p, span(a.batch, k.dim, ld, esz), true});
        }
    }
    read_features(fn, k, a.batch, a.features, a.ld_features, c, bufs);
    check_overlaps(fn, bufs);
    return c;
}

void interaction_forward_reference(const InteractionCall& c, int64_t b0, int64_t b1) {
    const int64_t N = c.cfg.num_features, D = c.cfg.dim;
    const bool bf = c.cfg.dtype == DType::bf16;
    const int64_t esz = bf ? 2 : 4;
    for (int64_t b = b0; b < b1; ++b) {
        char* orow = static_cast<char*>(c.out) + b * c.ld_out * esz;
        auto row = [&](int64_t f) { return static_cast<const char*>(c.feat[static_cast<size_t>(f)]) + b * c.ld_feat[static_cast<size_t>(f)] * esz; };
        std::memcpy(orow, row(0), static_cast<size_t>(D * esz));  // exact copy (bf16 bits too)
        int64_t p = D;
        for (int64_t i = 0; i < N; ++i) {
            const int64_t jn = c.cfg.self_interaction ? i + 1 : i;
            for (int64_t j = 0; j < jn; ++j) {
                float s = 0.0f;
                for (int64_t k = 0; k < D; ++k) s += load_elem(row(i), k, bf) * load_elem(row(j), k, bf);
                store_elem(orow, p++, s, bf);
            }
        }
    }
}

void interaction_backward_reference(const InteractionCall& c, int64_t b0, int64_t b1) {
    const int64_t N = c.cfg.num_features, D = c.cfg.dim;
    const bool bf = c.cfg.dtype == DType::bf16;
    const int64_t esz = bf ? 2 : 4;
    const bool self = c.cfg.self_interaction;
    std::vector<float> S(static_cast<size_t>(N * N)), acc(static_cast<size_t>(D));
    for (int64_t b = b0; b < b1; ++b) {
        const char* g = static_cast<const char*>(c.grad_out) + b * c.ld_grad_out * esz;
        auto row = [&](int64_t f) { return static_cast<const char*>(c.feat[static_cast<size_t>(f)]) + b * c.ld_feat[static_cast<size_t>(f)] * esz; };
        int64_t p = D;
        for (int64_t i = 0; i < N; ++i) {
            S[static_cast<size_t>(i * N + i)] = 0.0f;
            const int64_t jn = self ? i + 1 : i;
            for (int64_t j = 0; j < jn; ++j) {
                const float v = load_elem(g, p++, bf);
                if (i == j) S[static_cast<size_t>(i * N + i)] = 2.0f * v;
                else S[static_cast<size_t>(i * N + j)] = S[static_cast<size_t>(j * N + i)] = v;
            }
        }
        for (int64_t i = 0; i < N; ++i) {
            for (int64_t k = 0; k < D; ++k) acc[static_cast<size_t>(k)] = i == 0 ? load_elem(g, k, bf) : 0.0f;
            for (int64_t j = 0; j < N; ++j) {
                const float s = S[static_cast<size_t>(i * N + j)];
                for (int64_t k = 0; k < D; ++k) acc[static_cast<size_t>(k)] += s * load_elem(row(j), k, bf);
            }
            char* o = static_cast<char*>(c.grad[static_cast<size_t>(i)]) + b * c.ld_grad[static_cast<size_t>(i)] * esz;
            for (int64_t k = 0; k < D; ++k) store_elem(o, k, acc[static_cast<size_t>(k)], bf);
        }
    }
}

const Registry<InteractionConfig, InteractionKernel>& interaction_registry() {
    static const Registry<InteractionConfig, InteractionKernel> r(
        "interaction", {
                           {"intrin:avx512", Isa::avx512, nullptr,
                            [](const InteractionConfig& k) { return create_interaction_simd(k, Isa::avx512); }},
                           {"intrin:avx2", Isa::avx2, nullptr,
                            [](const InteractionConfig& k) { return create_interaction_simd(k, Isa::avx2); }},
                           {"ref:scalar", Isa::scalar, nullptr,
                            [](const InteractionConfig&) -> std::shared_ptr<const InteractionKernel> {
                                return std::make_shared<RefInteraction>();
                            }},
                       });
    return r;
}

void interaction_run(const InteractionCall& c, const InteractionKernel& kernel, bool backward) {
    if (c.batch == 0) return;
    // ~64 K multiply-adds per chunk (N^2 D per sample).
    const double per = static_cast<double>(c.cfg.num_features) * static_cast<double>(c.cfg.num_features) *
                       static_cast<double>(c.cfg.dim);
    const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(65536.0 / per));
    parallel_for(c.batch, grain, [&](int64_t b0, int64_t b1) {
        if (backward) kernel.backward(c, b0, b1);
        else kernel.forward(c, b0, b1);
    });
}

}  // namespace xk::detail

namespace xk {

int64_t interaction_out_dim(const InteractionDesc& desc) {
    return detail::interaction_validate_desc("xk::interaction_out_dim", desc).out_dim();
}

struct InteractionPlan::State {
    InteractionDesc d;
    detail::InteractionConfig k;
    const char* impl = nullptr;
    std::shared_ptr<const detail::InteractionKernel> kernel;
};

InteractionPlan::InteractionPlan(const InteractionDesc& desc) {
    auto s = std::make_shared<State>();
    s->d = desc;
    s->k = detail::interaction_validate_desc("xk::InteractionPlan", desc);
    const auto sel = detail::interaction_registry().get(s->k);
    s->impl = sel.impl->name;
    s->kernel = sel.kernel;
    s_ = std::move(s);
}

void InteractionPlan::forward(const InteractionArgs& args) const {
    detail::interaction_run(detail::interaction_validate_forward("xk::InteractionPlan::forward", s_->k, args), *s_->kernel, false);
}
void InteractionPlan::backward(const InteractionBackwardArgs& args) const {
    detail::interaction_run(detail::interaction_validate_backward("xk::InteractionPlan::backward", s_->k, args), *s_->kernel, true);
}
const InteractionDesc& InteractionPlan::desc() const { return s_->d; }
int64_t InteractionPlan::out_dim() const { return s_->k.out_dim(); }
const char* InteractionPlan::impl_name() const { return s_->impl; }

void interaction_forward(const InteractionDesc& desc, const InteractionArgs& args) {
    constexpr const char* fn = "xk::interaction_forward";
    const detail::InteractionConfig k = detail::interaction_validate_desc(fn, desc);
    const detail::InteractionCall c = detail::interaction_validate_forward(fn, k, args);
    detail::interaction_run(c, *detail::interaction_registry().get(k).kernel, false);
}

void interaction_backward(const InteractionDesc& desc, const InteractionBackwardArgs& args) {
    constexpr const char* fn = "xk::interaction_backward";
    const detail::InteractionConfig k = detail::interaction_validate_desc(fn, desc);
    const detail::InteractionCall c = detail::interaction_validate_backward(fn, k, args);
    detail::interaction_run(c, *detail::interaction_registry().get(k).kernel, true);
}

}  // namespace xk
