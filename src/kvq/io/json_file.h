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
#include <vector>

namespace kvq::io {

// Real inputs nest a handful of levels (tokenizer.json 5, recipes 6).
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`. FormatError "<source_name>: invalid JSON at line L, column C: ..." when it does
// not parse, nests deeper than kMaxJsonDepth, or holds a number no double can hold (1e400).
nlohmann::json parse_json(std::string_view text, std::string_view source_name);
// The same, keeping object keys in file order (inserting a key is linear in the object's size:
// for small objects only).
nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view source_name);

// The keys of the top-level object of `text`, which parse_json accepted, in file order with
// duplicates kept (parse_json sorts keys and keeps the last of duplicates). A SAX pass: nlohmann's
// parse callbacks would do it too, but they rescan the parent object at each nested object's end,
// quadratic in the number of entries (100,000 safetensors tensors: minutes).
std::vector<std::string> json_top_level_keys(std::string_view text);

// Throws IoError when the file is missing, unreadable or not a regular file (io::read_file),
// FormatError as parse_json.
nlohmann::json read_json_file(const std::filesystem::path& path);
// Stable text (object keys sorted, as nlohmann stores them), `indent` spaces, trailing newline.
std::string dump_json(const nlohmann::json& j, int indent = 2);

}  // namespace kvq::io
