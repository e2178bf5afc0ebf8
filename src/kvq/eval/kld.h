// KL divergence, top-1 agreement and perplexity of a (quantized) model against a baseline, over
// the same token windows as perplexity (perplexity.h: plan_windows; each scored target t gives
// one next-token distribution, the one at position t - 1).
//
// Per scored token, with P the baseline and Q the quantized next-token distribution:
//   KL(P || Q) = sum_v P(v) (log P(v) - log Q(v))       (nats; log-softmax in float64 from the
//                                                         fp32 logits)
//   top-1 match = argmax P == argmax Q                   (ties: lowest id, as greedy decoding)
//   NLL of the target under P and under Q                (→ both perplexities)
// Reported: mean KLD with its standard error, median, 99th percentile and max; top-1 agreement
// with its stderr; PPL of both; and the per-token arrays, so stats.h's paired_bootstrap can
// compare runs (resample windows: pass per-window sums and window_scored as weights).
//
// Two ways to get P:
//   exact (kld_side_by_side): both models run on each window in the same process and the full
//     distributions are compared. Exact; costs one extra forward per window. The two sides may
//     be one model whose quantization is switched per side (KldOptions::select_side): `kvq
//     compare --kld exact` runs each window with the scheme's hooks off and a plain f32 cache,
//     then with them on and the scheme's cache.
//   cached (build_logits_cache + kld_against_cache): P is computed once and stored as top-K
//     (logits_cache.h). Top-1 and the baseline NLL are exact. The KL is approximated by merging
//     the tokens outside P's top-K set S into one bucket:
//       KL_K = sum_{v in S} P(v) log(P(v)/Q(v)) + P(~S) log(P(~S)/Q(~S)).
//     By the log-sum inequality KL_K <= KL (merging outcomes never increases a divergence), and
//     the gap is P(~S) · KL(P(.|~S) || Q(.|~S)). Since every tail probability is at most
//     p_K = min_{v in S} P(v), the tail term is at most its value when the mass P(~S) is put in
//     chunks of p_K on the tail tokens Q finds least likely (the maximum of a convex function
//     over {0 <= P(v) <= p_K, sum = P(~S)} is at a vertex); that gives a computable upper bound
//     KL_upper, also reported. So KL_K <= KL <= KL_upper per token. The side-by-side mode also
//     reports KL_K (mean_kld_topk) so the approximation error can be measured on real runs.
// Identical inputs give KL exactly 0 and top-1 agreement 1 in both modes (same float64 code
// path on bit-identical logits; the cached log-probs are compared after the same rounding to
// float32).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kvq/eval/logits_cache.h"
#include "kvq/model/kv_cache.h"

namespace kvq::model {
class CausalLM;
}

namespace kvq::eval {

struct KldOptions {
  std::int64_t ctx = 2048;
  std::int64_t stride = 0;          // 0: ctx
  std::int64_t max_windows = 0;     // 0: all
  std::int64_t top_k = 32;          // cached mode (and mean_kld_topk in exact mode)
  std::int64_t logits_chunk = 256;  // rows of logits computed at once ([chunk, vocab] fp32 each)
  // The caches each side runs with (runtime::resolve_kv_cache makes them; a calibrated config's
  // packed cache quantizes k/v itself, see model/kv_cache.h).
  model::KvCacheConfig base_kv, quant_kv;
  // The tokenizer's BOS when it adds one: each window's first token is fed as it, on both sides
  // (perplexity.h; the tokens then come from perplexity_tokens()).
  std::optional<std::int32_t> bos;
  // Called on every fresh quantized-side cache (tests count the windows run with it).
  std::function<void(model::KvCache&)> prepare_quant_cache;
  // kld_side_by_side: called with false before each window's baseline forward and with true
  // before its quantized one (the last call), so one model can be both sides, e.g.
  // QuantizationLifecycle::set_quantization_enabled. Empty: not called.
  std::function<void(bool quantized)> select_side;
  bool progress = true;
  // A journal (io/jsonl_journal.h) of the windows finished, one record each with its per-token
  // results (float64, exact round trip). Windows found there are not evaluated again, so an
  // interrupted run resumes. The caller names the file after everything the results depend on
  // (model, scheme, windows, cache, which driver). Empty: none.
  std::filesystem::path resume_file;
};

struct KldResult {
  bool exact = false;  // full distributions compared (side-by-side)
  std::int64_t tokens = 0, windows = 0;
  double mean_kld = 0.0, kld_se = 0.0;  // exact KL, or KL_K (a lower bound) when cached
  double median_kld = 0.0, p99_kld = 0.0, max_kld = 0.0;
  double mean_kld_upper = 0.0;  // == mean_kld when exact
  double mean_kld_topk = 0.0;   // KL_K with K = top_k (both modes)
  double top1_agreement = 0.0, top1_se = 0.0;
  double ppl_base = 0.0, ppl_quant = 0.0;
  double seconds = 0.0;
  std::vector<double> kld;                  // [tokens]
  std::vector<double> kld_upper;            // [tokens]
  std::vector<double> base_nll, quant_nll;  // [tokens]
  std::vector<std::uint8_t> top1_match;     // [tokens]
  std::vector<std::int64_t> window_scored;  // [windows]
};

// --- per-token math (exposed for tests) ---

struct TokenKl {
  double kl = 0.0;        // exact, or KL_K
  double kl_upper = 0.0;  // == kl when exact
  double base_nll = 0.0, quant_nll = 0.0;
  bool top1_match = false;
};

// Both full distributions. logits: [vocab] each.
TokenKl token_kl_full(std::span<const float> base_logits, std::span<const float> quant_logits,
                      std::int32_t target);
// The cache record of a baseline distribution: top-k ids / log-probs, tail log-mass, target NLL.
// ids, logp: [k].
void topk_summary(std::span<const float> logits, std::int32_t target, std::int64_t k,
                  std::span<std::int32_t> ids, std::span<float> logp, float& log_rest, double& nll);
// A cached baseline against a full quantized distribution: kl = KL_K, kl_upper = KL_upper.
TokenKl token_kl_topk(const TopKView& base, std::span<const float> quant_logits,
                      std::int32_t target);

// --- drivers ---

// Exact KLD: `base` and `quant` evaluated window by window (they may be different objects or,
// for a self-check, the same one). InvalidArgument on bad options or < 2 tokens.
KldResult kld_side_by_side(model::CausalLM& base, model::CausalLM& quant,
                           std::span<const std::int32_t> tokens, const KldOptions& options);

// The cache header these tokens / options / model give.
LogitsCacheHeader logits_cache_header(std::uint64_t model_hash, std::int64_t vocab,
                                      std::span<const std::int32_t> tokens,
                                      const KldOptions& options);

// Baseline top-K distributions. With a path: reuses a matching cache file, else computes
// (resuming "<path>.partial") and writes it atomically.
LogitsCache build_logits_cache(model::CausalLM& base, std::span<const std::int32_t> tokens,
                               const KldOptions& options, std::uint64_t model_hash,
                               const std::optional<std::filesystem::path>& path = std::nullopt);

// KLD of `quant` against a cached baseline. InvalidArgument when the cache does not belong to
// these tokens / options (header mismatch).
KldResult kld_against_cache(model::CausalLM& quant, std::span<const std::int32_t> tokens,
                            const LogitsCache& cache, const KldOptions& options);

}  // namespace kvq::eval
