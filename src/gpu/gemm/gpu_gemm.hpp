// Internal: the GPU GEMM's kernel configurations, forced kernels (tests, bench) and the tuner.
#pragma once
#include <string>
#include <vector>

#include "xk/gpu_gemm.hpp"

namespace xk::gpu::detail {

// Compile-time parameters of gemm.cl (see its header comment) or, for the XMX kernel,
// gemm_xmx.cl (sg_m x sg_n subgroups of 8, each mr x nr blocks of 8 x 8).
struct GemmConfig {
    int mwg = 64, nwg = 64, kwg = 16, mdimc = 8, ndimc = 8, vwm = 1, vwn = 1, use_local = 1;
    int splitk = 1;                            // > 1: split-K in that many k ranges + a reduce kernel
    std::string str() const;                   // "MWG64,NWG64,KWG16,MDIMC8,NDIMC8,VWM1,VWN1,L1[,S4]"
    static bool parse(const std::string& s, GemmConfig& out);
    bool valid(int64_t max_wg_size, int64_t local_mem_bytes) const;
    bool operator==(const GemmConfig& o) const { return str() == o.str(); }
};
struct XmxConfig {
    int sg_m = 2, sg_n = 2, mr = 2, nr = 2;
    std::string str() const;
};

enum class GemmKernelKind { automatic, tiled, xmx, xmx_emulated };

struct GemmOptions {
    GemmKernelKind kind = GemmKernelKind::automatic;
    bool force_config = false;                 // tiled: run `config` (no tuning)
    GemmConfig config;
    int tune = -1;                             // -1: XK_GPU_TUNE (default on), 0 off, 1 on
    // Split-K: a new workspace Buffer per call (a sub-buffer created and released each call), as
    // before the context's scratch; bench_gpu_gemm's diagnostic rows only.
    bool splitk_fresh_workspace = false;
};

// gemm() with forced choices; the public gemm() is gemm_ex(ctx, desc, t, {}).
Event gemm_ex(const Context& ctx, const GemmDesc& desc, const GemmTensors& t, const GemmOptions& opt,
              std::string* kernel_name = nullptr);

// The tuner's candidates for this device, and the default configuration (XK_GPU_TUNE=0).
std::vector<GemmConfig> gemm_candidates(const Context& ctx);
// The candidates the tuner times for d: the above, plus split-K forms of the smaller GPU tiles
// where they leave compute units idle (few work-groups along M x N) and K is long enough.
std::vector<GemmConfig> gemm_candidates(const Context& ctx, const GemmDesc& d);
// Every candidate of a device type (GPU or CPU device), before the device's limits filter them.
std::vector<GemmConfig> gemm_candidates_for(bool cpu_device);
GemmConfig gemm_default_config(const Context& ctx);
// Forgets the in-memory tuning results (tests: the next call reads gemm_tune.txt again).
void gemm_tuner_clear_memory();
// The tuning file (empty when the disk cache is off).
std::string gemm_tune_file();

}  // namespace xk::gpu::detail
