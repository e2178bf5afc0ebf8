// The architecture seam (kvq/model/architecture.h): the rows (Llama, Qwen2, Qwen3, Mistral,
// Gemma 3, Phi-3 with its fused Linears split at load), the
// checkpoint tensor table, each family's sliding-window convention (layer_windows), and what
// loading refuses — unknown architectures, unknown or quantized tensors, knob values the forward
// does not run — with errors that name them.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/model/architecture.h"
#include "kvq/model/rope.h"
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
  c.architectures = {"PhiForCausalLM"};  // Phi-1 / Phi-2: LayerNorm, parallel attention + MLP
  try {
    find_architecture(c, "phi-dir");
    FAIL() << "Phi accepted";
  } catch (const NotSupported& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("phi-dir: architecture PhiForCausalLM is not supported"), std::string::npos)
        << w;
    for (const char* row :
         {"LlamaForCausalLM (model_type llama)", "Qwen2ForCausalLM (model_type qwen2)",
          "Qwen3ForCausalLM (model_type qwen3)", "MistralForCausalLM (model_type mistral)",
          "Gemma3ForCausalLM (model_type gemma3_text)", "Phi3ForCausalLM (model_type phi3)"}) {
      EXPECT_NE(w.find(row), std::string::npos) << row << " in: " << w;
    }
  }
  c = small_config();
  c.architectures.clear();
  c.model_type = "gemma3";
  EXPECT_THROW(find_architecture(c, "m"), NotSupported);
  for (const char* name :
       {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM"}) {
    c = small_config();
    c.architectures = {name};
    EXPECT_EQ(find_architecture(c, "m").hf_class, name);
  }
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
// sandwich norms expects their tensors; every row of the table runs, and CausalLM refuses the
// config values Gemma 3's forward does not implement (attention logit softcapping, bidirectional
// attention), naming each, where the other rows ignore them as transformers does.
TEST(Architecture, ForwardKnobsAddTheirTensorsAndUnimplementedOnesAreRefused) {
  model::ModelConfig c = small_config();
  const Architecture& llama = find_architecture(c, "m");
  for (const Architecture& a : architectures()) EXPECT_NO_THROW(check_forward_support(a, c, "m"));
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
  c.attn_logit_softcapping = 50.0;
  c.use_bidirectional_attention = true;
  EXPECT_NO_THROW(check_forward_support(llama, c, "m"));
  c.architectures = {"Gemma3ForCausalLM"};
  c.hidden_act = "gelu_pytorch_tanh";
  try {
    check_forward_support(find_architecture(c, "m"), c, "mymodel");
    ADD_FAILURE() << "accepted";
  } catch (const NotSupported& e) {
    const std::string msg = e.what();
    for (const char* part : {"mymodel", "Gemma3ForCausalLM", "attn_logit_softcapping 50",
                             "use_bidirectional_attention"}) {
      EXPECT_NE(msg.find(part), std::string::npos) << part << " in: " << msg;
    }
  }
}

// The multimodal Gemma 3 (text_config nested, tensors under model.language_model) is refused by
// name, pointing at the text-only class kvq runs.
TEST(Architecture, MultimodalGemma3IsRefusedByName) {
  model::ModelConfig c = small_config();
  c.architectures = {"Gemma3ForConditionalGeneration"};
  c.model_type = "gemma3";
  try {
    find_architecture(c, "gemma-dir");
    ADD_FAILURE() << "accepted";
  } catch (const NotSupported& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gemma-dir: architecture Gemma3ForConditionalGeneration is not supported "
                       "(the multimodal Gemma 3: kvq runs the text-only Gemma3ForCausalLM"),
              std::string::npos)
        << msg;
  }
}

// Each family reads its sliding window from config.json the way transformers does.
TEST(Architecture, LayerWindowsFollowEachFamilysConfigConvention) {
  using W = std::vector<std::int64_t>;
  model::ModelConfig c = small_config();
  c.num_hidden_layers = 4;
  const auto windows = [&](const char* arch) {
    c.architectures = {arch};
    return layer_windows(find_architecture(c, "m"), c, "m");
  };
  // Llama ignores a sliding_window (LlamaAttention has none).
  c.sliding_window = 8;
  EXPECT_EQ(windows("LlamaForCausalLM"), W({0, 0, 0, 0}));
  // Mistral: every layer; null = none; absent = MistralConfig's default 4096.
  EXPECT_EQ(windows("MistralForCausalLM"), W({8, 8, 8, 8}));
  c.sliding_window = 0;
  EXPECT_EQ(windows("MistralForCausalLM"), W({0, 0, 0, 0}));
  c.sliding_window.reset();
  EXPECT_EQ(windows("MistralForCausalLM"), W({4096, 4096, 4096, 4096}));
  c.layer_types = {"full_attention", "sliding_attention", "full_attention", "full_attention"};
  EXPECT_EQ(windows("MistralForCausalLM"), W({4096, 4096, 4096, 4096}));  // ignored, as there
  // Qwen: off unless use_sliding_window, as the Qwen2.5 checkpoints on the Hub ship it
  // (sliding_window 32768, use_sliding_window false, max_window_layers 28 / 70).
  c.layer_types.clear();
  c.sliding_window = 32768;
  c.max_window_layers = 2;
  for (const char* qwen : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    c.use_sliding_window.reset();
    EXPECT_EQ(windows(qwen), W({0, 0, 0, 0})) << qwen;
    c.use_sliding_window = false;
    EXPECT_EQ(windows(qwen), W({0, 0, 0, 0})) << qwen;
    c.use_sliding_window = true;  // layers from max_window_layers on
    EXPECT_EQ(windows(qwen), W({0, 0, 32768, 32768})) << qwen;
    c.layer_types = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
    EXPECT_EQ(windows(qwen), W({32768, 0, 0, 32768})) << qwen;  // layer_types win
    c.sliding_window = 0;                                       // null: no window at all
    EXPECT_EQ(windows(qwen), W({0, 0, 0, 0})) << qwen;
    c.sliding_window = 32768;
    c.layer_types.clear();
  }
  // Gemma 3: layer_types, or without them every sliding_window_pattern-th layer global
  // (default 6); absent = Gemma3TextConfig's 4096, null = none.
  c.use_sliding_window.reset();
  c.sliding_window = 512;
  c.layer_types = {"sliding_attention", "full_attention", "full_attention", "sliding_attention"};
  EXPECT_EQ(windows("Gemma3ForCausalLM"), W({512, 0, 0, 512}));
  c.layer_types.clear();
  EXPECT_EQ(windows("Gemma3ForCausalLM"), W({512, 512, 512, 512}));  // pattern 6 > 4 layers
  c.sliding_window_pattern = 2;
  EXPECT_EQ(windows("Gemma3ForCausalLM"), W({512, 0, 512, 0}));
  c.sliding_window.reset();
  EXPECT_EQ(windows("Gemma3ForCausalLM"), W({4096, 0, 4096, 0}));
  c.sliding_window = 0;
  EXPECT_EQ(windows("Gemma3ForCausalLM"), W({0, 0, 0, 0}));
  // Phi-3: every layer, as Mistral, but absent = none (Phi3Config's default is None).
  c.sliding_window_pattern.reset();
  c.layer_types.clear();
  c.sliding_window = 2047;  // Phi-3-mini-4k
  EXPECT_EQ(windows("Phi3ForCausalLM"), W({2047, 2047, 2047, 2047}));
  c.sliding_window.reset();
  EXPECT_EQ(windows("Phi3ForCausalLM"), W({0, 0, 0, 0}));
  c.sliding_window = 0;
  EXPECT_EQ(windows("Phi3ForCausalLM"), W({0, 0, 0, 0}));
  c.sliding_window = 32768;
  c.use_sliding_window = true;
  c.layer_types = {"sliding_attention", "full_attention"};
  try {
    windows("Qwen2ForCausalLM");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layer_types lists 2 layers but num_hidden_layers is 4"),
              std::string::npos)
        << e.what();
  }
  c.layer_types = {"sliding_attention", "chunked_attention", "full_attention", "full_attention"};
  try {
    windows("Qwen2ForCausalLM");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("layer_types[1] is 'chunked_attention'"),
              std::string::npos)
        << e.what();
  }
}

// A Gemma 3 config without layer_types (the older Hub configs) runs the layers
// sliding_window_pattern names: the tiny gemma3 model's logits are unchanged, bit for bit.
TEST(Architecture, Gemma3SlidingWindowPatternRunsLikeLayerTypes) {
  const std::filesystem::path dir = test::tiny_variant_dir("gemma3");
  const auto with_types = CausalLM::load(dir);
  model::ModelConfig c = with_types->config();
  ASSERT_EQ(c.layer_types,
            (std::vector<std::string>{"sliding_attention", "sliding_attention", "full_attention"}));
  c.layer_types.clear();
  c.sliding_window_pattern = 3;
  const auto with_pattern = CausalLM::from_weights(c, test::load_weights(dir));
  const std::vector<std::int32_t> prompt = {5, 17, 200, 3, 99, 42, 7, 128, 64, 1, 250, 33};
  const Tensor a = with_types->forward(prompt, LogitsMode::kAll);
  EXPECT_TRUE(test::bit_identical(a, with_pattern->forward(prompt, LogitsMode::kAll)));
  c.sliding_window_pattern = 2;  // layer 1 global instead: another model
  const auto other = CausalLM::from_weights(c, test::load_weights(dir));
  EXPECT_GT(test::max_abs_diff(a, other->forward(prompt, LogitsMode::kAll)), 1e-3f);
}

// config.json's sliding-window fields: parsed as written (null is 0, absent is nullopt) and
// written back.
TEST(Architecture, SlidingWindowConfigFieldsRoundTrip) {
  nlohmann::json j = {{"hidden_size", 64},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"intermediate_size", 96},
                      {"vocab_size", 100},
                      {"sliding_window", nullptr},
                      {"use_sliding_window", true},
                      {"max_window_layers", 1},
                      {"layer_types", {"full_attention", "sliding_attention"}}};
  model::ModelConfig c = parse_model_config(j, "cfg");
  EXPECT_EQ(c.sliding_window, std::optional<std::int64_t>(0));
  EXPECT_EQ(c.use_sliding_window, std::optional<bool>(true));
  EXPECT_EQ(c.max_window_layers, std::optional<std::int64_t>(1));
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"full_attention", "sliding_attention"}));
  j["sliding_window"] = 4096;
  c = parse_model_config(j, "cfg");
  EXPECT_EQ(c.sliding_window, std::optional<std::int64_t>(4096));
  const model::ModelConfig back = parse_model_config(model_config_to_json(c), "back");
  EXPECT_EQ(back.sliding_window, c.sliding_window);
  EXPECT_EQ(back.layer_types, c.layer_types);
  j.erase("sliding_window");
  EXPECT_FALSE(parse_model_config(j, "cfg").sliding_window.has_value());
  j["sliding_window"] = -1;
  EXPECT_THROW(parse_model_config(j, "cfg"), ConfigError);
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

model::ModelConfig phi3_config() {
  model::ModelConfig c = small_config();
  c.architectures = {"Phi3ForCausalLM"};
  c.model_type = "phi3";
  return c;
}

// Phi-3's checkpoint fuses q/k/v into self_attn.qkv_proj and gate/up into mlp.gate_up_proj: the
// tensor table names the fused tensors (q rows, then k, then v; gate rows, then up), and
// split_fused_linears hands out the parts as views of their rows.
TEST(Architecture, Phi3FusedLinearsAreSplitIntoTheirPartsRows) {
  const model::ModelConfig c = phi3_config();  // hidden 64, 4 heads / 2 kv of 16, inter 96
  const Architecture& phi3 = find_architecture(c, "m");
  const std::map<std::string, Shape> table = shapes_of(c);
  EXPECT_EQ(table.at("model.layers.1.self_attn.qkv_proj.weight"), Shape({64 + 2 * 32, 64}));
  EXPECT_EQ(table.at("model.layers.1.mlp.gate_up_proj.weight"), Shape({2 * 96, 64}));
  EXPECT_EQ(table.at("model.layers.1.self_attn.o_proj.weight"), Shape({64, 64}));
  for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
    EXPECT_FALSE(table.contains(fmt::format("model.layers.0.self_attn.{}.weight", part))) << part;
  }
  EXPECT_FALSE(table.contains("model.layers.0.mlp.up_proj.weight"));
  EXPECT_EQ(error_of<Error>(c, table), "");

  // Row r of every fused tensor holds r everywhere: each part sees its own rows.
  std::map<std::string, Tensor> w;
  for (const auto& [name, shape] : table) {
    std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
    const std::int64_t cols = shape.size() == 2 ? shape[1] : 1;
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i / cols);
    w.emplace(name, Tensor::from_f32(shape, v));
  }
  const std::map<std::string, Tensor> split = split_fused_linears(phi3, c, w, "m");
  EXPECT_EQ(split.size(), w.size() + 2 * 3);  // per layer: qkv → 3, gate_up → 2
  EXPECT_FALSE(split.contains("model.layers.0.self_attn.qkv_proj.weight"));
  const auto first_row = [&](const char* name, Shape shape) {
    const Tensor& t = split.at(name);
    EXPECT_EQ(t.shape(), shape) << name;
    return t.f32()[0];
  };
  EXPECT_EQ(first_row("model.layers.1.self_attn.q_proj.weight", {64, 64}), 0.0f);
  EXPECT_EQ(first_row("model.layers.1.self_attn.k_proj.weight", {32, 64}), 64.0f);
  EXPECT_EQ(first_row("model.layers.1.self_attn.v_proj.weight", {32, 64}), 96.0f);
  EXPECT_EQ(first_row("model.layers.0.mlp.gate_proj.weight", {96, 64}), 0.0f);
  EXPECT_EQ(first_row("model.layers.0.mlp.up_proj.weight", {96, 64}), 96.0f);
  EXPECT_EQ(split.at("model.layers.0.mlp.up_proj.weight").f32()[95 * 64], 191.0f);
  // Views, not copies.
  EXPECT_EQ(split.at("model.layers.0.self_attn.k_proj.weight").data(),
            w.at("model.layers.0.self_attn.qkv_proj.weight").f32() + 64 * 64);

  EXPECT_EQ(fused_module_of(phi3, "model.layers.3.self_attn.v_proj")->name,
            "model.layers.3.self_attn.qkv_proj");
  EXPECT_EQ(
      fused_module_of(phi3, "model.layers.3.mlp.up_proj")->parts,
      (std::vector<std::string>{"model.layers.3.mlp.gate_proj", "model.layers.3.mlp.up_proj"}));
  EXPECT_FALSE(fused_module_of(phi3, "model.layers.3.self_attn.o_proj"));
  EXPECT_FALSE(
      fused_module_of(find_architecture(small_config(), "m"), "model.layers.3.self_attn.v_proj"));
  EXPECT_EQ(fused_modules(phi3, c).size(), 4u);
}

// A fused tensor whose rows do not add up to its parts' is refused naming it, by the tensor
// table (through the loader) and by the split itself; a checkpoint holding a part beside its fused
// tensor too.
TEST(Architecture, Phi3BadFusedShapesAreRefusedNamingTheTensor) {
  const model::ModelConfig c = phi3_config();
  std::map<std::string, Shape> table = shapes_of(c);
  table["model.layers.1.self_attn.qkv_proj.weight"] = {64 + 32, 64};  // no v rows
  std::string msg = error_of<ConfigError>(c, table);
  EXPECT_NE(msg.find("mymodel: tensor 'model.layers.1.self_attn.qkv_proj.weight' has shape [96, "
                     "64] but the config implies [128, 64]"),
            std::string::npos)
      << msg;
  table = shapes_of(c);
  table["model.layers.0.mlp.gate_up_proj.weight"] = {2 * 96, 32};
  msg = error_of<ConfigError>(c, table);
  EXPECT_NE(msg.find("'model.layers.0.mlp.gate_up_proj.weight' has shape [192, 32]"),
            std::string::npos)
      << msg;

  const Architecture& phi3 = find_architecture(c, "m");
  const auto split_error = [&](const std::map<std::string, Tensor>& w) -> std::string {
    try {
      split_fused_linears(phi3, c, w, "phi-dir");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  std::map<std::string, Tensor> w = {
      {"model.layers.0.self_attn.qkv_proj.weight", Tensor(DType::kF32, {128, 63})}};
  EXPECT_EQ(split_error(w),
            "phi-dir: tensor 'model.layers.0.self_attn.qkv_proj.weight' has shape [128, 63] but "
            "the config implies [128, 64] (rows q_proj 64 + k_proj 32 + v_proj 32; hidden_size 64, "
            "heads 4, kv heads 2, head_dim 16, intermediate_size 96)");
  w = {{"model.layers.0.mlp.gate_up_proj.weight", Tensor(DType::kF32, {96 * 2 * 64})}};
  EXPECT_NE(split_error(w).find("'model.layers.0.mlp.gate_up_proj.weight' has shape [12288]"),
            std::string::npos);
  w = {{"model.layers.0.self_attn.qkv_proj.weight", Tensor(DType::kF32, {128, 64})},
       {"model.layers.0.self_attn.k_proj.weight", Tensor(DType::kF32, {32, 64})}};
  EXPECT_NE(split_error(w).find("holds both 'model.layers.0.self_attn.k_proj.weight' and "
                                "'model.layers.0.self_attn.qkv_proj.weight'"),
            std::string::npos);
  // Unfused q/k/v tensors are not Phi-3's layout: refused as tensors it has no place for.
  table = shapes_of(c);
  table.emplace("model.layers.0.self_attn.q_proj.weight", Shape{64, 64});
  msg = error_of<NotSupported>(c, table);
  EXPECT_NE(msg.find("tensors that Phi3ForCausalLM has no place for: "
                     "model.layers.0.self_attn.q_proj.weight"),
            std::string::npos)
      << msg;
}

// What Phi-3 variants need beyond the row is refused by name: RoPE on part of each head (Phi-4-
// mini's partial_rotary_factor 0.75). LongRoPE parses (its forward: the phi3_longrope tiny model).
TEST(Architecture, Phi3PartialRotaryIsRefusedByNameAndLongRopeParses) {
  model::ModelConfig c = phi3_config();
  EXPECT_NO_THROW(check_forward_support(find_architecture(c, "m"), c, "m"));
  c.partial_rotary_factor = 0.75;
  try {
    check_forward_support(find_architecture(c, "m"), c, "phi-dir");
    ADD_FAILURE() << "accepted";
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("phi-dir: Phi3ForCausalLM needs what kvq's forward pass "
                                         "does not implement yet: partial_rotary_factor 0.75"),
              std::string::npos)
        << e.what();
  }
  nlohmann::json j = {{"architectures", {"Phi3ForCausalLM"}},
                      {"model_type", "phi3"},
                      {"hidden_size", 64},
                      {"num_hidden_layers", 2},
                      {"num_attention_heads", 4},
                      {"intermediate_size", 96},
                      {"vocab_size", 100},
                      {"partial_rotary_factor", 0.5}};
  EXPECT_EQ(parse_model_config(j, "cfg").partial_rotary_factor, 0.5);
  j["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 1.0}};
  EXPECT_EQ(parse_model_config(j, "cfg").partial_rotary_factor, 1.0);  // rope_parameters win
  j.erase("rope_parameters");
  j.erase("partial_rotary_factor");
  // LongRoPE (the 128k models and Phi-3.5) runs since 2026-12-06: "su" is its old name; the
  // factor defaults to max_position_embeddings / original_max_position_embeddings (top level),
  // the attention factor to sqrt(1 + ln(factor) / ln(original)).
  j["max_position_embeddings"] = 131072;
  j["original_max_position_embeddings"] = 4096;
  for (const char* type : {"longrope", "su"}) {
    j["rope_scaling"] = {{"type", type},
                         {"short_factor", std::vector<double>(8, 1.0)},
                         {"long_factor", {1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0}}};
    const model::ModelConfig lc = parse_model_config(j, "phi-3-128k/config.json");
    EXPECT_EQ(lc.rope_scaling.rope_type, "longrope");
    EXPECT_EQ(lc.rope_scaling.original_max_position_embeddings, 4096);
    EXPECT_EQ(lc.rope_scaling.factor, 32.0);
    EXPECT_FLOAT_EQ(rope_attention_scaling(lc),
                    static_cast<float>(std::sqrt(1 + std::log(32.0) / std::log(4096.0))));
    const std::vector<float> short_f = rope_inv_freq(lc), long_f = rope_inv_freq_long(lc);
    ASSERT_EQ(long_f.size(), 8u);        // head_dim 64 / 4 heads = 16
    for (std::size_t i = 0; i < 8; ++i)  // long = short / long_factor (up to fp32 rounding)
      EXPECT_NEAR(long_f[i], short_f[i] / std::pow(2.0, static_cast<double>(i)), 1e-6 * short_f[i]);
  }
  j["rope_scaling"]["long_factor"] = {1.0, 2.0};
  EXPECT_THROW((void)parse_model_config(j, "cfg"), ConfigError);  // head_dim / 2 entries
  j["rope_scaling"]["long_factor"] = std::vector<double>{1.0, 2.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0};
  EXPECT_THROW((void)parse_model_config(j, "cfg"), ConfigError);  // positive
  j["rope_scaling"]["long_factor"] = std::vector<double>(8, 2.0);
  j.erase("original_max_position_embeddings");
  EXPECT_THROW((void)parse_model_config(j, "cfg"), ConfigError);
}

// Phi-3-mini-4k-instruct's config.json (as on the Hub, auto_map left out) runs as the phi3 row: a
// window of 2047 on every layer, fused tensors of 3 · 3072 and 2 · 8192 rows.
TEST(Architecture, Phi3Mini4kConfigRuns) {
  const nlohmann::json j = nlohmann::json::parse(R"({
    "architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
    "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32064})");
  const model::ModelConfig c = parse_model_config(j, "phi-3-mini");
  const Architecture& a = find_architecture(c, "phi-3-mini");
  EXPECT_EQ(a.model_type, "phi3");
  EXPECT_NO_THROW(check_forward_support(a, c, "phi-3-mini"));
  EXPECT_EQ(layer_windows(a, c, "phi-3-mini"), std::vector<std::int64_t>(32, 2047));
  const std::map<std::string, Shape> t = shapes_of(c);
  EXPECT_EQ(t.at("model.layers.31.self_attn.qkv_proj.weight"), Shape({3 * 3072, 3072}));
  EXPECT_EQ(t.at("model.layers.31.mlp.gate_up_proj.weight"), Shape({2 * 8192, 3072}));
  // embed_tokens, norm, lm_head; per layer qkv, o, gate_up, down and 2 norms.
  EXPECT_EQ(t.size(), 3u + 32u * 6u);
}

// The tiny Phi-3 as transformers wrote it: kvq's q/k/v_proj and gate/up_proj hold the fused
// tensors' rows (views of the checkpoint), with Phi-3's classes and module names.
TEST(Architecture, Phi3LoadsItsFusedCheckpoint) {
  const auto dir = test::tiny_variant_dir("phi3");
  const auto m = CausalLM::load(dir);
  EXPECT_EQ(m->architecture().hf_class, "Phi3ForCausalLM");
  EXPECT_EQ(m->find_module("model.layers.1.self_attn")->class_name(), "Phi3Attention");
  EXPECT_NE(m->find_module("model.layers.1.mlp.activation_fn"), nullptr);
  EXPECT_EQ(m->find_module("model.layers.1.self_attn.qkv_proj"), nullptr);
  const std::map<std::string, Tensor> w = test::load_weights(dir);
  const std::vector<float> qkv = w.at("model.layers.1.self_attn.qkv_proj.weight").to_f32_vector();
  const std::vector<float> v =
      m->find_module("model.layers.1.self_attn.v_proj")->weight().to_f32_vector();
  const std::int64_t hidden = m->config().hidden_size;
  ASSERT_EQ(v.size(), static_cast<std::size_t>(32 * hidden));
  EXPECT_EQ(v, std::vector<float>(qkv.end() - 32 * hidden, qkv.end()));
  const std::vector<float> gate_up = w.at("model.layers.0.mlp.gate_up_proj.weight").to_f32_vector();
  const std::vector<float> up =
      m->find_module("model.layers.0.mlp.up_proj")->weight().to_f32_vector();
  EXPECT_EQ(up, std::vector<float>(gate_up.begin() + static_cast<std::ptrdiff_t>(up.size()),
                                   gate_up.end()));
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
