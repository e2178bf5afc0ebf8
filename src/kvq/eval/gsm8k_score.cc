#include "kvq/eval/gsm8k_score.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <memory>
#include <vector>

#include "kvq/core/error.h"

namespace kvq::eval {
namespace {

// A byte-mode PCRE2 pattern with Python-`re`-like findall and sub.
class PyRegex {
 public:
  explicit PyRegex(std::string_view pattern) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &error,
                          &offset, nullptr);
    KVQ_CHECK(code_ != nullptr, "built-in GSM8K regex '{}' does not compile (error {} at {})",
              pattern, error, offset);
    uint32_t groups = 0;
    pcre2_pattern_info(code_, PCRE2_INFO_CAPTURECOUNT, &groups);
    groups_ = static_cast<int>(groups);
  }
  ~PyRegex() { pcre2_code_free(code_); }
  PyRegex(const PyRegex&) = delete;
  PyRegex& operator=(const PyRegex&) = delete;

  // Every non-overlapping match, left to right: its groups (group 0 when the pattern has none);
  // an unmatched group is "" (as Python's findall reports it).
  std::vector<std::vector<std::string>> findall(std::string_view s) const {
    std::vector<std::vector<std::string>> out;
    scan(s, [&](const PCRE2_SIZE* ov) {
      std::vector<std::string> m;
      if (groups_ == 0) {
        m.emplace_back(s.substr(ov[0], ov[1] - ov[0]));
      } else {
        for (int g = 1; g <= groups_; ++g) {
          const PCRE2_SIZE b = ov[2 * g], e = ov[2 * g + 1];
          m.emplace_back(b == PCRE2_UNSET ? std::string() : std::string(s.substr(b, e - b)));
        }
      }
      out.push_back(std::move(m));
    });
    return out;
  }

  // re.sub(pattern, "", s).
  std::string remove_all(std::string_view s) const {
    std::string out;
    std::size_t copied = 0;
    scan(s, [&](const PCRE2_SIZE* ov) {
      out.append(s.substr(copied, ov[0] - copied));
      copied = ov[1];
    });
    out.append(s.substr(copied));
    return out;
  }

 private:
  // Calls on_match(ovector) per match. After an empty match, the next one may not be empty at
  // the same position (Python 3.7+ rules: an empty match right after a non-empty one is kept).
  template <class F>
  void scan(std::string_view s, F&& on_match) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_, nullptr), &pcre2_match_data_free);
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    PCRE2_SIZE start = 0;
    uint32_t flags = 0;
    while (start <= s.size()) {
      const int rc = pcre2_match(code_, subject, s.size(), start, flags, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        if (flags == 0 || start >= s.size()) break;
        ++start;  // the empty match at `start` was taken: move one byte on
        flags = 0;
        continue;
      }
      KVQ_CHECK(rc > 0, "pcre2_match failed with code {}", rc);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      on_match(ov);
      start = ov[1];
      flags = ov[0] == ov[1] ? (PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED) : 0;
    }
  }

  pcre2_code* code_ = nullptr;
  int groups_ = 0;
};

std::string_view strip(std::string_view s) {
  // Python str.strip(): extracted text is ASCII here (see header), so ASCII whitespace suffices.
  constexpr std::string_view kSpace = " \t\n\r\v\f\x1c\x1d\x1e\x1f";
  const auto b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

const PyRegex& strict_regex() {
  static const PyRegex r(R"(#### (\-?[0-9\.\,]+))");
  return r;
}
const PyRegex& flexible_regex() {
  static const PyRegex r(R"((-?[$0-9.,]{2,})|(-?[0-9]+))");
  return r;
}
const std::array<std::unique_ptr<PyRegex>, 4>& ignore_regexes() {
  static const std::array<std::unique_ptr<PyRegex>, 4> r{
      std::make_unique<PyRegex>(","), std::make_unique<PyRegex>(R"(\$)"),
      std::make_unique<PyRegex>("(?s).*#### "), std::make_unique<PyRegex>(R"(\.$)")};
  return r;
}

}  // namespace

std::string gsm8k_strict_extract(std::string_view response) {
  const auto matches = strict_regex().findall(response);
  if (matches.empty()) return std::string(kGsm8kInvalid);
  return std::string(strip(matches.front()[0]));  // group_select 0
}

std::string gsm8k_flexible_extract(std::string_view response) {
  const auto matches = flexible_regex().findall(response);
  if (matches.empty()) return std::string(kGsm8kInvalid);
  for (const std::string& group : matches.back()) {  // group_select -1; first non-empty group
    if (!group.empty()) return std::string(strip(group));
  }
  return std::string(kGsm8kInvalid);
}

std::string gsm8k_normalize(std::string_view text) {
  std::string s(text);
  for (const auto& re : ignore_regexes()) s = re->remove_all(s);
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

bool gsm8k_exact_match(std::string_view prediction, std::string_view target) {
  std::string p = gsm8k_normalize(prediction), t = gsm8k_normalize(target);
  while (!p.empty() && p.back() == '\0') p.pop_back();
  while (!t.empty() && t.back() == '\0') t.pop_back();
  return p == t;
}

Gsm8kScore score_gsm8k(std::string_view response, std::string_view target) {
  Gsm8kScore s;
  s.strict = gsm8k_strict_extract(response);
  s.flexible = gsm8k_flexible_extract(response);
  s.strict_correct = gsm8k_exact_match(s.strict, target);
  s.flexible_correct = gsm8k_exact_match(s.flexible, target);
  return s;
}

std::string gsm8k_gold_answer(std::string_view target) {
  const auto pos = target.rfind("#### ");
  if (pos == std::string_view::npos) return {};
  return std::string(strip(target.substr(pos + 5)));
}

}  // namespace kvq::eval
