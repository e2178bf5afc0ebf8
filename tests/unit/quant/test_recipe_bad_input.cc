// Recipes that the fuzzer (tests/fuzz/fuzz_recipe.cc) found mishandled: each must end in a
// kvq::Error naming the recipe, never another exception or a crash. The inputs themselves are
// kept in tests/fuzz/corpus/recipe/ (crash-*).
#include <string>

#include <gtest/gtest.h>

#include "kvq/core/error.h"
#include "kvq/quant/recipe.h"

namespace kvq::quant {
namespace {

// A key holding a byte that is not UTF-8 used to reach forbid_extra's message, whose json.dump()
// threw nlohmann's type_error 316 ("invalid UTF-8 byte") naming neither file nor key
// (fuzz crash-ca2b3d51...).
TEST(RecipeBadInput, YamlThatIsNotUtf8IsAFormatErrorNamingTheRecipeAndLine) {
  const std::string recipe =
      "spinquant_stage:\n"
      "  spinquant_modifiers:\n"
      "    SpinQuantModifier:\n"
      "      rotations: [R3]\n"
      "      bad\x80key: 1\n";
  try {
    (void)parse_recipe(recipe, "recipe.yaml");
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("recipe.yaml:5:10: invalid YAML: not UTF-8 (byte 0x80)"),
              std::string::npos)
        << e.what();
  }
  // A value too, and a truncated multi-byte sequence.
  EXPECT_THROW((void)parse_recipe("a: caf\xc3\n", "r.yaml"), FormatError);
  // Valid UTF-8 beyond ASCII passes the check (the recipe is then judged on its content).
  try {
    (void)parse_recipe("caf\xc3\xa9: 1\n", "r.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("not UTF-8"), std::string::npos) << e.what();
  }
}

// yaml-cpp turns a NUL into a lone 0x85 byte: the same type_error from forbid_extra's message
// (fuzz crash-2083c98f...). Like PyYAML, kvq refuses the characters a YAML stream may not hold.
TEST(RecipeBadInput, YamlWithNonPrintableCharactersIsAFormatErrorNamingThePlace) {
  const std::string recipe = std::string(
                                 "spinquant_stage:\n"
                                 "  spinquant_modifiers:\n"
                                 "    SpinQuantModifier:\n"
                                 "      j") +
                             '\0' + "x: max\n";
  try {
    (void)parse_recipe(recipe, "recipe.yaml");
    FAIL() << "accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("recipe.yaml:4:8: invalid YAML: unacceptable character "
                                         "U+0000: special characters are not allowed"),
              std::string::npos)
        << e.what();
  }
  // A C1 control (U+0080) and DEL too; tab, NEL (U+0085) and U+00A0 are allowed.
  EXPECT_THROW((void)parse_recipe("a: x\xc2\x80\n", "r.yaml"), FormatError);
  EXPECT_THROW((void)parse_recipe("a: x\x7f\n", "r.yaml"), FormatError);
  try {
    (void)parse_recipe("a:\tx\xc2\x85\xc2\xa0\n", "r.yaml");
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("invalid YAML"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvq::quant
