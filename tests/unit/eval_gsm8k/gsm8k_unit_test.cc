#include <gtest/gtest.h>

#include <fstream>

#include "kvq/core/error.h"
#include "kvq/eval/gsm8k.h"
#include "kvq/eval/gsm8k_score.h"
#include "kvq/eval/py_random.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

const std::string kTarget = "She makes 9 * 2 = $<<9*2=18>>18.\n#### 18";

TEST(Gsm8kScore, StrictTakesFirstHashMatch) {
  EXPECT_EQ(gsm8k_strict_extract("x #### 18\n#### 9"), "18");
  EXPECT_EQ(gsm8k_strict_extract("#### -1,234.5"), "-1,234.5");
  EXPECT_EQ(gsm8k_strict_extract("####18"), kGsm8kInvalid);
  EXPECT_EQ(gsm8k_strict_extract("The answer is 18."), kGsm8kInvalid);
  EXPECT_EQ(gsm8k_strict_extract(""), kGsm8kInvalid);
}

TEST(Gsm8kScore, FlexibleTakesLastNumber) {
  EXPECT_EQ(gsm8k_flexible_extract("First 12, then 15, then 18."), "18.");
  EXPECT_EQ(gsm8k_flexible_extract("costs $1,234."), "$1,234.");
  EXPECT_EQ(gsm8k_flexible_extract("it is 7"), "7");  // single digit: second alternative
  EXPECT_EQ(gsm8k_flexible_extract("a-1b"), "-1");
  EXPECT_EQ(gsm8k_flexible_extract("no number"), kGsm8kInvalid);
  EXPECT_EQ(gsm8k_flexible_extract("$"), kGsm8kInvalid);
}

TEST(Gsm8kScore, ExactMatchNormalisation) {
  EXPECT_EQ(gsm8k_normalize(kTarget), "18");
  EXPECT_EQ(gsm8k_normalize("$1,234."), "1234");
  EXPECT_EQ(gsm8k_normalize("[INVALID]"), "[invalid]");
  EXPECT_TRUE(gsm8k_exact_match("18.", kTarget));
  EXPECT_TRUE(gsm8k_exact_match("$18", kTarget));
  EXPECT_FALSE(gsm8k_exact_match("18.0", kTarget));
  EXPECT_FALSE(gsm8k_exact_match("18...", kTarget));  // only one trailing period is ignored
  EXPECT_FALSE(gsm8k_exact_match(std::string(kGsm8kInvalid), kTarget));
  const Gsm8kScore s = score_gsm8k("9 * 2 = 18\nThe answer is 18.", kTarget);
  EXPECT_EQ(s.strict, kGsm8kInvalid);
  EXPECT_FALSE(s.strict_correct);
  EXPECT_EQ(s.flexible, "18.");
  EXPECT_TRUE(s.flexible_correct);
  EXPECT_EQ(gsm8k_gold_answer(kTarget), "18");
}

TEST(PyRandom, MatchesCPython) {
  // python3.11: r = random.Random(1234); [r.getrandbits(32) for _ in range(3)]
  PyRandom r(1234);
  EXPECT_EQ(r.getrandbits(32), 4150886329U);
  EXPECT_EQ(r.getrandbits(32), 3342196574U);
  EXPECT_EQ(r.getrandbits(32), 1892932127U);
  EXPECT_EQ(PyRandom(0).getrandbits(32), 3626764237U);
  // r = random.Random(1234); r.sample(range(10), 5), r.sample(range(100), 7),
  // r.sample(range(7473), 5): the pool path, the pool path with k > 5, the set path.
  PyRandom s(1234);
  EXPECT_EQ(s.sample(10, 5), (std::vector<std::int64_t>{7, 1, 0, 9, 4}));
  EXPECT_EQ(s.sample(100, 7), (std::vector<std::int64_t>{4, 85, 88, 10, 12, 98, 45}));
  EXPECT_EQ(s.sample(7473, 5), (std::vector<std::int64_t>{1939, 142, 252, 6461, 129}));
  // A seed over 32 bits: random.Random(2**40 + 5).sample(range(1000), 3).
  EXPECT_EQ(PyRandom((1ULL << 40) + 5).sample(1000, 3), (std::vector<std::int64_t>{516, 529, 275}));
  EXPECT_THROW(PyRandom(1).sample(3, 4), InvalidArgument);
}

TEST(Gsm8kData, LoadErrorsNameFileAndLine) {
  test::TempDir dir;
  try {
    load_gsm8k(dir / "missing.jsonl");
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.jsonl"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("shared/data"), std::string::npos);
  }
  {
    std::ofstream f(dir / "bad.jsonl");
    f << R"({"question": "q", "answer": "#### 1"})"
      << "\n\n"
      << R"({"question": "q",)"
      << "\n";
  }
  try {
    load_gsm8k(dir / "bad.jsonl");
    FAIL() << "no throw";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:3:"), std::string::npos) << e.what();
  }
  {
    std::ofstream f(dir / "field.jsonl");
    f << R"({"question": "q", "answer": 3})"
      << "\n";
  }
  EXPECT_THROW(load_gsm8k(dir / "field.jsonl"), FormatError);
}

TEST(Gsm8kData, SharedFilesLoad) {
  const auto test = load_gsm8k(test::shared_data_dir() / "gsm8k/test.jsonl");
  EXPECT_EQ(test.size(), 1319u);
  EXPECT_EQ(gsm8k_gold_answer(test[0].answer), "18");
  EXPECT_EQ(gsm8k_doc_to_text(test[0]).substr(0, 25), "Question: Janet\xe2\x80\x99s ducks");
}

}  // namespace
}  // namespace kvq::eval
