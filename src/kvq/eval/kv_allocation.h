// `kvq allocate`: per-layer K / V formats chosen from measurements, under a bits-per-value budget.
//
// Start from a base cache (every K and V in one format, e.g. nl4_g64+sink1, after the scheme's
// recipe: rotations, key smoothing) and one upgrade format (e.g. int5_g64_mse). Each of the
// 2 × layers tensors (the K or the V of one layer) is upgraded ALONE and the scheme's KLD against
// the unquantized model measured on the same windows; its gain is the base's KLD minus that
// (paired: same windows, same tokens, so window-to-window noise cancels). The upgrades are then
// taken greedily by gain per bit while the average bits per value stay within the budget, and the
// plan that results is measured last. One tensor's upgrade barely changes the others' errors
// (they add up: docs/results.md), so the sum of the chosen gains predicts the plan's gain; the
// report shows both.
//
// Bits per value are the formats' (codes and in-row scales, kv_row_bytes · 8 / head_dim, averaged
// over the 2 × layers tensors); sink rows (+sinkN) are left out of the budget (they cost the same
// in every plan).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvq/eval/compare.h"
#include "kvq/eval/report.h"
#include "kvq/quant/formats.h"

namespace kvq::eval {

struct KvTensor {
  std::int64_t layer = 0;
  bool values = false;  // V (else K)
};

struct AllocationOptions {
  EvalOptions eval;         // model, text, windows, --kld, cache directory, data
  std::string recipe;       // recipe YAML applied (and calibrated) once; empty: none
  std::string recipe_name;  // for reports and cache files
  std::string base;         // the base --kv-cache: FORMAT or K/V formats, +sinkN; no exceptions
  std::string upgrade;      // the upgrade format's name
  double bits = 4.5;        // budget: average bits per value
};

struct AllocationRow {
  KvTensor tensor;
  double kld = 0.0;   // the scheme with this tensor upgraded
  double gain = 0.0;  // base KLD - kld
  double cost = 0.0;  // average bits per value the upgrade adds
  bool chosen = false;
};

struct AllocationResult {
  SchemeReport base, plan;                  // measured: every tensor in the base format / the plan
  std::vector<AllocationRow> rows;          // [2 * layers]: K of layer 0, 1, ..., then V
  std::string kv_cache;                     // the plan as a --kv-cache value
  double base_bits = 0.0, plan_bits = 0.0;  // average bits per value, sink rows excluded
  double predicted_kld = 0.0;               // base KLD - the chosen gains
};

// The per-layer exceptions that give `tensors` the format: "+k1-3=F+k9=F+v1=F" (K before V,
// runs of consecutive layers merged into ranges; "" for none).
std::string layer_exceptions(std::span<const KvTensor> tensors, std::string_view format);

// The upgrades taken: indices in order of gain per bit of cost (larger first; ties: the lower
// index), only positive gains, each while base_bits + the costs taken so far stay <= budget (an
// upgrade that does not fit is skipped, a cheaper later one may still fit). gains and costs have
// one entry per candidate; costs > 0.
std::vector<std::size_t> choose_upgrades(std::span<const double> gains,
                                         std::span<const double> costs, double base_bits,
                                         double budget);

// The scan, the choice and the plan's measurement. Progress (one line per tensor) goes to
// `on_row` when given. InvalidArgument for a base with per-layer exceptions or without a
// quantized format, an upgrade that is not a format, or a budget below the base's bits.
AllocationResult run_allocation(const AllocationOptions& options,
                                const std::function<void(const AllocationRow&, std::size_t done,
                                                         std::size_t total)>& on_row = {});

}  // namespace kvq::eval
