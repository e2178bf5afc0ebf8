// Properties of the forward pass, hooks and cache: prefill == decode, batched == unbatched,
// decode_step == one sequence at a time, hook transparency and rewrites on every architecture row
// (EngineAllArchs); hook semantics, independence of two models and error handling on the tiny GQA
// Llama (4 heads, 2 KV heads, head_dim 16, 3 layers).
#include <cstring>

#include "kvq/core/dtype.h"
#include "kvq/model/model_config.h"
#include "kvq/quant/formats.h"
#include "tiny_model.h"

namespace kvq::model::test {
namespace {

// Prefill vs decode and batched vs unbatched run different kernels (sgemm vs GEMV, tiled vs
// split attention) on the same fp32 math: a few ulps of logits of magnitude ~1-10.
constexpr float kTol = 1e-5f;

const std::vector<std::int32_t> kPrompt = {5, 17, 200, 3, 99, 42, 7, 128, 64, 1, 250, 33};

using test::load_weights;

class Engine : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tiny_dir("gqa");
    model_ = CausalLM::load(dir_);
  }
  std::filesystem::path dir_;
  std::unique_ptr<CausalLM> model_;
};

// More sequences than the batched GEMV takes at once: it runs over them 8 at a time, so every
// row is still bit for bit the one decoding alone gives (sgemm would differ in the last bits).
TEST_F(Engine, DecodeStepOfManySequences) {
  std::vector<KvCache> caches;
  std::vector<KvCache*> ptrs;
  std::vector<std::int32_t> tokens;
  for (int i = 0; i < 11; ++i) {
    caches.push_back(model_->make_cache(1, 16));
    model_->forward(std::span(kPrompt).first(static_cast<std::size_t>(1 + i)), caches.back());
    tokens.push_back(3 * i + 1);
  }
  for (KvCache& c : caches) ptrs.push_back(&c);
  const Tensor batched = model_->decode_step(tokens, ptrs);
  for (int i = 0; i < 11; ++i) {
    KvCache c = model_->make_cache(1, 16);
    model_->forward(std::span(kPrompt).first(static_cast<std::size_t>(1 + i)), c);
    const std::int32_t one[1] = {tokens[static_cast<std::size_t>(i)]};
    const Tensor single = model_->forward(one, c);
    EXPECT_EQ(max_abs_diff(batched.f32() + i * 256, single.f32(), 256), 0.0f) << i;
  }
}

TEST_F(Engine, DecodeStepRejectsBadInputs) {
  KvCache a = model_->make_cache(1, 4), b = model_->make_cache(1, 4),
          two = model_->make_cache(2, 4);
  const std::vector<std::int32_t> t2 = {1, 2}, t1 = {1};
  KvCache* ab[2] = {&a, &b};
  KvCache* aa[2] = {&a, &a};
  KvCache* a_two[2] = {&a, &two};
  EXPECT_THROW(model_->decode_step(t1, ab), InvalidArgument);     // counts differ
  EXPECT_THROW(model_->decode_step(t2, aa), InvalidArgument);     // one cache twice
  EXPECT_THROW(model_->decode_step(t2, a_two), InvalidArgument);  // a batch-2 cache
  EXPECT_THROW(model_->decode_step({}, std::span<KvCache* const>()), InvalidArgument);
  EXPECT_EQ(a.length(), 0);
  EXPECT_EQ(b.length(), 0);
  EXPECT_NO_THROW(model_->decode_step(t2, ab));
  EXPECT_EQ(a.length(), 1);
}

// The properties every architecture row must keep (tiny_variants(): Llama, Llama 3 / linear
// rope, Qwen2 with biases and windowed layers, Qwen3 with q/k norms, Mistral with its window),
// on a 30-token prompt that runs past the windows of qwen2 (5) and mistral (24).
class EngineAllArchs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = CausalLM::load(tiny_variant_dir(GetParam()));
    for (int i = 0; i < 30; ++i) prompt_.push_back((i * 37 + 11) % 253 + 3);
  }
  std::int64_t vocab() const { return model_->config().vocab_size; }
  std::int64_t layers() const { return model_->config().num_hidden_layers; }
  std::unique_ptr<CausalLM> model_;
  std::vector<std::int32_t> prompt_;  // [30]
};

TEST_P(EngineAllArchs, PrefillEqualsTokenByTokenDecode) {
  // LongRoPE takes its factors per forward (by its largest position, as transformers): steps
  // and one prefill agree up to the switch only (the parity test checks the switch itself).
  const model::RopeScaling& rope = model_->config().rope_scaling;
  const std::span<const std::int32_t> prompt = std::span<const std::int32_t>(prompt_).first(
      std::min(prompt_.size(), rope.rope_type == "longrope"
                                   ? static_cast<std::size_t>(rope.original_max_position_embeddings)
                                   : prompt_.size()));
  const auto n = static_cast<std::int64_t>(prompt.size());
  const std::int64_t vocab = this->vocab();
  KvCache a = model_->make_cache(1, 64);
  const Tensor prefill = model_->forward(prompt, a, LogitsMode::kAll);
  KvCache b = model_->make_cache(1, 64);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int32_t t[1] = {prompt[static_cast<std::size_t>(i)]};
    const Tensor step = model_->forward(t, b, LogitsMode::kLast);
    EXPECT_LE(max_abs_diff(step.f32(), prefill.f32() + i * vocab, vocab), kTol) << "position " << i;
  }
  EXPECT_EQ(a.length(), n);
  EXPECT_EQ(b.length(), n);
  // Mixed: prefill 5, then chunks of 4 and the rest (a chunk whose window starts in the past).
  KvCache c = model_->make_cache(1, 64);
  model_->forward(prompt.first(5), c, LogitsMode::kLast);
  model_->forward(prompt.subspan(5, 4), c, LogitsMode::kLast);
  const Tensor tail = model_->forward(prompt.subspan(9), c, LogitsMode::kAll);
  EXPECT_LE(max_abs_diff(tail.f32(), prefill.f32() + 9 * vocab, (n - 9) * vocab), kTol);
}

TEST_P(EngineAllArchs, BatchedEqualsUnbatched) {
  const auto n = static_cast<std::int64_t>(prompt_.size());
  std::vector<std::int32_t> two(prompt_);
  for (std::int32_t t : prompt_) two.push_back((t * 7 + 3) % 256);
  KvCache cache = model_->make_cache(2, 40);
  const Tensor batched = model_->forward_batch(two, 2, cache, LogitsMode::kAll);
  const std::int64_t size = n * vocab();
  for (std::int64_t b = 0; b < 2; ++b) {
    const Tensor single = model_->forward(
        std::span(two).subspan(static_cast<std::size_t>(b * n), prompt_.size()), LogitsMode::kAll);
    EXPECT_LE(max_abs_diff(batched.f32() + b * size, single.f32(), size), kTol) << "sequence " << b;
  }
  // Batched decode continues both sequences.
  const std::int32_t next[2] = {9, 10};
  const Tensor step = model_->forward_batch(next, 2, cache, LogitsMode::kLast);
  EXPECT_EQ(step.shape(), (Shape{2, 1, vocab()}));
  KvCache single_cache = model_->make_cache(1, 40);
  model_->forward(std::span(two).subspan(prompt_.size()), single_cache, LogitsMode::kLast);
  const Tensor one = model_->forward(std::span(next).subspan(1, 1), single_cache);
  EXPECT_LE(max_abs_diff(step.f32() + vocab(), one.f32(), vocab()), kTol);
}

// decode_step: several sequences, each in its own cache at its own length, one token each. Up to
// 8 sequences every row is bit-identical to decoding that sequence alone (batched GEMV); the
// cache format (packed nvfp4 with dynamic scales, bf16) and the query / key hooks, which see each
// sequence at its own position, change nothing.
TEST_P(EngineAllArchs, DecodeStepEqualsDecodingEachSequenceAlone) {
  const std::int64_t vocab = this->vocab(), last = layers() - 1;
  for (KvFormat format : {KvFormat::kF32, KvFormat::kBF16, KvFormat::kNVFP4}) {
    std::vector<std::int64_t> starts;
    ScopedHook hook(model_->attention(last).register_key_hook(
        [&](AttentionModule&, StatesView s) { starts.push_back(s.start_position); }));
    const std::int64_t lengths[] = {30, 3, 7, 1, 26};
    std::vector<KvCache> together, alone;
    for (std::int64_t len : lengths) {
      for (auto* set : {&together, &alone}) {
        set->push_back(model_->make_cache(1, 40, format));
        model_->forward(std::span(prompt_).first(static_cast<std::size_t>(len)), set->back());
      }
    }
    std::vector<KvCache*> ptrs;
    for (KvCache& c : together) ptrs.push_back(&c);
    std::vector<std::int32_t> tokens = {11, 22, 33, 44, 55};
    for (int step = 0; step < 4; ++step) {
      starts.clear();
      const Tensor batched = model_->decode_step(tokens, ptrs);
      ASSERT_EQ(batched.shape(), (Shape{5, vocab}));
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        EXPECT_EQ(starts[i], lengths[i] + step) << "sequence " << i;
        const std::int32_t one[1] = {tokens[i]};
        const Tensor single = model_->forward(one, alone[i]);
        EXPECT_EQ(std::memcmp(batched.f32() + static_cast<std::int64_t>(i) * vocab, single.f32(),
                              static_cast<std::size_t>(vocab) * sizeof(float)),
                  0)
            << quant::kv_format_name(format) << " sequence " << i << " step " << step;
        tokens[i] = (tokens[i] * 5 + step) % 256;
      }
    }
    for (std::size_t i = 0; i < together.size(); ++i)
      EXPECT_EQ(together[i].length(), lengths[i] + 4);
  }
}

// ForwardPass (kvq serve's prefill, a few layers per scheduler step) is forward() bit for bit,
// however its layers are split and whatever runs on other caches between the slices: the logits,
// and the cache it leaves (the next token's logits), in a plain and a packed dynamic format.
TEST_P(EngineAllArchs, LayerByLayerPassEqualsForward) {
  const std::int64_t layers = this->layers();
  for (KvFormat format : {KvFormat::kF32, KvFormat::kNVFP4}) {
    for (std::int64_t slice : {std::int64_t{1}, std::int64_t{2}, layers}) {
      KvCache whole = model_->make_cache(1, 40, format), sliced = model_->make_cache(1, 40, format);
      KvCache other = model_->make_cache(1, 40, format);
      model_->forward(std::span(prompt_).first(3), other);
      std::vector<Tensor> expected, got;
      for (auto [from, count] : {std::pair<std::size_t, std::size_t>{0, 12}, {12, 18}}) {
        const auto chunk = std::span(prompt_).subspan(from, count);
        expected.push_back(model_->forward(chunk, whole, LogitsMode::kAll));
        ForwardPass pass(*model_, chunk, sliced);
        while (pass.layers_left() > 0) {
          pass.run_layers(slice);
          const std::int32_t t[1] = {7};
          KvCache* o[1] = {&other};
          model_->decode_step(t, o);  // another sequence's step between the slices
        }
        got.push_back(pass.finish(LogitsMode::kAll));
      }
      const std::int32_t next[1] = {42};
      expected.push_back(model_->forward(next, whole));
      got.push_back(model_->forward(next, sliced));
      for (std::size_t i = 0; i < got.size(); ++i) {
        EXPECT_TRUE(bit_identical(got[i], expected[i]))
            << quant::kv_format_name(format) << " slices of " << slice << ", output " << i;
      }
      EXPECT_EQ(sliced.length(), whole.length());
    }
  }
}

TEST_P(EngineAllArchs, ForwardPassRefusesMisuse) {
  KvCache cache = model_->make_cache(1, 8);
  const std::vector<std::int32_t> bad = {1, static_cast<std::int32_t>(vocab())};
  EXPECT_THROW(ForwardPass(*model_, bad, cache), InvalidArgument);      // token out of range
  EXPECT_THROW(ForwardPass(*model_, prompt_, cache), InvalidArgument);  // beyond the capacity
  ForwardPass pass(*model_, std::span(prompt_).first(4), cache);
  pass.run_layers(layers() - 1);
  EXPECT_EQ(pass.layers_left(), 1);
  EXPECT_THROW(pass.finish(LogitsMode::kLast), InvalidArgument);  // a layer still to run
  EXPECT_EQ(cache.length(), 0);
  pass.run_layers(5);
  EXPECT_EQ(pass.finish(LogitsMode::kLast).shape(), (Shape{1, vocab()}));
  EXPECT_EQ(cache.length(), 4);
  EXPECT_THROW(pass.run_layers(1), InvalidArgument);  // finished
}

TEST_P(EngineAllArchs, CacheLessForwardTakesTheSameRoute) {
  KvCache cache = model_->make_cache(1, 64);
  const Tensor with_cache = model_->forward(prompt_, cache, LogitsMode::kAll);
  const Tensor without = model_->forward(prompt_, LogitsMode::kAll);
  EXPECT_TRUE(bit_identical(with_cache, without));
  const Tensor last = model_->forward(prompt_, LogitsMode::kLast);
  EXPECT_EQ(last.shape(), (Shape{1, vocab()}));
}

TEST_P(EngineAllArchs, NoOpHooksLeaveLogitsBitIdentical) {
  auto run = [&] {
    std::vector<Tensor> out;
    KvCache cache = model_->make_cache(1, 40);
    out.push_back(model_->forward(prompt_, cache, LogitsMode::kAll));
    for (std::int32_t t : {3, 4, 5}) {
      const std::int32_t one[1] = {t};
      out.push_back(model_->forward(one, cache, LogitsMode::kLast));
    }
    out.push_back(model_->forward(prompt_, LogitsMode::kAll));  // no cache
    return out;
  };
  const std::vector<Tensor> plain = run();
  int calls = 0;
  std::vector<ScopedHook> hooks;
  for (AttentionModule* a : model_->attention_modules()) {
    const AttentionHook noop = [&](AttentionModule&, StatesView) { ++calls; };
    hooks.emplace_back(a->register_query_hook(noop));
    hooks.emplace_back(a->register_key_hook(noop));
    hooks.emplace_back(a->register_value_hook(noop));
  }
  const std::vector<Tensor> hooked = run();
  EXPECT_EQ(calls, layers() * 3 * 5);  // layers × (q, k, v) × forwards
  ASSERT_EQ(plain.size(), hooked.size());
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_TRUE(bit_identical(plain[i], hooked[i])) << i;
}

// A key hook's rewrite is what the cache stores and attention reads, on every row.
TEST_P(EngineAllArchs, KeyHookRewritesWhatTheCacheStores) {
  const std::int64_t last = layers() - 1, n = static_cast<std::int64_t>(prompt_.size());
  KvCache plain = model_->make_cache(1, 40);
  const Tensor before = model_->forward(prompt_, plain, LogitsMode::kLast);
  ScopedHook h(model_->attention(last).register_key_hook([](AttentionModule&, StatesView s) {
    for (std::int64_t i = 0; i < s.numel(); ++i) s.data[i] *= 2.0f;  // exact in fp32
  }));
  KvCache hooked = model_->make_cache(1, 40);
  const Tensor after = model_->forward(prompt_, hooked, LogitsMode::kLast);
  const std::vector<float> a = plain.keys(last).read(n), b = hooked.keys(last).read(n);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(b[i], 2.0f * a[i]) << i;
  EXPECT_EQ(plain.values(last).read(n), hooked.values(last).read(n));
  EXPECT_EQ(plain.keys(0).read(n), hooked.keys(0).read(n));  // earlier layer untouched
  EXPECT_GT(max_abs_diff(before, after), 1e-3f);             // attention read the rewrite
}

INSTANTIATE_TEST_SUITE_P(Rows, EngineAllArchs, ::testing::ValuesIn(tiny_variants()));

TEST_F(Engine, HooksSeeDocumentedShapesPositionsAndOrder) {
  struct Seen {
    std::string what;
    std::int64_t layer, batch, heads, tokens, head_dim, start;
  };
  std::vector<Seen> seen;
  auto recorder = [&](const std::string& what) {
    return [&seen, what](AttentionModule& m, StatesView s) {
      seen.push_back(
          {what, m.layer_idx(), s.batch, s.heads, s.tokens, s.head_dim, s.start_position});
    };
  };
  AttentionModule& a1 = model_->attention(1);
  // Registration order: value before key; query registered first but fires after the cache
  // update (reference order: kv_cache pre-hooks, then the attention impl's pre-hooks).
  ScopedHook hq(a1.register_query_hook(recorder("q")));
  ScopedHook hv(a1.register_value_hook(recorder("v")));
  ScopedHook hk(a1.register_key_hook(recorder("k")));
  KvCache cache = model_->make_cache(2, 16);
  std::vector<std::int32_t> two(kPrompt.begin(), kPrompt.begin() + 5);
  two.insert(two.end(), kPrompt.begin() + 5, kPrompt.begin() + 10);
  model_->forward_batch(two, 2, cache, LogitsMode::kLast);
  const std::int32_t next[2] = {1, 2};
  model_->forward_batch(next, 2, cache, LogitsMode::kLast);
  ASSERT_EQ(seen.size(), 6u);
  const std::string order = seen[0].what + seen[1].what + seen[2].what;
  EXPECT_EQ(order, "vkq");
  for (std::size_t i = 0; i < seen.size(); ++i) {
    const Seen& s = seen[i];
    const bool prefill = i < 3;
    EXPECT_EQ(s.layer, 1);
    EXPECT_EQ(s.batch, 2);
    EXPECT_EQ(s.heads, s.what == "q" ? 4 : 2) << s.what;  // kv heads: before GQA repetition
    EXPECT_EQ(s.tokens, prefill ? 5 : 1);
    EXPECT_EQ(s.head_dim, 16);
    EXPECT_EQ(s.start, prefill ? 0 : 5);
  }
}

// A key hook zeroing KV head 1 of layer 0 must equal a model whose k_proj rows for that head
// are zero: k = 0 before RoPE stays 0 after it. Same kernels, same shapes, the other rows of the
// projection are computed identically, so the logits are bit-identical.
TEST_F(Engine, ZeroingOneKvHeadMatchesZeroedProjectionRows) {
  ScopedHook h(model_->attention(0).register_key_hook([](AttentionModule&, StatesView s) {
    for (std::int64_t b = 0; b < s.batch; ++b) {
      for (std::int64_t t = 0; t < s.tokens; ++t) std::fill_n(s.row(b, 1, t), s.head_dim, 0.0f);
    }
  }));
  KvCache c1 = model_->make_cache(1, 16);
  const Tensor hooked = model_->forward(kPrompt, c1, LogitsMode::kAll);

  std::map<std::string, Tensor> w = load_weights(dir_);
  Tensor k = w.at("model.layers.0.self_attn.k_proj.weight").to_f32().clone();  // [32, 64]
  std::fill_n(k.f32() + 16 * 64, 16 * 64, 0.0f);
  w["model.layers.0.self_attn.k_proj.weight"] = k;
  auto zeroed = CausalLM::from_weights(model_->config(), w);
  KvCache c2 = zeroed->make_cache(1, 16);
  const Tensor want = zeroed->forward(kPrompt, c2, LogitsMode::kAll);
  EXPECT_TRUE(bit_identical(hooked, want));
  // And it really changes the output compared with no hook.
  h.handle().remove();
  const Tensor unhooked = model_->forward(kPrompt, LogitsMode::kAll);
  EXPECT_GT(max_abs_diff(unhooked, hooked), 1e-3f);
}

TEST_F(Engine, HookRemoval) {
  int calls = 0;
  AttentionModule& a = model_->attention(0);
  HookHandle h = a.register_value_hook([&](AttentionModule&, StatesView) { ++calls; });
  EXPECT_TRUE(h.active());
  model_->forward(kPrompt, LogitsMode::kLast);
  EXPECT_EQ(calls, 1);
  h.remove();
  h.remove();  // idempotent
  EXPECT_FALSE(h.active());
  model_->forward(kPrompt, LogitsMode::kLast);
  EXPECT_EQ(calls, 1);
  {
    ScopedHook scoped(a.register_query_hook([&](AttentionModule&, StatesView) { ++calls; }));
    model_->forward(kPrompt, LogitsMode::kLast);
    EXPECT_EQ(calls, 2);
  }
  model_->forward(kPrompt, LogitsMode::kLast);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(a.num_hooks(), 0u);
  EXPECT_THROW(a.register_key_hook(AttentionHook{}), InvalidArgument);
  // A handle outliving its model is harmless.
  HookHandle late;
  {
    auto other = CausalLM::load(dir_);
    late = other->attention(0).register_key_hook([](AttentionModule&, StatesView) {});
  }
  EXPECT_FALSE(late.active());
  late.remove();
}

TEST_F(Engine, TwoModelsAreIndependent) {
  auto other = CausalLM::load(dir_);
  const Tensor before = other->forward(kPrompt, LogitsMode::kAll);
  ScopedHook h(model_->attention(1).register_value_hook([](AttentionModule&, StatesView s) {
    for (std::int64_t i = 0; i < s.numel(); ++i) s.data[i] = 0.0f;
  }));
  const Tensor after = other->forward(kPrompt, LogitsMode::kAll);
  EXPECT_TRUE(bit_identical(before, after));
  EXPECT_EQ(other->attention(1).num_hooks(), 0u);
  EXPECT_GT(max_abs_diff(model_->forward(kPrompt, LogitsMode::kAll), before), 1e-3f);
}

TEST_F(Engine, Bf16AndF16CachesStoreRoundedStates) {
  KvCache f32 = model_->make_cache(1, 16);
  const Tensor ref = model_->forward(kPrompt, f32, LogitsMode::kAll);
  for (KvFormat storage : {KvFormat::kBF16, KvFormat::kF16}) {
    KvCache low = model_->make_cache(1, 16, storage);
    EXPECT_EQ(low.bytes_per_token(), f32.bytes_per_token() / 2);
    const Tensor logits = model_->forward(kPrompt, low, LogitsMode::kAll);
    // Layer 0 sees identical inputs, so its stored keys are exactly the rounded fp32 keys.
    const std::vector<float> a = f32.keys(0).read(12), b = low.keys(0).read(12);
    for (std::size_t i = 0; i < a.size(); ++i) {
      const float want = storage == KvFormat::kBF16 ? round_to_bf16(a[i]) : round_to_fp16(a[i]);
      ASSERT_EQ(b[i], want) << quant::kv_format_name(storage) << " " << i;
    }
    // 8 (bf16) / 11 (fp16) mantissa bits on K and V perturb logits by ~1e-2 at most here.
    EXPECT_LE(max_abs_diff(ref, logits), 5e-2f) << quant::kv_format_name(storage);
    EXPECT_GT(max_abs_diff(ref, logits), 0.0f);
  }
  EXPECT_EQ(f32.bytes_per_token(), 3 * 2 * 2 * 16 * 4);  // layers × (K, V) × kv_heads × D × 4
}

TEST_F(Engine, BadInputsThrow) {
  KvCache cache = model_->make_cache(1, 4);
  const std::vector<std::int32_t> bad = {1, 256};
  EXPECT_THROW(model_->forward(bad, cache), InvalidArgument);
  const std::vector<std::int32_t> neg = {-1};
  EXPECT_THROW(model_->forward(neg, cache), InvalidArgument);
  EXPECT_THROW(model_->forward(std::span<const std::int32_t>(), cache), InvalidArgument);
  EXPECT_THROW(model_->forward(kPrompt, cache), InvalidArgument);  // 12 > capacity 4
  EXPECT_EQ(cache.length(), 0);
  KvCache two = model_->make_cache(2, 16);
  EXPECT_THROW(model_->forward(kPrompt, two), InvalidArgument);  // batch mismatch
  EXPECT_THROW(model_->forward_batch(std::span(kPrompt).first(5), 2, LogitsMode::kAll),
               InvalidArgument);
  EXPECT_THROW(model_->make_cache(1, 0), InvalidArgument);
  EXPECT_THROW(model_->attention(3), InvalidArgument);
}

TEST_F(Engine, FromWeightsValidatesAndConvertsDtypes) {
  std::map<std::string, Tensor> w = load_weights(dir_);
  const model::ModelConfig& c = model_->config();
  auto missing = w;
  missing.erase("model.layers.2.mlp.up_proj.weight");
  try {
    CausalLM::from_weights(c, missing, "tiny");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.2.mlp.up_proj.weight"), std::string::npos);
  }
  auto wrong = w;
  wrong["model.norm.weight"] = Tensor(DType::kF32, {63});
  EXPECT_THROW(CausalLM::from_weights(c, wrong, "tiny"), ConfigError);
  // bf16 weights are converted to owned fp32: equal to an fp32 model of the rounded weights.
  std::map<std::string, Tensor> bf16, rounded;
  for (const auto& [name, t] : w) {
    const std::vector<float> v = t.to_f32_vector();
    Tensor b(DType::kBF16, t.shape()), r(DType::kF32, t.shape());
    auto* bp = static_cast<std::uint16_t*>(b.mutable_data());
    for (std::size_t i = 0; i < v.size(); ++i) {
      bp[i] = f32_to_bf16(v[i]);
      r.f32()[i] = round_to_bf16(v[i]);
    }
    bf16.emplace(name, b);
    rounded.emplace(name, r);
  }
  const Tensor a = CausalLM::from_weights(c, bf16)->forward(kPrompt, LogitsMode::kAll);
  const Tensor b = CausalLM::from_weights(c, rounded)->forward(kPrompt, LogitsMode::kAll);
  EXPECT_TRUE(bit_identical(a, b));
  model::ModelConfig bad = c;
  bad.num_key_value_heads = 3;
  EXPECT_THROW(CausalLM::from_weights(bad, w), ConfigError);
}

TEST_F(Engine, ModuleTreeLookups) {
  Module* k = model_->find_module("model.layers.1.self_attn.k_proj");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->class_name(), "Linear");
  EXPECT_TRUE(k->is_instance_of("Module"));
  EXPECT_EQ(k->weight().shape(), (Shape{32, 64}));
  EXPECT_EQ(k->parent(), &model_->attention(1));
  EXPECT_EQ(k->local_name(), "k_proj");
  EXPECT_TRUE(model_->attention(1).is_instance_of("LlamaAttention"));
  EXPECT_EQ(model_->find_module("lm_head")->weight().shape(), (Shape{256, 64}));
  EXPECT_EQ(model_->find_module("nope"), nullptr);
}

}  // namespace
}  // namespace kvq::model::test
