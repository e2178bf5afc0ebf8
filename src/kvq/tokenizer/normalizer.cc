#include "kvq/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"

namespace kvq::tok {
namespace {

using nlohmann::json;

template <class Steps>
void add(const json& spec, const std::string& where, Steps& out) {
  if (spec.is_null()) return;
  const std::string type = spec.value("type", std::string("?"));
  if (type == "Sequence") {
    for (const json& n : spec.at("normalizers")) add(n, where, out);
    return;
  }
  if (type == "Replace") {
    const json& pattern = spec.at("pattern");
    if (!pattern.contains("String")) {
      fail<NotSupported>("{}: normalizer Replace with a Regex pattern not supported (String only)",
                         where);
    }
    std::string from = pattern.at("String").get<std::string>();
    if (from.empty()) fail<FormatError>("{}: normalizer Replace has an empty pattern", where);
    out.push_back({std::move(from), spec.at("content").get<std::string>()});
    return;
  }
  if (type == "Prepend") {
    out.push_back({std::string(), spec.at("prepend").get<std::string>()});
    return;
  }
  fail<NotSupported>(
      "{}: normalizer '{}' not supported; supported: Replace (String), Prepend, Sequence", where,
      type);
}

}  // namespace

Normalizer Normalizer::from_json(const json& spec, const std::string& where) {
  Normalizer n;
  add(spec, where, n.steps_);
  return n;
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string cur(text), next;
  for (const auto& [from, to] : steps_) {
    if (from.empty()) {  // Prepend
      if (!cur.empty()) cur.insert(0, to);
      continue;
    }
    next.clear();
    size_t pos = 0;
    for (size_t hit = cur.find(from); hit != std::string::npos; hit = cur.find(from, pos)) {
      next.append(cur, pos, hit - pos);
      next += to;
      pos = hit + from.size();
    }
    next.append(cur, pos);
    cur.swap(next);
  }
  return cur;
}

}  // namespace kvq::tok
