// `--kv-cache` of `kvq generate`, `kvq perplexity` and `kvq bench` on the default model:
// every format with dynamic scales on the plain model, a quantized checkpoint's packed cache
// (default) against its fake quantization, the errors, and KV bytes per token everywhere.
// Kept short: few tokens, one short perplexity window, bench with one repeat of 2 steps.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "support/test_paths.h"

namespace kvq::test {
namespace {

// SmolLM2-135M: 30 layers, 3 kv heads, head_dim 64; K and V.
constexpr std::int64_t kValuesPerToken = 30 * 3 * 64 * 2;

std::string model() { return default_model_dir().string(); }

nlohmann::json run_json(const std::vector<std::string>& args, CliResult* out = nullptr) {
  const CliResult r = run_kvq(args);
  if (out) *out = r;
  EXPECT_EQ(r.exit_code, 0) << ::testing::PrintToString(args) << "\n" << r.err;
  if (r.exit_code != 0) return {};
  return nlohmann::json::parse(r.out);
}

void expect_error(const std::vector<std::string>& args, const std::string& message) {
  const CliResult r = run_kvq(args);
  EXPECT_NE(r.exit_code, 0) << ::testing::PrintToString(args);
  EXPECT_NE(r.err.find(message), std::string::npos)
      << "stderr: " << r.err << " (wanted '" << message << "')";
}

// An FP8 attn_head checkpoint of the default model, calibrated on 4 short GSM8K samples by
// `kvq oneshot` once per test run.
const std::filesystem::path& fp8_checkpoint() {
  static std::unique_ptr<TempDir> dir;
  if (!dir) {
    dir = std::make_unique<TempDir>();
    const CliResult r = run_kvq(
        {"oneshot", "--model", model(), "--recipe",
         (source_dir() / "examples" / "recipes" / "kv_fp8_head.yaml").string(), "--dataset",
         (shared_data_dir() / "gsm8k" / "train.jsonl").string(), "--num-calibration-samples", "4",
         "--max-seq-length", "64", "--output", (*dir / "ckpt").string()});
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
  static const std::filesystem::path ckpt = *dir / "ckpt";
  return ckpt;
}

// The first ~16 KB of WikiText-2 test in a file (a short perplexity text).
const std::filesystem::path& short_text() {
  static std::unique_ptr<TempDir> dir;
  static std::filesystem::path path;
  if (!dir) {
    dir = std::make_unique<TempDir>();
    path = *dir / "text.txt";
    std::ifstream in(shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw", std::ios::binary);
    std::string buf(16384, '\0');
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    buf.resize(static_cast<std::size_t>(in.gcount()));
    std::ofstream(path, std::ios::binary) << buf;
  }
  return path;
}

class CliKvCache : public ::testing::Test {
 protected:
  void SetUp() override { KVQ_REQUIRE_DEFAULT_MODEL(); }
};

TEST_F(CliKvCache, GenerateRunsEveryFormatAndReportsItsBytes) {
  struct Case {
    std::string flag, label, scales;
    std::int64_t bytes;
  };
  const std::vector<Case> cases = {
      {"f32", "f32", "none", kValuesPerToken * 4},
      {"bf16", "bf16", "none", kValuesPerToken * 2},
      {"e4m3", "fp8:head", "dynamic", kValuesPerToken},  // an alias
      {"int8:tensor", "int8:tensor", "dynamic", kValuesPerToken},
      {"int4", "int4:head", "dynamic", kValuesPerToken / 2},
      {"nvfp4", "nvfp4:head", "dynamic", kValuesPerToken / 2 + kValuesPerToken / 16},
      // The group formats: one fp16 scale per 32 values in the row, no stream scale.
      {"q8_0", "int8_g32", "none", kValuesPerToken + kValuesPerToken / 16},
      {"int4_g32", "int4_g32", "none", kValuesPerToken / 2 + kValuesPerToken / 16},
      {"q4_1", "int4_g32a", "none", kValuesPerToken / 2 + kValuesPerToken / 8},
  };
  for (const Case& c : cases) {
    CliResult r;
    const auto j = run_json({"generate", "--model", model(), "--prompt", "Hello my name is",
                             "--max-new-tokens", "4", "--kv-cache", c.flag, "--json"},
                            &r);
    if (j.is_null()) continue;
    EXPECT_EQ(j["kv_cache"], c.label) << c.flag;
    EXPECT_EQ(j["kv_scales"], c.scales) << c.flag;
    EXPECT_EQ(j["kv_bytes_per_token"].get<std::int64_t>(), c.bytes) << c.flag;
    EXPECT_EQ(j["new_tokens"].get<int>(), 4) << c.flag;
    // The stats line names the cache and its bytes; dynamic scales get a one-line note.
    EXPECT_NE(r.err.find("KV cache " + c.label), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::to_string(c.bytes) + " bytes/token"), std::string::npos) << r.err;
    const bool noted = r.err.find("kvq oneshot") != std::string::npos;
    EXPECT_EQ(noted, c.scales == "dynamic") << c.flag << ": " << r.err;
  }
}

TEST_F(CliKvCache, BadValuesFailWithAMessage) {
  const std::vector<std::string> gen = {"generate", "--model", model(),
                                        "--prompt", "Hi",      "--kv-cache"};
  auto with = [&](const std::string& v) {
    auto a = gen;
    a.push_back(v);
    return a;
  };
  expect_error(with("int3"), "unknown KV cache format 'int3' (supported: auto, fake,");
  expect_error(with("int8:row"), "granularity must be 'tensor' or 'head'");
  expect_error(with("bf16:head"), "bf16 is stored unscaled");
  expect_error(with("int4_g32:tensor"), "int4_g32 has no stream scales to choose a granularity");
  expect_error(with("fake"), "is not a quantized checkpoint");
  expect_error(
      {"perplexity", "--model", model(), "--text", short_text().string(), "--kv-cache", "fake"},
      "is not a quantized checkpoint");
  expect_error({"bench", "--model", model(), "--kv-cache", "f32,fp9", "--no-machine"},
               "unknown KV cache format 'fp9'");
}

TEST_F(CliKvCache, CheckpointRunsItsPackedCacheLikeItsFakeQuantization) {
  const auto ckpt = fp8_checkpoint().string();
  ASSERT_TRUE(std::filesystem::exists(fp8_checkpoint() / "config.json"));
  const std::vector<std::string> base = {"generate",         "--model",          ckpt, "--prompt",
                                         "Hello my name is", "--max-new-tokens", "24", "--json"};
  CliResult r;
  const auto packed = run_json(base, &r);
  ASSERT_FALSE(packed.is_null());
  EXPECT_EQ(packed["kv_cache"], "fp8:head");
  EXPECT_EQ(packed["kv_scales"], "calibrated");
  EXPECT_EQ(packed["kv_fake_quant"], false);
  EXPECT_EQ(packed["kv_bytes_per_token"].get<std::int64_t>(), kValuesPerToken);
  EXPECT_NE(r.err.find("calibrated scales from the checkpoint"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("kvq oneshot"), std::string::npos) << "no dynamic-scale note: " << r.err;

  auto args = base;
  args.insert(args.end(), {"--kv-cache", "fake"});
  const auto fake = run_json(args);
  ASSERT_FALSE(fake.is_null());
  EXPECT_EQ(fake["kv_cache"], "fake(fp8:head)");
  EXPECT_EQ(fake["kv_fake_quant"], true);
  EXPECT_EQ(fake["kv_bytes_per_token"].get<std::int64_t>(), kValuesPerToken * 4);
  // The packed cache stores exactly the fake-quantized values (docs/design.md): same tokens.
  EXPECT_EQ(packed["generated_ids"], fake["generated_ids"]);

  args = base;
  args.insert(args.end(), {"--kv-cache", "FP8:head"});  // its own format: the packed cache
  const auto same = run_json(args);
  ASSERT_FALSE(same.is_null());
  EXPECT_EQ(same["kv_cache"], "fp8:head");
  EXPECT_EQ(same["generated_ids"], packed["generated_ids"]);

  const std::vector<std::string> short_gen = {"generate", "--model",          ckpt, "--prompt",
                                              "Hi",       "--max-new-tokens", "1",  "--kv-cache"};
  for (const char* v : {"int8", "fp8:tensor", "f32"}) {
    auto a = short_gen;
    a.push_back(v);
    expect_error(a, "quantized checkpoint whose KV cache is fp8:head");
  }
}

TEST_F(CliKvCache, PerplexityReportsTheCacheAndStaysClose) {
  const std::vector<std::string> base = {
      "perplexity", "--model", model(),         "--text", short_text().string(),
      "--ctx",      "256",     "--max-windows", "2",      "--json"};
  auto run = [&](const std::vector<std::string>& extra) {
    auto a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run_json(a);
  };
  const auto f32 = run({});
  const auto int8 = run({"--kv-cache", "int8"});
  ASSERT_FALSE(f32.is_null());
  ASSERT_FALSE(int8.is_null());
  EXPECT_EQ(f32["kv_cache"], "f32");
  EXPECT_EQ(f32["kv_bytes_per_token"].get<std::int64_t>(), kValuesPerToken * 4);
  EXPECT_EQ(int8["kv_cache"], "int8:head");
  EXPECT_EQ(int8["kv_scales"], "dynamic");
  EXPECT_EQ(int8["kv_bytes_per_token"].get<std::int64_t>(), kValuesPerToken);
  const double p32 = f32["ppl"].get<double>(), p8 = int8["ppl"].get<double>();
  std::printf("ppl f32 %.4f, int8 dynamic per head %.4f\n", p32, p8);
  EXPECT_NE(p8, p32);                // really quantized
  EXPECT_NEAR(p8, p32, 0.03 * p32);  // and per-window scales keep int8 close
  const auto g8 = run({"--kv-cache", "int8_g32"});
  ASSERT_FALSE(g8.is_null());
  EXPECT_EQ(g8["kv_cache"], "int8_g32");
  EXPECT_EQ(g8["kv_scales"], "none");
  EXPECT_EQ(g8["kv_bytes_per_token"].get<std::int64_t>(), kValuesPerToken + kValuesPerToken / 16);
  const double pg = g8["ppl"].get<double>();
  std::printf("ppl int8_g32 %.4f\n", pg);
  EXPECT_NE(pg, p32);
  EXPECT_NEAR(pg, p32, 0.01 * p32);  // a scale per 32 values: closer than per head

  // The checkpoint: packed (default) and fake quantization score the same (prefill reads the
  // packed cache as the fake-quantized values).
  auto ck = base;
  ck[2] = fp8_checkpoint().string();
  const auto packed = run_json(ck);
  ck.insert(ck.end(), {"--kv-cache", "fake"});
  const auto fake = run_json(ck);
  ASSERT_FALSE(packed.is_null());
  ASSERT_FALSE(fake.is_null());
  EXPECT_EQ(packed["kv_cache"], "fp8:head");
  EXPECT_EQ(fake["kv_cache"], "fake(fp8:head)");
  EXPECT_NEAR(packed["ppl"].get<double>(), fake["ppl"].get<double>(),
              1e-6 * fake["ppl"].get<double>());
}

TEST_F(CliKvCache, BenchRunsEveryFormat) {
  const auto j = run_json({"bench", "--model", model(), "--kv-cache",
                           "f32,bf16,fp8,int8,int4,nvfp4,int8_g32,int4_g32", "--contexts", "32",
                           "--threads", "1", "--repeats", "1", "--decode-steps", "2", "--prefill",
                           "8", "--no-machine", "--json"});
  ASSERT_FALSE(j.is_null());
  const std::vector<std::string> labels = {"f32",       "bf16",       "fp8:head", "int8:head",
                                           "int4:head", "nvfp4:head", "int8_g32", "int4_g32"};
  ASSERT_EQ(j["decode"].size(), labels.size());
  ASSERT_EQ(j["kv_caches"].size(), labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    EXPECT_EQ(j["decode"][i]["kv"], labels[i]);
    EXPECT_EQ(j["prefill"][i]["kv"], labels[i]);
    EXPECT_EQ(j["kv_caches"][i]["kv_cache"], labels[i]);
    EXPECT_GT(j["decode"][i]["tok_s_best"].get<double>(), 0.0) << labels[i];
    EXPECT_EQ(j["kv_bytes_per_token"][labels[i]], j["kv_caches"][i]["kv_bytes_per_token"]);
  }
  EXPECT_EQ(j["kv_bytes_per_token"]["int8:head"].get<std::int64_t>(), kValuesPerToken);
  EXPECT_EQ(j["kv_caches"][2]["kv_scales"], "dynamic");
  EXPECT_EQ(j["kv_caches"][1]["kv_scales"], "none");
  EXPECT_EQ(j["kv_bytes_per_token"]["int4_g32"].get<std::int64_t>(),
            kValuesPerToken / 2 + kValuesPerToken / 16);
  EXPECT_EQ(j["kv_caches"][7]["kv_scales"], "none");

  const auto ck = run_json({"bench", "--model", fp8_checkpoint().string(), "--kv-cache",
                            "auto,fake", "--contexts", "16", "--threads", "1", "--repeats", "1",
                            "--decode-steps", "2", "--prefill", "8", "--no-machine", "--json"});
  ASSERT_FALSE(ck.is_null());
  ASSERT_EQ(ck["decode"].size(), 2u);
  EXPECT_EQ(ck["decode"][0]["kv"], "fp8:head");
  EXPECT_EQ(ck["decode"][1]["kv"], "fake(fp8:head)");
  EXPECT_EQ(ck["kv_caches"][0]["kv_scales"], "calibrated");
}

// --batch: B sequences per decode step (kvq serve's continuous batch), a row per (context,
// batch); the weights are read once per step, so a token's share of them is weights / B.
TEST_F(CliKvCache, BenchDecodesBatchesOfSequences) {
  const auto j = run_json({"bench", "--model", model(), "--kv-cache", "int8", "--contexts", "24",
                           "--batch", "1,3", "--threads", "1", "--repeats", "1", "--decode-steps",
                           "2", "--prefill", "8", "--no-machine", "--json"});
  ASSERT_FALSE(j.is_null());
  ASSERT_EQ(j["decode"].size(), 2u);
  const std::int64_t weights = j["weight_bytes"].get<std::int64_t>();
  const std::int64_t kv = 24 * kValuesPerToken;  // int8: one byte a value
  for (std::size_t i = 0; i < 2; ++i) {
    const std::int64_t b = i == 0 ? 1 : 3;
    EXPECT_EQ(j["decode"][i]["batch"].get<std::int64_t>(), b);
    EXPECT_EQ(j["decode"][i]["context"].get<std::int64_t>(), 24);
    EXPECT_EQ(j["decode"][i]["bytes_per_token"].get<std::int64_t>(), (weights + b * kv) / b);
    EXPECT_GT(j["decode"][i]["tok_s_best"].get<double>(), 0.0);
  }
  const CliResult r =
      run_kvq({"bench", "--model", model(), "--contexts", "24", "--batch", "2", "--threads", "1",
               "--repeats", "1", "--decode-steps", "1", "--prefill", "8", "--no-machine"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| context | batch | block |"), std::string::npos) << r.out;
  // Paged caches (kvq serve's pool): the same rows, with the block size.
  const auto paged =
      run_json({"bench", "--model",      model(), "--kv-cache",     "int8", "--contexts",
                "40",    "--batch",      "3",     "--block-size",   "16",   "--threads",
                "1",     "--repeats",    "1",     "--decode-steps", "2",    "--prefill",
                "8",     "--no-machine", "--json"});
  ASSERT_FALSE(paged.is_null());
  ASSERT_EQ(paged["decode"].size(), 1u);
  EXPECT_EQ(paged["decode"][0]["block_size"].get<std::int64_t>(), 16);
  EXPECT_EQ(paged["decode"][0]["batch"].get<std::int64_t>(), 3);
  EXPECT_GT(paged["decode"][0]["tok_s_best"].get<double>(), 0.0);
  expect_error({"bench", "--model", model(), "--batch", "0", "--no-machine"}, "--batch");
}

}  // namespace
}  // namespace kvq::test

namespace kvq::test {
namespace {

// `kvq eval --kv-cache FORMAT` evaluates a dynamic-scale scheme on the plain model (nothing to
// calibrate), labelled with its real format; an fp4 recipe runs real NVFP4 (it used to be measured
// as plain FP4 and labelled "f32, 32 bits").
TEST(CliEval, KvCacheFormatsAndTheFp4RecipeRunTheirPackedCache) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  TempDir tmp;
  const auto eval = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"-q",
                                     "eval",
                                     "--model",
                                     default_model_dir().string(),
                                     "--task",
                                     "kld",
                                     "--ctx",
                                     "256",
                                     "--max-windows",
                                     "1",
                                     "--calib-samples",
                                     "4",
                                     "--data",
                                     shared_data_dir().string(),
                                     "--cache",
                                     (tmp / "cache").string(),
                                     "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_kvq(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["scheme"];
  };
  const auto int8 = eval({"--kv-cache", "int8:head"});
  EXPECT_EQ(int8["kv_format"], "int8");
  EXPECT_EQ(int8["kv_bits_per_value"].get<double>(), 8.0);
  EXPECT_GT(int8["kld"]["mean"].get<double>(), 0.0);
  const auto nvfp4 = eval({"--recipe", (source_dir() / "examples/recipes/kv_nvfp4.yaml").string()});
  EXPECT_EQ(nvfp4["kv_format"], "nvfp4");
  EXPECT_EQ(nvfp4["kv_bits_per_value"].get<double>(), 4.5);
  EXPECT_LT(nvfp4["kld"]["mean"].get<double>(), 0.2);  // plain FP4 per head: ~0.27 (2 windows)
  const auto q4 = eval({"--kv-cache", "q4_0"});        // int4_g32: dynamic per 32 values, in-row
  EXPECT_EQ(q4["kv_format"], "int4_g32");
  EXPECT_EQ(q4["kv_bits_per_value"].get<double>(), 4.5);
  EXPECT_GT(q4["kld"]["mean"].get<double>(), 0.0);
  EXPECT_LT(q4["kld"]["mean"].get<double>(), int8["kld"]["mean"].get<double>() * 100);
  const CliResult bad = run_kvq({"eval", "--model", default_model_dir().string(), "--kv-cache",
                                 "int3", "--data", shared_data_dir().string()});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown KV cache format 'int3'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kvq::test
