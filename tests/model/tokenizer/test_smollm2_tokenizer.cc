// The tokenizer of the converted default model against the reference goldens
// (tests/data/tokenizer/smollm2_goldens.{json,bin}, tools/reference/make_tokenizer_goldens.py):
// every line of WikiText-2 test and the first 200 GSM8K test questions must encode to exactly
// the reference ids and decode back to the exact bytes; the chat conversations must render and
// encode identically. Also reports encoding speed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in) << p;
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

// One section of smollm2_goldens.bin: uint32 n, uint32 offsets[n + 1], uint16 ids[offsets[n]].
struct Section {
  std::vector<uint32_t> offsets;
  std::vector<uint16_t> ids;
  std::vector<int32_t> item(size_t i) const {
    return {ids.begin() + offsets[i], ids.begin() + offsets[i + 1]};
  }
};

std::vector<Section> read_sections(const std::string& bin, size_t count) {
  std::vector<Section> out;
  size_t pos = 0;
  auto take = [&](void* dst, size_t bytes) {
    if (pos + bytes > bin.size()) throw std::runtime_error("smollm2_goldens.bin truncated");
    std::memcpy(dst, bin.data() + pos, bytes);
    pos += bytes;
  };
  for (size_t s = 0; s < count; ++s) {
    uint32_t n = 0;
    take(&n, 4);
    Section sec;
    sec.offsets.resize(n + 1);
    take(sec.offsets.data(), 4 * (n + 1));
    sec.ids.resize(sec.offsets[n]);
    take(sec.ids.data(), 2 * sec.ids.size());
    out.push_back(std::move(sec));
  }
  EXPECT_EQ(pos, bin.size());
  return out;
}

// The items of the golden sections, defined exactly as in make_tokenizer_goldens.py.
std::vector<std::string> wikitext_lines() {
  std::string raw = read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw");
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = raw.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(raw.substr(start, nl - start));  // keeps the '\r'
  }
  lines.push_back(raw.substr(start));
  return lines;
}

std::vector<std::string> gsm8k_questions(size_t count) {
  std::ifstream in(test::shared_data_dir() / "gsm8k" / "test.jsonl");
  std::vector<std::string> out;
  std::string line;
  while (out.size() < count && std::getline(in, line)) {
    out.push_back(json::parse(line).at("question").get<std::string>());
  }
  return out;
}

class SmolLM2Tokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    KVQ_REQUIRE_DEFAULT_MODEL();
    const fs::path dir = test::test_data_dir() / "tokenizer";
    std::ifstream in(dir / "smollm2_goldens.json");
    header_ = json::parse(in);
    sections_ = read_sections(read_bytes(dir / "smollm2_goldens.bin"), 2);
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_dir(test::default_model_dir()));
  }

  // Compares every item; prints the first mismatches.
  void check(const std::vector<std::string>& items, const Section& golden, const char* name) {
    ASSERT_EQ(items.size() + 1, golden.offsets.size()) << name;
    size_t mismatched = 0, tokens = 0, roundtrip_failures = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      std::vector<int32_t> ids = tokenizer_->encode(items[i]);
      tokens += ids.size();
      if (ids != golden.item(i) && ++mismatched <= 5) {
        ADD_FAILURE() << name << " item " << i << " " << json(items[i]).dump()
                      << " encodes differently from the reference";
      }
      if (tokenizer_->decode(ids) != items[i]) ++roundtrip_failures;
    }
    EXPECT_EQ(mismatched, 0u) << name;
    EXPECT_EQ(roundtrip_failures, 0u) << name;
    EXPECT_EQ(tokens, golden.ids.size()) << name;
    std::printf("%s: %zu items, %zu tokens, %zu mismatched, %zu round-trip failures\n", name,
                items.size(), tokens, mismatched, roundtrip_failures);
  }

  json header_;
  std::vector<Section> sections_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(SmolLM2Tokenizer, SpecialTokens) {
  EXPECT_EQ(tokenizer_->vocab_size(), 49152);
  EXPECT_EQ(tokenizer_->token_id("<|im_start|>"), 1);
  EXPECT_EQ(tokenizer_->token_id("<|im_end|>"), 2);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);  // the GGUF's eos; transformers' GGUF loader says 1
  // SmolLM2 adds no BOS (the GGUF's add_bos_token is false).
  EXPECT_EQ(tokenizer_->encode("Hi", true), tokenizer_->encode("Hi", false));
}

TEST_F(SmolLM2Tokenizer, WikitextLinesMatchReference) {
  check(wikitext_lines(), sections_[0], "wikitext");
}

TEST_F(SmolLM2Tokenizer, Gsm8kQuestionsMatchReference) {
  check(gsm8k_questions(200), sections_[1], "gsm8k");
}

TEST_F(SmolLM2Tokenizer, ChatTemplateMatchesReference) {
  for (const auto& chat : header_.at("chats")) {
    std::vector<ChatMessage> messages;
    for (const auto& m : chat.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    std::string rendered =
        tokenizer_->apply_chat_template(messages, chat.at("add_generation_prompt").get<bool>());
    EXPECT_EQ(rendered, chat.at("rendered").get<std::string>()) << chat.at("name");
    EXPECT_EQ(tokenizer_->encode(rendered), chat.at("ids").get<std::vector<int32_t>>())
        << chat.at("name");
    std::vector<int32_t> ids = tokenizer_->encode(rendered);
    EXPECT_EQ(tokenizer_->decode(ids), rendered);
    EXPECT_EQ(ids.front(), 1);  // <|im_start|> matched as a special token
  }
}

// Speed of encoding the whole of wiki.test.raw as one text (a fresh tokenizer: cold word
// cache), then again (warm). Not a pass/fail threshold: machines differ; the number is
// printed and recorded.
TEST_F(SmolLM2Tokenizer, EncodeSpeed) {
  std::string raw = read_bytes(test::shared_data_dir() / "wikitext-2-raw" / "wiki.test.raw");
  Tokenizer fresh = Tokenizer::from_dir(test::default_model_dir());
  for (const char* label : {"cold", "warm"}) {
    auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> ids = fresh.encode(raw);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("encode wiki.test.raw (%zu bytes) %s: %zu tokens in %.3f s = %.2f M tokens/s\n",
                raw.size(), label, ids.size(), s, static_cast<double>(ids.size()) / s / 1e6);
    RecordProperty(std::string("tokens_per_s_") + label,
                   std::to_string(static_cast<int64_t>(static_cast<double>(ids.size()) / s)));
    EXPECT_EQ(fresh.decode(ids), raw);
  }
}

}  // namespace
}  // namespace kvq::tok
