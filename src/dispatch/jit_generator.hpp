// Base class of every xbyak generator: System V x86-64 ABI prologue/epilogue, vzeroupper on exit
// from vector code, and write-xor-execute code pages (emitted into RW memory, then switched to RX
// before the first call; never writable and executable at once).
// XK_JIT_DUMP=1 writes every finished kernel's code to xk_jit_<pid>_<n>.bin in the working
// directory (XK_JIT_DUMP=<dir>: in that directory), for `objdump -D -b binary -mi386:x86-64`
// or llvm-mca; XK_VERBOSE=1 logs each file's name.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "dispatch/xbyak_config.hpp"
#include "xk/error.hpp"
#include "xk/isa.hpp"

namespace xk::detail {

// Writes size bytes of code to a file when XK_JIT_DUMP is set (jit_dump.cpp); returns the file's
// path, or "" when not dumping or the write failed (reported on stderr).
std::string jit_dump(const void* code, size_t size);

class JitGenerator : public Xbyak::CodeGenerator {
public:
    explicit JitGenerator(Isa isa, size_t max_code_bytes = 64 * 1024)
        : Xbyak::CodeGenerator(max_code_bytes, Xbyak::DontSetProtectRWE), isa_(isa) {
        setDefaultJmpNEAR(true);  // generated loops are long; short jumps would not reach
    }

    Isa isa() const { return isa_; }

    // Finishes emission and flips the pages to read+execute. Must be called once, after generate.
    template <class Fn>
    Fn finalize() {
        ready();               // resolves labels (fixed buffer: no-op for protection)
        jit_dump(getCode(), getSize());
        setProtectModeRE();    // W^X: RW while emitting, RX from here on
        return getCode<Fn>();
    }

protected:
    // Integer argument registers of the System V ABI, in order.
    const Xbyak::Reg64 abi_param1 = rdi, abi_param2 = rsi, abi_param3 = rdx, abi_param4 = rcx,
                       abi_param5 = r8, abi_param6 = r9;

    // Saves the callee-saved registers the kernel uses (rbx, rbp, r12..r15).
    void preamble(std::vector<Xbyak::Reg64> callee_saved = {}) {
        saved_ = std::move(callee_saved);
        for (const auto& r : saved_) push(r);
    }
    // Restores them, clears the upper vector state after AVX code, returns.
    void postamble() {
        for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) pop(*it);
        if (isa_ >= Isa::avx2) vzeroupper();
        ret();
    }

private:
    Isa isa_;
    std::vector<Xbyak::Reg64> saved_;
};

}  // namespace xk::detail
