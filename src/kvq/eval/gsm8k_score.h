// Scoring of GSM8K generations exactly as lm-eval's `gsm8k` task (lm_eval/tasks/gsm8k/gsm8k.yaml,
// lm-eval 0.4.13) does it: two filter pipelines, then exact_match against the full target text.
//
//   "strict-match":     regex `#### (\-?[0-9\.\,]+)`, the first match's group 1 (group_select 0),
//                       stripped; "[invalid]" when nothing matches.
//   "flexible-extract": regex `(-?[$0-9.,]{2,})|(-?[0-9]+)`, the LAST match (group_select -1),
//                       its first non-empty group, stripped; "[invalid]" when nothing matches.
//   exact_match:        on both the extracted answer and the target (the whole "answer" field,
//                       reasoning included), apply re.sub(pattern, "") for each of
//                       ",", "\$", "(?s).*#### ", "\.$" in that order, then lower-case
//                       (ignore_case: true; ignore_punctuation: false), then compare.
//
// Semantics copied, not code: Python `re` findall/sub are reproduced with PCRE2 on bytes. For
// these ASCII-only patterns byte matching equals Python's code-point matching (a match can
// neither start nor end inside a multi-byte character: every pattern boundary is ASCII or the
// text's end). Python's `$` (end, or before a final "\n") is PCRE2's default `$`. Lower-casing
// is ASCII-only, which is exact here because an extracted answer is ASCII by construction (the
// regex groups only admit [-$0-9.,]) or "[invalid]"; a non-ASCII target can then never compare
// equal either way. numpy compares its fixed-width unicode strings ignoring trailing NULs; so do
// we. Agreement with lm-eval is checked on 50 cases in tests/golden/eval_gsm8k.
#pragma once

#include <string>
#include <string_view>

namespace kvq::eval {

inline constexpr std::string_view kGsm8kInvalid = "[invalid]";

// The answers the two lm-eval filters extract from a model response.
std::string gsm8k_strict_extract(std::string_view response);
std::string gsm8k_flexible_extract(std::string_view response);

// exact_match's normalisation (regexes_to_ignore, then ignore_case).
std::string gsm8k_normalize(std::string_view text);
// exact_match of an extracted answer against the full target text.
bool gsm8k_exact_match(std::string_view prediction, std::string_view target);

struct Gsm8kScore {
  std::string strict, flexible;  // extracted answers
  bool strict_correct = false, flexible_correct = false;
};

Gsm8kScore score_gsm8k(std::string_view response, std::string_view target);

// The gold number of a GSM8K answer: what follows the last "#### " (trimmed), "" when absent.
// For display only; scoring uses gsm8k_exact_match on the full target, as lm-eval does.
std::string gsm8k_gold_answer(std::string_view target);

}  // namespace kvq::eval
