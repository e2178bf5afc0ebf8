// One pool of fixed-size KV blocks that paged caches (kvq serve's sequences) take their rows from,
// vLLM-style: a block holds `block_tokens` positions of ONE layer's K and V, every kv head:
//   [K: kv_heads, block_tokens, k_row_bytes][V: kv_heads, block_tokens, v_row_bytes]
// so every layer's block has the same size (one format for all layers) and a sliding-window layer
// takes only the blocks its ring needs. A paged KvCache (model/kv_cache.h) holds a block table per
// layer and takes blocks as its sequence grows (KvCache::reserve); its destructor gives them back.
//
// The pool's memory is one allocation of budget / block_bytes blocks, not zeroed, so pages the
// operating system never saw touched cost nothing until a sequence writes them. take / give_back /
// the counters are thread-safe (the server's scheduler takes blocks while /metrics reads them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace kvq::model {

class KvBlockPool {
 public:
  // InvalidArgument when block_tokens < 1, block_bytes < 1 or the budget holds no block.
  KvBlockPool(std::int64_t budget_bytes, std::int64_t block_tokens, std::int64_t block_bytes);
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  // Appends n free blocks to `out` when at least n are free and returns true; false (nothing
  // taken) otherwise.
  bool take(std::int64_t n, std::vector<std::byte*>& out);
  // Returns blocks take() gave out.
  void give_back(const std::vector<std::byte*>& blocks);

  std::int64_t total() const { return total_; }
  std::int64_t used() const;
  std::int64_t free() const { return total_ - used(); }
  std::int64_t block_tokens() const { return block_tokens_; }
  std::int64_t block_bytes() const { return block_bytes_; }

 private:
  std::int64_t block_tokens_, block_bytes_, total_;
  std::unique_ptr<std::byte[]> bytes_;  // [total, block_bytes]
  mutable std::mutex mutex_;
  std::vector<std::byte*> free_;  // under mutex_; taken from the back
};

}  // namespace kvq::model
