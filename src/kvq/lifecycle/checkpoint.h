// compressed-tensors checkpoints of attention / KV-cache quantization.
//
// save_pretrained writes, atomically (io::AtomicDirectory):
//  - model.safetensors: every tensor of the source model directory in its stored dtype (stale
//    q/k/v scales and zero points of a quantized source are replaced), plus
//    `<attn>.{q,k,v}_scale` in the model dtype and `<attn>.{q,k,v}_zero_point` exactly where the
//    lifecycle registered them (as compressed-tensors 0.19.0 saves module parameters);
//  - config.json: the source config with `quantization_config` = checkpoint_config_json() (as
//    ModelCompressor.update_config writes it: version "0.19.0", quant_method, sparsity_config {},
//    transform_config {}, format "dense", status "compressed"), keys sorted;
//  - tokenizer files and generation_config.json copied from the source.
// A source whose Linear weights compressed-tensors stored quantized (a W8A8 / W4A16 / FP8
// checkpoint, dequantized by the load: model/compressed_linear.h) keeps them: its tensors are
// copied as stored, and its config groups (verbatim), top-level format and ignore list stay in
// the quantization_config next to the lifecycle's kv_cache_scheme and attention groups.
// load_quantized restores the quantization of a checkpoint saved by kvq or by llm-compressor
// (the config groups of dequantized Linear weights are the model's, not the lifecycle's).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>

#include "kvq/lifecycle/apply.h"
#include "kvq/model/causal_lm.h"

namespace kvq::lifecycle {

// The quantization_config a save writes: config_from_model() as compressed-tensors 0.19.0's
// save path leaves it — ModelCompressor.compress_model sets quantization_status "compressed"
// (even for attention-only models; verified on a checkpoint llmcompressor 0.14.0.1 saved, see
// tests/data/lifecycle/lc_quantization_config_*.json) and infer_and_set_per_module_
// quantization_format gives every config group format "dense".
quant::QuantizationConfig checkpoint_config(const QuantizationLifecycle& lifecycle);
// config.json's "quantization_config" object for it (dump with quant::dump_sorted).
quant::Json checkpoint_config_json(const QuantizationLifecycle& lifecycle);

// InvalidArgument when a scale is not calibrated (nothing is written then). `write_extra`, when
// given, writes more files (a calibration report) into the directory before it is committed, so
// they appear together with the checkpoint or not at all. An `out_dir` that exists when the
// checkpoint is moved into place is replaced only with `overwrite` (else IoError, untouched).
void save_pretrained(const QuantizationLifecycle& lifecycle,
                     const std::filesystem::path& source_model_dir,
                     const std::filesystem::path& out_dir,
                     const std::function<void(const std::filesystem::path& dir)>& write_extra = {},
                     bool overwrite = false);

// Applies model_dir/config.json's quantization_config to `model` (which must be the model of
// that directory) and loads the q/k/v scales / zero points from its safetensors.
// ConfigError when config.json has no quantization_config; FormatError naming the tensor when a
// scale is missing, has the wrong shape or dtype, is not finite and > 0, or when the file holds
// q/k/v scales for modules the config does not quantize.
std::unique_ptr<QuantizationLifecycle> load_quantized(model::CausalLM& model,
                                                      const std::filesystem::path& model_dir);

// A model and its quantization loaded together (lifecycle is null for an unquantized dir).
// `options` picks the weight dtype (model::LoadOptions); the quantization does not depend on it.
struct QuantizedModel {
  std::unique_ptr<model::CausalLM> model;
  std::unique_ptr<QuantizationLifecycle> lifecycle;  // destroyed before the model
  static QuantizedModel load(const std::filesystem::path& model_dir,
                             const model::LoadOptions& options = {});
};

}  // namespace kvq::lifecycle
