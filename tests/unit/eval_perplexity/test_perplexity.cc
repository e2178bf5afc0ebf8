// Perplexity windowing and NLL on the tiny GQA Llama (tests/data/tiny_llama/gqa), against NLL
// computed here from the reference (transformers) logits in tiny_llama/gqa/golden.safetensors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/eval/perplexity.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/causal_lm.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

std::filesystem::path tiny_dir() { return test::test_data_dir() / "tiny_llama" / "gqa"; }

std::vector<std::int32_t> ids_of(const io::SafetensorsFile& f, const std::string& name) {
  std::vector<std::int32_t> out;  // [S]; the golden stores an integer dtype (exact in fp32)
  for (float v : f.tensor(name).to_f32_vector()) out.push_back(static_cast<std::int32_t>(v));
  return out;
}

// Independent of token_nll(): log(sum exp(l - max)) + max - l[target], in double.
double nll_of_row(const float* logits, std::int64_t vocab, std::int32_t target) {
  double mx = logits[0];
  for (std::int64_t i = 1; i < vocab; ++i) mx = std::max<double>(mx, logits[i]);
  double s = 0.0;
  for (std::int64_t i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(logits[i]) - mx);
  return std::log(s) + mx - logits[target];
}

// Sum of NLL of targets ids[first+1 .. last] (inclusive) from logits rows [first .. last-1]
// (row r predicts ids[r + 1]). logits [S, vocab].
double nll_sum(const float* logits, std::int64_t vocab, const std::vector<std::int32_t>& ids,
               std::int64_t first_row, std::int64_t end_row) {
  double s = 0.0;
  for (std::int64_t r = first_row; r < end_row; ++r) {
    s += nll_of_row(logits + r * vocab, vocab, ids[static_cast<std::size_t>(r + 1)]);
  }
  return s;
}

TEST(PlanWindows, DisjointWindowsScoreCtxMinusOne) {
  const auto w = plan_windows(20, 7, 7);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 7);
  EXPECT_EQ(w[0].score_begin, 1);
  EXPECT_EQ(w[1].begin, 7);
  EXPECT_EQ(w[1].end, 14);
  EXPECT_EQ(w[1].score_begin, 8);
  EXPECT_EQ(w[2].begin, 14);
  EXPECT_EQ(w[2].end, 20);
  EXPECT_EQ(w[2].score_begin, 15);
  EXPECT_EQ(w[1].scored(), 6);
  EXPECT_EQ(w[2].scored(), 5);  // the partial tail window
}

TEST(PlanWindows, OneTokenTailIsDropped) {
  const auto w = plan_windows(15, 7, 7);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[1].end, 14);
}

TEST(PlanWindows, StridedScoresOnlyTheNewTargets) {
  // HF strided: targets scored exactly once, each window adds end_i - end_{i-1} targets.
  const auto w = plan_windows(13, 7, 3);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 7);
  EXPECT_EQ(w[0].score_begin, 1);
  EXPECT_EQ(w[1].begin, 3);
  EXPECT_EQ(w[1].end, 10);
  EXPECT_EQ(w[1].score_begin, 7);
  EXPECT_EQ(w[2].begin, 6);
  EXPECT_EQ(w[2].end, 13);
  EXPECT_EQ(w[2].score_begin, 10);
  std::int64_t total = 0;
  for (const auto& x : w) total += x.scored();
  EXPECT_EQ(total, 12);  // every token but the first, once
}

TEST(PlanWindows, MaxWindowsAndBadArguments) {
  EXPECT_EQ(plan_windows(100, 10, 10, 3).size(), 3u);
  EXPECT_EQ(plan_windows(100, 10, 10, 0).size(), 10u);
  EXPECT_THROW(plan_windows(100, 1, 1), InvalidArgument);
  EXPECT_THROW(plan_windows(100, 10, 0), InvalidArgument);
  EXPECT_THROW(plan_windows(100, 10, 11), InvalidArgument);
  EXPECT_THROW(plan_windows(100, 10, 10, -1), InvalidArgument);
}

TEST(TokenNll, HandComputed) {
  const std::vector<float> l = {1.0f, 2.0f, 3.0f};
  const double want = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  EXPECT_NEAR(token_nll(l, 2), want, 1e-14);
  // Large logits: no overflow (max subtracted); log(1 + e^-1000) = 0 in double.
  const std::vector<float> big = {1000.0f, 0.0f};
  EXPECT_NEAR(token_nll(big, 0), 0.0, 1e-14);
  EXPECT_NEAR(token_nll(big, 1), 1000.0, 1e-9);
}

class TinyPerplexity : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = model::CausalLM::load(tiny_dir());
    golden_.emplace(io::SafetensorsFile::open(tiny_dir() / "golden.safetensors"));
    p0_ = ids_of(*golden_, "prompt0.input_ids");  // 7 tokens
    p1_ = ids_of(*golden_, "prompt1.input_ids");  // 13 tokens
    vocab_ = model_->config().vocab_size;
  }
  std::unique_ptr<model::CausalLM> model_;
  std::optional<io::SafetensorsFile> golden_;
  std::vector<std::int32_t> p0_, p1_;
  std::int64_t vocab_ = 0;
};

// Two windows, ctx 13: [prompt1 | prompt0]; window 0 = prompt1 (12 targets), window 1 = prompt0
// as a partial tail window from a fresh cache (6 targets). Expected NLL from the reference
// prefill logits of each prompt.
TEST_F(TinyPerplexity, TwoWindowsMatchReferenceLogits) {
  std::vector<std::int32_t> ids = p1_;
  ids.insert(ids.end(), p0_.begin(), p0_.end());
  const Tensor l1 = golden_->tensor("prompt1.prefill_logits");  // [13, vocab]
  const Tensor l0 = golden_->tensor("prompt0.prefill_logits");  // [7, vocab]
  const double w0 = nll_sum(l1.f32(), vocab_, p1_, 0, 12);
  {
    // Precondition: the engine reproduces the reference logits (else the NLL check below only
    // reports a forward-pass difference).
    const Tensor mine = model_->forward(p1_, model::LogitsMode::kAll);  // [13, vocab]
    float maxdiff = 0.0f;
    for (std::int64_t i = 0; i < mine.numel(); ++i) {
      maxdiff = std::max(maxdiff, std::abs(mine.f32()[i] - l1.f32()[i]));
    }
    ASSERT_LT(maxdiff, 1e-4f) << "engine logits differ from the reference";
  }
  const double w1 = nll_sum(l0.f32(), vocab_, p0_, 0, 6);

  PerplexityOptions opt;
  opt.ctx = 13;
  opt.progress = false;
  const PerplexityResult r = perplexity(*model_, ids, opt);
  ASSERT_EQ(r.windows, 2);
  EXPECT_EQ(r.tokens_scored, 18);
  EXPECT_EQ(r.tokens_evaluated, 20);
  ASSERT_EQ(r.window_nll_sum.size(), 2u);
  // The engine's logits match transformers' to ~2e-6 (tiny_llama golden checks); a logit error
  // e moves one NLL term by at most 2e, so 18 terms stay within 1e-4.
  EXPECT_NEAR(r.window_nll_sum[0], w0, 1e-4);
  EXPECT_NEAR(r.window_nll_sum[1], w1, 1e-4);
  EXPECT_NEAR(r.nll_sum, w0 + w1, 2e-4);
  EXPECT_NEAR(r.ppl, std::exp((w0 + w1) / 18.0), 1e-5 * r.ppl);
  EXPECT_DOUBLE_EQ(r.nll_mean, r.nll_sum / 18.0);
  // A random 256-way model scores near log(256) per token: sanity that the test is not vacuous.
  EXPECT_GT(r.nll_mean, 1.0);
}

// Strided windows (ctx 7, stride 3) over prompt1: window 0 from the reference logits, the later
// windows from fresh engine forwards of exactly their tokens.
TEST_F(TinyPerplexity, StridedScoresLastStrideTargets) {
  const Tensor l1 = golden_->tensor("prompt1.prefill_logits");  // [13, vocab]
  double want = nll_sum(l1.f32(), vocab_, p1_, 0, 6);           // targets 1..6
  for (const auto& [begin, first_target] : {std::pair{3, 7}, std::pair{6, 10}}) {
    const std::vector<std::int32_t> win(p1_.begin() + begin, p1_.begin() + begin + 7);
    const Tensor l = model_->forward(win, model::LogitsMode::kAll);  // [7, vocab]
    want += nll_sum(l.f32(), vocab_, win, first_target - begin - 1, 6);
  }
  PerplexityOptions opt;
  opt.ctx = 7;
  opt.stride = 3;
  opt.progress = false;
  const PerplexityResult r = perplexity(*model_, p1_, opt);
  EXPECT_EQ(r.windows, 3);
  EXPECT_EQ(r.tokens_scored, 12);
  EXPECT_NEAR(r.nll_sum, want, 1e-4);
}

TEST_F(TinyPerplexity, BatchAndChunkingDoNotChangeTheResult) {
  std::vector<std::int32_t> ids = p1_;
  ids.insert(ids.end(), p0_.begin(), p0_.end());  // 20 tokens: two windows of 10
  PerplexityOptions opt;
  opt.ctx = 10;
  opt.progress = false;
  const PerplexityResult one = perplexity(*model_, ids, opt);
  opt.batch = 2;
  opt.logits_chunk = 4;
  const PerplexityResult two = perplexity(*model_, ids, opt);
  ASSERT_EQ(one.windows, 2);
  ASSERT_EQ(two.windows, 2);
  for (int i = 0; i < 2; ++i) {
    // Same math; only the matmul blocking may differ (batched rows): fp32 rounding.
    EXPECT_NEAR(one.window_nll_sum[i], two.window_nll_sum[i], 1e-4) << "window " << i;
  }
}

// options.bos: every window's first token is fed as BOS (llama-perplexity's convention). That is
// the same as writing BOS at each window's start into the stream: a window's first token is
// never one of its targets, so the scored targets do not change.
TEST_F(TinyPerplexity, BosReplacesEachWindowsFirstToken) {
  std::vector<std::int32_t> ids = p1_;
  ids.insert(ids.end(), p0_.begin(), p0_.end());  // 20 tokens: two windows of 10
  constexpr std::int32_t kBos = 1;
  PerplexityOptions opt;
  opt.ctx = 10;
  opt.progress = false;
  std::vector<std::int32_t> written = ids;
  written[0] = written[10] = kBos;
  const PerplexityResult want = perplexity(*model_, written, opt);
  opt.bos = kBos;
  const PerplexityResult got = perplexity(*model_, ids, opt);
  ASSERT_EQ(got.windows, 2);
  EXPECT_EQ(got.tokens_scored, want.tokens_scored);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(got.window_nll_sum[i], want.window_nll_sum[i]);
  const PerplexityResult plain = perplexity(*model_, ids, PerplexityOptions{.ctx = 10});
  EXPECT_NE(plain.window_nll_sum[1], got.window_nll_sum[1]);  // window 1 did change
  opt.batch = 2;
  const PerplexityResult batched = perplexity(*model_, ids, opt);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(batched.window_nll_sum[i], want.window_nll_sum[i], 1e-4);
  const PerplexityWindow w{.begin = 10, .end = 14, .score_begin = 11};
  EXPECT_EQ(window_ids(ids, w, kBos), (std::vector<std::int32_t>{kBos, ids[11], ids[12], ids[13]}));
  EXPECT_EQ(window_ids(ids, w, std::nullopt),
            (std::vector<std::int32_t>{ids[10], ids[11], ids[12], ids[13]}));
}

// score_last_half (llama-perplexity's scoring): each full window scores its positions
// [ctx/2 + 1, ctx); a partial tail window is dropped; stride must be ctx.
TEST_F(TinyPerplexity, ScoreLastHalfIsLlamaPerplexitysAverage) {
  std::vector<std::int32_t> ids = p1_;
  ids.insert(ids.end(), p0_.begin(), p0_.end());
  ids.push_back(ids[3]);  // 21 tokens: two full windows of 10 and a 1-token tail
  PerplexityOptions opt;
  opt.ctx = 10;
  opt.progress = false;
  const PerplexityResult all = perplexity(*model_, ids, opt);
  opt.score_last_half = true;
  const PerplexityResult half = perplexity(*model_, ids, opt);
  ASSERT_EQ(half.windows, 2);
  EXPECT_EQ(half.tokens_scored, 2 * (10 - 5 - 1));
  for (int i = 0; i < 2; ++i) EXPECT_LT(half.window_nll_sum[i], all.window_nll_sum[i]);
  opt.stride = 5;
  EXPECT_THROW(perplexity(*model_, ids, opt), InvalidArgument);
  opt.stride = 0;
  EXPECT_THROW(perplexity(*model_, std::vector<std::int32_t>(ids.begin(), ids.begin() + 9), opt),
               InvalidArgument);
}

// decode_from: the tokens after the first N go one at a time through the decode path. With an
// fp32 cache that is the same model, so the NLL still matches the reference prefill logits;
// with int8 K and the opt-in int8-query scores (+q8), which only the decode path runs, it moves.
TEST_F(TinyPerplexity, TeacherForcedDecodeScoresTheDecodePath) {
  std::vector<std::int32_t> ids = p1_;
  ids.insert(ids.end(), p0_.begin(), p0_.end());
  const Tensor l1 = golden_->tensor("prompt1.prefill_logits");  // [13, vocab]
  const Tensor l0 = golden_->tensor("prompt0.prefill_logits");  // [7, vocab]
  PerplexityOptions opt;
  opt.ctx = 13;
  opt.progress = false;
  opt.batch = 2;  // ignored with decode_from: one window at a time
  for (std::int64_t from : {1, 3, 12, 13, 50}) {
    opt.decode_from = from;
    const PerplexityResult r = perplexity(*model_, ids, opt);
    ASSERT_EQ(r.windows, 2) << from;
    EXPECT_EQ(r.tokens_scored, 18) << from;
    // As TwoWindowsMatchReferenceLogits: logits within ~2e-6 of the reference.
    EXPECT_NEAR(r.window_nll_sum[0], nll_sum(l1.f32(), vocab_, p1_, 0, 12), 1e-4) << from;
    EXPECT_NEAR(r.window_nll_sum[1], nll_sum(l0.f32(), vocab_, p0_, 0, 6), 1e-4) << from;
  }
  opt.decode_from = 2;
  opt.kv_cache = model::KvCacheConfig::dynamic(quant::KvFormat::kINT8);
  const PerplexityResult exact = perplexity(*model_, ids, opt);
  opt.kv_cache.int8_query_scores = true;
  const PerplexityResult q8 = perplexity(*model_, ids, opt);
  EXPECT_NE(exact.nll_sum, q8.nll_sum);
  EXPECT_NEAR(exact.nll_sum, q8.nll_sum, 0.05 * exact.nll_sum);
  opt.decode_from = 0;  // a whole-window prefill never runs the +q8 scores
  const PerplexityResult q8_prefill = perplexity(*model_, ids, opt);
  opt.kv_cache.int8_query_scores = false;
  EXPECT_EQ(q8_prefill.nll_sum, perplexity(*model_, ids, opt).nll_sum);
}

TEST_F(TinyPerplexity, BadInput) {
  PerplexityOptions opt;
  opt.progress = false;
  const std::vector<std::int32_t> one = {5};
  EXPECT_THROW(perplexity(*model_, one, opt), InvalidArgument);
  const std::vector<std::int32_t> bad = {5, 999};  // vocab is 256
  opt.ctx = 2;
  EXPECT_THROW(perplexity(*model_, bad, opt), InvalidArgument);
  opt.batch = 0;
  EXPECT_THROW(perplexity(*model_, p0_, opt), InvalidArgument);
  opt.batch = 1;
  opt.decode_from = -1;
  EXPECT_THROW(perplexity(*model_, p0_, opt), InvalidArgument);
}

}  // namespace
}  // namespace kvq::eval
