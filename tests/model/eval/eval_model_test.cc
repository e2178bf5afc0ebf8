// GSM8K and KLD pipelines on the default model (SmolLM2-135M-Instruct).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "kvq/eval/gsm8k.h"
#include "kvq/eval/kld.h"
#include "kvq/eval/logits_cache.h"
#include "kvq/io/json_file.h"
#include "kvq/model/causal_lm.h"
#include "kvq/tokenizer/chat_template.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

TEST(EvalModel, Gsm8kTwoQuestionsProduceConsistentRecords) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  auto model = model::CausalLM::load(test::default_model_dir());
  const auto tokenizer = tok::Tokenizer::from_dir(test::default_model_dir());
  Gsm8kOptions options;
  options.data_dir = test::shared_data_dir() / "gsm8k";
  options.limit = 2;
  options.max_new_tokens = 48;  // keeps the test short; enough to compare with the reference
  options.progress = false;
  const Gsm8kResult r = run_gsm8k(*model, tokenizer, options);
  ASSERT_EQ(r.records.size(), 2u);

  const auto prompts = io::read_json_file(test::test_data_dir() / "eval/gsm8k_prompt_goldens.json");
  const auto filters = io::read_json_file(test::test_data_dir() / "eval/gsm8k_filter_goldens.json");
  std::vector<std::string> hf_generations;
  for (const auto& c : filters.at("cases")) {
    if (c.at("kind") == "smollm2_generation") hf_generations.push_back(c.at("response"));
  }
  for (const Gsm8kRecord& rec : r.records) {
    SCOPED_TRACE(::testing::Message() << "question " << rec.index << ": " << rec.generation);
    EXPECT_EQ(rec.fewshot_indices,
              prompts.at("fewshot_train_indices")[static_cast<std::size_t>(rec.index)]
                  .get<std::vector<std::int64_t>>());
    EXPECT_GT(rec.prompt_tokens, 500);  // 5 worked examples
    EXPECT_GE(rec.generated_tokens, 1);
    EXPECT_LE(rec.generated_tokens, options.max_new_tokens);
    for (const auto& stop : options.until) EXPECT_EQ(rec.generation.find(stop), std::string::npos);
    // Scoring is a pure function of the text.
    const Gsm8kScore again = score_gsm8k(rec.generation, rec.target);
    EXPECT_EQ(again.strict, rec.score.strict);
    EXPECT_EQ(again.flexible, rec.score.flexible);
    EXPECT_EQ(again.flexible_correct, rec.score.flexible_correct);
    // The reference (transformers, fp32 weights dequantized from the same GGUF, greedy, same
    // prompt) generated the same text: all 48 tokens of both questions were equal when this
    // test was written. A mismatch in the first bytes means a prompt or generation bug; one late
    // in the text could also be a near-tie argmax flipped by a kernel's rounding (check the
    // top-2 logit margin at that step before blaming the prompt).
    if (static_cast<std::size_t>(rec.index) < hf_generations.size()) {
      const std::string& hf = hf_generations[static_cast<std::size_t>(rec.index)];
      EXPECT_EQ(rec.generation, hf.substr(0, rec.generation.size()));
    }
  }
  EXPECT_GE(r.flexible_extract.mean, 0.0);
  EXPECT_LE(r.flexible_extract.mean, 1.0);
  EXPECT_EQ(r.strict_match.n, 2);
}

// Questions decoded together (2 in flight for 3 questions, so a finished slot is refilled)
// give exactly the answers of one question at a time.
TEST(EvalModel, Gsm8kBatchedEqualsOneAtATime) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  auto model = model::CausalLM::load(test::default_model_dir());
  const auto tokenizer = tok::Tokenizer::from_dir(test::default_model_dir());
  Gsm8kOptions options;
  options.data_dir = test::shared_data_dir() / "gsm8k";
  options.limit = 3;
  options.max_new_tokens = 16;
  options.progress = false;
  options.batch = 1;
  const Gsm8kResult single = run_gsm8k(*model, tokenizer, options);
  options.batch = 2;
  const Gsm8kResult batched = run_gsm8k(*model, tokenizer, options);
  ASSERT_EQ(single.records.size(), 3u);
  ASSERT_EQ(batched.records.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(batched.records[i].index, static_cast<std::int64_t>(i));
    EXPECT_EQ(batched.records[i].generation, single.records[i].generation) << "question " << i;
    EXPECT_EQ(batched.records[i].generated_tokens, single.records[i].generated_tokens);
    EXPECT_EQ(batched.records[i].prompt_tokens, single.records[i].prompt_tokens);
  }
}

// The resume file: answers found there (same index and prompt) are reused, a line cut short by an
// interruption is skipped, and new questions are appended.
TEST(EvalModel, Gsm8kResumesFromItsRecordFile) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  auto model = model::CausalLM::load(test::default_model_dir());
  const auto tokenizer = tok::Tokenizer::from_dir(test::default_model_dir());
  test::TempDir dir;
  Gsm8kOptions options;
  options.data_dir = test::shared_data_dir() / "gsm8k";
  options.max_new_tokens = 8;
  options.progress = false;
  options.resume_file = dir / "answers.jsonl";
  // A planted answer for question 0 with the right prompt hash, one with a stale hash for
  // question 1, and a truncated line.
  const auto test_set = load_gsm8k(options.data_dir / "test.jsonl");
  const auto train_set = load_gsm8k(options.data_dir / "train.jsonl");
  const std::string p0 =
      gsm8k_prompt(tok::ChatTemplate(tokenizer.chat_template()), test_set, train_set, 0);
  {
    std::ofstream out(options.resume_file, std::ios::binary);
    out << R"({"index":0,"prompt_fnv1a64":)" << fnv1a64(p0.data(), p0.size())
        << R"(,"prompt_tokens":1,"generated_tokens":2,"generation":"planted #### 18"})"
        << "\n";
    out << R"({"index":1,"prompt_fnv1a64":1,"prompt_tokens":1,"generated_tokens":2,)"
        << R"("generation":"stale"})"
        << "\n";
    out << R"({"index":2,"prompt_fn)";
  }
  options.limit = 3;
  const Gsm8kResult r = run_gsm8k(*model, tokenizer, options);
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.records[0].generation, "planted #### 18");
  EXPECT_TRUE(r.records[0].score.flexible_correct);  // question 0's answer is 18
  EXPECT_NE(r.records[1].generation, "stale");
  EXPECT_GT(r.records[2].prompt_tokens, 500);
  // Questions 1 and 2 were generated and appended: a second run generates nothing new and
  // returns the same records.
  std::ifstream in(options.resume_file, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(R"("index":1,)"), std::string::npos);
  const auto size = std::filesystem::file_size(options.resume_file);
  const Gsm8kResult again = run_gsm8k(*model, tokenizer, options);
  EXPECT_EQ(std::filesystem::file_size(options.resume_file), size);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(again.records[i].generation, r.records[i].generation);
}

TEST(EvalModel, KldOfBaselineAgainstItselfIsZero) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  auto model = model::CausalLM::load(test::default_model_dir());
  const auto tokenizer = tok::Tokenizer::from_dir(test::default_model_dir());
  std::ifstream in(test::shared_data_dir() / "wikitext-2-raw/wiki.test.raw", std::ios::binary);
  std::string text(8192, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  while (!text.empty() && (static_cast<unsigned char>(text.back()) & 0xC0) == 0x80) text.pop_back();
  if (!text.empty() && static_cast<unsigned char>(text.back()) >= 0xC0) text.pop_back();
  const auto tokens = tokenizer.encode(text);
  ASSERT_GE(tokens.size(), 256u);

  KldOptions o;
  o.ctx = 256;
  o.max_windows = 1;
  o.progress = false;
  const KldResult exact = kld_side_by_side(*model, *model, tokens, o);
  EXPECT_EQ(exact.windows, 1);
  EXPECT_EQ(exact.tokens, 255);
  EXPECT_EQ(exact.mean_kld, 0.0);
  EXPECT_EQ(exact.max_kld, 0.0);
  EXPECT_EQ(exact.top1_agreement, 1.0);
  EXPECT_GT(exact.ppl_base, 1.0);
  EXPECT_LT(exact.ppl_base, 1000.0);

  test::TempDir dir;
  const auto cache = build_logits_cache(
      *model, tokens, o, model_fingerprint(test::default_model_dir()), dir / "base.kvqlogits");
  const KldResult cached = kld_against_cache(*model, tokens, cache, o);
  EXPECT_EQ(cached.mean_kld, 0.0);
  EXPECT_EQ(cached.top1_agreement, 1.0);
  EXPECT_NEAR(cached.ppl_base, exact.ppl_base, 1e-5 * exact.ppl_base);
}

}  // namespace
}  // namespace kvq::eval
