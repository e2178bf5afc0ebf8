#include "kvq/lifecycle/transforms.h"

#include <cmath>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/kernels/cpu/hadamard.h"
#include "kvq/lifecycle/match.h"
#include "kvq/model/causal_lm.h"

namespace kvq::lifecycle {
namespace {

using quant::TransformArgs;
using quant::TransformLocation;
using quant::TransformScheme;

bool is_linear(const model::Module& m) { return m.class_name() == "Linear"; }

// x[0], x[stride], ..., x[(n-1)·stride] ← H_n x / sqrt(n) in float64 (the offline fusion's
// precision). n is a power of two.
void hadamard_f64(double* x, std::int64_t n, std::int64_t stride) {
  for (std::int64_t h = 1; h < n; h *= 2) {
    for (std::int64_t i = 0; i < n; i += 2 * h) {
      for (std::int64_t j = i; j < i + h; ++j) {
        const double a = x[j * stride], b = x[(j + h) * stride];
        x[j * stride] = a + b;
        x[(j + h) * stride] = a - b;
      }
    }
  }
  const double inv = 1.0 / std::sqrt(static_cast<double>(n));
  for (std::int64_t j = 0; j < n; ++j) x[j * stride] *= inv;
}

// W [out, in] with every `size` block of rows (along out: weight_output, W ← Hᵀ·W) or of
// columns (along in: weight_input, W ← W·H) rotated. H is symmetric, so `inverse` (Hᵀ for H)
// changes nothing for Hadamard matrices. float64, rounded once to fp32.
Tensor rotated_weight(const Tensor& weight, TransformLocation where, std::int64_t size) {
  const Tensor w = weight.to_f32();
  const std::int64_t rows = w.shape()[0], cols = w.shape()[1];
  std::vector<double> x(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i) x[static_cast<std::size_t>(i)] = w.f32()[i];
  if (where == TransformLocation::kWeightOutput) {
    for (std::int64_t r = 0; r < rows; r += size)
      for (std::int64_t c = 0; c < cols; ++c)
        hadamard_f64(&x[static_cast<std::size_t>(r * cols + c)], size, cols);
  } else {
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; c += size)
        hadamard_f64(&x[static_cast<std::size_t>(r * cols + c)], size, 1);
  }
  Tensor out(DType::kF32, w.shape());
  float* o = static_cast<float*>(out.mutable_data());
  for (std::int64_t i = 0; i < rows * cols; ++i)
    o[i] = static_cast<float>(x[static_cast<std::size_t>(i)]);
  return out;
}

// The rotation size of `args` on `module` (compressed-tensors' get_transform_size): the
// scheme's head_dim, which must divide the rotated dimension; else the Linear's in / out
// features; attention needs a head_dim (its own when the scheme leaves it unset, as SpinQuant
// R3 always sets it to the model's).
std::int64_t transform_size(const std::string& group, const TransformScheme& scheme,
                            const TransformArgs& args, const std::string& name,
                            const model::Module& m, std::int64_t dim) {
  const std::int64_t size = scheme.head_dim ? *scheme.head_dim : dim;
  if (size <= 0 || dim % size != 0) {
    fail<ConfigError>("transform_config.{}: head_dim {} must divide {} ({} of {} {})", group, size,
                      dim, quant::to_string(args.location), m.class_name(), name);
  }
  if (!kernels::is_power_of_two_size(size)) {
    fail<NotSupported>(
        "transform_config.{}: a hadamard rotation of size {} ({} of {}) needs a power of two; "
        "set the scheme's head_dim (SpinQuant: transform_block_size) to one that divides {}",
        group, size, quant::to_string(args.location), name, dim);
  }
  return size;
}

// Refuses what kvq cannot run of a scheme, naming it.
void check_scheme(const std::string& group, const TransformScheme& s) {
  if (s.type != "hadamard") {
    fail<NotSupported>(
        "transform_config.{}: transform type '{}' is not supported (kvq runs 'hadamard'; "
        "random-hadamard and random-matrix draw from torch's seeded generator, which kvq does "
        "not reproduce)",
        group, s.type);
  }
  if (s.randomize) {
    fail<NotSupported>(
        "transform_config.{}: randomize=true (a random permutation drawn by torch) is not "
        "supported",
        group);
  }
}

}  // namespace

AppliedTransforms::~AppliedTransforms() {
  hooks_.clear();
  for (std::size_t i = fused_names_.size(); i-- > 0;) {
    try {
      model_->set_linear_weight(fused_names_[i], originals_[i]);
    } catch (const std::exception& e) {
      log::warn("restoring {}: {}", fused_names_[i], e.what());
    }
  }
}

std::unique_ptr<AppliedTransforms> apply_transforms(model::CausalLM& model,
                                                    const quant::TransformConfig& config,
                                                    bool fuse_offline) {
  auto applied = std::make_unique<AppliedTransforms>();
  applied->model_ = &model;
  for (const auto& [group, scheme] : config.config_groups) {
    check_scheme(group, scheme);
    for (const TransformArgs& args : scheme.apply) {
      const std::string where =
          fmt::format("transform_config.{}: {}", group, quant::to_string(args.location));
      if (args.location == TransformLocation::kInput ||
          args.location == TransformLocation::kOutput) {
        fail<NotSupported>(
            "{} on {}: online rotations of Linear activations (SpinQuant R4) are not supported",
            where, fmt::join(args.targets, ", "));
      }
      if (!quant::is_online(args.location) && !fuse_offline) {
        applied->summary_.push_back(where + ": already fused into the checkpoint's weights");
        continue;
      }
      refuse_fused_module_targets(model, args.targets, where);
      std::vector<std::string> unmatched;
      const auto matched =
          match_named_modules(model.root(), args.targets, args.ignore, false, &unmatched);
      if (!unmatched.empty()) {
        fail<ConfigError>("{}: target(s) {} match no module of the model", where,
                          fmt::join(unmatched, ", "));
      }
      std::int64_t count = 0, size = 0;
      for (const auto& [name, m] : matched) {
        if (quant::is_online(args.location)) {
          auto* attn = dynamic_cast<model::AttentionModule*>(m);
          if (attn == nullptr) {
            fail<NotSupported>("{} on {} ({}): q_attn / k_cache apply to attention modules", where,
                               name, m->class_name());
          }
          size = transform_size(group, scheme, args, name, *m, attn->head_dim());
          const std::int64_t n = size;
          auto rotate = [n](model::AttentionModule&, model::StatesView s) {
            kernels::hadamard_rows(s.data, s.numel() / n, n);
          };
          applied->hooks_.emplace_back(args.location == TransformLocation::kQAttn
                                           ? attn->register_query_hook(rotate)
                                           : attn->register_key_hook(rotate));
        } else {
          if (!is_linear(*m) || m->name() == "lm_head") {
            fail<NotSupported>(
                "{} on {} ({}): kvq fuses rotations into the layers' Linear projections only "
                "(SpinQuant R2); rotating embeddings or lm_head (R1) also needs the norms fused "
                "into the next Linear layers, which kvq does not do",
                where, name, m->class_name());
          }
          if (args.location == TransformLocation::kWeightOutput && m->has_bias()) {
            // compressed-tensors rotates the bias with the output rows; kvq does not fuse into
            // biases yet, and rotating the weight alone would change the model.
            fail<NotSupported>(
                "{} on {}: the Linear has a bias (as Qwen2's q/k/v_proj), and kvq does not "
                "rotate biases yet",
                where, name);
          }
          const Shape& shape = m->weight().shape();
          const std::int64_t dim =
              args.location == TransformLocation::kWeightOutput ? shape[0] : shape[1];
          size = transform_size(group, scheme, args, name, *m, dim);
          Tensor original = m->weight();
          model.set_linear_weight(name, rotated_weight(original, args.location, size));
          applied->fused_names_.push_back(name);
          applied->originals_.push_back(std::move(original));
        }
        ++count;
      }
      applied->summary_.push_back(
          fmt::format("{} on {} module(s) (hadamard {})", where, count, size));
    }
  }
  return applied;
}

}  // namespace kvq::lifecycle
