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

// Bounds for one match call: about a second of backtracking at most (the tokenizer's patterns and
// module names need a few hundred steps), and 64 MB of backtracking memory.
constexpr std::uint32_t kMatchLimit = 10'000'000;
constexpr std::uint32_t kHeapLimitKiB = 64 * 1024;

pcre2_match_context* match_context() {
  static pcre2_match_context* context = [] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(c, kMatchLimit);
    pcre2_set_heap_limit(c, kHeapLimitKiB);
    return c;
  }();
  return context;
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), where_(where) {
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
    const int rc = jit_
                       ? pcre2_jit_match(code, s, n, start, PCRE2_NO_UTF_CHECK, md, match_context())
                       : pcre2_match(code, s, n, start, PCRE2_NO_UTF_CHECK, md, match_context());
    if (rc == PCRE2_ERROR_NOMATCH) break;
    checked(rc);
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

bool Regex::match_prefix(std::string_view subject) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = thread_match_data();
  auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  // PCRE2_ANCHORED is a match-time option the JIT fast path does not take: the plain matcher
  // (same limits) runs these short subjects.
  const int rc = pcre2_match(code, s, subject.size(), 0, PCRE2_ANCHORED, md, match_context());
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  checked(rc);
  return true;
}

int Regex::checked(int rc) const {
  if (rc >= 0) return rc;
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(rc, message, sizeof(message));
  fail<FormatError>("{}: regex '{}' failed: {} (a pattern that backtracks without end?)", where_,
                    pattern_, reinterpret_cast<const char*>(message));
}

}  // namespace kvq::tok
