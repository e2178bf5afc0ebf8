#include "kvq/eval/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/progress.h"
#include "kvq/model/causal_lm.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::eval {

std::vector<PerplexityWindow> plan_windows(std::int64_t num_tokens, std::int64_t ctx,
                                           std::int64_t stride, std::int64_t max_windows) {
  if (ctx < 2) fail<InvalidArgument>("perplexity: ctx must be >= 2, got {}", ctx);
  if (stride < 1 || stride > ctx) {
    fail<InvalidArgument>("perplexity: stride must be in [1, ctx = {}], got {}", ctx, stride);
  }
  if (max_windows < 0) {
    fail<InvalidArgument>("perplexity: max_windows must be >= 0, got {}", max_windows);
  }
  std::vector<PerplexityWindow> out;
  std::int64_t prev_end = 0;
  for (std::int64_t begin = 0; begin < num_tokens; begin += stride) {
    if (max_windows > 0 && static_cast<std::int64_t>(out.size()) == max_windows) break;
    PerplexityWindow w;
    w.begin = begin;
    w.end = std::min(begin + ctx, num_tokens);
    w.score_begin = std::max(begin + 1, prev_end);
    if (w.scored() > 0) out.push_back(w);
    prev_end = w.end;
    if (w.end == num_tokens) break;
  }
  return out;
}

std::vector<std::int32_t> perplexity_tokens(const tok::Tokenizer& tokenizer,
                                            std::string_view text) {
  std::vector<std::int32_t> ids;
  if (const auto bos = tokenizer.add_bos_id()) ids.push_back(*bos);
  const std::vector<std::int32_t> plain = tokenizer.encode(text, /*add_special_tokens=*/false);
  ids.insert(ids.end(), plain.begin(), plain.end());
  return ids;
}

std::vector<std::int32_t> window_ids(std::span<const std::int32_t> tokens,
                                     const PerplexityWindow& w, std::optional<std::int32_t> bos) {
  std::vector<std::int32_t> ids(tokens.begin() + w.begin, tokens.begin() + w.end);
  if (bos && !ids.empty()) ids.front() = *bos;
  return ids;
}

double token_nll(std::span<const float> logits, std::int32_t target) {
  KVQ_CHECK(target >= 0 && static_cast<std::size_t>(target) < logits.size(),
            "target {} outside vocab {}", target, logits.size());
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return std::log(sum) - (static_cast<double>(logits[static_cast<std::size_t>(target)]) - mx);
}

namespace {

// The final-norm hidden states of ids [batch, len]: [batch, len, hidden]. decode_from > 0
// (batch 1): a prefill of the first decode_from tokens, then one decode forward per token.
Tensor forward_window(model::CausalLM& model, std::span<const std::int32_t> ids, std::int64_t batch,
                      std::int64_t decode_from, model::KvCache& cache) {
  const std::int64_t len = static_cast<std::int64_t>(ids.size()) / batch;
  if (decode_from <= 0 || decode_from >= len) return model.forward_hidden(ids, batch, cache);
  KVQ_CHECK(batch == 1, "teacher-forced decode runs one window at a time");
  const std::int64_t hid = model.config().hidden_size;
  Tensor out(DType::kF32, {1, len, hid});
  const Tensor head = model.forward_hidden(ids.first(static_cast<std::size_t>(decode_from)), 1,
                                           cache);  // [1, decode_from, hidden]
  std::copy_n(head.f32(), decode_from * hid, out.f32());
  for (std::int64_t t = decode_from; t < len; ++t) {
    const Tensor h = model.forward_hidden(ids.subspan(static_cast<std::size_t>(t), 1), 1, cache);
    std::copy_n(h.f32(), hid, out.f32() + t * hid);
  }
  return out;
}

}  // namespace

PerplexityResult perplexity(model::CausalLM& model, std::span<const std::int32_t> tokens,
                            const PerplexityOptions& options) {
  const std::int64_t n = static_cast<std::int64_t>(tokens.size());
  if (n < 2) fail<InvalidArgument>("perplexity: need at least 2 tokens, got {}", n);
  if (options.batch < 1) fail<InvalidArgument>("perplexity: batch must be >= 1");
  if (options.logits_chunk < 1) fail<InvalidArgument>("perplexity: logits_chunk must be >= 1");
  if (options.decode_from < 0) {
    fail<InvalidArgument>("perplexity: decode_from must be >= 0, got {}", options.decode_from);
  }
  const std::int64_t max_batch = options.decode_from > 0 ? 1 : options.batch;
  const std::int64_t stride = options.stride == 0 ? options.ctx : options.stride;
  std::vector<PerplexityWindow> windows = plan_windows(n, options.ctx, stride, options.max_windows);
  if (options.score_last_half) {
    if (stride != options.ctx) {
      fail<InvalidArgument>("perplexity: scoring the last half of each window needs stride == ctx");
    }
    std::erase_if(windows,
                  [&](const PerplexityWindow& w) { return w.end - w.begin < options.ctx; });
    for (PerplexityWindow& w : windows) w.score_begin = w.begin + options.ctx / 2 + 1;
    if (windows.empty()) {
      fail<InvalidArgument>("perplexity: {} tokens hold no full window of {}", n, options.ctx);
    }
  }

  const std::int64_t vocab = model.config().vocab_size;
  const std::int64_t hid = model.config().hidden_size;
  PerplexityResult res;
  for (const PerplexityWindow& w : windows) res.tokens_evaluated += w.end - w.begin;

  ProgressBar bar("perplexity", res.tokens_evaluated, "tok", !options.progress);
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<model::KvCache> cache;
  std::vector<float> logits(
      static_cast<std::size_t>(options.logits_chunk * vocab));  // [chunk, vocab]
  std::vector<double> row_nll(static_cast<std::size_t>(options.logits_chunk));

  for (std::size_t i = 0; i < windows.size();) {
    // Consecutive windows of equal length share one batched forward.
    const std::int64_t len = windows[i].end - windows[i].begin;
    std::size_t j = i;
    while (j < windows.size() && static_cast<std::int64_t>(j - i) < max_batch &&
           windows[j].end - windows[j].begin == len) {
      ++j;
    }
    const std::int64_t batch = static_cast<std::int64_t>(j - i);
    if (!cache || cache->batch() != batch || cache->capacity() < len) {
      cache.emplace(model.make_cache(batch, std::max(len, options.ctx), options.kv_cache));
    } else {
      cache->reset();
    }
    std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * len));  // [batch, len]
    for (std::int64_t b = 0; b < batch; ++b) {
      std::copy_n(tokens.begin() + windows[i + b].begin, len, ids.begin() + b * len);
      if (options.bos) ids[static_cast<std::size_t>(b * len)] = *options.bos;
    }
    const Tensor hidden = forward_window(model, ids, batch, options.decode_from, *cache);

    for (std::int64_t b = 0; b < batch; ++b) {
      const PerplexityWindow& w = windows[i + b];
      // Row r of the window's hidden states predicts token begin + r + 1.
      const std::int64_t first_row = w.score_begin - w.begin - 1;
      double window_sum = 0.0;
      for (std::int64_t r0 = 0; r0 < w.scored(); r0 += options.logits_chunk) {
        const std::int64_t rows = std::min(options.logits_chunk, w.scored() - r0);
        const float* h = hidden.f32() + (b * len + first_row + r0) * hid;  // [rows, hidden]
        model.compute_logits(h, rows, logits.data());
#pragma omp parallel for schedule(static)
        for (std::int64_t r = 0; r < rows; ++r) {
          const std::int32_t target = tokens[static_cast<std::size_t>(w.score_begin + r0 + r)];
          row_nll[static_cast<std::size_t>(r)] = token_nll(
              std::span<const float>(logits.data() + r * vocab, static_cast<std::size_t>(vocab)),
              target);
        }
        // Summed serially, in target order, so the result does not depend on the thread count.
        for (std::int64_t r = 0; r < rows; ++r) window_sum += row_nll[static_cast<std::size_t>(r)];
      }
      res.window_nll_sum.push_back(window_sum);
      res.window_scored.push_back(w.scored());
      res.nll_sum += window_sum;
      res.tokens_scored += w.scored();
    }
    res.windows += batch;
    bar.advance(batch * len);
    bar.set_suffix(fmt::format("ppl {:.4f}", std::exp(res.nll_sum / res.tokens_scored)));
    i = j;
  }
  bar.finish();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.nll_mean = res.nll_sum / static_cast<double>(res.tokens_scored);
  res.ppl = std::exp(res.nll_mean);
  res.tokens_per_second = res.seconds > 0 ? res.tokens_evaluated / res.seconds : 0.0;
  return res;
}

nlohmann::json perplexity_result_json(const PerplexityResult& r) {
  nlohmann::json j;
  j["ppl"] = r.ppl;
  j["nll"] = r.nll_mean;
  j["nll_sum"] = r.nll_sum;
  j["tokens_scored"] = r.tokens_scored;
  j["tokens_evaluated"] = r.tokens_evaluated;
  j["windows"] = r.windows;
  j["seconds"] = r.seconds;
  j["tokens_per_second"] = r.tokens_per_second;
  j["window_nll_sum"] = r.window_nll_sum;
  return j;
}

}  // namespace kvq::eval
