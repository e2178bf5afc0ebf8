// A PCRE2 regex (UTF-8, Unicode properties) compiled once, JIT-compiled where available; the
// Hugging Face tokenizers regexes (Oniguruma syntax) are valid PCRE2 for the patterns we meet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/tokenizer/pre_tokenizer.h"

namespace kvq::tok {

class Regex {
 public:
  // Throws FormatError naming `where` if the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-empty matches of the regex in `subject` (which must be valid UTF-8: the
  // tokenizer validates its input once) as ranges offset by `base`.
  void find_all(std::string_view subject, uint32_t base, std::vector<Span>& matches) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace kvq::tok
