// Helpers shared by xk's oneDNN implementations (kernels/gemm/onednn_gemm.cpp, kernels/conv/
// onednn_conv.cpp, onednn_qconv.cpp): the CPU engine, a per-thread stream, per-thread scratch
// buffers, execution through per-thread memory objects (execute_cached), the calling thread's OpenMP thread count set for one primitive call (one thread under
// the std::thread backend, the TSan build), eltwise post-ops, a printable weights layout, and the
// conv routes' shape limits and JIT probe.
#pragma once
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <dnnl.hpp>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <unordered_map>

#include "xk/types.hpp"

namespace xk::detail::dnn {

inline const dnnl::engine& engine() {
    static const dnnl::engine e(dnnl::engine::kind::cpu, 0);
    return e;
}

inline dnnl::stream& thread_stream() {
    thread_local dnnl::stream s(engine());
    return s;
}

// Sets the calling thread's OpenMP thread count for one primitive creation / execution. With the
// std::thread parallel-for backend (the TSan build) oneDNN runs on the calling thread alone: its
// OpenMP pool synchronises inside the uninstrumented libgomp, so TSan would report every buffer a
// pool thread touches after the caller allocated it.
class OmpThreads {
public:
    explicit OmpThreads(int n) : saved_(omp_get_max_threads()) {
#if !XK_THREADING_OMP
        n = 1;
#endif
        if (n != saved_) omp_set_num_threads(n);
    }
    ~OmpThreads() {
        if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
    }
    OmpThreads(const OmpThreads&) = delete;
    OmpThreads& operator=(const OmpThreads&) = delete;

private:
    int saved_;
};

// Per-thread growing 64-byte aligned buffers (contents not kept across growth):
//   0 the scratchpad, 1 per-call reordered weights, 2 per-call small vectors (qconv's bias).
enum class Buf : int { scratchpad = 0, weights = 1, small = 2 };
inline void* thread_buffer(Buf which, size_t bytes) {
    struct B {
        void* p = nullptr;
        size_t cap = 0;
        ~B() { std::free(p); }
    };
    thread_local B b[3];
    B& x = b[static_cast<int>(which)];
    if (x.cap < bytes) {
        const size_t n = (bytes + 4095) / 4096 * 4096;
        void* p = std::aligned_alloc(64, n);
        if (!p) throw std::bad_alloc();
        std::free(x.p);
        x.p = p, x.cap = n;
    }
    return x.p;
}

// A process-unique id for a primitive object (never reused, unlike its address): what
// execute_cached() keys its per-thread memory objects by.
inline uint64_t new_prim_id() {
    static std::atomic<uint64_t> next{0};
    return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

// One argument of execute_cached(): DNNL_ARG_* kind, its memory descriptor (alive as long as the
// primitive), the data pointer of this call.
struct ExecArg {
    int kind;
    const dnnl::memory::desc* md;
    void* ptr;
};

// Executes `prim` (of id `id`, new_prim_id()) on `st` with `args`, reusing memory objects made by
// an earlier call of the same primitive on this thread: a call only sets the data handles that
// changed (compared with the handles it last set, kept beside the objects: no query of oneDNN per
// argument). Making and destroying oneDNN memory objects per call (each an aligned ~1 KiB
// allocation plus its storage, and a std::unordered_map of them) had cost 2-4 us per call, as
// much as a small convolution. Each thread keeps the objects of its 16 most recently made
// primitives. Throws dnnl::error.
inline void execute_cached(uint64_t id, const dnnl::primitive& prim, dnnl::stream& st, const ExecArg* args, int n) {
    constexpr int kMaxArgs = 8, kSlots = 16;
    struct Slot {
        uint64_t id = 0;
        int n = 0;
        dnnl_memory_t m[kMaxArgs] = {};
        void* ptr[kMaxArgs] = {};  // each object's data handle as last set (no query per call)
        void clear() {
            for (int i = 0; i < n; ++i)
                if (m[i]) dnnl_memory_destroy(m[i]);
            id = 0, n = 0;
        }
    };
    struct Cache {
        Slot s[kSlots];
        unsigned next = 0;
        ~Cache() {
            for (Slot& x : s) x.clear();
        }
    };
    thread_local Cache cache;
    if (n > kMaxArgs) throw dnnl::error(dnnl_invalid_arguments, "execute_cached: too many arguments");
    Slot* slot = nullptr;
    for (Slot& x : cache.s)
        if (x.id == id && x.n == n) {
            slot = &x;
            break;
        }
    if (!slot) {
        slot = &cache.s[cache.next++ % kSlots];
        slot->clear();
        for (int i = 0; i < n; ++i) {
            const dnnl_status_t s = dnnl_memory_create(&slot->m[i], &args[i].md->data, engine().get(), args[i].ptr);
            if (s != dnnl_success) {
                slot->n = i;
                slot->clear();
                throw dnnl::error(s, "could not create a memory object");
            }
            slot->n = i + 1;
            slot->ptr[i] = args[i].ptr;
        }
        slot->id = id;
    } else {
        for (int i = 0; i < n; ++i) {
            if (slot->ptr[i] != args[i].ptr) {
                const dnnl_status_t s = dnnl_memory_set_data_handle_v2(slot->m[i], args[i].ptr, st.get());
                if (s != dnnl_success) {
                    slot->clear();
                    throw dnnl::error(s, "could not set a memory object's data handle");
                }
                slot->ptr[i] = args[i].ptr;
            }
        }
    }
    dnnl_exec_arg_t ea[kMaxArgs];
    for (int i = 0; i < n; ++i) ea[i] = {args[i].kind, slot->m[i]};
    const dnnl_status_t s = dnnl_primitive_execute(prim.get(), st.get(), n, ea);
    if (s != dnnl_success) throw dnnl::error(s, "could not execute a primitive");
}

// A readable, comparable description of a (blocked) memory descriptor.
inline std::string md_layout(const dnnl::memory::desc& md) {
    const dnnl_memory_desc_t& c = md.data;
    std::ostringstream os;
    os << "dt" << static_cast<int>(c.data_type) << ":d";
    for (int i = 0; i < c.ndims; ++i) os << c.dims[i] << (i + 1 < c.ndims ? "x" : "");
    os << ":p";
    for (int i = 0; i < c.ndims; ++i) os << c.padded_dims[i] << (i + 1 < c.ndims ? "x" : "");
    if (c.format_kind == dnnl_blocked) {
        const auto& b = c.format_desc.blocking;
        os << ":s";
        for (int i = 0; i < c.ndims; ++i) os << b.strides[i] << (i + 1 < c.ndims ? "," : "");
        os << ":b";
        for (int i = 0; i < b.inner_nblks; ++i) os << b.inner_idxs[i] << "." << b.inner_blks[i] << ";";
    } else {
        os << ":fk" << static_cast<int>(c.format_kind);
    }
    os << ":x" << static_cast<int>(c.extra.flags);
    return os.str();
}

// The eltwise post-op of an activation (alpha set for swish); undef for none.
inline dnnl::algorithm eltwise_alg(Activation a, float& alpha) {
    alpha = 0.0f;
    switch (a) {
        case Activation::relu: return dnnl::algorithm::eltwise_relu;
        case Activation::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
        case Activation::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
        case Activation::silu: alpha = 1.0f; return dnnl::algorithm::eltwise_swish;
        case Activation::none: break;
    }
    return dnnl::algorithm::undef;
}

// oneDNN's reference implementations ("ref:any", "gemm:ref", ...): never routed to.
inline bool is_reference_impl(const std::string& impl) {
    return impl.rfind("ref", 0) == 0 || impl.find(":ref") != std::string::npos;
}

// The shapes both conv routes keep from oneDNN 2.6: extents past int32, dilations past 256, and
// padding as wide as the dilated kernel (output pixels that see only padding: its f32 JIT read through a null pointer on
// such a shape, fuzz_conv: 1 x 1 input, 1 x 1 kernel, left padding 2, residual + gelu_tanh).
// Desc: ConvDesc or QConvDesc.
template <class Desc>
bool shape_supported(const Desc& d, int64_t oh, int64_t ow) {
    constexpr int64_t kMax = (int64_t(1) << 31) - 1;
    if (d.n * d.c * d.h * d.w > kMax || d.n * d.oc * oh * ow > kMax) return false;
    // Dilations past 256 (no network's; fuzz_conv's reach 2^58 with padding to match): oneDNN
    // 2.6 took 2.4 s to create a brgconv primitive for a 1 x 2 kernel of dilation 2^20.
    if (d.dilation_h > 256 || d.dilation_w > 256) return false;
    const int64_t ekh = (d.kh - 1) * d.dilation_h + 1, ekw = (d.kw - 1) * d.dilation_w + 1;
    return !(d.pad_top >= ekh || d.pad_bottom >= ekh || d.pad_left >= ekw || d.pad_right >= ekw);
}

// Whether oneDNN makes a non-reference primitive for `key` (the descriptor and thread count: oneDNN
// may pick by them), asked once per key and remembered: impl() creates the primitive descriptor
// and returns its impl_info_str(); a dnnl::error from it counts as no.
template <class Impl>
bool jit_available(const std::string& key, Impl impl) {
    static std::mutex mu;
    static std::unordered_map<std::string, bool> known;
    {
        std::lock_guard<std::mutex> lock(mu);
        auto it = known.find(key);
        if (it != known.end()) return it->second;
    }
    bool ok = false;
    try {
        ok = !is_reference_impl(impl());
    } catch (const dnnl::error&) {
        ok = false;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (known.size() >= 4096) known.clear();
    known[key] = ok;
    return ok;
}

}  // namespace xk::detail::dnn
