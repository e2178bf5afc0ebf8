// convert_gguf_to_hf on a hand-built tiny llama GGUF (F32 tensors): names, shapes, the q/k row
// un-permutation, refusals, and no partial output on error.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "../io_gguf/gguf_builder.h"
#include "kvq/core/error.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/convert_gguf.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

namespace fs = std::filesystem;
using test::GgufBuilder;

constexpr std::uint32_t kU32 = 4, kF32v = 6, kBool = 7, kStr = 8, kArr = 9, kI32 = 5;

struct TinyTensor {
  std::string name;
  std::vector<std::uint64_t> ne;
};

// hidden 8, 2 heads (head_dim 4), 1 kv head, ffn 16, 1 layer, vocab 4; tensor values = index.
fs::path write_tiny_llama(const fs::path& path, const std::string& arch = "llama") {
  const std::vector<TinyTensor> tensors = {
      {"token_embd.weight", {8, 4}},    {"blk.0.attn_norm.weight", {8}},
      {"blk.0.attn_q.weight", {8, 8}},  {"blk.0.attn_k.weight", {8, 4}},
      {"blk.0.attn_v.weight", {8, 4}},  {"blk.0.attn_output.weight", {8, 8}},
      {"blk.0.ffn_norm.weight", {8}},   {"blk.0.ffn_gate.weight", {8, 16}},
      {"blk.0.ffn_up.weight", {8, 16}}, {"blk.0.ffn_down.weight", {16, 8}},
      {"output_norm.weight", {8}},
  };
  GgufBuilder b;
  b.header(3, tensors.size(), 14);
  b.key("general.architecture", kStr).str(arch);
  b.key("llama.block_count", kU32).put<std::uint32_t>(1);
  b.key("llama.embedding_length", kU32).put<std::uint32_t>(8);
  b.key("llama.feed_forward_length", kU32).put<std::uint32_t>(16);
  b.key("llama.attention.head_count", kU32).put<std::uint32_t>(2);
  b.key("llama.attention.head_count_kv", kU32).put<std::uint32_t>(1);
  b.key("llama.attention.layer_norm_rms_epsilon", kF32v).put<float>(1e-6f);
  b.key("llama.context_length", kU32).put<std::uint32_t>(128);
  b.key("tokenizer.ggml.model", kStr).str("gpt2");
  b.key("tokenizer.ggml.pre", kStr).str("smollm");
  b.key("tokenizer.ggml.tokens", kArr).put<std::uint32_t>(kStr).put<std::uint64_t>(4);
  b.str("<s>").str("a").str("b").str("ab");
  b.key("tokenizer.ggml.token_type", kArr).put<std::uint32_t>(kI32).put<std::uint64_t>(4);
  b.put<std::int32_t>(3).put<std::int32_t>(1).put<std::int32_t>(1).put<std::int32_t>(1);
  b.key("tokenizer.ggml.merges", kArr).put<std::uint32_t>(kStr).put<std::uint64_t>(1).str("a b");
  b.key("tokenizer.ggml.add_bos_token", kBool).put<std::uint8_t>(0);
  b.f32_tensors_of_index(tensors).save(path);
  return path;
}

TEST(ConvertGguf, TensorNames) {
  EXPECT_EQ(gguf_to_hf_tensor_name("blk.12.attn_q.weight"),
            "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(gguf_to_hf_tensor_name("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(gguf_to_hf_tensor_name("output.weight"), "lm_head.weight");
  EXPECT_FALSE(gguf_to_hf_tensor_name("rope_freqs.weight").has_value());
}

TEST(ConvertGguf, UnpermuteMatchesTransformersReshape) {
  // transformers: w.reshape(n_head, dim, 2, cols).swapaxes(2, 1) with dim = head_dim / 2.
  const int n_head = 3, head_dim = 8, cols = 2, dim = head_dim / 2;
  std::vector<float> w(n_head * head_dim * cols);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
  std::vector<float> want(w.size());
  for (int h = 0; h < n_head; ++h)
    for (int a = 0; a < 2; ++a)  // output axis order (n_head, 2, dim, cols)
      for (int d = 0; d < dim; ++d)
        for (int c = 0; c < cols; ++c)
          want[((h * 2 + a) * dim + d) * cols + c] = w[((h * dim + d) * 2 + a) * cols + c];
  unpermute_rope_rows(w.data(), n_head, head_dim, cols);
  EXPECT_EQ(w, want);
}

TEST(ConvertGguf, ConvertsTinyLlama) {
  test::TempDir dir;
  const auto gguf = write_tiny_llama(dir / "tiny.gguf");
  const auto r = convert_gguf_to_hf(gguf, dir / "hf");
  EXPECT_EQ(r.num_tensors, 11);
  const auto cfg = io::read_json_file(dir / "hf" / "config.json");
  EXPECT_EQ(cfg["head_dim"], 4);
  EXPECT_EQ(cfg["num_key_value_heads"], 1);
  EXPECT_EQ(cfg["rope_theta"], 10000.0);  // GGUF default when freq_base is absent
  EXPECT_EQ(cfg["rms_norm_eps"], 1e-6);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  const auto m = io::SafetensorsModel::open(dir / "hf");
  EXPECT_EQ(m.info("model.layers.0.mlp.down_proj.weight").shape, (Shape{8, 16}));
  // q_proj [8, 8]: HF row h·4 + j·2 + i = GGUF row h·4 + 2i + j; GGUF element value = index.
  const Tensor q = m.tensor("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q.f32()[1 * 8], 2 * 8.0f);  // HF row 1 (h0, j0, i1) <- GGUF row 2
  EXPECT_EQ(q.f32()[2 * 8], 1 * 8.0f);  // HF row 2 (h0, j1, i0) <- GGUF row 1
  const auto tok = io::read_json_file(dir / "hf" / "tokenizer.json");
  EXPECT_EQ(tok["model"]["merges"][0], "a b");
  EXPECT_EQ(tok["added_tokens"][0]["content"], "<s>");
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_TRUE(e.path().filename() == "tiny.gguf" || e.path().filename() == "hf")
        << "stray " << e.path();
  }

  // A non-empty OUT_DIR is refused without --force and replaced with it.
  EXPECT_THROW(convert_gguf_to_hf(gguf, dir / "hf"), InvalidArgument);
  ConvertOptions force;
  force.force = true;
  force.dtype = DType::kBF16;
  convert_gguf_to_hf(gguf, dir / "hf", force);
  EXPECT_EQ(io::SafetensorsModel::open(dir / "hf").info("model.norm.weight").dtype, DType::kBF16);
}

TEST(ConvertGguf, RefusesOtherArchitecturesWithoutOutput) {
  test::TempDir dir;
  const auto gguf = write_tiny_llama(dir / "tiny.gguf", "gpt2");
  try {
    convert_gguf_to_hf(gguf, dir / "hf");
    FAIL();
  } catch (const NotSupported& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported architecture gpt2; supported: llama"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(dir / "hf"));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);  // only tiny.gguf: no temp directory left behind
}

}  // namespace
}  // namespace kvq::model
