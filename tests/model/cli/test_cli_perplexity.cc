// `kvq perplexity` on the first 8 windows of 2048 tokens of wikitext-2 test against the PPL of
// transformers (tests/data/engine/smollm2_golden.safetensors: ppl.ppl, ppl.window_nll_sum; the
// definition is the golden's "ppl_definition" metadata and matches src/kvq/eval/perplexity.h
// with ctx = stride = 2048). The only heavy perplexity run among the model tests: 8 × 2048
// tokens through the 135M model, about a minute on 2 cores.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "kvq/io/safetensors.h"
#include "support/test_paths.h"

namespace kvq::test {
namespace {

TEST(CliPerplexity, WikitextEightWindowsMatchTransformers) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const auto golden = test_data_dir() / "engine" / "smollm2_golden.safetensors";
  ASSERT_TRUE(std::filesystem::exists(golden)) << golden;
  const auto text = shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw";
  ASSERT_TRUE(std::filesystem::exists(text)) << text;
  const auto g = io::SafetensorsFile::open(golden);
  const Tensor want_ppl_t = g.tensor("ppl.ppl");               // fp64 [1]
  const Tensor want_windows = g.tensor("ppl.window_nll_sum");  // fp64 [8]
  ASSERT_EQ(want_ppl_t.dtype(), DType::kF64);
  ASSERT_EQ(want_windows.dtype(), DType::kF64);
  ASSERT_EQ(want_windows.numel(), 8);
  const double want_ppl = *static_cast<const double*>(want_ppl_t.data());
  const auto* want_nll = static_cast<const double*>(want_windows.data());

  const auto t0 = std::chrono::steady_clock::now();
  const CliResult r = run_kvq({"perplexity", "--model", default_model_dir().string(), "--text",
                               text.string(), "--ctx", "2048", "--max-windows", "8", "--json"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["windows"].get<int>(), 8);
  EXPECT_EQ(j["tokens_scored"].get<int>(), 8 * 2047);
  const auto windows = j["window_nll_sum"].get<std::vector<double>>();
  ASSERT_EQ(windows.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    // Per window, for locating a divergence: 0.1% of the window's NLL sum.
    EXPECT_NEAR(windows[i], want_nll[i], 1e-3 * std::abs(want_nll[i])) << "window " << i;
  }
  // The engine is fp32 like the reference but sums in another order (blocked GEMM, tiled
  // attention): logits differ by ~1e-5 relative, far below the 0.1% PPL tolerance asked for.
  const double ppl = j["ppl"].get<double>();
  EXPECT_NEAR(ppl, want_ppl, 1e-3 * want_ppl);
  std::printf("kvq ppl %.6f, transformers %.6f (rel diff %.2e); %.1f s wall, %.0f tok/s\n", ppl,
              want_ppl, std::abs(ppl - want_ppl) / want_ppl, seconds,
              j["tokens_per_second"].get<double>());
}

TEST(CliPerplexity, BadArgumentsFailWithAMessage) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const auto text = shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw";
  CliResult r = run_kvq({"perplexity", "--model", default_model_dir().string(), "--text",
                         text.string(), "--ctx", "16", "--stride", "32"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("stride must be in"), std::string::npos) << r.err;
  r = run_kvq(
      {"perplexity", "--model", default_model_dir().string(), "--text", "/nonexistent/file.txt"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/file.txt"), std::string::npos) << r.err;
  r = run_kvq({"perplexity", "--model", default_model_dir().string(), "--text", text.string(),
               "--decode-from", "-1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--decode-from: Value -1 not in range 0 to"), std::string::npos) << r.err;
  r = run_kvq({"perplexity", "--model", default_model_dir().string(), "--text", text.string(),
               "--decode-from", "8", "--batch", "2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--decode-from runs one window at a time; drop --batch 2"),
            std::string::npos)
      << r.err;
}

// --decode-from on the default model: a short window whose last tokens run through the decode
// path scores like the whole-window prefill (fp32 cache), and the note names where dynamic
// scales come from.
TEST(CliPerplexity, DecodeFromScoresLikeThePrefill) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const auto text = shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw";
  const std::vector<std::string> base = {
      "perplexity", "--model",       default_model_dir().string(),
      "--text",     text.string(),   "--ctx",
      "48",         "--max-windows", "1",
      "--json"};
  const CliResult prefill = run_kvq(base);
  ASSERT_EQ(prefill.exit_code, 0) << prefill.err;
  auto args = base;
  args.insert(args.end(), {"--decode-from", "40"});
  const CliResult decode = run_kvq(args);
  ASSERT_EQ(decode.exit_code, 0) << decode.err;
  const auto a = nlohmann::json::parse(prefill.out), b = nlohmann::json::parse(decode.out);
  EXPECT_EQ(b["decode_from"].get<int>(), 40);
  EXPECT_EQ(a["tokens_scored"], b["tokens_scored"]);
  // Same model, other summation order in the decode kernels: fp32 rounding only.
  EXPECT_NEAR(a["nll_sum"].get<double>(), b["nll_sum"].get<double>(),
              1e-5 * a["nll_sum"].get<double>());
  args.insert(args.end(), {"--kv-cache", "int8:head+q8"});
  const CliResult q8 = run_kvq(args);
  ASSERT_EQ(q8.exit_code, 0) << q8.err;
  EXPECT_NE(q8.err.find("fixed from the absmax of each window's first 40 tokens"),
            std::string::npos)
      << q8.err;
  EXPECT_EQ(nlohmann::json::parse(q8.out)["kv_cache"], "int8:head+q8");
}

}  // namespace
}  // namespace kvq::test
