// JSON files with error messages that name the file and the position.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace kvq::io {

// Throws IoError when the file is missing or unreadable, FormatError
// "<path>: invalid JSON at line L, column C: ..." when it does not parse.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Parses `text`; errors name `source_name` as above.
nlohmann::json parse_json(std::string_view text, std::string_view source_name);
// Stable text (object keys sorted, as nlohmann stores them), `indent` spaces, trailing newline.
std::string dump_json(const nlohmann::json& j, int indent = 2);

}  // namespace kvq::io
