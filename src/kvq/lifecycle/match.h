// Target matching: which modules a recipe's `targets` / `ignore` select
// (compressed-tensors 0.19.0 `utils/match.py`, installed version).
//
// A target is an exact module name, "re:<pattern>" (Python `re.match`: anchored at the start
// only; use `$` to anchor the end, e.g. "re:.*self_attn$"), or a class name matched through the
// class hierarchy ("LlamaAttention", "Module"; "Linear" also matches vLLM's "LinearBase").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvq/model/causal_lm.h"
#include "kvq/model/module.h"

namespace kvq::lifecycle {

// Exact equality, or for "re:<pattern>" a regex match anchored at the start of `name`.
// ConfigError naming the target when the pattern does not compile.
bool match_name(std::string_view name, std::string_view target);
// Some class of the module's hierarchy is named `target` (or it is a LinearBase and the target
// is "Linear").
bool match_class(const model::Module& module, std::string_view target);
// Some target matches by name or class and no ignore entry does.
bool is_match(std::string_view name, const model::Module& module,
              std::span<const std::string> targets, std::span<const std::string> ignore = {});
bool is_match(std::string_view name, const model::Module& module, std::string_view target);

// (name, module) pairs of `root.named_modules()` order that some target matches and no ignore
// entry matches. Logs "Could not match `T` in instance of <RootClass>" for every target that
// matched nothing (counting ignored matches as matches, like the reference) when warn_on_fail;
// `unmatched` (optional) receives those targets in the order given.
std::vector<std::pair<std::string, model::Module*>> match_named_modules(
    model::Module& root, std::span<const std::string> targets,
    std::span<const std::string> ignore = {}, bool warn_on_fail = false,
    std::vector<std::string>* unmatched = nullptr);

// The targets matching (name, module), most specific first: name matches (sorted by
// ("re:" in t, t): exact names before regexes, each alphabetical), then class matches
// (same order).
std::vector<std::string> match_targets(std::string_view name, const model::Module& module,
                                       std::span<const std::string> targets);

// 0.19.0 semantics (#753): some target matches (name, module) but matches neither its parent
// (name.rsplit(".", 1)[0]; for a top-level name that is the module itself, so never narrow)
// nor any of its descendants. `module` defaults to root.find(name).
bool is_narrow_match(model::Module& root, std::span<const std::string> targets,
                     std::string_view name, const model::Module* module = nullptr);

// root's descendant called `name` ("" = root); nullptr when absent.
model::Module* find_submodule(model::Module& root, std::string_view name);

// A recipe written for transformers may name a Linear that transformers has and kvq splits at load
// (Phi-3's qkv_proj, gate_up_proj: model/architecture.h, FusedLinear). NotSupported naming
// `where`, the target, the fused module and its parts when a name target ("re:" pattern or exact
// name) matches such a module of `model` without matching each of its parts, so it means the fused
// module kvq's tree does not have (it would otherwise match nothing, or only some of its rows).
// Targets that match the parts too ("re:.*self_attn", "re:.*proj$") select in kvq what they select
// in transformers, split; class targets ("Linear") match the parts as they match the fused module.
void refuse_fused_module_targets(const model::CausalLM& model, std::span<const std::string> targets,
                                 std::string_view where);

}  // namespace kvq::lifecycle
