// Kernel and engine micro-benchmarks (report, never assert):
//   BM_Sgemm            OpenBLAS sgemm GFLOP/s (prefill-shaped: x [512, k] · Wᵀ)
//   BM_SgemmBf16        the same with bf16 weights (row blocks widened to fp32, sgemm per block)
//   BM_Gemv             decode GEMV, GB/s of weights read
//   BM_GemvBf16         the same with bf16 weights (half the bytes per row)
//   BM_DecodeAttention  one decode step of SmolLM2-shaped attention (9 heads, 3 KV heads,
//                       head_dim 64) over the packed cache of every KvFormat, GB/s of packed K+V
//                       read, contexts 512 / 2K / 8K / 16K, cache cycled over > 256 MiB (> L3)
//   BM_StreamRead       streaming read bandwidth (the ceiling) measured in the same run
//   BM_Hadamard         the Walsh–Hadamard rotation of one token's rows in place (head_dim 64 /
//                       128 / 256; 9 rows = SmolLM2's query heads, 3 = its KV heads), ns per
//                       call, at the dispatched level (BM_HadamardRef: the scalar reference)
//   BM_ModelPrefill512 / BM_ModelDecode128: the whole forward on a random-weight model with the
//                       default model's shapes; GFLOP/s of the weight matmuls / GB/s of weights.
// Use --benchmark_repetitions=5 --benchmark_report_aggregates_only=true for min/median/max.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/kernels/cpu/attention.h"
#include "kvq/kernels/cpu/hadamard.h"
#include "kvq/kernels/cpu/kv_row_kernels.h"
#include "kvq/kernels/cpu/linear.h"
#include "kvq/kernels/ref/hadamard_ref.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/formats.h"

namespace {

std::vector<float> random_vector(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void BM_Sgemm(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto x = random_vector(static_cast<std::size_t>(m * k), 1);
  const auto w = random_vector(static_cast<std::size_t>(n * k), 2);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    kvq::kernels::sgemm_xwt(x.data(), w.data(), y.data(), m, n, k);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Sgemm)
    ->Args({512, 576, 576})
    ->Args({512, 1536, 576})
    ->Args({512, 576, 1536})
    ->Args({1024, 1024, 1024})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_SgemmBf16(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const auto x = random_vector(static_cast<std::size_t>(m * k), 1);
  const auto wf = random_vector(static_cast<std::size_t>(n * k), 2);
  std::vector<std::uint16_t> w(wf.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = kvq::f32_to_bf16(wf[i]);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    kvq::kernels::sgemm_xwt_bf16(x.data(), w.data(), y.data(), m, n, k);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmBf16)
    ->Args({512, 576, 576})
    ->Args({512, 1536, 576})
    ->Args({512, 576, 1536})
    ->Args({16, 1536, 576})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_GemvBf16(benchmark::State& state) {
  const std::int64_t n = state.range(0), k = state.range(1);
  // As BM_Gemv: > 256 MiB of weights cycled, so these are DRAM numbers.
  const std::int64_t copies = std::max<std::int64_t>(1, (256ll << 20) / (n * k * 2));
  const auto wf = random_vector(static_cast<std::size_t>(n * k), 3);
  std::vector<std::uint16_t> w(static_cast<std::size_t>(copies * n * k));
  for (std::size_t j = 0; j < w.size(); ++j) w[j] = kvq::f32_to_bf16(wf[j % wf.size()]);
  const auto x = random_vector(static_cast<std::size_t>(k), 4);
  std::vector<float> y(static_cast<std::size_t>(n));
  std::int64_t i = 0;
  for (auto _ : state) {
    kvq::kernels::gemv_bf16(w.data() + (i++ % copies) * n * k, x.data(), y.data(), n, k);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * k * 2);
}
BENCHMARK(BM_GemvBf16)
    ->Args({576, 576})
    ->Args({1536, 576})
    ->Args({576, 1536})
    ->Args({49152, 576})
    ->UseRealTime();

void BM_Gemv(benchmark::State& state) {
  const std::int64_t n = state.range(0), k = state.range(1);
  // Enough copies of the matrix to exceed the caches, cycled, so the numbers are DRAM numbers.
  const std::int64_t copies = std::max<std::int64_t>(1, (256ll << 20) / (n * k * 4));
  const auto w = random_vector(static_cast<std::size_t>(copies * n * k), 3);
  const auto x = random_vector(static_cast<std::size_t>(k), 4);
  std::vector<float> y(static_cast<std::size_t>(n));
  std::int64_t i = 0;
  for (auto _ : state) {
    kvq::kernels::gemv(w.data() + (i++ % copies) * n * k, x.data(), y.data(), n, k);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * k * 4);
  state.counters["isa"] = static_cast<double>(kvq::kernels::detected_isa());
}
BENCHMARK(BM_Gemv)
    ->Args({576, 576})
    ->Args({1536, 576})
    ->Args({576, 1536})
    ->Args({49152, 576})
    ->UseRealTime();

// m inputs against one matrix (a decode step of m sequences), DRAM-resident weights as in
// BM_Gemv. GB/s counts the weights once: the ratio to BM_Gemv is the batching gain.
void BM_GemvBatch(benchmark::State& state) {
  const std::int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const std::int64_t copies = std::max<std::int64_t>(1, (256ll << 20) / (n * k * 4));
  const auto w = random_vector(static_cast<std::size_t>(copies * n * k), 3);
  const auto x = random_vector(static_cast<std::size_t>(m * k), 4);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  std::int64_t i = 0;
  for (auto _ : state) {
    kvq::kernels::linear_rows(x.data(), w.data() + (i++ % copies) * n * k, y.data(), m, n, k);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * k * 4);
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * m), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * 2 * m * n * k) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GemvBatch)
    ->ArgsProduct({{1536}, {576}, {1, 2, 4, 8, 16}})
    ->ArgsProduct({{576}, {1536}, {8, 16}})
    ->ArgsProduct({{49152}, {576}, {1, 8, 16}})
    ->UseRealTime();

// Decode attention over the PACKED cache, one format per run (state.range(0) = KvFormat,
// range(1) = context). A "layer" is 3 kv heads × ctx rows of K and V; the benchmark cycles over
// max(30, enough to exceed 256 MiB) such layers so every step reads K+V from DRAM, not L3 (the
// whole model's cache is 30 layers). GB/s = packed K+V bytes read per step / time.
// fmt kKvFormatCount.. (past the formats): the formats with the opt-in int8-query scores (+q8:
// int8, int4, nvfp4 rows).
std::vector<kvq::quant::KvFormat> q8_formats() {
  std::vector<kvq::quant::KvFormat> formats;
  for (const auto& t : kvq::quant::kv_format_table())
    if (t.supports_int8_query()) formats.push_back(t.format);
  return formats;
}
constexpr auto kFirstQ8 = static_cast<std::int64_t>(kvq::quant::kKvFormatCount);
void BM_DecodeAttention(benchmark::State& state) {
  const bool q8 = state.range(0) >= kFirstQ8;
  const auto format = q8 ? q8_formats()[static_cast<std::size_t>(state.range(0) - kFirstQ8)]
                         : static_cast<kvq::quant::KvFormat>(state.range(0));
  const std::int64_t ctx = state.range(1), kvh = 3, heads = 9, d = 64;
  const auto row_bytes = static_cast<std::int64_t>(kvq::quant::kv_row_bytes(format, d));
  const std::int64_t layer_bytes = 2 * kvh * ctx * row_bytes;  // K + V
  const std::int64_t layers = std::max<std::int64_t>(30, (256ll << 20) / layer_bytes + 1);
  std::vector<std::byte> cache(static_cast<std::size_t>(layers * layer_bytes));
  // Every layer holds the same encoded rows (encoding 256 MiB row by row would dominate setup);
  // they are distinct memory, which is all that matters for the bandwidth.
  const auto x = random_vector(static_cast<std::size_t>(2 * kvh * ctx * d), 5);
  const float scale = 0.25f / 127.0f, gs = 448.0f * 6.0f / 0.25f;
  for (std::int64_t r = 0; r < 2 * kvh * ctx; ++r) {
    kvq::quant::quantize_row(format, x.data() + r * d, d, scale, 0.0f, gs,
                             cache.data() + r * row_bytes);
  }
  for (std::int64_t l = 1; l < layers; ++l) {
    std::copy_n(cache.data(), layer_bytes, cache.data() + l * layer_bytes);
  }
  const auto q = random_vector(static_cast<std::size_t>(heads * d), 7);
  std::vector<float> out(static_cast<std::size_t>(heads * d));
  std::vector<kvq::kernels::KvRowsView> kv(static_cast<std::size_t>(layers * kvh));
  std::vector<kvq::kernels::KvRowsView> vv(kv.size());
  for (std::int64_t l = 0; l < layers; ++l) {
    for (std::int64_t h = 0; h < kvh; ++h) {
      const std::byte* base = cache.data() + l * layer_bytes;
      kv[static_cast<std::size_t>(l * kvh + h)] = {
          format, base + h * ctx * row_bytes, row_bytes, d, scale, 0.0f, gs, q8};
      vv[static_cast<std::size_t>(l * kvh + h)] = {
          format, base + (kvh + h) * ctx * row_bytes, row_bytes, d, scale, 0.0f, gs};
    }
  }
  kvq::kernels::AttentionParams p{heads, kvh, d, 1, ctx - 1, 0.125f};
  std::int64_t l = 0;
  for (auto _ : state) {
    kvq::kernels::attention(p, q.data(), kv.data() + l * kvh, vv.data() + l * kvh, out.data());
    benchmark::ClobberMemory();
    l = (l + 1) % layers;
  }
  state.SetBytesProcessed(state.iterations() * layer_bytes);
  state.SetLabel(std::string(kvq::quant::kv_format_name(format)) + (q8 ? "+q8/" : "/") +
                 std::string(kvq::kernels::isa_name(kvq::kernels::kv_rows_isa())));
}

double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

void decode_attention_args(benchmark::internal::Benchmark* b) {
  for (const auto& t : kvq::quant::kv_format_table()) {
    for (std::int64_t ctx : {512, 2048, 8192, 16384}) {
      b->Args({static_cast<std::int64_t>(t.format), ctx});
    }
  }
  const auto q8_count = static_cast<std::int64_t>(q8_formats().size());
  for (std::int64_t fmt = kFirstQ8; fmt < kFirstQ8 + q8_count; ++fmt)
    for (std::int64_t ctx : {512, 2048, 8192, 16384}) b->Args({fmt, ctx});
}
BENCHMARK(BM_DecodeAttention)
    ->Apply(decode_attention_args)
    ->ArgNames({"fmt", "ctx"})
    ->ComputeStatistics("min", min_of)
    ->ComputeStatistics("max", max_of)
    ->UseRealTime();

// Streaming read bandwidth of this machine in the same run (the ceiling for decode attention):
// a 512 MiB float sum, vectorised without reductions across lanes (8 partial sums).
void BM_StreamRead(benchmark::State& state) {
  const std::size_t n = (512ull << 20) / sizeof(float);
  std::vector<float> a(n, 1.0f);
  for (auto _ : state) {
    float acc[16] = {};
    for (std::size_t i = 0; i < n; i += 16) {
      for (int j = 0; j < 16; ++j) acc[j] += a[i + static_cast<std::size_t>(j)];
    }
    benchmark::DoNotOptimize(acc);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * sizeof(float)));
}
BENCHMARK(BM_StreamRead)
    ->ComputeStatistics("min", min_of)
    ->ComputeStatistics("max", max_of)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: head_dim n, rows. The rows are transformed again each iteration (the transform is
// orthonormal, so the values neither grow nor shrink).
template <void (*Transform)(float*, std::int64_t, std::int64_t)>
void BM_HadamardOf(benchmark::State& state) {
  const std::int64_t n = state.range(0), rows = state.range(1);
  auto x = random_vector(static_cast<std::size_t>(rows * n), 5);
  for (auto _ : state) {
    Transform(x.data(), rows, n);
    benchmark::ClobberMemory();
  }
}
void BM_Hadamard(benchmark::State& state) { BM_HadamardOf<kvq::kernels::hadamard_rows>(state); }
void BM_HadamardRef(benchmark::State& state) {
  BM_HadamardOf<kvq::kernels::ref::hadamard_rows>(state);
}
BENCHMARK(BM_Hadamard)
    ->ArgsProduct({{64, 128, 256}, {9, 3}})
    ->ArgNames({"n", "rows"})
    ->ComputeStatistics("min", min_of);
BENCHMARK(BM_HadamardRef)
    ->ArgsProduct({{64, 128, 256}, {9, 3}})
    ->ArgNames({"n", "rows"})
    ->ComputeStatistics("min", min_of);

// A random model with SmolLM2-135M's shapes (30 layers, hidden 576, 9/3 heads, vocab 49152).
kvq::model::CausalLM& smollm_shaped() {
  static std::unique_ptr<kvq::model::CausalLM> model = [] {
    kvq::model::ModelConfig c;
    c.architectures = {"LlamaForCausalLM"};
    c.model_type = "llama";
    c.hidden_size = 576;
    c.intermediate_size = 1536;
    c.num_hidden_layers = 30;
    c.num_attention_heads = 9;
    c.num_key_value_heads = 3;
    c.head_dim = 64;
    c.vocab_size = 49152;
    c.rope_theta = 100000.0;
    c.rms_norm_eps = 1e-5;
    c.tie_word_embeddings = true;
    std::map<std::string, kvq::Tensor> w;
    std::uint64_t seed = 10;
    auto add = [&](const std::string& name, kvq::Shape shape) {
      const auto v = random_vector(static_cast<std::size_t>(kvq::shape_numel(shape)), seed++);
      w.emplace(name, kvq::Tensor::from_f32(shape, v));
    };
    add("model.embed_tokens.weight", {49152, 576});
    add("model.norm.weight", {576});
    for (int l = 0; l < 30; ++l) {
      const std::string p = "model.layers." + std::to_string(l);
      add(p + ".self_attn.q_proj.weight", {576, 576});
      add(p + ".self_attn.k_proj.weight", {192, 576});
      add(p + ".self_attn.v_proj.weight", {192, 576});
      add(p + ".self_attn.o_proj.weight", {576, 576});
      add(p + ".mlp.gate_proj.weight", {1536, 576});
      add(p + ".mlp.up_proj.weight", {1536, 576});
      add(p + ".mlp.down_proj.weight", {576, 1536});
      add(p + ".input_layernorm.weight", {576});
      add(p + ".post_attention_layernorm.weight", {576});
    }
    return kvq::model::CausalLM::from_weights(c, w, "bench");
  }();
  return *model;
}

// Weight parameters touched per token: 30 layers × (q,k,v,o,gate,up,down) + lm_head.
constexpr double kLayerParams = 30.0 * (576 * 576 * 2 + 192 * 576 * 2 + 1536 * 576 * 3);
constexpr double kLmHeadParams = 49152.0 * 576;

void BM_ModelPrefill512(benchmark::State& state) {
  auto& model = smollm_shaped();
  std::vector<std::int32_t> tokens(512);
  for (int i = 0; i < 512; ++i) tokens[i] = (i * 131) % 49152;
  for (auto _ : state) {
    kvq::model::KvCache cache = model.make_cache(1, 512);
    benchmark::DoNotOptimize(model.forward(tokens, cache, kvq::model::LogitsMode::kLast));
  }
  // Decoder weight matmuls only (the lm_head runs on the last position).
  state.counters["weight_GFLOP/s"] =
      benchmark::Counter(2.0 * kLayerParams * 512 * static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ModelPrefill512)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_ModelDecode128(benchmark::State& state) {
  auto& model = smollm_shaped();
  std::vector<std::int32_t> prompt(127);
  for (int i = 0; i < 127; ++i) prompt[i] = (i * 17) % 49152;
  kvq::model::KvCache cache = model.make_cache(1, 4096);
  model.forward(prompt, cache, kvq::model::LogitsMode::kLast);
  const std::int32_t t[1] = {42};
  for (auto _ : state) {
    cache.truncate(127);  // every step decodes at context 128
    benchmark::DoNotOptimize(model.forward(t, cache, kvq::model::LogitsMode::kLast));
  }
  state.counters["weight_GB/s"] = benchmark::Counter(
      4.0 * (kLayerParams + kLmHeadParams) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ModelDecode128)->Unit(benchmark::kMillisecond)->UseRealTime();

// One decode step of `batch` sequences at context 1024 each (CausalLM::decode_step); tok/s
// counts every sequence's token.
void BM_ModelDecodeBatch(benchmark::State& state) {
  auto& model = smollm_shaped();
  const std::int64_t batch = state.range(0);
  std::vector<std::int32_t> prompt(1023);
  for (int i = 0; i < 1023; ++i) prompt[i] = (i * 17) % 49152;
  std::vector<kvq::model::KvCache> caches;
  std::vector<kvq::model::KvCache*> ptrs;
  for (std::int64_t b = 0; b < batch; ++b) {
    caches.push_back(model.make_cache(1, 1024));
    model.forward(prompt, caches.back(), kvq::model::LogitsMode::kLast);
  }
  for (auto& c : caches) ptrs.push_back(&c);
  const std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch), 42);
  for (auto _ : state) {
    for (auto& c : caches) c.truncate(1023);
    benchmark::DoNotOptimize(model.decode_step(tokens, ptrs));
  }
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations() * batch),
                                               benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ModelDecodeBatch)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(12)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
