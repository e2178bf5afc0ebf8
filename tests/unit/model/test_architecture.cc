// The architecture seam (kvq/model/architecture.h): the Llama row, the checkpoint tensor table,
// and what loading refuses — unknown architectures, unknown or quantized tensors — with errors
// that name them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/model/architecture.h"
#include "tiny_model.h"

namespace kvq::model {
namespace {

model::ModelConfig small_config(bool tied = false) {
  model::ModelConfig c;
  c.architectures = {"LlamaForCausalLM"};
  c.model_type = "llama";
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 100;
  c.tie_word_embeddings = tied;
  return c;
}

std::map<std::string, Shape> shapes_of(const model::ModelConfig& c) {
  std::map<std::string, Shape> out;
  for (const TensorSpec& t : expected_tensors(find_architecture(c, "m"), c)) {
    out.emplace(t.name, t.shape);
  }
  return out;
}

// The message of check_checkpoint_tensors, "" when it accepts; fails the test on other errors.
template <class E>
std::string error_of(const model::ModelConfig& c, const std::map<std::string, Shape>& tensors) {
  try {
    check_checkpoint_tensors(find_architecture(c, "m"), c, tensors, "mymodel");
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(Architecture, LlamaIsFoundByClassOrModelType) {
  model::ModelConfig c = small_config();
  EXPECT_EQ(find_architecture(c, "m").hf_class, "LlamaForCausalLM");
  c.architectures.clear();
  EXPECT_EQ(find_architecture(c, "m").model_type, "llama");
  c.hidden_act = "silu";
  EXPECT_NO_THROW(find_architecture(c, "m"));
}

TEST(Architecture, UnknownArchitecturesAndActivationsAreRefusedByName) {
  model::ModelConfig c = small_config();
  c.architectures = {"Qwen2ForCausalLM"};
  try {
    find_architecture(c, "qwen-dir");
    FAIL() << "Qwen2 accepted";
  } catch (const NotSupported& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("qwen-dir: architecture Qwen2ForCausalLM is not supported"), std::string::npos)
        << w;
    EXPECT_NE(w.find("LlamaForCausalLM (model_type llama)"), std::string::npos) << w;
  }
  c = small_config();
  c.architectures.clear();
  c.model_type = "gemma3";
  EXPECT_THROW(find_architecture(c, "m"), NotSupported);
  c = small_config();
  c.hidden_act = "gelu_pytorch_tanh";
  try {
    find_architecture(c, "m");
    FAIL() << "gelu accepted";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_act 'gelu_pytorch_tanh'"), std::string::npos);
  }
}

TEST(Architecture, TensorTableAcceptsMatchingWeightsAndTheExtrasCheckpointsCarry) {
  for (bool tied : {false, true}) {
    const model::ModelConfig c = small_config(tied);
    auto t = shapes_of(c);
    EXPECT_EQ(t.size(), 2u + 9u * 2 + (tied ? 0u : 1u));
    EXPECT_EQ(t.at("model.layers.1.self_attn.k_proj.weight"), (Shape{32, 64}));
    EXPECT_EQ(error_of<Error>(c, t), "");
    // Attention quantization parameters (lifecycle::load_quantized), a tied lm_head that was
    // saved anyway, and old checkpoints' rotary buffers are allowed.
    t["model.layers.0.self_attn.k_scale"] = {1};
    t["model.layers.1.self_attn.v_zero_point"] = {2, 1, 1};
    t["model.layers.1.self_attn.q_scale"] = {1};
    t["model.layers.0.self_attn.rotary_emb.inv_freq"] = {8};
    t["lm_head.weight"] = {100, 64};
    EXPECT_EQ(error_of<Error>(c, t), "");
    // compressed-tensors saves transform matrices ("R3_q_attn.weight"): allowed only when the
    // config carries a transform_config.
    t["model.layers.0.self_attn.R3_q_attn.weight"] = {16, 16};
    EXPECT_NE(error_of<NotSupported>(c, t).find("R3_q_attn"), std::string::npos);
    model::ModelConfig with_transforms = c;
    with_transforms.raw["quantization_config"]["transform_config"] = {{"config_groups", {}}};
    with_transforms.raw["quantization_config"]["transform_config"]["config_groups"]["R3"] = {
        {"type", "hadamard"}};
    EXPECT_EQ(error_of<Error>(with_transforms, t), "");
  }
}

TEST(Architecture, TensorTableRefusesContradictionsUnknownsAndQuantizedWeights) {
  const model::ModelConfig c = small_config();
  // q_proj rows != heads × head_dim (a config whose head count disagrees with the weights).
  auto t = shapes_of(c);
  t["model.layers.1.self_attn.q_proj.weight"] = {32, 64};
  std::string e = error_of<ConfigError>(c, t);
  EXPECT_NE(e.find("mymodel: tensor 'model.layers.1.self_attn.q_proj.weight' has shape [32, 64] "
                   "but the config implies [64, 64]"),
            std::string::npos)
      << e;
  t = shapes_of(c);
  t.erase("model.layers.1.mlp.down_proj.weight");
  e = error_of<ConfigError>(c, t);
  EXPECT_NE(e.find("lack tensors the config requires: model.layers.1.mlp.down_proj.weight"),
            std::string::npos)
      << e;
  t = shapes_of(c);
  t.erase("lm_head.weight");  // the untied config needs it
  EXPECT_NE(error_of<ConfigError>(c, t).find("lm_head.weight"), std::string::npos);
  // Weights with more layers than the config.
  t = shapes_of(c);
  t["model.layers.2.input_layernorm.weight"] = {64};
  EXPECT_NE(error_of<ConfigError>(c, t).find("num_hidden_layers is 2"), std::string::npos);

  // A Qwen2-style bias would be dropped silently: refused, named.
  t = shapes_of(c);
  t["model.layers.0.self_attn.q_proj.bias"] = {64};
  t["model.layers.0.self_attn.k_proj.bias"] = {32};
  e = error_of<NotSupported>(c, t);
  EXPECT_NE(e.find("mymodel: tensors that LlamaForCausalLM has no place for: "
                   "model.layers.0.self_attn.k_proj.bias, model.layers.0.self_attn.q_proj.bias"),
            std::string::npos)
      << e;
  // A q/k/v scale of a module that is not a layer's attention is not a known parameter either.
  t = shapes_of(c);
  t["model.layers.0.mlp.k_scale"] = {1};
  EXPECT_NE(error_of<NotSupported>(c, t).find("model.layers.0.mlp.k_scale"), std::string::npos);

  // compressed-tensors' quantized Linear weights (W8A8, W4A16) are refused by name.
  t = shapes_of(c);
  t.erase("model.layers.0.mlp.up_proj.weight");
  t["model.layers.0.mlp.up_proj.weight_packed"] = {96, 8};
  t["model.layers.0.mlp.up_proj.weight_scale"] = {96, 1};
  e = error_of<NotSupported>(c, t);
  EXPECT_NE(e.find("quantized Linear weights (model.layers.0.mlp.up_proj.weight_packed, "
                   "model.layers.0.mlp.up_proj.weight_scale)"),
            std::string::npos)
      << e;
}

// The forward knobs drive the tensor table: a row with Qwen2's bias, Qwen3's q/k norms or Gemma's
// sandwich norms expects their tensors, and CausalLM refuses the knobs it does not run yet, naming
// each.
TEST(Architecture, ForwardKnobsAddTheirTensorsAndUnimplementedOnesAreRefused) {
  const model::ModelConfig c = small_config();
  const Architecture& llama = find_architecture(c, "m");
  EXPECT_NO_THROW(check_forward_support(llama, "m"));
  Architecture other = llama;
  other.hf_class = "OtherForCausalLM";
  other.forward.qkv_bias = true;
  other.forward.qk_norm = true;
  other.forward.norm_placement = NormPlacement::kSandwich;
  std::map<std::string, Shape> extra;
  for (const TensorSpec& t : expected_tensors(other, c)) extra.emplace(t.name, t.shape);
  const std::map<std::string, Shape> base = shapes_of(c);
  EXPECT_EQ(extra.size(), base.size() + 2 * 7);  // per layer: 3 biases, 2 q/k norms, 2 norms
  EXPECT_EQ(extra.at("model.layers.1.self_attn.q_proj.bias"), Shape({64}));
  EXPECT_EQ(extra.at("model.layers.1.self_attn.k_proj.bias"), Shape({32}));
  EXPECT_EQ(extra.at("model.layers.0.self_attn.k_norm.weight"), Shape({16}));
  EXPECT_EQ(extra.at("model.layers.0.pre_feedforward_layernorm.weight"), Shape({64}));
  other.forward.scale_embeddings = true;
  try {
    check_forward_support(other, "mymodel");
    ADD_FAILURE() << "accepted";
  } catch (const NotSupported& e) {
    const std::string msg = e.what();
    for (const char* part : {"mymodel", "OtherForCausalLM", "q/k/v projection biases", "q/k norms",
                             "sandwich norms", "scaled embeddings"}) {
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
  }
}

TEST(Architecture, AttentionQparamNames) {
  const model::ModelConfig c = small_config();  // 2 layers
  for (const char* yes :
       {"model.layers.0.self_attn.k_scale", "model.layers.1.self_attn.v_zero_point",
        "model.layers.1.self_attn.q_scale", "model.layers.0.self_attn.k_global_scale"}) {
    EXPECT_TRUE(is_attention_qparam(c, yes)) << yes;
  }
  for (const char* no :
       {"model.layers.2.self_attn.k_scale", "model.layers.0.mlp.k_scale",
        "model.layers.0.self_attn.o_scale", "model.layers..self_attn.k_scale",
        "model.layers.0.self_attn.k_proj.weight_scale", "model.layers.0.self_attn.k_scales",
        "layers.0.self_attn.k_scale", "model.layers.0.self_attn.k_"}) {
    EXPECT_FALSE(is_attention_qparam(c, no)) << no;
  }
  // A 40,000-digit layer number is rejected in linear time, not by a backtracking regex.
  EXPECT_FALSE(
      is_attention_qparam(c, "model.layers." + std::string(40000, '9') + ".self_attn.k_scale"));
}

// Through the loader: the tiny Llama plus a bias it has no place for fails to load.
TEST(Architecture, FromWeightsRefusesTensorsItCannotRun) {
  const auto dir = test::tiny_dir("gqa");
  std::map<std::string, Tensor> w = test::load_weights(dir);
  const auto model = CausalLM::load(dir);
  EXPECT_EQ(model->architecture().hf_class, "LlamaForCausalLM");
  EXPECT_EQ(model->root().class_name(), "LlamaForCausalLM");
  w.emplace("model.layers.0.self_attn.o_proj.bias", Tensor(DType::kF32, {64}));
  try {
    CausalLM::from_weights(model->config(), w, "tiny");
    FAIL() << "a bias was dropped silently";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.self_attn.o_proj.bias"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kvq::model
