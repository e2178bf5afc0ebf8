// KV row kernels (kvq/kernels/cpu/kv_row_kernels.h): dequantize_row, dot_row and axpy_row per
// storage format, dispatched (AVX-512 here) and scalar (the codec and the kernels' scalar twins,
// kernels/ref/kv_rows_ref.h), over head_dim-64 rows. Two working sets:
// 256 rows (L1/L2-resident: the kernel's own speed) and 2^18 rows (far beyond the caches: what
// a long-context decode sees). bytes_per_second counts the PACKED bytes read, so formats compare
// by how fast they turn cache bytes into attention work; items_per_second counts values.
// Run with --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for min / median.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvq/kernels/cpu/int8_query.h"
#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/kernels/ref/kv_rows_ref.h"
#include "kvq/quant/formats.h"

namespace {

using kvq::quant::KvFormat;

constexpr std::int64_t kHeadDim = 64;

struct Rows {
  std::vector<std::byte> bytes;
  std::size_t row_bytes = 0;
  std::int64_t count = 0;
};

Rows make_rows(KvFormat f, std::int64_t count) {
  Rows r;
  r.row_bytes = kvq::quant::kv_row_bytes(f, kHeadDim);
  r.count = count;
  r.bytes.resize(r.row_bytes * static_cast<std::size_t>(count));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kHeadDim);
  for (std::int64_t t = 0; t < count; ++t) {
    for (float& v : x) v = dist(rng);
    kvq::quant::quantize_row(f, x.data(), kHeadDim, 0.05f, 0.0f, 500.0f,
                             r.bytes.data() + t * r.row_bytes);
  }
  return r;
}

enum class Op { kDequantize, kDot, kAxpy };

template <Op kOp, bool kReference>
void BM_Row(benchmark::State& state) {
  const auto f = static_cast<KvFormat>(state.range(0));
  const Rows rows = make_rows(f, state.range(1));
  std::vector<float> q(kHeadDim, 0.5f), out(kHeadDim, 0.0f);
  float sink = 0.0f;
  for (auto _ : state) {
    for (std::int64_t t = 0; t < rows.count; ++t) {
      const std::byte* row = rows.bytes.data() + t * rows.row_bytes;
      if constexpr (kOp == Op::kDequantize) {
        if constexpr (kReference)
          kvq::quant::dequantize_row(f, row, kHeadDim, 0.05f, 0.0f, 500.0f, out.data());
        else
          kvq::kernels::dequantize_row(f, row, kHeadDim, 0.05f, 0.0f, 500.0f, out.data());
        benchmark::DoNotOptimize(out.data());
      } else if constexpr (kOp == Op::kDot) {
        if constexpr (kReference)
          sink += kvq::kernels::ref::dot_row(f, q.data(), row, kHeadDim, 0.0f);
        else
          sink += kvq::kernels::dot_row(f, q.data(), row, kHeadDim, 0.0f);
      } else {
        if constexpr (kReference)
          kvq::kernels::ref::axpy_row(f, 1e-3f, row, kHeadDim, 0.0f, out.data());
        else
          kvq::kernels::axpy_row(f, 1e-3f, row, kHeadDim, 0.0f, out.data());
        benchmark::DoNotOptimize(out.data());
      }
    }
    benchmark::ClobberMemory();
  }
  benchmark::DoNotOptimize(sink);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(rows.bytes.size()));
  state.SetItemsProcessed(state.iterations() * rows.count * kHeadDim);
  state.SetLabel(
      std::string(kvq::quant::kv_format_name(f)) + " " +
      std::string(kReference ? "scalar" : kvq::kernels::isa_name(kvq::kernels::kv_rows_isa())));
}

void formats(benchmark::internal::Benchmark* b) {
  for (int f = 0; f < static_cast<int>(kvq::quant::kv_format_table().size()); ++f)
    for (std::int64_t rows : {256, 1 << 18}) b->Args({f, rows});
}

void formats_small(benchmark::internal::Benchmark* b) {
  for (int f = 0; f < static_cast<int>(kvq::quant::kv_format_table().size()); ++f)
    b->Args({f, 256});
}

// The writer: quantize_row of 256 Gaussian rows (what prefill and every decode step pay per
// K / V row; the searched-scale formats try 16 scales per block).
void BM_Quantize(benchmark::State& state) {
  const auto f = static_cast<KvFormat>(state.range(0));
  constexpr std::int64_t kRows = 256;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(kRows * kHeadDim);
  for (float& v : x) v = dist(rng);
  const std::size_t row_bytes = kvq::quant::kv_row_bytes(f, kHeadDim);
  std::vector<std::byte> out(row_bytes * kRows);
  for (auto _ : state) {
    for (std::int64_t t = 0; t < kRows; ++t)
      kvq::quant::quantize_row(f, x.data() + t * kHeadDim, kHeadDim, 0.05f, 0.0f, 500.0f,
                               out.data() + t * row_bytes);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kRows * kHeadDim);
  state.SetLabel(std::string(kvq::quant::kv_format_name(f)));
}

BENCHMARK(BM_Quantize)->Apply(formats_small);
BENCHMARK(BM_Row<Op::kDequantize, false>)->Apply(formats);
BENCHMARK(BM_Row<Op::kDot, false>)->Apply(formats);
BENCHMARK(BM_Row<Op::kAxpy, false>)->Apply(formats_small);
BENCHMARK(BM_Row<Op::kDequantize, true>)->Apply(formats_small);
BENCHMARK(BM_Row<Op::kDot, true>)->Apply(formats_small);

// Decode scores of one GQA group (3 query heads) over int8 K rows: the exact float path
// (dot_rows, what the engine runs) against the int8-query integer path (int8_query.h, VNNI),
// query quantization included. Rows: 256 (in L1/L2) and 2^21 (128 MiB, beyond L3).
template <bool kInt8Query>
void BM_ScoresInt8(benchmark::State& state) {
  const Rows rows = make_rows(KvFormat::kINT8, state.range(0));
  const kvq::quant::RowCodec codec{KvFormat::kINT8, kHeadDim, 0.05f};
  constexpr std::int64_t kQueries = 3, kTile = 256;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(kQueries * kHeadDim), scores(kQueries * kTile);
  for (float& v : q) v = dist(rng);
  kvq::kernels::Int8Query qq;
  for (auto _ : state) {
    if constexpr (kInt8Query) kvq::kernels::quantize_query_int8(q.data(), kQueries, kHeadDim, &qq);
    for (std::int64_t t = 0; t < rows.count; t += kTile) {
      const std::byte* tile = rows.bytes.data() + t * static_cast<std::int64_t>(rows.row_bytes);
      const std::int64_t nt = std::min(kTile, rows.count - t);
      if constexpr (kInt8Query)
        kvq::kernels::dot_rows_int8_query(codec, qq, tile, nt, scores.data(), kTile);
      else
        kvq::kernels::dot_rows(codec, q.data(), kQueries, tile, nt, scores.data(), kTile);
      benchmark::DoNotOptimize(scores.data());
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(rows.bytes.size()));
  state.SetLabel(kInt8Query ? (kvq::kernels::int8_query_dot_is_fast(codec) ? "int8 query, vnni"
                                                                           : "int8 query, scalar")
                            : "exact float");
}

BENCHMARK(BM_ScoresInt8<false>)->Arg(256)->Arg(1 << 21);
BENCHMARK(BM_ScoresInt8<true>)->Arg(256)->Arg(1 << 21);

// What decode attention runs per KV head (kernels/cpu/attention.cc: attend_packed, softmax
// left out): one GQA group of 3 queries against K rows (dot_rows) and the same rows as V
// (axpy_rows), in tiles of 64 rows, the codec prepared once per stream as there. Rows: 8,192
// (one head's stream at 8K) per iteration; bytes_per_second counts the packed bytes read twice.
void BM_DecodeGroup(benchmark::State& state) {
  const auto f = static_cast<KvFormat>(state.range(0));
  const Rows rows = make_rows(f, state.range(1));
  kvq::quant::RowCodec codec{f, kHeadDim, 0.05f, 0.0f, 500.0f};
  kvq::kernels::BlockScaleValues block_scales;
  kvq::kernels::prepare_block_scales(codec, block_scales);
  constexpr std::int64_t kQueries = 3, kTile = 64;
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> q(kQueries * kHeadDim), scores(kQueries * kTile, 1e-3f),
      acc(kQueries * kHeadDim, 0.0f);
  for (float& v : q) v = dist(rng);
  for (auto _ : state) {
    for (std::int64_t t = 0; t < rows.count; t += kTile) {
      const std::byte* tile = rows.bytes.data() + t * static_cast<std::int64_t>(rows.row_bytes);
      const std::int64_t nt = std::min(kTile, rows.count - t);
      kvq::kernels::dot_rows(codec, q.data(), kQueries, tile, nt, scores.data(), kTile);
      kvq::kernels::axpy_rows(codec, scores.data(), kQueries, kTile, tile, nt, acc.data());
    }
    benchmark::DoNotOptimize(acc.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * static_cast<std::int64_t>(rows.bytes.size()));
  state.SetItemsProcessed(state.iterations() * rows.count);
  state.SetLabel(std::string(kvq::quant::kv_format_name(f)));
}
BENCHMARK(BM_DecodeGroup)->Apply([](benchmark::internal::Benchmark* b) {
  for (int f = 0; f < static_cast<int>(kvq::quant::kv_format_table().size()); ++f)
    b->Args({f, 8192});
});

}  // namespace

BENCHMARK_MAIN();
