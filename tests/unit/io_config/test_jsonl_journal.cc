// The JSON-lines journal that lets long runs resume: cut lines are skipped and ended.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "../io_safetensors/io_test_util.h"
#include "kvq/io/jsonl_journal.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(JsonlJournal, MissingFileHasNoRecords) {
  kvq::test::TempDir dir;
  EXPECT_TRUE(read_jsonl_journal(dir / "none.jsonl").empty());
}

TEST(JsonlJournal, AppendsOneFlushedLinePerRecordAndCreatesTheDirectory) {
  kvq::test::TempDir dir;
  const auto path = dir / "sub" / "j.jsonl";
  {
    JsonlJournal j(path);
    j.append({{"i", 0}, {"x", 0.1}});
    // Flushed at once: a reader sees it while the journal is still open.
    EXPECT_EQ(read_text(path), "{\"i\":0,\"x\":0.1}\n");
    j.append({{"i", 1}});
  }
  const auto records = read_jsonl_journal(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0]["x"].get<double>(), 0.1);
  EXPECT_EQ(records[1]["i"].get<int>(), 1);
}

TEST(JsonlJournal, SkipsCutAndNonObjectLinesAndEndsACutLineBeforeAppending) {
  kvq::test::TempDir dir;
  const auto path = dir / "j.jsonl";
  kvq::test::write_bytes(path, "{\"i\":0}\n[1,2]\n\n{\"i\":1,\"tex");
  auto records = read_jsonl_journal(path);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0]["i"].get<int>(), 0);
  JsonlJournal(path).append({{"i", 2}});
  EXPECT_EQ(read_text(path), "{\"i\":0}\n[1,2]\n\n{\"i\":1,\"tex\n{\"i\":2}\n");
  records = read_jsonl_journal(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1]["i"].get<int>(), 2);
}

TEST(JsonlJournal, UnwritablePathIsAnIoErrorNamingIt) {
  kvq::test::TempDir dir;
  kvq::test::write_bytes(dir / "file", "x");
  EXPECT_THROW_MSG(JsonlJournal(dir / "file" / "j.jsonl"), IoError, (dir / "file").string());
}

}  // namespace
}  // namespace kvq::io
