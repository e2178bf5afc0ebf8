// The SentencePiece-BPE tokenizer model (spm_bpe.h, tokenizer.json type "KvqSentencePieceBPE")
// and the Prepend normalizer on hand-built tokenizer.json files: merges by the score of the
// merged token (not a merge list), ties to the leftmost pair, merges of symbols that are not
// tokens themselves, byte fallback, and the refusals. The real vocabulary is checked against
// llama.cpp in tests/model/tokenizer/test_gemma3_tokenizer.cc.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "kvq/core/error.h"
#include "kvq/tokenizer/spm_bpe.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::tok {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const char* const kSp = "\xe2\x96\x81";  // "▁"

// Ids: 0 <unk>, 1 <bos>, 2 a, 3 b, 4 c, 5 d, 6 ab, 7 bc, 8 abc, 9 x, 10 y, 11 xy, 12 yx, 13 ▁a,
// 14 <0xC3>, 15 <0xA9>, 16 éx, 17 cd, 18 abcd, 19 d (again: the last id of a string wins).
json spm_json() {
  const auto e = [](const std::string& t, double s) { return json::array({t, s}); };
  json vocab = json::array({e("<unk>", 0),      e("<bos>", 0),
                            e("a", -10),        e("b", -11),
                            e("c", -12),        e("d", -13),
                            e("ab", -5),        e("bc", -1),
                            e("abc", -2),       e("x", -10),
                            e("y", -10),        e("xy", -3),
                            e("yx", -3),        e(std::string(kSp) + "a", -4),
                            e("<0xC3>", 0),     e("<0xA9>", 0),
                            e("\xc3\xa9x", -6), e("cd", -0.5),
                            e("abcd", -7),      e("d", -20)});
  return {
      {"version", "1.0"},
      {"added_tokens",
       json::array({{{"id", 1}, {"content", "<bos>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {1}}}}}}}},
      {"decoder", nullptr},
      {"model",
       {{"type", std::string(kSpmBpeModelType)},
        {"unk_id", 0},
        {"vocab", vocab},
        {"byte_fallback", true}}}};
}

Tokenizer load(const test::TempDir& d, const json& j) {
  std::ofstream(d / "tokenizer.json") << j.dump();
  return Tokenizer::from_file(d / "tokenizer.json");
}

TEST(SpmBpe, MergesTheBestScoredTokenFirst) {
  test::TempDir d;
  const Tokenizer t = load(d, spm_json());
  // bc (-1) before ab (-5); then a + bc make abc (-2): no merge list needed.
  EXPECT_EQ(t.encode("abc"), (Ids{8}));
  // cd (-0.5) first, then ab (-5), then ab + cd = abcd (-7).
  EXPECT_EQ(t.encode("abcd"), (Ids{18}));
  EXPECT_EQ(t.encode("ab"), (Ids{6}));
  // Ties go to the leftmost pair: xy (-3) and yx (-3) overlap in "xyx"; xy wins.
  EXPECT_EQ(t.encode("xyx"), (Ids{11, 9}));
  EXPECT_EQ(t.encode("yxy"), (Ids{12, 10}));
  // " " -> "▁" (the normalizer), then ▁ + a = ▁a; "▁" alone is not a token: its bytes.
  EXPECT_EQ(t.decode(t.encode(" ab")), " ab");
  EXPECT_EQ(t.encode(" a"), (Ids{13}));
  // A duplicated token string maps to its last id, as llama.cpp's text_to_token.
  EXPECT_EQ(t.encode("d"), (Ids{19}));
}

TEST(SpmBpe, CharactersOutsideTheVocabulary) {
  test::TempDir d;
  const Tokenizer t = load(d, spm_json());
  // é (C3 A9) is no token: its bytes' <0xXX> tokens...
  EXPECT_EQ(t.encode("a\xc3\xa9"), (Ids{2, 14, 15}));
  EXPECT_EQ(t.decode(Ids{14, 15}), "\xc3\xa9");
  // ...but it is still one symbol that merges with a neighbour into a token (unlike tokenizers'
  // BPE with byte fallback, which splits it into bytes first).
  EXPECT_EQ(t.encode("\xc3\xa9x"), (Ids{16}));
  // ü (C3 BC): <0xBC> is missing, so that byte becomes unk.
  EXPECT_EQ(t.encode("\xc3\xbc"), (Ids{14, 0}));
}

TEST(SpmBpe, SpecialTokensAndBos) {
  test::TempDir d;
  const Tokenizer t = load(d, spm_json());
  EXPECT_EQ(t.add_bos_id(), 1);
  EXPECT_EQ(t.encode("ab", true), (Ids{1, 6}));
  EXPECT_EQ(t.encode("ab<bos>ab"), (Ids{6, 1, 6}));
  EXPECT_EQ(t.encode(""), Ids{});
}

TEST(SpmBpe, PrependNormalizer) {
  test::TempDir d;
  json j = spm_json();
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       json::array({{{"type", "Prepend"}, {"prepend", kSp}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}})}};
  const Tokenizer t = load(d, j);
  // Every piece of text between special tokens gets "▁" first (llama.cpp's add_space_prefix).
  EXPECT_EQ(t.encode("a"), (Ids{13}));
  EXPECT_EQ(t.encode("a<bos>a"), (Ids{13, 1, 13}));
  EXPECT_EQ(t.encode("<bos>"), (Ids{1}));
}

TEST(SpmBpe, Refusals) {
  test::TempDir d;
  json bad = spm_json();
  bad["model"]["unk_id"] = 99;
  EXPECT_THROW(load(d, bad), FormatError);
  bad = spm_json();
  bad["model"]["vocab"][2] = json::array({"a"});
  EXPECT_THROW(load(d, bad), FormatError);
  bad = spm_json();
  bad["model"]["unk_id"] = nullptr;
  const Tokenizer no_unk = load(d, bad);
  try {
    no_unk.encode("\xc3\xbc");
    ADD_FAILURE() << "no throw";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("byte 0xBC has no <0xBC> token"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvq::tok
