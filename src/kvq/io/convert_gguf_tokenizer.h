// Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json) from a GGUF vocabulary.
//
// Supports tokenizer.ggml.model = "llama" (SentencePiece, Gemma: convert_gguf_tokenizer_spm.h) and
// "gpt2" (byte-level BPE) with tokenizer.ggml.pre "smollm" (every Unicode digit its own piece, then
// the GPT-2 byte-level regex — what llama.cpp does and what the original SmolLM2 tokenizer.json
// says with Digits(individual_digits) + ByteLevel) and "gpt2" / "default" (GPT-2 byte-level regex
// only). Other vocabularies are refused.
#pragma once

#include <nlohmann/json.hpp>

#include "kvq/io/gguf.h"

namespace kvq::io {

// tokenizer.json: BPE model (vocab + merges, no unk, no byte fallback), pre-tokenizer, ByteLevel
// decoder and post-processor, added_tokens for control (type 3, special) and user-defined
// (type 4) tokens. NotSupported naming the file for an unsupported model or pre-tokenizer.
nlohmann::json gguf_tokenizer_json(const GgufFile& gguf);

// tokenizer_config.json: special token strings (bos/eos/pad/unk from the GGUF ids),
// added_tokens_decoder, chat_template (tokenizer.chat_template), model_max_length
// (<arch>.context_length), tokenizer_class PreTrainedTokenizerFast, add_bos_token from the GGUF.
nlohmann::json gguf_tokenizer_config_json(const GgufFile& gguf);

}  // namespace kvq::io
