// Data model vs compressed-tensors 0.19.0 / llm-compressor 0.14.0.1 (tests/data/quant/
// config_goldens.json): preset dumps, args dumps, config dumps (model_dump order and the sorted
// config.json text), recipes, and the reference's error messages.
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
    std::ifstream in(kvq::test::test_data_dir() / "quant" / "config_goldens.json");
    return Json::parse(in);
  }();
  return g;
}

TEST(QuantConfigGolden, PresetDumps) {
  for (const auto& [name, dump] : goldens().at("presets").items()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(preset_name_to_scheme(name, {"Linear"}).to_json().dump(),
              Json::parse(dump.get<std::string>()).dump());
  }
  EXPECT_EQ(preset_scheme_names().size(), goldens().at("presets").size());
}

TEST(QuantConfigGolden, ValidArgsDumpAndRoundTrip) {
  for (const auto& c : goldens().at("valid_args")) {
    SCOPED_TRACE(c.at("input").dump());
    const QuantizationArgs a = QuantizationArgs::from_json(c.at("input"));
    EXPECT_EQ(a.to_json().dump(), Json::parse(c.at("dump").get<std::string>()).dump());
    const QuantizationArgs b = QuantizationArgs::from_json(a.to_json());
    EXPECT_EQ(b.to_json().dump(), a.to_json().dump());
  }
}

void expect_message(const std::function<void()>& fn, const Json& error) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected: " << error.at("msg").get<std::string>();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(error.at("msg").get<std::string>()), std::string::npos)
        << "got: " << e.what() << "\nwant: " << error.at("msg").get<std::string>();
  }
}

TEST(QuantConfigGolden, InvalidArgsMessages) {
  for (const auto& c : goldens().at("invalid_args")) {
    SCOPED_TRACE(c.at("input").dump());
    if (c.at("error").is_null()) {
      EXPECT_NO_THROW(QuantizationArgs::from_json(c.at("input")));
      continue;
    }
    if (c.at("error").value("type", "") == "is_instance_of") {
      // pydantic's dtype union message; kvq names the dtype instead (documented deviation).
      EXPECT_THROW(QuantizationArgs::from_json(c.at("input")), ConfigError);
      continue;
    }
    expect_message([&] { QuantizationArgs::from_json(c.at("input")); }, c.at("error"));
  }
}

TEST(QuantConfigGolden, InvalidSchemeMessages) {
  for (const auto& c : goldens().at("invalid_schemes")) {
    SCOPED_TRACE(c.at("input").dump());
    expect_message([&] { QuantizationScheme::from_json(c.at("input")); }, c.at("error"));
  }
}

TEST(QuantConfigGolden, ConfigDumps) {
  for (const auto& c : goldens().at("configs")) {
    SCOPED_TRACE(c.at("input").dump());
    const QuantizationConfig cfg = QuantizationConfig::from_json(c.at("input"));
    EXPECT_EQ(cfg.to_json().dump(), Json::parse(c.at("dump").get<std::string>()).dump());
    Json wrapped = Json::object();
    wrapped["quantization_config"] = cfg.to_checkpoint_json();
    EXPECT_EQ(dump_sorted(wrapped, 2), c.at("config_json").get<std::string>());
    // config.json round trip: parse what we wrote, same config.
    const QuantizationConfig again =
        parse_quantization_config(Json::parse(dump_sorted(wrapped, 2)), "config.json");
    EXPECT_EQ(again.to_json().dump(), cfg.to_json().dump());
  }
  for (const auto& c : goldens().at("invalid_configs")) {
    SCOPED_TRACE(c.at("input").dump());
    expect_message([&] { QuantizationConfig::from_json(c.at("input")); }, c.at("error"));
  }
}

TEST(QuantConfigGolden, Recipes) {
  for (const auto& c : goldens().at("recipes")) {
    SCOPED_TRACE(c.at("text").get<std::string>());
    const QuantizationConfig cfg = parse_recipe(c.at("text").get<std::string>(), "recipe.yaml");
    EXPECT_EQ(cfg.to_json().dump(), Json::parse(c.at("resolved").get<std::string>()).dump());
  }
  for (const auto& c : goldens().at("bad_recipes")) {
    SCOPED_TRACE(c.at("text").get<std::string>());
    expect_message([&] { parse_recipe(c.at("text").get<std::string>(), "recipe.yaml"); },
                   c.at("error"));
  }
}

TEST(QuantConfig, SeedRecipeParses) {
  const QuantizationConfig cfg = parse_recipe(
      "quant_stage:\n  quant_modifiers:\n    QuantizationModifier:\n      kv_cache_scheme: "
      "{num_bits: 8, type: float, strategy: attn_head, dynamic: false, symmetric: true, "
      "observer: static_minmax}\n",
      "seed.yaml");
  ASSERT_TRUE(cfg.kv_cache_scheme.has_value());
  EXPECT_EQ(cfg.kv_cache_scheme->strategy, QuantizationStrategy::kAttnHead);
  EXPECT_EQ(cfg.kv_cache_scheme->observer, "static_minmax");
  EXPECT_EQ(cfg.kv_cache_scheme->zp_dtype, DType::kF8E4M3);
}

TEST(QuantConfig, MalformedYamlNamesLine) {
  try {
    parse_recipe("quant_stage:\n  quant_modifiers:\n    QuantizationModifier: {a: [1, 2\n",
                 "bad.yaml");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.yaml:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvq::quant
