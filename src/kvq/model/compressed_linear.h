// Linear weights that compressed-tensors saved quantized (llm-compressor's W8A8 / W4A16 / FP8
// checkpoints), dequantized at load, and the input-activation quantization their schemes run.
//
// A checkpoint whose quantization_config has config groups with `weights` stores each targeted
// Linear compressed, in its group's format (compressed-tensors 0.19.0 compressors):
//   float-quantized / int-quantized / naive-quantized: `weight` holds the codes (F8_E4M3 / I8),
//     `weight_scale` (+ `weight_zero_point` when asymmetric);
//   pack-quantized: `weight_packed` I32 [rows, ceil(cols · bits / 32)] (32 codes in `bits` words,
//     code + 2^(bits-1) at bit i · bits), `weight_shape` [2], `weight_scale`, and when asymmetric
//     (group / channel) `weight_zero_point` packed the same way along the rows.
// Dequantization is compressed-tensors' `dequantize`: w = (q - zp) · scale, each op in the scale's
// dtype. The scale is first cast to the dtype the model stores its weights in, as transformers'
// from_pretrained(dtype=...) casts the checkpoint's scales to the model dtype before
// decompressing: so `--weights f32` gives the weights transformers holds with dtype=float32 and
// `--weights bf16` those of dtype=bfloat16, and a storage dtype equal to the scales' (what
// `--weights auto` picks) gives compressed-tensors' decompression of the stored tensors bit for
// bit. Strategies: tensor, channel, group, block. Anything else (another format, tensor_group /
// NVFP4, activation-ordered g_idx, output activations, a sparsity_config) is refused by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/core/tensor.h"
#include "kvq/model/model_config.h"
#include "kvq/quant/quant_scheme.h"

namespace kvq::model {

// compressed-tensors' forward_quantize(module, input, "input", args) in a Linear's forward:
// fake quantization of the input with the checkpoint's static scale, or with a scale computed
// from the input itself (dynamic: per token or per tensor), in fp32 (kvq's activation dtype).
class InputQuantization {
 public:
  // `scale` / `zero_point`: the checkpoint's input_scale / input_zero_point for static args.
  InputQuantization(quant::QuantizationArgs args, std::optional<Tensor> scale,
                    std::optional<Tensor> zero_point);
  const quant::QuantizationArgs& args() const { return args_; }
  // x [batch, seq, cols] (the Linear's input as torch sees it), quantized in place. A dynamic
  // per-tensor scale spans the whole call, as it spans torch's batch.
  void apply(float* x, std::int64_t batch, std::int64_t seq, std::int64_t cols) const;

 private:
  quant::QuantizationArgs args_;
  std::optional<Tensor> scale_;       // F32, static only
  std::optional<Tensor> zero_point_;  // static asymmetric only
};

// One Linear the checkpoint stored quantized.
struct CompressedLinear {
  std::string module;                              // "model.layers.0.self_attn.q_proj"
  quant::QuantizationScheme scheme;                // its config group's scheme (format filled in)
  std::shared_ptr<const InputQuantization> input;  // null when inputs are not quantized
};

struct DecompressedCheckpoint {
  // The checkpoint with each compressed Linear's tensors replaced by its dense `.weight`
  // (in the storage dtype); other tensors as given.
  std::map<std::string, Tensor> tensors;
  std::vector<CompressedLinear> linears;  // by module name; empty for a float checkpoint
};

// Whether `name` is a parameter compressed-tensors saves for a quantized Linear
// (weight_packed, weight_scale, input_scale, ...; not `.weight` itself).
bool is_compressed_linear_tensor(std::string_view name);

// Dequantizes every compressed Linear of `checkpoint` into `storage` (kF32 or kBF16). A
// checkpoint without such tensors comes back unchanged. NotSupported naming the format (or
// strategy) and a tensor for what kvq does not read; FormatError naming the tensor for a missing
// parameter or one of the wrong dtype or shape; ConfigError when no config group targets a
// module holding compressed tensors.
DecompressedCheckpoint decompress_linear_weights(const ModelConfig& config,
                                                 const std::map<std::string, Tensor>& checkpoint,
                                                 DType storage, std::string_view source);

}  // namespace kvq::model
