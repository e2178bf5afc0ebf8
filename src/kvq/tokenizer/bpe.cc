#include "kvq/tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "kvq/core/error.h"
#include "kvq/tokenizer/byte_level.h"

namespace kvq::tok {

Bpe::Bpe(const std::unordered_map<std::string, int32_t>& vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
         const std::string& where)
    : options_(options) {
  byte_id_.fill(-1);
  fallback_id_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (auto it = vocab.find(byte_level_encode(std::string(1, static_cast<char>(b))));
        it != vocab.end()) {
      byte_id_[b] = it->second;
    }
    if (auto it = vocab.find(fmt::format("<0x{:02X}>", b)); it != vocab.end()) {
      fallback_id_[b] = it->second;
    }
  }
  if (options_.ignore_merges) {
    word_ids_.reserve(vocab.size());
    for (const auto& [token, id] : vocab) word_ids_.emplace(byte_level_decode(token), id);
  }
  merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end()) {
      fail<FormatError>("{}: merge #{} '{} {}' uses a token missing from the vocab", where, rank, a,
                        b);
    }
    // The first (lowest-rank) occurrence of a pair wins, as in tokenizers.
    merges_.emplace(pair_key(ia->second, ib->second),
                    Merge{static_cast<int32_t>(rank), iab->second});
  }
}

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    if (auto it = word_ids_.find(piece); it != word_ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1 && byte_id_[static_cast<uint8_t>(piece[0])] >= 0) {
    out.push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  merge_word(piece, out);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(
        std::string(piece),
        std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

void Bpe::merge_word(std::string_view piece, std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over the piece's bytes; a merge keeps the left one.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t left_id;
    int32_t right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap_storage;
  symbols.clear();
  for (char c : piece) {
    auto b = static_cast<uint8_t>(c);
    int32_t id = byte_id_[b];
    if (id < 0 && options_.byte_fallback) id = fallback_id_[b];
    if (id < 0 && options_.unk_id) {
      if (options_.fuse_unk && !symbols.empty() && symbols.back().id == *options_.unk_id) {
        continue;
      }
      id = *options_.unk_id;
    }
    if (id < 0) continue;  // no token and no unk: dropped, as tokenizers does
    auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  heap_storage.clear();
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap(
      std::greater<>{}, std::move(heap_storage));
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) {
      heap.push({it->second.rank, left, symbols[left].id, symbols[right].id});
    }
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);

  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = symbols[c.pos];
    // Stale candidate: either side was merged since (a merge always changes the left id, and
    // a symbol that absorbed its right neighbour has a longer, hence different, token).
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    int32_t right = left.next;
    left.id = merges_.find(pair_key(c.left_id, c.right_id))->second.id;
    left.next = symbols[right].next;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    symbols[right].id = -1;  // dead
    push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

}  // namespace kvq::tok
