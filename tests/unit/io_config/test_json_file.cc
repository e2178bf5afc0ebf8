// JSON files: errors name the file and the position; dumps are stable.
#include <gtest/gtest.h>

#include "../io_safetensors/io_test_util.h"
#include "kvq/io/json_file.h"
#include "support/test_paths.h"

namespace kvq::io {
namespace {

TEST(JsonFile, ReadsAndReportsPosition) {
  kvq::test::TempDir dir;
  kvq::test::write_bytes(dir / "ok.json", R"({"a": [1, 2.5, "x"]})");
  EXPECT_EQ(read_json_file(dir / "ok.json")["a"][1].get<double>(), 2.5);

  kvq::test::write_bytes(dir / "bad.json", "{\n  \"a\": 1,\n  \"b\": ]\n}\n");
  EXPECT_THROW_MSG(read_json_file(dir / "bad.json"), FormatError,
                   (dir / "bad.json").string() + ": invalid JSON at line 3, column 8: ");
  EXPECT_THROW_MSG(read_json_file(dir / "missing.json"), IoError, "missing.json");
  EXPECT_THROW_MSG(parse_json("", "empty.json"), FormatError, "empty.json: invalid JSON at line 1");
}

// Nesting is refused before nlohmann builds (and later copies, recursively) the value; brackets
// inside strings do not count; a number beyond double is named (issue 21).
TEST(JsonFile, RefusesDeepNestingAndHugeNumbers) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  EXPECT_THROW_MSG(parse_json(deep, "deep.json"), FormatError,
                   "deep.json: invalid JSON at line 1, column 129: nested deeper than 128 levels");
  EXPECT_THROW_MSG(parse_ordered_json("{\"a\": " + deep + "}", "o.json"), FormatError,
                   "nested deeper");
  const std::string ok = std::string(128, '[') + std::string(128, ']');
  EXPECT_NO_THROW(parse_json(ok, "ok.json"));
  EXPECT_NO_THROW(parse_json("{\"s\": \"" + std::string(1000, '[') + "\\\"[\"}", "s.json"));
  EXPECT_THROW_MSG(parse_json("{\"x\": 1e400}", "big.json"), FormatError,
                   "big.json: invalid JSON: number overflow parsing '1e400'");
}

TEST(JsonFile, TopLevelKeysInFileOrderWithDuplicates) {
  EXPECT_EQ(json_top_level_keys(R"({"b": {"z": 1, "a": [{"q": 2}]}, "a": 3, "b": 4})"),
            (std::vector<std::string>{"b", "a", "b"}));
}

TEST(JsonFile, DumpIsStableWithTrailingNewline) {
  const auto j = parse_json(R"({"b": 1, "a": {"y": [1, 2], "x": 0.1}})", "t");
  EXPECT_EQ(dump_json(j),
            "{\n  \"a\": {\n    \"x\": 0.1,\n    \"y\": [\n      1,\n      2\n    ]\n  },\n  "
            "\"b\": 1\n}\n");
  EXPECT_EQ(dump_json(j, -1), R"({"a":{"x":0.1,"y":[1,2]},"b":1})"
                              "\n");
  EXPECT_EQ(parse_json(dump_json(j), "round trip"), j);
}

}  // namespace
}  // namespace kvq::io
