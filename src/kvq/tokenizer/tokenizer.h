// A Hugging Face tokenizer.json tokenizer, of one of three models:
//   byte-level BPE (bpe.h) — Llama-3, GPT-2, Qwen, SmolLM2;
//   Unigram with byte fallback (unigram.h) — T5-style SentencePiece Unigram models;
//   KvqSentencePieceBPE (spm_bpe.h) — kvq's own type for a SentencePiece-BPE vocabulary with
//   scores, run as llama.cpp's SPM tokenizer; what `kvq convert` writes for a Gemma GGUF.
//
// Supported (anything else fails at load with NotSupported saying what is supported):
//   model          BPE over the ByteLevel alphabet (merges as "a b" strings or [a, b] pairs;
//                  ignore_merges, byte_fallback, unk_token, fuse_unk), Unigram (vocab of
//                  [token, score], unk_id, byte_fallback) or KvqSentencePieceBPE (vocab of
//                  [token, score], unk_id; byte fallback always)
//   normalizer     null, Replace (String pattern), Prepend, Sequence of those (normalizer.h)
//   pre_tokenizer  ByteLevel, Digits, Split, Sequence (see pre_tokenizer.h); a BPE model needs
//                  a ByteLevel step
//   post_processor null, ByteLevel, TemplateProcessing (special tokens around "A" when
//                  add_special_tokens is true), Sequence of those
//   decoder        ignored: ids decode to the exact bytes of their tokens (BPE: the ByteLevel
//                  decoder; Unigram / KvqSentencePieceBPE: "▁" -> " ", as Gemma's Replace
//                  decoder; "<0xXX>" byte-fallback tokens decode to their byte), without
//                  tokenizers' lossy UTF-8 repair. transformers' clean_up_tokenization_spaces is
//                  NOT applied.
//   added_tokens   matched in the raw text before normalization and pre-tokenization, leftmost
//                  then longest; lstrip / rstrip / single_word honoured; `normalized: true` is
//                  refused when the tokenizer has a normalizer.
// from_dir() also reads tokenizer_config.json (bos/eos tokens, chat_template) and
// chat_template.jinja (transformers >= 4.43 writes the template there; it wins).
//
// BOS: what encode(text, true) puts first is the post-processor's (tokenizer.json), as
// transformers' tokenizer(text) does; add_bos_id() says whether that is a token, and the
// commands that feed plain text (perplexity, compare, eval, generate) follow it.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvq/tokenizer/chat_template.h"
#include "kvq/tokenizer/normalizer.h"

namespace kvq::tok {

class Bpe;
class PreTokenizer;
class SpmBpe;
class Unigram;

class Tokenizer {
 public:
  // Loads tokenizer.json. IoError if unreadable, FormatError for invalid JSON, NotSupported for
  // a model / pre-tokenizer kvq does not implement.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // Loads model_dir/tokenizer.json plus tokenizer_config.json and chat_template.jinja when
  // present.
  static Tokenizer from_dir(const std::filesystem::path& model_dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (UTF-8; InvalidArgument otherwise). Added/special tokens written in the
  // text are always recognised; add_special_tokens applies the post-processor (e.g. BOS).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // The bytes `ids` stand for; InvalidArgument for an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The bytes of one token, for streaming (may be an incomplete UTF-8 sequence).
  const std::string& token_to_piece(int32_t id) const;

  // One past the largest id (vocab and added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // The id of a token spelled as in tokenizer.json ("<|im_end|>", "Ġthe"), if any.
  std::optional<int32_t> token_id(std::string_view token) const;
  bool is_special(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // The token encode(text, true) puts first (the post-processor's first special token: <bos>
  // for Gemma, Llama 3), nullopt when it puts none (SmolLM2).
  std::optional<int32_t> add_bos_id() const {
    return prefix_ids_.empty() ? std::nullopt : std::optional<int32_t>(prefix_ids_.front());
  }
  // The Jinja chat template text ("" when the model has none).
  const std::string& chat_template() const { return chat_template_text_; }
  // The recognised template with the tokenizer's bos/eos tokens: the one way kvq renders chats.
  const ChatTemplate& chat_template_renderer() const { return chat_template_; }
  // Renders `messages` with the model's chat template (see chat_template.h for the templates
  // kvq recognises; others throw NotSupported).
  std::string apply_chat_template(std::span<const ChatMessage> messages,
                                  bool add_generation_prompt) const;

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip, single_word;
  };
  Tokenizer();
  void load_json(const std::filesystem::path& path);
  void load_config(const std::filesystem::path& dir);
  // Appends the ids of text without added tokens in it.
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;

  // Exactly one of the three models is set.
  std::unique_ptr<Bpe> bpe_;
  std::unique_ptr<Unigram> unigram_;
  std::unique_ptr<SpmBpe> spm_;
  Normalizer normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::vector<std::string> id_to_token_;  // as spelled in tokenizer.json; "" for holes
  std::vector<std::string> id_to_bytes_;  // decoded bytes
  std::vector<uint8_t> special_;          // 1 for added tokens marked special
  std::unordered_map<std::string, int32_t> token_to_id_;
  std::vector<AddedToken> added_;                          // longest first
  std::array<std::vector<uint32_t>, 256> added_by_first_;  // first byte -> indices into added_
  std::vector<int32_t> prefix_ids_, suffix_ids_;  // post-processor, when add_special_tokens
  std::optional<int32_t> bos_id_, eos_id_;
  std::string chat_template_text_;
  ChatTemplate chat_template_;
  std::string source_;  // file name for messages
};

}  // namespace kvq::tok
