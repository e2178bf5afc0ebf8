// The packed KV cache computes what compressed-tensors' fake quantization computes.
//
// Path A (the reference semantics): key / value hooks fake-quantize the new k / v with
// kvq::quant::fake_quantize (the port checked against compressed-tensors by tests/golden/quant;
// for fp8 E5M2, which QuantizationArgs cannot name, the same math written out:
// tests/support/float_grid_reference.h) and the states go to an fp32 cache. Path B: no hooks, the
// cache is packed in the format with the SAME scales / zero points / global scale. Both see
// identical dequantized values (A stores them, B decodes them: quantize_row + dequantize_row ==
// fake_quantize bit for bit), and B's attention kernels decode each row to exactly those fp32
// values inside the dot products and accumulations, in the same order as the fp32 kernels. So the
// logits are bit-identical, prefill and decode; the test demands exact equality (a wrong scale,
// zero point, head mapping or rounding moves logits by ≥ 1e-3, and even a reordered sum shows as a
// nonzero difference). On the tiny model of every architecture row (tiny_variants(); mistral's
// window of 24 and qwen2's of 5 fall inside the 24 + 16 tokens, so windowed decode over packed rows
// is covered).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kvq/model/causal_lm.h"
#include "kvq/quant/fake_quantize.h"
#include "kvq/quant/formats.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/quant_args.h"
#include "support/float_grid_reference.h"
#include "support/test_paths.h"
#include "support/tiny_models.h"

namespace kvq::model {
namespace {

using quant::KvFormat;
using quant::QuantizationArgs;
using quant::QuantizationStrategy;
using quant::QuantizationType;

// The quantization itself must move the logits by at least this much (relative to max|logit|).
constexpr float kMinQuantEffect = 1e-3f;
constexpr int kDecodeSteps = 16;

struct Scheme {
  KvFormat format;
  bool symmetric;
  QuantizationStrategy strategy;  // kTensor, kAttnHead, or kTensorGroup (nvfp4)
  std::string name() const {
    return std::string(quant::kv_format_name(format)) + (symmetric ? "_sym" : "_asym") +
           (strategy == QuantizationStrategy::kTensor     ? "_tensor"
            : strategy == QuantizationStrategy::kAttnHead ? "_head"
                                                          : "_tensor_group");
  }
};

// The scheme's QuantizationArgs; a format without them (fp8 E5M2) gets default args, unused.
QuantizationArgs args_for(const Scheme& s) {
  const auto a = quant::kv_quantization_args(s.format, s.symmetric, s.strategy);
  EXPECT_TRUE(a.has_value() || test::float_grid(s.format) != nullptr) << s.name();
  return a.value_or(QuantizationArgs{});
}

// Every quantized format of the codec table with its k/v schemes: per tensor and per head,
// symmetric and (with zero points) asymmetric; nvfp4 as tensor_group under a global scale.
std::vector<Scheme> schemes() {
  using S = QuantizationStrategy;
  std::vector<Scheme> out;
  for (const auto& t : quant::kv_format_table()) {
    // nl4 / int5 with byte block scales have no QuantizationArgs (kvq's own rule): GroupKvFormats
    // checks its packed cache against its codec on the default model.
    if (!t.needs_scale || (t.global_scale && !t.args.exists)) continue;
    if (t.global_scale) {
      out.push_back({t.format, true, S::kTensorGroup});
      continue;
    }
    for (bool symmetric : {true, false}) {
      if (!symmetric && !t.supports_zero_point) continue;
      for (S strategy : {S::kTensor, S::kAttnHead}) out.push_back({t.format, symmetric, strategy});
    }
  }
  return out;
}

// Per-(layer, k|v) min / max over kv heads, observed on an fp32 run of the whole sequence.
struct Observed {
  std::vector<std::vector<float>> mn, mx;  // [layers * 2][kv_heads]
};

class FakeQuantEquivalence : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = CausalLM::load(kvq::test::tiny_variant_dir(GetParam()));
    const auto& c = model_->config();
    for (int i = 0; i < 24; ++i) prompt_.push_back((i * 37 + 5) % static_cast<int>(c.vocab_size));
    for (int i = 0; i < kDecodeSteps; ++i) {
      steps_.push_back((i * 53 + 11) % static_cast<int>(c.vocab_size));
    }
    observe();
  }

  // min / max of every k / v head over prompt + steps, with an fp32 cache.
  void observe() {
    const auto& c = model_->config();
    const auto L = c.num_hidden_layers, H = c.num_key_value_heads;
    obs_.mn.assign(static_cast<std::size_t>(2 * L),
                   std::vector<float>(static_cast<std::size_t>(H), 0.0f));
    obs_.mx = obs_.mn;
    std::vector<ScopedHook> hooks;
    for (AttentionModule* m : model_->attention_modules()) {
      for (int kv = 0; kv < 2; ++kv) {
        auto hook = [this, kv](AttentionModule& mod, StatesView s) {
          const auto slot = static_cast<std::size_t>(mod.layer_idx() * 2 + kv);
          for (std::int64_t b = 0; b < s.batch; ++b)
            for (std::int64_t h = 0; h < s.heads; ++h)
              for (std::int64_t t = 0; t < s.tokens; ++t)
                for (std::int64_t i = 0; i < s.head_dim; ++i) {
                  const float v = s.row(b, h, t)[i];
                  float& lo = obs_.mn[slot][static_cast<std::size_t>(h)];
                  float& hi = obs_.mx[slot][static_cast<std::size_t>(h)];
                  lo = std::min(lo, v);
                  hi = std::max(hi, v);
                }
        };
        hooks.emplace_back(kv == 0 ? m->register_key_hook(hook) : m->register_value_hook(hook));
      }
    }
    KvCache cache = model_->make_cache(1, 64);
    model_->forward(prompt_, cache);
    for (std::int32_t t : steps_) model_->forward(std::span(&t, 1), cache);
  }

  // Reference qparams (calculate_qparams) per (layer, k|v): scale / zp [1] or [kv_heads]; the
  // observed range is shrunk by 0.8 so the largest values clamp (exercising saturation).
  struct StreamQ {
    std::vector<float> scale, zp, global_scale;
  };
  StreamQ qparams(const Scheme& s, std::size_t slot) const {
    const QuantizationArgs a = args_for(s);
    std::vector<float> mn = obs_.mn[slot], mx = obs_.mx[slot];
    if (s.strategy != QuantizationStrategy::kAttnHead) {
      mn = {*std::min_element(mn.begin(), mn.end())};
      mx = {*std::max_element(mx.begin(), mx.end())};
    }
    for (float& v : mn) v *= 0.8f;
    for (float& v : mx) v *= 0.8f;
    const auto n = static_cast<std::int64_t>(mn.size());
    const Tensor tmn = Tensor::from_f32({n}, mn), tmx = Tensor::from_f32({n}, mx);
    StreamQ q;
    if (quant::kv_format_traits(s.format).global_scale) {
      q.global_scale = quant::generate_gparam(tmn, tmx).to_f32_vector();
      return q;
    }
    if (const test::FloatGrid* g = test::float_grid(s.format)) {  // symmetric on its grid
      for (std::size_t i = 0; i < mn.size(); ++i)
        q.scale.push_back(test::symmetric_scale_on_grid(*g, std::max(-mn[i], mx[i])));
      return q;
    }
    const quant::QParams qp = quant::calculate_qparams(tmn, tmx, a);
    q.scale = qp.scale.to_f32_vector();
    if (!s.symmetric) q.zp = qp.zero_point.to_f32_vector();
    return q;
  }

  // Logits of prefill (all positions) followed by one row per decode step.
  std::vector<float> run(KvCache& cache) {
    std::vector<float> out = model_->forward(prompt_, cache, LogitsMode::kAll).to_f32_vector();
    for (std::int32_t t : steps_) {
      const std::vector<float> l = model_->forward(std::span(&t, 1), cache).to_f32_vector();
      out.insert(out.end(), l.begin(), l.end());
    }
    return out;
  }

  std::vector<float> run_fake_quant(const Scheme& s) {
    const QuantizationArgs a = args_for(s);
    std::vector<ScopedHook> hooks;
    for (AttentionModule* m : model_->attention_modules()) {
      for (int kv = 0; kv < 2; ++kv) {
        const StreamQ q = qparams(s, static_cast<std::size_t>(m->layer_idx() * 2 + kv));
        auto hook = [s, a, q](AttentionModule&, StatesView st) {
          const Shape shape{st.batch, st.heads, st.tokens, st.head_dim};
          const std::vector<float> x(st.data, st.data + st.numel());
          Tensor out;
          if (quant::kv_format_traits(s.format).global_scale) {
            // tensor_group over the last dim: rows [B·H·S, D], one global scale.
            const Tensor x2 = Tensor::from_f32({st.batch * st.heads * st.tokens, st.head_dim}, x);
            const Tensor gs = Tensor::from_f32({1}, q.global_scale);
            const quant::QParams qp = quant::compute_dynamic_scales_and_zp(x2, a, &gs);
            out = quant::fake_quantize(x2, qp.scale, &qp.zero_point, a, &gs);
          } else if (const test::FloatGrid* g = test::float_grid(s.format)) {
            std::vector<float> y(x.size());
            // [batch, heads, tokens, head_dim]: one scale per head or one for all.
            const auto per_head = static_cast<std::size_t>(st.tokens * st.head_dim);
            const auto heads = static_cast<std::size_t>(st.heads);
            for (std::size_t i = 0; i < x.size(); ++i) {
              const std::size_t h = q.scale.size() == 1 ? 0 : (i / per_head) % heads;
              y[i] = test::fake_quantize_on_grid(*g, x[i], q.scale[h], 0.0f);
            }
            out = Tensor::from_f32(shape, y);
          } else {
            const Shape sshape =
                s.strategy == QuantizationStrategy::kAttnHead ? Shape{st.heads, 1, 1} : Shape{1};
            const Tensor xt = Tensor::from_f32(shape, x);
            const Tensor sc = Tensor::from_f32(sshape, q.scale);
            if (q.zp.empty()) {
              out = quant::fake_quantize(xt, sc, nullptr, a);
            } else {
              const Tensor zp = Tensor::from_f32(sshape, q.zp);
              out = quant::fake_quantize(xt, sc, &zp, a);
            }
          }
          const std::vector<float> y = out.to_f32_vector();
          std::copy(y.begin(), y.end(), st.data);
        };
        hooks.emplace_back(kv == 0 ? m->register_key_hook(hook) : m->register_value_hook(hook));
      }
    }
    KvCache cache = model_->make_cache(1, 64);
    return run(cache);
  }

  std::vector<float> run_packed(const Scheme& s) {
    KvCacheConfig spec = KvCacheConfig::calibrated(s.format, {});
    for (std::int64_t l = 0; l < model_->config().num_hidden_layers; ++l) {
      const StreamQ k = qparams(s, static_cast<std::size_t>(2 * l));
      const StreamQ v = qparams(s, static_cast<std::size_t>(2 * l + 1));
      spec.layers.push_back({k.scale, v.scale, k.zp, v.zp, k.global_scale, v.global_scale});
    }
    KvCache cache = model_->make_cache(1, 64, spec);
    EXPECT_EQ(cache.format(), s.format);
    return run(cache);
  }

  std::unique_ptr<CausalLM> model_;
  std::vector<std::int32_t> prompt_, steps_;
  Observed obs_;
};

TEST_P(FakeQuantEquivalence, PackedCacheMatchesFakeQuantizedFp32Cache) {
  const std::vector<float> plain = [&] {
    KvCache cache = model_->make_cache(1, 64);
    return run(cache);
  }();
  const auto vocab = model_->config().vocab_size;
  const auto prefill_n = static_cast<std::size_t>(prompt_.size()) * static_cast<std::size_t>(vocab);
  for (const Scheme& s : schemes()) {
    const std::vector<float> a = run_fake_quant(s);
    const std::vector<float> b = run_packed(s);
    ASSERT_EQ(a.size(), b.size());
    float amax = 0.0f, pre = 0.0f, dec = 0.0f, vs_plain = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_TRUE(std::isfinite(b[i])) << s.name() << " logit " << i;
      amax = std::max(amax, std::fabs(a[i]));
      const float d = std::fabs(a[i] - b[i]);
      (i < prefill_n ? pre : dec) = std::max(i < prefill_n ? pre : dec, d);
      vs_plain = std::max(vs_plain, std::fabs(a[i] - plain[i]));
    }
    std::printf(
        "%-12s %-22s max|logit| %.3f  prefill rel %.2e  decode rel %.2e  (quant effect %.2e)\n",
        GetParam().c_str(), s.name().c_str(), amax, pre / amax, dec / amax, vs_plain / amax);
    EXPECT_EQ(pre, 0.0f) << s.name() << " prefill";
    EXPECT_EQ(dec, 0.0f) << s.name() << " decode";
    // The quantization must actually change something, or the comparison proves nothing.
    EXPECT_GT(vs_plain, kMinQuantEffect * amax) << s.name() << " did not quantize";
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, FakeQuantEquivalence,
                         ::testing::ValuesIn(kvq::test::tiny_variants()));

}  // namespace
}  // namespace kvq::model
