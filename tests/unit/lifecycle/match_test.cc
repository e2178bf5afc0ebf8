// Target matching, including every TestIsNarrowMatch case of compressed-tensors' test_match.py
// (spec §6.5) on the same DummyModel shape, built with model::Module.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/lifecycle/match.h"
#include "kvq/model/module.h"

namespace kvq::lifecycle {
namespace {

using model::Module;
using Targets = std::vector<std::string>;

// DummyModel: transformer.layers[0..1].self_attn.{q,k,v}_proj (Linear) + top-level layer1/layer2.
std::unique_ptr<Module> dummy_model() {
  auto root = std::make_unique<Module>("", std::vector<std::string>{"DummyModel", "Module"});
  auto* tr = root->add_child(
      std::make_unique<Module>("transformer", std::vector<std::string>{"Transformer", "Module"}));
  auto* layers =
      tr->add_child(std::make_unique<Module>("transformer.layers", model::module_list_classes()));
  for (int i = 0; i < 2; ++i) {
    const std::string p = "transformer.layers." + std::to_string(i);
    auto* layer = layers->add_child(
        std::make_unique<Module>(p, std::vector<std::string>{"DecoderLayer", "Module"}));
    auto* attn = layer->add_child(std::make_unique<Module>(
        p + ".self_attn", std::vector<std::string>{"LlamaAttention", "Module"}));
    for (const char* n : {"q_proj", "k_proj", "v_proj"})
      attn->add_child(std::make_unique<Module>(p + ".self_attn." + n, model::linear_classes()));
  }
  root->add_child(std::make_unique<Module>("layer1", model::linear_classes()));
  root->add_child(std::make_unique<Module>("layer2", model::linear_classes()));
  return root;
}

TEST(MatchName, ExactAndRegexAnchoredAtStartOnly) {
  EXPECT_TRUE(match_name("model.layers.0.self_attn", "model.layers.0.self_attn"));
  EXPECT_FALSE(match_name("model.layers.0.self_attn", "model.layers.0"));
  EXPECT_TRUE(match_name("model.layers.0.self_attn", "re:.*self_attn$"));
  EXPECT_FALSE(match_name("model.layers.0.self_attn.q_proj", "re:.*self_attn$"));
  EXPECT_TRUE(match_name("model.layers.0.self_attn.q_proj", "re:.*self_attn"));  // no end anchor
  EXPECT_FALSE(match_name("model.layers.0.self_attn", "re:self_attn"));          // start anchor
  EXPECT_TRUE(match_name("model.layers.10.mlp", "re:model\\.layers\\.1"));       // prefix match
  EXPECT_TRUE(match_name("model.layers.3.self_attn", "re:.*(self_attn|attention)$"));
  EXPECT_THROW(match_name("x", "re:(unclosed"), ConfigError);
}

TEST(MatchClass, HierarchyAndLinearBase) {
  Module attn("a", std::vector<std::string>{"LlamaAttention", "Module"});
  EXPECT_TRUE(match_class(attn, "LlamaAttention"));
  EXPECT_TRUE(match_class(attn, "Module"));
  EXPECT_FALSE(match_class(attn, "Linear"));
  Module vllm_linear("l", {"RowParallelLinear", "LinearBase", "Module"});
  EXPECT_TRUE(match_class(vllm_linear, "Linear"));
  EXPECT_FALSE(match_class(vllm_linear, "re:.*Linear"));
}

TEST(IsMatch, IgnoreByNameOrClass) {
  auto root = dummy_model();
  Module* q = find_submodule(*root, "transformer.layers.0.self_attn.q_proj");
  ASSERT_NE(q, nullptr);
  const Targets linear{"Linear"};
  EXPECT_TRUE(is_match(q->name(), *q, linear));
  const Targets ign_name{"transformer.layers.0.self_attn.q_proj"}, ign_re{"re:.*q_proj$"},
      ign_cls{"Linear"};
  EXPECT_FALSE(is_match(q->name(), *q, linear, ign_name));
  EXPECT_FALSE(is_match(q->name(), *q, linear, ign_re));
  EXPECT_FALSE(is_match(q->name(), *q, linear, ign_cls));
}

TEST(MatchNamedModules, OrderIgnoreAndUnmatched) {
  auto root = dummy_model();
  const Targets targets{"re:.*k_proj$", "LlamaAttention", "NoSuchThing"};
  const Targets ignore{"transformer.layers.1.self_attn"};
  std::vector<std::string> unmatched;
  auto got = match_named_modules(*root, targets, ignore, true, &unmatched);
  std::vector<std::string> names;
  for (auto& [n, m] : got) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"transformer.layers.0.self_attn",
                                             "transformer.layers.0.self_attn.k_proj",
                                             "transformer.layers.1.self_attn.k_proj"}));
  EXPECT_EQ(unmatched, (std::vector<std::string>{"NoSuchThing"}));
}

TEST(MatchTargets, PriorityExactThenRegexThenClass) {
  auto root = dummy_model();
  Module* a = find_submodule(*root, "transformer.layers.0.self_attn");
  const Targets targets{"LlamaAttention", "re:.*self_attn$", "transformer.layers.0.self_attn",
                        "re:.*attn$",     "Module",          "Linear"};
  EXPECT_EQ(match_targets(a->name(), *a, targets),
            (Targets{"transformer.layers.0.self_attn", "re:.*attn$", "re:.*self_attn$",
                     "LlamaAttention", "Module"}));
}

// --- TestIsNarrowMatch (compressed-tensors tests/test_utils/test_match.py) ---

TEST(IsNarrowMatch, TrueChildOnly) {
  auto root = dummy_model();
  const std::string name = "transformer.layers.0.self_attn.q_proj";
  EXPECT_TRUE(is_narrow_match(*root, Targets{"re:.*q_proj$"}, name));
}

TEST(IsNarrowMatch, FalseWhenParentAlsoMatches) {
  auto root = dummy_model();
  const std::string name = "transformer.layers.0.self_attn.q_proj";
  EXPECT_FALSE(is_narrow_match(*root, Targets{"re:transformer\\.layers\\.0\\..*"}, name));
}

TEST(IsNarrowMatch, FalseWhenNeitherMatches) {
  auto root = dummy_model();
  const std::string name = "transformer.layers.0.self_attn.k_proj";
  EXPECT_FALSE(is_narrow_match(*root, Targets{"re:.*q_proj$"}, name));
}

TEST(IsNarrowMatch, IterableTargetsAnyTrue) {
  auto root = dummy_model();
  const std::string name = "transformer.layers.0.self_attn.q_proj";
  EXPECT_TRUE(
      is_narrow_match(*root, Targets{"re:transformer\\.layers\\.0\\..*", "re:.*q_proj$"}, name));
}

TEST(IsNarrowMatch, WithExplicitModuleArgument) {
  auto root = dummy_model();
  const std::string name = "transformer.layers.0.self_attn.q_proj";
  Module* m = find_submodule(*root, name);
  EXPECT_TRUE(is_narrow_match(*root, Targets{"re:.*q_proj$"}, name, m));
  EXPECT_FALSE(is_narrow_match(*root, Targets{"re:transformer\\.layers\\.0\\..*"}, name, m));
}

TEST(IsNarrowMatch, TopLevelBehaviorDocumented) {
  // A top-level name has no "." so its "parent" is itself: never narrow.
  auto root = dummy_model();
  EXPECT_FALSE(is_narrow_match(*root, Targets{"layer1"}, "layer1"));
  EXPECT_FALSE(is_narrow_match(*root, Targets{"re:^layer1$"}, "layer1"));
}

TEST(IsNarrowMatch, ChildrenCheckOfInstalledVersion) {
  // 0.19.0 (#753): a target that also matches a descendant is not narrow.
  auto root = dummy_model();
  const std::string attn = "transformer.layers.0.self_attn";
  EXPECT_TRUE(is_narrow_match(*root, Targets{"LlamaAttention"}, attn));
  EXPECT_TRUE(is_narrow_match(*root, Targets{"re:.*self_attn$"}, attn));
  EXPECT_FALSE(is_narrow_match(*root, Targets{"re:.*self_attn"}, attn));  // q_proj matches too
  EXPECT_FALSE(is_narrow_match(*root, Targets{"Module"}, attn));          // parent is a Module
}

// `re:` targets run on PCRE2 with limits (issue 21): a catastrophically backtracking pattern is
// an error naming it, not minutes of search or a stack overflow; a bad pattern is a ConfigError.
TEST(MatchName, BacktrackingAndInvalidPatternsAreErrors) {
  const std::string name = "model.layers.10.self_attn.q_proj_with_a_rather_long_suffix_name";
  try {
    match_name(name, "re:([\\w.]+)+(?!)");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("match limit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("re:([\\w.]+)+(?!)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(match_name(name, "re:(unclosed"), ConfigError);
  EXPECT_TRUE(match_name(name, "re:.*q_proj"));
  EXPECT_FALSE(match_name(name, "re:q_proj"));  // re.match: anchored at the start
}

}  // namespace
}  // namespace kvq::lifecycle
