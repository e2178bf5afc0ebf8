// Calibration dataset loading: formats, truncation, windows, shuffling and the errors for
// empty / ill-formed files (tokenizer: the tiny byte-level test tokenizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/core/torch_sampling.h"
#include "kvq/lifecycle/dataset.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

tok::Tokenizer tokenizer() {
  return tok::Tokenizer::from_file(test::test_data_dir() / "tokenizer" / "tiny_bytelevel.json");
}

std::filesystem::path write(const test::TempDir& d, const std::string& name,
                            const std::string& text) {
  std::ofstream(d / name) << text;
  return d / name;
}

TEST(Dataset, JsonlTextTruncatedAndTextWindows) {
  test::TempDir d;
  const auto t = tokenizer();
  DatasetOptions o;
  o.max_seq_length = 4;
  const auto s = load_calibration_dataset(
      write(d, "a.jsonl", "{\"text\": \"hello world, this is long\"}\n\n{\"text\": \"hi\"}\n"), t,
      o);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].tokens.size(), 4u);
  EXPECT_EQ(s[1].index, 1);
  const auto w = load_calibration_dataset(write(d, "b.txt", "abcdefghij klmnopqrstu vwxyz"), t, o);
  ASSERT_GE(w.size(), 2u);
  for (std::size_t i = 0; i + 1 < w.size(); ++i) EXPECT_EQ(w[i].tokens.size(), 4u);
  o.num_samples = 1;
  EXPECT_EQ(load_calibration_dataset(d / "b.txt", t, o).size(), 1u);
}

TEST(Dataset, ShuffleIsSeededAndDeterministic) {
  test::TempDir d;
  std::string text;
  for (int i = 0; i < 20; ++i) text += "{\"text\": \"sample " + std::to_string(i) + "\"}\n";
  const auto p = write(d, "s.jsonl", text);
  DatasetOptions o;
  o.order = SampleOrder::kCompareShuffle;
  o.seed = 7;
  const auto a = load_calibration_dataset(p, tokenizer(), o);
  const auto b = load_calibration_dataset(p, tokenizer(), o);
  ASSERT_EQ(a.size(), 20u);
  bool moved = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    moved |= a[i].index != static_cast<std::int64_t>(i);
  }
  EXPECT_TRUE(moved);
  // kvq compare's calibration set must not change (its published numbers and caches): the
  // permutation std::mt19937_64(7) gave before the llm-compressor orders were added.
  const std::vector<std::int64_t> before = {14, 8, 6,  9,  1, 4,  16, 12, 5,  10,
                                            7,  3, 13, 11, 0, 17, 19, 2,  18, 15};
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].index, before[i]) << i;
}

// 20 samples of lengths 3, 5, ..., 41, then 19 of them truncated so lengths tie.
std::vector<CalibrationSample> varied_samples(std::int64_t max_len) {
  std::vector<CalibrationSample> v;
  for (std::int64_t i = 0; i < 20; ++i) {
    const std::int64_t len = std::min<std::int64_t>(3 + 2 * ((i * 7) % 20), max_len);
    v.push_back({i, std::vector<std::int32_t>(static_cast<std::size_t>(len), 65)});
  }
  return v;
}

std::vector<std::int64_t> indices(const std::vector<CalibrationSample>& s) {
  std::vector<std::int64_t> out;
  for (const CalibrationSample& c : s) out.push_back(c.index);
  return out;
}

// llm-compressor's two orders (the selection itself is checked against torch in
// tests/unit/core/test_torch_sampling.cc and end to end in
// tests/model/lifecycle/calibration_order_test.cc).
TEST(Dataset, LlmCompressorOrders) {
  DatasetOptions o;
  o.num_samples = 5;
  o.order = SampleOrder::kShuffled;
  o.seed = 3;
  EXPECT_EQ(indices(select_calibration_samples(varied_samples(100), o)),
            torch_random_sampler(20, 5, 3, /*draws_before=*/3));
  o.seed = 4;
  EXPECT_NE(indices(select_calibration_samples(varied_samples(100), o)),
            torch_random_sampler(20, 5, 3, 3));
  o.order = SampleOrder::kLongestFirst;
  const auto longest = select_calibration_samples(varied_samples(100), o);
  ASSERT_EQ(longest.size(), 5u);
  for (std::size_t i = 0; i < longest.size(); ++i)  // 41, 39, 37, 35, 33
    EXPECT_EQ(longest[i].tokens.size(), 41u - 2 * i) << i;
  const auto tied = select_calibration_samples(varied_samples(20), o);  // 11 samples of 20
  std::vector<std::int64_t> lengths;
  for (const CalibrationSample& s : varied_samples(20))
    lengths.push_back(static_cast<std::int64_t>(s.tokens.size()));
  std::vector<std::int64_t> want = torch_argsort_descending(lengths);
  want.resize(5);
  EXPECT_EQ(indices(tied), want);
  o.num_samples = 100;  // more than the dataset: all of it (llm-compressor clamps too)
  EXPECT_EQ(select_calibration_samples(varied_samples(100), o).size(), 20u);
  o.order = SampleOrder::kShuffled;
  EXPECT_EQ(select_calibration_samples(varied_samples(100), o).size(), 20u);
  EXPECT_TRUE(select_calibration_samples({}, o).empty());
}

// A tokenizer directory with Mistral Nemo's chat template (bos <s> = 269, eos </s> = 270 in the
// tiny tokenizer).
tok::Tokenizer chat_tokenizer(const test::TempDir& d) {
  const auto data = test::test_data_dir() / "tokenizer";
  std::filesystem::create_directories(d / "model");
  std::filesystem::copy_file(data / "tiny_bytelevel.json", d / "model" / "tokenizer.json");
  std::ifstream in(data / "chat_templates" / "mistralai-Mistral-Nemo-Instruct-2407.jinja");
  std::stringstream jinja;
  jinja << in.rdbuf();
  std::ofstream(d / "model" / "tokenizer_config.json") << nlohmann::json{
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
      {"chat_template", jinja.str()}}.dump();
  return tok::Tokenizer::from_dir(d / "model");
}

// {"messages": [...]} lines (ultrachat's layout) are rendered with the model's template,
// without a generation prompt, tokenized without special tokens and truncated.
TEST(Dataset, ChatMessagesJsonlRenderedWithTheTemplate) {
  test::TempDir d;
  const auto t = chat_tokenizer(d);
  const auto p = write(d, "chat.jsonl",
                       "{\"prompt\": \"ignored\", \"messages\": [{\"role\": \"user\", \"content\": "
                       "\"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello there\"}]}\n"
                       "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                       "{\"role\": \"user\", \"content\": \"Why?\"}]}\n"
                       "{\"text\": \"plain\"}\n");
  DatasetOptions o;
  const auto s = load_calibration_dataset(p, t, o);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].tokens, t.encode("<s>[INST]Hi[/INST]Hello there</s>"));
  EXPECT_EQ(s[0].tokens.front(), 269);
  EXPECT_EQ(s[0].tokens.back(), 270);
  EXPECT_EQ(s[1].tokens, t.encode("<s>[INST]Be brief.\n\nWhy?[/INST]"));
  EXPECT_EQ(s[2].tokens, t.encode("plain"));
  o.max_seq_length = 3;
  const auto cut = load_calibration_dataset(p, t, o);
  ASSERT_EQ(cut.size(), 3u);
  EXPECT_EQ(cut[0].tokens, std::vector<std::int32_t>(s[0].tokens.begin(), s[0].tokens.begin() + 3));
}

TEST(Dataset, ChatMessagesErrors) {
  test::TempDir d;
  const auto t = chat_tokenizer(d);
  auto message_of = [&](const std::string& name, const std::string& line) -> std::string {
    try {
      (void)load_calibration_dataset(write(d, name, line + "\n"), t, {});
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_THROW(load_calibration_dataset(write(d, "a.jsonl", "{\"messages\": \"x\"}\n"), t, {}),
               FormatError);
  EXPECT_THROW(load_calibration_dataset(write(d, "b.jsonl", "{\"messages\": []}\n"), t, {}),
               FormatError);
  EXPECT_THROW(load_calibration_dataset(
                   write(d, "c.jsonl", "{\"messages\": [{\"role\": \"user\"}]}\n"), t, {}),
               FormatError);
  EXPECT_THROW(load_calibration_dataset(
                   write(d, "d.jsonl",
                         "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                         "\"text\", \"text\": \"x\"}]}]}\n"),
                   t, {}),
               FormatError);
  // The template rejects the conversation (Mistral Nemo: roles must alternate).
  const std::string alternate = message_of(
      "e.jsonl",
      "{\"messages\": [{\"role\": \"assistant\", \"content\": \"A\"}, {\"role\": \"user\", "
      "\"content\": \"U\"}]}");
  EXPECT_NE(alternate.find("e.jsonl:1: chat template (Mistral Nemo): After the optional system"),
            std::string::npos)
      << alternate;
  // Tool turns are not rendered.
  const std::string tool =
      message_of("f.jsonl",
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"U\"}, {\"role\": \"tool\", "
                 "\"content\": \"r\"}]}");
  EXPECT_NE(tool.find("f.jsonl:1: chat template (Mistral Nemo): role 'tool'"), std::string::npos)
      << tool;
  // A model without a template: the message says how to calibrate on pre-rendered text.
  try {
    (void)load_calibration_dataset(
        write(d, "g.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"U\"}]}\n"),
        tokenizer(), {});
    ADD_FAILURE() << "no throw";
  } catch (const NotSupported& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("g.jsonl:1: chat template: the tokenizer has no chat template"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("{\"text\": ...}"), std::string::npos) << what;
  }
}

// GSM8K {question, answer} lines on a model without a chat template (a base model): lm-eval's
// plain "Question: ...\nAnswer: ..." layout.
TEST(Dataset, QuestionAnswerWithoutTemplateIsPlainText) {
  test::TempDir d;
  const auto t = tokenizer();
  const auto s = load_calibration_dataset(
      write(d, "qa.jsonl", "{\"question\": \"1+1?\", \"answer\": \"2\"}\n"), t, {});
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].tokens, t.encode("Question: 1+1?\nAnswer: 2"));
}

TEST(Dataset, Errors) {
  test::TempDir d;
  const auto t = tokenizer();
  EXPECT_THROW(load_calibration_dataset(write(d, "e.jsonl", ""), t, {}), InvalidArgument);
  EXPECT_THROW(load_calibration_dataset(write(d, "e.txt", ""), t, {}), InvalidArgument);
  EXPECT_THROW(
      load_calibration_dataset(write(d, "bad.jsonl", "{\"text\": \"ok\"}\n{nope\n"), t, {}),
      FormatError);
  EXPECT_THROW(load_calibration_dataset(write(d, "nofield.jsonl", "{\"prompt\": \"x\"}\n"), t, {}),
               FormatError);
  EXPECT_THROW(load_calibration_dataset(d / "missing.jsonl", t, {}), IoError);
  DatasetOptions o;
  o.max_seq_length = 0;
  EXPECT_THROW(load_calibration_dataset(d / "e.txt", t, o), InvalidArgument);
}

}  // namespace
}  // namespace kvq::lifecycle
