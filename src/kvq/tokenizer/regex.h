// A PCRE2 regex (UTF-8, Unicode properties) compiled once, JIT-compiled where available; the
// Hugging Face tokenizers regexes (Oniguruma syntax) are valid PCRE2 for the patterns we meet.
//
// kvq's one regex engine: the tokenizer's pre-tokenizer and recipes' `re:` targets (lifecycle/
// match.cc) use it. Patterns and subjects come from files and users, so matching must not
// recurse on the stack (std::regex does, per character) and must end: PCRE2 keeps its
// backtracking on the heap, and a match that exceeds its limits is an error naming the pattern,
// not an endless search.
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

  // Python's re.match: whether the regex matches at the start of `subject` (valid UTF-8); it
  // need not reach the end. FormatError naming the pattern when the match gives up at its limits
  // (catastrophic backtracking: `(a+)+$` on a long name).
  bool match_prefix(std::string_view subject) const;

 private:
  // A match call's result >= 0, or FormatError for a limit hit (or any other failure).
  int checked(int rc) const;

  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
  std::string pattern_, where_;
};

}  // namespace kvq::tok
