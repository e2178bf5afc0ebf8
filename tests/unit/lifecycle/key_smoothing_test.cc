// Key smoothing (lifecycle/key_smoothing.h) on the tiny GQA Llama (4 heads, 2 kv heads,
// head_dim 16, 3 layers): its parameters are the written formula of statistics gathered here
// independently, later hooks see (k - mu) / s and q * s, the attention is unchanged up to
// rounding (softmax drops q·mu), the packed cache stays bit-identical to fake quantization
// behind it, and recipes / checkpoints handle it as documented.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/lifecycle/key_smoothing.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"

namespace kvq::lifecycle {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<model::CausalLM> tiny() {
  return model::CausalLM::load(test::test_data_dir() / "tiny_llama" / "gqa");
}

std::vector<std::int32_t> prompt() { return {1, 17, 42, 99, 3, 250, 7, 8, 64}; }
std::vector<CalibrationSample> samples() {
  return {{0, prompt()}, {1, {5, 6, 7, 8, 9, 10, 11}}, {2, {200, 2, 41, 41, 9}}};
}

float max_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (std::int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.f32()[i] - b.f32()[i]));
  return m;
}

constexpr const char* kSmoothOnly = R"(
smooth_stage:
  smooth_modifiers:
    KeySmoothingModifier: {smoothing_strength: 0.5, center: true}
)";

// Raw post-RoPE q / k of layer `layer` over the samples, from hooks on the plain model.
struct Raw {
  std::vector<double> k_sum, k_sq, q_sq;  // [kv_heads * head_dim]
  double k_rows = 0, q_rows = 0;          // per kv head / per query head of a group
};
Raw raw_statistics(model::CausalLM& m, std::int64_t layer) {
  auto& attn = m.attention(layer);
  const std::int64_t kvh = attn.num_kv_heads(), d = attn.head_dim();
  const std::int64_t group = attn.num_heads() / kvh;
  Raw r;
  r.k_sum.assign(static_cast<std::size_t>(kvh * d), 0.0);
  r.k_sq = r.q_sq = r.k_sum;
  auto hk =
      model::ScopedHook(attn.register_key_hook([&](model::AttentionModule&, model::StatesView s) {
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t t = 0; t < s.tokens; ++t)
            for (std::int64_t c = 0; c < d; ++c) {
              const double v = s.row(0, h, t)[c];
              r.k_sum[static_cast<std::size_t>(h * d + c)] += v;
              r.k_sq[static_cast<std::size_t>(h * d + c)] += v * v;
            }
        r.k_rows += static_cast<double>(s.tokens);
      }));
  auto hq =
      model::ScopedHook(attn.register_query_hook([&](model::AttentionModule&, model::StatesView s) {
        for (std::int64_t h = 0; h < s.heads; ++h)
          for (std::int64_t t = 0; t < s.tokens; ++t)
            for (std::int64_t c = 0; c < d; ++c) {
              const double v = s.row(0, h, t)[c];
              r.q_sq[static_cast<std::size_t>((h / group) * d + c)] += v * v;
            }
        r.q_rows += static_cast<double>(s.tokens * group);
      }));
  for (const auto& s : samples()) m.forward(s.tokens, model::LogitsMode::kLast);
  return r;
}

TEST(KeySmoothing, ParametersAreTheFormulaOfTheRawStatistics) {
  auto m = tiny();
  for (double strength : {0.5, 0.8}) {
    for (bool center : {true, false}) {
      const Raw raw = raw_statistics(*m, 1);
      quant::KeySmoothingArgs args{strength, center};
      KeySmoothing ks(*m, args);
      EXPECT_FALSE(ks.calibrated());
      ks.calibrate(samples(), false);
      ASSERT_TRUE(ks.calibrated());
      ASSERT_EQ(ks.params().size(), 3u);
      const KeySmoothingParams& p = ks.params()[1];
      EXPECT_EQ(p.module, "model.layers.1.self_attn");
      ASSERT_EQ(p.scale.size(), 2u * 16u);
      for (std::size_t i = 0; i < p.scale.size(); ++i) {
        const double mu = center ? raw.k_sum[i] / raw.k_rows : 0.0;
        const double rk = std::sqrt(raw.k_sq[i] / raw.k_rows - mu * mu);
        const double rq = std::sqrt(raw.q_sq[i] / raw.q_rows);
        const double s = std::pow(rk, strength) / std::pow(rq, 1.0 - strength);
        EXPECT_NEAR(p.scale[i], s, 1e-5 * s) << i;
        EXPECT_NEAR(p.center[i], mu, 1e-6 + 1e-6 * std::fabs(mu)) << i;
      }
    }
  }
}

// What the next hooks (R3, observers, the cache) receive: (k - mu) / s and q * s (layer 0: its
// inputs are the plain model's bit for bit); and the logits are the plain model's up to rounding.
TEST(KeySmoothing, LaterHooksSeeSmoothedStatesAndTheLogitsDoNotChange) {
  auto m = tiny();
  const Tensor plain = m->forward(prompt(), model::LogitsMode::kAll);
  std::vector<float> raw_k, raw_q;
  {
    auto hk = model::ScopedHook(
        m->attention(0).register_key_hook([&](model::AttentionModule&, model::StatesView s) {
          raw_k.assign(s.data, s.data + s.numel());
        }));
    auto hq = model::ScopedHook(
        m->attention(0).register_query_hook([&](model::AttentionModule&, model::StatesView s) {
          raw_q.assign(s.data, s.data + s.numel());
        }));
    m->forward(prompt(), model::LogitsMode::kLast);
  }
  auto lc = apply_quantization_config(*m, quant::parse_recipe(kSmoothOnly, "smooth.yaml"));
  ASSERT_NE(lc->key_smoothing(), nullptr);
  EXPECT_TRUE(lc->states().empty());  // nothing quantized by this recipe
  CalibrationOptions co;
  co.show_progress = false;
  calibrate(*lc, samples(), co);
  ASSERT_TRUE(lc->key_smoothing()->calibrated());
  std::vector<float> seen_k, seen_q;
  auto hk = model::ScopedHook(
      m->attention(0).register_key_hook([&](model::AttentionModule&, model::StatesView s) {
        seen_k.assign(s.data, s.data + s.numel());
      }));
  auto hq = model::ScopedHook(
      m->attention(0).register_query_hook([&](model::AttentionModule&, model::StatesView s) {
        seen_q.assign(s.data, s.data + s.numel());
      }));
  const Tensor smoothed = m->forward(prompt(), model::LogitsMode::kAll);
  const KeySmoothingParams& p = lc->key_smoothing()->params()[0];
  const std::size_t d = 16, tokens = prompt().size();
  ASSERT_EQ(seen_k.size(), raw_k.size());
  bool moved = false;
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t c = 0; c < d; ++c) {
        const std::size_t i = (h * tokens + t) * d + c;
        EXPECT_EQ(seen_k[i], (raw_k[i] - p.center[h * d + c]) / p.scale[h * d + c]) << i;
        moved = moved || seen_k[i] != raw_k[i];
      }
  EXPECT_TRUE(moved);
  for (std::size_t h = 0; h < 4; ++h)  // query head h belongs to kv head h / 2
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t c = 0; c < d; ++c) {
        const std::size_t i = (h * tokens + t) * d + c;
        EXPECT_EQ(seen_q[i], raw_q[i] * p.scale[(h / 2) * d + c]) << i;
      }
  const float diff = max_diff(plain, smoothed);
  std::printf("key smoothing: max |logit difference| %.3g\n", diff);
  EXPECT_LT(diff, 1e-5f);  // softmax drops q·mu; rounding only (measured 1.4e-6)
  lc.reset();              // hooks removed: the plain model again, bit for bit
  hk = model::ScopedHook();
  hq = model::ScopedHook();
  EXPECT_EQ(max_diff(plain, m->forward(prompt(), model::LogitsMode::kAll)), 0.0f);
}

// Behind key smoothing and R2 + R3, a calibrated INT4 kv scheme's packed cache is still
// bit-identical to its fake quantization, and its scales were observed on smoothed keys.
TEST(KeySmoothing, ThePackedCacheStaysExactBehindIt) {
  auto m = tiny();
  const std::string kv = R"(
quant_stage:
  quant_modifiers:
    QuantizationModifier:
      kv_cache_scheme: {num_bits: 4, type: int, strategy: attn_head, symmetric: true,
                        dynamic: false, observer: static_minmax}
)";
  const std::string spin = R"(
spin_stage:
  spin_modifiers:
    SpinQuantModifier: {rotations: [R2, R3]}
)";
  CalibrationOptions co;
  co.show_progress = false;
  std::vector<float> k_scales[2];
  for (int smooth = 0; smooth < 2; ++smooth) {
    auto lc = apply_quantization_config(
        *m, quant::parse_recipe((smooth ? std::string(kSmoothOnly) : "") + spin + kv, "r.yaml"));
    calibrate(*lc, samples(), co);
    EXPECT_EQ(lc->key_smoothing() != nullptr, smooth == 1);
    k_scales[smooth] = lc->states()[1]->k->scale;
    const Tensor fake = m->forward(prompt(), model::LogitsMode::kAll);
    model::KvCache packed = lc->make_kv_cache(1, 16);
    const Tensor via_cache = m->forward(prompt(), packed, model::LogitsMode::kAll);
    EXPECT_EQ(max_diff(fake, via_cache), 0.0f) << "smoothing " << smooth;
  }
  EXPECT_NE(k_scales[0], k_scales[1]);
}

TEST(KeySmoothing, RecipesParseItAndCheckpointsRefuseIt) {
  const quant::QuantizationConfig c = quant::parse_recipe(kSmoothOnly, "smooth.yaml");
  ASSERT_TRUE(c.key_smoothing.has_value());
  EXPECT_EQ(c.key_smoothing->smoothing_strength, 0.5);
  EXPECT_TRUE(c.key_smoothing->center);
  EXPECT_EQ(c.to_json().dump().find("smooth"), std::string::npos);  // not a checkpoint field
  const auto defaults =
      quant::parse_recipe("s_stage: {s_modifiers: {KeySmoothingModifier: {}}}", "d.yaml")
          .key_smoothing;
  ASSERT_TRUE(defaults.has_value());
  EXPECT_EQ(*defaults, quant::KeySmoothingArgs{});
  const auto error = [](const std::string& text) {
    try {
      quant::parse_recipe(text, "bad.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("s_stage: {s_modifiers: {KeySmoothingModifier: {smoothing_strength: 1.5}}}")
                .find("bad.yaml: s_stage.s_modifiers.KeySmoothingModifier: smoothing_strength "
                      "must be in [0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(error("s_stage: {s_modifiers: {KeySmoothingModifier: {alpha: 0.5}}}")
                .find("alpha: Extra inputs are not permitted"),
            std::string::npos);
  EXPECT_NE(error("s_stage: {s_modifiers: {KeySmoothingModifier: {center: 3}}}")
                .find("center: Input should be a valid boolean"),
            std::string::npos);
  EXPECT_NE(error("a_stage: {a_modifiers: {QuantizationModifier: {kv_cache_scheme: {num_bits: 8, "
                  "type: float}}}}\nb_stage: {b_modifiers: {KeySmoothingModifier: {}}}")
                .find("KeySmoothingModifier must come before QuantizationModifier"),
            std::string::npos);

  auto m = tiny();
  auto lc = apply_quantization_config(*m, c);
  calibrate(*lc, samples(), CalibrationOptions{.show_progress = false});
  const fs::path out = fs::temp_directory_path() / "kvq_key_smoothing_ckpt";
  fs::remove_all(out);
  try {
    save_pretrained(*lc, test::test_data_dir() / "tiny_llama" / "gqa", out);
    ADD_FAILURE() << "saved a checkpoint with key smoothing";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("KeySmoothingModifier cannot be saved"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace kvq::lifecycle
