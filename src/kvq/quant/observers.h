// llm-compressor 0.14.0.1 observers (`observers/{base,min_max,mse,mse_quant,helpers}.py`).
//
// What the installed version does (and kvq mirrors): an observer only ACCUMULATES statistics
// (min_vals / max_vals, in the observed tensor's dtype) on every update(); scale and zero point
// are computed from the statistics by qparams(), which also clears them. llm-compressor calls
// it once per sequential epoch (`on_sequential_epoch_end` -> update_qparams for input / output /
// q / k / v), i.e. after ALL calibration batches went through the layer; the basic pipeline has
// one epoch for the whole model. So with `minmax` the scale is the moving average over all
// batches of the epoch, with `static_minmax` the running extrema, with `memoryless_minmax` the
// last batch only. (PR-era code computed qparams on every batch; 0.14 does not.)
//
// Flattening (flatten_for_calibration) to (num_observations, *qparam_shape, group_size), then
// reduction over dims (0, -1):
//   q / k / v  [B, heads, S, D]:  tensor -> qparams [1]; attn_head -> [heads, 1, 1];
//              token / channel / group / tensor_group / block -> InvalidArgument (reference text)
//   input / output [..., hidden]: tensor -> [1]; token -> unchanged; group / tensor_group ->
//              [tokens, hidden/g, g]; channel / block / attn_head -> InvalidArgument
//   weight [rows, cols]: tensor -> [1]; channel -> [rows, 1]; group -> [rows, cols/g];
//              block -> [rows/bh, cols/bw] (zero padded); token / attn_head -> InvalidArgument
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "kvq/core/tensor.h"
#include "kvq/quant/qparams.h"
#include "kvq/quant/quant_args.h"

namespace kvq::quant {

struct ObserverQParams {
  Tensor scale;
  Tensor zero_point;
  std::optional<Tensor> global_scale;  // F32 [1] for tensor_group
};

class Observer {
 public:
  Observer(std::string base_name, QuantizationArgs args);
  virtual ~Observer() = default;
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  const std::string& name() const { return name_; }
  const std::string& base_name() const { return base_name_; }
  const QuantizationArgs& args() const { return args_; }

  // Observer.forward: skips empty tensors, and weights once they have statistics.
  void update(const Tensor& observed);
  bool has_statistics() const { return min_vals_.has_value(); }
  const Tensor& min_vals() const;  // qparam-shaped, observed dtype
  const Tensor& max_vals() const;
  // get_qparams(): global scale (tensor_group), then calculate_qparams; clears the statistics.
  ObserverQParams qparams();
  // The same without clearing (for reporting progress).
  ObserverQParams peek_qparams() const;
  void clear_statistics();

 protected:
  // observed: (num_observations, *qparam_shape, group_size) as a dense tensor.
  virtual void update_statistics(const Tensor& observed) = 0;
  void set_statistics(Tensor min_vals, Tensor max_vals);
  double kwarg(const char* key, double default_value) const;

  std::string name_;
  std::string base_name_;
  QuantizationArgs args_;
  std::optional<Tensor> min_vals_;
  std::optional<Tensor> max_vals_;
  friend std::unique_ptr<Observer> make_observer(const QuantizationArgs&, std::string);
};

// initialize_observer(): the registry name is args.observer, defaulting to "memoryless_minmax"
// for weights and "minmax" otherwise; weight observers "minmax"/"static_minmax" become
// "memoryless_minmax" and "mse" becomes "memoryless_mse". Returns nullptr for dynamic=True args
// (no observer, as the reference). Unknown names -> ConfigError.
// base_name: "weight", "input", "output", "q", "k" or "v".
std::unique_ptr<Observer> make_observer(const QuantizationArgs& args, std::string base_name);

// flatten_for_calibration(value, base_name, args) as a dense tensor.
Tensor flatten_for_calibration(const Tensor& value, const std::string& base_name,
                               const QuantizationArgs& args);

}  // namespace kvq::quant
