#include "kvq/io/json_file.h"

#include "kvq/core/error.h"
#include "kvq/io/read_file.h"

namespace kvq::io {

nlohmann::json parse_json(std::string_view text, std::string_view source_name) {
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports a byte offset (1-based, pointing just past the bad token); turn it into
    // line and column, and keep only its description.
    const std::size_t byte = std::min<std::size_t>(e.byte == 0 ? 0 : e.byte - 1, text.size());
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < byte; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = e.what();
    if (const auto pos = what.find(": "); pos != std::string::npos && what.starts_with("[json")) {
      // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
      const auto col = what.find("column ");
      const auto colon = col == std::string::npos ? pos : what.find(": ", col);
      what = what.substr((colon == std::string::npos ? pos : colon) + 2);
    }
    fail<FormatError>("{}: invalid JSON at line {}, column {}: {}", source_name, line, column,
                      what);
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  return parse_json(read_file(path), path.string());
}

std::string dump_json(const nlohmann::json& j, int indent) {
  try {
    return j.dump(indent) + "\n";
  } catch (const nlohmann::json::type_error& e) {
    fail<InvalidArgument>("cannot write JSON: {}", e.what());
  }
}

}  // namespace kvq::io
