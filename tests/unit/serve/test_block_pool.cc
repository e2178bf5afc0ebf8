// The KV block pool: blocks round up, reservations are all-or-nothing, and at a fixed budget the
// number of blocks scales with bytes per token (the point of a packed cache).
#include <gtest/gtest.h>

#include "kvq/core/error.h"
#include "kvq/serve/block_pool.h"

namespace kvq::serve {
namespace {

TEST(BlockPool, ReservesWholeBlocksAllOrNothing) {
  BlockPool pool(/*budget_bytes=*/10 * 16 * 100, /*bytes_per_token=*/100, /*block_tokens=*/16);
  EXPECT_EQ(pool.total(), 10);
  EXPECT_EQ(pool.bytes_per_block(), 1600);
  EXPECT_EQ(pool.blocks_for(1), 1);
  EXPECT_EQ(pool.blocks_for(16), 1);
  EXPECT_EQ(pool.blocks_for(17), 2);
  EXPECT_TRUE(pool.try_reserve(7));
  EXPECT_FALSE(pool.try_reserve(4));  // nothing taken
  EXPECT_EQ(pool.used(), 7);
  EXPECT_TRUE(pool.try_reserve(3));
  EXPECT_EQ(pool.free(), 0);
  pool.release(10);
  EXPECT_EQ(pool.free(), 10);
}

TEST(BlockPool, CapacityScalesWithBytesPerToken) {
  constexpr std::int64_t kBudget = std::int64_t{1} << 30;
  // SmolLM2-135M: 30 layers x 3 kv heads x 64 dims x (K, V): f32 4 bytes, bf16 2, int8 1.
  const BlockPool f32(kBudget, 30 * 3 * 64 * 2 * 4, 16), bf16(kBudget, 30 * 3 * 64 * 2 * 2, 16),
      int8(kBudget, 30 * 3 * 64 * 2, 16);
  // Within one block of budget / bytes per token.
  EXPECT_NEAR(bf16.total(), 2 * f32.total(), 1);
  EXPECT_NEAR(int8.total(), 4 * f32.total(), 3);
}

TEST(BlockPool, RefusesABudgetWithoutOneBlock) {
  EXPECT_THROW(BlockPool(100, 100, 16), InvalidArgument);
  EXPECT_THROW(BlockPool(1 << 20, 0, 16), InvalidArgument);
  EXPECT_THROW(BlockPool(1 << 20, 100, 0), InvalidArgument);
}

}  // namespace
}  // namespace kvq::serve
