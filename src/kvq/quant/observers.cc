#include "kvq/quant/observers.h"

#include <cmath>
#include <limits>

#include "kvq/core/error.h"
#include "kvq/quant/detail/array.h"
#include "kvq/quant/fake_quantize.h"

namespace kvq::quant {

using detail::Array;
using detail::Op;
using S = QuantizationStrategy;

namespace {

// Materialises x.permute(perm) (row-major) — used for the transpose(1, 2) of q/k/v.
Array permute(const Array& x, const std::vector<int>& perm) {
  const int nd = x.ndim();
  Array out;
  out.dtype = x.dtype;
  out.shape.resize(nd);
  for (int d = 0; d < nd; ++d) out.shape[d] = x.shape[perm[d]];
  std::vector<std::int64_t> in_stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) in_stride[d] = in_stride[d + 1] * x.shape[d + 1];
  out.v.resize(x.v.size());
  std::vector<std::int64_t> counter(nd, 0);
  for (std::size_t i = 0; i < out.v.size(); ++i) {
    std::int64_t src = 0;
    for (int d = 0; d < nd; ++d) src += counter[d] * in_stride[perm[d]];
    out.v[i] = x.v[src];
    for (int d = nd; d-- > 0;) {
      if (++counter[d] < out.shape[d]) break;
      counter[d] = 0;
    }
  }
  return out;
}

// amin/amax over dims (0, -1) of (N, *q, G) -> q (NaN propagates).
std::pair<Array, Array> min_max(const Array& obs) {
  const std::int64_t n = obs.shape.front(), g = obs.shape.back();
  Shape q(obs.shape.begin() + 1, obs.shape.end() - 1);
  const std::int64_t nq = shape_numel(q);
  Array mn = detail::full(obs.dtype, q, std::numeric_limits<float>::infinity());
  Array mx = detail::full(obs.dtype, q, -std::numeric_limits<float>::infinity());
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < nq; ++j)
      for (std::int64_t k = 0; k < g; ++k) {
        const float v = obs.v[(i * nq + j) * g + k];
        mn.v[j] = detail::apply(Op::kMin, mn.v[j], v);
        mx.v[j] = detail::apply(Op::kMax, mx.v[j], v);
      }
  return {mn, mx};
}

// llm-compressor's lerp: start * (1 - w) + end * w, op by op in the tensors' dtype.
Array lerp(const Array& start, const Array& end, double w) {
  return detail::binary(detail::binary_scalar(start, 1.0 - w, Op::kMul),
                        detail::binary_scalar(end, w, Op::kMul), Op::kAdd);
}

class MemorylessMinMax : public Observer {
 public:
  using Observer::Observer;

 protected:
  void update_statistics(const Tensor& observed) override {
    auto [mn, mx] = min_max(detail::from_tensor(observed));
    set_statistics(detail::to_tensor(mn), detail::to_tensor(mx));
  }
};

class StaticMinMax : public Observer {
 public:
  using Observer::Observer;

 protected:
  void update_statistics(const Tensor& observed) override {
    auto [mn, mx] = min_max(detail::from_tensor(observed));
    if (has_statistics()) {
      mn = detail::binary(mn, detail::from_tensor(*min_vals_), Op::kMin);
      mx = detail::binary(mx, detail::from_tensor(*max_vals_), Op::kMax);
    }
    set_statistics(detail::to_tensor(mn), detail::to_tensor(mx));
  }
};

// Moving average of per-batch statistics (min/max or the MSE search result).
class MovingAverage : public Observer {
 public:
  MovingAverage(std::string base_name, QuantizationArgs args)
      : Observer(std::move(base_name), std::move(args)) {
    avg_constant_ = kwarg("averaging_constant", 0.01);
  }

 protected:
  void accumulate(Array mn, Array mx) {
    if (has_statistics() && avg_constant_ != 1.0) {
      mn = lerp(detail::from_tensor(*min_vals_), mn, avg_constant_);
      mx = lerp(detail::from_tensor(*max_vals_), mx, avg_constant_);
    }
    set_statistics(detail::to_tensor(mn), detail::to_tensor(mx));
  }
  double avg_constant_;
};

class MinMax : public MovingAverage {
 public:
  using MovingAverage::MovingAverage;

 protected:
  void update_statistics(const Tensor& observed) override {
    auto [mn, mx] = min_max(detail::from_tensor(observed));
    accumulate(std::move(mn), std::move(mx));
  }
};

// _grid_search_mse (CPU eager path).
std::pair<Array, Array> grid_search_mse(const Array& obs, QuantizationArgs args, double maxshrink,
                                        int patience, double grid, double norm, double expand) {
  if (args.strategy == S::kTensorGroup && args.scale_dtype) args.scale_dtype.reset();
  QuantizationArgs token_args = args;
  token_args.strategy = S::kToken;
  auto [mn0, mx0] = min_max(obs);
  const Array min_val = detail::binary_scalar(mn0, expand, Op::kMul);
  const Array max_val = detail::binary_scalar(mx0, expand, Op::kMul);
  const float big = obs.dtype == DType::kBF16  ? 3.38953139e38f
                    : obs.dtype == DType::kF16 ? 65504.0f
                                               : std::numeric_limits<float>::max();
  Array best_error = detail::full(min_val.dtype, min_val.shape, big);
  Array best_min = min_val, best_max = max_val;
  const int total_steps = static_cast<int>(maxshrink * grid);
  int no_improve = 0;
  const Tensor obs_t = detail::to_tensor(obs);
  const std::int64_t n = obs.shape.front(), g = obs.shape.back();
  const std::int64_t nq = min_val.numel();
  for (int i = 0; i < total_steps; ++i) {
    const double p = 1.0 - i / grid;
    const Array smin = detail::binary_scalar(min_val, p, Op::kMul);
    const Array smax = detail::binary_scalar(max_val, p, Op::kMul);
    const QParams qp = calculate_qparams(detail::to_tensor(smin), detail::to_tensor(smax), args);
    Shape qshape = qp.scale.shape();
    qshape.push_back(1);
    const Tensor scale = qp.scale.reshape(qshape);
    const Tensor zp = qp.zero_point.reshape(qshape);
    const Array q =
        detail::cast(detail::from_tensor(fake_quantize(obs_t, scale, &zp, token_args)), obs.dtype);
    // sum(|q - obs| ** norm, dims (0, -1)): each term rounded to obs dtype, summed sequentially
    // in fp32 and rounded once; torch's (vectorised, cascaded) summation order is not
    // reproduced, so near-ties between grid points can resolve differently (see tests).
    std::vector<float> err(static_cast<std::size_t>(nq), 0.0f);
    for (std::int64_t a = 0; a < n; ++a)
      for (std::int64_t j = 0; j < nq; ++j)
        for (std::int64_t k = 0; k < g; ++k) {
          const std::size_t idx = static_cast<std::size_t>((a * nq + j) * g + k);
          const float d = detail::round_to(obs.dtype, q.v[idx] - obs.v[idx]);
          const float pw =
              detail::round_to(obs.dtype, static_cast<float>(std::pow(std::fabs(d), norm)));
          err[j] += pw;
        }
    bool any = false;
    for (std::int64_t j = 0; j < nq; ++j) {
      const float e = detail::round_to(obs.dtype, err[j]);
      if (e < best_error.v[j]) {
        any = true;
        best_error.v[j] = e;
        best_min.v[j] = smin.v[j];
        best_max.v[j] = smax.v[j];
      }
    }
    if (any) {
      no_improve = 0;
    } else if (++no_improve >= patience) {
      break;
    }
  }
  return {best_min, best_max};
}

class MemorylessMse : public Observer {
 public:
  MemorylessMse(std::string base_name, QuantizationArgs args)
      : Observer(std::move(base_name), std::move(args)) {
    maxshrink_ = kwarg("maxshrink", 0.20);
    patience_ = static_cast<int>(kwarg("patience", 5));
    grid_ = kwarg("grid", 100.0);
    norm_ = kwarg("norm", 2.4);
    expand_ = kwarg("expand", 1.0);
    if (expand_ < 1.0) fail<ConfigError>("expand value must be at least 1.0, got {}", expand_);
  }

 protected:
  void update_statistics(const Tensor& observed) override {
    auto [mn, mx] = grid_search_mse(detail::from_tensor(observed), args_, maxshrink_, patience_,
                                    grid_, norm_, expand_);
    set_statistics(detail::to_tensor(mn), detail::to_tensor(mx));
  }
  double maxshrink_, grid_, norm_, expand_;
  int patience_;
};

class MovingAverageMse : public MovingAverage {
 public:
  MovingAverageMse(std::string base_name, QuantizationArgs args)
      : MovingAverage(std::move(base_name), std::move(args)) {
    maxshrink_ = kwarg("maxshrink", 0.20);
    patience_ = static_cast<int>(kwarg("patience", 5));
    grid_ = kwarg("grid", 100.0);
    norm_ = kwarg("norm", 2.4);
    expand_ = kwarg("expand", 1.0);
    if (expand_ < 1.0) fail<ConfigError>("expand value must be at least 1.0, got {}", expand_);
  }

 protected:
  void update_statistics(const Tensor& observed) override {
    auto [mn, mx] = grid_search_mse(detail::from_tensor(observed), args_, maxshrink_, patience_,
                                    grid_, norm_, expand_);
    accumulate(std::move(mn), std::move(mx));
  }
  double maxshrink_, grid_, norm_, expand_;
  int patience_;
};

}  // namespace

Observer::Observer(std::string base_name, QuantizationArgs args)
    : base_name_(std::move(base_name)), args_(std::move(args)) {}

void Observer::update(const Tensor& observed) {
  if (observed.numel() == 0) return;
  if (base_name_ == "weight" && has_statistics()) return;
  update_statistics(flatten_for_calibration(observed, base_name_, args_));
}

const Tensor& Observer::min_vals() const {
  KVQ_CHECK(min_vals_.has_value(), "observer has no statistics");
  return *min_vals_;
}
const Tensor& Observer::max_vals() const {
  KVQ_CHECK(max_vals_.has_value(), "observer has no statistics");
  return *max_vals_;
}

void Observer::set_statistics(Tensor min_vals, Tensor max_vals) {
  min_vals_ = std::move(min_vals);
  max_vals_ = std::move(max_vals);
}

void Observer::clear_statistics() {
  min_vals_.reset();
  max_vals_.reset();
}

double Observer::kwarg(const char* key, double default_value) const {
  auto it = args_.observer_kwargs.find(key);
  if (it == args_.observer_kwargs.end() || it->is_null()) return default_value;
  if (!it->is_number())
    fail<ConfigError>("observer {}: observer_kwargs.{} must be a number", name_, key);
  return it->get<double>();
}

ObserverQParams Observer::peek_qparams() const {
  if (!has_statistics())
    fail<InvalidArgument>("observer {} ({}): No statistics available. Call observer(value) first.",
                          name_, base_name_);
  ObserverQParams out;
  const Tensor* gs = nullptr;
  if (args_.strategy == S::kTensorGroup) {
    const Array mn = detail::from_tensor(*min_vals_), mx = detail::from_tensor(*max_vals_);
    // global_absmax = max(max_vals.max(), -min_vals.min()) (0-dim ops in the stats dtype).
    float mxmax = -std::numeric_limits<float>::infinity(), mnmin = -mxmax;
    for (float v : mx.v) mxmax = detail::apply(Op::kMax, mxmax, v);
    for (float v : mn.v) mnmin = detail::apply(Op::kMin, mnmin, v);
    const float absmax = detail::apply(Op::kMax, mxmax, -mnmin);
    const Array lo = detail::full(mx.dtype, {1}, -absmax), hi = detail::full(mx.dtype, {1}, absmax);
    out.global_scale = generate_gparam(detail::to_tensor(lo), detail::to_tensor(hi));
    gs = &*out.global_scale;
  }
  QParams qp = calculate_qparams(*min_vals_, *max_vals_, args_, gs);
  out.scale = std::move(qp.scale);
  out.zero_point = std::move(qp.zero_point);
  return out;
}

ObserverQParams Observer::qparams() {
  ObserverQParams out = peek_qparams();
  clear_statistics();
  return out;
}

std::unique_ptr<Observer> make_observer(const QuantizationArgs& args, std::string base_name) {
  if (args.dynamic == DynamicType::kTrue) return nullptr;
  const bool weight = base_name == "weight";
  std::string name = args.observer.value_or(weight ? "memoryless_minmax" : "minmax");
  if (weight && (name == "static_minmax" || name == "minmax")) name = "memoryless_minmax";
  if (weight && name == "mse") name = "memoryless_mse";
  std::unique_ptr<Observer> obs;
  if (name == "memoryless_minmax")
    obs = std::make_unique<MemorylessMinMax>(base_name, args);
  else if (name == "static_minmax")
    obs = std::make_unique<StaticMinMax>(base_name, args);
  else if (name == "minmax")
    obs = std::make_unique<MinMax>(base_name, args);
  else if (name == "memoryless_mse")
    obs = std::make_unique<MemorylessMse>(base_name, args);
  else if (name == "mse")
    obs = std::make_unique<MovingAverageMse>(base_name, args);
  else
    fail<ConfigError>(
        "unknown or unsupported observer '{}' (kvq implements memoryless_minmax, "
        "static_minmax, minmax, memoryless_mse, mse)",
        name);
  obs->name_ = name;
  return obs;
}

Tensor flatten_for_calibration(const Tensor& value, const std::string& base_name,
                               const QuantizationArgs& args) {
  const S s = args.strategy_or_tensor();
  const Array x = detail::from_tensor(value);
  auto out = [](Array a, Shape shape) {
    return detail::to_tensor(detail::reshape(a, std::move(shape)));
  };
  if (base_name == "q" || base_name == "k" || base_name == "v") {
    if (s == S::kToken) throw InvalidArgument("Token quantization cannot be applied to attention");
    if (s == S::kChannel)
      throw InvalidArgument("Channel quantization cannot be applied to attention");
    if (s == S::kGroup || s == S::kTensorGroup)
      throw InvalidArgument("Group quantization cannot be applied to attention");
    if (s == S::kBlock) throw InvalidArgument("Block quantization cannot be applied to attention");
    if (value.ndim() != 4)
      fail<InvalidArgument>("{} states must be [batch, heads, seq, head_dim], got {}", base_name,
                            shape_str(value.shape()));
    const std::int64_t b = value.dim(0), h = value.dim(1), sl = value.dim(2), d = value.dim(3);
    const Array t = permute(x, {0, 2, 1, 3});  // [B, S, h, D]
    if (s == S::kTensor) return out(t, {b * sl, 1, h * d});
    return out(t, {b * sl, h, 1, 1, d});  // attn_head
  }
  if (base_name == "input" || base_name == "output") {
    if (s == S::kTensor) return out(x, {x.numel() / value.dim(-1), 1, value.dim(-1)});
    if (s == S::kToken) return value;
    if (s == S::kChannel)
      throw InvalidArgument("Channel quantization cannot be applied to activations");
    if (s == S::kGroup || s == S::kTensorGroup) {
      const std::int64_t g = *args.group_size, cols = value.dim(-1);
      if (cols % g != 0)
        fail<InvalidArgument>("unflatten: group_size {} does not divide {}", g, cols);
      return out(x, {x.numel() / cols, cols / g, g});
    }
    if (s == S::kBlock)
      throw InvalidArgument("Block quantization cannot be applied to activations");
    throw InvalidArgument("Attention head quantization cannot be applied to activations");
  }
  if (base_name == "weight") {
    if (s == S::kTensor) return out(x, {1, 1, x.numel()});
    if (s == S::kToken) throw InvalidArgument("Token quantization cannot be applied to weights");
    if (s == S::kAttnHead)
      throw InvalidArgument("Attention head quantization cannot be applied to weights");
    if (value.ndim() != 2)
      fail<InvalidArgument>("weights must be 2-D, got {}", shape_str(value.shape()));
    const std::int64_t rows = value.dim(0), cols = value.dim(1);
    if (s == S::kChannel) return out(x, {1, rows, 1, cols});
    if (s == S::kGroup || s == S::kTensorGroup) {
      const std::int64_t g = *args.group_size;
      if (cols % g != 0)
        fail<InvalidArgument>("unflatten: group_size {} does not divide {}", g, cols);
      return out(x, {1, rows, cols / g, g});
    }
    // block: zero-pad, (1, rows/bh, cols/bw, bh*bw)
    const auto [bh, bw] = *args.block_structure;
    const std::int64_t br = (rows + bh - 1) / bh, bc = (cols + bw - 1) / bw;
    Array o = detail::full(x.dtype, {1, br, bc, static_cast<std::int64_t>(bh) * bw}, 0.0f);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c)
        o.v[((r / bh) * bc + c / bw) * bh * bw + (r % bh) * bw + c % bw] = x.v[r * cols + c];
    return detail::to_tensor(o);
  }
  fail<InvalidArgument>("Unknown quantization base name: {}", base_name);
}

}  // namespace kvq::quant
