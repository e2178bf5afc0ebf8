// `kvq allocate` end to end on the default model, tiny budget (1 window of 16 tokens): the scan
// covers every K and V tensor, the choice is the largest expected gains within the bits budget,
// the plan string names exactly the chosen tensors, and the plan's KLD — like a tensor's KLD
// alone — is what `kvq eval` measures for that --kv-cache on the same windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/runtime/kv_cache_choice.h"
#include "model/cli/cli_run.h"
#include "support/test_paths.h"

namespace fs = std::filesystem;

TEST(Allocate, ChoosesTheLargestGainsWithinTheBudget) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const std::string model = kvq::test::default_model_dir().string();
  const std::string data = kvq::test::shared_data_dir().string();
  const std::vector<std::string> window = {"--ctx", "16", "--max-windows", "1", "--data", data};
  std::vector<std::string> args = {
      "allocate", "--model", model, "--base", "int4_g32+sink1",       "--upgrade",
      "int8_g32", "--bits",  "4.7", "--out",  (tmp / "out").string(), "--json"};
  args.insert(args.end(), window.begin(), window.end());
  const kvq::test::CliResult r = kvq::test::run_kvq(args, 900);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  std::ifstream saved(tmp / "out" / "allocation.json");
  EXPECT_EQ(nlohmann::json::parse(saved), j);

  // 30 layers: K0..K29 then V0..V29, each costing (8.5 - 4.5) / 60 bits per value.
  const auto& rows = j["tensors"];
  ASSERT_EQ(rows.size(), 60u);
  EXPECT_EQ(rows[0]["tensor"], "K0");
  EXPECT_EQ(rows[30]["tensor"], "V0");
  EXPECT_DOUBLE_EQ(j["base_bits"].get<double>(), 4.5);
  double min_chosen = 1e9, max_other = -1e9;
  std::string exceptions;
  std::vector<std::string> k, v;
  int chosen = 0;
  for (const auto& row : rows) {
    EXPECT_NEAR(row["cost_bits"].get<double>(), 4.0 / 60.0, 1e-12);
    EXPECT_NEAR(row["gain"].get<double>(),
                row["kld_alone"].get<double>() * (1.0 - j["rho"].get<double>()), 1e-15);
    if (row["chosen"].get<bool>()) {
      ++chosen;
      min_chosen = std::min(min_chosen, row["gain"].get<double>());
      (row["stream"] == "k" ? k : v).push_back(std::to_string(row["layer"].get<int>()));
    } else {
      max_other = std::max(max_other, row["gain"].get<double>());
    }
  }
  // 0.2 bits of budget buy 3 upgrades of 1/15 bit; fewer only when fewer gains are positive.
  EXPECT_LE(chosen, 3);
  if (chosen < 3) {
    EXPECT_LE(max_other, 0.0);
  }
  if (chosen > 0) {
    EXPECT_GE(min_chosen, max_other);
  }
  EXPECT_LE(j["plan_bits"].get<double>(), 4.7 + 1e-9);
  EXPECT_NEAR(j["plan_bits"].get<double>(), 4.5 + chosen * 4.0 / 60.0, 1e-9);
  // The plan names the chosen tensors (single layers here unless two are adjacent).
  const std::string plan = j["kv_cache"];
  EXPECT_EQ(plan.rfind("int4_g32+sink1", 0), 0u) << plan;
  for (const auto& l : k) EXPECT_NE(plan.find("k" + l), std::string::npos) << plan;
  for (const auto& l : v) EXPECT_NE(plan.find("v" + l), std::string::npos) << plan;

  // The plan's KLD is `kvq eval`'s for the same --kv-cache and windows.
  std::vector<std::string> eval = {
      "eval",   "--model", model,    "--kv-cache", plan,
      "--task", "kld",     "--json", "--cache",    (tmp / "eval").string()};
  eval.insert(eval.end(), window.begin(), window.end());
  const kvq::test::CliResult e = kvq::test::run_kvq(eval, 300);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const nlohmann::json ej = nlohmann::json::parse(e.out);
  EXPECT_DOUBLE_EQ(ej["scheme"]["kld"]["mean"].get<double>(), j["plan_kld"].get<double>());
  // A tensor alone: V of layer 1 in int4_g32, every other one f32, the sink kept.
  eval[4] = "f32+sink1+v1=int4_g32";
  const kvq::test::CliResult alone = kvq::test::run_kvq(eval, 300);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(alone.out)["scheme"]["kld"]["mean"].get<double>(),
                   rows[31]["kld_alone"].get<double>());
  EXPECT_GT(rows[31]["kld_alone"].get<double>(), 0.0);
  EXPECT_GT(j["rho"].get<double>(), 0.0);
  EXPECT_LT(j["rho"].get<double>(), 1.0);  // 8.5 bits beat 4.5
}

// With --downgrade the ladder is nl3_g32 -> nl4_g32 -> int8_g32 and the budget may sit below the
// base: every row ends in one of the three formats, the plan's bits are what those formats cost,
// the plan string gives each tensor its format, and the plan's KLD is `kvq eval`'s.
TEST(Allocate, DowngradesTheLeastSensitiveTensors) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const std::string model = kvq::test::default_model_dir().string();
  const std::string data = kvq::test::shared_data_dir().string();
  const std::vector<std::string> window = {"--ctx", "16", "--max-windows", "1", "--data", data};
  std::vector<std::string> args = {"allocate",
                                   "--model",
                                   model,
                                   "--base",
                                   "nl4_g32",
                                   "--upgrade",
                                   "int8_g32",
                                   "--downgrade",
                                   "nl3_g32",
                                   "--bits",
                                   "4.2",
                                   "--out",
                                   (tmp / "out").string(),
                                   "--json"};
  args.insert(args.end(), window.begin(), window.end());
  const kvq::test::CliResult r = kvq::test::run_kvq(args, 900);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["base_bits"].get<double>(), 4.5);
  EXPECT_GT(j["rho_down"].get<double>(), 1.0);  // 3.5 bits lose to 4.5
  const auto& rows = j["tensors"];
  ASSERT_EQ(rows.size(), 60u);
  double bits = 0.0;
  std::string plan = "nl4_g32";
  for (const auto& row : rows) {
    const std::string f = row["format"];
    const std::string stream = row["stream"];
    EXPECT_NEAR(row["downgrade_loss"].get<double>(),
                row["kld_alone"].get<double>() * (j["rho_down"].get<double>() - 1.0), 1e-15);
    EXPECT_NEAR(row["downgrade_saving_bits"].get<double>(), 1.0 / 60.0, 1e-12);
    bits += f == "nl3_g32" ? 3.5 : f == "nl4_g32" ? 4.5 : f == "int8_g32" ? 8.5 : 1e9;
    EXPECT_EQ(row["chosen"].get<bool>(), f == "int8_g32");
  }
  bits /= 60.0;
  EXPECT_NEAR(j["plan_bits"].get<double>(), bits, 1e-9);
  EXPECT_LE(bits, 4.2 + 1e-9);
  EXPECT_GT(bits, 4.2 - 4.0 / 60.0);  // no step that still fits is left out (at most one int8)
  // The plan string gives each tensor its format.
  const kvq::runtime::KvCacheOption o =
      kvq::runtime::parse_kv_cache_option(j["kv_cache"].get<std::string>());
  int exceptions = 0;
  for (const auto& e : o.layer_formats) exceptions += static_cast<int>(e.last - e.first + 1);
  int moved = 0;
  for (const auto& row : rows) moved += row["format"] != "nl4_g32";
  EXPECT_EQ(exceptions, moved) << j["kv_cache"];

  std::vector<std::string> eval = {
      "eval",   "--model", model,    "--kv-cache", j["kv_cache"],
      "--task", "kld",     "--json", "--cache",    (tmp / "eval").string()};
  eval.insert(eval.end(), window.begin(), window.end());
  const kvq::test::CliResult e = kvq::test::run_kvq(eval, 300);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(e.out)["scheme"]["kld"]["mean"].get<double>(),
                   j["plan_kld"].get<double>());
}
