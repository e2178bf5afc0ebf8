// The engine on the converted gemma-3-270m (base; scripts/fetch-model.sh --gemma; skipped when
// absent) against transformers loading the same GGUF in fp32 (tests/data/engine/
// gemma3_golden.json, tools/reference/make_gemma_model_goldens.py), on llama.cpp's token ids
// (which kvq's tokenizer gives).
//
// Tolerances: logits 2e-3 max abs (18 layers, 262144-way lm_head, fp32 with different summation
// orders; logits are O(10-30)); logsumexp 2e-3; perplexity 0.1 % relative on 2 windows of 1024
// tokens (past the 512-token sliding window), the text tokenized by kvq itself, each window
// starting with <bos> as `kvq perplexity` feeds it (eval/perplexity.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "kvq/model/causal_lm.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

using nlohmann::json;

class Gemma3Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(test::gemma_model_dir() / "config.json")) return;
    model_ = CausalLM::load(test::gemma_model_dir()).release();
    std::ifstream in(test::test_data_dir() / "engine" / "gemma3_golden.json");
    golden_ = new json(json::parse(in));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
    model_ = nullptr;
    golden_ = nullptr;
  }
  static CausalLM* model_;
  static json* golden_;
};
CausalLM* Gemma3Model::model_ = nullptr;
json* Gemma3Model::golden_ = nullptr;

TEST_F(Gemma3Model, PromptLogitsMatchTransformers) {
  KVQ_REQUIRE_GEMMA_MODEL();
  const std::int64_t vocab = model_->config().vocab_size;
  ASSERT_EQ(vocab, 262144);
  const auto sample = golden_->at("sample_ids").get<std::vector<std::int32_t>>();
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(test::gemma_model_dir());
  double worst = 0.0, worst_lse = 0.0;
  for (const json& p : golden_->at("prompts")) {
    const auto prompt = p.at("ids").get<std::vector<std::int32_t>>();
    // The reference's ids are <bos> + llama.cpp's; kvq's tokenizer gives the same.
    std::vector<std::int32_t> mine = {tokenizer.add_bos_id().value()};
    for (std::int32_t id : tokenizer.encode(p.at("text").get<std::string>())) mine.push_back(id);
    EXPECT_EQ(mine, prompt);
    KvCache cache = model_->make_cache(1, static_cast<std::int64_t>(prompt.size()));
    const Tensor logits = model_->forward(prompt, cache, LogitsMode::kAll);  // [1, S, vocab]
    const auto lse = p.at("logsumexp").get<std::vector<double>>();
    const auto argmax = p.at("argmax").get<std::vector<std::int64_t>>();
    const auto top_ids = p.at("top5_ids").get<std::vector<std::vector<std::int64_t>>>();
    const auto top = p.at("top5_logits").get<std::vector<std::vector<double>>>();
    const auto sampled = p.at("sample_logits").get<std::vector<std::vector<double>>>();
    for (std::size_t s = 0; s < prompt.size(); ++s) {
      const float* row = logits.f32() + static_cast<std::int64_t>(s) * vocab;
      const double mx = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      worst_lse = std::max(worst_lse, std::fabs(std::log(sum) + mx - lse[s]));
      EXPECT_EQ(std::max_element(row, row + vocab) - row, argmax[s]) << "position " << s;
      for (std::size_t k = 0; k < 5; ++k) {
        worst = std::max(worst, std::fabs(row[top_ids[s][k]] - top[s][k]));
      }
      for (std::size_t k = 0; k < sample.size(); ++k) {
        worst = std::max(worst, std::fabs(row[sample[k]] - sampled[s][k]));
      }
    }
  }
  std::printf("gemma3 logits: max |diff| %.3g (top-5 and sampled ids), logsumexp %.3g\n", worst,
              worst_lse);
  EXPECT_LE(worst, 2e-3);
  EXPECT_LE(worst_lse, 2e-3);
}

TEST_F(Gemma3Model, WikitextPerplexityMatchesTransformers) {
  KVQ_REQUIRE_GEMMA_MODEL();
  const json& g = golden_->at("ppl");
  const std::int64_t ctx = g.at("ctx").get<std::int64_t>();
  const std::int64_t windows = g.at("windows").get<std::int64_t>();
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(test::gemma_model_dir());
  const std::vector<std::int32_t> text = tokenizer.encode(
      test::read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw"));
  ASSERT_EQ(static_cast<std::int64_t>(text.size()), g.at("file_tokens").get<std::int64_t>());
  // The stream is <bos> + the text; each window's first token is fed as <bos>.
  const std::int32_t bos = g.at("bos").get<std::int32_t>();
  ASSERT_EQ(tokenizer.add_bos_id(), bos);
  std::vector<std::int32_t> all = {bos};
  all.insert(all.end(), text.begin(), text.end());
  const std::int64_t vocab = model_->config().vocab_size;
  constexpr std::int64_t kChunk = 128;  // logits rows per lm_head call (bounds memory)
  std::vector<float> logits(static_cast<std::size_t>(kChunk * vocab));
  const auto want = g.at("window_nll_sum").get<std::vector<double>>();
  double total = 0.0;
  for (std::int64_t w = 0; w < windows; ++w) {
    std::vector<std::int32_t> win(all.begin() + w * ctx, all.begin() + (w + 1) * ctx);
    win.front() = bos;
    EXPECT_EQ(
        std::vector<std::int32_t>(win.begin(), win.begin() + 8),
        g.at("window_first_ids")[static_cast<std::size_t>(w)].get<std::vector<std::int32_t>>());
    KvCache cache = model_->make_cache(1, ctx);
    EXPECT_TRUE(cache.keys(0).ring()) << "the sliding layers should hold rings at ctx " << ctx;
    const Tensor hidden = model_->forward_hidden(win, 1, cache);  // [1, ctx, hidden]
    double nll = 0.0;
    for (std::int64_t r0 = 0; r0 < ctx - 1; r0 += kChunk) {
      const std::int64_t rows = std::min(kChunk, ctx - 1 - r0);
      model_->compute_logits(hidden.f32() + r0 * model_->config().hidden_size, rows, logits.data());
      for (std::int64_t r = 0; r < rows; ++r) {
        const float* lr = logits.data() + r * vocab;
        const double mx = *std::max_element(lr, lr + vocab);
        double sum = 0.0;
        for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(lr[v]) - mx);
        nll +=
            std::log(sum) + mx - static_cast<double>(lr[win[static_cast<std::size_t>(r0 + r + 1)]]);
      }
    }
    EXPECT_NEAR(nll, want[static_cast<std::size_t>(w)], 1e-3 * want[static_cast<std::size_t>(w)])
        << "window " << w;
    total += nll;
  }
  const double ppl = std::exp(total / static_cast<double>(windows * (ctx - 1)));
  const double want_ppl = g.at("ppl").get<double>();
  std::printf("gemma3 wikitext-2 ppl (%lld x %lld): kvq %.6f, transformers %.6f\n",
              static_cast<long long>(windows), static_cast<long long>(ctx), ppl, want_ppl);
  EXPECT_NEAR(ppl, want_ppl, 1e-3 * want_ppl);
}

// The sliding layers' rings (512 - 1 + 256 rows, kv_cache.h) give bit for bit the logits of a
// full-length cache over an 800-token prompt (a prefill of 4 chunks that wraps them) and 30
// greedy steps, on a packed cache (int4_g32: the ring's runs inside the packed dot products); the
// perplexity test above runs the f32 rings against transformers.
TEST_F(Gemma3Model, SlidingWindowRingEqualsFullCache) {
  KVQ_REQUIRE_GEMMA_MODEL();
  const ModelConfig& c = model_->config();
  const tok::Tokenizer tokenizer = tok::Tokenizer::from_dir(test::gemma_model_dir());
  std::vector<std::int32_t> prompt = tokenizer.encode(
      test::read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw")
          .substr(0, 8000));
  ASSERT_GE(prompt.size(), 800u);
  prompt.resize(800);
  constexpr std::int64_t kSteps = 30, kCapacity = 800 + kSteps;
  const KvCacheConfig kv = KvCacheConfig::dynamic(KvFormat::kINT4G32);
  KvCache ring = model_->make_cache(1, kCapacity, kv);
  KvCache full(c.num_hidden_layers, 1, c.num_key_value_heads, c.head_dim, kCapacity, kv);
  ASSERT_TRUE(ring.keys(0).ring());
  ASSERT_EQ(ring.rows(0), 512 - 1 + 256);
  Tensor a = model_->forward(prompt, ring), b = model_->forward(prompt, full);
  for (std::int64_t s = 0; s <= kSteps; ++s) {
    ASSERT_EQ(a.to_f32_vector(), b.to_f32_vector()) << kv.label() << " step " << s;
    if (s == kSteps) break;
    const std::int32_t next[1] = {
        static_cast<std::int32_t>(std::max_element(a.f32(), a.f32() + a.numel()) - a.f32())};
    a = model_->forward(next, ring);
    b = model_->forward(next, full);
  }
  EXPECT_EQ(ring.first_position(0), kCapacity - ring.rows(0));
  // What the rings save: the KV bytes of one 32K-token sequence.
  const KvCacheConfig bf16 = KvCacheConfig::of(KvFormat::kBF16);
  const std::int64_t with_rings = model_->cache_bytes(1, 32768, bf16);
  const std::int64_t full_length = KvCache::allocated_bytes(
      c.num_hidden_layers, 1, c.num_key_value_heads, c.head_dim, 32768, bf16);
  std::printf("gemma-3-270m bf16 KV for 32768 tokens: %.1f MB with rings, %.1f MB full-length\n",
              static_cast<double>(with_rings) / 1e6, static_cast<double>(full_length) / 1e6);
  EXPECT_LT(with_rings * 5, full_length);
}

}  // namespace
}  // namespace kvq::model
