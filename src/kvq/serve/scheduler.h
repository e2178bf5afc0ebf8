// Continuous batching: one scheduler thread runs every sequence the server accepted.
//
// Each sequence's KV cache is PAGED (model/kv_block_pool.h): its rows live in blocks of one pool
// of --kv-cache-memory bytes (a block holds block_tokens positions of one layer's K and V), taken
// as the sequence grows, given back when it ends. Each iteration (a "step"):
//   1. admits sequences, oldest first — preempted ones before the queue —, while a seat
//      (--max-seqs) and the KV blocks for their prompt and first new token are free;
//   2. drops cancelled sequences (their blocks return to the pool);
//   3. advances the prefill of the oldest sequence still in prefill: its prompt goes through the
//      model in chunks of prefill_chunk tokens, and while other sequences decode, a step runs only
//      as many of a chunk's layers as fit in prefill_step_ms (model::ForwardPass), so a long
//      prompt never stalls the running streams for more than about that;
//   4. takes a block for every decoding sequence whose next token starts one, oldest first; when
//      the pool is out, PREEMPTS the youngest running sequence (vLLM's recompute preemption): its
//      blocks go back and it waits ahead of the queue; readmitted, it rebuilds its cache
//      (PreemptionMode) and samples on;
//   5. runs ONE CausalLM::decode_step over every decoding sequence, each in its own cache, and
//      samples each one's next token with its own Sampler.
// So requests join and leave the batch at every step. A sequence's chunk boundaries depend only on
// its own prompt and decode_step rows are bit-identical to decoding alone (for any --max-seqs),
// so its tokens and logprobs do not depend on what else runs, nor, in the default
// PreemptionMode::kExact, on whether it was preempted (kvq_preemptions_total counts them).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "kvq/model/causal_lm.h"
#include "kvq/model/kv_block_pool.h"
#include "kvq/model/kv_cache.h"
#include "kvq/serve/sequence.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::serve {

// How a preempted sequence rebuilds its cache.
enum class PreemptionMode : std::uint8_t {
  // Its prompt prefilled again in the same chunks (the same dynamic scales), then the tokens it
  // had sampled REPLAYED through decode-step rows, their logits unused: the very computations
  // that first built the cache, so its answer stays bit-identical to running alone. Costs one
  // decode step of wall time per token it had.
  kExact,
  // vLLM's recompute: its prompt and sampled tokens prefilled at once. Faster under memory
  // pressure (docs/benchmarks.md), but those rows come from a prefill, not the decode steps that
  // first wrote them, so they equal the lost ones up to rounding only (and so may, at worst, a
  // later greedy token).
  kRecompute,
};

struct SchedulerOptions {
  model::KvCacheConfig kv_cache;            // every sequence's cache
  std::int64_t kv_cache_bytes = 1ll << 30;  // the KV block pool's budget
  // Positions per KV block (of one layer): vLLM's CPU default; 16-position blocks made a decode
  // step 1.1-1.6x slower and took 8-bit KV's lead over bf16 (docs/benchmarks.md).
  std::int64_t block_tokens = 128;
  std::int64_t max_seqs = 8;           // sequences running at once
  std::int64_t max_queue = 64;         // sequences waiting for a seat or blocks
  std::int64_t prefill_chunk = 256;    // prompt tokens per prefill forward
  std::int64_t prefill_step_ms = 100;  // a step's prefill time while others decode; 0: a
                                       // whole chunk per step
  PreemptionMode preemption = PreemptionMode::kExact;
};

// What /metrics and /health report.
struct SchedulerStats {
  std::int64_t running = 0, waiting = 0;
  std::int64_t blocks_total = 0, blocks_used = 0, block_tokens = 0, block_bytes = 0;
  std::int64_t kv_bytes_per_token = 0;
  std::int64_t sequences_finished = 0, sequences_rejected = 0, preemptions = 0;
  std::int64_t prompt_tokens = 0, generation_tokens = 0;  // totals since start
  std::int64_t decode_steps = 0;
  bool draining = false;
};

class Scheduler {
 public:
  // Starts the scheduler thread. `model` and `tokenizer` must outlive it; the model is used by
  // that thread only.
  Scheduler(model::CausalLM& model, const tok::Tokenizer& tokenizer, SchedulerOptions options);
  // Cancels what is left and joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues the sequences of one request, all or none. RequestError: 400 when one can never fit
  // (prompt + max_tokens beyond the whole KV pool), 429 when the queue has no room for them, 503
  // while draining.
  void submit(std::span<const std::shared_ptr<Sequence>> sequences);
  // Stops admitting new requests (submit answers 503) and waits until every accepted sequence
  // finished.
  void drain();

  SchedulerStats stats() const;
  std::int64_t kv_bytes_per_token() const { return bytes_per_token_; }

 private:
  struct Running;
  void loop();
  void admit();
  // Gives r a paged cache holding the blocks for its input and first new token; false (nothing
  // taken) when the pool has too few free, or with `error` set when the cache cannot be made.
  bool start(Running& r, std::string& error);
  void drop_cancelled();
  void prefill();
  // Blocks for every decoding sequence's next token, preempting the youngest when out.
  void grow();
  void preempt(Running& r);
  void decode();
  // Samples the token after `logits` [vocab] for r; true when r finished.
  bool add_token(Running& r, std::span<const float> logits);
  void finish(Running& r, FinishReason reason, std::string error = {});
  // KV blocks a sequence of `tokens` tokens holds (rings included).
  std::int64_t blocks_for(std::int64_t tokens) const;

  model::CausalLM& model_;
  const tok::Tokenizer& tokenizer_;
  const SchedulerOptions options_;
  const std::int64_t bytes_per_token_;
  const std::size_t vocab_;

  mutable std::mutex mutex_;
  std::condition_variable work_;                   // a sequence arrived, or stop
  std::condition_variable idle_;                   // nothing runs or waits any more
  model::KvBlockPool pool_;                        // thread-safe
  std::deque<std::shared_ptr<Sequence>> waiting_;  // under mutex_
  std::vector<std::unique_ptr<Running>> running_;  // scheduler thread only; size under mutex_
  // Preempted, by arrival (oldest first); scheduler thread only, size under mutex_.
  std::deque<std::unique_ptr<Running>> preempted_;
  std::int64_t running_count_ = 0, preempted_count_ = 0;  // under mutex_
  std::int64_t arrivals_ = 0;                             // scheduler thread only
  SchedulerStats totals_;                                 // counters, under mutex_
  bool draining_ = false, stop_ = false;                  // under mutex_
  std::thread thread_;
};

}  // namespace kvq::serve
