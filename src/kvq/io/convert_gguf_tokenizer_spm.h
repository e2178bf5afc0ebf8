// Hugging Face tokenizer files from a SentencePiece GGUF vocabulary (tokenizer.ggml.model =
// "llama": tokens, scores, token types) of a Gemma model: what transformers' GGUF loader builds
// for it (GGUFGemmaConverter) — a Unigram model over (token, score) with byte fallback,
// normalizer Replace(" " -> "▁"), pre-tokenizer Split(" ", MergedWithPrevious), decoder
// Replace("▁" -> " ") + ByteFallback + Fuse; the same vocabulary edits ("<0x09>" is spelled
// "\t", all-whitespace tokens with a space are spelled as that many "▁").
//
// Two deliberate differences from transformers 5.17's GGUF tokenizer (which keeps only
// bos/eos/unk/pad/mask as added tokens and never adds <bos>): every control token (type 3:
// <start_of_turn>, <end_of_turn>, <unusedN>, ...) is an added special token, so chat markup is
// one token, and the post-processor puts <bos> first when the GGUF says
// tokenizer.ggml.add_bos_token (as llama.cpp and the original Gemma tokenizer do). Plain text
// encoded without special tokens gives the same ids.
#pragma once

#include <nlohmann/json.hpp>

#include "kvq/io/gguf.h"

namespace kvq::io {

// NotSupported naming the file for an architecture other than gemma3 / gemma2; FormatError for
// inconsistent arrays (scores or types not one per token, an id out of range).
nlohmann::json gguf_spm_tokenizer_json(const GgufFile& gguf);
nlohmann::json gguf_spm_tokenizer_config_json(const GgufFile& gguf);

}  // namespace kvq::io
