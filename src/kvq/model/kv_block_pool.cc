#include "kvq/model/kv_block_pool.h"

#include "kvq/core/error.h"

namespace kvq::model {

KvBlockPool::KvBlockPool(std::int64_t budget_bytes, std::int64_t block_tokens,
                         std::int64_t block_bytes)
    : block_tokens_(block_tokens), block_bytes_(block_bytes), total_(0) {
  if (block_tokens < 1)
    fail<InvalidArgument>("KV block size must be >= 1 token, got {}", block_tokens);
  if (block_bytes < 1) fail<InvalidArgument>("KV block bytes must be >= 1, got {}", block_bytes);
  total_ = budget_bytes / block_bytes;
  if (total_ < 1) {
    fail<InvalidArgument>(
        "--kv-cache-memory: {} bytes hold no KV block of {} tokens ({} bytes); raise it",
        budget_bytes, block_tokens, block_bytes);
  }
  // Default-initialised: the pages are committed when a sequence first writes them.
  bytes_.reset(new std::byte[static_cast<std::size_t>(total_ * block_bytes)]);
  free_.reserve(static_cast<std::size_t>(total_));
  // Taken from the back: the first blocks first, so a small load stays in few pages.
  for (std::int64_t i = total_ - 1; i >= 0; --i) free_.push_back(bytes_.get() + i * block_bytes);
}

bool KvBlockPool::take(std::int64_t n, std::vector<std::byte*>& out) {
  std::lock_guard lock(mutex_);
  if (n < 0 || n > static_cast<std::int64_t>(free_.size())) return false;
  for (std::int64_t i = 0; i < n; ++i) {
    out.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvBlockPool::give_back(const std::vector<std::byte*>& blocks) {
  std::lock_guard lock(mutex_);
  for (std::byte* b : blocks) {
    KVQ_CHECK(b >= bytes_.get() && b < bytes_.get() + total_ * block_bytes_ &&
                  (b - bytes_.get()) % block_bytes_ == 0,
              "a KV block that is not this pool's");
    free_.push_back(b);
  }
  KVQ_CHECK(static_cast<std::int64_t>(free_.size()) <= total_, "KV blocks given back twice");
}

std::int64_t KvBlockPool::used() const {
  std::lock_guard lock(mutex_);
  return total_ - static_cast<std::int64_t>(free_.size());
}

}  // namespace kvq::model
