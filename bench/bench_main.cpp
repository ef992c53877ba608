// Common main of every bench executable (placeholder: the plain Google Benchmark main).
#include <benchmark/benchmark.h>
BENCHMARK_MAIN();
