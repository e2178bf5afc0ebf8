// tokenizer.json / tokenizer_config.json for a GGUF's vocabulary, for `kvq convert`.
//
// llama.cpp stores the tokenizer as arrays (tokenizer.ggml.tokens / merges / token_type) plus a
// pre-tokenizer name (tokenizer.ggml.pre). A faithful tokenizer.json must reproduce that
// pre-tokenizer: for "smollm" llama.cpp splits every Unicode digit off before the GPT-2 regex,
// i.e. Sequence[Digits(individual_digits=true), ByteLevel] as in the original SmolLM2
// tokenizer.json (transformers' GGUF loader gives a plain ByteLevel, which differs on e.g.
// "a  1" and " ½").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvq::tok {

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model; "gpt2" (byte-level BPE) only
  std::string pre;                   // tokenizer.ggml.pre
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens (byte-level spelled)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (1 normal, 3 control, ...)
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("a b")
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false;       // tokenizer.ggml.add_bos_token
  std::string chat_template;  // tokenizer.chat_template
};

// Throws NotSupported for a model or pre-tokenizer name kvq cannot reproduce.
nlohmann::json tokenizer_json_from_gguf(const GgufVocab& vocab);
nlohmann::json tokenizer_config_from_gguf(const GgufVocab& vocab);

}  // namespace kvq::tok
