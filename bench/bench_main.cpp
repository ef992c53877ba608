// Common main of every bench executable.
//
// 1. XK_BENCH_QUICK=1 puts --benchmark_min_time=0.05 in front of the arguments (a later
//    --benchmark_min_time given by the user still wins).
// 2. Prints a header: xkernels version, CPU brand, ISA (hardware and effective), threads.
// 3. Runs the benchmarks with the normal display reporter (console, or whatever --benchmark_format
//    asks for; --benchmark_out= works unchanged) wrapped in a reporter that also records every run.
// 4. Prints the ours-vs-peer table: for each <family>/<dtype>/<shape...> with an `xk` run and at
//    least one peer run, xk's GFLOP/s or GB/s beside each peer's and the ratio xk/peer, plus the
//    share of the measured peak (peak/* benchmarks of this process, or XK_BENCH_PEAK_* variables),
//    the in-phase yardsticks' shares (Copy%, Peak%, BW%) and, for dtypes other than f32, xk's rate
//    over xk's f32 rate at the same shape (xk/f32). A row with GBPS is shown in GB/s.
//    The header and the table go to stdout with the console format, to stderr otherwise (so that
//    --benchmark_format=json stays valid JSON on stdout).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "xk/isa.hpp"
#include "xk/runtime.hpp"

namespace {

const char* const kProviders[] = {"xk", "onednn", "openblas", "libxsmm", "clblast", "torch"};

bool is_provider(const std::string& s) {
    for (const char* p : kProviders)
        if (s == p) return true;
    return false;
}

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t pos = 0;
    while (true) {
        const size_t next = s.find(sep, pos);
        out.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
        if (next == std::string::npos) break;
        pos = next + 1;
    }
    return out;
}

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Name parts Google Benchmark appends that say how, not what, was measured.
bool is_run_option(const std::string& part) {
    return part == "real_time" || part == "manual_time" || starts_with(part, "min_time:") ||
           starts_with(part, "iterations:") || starts_with(part, "repeats:");
}

// One measured benchmark (repetitions of one name are folded: the median is kept).
struct Entry {
    std::string family, dtype, provider, shape;  // shape: every part after the provider
    bool gflops = true;                          // GFLOPS (compute) or GBPS (memory)
    int threads = 0;                             // nt:N / threads:N; 0 = not stated
    std::vector<double> values;  // one per repetition
    double median_aggregate = -1, mean_aggregate = -1;  // when only aggregates are reported
    // In-phase shares of the yardsticks run between the row's calls (Copy%, Peak%, BW%: see
    // bench_util.hpp's CopyYardstick / InPhase), one value per repetition, per kind: "copy", the
    // Peak% loop's name from the label's "peak:<loop>" (else "fma"), "read" (BW%).
    struct InPhaseValues {
        std::string kind;
        std::vector<double> values;
        double median_aggregate = -1;
        double value() const {
            if (values.empty()) return median_aggregate;
            std::vector<double> v = values;
            std::sort(v.begin(), v.end());
            const size_t n = v.size();
            return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        }
    };
    std::vector<InPhaseValues> inphase;
    std::string inphase_text() const {
        std::string s;
        char buf[64];
        for (const InPhaseValues& p : inphase) {
            if (p.value() < 0) continue;
            std::snprintf(buf, sizeof buf, "%s%.0f%% %s", s.empty() ? "" : ", ", p.value(), p.kind.c_str());
            s += buf;
        }
        return s;
    }
    double value() const {
        if (values.empty()) return median_aggregate >= 0 ? median_aggregate : mean_aggregate;
        std::vector<double> v = values;
        std::sort(v.begin(), v.end());
        const size_t n = v.size();
        return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    }
};

// Forwards everything to the display reporter chosen by the flags and keeps the runs.
class CollectingReporter : public benchmark::BenchmarkReporter {
public:
    explicit CollectingReporter(benchmark::BenchmarkReporter* inner) : inner_(inner) {}

    bool ReportContext(const Context& context) override { return inner_->ReportContext(context); }
    void ReportRuns(const std::vector<Run>& reports) override {
        inner_->ReportRuns(reports);
        for (const Run& r : reports) record(r);
    }
    void Finalize() override { inner_->Finalize(); }

    const std::vector<std::string>& order() const { return order_; }
    const std::map<std::string, Entry>& entries() const { return entries_; }

private:
    void record(const Run& r) {
        if (r.error_occurred) return;
        // Repetitions: every iteration run is kept (the table takes their median); with
        // --benchmark_report_aggregates_only only the aggregates arrive: keep median and mean.
        const bool aggregate = r.run_type == Run::RT_Aggregate;
        if (aggregate && r.aggregate_name != "median" && r.aggregate_name != "mean") return;
        const auto gf = r.counters.find("GFLOPS"), gb = r.counters.find("GBPS");
        if (gf == r.counters.end() && gb == r.counters.end()) return;
        std::vector<std::string> parts = split(r.run_name.str(), '/');  // without the aggregate suffix
        if (parts.size() < 3 || !is_provider(parts[2])) return;
        Entry e;
        e.family = parts[0];
        e.dtype = parts[1];
        e.provider = parts[2];
        for (size_t i = 3; i < parts.size(); ++i) {
            const std::string& p = parts[i];
            if (is_run_option(p)) continue;
            if (starts_with(p, "nt:") || starts_with(p, "threads:")) e.threads = std::atoi(p.c_str() + p.find(':') + 1);
            e.shape += (e.shape.empty() ? "" : "/") + p;
        }
        // A row with both (bench_gemm's decode rows) is memory-bound: GB/s is its figure.
        e.gflops = gb == r.counters.end();
        const double v = e.gflops ? double(gf->second) : double(gb->second);
        const std::string key = e.family + "/" + e.dtype + "/" + e.provider + "/" + e.shape;
        auto it = entries_.find(key);
        if (it == entries_.end()) {
            it = entries_.emplace(key, e).first;
            order_.push_back(key);
        }
        for (const char* c : {"Copy%", "Peak%", "BW%"}) {
            const auto f = r.counters.find(c);
            if (f == r.counters.end() || (aggregate && r.aggregate_name != "median")) continue;
            std::string kind = c[0] == 'C' ? "copy" : c[0] == 'B' ? "read" : "fma";
            const size_t at = r.report_label.find("peak:");
            if (c[0] == 'P' && at != std::string::npos) {
                const size_t b = at + 5, e = r.report_label.find_first_of(" |,;)", b);
                kind = r.report_label.substr(b, e == std::string::npos ? std::string::npos : e - b);
            }
            auto& list = it->second.inphase;
            auto slot = std::find_if(list.begin(), list.end(), [&](const Entry::InPhaseValues& p) { return p.kind == kind; });
            if (slot == list.end()) slot = list.insert(list.end(), Entry::InPhaseValues{kind, {}, -1});
            if (aggregate) slot->median_aggregate = double(f->second);
            else slot->values.push_back(double(f->second));
        }
        if (!aggregate) it->second.values.push_back(v);
        else if (r.aggregate_name == "median") it->second.median_aggregate = v;
        else it->second.mean_aggregate = v;
    }

    benchmark::BenchmarkReporter* inner_;
    std::vector<std::string> order_;
    std::map<std::string, Entry> entries_;
};

// ---- peaks ---------------------------------------------------------------------------------------
// Per thread count: the best peak/<dtype>/xk/* GFLOPS (per dtype class) and the best peak/*/xk/*
// GBPS measured in this process, else from XK_BENCH_PEAK_GBPS / XK_BENCH_PEAK_GFLOPS_<DTYPE>
// ("1:20.5,2:31" per thread count, or one number for every count).
using PeakTable = std::map<int, double>;  // threads -> value

std::string dtype_class(const std::string& dtype) {
    if (starts_with(dtype, "u8") || starts_with(dtype, "s8")) return "s8";  // u8s8s32, u8s8f32, s8, ...
    if (dtype == "f16") return "bf16";  // same dot-product width class on these machines
    return dtype;
}

PeakTable parse_peak_env(const std::string& var) {
    PeakTable t;
    const char* e = std::getenv(var.c_str());
    if (!e || !*e) return t;
    for (const std::string& item : split(e, ',')) {
        const size_t colon = item.find(':');
        if (colon == std::string::npos) {
            t[0] = std::atof(item.c_str());  // 0: every thread count
        } else {
            t[std::atoi(item.substr(0, colon).c_str())] = std::atof(item.c_str() + colon + 1);
        }
    }
    return t;
}

double lookup_peak(const PeakTable& t, int threads) {
    if (t.empty()) return 0;
    auto it = t.find(threads);
    if (it != t.end()) return it->second;
    it = t.find(0);
    return it != t.end() ? it->second : 0;
}

std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

std::string fmt(double v) {
    char buf[32];
    if (v >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
    else if (v >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
    else std::snprintf(buf, sizeof buf, "%.2f", v);
    return buf;
}

void print_table(std::FILE* out, const CollectingReporter& rep) {
    const auto& entries = rep.entries();
    const int default_threads = xk::get_num_threads();

    // Peaks measured here.
    std::map<std::string, PeakTable> gflops_peak;  // dtype class -> threads -> best
    PeakTable gbps_peak;
    for (const std::string& key : rep.order()) {
        const Entry& e = entries.at(key);
        if (e.family != "peak" || e.provider != "xk") continue;
        const int t = e.threads ? e.threads : default_threads;
        double& slot = e.gflops ? gflops_peak[dtype_class(e.dtype)][t] : gbps_peak[t];
        slot = std::max(slot, e.value());
    }
    const bool measured_gbps = !gbps_peak.empty();
    const bool measured_peaks = !gflops_peak.empty() || measured_gbps;
    const PeakTable gbps_ref = measured_gbps ? gbps_peak : parse_peak_env("XK_BENCH_PEAK_GBPS");
    auto gflops_peak_for = [&](const std::string& dtype, int threads) {
        const std::string c = dtype_class(dtype);
        auto it = gflops_peak.find(c);
        if (it != gflops_peak.end()) return lookup_peak(it->second, threads);
        return lookup_peak(parse_peak_env("XK_BENCH_PEAK_GFLOPS_" + upper(c)), threads);
    };

    // Groups: family/dtype/shape -> provider -> entry, in first-seen order.
    std::vector<std::string> group_order;
    std::map<std::string, std::vector<const Entry*>> groups;
    for (const std::string& key : rep.order()) {
        const Entry& e = entries.at(key);
        const std::string g = e.family + "/" + e.dtype + "/" + e.shape + (e.gflops ? "#f" : "#b");
        if (!groups.count(g)) group_order.push_back(g);
        groups[g].push_back(&e);
    }

    // xk's f32 entry of the same family and shape, for the "xk/f32" column of the other dtypes'
    // GFLOP/s rows (bf16's and int8's AVX2 targets are stated against our f32 rate).
    auto f32_of = [&](const Entry& e) -> const Entry* {
        if (e.dtype == "f32" || !e.gflops) return nullptr;
        auto it = entries.find(e.family + "/f32/xk/" + e.shape);
        return it != entries.end() && it->second.gflops == e.gflops ? &it->second : nullptr;
    };

    struct Row {
        std::string family, dtype, shape, unit, xk, peer, peer_value, ratio, pct, inphase, vs_f32;
    };
    std::vector<Row> rows;
    bool any_vs_f32 = false;
    for (const std::string& g : group_order) {
        const auto& list = groups[g];
        const Entry* ours = nullptr;
        for (const Entry* e : list)
            if (e->provider == "xk") ours = e;
        if (!ours) continue;
        const Entry* f32 = f32_of(*ours);
        std::vector<const Entry*> peers;
        for (const Entry* e : list)
            if (e->provider != "xk") peers.push_back(e);
        if (peers.empty() && !f32) continue;
        if (peers.empty()) peers.push_back(nullptr);  // no peer (e.g. bf16 where oneDNN has none): xk/f32 alone
        for (const Entry* e : peers) {
            Row r;
            r.family = ours->family;
            r.dtype = ours->dtype;
            r.shape = ours->shape;
            r.unit = ours->gflops ? "GFLOP/s" : "GB/s";
            const double x = ours->value();
            r.xk = fmt(x);
            char buf[32];
            if (e) {
                const double p = e->value();
                r.peer = e->provider;
                r.peer_value = fmt(p);
                std::snprintf(buf, sizeof buf, "%.2fx", p > 0 ? x / p : 0.0);
                r.ratio = buf;
            } else {
                r.peer = "-";
            }
            const int t = ours->threads ? ours->threads : default_threads;
            const double peak = ours->gflops ? gflops_peak_for(ours->dtype, t) : lookup_peak(gbps_ref, t);
            if (peak > 0) {
                std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * x / peak);
                r.pct = buf;
            }
            r.inphase = ours->inphase_text();
            if (f32 && f32->value() > 0) {
                std::snprintf(buf, sizeof buf, "%.2fx", x / f32->value());
                r.vs_f32 = buf;
                any_vs_f32 = true;
            }
            rows.push_back(r);
        }
    }

    if (!rows.empty()) {
        const int ncol = any_vs_f32 ? 11 : 10;
        std::vector<Row> all = rows;
        all.insert(all.begin(), Row{"family", "dtype", "shape", "unit", "xk", "peer", "peer", "xk/peer", "xk %peak",
                                    "xk in-phase", "xk/f32"});
        size_t w[11] = {};
        for (const Row& r : all) {
            const std::string* f[11] = {&r.family, &r.dtype,  &r.shape, &r.unit,    &r.xk,    &r.peer,
                                        &r.peer_value, &r.ratio, &r.pct, &r.inphase, &r.vs_f32};
            for (int i = 0; i < ncol; ++i) w[i] = std::max(w[i], f[i]->size());
        }
        size_t total = 0;
        for (int i = 0; i < ncol; ++i) total += w[i] + 2;
        std::fprintf(out, "\n%s\n", std::string(total, '=').c_str());
        std::fprintf(out, "xkernels vs peers (median of repetitions; xk/peer > 1: xk is faster)\n");
        std::fprintf(out, "%s\n", std::string(total, '-').c_str());
        bool header = true;
        for (const Row& r : all) {
            std::fprintf(out, "%-*s  %-*s  %-*s  %-*s  %*s  %-*s  %*s  %*s  %*s  %-*s", int(w[0]), r.family.c_str(), int(w[1]),
                         r.dtype.c_str(), int(w[2]), r.shape.c_str(), int(w[3]), r.unit.c_str(), int(w[4]), r.xk.c_str(),
                         int(w[5]), r.peer.c_str(), int(w[6]), r.peer_value.c_str(), int(w[7]), r.ratio.c_str(), int(w[8]),
                         r.pct.c_str(), int(w[9]), r.inphase.c_str());
            if (ncol == 11) std::fprintf(out, "  %*s", int(w[10]), r.vs_f32.c_str());
            std::fprintf(out, "\n");
            if (header) std::fprintf(out, "%s\n", std::string(total, '-').c_str());
            header = false;
        }
        std::fprintf(out, "%s\n", std::string(total, '=').c_str());
        std::fprintf(out,
                     "xk %%peak: GFLOP/s rows against the best peak/<dtype>/xk/* compute peak, GB/s rows against the best\n"
                     "peak/*/xk/* bandwidth (cache-resident rows can exceed 100%%), at the row's thread count\n"
                     "(nt:N / threads:N; unstated = %d); measured in this process, else XK_BENCH_PEAK_GBPS /\n"
                     "XK_BENCH_PEAK_GFLOPS_<DTYPE> (blank: no peak known). xk in-phase: the row against a yardstick run\n"
                     "between its calls (copy: a streaming-store copy of the same bytes, Copy%%; read: a streaming read\n"
                     "of the same bytes, BW%%; fma_ymm, fma_zmm, vdpbf16ps, vpdpbusd, vpdpbusd_ymm, tdpbf16ps, tdpbusd: that\n"
                     "instruction's peak loop for half its flops, Peak%%), so a host whose speed drifts moves both alike.%s\n",
                     default_threads,
                     any_vs_f32 ? "\nxk/f32: xk's row against xk's f32 row of the same shape and threads (peer '-': no peer ran)." : "");
    }

    if (measured_peaks) {
        std::fprintf(out, "\nMeasured peaks (best per thread count; pass to other bench runs for the %%peak column):\n");
        std::ostringstream exp;
        exp << "export";
        auto join = [](const PeakTable& t) {
            std::ostringstream os;
            bool first = true;
            for (const auto& kv : t) {
                os << (first ? "" : ",") << kv.first << ":" << fmt(kv.second);
                first = false;
            }
            return os.str();
        };
        for (const auto& kv : gflops_peak) {
            std::fprintf(out, "  %-5s compute   GFLOP/s  %s\n", kv.first.c_str(), join(kv.second).c_str());
            exp << " XK_BENCH_PEAK_GFLOPS_" << upper(kv.first) << "=" << join(kv.second);
        }
        if (measured_gbps) {
            std::fprintf(out, "  DRAM  bandwidth GB/s     %s\n", join(gbps_peak).c_str());
            exp << " XK_BENCH_PEAK_GBPS=" << join(gbps_peak);
        }
        std::fprintf(out, "  %s\n", exp.str().c_str());
    }
    std::fflush(out);
}

bool flag_given(int argc, char** argv, const char* name) {
    const size_t n = std::strlen(name);
    for (int i = 1; i < argc; ++i)
        if (std::strncmp(argv[i], name, n) == 0 && (argv[i][n] == '\0' || argv[i][n] == '=')) return true;
    return false;
}

bool bool_flag(int argc, char** argv, const char* name) {
    const size_t n = std::strlen(name);
    bool v = false;
    for (int i = 1; i < argc; ++i) {
        if (std::strncmp(argv[i], name, n) != 0) continue;
        if (argv[i][n] == '\0') v = true;
        else if (argv[i][n] == '=') {
            const char* s = argv[i] + n + 1;
            v = !(std::strcmp(s, "false") == 0 || std::strcmp(s, "0") == 0 || std::strcmp(s, "no") == 0 ||
                  std::strcmp(s, "off") == 0);
        }
    }
    return v;
}

void print_header(std::FILE* out) {
    const xk::CpuInfo& c = xk::cpu_info();
    std::fprintf(out, "xkernels %s benchmarks\n", xk::version_string());
    std::fprintf(out, "CPU: %s (%d cores, %d logical CPUs, L3 %lld MiB)\n", c.brand.c_str(), c.cores, c.logical_cpus,
                 static_cast<long long>(c.l3_bytes >> 20));
    std::fprintf(out, "ISA: %s (hardware %s)%s%s\n", xk::isa_name(xk::max_isa()), xk::isa_name(xk::hardware_isa()),
                 c.avx_vnni ? ", avx_vnni" : "", c.amx_tile ? (c.amx_permission ? ", amx permitted" : ", amx NOT permitted") : "");
    std::fprintf(out, "threads: %d (xk::get_num_threads, %s backend); DRAM working set %zu MiB (XK_BENCH_ROTATE_MB)%s\n",
                 xk::get_num_threads(), xk::threading_backend(), xk::bench::rotate_bytes() >> 20,
                 xk::bench::quick() ? "; quick (XK_BENCH_QUICK)" : "");
    std::fflush(out);
}

}  // namespace

int main(int argc, char** argv) {
    // XK_BENCH_QUICK=1: a short default min time, placed first so an explicit flag overrides it.
    std::vector<char*> args(argv, argv + argc);
    static char quick_flag[] = "--benchmark_min_time=0.05";
    if (xk::bench::quick() && !flag_given(argc, argv, "--benchmark_min_time")) args.insert(args.begin() + 1, quick_flag);
    int n = static_cast<int>(args.size());
    args.push_back(nullptr);

    const bool list_only = bool_flag(n, args.data(), "--benchmark_list_tests");
    benchmark::Initialize(&n, args.data());
    if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;

    benchmark::BenchmarkReporter* display = benchmark::CreateDefaultDisplayReporter();  // owned by the library
    const bool console = dynamic_cast<benchmark::ConsoleReporter*>(display) != nullptr;
    std::FILE* out = console ? stdout : stderr;

    try {
        if (!list_only) print_header(out);
        CollectingReporter rep(display);
        benchmark::RunSpecifiedBenchmarks(&rep);
        if (!list_only) print_table(out, rep);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "benchmark failed: %s\n", e.what());
        benchmark::Shutdown();
        return 1;
    }
    benchmark::Shutdown();
    return 0;
}
