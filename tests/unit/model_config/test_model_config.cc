// config.json / generation_config.json parsing, fallbacks, errors, and the config-vs-weights check.
#include <gtest/gtest.h>

#include "../io_safetensors/io_test_util.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/model_config.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

using nlohmann::json;

// SmolLM2-135M-Instruct's config.json (as published on the Hugging Face hub).
const char* kSmolLM2 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.041666666666666664,
  "intermediate_size": 1536,
  "is_llama_config": true,
  "max_position_embeddings": 8192,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pad_token_id": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_interleaved": false,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 49152
})";

json minimal() {
  return {{"hidden_size", 64},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"intermediate_size", 96},
          {"vocab_size", 100}};
}

TEST(ModelConfig, SmolLM2) {
  const ModelConfig c = parse_model_config(io::parse_json(kSmolLM2, "config.json"), "config.json");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"LlamaForCausalLM"});
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{2});
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.raw["initializer_range"].get<double>(), 0.041666666666666664);
}

TEST(ModelConfig, FallbacksAndDefaults) {
  const ModelConfig c = parse_model_config(minimal(), "config.json");
  EXPECT_EQ(c.num_key_value_heads, 4);  // = num_attention_heads
  EXPECT_EQ(c.head_dim, 16);            // = hidden_size / num_attention_heads
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.torch_dtype, "float32");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());

  json j = minimal();
  j["num_key_value_heads"] = nullptr;  // null means absent, as in transformers
  j["head_dim"] = 32;                  // explicit head_dim need not divide hidden_size
  j["hidden_size"] = 100;
  j["eos_token_id"] = {2, 7};
  j["dtype"] = "float16";  // transformers 5 spelling
  const ModelConfig d = parse_model_config(j, "config.json");
  EXPECT_EQ(d.num_key_value_heads, 4);
  EXPECT_EQ(d.head_dim, 32);
  EXPECT_EQ(d.eos_token_ids, (std::vector<std::int64_t>{2, 7}));
  EXPECT_EQ(d.torch_dtype, "float16");
}

TEST(ModelConfig, RopeScaling) {
  json j = minimal();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 500000.0);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // "type" is the old spelling
  c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_scaling.rope_type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0);

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "config.json", "llama3",
                   "low_freq_factor");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), NotSupported, "config.json", "'yarn'");
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), NotSupported, "'dynamic'");
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", -1.0}};
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "factor");
}

// transformers 5 writes rope_theta and the scaling inside "rope_parameters" (checked with
// transformers 5.17: LlamaConfig(...).to_json_string()).
TEST(ModelConfig, Transformers5RopeParameters) {
  json j = minimal();
  j["rope_parameters"] = {{"rope_theta", 100000.0}, {"rope_type", "default"}};
  ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  j["rope_parameters"] = {{"factor", 8.0},          {"high_freq_factor", 4.0},
                          {"low_freq_factor", 1.0}, {"original_max_position_embeddings", 8192},
                          {"rope_theta", 500000.0}, {"rope_type", "llama3"}};
  c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(ModelConfig, MissingRequiredFields) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "vocab_size"}) {
    json j = minimal();
    j.erase(key);
    EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError,
                     fmt::format("config.json: missing field '{}'", key));
  }
}

TEST(ModelConfig, Contradictions) {
  json j = minimal();
  j["num_key_value_heads"] = 3;
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "num_attention_heads (4)",
                   "num_key_value_heads (3)");
  j = minimal();
  j["hidden_size"] = 66;
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "hidden_size (66)",
                   "num_attention_heads (4)");
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                          "intermediate_size", "vocab_size", "num_key_value_heads", "head_dim"}) {
    j = minimal();
    j[key] = 0;
    EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, key, "positive");
    j[key] = -4;
    EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, key, "positive");
  }
  j = minimal();
  j["hidden_size"] = "576";
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "'hidden_size'", "integer");
  j = minimal();
  j["rms_norm_eps"] = 0;
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "rms_norm_eps");
  j = minimal();
  j["torch_dtype"] = "int8";
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "torch_dtype", "int8");
  j = minimal();
  j["tie_word_embeddings"] = 1;
  EXPECT_THROW_MSG(parse_model_config(j, "config.json"), ConfigError, "tie_word_embeddings");
  EXPECT_THROW_MSG(parse_model_config(json::array(), "config.json"), ConfigError, "config.json");
}

TEST(ModelConfig, LoadFromDirectory) {
  kvq::test::TempDir dir;
  EXPECT_THROW_MSG(load_model_config(dir.path()), IoError, "config.json");
  kvq::test::write_bytes(dir / "config.json", kSmolLM2);
  EXPECT_EQ(load_model_config(dir.path()).num_hidden_layers, 30);
  kvq::test::write_bytes(dir / "config.json", "{\"hidden_size\": 5,}");
  EXPECT_THROW_MSG(load_model_config(dir.path()), FormatError,
                   "config.json: invalid JSON at line 1");
}

TEST(ModelConfig, ToJsonRoundTrips) {
  json j = io::parse_json(kSmolLM2, "config.json");
  const ModelConfig c = parse_model_config(j, "config.json");
  const json out = model_config_to_json(c);
  EXPECT_EQ(out["head_dim"], 64);
  EXPECT_EQ(out["rope_theta"], 100000.0);
  EXPECT_TRUE(out["rope_scaling"].is_null());
  EXPECT_EQ(out["rope_parameters"], (json{{"rope_type", "default"}, {"rope_theta", 100000.0}}));
  EXPECT_EQ(out["is_llama_config"], true);  // unknown keys survive
  const ModelConfig back = parse_model_config(out, "out");
  EXPECT_EQ(model_config_to_json(back), out);

  json k = minimal();
  k["eos_token_id"] = {2, 7};
  k["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const json out2 = model_config_to_json(parse_model_config(k, "k"));
  EXPECT_EQ(out2["eos_token_id"], json({2, 7}));
  EXPECT_EQ(out2["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(out2["rope_parameters"]["original_max_position_embeddings"], 8192);
  const ModelConfig back2 = parse_model_config(out2, "out2");
  EXPECT_EQ(back2.rope_scaling.factor, 8.0);
  EXPECT_EQ(back2.num_key_value_heads, 4);
}

// Gemma 3's fields in both spellings: transformers 4 (rope_theta + rope_scaling for the global
// layers, rope_local_base_freq for the sliding ones, sliding_window_pattern; the keys the Hub's
// Gemma 3 text configs carry) and transformers 5 (rope_parameters per layer type), with
// Gemma3TextConfig's defaults (1e6 / 1e4) when absent; written back per layer type.
TEST(ModelConfig, Gemma3RopePerLayerTypeInBothSpellings) {
  json j = minimal();
  j["model_type"] = "gemma3_text";
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["query_pre_attn_scalar"] = 256;
  j["sliding_window"] = 512;
  j["sliding_window_pattern"] = 6;
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
  ModelConfig c = parse_model_config(j, "g");
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_local_theta, 1e4);
  EXPECT_EQ(c.query_pre_attn_scalar, std::optional<double>(256));
  EXPECT_EQ(c.sliding_window_pattern, std::optional<std::int64_t>(6));
  EXPECT_FALSE(c.final_logit_softcapping.has_value());
  EXPECT_FALSE(c.attn_logit_softcapping.has_value());
  j["rope_theta"] = 500000.0;
  j["rope_local_base_freq"] = 20000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  c = parse_model_config(j, "g");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_local_theta, 20000.0);
  EXPECT_EQ(c.rope_local_scaling.rope_type, "default");

  const json out = model_config_to_json(c);
  EXPECT_EQ(out["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_FALSE(out.contains("hidden_act"));
  EXPECT_EQ(out["rope_parameters"],
            (json{{"full_attention",
                   {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 500000.0}}},
                  {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 20000.0}}}}));
  json v5 = out;  // transformers 5 reads rope_parameters only
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5.erase("rope_local_base_freq");
  const ModelConfig back = parse_model_config(v5, "v5");
  EXPECT_EQ(back.rope_theta, 500000.0);
  EXPECT_EQ(back.rope_scaling.factor, 8.0);
  EXPECT_EQ(back.rope_local_theta, 20000.0);
  EXPECT_EQ(model_config_to_json(back), model_config_to_json(c));
  j["attn_logit_softcapping"] = -1.0;
  EXPECT_THROW_MSG(parse_model_config(j, "g"), ConfigError,
                   "'attn_logit_softcapping' must be positive or null");
}

TEST(GenerationConfigTest, ParsesAndIsOptional) {
  kvq::test::TempDir dir;
  EXPECT_FALSE(load_generation_config(dir.path()).has_value());
  kvq::test::write_bytes(dir / "generation_config.json", R"({
    "bos_token_id": 1, "eos_token_id": [2, 5], "pad_token_id": 2, "do_sample": true,
    "temperature": 0.2, "top_p": 0.9, "top_k": 50, "max_new_tokens": 64,
    "transformers_version": "4.42.3"})");
  const auto g = load_generation_config(dir.path());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->eos_token_ids, (std::vector<std::int64_t>{2, 5}));
  EXPECT_EQ(g->bos_token_id, 1);
  EXPECT_EQ(g->pad_token_id, 2);
  EXPECT_TRUE(g->do_sample);
  EXPECT_EQ(g->temperature, 0.2);
  EXPECT_EQ(g->top_p, 0.9);
  EXPECT_EQ(g->top_k, 50);
  EXPECT_EQ(g->max_new_tokens, 64);
  EXPECT_EQ(g->raw["transformers_version"], "4.42.3");

  kvq::test::write_bytes(dir / "generation_config.json", R"({"eos_token_id": 2})");
  const auto h = load_generation_config(dir.path());
  EXPECT_EQ(h->eos_token_ids, std::vector<std::int64_t>{2});
  EXPECT_FALSE(h->do_sample);
  EXPECT_FALSE(h->temperature.has_value());

  kvq::test::write_bytes(dir / "generation_config.json", R"({"top_k": "many"})");
  EXPECT_THROW_MSG(load_generation_config(dir.path()), ConfigError, "generation_config.json",
                   "'top_k'");
}

}  // namespace
}  // namespace kvq::model
