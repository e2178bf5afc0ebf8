#include "kvq/tokenizer/spm_bpe.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvq/core/error.h"

namespace kvq::tok {
namespace {

uint32_t utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;  // a continuation byte: llama.cpp's unicode_len_utf8 also gives 1
}

// A run of the piece, linked to its neighbours; len 0 once merged into its left neighbour.
struct Symbol {
  uint32_t begin, len;
  int32_t prev, next;
};

// A candidate merge of symbols left and right (adjacent when pushed), `size` bytes in all.
struct Bigram {
  float score;
  int32_t left, right;
  uint32_t size;
};

// The heap puts the largest first: highest score, then smallest left (llama.cpp's
// llm_bigram_spm::comparator).
struct LowerPriority {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SpmBpe::SpmBpe(const std::vector<std::pair<std::string, double>>& vocab,
               std::optional<int32_t> unk_id, const std::string& where)
    : where_(where) {
  if (unk_id && (*unk_id < 0 || static_cast<size_t>(*unk_id) >= vocab.size())) {
    fail<FormatError>("{}: KvqSentencePieceBPE unk_id {} is outside the vocabulary of {} tokens",
                      where, *unk_id, vocab.size());
  }
  ids_.reserve(vocab.size());
  scores_.reserve(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    ids_[vocab[id].first] = static_cast<int32_t>(id);  // the last id of a string wins
    scores_.push_back(static_cast<float>(vocab[id].second));
  }
  for (int b = 0; b < 256; ++b) {
    int32_t id = find(fmt::format("<0x{:02X}>", b));
    if (id < 0) id = find(std::string(1, static_cast<char>(b)));
    if (id < 0 && unk_id) id = *unk_id;
    byte_ids_[static_cast<size_t>(b)] = id;
  }
}

int32_t SpmBpe::find(std::string_view token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

void SpmBpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Bigram> heap;  // a max-heap under LowerPriority
  symbols.clear();
  for (uint32_t pos = 0; pos < piece.size();) {
    const uint32_t len = std::min<uint32_t>(utf8_length(static_cast<uint8_t>(piece[pos])),
                                            static_cast<uint32_t>(piece.size()) - pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({pos, len, index - 1, pos + len == piece.size() ? -1 : index + 1});
    pos += len;
  }
  heap.clear();
  const auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    const Symbol& r = symbols[static_cast<size_t>(right)];
    const int32_t id = find(piece.substr(l.begin, l.len + r.len));
    if (id < 0) return;
    heap.push_back({scores_[static_cast<size_t>(id)], left, right, l.len + r.len});
    std::push_heap(heap.begin(), heap.end(), LowerPriority{});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
  }
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), LowerPriority{});
    const Bigram b = heap.back();
    heap.pop_back();
    Symbol& l = symbols[static_cast<size_t>(b.left)];
    Symbol& r = symbols[static_cast<size_t>(b.right)];
    // Stale: one side was merged away or grew since the pair was pushed.
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view text = piece.substr(s.begin, s.len);
    // Every merged symbol is a token; only a single character may not be one.
    if (const int32_t id = find(text); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : text) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id < 0) {
        fail<NotSupported>(
            "{}: text has a character the vocabulary lacks, and byte 0x{:02X} has no <0x{:02X}> "
            "token and there is no unk",
            where_, static_cast<uint8_t>(c), static_cast<uint8_t>(c));
      }
      out.push_back(id);
    }
  }
}

}  // namespace kvq::tok
