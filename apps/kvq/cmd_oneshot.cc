// kvq oneshot: apply a recipe's attention / KV-cache quantization, calibrate q/k/v scales on a
// dataset (llm-compressor 0.14.0.1 semantics, see lifecycle/calibrate.h), optionally save a
// compressed-tensors checkpoint and a calibration report (JSON + PNG heatmap beside it).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/io/atomic_write.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/quant/recipe.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::cli {
namespace {
namespace fs = std::filesystem;

struct OneshotArgs {
  std::string model, recipe, dataset, output, report, weights = "auto";
  std::int64_t num_samples = 64;
  std::int64_t max_seq_length = 512;
  bool shuffle = true;
  std::uint64_t seed = 42;
  bool overwrite = false;
};

// Report files written into the checkpoint directory (and beside --report).
constexpr const char* kReportJson = "calibration_report.json";
constexpr const char* kReportPng = "calibration_heatmap.png";

// Whether `a` and `b` name the same existing file or directory (links and `..` resolved).
bool same_path(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

// Refuses outputs that would overwrite an input, before anything runs: the --report JSON and the
// heatmap beside it (.png, .svg) must be other files than the model directory's, the recipe and
// the dataset; --output (which --overwrite replaces whole) must not be or hold any of them.
void check_outputs(const OneshotArgs& a) {
  std::vector<std::pair<fs::path, std::string>> inputs = {
      {a.recipe, "--recipe"}, {a.dataset, "--dataset"}, {a.model, "--model"}};
  std::error_code ec;
  for (fs::directory_iterator it(a.model, ec), end; !ec && it != end; it.increment(ec))
    inputs.emplace_back(it->path(), "a file of --model");
  // --overwrite replaces the whole --output directory: it must not be or hold any input.
  if (!a.output.empty())
    for (const auto& [in, what] : inputs)
      io::refuse_output_over_input(a.output, "--output", in, what);
  if (a.report.empty()) return;
  const fs::path json(a.report);
  const std::string ext = json.extension().string();
  if (ext == ".png" || ext == ".svg")
    fail<InvalidArgument>(
        "--report {} names the heatmap's file: pass the JSON path (e.g. report.json); the heatmap "
        "is written beside it as .png and .svg",
        a.report);
  for (const fs::path& out :
       {json, fs::path(json).replace_extension(".png"), fs::path(json).replace_extension(".svg")}) {
    for (const auto& [in, what] : inputs) {
      if (same_path(out, in))
        fail<InvalidArgument>("--report {} would overwrite {} ({})", a.report, what, in.string());
    }
  }
}

void run_oneshot(const OneshotArgs& a) {
  // Everything that can be refused cheaply is refused before the model is read.
  if (a.output.empty() && a.report.empty())
    fail<InvalidArgument>("oneshot: nothing to write: pass --output DIR and/or --report FILE");
  check_outputs(a);
  if (!a.output.empty() && fs::exists(a.output) && !a.overwrite)
    fail<InvalidArgument>("--output {} already exists; remove it or pass --overwrite", a.output);
  if (a.num_samples <= 0)
    fail<InvalidArgument>("--num-calibration-samples must be > 0, got {}", a.num_samples);
  if (a.max_seq_length <= 0)
    fail<InvalidArgument>("--max-seq-length must be > 0, got {}", a.max_seq_length);
  const quant::QuantizationConfig config = quant::load_recipe(a.recipe);
  if (config.key_smoothing && !a.output.empty())  // save_pretrained would refuse it at the end
    fail<NotSupported>(
        "--recipe {}: a KeySmoothingModifier cannot be saved in a checkpoint (no transformers / "
        "vLLM equivalent); drop --output (--report only) or evaluate it with kvq eval / compare",
        a.recipe);
  auto model = model::CausalLM::load(
      a.model, model::LoadOptions{model::resolve_weight_dtype(a.weights, a.model)});
  if (a.max_seq_length > model->config().max_position_embeddings)
    fail<InvalidArgument>("--max-seq-length {} is beyond {}'s context (max_position_embeddings {})",
                          a.max_seq_length, a.model, model->config().max_position_embeddings);
  // Apply before reading the dataset: a recipe that selects nothing fails in a second.
  auto lc = lifecycle::apply_quantization_config(*model, config);
  const auto tokenizer = tok::Tokenizer::from_dir(a.model);
  lifecycle::DatasetOptions opts;
  opts.num_samples = a.num_samples;
  opts.max_seq_length = a.max_seq_length;
  opts.order =
      a.shuffle ? lifecycle::SampleOrder::kShuffled : lifecycle::SampleOrder::kLongestFirst;
  opts.seed = a.seed;
  const auto samples = lifecycle::load_calibration_dataset(a.dataset, tokenizer, opts);
  if (static_cast<std::int64_t>(samples.size()) < a.num_samples)
    log::warn("oneshot: {} has only {} samples (asked for {})", a.dataset, samples.size(),
              a.num_samples);
  log::info("oneshot: {} quantized attention modules, {} calibration samples ({})",
            lc->states().size(), samples.size(),
            a.shuffle ? fmt::format("shuffled, seed {}", a.seed) : std::string("longest first"));
  const auto result = lifecycle::calibrate(*lc, samples);
  std::printf("calibrated %lld samples, %lld tokens in %.1f s (%.0f tok/s)\n",
              static_cast<long long>(result.samples), static_cast<long long>(result.tokens),
              result.seconds, result.seconds > 0 ? result.tokens / result.seconds : 0.0);
  auto write_report = [&](const fs::path& json, const fs::path& png) {
    lifecycle::write_calibration_report_json(result, *lc, json);
    lifecycle::write_calibration_heatmap_png(result, png);
  };
  if (!a.output.empty()) {
    lifecycle::save_pretrained(
        *lc, a.model, a.output,
        [&](const fs::path& dir) { write_report(dir / kReportJson, dir / kReportPng); },
        a.overwrite);
    std::printf("saved: %s (report: %s, %s, %s)\n", a.output.c_str(), kReportJson, kReportPng,
                fs::path(kReportPng).replace_extension(".svg").c_str());
  }
  if (!a.report.empty()) {
    const fs::path report(a.report);
    fs::path png = report;
    png.replace_extension(".png");
    write_report(report, png);
    std::printf("report: %s, %s, %s\n", report.c_str(), png.c_str(),
                fs::path(png).replace_extension(".svg").c_str());
  }
  for (const std::string& w : lc->export_warnings())
    std::printf("vLLM export warning: %s\n", w.c_str());
}

}  // namespace

void register_oneshot(CLI::App& app) {
  auto a = std::make_shared<OneshotArgs>();
  auto* cmd = app.add_subcommand(
      "oneshot", "Calibrate attention / KV-cache quantization scales and save a checkpoint");
  cmd->add_option("--model", a->model, "Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--recipe", a->recipe, "llm-compressor recipe (YAML/JSON) or config.json")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--dataset", a->dataset,
                  "Calibration data: plain text, JSONL with \"text\", chat JSONL "
                  "{\"messages\": [{role, content}]} (as ultrachat) or GSM8K-style JSONL "
                  "{question, answer}; the last two are rendered with the model's chat template")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--num-calibration-samples", a->num_samples, "Samples to calibrate on")
      ->check(count_in(1))
      ->capture_default_str();
  cmd->add_option("--max-seq-length", a->max_seq_length, "Tokens per sample (truncate / window)")
      ->check(tokens_in(1))
      ->capture_default_str();
  cmd->add_option("--shuffle-calibration-samples", a->shuffle,
                  "Which samples calibrate when the dataset has more than "
                  "--num-calibration-samples, as llm-compressor's oneshot picks them: true = a "
                  "random draw (its RandomSampler; the same samples as a Python script that calls "
                  "torch.manual_seed(SEED) right before oneshot), false = the longest ones, "
                  "longest first (its LengthAwareSampler). Samples are counted after truncation "
                  "to --max-seq-length")
      ->default_str("true");
  cmd->add_option("--seed,--shuffle-seed", a->seed,
                  "The torch.manual_seed of --shuffle-calibration-samples true")
      ->capture_default_str();
  cmd->add_option("--weights", a->weights,
                  std::string(kWeightsHelp) +
                      "; the checkpoint keeps the input's tensors and dtype whatever this is")
      ->capture_default_str();
  cmd->add_option("--output", a->output,
                  "Write the quantized checkpoint (+ calibration_report.json and "
                  "calibration_heatmap.png) to this new directory");
  cmd->add_flag("--overwrite", a->overwrite, "Replace an existing --output directory");
  cmd->add_option("--report", a->report, "Write the calibration report JSON (+ .png heatmap)");
  cmd->callback([a] { run_oneshot(*a); });
}

}  // namespace kvq::cli
