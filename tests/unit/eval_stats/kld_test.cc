// KL divergence math, the top-K logits cache, and the KLD drivers on the tiny random Llama.
#include "kvq/eval/kld.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/threading.h"
#include "kvq/eval/logits_cache.h"
#include "kvq/eval/stats.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

std::vector<float> random_logits(std::size_t vocab, std::uint64_t seed, double scale) {
  BootstrapIndexSampler s(seed);
  std::vector<float> out(vocab);
  for (float& x : out)
    x = static_cast<float>(scale * (static_cast<double>(s.below(1 << 20)) / (1 << 20) - 0.5));
  return out;
}

TEST(TokenKl, HandComputedTwoTokenCase) {
  // P = softmax(0, log 3) = (1/4, 3/4); Q = (1/2, 1/2):
  // KL = 1/4 log(1/2) + 3/4 log(3/2).
  const std::vector<float> p{0.0f, static_cast<float>(std::log(3.0))}, q{5.0f, 5.0f};
  const TokenKl t = token_kl_full(p, q, 0);
  EXPECT_NEAR(t.kl, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);  // float logits
  EXPECT_NEAR(t.base_nll, std::log(4.0), 1e-7);
  EXPECT_NEAR(t.quant_nll, std::log(2.0), 1e-12);
  EXPECT_FALSE(t.top1_match);  // argmax P = 1, argmax Q = 0 (tie: lowest id)
}

TEST(TokenKl, IdenticalDistributionsGiveExactlyZero) {
  const auto a = random_logits(1000, 1, 20.0);
  const TokenKl full = token_kl_full(a, a, 3);
  EXPECT_EQ(full.kl, 0.0);
  EXPECT_TRUE(full.top1_match);
  EXPECT_EQ(full.base_nll, full.quant_nll);
  std::vector<std::int32_t> ids(16);
  std::vector<float> logp(16);
  float rest = 0;
  double nll = 0;
  topk_summary(a, 3, 16, ids, logp, rest, nll);
  const TokenKl approx = token_kl_topk({nll, rest, ids, logp}, a, 3);
  EXPECT_EQ(approx.kl, 0.0);
  EXPECT_TRUE(approx.top1_match);
  EXPECT_GE(approx.kl_upper, 0.0);
}

TEST(TokenKl, TopKBoundsBracketExactKl) {
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const auto p = random_logits(500, 100 + seed, 12.0);
    auto q = p;
    const auto noise = random_logits(500, 200 + seed, 1.0 + static_cast<double>(seed % 4));
    for (std::size_t i = 0; i < q.size(); ++i) q[i] += noise[i];
    const double exact = token_kl_full(p, q, 7).kl;
    for (std::int64_t k : {1, 4, 32}) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(k));
      std::vector<float> logp(ids.size());
      float rest = 0;
      double nll = 0;
      topk_summary(p, 7, k, ids, logp, rest, nll);
      const TokenKl t = token_kl_topk({nll, rest, ids, logp}, q, 7);
      // float32 log-probs in the cache: ~1e-7 relative slack.
      EXPECT_LE(t.kl, exact + 1e-6) << "seed " << seed << " k " << k;
      EXPECT_GE(t.kl_upper, exact - 1e-6) << "seed " << seed << " k " << k;
    }
    // K = vocab: no tail, the approximation is exact.
    std::vector<std::int32_t> ids(500);
    std::vector<float> logp(500);
    float rest = 0;
    double nll = 0;
    topk_summary(p, 7, 500, ids, logp, rest, nll);
    EXPECT_TRUE(std::isinf(rest));
    const TokenKl all = token_kl_topk({nll, rest, ids, logp}, q, 7);
    EXPECT_NEAR(all.kl, exact, 1e-5 * std::max(1.0, exact));
  }
}

TEST(TopKSummary, SortedIdsAndTailMass) {
  const std::vector<float> l{1.0f, 3.0f, 2.0f, 3.0f};
  std::vector<std::int32_t> ids(2);
  std::vector<float> logp(2);
  float rest = 0;
  double nll = 0;
  topk_summary(l, 2, 2, ids, logp, rest, nll);
  EXPECT_EQ(ids, (std::vector<std::int32_t>{1, 3}));  // tie: lower id first
  const double z = std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(logp[0], 3.0 - std::log(z), 1e-6);
  EXPECT_NEAR(rest, std::log((std::exp(1.0) + std::exp(2.0)) / z), 1e-6);
  EXPECT_NEAR(nll, std::log(z) - 2.0, 1e-6);
}

LogitsCacheHeader small_header() {
  LogitsCacheHeader h;
  h.model_hash = 0xabcdef0123456789ULL;
  h.tokens_hash = 42;
  h.ctx = 8;
  h.stride = 8;
  h.top_k = 2;
  h.vocab = 10;
  h.window_scored = {3, 2};
  return h;
}

LogitsCache window(const LogitsCacheHeader& h, std::int64_t n, float base) {
  LogitsCache c(h);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t ids[2] = {static_cast<std::int32_t>(i), 9};
    const float logp[2] = {base - 1.0f, base - 2.0f};
    c.append(base + static_cast<float>(i), -3.0f, ids, logp);
  }
  return c;
}

TEST(LogitsCacheFile, RoundTripReuseAndResume) {
  test::TempDir dir;
  const auto path = dir / "base.kvqlogits";
  const LogitsCacheHeader h = small_header();
  {
    LogitsCacheWriter w(path, h);
    EXPECT_EQ(w.windows_done(), 0);
    w.append_window(window(h, 3, 0.5f));
    // Interrupted: no commit. The target does not exist; the partial file does.
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  {
    LogitsCacheWriter w(path, h);
    ASSERT_EQ(w.windows_done(), 1);  // resumed
    EXPECT_EQ(w.resumed().tokens(), 3);
    EXPECT_EQ(w.resumed().token(2).nll, 2.5f);
    EXPECT_THROW(w.append_window(window(h, 3, 0.0f)), InvalidArgument);  // window 1 holds 2
    EXPECT_THROW(w.commit(), InvalidArgument);
    w.append_window(window(h, 2, 7.0f));
    w.commit();
  }
  const LogitsCache c = LogitsCache::load(path);
  EXPECT_EQ(c.header(), h);
  ASSERT_EQ(c.tokens(), 5);
  EXPECT_EQ(c.token(3).nll, 7.0f);
  EXPECT_EQ(c.token(4).ids[0], 1);
  EXPECT_EQ(c.token(4).logp[1], 5.0f);
  EXPECT_TRUE(LogitsCache::load_if_matching(path, h).has_value());
  LogitsCacheHeader other = h;
  other.model_hash ^= 1;
  EXPECT_FALSE(LogitsCache::load_if_matching(path, other).has_value());
  EXPECT_FALSE(LogitsCache::load_if_matching(dir / "absent", h).has_value());

  // Truncated and foreign files are FormatErrors naming the file.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
  EXPECT_THROW(LogitsCache::load(path), FormatError);
  std::ofstream(dir / "junk") << "not a cache";
  try {
    LogitsCache::load(dir / "junk");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("junk"), std::string::npos);
  }
}

TEST(LogitsCacheFile, PartialWithOtherHeaderStartsOver) {
  test::TempDir dir;
  const auto path = dir / "c";
  const LogitsCacheHeader h = small_header();
  {
    LogitsCacheWriter w(path, h);
    w.append_window(window(h, 3, 0.0f));
  }
  LogitsCacheHeader other = h;
  other.ctx = 16;
  LogitsCacheWriter w(path, other);
  EXPECT_EQ(w.windows_done(), 0);
}

std::vector<std::string> journal_lines(const std::filesystem::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every per-token value bit for bit.
void expect_same_tokens(const KldResult& a, const KldResult& b) {
  EXPECT_EQ(a.kld, b.kld);
  EXPECT_EQ(a.kld_upper, b.kld_upper);
  EXPECT_EQ(a.base_nll, b.base_nll);
  EXPECT_EQ(a.quant_nll, b.quant_nll);
  EXPECT_EQ(a.top1_match, b.top1_match);
  EXPECT_EQ(a.window_scored, b.window_scored);
  EXPECT_EQ(a.mean_kld, b.mean_kld);
}

class TinyKld : public ::testing::Test {
 protected:
  // One thread: on a 64-wide model parallel regions cost more than they save, and on a loaded
  // machine OpenMP's spinning makes this test 20x slower.
  void SetUp() override {
    threads_ = num_threads();
    set_num_threads(1);
    model_ = model::CausalLM::load(test::test_data_dir() / "tiny_llama/gqa");
    BootstrapIndexSampler s(5);
    for (int i = 0; i < 200; ++i) tokens_.push_back(static_cast<std::int32_t>(s.below(256)));
    options_.ctx = 64;
    options_.top_k = 8;
    options_.logits_chunk = 16;
    options_.progress = false;
  }
  void TearDown() override { set_num_threads(threads_); }
  int threads_ = 1;
  std::unique_ptr<model::CausalLM> model_;
  std::vector<std::int32_t> tokens_;
  KldOptions options_;
};

TEST_F(TinyKld, BaselineAgainstItselfIsZero) {
  const KldResult exact = kld_side_by_side(*model_, *model_, tokens_, options_);
  EXPECT_TRUE(exact.exact);
  EXPECT_EQ(exact.windows, 4);  // 200 tokens, ctx 64: 64 + 64 + 64 + 8
  EXPECT_EQ(exact.tokens, 199 - 3);
  EXPECT_EQ(exact.mean_kld, 0.0);
  EXPECT_EQ(exact.max_kld, 0.0);
  EXPECT_EQ(exact.mean_kld_topk, 0.0);
  EXPECT_EQ(exact.top1_agreement, 1.0);
  EXPECT_EQ(exact.ppl_base, exact.ppl_quant);

  test::TempDir dir;
  const LogitsCache cache =
      build_logits_cache(*model_, tokens_, options_, 7, dir / "tiny.kvqlogits");
  ASSERT_TRUE(std::filesystem::exists(dir / "tiny.kvqlogits"));
  const KldResult cached = kld_against_cache(*model_, tokens_, cache, options_);
  EXPECT_FALSE(cached.exact);
  EXPECT_EQ(cached.mean_kld, 0.0);
  EXPECT_EQ(cached.top1_agreement, 1.0);
  // Baseline NLL cached as float32.
  EXPECT_NEAR(cached.ppl_base, exact.ppl_base, 1e-5 * exact.ppl_base);
  EXPECT_NEAR(cached.ppl_quant, exact.ppl_quant, 1e-12 * exact.ppl_quant);

  // The file is reused (same header) and rejected for other tokens.
  const LogitsCache again =
      build_logits_cache(*model_, tokens_, options_, 7, dir / "tiny.kvqlogits");
  EXPECT_EQ(again.tokens(), cache.tokens());
  auto other = tokens_;
  other[10] = (other[10] + 1) % 256;
  EXPECT_THROW(kld_against_cache(*model_, other, cache, options_), InvalidArgument);
}

TEST_F(TinyKld, LowPrecisionCacheGivesSmallPositiveKlWithinBounds) {
  KldOptions o = options_;
  o.quant_kv = model::KvCacheConfig::of(quant::KvFormat::kF16);
  o.top_k = 4;
  const KldResult exact = kld_side_by_side(*model_, *model_, tokens_, o);
  EXPECT_GT(exact.mean_kld, 0.0);
  EXPECT_LT(exact.mean_kld, 1e-3);  // fp16 K/V on a random tiny model: a small perturbation
  EXPECT_LE(exact.mean_kld_topk, exact.mean_kld + 1e-9);
  const LogitsCache cache = build_logits_cache(*model_, tokens_, o, 7);
  const KldResult cached = kld_against_cache(*model_, tokens_, cache, o);
  EXPECT_NEAR(cached.mean_kld, exact.mean_kld_topk, 1e-6);
  EXPECT_LE(cached.mean_kld, exact.mean_kld + 1e-9);
  EXPECT_GE(cached.mean_kld_upper, exact.mean_kld - 1e-9);
  // Per-token arrays support paired tests.
  ASSERT_EQ(cached.kld.size(), static_cast<std::size_t>(cached.tokens));
  const PairedBootstrapResult d = paired_bootstrap(exact.base_nll, exact.quant_nll);
  EXPECT_NEAR(d.delta, std::log(exact.ppl_quant) - std::log(exact.ppl_base), 1e-9);
}

TEST_F(TinyKld, ResumesFromTheWindowJournalBitForBit) {
  KldOptions o = options_;
  o.quant_kv = model::KvCacheConfig::of(
      quant::KvFormat::kF16);  // non-zero KL, so the journal carries real values
  const LogitsCache cache = build_logits_cache(*model_, tokens_, o, 7);
  const KldResult fresh = kld_against_cache(*model_, tokens_, cache, o);

  test::TempDir dir;
  o.resume_file = dir / "kld-windows.jsonl";
  int windows_run = 0;
  o.prepare_quant_cache = [&](model::KvCache&) { ++windows_run; };
  const KldResult journaled = kld_against_cache(*model_, tokens_, cache, o);
  EXPECT_EQ(windows_run, 4);
  EXPECT_EQ(journaled.kld, fresh.kld);
  EXPECT_EQ(journaled.kld_upper, fresh.kld_upper);

  // Keep windows 0 and 2, plant a record of the wrong length for window 1 and cut the last line
  // short, as an interruption would: only windows 1 and 3 run again, and every per-token value
  // comes out bit for bit as in the fresh run.
  const std::vector<std::string> lines = journal_lines(o.resume_file);
  ASSERT_EQ(lines.size(), 4u);
  {
    std::ofstream out(o.resume_file, std::ios::binary | std::ios::trunc);
    out << lines[0] << "\n" << lines[2] << "\n";
    out << R"({"window":1,"kld":[0],"kld_upper":[0],"base_nll":[0],"quant_nll":[0],"top1":[1]})"
        << "\n";
    out << lines[3].substr(0, lines[3].size() / 2);
  }
  windows_run = 0;
  const KldResult resumed = kld_against_cache(*model_, tokens_, cache, o);
  EXPECT_EQ(windows_run, 2);
  expect_same_tokens(resumed, fresh);

  // Everything is journaled now: a third run computes nothing.
  windows_run = 0;
  const KldResult again = kld_against_cache(*model_, tokens_, cache, o);
  EXPECT_EQ(windows_run, 0);
  EXPECT_EQ(again.kld, fresh.kld);
}

// One model as both sides (KldOptions::select_side, what `kvq compare --kld exact` does): the
// scheme's hooks switched off for each window's baseline forward. Off, the hooked model is the
// plain one bit for bit; on for the quantized side, the exact KL lies between the top-K bounds of
// the plain model's cache, token by token.
TEST_F(TinyKld, SelectSideMakesOneModelBothSides) {
  const LogitsCache plain = build_logits_cache(*model_, tokens_, options_, 7);  // no hooks yet
  const KldResult plain_self = kld_against_cache(*model_, tokens_, plain, options_);
  auto lc = lifecycle::apply_quantization_config(
      *model_, quant::load_recipe(test::test_data_dir() / "lifecycle" / "recipes" /
                                  "attn_fp8_head_static_minmax.yaml"));  // q, k and v
  std::vector<lifecycle::CalibrationSample> samples(3);
  for (std::size_t i = 0; i < samples.size(); ++i)
    samples[i].tokens.assign(tokens_.begin() + static_cast<std::ptrdiff_t>(20 * i),
                             tokens_.begin() + static_cast<std::ptrdiff_t>(20 * i + 32));
  lifecycle::calibrate(*lc, samples, {.show_progress = false});

  KldOptions o = options_;
  std::vector<bool> sides;
  o.select_side = [&](bool quantized) {
    sides.push_back(quantized);
    lc->set_quantization_enabled(quantized);
  };
  const KldResult exact = kld_side_by_side(*model_, *model_, tokens_, o);
  ASSERT_EQ(sides.size(), 8u);  // per window: off for the baseline, then on
  EXPECT_FALSE(sides[6]);
  EXPECT_TRUE(sides[7]);
  EXPECT_EQ(exact.base_nll, plain_self.base_nll);
  EXPECT_GT(exact.mean_kld, 0.0);
  const KldResult bounds = kld_against_cache(*model_, tokens_, plain, options_);  // hooks on
  EXPECT_EQ(bounds.quant_nll, exact.quant_nll);
  ASSERT_EQ(bounds.kld.size(), exact.kld.size());
  for (std::size_t i = 0; i < exact.kld.size(); ++i) {
    // Slack: the cached log-probs are rounded to float32 (~1e-7 relative).
    EXPECT_LE(bounds.kld[i], exact.kld[i] + 1e-6) << i;
    EXPECT_GE(bounds.kld_upper[i], exact.kld[i] - 1e-6) << i;
  }
  EXPECT_LT(bounds.mean_kld, exact.mean_kld);  // top_k 8 of 256: the tail term is real

  // Off on both sides: a scheme against itself as the baseline, exactly 0.
  o.select_side = [&](bool) { lc->set_quantization_enabled(false); };
  const KldResult off = kld_side_by_side(*model_, *model_, tokens_, o);
  EXPECT_EQ(off.mean_kld, 0.0);
  EXPECT_EQ(off.max_kld, 0.0);
  EXPECT_EQ(off.top1_agreement, 1.0);
}

// kld_side_by_side journals its windows (with their KL_K) as kld_against_cache does.
TEST_F(TinyKld, SideBySideResumesFromItsJournal) {
  KldOptions o = options_;
  o.quant_kv = model::KvCacheConfig::of(quant::KvFormat::kF16);
  const KldResult fresh = kld_side_by_side(*model_, *model_, tokens_, o);
  test::TempDir dir;
  o.resume_file = dir / "exact-windows.jsonl";
  int windows_run = 0;
  o.prepare_quant_cache = [&](model::KvCache&) { ++windows_run; };
  const KldResult journaled = kld_side_by_side(*model_, *model_, tokens_, o);
  EXPECT_EQ(windows_run, 4);
  EXPECT_EQ(journaled.kld, fresh.kld);

  const std::vector<std::string> lines = journal_lines(o.resume_file);
  ASSERT_EQ(lines.size(), 4u);
  {
    std::ofstream out(o.resume_file, std::ios::binary | std::ios::trunc);
    out << lines[0] << "\n" << lines[1] << "\n" << lines[3] << "\n";
    // A top-K driver's record (no kld_topk) for window 2 is not taken.
    out << R"({"window":2,"kld":[0],"kld_upper":[0],"base_nll":[0],"quant_nll":[0],"top1":[1]})"
        << "\n";
  }
  windows_run = 0;
  const KldResult resumed = kld_side_by_side(*model_, *model_, tokens_, o);
  EXPECT_EQ(windows_run, 1);
  expect_same_tokens(resumed, fresh);
  EXPECT_EQ(resumed.mean_kld_topk, fresh.mean_kld_topk);
}

}  // namespace
}  // namespace kvq::eval
