// One generation the server runs: what was asked (SequenceRequest, fixed at submission) and what
// came out so far (SequenceOutput), shared by the HTTP handler that waits on it and the
// scheduler thread that fills it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvq/model/sampler.h"

namespace kvq::serve {

struct SequenceRequest {
  std::vector<std::int32_t> prompt;       // token ids, non-empty, each inside the vocabulary
  std::int64_t max_tokens = 16;           // new tokens at most (>= 0)
  model::SamplerConfig sampling;          // greedy by default
  std::vector<std::int64_t> stop_ids;     // generation ends at one (it counts, but has no text)
  std::vector<std::string> stop_strings;  // generation ends before the first one in the text
  // < 0: no logprobs; N >= 0: each new token's logprob and its N most likely alternatives.
  int top_logprobs = -1;
  bool prompt_logprobs = false;  // also every prompt token's (echo): needs all prefill logits
};

struct TokenLogprob {
  std::int32_t id = 0;
  double logprob = 0.0;                              // NaN: none (a prompt's first token)
  std::vector<std::pair<std::int32_t, double>> top;  // most likely first
};

enum class FinishReason : std::uint8_t { kNone, kLength, kStop, kCancelled, kError };
// OpenAI's finish_reason: "length", "stop" (a stop id or string), "cancelled", "error".
std::string_view finish_reason_name(FinishReason reason);

struct SequenceOutput {
  // With prompt_logprobs, one entry per prompt token once the prefill is done.
  std::vector<TokenLogprob> prompt_logprobs;
  // The new tokens (a final stop id included); logprob and top only with top_logprobs >= 0.
  std::vector<TokenLogprob> tokens;
  std::string text;                    // their bytes (a stop id has none), cut before a stop string
  std::int64_t completion_tokens = 0;  // tokens.size()
  FinishReason finish = FinishReason::kNone;
  std::string error;  // kError: what failed
  bool prefilled = false;
};

class Sequence {
 public:
  explicit Sequence(SequenceRequest request) : request_(std::move(request)) {}

  const SequenceRequest& request() const { return request_; }

  // The HTTP side: waits until the output changed since `version` (returned by a previous call;
  // 0 at first) or `timeout` passed; copies the output into `out` and returns its version.
  std::uint64_t wait(std::uint64_t version, std::chrono::milliseconds timeout,
                     SequenceOutput& out) const {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, timeout, [&] { return version_ != version; });
    out = output_;
    return version_;
  }
  // Asks the scheduler to drop the sequence (a client that went away); it frees its cache at its
  // next step.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // The scheduler side: changes the output under the lock and wakes the waiters.
  template <class F>
  void update(F&& change) {
    {
      std::lock_guard lock(mutex_);
      change(output_);
      ++version_;
    }
    changed_.notify_all();
  }
  bool finished() const {
    std::lock_guard lock(mutex_);
    return output_.finish != FinishReason::kNone;
  }

 private:
  const SequenceRequest request_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  SequenceOutput output_;
  std::uint64_t version_ = 0;
  std::atomic<bool> cancelled_{false};
};

}  // namespace kvq::serve
