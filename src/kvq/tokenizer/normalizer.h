// Normalizers of Hugging Face tokenizer.json ("normalizer"): they rewrite the text before
// pre-tokenization. Supported: null, Replace with a String pattern (Gemma's " " -> "▁"), and
// Sequence of those; anything else is refused by name.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvq::tok {

class Normalizer {
 public:
  // Builds the normalizer `spec` describes; NotSupported / FormatError naming `where`.
  static Normalizer from_json(const nlohmann::json& spec, const std::string& where);

  // Whether normalize() rewrites anything (false for null / an empty Sequence).
  bool empty() const { return replacements_.empty(); }
  // `text` with every replacement applied in order, each left to right without overlaps.
  std::string normalize(std::string_view text) const;

 private:
  std::vector<std::pair<std::string, std::string>> replacements_;  // (pattern, content)
};

}  // namespace kvq::tok
