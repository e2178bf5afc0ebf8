#include "kvq/eval/kld.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/progress.h"
#include "kvq/eval/perplexity.h"
#include "kvq/eval/stats.h"
#include "kvq/io/jsonl_journal.h"
#include "kvq/model/causal_lm.h"

namespace kvq::eval {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
// Below this many logits per chunk a parallel region costs more than it saves (and spins
// badly on a loaded machine).
constexpr std::int64_t kParallelMin = 1 << 16;

// max and log-sum-exp of a logits row, float64.
struct RowStats {
  double max = 0.0, lse = 0.0;
  std::int32_t argmax = 0;  // lowest id among the maxima
};

// Also leaves exp(logit - max) of every logit in `exps` ([vocab]), for tail_log_mass: the
// exponentials are most of the per-token cost, and computing them once keeps both sums exact.
RowStats row_stats(std::span<const float> logits, std::vector<double>& exps) {
  RowStats s;
  double m = kNegInf;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > m) m = logits[i], s.argmax = static_cast<std::int32_t>(i);
  }
  exps.resize(logits.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    exps[i] = std::exp(static_cast<double>(logits[i]) - m);
    sum += exps[i];
  }
  s.max = m;
  s.lse = m + std::log(sum);
  return s;
}

// Per-thread scratch for row_stats' exponentials ([vocab] float64).
std::vector<double>& exp_scratch() {
  thread_local std::vector<double> exps;
  return exps;
}

RowStats row_stats(std::span<const float> logits) { return row_stats(logits, exp_scratch()); }

// log of the probability mass outside `in_set` (sorted ids), summed in vocab order so identical
// logits give identical results. exps: row_stats' exponentials of the same row.
double tail_log_mass(std::span<const double> exps, const RowStats& s,
                     std::span<const std::int32_t> sorted_ids) {
  double sum = 0.0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < exps.size(); ++i) {
    if (next < sorted_ids.size() && static_cast<std::size_t>(sorted_ids[next]) == i) {
      ++next;
      continue;
    }
    sum += exps[i];
  }
  return sum > 0.0 ? s.max + std::log(sum) - s.lse : kNegInf;
}

void check_vocab(std::span<const float> a, std::int32_t target) {
  KVQ_CHECK(target >= 0 && static_cast<std::size_t>(target) < a.size(), "target {} vocab {}",
            target, a.size());
}

void check_options(const KldOptions& o) {
  if (o.top_k < 1) fail<InvalidArgument>("kld: top_k must be >= 1, got {}", o.top_k);
  if (o.logits_chunk < 1) fail<InvalidArgument>("kld: logits_chunk must be >= 1");
}

std::vector<PerplexityWindow> windows_for(std::span<const std::int32_t> tokens,
                                          const KldOptions& o) {
  if (tokens.size() < 2)
    fail<InvalidArgument>("kld: need at least 2 tokens, got {}", tokens.size());
  return plan_windows(static_cast<std::int64_t>(tokens.size()), o.ctx,
                      o.stride == 0 ? o.ctx : o.stride, o.max_windows);
}

// Runs `model` on a window; returns final-norm hidden states [len, hidden].
// The window's first token is fed as `bos` when set.
Tensor window_hidden(model::CausalLM& model, std::span<const std::int32_t> tokens,
                     const PerplexityWindow& w, std::optional<std::int32_t> bos,
                     const model::KvCacheConfig& kv,
                     const std::function<void(model::KvCache&)>& prepare = {}) {
  model::KvCache cache = model.make_cache(1, w.end - w.begin, kv);
  if (prepare) prepare(cache);
  return model.forward_hidden(window_ids(tokens, w, bos), 1, cache);
}

// Calls fn(row, target, logits [rows, vocab]) for each chunk of scored rows of a window.
template <class F>
void for_each_chunk(model::CausalLM& model, const Tensor& hidden, const PerplexityWindow& w,
                    std::int64_t chunk, std::vector<float>& logits, F&& fn) {
  const std::int64_t hid = model.config().hidden_size;
  const std::int64_t first_row = w.score_begin - w.begin - 1;  // row r predicts begin + r + 1
  for (std::int64_t r0 = 0; r0 < w.scored(); r0 += chunk) {
    const std::int64_t rows = std::min(chunk, w.scored() - r0);
    model.compute_logits(hidden.f32() + (first_row + r0) * hid, rows, logits.data());
    fn(r0, rows);
  }
}

void finish(KldResult& r) {
  r.tokens = static_cast<std::int64_t>(r.kld.size());
  r.windows = static_cast<std::int64_t>(r.window_scored.size());
  const MeanSe kl = mean_se(r.kld);
  r.mean_kld = kl.mean;
  r.kld_se = kl.se;
  r.median_kld = percentile(r.kld, 50.0);
  r.p99_kld = percentile(r.kld, 99.0);
  r.max_kld = *std::max_element(r.kld.begin(), r.kld.end());
  r.mean_kld_upper = mean_se(r.kld_upper).mean;
  const MeanSe top1 = mean_se(r.top1_match);
  r.top1_agreement = top1.mean;
  r.top1_se = top1.se;
  r.ppl_base = std::exp(mean_se(r.base_nll).mean);
  r.ppl_quant = std::exp(mean_se(r.quant_nll).mean);
}

void push(KldResult& r, const TokenKl& t) {
  r.kld.push_back(t.kl);
  r.kld_upper.push_back(t.kl_upper);
  r.base_nll.push_back(t.base_nll);
  r.quant_nll.push_back(t.quant_nll);
  r.top1_match.push_back(t.top1_match ? 1 : 0);
}

// The per-token results of one window; kl_topk: KL_K per token (side by side only, else empty).
struct WindowRows {
  std::vector<TokenKl> rows;
  std::vector<double> kl_topk;
};

// The resume journal's record of one finished window (KldOptions::resume_file).
nlohmann::json window_record(std::int64_t window, const WindowRows& w) {
  nlohmann::json j;
  j["window"] = window;
  auto& kl = j["kld"] = nlohmann::json::array();
  auto& upper = j["kld_upper"] = nlohmann::json::array();
  auto& base = j["base_nll"] = nlohmann::json::array();
  auto& quant = j["quant_nll"] = nlohmann::json::array();
  auto& top1 = j["top1"] = nlohmann::json::array();
  for (const TokenKl& t : w.rows) {
    kl.push_back(t.kl);
    upper.push_back(t.kl_upper);
    base.push_back(t.base_nll);
    quant.push_back(t.quant_nll);
    top1.push_back(t.top1_match ? 1 : 0);
  }
  if (!w.kl_topk.empty()) j["kld_topk"] = w.kl_topk;
  return j;
}

// Windows finished in the journal at `path`: {window: its rows}. A record whose window or length
// does not fit these windows, that lacks kld_topk when `with_topk`, or with a non-finite value
// (JSON null), is skipped: it runs again.
std::map<std::int64_t, WindowRows> read_window_records(const std::filesystem::path& path,
                                                       const std::vector<PerplexityWindow>& windows,
                                                       bool with_topk) {
  std::map<std::int64_t, WindowRows> out;
  std::int64_t skipped = 0;
  for (const nlohmann::json& j : io::read_jsonl_journal(path)) {
    try {
      const auto wi = j.at("window").get<std::int64_t>();
      if (wi < 0 || wi >= static_cast<std::int64_t>(windows.size())) {
        ++skipped;
        continue;
      }
      const auto n = static_cast<std::size_t>(windows[static_cast<std::size_t>(wi)].scored());
      const auto kl = j.at("kld").get<std::vector<double>>();
      const auto upper = j.at("kld_upper").get<std::vector<double>>();
      const auto base = j.at("base_nll").get<std::vector<double>>();
      const auto quant = j.at("quant_nll").get<std::vector<double>>();
      const auto top1 = j.at("top1").get<std::vector<int>>();
      WindowRows w;
      if (with_topk) w.kl_topk = j.at("kld_topk").get<std::vector<double>>();
      if (kl.size() != n || upper.size() != n || base.size() != n || quant.size() != n ||
          top1.size() != n || (with_topk && w.kl_topk.size() != n)) {
        ++skipped;
        continue;
      }
      w.rows.resize(n);
      for (std::size_t i = 0; i < n; ++i)
        w.rows[i] = TokenKl{kl[i], upper[i], base[i], quant[i], top1[i] != 0};
      out[wi] = std::move(w);
    } catch (const nlohmann::json::exception&) {  // a missing field, or null for a NaN
      ++skipped;
    }
  }
  if (skipped > 0)
    log::warn("{}: skipped {} record(s) that do not fit these windows", path.string(), skipped);
  return out;
}

// A driver's resume state: the windows found in the journal, and the journal the others are
// appended to as they finish.
class WindowResume {
 public:
  WindowResume(const KldOptions& o, const std::vector<PerplexityWindow>& windows, bool with_topk) {
    if (o.resume_file.empty()) return;
    done_ = read_window_records(o.resume_file, windows, with_topk);
    if (!done_.empty())
      log::info("kld: {} of {} windows reused from {}", done_.size(), windows.size(),
                o.resume_file.string());
    if (done_.size() < windows.size()) journal_.emplace(o.resume_file);
  }
  // The journaled rows of window `wi` (moved out), or nullopt: run it.
  std::optional<WindowRows> take(std::size_t wi) {
    auto it = done_.find(static_cast<std::int64_t>(wi));
    if (it == done_.end()) return std::nullopt;
    return std::move(it->second);
  }
  void record(std::size_t wi, const WindowRows& w) {
    if (journal_) journal_->append(window_record(static_cast<std::int64_t>(wi), w));
  }

 private:
  std::map<std::int64_t, WindowRows> done_;
  std::optional<io::JsonlJournal> journal_;
};

}  // namespace

TokenKl token_kl_full(std::span<const float> base_logits, std::span<const float> quant_logits,
                      std::int32_t target) {
  KVQ_CHECK(base_logits.size() == quant_logits.size(), "vocab {} vs {}", base_logits.size(),
            quant_logits.size());
  check_vocab(base_logits, target);
  const RowStats p = row_stats(base_logits), q = row_stats(quant_logits);
  double kl = 0.0;
  for (std::size_t i = 0; i < base_logits.size(); ++i) {
    const double lp = static_cast<double>(base_logits[i]) - p.lse;
    const double lq = static_cast<double>(quant_logits[i]) - q.lse;
    kl += std::exp(lp) * (lp - lq);
  }
  TokenKl t;
  t.kl = t.kl_upper = kl;
  const auto u = static_cast<std::size_t>(target);
  t.base_nll = p.lse - base_logits[u];
  t.quant_nll = q.lse - quant_logits[u];
  t.top1_match = p.argmax == q.argmax;
  return t;
}

void topk_summary(std::span<const float> logits, std::int32_t target, std::int64_t k,
                  std::span<std::int32_t> ids, std::span<float> logp, float& log_rest,
                  double& nll) {
  check_vocab(logits, target);
  KVQ_CHECK(k >= 1 && static_cast<std::size_t>(k) <= logits.size() &&
                ids.size() == static_cast<std::size_t>(k) && logp.size() == ids.size(),
            "topk_summary k {}", k);
  std::vector<double>& exps = exp_scratch();
  const RowStats s = row_stats(logits, exps);
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      const float la = logits[static_cast<std::size_t>(a)];
                      const float lb = logits[static_cast<std::size_t>(b)];
                      return la > lb || (la == lb && a < b);
                    });
  for (std::int64_t j = 0; j < k; ++j) {
    const auto u = static_cast<std::size_t>(j);
    ids[u] = order[u];
    logp[u] =
        static_cast<float>(static_cast<double>(logits[static_cast<std::size_t>(order[u])]) - s.lse);
  }
  std::vector<std::int32_t> sorted(order.begin(), order.begin() + k);
  std::sort(sorted.begin(), sorted.end());
  log_rest = static_cast<float>(tail_log_mass(exps, s, sorted));
  nll = s.lse - logits[static_cast<std::size_t>(target)];
}

TokenKl token_kl_topk(const TopKView& base, std::span<const float> quant_logits,
                      std::int32_t target) {
  check_vocab(quant_logits, target);
  std::vector<double>& exps = exp_scratch();
  const RowStats q = row_stats(quant_logits, exps);
  TokenKl t;
  double head = 0.0;
  for (std::size_t j = 0; j < base.ids.size(); ++j) {
    // Rounded to float32 like the cached log-probs, so identical logits give exactly 0.
    const auto lq = static_cast<float>(
        static_cast<double>(quant_logits[static_cast<std::size_t>(base.ids[j])]) - q.lse);
    head += std::exp(static_cast<double>(base.logp[j])) *
            (static_cast<double>(base.logp[j]) - static_cast<double>(lq));
  }
  std::vector<std::int32_t> sorted(base.ids.begin(), base.ids.end());
  std::sort(sorted.begin(), sorted.end());
  const double rest = std::exp(static_cast<double>(base.log_rest));
  double tail_lower = 0.0, tail_upper = 0.0;
  if (rest > 0.0) {
    const auto lq_rest = static_cast<float>(tail_log_mass(exps, q, sorted));
    tail_lower = rest * (static_cast<double>(base.log_rest) - static_cast<double>(lq_rest));
    // Upper bound: chunks of p_cap on the tail tokens with the smallest Q.
    const double log_cap = static_cast<double>(base.logp.back());
    const double cap = std::exp(log_cap);
    std::vector<double> lq_tail;
    lq_tail.reserve(quant_logits.size() - sorted.size());
    std::size_t next = 0;
    for (std::size_t i = 0; i < quant_logits.size(); ++i) {
      if (next < sorted.size() && static_cast<std::size_t>(sorted[next]) == i) {
        ++next;
        continue;
      }
      lq_tail.push_back(static_cast<double>(quant_logits[i]) - q.lse);
    }
    double remaining = rest;
    const auto full = std::min<std::size_t>(static_cast<std::size_t>(rest / cap), lq_tail.size());
    const std::size_t need = std::min(full + 1, lq_tail.size());
    std::nth_element(lq_tail.begin(), lq_tail.begin() + static_cast<std::ptrdiff_t>(need - 1),
                     lq_tail.end());
    std::sort(lq_tail.begin(), lq_tail.begin() + static_cast<std::ptrdiff_t>(need));
    for (std::size_t j = 0; j < need && remaining > 0.0; ++j) {
      const double m = std::min(cap, remaining);
      tail_upper += m * (std::log(m) - lq_tail[j]);
      remaining -= m;
    }
    tail_upper = std::max(tail_upper, tail_lower);
  }
  t.kl = head + tail_lower;
  t.kl_upper = head + tail_upper;
  t.base_nll = base.nll;
  t.quant_nll = q.lse - quant_logits[static_cast<std::size_t>(target)];
  t.top1_match = base.ids[0] == q.argmax;
  return t;
}

KldResult kld_side_by_side(model::CausalLM& base, model::CausalLM& quant,
                           std::span<const std::int32_t> tokens, const KldOptions& options) {
  check_options(options);
  if (base.config().vocab_size != quant.config().vocab_size) {
    fail<InvalidArgument>("kld: vocab sizes differ ({} vs {})", base.config().vocab_size,
                          quant.config().vocab_size);
  }
  const auto windows = windows_for(tokens, options);
  const std::int64_t vocab = base.config().vocab_size;
  const std::int64_t k = std::min(options.top_k, vocab);
  KldResult r;
  r.exact = true;
  std::int64_t total = 0;
  for (const auto& w : windows) total += w.end - w.begin;
  ProgressBar bar("kld", total, "tok", !options.progress);
  const auto t0 = std::chrono::steady_clock::now();
  const auto chunk = static_cast<std::size_t>(options.logits_chunk);
  std::vector<float> lb(chunk * static_cast<std::size_t>(vocab)), lq(lb.size());  // [chunk, vocab]
  WindowResume resume(options, windows, /*with_topk=*/true);
  WindowRows out;  // [window's scored] each
  double topk_sum = 0.0;
  for (std::size_t wi = 0; wi < windows.size(); ++wi) {
    const auto& w = windows[wi];
    if (auto done = resume.take(wi)) {
      out = std::move(*done);
    } else {
      out.rows.assign(static_cast<std::size_t>(w.scored()), TokenKl{});
      out.kl_topk.assign(out.rows.size(), 0.0);
      if (options.select_side) options.select_side(false);
      const Tensor hb = window_hidden(base, tokens, w, options.bos, options.base_kv);
      if (options.select_side) options.select_side(true);
      const Tensor hq = window_hidden(quant, tokens, w, options.bos, options.quant_kv,
                                      options.prepare_quant_cache);
      for_each_chunk(
          base, hb, w, options.logits_chunk, lb, [&](std::int64_t r0, std::int64_t rows) {
            const std::int64_t hid = quant.config().hidden_size;
            quant.compute_logits(hq.f32() + (w.score_begin - w.begin - 1 + r0) * hid, rows,
                                 lq.data());
#pragma omp parallel for schedule(dynamic, 8) if (rows * vocab >= kParallelMin)
            for (std::int64_t i = 0; i < rows; ++i) {
              const auto u = static_cast<std::size_t>(i);
              const auto o = static_cast<std::size_t>(r0 + i);
              const std::span<const float> pb(lb.data() + u * vocab,
                                              static_cast<std::size_t>(vocab));
              const std::span<const float> pq(lq.data() + u * vocab,
                                              static_cast<std::size_t>(vocab));
              const std::int32_t target = tokens[static_cast<std::size_t>(w.score_begin + r0 + i)];
              out.rows[o] = token_kl_full(pb, pq, target);
              std::vector<std::int32_t> ids(static_cast<std::size_t>(k));
              std::vector<float> logp(static_cast<std::size_t>(k));
              float log_rest = 0.0f;
              double nll = 0.0;
              topk_summary(pb, target, k, ids, logp, log_rest, nll);
              out.kl_topk[o] = token_kl_topk({nll, log_rest, ids, logp}, pq, target).kl;
            }
          });
      resume.record(wi, out);
    }
    for (std::size_t i = 0; i < out.rows.size();
         ++i) {  // serial, in order: thread-count independent
      push(r, out.rows[i]);
      topk_sum += out.kl_topk[i];
    }
    r.window_scored.push_back(w.scored());
    bar.advance(w.end - w.begin);
  }
  bar.finish();
  finish(r);
  r.mean_kld_topk = topk_sum / static_cast<double>(r.tokens);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

LogitsCacheHeader logits_cache_header(std::uint64_t model_hash, std::int64_t vocab,
                                      std::span<const std::int32_t> tokens,
                                      const KldOptions& options) {
  check_options(options);
  LogitsCacheHeader h;
  h.model_hash = model_hash;
  h.tokens_hash = hash_tokens(tokens);
  h.ctx = options.ctx;
  h.stride = options.stride == 0 ? options.ctx : options.stride;
  h.max_windows = options.max_windows;
  h.top_k = std::min(options.top_k, vocab);
  h.vocab = vocab;
  for (const auto& w : windows_for(tokens, options)) h.window_scored.push_back(w.scored());
  return h;
}

LogitsCache build_logits_cache(model::CausalLM& base, std::span<const std::int32_t> tokens,
                               const KldOptions& options, std::uint64_t model_hash,
                               const std::optional<std::filesystem::path>& path) {
  const std::int64_t vocab = base.config().vocab_size;
  const LogitsCacheHeader header = logits_cache_header(model_hash, vocab, tokens, options);
  if (path) {
    if (auto cached = LogitsCache::load_if_matching(*path, header)) return std::move(*cached);
  }
  std::optional<LogitsCacheWriter> writer;
  if (path) writer.emplace(*path, header);
  LogitsCache out = writer ? writer->resumed() : LogitsCache(header);
  const auto windows = windows_for(tokens, options);
  const std::int64_t k = header.top_k;
  ProgressBar bar("kld baseline", static_cast<std::int64_t>(windows.size()), "win",
                  !options.progress);
  const auto chunk = static_cast<std::size_t>(options.logits_chunk);
  std::vector<float> logits(chunk * static_cast<std::size_t>(vocab));  // [chunk, vocab]
  std::vector<std::int32_t> ids(chunk * static_cast<std::size_t>(k));
  std::vector<float> logp(ids.size()), rest(chunk);
  std::vector<double> nll(chunk);
  for (std::size_t wi = writer ? static_cast<std::size_t>(writer->windows_done()) : 0;
       wi < windows.size(); ++wi) {
    const auto& w = windows[wi];
    LogitsCache window_records(header);
    const Tensor h = window_hidden(base, tokens, w, options.bos, options.base_kv);
    for_each_chunk(
        base, h, w, options.logits_chunk, logits, [&](std::int64_t r0, std::int64_t rows) {
#pragma omp parallel for schedule(dynamic, 8) if (rows * vocab >= kParallelMin)
          for (std::int64_t i = 0; i < rows; ++i) {
            const auto u = static_cast<std::size_t>(i);
            const std::int32_t target = tokens[static_cast<std::size_t>(w.score_begin + r0 + i)];
            topk_summary(
                std::span<const float>(logits.data() + u * vocab, static_cast<std::size_t>(vocab)),
                target, k, std::span<std::int32_t>(ids.data() + u * k, static_cast<std::size_t>(k)),
                std::span<float>(logp.data() + u * k, static_cast<std::size_t>(k)), rest[u],
                nll[u]);
          }
          for (std::int64_t i = 0; i < rows; ++i) {
            const auto u = static_cast<std::size_t>(i);
            window_records.append(
                nll[u], rest[u],
                std::span<const std::int32_t>(ids.data() + u * k, static_cast<std::size_t>(k)),
                std::span<const float>(logp.data() + u * k, static_cast<std::size_t>(k)));
          }
        });
    if (writer) writer->append_window(window_records);
    for (std::int64_t i = 0; i < window_records.tokens(); ++i) {
      const TopKView t = window_records.token(i);
      out.append(t.nll, t.log_rest, t.ids, t.logp);
    }
    bar.advance(1);
  }
  bar.finish();
  if (writer) writer->commit();
  return out;
}

KldResult kld_against_cache(model::CausalLM& quant, std::span<const std::int32_t> tokens,
                            const LogitsCache& cache, const KldOptions& options) {
  check_options(options);
  const std::int64_t vocab = quant.config().vocab_size;
  LogitsCacheHeader expected =
      logits_cache_header(cache.header().model_hash, vocab, tokens, options);
  if (!(expected == cache.header()) || cache.tokens() != cache.header().tokens_scored()) {
    fail<InvalidArgument>(
        "kld: the baseline logits cache was made for other tokens, windows, "
        "top_k or vocab; rebuild it");
  }
  const auto windows = windows_for(tokens, options);
  WindowResume resume(options, windows, /*with_topk=*/false);
  KldResult r;
  r.exact = false;
  std::int64_t total = 0;
  for (const auto& w : windows) total += w.end - w.begin;
  ProgressBar bar("kld", total, "tok", !options.progress);
  const auto t0 = std::chrono::steady_clock::now();
  const auto chunk = static_cast<std::size_t>(options.logits_chunk);
  std::vector<float> logits(chunk * static_cast<std::size_t>(vocab));  // [chunk, vocab]
  WindowRows out;                                                      // [window's scored]
  std::int64_t record = 0;
  for (std::size_t wi = 0; wi < windows.size(); ++wi) {
    const auto& w = windows[wi];
    if (auto done = resume.take(wi)) {
      out = std::move(*done);
    } else {
      out.rows.resize(static_cast<std::size_t>(w.scored()));
      const Tensor h = window_hidden(quant, tokens, w, options.bos, options.quant_kv,
                                     options.prepare_quant_cache);
      for_each_chunk(
          quant, h, w, options.logits_chunk, logits, [&](std::int64_t r0, std::int64_t rows) {
#pragma omp parallel for schedule(dynamic, 8) if (rows * vocab >= kParallelMin)
            for (std::int64_t i = 0; i < rows; ++i) {
              const auto u = static_cast<std::size_t>(i);
              const std::int32_t target = tokens[static_cast<std::size_t>(w.score_begin + r0 + i)];
              out.rows[static_cast<std::size_t>(r0 + i)] =
                  token_kl_topk(cache.token(record + r0 + i),
                                std::span<const float>(logits.data() + u * vocab,
                                                       static_cast<std::size_t>(vocab)),
                                target);
            }
          });
      resume.record(wi, out);
    }
    for (const TokenKl& t : out.rows) push(r, t);
    record += w.scored();
    r.window_scored.push_back(w.scored());
    bar.advance(w.end - w.begin);
  }
  bar.finish();
  finish(r);
  r.mean_kld_topk = r.mean_kld;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kvq::eval
