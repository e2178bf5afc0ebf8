// The sliding-window ring buffer (model/kv_cache.h): a windowed layer's cache keeps
// window - 1 + window_chunk rows instead of the whole context, and a forward feeds it at most
// window_chunk new tokens at a time. With window_chunk a multiple of 32 (the prefill kernel's
// query tile) every logit must be bit for bit the one a full-length cache gives, whatever the
// format, however the tokens arrive (one long prefill, pieces, layer slices, batched, decode
// steps of several sequences) and long after the ring has wrapped; against transformers (other
// chunk sizes) see TinyGolden.SlidingWindowRingsAgainstTransformers.
//
// Run on every tiny architecture row with a window (tiny_windowed_variants(): qwen2: 5 on
// layers 1-2, mistral: 24, gemma3: 6 on layers 0-1, phi3: 12).
#include <numeric>

#include "kvq/quant/formats.h"
#include "tiny_model.h"

namespace kvq::model::test {
namespace {

constexpr std::int64_t kChunk = 32;  // a multiple of the query tile: bit-identical
constexpr std::int64_t kCapacity = 260;

class SlidingWindowRing : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = CausalLM::load(tiny_variant_dir(GetParam()));
    windows_ = model_->attention_windows();
    ASSERT_TRUE(std::any_of(windows_.begin(), windows_.end(), [](std::int64_t w) { return w > 0; }))
        << GetParam() << " has no sliding-window layer";
    for (int i = 0; i < 240; ++i) tokens_.push_back((i * 37 + 11) % 253 + 3);
  }
  const ModelConfig& config() const { return model_->config(); }
  // The model's cache: rings of window - 1 + kChunk rows in the windowed layers.
  KvCache ring(KvCacheConfig kv, std::int64_t batch = 1) const {
    kv.window_chunk = kChunk;
    return model_->make_cache(batch, kCapacity, kv);
  }
  // The same cache at full length in every layer (made without the model's windows).
  KvCache full(KvCacheConfig kv, std::int64_t batch = 1) const {
    return KvCache(config().num_hidden_layers, batch, config().num_key_value_heads,
                   config().head_dim, kCapacity, kv);
  }
  std::span<const std::int32_t> tokens(std::size_t from, std::size_t n) const {
    return std::span(tokens_).subspan(from, n);
  }
  // The formats run on this row (storage_test_formats: qwen3 / gemma3 have group formats).
  std::vector<KvCacheConfig> formats() const { return storage_test_formats(config().head_dim); }

  std::unique_ptr<CausalLM> model_;
  std::vector<std::int64_t> windows_;
  std::vector<std::int32_t> tokens_;
};

TEST_P(SlidingWindowRing, OnlyWindowedLayersKeepRings) {
  const KvCache r = ring(KvCacheConfig::of(KvFormat::kF32));
  std::int64_t rows = 0;
  for (std::int64_t l = 0; l < config().num_hidden_layers; ++l) {
    const std::int64_t w = windows_[static_cast<std::size_t>(l)];
    EXPECT_EQ(r.window(l), w) << l;
    EXPECT_EQ(r.rows(l), w > 0 ? w - 1 + kChunk : kCapacity) << l;
    EXPECT_EQ(r.keys(l).ring(), w > 0) << l;
    rows += r.rows(l);
  }
  const std::int64_t row_bytes = 2 * config().num_key_value_heads * config().head_dim * 4;
  EXPECT_EQ(r.allocated_bytes(), rows * row_bytes);
  KvCacheConfig kv = KvCacheConfig::of(KvFormat::kF32);
  kv.window_chunk = kChunk;
  EXPECT_EQ(model_->cache_bytes(1, kCapacity, kv), r.allocated_bytes());
  EXPECT_LT(r.allocated_bytes(), full(KvCacheConfig::of(KvFormat::kF32)).allocated_bytes());
  // The default chunk (256) leaves this short a cache at full length: no ring needed.
  const KvCache dflt = model_->make_cache(1, kCapacity, KvCacheConfig::of(KvFormat::kF32));
  EXPECT_EQ(dflt.allocated_bytes(), full(KvCacheConfig::of(KvFormat::kF32)).allocated_bytes());
  // window_chunk 0: no rings at all.
  kv.window_chunk = 0;
  EXPECT_EQ(model_->make_cache(1, kCapacity, kv).allocated_bytes(),
            full(KvCacheConfig::of(KvFormat::kF32)).allocated_bytes());
}

// One 200-token prefill (6+ chunks, wrapped rings), then 40 decode steps, every logit compared.
TEST_P(SlidingWindowRing, LongPrefillAndDecodeEqualFullCacheBitForBit) {
  for (const KvCacheConfig& kv : formats()) {
    KvCache r = ring(kv), f = full(kv);
    const Tensor want = model_->forward(tokens(0, 200), f, LogitsMode::kAll);
    const Tensor got = model_->forward(tokens(0, 200), r, LogitsMode::kAll);
    EXPECT_TRUE(bit_identical(got, want)) << kv.label() << " prefill";
    for (std::size_t i = 200; i < 240; ++i) {
      const Tensor a = model_->forward(tokens(i, 1), f), b = model_->forward(tokens(i, 1), r);
      ASSERT_TRUE(bit_identical(b, a)) << kv.label() << " decode at " << i;
    }
    for (std::int64_t l = 0; l < config().num_hidden_layers; ++l) {
      if (r.keys(l).ring()) {
        EXPECT_EQ(r.first_position(l), 240 - r.rows(l)) << l;
        // What the ring still holds decodes to what the full cache holds.
        const std::int64_t first = r.first_position(l), n = 240 - first;
        EXPECT_EQ(r.keys(l).read(first, n), f.keys(l).read(first, n)) << kv.label() << l;
        EXPECT_EQ(r.values(l).read(first, n), f.values(l).read(first, n)) << kv.label() << l;
      }
    }
  }
}

// Prompts that arrive in pieces (not multiples of the chunk), through layer-sliced passes with
// another sequence's decode steps between the slices (kvq serve), and a batch of two sequences
// in one cache.
TEST_P(SlidingWindowRing, PiecesLayerSlicesAndBatchesEqualFullCache) {
  const KvCacheConfig kv = KvCacheConfig::dynamic(KvFormat::kINT8);
  KvCache r = ring(kv), f = full(kv), other = ring(kv);
  model_->forward(tokens(100, 5), other);
  std::size_t at = 0;
  for (const std::size_t n : {37u, 50u, 1u, 63u, 40u}) {
    const Tensor want = model_->forward(tokens(at, n), f, LogitsMode::kAll);
    ForwardPass pass(*model_, tokens(at, n), r);
    while (pass.layers_left() > 0) {
      pass.run_layers(1);
      const std::int32_t t[1] = {9};
      KvCache* o[1] = {&other};
      model_->decode_step(t, o);
    }
    EXPECT_TRUE(bit_identical(pass.finish(LogitsMode::kAll), want)) << "piece at " << at;
    at += n;
  }

  std::vector<std::int32_t> two(tokens_.begin(), tokens_.begin() + 150);
  two.insert(two.end(), tokens_.begin() + 50, tokens_.begin() + 200);  // [2, 150]
  KvCache rb = ring(kv, 2), fb = full(kv, 2);
  EXPECT_TRUE(bit_identical(model_->forward_batch(two, 2, rb, LogitsMode::kAll),
                            model_->forward_batch(two, 2, fb, LogitsMode::kAll)));
  for (int s = 0; s < 5; ++s) {
    const std::vector<std::int32_t> step = {7 + s, 90 - s};
    EXPECT_TRUE(
        bit_identical(model_->forward_batch(step, 2, rb), model_->forward_batch(step, 2, fb)))
        << "batched decode " << s;
  }
}

// decode_step over several ring caches of different lengths equals decoding each alone.
TEST_P(SlidingWindowRing, DecodeStepOfRingCaches) {
  const KvCacheConfig kv = KvCacheConfig::dynamic(KvFormat::kFP8E4M3);
  std::vector<KvCache> rings, fulls;
  for (const std::size_t n : {30u, 90u, 170u}) {
    rings.push_back(ring(kv));
    fulls.push_back(full(kv));
    model_->forward(tokens(0, n), rings.back());
    model_->forward(tokens(0, n), fulls.back());
  }
  std::vector<KvCache*> ptrs;
  for (KvCache& c : rings) ptrs.push_back(&c);
  for (int s = 0; s < 50; ++s) {
    const std::vector<std::int32_t> t = {3 + s, 100 + s, 200 - s};
    const Tensor batched = model_->decode_step(t, ptrs);
    for (std::size_t i = 0; i < fulls.size(); ++i) {
      const Tensor alone = model_->forward(std::span(t).subspan(i, 1), fulls[i]);
      ASSERT_EQ(std::memcmp(batched.f32() + static_cast<std::int64_t>(i) * alone.numel(),
                            alone.f32(), static_cast<std::size_t>(alone.numel()) * sizeof(float)),
                0)
          << "step " << s << " sequence " << i;
    }
  }
}

// A ring rolls back at most its chunk: truncating further would need overwritten rows.
TEST_P(SlidingWindowRing, TruncateOnlyWithinTheChunk) {
  const KvCacheConfig kv = KvCacheConfig::of(KvFormat::kF32);
  KvCache r = ring(kv), f = full(kv);
  model_->forward(tokens(0, 200), r);
  model_->forward(tokens(0, 200), f);
  EXPECT_TRUE(r.can_truncate(200 - kChunk));
  EXPECT_FALSE(r.can_truncate(200 - kChunk - 1));
  EXPECT_THROW(r.truncate(200 - kChunk - 1), InvalidArgument);
  EXPECT_EQ(r.length(), 200);
  EXPECT_TRUE(r.can_truncate(0));
  r.truncate(200 - kChunk);
  f.truncate(200 - kChunk);
  EXPECT_TRUE(bit_identical(model_->forward(tokens(7, 20), r, LogitsMode::kAll),
                            model_->forward(tokens(7, 20), f, LogitsMode::kAll)));
}

// A cache sized for other windows would lose rows the model attends to.
TEST_P(SlidingWindowRing, RefusesACacheSizedForOtherWindows) {
  std::vector<std::int64_t> other = windows_;
  for (std::int64_t& w : other) w = w > 0 ? w - 1 : 3;
  KvCacheConfig kv = KvCacheConfig::of(KvFormat::kF32);
  kv.window_chunk = kChunk;
  KvCache wrong(config().num_hidden_layers, 1, config().num_key_value_heads, config().head_dim,
                kCapacity, kv, other);
  EXPECT_THROW(model_->forward(tokens(0, 4), wrong), InvalidArgument);
  EXPECT_EQ(wrong.length(), 0);
  EXPECT_THROW(KvCache(config().num_hidden_layers, 1, config().num_key_value_heads,
                       config().head_dim, kCapacity, kv, std::vector<std::int64_t>{5}),
               InvalidArgument);  // one window for several layers
  kv.window_chunk = -1;
  EXPECT_THROW(model_->make_cache(1, kCapacity, kv), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Rows, SlidingWindowRing, ::testing::ValuesIn(tiny_windowed_variants()));

TEST(SlidingWindowRingRows, ListNamesEveryWindowedRow) {
  for (const std::string& v : tiny_variants()) {
    const std::vector<std::int64_t> w = CausalLM::load(tiny_variant_dir(v))->attention_windows();
    const bool windowed = std::any_of(w.begin(), w.end(), [](std::int64_t x) { return x > 0; });
    const auto& list = tiny_windowed_variants();
    EXPECT_EQ(windowed, std::find(list.begin(), list.end(), v) != list.end()) << v;
  }
}

}  // namespace
}  // namespace kvq::model::test
