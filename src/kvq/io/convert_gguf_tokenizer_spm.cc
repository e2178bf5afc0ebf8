#include "kvq/io/convert_gguf_tokenizer_spm.h"

#include <optional>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/strings.h"

namespace kvq::io {
namespace {

using json = nlohmann::json;

// llama.cpp's llama_token_type.
constexpr std::int64_t kTokenUnknown = 2;
constexpr std::int64_t kTokenControl = 3;
constexpr std::int64_t kTokenUserDefined = 4;
constexpr const char* kSpace = "\u2581";  // SentencePiece's "▁"
// tokenizer/spm_bpe.h's kSpmBpeModelType (io sits below tokenizer; a unit test checks they agree).
constexpr const char* kModelType = "KvqSentencePieceBPE";

struct SpmVocab {
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<std::int64_t> types;
};

SpmVocab read_spm_vocab(const GgufFile& gguf) {
  const std::string arch = gguf.find_string("general.architecture").value_or("?");
  if (arch != "gemma3" && arch != "gemma2") {
    fail<NotSupported>(
        "{}: a SentencePiece vocabulary (tokenizer.ggml.model = 'llama') is supported for "
        "gemma3 / gemma2 only, not architecture '{}'",
        gguf.source(), arch);
  }
  SpmVocab v;
  v.tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    if (const std::size_t bad = find_invalid_utf8(v.tokens[i]); bad != std::string::npos)
      fail<FormatError>("{}: tokenizer.ggml.tokens: entry {} \"{}\" is not valid UTF-8 (byte {})",
                        gguf.source(), i, escape_bytes(v.tokens[i]), bad);
  }
  v.scores = gguf.get_float_array("tokenizer.ggml.scores");
  v.types = gguf.get_int_array("tokenizer.ggml.token_type");
  if (v.scores.size() != v.tokens.size() || v.types.size() != v.tokens.size()) {
    fail<FormatError>(
        "{}: tokenizer.ggml.scores ({}) and tokenizer.ggml.token_type ({}) must have one entry "
        "per token ({})",
        gguf.source(), v.scores.size(), v.types.size(), v.tokens.size());
  }
  return v;
}

std::optional<std::int64_t> special_id(const GgufFile& gguf, const SpmVocab& v, const char* key) {
  const auto id = gguf.find_u32(key);
  if (!id) return std::nullopt;
  if (*id >= v.tokens.size()) {
    fail<FormatError>("{}: {} = {} is outside the vocabulary of {} tokens", gguf.source(), key, *id,
                      v.tokens.size());
  }
  return *id;
}

json added_token(std::int64_t id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

json string_pattern(const char* s) { return {{"String", s}}; }

}  // namespace

json gguf_spm_tokenizer_json(const GgufFile& gguf) {
  const SpmVocab v = read_spm_vocab(gguf);
  json vocab = json::array();
  json added = json::array();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) {
    vocab.push_back(json::array({v.tokens[i], v.scores[i]}));
    const std::int64_t type = v.types[i];
    if (type == kTokenControl || type == kTokenUnknown || type == kTokenUserDefined) {
      added.push_back(added_token(static_cast<std::int64_t>(i), v.tokens[i],
                                  /*special=*/type != kTokenUserDefined));
    }
  }
  const auto unk = special_id(gguf, v, "tokenizer.ggml.unknown_token_id");
  const auto bos = special_id(gguf, v, "tokenizer.ggml.bos_token_id");
  json single = json::array();
  json special_tokens = json::object();
  // llama.cpp's defaults for an SPM vocabulary when the GGUF does not say.
  if (bos && gguf.find_bool("tokenizer.ggml.add_bos_token").value_or(true)) {
    const std::string& b = v.tokens[static_cast<std::size_t>(*bos)];
    single.push_back({{"SpecialToken", {{"id", b}, {"type_id", 0}}}});
    special_tokens[b] = {{"id", b}, {"ids", json::array({*bos})}, {"tokens", json::array({b})}};
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  json pair = single;
  pair.push_back({{"Sequence", {{"id", "B"}, {"type_id", 1}}}});
  json normalizer = {{"type", "Replace"}, {"pattern", string_pattern(" ")}, {"content", kSpace}};
  if (gguf.find_bool("tokenizer.ggml.add_space_prefix").value_or(true)) {
    // llama.cpp puts " " before every piece of text between special tokens (and at the start).
    normalizer = {{"type", "Sequence"},
                  {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", kSpace}},
                                               std::move(normalizer)})}};
  }
  json model = {{"type", kModelType},
                {"unk_id", unk ? json(*unk) : json(nullptr)},
                {"vocab", std::move(vocab)},
                {"byte_fallback", true}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", std::move(added)},
      {"normalizer", std::move(normalizer)},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", std::move(single)},
        {"pair", std::move(pair)},
        {"special_tokens", std::move(special_tokens)}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", string_pattern(kSpace)}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}})}}},
      {"model", std::move(model)}};
}

json gguf_spm_tokenizer_config_json(const GgufFile& gguf) {
  const SpmVocab v = read_spm_vocab(gguf);
  json j = {{"add_bos_token", gguf.find_bool("tokenizer.ggml.add_bos_token").value_or(true)},
            {"add_eos_token", gguf.find_bool("tokenizer.ggml.add_eos_token").value_or(false)},
            {"clean_up_tokenization_spaces", false},
            // Not GemmaTokenizer: transformers 5 rebuilds that class's model itself (a BPE with
            // no merges: one token per character), ignoring the model written here.
            {"tokenizer_class", "PreTrainedTokenizerFast"}};
  const auto set_token = [&](const char* name, const char* key) {
    const auto id = special_id(gguf, v, key);
    j[name] = id ? json(v.tokens[static_cast<std::size_t>(*id)]) : json(nullptr);
  };
  set_token("bos_token", "tokenizer.ggml.bos_token_id");
  set_token("eos_token", "tokenizer.ggml.eos_token_id");
  set_token("pad_token", "tokenizer.ggml.padding_token_id");
  set_token("unk_token", "tokenizer.ggml.unknown_token_id");
  if (const auto tmpl = gguf.find_string("tokenizer.chat_template")) {
    if (const std::size_t bad = find_invalid_utf8(*tmpl); bad != std::string::npos)
      fail<FormatError>("{}: tokenizer.chat_template is not valid UTF-8 (byte {})", gguf.source(),
                        bad);
    j["chat_template"] = *tmpl;
  }
  const std::string arch = gguf.find_string("general.architecture").value_or("gemma3");
  if (const auto ctx = gguf.find_u32(arch + ".context_length")) j["model_max_length"] = *ctx;
  return j;
}

}  // namespace kvq::io
