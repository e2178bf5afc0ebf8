// compressed-tensors' transform data model (kvq/quant/transform_config.h) and llm-compressor's
// SpinQuantModifier → TransformConfig. The dumps the reference writes are checked against
// tests/data/quant/transform_goldens.json (tools/reference/make_transform_goldens.py); the
// rules pydantic enforces (extra keys forbidden, singletons wrapped, dtype spelling) here.
#include <fstream>

#include <gtest/gtest.h>

#include "kvq/core/error.h"
#include "kvq/quant/quant_config.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"

namespace kvq::quant {
namespace {

const Json& goldens() {
  static const Json g = [] {
    std::ifstream in(kvq::test::test_data_dir() / "quant" / "transform_goldens.json");
    return Json::parse(in);
  }();
  return g;
}

TEST(TransformConfigGolden, SpinQuantConfigsDumpAsTheReferenceMakesThem) {
  ASSERT_FALSE(goldens().at("spinquant").empty());
  for (const auto& c : goldens().at("spinquant")) {
    SCOPED_TRACE(c.at("modifier").dump());
    const TransformConfig tc =
        spinquant_transform_config(c.at("modifier"), c.at("head_dim").get<int>());
    EXPECT_EQ(tc.to_json().dump(), Json::parse(c.at("dump").get<std::string>()).dump());
    // Round trip through the dump, byte-identical.
    EXPECT_EQ(TransformConfig::from_json(tc.to_json()).to_json().dump(), tc.to_json().dump());
  }
}

TEST(TransformConfigGolden, ParsedConfigsDumpAsTheReference) {
  for (const auto& c : goldens().at("configs")) {
    SCOPED_TRACE(c.at("input").dump());
    EXPECT_EQ(TransformConfig::from_json(c.at("input")).to_json().dump(),
              Json::parse(c.at("dump").get<std::string>()).dump());
  }
}

TEST(TransformConfigGolden, InvalidConfigsAreRefusedLikeTheReference) {
  for (const auto& c : goldens().at("invalid")) {
    SCOPED_TRACE(c.dump());
    EXPECT_THROW(TransformConfig::from_json(c), ConfigError);
  }
}

TEST(TransformConfig, NoneIsAnEmptyObjectAndSingletonsAreWrapped) {
  // A checkpoint without transforms carries `{}`; a config with no groups dumps its empty
  // config_groups as the reference does, and a checkpoint block writes `{}` for it.
  EXPECT_TRUE(TransformConfig::from_json(Json::object()).empty());
  EXPECT_EQ(TransformConfig{}.to_json().dump(), R"({"config_groups":{}})");
  const TransformArgs a = TransformArgs::from_json(
      Json::parse(R"({"targets": "re:.*self_attn$", "location": "k_cache", "ignore": "x"})"));
  EXPECT_EQ(a.targets, std::vector<std::string>{"re:.*self_attn$"});
  EXPECT_EQ(a.ignore, std::vector<std::string>{"x"});
  EXPECT_EQ(a.location, TransformLocation::kKCache);
  EXPECT_TRUE(is_online(TransformLocation::kQAttn));
  EXPECT_FALSE(is_online(TransformLocation::kWeightInput));
  const TransformScheme s =
      TransformScheme::from_json(Json::parse(R"({"type": "hadamard", "precision": "float64"})"));
  EXPECT_EQ(s.to_json().at("precision"), "torch.float64");
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TransformConfig, ErrorsNameTheField) {
  EXPECT_NE(error_of([] {
              TransformArgs::from_json(
                  Json::parse(R"({"targets": ["a"], "location": "q_attn", "bogus": 1})"));
            }).find("extra field 'bogus'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TransformArgs::from_json(Json::parse(R"({"targets": ["a"], "location": "v_cache"})"));
            }).find("'v_cache' is not a transform location"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              TransformScheme::from_json(Json::parse(R"({"type": "hadamard", "precision": "f9"})"));
            }).find("torch.f9"),
            std::string::npos);
}

TEST(SpinQuant, RecipesCarryTheModifierAndRefuseWhatTheReferenceRefuses) {
  const QuantizationConfig c = parse_recipe(R"(
spin_stage:
  spin_modifiers:
    SpinQuantModifier:
      rotations: [r2, R3]
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      kv_cache_scheme: {num_bits: 8, type: float, strategy: tensor, symmetric: true}
)",
                                            "r.yaml");
  ASSERT_TRUE(c.spinquant.has_value());
  ASSERT_TRUE(c.kv_cache_scheme.has_value());
  const TransformConfig tc = spinquant_transform_config(*c.spinquant, 64);
  ASSERT_EQ(tc.config_groups.size(), 2u);
  EXPECT_EQ(tc.config_groups[0].first, "R2");
  EXPECT_EQ(tc.config_groups[1].second.apply[1].location, TransformLocation::kKCache);
  EXPECT_EQ(tc.config_groups[1].second.head_dim, 64);
  // Rotations only: a config with no quantization.
  const QuantizationConfig r = parse_recipe(
      "spin_stage:\n  spin_modifiers:\n    SpinQuantModifier:\n      rotations: [R3]\n",
      "rot.yaml");
  EXPECT_TRUE(r.config_groups.empty());
  EXPECT_FALSE(r.kv_cache_scheme.has_value());
  EXPECT_NE(error_of([] {
              parse_recipe(
                  "spin_stage:\n  spin_modifiers:\n    SpinQuantModifier:\n      randomize: true\n",
                  "x.yaml");
            }).find("randomize is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_recipe(
                  "spin_stage:\n  spin_modifiers:\n    SpinQuantModifier:\n      rotations: [R5]\n",
                  "x.yaml");
            }).find("'R5'"),
            std::string::npos);
}

TEST(SpinQuant, TransformConfigIsWrittenIntoTheCheckpointBlock) {
  QuantizationConfig c;
  c.transforms = spinquant_transform_config(Json::parse(R"({"rotations": ["R3"]})"), 64);
  const Json j = c.to_checkpoint_json();
  EXPECT_EQ(j.at("transform_config").dump(), c.transforms.to_json().dump());
  // ... and read back from it.
  EXPECT_EQ(QuantizationConfig::from_json(j).transforms, c.transforms);
  EXPECT_EQ(QuantizationConfig{}.to_checkpoint_json().at("transform_config").dump(), "{}");
}

// Recipes from strangers (issue 21): aliases expand into copies, so a "billion laughs" file is
// refused by its node count; a scalar of 200,000 digits is matched without std::regex's
// per-character recursion (it overflowed the stack) and stays a string.
TEST(RecipeLimits, AliasBombAndLongScalars) {
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 9; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  try {
    yaml_to_json(bomb, "bomb.yaml");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bomb.yaml: YAML expands to more than"), std::string::npos)
        << e.what();
  }
  const std::string digits(200'000, '1');
  const Json j = yaml_to_json("n: " + digits + "\nf: 1.5e+3\ni: 1_000\nb: off\nz: ~\n", "r.yaml");
  EXPECT_EQ(j["n"], digits);  // beyond int64: a string, as PyYAML's int would not be
  EXPECT_EQ(j["f"], 1500.0);
  EXPECT_EQ(j["i"], 1000);
  EXPECT_EQ(j["b"], false);
  EXPECT_TRUE(j["z"].is_null());
  EXPECT_EQ(yaml_to_json("v: 1e3\n", "r.yaml")["v"], "1e3");  // YAML 1.1: no dot, a string
}

}  // namespace
}  // namespace kvq::quant
