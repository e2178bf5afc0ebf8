// End-to-end throughput of the engine (`kvq bench`): prefill and decode tokens/s, set against
// what the machine can do, measured in the same run (DRAM read bandwidth, sgemm GFLOP/s).
//
//   prefill: one forward of `prefill_tokens` synthetic token ids from an empty cache (logits of
//            the last position only). GFLOP/s counts the weight matmuls only:
//            2 · tokens · (decoder linear parameters) + 2 · hidden · vocab (one lm_head row);
//            attention score/value products are not counted.
//   decode:  the cache is filled to `context` tokens with synthetic keys/values (uniform in
//            [-1, 1], written straight into the KV cache: decode time does not depend on their
//            values, and a real prefill of 8192 tokens would dominate the run), then
//            `decode_steps` single-token forwards are timed. Dynamic KV scales (a low-bit
//            format on a plain model) are fixed by that fill, from its amax (~1): finite,
//            > 0, the same for every format; the timed tokens' own k/v then saturate at the
//            fill's range, which does not change the work per token. Prefill fixes them from
//            the prompt, as `kvq generate` does. GB/s = (weight bytes of every linear + lm_head
//            in the model's weight dtype, fp32 or bf16 + KV bytes of `context` tokens) ·
//            tokens/s: the bytes one decode step must read at least.
//   batch:   with `batch` B > 1, B caches are filled alike and every timed step decodes one token
//            of each (CausalLM::decode_step: kvq serve's continuous batch; each sequence's bits
//            are its bits alone). tok/s counts all B tokens; a step reads the weights once and
//            B caches, so bytes per token = (weights + B · KV of `context`) / B. With
//            `block_size` > 0 the caches are paged as kvq serve's (one KvBlockPool, blocks taken
//            a block per sequence in turn), so the kernels take rows in block-long runs.
// Every figure is taken `repeats` times; min and median are reported (times, so the best
// throughput is the one of the min time). Several models (the same checkpoint loaded with f32
// and bf16 weights) run in one report, side by side for each thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/model/kv_cache.h"

namespace kvq::model {
class CausalLM;
}

namespace kvq::eval {

// Best-of-`repeats` streaming read of a `bytes` buffer with the current thread count (GB/s,
// 1 GB = 1e9 bytes).
double measure_dram_read_gbs(std::size_t bytes = std::size_t{1} << 30, int repeats = 3);
// Best-of-`repeats` cblas_sgemm of n × n × n with the current thread count (GFLOP/s).
double measure_sgemm_gflops(int n = 1024, int repeats = 3);

struct ModelCost {
  std::string weights = "f32";      // the weight dtype (model::weight_dtype_label)
  std::int64_t linear_params = 0;   // q, k, v, o, gate, up, down over all layers
  std::int64_t lm_head_params = 0;  // vocab × hidden
  std::int64_t weight_bytes = 0;    // bytes of the above in that dtype: read once per decode step
};
ModelCost model_cost(const model::CausalLM& model);

struct TimeStats {
  double min = 0.0, median = 0.0;  // seconds
};
TimeStats time_stats(std::vector<double> seconds);

struct BenchOptions {
  std::int64_t prefill_tokens = 512;
  std::vector<std::int64_t> contexts = {128, 2048, 8192};
  std::vector<int> threads = {1, 2};
  std::vector<model::KvCacheConfig> kv_caches = {model::KvCacheConfig{}};  // default: f32
  int repeats = 5;
  std::int64_t decode_steps = 16;           // timed single-token forwards per repeat
  std::vector<std::int64_t> batches = {1};  // sequences decoded together per step
  std::int64_t block_size = 0;  // > 0: paged caches from one pool (kvq serve's); 0: contiguous
  bool machine = true;          // measure DRAM bandwidth and sgemm peak
};

struct MachineRow {
  int threads = 0;
  double dram_read_gbs = 0.0, sgemm_gflops = 0.0;
};
struct PrefillRow {
  int threads = 0;
  std::string weights = "f32";  // ModelCost::weights
  std::string kv = "f32";       // KvCacheConfig::label
  std::int64_t tokens = 0;
  TimeStats seconds;
  double tok_s_best = 0.0, tok_s_median = 0.0;
  double gflops_best = 0.0;
  double sgemm_fraction = 0.0;  // gflops_best / measured sgemm peak (0 when not measured)
};
struct DecodeRow {
  int threads = 0;
  std::string weights = "f32";  // ModelCost::weights
  std::string kv = "f32";       // KvCacheConfig::label
  std::int64_t context = 0, steps = 0;
  std::int64_t batch = 1;       // sequences per step (tokens per step)
  std::int64_t block_size = 0;  // positions per KV block; 0: contiguous caches
  TimeStats seconds_per_token;  // step time / batch
  double tok_s_best = 0.0, tok_s_median = 0.0;
  std::int64_t bytes_per_token = 0;  // (weights (in their dtype) + batch · KV of `context`) / batch
  double gbs_best = 0.0;
  double dram_fraction = 0.0;  // gbs_best / measured DRAM read bandwidth (0 when not measured)
};

struct BenchReport {
  std::string model;
  ModelCost cost;                // of the first model
  std::vector<ModelCost> costs;  // of every model, in run order
  std::vector<std::pair<std::string, std::int64_t>> kv_bytes_per_token;  // (label, bytes)
  std::vector<model::KvCacheConfig> kv_caches;                           // as run, in options order
  std::vector<MachineRow> machine;
  std::vector<PrefillRow> prefill;
  std::vector<DecodeRow> decode;
};

// Runs every (threads, model, kv cache) combination, in that nesting; restores the thread count
// it found. The models must share one config (the kv cache configs are resolved once; a
// checkpoint's calibrated config quantizes k/v in its packed cache, its hooks standing aside).
// InvalidArgument for empty lists, non-positive sizes, threads < 1, repeats < 1, batches < 1.
BenchReport run_bench(std::span<model::CausalLM* const> models, const BenchOptions& options,
                      std::string model_name);
BenchReport run_bench(model::CausalLM& model, const BenchOptions& options, std::string model_name);

std::string bench_markdown(const BenchReport& report);
nlohmann::json bench_json(const BenchReport& report);

}  // namespace kvq::eval
