// The results of `kvq compare` / `kvq eval`: one row per quantization scheme, rendered as a
// Markdown table (stdout, README) and as JSON (results.json, the per-scheme resume files).
//
// Significance: a delta against the baseline is marked with `*` when its two-sided p-value is
// below 0.05 (paired bootstrap over windows for PPL and KLD, exact McNemar for GSM8K).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvq::eval {

inline constexpr double kSignificanceLevel = 0.05;

struct SchemeReport {
  std::string scheme;                   // "KV-FP8-Head"
  std::string kv_format;                // "f32", "fp8", "int8", "int4", "nvfp4"
  double kv_bits_per_value = 0;         // in-row block scales included (nvfp4: 4.5)
  std::int64_t kv_bytes_per_token = 0;  // K + V, all layers, one sequence

  // Perplexity on the text (--text; WikiText-2 test by default; JSON "wikitext2" whatever the
  // text) over windows of `ctx`, 95% bootstrap CI over windows.
  bool has_ppl = false;
  double ppl = 0, ppl_lo = 0, ppl_hi = 0;
  std::int64_t ppl_tokens = 0, ppl_windows = 0;
  // PPL(scheme) - PPL(baseline): paired bootstrap over windows of the mean NLL difference; the
  // CI is that of the NLL delta mapped through ppl_base · (exp(d) - 1).
  double dppl = 0, dppl_lo = 0, dppl_hi = 0, dppl_p = 1;

  // KL(baseline || scheme) per token (nats), its stderr over tokens, p of mean KLD > 0 (paired
  // bootstrap over windows against zero); top-1 agreement with the baseline and its stderr.
  bool has_kld = false;
  bool kld_exact = false;  // true: full distributions (--kld exact); false: top-K cached
                           // baseline, `kld` is a lower bound and `kld_upper` an upper one
  double kld = 0, kld_se = 0, kld_upper = 0, kld_p = 1;
  double top1 = 0, top1_se = 0;

  // GSM8K (flexible-extract exact match; strict-match kept too), lm-eval stderr; McNemar exact
  // p of the paired difference to the baseline.
  bool has_gsm8k = false;
  std::int64_t gsm8k_n = 0;
  double gsm8k = 0, gsm8k_se = 0, gsm8k_strict = 0, gsm8k_strict_se = 0;
  double gsm8k_delta = 0, gsm8k_p = 1;
  std::vector<std::uint8_t> gsm8k_correct;  // [n] flexible-extract, for McNemar

  // Decode tokens/s with the packed KV cache filled to `decode_context` tokens (0: not measured).
  double decode_tok_s = 0;
  std::int64_t decode_context = 0;

  // Per window (for paired tests against this row when it is the baseline).
  std::vector<double> window_nll_sum;
  std::vector<std::int64_t> window_scored;

  std::int64_t calib_samples = 0;
  double calib_seconds = 0, eval_seconds = 0;
};

// "*" when p < kSignificanceLevel, else "".
std::string significance_marker(double p_value);
// Fixed-point with `digits` decimals, "+" sign when `sign`; "n/a" for NaN.
std::string format_number(double v, int digits, bool sign = false);

// PPL(to) - PPL(from) over the same windows: paired bootstrap over windows of the mean NLL
// difference (window NLL sums, weighted by their scored tokens); the CI is that of the NLL delta
// mapped through ppl_from · (exp(d) - 1). p is NaN with one window (nothing to resample).
struct PplDelta {
  double delta = 0, lo = 0, hi = 0, p = 1;
};
// nullopt when either row lacks PPL or their windows differ.
std::optional<PplDelta> ppl_delta(const SchemeReport& from, const SchemeReport& to);

// The rows with PPL ranked by it, lowest first; each step is tested against the scheme ranked
// just above it, so the report says which steps of the ranking are real and which are noise.
struct RankStep {
  std::string scheme;
  double ppl = 0;
  std::string above;             // "" for the first
  std::optional<PplDelta> step;  // PPL(scheme) - PPL(above); nullopt for the first
};
std::vector<RankStep> rank_by_ppl(const std::vector<SchemeReport>& rows);

struct CompareMeta {
  std::string model;
  std::int64_t ctx = 0, max_windows = 0, calib_samples = 0, gsm8k_limit = 0;
  std::string text = "WikiText-2";  // the PPL / KLD text's name (eval::text_name)
};

// The Markdown report: a header line, the table, a footnote on the markers, and (with two or
// more schemes with PPL) the ranking by PPL with its steps tested.
std::string compare_markdown(const std::vector<SchemeReport>& rows, const CompareMeta& meta);

nlohmann::json to_json(const SchemeReport& row);
SchemeReport scheme_report_from_json(const nlohmann::json& j);  // FormatError on bad fields
nlohmann::json compare_json(const std::vector<SchemeReport>& rows, const CompareMeta& meta);

}  // namespace kvq::eval
