#include "kvq/lifecycle/key_smoothing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/progress.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/model/causal_lm.h"

namespace kvq::lifecycle {

// What the hooks of one attention module share: its parameters and, while calibrating, the
// statistics of the states passing through.
struct KeySmoothing::Module {
  KeySmoothingParams* params = nullptr;
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  bool observing = false;
  std::vector<double> k_sum, k_sq, q_sq;  // [kv_heads * head_dim]
  std::int64_t k_count = 0, q_count = 0;  // rows seen per kv head / per query head
};

namespace {

// q [B, H, T, D]: head h is scaled by its kv group's s.
void scale_queries(KeySmoothing::Module& m, model::StatesView q) {
  const std::int64_t group = m.heads / m.kv_heads;
  for (std::int64_t b = 0; b < q.batch; ++b) {
    for (std::int64_t h = 0; h < q.heads; ++h) {
      const float* s = m.params->scale.data() + (h / group) * m.head_dim;
      for (std::int64_t t = 0; t < q.tokens; ++t) {
        float* row = q.row(b, h, t);
        if (m.observing) {
          double* acc = m.q_sq.data() + (h / group) * m.head_dim;
          for (std::int64_t c = 0; c < m.head_dim; ++c)
            acc[c] += static_cast<double>(row[c]) * row[c];
        } else {
          for (std::int64_t c = 0; c < m.head_dim; ++c) row[c] *= s[c];
        }
      }
    }
  }
  if (m.observing) m.q_count += q.batch * q.tokens * group;
}

// k [B, KVH, T, D] <- (k - mu) / s.
void smooth_keys(KeySmoothing::Module& m, model::StatesView k) {
  for (std::int64_t b = 0; b < k.batch; ++b) {
    for (std::int64_t h = 0; h < k.heads; ++h) {
      const std::int64_t off = h * m.head_dim;
      const float* s = m.params->scale.data() + off;
      const float* mu = m.params->center.data() + off;
      for (std::int64_t t = 0; t < k.tokens; ++t) {
        float* row = k.row(b, h, t);
        if (m.observing) {
          for (std::int64_t c = 0; c < m.head_dim; ++c) {
            m.k_sum[static_cast<std::size_t>(off + c)] += row[c];
            m.k_sq[static_cast<std::size_t>(off + c)] += static_cast<double>(row[c]) * row[c];
          }
        } else {
          for (std::int64_t c = 0; c < m.head_dim; ++c) row[c] = (row[c] - mu[c]) / s[c];
        }
      }
    }
  }
  if (m.observing) m.k_count += k.batch * k.tokens;
}

}  // namespace

KeySmoothing::KeySmoothing(model::CausalLM& model, const quant::KeySmoothingArgs& args)
    : model_(&model), args_(args) {
  if (!(args.smoothing_strength >= 0.0 && args.smoothing_strength <= 1.0))
    fail<ConfigError>("KeySmoothingModifier: smoothing_strength must be in [0, 1], got {}",
                      args.smoothing_strength);
  for (model::Module* mod : model.named_modules()) {
    auto* attn = dynamic_cast<model::AttentionModule*>(mod);
    if (attn == nullptr) continue;
    const auto n = static_cast<std::size_t>(attn->num_kv_heads() * attn->head_dim());
    params_.push_back({attn->name(), std::vector<float>(n, 1.0f), std::vector<float>(n, 0.0f)});
  }
  std::size_t i = 0;
  for (model::Module* mod : model.named_modules()) {
    auto* attn = dynamic_cast<model::AttentionModule*>(mod);
    if (attn == nullptr) continue;
    auto m = std::make_shared<Module>();
    m->params = &params_[i++];
    m->heads = attn->num_heads();
    m->kv_heads = attn->num_kv_heads();
    m->head_dim = attn->head_dim();
    hooks_.emplace_back(attn->register_query_hook(
        [m](model::AttentionModule&, model::StatesView q) { scale_queries(*m, q); }));
    hooks_.emplace_back(attn->register_key_hook(
        [m](model::AttentionModule&, model::StatesView k) { smooth_keys(*m, k); }));
    modules_.push_back(std::move(m));
  }
}

std::string KeySmoothing::summary() const {
  return fmt::format("key smoothing on {} attention module(s) (strength {}, {}){}", params_.size(),
                     args_.smoothing_strength, args_.center ? "centered" : "not centered",
                     calibrated_ ? "" : ", not calibrated yet");
}

void KeySmoothing::calibrate(std::span<const CalibrationSample> samples, bool show_progress) {
  if (samples.empty()) fail<InvalidArgument>("key smoothing: the dataset has no samples");
  for (auto& m : modules_) {
    const auto n = m->params->scale.size();
    m->k_sum.assign(n, 0.0);
    m->k_sq.assign(n, 0.0);
    m->q_sq.assign(n, 0.0);
    m->k_count = m->q_count = 0;
    m->observing = true;
  }
  std::int64_t total = 0;
  for (const auto& s : samples) total += static_cast<std::int64_t>(s.tokens.size());
  ProgressBar bar("smooth keys", total, "tok", !show_progress);
  try {
    for (const auto& s : samples) {
      model_->forward(s.tokens, model::LogitsMode::kLast);
      bar.advance(static_cast<std::int64_t>(s.tokens.size()));
    }
  } catch (...) {
    for (auto& m : modules_) m->observing = false;
    throw;
  }
  bar.finish();
  const double a = args_.smoothing_strength;
  for (auto& m : modules_) {
    m->observing = false;
    KVQ_CHECK(m->k_count > 0 && m->q_count > 0, "key smoothing: {} saw no states",
              m->params->module);
    for (std::size_t i = 0; i < m->params->scale.size(); ++i) {
      const double mean = args_.center ? m->k_sum[i] / static_cast<double>(m->k_count) : 0.0;
      const double rk =
          std::sqrt(std::max(0.0, m->k_sq[i] / static_cast<double>(m->k_count) - mean * mean));
      const double rq = std::sqrt(m->q_sq[i] / static_cast<double>(m->q_count));
      const double s = std::pow(rk, a) / std::pow(rq, 1.0 - a);
      m->params->scale[i] = rk > 0.0 && rq > 0.0 && std::isfinite(s) ? static_cast<float>(s) : 1.0f;
      m->params->center[i] = static_cast<float>(mean);
    }
    m->k_sum = m->k_sq = m->q_sq = {};
  }
  calibrated_ = true;
}

}  // namespace kvq::lifecycle
