// The tokenizer of the converted gemma-3-270m (scripts/fetch-model.sh --gemma; skipped when it
// is absent) against tests/data/tokenizer/gemma3_goldens.json
// (tools/reference/make_gemma_tokenizer_goldens.py: llama.cpp's llama-tokenize on the same
// GGUF): hand-picked strings id for id; every WikiText-2 test line, the whole of wiki.test.raw
// and every GSM8K test question must encode to ids of the reference length and FNV-1a hash, and
// decode back to the exact bytes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::tok {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

uint32_t fnv1a32(const std::vector<int32_t>& ids) {
  uint32_t h = 0x811C9DC5u;
  for (int32_t id : ids) {
    unsigned char b[4];
    const auto u = static_cast<uint32_t>(id);
    for (int k = 0; k < 4; ++k) b[k] = static_cast<unsigned char>(u >> (8 * k));
    for (unsigned char c : b) h = (h ^ c) * 0x01000193u;
  }
  return h;
}

std::vector<std::string> wikitext_lines() {
  const std::string raw =
      test::read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw");
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = raw.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(raw.substr(start, nl - start));  // keeps the '\r'
  }
  lines.push_back(raw.substr(start));
  return lines;
}

std::vector<std::string> gsm8k_questions() {
  std::ifstream in(test::shared_data_dir() / "gsm8k" / "test.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(json::parse(line).at("question").get<std::string>());
  }
  return out;
}

class Gemma3Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    KVQ_REQUIRE_GEMMA_MODEL();
    std::ifstream in(test::test_data_dir() / "tokenizer" / "gemma3_goldens.json");
    golden_ = json::parse(in);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(test::gemma_model_dir()));
  }

  const json& section(const char* name) const {
    for (const json& s : golden_.at("sections")) {
      if (s.at("name") == name) return s;
    }
    throw std::runtime_error(std::string("no section ") + name);
  }

  void check(const std::vector<std::string>& items, const char* name) {
    const json& g = section(name);
    ASSERT_EQ(items.size(), g.at("items").get<size_t>()) << name;
    const auto lengths = g.at("lengths").get<std::vector<size_t>>();
    const auto hashes = g.at("fnv1a32").get<std::vector<uint32_t>>();
    const auto head = g.at("head").get<std::vector<std::vector<int32_t>>>();
    size_t mismatched = 0, tokens = 0, roundtrip_failures = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::vector<int32_t> ids = tokenizer_->encode(items[i]);
      tokens += ids.size();
      // head[i]: the first ids of item i (all of them, or a prefix for a long item).
      const bool same =
          ids.size() == lengths[i] && fnv1a32(ids) == hashes[i] &&
          (i >= head.size() || (head[i].size() <= ids.size() &&
                                std::equal(head[i].begin(), head[i].end(), ids.begin())));
      if (!same && ++mismatched <= 5) {
        ADD_FAILURE() << name << " item " << i << " " << json(items[i]).dump()
                      << " encodes differently from the reference (" << ids.size() << " ids, "
                      << lengths[i] << " expected)";
      }
      if (tokenizer_->decode(ids) != items[i]) ++roundtrip_failures;
    }
    EXPECT_EQ(mismatched, 0u) << name;
    EXPECT_EQ(roundtrip_failures, 0u) << name;
    EXPECT_EQ(tokens, g.at("tokens").get<size_t>()) << name;
    std::printf("%s: %zu items, %zu tokens, %zu mismatched, %zu round-trip failures\n", name,
                items.size(), tokens, mismatched, roundtrip_failures);
  }

  json golden_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Gemma3Tokenizer, SpecialTokens) {
  EXPECT_EQ(tokenizer_->vocab_size(), 262144);
  EXPECT_EQ(tokenizer_->bos_id(), 2);
  EXPECT_EQ(tokenizer_->eos_id(), 1);
  EXPECT_EQ(tokenizer_->token_id("<start_of_turn>"), 105);
  EXPECT_TRUE(tokenizer_->is_special(105));
  EXPECT_EQ(tokenizer_->add_bos_id(), 2);
  // User-defined tokens ("\n", runs of spaces, HTML tags) are plain added tokens.
  EXPECT_EQ(tokenizer_->token_id("\n"), 107);
  EXPECT_FALSE(tokenizer_->is_special(107));
  // The GGUF says add_bos_token: <bos> first with special tokens, nothing without.
  const std::vector<int32_t> plain = tokenizer_->encode("Hi there", false);
  std::vector<int32_t> with_bos = {2};
  with_bos.insert(with_bos.end(), plain.begin(), plain.end());
  EXPECT_EQ(tokenizer_->encode("Hi there", true), with_bos);
  // Control tokens written in the text are one token each.
  EXPECT_EQ(tokenizer_->encode("<start_of_turn>user\n").front(), 105);
  // Byte fallback: a character outside the vocabulary becomes its UTF-8 bytes' <0xXX> tokens
  // and decodes back.
  const std::string odd = "\x01\x02";
  EXPECT_EQ(tokenizer_->decode(tokenizer_->encode(odd)), odd);
}

TEST_F(Gemma3Tokenizer, StringsMatchLlamaCpp) {
  size_t mismatched = 0;
  for (const json& c : golden_.at("strings")) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> ids = tokenizer_->encode(text);
    EXPECT_EQ(ids, c.at("ids").get<std::vector<int32_t>>()) << json(text).dump();
    mismatched += ids != c.at("ids").get<std::vector<int32_t>>();
    // A "▁" written in the text decodes as a space (as in llama.cpp).
    if (text.find("\u2581") == std::string::npos) {
      EXPECT_EQ(tokenizer_->decode(ids), text) << json(text).dump();
    }
  }
  EXPECT_EQ(mismatched, 0u);
  // The example of docs/status.md: whole words, as llama.cpp (and Gemma) split them.
  EXPECT_EQ(tokenizer_->encode("The capital of France is"),
            (std::vector<int32_t>{818, 5279, 529, 7001, 563}));
}

TEST_F(Gemma3Tokenizer, WikitextLinesMatchReference) { check(wikitext_lines(), "wikitext"); }

TEST_F(Gemma3Tokenizer, WholeWikitextMatchesReference) {
  check({test::read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw")},
        "wikitext_whole");
}

TEST_F(Gemma3Tokenizer, Gsm8kQuestionsMatchReference) { check(gsm8k_questions(), "gsm8k"); }

// Speed of encoding the whole of wiki.test.raw as one text; printed, not a threshold.
TEST_F(Gemma3Tokenizer, EncodeSpeed) {
  const std::string raw =
      test::read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw");
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tokenizer_->encode(raw);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("encode wiki.test.raw (%zu bytes): %zu tokens in %.3f s = %.2f M tokens/s\n",
              raw.size(), ids.size(), s, static_cast<double>(ids.size()) / s / 1e6);
  EXPECT_EQ(tokenizer_->decode(ids), raw);
}

}  // namespace
}  // namespace kvq::tok
