// `--weights f32|bf16` of `kvq generate` and `kvq bench` on the default model: bf16 weights give
// the same greedy tokens here (tests/model/engine/test_bf16_weights.cc measures the logit
// difference), bench runs both side by side and counts half the weight bytes, and a bad value
// fails before the model is loaded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "support/test_paths.h"

namespace kvq::test {
namespace {

std::string model() { return default_model_dir().string(); }

nlohmann::json run_json(const std::vector<std::string>& args) {
  const CliResult r = run_kvq(args);
  EXPECT_EQ(r.exit_code, 0) << ::testing::PrintToString(args) << "\n" << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.out);
}

TEST(CliWeights, GenerateWithBf16WeightsGivesTheSameGreedyTokens) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const std::vector<std::string> base = {
      "generate",         "--model",          model(), "--prompt",
      "Hello my name is", "--max-new-tokens", "12",    "--json"};
  const auto f32 = run_json(base);
  auto args = base;
  args.insert(args.end(), {"--weights", "bf16"});
  const auto bf16 = run_json(args);
  ASSERT_FALSE(f32.is_null());
  ASSERT_FALSE(bf16.is_null());
  EXPECT_EQ(f32["weights"], "f32");
  EXPECT_EQ(bf16["weights"], "bf16");
  EXPECT_EQ(f32["generated_ids"], bf16["generated_ids"]);
}

TEST(CliWeights, BenchRunsBothWeightDtypesSideBySide) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const auto j = run_json({"bench", "--model", model(), "--weights", "f32,bf16", "--contexts", "16",
                           "--threads", "1", "--repeats", "1", "--decode-steps", "2", "--prefill",
                           "8", "--no-machine", "--json"});
  ASSERT_FALSE(j.is_null());
  ASSERT_EQ(j["weights"].size(), 2u);
  EXPECT_EQ(j["weights"][0]["weights"], "f32");
  EXPECT_EQ(j["weights"][1]["weights"], "bf16");
  const auto w32 = j["weights"][0]["weight_bytes"].get<std::int64_t>();
  const auto w16 = j["weights"][1]["weight_bytes"].get<std::int64_t>();
  EXPECT_EQ(w32, 2 * w16);
  ASSERT_EQ(j["decode"].size(), 2u);
  ASSERT_EQ(j["prefill"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["decode"][i]["weights"], j["weights"][i]["weights"]);
    EXPECT_EQ(j["prefill"][i]["weights"], j["weights"][i]["weights"]);
    EXPECT_GT(j["decode"][i]["tok_s_best"].get<double>(), 0.0);
  }
  // Weights + KV of the context: the weight part is the dtype's.
  EXPECT_EQ(j["decode"][0]["bytes_per_token"].get<std::int64_t>() -
                j["decode"][1]["bytes_per_token"].get<std::int64_t>(),
            w32 - w16);
}

TEST(CliWeights, UnknownWeightDtypeFailsBeforeLoading) {
  for (const char* cmd : {"generate", "perplexity", "bench"}) {
    std::vector<std::string> args = {cmd, "--model", "/nonexistent-kvq-model", "--weights", "fp16"};
    if (std::string(cmd) == "generate") args.insert(args.end(), {"--prompt", "Hi"});
    if (std::string(cmd) == "perplexity") args.insert(args.end(), {"--text", "/nonexistent"});
    const CliResult r = run_kvq(args);
    EXPECT_NE(r.exit_code, 0) << cmd;
    EXPECT_NE(r.err.find("unknown weight dtype 'fp16' (expected auto, f32 or bf16)"),
              std::string::npos)
        << cmd << ": " << r.err;
  }
}

}  // namespace
}  // namespace kvq::test
