// Transforms (compressed-tensors' apply_transform_config) on a CausalLM: Hadamard rotations that
// spread the outliers of q / k / v across a head before they are observed and quantized.
//
// What kvq runs of a TransformConfig, per TransformArgs location:
//   q_attn, k_cache  online: a query hook / a key hook on each targeted attention module that
//                    rotates every head (size = the scheme's head_dim, or the module's when unset;
//                    block-diagonal when smaller), registered BEFORE the quantization hooks, so
//                    observers, fake quantization and the packed cache all see rotated states
//                    (compressed-tensors registers transforms first too). Q and K get the same
//                    orthonormal H, so q·k and the attention are unchanged up to rounding.
//                    SpinQuant R3.
//   weight_output    offline: W ← Hᵀ·W per block of rows of a Linear (v_proj: the values, and so
//                    the V cache, come out rotated per head). SpinQuant R2 with ...
//   weight_input     offline: W ← W·H per block of columns (o_proj with inverse: undoes it).
// The fused rotations are computed in float64 and rounded once to the model's weight dtype.
// Transform type "hadamard" only: H is Sylvester's Hadamard matrix / sqrt(size), size a power of
// two. Everything else is refused with NotSupported naming the group, the location or type and
// why — randomize / random-hadamard / random-matrix (seeded torch randomness kvq does not
// reproduce), input / output locations (online Linear rotations: SpinQuant R4), offline
// rotations of embeddings or lm_head and rotations spanning the hidden size (SpinQuant R1, which
// also needs its norms fused into the next Linear layers) — never ignored.
//
// A checkpoint's weights already hold its offline rotations, so loading one applies the online
// transforms only (`fuse_offline = false`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvq/model/attention.h"
#include "kvq/quant/transform_config.h"

namespace kvq::model {
class CausalLM;
}

namespace kvq::lifecycle {

// The transforms applied to one model. Destroying it removes the hooks and puts the original
// Linear weights back (bit for bit), so one model can evaluate schemes one after another.
class AppliedTransforms {
 public:
  AppliedTransforms() = default;
  ~AppliedTransforms();
  AppliedTransforms(const AppliedTransforms&) = delete;
  AppliedTransforms& operator=(const AppliedTransforms&) = delete;

  // "R3: q_attn on 30 attention modules (hadamard 64)", one line per applied TransformArgs.
  const std::vector<std::string>& summary() const { return summary_; }
  // Linear modules whose weights now hold a fused rotation.
  const std::vector<std::string>& fused_modules() const { return fused_names_; }
  bool empty() const { return hooks_.empty() && fused_names_.empty(); }

 private:
  friend std::unique_ptr<AppliedTransforms> apply_transforms(model::CausalLM&,
                                                             const quant::TransformConfig&, bool);
  model::CausalLM* model_ = nullptr;
  std::vector<model::ScopedHook> hooks_;
  std::vector<std::string> fused_names_;
  std::vector<Tensor> originals_;  // [fused_names_.size()]
  std::vector<std::string> summary_;
};

// Applies `config` (an empty one applies nothing). ConfigError for targets that match no module
// or sizes that do not divide the dimension they rotate; NotSupported as above.
std::unique_ptr<AppliedTransforms> apply_transforms(model::CausalLM& model,
                                                    const quant::TransformConfig& config,
                                                    bool fuse_offline = true);

}  // namespace kvq::lifecycle
