// libFuzzer target: the core functions of the C API (include/xk/xk.h). See fuzz_common.hpp for the
// scheme. Calls: xk_axpby (lengths through the JIT kernels' main loops and tails, misaligned
// arrays, in place x == y, beta == 0 over a NaN y), the ISA cap (xk_set_max_isa with supported,
// unsupported and undefined levels, xk_get_max_isa, xk_isa_name), xk_set_num_threads (0, positive,
// negative), xk_version, and xk_last_error: "" after each success, a message after each failure,
// per thread. axpby is checked against a double-precision loop (two fp32 roundings); the cap is
// back at the highest level at the end of each input.
#include <algorithm>
#include <optional>
#include <string>
#include <thread>

#include "fuzz_common.hpp"
#include "xk/runtime.hpp"  // xk::version_major / minor / patch: what xk_version() spells

namespace {

using fz::Buf;
using fz::In;

constexpr int64_t kMaxN = 300;
constexpr double kU = 0x1p-24;  // fp32 unit roundoff
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kFltMax = std::numeric_limits<float>::max();

using fz::Values;

// ---- axpby ----------------------------------------------------------------------------------------
// y = alpha x + beta y (eltwise.hpp): x == y is in place, any other overlap an error; beta == 0
// ignores what y held (NaN too); n == 0 a no-op.
float coefficient(In& in) {
    switch (in.pick(6)) {
        case 0: return 0.0f;
        case 1: return 1.0f;
        case 2: return -0.0f;
        case 3: return in.value(1e30f);
        default: return in.value(1e3f);
    }
}

void op_axpby(In& in) {
    int64_t n = in.dim(0, kMaxN);
    float alpha = coefficient(in), beta = coefficient(in);
    const bool in_place = in.pick(4) == 0;
    const bool nonfinite = in.pick(8) == 0;
    if (nonfinite && in.coin()) (in.coin() ? alpha : beta) = in.any_value();
    const size_t mis = in.pick(4);
    Buf<float> x(n, mis), y(n, in.pick(4));
    Values vals(in, 2 * n);
    for (int64_t i = 0; i < n; ++i) {
        x[i] = nonfinite ? vals().any_value() : vals().value();
        y[i] = beta == 0.0f && vals().coin() ? kNaN : nonfinite ? vals().any_value() : vals().value();
    }
    if (in_place) y = x;  // (the values of x, in y's buffer: x is passed as y.data())

    const bool hostile = in.pick(3) == 2;  // (an exhausted input reads 0s: valid calls)
    int64_t n_arg = n;
    const float* xp = in_place ? y.data() : x.data();
    float* yp = y.data();
    Buf<float> both;  // hostile overlap: x and y inside one buffer, k elements apart
    const char* wrong = "";
    if (hostile) {
        switch (in.pick(5)) {
            case 0: n_arg = in.coin() ? -1 - in.pick(8) : std::numeric_limits<int64_t>::min(); wrong = "n < 0"; break;
            case 1:
                if (n > 0) {
                    if (in.coin()) xp = nullptr, wrong = "x null";
                    else yp = nullptr, wrong = "y null";
                    if (in.coin()) n_arg = in.coin() ? int64_t(1) << 40 : std::numeric_limits<int64_t>::max();  // huge: rejected at once
                    break;
                }
                [[fallthrough]];
            case 2:
            case 3:
                if (n >= 2) {
                    const int64_t k = 1 + in.pick(static_cast<int>(n - 1));
                    both = Buf<float>(n + k, mis);
                    for (int64_t i = 0; i < n + k; ++i) both[i] = x[i % n];
                    const bool x_first = in.coin();
                    xp = both.data() + (x_first ? 0 : k);
                    yp = both.data() + (x_first ? k : 0);
                    wrong = "x and y partially overlap";
                    break;
                }
                [[fallthrough]];
            default: n_arg = -1; wrong = "n < 0"; break;
        }
    }
    const auto y_before = y.snapshot(), both_before = both.snapshot();
    const std::vector<float> y_old(y.data(), y.data() + n);
    const xk_status s = fz::timed("xk_axpby", [&] { return xk_axpby(n_arg, alpha, xp, beta, yp); });
    if (hostile) {
        fz::expect_rejected(s, "xk_axpby", wrong);
        fz::expect_unchanged(y, y_before, "xk_axpby", "y");
        fz::expect_unchanged(both, both_before, "xk_axpby", "x and y (overlapping)");
        return;
    }
    fz::expect_ok(s, "xk_axpby");
    fz::expect_guards(y, "xk_axpby", "y");
    // Each y: fl(fl(alpha x) + fl(beta y)) or one FMA over fl(alpha x): within 2u (|alpha x| +
    // |beta y|) (1 + u), plus 2^-149 for roundings in the denormal range (nothing flushes them).
    // Not checked where an input is not finite or a product exceeds FLT_MAX (the fp32 product may
    // overflow before the sum); beta == 0: y's old value (NaN too) must not matter.
    const bool use_y = beta != 0.0f;
    for (int64_t i = 0; i < n; ++i) {
        const double xv = x[i], yv = y_old[i];  // (in place: y held x's values)
        if (!std::isfinite(alpha) || !std::isfinite(beta) || !std::isfinite(xv) || (use_y && !std::isfinite(yv))) continue;
        const double pa = std::fabs(alpha * xv), pb = use_y ? std::fabs(beta * yv) : 0.0;
        if (pa > kFltMax || pb > kFltMax) continue;
        const double want = alpha * xv + (use_y ? beta * yv : 0.0);
        const double tol = 2 * kU * (pa + pb) * (1 + kU) + 0x1p-149;
        if (!fz::close(y[i], want, 0, tol))
            fz::finding("xk_axpby: y[%lld] = %.9g, want %.9g (+- %.3g): n=%lld alpha=%.9g x=%.9g beta=%.9g y=%.9g in_place=%d",
                        static_cast<long long>(i), y[i], want, tol, static_cast<long long>(n), alpha, xv, beta, yv, in_place);
    }
}

// ---- ISA cap --------------------------------------------------------------------------------------
// isa.hpp's level names, in enum order.
const char* const kIsaNames[] = {"scalar", "avx2", "avx2_vnni", "avx512", "avx512_vnni", "avx512_bf16", "amx"};
constexpr int kLevels = static_cast<int>(sizeof kIsaNames / sizeof kIsaNames[0]);

xk_isa current_cap() {
    xk_isa cap = XK_ISA_SCALAR;
    fz::expect_ok(fz::timed("xk_get_max_isa", [&] { return xk_get_max_isa(&cap); }), "xk_get_max_isa");
    return cap;
}

// One of: set a level this machine has (then get_max_isa returns it), set a defined level it
// lacks (XK_ISA_UNAVAILABLE), set a value outside the enum (an error, not UB), get_max_isa with
// a null out, xk_isa_name of a defined level (isa.hpp's name) or of any other value (a string
// that names no level). A rejected set leaves the cap as it was.
void op_isa(In& in) {
    const auto& isas = fz::isas();
    const xk_isa before = current_cap();
    switch (in.pick(6)) {
        case 0: {
            const xk_isa cap = isas[in.pick(static_cast<int>(isas.size()))];
            fz::expect_ok(fz::timed("xk_set_max_isa", [&] { return xk_set_max_isa(cap); }), "xk_set_max_isa");
            if (current_cap() != cap) fz::finding("xk_set_max_isa(%d) succeeded but xk_get_max_isa gives %d", cap, current_cap());
            return;
        }
        case 1: {
            // A defined level this machine lacks (not always above the last: avx2_vnni is missing
            // on AVX-512 machines without VNNI).
            std::vector<xk_isa> lacking;
            for (int i = 0; i < kLevels; ++i)
                if (std::find(isas.begin(), isas.end(), static_cast<xk_isa>(i)) == isas.end())
                    lacking.push_back(static_cast<xk_isa>(i));
            if (!lacking.empty()) {
                const xk_isa cap = lacking[in.pick(static_cast<int>(lacking.size()))];
                const xk_status s = fz::timed("xk_set_max_isa", [&] { return xk_set_max_isa(cap); });
                fz::expect_rejected(s, "xk_set_max_isa", "a level this machine lacks");
                if (s != XK_ISA_UNAVAILABLE)
                    fz::finding("xk_set_max_isa(%s) on a machine without it: status %d, want XK_ISA_UNAVAILABLE (%d): %s",
                                kIsaNames[cap], s, XK_ISA_UNAVAILABLE, xk_last_error());
                break;
            }
        }
            [[fallthrough]];
        case 2: {
            xk_isa cap;
            const int v = in.bad_enum(kLevels);
            std::memcpy(&cap, &v, sizeof v);
            const xk_status s = fz::timed("xk_set_max_isa", [&] { return xk_set_max_isa(cap); });
            fz::expect_rejected(s, "xk_set_max_isa", "a value outside xk_isa");
            if (s != XK_INVALID_ARGUMENT)
                fz::finding("xk_set_max_isa(%d): status %d, want XK_INVALID_ARGUMENT: %s", v, s, xk_last_error());
            break;
        }
        case 3:
            fz::expect_rejected(fz::timed("xk_get_max_isa", [&] { return xk_get_max_isa(nullptr); }), "xk_get_max_isa", "out null");
            break;
        default: {
            const bool defined = in.coin();
            const int v = defined ? in.pick(kLevels) : in.bad_enum(kLevels);
            xk_isa isa;
            std::memcpy(&isa, &v, sizeof v);
            const char* name = nullptr;
            fz::timed("xk_isa_name", [&] { name = xk_isa_name(isa); return XK_SUCCESS; });
            if (name == nullptr) fz::finding("xk_isa_name(%d) returned null", v);
            if (defined && std::strcmp(name, kIsaNames[v]) != 0) fz::finding("xk_isa_name(%d) = '%s', want '%s'", v, name, kIsaNames[v]);
            for (const char* level : kIsaNames)
                if (!defined && std::strcmp(name, level) == 0) fz::finding("xk_isa_name(%d), not a level, = '%s'", v, name);
            return;
        }
    }
    if (current_cap() != before) fz::finding("a rejected xk_set_max_isa changed the cap from %d to %d", before, current_cap());
}

// ---- threads, version, last error -----------------------------------------------------------------
// xk_set_num_threads: 0 (every CPU) and positive counts succeed, negative ones are an error
// (runtime.hpp). Leaves 1 or 2 threads (of the sequence's choice) in effect.
void op_threads(In& in) {
    static const int kBad[] = {-1, -7, std::numeric_limits<int>::min()};
    if (in.pick(3) == 2) {
        const int n = kBad[in.pick(3)];
        fz::expect_rejected(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(n); }), "xk_set_num_threads", "n < 0");
    } else {
        static const int kGood[] = {1, 2, 0, 16};
        const int n = kGood[in.pick(4)];
        fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(n); }), "xk_set_num_threads");
    }
    const int n = 1 + in.pick(2);
    fz::expect_ok(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(n); }), "xk_set_num_threads");
}

// xk_version: "major.minor.patch" of runtime.hpp's constants.
void op_version() {
    const char* v = nullptr;
    fz::timed("xk_version", [&] { v = xk_version(); return XK_SUCCESS; });
    const std::string want = std::to_string(xk::version_major) + "." + std::to_string(xk::version_minor) + "." +
                             std::to_string(xk::version_patch);
    if (v == nullptr || want != v) fz::finding("xk_version() = '%s', want '%s'", v ? v : "(null)", want.c_str());
}

// xk_last_error is per thread: a failure and then a success on another thread leave this
// thread's message as it was; that thread sees its own message, then "".
void op_last_error_threads(In& in) {
    const bool fail_here = in.coin();
    if (fail_here) fz::expect_rejected(fz::timed("xk_set_num_threads", [&] { return xk_set_num_threads(-3); }), "xk_set_num_threads", "n < 0");
    else op_version();  // (no status: leaves the message of the call before it)
    const std::string mine = xk_last_error();
    std::string theirs_failed, theirs_after;
    std::thread t([&] {
        const xk_status s = fz::timed("xk_axpby", [&] { return xk_axpby(-1, 1.0f, nullptr, 1.0f, nullptr); });
        if (s == XK_SUCCESS) fz::finding("xk_axpby(n = -1) on another thread succeeded");
        theirs_failed = xk_last_error();
        const xk_status s2 = fz::timed("xk_axpby", [&] { return xk_axpby(0, 1.0f, nullptr, 1.0f, nullptr); });
        if (s2 != XK_SUCCESS) fz::finding("xk_axpby(n = 0) on another thread failed: %s", xk_last_error());
        theirs_after = xk_last_error();
    });
    t.join();
    if (theirs_failed.empty()) fz::finding("a failed call on another thread left no message there");
    if (!theirs_after.empty()) fz::finding("a successful call on another thread left the message '%s' there", theirs_after.c_str());
    if (mine != xk_last_error())
        fz::finding("calls on another thread changed this thread's xk_last_error from '%s' to '%s'", mine.c_str(), xk_last_error());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fz::init_once();
    In in(data, size);
    const auto& isas = fz::isas();
    fz::set_cap(isas.back());
    xk_set_num_threads(1);
    for (int calls = 0; calls < 16 && in.more(); ++calls) {
        switch (in.pick(12)) {
            case 0: fz::set_cap(isas[in.pick(static_cast<int>(isas.size()))]); break;
            case 1: case 2: op_threads(in); break;
            case 3: case 4: op_isa(in); break;
            case 5: op_version(); break;
            case 6: op_last_error_threads(in); break;
            default: op_axpby(in); break;
        }
    }
    fz::set_cap(isas.back());  // the highest level again for the next input
    return 0;
}
