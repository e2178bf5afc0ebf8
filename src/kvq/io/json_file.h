// JSON text and files: the one place kvq parses JSON, with error messages that name the source
// and the position.
//
// Every JSON input (config.json, tokenizer.json, recipes, safetensors headers, dataset lines,
// caches) goes through parse_json / parse_ordered_json, which refuse nesting deeper than
// kMaxJsonDepth before nlohmann sees the text: nlohmann copies and dumps values recursively, so a
// few hundred KB of '[' would overflow the stack wherever the value is later copied.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <string_view>

namespace kvq::io {

// Real inputs nest a handful of levels (tokenizer.json 5, recipes 6).
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`. FormatError "<source_name>: invalid JSON at line L, column C: ..." when it does
// not parse, nests deeper than kMaxJsonDepth, or holds a number no double can hold (1e400).
// `callback` (optional) sees the parse events as nlohmann's parse callback does.
nlohmann::json parse_json(std::string_view text, std::string_view source_name,
                          const nlohmann::json::parser_callback_t& callback = nullptr);
// The same, keeping object keys in file order (inserting a key is linear in the object's size:
// for small objects only).
nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view source_name);

// Throws IoError when the file is missing, unreadable or not a regular file (io::read_file),
// FormatError as parse_json.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Stable text (object keys sorted, as nlohmann stores them), `indent` spaces, trailing newline.
std::string dump_json(const nlohmann::json& j, int indent = 2);

}  // namespace kvq::io
