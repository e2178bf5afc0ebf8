// The engine on the converted default model (SmolLM2-135M-Instruct, fp32) against transformers
// goldens (tests/data/engine/smollm2_golden.safetensors, tools/reference/make_engine_goldens.py).
//
// Tolerances: logits 1e-3 max abs (30 layers of fp32 with different summation orders; the
// reference's own cached-vs-uncached spread is 5.5e-5, logits are O(10)); post-RoPE K/V 1e-4;
// perplexity 0.1% relative (the reference computes the NLL in fp64 from fp32 logits, as we do).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kvq/io/safetensors.h"
#include "kvq/model/causal_lm.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

std::vector<std::int32_t> ids(const Tensor& t) {
  std::vector<std::int32_t> out;
  for (float v : t.to_f32_vector()) out.push_back(static_cast<std::int32_t>(v));
  return out;
}

float max_diff(const float* a, const float* b, std::int64_t n) {
  float m = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

class DefaultModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(test::default_model_dir() / "config.json")) return;
    model_ = CausalLM::load(test::default_model_dir()).release();
    golden_ = new io::SafetensorsFile(
        io::SafetensorsFile::open(test::test_data_dir() / "engine" / "smollm2_golden.safetensors"));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
    model_ = nullptr;
    golden_ = nullptr;
  }
  static Tensor g(const std::string& name) { return golden_->tensor(name).to_f32(); }

  static CausalLM* model_;
  static io::SafetensorsFile* golden_;
};
CausalLM* DefaultModel::model_ = nullptr;
io::SafetensorsFile* DefaultModel::golden_ = nullptr;

TEST_F(DefaultModel, PrefillAndGreedyDecodeLogits) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const std::vector<std::int32_t> sel = ids(golden_->tensor("sel_ids"));
  const std::int64_t vocab = model_->config().vocab_size;
  for (int p = 0; p < 3; ++p) {
    const std::string pre = "prompt" + std::to_string(p) + ".";
    const std::vector<std::int32_t> prompt = ids(golden_->tensor(pre + "input_ids"));
    const std::vector<std::int32_t> tokens = ids(golden_->tensor(pre + "decode_tokens"));
    const std::vector<std::int32_t> argmax = ids(golden_->tensor(pre + "decode_argmax"));
    const Tensor sel_logits = g(pre + "decode_sel_logits");  // [32, 64]
    const Tensor max_logit = g(pre + "decode_max_logit");
    KvCache cache = model_->make_cache(1, 128);
    const Tensor last = model_->forward(prompt, cache, LogitsMode::kLast);
    const Tensor want_last = g(pre + "prefill_last_logits");
    EXPECT_LE(max_diff(last.f32(), want_last.f32(), vocab), 1e-3f) << pre << "prefill";
    EXPECT_EQ(std::max_element(last.f32(), last.f32() + vocab) - last.f32(), tokens[0]) << pre;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::int32_t t[1] = {tokens[i]};
      const Tensor step = model_->forward(t, cache, LogitsMode::kLast);
      const float* d = step.f32();
      float worst = 0.0f;
      for (std::size_t j = 0; j < sel.size(); ++j) {
        worst = std::max(worst, std::fabs(d[sel[j]] - sel_logits.f32()[i * sel.size() + j]));
      }
      EXPECT_LE(worst, 1e-3f) << pre << "decode step " << i;
      const auto am = std::max_element(d, d + vocab) - d;
      EXPECT_EQ(am, argmax[i]) << pre << "decode step " << i;
      EXPECT_NEAR(d[am], max_logit.f32()[i], 1e-3f) << pre << "decode step " << i;
    }
  }
}

TEST_F(DefaultModel, PostRopeKeysAndValues) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const std::vector<std::int32_t> prompt = ids(golden_->tensor("prompt0.input_ids"));
  KvCache cache = model_->make_cache(1, 16);
  model_->forward(prompt, cache, LogitsMode::kLast);
  for (int l : {0, 15, 29}) {
    const std::string lp = "prompt0.layer" + std::to_string(l) + ".";
    const auto n = static_cast<std::int64_t>(prompt.size());
    const std::vector<float> k = cache.keys(l).read(n), v = cache.values(l).read(n);
    const Tensor gk = g(lp + "key"), gv = g(lp + "value");
    ASSERT_EQ(static_cast<std::int64_t>(k.size()), gk.numel());
    EXPECT_LE(max_diff(k.data(), gk.f32(), gk.numel()), 1e-4f) << lp << "key";
    EXPECT_LE(max_diff(v.data(), gv.f32(), gv.numel()), 1e-4f) << lp << "value";
  }
}

TEST_F(DefaultModel, NamedModulesMatchTransformers) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  std::ifstream in(test::test_data_dir() / "engine" / "named_modules.json");
  const nlohmann::json want = nlohmann::json::parse(in);
  const std::vector<Module*> got = model_->named_modules();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->name(), want[i][0].get<std::string>());
    EXPECT_EQ(got[i]->class_hierarchy(), want[i][2].get<std::vector<std::string>>());
  }
}

// The engine's NLL of the first golden window (2048 tokens, golden token ids, so no tokenizer in
// the loop). All 8 windows and the final perplexity are checked end to end through
// `kvq perplexity` in tests/model/cli; running them twice would double the slowest model test.
TEST_F(DefaultModel, NllOfFirstPerplexityWindow) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  const Tensor windows = golden_->tensor("ppl.window_ids");  // [8, 2048]
  const std::vector<std::int32_t> all = ids(windows);
  const std::int64_t n_win = 1, len = windows.dim(1);
  const std::int64_t vocab = model_->config().vocab_size;
  const std::vector<float> want_nll = golden_->tensor("ppl.window_nll_sum").to_f32_vector();
  constexpr std::int64_t kChunk = 256;  // logits rows per lm_head call (bounds memory)
  std::vector<float> logits(static_cast<std::size_t>(kChunk * vocab));
  for (std::int64_t w = 0; w < n_win; ++w) {
    KvCache cache = model_->make_cache(1, len);
    const std::span<const std::int32_t> win(all.data() + w * len, static_cast<std::size_t>(len));
    const Tensor hidden = model_->forward_hidden(win, 1, cache);  // [1, len, hidden]
    double nll = 0.0;
    for (std::int64_t r0 = 0; r0 < len - 1; r0 += kChunk) {
      const std::int64_t rows = std::min(kChunk, len - 1 - r0);
      model_->compute_logits(hidden.f32() + r0 * model_->config().hidden_size, rows, logits.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* lr = logits.data() + r * vocab;
        const double mx = *std::max_element(lr, lr + vocab);
        double sum = 0.0;
        for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(lr[v]) - mx);
        const std::int32_t target = win[static_cast<std::size_t>(r0 + r + 1)];
        nll += std::log(sum) + mx - static_cast<double>(lr[target]);
      }
    }
    EXPECT_NEAR(nll, want_nll[static_cast<std::size_t>(w)],
                1e-3 * want_nll[static_cast<std::size_t>(w)])
        << "window " << w;
  }
}

}  // namespace
}  // namespace kvq::model
