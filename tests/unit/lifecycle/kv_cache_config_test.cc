// The lifecycle's packed KV cache (kv_cache_config / make_kv_cache) on the tiny GQA Llama with
// calibrated scales: packed-cache logits equal the k/v fake-quant logits for every packed format
// × granularity, KV bytes per token match the theory, and the mapping's errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/states_tensor.h"
#include "kvq/quant/fake_quantize.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

using quant::KvFormat;

std::unique_ptr<model::CausalLM> tiny() {
  return model::CausalLM::load(test::test_data_dir() / "tiny_llama" / "gqa");
}

quant::QuantizationConfig kv_config(const std::string& type, int bits, const std::string& strategy,
                                    bool symmetric = true) {
  return quant::parse_quantization_config(
      quant::Json::parse(fmt::format(R"({{"config_groups": {{}}, "kv_cache_scheme": {{"num_bits":
        {}, "type": "{}", "strategy": "{}", "symmetric": {}, "observer": "static_minmax"}}}})",
                                     bits, type, strategy, symmetric ? "true" : "false")),
      "test");
}

std::vector<CalibrationSample> samples() {
  std::vector<CalibrationSample> s;
  for (int i = 0; i < 4; ++i) {
    CalibrationSample c;
    c.index = i;
    for (int t = 0; t < 24 + 5 * i; ++t) c.tokens.push_back((t * 37 + i * 11 + 3) % 256);
    s.push_back(c);
  }
  return s;
}

const std::vector<std::int32_t> kPrompt = {5, 77, 140, 9, 201, 33, 64, 18, 250, 7, 99, 120};
const std::vector<std::int32_t> kSteps = {42, 8, 199, 61, 3, 150, 77, 12};

// Prefill logits of every position, then one row per decode step: [(prompt + steps) · vocab].
std::vector<float> run(model::CausalLM& m, model::KvCache& cache) {
  std::vector<float> out = m.forward(kPrompt, cache, model::LogitsMode::kAll).to_f32_vector();
  for (std::int32_t t : kSteps) {
    const auto l = m.forward(std::span(&t, 1), cache).to_f32_vector();
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// max |a - b| / max |b|
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, mag = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, static_cast<double>(std::fabs(a[i] - b[i])));
    mag = std::max(mag, static_cast<double>(std::fabs(b[i])));
  }
  return d / mag;
}

struct Case {
  std::string type;
  int bits;
  std::string strategy;
  bool symmetric;
  KvFormat format;
  double theory_bits;  // bits per stored value incl. in-row block scales
};

class PackedVsFakeQuant : public testing::TestWithParam<Case> {};

// NVFP4 fake quantization per kv head, as the packed cache stores it: tensor_group over the last
// dim (blocks of 16) under the head's global scale 448 / k_scale (compressed-tensors' nvfp4 math,
// kvq/quant/formats.h).
void nvfp4_fake_quantize(model::StatesView st, const std::vector<float>& scale) {
  const quant::QuantizationArgs a = quant::QuantizationArgs::from_json(quant::Json::parse(
      R"({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
          "symmetric": true, "dynamic": "local", "scale_dtype": "torch.float8_e4m3fn"})"));
  for (std::int64_t b = 0; b < st.batch; ++b)
    for (std::int64_t h = 0; h < st.heads; ++h) {
      float* rows = st.row(b, h, 0);  // [tokens, head_dim], contiguous
      const Tensor x = Tensor::view(DType::kF32, {st.tokens, st.head_dim}, rows, nullptr);
      const float s = scale[scale.size() == 1 ? 0 : static_cast<std::size_t>(h)];
      const std::vector<float> g{448.0f / s};
      const Tensor gs = Tensor::from_f32({1}, g);
      const quant::QParams qp = quant::compute_dynamic_scales_and_zp(x, a, &gs);
      const Tensor y = quant::fake_quantize(x, qp.scale, &qp.zero_point, a, &gs);
      std::copy(y.f32(), y.f32() + y.numel(), rows);
    }
}

TEST_P(PackedVsFakeQuant, LogitsMatchAndBytesPerTokenAreTheory) {
  const Case c = GetParam();
  auto m = tiny();
  auto lc = apply_quantization_config(*m, kv_config(c.type, c.bits, c.strategy, c.symmetric));
  calibrate(*lc, samples(), {.show_progress = false});
  ASSERT_EQ(lc->kv_format(), c.format);
  const std::int64_t capacity = 32;

  // Fake quant: the lifecycle's k/v hooks (for fp4: the NVFP4 hook above instead), f32 cache.
  std::vector<model::ScopedHook> nvfp4_hooks;
  if (c.format == KvFormat::kNVFP4) {
    lc->set_quantization_enabled(false);  // its plain-FP4 hooks: the NVFP4 ones stand in
    for (const auto& sp : lc->states()) {
      const auto* s = sp.get();
      nvfp4_hooks.emplace_back(
          lc->register_key_hook(*sp, [s](model::AttentionModule&, model::StatesView v) {
            nvfp4_fake_quantize(v, s->k->scale);
          }));
      nvfp4_hooks.emplace_back(
          lc->register_value_hook(*sp, [s](model::AttentionModule&, model::StatesView v) {
            nvfp4_fake_quantize(v, s->v->scale);
          }));
    }
  }
  model::KvCache f32 = m->make_cache(1, capacity);
  const std::vector<float> fake = run(*m, f32);
  nvfp4_hooks.clear();
  lc->set_quantization_enabled(true);

  // Packed: k/v quantized once, by the cache.
  model::KvCache packed = lc->make_kv_cache(1, capacity);
  EXPECT_TRUE(packed.config().stores_calibrated_quantization());
  EXPECT_EQ(packed.format(), c.format);
  const std::vector<float> got = run(*m, packed);
  // Nothing was switched: an f32 cache afterwards gets the hooks' fake quantization again.
  if (c.format != KvFormat::kNVFP4) {
    model::KvCache f32_again = m->make_cache(1, capacity);
    EXPECT_EQ(rel_diff(run(*m, f32_again), fake), 0.0);
  }

  // Same codes, same dequantized values, and the packed kernels decode each row to exactly those
  // fp32 values inside the dot products and sums, in the fp32 kernels' order: bit-identical.
  const double d = rel_diff(got, fake);
  std::printf("%s %d-bit %s%s: packed vs fake-quant max |Δlogit| / max |logit| = %.3g\n",
              c.type.c_str(), c.bits, c.strategy.c_str(), c.symmetric ? "" : " asym", d);
  EXPECT_EQ(d, 0.0);

  // The unquantized model really differs (the comparison is not vacuous).
  lc->set_quantization_enabled(false);
  model::KvCache plain = m->make_cache(1, capacity);
  EXPECT_GT(rel_diff(run(*m, plain), fake), 1e-5);

  const auto& cfg = m->config();
  const double theory = 2.0 * static_cast<double>(cfg.num_hidden_layers) *
                        static_cast<double>(cfg.num_key_value_heads) * cfg.head_dim *
                        c.theory_bits / 8.0;
  const double bytes = static_cast<double>(packed.bytes_per_token());
  EXPECT_NEAR(bytes / theory, 1.0, 0.02) << bytes << " vs " << theory;
}

INSTANTIATE_TEST_SUITE_P(Formats, PackedVsFakeQuant,
                         testing::Values(Case{"float", 8, "tensor", true, KvFormat::kFP8E4M3, 8},
                                         Case{"float", 8, "attn_head", true, KvFormat::kFP8E4M3, 8},
                                         Case{"int", 8, "tensor", true, KvFormat::kINT8, 8},
                                         Case{"int", 8, "attn_head", true, KvFormat::kINT8, 8},
                                         Case{"int", 8, "attn_head", false, KvFormat::kINT8, 8},
                                         Case{"int", 4, "tensor", true, KvFormat::kINT4, 4},
                                         Case{"int", 4, "attn_head", true, KvFormat::kINT4, 4},
                                         Case{"float", 4, "tensor", true, KvFormat::kNVFP4, 4.5},
                                         Case{"float", 4, "attn_head", true, KvFormat::kNVFP4,
                                              4.5}),
                         [](const testing::TestParamInfo<Case>& p) {
                           const Case& c = p.param;
                           return c.type + std::to_string(c.bits) + "_" + c.strategy +
                                  (c.symmetric ? "" : "_asym");
                         });

TEST(KvCacheConfig, MapsScalesPerLayerAndHead) {
  auto m = tiny();
  auto lc = apply_quantization_config(*m, kv_config("float", 8, "attn_head"));
  EXPECT_THROW(lc->kv_cache_config(), InvalidArgument);  // not calibrated yet
  calibrate(*lc, samples(), {.show_progress = false});
  const model::KvCacheConfig spec = lc->kv_cache_config();
  EXPECT_EQ(spec.scales, model::KvScales::kCalibrated);
  EXPECT_EQ(spec.granularity, model::KvScaleGranularity::kHead);
  EXPECT_EQ(spec.label(), "fp8:head");
  ASSERT_EQ(spec.layers.size(), 3u);
  for (std::size_t l = 0; l < 3; ++l) {
    EXPECT_EQ(spec.layers[l].k_scale, lc->states()[l]->k->scale);
    EXPECT_EQ(spec.layers[l].v_scale, lc->states()[l]->v->scale);
    EXPECT_EQ(spec.layers[l].k_scale.size(), 2u);  // attn_head: one per kv head
  }
  // q fake quantization stays a hook after make_kv_cache; only k/v hooks go quiet.
  auto lc2m = tiny();
  auto lc2 = apply_quantization_config(
      *lc2m, quant::load_recipe(test::test_data_dir() / "lifecycle" / "recipes" /
                                "attn_fp8_head_static_minmax.yaml"));
  calibrate(*lc2, samples(), {.show_progress = false});
  model::KvCache packed = lc2->make_kv_cache(1, 32);
  const auto with_q = run(*lc2m, packed);
  lc2->set_quantization_enabled(false);
  packed.reset();
  const auto without_q = run(*lc2m, packed);
  EXPECT_GT(rel_diff(with_q, without_q), 1e-6);
}

// A checkpoint that quantizes some layers' attention (a config group with targets, or layers in
// different schemes) runs a packed cache with per-layer formats: f32 where nothing is quantized,
// each group's format elsewhere — bit for bit its fake quantization.
TEST(KvCacheConfig, PartialAndMixedQuantizationPackPerLayer) {
  struct Case {
    std::string groups, label;
  };
  const std::string fp8 = R"("input_activations": {"num_bits": 8, "type": "float", "strategy":
    "tensor", "observer": "static_minmax"})";
  const std::string int8 = R"("input_activations": {"num_bits": 8, "type": "int", "strategy":
    "tensor", "symmetric": true, "observer": "static_minmax"})";
  for (const Case& c : std::vector<Case>{
           {fmt::format(R"("g": {{"targets": ["model.layers.1.self_attn"], {}}})", fp8),
            "fp8:tensor+kv0=f32+kv2=f32"},
           {fmt::format(R"("a": {{"targets": ["model.layers.0.self_attn"], {}}},
                           "b": {{"targets": ["model.layers.1.self_attn"], {}}})",
                        fp8, int8),
            "fp8:tensor+kv1=int8:tensor+kv2=f32"},
       }) {
    auto m = tiny();
    auto lc = apply_quantization_config(
        *m,
        quant::parse_quantization_config(
            quant::Json::parse(fmt::format(R"({{"config_groups": {{{}}}}})", c.groups)), "test"));
    calibrate(*lc, samples(), {.show_progress = false});
    const model::KvCacheConfig kv = lc->kv_cache_config();
    EXPECT_EQ(kv.label(), c.label);
    ASSERT_EQ(m->config().num_hidden_layers, 3);
    model::KvCache packed = lc->make_kv_cache(1, 32);
    model::KvCache f32 = m->make_cache(1, 32);
    const std::vector<float> fake = run(*m, f32);
    EXPECT_EQ(rel_diff(run(*m, packed), fake), 0.0) << c.label;
    EXPECT_EQ(packed.values(0).format(), kv.v_format(0));
    EXPECT_EQ(packed.keys(1).format(), kv.k_format(1));
    lc->set_quantization_enabled(false);
    model::KvCache plain = m->make_cache(1, 32);
    EXPECT_GT(rel_diff(run(*m, plain), fake), 1e-5) << c.label;
  }
}

// What a packed cache cannot stand for is refused by name (commands fall back to fake quant).
TEST(KvCacheConfig, MixedGranularitiesNeedFakeQuant) {
  auto m = tiny();
  auto lc = apply_quantization_config(
      *m, quant::parse_quantization_config(quant::Json::parse(R"({"config_groups": {
        "a": {"targets": ["model.layers.0.self_attn"], "input_activations": {"num_bits": 8,
        "type": "float", "strategy": "tensor", "observer": "static_minmax"}},
        "b": {"targets": ["model.layers.1.self_attn"], "input_activations": {"num_bits": 8,
        "type": "float", "strategy": "attn_head", "observer": "static_minmax"}}}})"),
                                           "test"));
  calibrate(*lc, samples(), {.show_progress = false});
  try {
    lc->kv_cache_config();
    FAIL() << "expected NotSupported";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("takes one granularity"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvq::lifecycle
