// Paged KV caches (model/kv_block_pool.h, kvq serve): a batch-1 cache whose rows live in blocks
// of one pool, a block table per layer, taken as the sequence grows. Rows, rings and formats are
// those of a contiguous cache, and kernels read a block's rows as a run (KvRowsView::run), so
// every logit must be bit for bit the contiguous cache's — prefill, pieces, decode, decode_step
// of several sequences, long after a sliding-window ring has wrapped — on every tiny row.
#include <numeric>

#include "kvq/model/kv_block_pool.h"
#include "kvq/quant/formats.h"
#include "tiny_model.h"

namespace kvq::model::test {
namespace {

constexpr std::int64_t kChunk = 32;  // window_chunk: rings of window - 1 + 32 rows
constexpr std::int64_t kCapacity = 260;
constexpr std::int64_t kBlockTokens = 16;

class PagedKvCache : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = CausalLM::load(tiny_variant_dir(GetParam()));
    for (int i = 0; i < 240; ++i) tokens_.push_back((i * 37 + 11) % 253 + 3);
  }
  const ModelConfig& config() const { return model_->config(); }
  static KvCacheConfig with_chunk(KvCacheConfig kv) {
    kv.window_chunk = kChunk;
    return kv;
  }
  // A pool of `blocks` blocks for caches of this config.
  std::unique_ptr<KvBlockPool> pool(const KvCacheConfig& kv, std::int64_t blocks) const {
    const std::int64_t bytes = model_->kv_block_bytes(kv, kBlockTokens);
    return std::make_unique<KvBlockPool>(blocks * bytes, kBlockTokens, bytes);
  }
  std::span<const std::int32_t> tokens(std::size_t from, std::size_t n) const {
    return std::span(tokens_).subspan(from, n);
  }
  std::vector<KvCacheConfig> formats() const {
    std::vector<KvCacheConfig> out = storage_test_formats(config().head_dim);
    for (KvCacheConfig& kv : out) kv = with_chunk(kv);
    return out;
  }

  std::unique_ptr<CausalLM> model_;
  std::vector<std::int32_t> tokens_;
};

// A 200-token prefill in pieces (not block multiples), then 40 decode steps reserving a token at
// a time: the logits and every row still held equal a contiguous cache's.
TEST_P(PagedKvCache, EqualsAContiguousCacheBitForBit) {
  for (const KvCacheConfig& kv : formats()) {
    const auto p = pool(kv, 1000);
    KvCache paged = model_->make_cache(1, kCapacity, kv, p.get());
    KvCache flat = model_->make_cache(1, kCapacity, kv);
    ASSERT_TRUE(paged.paged());
    EXPECT_EQ(paged.blocks(), 0);
    std::size_t at = 0;
    for (const std::size_t n : {37u, 100u, 63u}) {
      ASSERT_TRUE(paged.reserve(static_cast<std::int64_t>(at + n)));
      const Tensor want = model_->forward(tokens(at, n), flat, LogitsMode::kAll);
      ASSERT_TRUE(bit_identical(model_->forward(tokens(at, n), paged, LogitsMode::kAll), want))
          << kv.label() << " piece at " << at;
      at += n;
    }
    for (std::size_t i = 200; i < 240; ++i) {
      ASSERT_TRUE(paged.reserve(static_cast<std::int64_t>(i) + 1));
      ASSERT_TRUE(
          bit_identical(model_->forward(tokens(i, 1), paged), model_->forward(tokens(i, 1), flat)))
          << kv.label() << " decode at " << i;
    }
    for (std::int64_t l = 0; l < config().num_hidden_layers; ++l) {
      const std::int64_t first = paged.first_position(l), n = 240 - first;
      EXPECT_EQ(paged.keys(l).read(first, n), flat.keys(l).read(first, n)) << kv.label() << l;
      EXPECT_EQ(paged.values(l).read(first, n), flat.values(l).read(first, n)) << kv.label() << l;
    }
    // Every layer holds the blocks its rows need, a ring no more than its rows'.
    EXPECT_EQ(paged.blocks(),
              KvCache::blocks_for(240, config().num_hidden_layers, config().num_key_value_heads,
                                  config().head_dim, kCapacity, kv, kBlockTokens,
                                  model_->attention_windows()))
        << kv.label();
    EXPECT_EQ(p->used(), paged.blocks());
    EXPECT_EQ(paged.allocated_bytes(), paged.blocks() * p->block_bytes());
  }
}

// decode_step over paged caches of different lengths equals decoding each alone in a contiguous
// cache, with blocks taken between steps.
TEST_P(PagedKvCache, DecodeStepOfPagedCaches) {
  const KvCacheConfig kv = with_chunk(KvCacheConfig::dynamic(KvFormat::kFP8E4M3));
  const auto p = pool(kv, 2000);
  std::vector<KvCache> paged, flat;
  for (const std::size_t n : {30u, 90u, 170u}) {
    paged.push_back(model_->make_cache(1, kCapacity, kv, p.get()));
    flat.push_back(model_->make_cache(1, kCapacity, kv));
    ASSERT_TRUE(paged.back().reserve(static_cast<std::int64_t>(n)));
    model_->forward(tokens(0, n), paged.back());
    model_->forward(tokens(0, n), flat.back());
  }
  std::vector<KvCache*> ptrs;
  for (KvCache& c : paged) ptrs.push_back(&c);
  for (int s = 0; s < 50; ++s) {
    for (KvCache& c : paged) ASSERT_TRUE(c.reserve(c.length() + 1));
    const std::vector<std::int32_t> t = {3 + s, 100 + s, 200 - s};
    const Tensor batched = model_->decode_step(t, ptrs);
    for (std::size_t i = 0; i < flat.size(); ++i) {
      const Tensor alone = model_->forward(std::span(t).subspan(i, 1), flat[i]);
      ASSERT_EQ(std::memcmp(batched.f32() + static_cast<std::int64_t>(i) * alone.numel(),
                            alone.f32(), static_cast<std::size_t>(alone.numel()) * sizeof(float)),
                0)
          << "step " << s << " sequence " << i;
    }
  }
}

// Blocks come from the pool all or none and go back when the cache goes (or is moved from).
TEST_P(PagedKvCache, BlocksComeAndGoWithTheCache) {
  const KvCacheConfig kv = with_chunk(KvCacheConfig::dynamic(KvFormat::kINT8));
  const std::int64_t layers = config().num_hidden_layers;
  const auto p = pool(kv, 3 * layers);  // three blocks per layer
  {
    KvCache a = model_->make_cache(1, kCapacity, kv, p.get());
    EXPECT_TRUE(a.reserve(2 * kBlockTokens));
    EXPECT_EQ(a.blocks(), 2 * layers);
    EXPECT_TRUE(a.reserve(kBlockTokens));  // already held
    EXPECT_EQ(a.blocks_missing(2 * kBlockTokens + 1), layers);
    KvCache b = model_->make_cache(1, kCapacity, kv, p.get());
    EXPECT_FALSE(b.reserve(2 * kBlockTokens));  // only `layers` blocks left: takes none
    EXPECT_EQ(b.blocks(), 0);
    EXPECT_EQ(p->free(), layers);
    // Writing past the reserved rows is refused before any work.
    model_->forward(tokens(0, 2 * kBlockTokens), a);
    EXPECT_THROW(model_->forward(tokens(0, 1), a), InvalidArgument);
    EXPECT_EQ(a.length(), 2 * kBlockTokens);
    KvCache moved = std::move(a);
    EXPECT_EQ(p->used(), 2 * layers);
    EXPECT_TRUE(b.reserve(kBlockTokens));
    EXPECT_EQ(p->free(), 0);
  }
  EXPECT_EQ(p->used(), 0);
  EXPECT_THROW(model_->make_cache(2, kCapacity, kv, p.get()), InvalidArgument);  // batch 2
  EXPECT_THROW(model_->make_cache(1, kCapacity, KvCacheConfig::of(KvFormat::kF32), p.get()),
               InvalidArgument);  // blocks of another format
  KvCache c = model_->make_cache(1, kCapacity, kv, p.get());
  EXPECT_THROW(c.reserve(kCapacity + 1), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Rows, PagedKvCache, ::testing::ValuesIn(tiny_variants()));

TEST(KvBlockPool, CountsAndRefusals) {
  KvBlockPool p(10 * 64 + 63, 16, 64);
  EXPECT_EQ(p.total(), 10);
  std::vector<std::byte*> got;
  EXPECT_TRUE(p.take(4, got));
  EXPECT_EQ(got.size(), 4u);
  EXPECT_FALSE(p.take(7, got));
  EXPECT_EQ(got.size(), 4u);
  EXPECT_EQ(p.used(), 4);
  for (std::size_t i = 1; i < got.size(); ++i) EXPECT_NE(got[i], got[i - 1]);
  p.give_back(got);
  EXPECT_EQ(p.free(), 10);
  EXPECT_THROW(KvBlockPool(63, 16, 64), InvalidArgument);
  EXPECT_THROW(KvBlockPool(1000, 0, 64), InvalidArgument);
}

// At a fixed budget the number of blocks scales with the bytes per token: the point of a packed
// cache. SmolLM2-135M's geometry (3 kv heads x 64 dims): f32 4 bytes, bf16 2, int8 1 per value.
TEST(KvBlockPool, CapacityScalesWithBytesPerToken) {
  constexpr std::int64_t kBudget = std::int64_t{1} << 30;
  const auto blocks = [&](KvCacheConfig kv) {
    const std::int64_t bytes = KvCache::block_bytes(30, 3, 64, kv, 16);
    return KvBlockPool(kBudget, 16, bytes).total();
  };
  const std::int64_t f32 = blocks(KvCacheConfig::of(KvFormat::kF32));
  EXPECT_EQ(KvCache::block_bytes(30, 3, 64, KvCacheConfig::of(KvFormat::kF32), 16),
            16 * 3 * 64 * 2 * 4);
  EXPECT_NEAR(blocks(KvCacheConfig::of(KvFormat::kBF16)), 2 * f32, 1);
  EXPECT_NEAR(blocks(KvCacheConfig::dynamic(KvFormat::kINT8)), 4 * f32, 3);
}

}  // namespace
}  // namespace kvq::model::test
