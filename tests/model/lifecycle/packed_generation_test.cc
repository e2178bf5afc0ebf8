// Acceptance: a saved FP8 attn_head KV checkpoint of the default model generates the same 100
// greedy tokens for "Hello my name is" through the packed FP8 KV cache as through the
// fake-quant (hook) path with an fp32 cache.
//
// Both paths quantize with the same scales to the same codes, and the attention kernels see
// exactly the same dequantized values in both (prefill decodes K / V tiles to fp32, decode
// dequantizes rows in registers: kvq/quant/formats.h dot_rows / axpy_rows), with the same
// arithmetic after that. So the logits are BIT-IDENTICAL at every step and free-running greedy
// decoding cannot part. (An earlier kernel folded k_scale into the softmax scale instead; the
// rounding difference flipped FP8 codes sitting on rounding midpoints and the sequences parted
// at a near-tie after ~32 tokens.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <set>

#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/quant/recipe.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

std::int32_t argmax(const Tensor& logits) {
  const float* p = logits.f32();
  return static_cast<std::int32_t>(std::max_element(p, p + logits.numel()) - p);
}

// Greedy decoding that records each step's logits.
std::vector<std::int32_t> greedy(model::CausalLM& m, model::KvCache& cache,
                                 const std::vector<std::int32_t>& prompt, int n,
                                 std::vector<std::vector<float>>& logits) {
  std::vector<std::int32_t> out;
  Tensor step = m.forward(prompt, cache);
  for (int i = 0; i < n; ++i) {
    logits.emplace_back(step.f32(), step.f32() + step.numel());
    out.push_back(argmax(step));
    if (i + 1 < n) step = m.forward(std::span(&out.back(), 1), cache);
  }
  return out;
}

TEST(PackedGeneration, Fp8HeadCheckpointPackedEqualsFakeQuant) {
  KVQ_REQUIRE_DEFAULT_MODEL();
  test::TempDir tmp;
  const auto dir = test::default_model_dir();
  const auto tokenizer = tok::Tokenizer::from_dir(dir);
  {
    // A small calibration (16 GSM8K samples of ≤ 128 tokens) is enough for a real checkpoint.
    auto m = model::CausalLM::load(dir);
    auto lc = apply_quantization_config(
        *m, quant::load_recipe(test::source_dir() / "examples" / "recipes" / "kv_fp8_head.yaml"));
    DatasetOptions o;
    o.num_samples = 16;
    o.max_seq_length = 128;
    calibrate(
        *lc,
        load_calibration_dataset(test::shared_data_dir() / "gsm8k" / "train.jsonl", tokenizer, o),
        {.show_progress = false});
    save_pretrained(*lc, dir, tmp / "ckpt");
  }
  QuantizedModel q = QuantizedModel::load(tmp / "ckpt");
  ASSERT_NE(q.lifecycle, nullptr);
  ASSERT_EQ(q.lifecycle->kv_format(), quant::KvFormat::kFP8E4M3);
  const std::vector<std::int32_t> prompt = tokenizer.encode("Hello my name is");
  constexpr int kTokens = 100;
  const auto cap = static_cast<std::int64_t>(prompt.size()) + kTokens;

  const auto t0 = std::chrono::steady_clock::now();
  model::KvCache f32 = q.model->make_cache(1, cap);
  std::vector<std::vector<float>> fake_logits, packed_logits;
  const auto fake = greedy(*q.model, f32, prompt, kTokens, fake_logits);
  const auto t1 = std::chrono::steady_clock::now();
  model::KvCache packed = q.lifecycle->make_kv_cache(1, cap);
  const auto got = greedy(*q.model, packed, prompt, kTokens, packed_logits);
  const auto t2 = std::chrono::steady_clock::now();
  std::printf("fake-quant %.2f s, packed fp8 %.2f s for %d tokens; packed KV %lld B/token\n",
              std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count(), kTokens,
              static_cast<long long>(packed.bytes_per_token()));
  std::printf("packed: %s\n", tokenizer.decode(got).c_str());
  EXPECT_EQ(got, fake);
  for (int i = 0; i < kTokens; ++i) {
    const auto& a = fake_logits[static_cast<std::size_t>(i)];
    const auto& b = packed_logits[static_cast<std::size_t>(i)];
    ASSERT_EQ(a.size(), b.size());
    std::size_t differing = 0;
    for (std::size_t v = 0; v < a.size(); ++v) differing += a[v] != b[v];
    EXPECT_EQ(differing, 0u) << "step " << i << ": logits differ";
  }
  // Coherent: the continuation is mostly words, not one repeated token.
  std::set<std::int32_t> distinct(got.begin(), got.end());
  EXPECT_GE(distinct.size(), 20u);
  // 30 layers · 2 (k, v) · 3 kv heads · 64 values · 1 byte.
  EXPECT_EQ(packed.bytes_per_token(), 30 * 2 * 3 * 64);
}

}  // namespace
}  // namespace kvq::lifecycle
