// The engine against transformers on the tiny random Llamas (tests/data/tiny_llama/*: GQA with
// default RoPE and separate lm_head; llama3 rope scaling with tied embeddings).
//
// Tolerance 1e-5 max abs on logits / states of magnitude ~1-10: transformers (eager, fp32) and
// kvq do the same fp32 math with different summation orders (BLAS blocking, online softmax), a
// few ulps per op; any real mistake (a rope pair, a mask, a norm) is orders of magnitude larger.
#include <fstream>

#include <nlohmann/json.hpp>

#include "tiny_model.h"

namespace kvq::model::test {
namespace {

constexpr float kTol = 1e-5f;

class TinyGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = tiny_dir(GetParam());
    if (!std::filesystem::exists(dir_ / "golden.safetensors")) GTEST_SKIP() << "no golden";
    model_ = CausalLM::load(dir_);
    golden_ = std::make_unique<io::SafetensorsFile>(
        io::SafetensorsFile::open(dir_ / "golden.safetensors"));
  }
  Tensor g(const std::string& name) const { return golden_->tensor(name).to_f32(); }

  std::filesystem::path dir_;
  std::unique_ptr<CausalLM> model_;
  std::unique_ptr<io::SafetensorsFile> golden_;
};

TEST_P(TinyGolden, PrefillAndDecodeLogits) {
  const model::ModelConfig& c = model_->config();
  for (int p = 0; p < 2; ++p) {
    const std::string pre = "prompt" + std::to_string(p) + ".";
    const std::vector<std::int32_t> ids = ids_of(golden_->tensor(pre + "input_ids"));
    const std::vector<std::int32_t> steps = ids_of(golden_->tensor(pre + "decode_tokens"));
    KvCache cache = model_->make_cache(1, 64);
    const Tensor logits = model_->forward(ids, cache, LogitsMode::kAll);
    EXPECT_LE(max_abs_diff(logits, g(pre + "prefill_logits")), kTol) << pre << "prefill";

    // Post-RoPE keys and values in the cache after the prefill.
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string lp = pre + "layer" + std::to_string(l) + ".";
      const auto n = static_cast<std::int64_t>(ids.size());
      const std::vector<float> k = cache.keys(l).read(n), v = cache.values(l).read(n);
      const Tensor gk = g(lp + "key"), gv = g(lp + "value");
      ASSERT_EQ(static_cast<std::int64_t>(k.size()), gk.numel());
      EXPECT_LE(max_abs_diff(k.data(), gk.f32(), gk.numel()), kTol) << lp << "key";
      EXPECT_LE(max_abs_diff(v.data(), gv.f32(), gv.numel()), kTol) << lp << "value";
    }

    // Greedy decode: our argmax must pick the golden tokens, and logits stay close.
    const Tensor want = g(pre + "decode_logits");
    const auto vocab = c.vocab_size;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const std::int32_t t[1] = {steps[i]};
      const Tensor step = model_->forward(t, cache, LogitsMode::kLast);
      EXPECT_LE(max_abs_diff(step.f32(), want.f32() + static_cast<std::int64_t>(i) * vocab, vocab),
                kTol)
          << pre << "decode step " << i;
      if (i + 1 < steps.size()) {
        const auto argmax = std::max_element(step.f32(), step.f32() + vocab) - step.f32();
        EXPECT_EQ(argmax, steps[i + 1]) << pre << "greedy step " << i;
      }
    }
  }
}

TEST_P(TinyGolden, Layer0QueryThroughTheHook) {
  for (int p = 0; p < 2; ++p) {
    const std::string pre = "prompt" + std::to_string(p) + ".";
    const std::vector<std::int32_t> ids = ids_of(golden_->tensor(pre + "input_ids"));
    std::vector<float> seen;
    ScopedHook hook(model_->attention(0).register_query_hook(
        [&](AttentionModule&, StatesView q) { seen.assign(q.data, q.data + q.numel()); }));
    model_->forward(ids, LogitsMode::kLast);
    const Tensor want = g(pre + "layer0.query");
    ASSERT_EQ(static_cast<std::int64_t>(seen.size()), want.numel());
    EXPECT_LE(max_abs_diff(seen.data(), want.f32(), want.numel()), kTol) << pre;
  }
}

TEST_P(TinyGolden, BatchedForward) {
  const std::vector<std::int32_t> ids = ids_of(golden_->tensor("batch.input_ids"));
  const Tensor logits = model_->forward_batch(ids, 2, LogitsMode::kAll);
  EXPECT_EQ(logits.shape(), (Shape{2, 7, model_->config().vocab_size}));
  EXPECT_LE(max_abs_diff(logits, g("batch.logits")), kTol);
}

TEST_P(TinyGolden, NamedModulesMatchTransformers) {
  std::ifstream in(dir_ / "named_modules.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json want = nlohmann::json::parse(in);
  const std::vector<Module*> got = model_->named_modules();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->name(), want[i][0].get<std::string>()) << i;
    EXPECT_EQ(got[i]->class_name(), want[i][1].get<std::string>()) << got[i]->name();
    EXPECT_EQ(got[i]->class_hierarchy(), want[i][2].get<std::vector<std::string>>())
        << got[i]->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TinyGolden, ::testing::Values("gqa", "llama3_tied"));

}  // namespace
}  // namespace kvq::model::test
