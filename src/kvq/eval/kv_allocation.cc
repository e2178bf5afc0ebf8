#include "kvq/eval/kv_allocation.h"

#include <algorithm>
#include <numeric>
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

std::vector<std::size_t> choose_upgrades(std::span<const double> gains,
                                         std::span<const double> costs, double base_bits,
                                         double budget) {
  KVQ_CHECK(gains.size() == costs.size(), "{} gains for {} costs", gains.size(), costs.size());
  std::vector<std::size_t> order(gains.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return gains[a] / costs[a] > gains[b] / costs[b];
  });
  std::vector<std::size_t> chosen;
  double bits = base_bits;
  // Costs like 1 / 60 bit are not exact in binary; a relative slack keeps a plan that lands on
  // the budget exactly (4.25 + 15 · (1 / 60) = 4.5) from failing on rounding.
  const double limit = budget * (1.0 + 1e-12);
  for (const std::size_t i : order) {
    KVQ_CHECK(costs[i] > 0.0, "upgrade {} costs {} bits", i, costs[i]);
    if (!(gains[i] > 0.0) || bits + costs[i] > limit) continue;
    bits += costs[i];
    chosen.push_back(i);
  }
  return chosen;
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

  const model::ModelConfig mc = model::load_model_config(options.eval.model_dir);
  const std::int64_t layers = mc.num_hidden_layers, head_dim = mc.head_dim;
  const quant::KvFormat k_base = base.format, v_base = base.value_format.value_or(base.format);
  AllocationResult res;
  res.base_bits = (row_bits(k_base, head_dim) + row_bits(v_base, head_dim)) / 2.0;
  const double up_bits = row_bits(*upgrade, head_dim);
  for (const quant::KvFormat f : {k_base, v_base}) {
    if (up_bits <= row_bits(f, head_dim))
      fail<InvalidArgument>("--upgrade {} ({:.4g} bits per value) is no larger than {} ({:.4g})",
                            options.upgrade, up_bits, quant::kv_format_name(f),
                            row_bits(f, head_dim));
  }
  if (options.bits < res.base_bits)
    fail<InvalidArgument>("--bits {} is below the base cache's {:.4g} bits per value", options.bits,
                          res.base_bits);

  // Variants 0 and 1: every tensor in the base format, every one in the upgrade format; then K
  // of every layer alone in its base format, then V (the rest f32, the base's sink rows kept).
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
  const std::string sink = base.sink_tokens > 0 ? fmt::format("+sink{}", base.sink_tokens) : "";
  std::vector<SchemeDef> variants(2, scheme);
  variants[0].name = name + "-base";
  variants[1].name = name + "-upgraded";
  variants[1].kv_cache = upgrade_name + sink;
  for (const bool values : {false, true}) {
    const quant::KvFormat from = values ? v_base : k_base;
    for (std::int64_t l = 0; l < layers; ++l) {
      const KvTensor t{l, values};
      AllocationRow row{.tensor = t};
      row.cost = (up_bits - row_bits(from, head_dim)) / static_cast<double>(2 * layers);
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
  ev.evaluate_kv_variants(scheme, variants, [&](std::size_t i, const SchemeReport& r) {
    if (i < 2) {
      (i == 0 ? res.base : res.upgraded) = r;
      if (i == 1) res.rho = res.base.kld > 0.0 ? res.upgraded.kld / res.base.kld : 1.0;
      return;
    }
    AllocationRow& row = res.rows[i - 2];
    row.kld = r.kld;
    row.gain = row.kld * (1.0 - res.rho);
    if (on_row) on_row(row, i - 1, variants.size() - 2);
  });

  std::vector<double> gains, costs;
  for (const AllocationRow& row : res.rows) {
    gains.push_back(row.gain);
    costs.push_back(row.cost);
  }
  std::vector<KvTensor> chosen;
  res.plan_bits = res.base_bits;
  res.predicted_kld = res.base.kld;
  for (const std::size_t i : choose_upgrades(gains, costs, res.base_bits, options.bits)) {
    res.rows[i].chosen = true;
    chosen.push_back(res.rows[i].tensor);
    res.plan_bits += res.rows[i].cost;
    res.predicted_kld -= res.rows[i].gain;
  }
  res.kv_cache = options.base + layer_exceptions(chosen, upgrade_name);
  SchemeDef plan = scheme;
  plan.name = name + "-plan";
  plan.kv_cache = res.kv_cache;
  res.plan = ev.evaluate_kv_variants(scheme, std::span(&plan, 1)).front();
  return res;
}

}  // namespace kvq::eval
