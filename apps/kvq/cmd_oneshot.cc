// kvq oneshot: apply a recipe's attention / KV-cache quantization, calibrate q/k/v scales on a
// dataset (llm-compressor 0.14.0.1 semantics, see lifecycle/calibrate.h), optionally save a
// compressed-tensors checkpoint and a calibration report (JSON + PNG heatmap beside it).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "commands.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/quant/recipe.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::cli {
namespace {
namespace fs = std::filesystem;

struct OneshotArgs {
  std::string model, recipe, dataset, output, report;
  std::int64_t num_samples = 64;
  std::int64_t max_seq_length = 512;
  std::optional<std::uint64_t> shuffle_seed;
};

void run_oneshot(const OneshotArgs& a) {
  auto model = model::LlamaModel::load(a.model);
  if (a.max_seq_length > model->config().max_position_embeddings)
    fail<InvalidArgument>("--max-seq-length {} is beyond the model's max_position_embeddings {}",
                          a.max_seq_length, model->config().max_position_embeddings);
  const quant::QuantizationConfig config = quant::load_recipe(a.recipe);
  const auto tokenizer = tok::Tokenizer::from_dir(a.model);
  lifecycle::DatasetOptions opts;
  opts.num_samples = a.num_samples;
  opts.max_seq_length = a.max_seq_length;
  opts.shuffle_seed = a.shuffle_seed;
  const auto samples = lifecycle::load_calibration_dataset(a.dataset, tokenizer, opts);
  auto lc = lifecycle::apply_quantization_config(*model, config);
  log::info("oneshot: {} quantized attention modules, {} calibration samples", lc->states().size(),
            samples.size());
  const auto result = lifecycle::calibrate(*lc, samples);
  std::printf("calibrated %lld samples, %lld tokens in %.1f s (%.0f tok/s)\n",
              static_cast<long long>(result.samples), static_cast<long long>(result.tokens),
              result.seconds, result.seconds > 0 ? result.tokens / result.seconds : 0.0);
  if (!a.report.empty()) {
    const fs::path report(a.report);
    lifecycle::write_calibration_report_json(result, *lc, report);
    fs::path png = report;
    png.replace_extension(".png");
    lifecycle::write_calibration_heatmap_png(result, png);
    std::printf("report: %s, %s\n", report.c_str(), png.c_str());
  }
  if (!a.output.empty()) {
    lifecycle::save_pretrained(*lc, a.model, a.output);
    std::printf("saved: %s\n", a.output.c_str());
  }
}

}  // namespace

void register_oneshot(CLI::App& app) {
  auto a = std::make_shared<OneshotArgs>();
  auto* cmd = app.add_subcommand(
      "oneshot", "Calibrate attention / KV-cache quantization scales and save a checkpoint");
  cmd->add_option("--model", a->model, "Hugging Face model directory")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--recipe", a->recipe, "llm-compressor recipe (YAML/JSON) or config.json")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--dataset", a->dataset,
                  "Calibration data: plain text, JSONL with \"text\", or GSM8K-style JSONL "
                  "{question, answer}")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--num-calibration-samples", a->num_samples, "Samples to calibrate on")
      ->capture_default_str();
  cmd->add_option("--max-seq-length", a->max_seq_length, "Tokens per sample (truncate / window)")
      ->capture_default_str();
  cmd->add_option("--shuffle-seed", a->shuffle_seed, "Shuffle the samples with this seed first");
  cmd->add_option("--output", a->output, "Write the quantized checkpoint to this directory");
  cmd->add_option("--report", a->report, "Write the calibration report JSON (+ .png heatmap)");
  cmd->callback([a] { run_oneshot(*a); });
}

}  // namespace kvq::cli
