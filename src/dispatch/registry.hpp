// One registry per op family: implementations listed best-first, each with the ISA it needs and a
// supports(desc) predicate. Selection = the first entry whose ISA the machine and the cap allow
// and which supports the descriptor. The chosen implementation's kernel is created through the
// kernel cache, keyed by (op, implementation, descriptor), so it is generated once per process.
//
// A family supplies:
//   Desc   — value type with `std::string key() const` (canonical, printable, unique per kernel)
//   Kernel — its abstract kernel interface (e.g. `struct GemmKernel { virtual void run(...) const; }`)
// and lists Impl<Desc, Kernel>{name, isa, supports, create} entries. Adding an ISA variant = one
// new entry in the family's list.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "dispatch/kernel_cache.hpp"
#include "dispatch/verbose.hpp"
#include "xk/error.hpp"
#include "xk/isa.hpp"

namespace xk::detail {

template <class Desc, class Kernel>
struct Impl {
    const char* name;                                    // e.g. "jit:avx2", "ref:scalar", "onednn"
    Isa isa;                                             // ISA level the implementation needs
    bool (*supports)(const Desc&);                       // nullptr = supports everything
    std::shared_ptr<const Kernel> (*create)(const Desc&);  // may JIT-generate; throws on failure
    // false: select() never picks it. It is reached only by name or by iterating impls() (tests
    // forcing each entry, a family's measured routing, a lookup by packed layout); its supports()
    // still says what it can run.
    bool selectable = true;
};

template <class Desc, class Kernel>
class Registry {
public:
    using ImplT = Impl<Desc, Kernel>;

    Registry(const char* op, std::vector<ImplT> impls) : op_(op), impls_(std::move(impls)) {}

    const char* op() const { return op_; }
    const std::vector<ImplT>& impls() const { return impls_; }

    // First implementation allowed under `cap` (and by the machine) that supports `d`.
    const ImplT& select(const Desc& d, Isa cap) const {
        for (const ImplT& impl : impls_) {
            if (!impl.selectable || impl.isa > cap || !isa_supported(impl.isa)) continue;
            if (impl.supports && !impl.supports(d)) continue;
            return impl;
        }
        throw Error(Status::unsupported, std::string(op_) + ": no implementation supports " + d.key() +
                                             " under ISA cap " + isa_name(cap));
    }

    struct Selected {
        const ImplT* impl;
        std::shared_ptr<const Kernel> kernel;
    };

    // Select under the current cap and fetch (or create) the kernel through the cache.
    Selected get(const Desc& d) const { return get(d, select(d, max_isa())); }

    // Fetch the kernel of a given implementation (tests force each one this way).
    Selected get(const Desc& d, const ImplT& impl) const {
        const std::string dkey = d.key();
        const std::string key = std::string(op_) + "|" + impl.name + "|" + dkey;
        auto kernel = KernelCache::instance().get_or_create<Kernel>(key, [&]() {
            const double t0 = now_us();
            std::shared_ptr<const Kernel> k = impl.create(d);
            verbose_log("create", op_, std::string(impl.name) + "," + dkey, now_us() - t0);
            return k;
        });
        // Level 1 logs each generation (above); level 2 logs every selection, one-shot calls too.
        if (verbose_level() >= 2) verbose_log("select", op_, std::string(impl.name) + "," + dkey, 0.0);
        return {&impl, std::move(kernel)};
    }

    // Look an implementation up by name; throws if unknown.
    const ImplT& find(const std::string& name) const {
        for (const ImplT& impl : impls_)
            if (name == impl.name) return impl;
        throw Error(Status::invalid_argument, std::string(op_) + ": unknown implementation '" + name + "'");
    }

private:
    const char* op_;
    std::vector<ImplT> impls_;
};

}  // namespace xk::detail
