// kvq convert / kvq inspect on the real default GGUF (SmolLM2-135M-Instruct Q4_1).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "kvq/core/error.h"
#include "kvq/io/gguf.h"
#include "kvq/io/gguf_dequant.h"
#include "kvq/io/json_file.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/architecture.h"
#include "kvq/model/convert_gguf.h"
#include "kvq/model/model_config.h"
#include "support/test_paths.h"

namespace kvq::model {
namespace {

namespace fs = std::filesystem;

// One conversion shared by the suite (it writes ~540 MB).
class ConvertModel : public ::testing::Test {
 public:
  static void SetUpTestSuite() {
    if (!fs::exists(test::default_gguf())) return;
    dir_ = new test::TempDir();
    result_ = convert_gguf_to_hf(test::default_gguf(), dir_->path() / "smol");
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    KVQ_REQUIRE_DEFAULT_MODEL();
    ASSERT_NE(dir_, nullptr) << "missing " << test::default_gguf();
  }
  static fs::path out() { return dir_->path() / "smol"; }

  static inline test::TempDir* dir_ = nullptr;
  static inline ConvertResult result_;
};

// Runs `kvq inspect --json PATH` and returns the parsed output.
nlohmann::json run_inspect(const fs::path& path) {
  const std::string cmd = test::kvq_binary().string() + " inspect --json '" + path.string() + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  EXPECT_TRUE(pipe) << cmd;
  std::string output;
  std::array<char, 65536> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe.get())) > 0) output.append(buf.data(), n);
  const int status = pclose(pipe.release());
  EXPECT_EQ(status, 0) << cmd;
  return io::parse_json(output, "kvq inspect output");
}

void ConfigMatchesTheGgufMetadata() {
  const ModelConfig c = load_model_config(ConvertModel::out());
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
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(static_cast<float>(c.rms_norm_eps), 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{2});
  EXPECT_EQ(c.pad_token_id, 2);
  EXPECT_EQ(c.torch_dtype, "float32");
  const auto gen = load_generation_config(ConvertModel::out());
  ASSERT_TRUE(gen.has_value());
  EXPECT_EQ(gen->eos_token_ids, std::vector<std::int64_t>{2});
}

void EveryTensorPresentWithItsShape() {
  const auto m = io::SafetensorsModel::open(ConvertModel::out());
  const ModelConfig c = load_model_config(ConvertModel::out());
  std::set<std::string> expected;
  const auto expect = [&](const std::string& name, const Shape& shape) {
    expected.insert(name);
    ASSERT_TRUE(m.contains(name)) << name;
    EXPECT_EQ(m.info(name).shape, shape) << name;
    EXPECT_EQ(m.info(name).dtype, DType::kF32) << name;
  };
  expect("model.embed_tokens.weight", {49152, 576});
  expect("model.norm.weight", {576});
  for (int l = 0; l < 30; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect(p + "input_layernorm.weight", {576});
    expect(p + "post_attention_layernorm.weight", {576});
    expect(p + "self_attn.q_proj.weight", {576, 576});
    expect(p + "self_attn.k_proj.weight", {192, 576});
    expect(p + "self_attn.v_proj.weight", {192, 576});
    expect(p + "self_attn.o_proj.weight", {576, 576});
    expect(p + "mlp.gate_proj.weight", {1536, 576});
    expect(p + "mlp.up_proj.weight", {1536, 576});
    expect(p + "mlp.down_proj.weight", {576, 1536});
  }
  EXPECT_FALSE(m.contains("lm_head.weight"));  // tied
  EXPECT_EQ(m.names().size(), expected.size());
  EXPECT_EQ(ConvertModel::result_.num_tensors, 272);
  EXPECT_EQ(ConvertModel::result_.num_parameters, 134515008);
  std::map<std::string, Shape> shapes;
  for (const std::string& name : m.names()) shapes.emplace(name, m.info(name).shape);
  model::check_checkpoint_tensors(model::find_architecture(c, "converted"), c, shapes,
                                  ConvertModel::out().string());
}

void WeightsAreDequantizedAndQkRowsUnpermuted() {
  const io::GgufFile g = io::GgufFile::open(test::default_gguf());
  const auto m = io::SafetensorsModel::open(ConvertModel::out());
  // v_proj is not permuted: bit-identical to the dequantized GGUF tensor.
  const Tensor v_gguf = dequantize_tensor(g, g.tensor_info("blk.7.attn_v.weight"));
  const Tensor v_hf = m.tensor("model.layers.7.self_attn.v_proj.weight");
  EXPECT_EQ(std::memcmp(v_gguf.data(), v_hf.data(), v_hf.nbytes()), 0);
  // k_proj: HF row h·64 + j·32 + i is GGUF row h·64 + 2i + j.
  const Tensor k_gguf = dequantize_tensor(g, g.tensor_info("blk.7.attn_k.weight"));
  const Tensor k_hf = m.tensor("model.layers.7.self_attn.k_proj.weight");
  for (int h = 0; h < 3; ++h) {
    for (int j = 0; j < 2; ++j) {
      for (int i = 0; i < 32; ++i) {
        const float* hf_row = k_hf.f32() + (h * 64 + j * 32 + i) * 576;
        const float* gg_row = k_gguf.f32() + (h * 64 + 2 * i + j) * 576;
        ASSERT_EQ(std::memcmp(hf_row, gg_row, 576 * sizeof(float)), 0) << h << " " << j << " " << i;
      }
    }
  }
}

void TokenizerFilesAndRecordedInterop() {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(ConvertModel::out() / f)) << f;
  }
  const auto tok = io::read_json_file(ConvertModel::out() / "tokenizer.json");
  EXPECT_EQ(tok["model"]["type"], "BPE");
  EXPECT_EQ(tok["model"]["vocab"].size(), 49152u);
  EXPECT_EQ(tok["model"]["merges"].size(), 48900u);
  EXPECT_EQ(tok["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
  EXPECT_EQ(tok["added_tokens"].size(), 17u);  // the control tokens of SmolLM2
  const auto cfg = io::read_json_file(ConvertModel::out() / "tokenizer_config.json");
  EXPECT_EQ(cfg["eos_token"], "<|im_end|>");
  EXPECT_EQ(cfg["bos_token"], "<|im_start|>");
  EXPECT_TRUE(cfg["chat_template"].get<std::string>().find("<|im_start|>") != std::string::npos);

  // Written by tools/reference/check_convert_interop.py against transformers.
  const auto interop = io::read_json_file(test::test_data_dir() / "convert" / "interop.json");
  EXPECT_TRUE(interop["pass"].get<bool>()) << interop["failures"].dump();
  EXPECT_EQ(interop["weights_max_abs_diff"].get<double>(), 0.0);
  for (const auto& p : interop["prompts"]) {
    EXPECT_LE(p["logits_max_abs_diff"].get<double>(), 1e-4) << p["prompt"];
    EXPECT_TRUE(p["ids_equal_llama_cpp_semantics"].get<bool>()) << p["prompt"];
  }
}

void RefusesANonEmptyOutDirWithoutForce() {
  EXPECT_THROW(convert_gguf_to_hf(test::default_gguf(), ConvertModel::out()), InvalidArgument);
  EXPECT_TRUE(fs::exists(ConvertModel::out() / "model.safetensors"));  // untouched
}

void InspectListsEveryTensorOfBoth() {
  const io::GgufFile g = io::GgufFile::open(test::default_gguf());
  const auto gg = run_inspect(test::default_gguf());
  EXPECT_EQ(gg["format"], "gguf");
  ASSERT_EQ(gg["tensors"].size(), g.tensors().size());
  for (std::size_t i = 0; i < g.tensors().size(); ++i) {
    EXPECT_EQ(gg["tensors"][i]["name"], g.tensors()[i].name);
  }
  EXPECT_EQ(gg["config"]["num_key_value_heads"], 3);
  EXPECT_EQ(gg["parameters"], 134515008);

  const auto hf = run_inspect(ConvertModel::out());
  EXPECT_EQ(hf["format"], "huggingface");
  const auto m = io::SafetensorsModel::open(ConvertModel::out());
  ASSERT_EQ(hf["tensors"].size(), m.names().size());
  for (const auto& t : hf["tensors"]) EXPECT_TRUE(m.contains(t["name"].get<std::string>()));
  EXPECT_EQ(hf["config"]["head_dim"], 64);
  EXPECT_FALSE(hf.contains("quantization_config"));
}

// One test (one process under ctest): the conversion runs once.
TEST_F(ConvertModel, ConvertsAndInspectsTheDefaultGguf) {
  {
    SCOPED_TRACE("ConfigMatchesTheGgufMetadata");
    ConfigMatchesTheGgufMetadata();
  }
  {
    SCOPED_TRACE("EveryTensorPresentWithItsShape");
    EveryTensorPresentWithItsShape();
  }
  {
    SCOPED_TRACE("WeightsAreDequantizedAndQkRowsUnpermuted");
    WeightsAreDequantizedAndQkRowsUnpermuted();
  }
  {
    SCOPED_TRACE("TokenizerFilesAndRecordedInterop");
    TokenizerFilesAndRecordedInterop();
  }
  {
    SCOPED_TRACE("RefusesANonEmptyOutDirWithoutForce");
    RefusesANonEmptyOutDirWithoutForce();
  }
  {
    SCOPED_TRACE("InspectListsEveryTensorOfBoth");
    InspectListsEveryTensorOfBoth();
  }
}

}  // namespace
}  // namespace kvq::model
