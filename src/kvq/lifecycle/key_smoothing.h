// Key smoothing (kvq's extension; no compressed-tensors / llm-compressor equivalent): a
// calibrated per-channel rescaling and centering of the keys, with the inverse scaling on the
// queries, so that a low-bit K cache quantizes keys whose channels are balanced.
//
// Per attention module, kv head h and channel c (post-RoPE, post-q/k-norm states, before any
// transform), from one calibration pass over the dataset:
//   mu[h, c]  = E[k_c]                              (0 when center = false)
//   rk[h, c]  = sqrt(E[(k_c - mu_c)^2])             (the keys' spread around mu)
//   rq[h, c]  = sqrt(E[q_c^2]) over the query heads of kv head h's group
//   s[h, c]   = rk^a / rq^(1 - a)                   a = smoothing_strength (SmoothQuant's form)
// and then, online, in a query hook and a key hook registered BEFORE every other hook
// (transforms such as SpinQuant R3 included, so a Hadamard rotation mixes the balanced channels):
//   q'[.., c] = q[.., c] * s[g(head), c]            k'[h, .., c] = (k[h, .., c] - mu[h, c]) / s[h,
//   c]
// Why the attention is unchanged: q'·k' = q·k - q·mu. The scaling cancels in the dot product,
// and q·mu is the same for every key a query attends to, so softmax removes it (this needs an
// attention without logit soft-capping, as every architecture kvq runs; one that adds capping
// must refuse key smoothing). The K
// cache (packed or fake-quantized) holds k', and attention reads k' as it is: nothing is added
// back, so the packed cache stays bit-identical to fake quantization.
//
// Channels that never vary (rk or rq of 0, a padded head) keep s = 1. Measured on the default
// model (docs/results.md): with SpinQuant R2 + R3 and int4_g32_mse, KLD 0.040 -> 0.021.
// Checkpoints cannot carry it (transformers and vLLM have no such transform): saving a model
// with key smoothing is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvq/model/attention.h"
#include "kvq/quant/quant_config.h"

namespace kvq::model {
class CausalLM;
}

namespace kvq::lifecycle {

struct CalibrationSample;

// The smoothing of one attention module.
struct KeySmoothingParams {
  std::string module;         // "model.layers.0.self_attn"
  std::vector<float> scale;   // s  [kv_heads * head_dim], 1 until calibrated
  std::vector<float> center;  // mu [kv_heads * head_dim], 0 until calibrated (or center = false)
};

class KeySmoothing {
 public:
  // Registers the identity hooks on every attention module of `model`; call before any other
  // hook is registered (apply_quantization_config does). ConfigError for a strength outside
  // [0, 1].
  KeySmoothing(model::CausalLM& model, const quant::KeySmoothingArgs& args);
  KeySmoothing(const KeySmoothing&) = delete;
  KeySmoothing& operator=(const KeySmoothing&) = delete;

  const quant::KeySmoothingArgs& args() const { return args_; }
  bool calibrated() const { return calibrated_; }
  const std::vector<KeySmoothingParams>& params() const { return params_; }
  std::string summary() const;

  // One forward per sample with the hooks passing the states through unchanged while they
  // accumulate the statistics (float64), then sets s and mu. The caller disables quantization
  // for the pass (calibrate() does). InvalidArgument for an empty sample list.
  void calibrate(std::span<const CalibrationSample> samples, bool show_progress);

  struct Module;  // what one module's hooks share (key_smoothing.cc)

 private:
  model::CausalLM* model_;
  quant::KeySmoothingArgs args_;
  bool calibrated_ = false;
  std::vector<KeySmoothingParams> params_;
  std::vector<std::shared_ptr<Module>> modules_;  // [params_.size()], shared with the hooks
  std::vector<model::ScopedHook> hooks_;
};

}  // namespace kvq::lifecycle
