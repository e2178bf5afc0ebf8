#include "kvq/lifecycle/match.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <fmt/ranges.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/tokenizer/regex.h"

namespace kvq::lifecycle {
namespace {

constexpr std::string_view kRegexPrefix = "re:";

bool is_regex(std::string_view target) { return target.starts_with(kRegexPrefix); }

// Compiled patterns are cached: matching walks every module for every target. PCRE2 (through
// tok::Regex), not std::regex: targets come from recipes and checkpoints, and PCRE2 bounds a
// backtracking pattern where std::regex would recurse until the stack overflows. Its syntax is
// Python re's for the patterns recipes use.
const tok::Regex& compiled(std::string_view pattern) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<tok::Regex>, std::less<>> cache;
  std::lock_guard lock(mutex);
  auto it = cache.find(pattern);
  if (it == cache.end()) {
    try {
      auto re = std::make_unique<tok::Regex>(std::string(pattern),
                                             "target 're:" + std::string(pattern) + "'");
      it = cache.emplace(std::string(pattern), std::move(re)).first;
    } catch (const FormatError& e) {
      fail<ConfigError>("invalid target regex: {}", e.what());
    }
  }
  return *it->second;
}

}  // namespace

bool match_name(std::string_view name, std::string_view target) {
  if (is_regex(target)) {
    // Python re.match: the match must start at position 0 but may end anywhere.
    try {
      return compiled(target.substr(kRegexPrefix.size())).match_prefix(name);
    } catch (const FormatError& e) {
      fail<ConfigError>("{} (matching module '{}')", e.what(), name);
    }
  }
  return target == name;
}

bool match_class(const model::Module& module, std::string_view target) {
  for (const std::string& cls : module.class_hierarchy()) {
    if (cls == target || (cls == "LinearBase" && target == "Linear")) return true;
  }
  return false;
}

bool is_match(std::string_view name, const model::Module& module,
              std::span<const std::string> targets, std::span<const std::string> ignore) {
  // kvq's module tree has no InternalModule (observers and hooks are not modules).
  auto hit = [&](const std::string& t) { return match_name(name, t) || match_class(module, t); };
  return std::any_of(targets.begin(), targets.end(), hit) &&
         std::none_of(ignore.begin(), ignore.end(), hit);
}

bool is_match(std::string_view name, const model::Module& module, std::string_view target) {
  return match_name(name, target) || match_class(module, target);
}

std::vector<std::pair<std::string, model::Module*>> match_named_modules(
    model::Module& root, std::span<const std::string> targets, std::span<const std::string> ignore,
    bool warn_on_fail, std::vector<std::string>* unmatched) {
  std::vector<std::pair<std::string, model::Module*>> out;
  std::set<std::string> still_unmatched(targets.begin(), targets.end());
  for (model::Module* m : root.named_modules()) {
    for (const std::string& target : targets) {
      if (is_match(m->name(), *m, target)) {
        still_unmatched.erase(target);
        if (!is_match(m->name(), *m, ignore, {})) out.emplace_back(m->name(), m);
        break;  // the reference stops at the first matching target
      }
    }
  }
  std::vector<std::string> missing;
  for (const std::string& target : targets) {
    if (still_unmatched.count(target) &&
        std::find(missing.begin(), missing.end(), target) == missing.end())
      missing.push_back(target);
  }
  if (warn_on_fail) {
    for (const std::string& target : missing)
      log::warn("Could not match `{}` in instance of {}", target, root.class_name());
  }
  if (unmatched) *unmatched = std::move(missing);
  return out;
}

std::vector<std::string> match_targets(std::string_view name, const model::Module& module,
                                       std::span<const std::string> targets) {
  std::vector<std::string> sorted(targets.begin(), targets.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) {
    // Python sorted(key=lambda x: ("re:" in x, x)): note `in`, not startswith.
    const bool ra = a.find(kRegexPrefix) != std::string::npos;
    const bool rb = b.find(kRegexPrefix) != std::string::npos;
    if (ra != rb) return !ra;
    return a < b;
  });
  std::vector<std::string> matched;
  for (const std::string& t : sorted)
    if (match_name(name, t)) matched.push_back(t);
  for (const std::string& t : sorted)
    if (match_class(module, t) && std::find(matched.begin(), matched.end(), t) == matched.end())
      matched.push_back(t);
  return matched;
}

model::Module* find_submodule(model::Module& root, std::string_view name) {
  if (name.empty()) return &root;
  for (model::Module* m : root.named_modules())
    if (m->name() == name) return m;
  return nullptr;
}

bool is_narrow_match(model::Module& root, std::span<const std::string> targets,
                     std::string_view name, const model::Module* module) {
  if (module == nullptr) module = find_submodule(root, name);
  if (module == nullptr) fail<InvalidArgument>("is_narrow_match: no module named '{}'", name);
  // name.rsplit(".", 1)[0]: a top-level name is its own parent.
  const std::size_t dot = name.rfind('.');
  const std::string_view parent_name = dot == std::string_view::npos ? name : name.substr(0, dot);
  const model::Module* parent = find_submodule(root, parent_name);
  if (parent == nullptr)
    fail<InvalidArgument>("is_narrow_match: no parent module '{}'", parent_name);
  // The module's own named_modules() yields relative names; `f"{name}.{child}"` equals each
  // descendant's full name in our tree.
  std::vector<const model::Module*> descendants = module->named_modules();
  for (const std::string& target : targets) {
    if (!is_match(name, *module, target) || is_match(parent_name, *parent, target)) continue;
    bool child_matches = false;
    for (const model::Module* d : descendants) {
      if (d == module) continue;
      if (is_match(d->name(), *d, target)) {
        child_matches = true;
        break;
      }
    }
    if (!child_matches) return true;
  }
  return false;
}

void refuse_fused_module_targets(const model::CausalLM& model, std::span<const std::string> targets,
                                 std::string_view where) {
  const model::Architecture& arch = model.architecture();
  if (arch.fused_linears.empty()) return;
  const std::vector<model::FusedModule> fused = model::fused_modules(arch, model.config());
  for (const std::string& target : targets) {
    for (const model::FusedModule& f : fused) {
      if (!match_name(f.name, target)) continue;
      const bool parts_too = std::all_of(f.parts.begin(), f.parts.end(), [&](const std::string& p) {
        return match_name(p, target);
      });
      if (parts_too) continue;
      fail<NotSupported>(
          "{}: target '{}' selects {}'s fused Linear {} (as transformers names it), which kvq "
          "splits at load into {} (their rows of the checkpoint's {}.weight); target those by "
          "names that do not also match the fused one (re:.*self_attn\\.v_proj$, not "
          "re:.*v_proj$), or the attention module ({} / re:.*self_attn$) for attention and "
          "KV-cache quantization",
          where, target, arch.hf_class, f.name, fmt::join(f.parts, ", "), f.name,
          arch.attention_classes.front());
    }
  }
}

}  // namespace kvq::lifecycle
