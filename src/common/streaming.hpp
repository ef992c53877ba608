// When memory-bound kernels write their output with non-temporal (streaming) stores: only when
// the output of one call is too large to stay in the last-level cache anyway (then the stores
// skip the read-for-ownership of every written line and leave the cache to the inputs). Smaller
// outputs (decode shapes, anything the next op reads back from cache) use regular stores.
#pragma once
#include <cstddef>
#include <cstdint>

namespace xk::detail {

// Output bytes of one call from which streaming stores are used: by default
// max(8 MiB, min(L3 / 2, L3 / the CPUs sharing it, 32 MiB)) (the L3 of one instance, hwloc or
// CPUID: 16 MiB on a 2-CPU Zen 3 share of 32 MiB, 18.75 MiB on the 16-CPU Xeon share of 300 MiB);
// XK_NT_STORE_THRESHOLD=<bytes> in the environment (read once) overrides it.
int64_t nt_store_threshold();
// Tests: override the threshold (0: always stream where the rows are aligned); a negative value
// restores the default.
void set_nt_store_threshold(int64_t bytes);

inline bool use_nt_stores(int64_t output_bytes) { return output_bytes >= nt_store_threshold(); }

// Whether every row of an output (first row at p, rows ld elements of es bytes apart) starts on
// `align` bytes: streamed stores of a full vector or a bf16 pair (one register of 32 / 64 bytes)
// must be aligned to their width.
inline bool rows_aligned(const void* p, int64_t ld, int es, int64_t align) {
    return reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(align) == 0 && (ld * es) % align == 0;
}

// Zeroes bytes at p; nt: the 16-byte aligned middle with streaming stores (the caller issues the
// SFENCE before the data is published to other threads), the unaligned ends with memset.
void zero_fill(void* p, size_t bytes, bool nt);

}  // namespace xk::detail
