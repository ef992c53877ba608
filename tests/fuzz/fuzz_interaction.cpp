// libFuzzer target: the DLRM interaction of the C API (include/xk/c/interaction.h, semantics of
// xk/interaction.hpp). See fuzz_common.hpp for the scheme. Calls:
//   xk_interaction_forward / xk_interaction_backward, f32 and bf16, diagonal on and off, 1..7
//     features of dim 1..40, batch 0..5, padded feature / output strides (0 = packed), element-
//     misaligned buffers, values up to 1e15 (products up to 1e30: no f32 overflow) and some NaN /
//     inf; valid ones checked against a double loop of the header's formulas (a few ulps of the
//     sum of |terms|, plus one bf16 rounding), the output's row padding untouched;
//   hostile ones (one argument wrong: sizes, dtype enum, strides, null pointers, an output over an
//     input or over another output, misalignment) rejected with every output byte as it was;
//   xk_interaction_out_dim, huge num_features with batch 0 (quick: nothing is read);
//   ISA cap and thread count changes.
#include <algorithm>

#include "fuzz_common.hpp"

namespace {

using fz::Buf;
using fz::In;

constexpr float kBig = 1e15f;

struct Problem {
    xk_interaction_desc d{};
    bool bf = false;
    int64_t N = 1, D = 1, B = 0, od = 1, ldo = 1;
    std::vector<int64_t> ld;  // feature strides (as passed: 0 never, since NULL means all D)
    bool ld_null = false;
    std::vector<Buf<unsigned char>> feat, grad;
    Buf<unsigned char> out, gout;
    std::vector<const void*> fp;
    std::vector<void*> gp;
    int64_t es() const { return bf ? 2 : 4; }
    double get(const Buf<unsigned char>& b, int64_t i) const {
        if (bf) {
            uint16_t h;
            std::memcpy(&h, b.data() + i * 2, 2);
            return fz::from_bf16(h);
        }
        float f;
        std::memcpy(&f, b.data() + i * 4, 4);
        return f;
    }
    void put(Buf<unsigned char>& b, int64_t i, float v) {
        if (bf) {
            const uint16_t h = fz::to_bf16(v);
            std::memcpy(b.data() + i * 2, &h, 2);
        } else {
            std::memcpy(b.data() + i * 4, &v, 4);
        }
    }
    int64_t fld(int64_t f) const { return ld_null ? D : ld[static_cast<size_t>(f)]; }
    double x(int64_t f, int64_t b, int64_t k) const { return get(feat[static_cast<size_t>(f)], b * fld(f) + k); }
};

Problem make(In& in) {
    Problem p;
    p.bf = in.coin();
    p.N = in.dim(1, 7);
    p.D = in.dim(1, 40);
    p.B = in.dim(0, 5);
    p.d.num_features = p.N;
    p.d.dim = p.D;
    p.d.dtype = p.bf ? XK_DTYPE_BF16 : XK_DTYPE_F32;
    p.d.self_interaction = in.coin();
    p.od = p.D + (p.d.self_interaction ? p.N * (p.N + 1) / 2 : p.N * (p.N - 1) / 2);
    const int64_t pad = in.pad();
    p.ldo = p.od + pad;
    p.ld_null = in.pick(4) == 0;
    const bool nonfinite = in.pick(8) == 7;
    fz::Values vals(in, static_cast<size_t>(p.N * p.B * (p.D + 5) + p.B * p.ldo));
    auto value = [&]() { return nonfinite ? vals().any_value(kBig) : vals().value(kBig); };
    const size_t mis = in.pick(3) * static_cast<size_t>(p.es());
    for (int64_t f = 0; f < p.N; ++f) {
        p.ld.push_back(p.ld_null ? p.D : p.D + in.pad());
        const int64_t n = p.B == 0 ? 0 : (p.B - 1) * p.ld.back() + p.D;
        p.feat.emplace_back(static_cast<size_t>(n * p.es()), mis);
        for (int64_t i = 0; i < n; ++i) p.put(p.feat.back(), i, (i % p.ld.back()) < p.D ? value() : std::numeric_limits<float>::quiet_NaN());
        p.grad.emplace_back(static_cast<size_t>(p.B * p.D * p.es()), mis);
        p.grad.back().fill(0x5A);
    }
    const int64_t on = p.B == 0 ? 0 : (p.B - 1) * p.ldo + p.od;
    p.out = Buf<unsigned char>(static_cast<size_t>(on * p.es()), mis);
    p.out.fill(0x77);
    p.gout = Buf<unsigned char>(static_cast<size_t>(on * p.es()), mis);
    for (int64_t i = 0; i < on; ++i) p.put(p.gout, i, (i % p.ldo) < p.od ? value() : std::numeric_limits<float>::quiet_NaN());
    for (auto& f : p.feat) p.fp.push_back(f.data());
    for (auto& g : p.grad) p.gp.push_back(g.data());
    return p;
}

constexpr double u = 0x1p-24;

void check_forward(const Problem& p, const std::vector<unsigned char>& before) {
    const char* what = "xk_interaction_forward";
    fz::expect_guards(p.out, what, "out");
    const double rb = p.bf ? 0x1p-8 : 0.0;
    for (int64_t b = 0; b < p.B; ++b) {
        for (int64_t k = p.od; k < p.ldo && b + 1 < p.B; ++k)
            for (int64_t e = 0; e < p.es(); ++e)
                if (p.out.data()[(b * p.ldo + k) * p.es() + e] != before[static_cast<size_t>((b * p.ldo + k) * p.es() + e)])
                    fz::finding("%s: wrote the row padding of out (b=%lld k=%lld)", what, (long long)b, (long long)k);
        for (int64_t k = 0; k < p.D; ++k) {
            const double got = p.get(p.out, b * p.ldo + k), want = p.x(0, b, k);
            if (!(got == want || (std::isnan(got) && std::isnan(want))))
                fz::finding("%s: out[%lld][%lld] = %g is not the dense feature %g", what, (long long)b, (long long)k, got, want);
        }
        int64_t q = p.D;
        for (int64_t i = 0; i < p.N; ++i)
            for (int64_t j = 0; j < (p.d.self_interaction ? i + 1 : i); ++j, ++q) {
                double want = 0, mag = 0;
                for (int64_t k = 0; k < p.D; ++k) {
                    const double t = p.x(i, b, k) * p.x(j, b, k);
                    want += t;
                    mag += std::fabs(t);
                }
                const double got = p.get(p.out, b * p.ldo + q);
                if (!fz::close(got, want, rb, 2 * u * static_cast<double>(p.D + 2) * mag + 1e-37 * static_cast<double>(p.D)))
                    fz::finding("%s: N=%lld D=%lld self=%d bf16=%d: out[%lld][%lld] (pair %lld,%lld) = %.9g, want %.9g", what,
                                (long long)p.N, (long long)p.D, p.d.self_interaction, p.bf, (long long)b, (long long)q,
                                (long long)i, (long long)j, got, want);
            }
    }
}

void check_backward(const Problem& p) {
    const char* what = "xk_interaction_backward";
    const double rb = p.bf ? 0x1p-8 : 0.0;
    const int64_t N = p.N;
    for (const auto& g : p.grad) fz::expect_guards(g, what, "grad_features");
    for (int64_t b = 0; b < p.B; ++b) {
        std::vector<double> S(static_cast<size_t>(N * N), 0.0);
        int64_t q = p.D;
        for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < (p.d.self_interaction ? i + 1 : i); ++j, ++q) {
                const double g = p.get(p.gout, b * p.ldo + q);
                if (i == j) S[static_cast<size_t>(i * N + i)] = 2 * g;
                else S[static_cast<size_t>(i * N + j)] = S[static_cast<size_t>(j * N + i)] = g;
            }
        for (int64_t i = 0; i < N; ++i)
            for (int64_t k = 0; k < p.D; ++k) {
                double want = i == 0 ? p.get(p.gout, b * p.ldo + k) : 0.0, mag = std::fabs(want);
                for (int64_t j = 0; j < N; ++j) {
                    const double t = S[static_cast<size_t>(i * N + j)] * p.x(j, b, k);
                    want += t;
                    mag += std::fabs(t);
                }
                const double got = p.get(p.grad[static_cast<size_t>(i)], b * p.D + k);
                if (!fz::close(got, want, rb, 2 * u * static_cast<double>(N + 2) * mag + 1e-37 * static_cast<double>(N)))
                    fz::finding("%s: N=%lld D=%lld self=%d bf16=%d: grad[%lld][%lld][%lld] = %.9g, want %.9g", what,
                                (long long)p.N, (long long)p.D, p.d.self_interaction, p.bf, (long long)i, (long long)b,
                                (long long)k, got, want);
            }
    }
}

struct Snap {
    std::vector<unsigned char> out;
    std::vector<std::vector<unsigned char>> grad;
};
Snap snap(const Problem& p) {
    Snap s{p.out.snapshot(), {}};
    for (const auto& g : p.grad) s.grad.push_back(g.snapshot());
    return s;
}
void expect_same(const Problem& p, const Snap& s, const char* what) {
    fz::expect_unchanged(p.out, s.out, what, "out");
    for (size_t f = 0; f < p.grad.size(); ++f) fz::expect_unchanged(p.grad[f], s.grad[f], what, "grad_features");
}

void op_call(In& in) {
    Problem p = make(in);
    const bool backward = in.coin();
    const char* what = backward ? "xk_interaction_backward" : "xk_interaction_forward";
    xk_interaction_desc d = p.d;
    const xk_interaction_desc* dp = &d;
    int64_t B = p.B, ldo = in.coin() && p.ldo == p.od ? 0 : p.ldo;
    std::vector<const void*> fp = p.fp;
    std::vector<void*> gp = p.gp;
    std::vector<int64_t> ld = p.ld, ldg(static_cast<size_t>(p.N), p.D);
    const void* const* fpp = fp.data();
    void* const* gpp = gp.data();
    const int64_t* ldp = p.ld_null ? nullptr : ld.data();
    void* out = p.out.data();
    const void* gout = p.gout.data();
    const char* wrong = nullptr;
    if (in.pick(3) == 2) {
        switch (in.pick(10)) {
            case 0: d.num_features = in.coin() ? 0 - in.pick(3) : in.bad_size(); wrong = "num_features"; break;
            case 1:  // (a huge dim like 2^40 is valid: only sizes that cannot exist)
                d.dim = in.coin() ? 0 - in.pick(3) : in.coin() ? std::numeric_limits<int64_t>::max() : int64_t(1) << 62;
                wrong = "dim";
                break;
            case 2: {
                const int v = in.coin() ? in.bad_enum(6) : XK_DTYPE_S8 + in.pick(4);
                std::memcpy(&d.dtype, &v, 4);
                wrong = "dtype";
                break;
            }
            case 3: {  // negative, or batch * ld_out past the size limit
                static const int64_t v[] = {-1, -7, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                            int64_t(1) << 62};
                B = v[in.pick(5)];
                wrong = "batch";
                break;
            }
            case 4:
                if (B > 0) {
                    const int64_t f = in.pick(static_cast<int>(p.N));
                    if (in.coin()) fp[static_cast<size_t>(f)] = nullptr, wrong = "features[f] null";
                    else if (p.D > 1) ld[static_cast<size_t>(f)] = in.pick(static_cast<int>(p.D)), ldp = ld.data(), wrong = "ld_features[f] < dim";
                    else ld[static_cast<size_t>(f)] = -1, ldp = ld.data(), wrong = "ld_features[f] < 0";
                    break;
                }
                [[fallthrough]];
            case 5:
                if (B > 0) {
                    if (backward) {
                        if (in.coin()) gout = nullptr, wrong = "grad_out null";
                        else gpp = nullptr, wrong = "grad_features null";
                    } else {
                        if (in.coin()) out = nullptr, wrong = "out null";
                        else fpp = nullptr, wrong = "features null";
                    }
                    break;
                }
                [[fallthrough]];
            case 6:
                ldo = p.od > 1 && in.coin() ? 1 + in.pick(static_cast<int>(p.od - 1)) : -1 - in.pick(3);
                wrong = "ld_out < out_dim";
                break;
            case 7:
                if (B > 0) {
                    // A written buffer over an input (or, backward, over another gradient).
                    const int64_t f = in.pick(static_cast<int>(p.N));
                    if (!backward) out = const_cast<void*>(p.fp[static_cast<size_t>(f)]), wrong = "out over features[f]";
                    else if (p.N > 1 && in.coin()) gp[static_cast<size_t>(f)] = gp[static_cast<size_t>((f + 1) % p.N)], wrong = "grad_features[f] over another";
                    else if (in.coin()) gp[static_cast<size_t>(f)] = const_cast<void*>(p.fp[static_cast<size_t>(in.pick(static_cast<int>(p.N)))]), wrong = "grad over a feature";
                    else gp[static_cast<size_t>(f)] = const_cast<void*>(gout), wrong = "grad over grad_out";
                    break;
                }
                [[fallthrough]];
            case 8:
                if (B > 0 && !p.bf) {
                    out = p.out.data() + 2;  // f32 out misaligned for its element
                    gp[0] = p.grad[0].data() + 1;
                    wrong = "misaligned out / grad_features[0]";
                    break;
                }
                [[fallthrough]];
            default: dp = nullptr; wrong = "desc null"; break;
        }
    }
    const Snap before = snap(p);
    const xk_status s = fz::timed(what, [&] {
        return backward ? xk_interaction_backward(dp, B, fpp, ldp, gout, ldo, gpp, nullptr)
                        : xk_interaction_forward(dp, B, fpp, ldp, out, ldo);
    });
    if (wrong) {
        fz::expect_rejected(s, what, wrong);
        expect_same(p, before, what);
        return;
    }
    fz::expect_ok(s, what);
    if (backward) {
        fz::expect_unchanged(p.out, before.out, what, "out");
        check_backward(p);
    } else {
        for (size_t f = 0; f < p.grad.size(); ++f) fz::expect_unchanged(p.grad[f], before.grad[f], what, "grad_features");
        check_forward(p, before.out);
    }
}

// out_dim of any descriptor; a huge one with batch 0 and no arrays: quick and valid.
void op_out_dim(In& in) {
    xk_interaction_desc d{in.coin() ? in.dim(1, 9) : in.bad_size(), in.coin() ? in.dim(1, 9) : in.bad_size(), XK_DTYPE_F32,
                          in.coin()};
    int64_t od = -5;
    const bool valid = d.num_features >= 1 && d.num_features <= (int64_t(1) << 28) && d.dim >= 1 && d.dim <= (int64_t(1) << 40);
    const xk_status s = fz::timed("xk_interaction_out_dim", [&] { return xk_interaction_out_dim(&d, &od); });
    if (valid) {
        fz::expect_ok(s, "xk_interaction_out_dim");
        const int64_t want = d.dim + (d.self_interaction ? d.num_features * (d.num_features + 1) / 2 : d.num_features * (d.num_features - 1) / 2);
        if (od != want) fz::finding("xk_interaction_out_dim = %lld, want %lld", (long long)od, (long long)want);
        const xk_status s2 = fz::timed("xk_interaction_forward", [&] { return xk_interaction_forward(&d, 0, nullptr, nullptr, nullptr, 0); });
        fz::expect_ok(s2, "xk_interaction_forward (batch 0)");
    } else if (d.num_features < 1 || d.dim < 1) {
        fz::expect_rejected(s, "xk_interaction_out_dim", "num_features or dim < 1");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        switch (in.pick(8)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: {
                const int t = 1 + in.pick(2);
                fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(t); }), "xk_set_num_threads");
                break;
            }
            case 2: op_out_dim(in); break;
            default: op_call(in); break;
        }
    }
    return 0;
}
