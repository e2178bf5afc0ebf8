// kvq serve: an OpenAI-compatible HTTP server (src/kvq/serve) with continuous batching over the
// packed KV cache.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/io/atomic_write.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq/runtime/model_source.h"
#include "kvq/serve/server.h"

namespace kvq::cli {
namespace {

struct ServeArgs {
  std::string model_dir, model_name, kv_cache = "auto", weights = "auto", host = "127.0.0.1";
  int port = 8000;
  std::int64_t kv_cache_memory_mib = 1024, max_seqs = 8, max_queue = 64, ctx = 0;
  std::int64_t prefill_step_ms = serve::SchedulerOptions{}.prefill_step_ms;
  std::int64_t block_size = serve::SchedulerOptions{}.block_tokens;
  serve::PreemptionMode preemption = serve::PreemptionMode::kExact;
};

void run_serve(const ServeArgs& a) {
  const runtime::KvCacheOption kv_option = runtime::parse_kv_cache_option(a.kv_cache);
  const model::LoadOptions load{model::resolve_weight_dtype(a.weights, a.model_dir)};
  runtime::ModelSource src =
      runtime::open_model_source(a.model_dir, /*with_quantization=*/true, load);
  serve::ServerOptions options;
  options.scheduler.kv_cache =
      runtime::resolve_kv_cache(kv_option, src.lifecycle.get(), a.model_dir);
  if (const std::string note = runtime::dynamic_scales_note(options.scheduler.kv_cache,
                                                            "each request's first prompt chunk");
      !note.empty()) {
    std::fprintf(stderr, "%s\n", note.c_str());
  }
  options.model_name =
      a.model_name.empty()
          ? std::filesystem::path(a.model_dir).lexically_normal().filename().string()
          : a.model_name;
  if (options.model_name.empty()) options.model_name = a.model_dir;
  options.host = a.host;
  options.port = a.port;
  options.context = a.ctx;
  options.scheduler.kv_cache_bytes = a.kv_cache_memory_mib << 20;
  options.scheduler.max_seqs = a.max_seqs;
  options.scheduler.max_queue = a.max_queue;
  options.scheduler.prefill_step_ms = a.prefill_step_ms;
  options.scheduler.block_tokens = a.block_size;
  options.scheduler.preemption = a.preemption;
  serve::Server server(src, options);
  const int port = server.bind();

  // The first SIGINT / SIGTERM drains instead of exiting at once (a second one still does).
  std::atomic<int> stop_signal{0};
  io::set_interrupt_handler([&stop_signal](int sig) { stop_signal.store(sig); });

  const serve::SchedulerStats stats = server.scheduler().stats();
  std::fprintf(
      stderr,
      "[kvq serve] %s on http://%s:%d (OpenAI API: /v1/completions, "
      "/v1/chat/completions); KV cache %s, %lld bytes/token, %lld blocks of %lld "
      "positions of a layer (%lld tokens) in %lld MiB; up to %lld sequences at once\n",
      options.model_name.c_str(), a.host.c_str(), port,
      options.scheduler.kv_cache.describe().c_str(),
      static_cast<long long>(stats.kv_bytes_per_token), static_cast<long long>(stats.blocks_total),
      static_cast<long long>(stats.block_tokens),
      static_cast<long long>(stats.blocks_total * stats.block_bytes / stats.kv_bytes_per_token),
      static_cast<long long>(a.kv_cache_memory_mib), static_cast<long long>(a.max_seqs));
  std::thread listener([&] { server.listen(); });
  while (stop_signal.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "[kvq serve] signal %d: finishing the running requests, then exiting\n",
               stop_signal.load());
  server.shutdown();
  listener.join();
  io::set_interrupt_handler(nullptr);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve the model over an OpenAI-compatible HTTP API (completions, chat completions,\n"
      "streaming, logprobs) with continuous batching; SIGINT / SIGTERM finish the running\n"
      "requests and exit 0. Example:\n"
      "  kvq serve --model M --kv-cache int8 --kv-cache-memory 512 --port 8000");
  cmd->add_option("--model", a->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--model-name", a->model_name,
                  "The name requests use (\"model\"); default: the directory's name");
  cmd->add_option("--kv-cache", a->kv_cache, runtime::kv_cache_flag_help(false))
      ->capture_default_str();
  cmd->add_option("--weights", a->weights, kWeightsHelp)->capture_default_str();
  cmd->add_option("--kv-cache-memory", a->kv_cache_memory_mib,
                  "KV cache budget in MiB: one pool of blocks (--block-size positions of a layer) "
                  "that sequences take as they grow; when it runs out, the youngest sequence is "
                  "preempted and recomputed later")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--block-size", a->block_size,
                  "Positions per KV block (vLLM's --block-size; 128 is vLLM's CPU default): "
                  "smaller wastes less of a sequence's last block, larger means fewer, longer runs "
                  "of rows per block (16 made a 16-sequence decode step 1.1-1.6x slower here)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1024}))
      ->capture_default_str();
  cmd->add_option("--preemption-mode", a->preemption,
                  "How a sequence preempted when the KV pool runs out rebuilds its cache: exact "
                  "(its prompt prefilled again, its tokens replayed through decode steps: its "
                  "answer stays bit-identical) or recompute (vLLM's: prompt and tokens prefilled "
                  "at once, faster under memory pressure, equal up to rounding)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, serve::PreemptionMode>{
              {"exact", serve::PreemptionMode::kExact},
              {"recompute", serve::PreemptionMode::kRecompute}},
          CLI::ignore_case))
      ->default_str("exact");
  cmd->add_option("--max-seqs", a->max_seqs,
                  "Sequences decoded together (every result is bit-identical to running alone, "
                  "preempted or not, with --preemption-mode exact)")
      ->check(CLI::Range(std::int64_t{1}, kMaxBatch))
      ->capture_default_str();
  cmd->add_option("--max-queue", a->max_queue,
                  "Sequences that may wait for a seat or KV blocks; more get HTTP 429")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--prefill-step-ms", a->prefill_step_ms,
                  "While sequences stream, a new prompt's prefill runs at most about this long "
                  "between two of their tokens (a 256-token chunk's layers spread over several "
                  "steps; results do not change); 0: a whole chunk at once (more tokens/s and "
                  "earlier first tokens on a busy server, but longer stalls: docs/benchmarks.md)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{60000}))
      ->capture_default_str();
  cmd->add_option("--ctx", a->ctx,
                  "Context per sequence (prompt + new); 0 = max_position_embeddings")
      ->check(tokens_in(0))
      ->capture_default_str();
  cmd->add_option("--host", a->host, "Address to listen on (loopback by default)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0: any free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace kvq::cli
