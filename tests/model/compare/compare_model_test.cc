#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "support/test_paths.h"

namespace fs = std::filesystem;

// `kvq compare` end to end on tiny budgets: baseline + KV-FP8-Head, one window of 256 tokens,
// 4 calibration samples, no GSM8K.
TEST(CompareModel, TwoSchemesTinyBudget) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const fs::path out = tmp.path() / "out";
  const std::string cmd = kvq::test::kvq_binary().string() + " -q compare --model " +
                          kvq::test::default_model_dir().string() +
                          " --schemes baseline,KV-FP8-Head --ctx 256 --max-windows 1"
                          " --calib-samples 4 --gsm8k-limit 0 --decode-steps 4 --decode-context 64"
                          " --data " +
                          kvq::test::shared_data_dir().string() + " --out " + out.string() + " > " +
                          (tmp.path() / "stdout.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out / "results.json");
  ASSERT_TRUE(f) << "no results.json";
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["schemes"].size(), 2u);
  const auto& base = j["schemes"][0];
  const auto& fp8 = j["schemes"][1];
  EXPECT_EQ(base["scheme"], "baseline");
  EXPECT_EQ(base["kld"]["mean"].get<double>(), 0.0);  // same model, same code path: exactly 0
  EXPECT_EQ(base["kld"]["top1"].get<double>(), 1.0);
  EXPECT_EQ(fp8["scheme"], "KV-FP8-Head");
  EXPECT_GT(fp8["kld"]["mean"].get<double>(), 0.0);
  EXPECT_LT(fp8["kld"]["mean"].get<double>(), 0.1);  // fp8 KV barely moves a 135M model
  EXPECT_EQ(fp8["kv_bits_per_value"].get<double>(), 8.0);
  EXPECT_EQ(base["kv_bytes_per_token"].get<std::int64_t>(),
            4 * fp8["kv_bytes_per_token"].get<std::int64_t>());
  EXPECT_EQ(fp8["wikitext2"]["tokens"].get<std::int64_t>(), 255);
  EXPECT_GT(fp8["decode"]["tokens_per_second"].get<double>(), 0.0);
  EXPECT_TRUE(fs::exists(out / "kld_vs_bits.png"));
  EXPECT_GT(fs::file_size(out / "kld_vs_bits.png"), 1000u);
  EXPECT_GT(fs::file_size(out / "kld_vs_bits.svg"), 1000u);
  // The scheme's PPL / KLD part is cached whole; its per-window journal went with its completion.
  int parts = 0, journals = 0;
  for (const auto& e : fs::directory_iterator(out / "cache")) {
    const std::string name = e.path().filename().string();
    parts += name.rfind("ppl-KV-FP8-Head-", 0) == 0 ? 1 : 0;
    journals += name.rfind("kld-windows-", 0) == 0 ? 1 : 0;
  }
  EXPECT_EQ(parts, 1);
  EXPECT_EQ(journals, 0);
}

// --weights bf16 evaluates the bf16-weight model with caches of its own: run after an fp32 run
// into the same output directory it must not reuse the fp32 baseline (its PPL differs a little).
TEST(CompareModel, Bf16WeightsGetTheirOwnCaches) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  kvq::test::TempDir tmp;
  const fs::path out = tmp.path() / "out";
  auto run = [&](const std::string& weights) {
    const std::string cmd = kvq::test::kvq_binary().string() + " -q compare --model " +
                            kvq::test::default_model_dir().string() +
                            " --schemes baseline --ctx 256 --max-windows 1 --calib-samples 4"
                            " --gsm8k-limit 0 --decode-steps 0 --weights " +
                            weights + " --data " + kvq::test::shared_data_dir().string() +
                            " --out " + out.string() + " > " + (tmp.path() / "stdout.txt").string();
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out / "results.json");
    return nlohmann::json::parse(f)["schemes"][0]["wikitext2"]["ppl"].get<double>();
  };
  const double f32 = run("f32");
  const double bf16 = run("bf16");
  EXPECT_NE(f32, bf16);
  EXPECT_NEAR(bf16, f32, 0.01 * f32);  // bf16 weights cost ~0.02 % PPL on 8 × 2048 tokens
}
