// The text pass: PPL of the scheme on the --text windows, and KLD / top-1 against the baseline
// over the same windows — against the baseline's cached top-K distributions (--kld topk: a
// lower bound and an upper bound on the KL) or the full ones (--kld exact: each window also runs
// as the baseline on the same model, the scheme's hooks off and a plain f32 cache).
//
// Cached per scheme as a part (keyed by Evaluator::ppl_key, without the GSM8K and decode
// options, so a run that adds GSM8K reuses it); finished windows are journaled until the part
// is written, so an interruption loses at most the window in flight.
#include <filesystem>

#include <fmt/format.h>

#include "kvq/core/log.h"
#include "kvq/eval/eval_task.h"
#include "kvq/eval/perplexity.h"
#include "kvq/eval/stats.h"
#include "kvq/io/read_file.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::eval {

KldOptions text_kld_options(const EvalOptions& o, std::optional<std::int32_t> bos) {
  KldOptions k;
  k.bos = bos;
  k.ctx = o.ctx;
  k.stride = o.ctx;
  k.max_windows = o.max_windows;
  k.top_k = o.top_k;
  k.progress = o.progress;
  return k;
}

namespace {

// Per-window sums of a per-token series. values [tokens], scored [windows].
std::vector<double> window_sums(std::span<const double> values,
                                std::span<const std::int64_t> scored) {
  std::vector<double> out;
  std::size_t t = 0;
  for (std::int64_t n : scored) {
    double s = 0;
    for (std::int64_t i = 0; i < n; ++i) s += values[t++];
    out.push_back(s);
  }
  return out;
}

void set_ppl(SchemeReport& r, std::vector<double> window_nll_sum, std::int64_t tokens) {
  r.has_ppl = r.has_kld = true;
  r.window_nll_sum = std::move(window_nll_sum);
  r.ppl_windows = static_cast<std::int64_t>(r.window_scored.size());
  r.ppl_tokens = tokens;
  const PerplexityCi ci = perplexity_ci(r.window_nll_sum, r.window_scored);
  r.ppl = ci.ppl, r.ppl_lo = ci.lo, r.ppl_hi = ci.hi;
}

// The baseline's fields from its own top-K cache: PPL from the cached NLLs (summed per window in
// token order, as a pass sums them), KLD 0 and top-1 1 exactly (the same model: the
// distributions are identical, so the bounds are 0 too).
void baseline_from_cache(const LogitsCache& cache, bool exact, SchemeReport& r) {
  r.window_scored = cache.header().window_scored;
  std::vector<double> sums;
  std::int64_t t = 0;
  for (std::int64_t n : r.window_scored) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += cache.token(t++).nll;
    sums.push_back(sum);
  }
  set_ppl(r, std::move(sums), cache.tokens());
  r.kld_exact = exact;
  r.kld = r.kld_se = r.kld_upper = 0.0;
  r.top1 = 1.0, r.top1_se = 0.0;
}

// The text fields of a row (PPL, KLD, top-1 and the KLD test against the baseline).
void copy_text_fields(const SchemeReport& from, SchemeReport& to) {
  to.has_ppl = from.has_ppl, to.has_kld = from.has_kld;
  to.ppl = from.ppl, to.ppl_lo = from.ppl_lo, to.ppl_hi = from.ppl_hi;
  to.ppl_tokens = from.ppl_tokens, to.ppl_windows = from.ppl_windows;
  to.kld_exact = from.kld_exact;
  to.kld = from.kld, to.kld_se = from.kld_se, to.kld_upper = from.kld_upper, to.kld_p = from.kld_p;
  to.top1 = from.top1, to.top1_se = from.top1_se;
  to.window_nll_sum = from.window_nll_sum;
  to.window_scored = from.window_scored;
}

KldResult scheme_kld(TaskContext& c, const std::filesystem::path& journal) {
  KldOptions ko = text_kld_options(c.options(), c.tokenizer.add_bos_id());
  ko.quant_kv = c.kv;
  ko.resume_file = journal;
  if (c.options().kld == KldMode::kTopK)
    return kld_against_cache(c.model, c.text, c.evaluator.baseline_logits(), ko);
  // One model is both sides: each window runs first as the baseline (the scheme's hooks off,
  // ko.base_kv a plain f32 cache), then as the scheme.
  lifecycle::QuantizationLifecycle* lc = c.lifecycle;
  if (lc) ko.select_side = [lc](bool quantized) { lc->set_quantization_enabled(quantized); };
  KldResult k = kld_side_by_side(c.model, c.model, c.text, ko);
  if (lc) lc->set_quantization_enabled(true);
  return k;
}

class TextTask final : public EvalTask {
 public:
  std::string_view name() const override { return "text"; }
  bool enabled(const EvalOptions& o) const override { return o.ppl_kld; }
  std::string key(const EvalOptions& o) const override {
    std::string s = fmt::format("ppl{}|ctx{}|w{}|k{}", o.ppl_kld, o.ctx, o.max_windows, o.top_k);
    if (o.kld == KldMode::kExact) s += "|kld=exact";
    if (o.ppl_kld && !is_default_text(o)) {
      const std::string bytes = io::read_file(text_path(o), "the --text file");
      s += fmt::format("|text={:016x}", fnv1a64(bytes.data(), bytes.size()));
    }
    return s;
  }
  void run(TaskContext& c, SchemeReport& r) const override {
    const std::string key = c.evaluator.ppl_key(c.scheme);
    const std::filesystem::path part = c.cache_file("ppl", key, ".json");
    if (auto j = part.empty() ? std::nullopt : read_cache_json(part)) {
      copy_text_fields(scheme_report_from_json(*j), r);
      log::info("{}: reusing PPL / KLD {}", c.scheme.name, part.string());
      return;
    }
    const std::filesystem::path journal = c.cache_file("kld-windows", key, ".jsonl");
    if (c.is_baseline()) {
      // Its row comes from the top-K cache built from it (the cached NLLs are the float64 values
      // a pass computes), not from a second pass; against itself the exact KL is 0 too.
      baseline_from_cache(c.evaluator.baseline_logits(), c.options().kld == KldMode::kExact, r);
    } else {
      const KldResult k = scheme_kld(c, journal);
      r.window_scored = k.window_scored;
      set_ppl(r, window_sums(k.quant_nll, k.window_scored), k.tokens);
      r.kld_exact = k.exact;
      r.kld = k.mean_kld, r.kld_se = k.kld_se, r.kld_upper = k.mean_kld_upper;
      r.top1 = k.top1_agreement, r.top1_se = k.top1_se;
      // The KLD test needs the per-window sums, which rows do not keep: run it now.
      compare_to_baseline(r, *c.baseline, window_sums(k.kld, k.window_scored));
    }
    if (!part.empty()) {
      write_cache_json(part, to_json(r));
      std::error_code ignored;  // the part holds it all now; the journal only took space
      if (!journal.empty()) std::filesystem::remove(journal, ignored);
    }
  }
};

}  // namespace

std::unique_ptr<EvalTask> make_text_task() { return std::make_unique<TextTask>(); }

}  // namespace kvq::eval
