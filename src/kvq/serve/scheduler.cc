#include "kvq/serve/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <new>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "kvq/core/log.h"
#include "kvq/eval/perplexity.h"
#include "kvq/serve/request_error.h"
#include "kvq/serve/token_text.h"

namespace kvq::serve {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
    default:
      return "";
  }
}

namespace {

// `target`'s logprob under `logits` [vocab] and, when top > 0, the `top` most likely tokens'
// (ties: the lower id first). One log-sum-exp (eval::token_nll); an alternative's logprob is
// the target's plus the difference of their logits.
TokenLogprob token_logprob(std::span<const float> logits, std::int32_t target, int top) {
  TokenLogprob out;
  out.id = target;
  out.logprob = -eval::token_nll(logits, target);
  if (top <= 0) return out;
  const auto n = std::min<std::size_t>(static_cast<std::size_t>(top), logits.size());
  std::vector<std::int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      const float la = logits[static_cast<std::size_t>(a)];
                      const float lb = logits[static_cast<std::size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  const double target_logit = logits[static_cast<std::size_t>(target)];
  for (std::size_t i = 0; i < n; ++i) {
    out.top.emplace_back(
        ids[i], out.logprob +
                    (static_cast<double>(logits[static_cast<std::size_t>(ids[i])]) - target_logit));
  }
  return out;
}

}  // namespace

struct Scheduler::Running {
  std::shared_ptr<Sequence> seq;
  std::int64_t arrival = 0;                // admission order: preemption takes the youngest
  std::optional<model::KvCache> cache;     // paged; freed when it finishes or is preempted
  std::optional<model::ForwardPass> pass;  // the prompt chunk whose layers run, if any
  model::Sampler sampler;
  std::int64_t prefilled = 0;         // input() tokens in the cache
  std::int64_t new_tokens = 0;        // sampled so far (a stop id included)
  std::vector<std::int32_t> sampled;  // those tokens
  // Sampled tokens whose K/V the cache holds: new_tokens - 1 while decoding (the last one is the
  // next step's input). After a preemption (PreemptionMode::kExact) it restarts at 0 and decode
  // steps REPLAY sampled[...] without sampling until it catches up.
  std::int64_t cached_new = 0;
  // PreemptionMode::kRecompute after a preemption: the prompt and every sampled token but the
  // last, prefilled again; empty otherwise.
  std::vector<std::int32_t> refill;
  std::string text;  // the new tokens' bytes, cut before a stop string
  std::vector<TokenLogprob> prompt_logprobs;
  bool done = false, preempted = false;

  // What the prefill feeds: the prompt, or `refill`.
  std::span<const std::int32_t> input() const {
    return refill.empty() ? std::span<const std::int32_t>(seq->request().prompt)
                          : std::span<const std::int32_t>(refill);
  }
  bool prefilling() const { return prefilled < static_cast<std::int64_t>(input().size()); }
  bool active() const { return !done && !preempted; }
  bool decoding() const { return active() && !prefilling() && new_tokens > 0; }
  // Its cache's capacity: the prompt and max_tokens.
  std::int64_t capacity() const {
    const SequenceRequest& r = seq->request();
    return static_cast<std::int64_t>(r.prompt.size()) + std::max<std::int64_t>(r.max_tokens, 0);
  }
};

Scheduler::Scheduler(model::CausalLM& model, const tok::Tokenizer& tokenizer,
                     SchedulerOptions options)
    : model_(model),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      bytes_per_token_(model.make_cache(1, 1, options_.kv_cache).bytes_per_token()),
      vocab_(static_cast<std::size_t>(model.config().vocab_size)),
      pool_(options_.kv_cache_bytes, options_.block_tokens,
            model.kv_block_bytes(options_.kv_cache, options_.block_tokens)) {
  if (options_.max_seqs < 1)
    fail<InvalidArgument>("--max-seqs must be >= 1, got {}", options_.max_seqs);
  if (options_.max_queue < 0)
    fail<InvalidArgument>("--max-queue must be >= 0, got {}", options_.max_queue);
  if (options_.prefill_chunk < 1) {
    fail<InvalidArgument>("prefill chunk must be >= 1 token, got {}", options_.prefill_chunk);
  }
  if (options_.prefill_step_ms < 0) {
    fail<InvalidArgument>("--prefill-step-ms must be >= 0, got {}", options_.prefill_step_ms);
  }
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
  for (auto& r : running_) finish(*r, FinishReason::kCancelled);
  for (auto& r : preempted_) finish(*r, FinishReason::kCancelled);
  for (auto& s : waiting_) {
    s->update([](SequenceOutput& o) { o.finish = FinishReason::kCancelled; });
  }
}

std::int64_t Scheduler::blocks_for(std::int64_t tokens) const {
  return model_.cache_blocks(tokens, options_.kv_cache, options_.block_tokens);
}

void Scheduler::submit(std::span<const std::shared_ptr<Sequence>> sequences) {
  std::unique_lock lock(mutex_);
  if (draining_) {
    throw RequestError(503, "the server is shutting down", "", "server_error");
  }
  for (const auto& s : sequences) {
    const SequenceRequest& r = s->request();
    const std::int64_t tokens = static_cast<std::int64_t>(r.prompt.size()) + r.max_tokens;
    if (const std::int64_t need = blocks_for(tokens); need > pool_.total()) {
      throw RequestError(
          400,
          fmt::format("prompt + max_tokens = {} tokens need {} KV blocks, more than the server "
                      "has ({} blocks of {} tokens of a layer: --kv-cache-memory); lower "
                      "max_tokens",
                      tokens, need, pool_.total(), pool_.block_tokens()),
          "max_tokens");
    }
  }
  if (static_cast<std::int64_t>(waiting_.size() + sequences.size()) > options_.max_queue) {
    ++totals_.sequences_rejected;
    throw RequestError(429,
                       fmt::format("the server is busy: {} sequences wait already (--max-queue "
                                   "{}); retry later",
                                   waiting_.size(), options_.max_queue),
                       "", "rate_limit_error");
  }
  for (const auto& s : sequences) waiting_.push_back(s);
  lock.unlock();
  work_.notify_all();
}

void Scheduler::drain() {
  std::unique_lock lock(mutex_);
  draining_ = true;
  idle_.wait(lock,
             [&] { return waiting_.empty() && running_count_ == 0 && preempted_count_ == 0; });
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  SchedulerStats s = totals_;
  s.running = running_count_;
  s.waiting = static_cast<std::int64_t>(waiting_.size()) + preempted_count_;
  s.blocks_total = pool_.total();
  s.blocks_used = pool_.used();
  s.block_tokens = pool_.block_tokens();
  s.block_bytes = pool_.block_bytes();
  s.kv_bytes_per_token = bytes_per_token_;
  s.draining = draining_;
  return s;
}

void Scheduler::loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] {
        return stop_ || !waiting_.empty() || !running_.empty() || !preempted_.empty();
      });
      if (stop_) return;
    }
    admit();
    drop_cancelled();
    prefill();
    grow();
    decode();
    // The preempted wait, by arrival, ahead of the queue.
    for (auto& r : running_) {
      if (r->done || !r->preempted) continue;
      const auto at = std::upper_bound(
          preempted_.begin(), preempted_.end(), r->arrival,
          [](std::int64_t a, const std::unique_ptr<Running>& p) { return a < p->arrival; });
      preempted_.insert(at, std::move(r));
    }
    std::erase_if(running_, [](const std::unique_ptr<Running>& r) { return !r || r->done; });
    std::lock_guard lock(mutex_);
    running_count_ = static_cast<std::int64_t>(running_.size());
    preempted_count_ = static_cast<std::int64_t>(preempted_.size());
    if (running_.empty() && waiting_.empty() && preempted_.empty()) idle_.notify_all();
  }
}

bool Scheduler::start(Running& r, std::string& error) {
  try {
    model::KvCache cache = model_.make_cache(1, r.capacity(), options_.kv_cache, &pool_);
    const auto first = static_cast<std::int64_t>(r.input().size()) + 1;
    if (!cache.reserve(std::min(first, r.capacity()))) return false;
    r.cache.emplace(std::move(cache));
    r.preempted = false;
    return true;
  } catch (const std::bad_alloc&) {
    error = "out of memory allocating the KV cache";
  } catch (const Error& e) {
    error = e.what();
  }
  return false;
}

void Scheduler::admit() {
  const auto seats = [&] { return static_cast<std::int64_t>(running_.size()) < options_.max_seqs; };
  // Preempted sequences first: they came before everything in the queue.
  while (!preempted_.empty() && seats()) {
    Running& r = *preempted_.front();
    std::string error;
    if (!start(r, error) && error.empty()) break;  // no blocks yet
    if (!error.empty()) finish(r, FinishReason::kError, std::move(error));
    if (!r.done) running_.push_back(std::move(preempted_.front()));
    preempted_.pop_front();
  }
  // Then the queue, first come first served: no overtaking.
  while (preempted_.empty() && seats()) {
    std::shared_ptr<Sequence> s;
    {
      std::lock_guard lock(mutex_);
      if (waiting_.empty()) break;
      s = waiting_.front();
      if (s->cancelled()) {  // gone before it ran: nothing to free
        waiting_.pop_front();
        s->update([](SequenceOutput& o) { o.finish = FinishReason::kCancelled; });
        ++totals_.sequences_finished;
        continue;
      }
    }
    auto run = std::make_unique<Running>();
    run->seq = s;
    std::string error;
    try {
      run->sampler = model::Sampler(s->request().sampling);
    } catch (const Error& e) {
      error = e.what();
    }
    if (error.empty() && !start(*run, error) && error.empty()) break;  // no blocks yet
    {
      std::lock_guard lock(mutex_);
      waiting_.pop_front();  // still s: only this thread pops
      totals_.prompt_tokens += static_cast<std::int64_t>(s->request().prompt.size());
    }
    if (!error.empty()) {
      finish(*run, FinishReason::kError, std::move(error));
      continue;
    }
    run->arrival = arrivals_++;
    running_.push_back(std::move(run));
  }
  std::sort(running_.begin(), running_.end(),
            [](const auto& a, const auto& b) { return a->arrival < b->arrival; });
  std::lock_guard lock(mutex_);
  running_count_ = static_cast<std::int64_t>(running_.size());
  preempted_count_ = static_cast<std::int64_t>(preempted_.size());
}

void Scheduler::drop_cancelled() {
  for (auto& r : running_) {
    if (!r->done && r->seq->cancelled()) finish(*r, FinishReason::kCancelled);
  }
  for (auto& r : preempted_) {
    if (r->seq->cancelled()) finish(*r, FinishReason::kCancelled);
  }
  std::erase_if(preempted_, [](const std::unique_ptr<Running>& r) { return r->done; });
}

void Scheduler::prefill() {
  auto it = std::find_if(running_.begin(), running_.end(), [](const std::unique_ptr<Running>& r) {
    return r->active() && r->prefilling();
  });
  if (it == running_.end()) return;
  Running& r = **it;
  const SequenceRequest& req = r.seq->request();
  const std::span<const std::int32_t> input = r.input();
  const auto input_len = static_cast<std::int64_t>(input.size());
  const std::int64_t n = std::min(options_.prefill_chunk, input_len - r.prefilled);
  // A preempted sequence's prefill again: its prompt logprobs and first token went out already.
  const bool again = r.new_tokens > 0;
  const bool prompt_logprobs = req.prompt_logprobs && !again;
  // Sequences that decode wait for this step's prefill: give it prefill_step_ms (at least one
  // layer, so it always advances), the whole chunk when nobody waits or the budget is 0.
  const bool others_wait =
      std::any_of(running_.begin(), running_.end(), [](const auto& o) { return o->decoding(); });
  const bool budgeted = others_wait && options_.prefill_step_ms > 0;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.prefill_step_ms);
  try {
    if (!r.pass) {
      r.pass.emplace(
          model_, input.subspan(static_cast<std::size_t>(r.prefilled), static_cast<std::size_t>(n)),
          *r.cache);
    }
    do {
      r.pass->run_layers(1);
    } while (r.pass->layers_left() > 0 && (!budgeted || std::chrono::steady_clock::now() < until));
    if (r.pass->layers_left() > 0) return;  // the next step goes on
    const Tensor logits =
        r.pass->finish(prompt_logprobs ? model::LogitsMode::kAll : model::LogitsMode::kLast);
    r.pass.reset();
    if (prompt_logprobs) {
      if (r.prefilled == 0) {
        TokenLogprob first;
        first.id = req.prompt[0];
        first.logprob = std::numeric_limits<double>::quiet_NaN();
        r.prompt_logprobs.push_back(first);
      }
      // Row i predicts prompt token prefilled + i + 1.
      for (std::int64_t i = 0; i < n && r.prefilled + i + 1 < input_len; ++i) {
        r.prompt_logprobs.push_back(token_logprob(
            std::span<const float>(logits.f32() + static_cast<std::size_t>(i) * vocab_, vocab_),
            req.prompt[static_cast<std::size_t>(r.prefilled + i + 1)],
            std::max(req.top_logprobs, 0)));
      }
    }
    r.prefilled += n;
    if (r.prefilled < input_len) return;
    if (again) {
      if (!r.refill.empty()) {  // kRecompute: every sampled token but the last is cached again
        r.cached_new = r.new_tokens - 1;
        r.refill.clear();
      }
      return;  // (kExact: its decode steps replay the sampled tokens)
    }
    r.seq->update([&](SequenceOutput& o) {
      o.prefilled = true;
      o.prompt_logprobs = std::move(r.prompt_logprobs);
    });
    if (req.max_tokens == 0) {
      finish(r, FinishReason::kLength);
      return;
    }
    const std::size_t last = prompt_logprobs ? static_cast<std::size_t>(n - 1) : 0;
    add_token(r, std::span<const float>(logits.f32() + last * vocab_, vocab_));
  } catch (const std::bad_alloc&) {
    finish(r, FinishReason::kError, "out of memory in the prefill");
  } catch (const Error& e) {
    finish(r, FinishReason::kError, e.what());
  }
}

void Scheduler::grow() {
  for (auto& r : running_) {  // oldest first
    if (!r->decoding()) continue;
    while (!r->cache->reserve(r->cache->length() + 1)) {
      Running* youngest = nullptr;
      for (auto y = running_.rbegin(); youngest == nullptr; ++y) {
        if ((*y)->active()) youngest = y->get();
      }
      preempt(*youngest);
      if (youngest == r.get()) break;
    }
  }
}

void Scheduler::preempt(Running& r) {
  r.pass.reset();   // it points into the cache
  r.cache.reset();  // its blocks go back
  r.prefilled = 0;
  r.preempted = true;
  r.cached_new = 0;
  r.prompt_logprobs.clear();  // (an unfinished first prefill starts again)
  if (options_.preemption == PreemptionMode::kRecompute && r.new_tokens > 1) {
    const std::vector<std::int32_t>& prompt = r.seq->request().prompt;
    r.refill.assign(prompt.begin(), prompt.end());
    r.refill.insert(r.refill.end(), r.sampled.begin(), r.sampled.end() - 1);
  } else {
    r.refill.clear();  // the prompt; kExact replays the sampled tokens
  }
  std::lock_guard lock(mutex_);
  ++totals_.preemptions;
}

void Scheduler::decode() {
  std::vector<Running*> batch;
  std::vector<std::int32_t> tokens;
  std::vector<model::KvCache*> caches;
  for (auto& r : running_) {
    if (!r->decoding()) continue;  // finished, preempted or still in prefill
    batch.push_back(r.get());
    tokens.push_back(r->sampled[static_cast<std::size_t>(r->cached_new)]);
    caches.push_back(&*r->cache);
  }
  if (batch.empty()) return;
  try {
    const Tensor logits = model_.decode_step(tokens, caches);  // [batch, vocab]
    {
      std::lock_guard lock(mutex_);
      ++totals_.decode_steps;
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      // A replayed token's logits were seen when it was sampled: only the last one samples.
      if (++batch[i]->cached_new < batch[i]->new_tokens) continue;
      add_token(*batch[i], std::span<const float>(logits.f32() + i * vocab_, vocab_));
    }
  } catch (const std::bad_alloc&) {
    for (Running* r : batch) finish(*r, FinishReason::kError, "out of memory in a decode step");
  } catch (const Error& e) {
    for (Running* r : batch) finish(*r, FinishReason::kError, e.what());
  }
}

bool Scheduler::add_token(Running& r, std::span<const float> logits) {
  const SequenceRequest& req = r.seq->request();
  const std::int32_t t = r.sampler.sample(logits);
  ++r.new_tokens;
  r.sampled.push_back(t);
  {
    std::lock_guard lock(mutex_);
    ++totals_.generation_tokens;
  }
  FinishReason reason = FinishReason::kNone;
  // Every new token is listed with its logprob, a final stop id too (it has no text): lm-eval
  // drops the last echoed token as the generated one.
  TokenLogprob token{t, 0.0, {}};
  if (req.top_logprobs >= 0) token = token_logprob(logits, t, req.top_logprobs);
  if (std::find(req.stop_ids.begin(), req.stop_ids.end(), t) != req.stop_ids.end()) {
    reason = FinishReason::kStop;
  } else {
    const std::size_t before = r.text.size();
    r.text += token_piece(tokenizer_, t);
    // The earliest stop string that ends in the new bytes; the text ends before it.
    std::size_t cut = std::string::npos;
    for (const std::string& stop : req.stop_strings) {
      const std::size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
      cut = std::min(cut, r.text.find(stop, from));
    }
    if (cut != std::string::npos) {
      r.text.resize(cut);
      reason = FinishReason::kStop;
    }
  }
  if (reason == FinishReason::kNone && r.new_tokens >= req.max_tokens) {
    reason = FinishReason::kLength;
  }
  r.seq->update([&](SequenceOutput& o) {
    o.completion_tokens = r.new_tokens;
    o.tokens.push_back(std::move(token));
    o.text = r.text;
  });
  if (reason == FinishReason::kNone) return false;
  finish(r, reason);
  return true;
}

void Scheduler::finish(Running& r, FinishReason reason, std::string error) {
  if (r.done) return;
  r.done = true;
  if (reason == FinishReason::kError) log::warn("serve: a sequence failed: {}", error);
  r.pass.reset();   // it points into the cache
  r.cache.reset();  // its blocks go back to the pool
  {
    std::lock_guard lock(mutex_);
    ++totals_.sequences_finished;
  }
  r.seq->update([&](SequenceOutput& o) {
    o.finish = reason;
    o.error = std::move(error);
  });
}

}  // namespace kvq::serve
