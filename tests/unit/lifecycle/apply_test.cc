// apply_quantization_config on the tiny GQA Llama (4 heads, 2 kv heads, head_dim 16, 3 layers):
// scale shapes, zero points where compressed-tensors 0.19.0 registers them, NaN poisoning,
// hook transparency, config round trip, independence of two models, partial quantization,
// asymmetric INT8 KV and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kvq/core/error.h"
#include "kvq/core/float8.h"
#include "kvq/io/safetensors.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/model/causal_lm.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/recipe.h"
#include "support/test_paths.h"
#include "support/tiny_models.h"

namespace kvq::lifecycle {
namespace {

using quant::Json;
using quant::QuantizationConfig;

std::unique_ptr<model::CausalLM> tiny() {
  return model::CausalLM::load(test::test_data_dir() / "tiny_llama" / "gqa");
}

QuantizationConfig config(const std::string& json) {
  return quant::parse_quantization_config(Json::parse(json), "test");
}

const char* kKvTensor = R"({"config_groups": {}, "kv_cache_scheme":
  {"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": true, "dynamic": false}})";
const char* kAttnHead = R"({"config_groups": {"group_0": {"targets": ["LlamaAttention"],
  "input_activations": {"num_bits": 8, "type": "float", "strategy": "attn_head", "symmetric": true,
  "dynamic": false}}}})";

std::vector<std::int32_t> prompt() { return {1, 17, 42, 99, 3, 250, 7, 8, 64}; }

void set_all_scales(QuantizationLifecycle& lc, float v) {
  for (const auto& s : lc.states())
    for (char b : {'q', 'k', 'v'})
      if (auto& p = s->param(b)) std::fill(p->scale.begin(), p->scale.end(), v);
}

TEST(Apply, KvOnlyTensorShapes) {
  auto m = tiny();
  auto lc = apply_quantization_config(*m, config(kKvTensor));
  ASSERT_EQ(lc->states().size(), 3u);
  for (const auto& s : lc->states()) {
    EXPECT_TRUE(s->has_kv_cache);
    EXPECT_FALSE(s->has_impl);
    EXPECT_FALSE(s->q.has_value());
    ASSERT_TRUE(s->k && s->v);
    EXPECT_EQ(s->k->shape, (Shape{1}));
    EXPECT_FALSE(s->k->zero_point.has_value());  // kv path: force_zero_point=False, symmetric
    EXPECT_TRUE(std::isnan(s->k->scale[0]));     // poisoned until calibrated
    EXPECT_EQ(s->k->scale_dtype, DType::kF32);
  }
  EXPECT_EQ(lc->states()[1]->name, "model.layers.1.self_attn");
}

TEST(Apply, AttentionGroupHeadShapesAndZeroPoints) {
  auto m = tiny();
  auto lc = apply_quantization_config(*m, config(kAttnHead));
  ASSERT_EQ(lc->states().size(), 3u);
  for (const auto& s : lc->states()) {
    EXPECT_TRUE(s->has_impl && s->has_kv_cache);
    EXPECT_EQ(s->q->shape, (Shape{4, 1, 1}));
    EXPECT_EQ(s->k->shape, (Shape{2, 1, 1}));
    EXPECT_EQ(s->v->shape, (Shape{2, 1, 1}));
    // status initialized < compressed → force_zero_point: q/k/v zero points, fp8 dtype.
    ASSERT_TRUE(s->q->zero_point && s->k->zero_point && s->v->zero_point);
    EXPECT_EQ(s->k->zp_dtype, DType::kF8E4M3);
  }
}

TEST(Apply, NanScaleFailsNamingModule) {
  auto m = tiny();
  auto lc = apply_quantization_config(*m, config(kKvTensor));
  try {
    m->forward(prompt());
    FAIL() << "expected an error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.k_scale"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(lc->check_scales(), InvalidArgument);
}

TEST(Apply, HookTransparencyWithQuantizationDisabledAndAfterRemoval) {
  auto m = tiny();
  const Tensor ref = m->forward(prompt());
  {
    auto lc = apply_quantization_config(*m, config(kAttnHead));
    lc->set_quantization_enabled(false);  // hooks installed, nothing quantized
    const Tensor got = m->forward(prompt());
    ASSERT_EQ(got.numel(), ref.numel());
    for (std::int64_t i = 0; i < ref.numel(); ++i) ASSERT_EQ(got.f32()[i], ref.f32()[i]) << i;
  }
  // The lifecycle is gone: its hooks are removed, logits bit-identical again.
  const Tensor after = m->forward(prompt());
  for (std::int64_t i = 0; i < ref.numel(); ++i) ASSERT_EQ(after.f32()[i], ref.f32()[i]) << i;
}

TEST(Apply, FakeQuantChangesLogitsAndQdqIsExactOnGrid) {
  auto m = tiny();
  const Tensor ref = m->forward(prompt());
  auto lc = apply_quantization_config(*m, config(kAttnHead));
  set_all_scales(*lc, 0.01f);
  const Tensor got = m->forward(prompt());
  double diff = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i)
    diff = std::max(diff, double(std::fabs(got.f32()[i] - ref.f32()[i])));
  EXPECT_GT(diff, 0.0);
  EXPECT_LT(diff, 1.0);  // FP8 with a sane scale perturbs, does not destroy
  // The k states the key hook sees after quantization lie on the scaled E4M3 grid.
  auto* s = lc->states()[0].get();
  std::vector<float> seen;
  model::ScopedHook probe(
      s->module->register_key_hook([&](model::AttentionModule&, model::StatesView v) {
        seen.assign(v.data, v.data + v.numel());
      }));
  m->forward(prompt());
  ASSERT_FALSE(seen.empty());
  for (float x : seen) EXPECT_EQ(round_to_e4m3(x / 0.01f) * 0.01f, x);
}

TEST(Apply, ConfigRoundTrip) {
  for (const char* text : {kKvTensor, kAttnHead}) {
    auto m = tiny();
    const QuantizationConfig c = config(text);
    auto lc = apply_quantization_config(*m, c);
    auto back = lc->config_from_model();
    ASSERT_TRUE(back.has_value());
    if (c.config_groups.empty()) {
      EXPECT_TRUE(back->config_groups.empty());
      EXPECT_EQ(back->kv_cache_scheme, c.kv_cache_scheme);
    } else {
      ASSERT_EQ(back->config_groups.size(), 1u);
      EXPECT_EQ(back->config_groups[0].second, c.config_groups[0].second);
      // Attention quantization implies kv quantization (spec §1.5 consequence (a)).
      EXPECT_EQ(back->kv_cache_scheme, c.config_groups[0].second.input_activations);
    }
    EXPECT_EQ(back->ignore, std::vector<std::string>{});
    EXPECT_EQ(back->format, "dense");
  }
}

TEST(Apply, TwoModelsIndependent) {
  auto a = tiny(), b = tiny();
  const Tensor ref = b->forward(prompt());
  auto la = apply_quantization_config(*a, config(kKvTensor));
  auto lb = apply_quantization_config(*b, config(kAttnHead));
  set_all_scales(*la, 0.05f);
  lb->set_quantization_enabled(false);
  const Tensor got_b = b->forward(prompt());  // b unaffected by a's scheme or scales
  for (std::int64_t i = 0; i < ref.numel(); ++i) ASSERT_EQ(got_b.f32()[i], ref.f32()[i]);
  EXPECT_FALSE(la->states()[0]->q.has_value());
  EXPECT_TRUE(lb->states()[0]->q.has_value());
  la.reset();  // destroying a's lifecycle leaves b's hooks in place
  EXPECT_EQ(lb->states()[0]->module->num_hooks(), 3u);
}

TEST(Apply, OnlySomeLayers) {
  auto m = tiny();
  auto lc = apply_quantization_config(*m, config(R"({"config_groups": {"g": {"targets":
    ["re:model\\.layers\\.[02]\\.self_attn$"], "input_activations": {"num_bits": 8, "type": "float",
    "strategy": "tensor"}}}})"));
  ASSERT_EQ(lc->states().size(), 2u);
  EXPECT_EQ(lc->states()[0]->name, "model.layers.0.self_attn");
  EXPECT_EQ(lc->states()[1]->name, "model.layers.2.self_attn");
  EXPECT_EQ(lc->state("model.layers.1.self_attn"), nullptr);
  auto back = lc->config_from_model();
  EXPECT_EQ(back->ignore, std::vector<std::string>{"model.layers.1.self_attn"});
  set_all_scales(*lc, 0.02f);
  EXPECT_NO_THROW(m->forward(prompt()));  // unquantized layer 1 runs plain
}

TEST(Apply, IgnoreList) {
  auto m = tiny();
  auto c = config(kAttnHead);
  c.ignore = std::vector<std::string>{"model.layers.2.self_attn"};
  auto lc = apply_quantization_config(*m, c);
  EXPECT_EQ(lc->states().size(), 2u);
}

// Phi-3 (fused qkv_proj / gate_up_proj in its checkpoint, split at load): attention targets
// written for transformers select its attention modules as there; a target that names the fused
// Linear, which kvq's tree has only as q/k/v_proj, is refused naming it and the parts.
TEST(Apply, Phi3AttentionTargetsWorkAndFusedLinearTargetsAreRefusedByName) {
  auto m = model::CausalLM::load(test::tiny_variant_dir("phi3"));
  for (const char* target : {"Phi3Attention", "re:.*self_attn$"}) {
    std::string json = kAttnHead;
    json.replace(json.find("LlamaAttention"), 14, target);
    EXPECT_EQ(apply_quantization_config(*m, config(json))->states().size(), 2u) << target;
  }
  const auto error_of = [&](const std::string& target) -> std::string {
    std::string json = kAttnHead;
    json.replace(json.find("LlamaAttention"), 14, target);
    try {
      apply_quantization_config(*m, config(json));
    } catch (const NotSupported& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of("re:.*qkv_proj$"),
            "quantization config: target 're:.*qkv_proj$' selects Phi3ForCausalLM's fused Linear "
            "model.layers.0.self_attn.qkv_proj (as transformers names it), which kvq splits at "
            "load into "
            "model.layers.0.self_attn.q_proj, model.layers.0.self_attn.k_proj, "
            "model.layers.0.self_attn.v_proj (their rows of the checkpoint's "
            "model.layers.0.self_attn.qkv_proj.weight); target those by names that do not also "
            "match the fused one (re:.*self_attn\\.v_proj$, not re:.*v_proj$), or the attention "
            "module (Phi3Attention / re:.*self_attn$) for attention and KV-cache quantization");
  EXPECT_NE(error_of("model.layers.1.mlp.gate_up_proj")
                .find("fused Linear "
                      "model.layers.1.mlp.gate_up_proj"),
            std::string::npos);
  // Matching the parts too: the fused module's rows, split (here a no-op Linear group).
  const auto lc = apply_quantization_config(*m, config(R"({"config_groups": {
      "group_0": {"targets": ["re:.*self_attn$"], "input_activations": {"num_bits": 8,
        "type": "float", "strategy": "attn_head", "symmetric": true, "dynamic": false}},
      "group_1": {"targets": ["re:.*proj"]}}})"));
  EXPECT_EQ(lc->states().size(), 2u);
}

TEST(Apply, AsymmetricInt8KvWorksAndIsFlagged) {
  auto m = tiny();
  auto lc = apply_quantization_config(*m, config(R"({"config_groups": {}, "kv_cache_scheme":
    {"num_bits": 8, "type": "int", "strategy": "attn_head", "symmetric": false}})"));
  auto* s = lc->states()[0].get();
  ASSERT_TRUE(s->k->zero_point.has_value());  // asymmetric: zero points always registered
  EXPECT_EQ(s->k->zp_dtype, DType::kI8);
  EXPECT_FALSE(lc->export_warnings().empty());
  for (const auto& st : lc->states())
    for (char b : {'k', 'v'}) {
      auto& p = *st->param(b);
      const quant::QParams qp = quant::calculate_qparams(
          Tensor::from_f32({2, 1, 1}, std::vector<float>(2, -1.0f)),
          Tensor::from_f32({2, 1, 1}, std::vector<float>(2, 3.0f)), st->args());
      p.scale = qp.scale.to_f32_vector();
      *p.zero_point = qp.zero_point.to_f32_vector();
    }
  // (3 - -1) / 255 and zp = round(-128 + 1/scale) = round(-64.25) = -64.
  EXPECT_FLOAT_EQ(s->k->scale[0], 4.0f / 255.0f);
  EXPECT_EQ((*s->k->zero_point)[0], -64.0f);
  const Tensor out = m->forward(prompt());
  for (std::int64_t i = 0; i < out.numel(); ++i) ASSERT_TRUE(std::isfinite(out.f32()[i]));
}

TEST(Apply, Errors) {
  auto m = tiny();
  // A target that matches nothing.
  EXPECT_THROW(apply_quantization_config(*m, config(R"({"config_groups": {"g": {"targets":
    ["NoSuchAttention"], "input_activations": {"num_bits": 8, "type": "float"}}}})")),
               ConfigError);
  // Only broad (non-narrow) matches: nothing quantized.
  EXPECT_THROW(apply_quantization_config(*m, config(R"({"config_groups": {"g": {"targets":
    ["LlamaDecoderLayer"], "input_activations": {"num_bits": 8, "type": "float"}}}})")),
               ConfigError);
  // Linear targets are not kvq's business (yet).
  try {
    apply_quantization_config(*m, config(R"({"config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float"}}}})"));
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "not supported yet: weight/activation quantization of Linear modules (targets Linear)"),
        std::string::npos)
        << e.what();
  }
  // Reference validation of attention schemes.
  try {
    apply_quantization_config(*m, config(R"({"config_groups": {"g": {"targets": ["LlamaAttention"],
      "weights": {"num_bits": 8, "type": "float"}, "input_activations": {"num_bits": 8, "type": "float"}}}})"));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Cannot apply weight quantization to attention"),
              std::string::npos);
  }
  EXPECT_THROW(apply_quantization_config(*m, config(R"({"config_groups": {"g": {"targets":
    ["LlamaAttention"], "output_activations": {"num_bits": 8, "type": "float"}}}})")),
               ConfigError);
  EXPECT_THROW(apply_quantization_config(*m, config(R"({"config_groups": {}, "kv_cache_scheme":
    {"num_bits": 8, "type": "int", "strategy": "channel"}})")),
               ConfigError);
  EXPECT_THROW(apply_quantization_config(*m, config(R"({"config_groups": {}})")), ConfigError);
  // Heads not dividing.
  model::ModelConfig bad = m->config();
  EXPECT_EQ(bad.num_attention_heads % bad.num_key_value_heads, 0);
}

TEST(Apply, HeadsNotDividing) {
  auto m = tiny();
  const auto weights_dir = test::test_data_dir() / "tiny_llama" / "gqa";
  model::ModelConfig cfg = m->config();
  cfg.num_key_value_heads = 3;  // 4 % 3 != 0
  // The engine may refuse such a config itself; either way it must be a kvq::Error.
  auto attempt = [&] {
    auto st = io::SafetensorsModel::open(weights_dir);
    std::map<std::string, Tensor> w;
    for (auto& n : st.names()) w.emplace(n, st.tensor(n));
    auto bad = model::CausalLM::from_weights(cfg, w);
    apply_quantization_config(*bad, config(kKvTensor));
  };
  EXPECT_THROW(attempt(), Error);
}

}  // namespace
}  // namespace kvq::lifecycle
