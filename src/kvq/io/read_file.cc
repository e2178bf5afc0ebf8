#include "kvq/io/read_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvq/core/error.h"

namespace kvq::io {

std::string read_file(const std::filesystem::path& path, std::string_view what) {
  std::string label;  // " <what>"; appended, since GCC 12 warns falsely on " " + std::string
  if (!what.empty()) label.append(" ").append(what);
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    fail<IoError>("{}: cannot open{}: no such file", path.string(), label);
  }
  if (!std::filesystem::is_regular_file(status)) {
    fail<IoError>("{}: cannot open{}: not a regular file", path.string(), label);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail<IoError>("{}: cannot open{}: {}", path.string(), label, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail<IoError>("{}: read failed", path.string());
  return std::move(ss).str();
}

}  // namespace kvq::io
