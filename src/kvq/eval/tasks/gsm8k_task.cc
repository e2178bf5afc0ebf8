// GSM8K accuracy (gsm8k.h: lm-eval's chat few-shot task) with the scheme's KV cache; the answers
// are cached one question at a time (a JSONL journal keyed by Evaluator::gsm8k_key), so raising
// --gsm8k-limit only generates the new ones.
#include <fmt/format.h>

#include "kvq/eval/eval_task.h"
#include "kvq/eval/gsm8k.h"

namespace kvq::eval {
namespace {

class Gsm8kTask final : public EvalTask {
 public:
  std::string_view name() const override { return "gsm8k"; }
  bool enabled(const EvalOptions& o) const override { return o.gsm8k_limit > 0; }
  std::string key(const EvalOptions& o) const override {
    return fmt::format("g{}:{}", o.gsm8k_limit, o.gsm8k_max_new_tokens);
  }
  void run(TaskContext& c, SchemeReport& r) const override {
    const EvalOptions& o = c.options();
    Gsm8kOptions g;
    g.data_dir = gsm8k_dir(o.data_dir);
    g.limit = o.gsm8k_limit;
    g.max_new_tokens = o.gsm8k_max_new_tokens;
    g.kv_cache = c.kv;
    g.progress = o.progress;
    g.batch = o.gsm8k_batch;
    g.resume_file = c.cache_file("gsm8k", c.evaluator.gsm8k_key(c.scheme), ".jsonl");
    const Gsm8kResult gr = run_gsm8k(c.model, c.tokenizer, g);
    r.has_gsm8k = true;
    r.gsm8k_n = static_cast<std::int64_t>(gr.records.size());
    r.gsm8k = gr.flexible_extract.mean, r.gsm8k_se = gr.flexible_extract.se;
    r.gsm8k_strict = gr.strict_match.mean, r.gsm8k_strict_se = gr.strict_match.se;
    for (const auto& rec : gr.records)
      r.gsm8k_correct.push_back(rec.score.flexible_correct ? 1 : 0);
  }
};

}  // namespace

std::unique_ptr<EvalTask> make_gsm8k_task() { return std::make_unique<Gsm8kTask>(); }

}  // namespace kvq::eval
