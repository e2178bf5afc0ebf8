#include "kvq/serve/block_pool.h"

#include "kvq/core/error.h"

namespace kvq::serve {

BlockPool::BlockPool(std::int64_t budget_bytes, std::int64_t bytes_per_token,
                     std::int64_t block_tokens)
    : block_tokens_(block_tokens), bytes_per_block_(bytes_per_token * block_tokens), total_(0) {
  if (block_tokens < 1)
    fail<InvalidArgument>("KV block size must be >= 1 token, got {}", block_tokens);
  if (bytes_per_token < 1) {
    fail<InvalidArgument>("KV bytes per token must be >= 1, got {}", bytes_per_token);
  }
  total_ = budget_bytes / bytes_per_block_;
  if (total_ < 1) {
    fail<InvalidArgument>(
        "--kv-cache-memory: {} bytes hold no KV block of {} tokens ({} bytes); raise it",
        budget_bytes, block_tokens, bytes_per_block_);
  }
}

std::int64_t BlockPool::blocks_for(std::int64_t tokens) const {
  return (tokens + block_tokens_ - 1) / block_tokens_;
}

std::int64_t BlockPool::blocks_for_bytes(std::int64_t bytes) const {
  return (bytes + bytes_per_block_ - 1) / bytes_per_block_;
}

bool BlockPool::try_reserve(std::int64_t blocks) {
  if (blocks > free()) return false;
  used_ += blocks;
  return true;
}

void BlockPool::release(std::int64_t blocks) {
  KVQ_CHECK(blocks >= 0 && blocks <= used_, "releasing {} KV blocks of {} used", blocks, used_);
  used_ -= blocks;
}

}  // namespace kvq::serve
