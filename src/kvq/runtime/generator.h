// Token generation for every caller — `kvq generate`, GSM8K, (later) a server: one loop.
//
// Each request is prefilled alone in a cache of its own (runtime's KvCacheConfig), then the
// sequences in flight decode together, one token each per step (CausalLM::decode_step reads every
// weight once for all of them, and a row is bit-identical to decoding it alone, so batching never
// changes a greedy result). A finished sequence's slot goes to the next request at the next step.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "kvq/model/causal_lm.h"
#include "kvq/model/kv_cache.h"
#include "kvq/model/sampler.h"

namespace kvq::runtime {

struct GenerationRequest {
  std::vector<std::int32_t> prompt;    // token ids, non-empty
  std::int64_t max_new_tokens = 256;   // >= 0
  std::vector<std::int64_t> stop_ids;  // generation ends after one of these (it is kept)
  model::SamplerConfig sampling;       // default: greedy (argmax, lowest id on ties)
  // Asked after every new token with all tokens generated so far; true ends the generation
  // (stop strings). Empty: never.
  std::function<bool(std::span<const std::int32_t> generated)> stop_after;
};

enum class StopReason : std::uint8_t {
  kLength,   // max_new_tokens reached
  kStopId,   // a stop id was generated
  kStopped,  // stop_after said so
};
std::string_view stop_reason_name(StopReason reason);  // "length", "eos", "stop"

struct Generation {
  std::vector<std::int32_t> tokens;  // the new tokens, a final stop id included
  StopReason stop = StopReason::kLength;
  std::int64_t prompt_tokens = 0;
  double prefill_seconds = 0.0;  // this request's prefill
  // Decode steps this request took part in and their wall time (shared with the sequences it
  // was batched with).
  std::int64_t decode_steps = 0;
  double decode_seconds = 0.0;
};

struct GeneratorOptions {
  model::KvCacheConfig kv_cache;  // every request's cache
  std::int64_t batch = 1;         // sequences decoded together (>= 1)
};

// Generates every request, `options.batch` at a time. `on_token(i, token)` is called as request i
// samples a token (streaming; may be empty), `on_done(i, generation)` as it finishes (not in
// order). InvalidArgument for an empty prompt, max_new_tokens < 0 or batch < 1, before any work.
void generate(model::CausalLM& model, std::span<const GenerationRequest> requests,
              const GeneratorOptions& options,
              const std::function<void(std::size_t, std::int32_t)>& on_token,
              const std::function<void(std::size_t, Generation)>& on_done);

// The same, collecting the generations in request order.
std::vector<Generation> generate(model::CausalLM& model,
                                 std::span<const GenerationRequest> requests,
                                 const GeneratorOptions& options = {});

}  // namespace kvq::runtime
