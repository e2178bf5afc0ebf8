#include "kvq/tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "kvq/core/error.h"
#include "kvq/tokenizer/regex.h"

namespace kvq::tok {
namespace {

using nlohmann::json;

// How a Split keeps the delimiters it finds (tokenizers' SplitDelimiterBehavior).
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Part {
  Span span;
  bool is_match;
};

// Cuts every piece at the matches of a pattern and combines matches and gaps per `behavior`,
// with the semantics of tokenizers' NormalizedString::split.
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, std::string literal, Behavior behavior,
                    bool invert)
      : regex_(std::move(regex)),
        literal_(std::move(literal)),
        behavior_(behavior),
        invert_(invert) {}

  void split(std::string_view text, std::vector<Span>& pieces,
             std::vector<Span>& tmp) const override {
    tmp.clear();
    thread_local std::vector<Span> matches;
    thread_local std::vector<Part> parts;
    for (const Span& piece : pieces) {
      matches.clear();
      std::string_view subject = text.substr(piece.begin, piece.end - piece.begin);
      find(subject, piece.begin, matches);
      parts.clear();
      uint32_t prev = piece.begin;
      for (const Span& m : matches) {
        if (m.begin > prev) parts.push_back({{prev, m.begin}, invert_});
        parts.push_back({m, !invert_});
        prev = m.end;
      }
      if (prev < piece.end) parts.push_back({{prev, piece.end}, invert_});
      combine(parts, tmp);
    }
    pieces.swap(tmp);
  }

 private:
  void find(std::string_view subject, uint32_t base, std::vector<Span>& out) const {
    if (regex_) {
      regex_->find_all(subject, base, out);
      return;
    }
    if (literal_.empty()) return;
    for (size_t pos = subject.find(literal_); pos != std::string_view::npos;
         pos = subject.find(literal_, pos + literal_.size())) {
      out.push_back(
          {base + static_cast<uint32_t>(pos), base + static_cast<uint32_t>(pos + literal_.size())});
    }
  }

  // Appends the pieces `parts` make under behavior_ to `out`.
  void combine(const std::vector<Part>& parts, std::vector<Span>& out) const {
    const size_t first = out.size();
    switch (behavior_) {
      case Behavior::kRemoved:
        for (const Part& p : parts) {
          if (!p.is_match) out.push_back(p.span);
        }
        break;
      case Behavior::kIsolated:
        for (const Part& p : parts) out.push_back(p.span);
        break;
      case Behavior::kMergedWithPrevious: {
        bool previous_match = false;
        for (const Part& p : parts) {
          if (p.is_match && !previous_match && out.size() > first) {
            out.back().end = p.span.end;
          } else {
            out.push_back(p.span);
          }
          previous_match = p.is_match;
        }
        break;
      }
      case Behavior::kMergedWithNext: {
        // A match is glued to the start of the piece after it (scanning backwards).
        bool previous_match = false;
        for (size_t i = parts.size(); i-- > 0;) {
          const Part& p = parts[i];
          if (p.is_match && !previous_match && out.size() > first) {
            out.back().begin = p.span.begin;
          } else {
            out.push_back(p.span);
          }
          previous_match = p.is_match;
        }
        std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
        break;
      }
      case Behavior::kContiguous: {
        int previous = -1;
        for (const Part& p : parts) {
          if (previous == static_cast<int>(p.is_match) && out.size() > first) {
            out.back().end = p.span.end;
          } else {
            out.push_back(p.span);
          }
          previous = p.is_match;
        }
        break;
      }
    }
  }

  std::unique_ptr<Regex> regex_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

// ByteLevel(use_regex=true) is a GPT-2-regex Split with Isolated behavior; the byte mapping
// itself lives in the BPE vocabulary.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  explicit ByteLevelPreTokenizer(const std::string& where)
      : split_(std::make_unique<Regex>(std::string(kGpt2Regex), where), "", Behavior::kIsolated,
               false) {}
  void split(std::string_view text, std::vector<Span>& pieces,
             std::vector<Span>& tmp) const override {
    split_.split(text, pieces, tmp);
  }
  bool is_byte_level() const override { return true; }

 private:
  SplitPreTokenizer split_;
};

// ByteLevel(use_regex=false): pieces pass through.
class ByteLevelNoRegex : public PreTokenizer {
 public:
  void split(std::string_view, std::vector<Span>&, std::vector<Span>&) const override {}
  bool is_byte_level() const override { return true; }
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void split(std::string_view text, std::vector<Span>& pieces,
             std::vector<Span>& tmp) const override {
    for (const auto& step : steps_) step->split(text, pieces, tmp);
  }
  bool is_byte_level() const override {
    for (const auto& step : steps_) {
      if (step->is_byte_level()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class NoPreTokenizer : public PreTokenizer {
 public:
  void split(std::string_view, std::vector<Span>&, std::vector<Span>&) const override {}
};

Behavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  fail<NotSupported>("{}: Split behavior '{}' not supported", where, name);
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& spec, const std::string& where) {
  if (spec.is_null()) return std::make_unique<NoPreTokenizer>();
  const std::string type = spec.at("type").get<std::string>();
  if (type == "ByteLevel") {
    if (spec.value("add_prefix_space", false)) {
      fail<NotSupported>("{}: pre_tokenizer ByteLevel with add_prefix_space=true not supported",
                         where);
    }
    if (spec.value("use_regex", true)) return std::make_unique<ByteLevelPreTokenizer>(where);
    return std::make_unique<ByteLevelNoRegex>();
  }
  if (type == "Digits") {
    // tokenizers' Digits uses char::is_numeric, i.e. categories Nd, Nl, No = \p{N}.
    bool individual = spec.value("individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(
        std::make_unique<Regex>(individual ? R"(\p{N})" : R"(\p{N}+)", where), "",
        Behavior::kIsolated, false);
  }
  if (type == "Split") {
    const json& pattern = spec.at("pattern");
    Behavior behavior = parse_behavior(spec.at("behavior").get<std::string>(), where);
    bool invert = spec.value("invert", false);
    if (pattern.contains("Regex")) {
      return std::make_unique<SplitPreTokenizer>(
          std::make_unique<Regex>(pattern.at("Regex").get<std::string>(), where), "", behavior,
          invert);
    }
    return std::make_unique<SplitPreTokenizer>(nullptr, pattern.at("String").get<std::string>(),
                                               behavior, invert);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const json& step : spec.at("pretokenizers")) {
      steps.push_back(make_pre_tokenizer(step, where));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  fail<NotSupported>(
      "{}: pre_tokenizer type '{}' not supported; supported: ByteLevel, Digits, Split, Sequence",
      where, type);
}

}  // namespace kvq::tok
