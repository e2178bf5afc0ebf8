#include "kvq/tokenizer/gguf_vocab.h"

#include "kvq/core/error.h"

namespace kvq::tok {
namespace {

using nlohmann::json;

// llama.cpp token types: 3 = control (special), 4 = user-defined (added, not special).
constexpr int32_t kControl = 3;
constexpr int32_t kUserDefined = 4;

json byte_level() {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", true}};
}

}  // namespace

json tokenizer_json_from_gguf(const GgufVocab& v) {
  if (v.model != "gpt2") {
    fail<NotSupported>("GGUF tokenizer model '{}' not supported; supported: gpt2 (byte-level BPE)",
                       v.model);
  }
  json pre;
  if (v.pre == "smollm") {
    pre = {{"type", "Sequence"},
           {"pretokenizers",
            json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level()})}};
  } else if (v.pre == "gpt2" || v.pre == "gpt-2" || v.pre == "default" || v.pre.empty()) {
    pre = byte_level();
  } else {
    fail<NotSupported>("GGUF pre-tokenizer '{}' not supported; supported: smollm, gpt2/default",
                       v.pre);
  }
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    vocab[v.tokens[i]] = static_cast<int32_t>(i);
    int32_t type = i < v.token_types.size() ? v.token_types[i] : 1;
    if (type == kControl || type == kUserDefined) {
      added.push_back({{"id", static_cast<int32_t>(i)},
                       {"content", v.tokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type == kControl}});
    }
  }
  json merges = json::array();
  for (const std::string& m : v.merges) {
    size_t space = m.find(' ');
    if (space == std::string::npos) fail<FormatError>("GGUF merge '{}' has no space", m);
    merges.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  json single = json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  json specials = json::object();
  if (v.add_bos && v.bos_id) {
    const std::string& bos = v.tokens.at(static_cast<size_t>(*v.bos_id));
    json item = json::object();
    item["SpecialToken"] = {{"id", bos}, {"type_id", 0}};
    single.insert(single.begin(), item);
    specials[bos] = {
        {"id", bos}, {"ids", json::array({*v.bos_id})}, {"tokens", json::array({bos})}};
  }
  json unk = v.unk_id ? json(v.tokens.at(static_cast<size_t>(*v.unk_id))) : json();
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", single},
            {"pair", json::array({{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
            {"special_tokens", specials}}},
          {"decoder", byte_level()},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", unk},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

json tokenizer_config_from_gguf(const GgufVocab& v) {
  auto name = [&](const std::optional<int32_t>& id) -> json {
    if (!id || *id < 0 || static_cast<size_t>(*id) >= v.tokens.size()) return nullptr;
    return v.tokens[static_cast<size_t>(*id)];
  };
  json c = {{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"add_bos_token", v.add_bos},
            {"add_eos_token", false},
            {"bos_token", name(v.bos_id)},
            {"eos_token", name(v.eos_id)},
            {"unk_token", name(v.unk_id)},
            {"pad_token", name(v.pad_id)},
            {"clean_up_tokenization_spaces", false}};
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  return c;
}

}  // namespace kvq::tok
