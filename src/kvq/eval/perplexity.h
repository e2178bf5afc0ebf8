// Perplexity of a causal LM over a token stream, Hugging Face style windowing
// (transformers' "Perplexity of fixed-length models" recipe).
//
// The text is tokenized once, as a whole (by the caller, with perplexity_tokens(): `kvq
// perplexity` reads the file as raw bytes, CRLF kept, and encodes it without special tokens,
// after the tokenizer's BOS when it adds one — Gemma, Llama 3; SmolLM2 adds none). Over the N
// tokens:
//   window i covers tokens [begin_i, end_i) with begin_i = i * stride, end_i = min(begin_i + ctx,
//   N), and is evaluated independently (fresh KV cache, positions 0..end_i-begin_i-1, nothing
//   prepended; with `bos` set, the window's first token is fed as BOS instead — see below); it
//   scores the targets t in [max(begin_i + 1, end_{i-1}), end_i) (end_{-1} = 0):
//   each target's NLL is -log softmax(logits at t-1)[tokens[t]], the log-softmax computed in
//   float64 from the fp32 logits; the last window is the first one with end_i == N (so the tail is
//   scored once); a window that would score nothing (a 1-token tail) is dropped; --max-windows
//   keeps the first ones. stride == ctx (the default): windows are disjoint and each scores its ctx
//   - 1 predicted tokens (the first token of a window is never predicted). stride < ctx: the first
//   window scores its ctx - 1 tokens, every later one only its last `stride` targets (end_i -
//   end_{i-1}), each seen with at least ctx - stride tokens of context.
// PPL = exp(sum NLL / number of scored targets).
//
// BOS (options.bos, set when the tokenizer adds one): the stream is [BOS] + the text's ids and
// every window's first token is replaced by BOS when fed (window 0 already starts with it) —
// llama.cpp's llama-perplexity convention (tools/perplexity/perplexity.cpp), so each window
// starts as the model was trained and holds the same tokens as llama-perplexity's chunk i at
// --ctx-size ctx (stride == ctx). The replaced token is never a target of its own window (a
// window's first token is not predicted), so the scored targets are the ones above.
// llama-perplexity then scores only the last half of each chunk (ctx/2 - 1 targets after ctx/2
// of context), kvq all ctx - 1 targets of a window: the same windows, a different average.
// score_last_half gives llama-perplexity's average (stride == ctx only): each window scores the
// targets at its positions [ctx/2 + 1, ctx), and a window shorter than ctx (the tail) is dropped,
// as llama-perplexity drops a partial chunk.
//
// decode_from N > 0 (teacher-forced decode): each window's first N tokens go through one
// prefill, every later token through the one-token decode path (its own forward on the cache),
// so the scores after position N measure the DECODE kernels — which is where approximate
// options such as int8-query scores (`--kv-cache int8:head+q8`) act; a whole-window prefill
// never runs them. An fp32 cache, or one with calibrated scales, gives the same NLL either way up
// to float summation order; dynamic scales are fixed by the first write, here the first N tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/model/kv_cache.h"

namespace kvq::model {
class CausalLM;
}
namespace kvq::tok {
class Tokenizer;
}

namespace kvq::eval {

struct PerplexityWindow {
  std::int64_t begin = 0, end = 0;  // tokens [begin, end) are fed to the model
  std::int64_t score_begin = 0;     // targets [score_begin, end) are scored
  std::int64_t scored() const { return end - score_begin; }
};

// The windows defined above. InvalidArgument when ctx < 2, stride < 1, stride > ctx or
// max_windows < 0 (0: all windows).
std::vector<PerplexityWindow> plan_windows(std::int64_t num_tokens, std::int64_t ctx,
                                           std::int64_t stride, std::int64_t max_windows = 0);

struct PerplexityOptions {
  std::int64_t ctx = 2048;
  std::int64_t stride = 0;          // 0: ctx
  std::int64_t max_windows = 0;     // 0: all
  std::int64_t batch = 1;           // windows of equal length evaluated together
  std::int64_t logits_chunk = 256;  // logits rows computed at once ([chunk, vocab] fp32)
  std::int64_t decode_from = 0;     // > 0: tokens after the first N one at a time (see above);
                                    // windows then run one at a time (batch ignored)
  // The cache of every window (a fresh one per window: dynamic scales are fixed by each
  // window's tokens, shared by the windows of one batch).
  model::KvCacheConfig kv_cache;
  // The tokenizer's BOS when it adds one (Tokenizer::add_bos_id): each window's first token is
  // fed as this id (see above). nullopt: windows are fed as they are.
  std::optional<std::int32_t> bos;
  // Score only each full window's last ctx/2 - 1 targets (llama-perplexity's definition, see
  // above); InvalidArgument unless stride == ctx.
  bool score_last_half = false;
  bool progress = true;  // progress bar on stderr (only drawn on a terminal)
};

struct PerplexityResult {
  double ppl = 0.0;
  double nll_sum = 0.0;   // sum of the scored NLL terms (nats)
  double nll_mean = 0.0;  // nll_sum / tokens_scored
  std::int64_t tokens_scored = 0;
  std::int64_t tokens_evaluated = 0;  // tokens fed to the model (sum of window lengths)
  std::int64_t windows = 0;
  double seconds = 0.0;
  double tokens_per_second = 0.0;           // tokens_evaluated / seconds
  std::vector<double> window_nll_sum;       // [windows]
  std::vector<std::int64_t> window_scored;  // [windows]
};

// -log softmax(logits)[target] with the max, the exponentials and the sum in float64.
// logits [vocab].
double token_nll(std::span<const float> logits, std::int32_t target);

// The result's fields of `kvq perplexity --json` (ppl, nll, nll_sum, tokens_scored,
// tokens_evaluated, windows, seconds, tokens_per_second, window_nll_sum): one spelling for the CLI
// and the Python module.
nlohmann::json perplexity_result_json(const PerplexityResult& result);

// The token stream of a text for perplexity (and compare's KLD): the tokenizer's ids without
// special tokens, after its BOS when it adds one (add_bos_id). Pair it with options.bos =
// tokenizer.add_bos_id().
std::vector<std::int32_t> perplexity_tokens(const tok::Tokenizer& tokenizer, std::string_view text);

// The ids window `w` feeds: tokens [w.begin, w.end), the first one replaced by `bos` when set.
std::vector<std::int32_t> window_ids(std::span<const std::int32_t> tokens,
                                     const PerplexityWindow& w, std::optional<std::int32_t> bos);

// InvalidArgument when there are fewer than 2 tokens or an option is out of range.
PerplexityResult perplexity(model::CausalLM& model, std::span<const std::int32_t> tokens,
                            const PerplexityOptions& options);

}  // namespace kvq::eval
