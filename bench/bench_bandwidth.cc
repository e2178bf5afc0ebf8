// DRAM read bandwidth: a streaming sum over a buffer far larger than the caches, on 1 thread and
// on kvq::num_threads() threads. The yardstick for the decode GEMV and the attention kernels.
// Reports GB/s (bytes_per_second); run with --benchmark_repetitions=N for min / median.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdlib>
#include <vector>

#include "kvq/core/threading.h"

namespace {

constexpr std::size_t kFloats = std::size_t{1} << 28;  // 1 GiB

const std::vector<float>& buffer() {
  static const std::vector<float> b = [] {
    std::vector<float> v(kFloats);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < kFloats; ++i) v[i] = static_cast<float>(i & 1023) * 1e-3f;
    return v;
  }();
  return b;
}

__attribute__((target_clones("avx512f", "avx2", "default"))) float stream_sum(const float* p,
                                                                              std::size_t n) {
  // 16 independent partial sums: vectorisable without -ffast-math, no dependency stall.
  float acc[16] = {};
  for (std::size_t i = 0; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  }
  float s = 0.0f;
  for (float a : acc) s += a;
  return s;
}

void BM_StreamRead(benchmark::State& state) {
  const int threads = state.range(0) == 0 ? kvq::num_threads() : static_cast<int>(state.range(0));
  const std::vector<float>& b = buffer();
  for (auto _ : state) {
    float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t chunk = kFloats / nt;
      total += stream_sum(b.data() + t * chunk, chunk);
    }
    benchmark::DoNotOptimize(total);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(kFloats * sizeof(float)));
  state.counters["threads"] = threads;
}
BENCHMARK(BM_StreamRead)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
