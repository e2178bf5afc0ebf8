#include "kvq/tokenizer/unigram.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "kvq/core/error.h"

namespace kvq::tok {
namespace {

// tokenizers' K_UNK_PENALTY: an unknown character costs this much below the lowest score.
constexpr double kUnkPenalty = 10.0;

uint32_t utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  return 4;
}

}  // namespace

Unigram::Unigram(const std::vector<std::pair<std::string, double>>& vocab,
                 std::optional<int32_t> unk_id, bool byte_fallback, const std::string& where)
    : unk_id_(unk_id), byte_fallback_(byte_fallback), where_(where) {
  if (unk_id_ && (*unk_id_ < 0 || static_cast<size_t>(*unk_id_) >= vocab.size())) {
    fail<FormatError>("{}: Unigram unk_id {} is outside the vocabulary of {} tokens", where,
                      *unk_id_, vocab.size());
  }
  scores_.reserve(vocab.size());
  double min_score = std::numeric_limits<double>::infinity();
  std::unordered_map<std::string_view, int32_t> last_id;  // token_to_ids: the last id wins
  last_id.reserve(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    scores_.push_back(vocab[id].second);
    min_score = std::min(min_score, vocab[id].second);
    last_id[vocab[id].first] = static_cast<int32_t>(id);
  }
  unk_score_ = min_score - kUnkPenalty;
  sorted_.reserve(last_id.size());
  for (const auto& [token, id] : last_id) {
    if (!token.empty()) sorted_.push_back({std::string(token), id});
  }
  std::sort(sorted_.begin(), sorted_.end(),
            [](const Entry& a, const Entry& b) { return a.token < b.token; });
  for (int b = 0; b < 256; ++b) byte_ids_[b] = find(fmt::format("<0x{:02X}>", b));
}

int32_t Unigram::find(std::string_view token) const {
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), token,
                             [](const Entry& e, std::string_view t) { return e.token < t; });
  return it != sorted_.end() && it->token == token ? it->id : -1;
}

void Unigram::prefixes(std::string_view text,
                       std::vector<std::pair<uint32_t, int32_t>>& out) const {
  // [lo, hi) holds the tokens that start with text[0, k); sorted bytewise, so the one equal to
  // text[0, k) (if any) comes first and the rest are ordered by their byte k.
  size_t lo = 0, hi = sorted_.size();
  for (size_t k = 0; k < text.size() && lo < hi; ++k) {
    if (sorted_[lo].token.size() == k) ++lo;
    const auto c = static_cast<uint8_t>(text[k]);
    const auto byte_at = [k](const Entry& e) { return static_cast<uint8_t>(e.token[k]); };
    lo = static_cast<size_t>(std::partition_point(sorted_.begin() + static_cast<std::ptrdiff_t>(lo),
                                                  sorted_.begin() + static_cast<std::ptrdiff_t>(hi),
                                                  [&](const Entry& e) { return byte_at(e) < c; }) -
                             sorted_.begin());
    hi = static_cast<size_t>(std::partition_point(sorted_.begin() + static_cast<std::ptrdiff_t>(lo),
                                                  sorted_.begin() + static_cast<std::ptrdiff_t>(hi),
                                                  [&](const Entry& e) { return byte_at(e) == c; }) -
                             sorted_.begin());
    if (lo < hi && sorted_[lo].token.size() == k + 1) {
      out.emplace_back(static_cast<uint32_t>(k + 1), sorted_[lo].id);
    }
  }
}

void Unigram::emit(std::string_view token, int32_t id, std::vector<int32_t>& out) const {
  if (id >= 0) {
    out.push_back(id);
    return;
  }
  if (byte_fallback_) {
    bool all = true;
    for (char c : token) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
    if (all) {
      for (char c : token) out.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      return;
    }
  }
  out.push_back(*unk_id_);
}

void Unigram::encode(std::string_view piece, std::vector<int32_t>& out) const {
  struct Node {
    double score = 0;
    int32_t start = -1;  // -1: not reached yet
    int32_t id = -1;
  };
  thread_local std::vector<Node> best;
  thread_local std::vector<std::pair<uint32_t, int32_t>> hits;
  thread_local std::vector<std::pair<uint32_t, uint32_t>> path;  // (start, end), reversed
  thread_local std::vector<int32_t> path_ids;
  const size_t n = piece.size();
  best.assign(n + 1, Node{});
  for (size_t pos = 0; pos < n;) {
    const double base = best[pos].score;
    const uint32_t char_len =
        std::min<uint32_t>(utf8_length(static_cast<uint8_t>(piece[pos])), n - pos);
    bool has_single = false;
    hits.clear();
    prefixes(piece.substr(pos), hits);
    for (const auto& [len, id] : hits) {
      Node& target = best[pos + len];
      const double candidate = scores_[static_cast<size_t>(id)] + base;
      if (target.start < 0 || candidate > target.score) {
        target = {candidate, static_cast<int32_t>(pos), id};
      }
      has_single = has_single || len == char_len;
    }
    if (!has_single) {
      if (!unk_id_) {
        fail<NotSupported>("{}: text has a character the Unigram vocabulary lacks and no unk_id",
                           where_);
      }
      Node& target = best[pos + char_len];
      const double candidate = unk_score_ + base;
      if (target.start < 0 || candidate > target.score) {
        target = {candidate, static_cast<int32_t>(pos), *unk_id_};
      }
    }
    pos += char_len;
  }
  // Back from the end; runs of unk nodes become one string (tokenizers' fuse_unk, on for
  // Unigram), looked up again, then byte fallback.
  path.clear();
  path_ids.clear();
  for (size_t end = n; end > 0;) {
    const Node& node = best[end];
    const auto start = static_cast<uint32_t>(node.start);
    const bool unk = unk_id_ && node.id == *unk_id_;
    if (unk && !path.empty() && path_ids.back() == -1) {
      path.back().first = start;  // extends the fused run leftwards
    } else {
      path.emplace_back(start, static_cast<uint32_t>(end));
      path_ids.push_back(unk ? -1 : node.id);
    }
    end = start;
  }
  for (size_t i = path.size(); i-- > 0;) {
    const std::string_view token = piece.substr(path[i].first, path[i].second - path[i].first);
    emit(token, path_ids[i] >= 0 ? path_ids[i] : find(token), out);
  }
}

}  // namespace kvq::tok
