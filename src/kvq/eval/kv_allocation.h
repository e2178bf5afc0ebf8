// `kvq allocate`: per-layer K / V formats chosen from measurements, under a bits-per-value budget.
//
// Start from a base cache (every K and V in one format, e.g. nl4_g64+sink1, after the scheme's
// recipe: rotations, key smoothing), one upgrade format (e.g. int5_g64_mse) and optionally one
// downgrade format (e.g. nl3_g64). Each of the 2 × layers tensors (the K or the V of one layer) is
// quantized ALONE in its base format — every other tensor unquantized (f32), sink rows kept as the
// base keeps them — and the KLD against the unquantized model measured on the same windows: the
// tensor's sensitivity e_i. Errors of different tensors add up (docs/results.md: all at once
// within 2 % of the sum), and a format's errors are about proportional to the base's, so tensor i
// in format f is expected to cost e_i · ρ_f, with ρ_f = KLD(every tensor in f) / KLD(base)
// measured once per format. Every tensor starts in the smallest format (the downgrade when there
// is one); steps up its ladder (downgrade → base → upgrade) are taken greedily by expected KLD
// saved per bit while the average bits per value stay within the budget, and the plan that
// results is measured last.
//
// Why alone and not "upgrade one tensor of the quantized base": that difference is a small change
// of a large KLD and its noise on a few windows is as large as the gains (measured: a plan chosen
// that way was 18 % worse out of sample); a tensor's KLD alone is its own error, nothing else.
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
  std::string downgrade;    // the downgrade format's name; empty: none
  double bits = 4.5;        // budget: average bits per value
};

// Where a tensor ends up: one step below its base, its base, or one step above.
enum class AllocationLevel : int { kDowngrade = -1, kBase = 0, kUpgrade = 1 };

struct AllocationRow {
  KvTensor tensor;
  double kld = 0.0;   // e_i: this tensor alone in its base format, every other one unquantized
  double gain = 0.0;  // e_i · (1 - rho): what upgrading it is expected to save
  double cost = 0.0;  // average bits per value the upgrade adds
  // With a downgrade: e_i · (rho_down - 1), what downgrading it is expected to add, and the
  // average bits per value it saves.
  double loss = 0.0, saving = 0.0;
  AllocationLevel level = AllocationLevel::kBase;
  std::string format;  // the plan's format for it, as --kv-cache spells it
};

struct AllocationResult {
  // Measured: every tensor in the base format / in the upgrade / in the downgrade format (when
  // there is one) / the plan.
  SchemeReport base, upgraded, downgraded, plan;
  double rho = 0.0;                         // upgraded.kld / base.kld
  double rho_down = 0.0;                    // downgraded.kld / base.kld (with a downgrade)
  std::vector<AllocationRow> rows;          // [2 * layers]: K of layer 0, 1, ..., then V
  std::string kv_cache;                     // the plan as a --kv-cache value
  double base_bits = 0.0, plan_bits = 0.0;  // average bits per value, sink rows excluded
  double predicted_kld = 0.0;               // base KLD + the expected changes of the plan
};

// The per-layer exceptions that give `tensors` the format: "+k1-3=F+k9=F+v1=F" (K before V,
// runs of consecutive layers merged into ranges; "" for none).
std::string layer_exceptions(std::span<const KvTensor> tensors, std::string_view format);

// One candidate's ladder of formats, smallest first: step s takes it from format s to s + 1,
// saving gains[s] for costs[s] (> 0) bits.
struct Ladder {
  std::vector<double> gains, costs;
};

// The steps taken, greedily: among every ladder's next step, the largest gain per bit of cost
// (ties: the lower ladder) while start_bits + the costs taken so far stay <= budget. A ladder stops
// at a step with no positive gain or that does not fit (a cheaper step of another ladder may still
// fit). Returns per ladder the number of steps taken, in order of the choice in `order` when
// given (one entry per step: the ladder's index).
std::vector<int> climb_ladders(std::span<const Ladder> ladders, double start_bits, double budget,
                               std::vector<std::size_t>* order = nullptr);

// The scan, the choice and the plan's measurement. Each tensor's row goes to `on_row` as it is
// measured, when given. Formats with stream scales (fp8, int8, int4, nvfp4) are dynamic in every
// variant, at the base's granularity. InvalidArgument for a base with per-layer exceptions, an
// upgrade no larger than the base, a downgrade no smaller, or a budget below the smallest
// format's bits.
AllocationResult run_allocation(const AllocationOptions& options,
                                const std::function<void(const AllocationRow&, std::size_t done,
                                                         std::size_t total)>& on_row = {});

}  // namespace kvq::eval
