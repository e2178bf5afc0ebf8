// KV-cache memory accounting of the server: one pool of fixed-size blocks (block_tokens tokens of
// one sequence each) under the --kv-cache-memory budget. Bytes per block follow from the cache
// format's bytes per token, so at a fixed budget a packed format holds proportionally more
// tokens (int8 4x f32, int4 about 8x).
//
// This is admission accounting, not paging: a sequence reserves the blocks for its prompt plus
// its max_tokens up front (vLLM's worst-case admission) and its KvCache is then allocated
// contiguously with exactly that capacity (its bytes: sliding-window layers hold rings). The
// attention kernels read one contiguous cache per sequence; block tables inside them (a real paged
// cache) are not built.
#pragma once

#include <cstdint>

namespace kvq::serve {

class BlockPool {
 public:
  // InvalidArgument when block_tokens < 1, bytes_per_token < 1 or the budget holds no block.
  BlockPool(std::int64_t budget_bytes, std::int64_t bytes_per_token, std::int64_t block_tokens);

  // Blocks a sequence of `tokens` tokens occupies (rounded up), at bytes_per_token each.
  std::int64_t blocks_for(std::int64_t tokens) const;
  // Blocks that hold `bytes` (rounded up): a sequence whose sliding-window layers keep rings
  // (model/kv_cache.h) needs fewer bytes than tokens × bytes_per_token.
  std::int64_t blocks_for_bytes(std::int64_t bytes) const;
  // Takes `blocks` when that many are free; false (nothing taken) otherwise.
  bool try_reserve(std::int64_t blocks);
  // Gives back blocks taken by try_reserve.
  void release(std::int64_t blocks);

  std::int64_t total() const { return total_; }
  std::int64_t used() const { return used_; }
  std::int64_t free() const { return total_ - used_; }
  std::int64_t block_tokens() const { return block_tokens_; }
  std::int64_t bytes_per_block() const { return bytes_per_block_; }

 private:
  std::int64_t block_tokens_, bytes_per_block_, total_, used_ = 0;
};

}  // namespace kvq::serve
