// `kvq compare` / `kvq eval`: quantization schemes evaluated against the unquantized model.
//
// Per scheme: apply its recipe, calibrate q/k/v scales on GSM8K train (chat-formatted, observer
// static_minmax, fixed shuffle seed), resolve the KV cache it runs with (a calibrated scheme's
// packed cache, bit-identical to fake quantization, see docs/numerics.md), then run the eval
// tasks (eval_task.h, one file each under eval/tasks/): the text pass — PPL on --text (WikiText-2
// test by default) and KLD / top-1 against the baseline over the same windows (the baseline's
// top-K distributions cached once, or --kld exact: the full ones) —, GSM8K accuracy (optional),
// decode tokens/s; and KV bytes/token.
//
// Caching under OUT/cache (keys hash the model fingerprint and every option that changes the
// result): calibrated scales per scheme, the baseline logits, each scheme's PPL / KLD part, its
// GSM8K answers (appended one question at a time), the baseline row. Per-scheme rows are written
// under OUT/rows as they finish. So an interrupted run resumes where it stopped, and a run that
// adds GSM8K or raises --gsm8k-limit only generates the new answers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/dtype.h"
#include "kvq/eval/logits_cache.h"
#include "kvq/eval/plot_png.h"
#include "kvq/eval/report.h"
#include "kvq/quant/formats.h"

namespace kvq::lifecycle {
class QuantizationLifecycle;
}

namespace kvq::eval {

struct SchemeDef {
  std::string name;         // "KV-FP8-Head"
  std::string description;  // one line for --help
  std::string recipe;       // llm-compressor recipe YAML; empty for the baseline
  // The `--kv-cache` the scheme runs with (runtime::resolve_kv_cache): "auto" — a recipe's or a
  // checkpoint's packed cache with its calibrated scales, f32 for the baseline — or, for a scheme
  // without a recipe, a FORMAT[:tensor|head] with dynamic scales ("nvfp4:head").
  std::string kv_cache = "auto";
  // The model directory is a quantized checkpoint: its stored scales are used (no recipe, no
  // calibration; the KV format is the checkpoint's).
  bool from_checkpoint = false;
  // Run when --schemes is not given.
  bool in_default = true;
};

// The built-in table (the source of truth for `kvq compare`; its recipes are
// examples/recipes/*.yaml, compiled in), baseline first.
const std::vector<SchemeDef>& builtin_schemes();
// InvalidArgument listing the valid names when unknown (case-insensitive match).
const SchemeDef& find_scheme(std::string_view name);
// "a,b,c" → definitions in that order; empty → the default ones (in_default). Duplicates
// rejected.
std::vector<SchemeDef> parse_scheme_list(std::string_view list);

// How the text pass measures KL(baseline || scheme) (kld.h).
enum class KldMode {
  kTopK,   // against the baseline's cached top-K distributions: a lower bound (and an upper one)
  kExact,  // against its full distributions, one baseline forward per window: the exact KL
};
// "topk" / "exact"; InvalidArgument naming the valid ones otherwise.
KldMode parse_kld_mode(std::string_view name);

struct EvalOptions {
  std::filesystem::path model_dir;
  std::filesystem::path data_dir;   // holds wikitext-2-raw/ and gsm8k/
  std::filesystem::path cache_dir;  // empty: no caching
  // The text of the PPL / KLD pass, read as raw bytes and tokenized whole; empty: WikiText-2
  // test (data_dir/wikitext-2-raw/wiki.test.raw).
  std::filesystem::path text;
  bool ppl_kld = true;  // the text task: PPL + KLD/top-1 pass
  KldMode kld = KldMode::kTopK;
  std::int64_t ctx = 512, max_windows = 8;
  std::int64_t top_k = 64;       // baseline distribution cache
  std::int64_t gsm8k_limit = 0;  // 0: GSM8K skipped
  std::int64_t gsm8k_max_new_tokens = 256;
  std::int64_t gsm8k_batch = 8;  // questions decoded together (Gsm8kOptions::batch)
  std::int64_t calib_samples = 32, calib_seq_len = 512;
  std::uint64_t calib_seed = 1234;
  std::int64_t decode_context = 256, decode_steps = 16;  // decode_steps 0: not measured
  // Weight dtype the model is loaded with (bf16: converted at load, model::LoadOptions). The
  // baseline is then the bf16-weight model with an unquantized cache; every cache key includes
  // the dtype, so fp32 and bf16 results never mix.
  DType weights = DType::kF32;
  bool progress = true;
};

// Paths of the data files (IoError naming the path and how to get it when missing).
std::filesystem::path wikitext_path(const std::filesystem::path& data_dir);
std::filesystem::path gsm8k_dir(const std::filesystem::path& data_dir);
// The text of the PPL / KLD pass: options.text, or WikiText-2 test when empty (then IoError as
// wikitext_path when missing).
std::filesystem::path text_path(const EvalOptions& options);
// Whether the text is WikiText-2 test (options.text empty or that file): its results keep the
// cache keys they had before --text, and reports call it "WikiText-2".
bool is_default_text(const EvalOptions& options);
// The text's name in reports: "WikiText-2", else its file name.
std::string text_name(const EvalOptions& options);

// Holds the model (loaded once), the text's tokens and the baseline row; evaluates schemes one
// after another on the same model (each scheme's hooks are removed when it is done).
class Evaluator {
 public:
  explicit Evaluator(EvalOptions options);
  ~Evaluator();

  // Computed on first use, or read from the cache.
  const SchemeReport& baseline();
  // Calibrates (or reuses cached scales) and runs the enabled eval tasks (eval_task.h) on a
  // scheme; the baseline def returns baseline().
  SchemeReport evaluate(const SchemeDef& scheme);
  // One scheme's recipe calibrated once, then the tasks run on each of `variants` (the same
  // recipe: they differ in name and kv_cache only, InvalidArgument otherwise), each row handed to
  // on_row as it finishes (may be empty). For scans over KV caches (kvq allocate).
  std::vector<SchemeReport> evaluate_kv_variants(
      const SchemeDef& scheme, std::span<const SchemeDef> variants,
      const std::function<void(std::size_t, const SchemeReport&)>& on_row = {});
  // The baseline's top-K distributions over the text's windows (baseline() builds them, on the
  // plain model, before any scheme's hooks are installed).
  const LogitsCache& baseline_logits();

  const EvalOptions& options() const { return options_; }
  std::uint64_t model_hash() const { return model_hash_; }
  // Hash of the options a scheme row depends on (with the scheme's recipe): the model, the
  // scheme, each task's key and the calibration options.
  std::string row_key(const SchemeDef& scheme) const;
  std::string row_key(const SchemeDef& scheme, const EvalOptions& options) const;
  // Hashes of what the row's PPL / KLD part and its GSM8K answers depend on (each cached on its
  // own: a run that adds GSM8K or raises --gsm8k-limit reuses them).
  std::string ppl_key(const SchemeDef& scheme) const;
  std::string gsm8k_key(const SchemeDef& scheme) const;
  // OUT/cache/<part>-<scheme>-<key><extension>; empty without a cache directory.
  std::filesystem::path cache_file(std::string_view part, const SchemeDef& scheme,
                                   const std::string& key, std::string_view extension) const;

 private:
  // The scheme's hooks on the model, calibrated (or restored from the cache; r gets the
  // calibration fields); null for a scheme without a recipe or checkpoint.
  std::unique_ptr<lifecycle::QuantizationLifecycle> prepare_scheme(const SchemeDef& def,
                                                                   SchemeReport& r);
  // The enabled tasks on the model as prepared, with the scheme's KV cache.
  SchemeReport run_scheme(const SchemeDef& def, lifecycle::QuantizationLifecycle* lc,
                          SchemeReport r);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  EvalOptions options_;
  std::uint64_t model_hash_ = 0;
};

struct CompareOptions {
  EvalOptions eval;
  std::vector<SchemeDef> schemes;  // baseline is always evaluated (and listed first)
  std::filesystem::path out_dir = "kvq-compare";
};

struct CompareResult {
  std::vector<SchemeReport> rows;
  CompareMeta meta;
  std::filesystem::path results_json, plot_png, plot_svg;
  double seconds = 0;
};

// Runs every scheme (resuming finished rows), writes OUT/results.json, OUT/results.md and
// OUT/kld_vs_bits.png (+ .svg).
CompareResult run_compare(const CompareOptions& options);

// The two panels of OUT/kld_vs_bits.{png,svg}: mean KLD and ΔPPL against KV bits per value (log2 x
// axis). A panel's y axis is log10 when the quantized schemes' values are all positive and span
// at least a factor of 10 (8-bit and 4-bit schemes together, where a linear axis would stack the
// 8-bit points at zero); the baseline (rows.front(), 0 by definition) is then left out and the
// axis label says so.
std::vector<ScatterPanel> quality_vs_bits_panels(const std::vector<SchemeReport>& rows);

// Fills the baseline-relative fields of `row` (ΔPPL, KLD p, GSM8K delta / McNemar).
void compare_to_baseline(SchemeReport& row, const SchemeReport& baseline,
                         std::span<const double> kld_window_sums);

}  // namespace kvq::eval
