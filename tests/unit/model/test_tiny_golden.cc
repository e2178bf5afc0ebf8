// The engine against transformers on the tiny random model of every architecture row
// (tiny_variants(): tests/data/tiny_llama/{gqa: GQA, default RoPE, separate lm_head;
// llama3_tied: llama3 rope scaling, tied embeddings}, tests/data/tiny_arch/{llama_linear: linear
// rope scaling; qwen2: q/k/v biases, tied, window 5 on layers 1-2 via use_sliding_window; qwen3:
// q/k RMSNorm, head_dim 32 != hidden / heads; mistral: window 24 on every layer, prompts of 13
// and 100 tokens and their decode past it; gemma3; phi3: fused qkv_proj / gate_up_proj split at
// load, window 12 on every layer, prompts of 9 (its decode crosses the window) and 40 tokens}).
//
// Tolerance 1e-5 max abs on logits / states of magnitude ~1-10: transformers (eager, fp32) and
// kvq do the same fp32 math with different summation orders (BLAS blocking, online softmax), a
// few ulps per op; any real mistake (a rope pair, a mask, a norm, a bias) is orders of magnitude
// larger (the window alone moves mistral's and qwen2's logits by 2.0 and 1.8: the generator's
// window_effect_maxdiff). Measured max |Δ| over all variants (printed by each test): prefill
// logits 6.3e-6, decode 4.8e-6, batch 4.1e-6 (all llama3_tied; the new rows ≤ 2.9e-6), keys 2.4e-6,
// values 1.6e-6, layer-0 queries 1.7e-6, through the hooks as in the cache.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "tiny_model.h"

namespace kvq::model::test {
namespace {

constexpr float kTol = 1e-5f;

class TinyGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = tiny_variant_dir(GetParam());
    ASSERT_TRUE(std::filesystem::exists(dir_ / "golden.safetensors")) << dir_;
    model_ = CausalLM::load(dir_);
    golden_ = std::make_unique<io::SafetensorsFile>(
        io::SafetensorsFile::open(dir_ / "golden.safetensors"));
  }
  Tensor g(const std::string& name) const { return golden_->tensor(name).to_f32(); }
  // EXPECT diff <= kTol, remembering the largest diff of each kind for the labelled summary
  // printed at the end (llm.c style: what the tolerance is measured against).
  void check(const std::string& kind, float diff, const std::string& where) {
    EXPECT_LE(diff, kTol) << GetParam() << " " << where;
    worst_[kind] = std::max(worst_[kind], diff);
  }
  std::int64_t prefill_and_decode(const KvCacheConfig& kv);
  void TearDown() override {
    for (const auto& [kind, diff] : worst_) {
      std::printf("  %-12s %-8s max|diff| %.3g\n", GetParam().c_str(), kind.c_str(), diff);
    }
  }

  std::filesystem::path dir_;
  std::unique_ptr<CausalLM> model_;
  std::unique_ptr<io::SafetensorsFile> golden_;
  std::map<std::string, float> worst_;
};

// Prefill and greedy decode of both prompts through a cache made as `kv` says; returns how
// many layers' rings wrapped (their first positions were overwritten) after a prefill.
std::int64_t TinyGolden::prefill_and_decode(const KvCacheConfig& kv) {
  const model::ModelConfig& c = model_->config();
  const std::string how = kv.window_chunk == KvCacheConfig::kDefaultWindowChunk
                              ? ""
                              : " window_chunk " + std::to_string(kv.window_chunk);
  std::int64_t wrapped = 0;
  for (int p = 0; p < 2; ++p) {
    const std::string pre = "prompt" + std::to_string(p) + ".";
    const std::vector<std::int32_t> ids = ids_of(golden_->tensor(pre + "input_ids"));
    const std::vector<std::int32_t> steps = ids_of(golden_->tensor(pre + "decode_tokens"));
    const auto n = static_cast<std::int64_t>(ids.size());
    KvCache cache = model_->make_cache(1, n + static_cast<std::int64_t>(steps.size()), kv);
    const Tensor logits = model_->forward(ids, cache, LogitsMode::kAll);
    check("prefill", max_abs_diff(logits, g(pre + "prefill_logits")), pre + "prefill" + how);

    // Post-RoPE keys and values in the cache after the prefill (what a ring still holds).
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string lp = pre + "layer" + std::to_string(l) + ".";
      const std::int64_t first = cache.first_position(l), held = n - first;
      wrapped += first > 0 ? 1 : 0;
      const std::vector<float> k = cache.keys(l).read(first, held),
                               v = cache.values(l).read(first, held);
      const Tensor gk = g(lp + "key"), gv = g(lp + "value");  // [1, kv_heads, n, head_dim]
      if (gk.numel() != c.num_key_value_heads * n * c.head_dim) {
        ADD_FAILURE() << lp << "key golden has " << gk.numel() << " values";
        return wrapped;
      }
      for (std::int64_t h = 0; h < c.num_key_value_heads; ++h) {
        const std::int64_t at = (h * n + first) * c.head_dim, len = held * c.head_dim;
        const std::int64_t ours = h * len;
        check("key", max_abs_diff(k.data() + ours, gk.f32() + at, len), lp + "key" + how);
        check("value", max_abs_diff(v.data() + ours, gv.f32() + at, len), lp + "value" + how);
      }
    }

    // Greedy decode: our argmax must pick the golden tokens, and logits stay close.
    const Tensor want = g(pre + "decode_logits");
    const auto vocab = c.vocab_size;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const std::int32_t t[1] = {steps[i]};
      const Tensor step = model_->forward(t, cache, LogitsMode::kLast);
      check("decode",
            max_abs_diff(step.f32(), want.f32() + static_cast<std::int64_t>(i) * vocab, vocab),
            pre + "decode step " + std::to_string(i) + how);
      if (i + 1 < steps.size()) {
        const auto argmax = std::max_element(step.f32(), step.f32() + vocab) - step.f32();
        EXPECT_EQ(argmax, steps[i + 1]) << pre << "greedy step " << i << how;
      }
    }
  }
  return wrapped;
}

TEST_P(TinyGolden, PrefillAndDecodeLogits) { prefill_and_decode(KvCacheConfig{}); }

// Sliding-window layers holding rings (kv_cache.h) of window - 1 + window_chunk rows, so short
// that the prompts wrap them and the prefill runs in chunks of 1 or 3 tokens: still
// transformers' logits (chunks that are not multiples of 32 change the summation order only).
// On the rows with windows (tiny_windowed_variants()).
class TinyGoldenWindowed : public TinyGolden {};

TEST_P(TinyGoldenWindowed, SlidingWindowRingsAgainstTransformers) {
  for (const std::int64_t chunk : {1, 3}) {
    KvCacheConfig kv;
    kv.window_chunk = chunk;
    EXPECT_GT(prefill_and_decode(kv), 0) << "no ring wrapped with window_chunk " << chunk;
  }
}

// What the hooks see (attention.h): queries [1, heads, S, d] post-q-norm and post-RoPE; keys
// and values [1, kv_heads, new tokens, d] before the GQA repeat, keys post-k-norm and post-RoPE;
// in decode only the new token, at its position.
TEST_P(TinyGolden, HooksSeeTheGoldenQueryKeyValue) {
  const model::ModelConfig& c = model_->config();
  const std::int64_t layers = c.num_hidden_layers, d = c.head_dim;
  for (int p = 0; p < 2; ++p) {
    const std::string pre = "prompt" + std::to_string(p) + ".";
    const std::vector<std::int32_t> ids = ids_of(golden_->tensor(pre + "input_ids"));
    const auto n = static_cast<std::int64_t>(ids.size());
    std::vector<float> query;
    std::vector<std::vector<float>> keys(static_cast<std::size_t>(layers)), values = keys;
    std::vector<StatesView> last_key(static_cast<std::size_t>(layers));
    std::vector<ScopedHook> hooks;
    hooks.emplace_back(
        model_->attention(0).register_query_hook([&](AttentionModule&, StatesView q) {
          EXPECT_EQ(q.heads, c.num_attention_heads);
          query.assign(q.data, q.data + q.numel());
        }));
    for (std::int64_t l = 0; l < layers; ++l) {
      const auto i = static_cast<std::size_t>(l);
      hooks.emplace_back(
          model_->attention(l).register_key_hook([&, i](AttentionModule&, StatesView k) {
            last_key[i] = k;
            keys[i].assign(k.data, k.data + k.numel());
          }));
      hooks.emplace_back(
          model_->attention(l).register_value_hook([&, i](AttentionModule&, StatesView v) {
            values[i].assign(v.data, v.data + v.numel());
          }));
    }
    KvCache cache = model_->make_cache(1, n + 1);
    model_->forward(ids, cache, LogitsMode::kLast);
    const Tensor want_q = g(pre + "layer0.query");
    ASSERT_EQ(static_cast<std::int64_t>(query.size()), want_q.numel());
    check("query", max_abs_diff(query.data(), want_q.f32(), want_q.numel()), pre + "query");
    for (std::int64_t l = 0; l < layers; ++l) {
      const auto i = static_cast<std::size_t>(l);
      const std::string lp = pre + "layer" + std::to_string(l) + ".";
      const Tensor gk = g(lp + "key"), gv = g(lp + "value");
      EXPECT_EQ(last_key[i].heads, c.num_key_value_heads);  // before the GQA repeat
      EXPECT_EQ(last_key[i].tokens, n);
      ASSERT_EQ(static_cast<std::int64_t>(keys[i].size()), gk.numel());
      ASSERT_EQ(static_cast<std::int64_t>(values[i].size()), gv.numel());
      check("hook key", max_abs_diff(keys[i].data(), gk.f32(), gk.numel()), lp + "key hook");
      check("hook val", max_abs_diff(values[i].data(), gv.f32(), gv.numel()), lp + "value hook");
    }
    // Decode: the key hook sees the one new token at position n, equal to what the cache keeps.
    const std::int32_t next[1] = {ids[0]};
    model_->forward(next, cache, LogitsMode::kLast);
    for (std::int64_t l = 0; l < layers; ++l) {
      const auto i = static_cast<std::size_t>(l);
      EXPECT_EQ(last_key[i].tokens, 1);
      EXPECT_EQ(last_key[i].start_position, n);
      const std::vector<float> cached = cache.keys(l).read(n + 1);
      for (std::int64_t h = 0; h < c.num_key_value_heads; ++h) {
        const float* row = cached.data() + (h * (n + 1) + n) * d;
        EXPECT_EQ(std::vector<float>(row, row + d),
                  std::vector<float>(keys[i].begin() + h * d, keys[i].begin() + (h + 1) * d))
            << pre << "layer " << l << " head " << h;
      }
    }
  }
}

TEST_P(TinyGolden, BatchedForward) {
  const std::vector<std::int32_t> ids = ids_of(golden_->tensor("batch.input_ids"));
  const Tensor logits = model_->forward_batch(ids, 2, LogitsMode::kAll);
  EXPECT_EQ(logits.shape(), (Shape{2, 7, model_->config().vocab_size}));
  check("batch", max_abs_diff(logits, g("batch.logits")), "batch");
}

// transformers' named_modules(), except that a fused Linear (Phi-3's qkv_proj, gate_up_proj) is
// the Linears of its parts in its place (kvq splits it at load: architecture.h, FusedLinear).
TEST_P(TinyGolden, NamedModulesMatchTransformers) {
  std::ifstream in(dir_ / "named_modules.json");
  ASSERT_TRUE(in.good());
  nlohmann::json want = nlohmann::json::array();
  const std::vector<FusedModule> fused = fused_modules(model_->architecture(), model_->config());
  for (const nlohmann::json& entry : nlohmann::json::parse(in)) {
    const auto f = std::find_if(fused.begin(), fused.end(), [&](const FusedModule& m) {
      return m.name == entry[0].get<std::string>();
    });
    if (f == fused.end()) {
      want.push_back(entry);
      continue;
    }
    ASSERT_EQ(entry[1], "Linear") << f->name;
    for (const std::string& part : f->parts) want.push_back({part, entry[1], entry[2]});
  }
  const std::vector<Module*> got = model_->named_modules();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i]->name(), want[i][0].get<std::string>()) << i;
    EXPECT_EQ(got[i]->class_name(), want[i][1].get<std::string>()) << got[i]->name();
    EXPECT_EQ(got[i]->class_hierarchy(), want[i][2].get<std::vector<std::string>>())
        << got[i]->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TinyGolden, ::testing::ValuesIn(tiny_variants()));
INSTANTIATE_TEST_SUITE_P(Windowed, TinyGoldenWindowed,
                         ::testing::ValuesIn(tiny_windowed_variants()));

}  // namespace
}  // namespace kvq::model::test
