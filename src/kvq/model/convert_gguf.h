// GGUF (llama or gemma3 architecture) -> Hugging Face directory (LlamaForCausalLM /
// Gemma3ForCausalLM).
//
// Writes config.json, generation_config.json, model.safetensors (HF tensor names, fp32 or bf16),
// tokenizer.json and tokenizer_config.json into a temporary sibling directory and renames it into
// place (io::AtomicDirectory), so an error never leaves a partial OUT_DIR.
//
// Weights are dequantized bit-exactly as gguf-py does (gguf_dequant.h), and the rows of q_proj /
// k_proj are put back in Hugging Face order: llama.cpp's converter permutes them for its rotary
// layout (rows viewed as [n_head, 2, head_dim/2] become [n_head, head_dim/2, 2]); transformers'
// GGUF loader reverses that, and so do we. Gemma 3 (convert_gguf_gemma3.cc) is not permuted, and
// its RMSNorm weights are stored as 1 + w (llama.cpp's converter adds the 1 that Gemma's
// forward adds): 1 is subtracted again in fp32, as transformers' GGUF loader does.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kvq/core/dtype.h"
#include "kvq/io/gguf.h"

namespace kvq::model {

struct ConvertOptions {
  DType dtype = DType::kF32;  // kF32 or kBF16
  bool force = false;         // replace a non-empty existing OUT_DIR
};

struct ConvertResult {
  std::filesystem::path out_dir;
  std::int64_t num_tensors = 0;
  std::int64_t num_parameters = 0;
  std::uint64_t safetensors_bytes = 0;
};

// InvalidArgument when OUT_DIR exists and is not an empty directory (without force) or dtype is
// not fp32/bf16; NotSupported for an architecture other than llama ("unsupported architecture X;
// supported: llama"), an unsupported tensor type or tokenizer; FormatError naming the file and
// tensor for missing or mis-shaped tensors.
ConvertResult convert_gguf_to_hf(const std::filesystem::path& gguf_path,
                                 const std::filesystem::path& out_dir,
                                 const ConvertOptions& options = {});

// The pieces, for tests and `kvq inspect`.
// config.json content for the GGUF's llama metadata (torch_dtype from `dtype`).
nlohmann::json gguf_llama_config_json(const io::GgufFile& gguf, DType dtype = DType::kF32);
// config.json content for a llama or gemma3 GGUF (NotSupported for other architectures).
nlohmann::json gguf_config_json(const io::GgufFile& gguf, DType dtype = DType::kF32);
nlohmann::json gguf_generation_config_json(const io::GgufFile& gguf);
// The Hugging Face name of a llama GGUF tensor ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"), or nullopt for a name with no HF counterpart.
// `architecture` is general.architecture ("llama", "gemma3"); nullopt for any other.
std::optional<std::string> gguf_to_hf_tensor_name(std::string_view gguf_name,
                                                  std::string_view architecture = "llama");
// Reorders the rows of a q/k projection in place from llama.cpp's rotary layout back to HF's:
// HF row h·D + j·D/2 + i  <-  GGUF row h·D + 2i + j   (D = head_dim, j ∈ {0, 1}, i < D/2).
void unpermute_rope_rows(float* data,  // [n_head * head_dim, cols]
                         std::int64_t n_head, std::int64_t head_dim, std::int64_t cols);

}  // namespace kvq::model
