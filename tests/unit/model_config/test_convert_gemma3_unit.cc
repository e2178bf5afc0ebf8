// convert_gguf_to_hf on a hand-built tiny gemma3 GGUF (F32 tensors, SentencePiece vocabulary):
// config.json, HF names, norm weights stored as 1 + w, q/k rows not permuted, the SentencePiece-BPE
// tokenizer.json, and the refusals (missing / extra tensor, unknown tokenizer model).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../io_gguf/gguf_builder.h"
#include "kvq/core/error.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/convert_gguf.h"
#include "kvq/tokenizer/spm_bpe.h"
#include "kvq/tokenizer/tokenizer.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

namespace fs = std::filesystem;
using test::GgufBuilder;

constexpr std::uint32_t kU32 = 4, kI32 = 5, kF32v = 6, kBool = 7, kStr = 8, kArr = 9;

struct TinyTensor {
  std::string name;
  std::vector<std::uint64_t> ne;
};

struct TinyOptions {
  std::string tokenizer_model = "llama";
  std::string drop_tensor;       // leave this tensor out
  bool extra_tensor = false;     // add "blk.0.unknown.weight"
  bool space_prefix_key = true;  // write tokenizer.ggml.add_space_prefix = false (as Gemma)
};

// hidden 8, 2 heads of head_dim 4, 1 kv head, ffn 16, 1 layer; vocab of 10 SentencePiece
// tokens; tensor values = index.
fs::path write_tiny_gemma3(const fs::path& path, const TinyOptions& o = {}) {
  std::vector<TinyTensor> tensors = {
      {"token_embd.weight", {8, 10}},
      {"blk.0.attn_norm.weight", {8}},
      {"blk.0.attn_q.weight", {8, 8}},
      {"blk.0.attn_k.weight", {8, 4}},
      {"blk.0.attn_v.weight", {8, 4}},
      {"blk.0.attn_output.weight", {8, 8}},
      {"blk.0.attn_q_norm.weight", {4}},
      {"blk.0.attn_k_norm.weight", {4}},
      {"blk.0.post_attention_norm.weight", {8}},
      {"blk.0.ffn_norm.weight", {8}},
      {"blk.0.ffn_gate.weight", {8, 16}},
      {"blk.0.ffn_up.weight", {8, 16}},
      {"blk.0.ffn_down.weight", {16, 8}},
      {"blk.0.post_ffw_norm.weight", {8}},
      {"output_norm.weight", {8}},
  };
  if (!o.drop_tensor.empty()) {
    std::erase_if(tensors, [&](const TinyTensor& t) { return t.name == o.drop_tensor; });
  }
  if (o.extra_tensor) tensors.push_back({"blk.0.unknown.weight", {8}});
  const std::vector<std::string> tokens = {"<pad>",
                                           "<eos>",
                                           "<bos>",
                                           "<unk>",
                                           "<start_of_turn>",
                                           "\xe2\x96\x81"
                                           "a",
                                           "a",
                                           "b",
                                           "<0x41>",
                                           "  "};
  const std::vector<float> scores = {-1000, -1000, -1000, -1000, -1000, -1, -2, -3, 0, -1000};
  const std::vector<std::int32_t> types = {3, 3, 3, 2, 3, 1, 1, 1, 6, 4};
  GgufBuilder b;
  b.header(3, tensors.size(), o.space_prefix_key ? 22 : 21);
  b.key("general.architecture", kStr).str("gemma3");
  b.key("gemma3.block_count", kU32).put<std::uint32_t>(1);
  b.key("gemma3.embedding_length", kU32).put<std::uint32_t>(8);
  b.key("gemma3.feed_forward_length", kU32).put<std::uint32_t>(16);
  b.key("gemma3.attention.head_count", kU32).put<std::uint32_t>(2);
  b.key("gemma3.attention.head_count_kv", kU32).put<std::uint32_t>(1);
  b.key("gemma3.attention.key_length", kU32).put<std::uint32_t>(4);
  b.key("gemma3.attention.value_length", kU32).put<std::uint32_t>(4);
  b.key("gemma3.attention.layer_norm_rms_epsilon", kF32v).put<float>(1e-6f);
  b.key("gemma3.attention.sliding_window", kU32).put<std::uint32_t>(4);
  b.key("gemma3.rope.freq_base", kF32v).put<float>(1e6f);
  b.key("gemma3.context_length", kU32).put<std::uint32_t>(128);
  b.key("tokenizer.ggml.model", kStr).str(o.tokenizer_model);
  b.key("tokenizer.ggml.tokens", kArr).put<std::uint32_t>(kStr).put<std::uint64_t>(tokens.size());
  for (const auto& t : tokens) b.str(t);
  b.key("tokenizer.ggml.scores", kArr).put<std::uint32_t>(kF32v).put<std::uint64_t>(scores.size());
  for (float s : scores) b.put<float>(s);
  b.key("tokenizer.ggml.token_type", kArr)
      .put<std::uint32_t>(kI32)
      .put<std::uint64_t>(types.size());
  for (std::int32_t t : types) b.put<std::int32_t>(t);
  b.key("tokenizer.ggml.bos_token_id", kU32).put<std::uint32_t>(2);
  b.key("tokenizer.ggml.eos_token_id", kU32).put<std::uint32_t>(1);
  b.key("tokenizer.ggml.unknown_token_id", kU32).put<std::uint32_t>(3);
  b.key("tokenizer.ggml.padding_token_id", kU32).put<std::uint32_t>(0);
  b.key("tokenizer.ggml.add_bos_token", kBool).put<std::uint8_t>(1);
  if (o.space_prefix_key) b.key("tokenizer.ggml.add_space_prefix", kBool).put<std::uint8_t>(0);
  b.f32_tensors_of_index(tensors).save(path);
  return path;
}

TEST(ConvertGemma3, TensorNames) {
  EXPECT_EQ(gguf_to_hf_tensor_name("blk.3.ffn_norm.weight", "gemma3"),
            "model.layers.3.pre_feedforward_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_tensor_name("blk.3.post_attention_norm.weight", "gemma3"),
            "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_tensor_name("blk.0.attn_k_norm.weight", "gemma3"),
            "model.layers.0.self_attn.k_norm.weight");
  EXPECT_FALSE(gguf_to_hf_tensor_name("blk.0.attn_q.bias", "gemma3").has_value());
  EXPECT_FALSE(gguf_to_hf_tensor_name("blk.0.attn_q.weight", "gpt2").has_value());
}

TEST(ConvertGemma3, ConvertsTinyGemma3) {
  test::TempDir dir;
  const auto gguf = write_tiny_gemma3(dir / "tiny.gguf");
  const auto r = convert_gguf_to_hf(gguf, dir / "hf");
  EXPECT_EQ(r.num_tensors, 15);
  const auto cfg = io::read_json_file(dir / "hf" / "config.json");
  EXPECT_EQ(cfg["architectures"][0], "Gemma3ForCausalLM");
  EXPECT_EQ(cfg["model_type"], "gemma3_text");
  EXPECT_EQ(cfg["head_dim"], 4);
  EXPECT_EQ(cfg["num_key_value_heads"], 1);
  EXPECT_EQ(cfg["sliding_window"], 4);
  EXPECT_EQ(cfg["layer_types"], nlohmann::json::array({"sliding_attention"}));
  EXPECT_EQ(cfg["rope_parameters"]["full_attention"]["rope_theta"], 1e6);
  EXPECT_EQ(cfg["rope_parameters"]["sliding_attention"]["rope_theta"], 10000.0);
  EXPECT_EQ(cfg["query_pre_attn_scalar"], 256);
  EXPECT_TRUE(cfg["query_pre_attn_scalar"].is_number_integer());
  EXPECT_EQ(cfg["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  const auto m = io::SafetensorsModel::open(dir / "hf");
  // Norm weights: GGUF value (index) minus 1; q rows in GGUF order (not permuted).
  EXPECT_EQ(m.tensor("model.layers.0.pre_feedforward_layernorm.weight").to_f32_vector()[3], 2.0f);
  EXPECT_EQ(m.tensor("model.layers.0.self_attn.k_norm.weight").to_f32_vector()[0], -1.0f);
  EXPECT_EQ(m.tensor("model.norm.weight").to_f32_vector()[7], 6.0f);
  EXPECT_EQ(m.tensor("model.layers.0.self_attn.q_proj.weight").to_f32_vector()[1 * 8], 8.0f);
  EXPECT_EQ(m.tensor("model.layers.0.mlp.gate_proj.weight").to_f32_vector()[5], 5.0f);

  const auto tok_json = io::read_json_file(dir / "hf" / "tokenizer.json");
  EXPECT_EQ(tok_json["model"]["type"], std::string(tok::kSpmBpeModelType));
  EXPECT_EQ(tok_json["model"]["vocab"][9][0], "  ");     // spelled as in the GGUF
  EXPECT_EQ(tok_json["normalizer"]["type"], "Replace");  // add_space_prefix = false
  EXPECT_TRUE(tok_json["pre_tokenizer"].is_null());
  const auto tokenizer = tok::Tokenizer::from_dir(dir / "hf");
  EXPECT_EQ(tokenizer.bos_id(), 2);
  EXPECT_EQ(tokenizer.eos_id(), 1);
  EXPECT_EQ(tokenizer.add_bos_id(), 2);
  // " a" -> "▁a" (id 5); "ab" -> a, b; "A" -> byte fallback <0x41>; <start_of_turn> is special.
  EXPECT_EQ(tokenizer.encode(" aab<start_of_turn>A", true),
            (std::vector<std::int32_t>{2, 5, 6, 7, 4, 8}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(" aab<start_of_turn>A")), " aab<start_of_turn>A");
  // The user-defined "  " (type 4) is cut out of the raw text first, a plain (not special) token.
  EXPECT_EQ(tokenizer.encode("a  b"), (std::vector<std::int32_t>{6, 9, 7}));
  EXPECT_TRUE(tokenizer.is_special(4));
  EXPECT_FALSE(tokenizer.is_special(9));
}

TEST(ConvertGemma3, SpacePrefixDefaultsToLlamaCppsSpm) {
  // Without tokenizer.ggml.add_space_prefix llama.cpp puts " " before the text of an SPM
  // vocabulary: "a" -> "▁a".
  test::TempDir dir;
  const auto gguf = write_tiny_gemma3(dir / "tiny.gguf", {.space_prefix_key = false});
  convert_gguf_to_hf(gguf, dir / "hf");
  const auto tokenizer = tok::Tokenizer::from_dir(dir / "hf");
  EXPECT_EQ(tokenizer.encode("a"), (std::vector<std::int32_t>{5}));
  EXPECT_EQ(tokenizer.encode("<start_of_turn>a"), (std::vector<std::int32_t>{4, 5}));
}

TEST(ConvertGemma3, RefusesAMissingTensorNamingIt) {
  test::TempDir dir;
  const auto gguf =
      write_tiny_gemma3(dir / "tiny.gguf", {.drop_tensor = "blk.0.attn_q_norm.weight"});
  try {
    convert_gguf_to_hf(gguf, dir / "hf");
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tiny.gguf"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no tensor 'blk.0.attn_q_norm.weight'"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "hf"));
}

TEST(ConvertGemma3, RefusesAnUnknownTensorNamingIt) {
  test::TempDir dir;
  const auto gguf = write_tiny_gemma3(dir / "tiny.gguf", {.extra_tensor = true});
  try {
    convert_gguf_to_hf(gguf, dir / "hf");
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("'blk.0.unknown.weight' has no place in a Hugging Face "
                                         "Gemma 3 model"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConvertGemma3, RefusesAnUnknownTokenizerModel) {
  test::TempDir dir;
  const auto gguf = write_tiny_gemma3(dir / "tiny.gguf", {.tokenizer_model = "bert"});
  try {
    convert_gguf_to_hf(gguf, dir / "hf");
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model = 'bert' is not supported"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "hf"));
}

}  // namespace
}  // namespace kvq::model
