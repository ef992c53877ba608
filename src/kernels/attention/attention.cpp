// Attention family: validation, the KV cache (append), the task driver (query blocks x kv heads x
// key splits over threads, exact merge of split states) and the registry.
#include "kernels/attention/attention.hpp"
#include "common/cpu_vendor.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "xk/isa.hpp"

#include "common/check.hpp"
#include "common/parallel.hpp"
#include "xk/runtime.hpp"

namespace xk {
namespace detail {
namespace {

struct RefAttention final : AttnKernel {
    AttnKernelDesc kd;
    explicit RefAttention(const AttnKernelDesc& d) : kd(d) {}
    void run(const AttnTask& t, float* m, float* l, float* acc) const override { attention_reference(kd, t, m, l, acc); }
};

std::string idx_name(const char* arr, int64_t i) { return std::string(arr) + "[" + std::to_string(i) + "]"; }

// [tokens x heads x head_dim]: resolves 0 strides to packed and checks token-major layout.
void resolve_tensor(const char* fn, const char* name, int64_t tokens, int64_t heads, int64_t head_dim,
                    int64_t& ts, int64_t& hs) {
    const std::string tsn = std::string(name) + "_token_stride", hsn = std::string(name) + "_head_stride";
    check_nonnegative(fn, tsn.c_str(), ts);
    check_nonnegative(fn, hsn.c_str(), hs);
    if (hs == 0) hs = head_dim;
    if (heads > 1) check_ld(fn, hsn.c_str(), hs, head_dim, "head_dim");
    const int64_t row = checked_add(fn, (std::string(name) + " row").c_str(),
                                    checked_mul(fn, (std::string(name) + " row").c_str(), heads - 1, hs), head_dim);
    if (ts == 0) ts = row;
    if (tokens > 1) check_ld(fn, tsn.c_str(), ts, row, "(heads-1)*head_stride+head_dim");
    checked_mul(fn, (std::string(name) + " extent").c_str(), std::max<int64_t>(tokens, 1), ts);
}

float resolve_scale(const char* fn, float scale, int64_t head_dim) {
    if (!std::isfinite(scale)) fail_arg(fn, "scale", float_str(scale), "must be finite (0 = 1/sqrt(head_dim))");
    return scale == 0.0f ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) : scale;
}

void check_heads(const char* fn, int64_t q_heads, int64_t kv_heads, int64_t head_dim) {
    check_positive(fn, "q_heads", q_heads);
    check_positive(fn, "kv_heads", kv_heads);
    check_positive(fn, "head_dim", head_dim);
    if (q_heads % kv_heads != 0)
        fail_arg(fn, "q_heads", std::to_string(q_heads),
                 "must be a multiple of kv_heads=" + std::to_string(kv_heads) + " (MHA / GQA / MQA)");
}

// cu_seqlens [batch + 1]: starts at 0, non-decreasing, ends at total.
void check_cu(const char* fn, const char* name, const int64_t* cu, int64_t batch, int64_t total, const char* total_name) {
    check_not_null(fn, name, cu);
    if (cu[0] != 0) fail_arg(fn, idx_name(name, 0).c_str(), std::to_string(cu[0]), "must be 0");
    for (int64_t b = 1; b <= batch; ++b)
        if (cu[b] < cu[b - 1])
            fail_arg(fn, idx_name(name, b).c_str(), std::to_string(cu[b]),
                     "must be >= " + idx_name(name, b - 1) + "=" + std::to_string(cu[b - 1]));
    if (cu[batch] != total)
        fail_arg(fn, idx_name(name, batch).c_str(), std::to_string(cu[batch]),
                 std::string("must equal ") + total_name + "=" + std::to_string(total));
}

// ---- the task driver ---------------------------------------------------------------------------

struct SeqInfo {
    int64_t q_begin = 0, nq = 0;  // global first query token, count
    int64_t nk = 0;               // keys used
    int64_t pos0 = 0;             // causal: query i sees keys j <= pos0 + i
    int64_t mask_row = 0;         // global token of query 0 (mask rows)
};

struct Problem {
    int64_t q_heads = 0, kv_heads = 0, head_dim = 0;
    float scale = 1.0f;
    DType q_dtype = DType::f32, o_dtype = DType::f32, kv_dtype = DType::f32;
    const void* q = nullptr;
    void* o = nullptr;
    float* lse = nullptr;
    int64_t q_ts = 0, q_hs = 0, o_ts = 0, o_hs = 0;
    bool causal = false;
    const float* mask = nullptr;
    int64_t mask_stride = 0;
    int64_t kv_splits = 0;
    std::vector<SeqInfo> seqs;
    std::function<AttnKvSource(int64_t b, int64_t h)> kv;
    bool vec_rows = isa_supported(Isa::avx512);  // q / o rows converted with AVX-512
};

struct Unit {
    int64_t b, h, t0, nt;  // sequence, kv head, query tokens [t0, t0 + nt) of the sequence
    int64_t j0, j1;        // key range
    int64_t split, splits; // index of this piece, pieces of its key range
    int64_t part;          // offset of its state in the partial buffer (splits > 1)
};

inline int64_t limit_of(const Problem& p, const SeqInfo& s, int64_t i) {
    if (!p.causal) return s.nk;
    return std::clamp<int64_t>(s.pos0 + i + 1, 0, s.nk);
}

inline float load_el(const void* base, int64_t off, DType t) {
    if (t == DType::bf16) return bf16::from_bits(static_cast<const uint16_t*>(base)[off]).to_float();
    return static_cast<const float*>(base)[off];
}

void write_row(const Problem& p, const SeqInfo& s, int64_t h, int64_t r, int64_t t0, int64_t group, float m, float l,
               const float* acc) {
    const int64_t tok = s.q_begin + t0 + r / group, qh = h * group + r % group;
    const int64_t hd = p.head_dim;
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int64_t off = tok * p.o_ts + qh * p.o_hs;
    if (p.vec_rows) {
        const bool b = p.o_dtype == DType::bf16;
        attn_o_row_avx512(acc, inv, b, b ? static_cast<void*>(static_cast<uint16_t*>(p.o) + off)
                                         : static_cast<void*>(static_cast<float*>(p.o) + off), hd);
    } else if (p.o_dtype == DType::bf16) {
        uint16_t* o = static_cast<uint16_t*>(p.o) + off;
        for (int64_t d = 0; d < hd; ++d) o[d] = bf16(acc[d] * inv).bits;
    } else {
        float* o = static_cast<float*>(p.o) + off;
        for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
    if (p.lse) p.lse[tok * p.q_heads + qh] = l > 0.0f ? m + std::log(l) : -std::numeric_limits<float>::infinity();
}

void execute(const AttnKernel& kernel, const Problem& p) {
    const int64_t group = p.q_heads / p.kv_heads, hd = p.head_dim;
    // Query tokens per task: the kernel's task_rows() (256; amx:bf16 512: the K / V tiles a task
    // packs are shared by its rows), fewer (down to ~64 rows) while that leaves under 4 tasks a thread.
    const int threads = get_num_threads();
    int64_t tq = std::max<int64_t>(1, kernel.task_rows() / group);
    for (;;) {
        int64_t tasks = 0;
        for (const SeqInfo& s : p.seqs) tasks += (s.nq + tq - 1) / tq * p.kv_heads;
        if (tq * group <= 64 || tq == 1 || tasks >= 4 * threads) break;
        tq = std::max<int64_t>(1, tq / 2);
    }
    // Units before splitting.
    std::vector<Unit> base;
    for (int64_t b = 0; b < static_cast<int64_t>(p.seqs.size()); ++b) {
        const SeqInfo& s = p.seqs[b];
        for (int64_t h = 0; h < p.kv_heads; ++h)
            for (int64_t t0 = 0; t0 < s.nq; t0 += tq) {
                const int64_t nt = std::min(tq, s.nq - t0);
                int64_t jmax = 0;
                for (int64_t i = t0; i < t0 + nt; ++i) jmax = std::max(jmax, limit_of(p, s, i));
                base.push_back(Unit{b, h, t0, nt, 0, jmax, 0, 1, 0});
            }
    }
    if (base.empty()) return;
    // Split granule: 64 keys (a multiple of the tile and of every paged block size / 16).
    constexpr int64_t kGranule = 64;
    // Automatic (kv_splits = 0): fewer than 2 units a thread -> ~8 pieces a thread, each >= 512 keys
    // (device Xeon, 16 threads, b 1 x 32 heads / 8 kv heads x 128, slot A/B against the previous 4
    // pieces a kv head (2 a thread, >= 256 keys): 32768 tokens f32 98.6-100.6 -> 127.2-131.1 GB/s,
    // bf16 83.5-86.8 -> 109.6-110.1; 8192 f32 93.5-94.8 -> 112.5-118.2, bf16 mixed; 2048 unchanged
    // (4 pieces of 512 keys: 256-key pieces were slower, bf16 93.5 -> 87.5)).
    int64_t want = p.kv_splits;
    if (want == 0) {
        const int64_t u = static_cast<int64_t>(base.size());
        want = u >= 2 * threads ? 1 : (8 * threads + u - 1) / u;
    }
    std::vector<Unit> units;
    int64_t part_floats = 0;
    for (const Unit& u : base) {
        int64_t splits = std::max<int64_t>(1, want);
        if (p.kv_splits == 0) splits = std::min(splits, (u.j1 + 511) / 512);  // >= 512 keys a piece
        splits = std::max<int64_t>(1, std::min(splits, (u.j1 + kGranule - 1) / kGranule));
        const int64_t granules = (u.j1 + kGranule - 1) / kGranule;
        for (int64_t s = 0; s < splits; ++s) {
            Unit v = u;
            v.j0 = std::min(u.j1, granules * s / splits * kGranule);
            v.j1 = std::min(u.j1, granules * (s + 1) / splits * kGranule);
            v.split = s;
            v.splits = splits;
            v.part = part_floats;
            if (splits > 1) part_floats += u.nt * group * (hd + 2);
            units.push_back(v);
        }
    }
    std::vector<float> parts(static_cast<size_t>(part_floats));
    const int64_t nunits = static_cast<int64_t>(units.size());
    // Threads take the units of one (sequence, kv head) after another (its K / V stay in cache
    // across them: handing out all the largest first cost the 2-vCPU VM's f32 / bf16 prefill ~20%),
    // within one the largest first (causal: the last token blocks), so the units left at the end
    // are short ones.
    std::vector<int64_t> order(static_cast<size_t>(nunits));
    for (int64_t i = 0; i < nunits; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const Unit &ua = units[a], &ub = units[b];
        if (ua.b != ub.b || ua.h != ub.h) return ua.b != ub.b ? ua.b < ub.b : ua.h < ub.h;
        return ua.nt * (ua.j1 - ua.j0) > ub.nt * (ub.j1 - ub.j0);
    });
    std::atomic<int64_t> next{0};
    const int nthr = static_cast<int>(std::min<int64_t>(threads, nunits));
    // Per-thread buffers sized by the largest task of this call (decode: one token), not
    // zero-filled: every kernel writes what it reads.
    int64_t max_nt = 1;
    for (const Unit& u : units) max_nt = std::max(max_nt, u.nt);
    // A split key range is merged by the thread that finishes its last piece (one parallel region).
    std::unique_ptr<std::atomic<int64_t>[]> pieces_done(part_floats ? new std::atomic<int64_t>[nunits] : nullptr);
    if (part_floats)
        for (int64_t i = 0; i < nunits; ++i) pieces_done[i].store(0, std::memory_order_relaxed);
    // Merge the split states exactly: M = max m_s, l = sum l_s e^(m_s - M), acc likewise.
    auto merge = [&](int64_t first, float* acc) {
        const Unit& u0 = units[first];
        const SeqInfo& s = p.seqs[u0.b];
        const int64_t rows = u0.nt * group;
        for (int64_t r = 0; r < rows; ++r) {
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t k = 0; k < u0.splits; ++k) mx = std::max(mx, parts[units[first + k].part + r * (hd + 2)]);
            std::fill(acc, acc + hd, 0.0f);
            float l = 0.0f;
            if (mx != -std::numeric_limits<float>::infinity()) {
                for (int64_t k = 0; k < u0.splits; ++k) {
                    const float* st = parts.data() + units[first + k].part + r * (hd + 2);
                    if (st[0] == -std::numeric_limits<float>::infinity()) continue;
                    const float c = std::exp(st[0] - mx);
                    l += st[1] * c;
                    for (int64_t d = 0; d < hd; ++d) acc[d] += st[2 + d] * c;
                }
            }
            write_row(p, s, u0.h, r, u0.t0, group, mx, l, acc);
        }
    };
    parallel_for(nthr, 1, [&](int64_t, int64_t) {
        const int64_t max_rows = max_nt * group;
        const size_t nq = static_cast<size_t>(max_rows * hd);
        std::unique_ptr<float[]> buf(new float[2 * nq + 2 * static_cast<size_t>(max_rows) +
                                               static_cast<size_t>(attn_scratch_floats(max_rows, hd))]);
        float* qbuf = buf.get();
        float* accp = qbuf + nq;
        float* mp = accp + nq;
        float* lp = mp + max_rows;
        float* scratch = lp + max_rows;
        std::vector<int64_t> lim(static_cast<size_t>(max_nt));
        for (;;) {
            const int64_t oi = next.fetch_add(1);
            if (oi >= nunits) break;
            const int64_t ui = order[oi];
            const Unit& u = units[ui];
            const SeqInfo& s = p.seqs[u.b];
            const int64_t rows = u.nt * group;
            for (int64_t r = 0; r < rows; ++r) {
                const int64_t tok = s.q_begin + u.t0 + r / group, qh = u.h * group + r % group;
                const int64_t off = tok * p.q_ts + qh * p.q_hs;
                if (p.vec_rows) {
                    const bool b = p.q_dtype == DType::bf16;
                    attn_q_row_avx512(b ? static_cast<const void*>(static_cast<const uint16_t*>(p.q) + off)
                                        : static_cast<const void*>(static_cast<const float*>(p.q) + off),
                                      b, p.scale, qbuf + r * hd, hd);
                } else {
                    for (int64_t d = 0; d < hd; ++d) qbuf[r * hd + d] = load_el(p.q, off + d, p.q_dtype) * p.scale;
                }
            }
            for (int64_t i = 0; i < u.nt; ++i) lim[i] = limit_of(p, s, u.t0 + i);
            AttnTask t;
            t.tokens = u.nt;
            t.group = group;
            t.head_dim = hd;
            t.q = qbuf;
            t.scale = p.scale;
            t.limit = lim.data();
            if (p.mask) {
                t.mask = p.mask + (s.mask_row + u.t0) * p.mask_stride;
                t.mask_stride = p.mask_stride;
            }
            t.kv = p.kv(u.b, u.h);
            t.j_begin = u.j0;
            t.j_end = u.j1;
            t.scratch = scratch;
            if (u.j1 > u.j0) {
                kernel.run(t, mp, lp, accp);
            } else {
                std::fill(mp, mp + rows, -std::numeric_limits<float>::infinity());
                std::fill(lp, lp + rows, 0.0f);
                std::fill(accp, accp + rows * hd, 0.0f);
            }
            if (u.splits == 1) {
                for (int64_t r = 0; r < rows; ++r) write_row(p, s, u.h, r, u.t0, group, mp[r], lp[r], accp + r * hd);
            } else {
                float* dst = parts.data() + u.part;
                for (int64_t r = 0; r < rows; ++r) {
                    dst[r * (hd + 2)] = mp[r];
                    dst[r * (hd + 2) + 1] = lp[r];
                    std::copy(accp + r * hd, accp + (r + 1) * hd, dst + r * (hd + 2) + 2);
                }
                const int64_t first = ui - u.split;
                if (pieces_done[first].fetch_add(1, std::memory_order_acq_rel) + 1 == u.splits) merge(first, accp);
            }
        }
    });
}

std::shared_ptr<const AttnKernel> select_kernel(int64_t head_dim, DType kv_dtype) {
    AttnKernelDesc kd;
    kd.head_dim = head_dim;
    kd.kv_dtype = kv_dtype;
    return attention_registry().get(kd).kernel;
}

// ---- KV cache ----------------------------------------------------------------------------------

void check_cache_desc(const char* fn, const KvCacheDesc& c) {
    if (c.layout != KvLayout::contiguous && c.layout != KvLayout::paged)
        fail_arg(fn, "cache.layout", std::to_string(static_cast<int>(c.layout)), "is not a KvLayout (contiguous=0, paged=1)");
    if (c.dtype != DType::f32 && c.dtype != DType::bf16 && c.dtype != DType::s8)
        fail_arg(fn, "cache.dtype", dtype_name(c.dtype), "must be f32, bf16 or s8");
    check_positive(fn, "cache.batch", c.batch);
    check_positive(fn, "cache.kv_heads", c.kv_heads);
    check_positive(fn, "cache.head_dim", c.head_dim);
    const int64_t row = checked_mul(fn, "kv_heads*head_dim", c.kv_heads, c.head_dim);
    if (c.layout == KvLayout::contiguous) {
        check_positive(fn, "cache.capacity", c.capacity);
        checked_mul(fn, "batch*kv_heads*capacity*head_dim", checked_mul(fn, "batch*capacity", c.batch, c.capacity), row);
    } else {
        if (c.block_size != 16 && c.block_size != 32 && c.block_size != 64)
            fail_arg(fn, "cache.block_size", std::to_string(c.block_size), "must be 16, 32 or 64");
        check_positive(fn, "cache.num_blocks", c.num_blocks);
        check_positive(fn, "cache.max_blocks_per_seq", c.max_blocks_per_seq);
        checked_mul(fn, "num_blocks*block_size*kv_heads*head_dim", checked_mul(fn, "num_blocks*block_size", c.num_blocks, c.block_size), row);
        checked_mul(fn, "batch*max_blocks_per_seq", c.batch, c.max_blocks_per_seq);
        checked_mul(fn, "max_blocks_per_seq*block_size", c.max_blocks_per_seq, c.block_size);
    }
}

void check_cache_ptrs(const char* fn, const KvCacheDesc& c, const KvCache& k) {
    check_not_null(fn, "cache.k", k.k);
    check_not_null(fn, "cache.v", k.v);
    if (c.layout == KvLayout::paged) check_not_null(fn, "cache.block_table", k.block_table);
    if (c.dtype == DType::s8) {
        check_not_null(fn, "cache.k_scale", k.k_scale);
        check_not_null(fn, "cache.v_scale", k.v_scale);
    }
}

// The block of token `pos` of sequence `b`, checked against the pool.
int64_t checked_block(const char* fn, const KvCacheDesc& c, const KvCache& k, int64_t b, int64_t pos) {
    const int64_t col = pos / c.block_size;
    const int64_t blk = k.block_table[b * c.max_blocks_per_seq + col];
    if (blk < 0 || blk >= c.num_blocks)
        fail_arg(fn, ("block_table[" + std::to_string(b) + "][" + std::to_string(col) + "]").c_str(), std::to_string(blk),
                 "is a block index past the pool: must be in [0, num_blocks=" + std::to_string(c.num_blocks) + ")");
    return blk;
}

AttnKvSource cache_source(const KvCacheDesc& c, const KvCache& k, int64_t b, int64_t h) {
    AttnKvSource s;
    const int es = dtype_size(c.dtype);
    s.k_stride = s.v_stride = c.head_dim;
    int64_t srow = 0;  // scale index of the head's first row
    if (c.layout == KvLayout::contiguous) {
        srow = (b * c.kv_heads + h) * c.capacity;
    } else {
        srow = h * c.block_size;
        s.blocks = k.block_table + b * c.max_blocks_per_seq;
        s.block_size = c.block_size;
        s.block_elems = c.kv_heads * c.block_size * c.head_dim;
        s.scale_block_elems = c.kv_heads * c.block_size;
    }
    s.k = static_cast<const char*>(k.k) + srow * c.head_dim * es;
    s.v = static_cast<const char*>(k.v) + srow * c.head_dim * es;
    if (c.dtype == DType::s8) {
        s.k_scale = k.k_scale + srow;
        s.v_scale = k.v_scale + srow;
    }
    return s;
}

}  // namespace

namespace {
std::atomic<int64_t> g_pf_tiles_override{-1};
std::atomic<int> g_pf_spread_override{-1};
}  // namespace

void attn_prefetch_override(int64_t tiles, int spread) {
    g_pf_tiles_override.store(tiles, std::memory_order_relaxed);
    g_pf_spread_override.store(spread, std::memory_order_relaxed);
}

int64_t attn_prefetch_tiles() {
    if (const int64_t o = g_pf_tiles_override.load(std::memory_order_relaxed); o >= 0) return o;
    static const int64_t v = [] {  // -1: not set
        const char* e = std::getenv("XK_ATTN_PF");
        if (!e || !*e) return int64_t{-1};
        return std::clamp<int64_t>(std::atoll(e), 0, 64);
    }();
    return v >= 0 ? v : attn_prefetch_spread() ? 2 : 4;
}

int attn_prefetch_mode(int elem_bytes) {
    if (const int o = g_pf_spread_override.load(std::memory_order_relaxed); o >= 0) return std::min(o, 2);
    static const int v = [] {  // -1: not set
        const char* e = std::getenv("XK_ATTN_PF_SPREAD");
        if (!e || !*e) return -1;
        return std::clamp(std::atoi(e), 0, 2);
    }();
    if (v >= 0) return v;
    (void)elem_bytes;  // (the same form for every dtype: measured per dtype, docs/attention.md)
    return attn_amd() ? 2 : 1;
}

bool attn_prefetch_spread() { return attn_prefetch_mode() != 0; }

namespace {
std::atomic<int> g_prefill_pf_override{-1};
}  // namespace

void attn_prefill_prefetch_override(int v) { g_prefill_pf_override.store(v, std::memory_order_relaxed); }

bool attn_prefill_prefetch() {
    if (const int o = g_prefill_pf_override.load(std::memory_order_relaxed); o >= 0) return o != 0;
    static const bool v = [] {
        const char* e = std::getenv("XK_ATTN_PREFILL_PF");
        return e && *e && std::atoi(e) != 0;
    }();
    return v;
}

bool attn_amd() { return cpu_is_amd(); }

namespace {
std::atomic<int> g_decode_seq_override{-1};
}  // namespace

void attn_decode_seq_override(int v) { g_decode_seq_override.store(v, std::memory_order_relaxed); }

bool attn_decode_seq() {
    if (const int o = g_decode_seq_override.load(std::memory_order_relaxed); o >= 0) return o != 0;
    static const bool v = [] {
        const char* e = std::getenv("XK_ATTN_DECODE_SEQ");
        if (!e || !*e) return attn_amd();
        return std::atoi(e) != 0;
    }();
    return v;
}

int attn_prefetch_khint() {
    static const int v = [] {
        const char* e = std::getenv("XK_ATTN_PF_KHINT");
        if (!e || !*e) return attn_amd() ? 2 : 3;
        return std::atoi(e) == 2 ? 2 : 3;
    }();
    return v;
}

int attn_prefetch_vhint() {
    static const int v = [] {
        const char* e = std::getenv("XK_ATTN_PF_VHINT");
        if (!e || !*e) return 2;
        return std::clamp(std::atoi(e), 0, 3);
    }();
    return v;
}

std::string AttnKernelDesc::key() const {
    return "head_dim=" + std::to_string(head_dim) + ",kv=" + dtype_name(kv_dtype);
}

const Registry<AttnKernelDesc, AttnKernel>& attention_registry() {
    static const Registry<AttnKernelDesc, AttnKernel> r(
        "attention",
        {
            // bf16 caches, head_dim a multiple of 32: both prefill products on AMX tiles (decode-sized
            // tasks run the avx512 code inside it).
            {"amx:bf16", Isa::amx,
             [](const AttnKernelDesc& kd) {
                 return kd.kv_dtype == DType::bf16 && kd.head_dim % 32 == 0 && kd.head_dim <= 256 && attn_hd_compiled(kd.head_dim);
             },
             create_attention_amx_variant},
            // The same on AVX512-BF16 (VDPBF16PS for the tile products): bf16 prefill on CPUs without
            // AMX (on AMD Zen 4 VDPBF16PS issues at the FMA rate: 2x its multiply-adds).
            {"dpbf16:bf16", Isa::avx512_bf16,
             [](const AttnKernelDesc& kd) {
                 return kd.kv_dtype == DType::bf16 && kd.head_dim % 32 == 0 && kd.head_dim <= 256 && attn_hd_compiled(kd.head_dim);
             },
             create_attention_dpbf16_variant},
            {"intr:avx512", Isa::avx512,
             [](const AttnKernelDesc& kd) { return kd.head_dim % 16 == 0 && kd.head_dim <= 256 && attn_hd_compiled(kd.head_dim); },
             create_attention_avx512},
            {"intr:avx2", Isa::avx2,
             [](const AttnKernelDesc& kd) {
                 return kd.head_dim % 16 == 0 && kd.head_dim <= 256 && attn_hd_compiled(kd.head_dim) && kd.kv_dtype != DType::s8;
             },
             create_attention_avx2},
            {"ref:scalar", Isa::scalar, nullptr,
             [](const AttnKernelDesc& kd) -> std::shared_ptr<const AttnKernel> { return std::make_shared<RefAttention>(kd); }},
        });
    return r;
}

}  // namespace detail

using namespace detail;

int64_t kv_cache_capacity(const KvCacheDesc& c) {
    check_cache_desc("xk::kv_cache_capacity", c);
    return c.layout == KvLayout::contiguous ? c.capacity : c.max_blocks_per_seq * c.block_size;
}

int64_t kv_cache_scale_elements(const KvCacheDesc& c) {
    check_cache_desc("xk::kv_cache_scale_elements", c);
    return c.layout == KvLayout::contiguous ? c.batch * c.kv_heads * c.capacity : c.num_blocks * c.kv_heads * c.block_size;
}

int64_t kv_cache_elements(const KvCacheDesc& c) {
    check_cache_desc("xk::kv_cache_elements", c);
    return c.layout == KvLayout::contiguous ? c.batch * c.kv_heads * c.capacity * c.head_dim
                                            : c.num_blocks * c.kv_heads * c.block_size * c.head_dim;
}

void kv_cache_append(const KvCacheDesc& c, const KvCache& cache, const KvAppendArgs& a) {
    const char* fn = "xk::kv_cache_append";
    check_cache_desc(fn, c);
    check_nonnegative(fn, "tokens", a.tokens);
    check_io_dtype(fn, "src_dtype", a.src_dtype);
    int64_t kts = a.k_token_stride, khs = a.k_head_stride, vts = a.v_token_stride, vhs = a.v_head_stride;
    resolve_tensor(fn, "k", a.tokens, c.kv_heads, c.head_dim, kts, khs);
    resolve_tensor(fn, "v", a.tokens, c.kv_heads, c.head_dim, vts, vhs);
    if (a.tokens == 0) return;
    check_cache_ptrs(fn, c, cache);
    check_not_null(fn, "k_new", a.k_new);
    check_not_null(fn, "v_new", a.v_new);
    check_not_null(fn, "seq_ids", a.seq_ids);
    check_not_null(fn, "positions", a.positions);
    const int64_t cap = c.layout == KvLayout::contiguous ? c.capacity : c.max_blocks_per_seq * c.block_size;
    const bool rope = a.rope_cos_sin != nullptr;
    int64_t rdim = a.rope_rotary_dim;
    if (rope) {
        if (a.rope_style != RopeStyle::neox && a.rope_style != RopeStyle::gptj)
            fail_arg(fn, "rope_style", std::to_string(static_cast<int>(a.rope_style)), "is not a RopeStyle (neox=0, gptj=1)");
        if (rdim == 0) rdim = c.head_dim;
        if (rdim < 2 || rdim > c.head_dim || rdim % 2 != 0)
            fail_arg(fn, "rope_rotary_dim", std::to_string(a.rope_rotary_dim),
                     "must be even and in [2, head_dim=" + std::to_string(c.head_dim) + "] (0 = head_dim)");
        check_positive(fn, "rope_max_position", a.rope_max_position);
        checked_mul(fn, "rope_max_position*rotary_dim", a.rope_max_position, rdim);
        for (int64_t t = 0; t < a.tokens; ++t)
            if (a.positions[t] >= a.rope_max_position)
                fail_arg(fn, idx_name("positions", t).c_str(), std::to_string(a.positions[t]),
                         "must be < rope_max_position=" + std::to_string(a.rope_max_position) + " (the RoPE table)");
    }
    std::vector<int64_t> dst(static_cast<size_t>(a.tokens));  // element offset of (token, head 0)
    for (int64_t t = 0; t < a.tokens; ++t) {
        const int64_t b = a.seq_ids[t], pos = a.positions[t];
        if (b < 0 || b >= c.batch)
            fail_arg(fn, idx_name("seq_ids", t).c_str(), std::to_string(b),
                     "must be in [0, batch=" + std::to_string(c.batch) + ")");
        if (pos < 0 || pos >= cap)
            fail_arg(fn, idx_name("positions", t).c_str(), std::to_string(pos),
                     "is past the cache capacity: must be in [0, " + std::to_string(cap) + ")");
        if (c.layout == KvLayout::contiguous) {
            dst[t] = (b * c.kv_heads * c.capacity + pos) * c.head_dim;
        } else {
            const int64_t blk = checked_block(fn, c, cache, b, pos);
            dst[t] = (blk * c.kv_heads * c.block_size + pos % c.block_size) * c.head_dim;
        }
    }
    const int64_t head_step = (c.layout == KvLayout::contiguous ? c.capacity : c.block_size) * c.head_dim;
    const int64_t hd = c.head_dim;
    parallel_for(a.tokens, std::max<int64_t>(1, 4096 / (c.kv_heads * hd)), [&](int64_t tb, int64_t te) {
        std::vector<float> row(rope || c.dtype == DType::s8 ? static_cast<size_t>(hd) : 0);
        for (int64_t t = tb; t < te; ++t)
            for (int64_t h = 0; h < c.kv_heads; ++h)
                for (int which = 0; which < 2; ++which) {
                    const void* src = which ? a.v_new : a.k_new;
                    const int64_t soff = which ? t * vts + h * vhs : t * kts + h * khs;
                    const int64_t doff = dst[t] + h * head_step;
                    void* base = which ? cache.v : cache.k;
                    if ((rope && which == 0) || c.dtype == DType::s8) {  // through fp32: RoPE, int8 quantization
                        for (int64_t i = 0; i < hd; ++i) row[i] = load_el(src, soff + i, a.src_dtype);
                        if (rope && which == 0) {  // K rotated at its position, stored rounded once
                            const float* cs = a.rope_cos_sin + a.positions[t] * rdim;
                            const int64_t half = rdim / 2;
                            for (int64_t i = 0; i < half; ++i) {
                                const int64_t i1 = a.rope_style == RopeStyle::neox ? i : 2 * i;
                                const int64_t i2 = a.rope_style == RopeStyle::neox ? i + half : 2 * i + 1;
                                const float x1 = row[i1], x2 = row[i2], co = cs[i], si = cs[half + i];
                                row[i1] = x1 * co - x2 * si;
                                row[i2] = x2 * co + x1 * si;
                            }
                        }
                        if (c.dtype == DType::f32) {
                            float* d = static_cast<float*>(base) + doff;
                            for (int64_t i = 0; i < hd; ++i) d[i] = row[i];
                        } else if (c.dtype == DType::bf16) {
                            uint16_t* d = static_cast<uint16_t*>(base) + doff;
                            for (int64_t i = 0; i < hd; ++i) d[i] = bf16(row[i]).bits;
                        } else {  // s8: symmetric per row, scale = max|x| / 127
                            float amax = 0.0f;
                            for (int64_t i = 0; i < hd; ++i) amax = std::max(amax, std::fabs(row[i]));
                            const float sc = amax / 127.0f;
                            const float inv = sc > 0.0f ? 1.0f / sc : 0.0f;
                            int8_t* d = static_cast<int8_t*>(base) + doff;
                            for (int64_t i = 0; i < hd; ++i) {
                                const float x = std::nearbyint(row[i] * inv);
                                d[i] = x == x ? static_cast<int8_t>(std::clamp(x, -127.0f, 127.0f)) : int8_t{0};
                            }
                            (which ? cache.v_scale : cache.k_scale)[doff / hd] = sc;
                        }
                    } else if (c.dtype == DType::f32) {
                        float* d = static_cast<float*>(base) + doff;
                        for (int64_t i = 0; i < hd; ++i) d[i] = load_el(src, soff + i, a.src_dtype);
                    } else if (a.src_dtype == DType::bf16) {
                        uint16_t* d = static_cast<uint16_t*>(base) + doff;
                        const uint16_t* s = static_cast<const uint16_t*>(src) + soff;
                        for (int64_t i = 0; i < hd; ++i) d[i] = s[i];
                    } else {
                        uint16_t* d = static_cast<uint16_t*>(base) + doff;
                        const float* s = static_cast<const float*>(src) + soff;
                        for (int64_t i = 0; i < hd; ++i) d[i] = bf16(s[i]).bits;
                    }
                }
    });
}

namespace detail {
namespace {

// Every check of the descriptor alone; strides, mask_stride and the scale resolved.
AttentionDesc resolve_sdpa(const char* fn, const AttentionDesc& desc) {
    AttentionDesc d = desc;
    check_nonnegative(fn, "batch", d.batch);
    check_nonnegative(fn, "q_tokens", d.q_tokens);
    check_nonnegative(fn, "kv_tokens", d.kv_tokens);
    check_heads(fn, d.q_heads, d.kv_heads, d.head_dim);
    check_io_dtype(fn, "dtype", d.dtype);
    check_io_dtype(fn, "o_dtype", d.o_dtype);
    d.scale = resolve_scale(fn, d.scale, d.head_dim);
    resolve_tensor(fn, "q", d.q_tokens, d.q_heads, d.head_dim, d.q_token_stride, d.q_head_stride);
    resolve_tensor(fn, "k", d.kv_tokens, d.kv_heads, d.head_dim, d.k_token_stride, d.k_head_stride);
    resolve_tensor(fn, "v", d.kv_tokens, d.kv_heads, d.head_dim, d.v_token_stride, d.v_head_stride);
    resolve_tensor(fn, "o", d.q_tokens, d.q_heads, d.head_dim, d.o_token_stride, d.o_head_stride);
    check_nonnegative(fn, "mask_stride", d.mask_stride);
    if (d.has_mask && d.mask_stride == 0) d.mask_stride = d.kv_tokens;
    if (d.has_mask) checked_mul(fn, "q_tokens*mask_stride", d.q_tokens, d.mask_stride);
    return d;
}

// The arguments (pointers, cu_seqlens, seqused_k) against a resolved descriptor, then the call.
void run_sdpa(const char* fn, const AttentionDesc& d, const AttnKernel& kernel, const AttentionArgs& a) {
    const float scale = d.scale;
    if (!d.has_mask && a.mask) fail_arg(fn, "mask", ptr_str(a.mask), "is given but has_mask is false");
    if (d.q_tokens == 0 || d.batch == 0) return;
    check_not_null(fn, "q", a.q);
    check_not_null(fn, "o", a.o);
    if (d.kv_tokens > 0) {
        check_not_null(fn, "k", a.k);
        check_not_null(fn, "v", a.v);
    }
    if (d.has_mask) check_not_null(fn, "mask", a.mask);
    int64_t one_q[2] = {0, d.q_tokens}, one_k[2] = {0, d.kv_tokens};
    const int64_t* cq = a.cu_seqlens_q;
    const int64_t* ck = a.cu_seqlens_k;
    if (d.batch == 1 && !cq) cq = one_q;
    if (d.batch == 1 && !ck) ck = one_k;
    check_cu(fn, "cu_seqlens_q", cq, d.batch, d.q_tokens, "q_tokens");
    check_cu(fn, "cu_seqlens_k", ck, d.batch, d.kv_tokens, "kv_tokens");
    Problem p;
    p.seqs.resize(static_cast<size_t>(d.batch));
    for (int64_t b = 0; b < d.batch; ++b) {
        SeqInfo& s = p.seqs[b];
        s.q_begin = s.mask_row = cq[b];
        s.nq = cq[b + 1] - cq[b];
        s.nk = ck[b + 1] - ck[b];
        if (a.seqused_k) {
            const int64_t u = a.seqused_k[b];
            if (u < 0 || u > s.nk)
                fail_arg(fn, idx_name("seqused_k", b).c_str(), std::to_string(u),
                         "must be in [0, " + std::to_string(s.nk) + "] (the keys of sequence " + std::to_string(b) + ")");
            s.nk = u;
        }
        if (d.has_mask && s.nk > d.mask_stride)
            fail_arg(fn, "mask_stride", std::to_string(d.mask_stride),
                     "must be >= the keys of sequence " + std::to_string(b) + " (" + std::to_string(s.nk) + ")");
        s.pos0 = d.causal_offset;
    }
    p.q_heads = d.q_heads;
    p.kv_heads = d.kv_heads;
    p.head_dim = d.head_dim;
    p.scale = scale;
    p.q_dtype = d.dtype;
    p.kv_dtype = d.dtype;
    p.o_dtype = d.o_dtype;
    p.q = a.q;
    p.o = a.o;
    p.lse = a.lse;
    p.q_ts = d.q_token_stride;
    p.q_hs = d.q_head_stride;
    p.o_ts = d.o_token_stride;
    p.o_hs = d.o_head_stride;
    p.causal = d.causal;
    p.mask = d.has_mask ? a.mask : nullptr;
    p.mask_stride = d.mask_stride;
    p.kv_splits = 1;
    const int es = dtype_size(d.dtype);
    p.kv = [&](int64_t b, int64_t h) {
        AttnKvSource s;
        // (k / v may be null where no key is read: no offset from null)
        s.k = a.k ? static_cast<const char*>(a.k) + (ck[b] * d.k_token_stride + h * d.k_head_stride) * es : nullptr;
        s.v = a.v ? static_cast<const char*>(a.v) + (ck[b] * d.v_token_stride + h * d.v_head_stride) * es : nullptr;
        s.k_stride = d.k_token_stride;
        s.v_stride = d.v_token_stride;
        return s;
    };
    execute(kernel, p);
}

CachedAttentionDesc resolve_cached(const char* fn, const CachedAttentionDesc& desc) {
    CachedAttentionDesc d = desc;
    const KvCacheDesc& c = d.cache;
    check_cache_desc(fn, c);
    check_nonnegative(fn, "q_tokens", d.q_tokens);
    check_heads(fn, d.q_heads, c.kv_heads, c.head_dim);
    check_io_dtype(fn, "q_dtype", d.q_dtype);
    check_io_dtype(fn, "o_dtype", d.o_dtype);
    check_nonnegative(fn, "kv_splits", d.kv_splits);
    d.scale = resolve_scale(fn, d.scale, c.head_dim);
    resolve_tensor(fn, "q", d.q_tokens, d.q_heads, c.head_dim, d.q_token_stride, d.q_head_stride);
    resolve_tensor(fn, "o", d.q_tokens, d.q_heads, c.head_dim, d.o_token_stride, d.o_head_stride);
    return d;
}

void run_cached(const char* fn, const CachedAttentionDesc& d, const AttnKernel& kernel, const CachedAttentionArgs& a) {
    const KvCacheDesc& c = d.cache;
    const float scale = d.scale;
    if (d.q_tokens == 0) return;
    check_not_null(fn, "q", a.q);
    check_not_null(fn, "o", a.o);
    check_cache_ptrs(fn, c, a.cache);
    check_not_null(fn, "context_lens", a.context_lens);
    check_cu(fn, "cu_seqlens_q", a.cu_seqlens_q, c.batch, d.q_tokens, "q_tokens");
    const int64_t cap = c.layout == KvLayout::contiguous ? c.capacity : c.max_blocks_per_seq * c.block_size;
    Problem p;
    p.seqs.resize(static_cast<size_t>(c.batch));
    for (int64_t b = 0; b < c.batch; ++b) {
        SeqInfo& s = p.seqs[b];
        s.q_begin = a.cu_seqlens_q[b];
        s.nq = a.cu_seqlens_q[b + 1] - s.q_begin;
        const int64_t ctx = a.context_lens[b];
        if (ctx < s.nq || ctx > cap)
            fail_arg(fn, idx_name("context_lens", b).c_str(), std::to_string(ctx),
                     "must be in [" + std::to_string(s.nq) + " (the queries of sequence " + std::to_string(b) +
                         "), capacity=" + std::to_string(cap) + "]");
        s.nk = s.nq > 0 ? ctx : 0;
        s.pos0 = ctx - s.nq;
        if (c.layout == KvLayout::paged)
            for (int64_t pos = 0; pos < s.nk; pos += c.block_size) checked_block(fn, c, a.cache, b, pos);
    }
    p.q_heads = d.q_heads;
    p.kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.scale = scale;
    p.q_dtype = d.q_dtype;
    p.kv_dtype = c.dtype;
    p.o_dtype = d.o_dtype;
    p.q = a.q;
    p.o = a.o;
    p.lse = a.lse;
    p.q_ts = d.q_token_stride;
    p.q_hs = d.q_head_stride;
    p.o_ts = d.o_token_stride;
    p.o_hs = d.o_head_stride;
    p.causal = true;
    p.kv_splits = d.kv_splits;
    p.kv = [&](int64_t b, int64_t h) { return cache_source(c, a.cache, b, h); };
    execute(kernel, p);
}

}  // namespace
}  // namespace detail

void attention(const AttentionDesc& desc, const AttentionArgs& args) {
    const AttentionDesc d = resolve_sdpa("xk::attention", desc);
    run_sdpa("xk::attention", d, *select_kernel(d.head_dim, d.dtype), args);
}

AttentionPlan::AttentionPlan(const AttentionDesc& desc) : desc_(resolve_sdpa("xk::AttentionPlan", desc)) {
    AttnKernelDesc kd;
    kd.head_dim = desc_.head_dim;
    kd.kv_dtype = desc_.dtype;
    const auto sel = attention_registry().get(kd);
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

void AttentionPlan::run(const AttentionArgs& args) const { run_sdpa("xk::AttentionPlan::run", desc_, *kernel_, args); }

void cached_attention(const CachedAttentionDesc& desc, const CachedAttentionArgs& args) {
    const CachedAttentionDesc d = resolve_cached("xk::cached_attention", desc);
    run_cached("xk::cached_attention", d, *select_kernel(d.cache.head_dim, d.cache.dtype), args);
}

CachedAttentionPlan::CachedAttentionPlan(const CachedAttentionDesc& desc)
    : desc_(resolve_cached("xk::CachedAttentionPlan", desc)) {
    AttnKernelDesc kd;
    kd.head_dim = desc_.cache.head_dim;
    kd.kv_dtype = desc_.cache.dtype;
    const auto sel = attention_registry().get(kd);
    kernel_ = sel.kernel;
    impl_name_ = sel.impl->name;
}

void CachedAttentionPlan::run(const CachedAttentionArgs& args) const {
    run_cached("xk::CachedAttentionPlan::run", desc_, *kernel_, args);
}


}  // namespace xk
