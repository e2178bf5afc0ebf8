#include "kvq/io/convert_gguf_tokenizer.h"

#include <optional>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/strings.h"
#include "kvq/io/convert_gguf_tokenizer_spm.h"

namespace kvq::io {
namespace {

using json = nlohmann::json;

// llama.cpp's llama_token_type / gguf-py TokenType.
constexpr std::int64_t kTokenControl = 3;
constexpr std::int64_t kTokenUserDefined = 4;

json byte_level(bool add_prefix_space, bool trim_offsets) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", add_prefix_space},
          {"trim_offsets", trim_offsets},
          {"use_regex", true}};
}

json pre_tokenizer_for(const GgufFile& gguf) {
  const std::string pre = gguf.find_string("tokenizer.ggml.pre").value_or("default");
  if (pre == "smollm") {
    // llama.cpp (LLAMA_VOCAB_PRE_TYPE_SMOLLM): "\p{N}" pieces first, then the GPT-2 regex. The
    // original SmolLM2 tokenizer.json spells this Digits(individual_digits) — tokenizers splits
    // on char::is_numeric, i.e. \p{N} — followed by ByteLevel.
    return {{"type", "Sequence"},
            {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}},
                                           byte_level(false, true)})}};
  }
  if (pre == "default" || pre == "gpt2" || pre == "gpt-2") return byte_level(false, true);
  fail<NotSupported>(
      "{}: tokenizer.ggml.pre = '{}' is not supported (supported: smollm, gpt2, "
      "default)",
      gguf.source(), pre);
}

// tokenizer.json is JSON text, which holds UTF-8 only (byte-level BPE tokens always are): a
// string that is not is refused by name here, not by the JSON writer later.
void check_utf8(const GgufFile& gguf, std::string_view key, std::size_t index,
                const std::string& s) {
  if (const std::size_t bad = find_invalid_utf8(s); bad != std::string::npos)
    fail<FormatError>("{}: {}: entry {} \"{}\" is not valid UTF-8 (byte {} of it)", gguf.source(),
                      key, index, escape_bytes(s), bad);
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<std::int64_t> types;  // empty when the GGUF has no token_type
};

Vocab read_vocab(const GgufFile& gguf) {
  const std::string model = gguf.get_string("tokenizer.ggml.model");
  if (model != "gpt2") {
    fail<NotSupported>(
        "{}: tokenizer.ggml.model = '{}' is not supported (supported: gpt2, i.e. "
        "byte-level BPE; llama, i.e. SentencePiece, for gemma3)",
        gguf.source(), model);
  }
  Vocab v;
  v.tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  for (std::size_t i = 0; i < v.tokens.size(); ++i)
    check_utf8(gguf, "tokenizer.ggml.tokens", i, v.tokens[i]);
  if (gguf.has("tokenizer.ggml.token_type")) {
    v.types = gguf.get_int_array("tokenizer.ggml.token_type");
    if (v.types.size() != v.tokens.size()) {
      fail<FormatError>(
          "{}: tokenizer.ggml.token_type has {} entries but tokenizer.ggml.tokens "
          "has {}",
          gguf.source(), v.types.size(), v.tokens.size());
    }
  }
  return v;
}

std::optional<std::string> token_for(const GgufFile& gguf, const Vocab& v, const char* key) {
  const auto id = gguf.find_u32(key);
  if (!id) return std::nullopt;
  if (*id >= v.tokens.size()) {
    fail<FormatError>("{}: {} = {} is outside the vocabulary of {} tokens", gguf.source(), key, *id,
                      v.tokens.size());
  }
  return v.tokens[*id];
}

json added_token(std::int64_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

}  // namespace

static bool is_spm(const GgufFile& gguf) {
  return gguf.find_string("tokenizer.ggml.model").value_or("") == "llama";
}

json gguf_tokenizer_json(const GgufFile& gguf) {
  if (is_spm(gguf)) return gguf_spm_tokenizer_json(gguf);
  const Vocab v = read_vocab(gguf);
  json pre = pre_tokenizer_for(gguf);

  json vocab = json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    if (!vocab.emplace(v.tokens[i], static_cast<std::int64_t>(i)).second) {
      fail<FormatError>("{}: token {} '{}' appears twice in tokenizer.ggml.tokens", gguf.source(),
                        i, v.tokens[i]);
    }
  }
  json merges = json::array();
  if (gguf.has("tokenizer.ggml.merges")) {
    std::vector<std::string> all = gguf.get_string_array("tokenizer.ggml.merges");
    for (std::size_t i = 0; i < all.size(); ++i) {
      check_utf8(gguf, "tokenizer.ggml.merges", i, all[i]);
      merges.push_back(std::move(all[i]));
    }
  }

  json added = json::array();
  for (std::size_t i = 0; i < v.types.size(); ++i) {
    if (v.types[i] == kTokenControl || v.types[i] == kTokenUserDefined) {
      added.push_back(
          added_token(static_cast<std::int64_t>(i), v.tokens[i], v.types[i] == kTokenControl));
    }
  }

  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", std::move(vocab)},
                {"merges", std::move(merges)}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", std::move(added)},
          {"normalizer", nullptr},
          {"pre_tokenizer", std::move(pre)},
          {"post_processor", byte_level(true, false)},
          {"decoder", byte_level(true, true)},
          {"model", std::move(model)}};
}

json gguf_tokenizer_config_json(const GgufFile& gguf) {
  if (is_spm(gguf)) return gguf_spm_tokenizer_config_json(gguf);
  const Vocab v = read_vocab(gguf);
  json decoder = json::object();
  std::vector<std::string> specials;
  for (std::size_t i = 0; i < v.types.size(); ++i) {
    if (v.types[i] != kTokenControl && v.types[i] != kTokenUserDefined) continue;
    const bool special = v.types[i] == kTokenControl;
    json t = added_token(static_cast<std::int64_t>(i), v.tokens[i], special);
    t.erase("id");
    decoder[std::to_string(i)] = std::move(t);
    if (special) specials.push_back(v.tokens[i]);
  }
  json j = {{"add_prefix_space", false},
            {"added_tokens_decoder", std::move(decoder)},
            {"clean_up_tokenization_spaces", false},
            // Not GPT2Tokenizer: transformers 5 rebuilds a GPT2Tokenizer's pre-tokenizer itself
            // (plain ByteLevel), dropping the digit split this tokenizer.json asks for.
            {"tokenizer_class", "PreTrainedTokenizerFast"},
            {"vocab_size", v.tokens.size()}};
  j["add_bos_token"] = gguf.find_bool("tokenizer.ggml.add_bos_token").value_or(false);
  j["add_eos_token"] = gguf.find_bool("tokenizer.ggml.add_eos_token").value_or(false);
  const auto set_token = [&](const char* name, const char* key) {
    const auto s = token_for(gguf, v, key);
    j[name] = s ? json(*s) : json(nullptr);
  };
  set_token("bos_token", "tokenizer.ggml.bos_token_id");
  set_token("eos_token", "tokenizer.ggml.eos_token_id");
  set_token("pad_token", "tokenizer.ggml.padding_token_id");
  set_token("unk_token", "tokenizer.ggml.unknown_token_id");
  if (const auto tmpl = gguf.find_string("tokenizer.chat_template")) {
    check_utf8(gguf, "tokenizer.chat_template", 0, *tmpl);
    j["chat_template"] = *tmpl;
  }
  const std::string arch = gguf.find_string("general.architecture").value_or("llama");
  if (const auto ctx = gguf.find_u32(arch + ".context_length")) j["model_max_length"] = *ctx;
  return j;
}

}  // namespace kvq::io
