// kvq compare: every built-in quantization scheme (or --schemes) calibrated and evaluated
// against the unquantized model; Markdown table on stdout, results.json + a KLD / ΔPPL vs KV bits
// PNG under --out (eval/compare.h).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/log.h"
#include "kvq/eval/compare.h"
#include "kvq/model/causal_lm.h"

namespace kvq::cli {
namespace {

struct CompareArgs {
  std::string model, schemes, out = "kvq-compare", data = "../shared/data", weights = "auto";
  eval::EvalOptions eval;
};

void run_compare_cmd(const CompareArgs& a) {
  eval::CompareOptions o;
  o.schemes = eval::parse_scheme_list(a.schemes);  // unknown names fail before loading
  o.eval = a.eval;
  o.eval.weights = model::resolve_weight_dtype(a.weights, a.model);
  o.eval.model_dir = a.model;
  o.eval.data_dir = a.data;
  o.out_dir = a.out;
  const eval::CompareResult r = eval::run_compare(o);
  std::fputs(eval::compare_markdown(r.rows, r.meta).c_str(), stdout);
  std::printf("\nresults: %s\nplot:    %s, %s\nwall time: %.1f s\n", r.results_json.c_str(),
              r.plot_png.c_str(), r.plot_svg.c_str(), r.seconds);
}

}  // namespace

void register_compare(CLI::App& app) {
  auto a = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand(
      "compare", "Calibrate and evaluate KV / attention quantization schemes against the baseline");
  std::string names, extra;
  for (const auto& s : eval::builtin_schemes()) {
    std::string& list = s.in_default ? names : extra;
    list += (list.empty() ? "" : ",") + s.name;
  }
  cmd->add_option("--model", a->model, "Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--schemes", a->schemes,
                  "Comma-separated schemes (default: " + names + "; also " + extra + ")");
  cmd->add_option("--calib-samples", a->eval.calib_samples, "GSM8K train samples to calibrate on")
      ->check(count_in(1))
      ->capture_default_str();
  add_text_options(cmd, a->eval);
  cmd->add_option("--ctx", a->eval.ctx, "Text window length")
      ->check(tokens_in(2))
      ->capture_default_str();
  cmd->add_option("--max-windows", a->eval.max_windows, "Text windows (0: all)")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--gsm8k-limit", a->eval.gsm8k_limit, "GSM8K test questions (0: skip)")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--gsm8k-batch", a->eval.gsm8k_batch,
                  "GSM8K questions decoded together (up to 8: answers bit-identical to one at a "
                  "time, each weight read once per step for all)")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  cmd->add_option("--decode-context", a->eval.decode_context, "Cached tokens when timing decode")
      ->check(tokens_in(1))
      ->capture_default_str();
  cmd->add_option("--decode-steps", a->eval.decode_steps, "Decode steps timed (0: skip)")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--out", a->out,
                  "Output directory (results.json, plot, cache; the last one given counts, so a "
                  "wrapper's default can be overridden)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--weights", a->weights,
                  std::string(kWeightsHelp) +
                      " (the baseline is the model with these weights, cached apart per dtype)")
      ->capture_default_str();
  cmd->add_option("--data", a->data, "Data directory (wikitext-2-raw/, gsm8k/)")
      ->capture_default_str();
  cmd->callback([a] { run_compare_cmd(*a); });
}

}  // namespace kvq::cli
