// Common main of every bench executable.
//
// 1. XK_BENCH_QUICK=1 puts --benchmark_min_time=0.05 in front of the arguments (a later
//    --benchmark_min_time given by the user still wins).
// 2. Prints a header: xkernels version, CPU brand, ISA (hardware and effective), threads.
// 3. Runs the benchmarks with the normal display reporter (console, or whatever --benchmark_format
//    asks for; --benchmark_out= works unchanged) wrapped in a reporter that also records every run.
// 4. Prints the ours-vs-peer table: for each <family>/<dtype>/<shape...> with an `xk` run and at
//    least one peer run, xk's GFLOP/s or GB/s beside each peer's and the ratio xk/peer, plus the
//    share of the measured peak (peak/* benchmarks of this process, or XK_BENCH_PEAK_* variables).
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
    // In-phase share of the yardstick run between the row's calls (Copy% or Peak%, see
    // bench_util.hpp's CopyYardstick / PeakYardstick), one per repetition; kind "copy" / "fma".
    std::vector<double> inphase;
    std::string inphase_kind;
    double inphase_median_aggregate = -1;
    double inphase_value() const {
        if (inphase.empty()) return inphase_median_aggregate;
        std::vector<double> v = inphase;
        std::sort(v.begin(), v.end());
        const size_t n = v.size();
        return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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
        e.gflops = gf != r.counters.end();
        const double v = e.gflops ? double(gf->second) : double(gb->second);
        const std::string key = e.family + "/" + e.dtype + "/" + e.provider + "/" + e.shape;
        auto it = entries_.find(key);
        if (it == entries_.end()) {
            it = entries_.emplace(key, e).first;
            order_.push_back(key);
        }
        for (const char* c : {"Copy%", "Peak%"}) {
            const auto f = r.counters.find(c);
            if (f == r.counters.end() || (aggregate && r.aggregate_name != "median")) continue;
            if (aggregate) it->second.inphase_median_aggregate = double(f->second);
            else it->second.inphase.push_back(double(f->second));
            it->second.inphase_kind = c[0] == 'C' ? "copy" : "fma";
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
    if (dtype == "u8" || dtype == "s8" || dtype == "u8s8" || dtype == "s8s8") return "s8";
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

    struct Row {
        std::string family, dtype, shape, unit, xk, peer, peer_value, ratio, pct, inphase;
    };
    std::vector<Row> rows;
    for (const std::string& g : group_order) {
        const auto& list = groups[g];
        const Entry* ours = nullptr;
        for (const Entry* e : list)
            if (e->provider == "xk") ours = e;
        if (!ours) continue;
        for (const Entry* e : list) {
            if (e->provider == "xk") continue;
            Row r;
            r.family = ours->family;
            r.dtype = ours->dtype;
            r.shape = ours->shape;
            r.unit = ours->gflops ? "GFLOP/s" : "GB/s";
            const double x = ours->value(), p = e->value();
            r.xk = fmt(x);
            r.peer = e->provider;
            r.peer_value = fmt(p);
            char buf[32];
            std::snprintf(buf, sizeof buf, "%.2fx", p > 0 ? x / p : 0.0);
            r.ratio = buf;
            const int t = ours->threads ? ours->threads : default_threads;
            const double peak = ours->gflops ? gflops_peak_for(ours->dtype, t) : lookup_peak(gbps_ref, t);
            if (peak > 0) {
                std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * x / peak);
                r.pct = buf;
            }
            if (ours->inphase_value() >= 0) {
                std::snprintf(buf, sizeof buf, "%.0f%% %s", ours->inphase_value(), ours->inphase_kind.c_str());
                r.inphase = buf;
            }
            rows.push_back(r);
        }
    }

    if (!rows.empty()) {
        std::vector<Row> all = rows;
        all.insert(all.begin(),
                   Row{"family", "dtype", "shape", "unit", "xk", "peer", "peer", "xk/peer", "xk %peak", "xk in-phase"});
        size_t w[10] = {};
        for (const Row& r : all) {
            const std::string* f[10] = {&r.family, &r.dtype, &r.shape, &r.unit, &r.xk, &r.peer, &r.peer_value, &r.ratio, &r.pct, &r.inphase};
            for (int i = 0; i < 10; ++i) w[i] = std::max(w[i], f[i]->size());
        }
        size_t total = 0;
        for (size_t x : w) total += x + 2;
        std::fprintf(out, "\n%s\n", std::string(total, '=').c_str());
        std::fprintf(out, "xkernels vs peers (median of repetitions; xk/peer > 1: xk is faster)\n");
        std::fprintf(out, "%s\n", std::string(total, '-').c_str());
        bool header = true;
        for (const Row& r : all) {
            std::fprintf(out, "%-*s  %-*s  %-*s  %-*s  %*s  %-*s  %*s  %*s  %*s  %*s\n", int(w[0]), r.family.c_str(), int(w[1]),
                         r.dtype.c_str(), int(w[2]), r.shape.c_str(), int(w[3]), r.unit.c_str(), int(w[4]), r.xk.c_str(),
                         int(w[5]), r.peer.c_str(), int(w[6]), r.peer_value.c_str(), int(w[7]), r.ratio.c_str(), int(w[8]),
                         r.pct.c_str(), int(w[9]), r.inphase.c_str());
            if (header) std::fprintf(out, "%s\n", std::string(total, '-').c_str());
            header = false;
        }
        std::fprintf(out, "%s\n", std::string(total, '=').c_str());
        std::fprintf(out,
                     "xk %%peak: GFLOP/s rows against the best peak/<dtype>/xk/* compute peak, GB/s rows against the best\n"
                     "STREAM-style DRAM bandwidth (cache-resident rows can exceed 100%%), at the row's thread count\n"
                     "(nt:N / threads:N; unstated = %d); measured in this process, else XK_BENCH_PEAK_GBPS /\n"
                     "XK_BENCH_PEAK_GFLOPS_<DTYPE> (blank: no peak known). xk in-phase: the row against a yardstick run\n"
                     "between its calls (copy: a streaming-store copy of the same bytes, Copy%%; fma: an FMA loop of half\n"
                     "its flops, Peak%%), so a host whose speed drifts moves both alike.\n",
                     default_threads);
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
