// kvq allocate: per-layer K / V formats chosen by measurement under a bits-per-value budget
// (eval/kv_allocation.h): every K and V tensor's KLD measured alone in its base format, the
// largest expected gains per bit upgraded within the budget, the plan measured and printed as a
// --kv-cache value.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/eval/kv_allocation.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/read_file.h"
#include "kvq/model/causal_lm.h"

namespace kvq::cli {
namespace {

struct AllocateArgs {
  std::string model, recipe, data = "../shared/data", out = "kvq-allocate", weights = "auto";
  bool json = false;
  eval::AllocationOptions alloc;
};

std::string tensor_name(const eval::KvTensor& t) {
  return fmt::format("{}{}", t.values ? "V" : "K", t.layer);
}

nlohmann::json to_json(const eval::AllocationResult& r, const eval::AllocationOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  for (const eval::AllocationRow& row : r.rows) {
    rows.push_back({{"tensor", tensor_name(row.tensor)},
                    {"layer", row.tensor.layer},
                    {"stream", row.tensor.values ? "v" : "k"},
                    {"kld_alone", row.kld},
                    {"gain", row.gain},
                    {"cost_bits", row.cost},
                    {"chosen", row.level == eval::AllocationLevel::kUpgrade},
                    {"format", row.format}});
    if (!o.downgrade.empty()) {
      rows.back()["downgrade_loss"] = row.loss;
      rows.back()["downgrade_saving_bits"] = row.saving;
    }
  }
  nlohmann::json j = {{"base", o.base},
                      {"upgrade", o.upgrade},
                      {"budget_bits", o.bits},
                      {"kv_cache", r.kv_cache},
                      {"base_bits", r.base_bits},
                      {"plan_bits", r.plan_bits},
                      {"base_kld", r.base.kld},
                      {"upgraded_kld", r.upgraded.kld},
                      {"rho", r.rho},
                      {"predicted_kld", r.predicted_kld},
                      {"plan_kld", r.plan.kld},
                      {"plan_kld_se", r.plan.kld_se},
                      {"kld_exact", r.plan.kld_exact},
                      {"base_report", eval::to_json(r.base)},
                      {"plan_report", eval::to_json(r.plan)},
                      {"tensors", rows}};
  if (!o.downgrade.empty()) {
    j["downgrade"] = o.downgrade;
    j["downgraded_kld"] = r.downgraded.kld;
    j["rho_down"] = r.rho_down;
  }
  return j;
}

void run_allocate(AllocateArgs a) {
  eval::AllocationOptions o = a.alloc;
  o.eval.model_dir = a.model;
  o.eval.data_dir = a.data;
  o.eval.cache_dir = std::filesystem::path(a.out) / "cache";
  o.eval.weights = model::resolve_weight_dtype(a.weights, a.model);
  // What allocate writes under --out must not be a file it reads.
  const std::filesystem::path file = std::filesystem::path(a.out) / "allocation.json";
  for (const std::filesystem::path& written : {file, o.eval.cache_dir}) {
    if (!o.eval.text.empty()) io::refuse_output_over_input(written, "--out", o.eval.text, "--text");
    if (!a.recipe.empty()) io::refuse_output_over_input(written, "--out", a.recipe, "--recipe");
  }
  if (!a.recipe.empty()) {
    o.recipe = io::read_file(a.recipe, "recipe");
    o.recipe_name = std::filesystem::path(a.recipe).stem().string();
  }
  const eval::AllocationResult r = eval::run_allocation(
      o, [](const eval::AllocationRow& row, std::size_t done, std::size_t total) {
        std::fprintf(stderr, "[%zu/%zu] %s alone: KLD %.6f (expected gain %.6f)\n", done, total,
                     tensor_name(row.tensor).c_str(), row.kld, row.gain);
      });
  const nlohmann::json j = to_json(r, o);
  std::filesystem::create_directories(file.parent_path());
  io::write_file_atomic(file, j.dump(1));
  if (a.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%-6s %-10s %-10s %-10s %s\n", "tensor", "KLD alone", "exp. gain", "+bits", "format");
  for (const eval::AllocationRow& row : r.rows)
    std::printf("%-6s %-10.6f %-10.6f %-10.4f %s\n", tensor_name(row.tensor).c_str(), row.kld,
                row.gain, row.cost, row.format.c_str());
  std::printf("\nbase %s: %.4f bits per value, KLD %.6f%s\n", o.base.c_str(), r.base_bits,
              r.base.kld, r.base.kld_exact ? " (exact)" : " (top-K lower bound)");
  std::printf(
      "every tensor in %s: KLD %.6f (rho %.3f: an upgrade saves 1 - rho of a tensor's KLD)\n",
      o.upgrade.c_str(), r.upgraded.kld, r.rho);
  if (!o.downgrade.empty())
    std::printf(
        "every tensor in %s: KLD %.6f (rho %.3f: a downgrade adds rho - 1 of a tensor's KLD)\n",
        o.downgrade.c_str(), r.downgraded.kld, r.rho_down);
  std::printf("plan: %.4f bits per value, KLD %.6f ± %.6f (predicted from the gains: %.6f)\n",
              r.plan_bits, r.plan.kld, r.plan.kld_se, r.predicted_kld);
  std::printf("--kv-cache %s\n", r.kv_cache.c_str());
  std::printf("(all rows in %s)\n", file.string().c_str());
}

}  // namespace

void register_allocate(CLI::App& app) {
  auto a = std::make_shared<AllocateArgs>();
  a->alloc.base = "nl4_g64+sink1";
  a->alloc.upgrade = "int5_g64_mse";
  a->alloc.eval.ctx = 512;
  a->alloc.eval.max_windows = 4;
  auto* cmd = app.add_subcommand(
      "allocate",
      "Choose per-layer K/V formats under a bits-per-value budget: each K and V tensor's KLD "
      "measured alone in the base format, the most sensitive ones upgraded within the budget (with "
      "--downgrade, the least sensitive ones downgraded)");
  cmd->footer(
      "Example (kvq's 4.5-bit cache: iq4_nl levels per 64 values, a fifth bit where it pays):\n"
      "  kvq allocate --model M --recipe examples/recipes/rotate_r2_r3_smooth_k.yaml \\\n"
      "      --base nl4_g64+sink1 --upgrade int5_g64_mse --bits 4.5 --text calib.txt\n"
      "then run the printed --kv-cache with the same --recipe (kvq eval / generate). With\n"
      "--downgrade nl3_g64 the least sensitive tensors may drop to 3 bits and pay for more\n"
      "upgrades (or, with --bits 3.5, a 3-bit cache keeps 4 and 5 bits where they matter).\n"
      "Scan on text you do not evaluate on: the choice fits the windows it saw. 2 x layers + 3\n"
      "passes over the windows (+1 with --downgrade); results cached in --out, so an\n"
      "interrupted scan resumes.");
  cmd->add_option("--model", a->model, "Hugging Face model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--recipe", a->recipe,
                  "llm-compressor recipe applied first (rotations, key smoothing; calibrated on "
                  "GSM8K train once)")
      ->check(CLI::ExistingFile);
  cmd->add_option(
         "--base", a->alloc.base,
         "The format each tensor's KLD is measured alone in, and every tensor's unless the plan "
         "moves it: FORMAT or KFORMAT/VFORMAT, +sinkN (dynamic)")
      ->capture_default_str();
  cmd->add_option("--upgrade", a->alloc.upgrade, "The format a chosen tensor gets")
      ->capture_default_str();
  cmd->add_option("--downgrade", a->alloc.downgrade,
                  "A smaller format the least sensitive tensors may take, so that more bits go "
                  "where they pay (e.g. nl3_g64; none by default)");
  cmd->add_option("--bits", a->alloc.bits,
                  "Budget: average bits per value over every K and V (codes and in-row scales; "
                  "sink rows not counted)")
      ->check(CLI::Range(1.0, 64.0))
      ->capture_default_str();
  add_text_options(cmd, a->alloc.eval);
  cmd->add_option("--ctx", a->alloc.eval.ctx, "Window length")
      ->check(tokens_in(2))
      ->capture_default_str();
  cmd->add_option("--max-windows", a->alloc.eval.max_windows, "Windows of the text scanned")
      ->check(count_in(1))
      ->capture_default_str();
  cmd->add_option("--calib-samples", a->alloc.eval.calib_samples, "Calibration samples")
      ->check(count_in(1))
      ->capture_default_str();
  cmd->add_option("--weights", a->weights, std::string(kWeightsHelp))->capture_default_str();
  cmd->add_option("--data", a->data, "Data directory")->capture_default_str();
  cmd->add_option("--out", a->out,
                  "Output directory: allocation.json and the cache a rerun resumes from")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a] { run_allocate(*a); });
}

}  // namespace kvq::cli
