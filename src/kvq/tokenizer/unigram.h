// Unigram (the "model" of a tokenizer.json with type "Unigram"): the segmentation of one piece
// with the highest sum of token scores (Viterbi over every vocabulary token that matches at each
// character), as tokenizers' Unigram::encode_optimized does — including its tie-breaking (the
// first path found wins: earlier start, then shorter token), its unknown-character penalty
// (min score − 10), fused runs of unknown characters and byte fallback ("<0xXX>" tokens for the
// bytes of an unknown run, or unk when one of them is missing).
//
// For Hugging Face Unigram tokenizers (T5-style SentencePiece Unigram models). transformers also
// builds this model from a SentencePiece-BPE GGUF vocabulary (Gemma), which then splits words
// unlike llama.cpp and the model's own tokenizer; `kvq convert` writes spm_bpe.h's model for such
// a GGUF instead, so no converted model uses this one (kept, unit-tested on hand-built files).
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

class Unigram {
 public:
  // `vocab`: (token, score) in id order; `unk_id` as in tokenizer.json. Throws FormatError
  // naming `where` for an unk_id outside the vocabulary.
  Unigram(const std::vector<std::pair<std::string, double>>& vocab, std::optional<int32_t> unk_id,
          bool byte_fallback, const std::string& where);

  // Appends the ids of one piece (normalized UTF-8, non-empty) to `out`. Thread-safe.
  // NotSupported naming the tokenizer when a character needs unk and there is none.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  // The token ids whose strings are prefixes of `text`, shortest first (as tokenizers' trie's
  // common_prefix_search yields them), appended as (byte length, id).
  void prefixes(std::string_view text, std::vector<std::pair<uint32_t, int32_t>>& out) const;
  // The id of a token string (the last id that spells it, as tokenizers' token_to_ids), or -1.
  int32_t find(std::string_view token) const;
  void emit(std::string_view token, int32_t id, std::vector<int32_t>& out) const;

  struct Entry {
    std::string token;
    int32_t id;
  };
  std::vector<Entry> sorted_;   // unique token strings, sorted bytewise
  std::vector<double> scores_;  // by id
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_ids_{};  // "<0xXX>" tokens, -1 if absent
  double unk_score_ = 0;
  std::string where_;
};

}  // namespace kvq::tok
