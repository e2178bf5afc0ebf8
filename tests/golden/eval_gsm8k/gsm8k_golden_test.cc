// GSM8K scoring and prompts against lm-eval's own code (tools/reference/make_gsm8k_goldens.py).
#include <gtest/gtest.h>

#include "kvq/eval/gsm8k.h"
#include "kvq/eval/gsm8k_score.h"
#include "kvq/io/json_file.h"
#include "kvq/tokenizer/chat_template.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

TEST(Gsm8kGolden, FilterCasesAgreeWithLmEval) {
  const auto golden = io::read_json_file(test::test_data_dir() / "eval/gsm8k_filter_goldens.json");
  const auto& cases = golden.at("cases");
  ASSERT_GE(cases.size(), 50u);
  int strict_right = 0, flexible_right = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const std::string response = c.at("response"), target = c.at("target");
    const Gsm8kScore s = score_gsm8k(response, target);
    SCOPED_TRACE(::testing::Message()
                 << "case " << i << " response " << ::testing::PrintToString(response));
    EXPECT_EQ(s.strict, c.at("strict-match").at("extracted").get<std::string>());
    EXPECT_EQ(s.strict_correct, c.at("strict-match").at("exact_match").get<int>() == 1);
    EXPECT_EQ(s.flexible, c.at("flexible-extract").at("extracted").get<std::string>());
    EXPECT_EQ(s.flexible_correct, c.at("flexible-extract").at("exact_match").get<int>() == 1);
    strict_right += s.strict_correct;
    flexible_right += s.flexible_correct;
  }
  // Both outcomes occur for both filters, so agreement is not trivially "all wrong".
  EXPECT_GT(strict_right, 5);
  EXPECT_GT(flexible_right, 5);
  EXPECT_LT(flexible_right, static_cast<int>(cases.size()) - 5);
}

class Gsm8kPromptGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    golden_ = io::read_json_file(test::test_data_dir() / "eval/gsm8k_prompt_goldens.json");
    test_ = load_gsm8k(test::shared_data_dir() / "gsm8k/test.jsonl");
    train_ = load_gsm8k(test::shared_data_dir() / "gsm8k/train.jsonl");
  }
  nlohmann::json golden_;
  std::vector<Gsm8kExample> test_, train_;
};

TEST_F(Gsm8kPromptGolden, FewshotDrawsMatchLmEvalSampler) {
  const auto& drawn = golden_.at("fewshot_train_indices");
  const auto ours = gsm8k_fewshot_indices(static_cast<std::int64_t>(train_.size()),
                                          static_cast<std::int64_t>(drawn.size()),
                                          golden_.at("num_fewshot"), golden_.at("fewshot_seed"));
  ASSERT_EQ(ours.size(), drawn.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i], drawn[i].get<std::vector<std::int64_t>>()) << "question " << i;
  }
}

TEST_F(Gsm8kPromptGolden, RenderedPromptsAreByteIdentical) {
  const tok::ChatTemplate chat_template(golden_.at("chat_template").get<std::string>());
  ASSERT_EQ(chat_template.kind(), tok::ChatTemplate::Kind::kChatML);
  for (const auto& p : golden_.at("prompts")) {
    const std::int64_t index = p.at("doc_id");
    const std::string ours = gsm8k_prompt(chat_template, test_, train_, index,
                                          golden_.at("num_fewshot"), golden_.at("fewshot_seed"));
    EXPECT_EQ(ours, p.at("prompt").get<std::string>()) << "question " << index;
  }
}

TEST_F(Gsm8kPromptGolden, StopStringsMatchTaskYaml) {
  const Gsm8kOptions defaults;
  EXPECT_EQ(defaults.until,
            golden_.at("generation_kwargs").at("until").get<std::vector<std::string>>());
}

}  // namespace
}  // namespace kvq::eval
