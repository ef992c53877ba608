// Embedding-bag family: validation, registry and public entry points.
#include "kernels/embedding_bag/embedding_bag.hpp"
#include "common/cpu_vendor.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <thread>

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "xk/isa.hpp"

namespace xk {

const char* embedding_bag_mode_name(EmbeddingBagMode m) noexcept {
    switch (m) {
        case EmbeddingBagMode::sum: return "sum";
        case EmbeddingBagMode::mean: return "mean";
        case EmbeddingBagMode::max: return "max";
    }
    return "?";
}

const char* index_type_name(IndexType t) noexcept {
    switch (t) {
        case IndexType::i32: return "i32";
        case IndexType::i64: return "i64";
    }
    return "?";
}

const char* embedding_row_quant_name(EmbeddingRowQuant q) noexcept {
    switch (q) {
        case EmbeddingRowQuant::none: return "none";
        case EmbeddingRowQuant::int8_rowwise: return "int8_rowwise";
        case EmbeddingRowQuant::int4_rowwise: return "int4_rowwise";
    }
    return "?";
}

int64_t embedding_row_quant_bytes(EmbeddingRowQuant q, int64_t dim) noexcept {
    switch (q) {
        case EmbeddingRowQuant::int8_rowwise: return dim + 8;
        case EmbeddingRowQuant::int4_rowwise: return (dim + 1) / 2 + 4;
        default: return 0;
    }
}

namespace detail {

int64_t embedding_bag_row_bytes(const EmbeddingBagDesc& d) {
    return d.row_quant == EmbeddingRowQuant::none ? d.dim * dtype_size(d.table_dtype)
                                                  : embedding_row_quant_bytes(d.row_quant, d.dim);
}
int64_t embedding_bag_row_stride_bytes(const EmbeddingBagDesc& d) {
    return d.row_quant == EmbeddingRowQuant::none ? d.ld_table * dtype_size(d.table_dtype) : d.ld_table;
}

namespace {

int64_t index_size(IndexType t) { return t == IndexType::i64 ? 8 : 4; }

void check_aligned(const char* fn, const char* arg, const void* p, int64_t align) {
    if (p && reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) != 0)
        fail_arg(fn, arg, ptr_str(p), "must be aligned to its element size (" + std::to_string(align) + " bytes)");
}

bool overlaps(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
    if (!a || !b || a_bytes <= 0 || b_bytes <= 0) return false;
    const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
    return pa < pb + static_cast<uintptr_t>(b_bytes) && pb < pa + static_cast<uintptr_t>(a_bytes);
}

// Bytes spanned by `rows` rows of `cols` elements with row stride ld (0 when rows == 0).
int64_t span_bytes(int64_t rows, int64_t cols, int64_t ld, int64_t esize) {
    return rows == 0 ? 0 : ((rows - 1) * ld + cols) * esize;
}

struct RefEmbeddingBag final : EmbeddingBagKernel {
    void run(const EmbeddingBagCall& c, int64_t b0, int64_t b1) const override { embedding_bag_reference(c, b0, b1); }
};

int par_check_threads();  // (below, with the min / max pass)

// n chunks over the threads, every chunk's indices checked before any chunk runs, the check inside
// the same parallel region (a serial pass over 204800 indices is ~50 us of a ~200-400 us 16-thread
// call, and a separate region for it measured far slower): each chunk is checked (check(i): false
// = a bad index) by whichever thread claims it first (a thread claims its own chunks, then any
// left), and no thread runs (run(i0, i1): chunks [i0, i1)) before every check is done.
// Deadlock-free whatever number of threads the backend hands out: a thread only waits once every
// check is claimed, and a claimed check runs to its end without waiting. Returns false (nothing
// run) when a check failed: the caller's serial scan then names the first bad index.
template <typename Check, typename Run>
bool run_chunks_checked(int64_t n, const Check& check, const Run& run) {
    std::unique_ptr<std::atomic<int>[]> claimed(new std::atomic<int>[static_cast<size_t>(n)]);
    for (int64_t i = 0; i < n; ++i) claimed[i].store(0, std::memory_order_relaxed);
    std::atomic<int64_t> checked{0};
    std::atomic<bool> bad{false};
    auto claim_and_check = [&](int64_t i) {
        int expected = 0;
        if (!claimed[i].compare_exchange_strong(expected, 1, std::memory_order_relaxed)) return;
        if (!check(i)) bad.store(true, std::memory_order_relaxed);
        checked.fetch_add(1, std::memory_order_acq_rel);
    };
    parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) claim_and_check(i);
        for (int64_t i = 0; i < n; ++i) claim_and_check(i);
        for (int spins = 0; checked.load(std::memory_order_acquire) < n; ++spins) {
            if (spins < 4096) _mm_pause();
            else std::this_thread::yield();
        }
        if (bad.load(std::memory_order_relaxed)) return;
        run(i0, i1);
    });
    return !bad.load();
}

// The call over the threads: one chunk of bags per thread, balanced by index count (bags may have
// very different lengths). Every index is checked before anything is written: on the calling
// thread below par_check_threads() threads, from there on in the chunks' own parallel region
// (run_chunks_checked). A bad index anywhere: nothing written, and the serial scan names the
// first one.
void run_call(const EmbeddingBagCall& c, const EmbeddingBagKernel& k) {
    const int64_t n = parallel_threads(c.a.num_bags, embedding_bag_grain(c));
    if (n <= 1 || n < par_check_threads()) {
        embedding_bag_validate_indices(c);  // before anything is written, whatever the kernel checks
        if (n <= 1) {
            if (c.a.num_bags > 0) k.run(c, 0, c.a.num_bags);
            return;
        }
        parallel_for(n, 1, [&](int64_t i0, int64_t i1) {
            const int64_t b0 = embedding_bag_split(c, i0, n), b1 = embedding_bag_split(c, i1, n);
            if (b1 > b0) k.run(c, b0, b1);
        });
        return;
    }
    const bool ok = run_chunks_checked(
        n,
        [&](int64_t i) {
            const int64_t b0 = embedding_bag_split(c, i, n), b1 = embedding_bag_split(c, i + 1, n);
            return b1 <= b0 || embedding_bag_indices_in_range(c, c.bag_begin(b0), c.bag_end(b1 - 1));
        },
        [&](int64_t i0, int64_t i1) {
            const int64_t b0 = embedding_bag_split(c, i0, n), b1 = embedding_bag_split(c, i1, n);
            if (b1 > b0) k.run(c, b0, b1);
        });
    if (!ok) embedding_bag_validate_indices(c);  // throws, naming the first bad index
}

}  // namespace

std::string EmbeddingBagConfig::key() const {
    std::ostringstream os;
    os << "dim" << dim << "_ldt" << ld_table << "_ldo" << ld_out << "_" << embedding_bag_mode_name(mode) << "_"
       << dtype_name(table_dtype) << ":" << dtype_name(out_dtype) << "_" << index_type_name(index_type)
       << (include_last_offset ? "_lastoff" : "") << (weighted ? "_psw" : "") << (has_padding ? "_pad" : "")
       << (row_quant != EmbeddingRowQuant::none ? std::string("_") + embedding_row_quant_name(row_quant) : "");
    return os.str();
}

EmbeddingBagDesc embedding_bag_validate_desc(const char* fn, const EmbeddingBagDesc& desc) {
    EmbeddingBagDesc d = desc;
    const int mode = static_cast<int>(d.mode);
    if (mode < 0 || mode > 2) fail_arg(fn, "mode", std::to_string(mode), "is not a valid value (valid: sum=0, mean=1, max=2)");
    const int it = static_cast<int>(d.index_type);
    if (it < 0 || it > 1) fail_arg(fn, "index_type", std::to_string(it), "is not a valid value (valid: i32=0, i64=1)");
    const int rq = static_cast<int>(d.row_quant);
    if (rq < 0 || rq > 2)
        fail_arg(fn, "row_quant", std::to_string(rq),
                 "is not a valid value (valid: none=0, int8_rowwise=1, int4_rowwise=2)");
    const bool quant = d.row_quant != EmbeddingRowQuant::none;
    for (auto [arg, t] : {std::pair<const char*, DType>{"table_dtype", d.table_dtype}, {"out_dtype", d.out_dtype}}) {
        const int v = static_cast<int>(t);
        if (v < 0 || v > static_cast<int>(DType::f16))
            fail_arg(fn, arg, std::to_string(v), "is not a valid DType");
        if (quant && std::string(arg) == "table_dtype") {
            if (t != DType::u8)
                fail_arg(fn, arg, dtype_name(t),
                         std::string("must be u8 with row_quant=") + embedding_row_quant_name(d.row_quant) +
                             " (fused quantized rows are bytes)");
            continue;
        }
        if (t != DType::f32 && t != DType::bf16)
            fail(Status::unsupported, std::string(fn) + ": " + arg + "=" + dtype_name(t) +
                                          " is not supported (supported: f32, bf16" +
                                          (std::string(arg) == "table_dtype" ? "; u8 with row_quant int8_rowwise / int4_rowwise)" : ")"));
    }
    check_nonnegative(fn, "num_embeddings", d.num_embeddings);
    check_positive(fn, "dim", d.dim);
    check_nonnegative(fn, "ld_table", d.ld_table);
    check_nonnegative(fn, "ld_out", d.ld_out);
    if (quant) checked_add(fn, "dim+8", d.dim, 8);  // the fused row size fits
    if (d.ld_table == 0) d.ld_table = quant ? embedding_row_quant_bytes(d.row_quant, d.dim) : d.dim;
    if (d.ld_out == 0) d.ld_out = d.dim;
    if (quant) {
        if (d.ld_table < embedding_row_quant_bytes(d.row_quant, d.dim))
            fail_arg(fn, "ld_table", std::to_string(d.ld_table),
                     "must be >= the fused row size " + std::to_string(embedding_row_quant_bytes(d.row_quant, d.dim)) +
                         " bytes (row_quant=" + embedding_row_quant_name(d.row_quant) + ", dim=" + std::to_string(d.dim) + ")");
    } else {
        check_ld(fn, "ld_table", d.ld_table, d.dim, "dim");
    }
    check_ld(fn, "ld_out", d.ld_out, d.dim, "dim");
    checked_mul(fn, "num_embeddings*ld_table", d.num_embeddings, d.ld_table);
    if (d.padding_idx < -1 || d.padding_idx >= d.num_embeddings)
        fail_arg(fn, "padding_idx", std::to_string(d.padding_idx),
                 "must be -1 (none) or in [0, num_embeddings=" + std::to_string(d.num_embeddings) + ")");
    if (d.per_sample_weights && d.mode != EmbeddingBagMode::sum)
        fail_arg(fn, "per_sample_weights", "true",
                 std::string("is only supported with mode=sum (as in PyTorch), not mode=") +
                     embedding_bag_mode_name(d.mode));
    return d;
}

EmbeddingBagConfig embedding_bag_config(const EmbeddingBagDesc& d) {
    EmbeddingBagConfig c;
    c.dim = d.dim;
    c.ld_table = d.ld_table;
    c.ld_out = d.ld_out;
    c.mode = d.mode;
    c.table_dtype = d.table_dtype;
    c.out_dtype = d.out_dtype;
    c.index_type = d.index_type;
    c.include_last_offset = d.include_last_offset;
    c.weighted = d.per_sample_weights;
    c.has_padding = d.padding_idx >= 0;
    c.row_quant = d.row_quant;
    return c;
}

EmbeddingBagCall embedding_bag_validate_args(const char* fn, const EmbeddingBagDesc& d, const EmbeddingBagArgs& a) {
    EmbeddingBagCall c;
    c.fn = fn;
    c.d = d;
    c.a = a;
    check_nonnegative(fn, "num_bags", a.num_bags);
    check_nonnegative(fn, "num_indices", a.num_indices);
    checked_mul(fn, "num_bags*ld_out", a.num_bags, d.ld_out);
    checked_mul(fn, "num_indices*sizeof(index)", a.num_indices, 8);
    const int64_t n_offsets = checked_add(fn, "num_bags+include_last_offset", a.num_bags, d.include_last_offset ? 1 : 0);
    const int64_t isz = index_size(d.index_type);

    // Offsets first: they decide what else is read.
    if (n_offsets > 0) check_not_null(fn, "offsets", a.offsets);
    check_aligned(fn, "offsets", a.offsets, isz);
    for (int64_t i = 0; i < n_offsets; ++i) {
        const int64_t v = c.offset(i);
        if (i == 0 ? v == 0 && v <= a.num_indices : v >= c.offset(i - 1) && v <= a.num_indices) continue;
        // (the message is built only for the bad one: this loop runs per call over every bag)
        const std::string arg = "offsets[" + std::to_string(i) + "]";
        if (i == 0 && v != 0) fail_arg(fn, arg.c_str(), std::to_string(v), "must be 0 (the first bag starts at 0)");
        if (i > 0 && v < c.offset(i - 1))
            fail_arg(fn, arg.c_str(), std::to_string(v),
                     "must be >= offsets[" + std::to_string(i - 1) + "]=" + std::to_string(c.offset(i - 1)) +
                         " (offsets are non-decreasing)");
        if (v > a.num_indices)
            fail_arg(fn, arg.c_str(), std::to_string(v), "must be <= num_indices=" + std::to_string(a.num_indices));
    }
    // Required whenever there are indices (as the header says), even if no bag uses them.
    if (a.num_indices > 0) {
        check_not_null(fn, "indices", a.indices);
        check_not_null(fn, "table", a.table);
    }
    if (d.per_sample_weights) {
        if (a.num_indices > 0) check_not_null(fn, "per_sample_weights", a.per_sample_weights);
    } else if (a.per_sample_weights) {
        fail_arg(fn, "per_sample_weights", ptr_str(a.per_sample_weights),
                 "is given but the descriptor's per_sample_weights is false");
    }
    if (a.num_bags > 0) check_not_null(fn, "out", a.out);
    check_aligned(fn, "indices", a.indices, isz);
    check_aligned(fn, "table", a.table, d.row_quant == EmbeddingRowQuant::none ? dtype_size(d.table_dtype) : 1);
    check_aligned(fn, "per_sample_weights", a.per_sample_weights, 4);
    check_aligned(fn, "out", a.out, dtype_size(d.out_dtype));

    const int64_t out_bytes = span_bytes(a.num_bags, d.dim, d.ld_out, dtype_size(d.out_dtype));
    const struct {
        const char* name;
        const void* p;
        int64_t bytes;
    } inputs[] = {
        {"table", a.table,
         d.num_embeddings == 0 ? 0
                               : (d.num_embeddings - 1) * embedding_bag_row_stride_bytes(d) + embedding_bag_row_bytes(d)},
        {"indices", a.indices, a.num_indices * isz},
        {"offsets", a.offsets, n_offsets * isz},
        {"per_sample_weights", a.per_sample_weights, a.num_indices * 4},
    };
    for (const auto& in : inputs)
        if (overlaps(a.out, out_bytes, in.p, in.bytes))
            fail_arg(fn, "out", ptr_str(a.out), std::string("overlaps ") + in.name + "=" + ptr_str(in.p));
    return c;
}

void embedding_bag_bad_index(const EmbeddingBagCall& c, int64_t position, int64_t bag, int64_t value) {
    const std::string arg = "indices[" + std::to_string(position) + "]";
    fail_arg(c.fn, arg.c_str(), std::to_string(value),
             (c.lookup ? std::string() : "(bag " + std::to_string(bag) + ") ") + "must be in [0, num_embeddings=" + std::to_string(c.d.num_embeddings) +
                 ")");
}

namespace {
// min / max of v[0, n): AVX-512 where the machine (and the ISA cap) has it, else a loop the
// compiler vectorises for the baseline ISA.
template <typename I>
void min_max_scalar(const I* v, int64_t n, int64_t& lo, int64_t& hi) {
    I mn = v[0], mx = v[0];
    for (int64_t i = 1; i < n; ++i) {
        mn = v[i] < mn ? v[i] : mn;
        mx = v[i] > mx ? v[i] : mx;
    }
    lo = mn;
    hi = mx;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 inside the min / max intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
// The AVX-512 pass, one template over the index width (int64: 8 lanes, int32: 16): the first
// vector starts both, then whole vectors, then the last L elements again (overlapping: min / max
// do not mind); fewer than L indices take the scalar loop.
template <typename I>
struct Avx512MinMax;
template <>
struct Avx512MinMax<int64_t> {
    __attribute__((target("avx512f"))) static __m512i min(__m512i a, __m512i b) { return _mm512_min_epi64(a, b); }
    __attribute__((target("avx512f"))) static __m512i max(__m512i a, __m512i b) { return _mm512_max_epi64(a, b); }
};
template <>
struct Avx512MinMax<int32_t> {
    __attribute__((target("avx512f"))) static __m512i min(__m512i a, __m512i b) { return _mm512_min_epi32(a, b); }
    __attribute__((target("avx512f"))) static __m512i max(__m512i a, __m512i b) { return _mm512_max_epi32(a, b); }
};
template <typename I>
__attribute__((target("avx512f"))) void min_max_avx512(const I* v, int64_t n, int64_t& lo, int64_t& hi) {
    using Op = Avx512MinMax<I>;
    constexpr int64_t L = 64 / sizeof(I);
    if (n < L) return min_max_scalar(v, n, lo, hi);
    __m512i mn = _mm512_loadu_si512(v), mx = mn;
    int64_t i = L;
    // Four vectors an iteration into two pairs of accumulators (fewer loop instructions per line).
    __m512i mn2 = mn, mx2 = mn;
    for (; i + 4 * L <= n; i += 4 * L) {
        const __m512i x0 = _mm512_loadu_si512(v + i), x1 = _mm512_loadu_si512(v + i + L);
        const __m512i x2 = _mm512_loadu_si512(v + i + 2 * L), x3 = _mm512_loadu_si512(v + i + 3 * L);
        mn = Op::min(mn, Op::min(x0, x1));
        mx = Op::max(mx, Op::max(x0, x1));
        mn2 = Op::min(mn2, Op::min(x2, x3));
        mx2 = Op::max(mx2, Op::max(x2, x3));
    }
    mn = Op::min(mn, mn2);
    mx = Op::max(mx, mx2);
    for (; i + L <= n; i += L) {
        const __m512i x = _mm512_loadu_si512(v + i);
        mn = Op::min(mn, x);
        mx = Op::max(mx, x);
    }
    if (i < n) {
        const __m512i x = _mm512_loadu_si512(v + n - L);
        mn = Op::min(mn, x);
        mx = Op::max(mx, x);
    }
    alignas(64) I a[L], b[L];  // (the reduce intrinsics warn under GCC 12)
    _mm512_store_si512(a, mn);
    _mm512_store_si512(b, mx);
    I l = a[0], h = b[0];
    for (int64_t k = 1; k < L; ++k) l = std::min(l, a[k]), h = std::max(h, b[k]);
    lo = l;
    hi = h;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
// One pass on the calling thread (a separate parallel region for it measured far slower: 2x at 2
// threads on the shared 2-core host, and 135 -> 59 GB/s for the 16-thread dim-64 bags on the
// device Xeon). From 4 threads on, run_call checks inside the bags' own region instead.
template <typename I>
void min_max(const I* v, int64_t n, int64_t& lo, int64_t& hi) {
    if (max_isa() >= Isa::avx512) min_max_avx512(v, n, lo, hi);
    else min_max_scalar(v, n, lo, hi);
}

std::atomic<int> g_par_check_override{0};
int par_check_threads() {
    if (const int o = g_par_check_override.load(std::memory_order_relaxed); o > 0) return o;
    static const int t = [] {
        const char* e = std::getenv("XK_EB_PAR_CHECK_THREADS");
        const long v = e ? std::strtol(e, nullptr, 10) : 0;
        return v >= 1 ? static_cast<int>(std::min<long>(v, 1 << 20)) : 4;
    }();
    return t;
}
}  // namespace

void embedding_bag_set_par_check_threads(int threads) { g_par_check_override.store(std::max(threads, 0)); }

namespace {
// embedding_bag_set_prefetch(): overrides of the environment / defaults (tests, experiments).
std::atomic<int64_t> g_pf_bytes{0}, g_pf_cap{-1};
std::atomic<int> g_pf_hint{-1};
}  // namespace

void embedding_bag_set_prefetch(int64_t bytes, int64_t row_cap, int hint) {
    g_pf_bytes.store(bytes);
    g_pf_cap.store(row_cap);
    g_pf_hint.store(hint);
}

bool embedding_bag_prefetch_l2() {
    if (const int h = g_pf_hint.load(std::memory_order_relaxed); h >= 0) return h == 1;
    static const bool l2 = [] {
        const char* e = std::getenv("XK_EB_PF_HINT");
        if (e && (std::strcmp(e, "t1") == 0 || std::strcmp(e, "T1") == 0)) return true;
        if (e && (std::strcmp(e, "t0") == 0 || std::strcmp(e, "T0") == 0)) return false;
        return detail::cpu_is_amd();
    }();
    return l2;
}

int64_t embedding_bag_prefetch_rows(int64_t row_bytes) {
    // Into L2 (AMD): 16 KiB of rows, at most 64 (Zen 4, 1 thread, CPU time, vs 8 KiB / 16 rows:
    // f32 D 64 Zipf bags 2.90 -> 1.83 ms, D 128 Zipf 4.04 -> 3.55, int8 D 128 uniform 2.65 -> 2.00,
    // f32 D 128 uniform unchanged); into L1 (T0): 8 KiB, at most 16 (the device Xeon's measurements).
    static const int64_t env_bytes = [] {
        const char* e = std::getenv("XK_EB_PF_BYTES");
        const long v = e ? std::strtol(e, nullptr, 10) : 0;
        return v >= 64 && v <= (1 << 20) ? static_cast<int64_t>(v) : int64_t(embedding_bag_prefetch_l2() ? 16384 : 8192);
    }();
    static const int64_t env_cap = [] {
        const char* e = std::getenv("XK_EB_PF_ROWS");
        const long v = e ? std::strtol(e, nullptr, 10) : -1;
        return v >= 0 && v <= 256 ? static_cast<int64_t>(v) : int64_t(embedding_bag_prefetch_l2() ? 64 : 16);
    }();
    const int64_t ob = g_pf_bytes.load(std::memory_order_relaxed), oc = g_pf_cap.load(std::memory_order_relaxed);
    const int64_t bytes = ob > 0 ? ob : env_bytes, cap = oc >= 0 ? oc : env_cap;
    return std::min<int64_t>(cap, std::max<int64_t>(4, bytes / std::max<int64_t>(row_bytes, 64)));
}

int64_t embedding_bag_split(const EmbeddingBagCall& c, int64_t i, int64_t n) {
    const int64_t B = c.a.num_bags;
    if (i <= 0) return 0;
    if (i >= n) return B;
    // Work before bag b: offset(b) + b (strictly increasing in b). First b with work >= target.
    const int64_t total = c.bag_end(B - 1) + B;
    const int64_t target = static_cast<int64_t>(static_cast<double>(total) * static_cast<double>(i) / static_cast<double>(n));
    int64_t lo = 0, hi = B;  // answer in [lo, hi]
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (c.offset(mid) + mid >= target) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

void embedding_bag_validate_indices(const EmbeddingBagCall& c) {
    const int64_t ne = c.d.num_embeddings;
    // The indices the bags read are indices[0, end of the last bag): one min / max pass; the
    // per-bag scan below runs only to name the first bad one.
    const int64_t used = c.a.num_bags > 0 ? c.bag_end(c.a.num_bags - 1) : 0;
    if (used == 0) return;
    int64_t lo = 0, hi = 0;
    if (c.d.index_type == IndexType::i64) min_max(static_cast<const int64_t*>(c.a.indices), used, lo, hi);
    else min_max(static_cast<const int32_t*>(c.a.indices), used, lo, hi);
    if (lo >= 0 && hi < ne) return;
    for (int64_t b = 0; b < c.a.num_bags; ++b) {
        for (int64_t j = c.bag_begin(b), end = c.bag_end(b); j < end; ++j) {
            const int64_t v = c.index(j);
            if (v < 0 || v >= ne) embedding_bag_bad_index(c, j, b, v);
        }
    }
}

bool embedding_bag_indices_in_range(const EmbeddingBagCall& c, int64_t j0, int64_t j1) {
    if (j1 <= j0) return true;
    int64_t lo = 0, hi = 0;
    if (c.d.index_type == IndexType::i64) min_max(static_cast<const int64_t*>(c.a.indices) + j0, j1 - j0, lo, hi);
    else min_max(static_cast<const int32_t*>(c.a.indices) + j0, j1 - j0, lo, hi);
    return lo >= 0 && hi < c.d.num_embeddings;
}

int64_t embedding_bag_grain(const EmbeddingBagCall& c) {
    const double B = static_cast<double>(std::max<int64_t>(c.a.num_bags, 1));
    // Elements touched per bag, roughly (in double: no overflow for absurd sizes with no bags).
    const double per_bag = (static_cast<double>(c.a.num_indices) / B + 1.0) * static_cast<double>(c.d.dim);
    return std::max<int64_t>(1, static_cast<int64_t>(32768.0 / per_bag));
}

const Registry<EmbeddingBagConfig, EmbeddingBagKernel>& embedding_bag_registry() {
    static const Registry<EmbeddingBagConfig, EmbeddingBagKernel> r(
        "embedding_bag", {
                             {"intrin:avx512", Isa::avx512, nullptr,
                              [](const EmbeddingBagConfig& k) { return create_embedding_bag_simd(k, Isa::avx512); }},
                             {"intrin:avx2", Isa::avx2, nullptr,
                              [](const EmbeddingBagConfig& k) { return create_embedding_bag_simd(k, Isa::avx2); }},
                             {"ref:scalar", Isa::scalar, nullptr,
                              [](const EmbeddingBagConfig&) -> std::shared_ptr<const EmbeddingBagKernel> {
                                  return std::make_shared<RefEmbeddingBag>();
                              }},
                         });
    return r;
}

}  // namespace detail

// ---- single table ------------------------------------------------------------------------------

struct EmbeddingBagPlan::State {
    EmbeddingBagDesc d;  // resolved
    const char* impl = nullptr;
    std::shared_ptr<const detail::EmbeddingBagKernel> kernel;
};

EmbeddingBagPlan::EmbeddingBagPlan(const EmbeddingBagDesc& desc) {
    auto s = std::make_shared<State>();
    s->d = detail::embedding_bag_validate_desc("xk::EmbeddingBagPlan", desc);
    const auto sel = detail::embedding_bag_registry().get(detail::embedding_bag_config(s->d));
    s->impl = sel.impl->name;
    s->kernel = sel.kernel;
    s_ = std::move(s);
}

void EmbeddingBagPlan::run(const EmbeddingBagArgs& args) const {
    const detail::EmbeddingBagCall c = detail::embedding_bag_validate_args("xk::EmbeddingBagPlan::run", s_->d, args);
    detail::run_call(c, *s_->kernel);
}

const EmbeddingBagDesc& EmbeddingBagPlan::desc() const { return s_->d; }
const char* EmbeddingBagPlan::impl_name() const { return s_->impl; }

void embedding_bag(const EmbeddingBagDesc& desc, const EmbeddingBagArgs& args) {
    constexpr const char* fn = "xk::embedding_bag";
    const EmbeddingBagDesc d = detail::embedding_bag_validate_desc(fn, desc);
    const detail::EmbeddingBagCall c = detail::embedding_bag_validate_args(fn, d, args);
    const auto sel = detail::embedding_bag_registry().get(detail::embedding_bag_config(d));
    detail::run_call(c, *sel.kernel);
}

// ---- lookup ------------------------------------------------------------------------------------

void embedding(const EmbeddingBagDesc& desc, const EmbeddingArgs& args) {
    constexpr const char* fn = "xk::embedding";
    if (desc.mode != EmbeddingBagMode::sum)
        detail::fail_arg(fn, "mode", embedding_bag_mode_name(desc.mode), "must be sum (the default: a lookup has no pooling)");
    if (desc.include_last_offset) detail::fail_arg(fn, "include_last_offset", "true", "must be false (a lookup has no offsets)");
    if (desc.per_sample_weights) detail::fail_arg(fn, "per_sample_weights", "true", "must be false (a lookup has no weights)");
    EmbeddingBagDesc d = detail::embedding_bag_validate_desc(fn, desc);
    const int64_t n = args.num_indices;
    detail::check_nonnegative(fn, "num_indices", n);
    detail::checked_mul(fn, "num_indices*ld_out", n, d.ld_out);
    detail::checked_mul(fn, "num_indices*sizeof(index)", n, 8);
    if (n > 0) {
        detail::check_not_null(fn, "table", args.table);
        detail::check_not_null(fn, "indices", args.indices);
        detail::check_not_null(fn, "out", args.out);
    }
    const int64_t isz = detail::index_size(d.index_type);
    detail::check_aligned(fn, "indices", args.indices, isz);
    detail::check_aligned(fn, "table", args.table, d.row_quant == EmbeddingRowQuant::none ? dtype_size(d.table_dtype) : 1);
    detail::check_aligned(fn, "out", args.out, dtype_size(d.out_dtype));
    const int64_t out_bytes = detail::span_bytes(n, d.dim, d.ld_out, dtype_size(d.out_dtype));
    const int64_t table_bytes = d.num_embeddings == 0 ? 0
                                                      : (d.num_embeddings - 1) * detail::embedding_bag_row_stride_bytes(d) +
                                                            detail::embedding_bag_row_bytes(d);
    if (detail::overlaps(args.out, out_bytes, args.table, table_bytes))
        detail::fail_arg(fn, "out", detail::ptr_str(args.out), "overlaps table=" + detail::ptr_str(args.table));
    if (detail::overlaps(args.out, out_bytes, args.indices, n * isz))
        detail::fail_arg(fn, "out", detail::ptr_str(args.out), "overlaps indices=" + detail::ptr_str(args.indices));
    // A lookup is a max-pooling bag of one entry each: the row converted exactly (no 0 + x).
    d.mode = EmbeddingBagMode::max;
    d.padding_idx = -1;
    detail::EmbeddingBagCall c;
    c.fn = fn;
    c.d = d;
    c.a.num_bags = n;
    c.a.num_indices = n;
    c.a.table = args.table;
    c.a.indices = args.indices;
    c.a.out = args.out;
    c.lookup = true;
    const auto sel = detail::embedding_bag_registry().get(detail::embedding_bag_config(d));
    detail::run_call(c, *sel.kernel);
}

// ---- merged tables -----------------------------------------------------------------------------

struct EmbeddingBagMultiPlan::State {
    struct Table {
        std::string fn;      // "xk::EmbeddingBagMultiPlan::run: tables[t]" for messages
        EmbeddingBagDesc d;  // resolved, ld_out = the merged ld_out
        int64_t col = 0;
        const char* impl = nullptr;
        std::shared_ptr<const detail::EmbeddingBagKernel> kernel;
    };
    std::vector<Table> tables;
    int64_t total_dim = 0, ld_out = 0;
    DType out_dtype = DType::f32;
};

EmbeddingBagMultiPlan::EmbeddingBagMultiPlan(std::vector<EmbeddingBagDesc> tables, int64_t ld_out) {
    constexpr const char* fn = "xk::EmbeddingBagMultiPlan";
    auto s = std::make_shared<State>();
    if (tables.empty()) detail::fail_arg(fn, "tables.size()", "0", "must be >= 1");
    detail::check_nonnegative(fn, "ld_out", ld_out);
    for (size_t t = 0; t < tables.size(); ++t) {
        const std::string tfn = std::string(fn) + ": tables[" + std::to_string(t) + "]";
        if (tables[t].ld_out != 0)
            detail::fail_arg(tfn.c_str(), "ld_out", std::to_string(tables[t].ld_out),
                             "must be 0 (the merged output's ld_out is used)");
        State::Table tb;
        tb.d = detail::embedding_bag_validate_desc(tfn.c_str(), tables[t]);
        if (tb.d.out_dtype != tables[0].out_dtype)
            detail::fail_arg(tfn.c_str(), "out_dtype", dtype_name(tb.d.out_dtype),
                             std::string("must equal tables[0].out_dtype=") + dtype_name(tables[0].out_dtype));
        tb.col = s->total_dim;
        s->total_dim = detail::checked_add(fn, "sum of dims", s->total_dim, tb.d.dim);
        tb.fn = std::string("xk::EmbeddingBagMultiPlan::run: tables[") + std::to_string(t) + "]";
        s->tables.push_back(std::move(tb));
    }
    s->ld_out = ld_out == 0 ? s->total_dim : ld_out;
    detail::check_ld(fn, "ld_out", s->ld_out, s->total_dim, "sum of dims");
    s->out_dtype = tables[0].out_dtype;
    for (State::Table& tb : s->tables) {
        tb.d.ld_out = s->ld_out;
        const auto sel = detail::embedding_bag_registry().get(detail::embedding_bag_config(tb.d));
        tb.impl = sel.impl->name;
        tb.kernel = sel.kernel;
    }
    s_ = std::move(s);
}

void EmbeddingBagMultiPlan::run(const EmbeddingBagArgs* args, int64_t num_tables, void* out) const {
    constexpr const char* fn = "xk::EmbeddingBagMultiPlan::run";
    const int64_t T = static_cast<int64_t>(s_->tables.size());
    if (num_tables != T)
        detail::fail_arg(fn, "num_tables", std::to_string(num_tables), "must equal the plan's " + std::to_string(T) + " tables");
    detail::check_not_null(fn, "args", args);
    const int64_t B = args[0].num_bags;
    std::vector<detail::EmbeddingBagCall> calls;
    calls.reserve(static_cast<size_t>(T));
    const int64_t esize = dtype_size(s_->out_dtype);
    for (int64_t t = 0; t < T; ++t) {
        const State::Table& tb = s_->tables[static_cast<size_t>(t)];
        const std::string arg = "args[" + std::to_string(t) + "].";
        if (args[t].out)
            detail::fail_arg(fn, (arg + "out").c_str(), detail::ptr_str(args[t].out),
                             "must be null (the merged output is the out argument)");
        if (args[t].num_bags != B)
            detail::fail_arg(fn, (arg + "num_bags").c_str(), std::to_string(args[t].num_bags),
                             "must equal args[0].num_bags=" + std::to_string(B) + " (every table has the same bags)");
        EmbeddingBagArgs a = args[t];
        a.out = out ? static_cast<char*>(out) + tb.col * esize : nullptr;
        calls.push_back(detail::embedding_bag_validate_args(tb.fn.c_str(), tb.d, a));
    }

    // All (table, bag) items in one parallel region, table-major, split into one chunk per thread
    // balanced by bytes gathered: table t's work before its bag b is (offset(b) + b) * row bytes.
    std::vector<double> cum(static_cast<size_t>(T) + 1, 0.0), cost(static_cast<size_t>(T));
    int64_t grain = 1 << 30;
    for (int64_t t = 0; t < T; ++t) {
        const auto& c = calls[static_cast<size_t>(t)];
        grain = std::min(grain, detail::embedding_bag_grain(c));
        cost[t] = static_cast<double>(std::max<int64_t>(detail::embedding_bag_row_bytes(c.d), 1));
        const int64_t units = B > 0 ? c.bag_end(B - 1) + B : 0;
        cum[t + 1] = cum[t] + static_cast<double>(units) * cost[t];
    }
    const int64_t items = detail::checked_mul(fn, "num_tables*num_bags", T, B);
    if (items == 0) return;
    const int64_t n = detail::parallel_threads(items, grain);
    // Chunk boundary i of n as a global item t * B + b.
    auto split = [&](int64_t i) -> int64_t {
        if (i <= 0) return 0;
        if (i >= n) return items;
        const double target = cum[T] * static_cast<double>(i) / static_cast<double>(n);
        int64_t t = 0;
        while (t + 1 < T && cum[t + 1] <= target) ++t;
        const auto& c = calls[static_cast<size_t>(t)];
        const double local = (target - cum[t]) / cost[t];
        int64_t lo = 0, hi = B;
        while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (static_cast<double>(c.offset(mid) + mid) >= local) hi = mid;
            else lo = mid + 1;
        }
        return t * B + lo;
    };
    auto run_items = [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1;) {
            const int64_t t = i / B, b0 = i % B, b1 = std::min(B, b0 + (i1 - i));
            s_->tables[static_cast<size_t>(t)].kernel->run(calls[static_cast<size_t>(t)], b0, b1);
            i += b1 - b0;
        }
    };
    // Every table's indices are checked before anything is written: on the calling thread below
    // par_check_threads() threads, else each chunk's in the chunks' own region (as run_call).
    auto validate_all = [&] {
        for (int64_t t = 0; t < T; ++t) detail::embedding_bag_validate_indices(calls[static_cast<size_t>(t)]);
    };
    if (n <= 1 || n < detail::par_check_threads()) {
        validate_all();
        if (n <= 1) run_items(0, items);
        else detail::parallel_for(n, 1, [&](int64_t c0, int64_t c1) { run_items(split(c0), split(c1)); });
        return;
    }
    // Chunk i's items, table by table: the index ranges of its bags.
    auto check_chunk = [&](int64_t i) {
        const int64_t i1 = split(i + 1);
        for (int64_t it = split(i); it < i1;) {
            const int64_t t = it / B, b0 = it % B, b1 = std::min(B, b0 + (i1 - it));
            const auto& c = calls[static_cast<size_t>(t)];
            if (!detail::embedding_bag_indices_in_range(c, c.bag_begin(b0), c.bag_end(b1 - 1))) return false;
            it += b1 - b0;
        }
        return true;
    };
    if (!detail::run_chunks_checked(n, check_chunk, [&](int64_t c0, int64_t c1) { run_items(split(c0), split(c1)); }))
        validate_all();  // throws, naming the first table's first bad index
}

int64_t EmbeddingBagMultiPlan::num_tables() const { return static_cast<int64_t>(s_->tables.size()); }
int64_t EmbeddingBagMultiPlan::total_dim() const { return s_->total_dim; }
int64_t EmbeddingBagMultiPlan::ld_out() const { return s_->ld_out; }

int64_t EmbeddingBagMultiPlan::column(int64_t t) const {
    detail::check_range("xk::EmbeddingBagMultiPlan::column", "t", t, 0, num_tables() - 1);
    return s_->tables[static_cast<size_t>(t)].col;
}

const char* EmbeddingBagMultiPlan::impl_name(int64_t t) const {
    detail::check_range("xk::EmbeddingBagMultiPlan::impl_name", "t", t, 0, num_tables() - 1);
    return s_->tables[static_cast<size_t>(t)].impl;
}

void embedding_bag_multi(const std::vector<EmbeddingBagDesc>& tables, const EmbeddingBagArgs* args,
                         int64_t num_tables, void* out, int64_t ld_out) {
    EmbeddingBagMultiPlan(tables, ld_out).run(args, num_tables, out);
}

}  // namespace xk
