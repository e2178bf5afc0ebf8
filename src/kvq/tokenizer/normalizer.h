// Normalizers of Hugging Face tokenizer.json ("normalizer"): they rewrite the text before
// pre-tokenization. Supported: null, Replace with a String pattern (Gemma's " " -> "▁"), Prepend
// (a SentencePiece model's add_space_prefix: "▁" before non-empty text) and Sequence of those;
// anything else is refused by name.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace kvq::tok {

class Normalizer {
 public:
  // Builds the normalizer `spec` describes; NotSupported / FormatError naming `where`.
  static Normalizer from_json(const nlohmann::json& spec, const std::string& where);

  // Whether normalize() rewrites anything (false for null / an empty Sequence).
  bool empty() const { return steps_.empty(); }
  // `text` with every step applied in order: a replacement left to right without overlaps, a
  // prepend only to non-empty text.
  std::string normalize(std::string_view text) const;

 private:
  struct Step {
    std::string pattern;  // Replace: what is replaced; empty for Prepend
    std::string content;  // Replace: the replacement; Prepend: the prefix
  };
  std::vector<Step> steps_;
};

}  // namespace kvq::tok
