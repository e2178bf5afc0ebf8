#include "kvq/runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "kvq/core/error.h"

namespace kvq::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A request being generated.
struct InFlight {
  std::size_t index;
  model::KvCache cache;
  model::Sampler sampler;
  Generation out;
};

class Generator {
 public:
  Generator(model::CausalLM& model, std::span<const GenerationRequest> requests,
            const GeneratorOptions& options,
            const std::function<void(std::size_t, std::int32_t)>& on_token,
            const std::function<void(std::size_t, Generation)>& on_done)
      : model_(model),
        requests_(requests),
        options_(options),
        on_token_(on_token),
        on_done_(on_done),
        vocab_(static_cast<std::size_t>(model.config().vocab_size)) {}

  void run() {
    std::vector<InFlight> live;
    std::size_t next = 0;
    while (next < requests_.size() || !live.empty()) {
      while (static_cast<std::int64_t>(live.size()) < options_.batch && next < requests_.size()) {
        if (std::optional<InFlight> g = start(next++)) live.push_back(std::move(*g));
      }
      if (live.empty()) continue;
      std::vector<std::int32_t> tokens;
      std::vector<model::KvCache*> caches;
      for (InFlight& g : live) {
        tokens.push_back(g.out.tokens.back());
        caches.push_back(&g.cache);
      }
      const auto t0 = Clock::now();
      const Tensor logits = model_.decode_step(tokens, caches);  // [live, vocab]
      const double step_seconds = seconds_since(t0);
      std::vector<InFlight> still;
      for (std::size_t i = 0; i < live.size(); ++i) {
        InFlight& g = live[i];
        ++g.out.decode_steps;
        g.out.decode_seconds += step_seconds;
        if (!add_token(g, std::span<const float>(logits.f32() + i * vocab_, vocab_))) {
          still.push_back(std::move(g));
        }
      }
      live = std::move(still);
    }
  }

 private:
  // Prefills request i in a fresh cache and samples its first token; nullopt when it is done.
  std::optional<InFlight> start(std::size_t i) {
    const GenerationRequest& r = requests_[i];
    const auto n = static_cast<std::int64_t>(r.prompt.size());
    if (r.max_new_tokens == 0) {  // nothing to generate: no cache to allocate either
      Generation out;
      out.prompt_tokens = n;
      on_done_(i, std::move(out));
      return std::nullopt;
    }
    InFlight g{i, model_.make_cache(1, n + r.max_new_tokens, options_.kv_cache),
               model::Sampler(r.sampling), Generation{}};
    g.out.prompt_tokens = n;
    const auto t0 = Clock::now();
    const Tensor logits = model_.forward(r.prompt, g.cache, model::LogitsMode::kLast);
    g.out.prefill_seconds = seconds_since(t0);
    if (add_token(g, std::span<const float>(logits.f32(), vocab_))) return std::nullopt;
    return g;
  }

  // Samples g's next token from `logits` [vocab]; true (after on_done) when g is finished.
  bool add_token(InFlight& g, std::span<const float> logits) {
    const GenerationRequest& r = requests_[g.index];
    const std::int32_t t = g.sampler.sample(logits);
    g.out.tokens.push_back(t);
    if (on_token_) on_token_(g.index, t);
    if (std::find(r.stop_ids.begin(), r.stop_ids.end(), t) != r.stop_ids.end()) {
      g.out.stop = StopReason::kStopId;
    } else if (static_cast<std::int64_t>(g.out.tokens.size()) >= r.max_new_tokens) {
      g.out.stop = StopReason::kLength;
    } else if (r.stop_after && r.stop_after(g.out.tokens)) {
      g.out.stop = StopReason::kStopped;
    } else {
      return false;
    }
    on_done_(g.index, std::move(g.out));
    return true;
  }

  model::CausalLM& model_;
  std::span<const GenerationRequest> requests_;
  const GeneratorOptions& options_;
  const std::function<void(std::size_t, std::int32_t)>& on_token_;
  const std::function<void(std::size_t, Generation)>& on_done_;
  std::size_t vocab_;
};

}  // namespace

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kStopId:
      return "eos";
    case StopReason::kStopped:
      return "stop";
    default:
      return "length";
  }
}

void generate(model::CausalLM& model, std::span<const GenerationRequest> requests,
              const GeneratorOptions& options,
              const std::function<void(std::size_t, std::int32_t)>& on_token,
              const std::function<void(std::size_t, Generation)>& on_done) {
  if (options.batch < 1)
    fail<InvalidArgument>("generate: batch must be >= 1, got {}", options.batch);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].prompt.empty()) fail<InvalidArgument>("generate: request {} has no prompt", i);
    if (requests[i].max_new_tokens < 0) {
      fail<InvalidArgument>("generate: request {}: max_new_tokens must be >= 0, got {}", i,
                            requests[i].max_new_tokens);
    }
  }
  Generator(model, requests, options, on_token, on_done).run();
}

std::vector<Generation> generate(model::CausalLM& model,
                                 std::span<const GenerationRequest> requests,
                                 const GeneratorOptions& options) {
  std::vector<Generation> out(requests.size());
  generate(model, requests, options, {},
           [&](std::size_t i, Generation g) { out[i] = std::move(g); });
  return out;
}

}  // namespace kvq::runtime
