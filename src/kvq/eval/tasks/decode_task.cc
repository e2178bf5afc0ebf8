// Decode tokens/s with the scheme's KV cache: prefill `decode_context` tokens of the text, then
// time single-token forwards (median of 3 repeats of `decode_steps` steps). Never cached apart
// from the row (a timing).
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "kvq/eval/eval_task.h"
#include "kvq/model/causal_lm.h"

namespace kvq::eval {
namespace {

double measure_decode(model::CausalLM& m, const model::KvCacheConfig& kv,
                      std::span<const std::int32_t> text, std::int64_t context,
                      std::int64_t steps) {
  if (steps <= 0 || static_cast<std::int64_t>(text.size()) < context + steps) return 0.0;
  model::KvCache cache = m.make_cache(1, context + steps, kv);
  std::vector<double> rates;
  for (int rep = 0; rep < 3; ++rep) {
    cache.reset();
    m.forward(text.subspan(0, static_cast<std::size_t>(context)), cache);
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < steps; ++i)
      m.forward(text.subspan(static_cast<std::size_t>(context + i), 1), cache);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(static_cast<double>(steps) / seconds);
  }
  std::sort(rates.begin(), rates.end());
  return rates[1];
}

class DecodeTask final : public EvalTask {
 public:
  std::string_view name() const override { return "decode"; }
  bool enabled(const EvalOptions& o) const override { return o.decode_steps > 0; }
  std::string key(const EvalOptions& o) const override {
    return fmt::format("d{}:{}", o.decode_context, o.decode_steps);
  }
  void run(TaskContext& c, SchemeReport& r) const override {
    if (c.text.empty()) return;  // the text task is off: no tokens to prefill
    const EvalOptions& o = c.options();
    r.decode_context = o.decode_context;
    r.decode_tok_s = measure_decode(c.model, c.kv, c.text, o.decode_context, o.decode_steps);
  }
};

}  // namespace

std::unique_ptr<EvalTask> make_decode_task() { return std::make_unique<DecodeTask>(); }

}  // namespace kvq::eval
