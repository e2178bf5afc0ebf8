// An append-only JSON-lines journal of finished units of work (a GSM8K answer, a window's KLD),
// so that a long run interrupted at any moment resumes after the last unit it finished.
//
// One JSON object per line, flushed as each unit finishes. A line cut short by an interruption
// (or otherwise unreadable) is skipped when read, and the writer ends it before appending, so it
// never swallows the next record. What a record means, and whether it still applies, is the
// caller's business (name the file after everything the records depend on).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <vector>

namespace kvq::io {

// Every readable record of the journal at `path`, in file order; none when it does not exist.
// Logs a warning naming the file and the count of lines skipped.
std::vector<nlohmann::json> read_jsonl_journal(const std::filesystem::path& path);

class JsonlJournal {
 public:
  // Opens `path` for appending (creating its directory). IoError naming the path on failure.
  explicit JsonlJournal(const std::filesystem::path& path);
  // Writes one record on its own line and flushes it. IoError when the write fails.
  void append(const nlohmann::json& record);

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace kvq::io
