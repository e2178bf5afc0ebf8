#include "kvq/eval/kv_allocation.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/model/model_config.h"
#include "kvq/runtime/kv_cache_choice.h"

namespace kvq::eval {

std::string layer_exceptions(std::span<const KvTensor> tensors, std::string_view format) {
  std::string out;
  for (const bool values : {false, true}) {
    std::vector<std::int64_t> layers;
    for (const KvTensor& t : tensors)
      if (t.values == values) layers.push_back(t.layer);
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    for (std::size_t i = 0; i < layers.size();) {
      std::size_t j = i;
      while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
      const char* stream = values ? "v" : "k";
      out += j == i ? fmt::format("+{}{}={}", stream, layers[i], format)
                    : fmt::format("+{}{}-{}={}", stream, layers[i], layers[j], format);
      i = j + 1;
    }
  }
  return out;
}

std::vector<int> climb_ladders(std::span<const Ladder> ladders, double start_bits, double budget,
                               std::vector<std::size_t>* order) {
  std::vector<int> steps(ladders.size(), 0);
  std::vector<bool> stopped(ladders.size(), false);
  double bits = start_bits;
  // Costs like 1 / 60 bit are not exact in binary; a relative slack keeps a plan that lands on
  // the budget exactly (4.25 + 15 · (1 / 60) = 4.5) from failing on rounding.
  const double limit = budget * (1.0 + 1e-12);
  for (;;) {
    std::optional<std::size_t> best;
    double best_ratio = 0.0;
    for (std::size_t i = 0; i < ladders.size(); ++i) {
      const Ladder& l = ladders[i];
      KVQ_CHECK(l.gains.size() == l.costs.size(), "{} gains for {} costs", l.gains.size(),
                l.costs.size());
      const auto s = static_cast<std::size_t>(steps[i]);
      if (stopped[i] || s == l.gains.size()) continue;
      KVQ_CHECK(l.costs[s] > 0.0, "step {} of ladder {} costs {} bits", s, i, l.costs[s]);
      const double ratio = l.gains[s] / l.costs[s];
      if (!best || ratio > best_ratio) {
        best = i;
        best_ratio = ratio;
      }
    }
    if (!best) break;
    const Ladder& l = ladders[*best];
    const auto s = static_cast<std::size_t>(steps[*best]);
    if (!(l.gains[s] > 0.0) || bits + l.costs[s] > limit) {
      stopped[*best] = true;
      continue;
    }
    bits += l.costs[s];
    ++steps[*best];
    if (order) order->push_back(*best);
  }
  return steps;
}

namespace {

// Average bits per value of a format's rows of head_dim values (codes and in-row scales).
double row_bits(quant::KvFormat format, std::int64_t head_dim) {
  return 8.0 * static_cast<double>(quant::kv_row_bytes(format, head_dim)) /
         static_cast<double>(head_dim);
}

}  // namespace

AllocationResult run_allocation(
    const AllocationOptions& options,
    const std::function<void(const AllocationRow&, std::size_t done, std::size_t total)>& on_row) {
  const runtime::KvCacheOption base = runtime::parse_kv_cache_option(options.base);
  if (base.mode != runtime::KvCacheOption::Mode::kFormat || !base.layer_formats.empty())
    fail<InvalidArgument>(
        "--base must be a KV format (FORMAT, KFORMAT/VFORMAT, +sinkN) without per-layer "
        "exceptions, got '{}'",
        options.base);
  const std::optional<quant::KvFormat> upgrade = quant::parse_kv_format(options.upgrade);
  if (!upgrade) fail<InvalidArgument>("--upgrade: unknown KV format '{}'", options.upgrade);
  std::optional<quant::KvFormat> downgrade;
  if (!options.downgrade.empty()) {
    downgrade = quant::parse_kv_format(options.downgrade);
    if (!downgrade) fail<InvalidArgument>("--downgrade: unknown KV format '{}'", options.downgrade);
  }

  const model::ModelConfig mc = model::load_model_config(options.eval.model_dir);
  const std::int64_t layers = mc.num_hidden_layers, head_dim = mc.head_dim;
  const quant::KvFormat k_base = base.format, v_base = base.value_format.value_or(base.format);
  AllocationResult res;
  res.base_bits = (row_bits(k_base, head_dim) + row_bits(v_base, head_dim)) / 2.0;
  const double up_bits = row_bits(*upgrade, head_dim);
  const double down_bits = downgrade ? row_bits(*downgrade, head_dim) : 0.0;
  for (const quant::KvFormat f : {k_base, v_base}) {
    if (up_bits <= row_bits(f, head_dim))
      fail<InvalidArgument>("--upgrade {} ({:.4g} bits per value) is no larger than {} ({:.4g})",
                            options.upgrade, up_bits, quant::kv_format_name(f),
                            row_bits(f, head_dim));
    if (downgrade && down_bits >= row_bits(f, head_dim))
      fail<InvalidArgument>("--downgrade {} ({:.4g} bits per value) is no smaller than {} ({:.4g})",
                            options.downgrade, down_bits, quant::kv_format_name(f),
                            row_bits(f, head_dim));
  }
  const double start_bits = downgrade ? down_bits : res.base_bits;
  if (options.bits < start_bits)
    fail<InvalidArgument>("--bits {} is below the {} cache's {:.4g} bits per value", options.bits,
                          downgrade ? "--downgrade" : "--base", start_bits);

  // Variants: every tensor in the base format, every one in the upgrade format, every one in the
  // downgrade format (when given); then K of every layer alone in its base format, then V (the
  // rest f32, the base's sink rows kept).
  const std::string name = options.recipe_name.empty() ? "allocate" : options.recipe_name;
  const SchemeDef scheme{.name = name, .recipe = options.recipe, .kv_cache = options.base};
  // A format's name in the variants' strings, with the base's granularity when it has stream
  // scales (dynamic in every variant, as in the base: `f32+k5=int4:tensor`).
  const auto spelled = [&](quant::KvFormat f) {
    std::string n(quant::kv_format_name(f));
    if (quant::kv_format_traits(f).needs_scale && base.granularity)
      n += fmt::format(":{}", model::kv_granularity_name(*base.granularity));
    return n;
  };
  const std::string upgrade_name = spelled(*upgrade);
  const std::string downgrade_name = downgrade ? spelled(*downgrade) : "";
  const std::string sink = base.sink_tokens > 0 ? fmt::format("+sink{}", base.sink_tokens) : "";
  std::vector<SchemeDef> variants(2, scheme);
  variants[0].name = name + "-base";
  variants[1].name = name + "-upgraded";
  variants[1].kv_cache = upgrade_name + sink;
  if (downgrade) {
    variants.push_back(scheme);
    variants.back().name = name + "-downgraded";
    variants.back().kv_cache = downgrade_name + sink;
  }
  const std::size_t first_alone = variants.size();
  const double tensors = static_cast<double>(2 * layers);
  for (const bool values : {false, true}) {
    const quant::KvFormat from = values ? v_base : k_base;
    for (std::int64_t l = 0; l < layers; ++l) {
      const KvTensor t{l, values};
      AllocationRow row{.tensor = t};
      row.cost = (up_bits - row_bits(from, head_dim)) / tensors;
      if (downgrade) row.saving = (row_bits(from, head_dim) - down_bits) / tensors;
      res.rows.push_back(row);
      SchemeDef v = scheme;
      v.name = fmt::format("{}-{}{}-alone", name, values ? "v" : "k", l);
      v.kv_cache = "f32" + sink + layer_exceptions(std::span(&t, 1), spelled(from));
      variants.push_back(std::move(v));
    }
  }

  EvalOptions eo = options.eval;
  eo.ppl_kld = true;
  eo.gsm8k_limit = 0;
  eo.decode_steps = 0;
  Evaluator ev(eo);
  const auto ratio = [&](const SchemeReport& r) {
    return res.base.kld > 0.0 ? r.kld / res.base.kld : 1.0;
  };
  ev.evaluate_kv_variants(scheme, variants, [&](std::size_t i, const SchemeReport& r) {
    if (i < first_alone) {
      if (i == 0) res.base = r;
      if (i == 1) {
        res.upgraded = r;
        res.rho = ratio(r);
      }
      if (i == 2) {
        res.downgraded = r;
        res.rho_down = ratio(r);
      }
      return;
    }
    AllocationRow& row = res.rows[i - first_alone];
    row.kld = r.kld;
    row.gain = row.kld * (1.0 - res.rho);
    row.loss = downgrade ? row.kld * (res.rho_down - 1.0) : 0.0;
    if (on_row) on_row(row, i - first_alone + 1, variants.size() - first_alone);
  });

  // Each tensor's ladder: [downgrade ->] base -> upgrade.
  std::vector<Ladder> ladders;
  for (const AllocationRow& row : res.rows) {
    Ladder l;
    if (downgrade) {
      l.gains.push_back(row.loss);
      l.costs.push_back(row.saving);
    }
    l.gains.push_back(row.gain);
    l.costs.push_back(row.cost);
    ladders.push_back(std::move(l));
  }
  const std::vector<int> steps = climb_ladders(ladders, start_bits, options.bits);
  std::vector<KvTensor> up, down;
  res.plan_bits = res.base_bits;
  res.predicted_kld = res.base.kld;
  for (std::size_t i = 0; i < res.rows.size(); ++i) {
    AllocationRow& row = res.rows[i];
    row.level = static_cast<AllocationLevel>(steps[i] - (downgrade ? 1 : 0));
    row.format = spelled(row.tensor.values ? v_base : k_base);
    if (row.level == AllocationLevel::kUpgrade) {
      row.format = upgrade_name;
      up.push_back(row.tensor);
      res.plan_bits += row.cost;
      res.predicted_kld -= row.gain;
    } else if (row.level == AllocationLevel::kDowngrade) {
      row.format = downgrade_name;
      down.push_back(row.tensor);
      res.plan_bits -= row.saving;
      res.predicted_kld += row.loss;
    }
  }
  res.kv_cache = options.base + layer_exceptions(up, upgrade_name) +
                 (downgrade ? layer_exceptions(down, downgrade_name) : "");
  SchemeDef plan = scheme;
  plan.name = name + "-plan";
  plan.kv_cache = res.kv_cache;
  res.plan = ev.evaluate_kv_variants(scheme, std::span(&plan, 1)).front();
  return res;
}

}  // namespace kvq::eval
