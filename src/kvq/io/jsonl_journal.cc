#include "kvq/io/jsonl_journal.h"

#include <string>
#include <system_error>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/io/json_file.h"

namespace kvq::io {

std::vector<nlohmann::json> read_jsonl_journal(const std::filesystem::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path, std::ios::binary);
  std::string line;
  std::int64_t bad = 0;
  while (in && std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(parse_json(line, path.string()));
      if (!out.back().is_object()) {
        out.pop_back();
        ++bad;
      }
    } catch (const FormatError&) {
      ++bad;  // a line cut short by an interruption: its unit runs again
    }
  }
  if (bad > 0) log::warn("{}: skipped {} unreadable record(s)", path.string(), bad);
  return out;
}

JsonlJournal::JsonlJournal(const std::filesystem::path& path) : path_(path) {
  if (const auto dir = path.parent_path(); !dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) fail<IoError>("{}: cannot create its directory: {}", path.string(), ec.message());
  }
  bool ends_line = true;
  if (std::ifstream tail(path, std::ios::binary | std::ios::ate); tail && tail.tellg() > 0) {
    tail.seekg(-1, std::ios::end);
    ends_line = tail.get() == '\n';
  }
  out_.open(path, std::ios::binary | std::ios::app);
  if (!out_) fail<IoError>("{}: cannot open for appending", path.string());
  if (!ends_line) out_ << '\n';
}

void JsonlJournal::append(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) fail<IoError>("{}: write failed", path_.string());
}

}  // namespace kvq::io
