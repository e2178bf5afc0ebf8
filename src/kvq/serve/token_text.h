// The bytes of a token for the server's text: "" for an id past the tokenizer's vocabulary (a
// model's padded embedding rows, which it can sample, have no token), where Tokenizer throws.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kvq/tokenizer/tokenizer.h"

namespace kvq::serve {

inline const std::string& token_piece(const tok::Tokenizer& tokenizer, std::int32_t id) {
  static const std::string kNone;
  return id >= 0 && id < tokenizer.vocab_size() ? tokenizer.token_to_piece(id) : kNone;
}

inline std::string token_text(const tok::Tokenizer& tokenizer, std::span<const std::int32_t> ids) {
  std::string text;
  for (std::int32_t id : ids) text += token_piece(tokenizer, id);
  return text;
}

}  // namespace kvq::serve
