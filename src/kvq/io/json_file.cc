#include "kvq/io/json_file.h"

#include "kvq/core/error.h"
#include "kvq/io/read_file.h"

namespace kvq::io {
namespace {

// 1-based line and column of byte `offset` of `text`.
std::pair<std::size_t, std::size_t> line_column(std::string_view text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < std::min(offset, text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// Refuses nesting deeper than kMaxJsonDepth in one linear pass (brackets inside strings do not
// count). Malformed text is left for the parser to report.
void check_depth(std::string_view text, std::string_view source_name) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        const auto [line, column] = line_column(text, i);
        fail<FormatError>(
            "{}: invalid JSON at line {}, column {}: nested deeper than {} levels (kvq's limit)",
            source_name, line, column, kMaxJsonDepth);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

template <class J>
J parse(std::string_view text, std::string_view source_name) {
  check_depth(text, source_name);
  try {
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann reports a byte offset (1-based, pointing just past the bad token); turn it into
    // line and column, and keep only its description.
    const auto [line, column] = line_column(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string what = e.what();
    if (const auto pos = what.find(": "); pos != std::string::npos && what.starts_with("[json")) {
      // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
      const auto col = what.find("column ");
      const auto colon = col == std::string::npos ? pos : what.find(": ", col);
      what = what.substr((colon == std::string::npos ? pos : colon) + 2);
    }
    fail<FormatError>("{}: invalid JSON at line {}, column {}: {}", source_name, line, column,
                      what);
  } catch (const nlohmann::json::exception& e) {
    // out_of_range.406 "number overflow parsing '1e400'": no position; the number says where.
    std::string what = e.what();
    if (const auto pos = what.find("] "); pos != std::string::npos) what = what.substr(pos + 2);
    fail<FormatError>("{}: invalid JSON: {}", source_name, what);
  }
}

}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view source_name) {
  return parse<nlohmann::json>(text, source_name);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, std::string_view source_name) {
  return parse<nlohmann::ordered_json>(text, source_name);
}

std::vector<std::string> json_top_level_keys(std::string_view text) {
  // Records the keys met at depth 1; every other event is accepted and ignored.
  struct TopKeys : nlohmann::json_sax<nlohmann::json> {
    std::vector<std::string> keys;
    int depth = 0;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return ++depth, true; }
    bool end_object() override { return --depth, true; }
    bool start_array(std::size_t) override { return ++depth, true; }
    bool end_array() override { return --depth, true; }
    bool key(string_t& k) override {
      if (depth == 1) keys.push_back(k);
      return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
      return false;
    }
  } sax;
  nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
  return std::move(sax.keys);
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
