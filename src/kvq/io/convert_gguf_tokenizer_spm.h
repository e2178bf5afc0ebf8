// Hugging Face-style tokenizer files from a SentencePiece GGUF vocabulary (tokenizer.ggml.model =
// "llama": tokens, scores, token types) of a Gemma model, tokenizing as llama.cpp does:
//   model          "KvqSentencePieceBPE" (tokenizer/spm_bpe.h): the GGUF's tokens as they are
//                  spelled there, with their float32 scores, in id order; unk_id; byte fallback;
//   added_tokens   every control / unknown token (types 3, 2) as a special token and every
//                  user-defined one (type 4: "\n", "\n\n", runs of spaces, "<table>", ...) as a
//                  plain one: llama.cpp cuts them out of the raw text before SPM runs (control
//                  ones only with parse_special; kvq always recognises special tokens in text;
//                  kvq matches them leftmost-longest, llama.cpp longest token first over the
//                  whole text: the same cut unless the end of one such token can start another,
//                  which no pair in Gemma 3's vocabulary does — checked, not enforced);
//   normalizer     Replace(" " -> "▁"), after Prepend("▁") when tokenizer.ggml.add_space_prefix
//                  (llama.cpp's default for SPM when the key is absent; Gemma: false);
//   pre_tokenizer  none: each piece of text between added tokens is one SPM piece;
//   post_processor <bos> first when tokenizer.ggml.add_bos_token (default true, as llama.cpp);
//   decoder        Replace("▁" -> " ") + ByteFallback + Fuse (kvq decodes by itself).
//
// Why not the Hugging Face model a real Gemma tokenizer.json has (GemmaTokenizerFast: "BPE" with
// merges ranked by score, byte_fallback): tokenizers' BPE cannot be made exactly equal to the SPM
// algorithm. SPM merges by the score of the merged token and breaks ties by position; a merge
// list gives every (left, right) pair its own rank, so two different pairs that make the same
// token (same score) are ordered by rank, not position, and the order of merges can change the
// result. A character outside the vocabulary becomes <0xXX> symbols in tokenizers' BPE before
// merging, while SPM keeps it as one symbol that may still merge with a neighbour. So the file is
// marked as kvq's own model type: transformers refuses to load it (tokenizers: "data did not
// match any variant of untagged enum ModelUntagged") instead of loading a tokenizer that splits
// differently. transformers 5.17's GGUF loader builds a Unigram model
// from the same scores, which splits words differently again ("▁c ap it al" for "▁capital").
#pragma once

#include <nlohmann/json.hpp>

#include "kvq/io/gguf.h"

namespace kvq::io {

// NotSupported naming the file for an architecture other than gemma3 / gemma2; FormatError for
// inconsistent arrays (scores or types not one per token, an id out of range).
nlohmann::json gguf_spm_tokenizer_json(const GgufFile& gguf);
nlohmann::json gguf_spm_tokenizer_config_json(const GgufFile& gguf);

}  // namespace kvq::io
