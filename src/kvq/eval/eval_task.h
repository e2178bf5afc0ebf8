// Eval tasks: what `kvq compare` / `kvq eval` measure on a scheme. Evaluator::evaluate prepares
// the scheme (its hooks calibrated on the model, its KV cache resolved) and runs every task that
// is enabled under the options, in registry order; each task fills its fields of the scheme's
// row and caches what it wants through its context.
//
// Adding a task = one file under eval/tasks/ defining a `make_..._task()` and one line in
// eval_tasks() (eval/tasks/registry.cc); its options go in EvalOptions and its flag in
// apps/kvq/cmd_eval.cc / cmd_compare.cc.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/eval/compare.h"
#include "kvq/eval/kld.h"
#include "kvq/eval/report.h"
#include "kvq/model/kv_cache.h"

namespace kvq::model {
class CausalLM;
}
namespace kvq::tok {
class Tokenizer;
}

namespace kvq::eval {

// What a task sees of the scheme being evaluated.
struct TaskContext {
  Evaluator& evaluator;    // options, cache keys, the baseline's top-K distributions
  model::CausalLM& model;  // with the scheme's hooks installed (enabled)
  const tok::Tokenizer& tokenizer;
  const SchemeDef& scheme;
  const model::KvCacheConfig& kv;  // the cache the scheme runs with
  // The scheme's quantization hooks on `model`; null when it has none (the baseline, a scheme
  // with dynamic scales). Switched off (set_quantization_enabled) the model is the baseline.
  lifecycle::QuantizationLifecycle* lifecycle = nullptr;
  std::span<const std::int32_t> text;  // the --text file's tokens; empty when the text task is off
  const SchemeReport* baseline = nullptr;  // the baseline's row; null for the baseline itself

  const EvalOptions& options() const { return evaluator.options(); }
  bool is_baseline() const { return baseline == nullptr; }
  // OUT/cache/<part>-<scheme>-<key><extension>; empty without a cache directory.
  std::filesystem::path cache_file(std::string_view part, const std::string& key,
                                   std::string_view extension) const {
    return evaluator.cache_file(part, scheme, key, extension);
  }
};

class EvalTask {
 public:
  virtual ~EvalTask() = default;
  virtual std::string_view name() const = 0;
  // Whether the task runs under these options.
  virtual bool enabled(const EvalOptions& options) const = 0;
  // The task's part of the row key (Evaluator::row_key): the options its results depend on,
  // given whether or not it runs. An option added later enters it only when it is not at its
  // default, so existing caches stay valid.
  virtual std::string key(const EvalOptions& options) const = 0;
  // Measures the scheme and fills the task's fields of `row`.
  virtual void run(TaskContext& context, SchemeReport& row) const = 0;
};

// The tasks, in the order they run (and their keys are joined in): text (PPL + KLD), gsm8k,
// decode.
const std::vector<std::unique_ptr<EvalTask>>& eval_tasks();

// The windows of the text pass (the baseline's top-K cache and every scheme's pass); `bos`: the
// tokenizer's add_bos_id() (each window's first token fed as it, see perplexity.h).
KldOptions text_kld_options(const EvalOptions& options, std::optional<std::int32_t> bos);

// A cached JSON file; nullopt when missing or unreadable (with a warning: it is recomputed).
std::optional<nlohmann::json> read_cache_json(const std::filesystem::path& path);
// Written atomically, the directory created.
void write_cache_json(const std::filesystem::path& path, const nlohmann::json& json);

}  // namespace kvq::eval
