#include "kvq/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "kvq/core/error.h"

namespace kvq::tok {
namespace {

// One ovector pair is all we read; rc == 0 ("ovector too small") still reports the match.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};

pcre2_match_data* thread_match_data() {
  thread_local MatchData md;
  return md.data;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    fail<FormatError>("{}: regex '{}' does not compile at offset {}: {}", where, pattern, offset,
                      reinterpret_cast<const char*>(message));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view subject, uint32_t base, std::vector<Span>& matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = thread_match_data();
  auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  PCRE2_SIZE start = 0;
  const PCRE2_SIZE n = subject.size();
  while (start < n) {
    int rc = jit_ ? pcre2_jit_match(code, s, n, start, PCRE2_NO_UTF_CHECK, md, nullptr)
                  : pcre2_match(code, s, n, start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    KVQ_CHECK(rc >= 0, "pcre2 match failed with code {}", rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      matches.push_back({base + static_cast<uint32_t>(ov[0]), base + static_cast<uint32_t>(ov[1])});
      start = ov[1];
    } else {
      // Empty match: step over one UTF-8 char (empty pieces are dropped anyway).
      start = ov[0] + 1;
      while (start < n && (static_cast<uint8_t>(subject[start]) & 0xC0) == 0x80) ++start;
    }
  }
}

}  // namespace kvq::tok
