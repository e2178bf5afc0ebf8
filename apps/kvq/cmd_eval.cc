// kvq eval: one task (PPL on a text, WikiText-2 test by default; KLD vs the baseline; GSM8K) on one
// configuration — a recipe calibrated here on GSM8K train — with the paired comparison to the
// unquantized model.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/error.h"
#include "kvq/eval/compare.h"
#include "kvq/io/read_file.h"
#include "kvq/model/causal_lm.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq/runtime/model_source.h"

namespace kvq::cli {
namespace {

struct EvalArgs {
  std::string model, recipe, task = "wikitext2", data = "../shared/data", cache, kv_cache = "auto",
                             weights = "auto";
  std::int64_t limit = 0;
  bool json = false;
  eval::EvalOptions eval;
};

void print_row(const eval::SchemeReport& r, const std::string& task, const std::string& text,
               bool baseline) {
  if (task == "wikitext2") {
    std::printf("%s: PPL %.4f [95%% CI %.4f, %.4f] over %lld tokens (%lld windows) of %s\n",
                r.scheme.c_str(), r.ppl, r.ppl_lo, r.ppl_hi, static_cast<long long>(r.ppl_tokens),
                static_cast<long long>(r.ppl_windows), text.c_str());
    if (!baseline)
      std::printf("  vs baseline: dPPL %+.4f [%+.4f, %+.4f], paired bootstrap p = %.4g %s\n",
                  r.dppl, r.dppl_lo, r.dppl_hi, r.dppl_p,
                  eval::significance_marker(r.dppl_p).c_str());
  } else if (task == "kld") {
    const std::string bound =
        r.kld_exact ? " (exact)"
                    : fmt::format(" (top-K lower bound; upper bound {:.6f})", r.kld_upper);
    std::printf("%s: KLD %.6f ± %.6f nats/token%s, top-1 %.2f%% ± %.2f\n", r.scheme.c_str(), r.kld,
                r.kld_se, bound.c_str(), 100 * r.top1, 100 * r.top1_se);
    if (!baseline)
      std::printf("  vs baseline: KLD > 0 paired bootstrap p = %.4g %s\n", r.kld_p,
                  eval::significance_marker(r.kld_p).c_str());
  } else {
    std::printf("%s: GSM8K flexible-extract %.2f%% ± %.2f, strict-match %.2f%% ± %.2f (n = %lld)\n",
                r.scheme.c_str(), 100 * r.gsm8k, 100 * r.gsm8k_se, 100 * r.gsm8k_strict,
                100 * r.gsm8k_strict_se, static_cast<long long>(r.gsm8k_n));
    if (!baseline)
      std::printf("  vs baseline: %+.2f points, McNemar exact p = %.4g %s\n", 100 * r.gsm8k_delta,
                  r.gsm8k_p, eval::significance_marker(r.gsm8k_p).c_str());
  }
}

void run_eval(EvalArgs a) {
  if (a.task != "wikitext2" && a.task != "kld" && a.task != "gsm8k")
    fail<InvalidArgument>("--task must be wikitext2, kld or gsm8k, got '{}'", a.task);
  eval::EvalOptions o = a.eval;
  o.model_dir = a.model;
  o.data_dir = a.data;
  o.cache_dir = a.cache;
  o.ppl_kld = a.task != "gsm8k";
  o.gsm8k_limit = a.task == "gsm8k" ? (a.limit > 0 ? a.limit : 1319) : 0;
  o.decode_steps = 0;
  runtime::parse_kv_cache_option(a.kv_cache);  // a typo fails before loading
  o.weights = model::resolve_weight_dtype(a.weights, a.model);
  eval::SchemeDef def;
  def.kv_cache = a.kv_cache;
  if (a.recipe.empty() && a.kv_cache != "auto") {
    // A KV format with dynamic scales on the plain model: nothing to calibrate.
    def.name = a.kv_cache;
  } else if (a.recipe.empty()) {
    // The model directory must be a quantized checkpoint (load_quantized: ConfigError when
    // config.json has no quantization_config). Baseline: the same weights, quantization off.
    def.name = std::filesystem::path(a.model).filename().string();
    def.from_checkpoint = true;
  } else {
    def.name = std::filesystem::path(a.recipe).stem().string();
    def.recipe = io::read_file(a.recipe, "recipe");
  }
  eval::Evaluator ev(o);
  const eval::SchemeReport base = ev.baseline();
  const eval::SchemeReport row = ev.evaluate(def);
  if (a.json) {
    nlohmann::json j;
    j["task"] = a.task;
    if (o.ppl_kld) j["text"] = eval::text_name(o);
    j["baseline"] = eval::to_json(base);
    j["scheme"] = eval::to_json(row);
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const std::string text = eval::text_name(o);
  print_row(base, a.task, text, true);
  print_row(row, a.task, text, false);
}

}  // namespace

void add_text_options(CLI::App* cmd, eval::EvalOptions& options) {
  cmd->add_option("--text", options.text,
                  "Text of the PPL / KLD pass, read as raw bytes and tokenized whole (default: "
                  "DATA/wikitext-2-raw/wiki.test.raw, reported as WikiText-2; another file is "
                  "reported by its file name and cached apart)");
  cmd->add_option_function<std::string>(
         "--kld", [&options](const std::string& m) { options.kld = eval::parse_kld_mode(m); },
         "KLD against the baseline: topk (its top-K distributions cached once; a lower bound, "
         "the upper bound reported too) or exact (the full vocabulary; one more forward per "
         "window)")
      ->default_str("topk");
}

void register_eval(CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  a->eval.ctx = 2048;
  a->eval.max_windows = 0;
  auto* cmd =
      app.add_subcommand("eval", "Evaluate one quantization recipe on one task vs the baseline");
  cmd->add_option("--model", a->model, "Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--recipe", a->recipe, "llm-compressor recipe (calibrated on GSM8K train)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--kv-cache", a->kv_cache,
                  "The scheme's KV cache: auto (the recipe's or the checkpoint's packed cache with "
                  "its calibrated scales), or without --recipe (or with a rotation-only recipe) "
                  "FORMAT[:tensor|head] with dynamic scales on the plain model (e.g. int8:head, "
                  "nvfp4, fp8_e5m2, int4_g32)")
      ->capture_default_str();
  cmd->add_option("--task", a->task, "wikitext2 (PPL on --text) | kld | gsm8k")
      ->capture_default_str();
  add_text_options(cmd, a->eval);
  cmd->add_option("--ctx", a->eval.ctx, "Window length")
      ->check(tokens_in(2))
      ->capture_default_str();
  cmd->add_option("--max-windows", a->eval.max_windows, "Windows (0: all)")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--limit", a->limit, "GSM8K questions (0: all)")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--batch", a->eval.gsm8k_batch,
                  "GSM8K questions decoded together (up to 8: bit-identical to one at a time)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  cmd->add_option("--calib-samples", a->eval.calib_samples, "Calibration samples")
      ->check(count_in(1))
      ->capture_default_str();
  cmd->add_option("--weights", a->weights,
                  std::string(kWeightsHelp) +
                      " (the baseline is the model with these weights, cached apart per dtype)")
      ->capture_default_str();
  cmd->add_option("--data", a->data, "Data directory")->capture_default_str();
  cmd->add_option("--cache", a->cache, "Cache directory for baseline logits / calibration");
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a] { run_eval(*a); });
}

}  // namespace kvq::cli
