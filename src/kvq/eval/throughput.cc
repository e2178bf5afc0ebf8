#include "kvq/eval/throughput.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/threading.h"
#include "kvq/model/causal_lm.h"
#include "kvq/model/kv_block_pool.h"
#include "kvq/runtime/kv_cache_choice.h"

namespace kvq::eval {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Synthetic token ids in [0, vocab): timing does not depend on which tokens they are.
std::vector<std::int32_t> synthetic_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& t : ids) t = dist(rng);
  return ids;
}

// Fills every layer of `cache` (batch 1, empty) with `context` tokens of random K/V. As the
// cache's first write it fixes dynamic scales (from amax ~1, see throughput.h).
void fill_cache_synthetic(model::KvCache& cache, std::int64_t context) {
  const std::int64_t per_layer = cache.kv_heads() * context * cache.head_dim();
  std::vector<float> states(static_cast<std::size_t>(per_layer));  // [1, kv_heads, context, d]
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : states) v = dist(rng);
  cache.reset();
  for (std::int64_t l = 0; l < cache.layers(); ++l) {
    // A sliding-window layer's ring holds only the last rows(l) positions.
    const std::int64_t keep = std::min(context, cache.rows(l));
    cache.keys(l).write(0, context, states.data(), context - keep, keep);
    cache.values(l).write(0, context, states.data(), context - keep, keep);
  }
  cache.advance(context);
}

double prefill_gflop(const ModelCost& cost, std::int64_t tokens) {
  return 2.0 *
         (static_cast<double>(cost.linear_params) * static_cast<double>(tokens) +
          static_cast<double>(cost.lm_head_params)) /
         1e9;
}

// Decode timing of `batch` sequences at `context` (throughput.h): every cache filled alike, then
// `repeats` runs of decode_steps steps after one warm-up. The row's bytes_per_token holds the KV
// bytes of ONE cache at `context`; the caller adds the weights.
DecodeRow time_decode(model::CausalLM& model, const model::KvCacheConfig& kv, std::int64_t context,
                      std::int64_t batch, const BenchOptions& options,
                      const std::vector<std::int32_t>& decode_ids) {
  const std::int64_t capacity = context + options.decode_steps;
  // Paged (options.block_size > 0): one pool holding exactly the batch's blocks, taken a block
  // per sequence in turn as kvq serve's growing sequences take them, so a sequence's blocks are
  // spread through the pool as there. Declared before the caches: they give their blocks back.
  std::unique_ptr<model::KvBlockPool> pool;
  if (options.block_size > 0) {
    const std::int64_t block_bytes = model.kv_block_bytes(kv, options.block_size);
    pool = std::make_unique<model::KvBlockPool>(
        batch * model.cache_blocks(capacity, kv, options.block_size) * block_bytes,
        options.block_size, block_bytes);
  }
  std::vector<model::KvCache> caches;
  caches.reserve(static_cast<std::size_t>(batch));
  std::vector<model::KvCache*> ptrs;
  for (std::int64_t b = 0; b < batch; ++b) {
    caches.push_back(model.make_cache(1, capacity, kv, pool.get()));
  }
  if (pool) {
    for (std::int64_t t = options.block_size;; t += options.block_size) {
      for (model::KvCache& c : caches) {
        KVQ_CHECK(c.reserve(std::min(t, capacity)), "bench: the block pool is short");
      }
      if (t >= capacity) break;
    }
  }
  for (model::KvCache& c : caches) {
    fill_cache_synthetic(c, context);
    ptrs.push_back(&c);
  }
  std::vector<double> per_token;
  std::vector<std::int32_t> step(static_cast<std::size_t>(batch));  // one token per sequence
  for (int r = -1; r < options.repeats; ++r) {
    for (model::KvCache& c : caches) {
      // A ring may have overwritten what the context needs (decode steps > its chunk).
      if (c.can_truncate(context)) {
        c.truncate(context);
      } else {
        fill_cache_synthetic(c, context);
      }
    }
    const auto t0 = Clock::now();
    for (std::int64_t s = 0; s < options.decode_steps; ++s) {
      if (batch == 1) {
        model.forward(std::span<const std::int32_t>(decode_ids.data() + s, 1), caches.front(),
                      model::LogitsMode::kLast);
      } else {
        std::fill(step.begin(), step.end(), decode_ids[static_cast<std::size_t>(s)]);
        model.decode_step(step, ptrs);
      }
    }
    if (r >= 0) per_token.push_back(seconds_since(t0) / (options.decode_steps * batch));
  }
  DecodeRow d;
  d.kv = kv.label();
  d.context = context;
  d.steps = options.decode_steps;
  d.batch = batch;
  d.block_size = options.block_size;
  d.seconds_per_token = time_stats(per_token);
  d.tok_s_best = 1.0 / d.seconds_per_token.min;
  d.tok_s_median = 1.0 / d.seconds_per_token.median;
  d.bytes_per_token = caches.front().attended_bytes(context);
  return d;
}
}  // namespace

double measure_dram_read_gbs(std::size_t bytes, int repeats) {
  // Summed as 64-bit integers: integer adds reassociate freely, so the compiler vectorizes the
  // loop (a float sum without -ffast-math stays one dependent add per element, ~3 GB/s).
  const std::size_t n = bytes / sizeof(std::uint64_t);
  std::unique_ptr<std::uint64_t[]> buf(new std::uint64_t[n]);
  // First touch in parallel so pages spread like the reads will.
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) buf[i] = i;
  double best = 0.0;
  volatile std::uint64_t sink = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    std::uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (std::size_t i = 0; i < n; ++i) total += buf[i];
    const double s = seconds_since(t0);
    sink = sink + total;
    best = std::max(best, static_cast<double>(n * sizeof(std::uint64_t)) / s / 1e9);
  }
  return best;
}

double measure_sgemm_gflops(int n, int repeats) {
  const auto nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn, 0.0f);  // [n, n] each
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
              0.0f, c.data(), n);  // warm-up (thread pool, page faults)
  double best = 0.0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double s = seconds_since(t0);
    best = std::max(best, 2.0 * n * static_cast<double>(n) * n / s / 1e9);
  }
  return best;
}

ModelCost model_cost(const model::CausalLM& model) {
  const model::ModelConfig& c = model.config();
  const std::int64_t q = c.num_attention_heads * c.head_dim;
  const std::int64_t kv = c.num_key_value_heads * c.head_dim;
  const std::int64_t per_layer = c.hidden_size * q                           // q_proj
                                 + 2 * c.hidden_size * kv                    // k_proj, v_proj
                                 + q * c.hidden_size                         // o_proj
                                 + 3 * c.hidden_size * c.intermediate_size;  // gate, up, down
  ModelCost cost;
  cost.weights = std::string(model::weight_dtype_label(model.weight_dtype()));
  cost.linear_params = per_layer * c.num_hidden_layers;
  cost.lm_head_params = c.vocab_size * c.hidden_size;
  cost.weight_bytes = (cost.linear_params + cost.lm_head_params) *
                      static_cast<std::int64_t>(dtype_size(model.weight_dtype()));
  return cost;
}

TimeStats time_stats(std::vector<double> seconds) {
  KVQ_CHECK(!seconds.empty(), "time_stats of nothing");
  std::sort(seconds.begin(), seconds.end());
  const std::size_t m = seconds.size();
  TimeStats s;
  s.min = seconds.front();
  s.median = m % 2 ? seconds[m / 2] : 0.5 * (seconds[m / 2 - 1] + seconds[m / 2]);
  return s;
}

BenchReport run_bench(model::CausalLM& model, const BenchOptions& options, std::string model_name) {
  model::CausalLM* const one = &model;
  return run_bench(std::span<model::CausalLM* const>(&one, 1), options, std::move(model_name));
}

BenchReport run_bench(std::span<model::CausalLM* const> models, const BenchOptions& options,
                      std::string model_name) {
  if (options.contexts.empty() || options.threads.empty() || options.kv_caches.empty() ||
      models.empty()) {
    fail<InvalidArgument>(
        "bench: --contexts, --threads, --kv-cache and --weights need at least one value");
  }
  if (options.prefill_tokens < 1) fail<InvalidArgument>("bench: --prefill must be >= 1");
  if (options.repeats < 1) fail<InvalidArgument>("bench: --repeats must be >= 1");
  if (options.decode_steps < 1) fail<InvalidArgument>("bench: --decode-steps must be >= 1");
  if (options.batches.empty()) fail<InvalidArgument>("bench: --batch needs at least one value");
  if (options.block_size < 0)
    fail<InvalidArgument>("bench: --block-size must be >= 0, got {}", options.block_size);
  for (std::int64_t b : options.batches) {
    if (b < 1) fail<InvalidArgument>("bench: batch sizes must be >= 1, got {}", b);
  }
  for (std::int64_t c : options.contexts) {
    if (c < 1) fail<InvalidArgument>("bench: contexts must be >= 1, got {}", c);
  }
  for (int t : options.threads) {
    if (t < 1) fail<InvalidArgument>("bench: thread counts must be >= 1, got {}", t);
  }
  const model::CausalLM& first = *models.front();
  // Prefill attention is quadratic in its length: past the model's context a run takes minutes
  // and measures nothing a user runs.
  if (options.prefill_tokens > first.config().max_position_embeddings)
    fail<InvalidArgument>(
        "bench: --prefill {} is beyond the model's context (max_position_embeddings {})",
        options.prefill_tokens, first.config().max_position_embeddings);
  const std::int64_t vocab = first.config().vocab_size;
  BenchReport rep;
  rep.model = std::move(model_name);
  for (const model::CausalLM* m : models) rep.costs.push_back(model_cost(*m));
  rep.cost = rep.costs.front();
  for (const model::KvCacheConfig& kv : options.kv_caches) {
    rep.kv_bytes_per_token.emplace_back(kv.label(), first.make_cache(1, 1, kv).bytes_per_token());
    rep.kv_caches.push_back(kv);
  }
  const int saved_threads = num_threads();
  const std::vector<std::int32_t> prompt = synthetic_tokens(options.prefill_tokens, vocab, 1);
  const std::vector<std::int32_t> decode_ids = synthetic_tokens(options.decode_steps, vocab, 2);

  for (int threads : options.threads) {
    set_num_threads(threads);
    MachineRow mrow{threads, 0.0, 0.0};
    if (options.machine) {
      mrow.dram_read_gbs = measure_dram_read_gbs();
      mrow.sgemm_gflops = measure_sgemm_gflops();
      rep.machine.push_back(mrow);
      log::info("bench: {} threads: DRAM read {:.1f} GB/s, sgemm {:.1f} GFLOP/s", threads,
                mrow.dram_read_gbs, mrow.sgemm_gflops);
    }
    for (std::size_t mi = 0; mi < models.size(); ++mi) {
      model::CausalLM& model = *models[mi];
      const ModelCost& cost = rep.costs[mi];
      for (const model::KvCacheConfig& kv : options.kv_caches) {
        // Prefill: one warm-up, then `repeats` timed runs from an empty cache.
        model::KvCache cache = model.make_cache(1, options.prefill_tokens, kv);
        std::vector<double> times;
        for (int r = -1; r < options.repeats; ++r) {
          cache.reset();
          const auto t0 = Clock::now();
          model.forward(prompt, cache, model::LogitsMode::kLast);
          if (r >= 0) times.push_back(seconds_since(t0));
        }
        PrefillRow p;
        p.threads = threads;
        p.weights = cost.weights;
        p.kv = kv.label();
        p.tokens = options.prefill_tokens;
        p.seconds = time_stats(times);
        p.tok_s_best = p.tokens / p.seconds.min;
        p.tok_s_median = p.tokens / p.seconds.median;
        p.gflops_best = prefill_gflop(cost, p.tokens) / p.seconds.min;
        if (mrow.sgemm_gflops > 0) p.sgemm_fraction = p.gflops_best / mrow.sgemm_gflops;
        rep.prefill.push_back(p);
        log::info("bench: {} threads, {} weights, {} KV: prefill {:.1f} tok/s (best)", threads,
                  cost.weights, kv.label(), p.tok_s_best);

        for (std::int64_t context : options.contexts) {
          for (std::int64_t batch : options.batches) {
            rep.decode.push_back(time_decode(model, kv, context, batch, options, decode_ids));
            DecodeRow& d = rep.decode.back();
            d.threads = threads;
            d.weights = cost.weights;
            d.bytes_per_token = (cost.weight_bytes + d.bytes_per_token * batch) / batch;
            d.gbs_best = static_cast<double>(d.bytes_per_token) * d.tok_s_best / 1e9;
            if (mrow.dram_read_gbs > 0) d.dram_fraction = d.gbs_best / mrow.dram_read_gbs;
            log::info(
                "bench: {} threads, {} weights, {} KV, context {}, batch {}: decode {:.1f} tok/s "
                "(best)",
                threads, cost.weights, kv.label(), context, batch, d.tok_s_best);
          }
        }
      }
    }
  }
  set_num_threads(saved_threads);
  return rep;
}

std::string bench_markdown(const BenchReport& r) {
  std::string s;
  s += fmt::format(
      "Model: {} — {:.1f} M linear + {:.1f} M lm_head parameters; weights read per "
      "decode step:",
      r.model, r.cost.linear_params / 1e6, r.cost.lm_head_params / 1e6);
  for (std::size_t i = 0; i < r.costs.size(); ++i) {
    s += fmt::format("{} {:.1f} MB {}", i ? "," : "", r.costs[i].weight_bytes / 1e6,
                     r.costs[i].weights);
  }
  s += "\n\n";
  s += "KV cache bytes per token:";
  for (const auto& [kv, bytes] : r.kv_bytes_per_token) {
    s += fmt::format(" {} {} B;", kv, bytes);
  }
  s += "\n";
  for (const model::KvCacheConfig& kv : r.kv_caches) {
    if (kv.scales == model::KvScales::kNone && !kv.fake_quant) continue;
    s += fmt::format("- {}{}\n", kv.describe(),
                     kv.scales == model::KvScales::kDynamic
                         ? ": decode fixes them from the synthetic fill, prefill from the prompt"
                         : "");
  }
  s += "\n";
  if (!r.machine.empty()) {
    s += "| threads | DRAM read GB/s | sgemm 1024³ GFLOP/s |\n|---:|---:|---:|\n";
    for (const MachineRow& m : r.machine) {
      s += fmt::format("| {} | {:.1f} | {:.1f} |\n", m.threads, m.dram_read_gbs, m.sgemm_gflops);
    }
    s += "\n";
  }
  s += "| threads | weights | kv | prefill tokens | ms min | ms median | tok/s best | tok/s median "
       "| GFLOP/s best | of sgemm peak |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const PrefillRow& p : r.prefill) {
    s += fmt::format(
        "| {} | {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.0f}% |\n", p.threads,
        p.weights, p.kv, p.tokens, p.seconds.min * 1e3, p.seconds.median * 1e3, p.tok_s_best,
        p.tok_s_median, p.gflops_best, p.sgemm_fraction * 100);
  }
  s += "\n| threads | weights | kv | context | batch | block | ms/token min | ms/token median | "
       "tok/s best | tok/s median | MB read/token | GB/s best | of DRAM read |\n"
       "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const DecodeRow& d : r.decode) {
    s += fmt::format(
        "| {} | {} | {} | {} | {} | {} | {:.2f} | {:.2f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | "
        "{:.0f}% |\n",
        d.threads, d.weights, d.kv, d.context, d.batch,
        d.block_size > 0 ? std::to_string(d.block_size) : "-", d.seconds_per_token.min * 1e3,
        d.seconds_per_token.median * 1e3, d.tok_s_best, d.tok_s_median, d.bytes_per_token / 1e6,
        d.gbs_best, d.dram_fraction * 100);
  }
  return s;
}

nlohmann::json bench_json(const BenchReport& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["linear_params"] = r.cost.linear_params;
  j["lm_head_params"] = r.cost.lm_head_params;
  j["weight_bytes"] = r.cost.weight_bytes;
  j["weights"] = nlohmann::json::array();
  for (const ModelCost& c : r.costs) {
    j["weights"].push_back({{"weights", c.weights}, {"weight_bytes", c.weight_bytes}});
  }
  for (const auto& [kv, bytes] : r.kv_bytes_per_token) {
    j["kv_bytes_per_token"][kv] = bytes;
  }
  j["kv_caches"] = nlohmann::json::array();
  for (std::size_t i = 0; i < r.kv_caches.size(); ++i) {
    nlohmann::json k = runtime::kv_cache_json(r.kv_caches[i]);
    k["kv_bytes_per_token"] = r.kv_bytes_per_token.at(i).second;
    j["kv_caches"].push_back(k);
  }
  j["machine"] = nlohmann::json::array();
  for (const MachineRow& m : r.machine) {
    j["machine"].push_back({{"threads", m.threads},
                            {"dram_read_gbs", m.dram_read_gbs},
                            {"sgemm_gflops", m.sgemm_gflops}});
  }
  j["prefill"] = nlohmann::json::array();
  for (const PrefillRow& p : r.prefill) {
    j["prefill"].push_back({{"threads", p.threads},
                            {"weights", p.weights},
                            {"kv", p.kv},
                            {"tokens", p.tokens},
                            {"seconds_min", p.seconds.min},
                            {"seconds_median", p.seconds.median},
                            {"tok_s_best", p.tok_s_best},
                            {"tok_s_median", p.tok_s_median},
                            {"gflops_best", p.gflops_best},
                            {"sgemm_fraction", p.sgemm_fraction}});
  }
  j["decode"] = nlohmann::json::array();
  for (const DecodeRow& d : r.decode) {
    j["decode"].push_back({{"threads", d.threads},
                           {"weights", d.weights},
                           {"kv", d.kv},
                           {"context", d.context},
                           {"steps", d.steps},
                           {"batch", d.batch},
                           {"block_size", d.block_size},
                           {"seconds_per_token_min", d.seconds_per_token.min},
                           {"seconds_per_token_median", d.seconds_per_token.median},
                           {"tok_s_best", d.tok_s_best},
                           {"tok_s_median", d.tok_s_median},
                           {"bytes_per_token", d.bytes_per_token},
                           {"gbs_best", d.gbs_best},
                           {"dram_fraction", d.dram_fraction}});
  }
  return j;
}

}  // namespace kvq::eval
