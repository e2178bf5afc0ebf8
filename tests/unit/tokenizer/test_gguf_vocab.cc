// tokenizer.json built from GGUF-style vocabulary arrays (for `kvq convert`) reproduces the
// tokenizer it came from, including llama.cpp's "smollm" digit splitting.
#include <gtest/gtest.h>

#include <fstream>

#include "kvq/core/error.h"
#include "kvq/tokenizer/gguf_vocab.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::tok {
namespace {

using nlohmann::json;

// The tiny tokenizer's vocabulary as a GGUF holds it.
GgufVocab tiny_vocab(const std::string& pre) {
  std::ifstream in(test::test_data_dir() / "tokenizer" / "tiny_bytelevel.json");
  const json j = json::parse(in);
  GgufVocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.tokens.resize(272);
  v.token_types.assign(272, 1);
  for (const auto& [token, id] : j["model"]["vocab"].items()) {
    v.tokens[id.get<size_t>()] = token;
  }
  for (const json& a : j["added_tokens"]) {
    v.tokens[a["id"].get<size_t>()] = a["content"].get<std::string>();
    v.token_types[a["id"].get<size_t>()] = a["special"].get<bool>() ? 3 : 4;
  }
  for (const json& m : j["model"]["merges"]) {
    v.merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  v.bos_id = 269;
  v.eos_id = 270;
  return v;
}

Tokenizer load(const GgufVocab& v, const test::TempDir& dir) {
  std::ofstream(dir / "tokenizer.json") << tokenizer_json_from_gguf(v).dump();
  std::ofstream(dir / "tokenizer_config.json") << tokenizer_config_from_gguf(v).dump();
  return Tokenizer::from_dir(dir.path());
}

TEST(GgufVocab, SmollmSplitsDigitsAndKeepsVocab) {
  test::TempDir dir;
  Tokenizer t = load(tiny_vocab("smollm"), dir);
  Tokenizer ref = Tokenizer::from_file(test::test_data_dir() / "tokenizer" / "tiny_digits.json");
  for (const char* text : {"a  1", "hello  the   12 123  4\n\n5", "<s>hi</s>", " ½ é"}) {
    EXPECT_EQ(t.encode(text), ref.encode(text)) << text;
  }
  EXPECT_EQ(t.encode("a  1"), (std::vector<int32_t>{'a', 262, '1'}));
  EXPECT_EQ(t.bos_id(), 269);
  EXPECT_EQ(t.eos_id(), 270);
  EXPECT_TRUE(t.is_special(269));
  EXPECT_FALSE(t.is_special(271));
  EXPECT_EQ(t.encode("x", true), (std::vector<int32_t>{'x'}));  // add_bos false
}

TEST(GgufVocab, Gpt2PreAndAddBos) {
  test::TempDir dir;
  GgufVocab v = tiny_vocab("gpt2");
  v.add_bos = true;
  Tokenizer t = load(v, dir);
  EXPECT_EQ(t.encode("a  1"), (std::vector<int32_t>{'a', ' ', 264}));
  EXPECT_EQ(t.encode("x", true), (std::vector<int32_t>{269, 'x'}));
}

TEST(GgufVocab, UnknownPreTokenizerIsNotSupported) {
  GgufVocab v = tiny_vocab("qwen2");
  EXPECT_THROW(tokenizer_json_from_gguf(v), NotSupported);
  v = tiny_vocab("smollm");
  v.model = "llama";
  EXPECT_THROW(tokenizer_json_from_gguf(v), NotSupported);
}

}  // namespace
}  // namespace kvq::tok
