// kvq bench: prefill / decode throughput against the machine's measured bandwidth and sgemm
// peak (definitions in src/kvq/eval/throughput.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/dtype.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/eval/throughput.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/model/causal_lm.h"
#include "kvq/runtime/kv_cache_choice.h"

namespace kvq::cli {
namespace {

struct BenchArgs {
  std::string model_dir;
  eval::BenchOptions options;
  std::vector<std::string> kv_caches = {"auto"};
  std::vector<std::string> weights = {"auto"};
  bool no_machine = false, json = false;
};

void run_bench_cmd(BenchArgs& a) {
  std::vector<runtime::KvCacheOption> kv_options;
  for (const std::string& s : a.kv_caches) kv_options.push_back(runtime::parse_kv_cache_option(s));
  std::vector<DType> weight_dtypes;
  for (const std::string& s : a.weights) {
    const DType w = model::resolve_weight_dtype(s, a.model_dir);
    if (std::find(weight_dtypes.begin(), weight_dtypes.end(), w) == weight_dtypes.end())
      weight_dtypes.push_back(w);  // "auto,f32" on an f32 checkpoint: once
  }
  a.options.machine = !a.no_machine;
  // The tokenizer is not needed; a quantized checkpoint's quantization is. One model per weight
  // dtype, all loaded up front so run_bench measures them side by side.
  std::vector<lifecycle::QuantizedModel> loaded;
  std::vector<model::CausalLM*> models;
  for (DType w : weight_dtypes) {
    loaded.push_back(lifecycle::QuantizedModel::load(a.model_dir, model::LoadOptions{w}));
    models.push_back(loaded.back().model.get());
  }
  a.options.kv_caches.clear();
  for (const runtime::KvCacheOption& o : kv_options) {
    a.options.kv_caches.push_back(
        runtime::resolve_kv_cache(o, loaded.front().lifecycle.get(), a.model_dir));
  }
  log::info("benchmarking {} ({} repeats)", a.model_dir, a.options.repeats);
  const eval::BenchReport report = eval::run_bench(models, a.options, a.model_dir);
  if (a.json) {
    std::printf("%s\n", eval::bench_json(report).dump(2).c_str());
  } else {
    std::printf("%s", eval::bench_markdown(report).c_str());
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Prefill and decode tokens/s, with the machine's DRAM read GB/s and sgemm GFLOP/s\n"
      "measured in the same run. Decode fills the KV cache to each context with synthetic\n"
      "keys/values, then times single-token steps; GB/s = (weights + KV of the context) x tok/s.\n"
      "Low-bit formats on a plain model use dynamic scales (fixed by the synthetic fill for\n"
      "decode, by the prompt for prefill); a quantized checkpoint runs its packed cache.\n"
      "Examples:\n"
      "  kvq bench --model M --kv-cache f32,bf16,fp8,int8,int4,nvfp4 --contexts 512,8192\n"
      "  kvq bench --model M --kv-cache fp8:tensor,fp8:head --threads 1 --no-machine\n"
      "  kvq bench --model M --weights f32,bf16 --threads 1 --contexts 512,8192\n"
      "  kvq bench --model M --weights bf16 --kv-cache bf16,int8 --contexts 2048 --batch 1,16\n"
      "  kvq bench --model M-kv-fp8-head --kv-cache auto,fake");
  cmd->add_option("--model", a->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--prefill", a->options.prefill_tokens, "Prompt length for the prefill timing")
      ->check(tokens_in(1))
      ->capture_default_str();
  cmd->add_option("--contexts", a->options.contexts, "Decode contexts, comma-separated")
      ->delimiter(',')
      ->check(tokens_in(1))
      ->capture_default_str();
  cmd->add_option("--threads", a->options.threads, "Thread counts, comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(1, kMaxThreads))
      ->capture_default_str();
  cmd->add_option("--repeats", a->options.repeats, "Timed repeats of every measurement")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--decode-steps", a->options.decode_steps, "Decode steps timed per repeat")
      ->check(count_in(1))
      ->capture_default_str();
  cmd->add_option("--batch", a->options.batches,
                  "Sequences decoded together per step, comma-separated (kvq serve's continuous\n"
                  "batch: each has its own cache at the context; tok/s counts every sequence's\n"
                  "token, ms/token is the step time / batch)")
      ->delimiter(',')
      ->check(CLI::Range(std::int64_t{1}, kMaxBatch))
      ->capture_default_str();
  cmd->add_option("--block-size", a->options.block_size,
                  "Decode from paged caches of this many positions per block, as kvq serve's\n"
                  "(its --block-size; blocks taken a block per sequence in turn); 0: contiguous")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--kv-cache", a->kv_caches, runtime::kv_cache_flag_help(true))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--weights", a->weights,
                  "Weight dtypes, comma-separated: auto (the checkpoint's), f32, bf16 (Linear\n"
                  "weights and embeddings converted to bf16 at load; fp32 arithmetic). Each is\n"
                  "loaded and run in turn")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--no-machine", a->no_machine, "Skip the DRAM bandwidth and sgemm measurements");
  cmd->add_flag("--json", a->json, "Print JSON instead of Markdown tables");
  cmd->callback([a] { run_bench_cmd(*a); });
}

}  // namespace kvq::cli
