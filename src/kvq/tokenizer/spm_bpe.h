// SentencePiece BPE as llama.cpp runs it (llm_tokenizer_spm in src/llama-vocab.cpp, the tokenizer
// of a GGUF with tokenizer.ggml.model = "llama": Gemma, Llama 1/2, Mistral v0.1): the model of a
// tokenizer.json with the kvq-specific type "KvqSentencePieceBPE", which `kvq convert` writes for
// such a GGUF (see io/convert_gguf_tokenizer_spm.h for why not a Hugging Face "BPE" model).
//
// One piece (already normalized: spaces are "▁") is split into UTF-8 characters; then, as long
// as some adjacent pair of symbols concatenates to a vocabulary token, the pair whose token has
// the highest score is merged (float32 scores, as the GGUF stores them; ties: the leftmost pair).
// This uses scores, not a merge list: any two adjacent symbols may merge, whatever their own
// history. A symbol left that is not a token (a character outside the vocabulary) becomes its
// UTF-8 bytes' "<0xXX>" tokens (byte fallback; llama.cpp then tries the one-byte token itself;
// kvq then falls back to unk). Token strings are looked up as llama.cpp's text_to_token does:
// every token of the vocabulary, whatever its type, and the last id of a duplicated string.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvq::tok {

// The tokenizer.json "model" type of this model. Not a Hugging Face type: tokenizers refuses the
// file rather than loading a different tokenizer.
inline constexpr std::string_view kSpmBpeModelType = "KvqSentencePieceBPE";

class SpmBpe {
 public:
  // `vocab`: (token, score) in id order; `unk_id` as in tokenizer.json. Throws FormatError
  // naming `where` for an unk_id outside the vocabulary.
  SpmBpe(const std::vector<std::pair<std::string, double>>& vocab, std::optional<int32_t> unk_id,
         const std::string& where);

  // Appends the ids of one piece (normalized UTF-8, non-empty) to `out`. Thread-safe.
  // NotSupported naming the tokenizer when a byte has neither a "<0xXX>" token, a one-byte
  // token nor unk.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  // The id of a token string, or -1.
  int32_t find(std::string_view token) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ids_;
  std::vector<float> scores_;            // by id
  std::array<int32_t, 256> byte_ids_{};  // byte fallback per byte, -1 if none
  std::string where_;
};

}  // namespace kvq::tok
