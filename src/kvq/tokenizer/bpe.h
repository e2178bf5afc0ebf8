// Byte-level BPE (the "model" of a tokenizer.json with type "BPE"): encodes one pre-tokenized
// piece of raw bytes into token ids by applying merges in rank order, lowest rank first and
// leftmost first among equal ranks (as tokenizers' BPE::merge_word does).
//
// The byte-level alphabet is folded in at load time: each of the 256 bytes maps straight to
// the id of its one-char token, and merges are keyed by pairs of ids, so encoding never builds
// byte-level strings. Results of short pieces are cached (word -> ids).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kvq::tok {

struct BpeOptions {
  bool ignore_merges = false;     // a piece that is a whole vocab token is emitted as is
  bool byte_fallback = false;     // unknown byte -> "<0xXX>" token when present
  std::optional<int32_t> unk_id;  // unknown byte -> unk (after byte fallback)
  bool fuse_unk = false;          // consecutive unks become one
};

class Bpe {
 public:
  // `vocab`: token string as spelled in tokenizer.json (byte-level) -> id; `merges`: pairs of
  // token strings, rank = index. Throws FormatError naming `where` for inconsistent merges.
  Bpe(const std::unordered_map<std::string, int32_t>& vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
      const std::string& where);

  // Appends the ids of one piece (raw bytes, non-empty) to `out`. Thread-safe.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using WordMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  using Cache = std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>>;

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void merge_word(std::string_view piece, std::vector<int32_t>& out) const;

  static constexpr size_t kMaxCachedPieceBytes = 64;
  static constexpr size_t kMaxCacheEntries = 1 << 18;

  BpeOptions options_;
  std::array<int32_t, 256> byte_id_{};          // -1: no token for this byte
  std::array<int32_t, 256> fallback_id_{};      // "<0xXX>" tokens, -1 if absent
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, merged id
  WordMap word_ids_;                            // raw bytes of every token -> id (ignore_merges)
  mutable std::mutex cache_mutex_;
  mutable Cache cache_;
};

}  // namespace kvq::tok
