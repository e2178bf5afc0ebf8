// LoadOptions::weights = kBF16 on the tiny model of every architecture row (gqa: untied lm_head;
// llama3_tied and qwen2: lm_head tied to the embedding; qwen2's q/k/v biases and qwen3's q/k norms
// stay fp32 like the other vectors): what is stored in bf16, and that the bf16 model computes what
// the fp32 model computes on the bf16-rounded weights. The kernels widen each weight exactly and do
// the fp32 arithmetic, and on these shapes they take the same routes as the fp32 kernels (GEMV rows
// in the same order; one widened block per sgemm call, the whole matrix), so the logits are
// BIT-IDENTICAL, prefill and decode, with any KV cache and with hooks (Gemma 3: see
// exact_against_rounded).
#include "kvq/core/dtype.h"
#include "kvq/model/attention.h"
#include "tiny_model.h"

namespace kvq::model::test {
namespace {

const std::vector<std::int32_t> kPrompt = {5, 17, 200, 3, 99, 42, 7, 128, 64, 1, 250, 33};

using test::load_weights;

// Every matrix (Linear weights, embedding) rounded to bf16 and widened back to fp32; norm
// weights and biases (vectors) as they are.
std::map<std::string, Tensor> rounded_weights(const std::filesystem::path& dir) {
  std::map<std::string, Tensor> out;
  for (const auto& [name, t] : load_weights(dir)) {
    if (t.ndim() != 2) {
      out.emplace(name, t);
      continue;
    }
    std::vector<float> v = t.to_f32_vector();
    for (float& x : v) x = round_to_bf16(x);
    out.emplace(name, Tensor::from_f32(t.shape(), v));
  }
  return out;
}

class Bf16Weights : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16Weights, StoresLinearAndEmbeddingWeightsInBf16) {
  const auto f32 = CausalLM::load(tiny_variant_dir(GetParam()));
  const auto bf16 = CausalLM::load(tiny_variant_dir(GetParam()), LoadOptions{DType::kBF16});
  EXPECT_EQ(f32->weight_dtype(), DType::kF32);
  EXPECT_EQ(bf16->weight_dtype(), DType::kBF16);
  std::size_t bytes_f32 = 0, bytes_bf16 = 0;
  for (Module* m : bf16->named_modules()) {
    if (!m->has_weight()) continue;
    const Tensor& w = m->weight();
    const Tensor& w32 = f32->find_module(m->name())->weight();
    EXPECT_EQ(w.shape(), w32.shape()) << m->name();
    if (m->is_instance_of("Linear") || m->is_instance_of("Embedding")) {
      EXPECT_EQ(w.dtype(), DType::kBF16) << m->name();
      // Round to nearest even, as torch's .to(torch.bfloat16).
      const auto* bits = static_cast<const std::uint16_t*>(w.data());
      for (std::int64_t i = 0; i < w.numel(); i += 97) {
        ASSERT_EQ(bits[i], f32_to_bf16(w32.f32()[i])) << m->name() << "[" << i << "]";
      }
    } else {
      EXPECT_EQ(w.dtype(), DType::kF32) << m->name();
    }
    if (m->has_bias()) {
      EXPECT_EQ(m->bias().dtype(), DType::kF32) << m->name();
    }
    if (m->name() == "lm_head" && f32->config().tie_word_embeddings) continue;  // shared
    bytes_f32 += w32.nbytes();
    bytes_bf16 += w.nbytes();
  }
  if (bf16->config().tie_word_embeddings) {
    EXPECT_EQ(bf16->find_module("lm_head")->weight().data(),
              bf16->find_module("model.embed_tokens")->weight().data());
  }
  // Everything but the norm vectors halves.
  EXPECT_LT(static_cast<double>(bytes_bf16), 0.51 * static_cast<double>(bytes_f32));
}

// Gemma's embedding normalizer sqrt(hidden) is cast to the table's dtype (as transformers does:
// bf16(sqrt(48)) = 6.9375 against 6.9282 in fp32), so its bf16 model is not the fp32 model on
// rounded weights: there the logits agree to the normalizer's 0.13 % instead of bit for bit.
bool exact_against_rounded(const CausalLM& m) { return !m.architecture().forward.scale_embeddings; }
void expect_same(const CausalLM& m, const Tensor& a, const Tensor& b, const std::string& what) {
  if (exact_against_rounded(m)) {
    EXPECT_TRUE(bit_identical(a, b)) << what << ", max diff " << max_abs_diff(a, b);
  } else {
    EXPECT_LT(max_abs_diff(a, b), 0.1f) << what;
  }
}

TEST_P(Bf16Weights, EmbeddingScaleIsCastToTheTablesDtype) {
  const auto f32 = CausalLM::load(tiny_variant_dir(GetParam()));
  const auto bf16 = CausalLM::load(tiny_variant_dir(GetParam()), LoadOptions{DType::kBF16});
  if (!f32->architecture().forward.scale_embeddings) {
    EXPECT_EQ(f32->embedding_scale(), 1.0f);
    EXPECT_EQ(bf16->embedding_scale(), 1.0f);
    return;
  }
  const auto s = static_cast<float>(std::sqrt(static_cast<double>(f32->config().hidden_size)));
  EXPECT_EQ(f32->embedding_scale(), s);
  EXPECT_EQ(bf16->embedding_scale(), round_to_bf16(s));
  EXPECT_NE(round_to_bf16(s), s);  // the tiny model's hidden size makes the cast visible
}

TEST_P(Bf16Weights, ComputesTheFp32ModelOnRoundedWeights) {
  const auto bf16 = CausalLM::load(tiny_variant_dir(GetParam()), LoadOptions{DType::kBF16});
  const auto ref =
      CausalLM::from_weights(bf16->config(), rounded_weights(tiny_variant_dir(GetParam())));
  const std::int64_t vocab = bf16->config().vocab_size;
  for (KvFormat format : {KvFormat::kF32, KvFormat::kBF16, KvFormat::kNVFP4}) {
    KvCache a = bf16->make_cache(1, 32, format);
    KvCache b = ref->make_cache(1, 32, format);
    const Tensor pa = bf16->forward(std::span(kPrompt).first(9), a, LogitsMode::kAll);
    const Tensor pb = ref->forward(std::span(kPrompt).first(9), b, LogitsMode::kAll);
    expect_same(*bf16, pa, pb, "prefill");
    for (std::size_t i = 9; i < kPrompt.size(); ++i) {
      const std::int32_t t[1] = {kPrompt[i]};
      const Tensor da = bf16->forward(t, a, LogitsMode::kLast);
      const Tensor db = ref->forward(t, b, LogitsMode::kLast);
      expect_same(*bf16, da, db, "decode " + std::to_string(i));
      EXPECT_EQ(da.numel(), vocab);
    }
  }
}

// Hooks see and may rewrite the states of a bf16 model as of an fp32 one.
TEST_P(Bf16Weights, HooksFireAndRewriteStates) {
  const auto bf16 = CausalLM::load(tiny_variant_dir(GetParam()), LoadOptions{DType::kBF16});
  const auto ref =
      CausalLM::from_weights(bf16->config(), rounded_weights(tiny_variant_dir(GetParam())));
  int calls = 0;
  auto halve_keys = [&calls](AttentionModule&, StatesView s) {
    ++calls;
    for (std::int64_t i = 0; i < s.numel(); ++i) s.data[i] *= 0.5f;
  };
  ScopedHook ha(bf16->attention(1).register_key_hook(halve_keys));
  ScopedHook hb(ref->attention(1).register_key_hook(halve_keys));
  const Tensor a = bf16->forward(kPrompt, LogitsMode::kAll);
  const Tensor b = ref->forward(kPrompt, LogitsMode::kAll);
  EXPECT_EQ(calls, 2);
  expect_same(*bf16, a, b, "hooked");
  const auto plain = CausalLM::load(tiny_variant_dir(GetParam()), LoadOptions{DType::kBF16});
  EXPECT_GT(max_abs_diff(a, plain->forward(kPrompt, LogitsMode::kAll)), 1e-4f);  // it did act
}

INSTANTIATE_TEST_SUITE_P(Tiny, Bf16Weights, ::testing::ValuesIn(tiny_variants()));

TEST(WeightDtype, ParsesTheFlagAndRejectsOthers) {
  EXPECT_EQ(parse_weight_dtype("f32"), DType::kF32);
  EXPECT_EQ(parse_weight_dtype("bf16"), DType::kBF16);
  EXPECT_EQ(weight_dtype_label(DType::kBF16), "bf16");
  EXPECT_THROW(parse_weight_dtype("fp16"), InvalidArgument);
  EXPECT_THROW(CausalLM::load(tiny_dir("gqa"), LoadOptions{DType::kF16}), InvalidArgument);
}

// A copy of the tiny model with every matrix stored as BF16 (`keep_f32`: one matrix left F32).
std::filesystem::path write_bf16_copy(const kvq::test::TempDir& dir, const std::string& keep_f32) {
  std::filesystem::copy_file(tiny_dir("gqa") / "config.json", dir.path() / "config.json");
  io::SafetensorsWriter w;
  for (const auto& [name, t] : load_weights(tiny_dir("gqa"))) {
    if (t.ndim() != 2 || name == keep_f32) {
      w.add(name, t);
      continue;
    }
    Tensor b(DType::kBF16, t.shape());
    const std::vector<float> v = t.to_f32_vector();
    auto* bits = static_cast<std::uint16_t*>(b.mutable_data());
    for (std::size_t i = 0; i < v.size(); ++i) bits[i] = f32_to_bf16(v[i]);
    w.add(name, std::move(b));
  }
  w.write(dir.path() / "model.safetensors");
  return dir.path();
}

// --weights auto: a bf16 checkpoint keeps bf16 storage (the same logits as widening it to fp32,
// at half the memory), anything else loads as fp32 as before.
TEST(WeightDtype, AutoTakesTheCheckpointsDtype) {
  kvq::test::TempDir bf16_dir, mixed_dir;
  const auto bf16 = write_bf16_copy(bf16_dir, "");
  const auto mixed = write_bf16_copy(mixed_dir, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(resolve_weight_dtype("auto", tiny_dir("gqa")), DType::kF32);
  EXPECT_EQ(resolve_weight_dtype("auto", bf16), DType::kBF16);
  EXPECT_EQ(resolve_weight_dtype("auto", mixed), DType::kF32);  // one F32 matrix: fp32
  EXPECT_EQ(resolve_weight_dtype("f32", bf16), DType::kF32);
  EXPECT_EQ(resolve_weight_dtype("bf16", tiny_dir("gqa")), DType::kBF16);
  EXPECT_THROW(resolve_weight_dtype("fp16", bf16), InvalidArgument);
  EXPECT_EQ(resolve_weight_dtype("auto", bf16 / "missing"), DType::kF32);  // the load says why

  const auto as_bf16 = CausalLM::load(bf16, LoadOptions{resolve_weight_dtype("auto", bf16)});
  const auto as_f32 = CausalLM::load(bf16, LoadOptions{DType::kF32});
  EXPECT_EQ(as_bf16->find_module("model.layers.1.self_attn.k_proj")->weight().dtype(),
            DType::kBF16);
  EXPECT_EQ(as_f32->find_module("model.layers.1.self_attn.k_proj")->weight().dtype(), DType::kF32);
  KvCache a = as_bf16->make_cache(1, 16), b = as_f32->make_cache(1, 16);
  EXPECT_TRUE(bit_identical(as_bf16->forward(kPrompt, a, LogitsMode::kAll),
                            as_f32->forward(kPrompt, b, LogitsMode::kAll)));
}

}  // namespace
}  // namespace kvq::model::test
