// The Unigram tokenizer model (unigram.h) and the Replace normalizer on hand-built
// tokenizer.json files: best-score segmentation, tokenizers' tie-breaking, the unknown-character
// penalty, fused unknown runs, byte fallback, and the refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "kvq/core/error.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::tok {
namespace {

using nlohmann::json;

// Ids: 0 <unk>, 1 a, 2 b, 3 ab, 4 abc, 5 c, 6 x, 7 y, 8 xy, 9 ▁a, 10 <0xC3>, 11 <0xA9>, 12 q.
json unigram_json(bool with_unk = true) {
  json vocab = json::array(
      {json::array({"<unk>", 0.0}), json::array({"a", -1.0}), json::array({"b", -1.0}),
       json::array({"ab", -1.5}), json::array({"abc", -10.0}), json::array({"c", -2.0}),
       json::array({"x", -1.0}), json::array({"y", -1.0}), json::array({"xy", -2.0}),
       json::array({"\xe2\x96\x81"
                    "a",
                    -0.5}),
       json::array({"<0xC3>", 0.0}), json::array({"<0xA9>", 0.0}), json::array({"q", -100.0})});
  return {{"version", "1.0"},
          {"added_tokens", json::array()},
          {"normalizer",
           {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xe2\x96\x81"}}},
          {"pre_tokenizer",
           {{"type", "Split"},
            {"pattern", {{"String", " "}}},
            {"behavior", "MergedWithPrevious"},
            {"invert", false}}},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model",
           {{"type", "Unigram"},
            {"unk_id", with_unk ? json(0) : json(nullptr)},
            {"vocab", vocab},
            {"byte_fallback", true}}}};
}

Tokenizer load(const test::TempDir& d, const json& j) {
  std::ofstream(d / "tokenizer.json") << j.dump();
  return Tokenizer::from_file(d / "tokenizer.json");
}

using Ids = std::vector<int32_t>;

TEST(Unigram, BestScoreSegmentation) {
  test::TempDir d;
  const Tokenizer t = load(d, unigram_json());
  EXPECT_EQ(t.encode("ab"), (Ids{3}));      // ab (-1.5) beats a + b (-2)
  EXPECT_EQ(t.encode("abc"), (Ids{3, 5}));  // ab + c (-3.5) beats abc (-10) and a + b + c
  EXPECT_EQ(t.encode("xy"), (Ids{8}));      // tie (-2): the first path found (xy) wins
  EXPECT_EQ(t.encode(" ab"), (Ids{9, 2}));  // " " -> "▁", then ▁a + b
  EXPECT_EQ(t.decode(Ids{9, 2}), " ab");    // "▁" decodes to a space
}

TEST(Unigram, UnknownCharactersFallBackToBytesOrUnk) {
  test::TempDir d;
  const Tokenizer t = load(d, unigram_json());
  // é = C3 A9: both byte tokens exist; a run of unknown characters is fused first.
  EXPECT_EQ(t.encode("\xc3\xa9\xc3\xa9"
                     "a"),
            (Ids{10, 11, 10, 11, 1}));
  EXPECT_EQ(t.decode(Ids{10, 11}), "\xc3\xa9");
  // ü = C3 BC: <0xBC> is missing, so the fused run "üü" is one <unk>.
  EXPECT_EQ(t.encode("a\xc3\xbc\xc3\xbc"), (Ids{1, 0}));
  // The unknown penalty is min score - 10 = -110: "q" (-100) is still cheaper than unk.
  EXPECT_EQ(t.encode("q"), (Ids{12}));
}

TEST(Unigram, Refusals) {
  test::TempDir d;
  const Tokenizer no_unk = load(d, unigram_json(false));
  EXPECT_THROW(no_unk.encode("\xc3\xbc"), NotSupported);
  json bad = unigram_json();
  bad["model"]["unk_id"] = 99;
  EXPECT_THROW(load(d, bad), FormatError);
  bad = unigram_json();
  bad["model"]["vocab"][1] = json::array({"a"});
  EXPECT_THROW(load(d, bad), FormatError);
  bad = unigram_json();
  bad["normalizer"] = {{"type", "NFKC"}};
  try {
    load(d, bad);
    ADD_FAILURE() << "no throw";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("normalizer 'NFKC' not supported"), std::string::npos)
        << e.what();
  }
  bad = unigram_json();
  bad["model"]["type"] = "WordPiece";
  EXPECT_THROW(load(d, bad), NotSupported);
}

}  // namespace
}  // namespace kvq::tok
