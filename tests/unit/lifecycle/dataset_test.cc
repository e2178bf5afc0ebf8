// Calibration dataset loading: formats, truncation, windows, shuffling and the errors for
// empty / ill-formed files (tokenizer: the tiny byte-level test tokenizer).
#include <gtest/gtest.h>

#include <fstream>

#include "kvq/core/error.h"
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
  o.shuffle_seed = 7;
  const auto a = load_calibration_dataset(p, tokenizer(), o);
  const auto b = load_calibration_dataset(p, tokenizer(), o);
  ASSERT_EQ(a.size(), 20u);
  bool moved = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].index, b[i].index);
    moved |= a[i].index != static_cast<std::int64_t>(i);
  }
  EXPECT_TRUE(moved);
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
