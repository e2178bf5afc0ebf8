// CausalLM::load: config.json + safetensors weights from a Hugging Face model directory.
// (A separate file so code that only uses from_weights does not link the safetensors reader.)
#include <set>
#include <system_error>

#include "kvq/core/error.h"
#include "kvq/io/safetensors.h"
#include "kvq/model/causal_lm.h"
#include "kvq/model/model_config.h"

namespace kvq::model {

std::unique_ptr<CausalLM> CausalLM::load(const std::filesystem::path& model_dir,
                                         const LoadOptions& options) {
  const model::ModelConfig config = model::load_model_config(model_dir);
  const io::SafetensorsModel st = io::SafetensorsModel::open(model_dir);
  std::map<std::string, Tensor> weights;
  for (const std::string& name : st.names()) weights.emplace(name, st.tensor(name));
  return from_weights(config, weights, model_dir.string(), options);
}

DType resolve_weight_dtype(std::string_view name, const std::filesystem::path& model_dir) {
  if (name != "auto") return parse_weight_dtype(name);
  // Only a look at the headers: a missing or broken checkpoint is left to the load, which names
  // the problem as it always has.
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) return DType::kF32;
  try {
    const io::SafetensorsModel st = io::SafetensorsModel::open(model_dir);
    // A quantized Linear (compressed-tensors) dequantizes to its weight_scale's dtype:
    // that dtype stands for its weight, so a bf16 W8A8 checkpoint stays bf16 and its weights
    // are compressed-tensors' decompression bit for bit (model/compressed_linear.h).
    std::set<std::string> quantized;
    for (const std::string& tensor : st.names())
      if (tensor.ends_with(".weight_scale")) quantized.insert(tensor.substr(0, tensor.size() - 6));
    bool any = false;
    for (const std::string& tensor : st.names()) {
      const io::TensorInfo& info = st.info(tensor);
      const bool scale = tensor.ends_with(".weight_scale");
      if (!scale && (info.shape.size() != 2 || !dtype_is_float(info.dtype) ||
                     !tensor.ends_with(".weight") || quantized.contains(tensor)))
        continue;
      if (info.dtype != DType::kBF16) return DType::kF32;
      any = true;
    }
    return any ? DType::kBF16 : DType::kF32;
  } catch (const Error&) {
    return DType::kF32;
  }
}

}  // namespace kvq::model
