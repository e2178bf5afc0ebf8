#include "kvq/eval/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/eval/stats.h"

namespace kvq::eval {

std::string significance_marker(double p_value) {
  return std::isfinite(p_value) && p_value < kSignificanceLevel ? "*" : "";
}

std::string format_number(double v, int digits, bool sign) {
  if (std::isnan(v)) return "n/a";
  return sign ? fmt::format("{:+.{}f}", v, digits) : fmt::format("{:.{}f}", v, digits);
}

std::optional<PplDelta> ppl_delta(const SchemeReport& from, const SchemeReport& to) {
  if (!from.has_ppl || !to.has_ppl || to.window_nll_sum.empty() ||
      to.window_nll_sum.size() != from.window_nll_sum.size() ||
      to.window_scored != from.window_scored)
    return std::nullopt;
  const std::vector<double> w(to.window_scored.begin(), to.window_scored.end());
  const auto pb = paired_bootstrap(from.window_nll_sum, to.window_nll_sum, w, BootstrapOptions{});
  PplDelta d;
  d.delta = to.ppl - from.ppl;
  d.lo = from.ppl * std::expm1(pb.ci.lo);
  d.hi = from.ppl * std::expm1(pb.ci.hi);
  // Windows are the resampled units: with one window there is no variability to resample, so
  // no p-value (NaN: no marker) rather than a spurious 1 / (1 + B).
  d.p = to.window_scored.size() >= 2 ? pb.p_value : NAN;
  return d;
}

std::vector<RankStep> rank_by_ppl(const std::vector<SchemeReport>& rows) {
  std::vector<const SchemeReport*> ranked;
  for (const auto& r : rows)
    if (r.has_ppl) ranked.push_back(&r);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const SchemeReport* a, const SchemeReport* b) { return a->ppl < b->ppl; });
  std::vector<RankStep> out;
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    RankStep s{ranked[i]->scheme, ranked[i]->ppl, "", std::nullopt};
    if (i > 0) {
      s.above = ranked[i - 1]->scheme;
      s.step = ppl_delta(*ranked[i - 1], *ranked[i]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// 4.5, 8.0; 4.52 where a per-sequence cost (sink rows) is spread over the context.
int bits_decimals(double bits) {
  return std::fabs(bits * 10.0 - std::round(bits * 10.0)) < 1e-9 ? 1 : 2;
}

std::string ppl_cell(const SchemeReport& r) {
  if (!r.has_ppl) return "–";
  return fmt::format("{} [{}, {}]", format_number(r.ppl, 3), format_number(r.ppl_lo, 3),
                     format_number(r.ppl_hi, 3));
}
std::string dppl_cell(const SchemeReport& r, bool baseline) {
  if (!r.has_ppl || baseline) return "–";
  return format_number(r.dppl, 3, true) + significance_marker(r.dppl_p);
}
std::string kld_cell(const SchemeReport& r, bool baseline) {
  if (!r.has_kld) return "–";
  if (baseline) return format_number(r.kld, 5);
  return fmt::format("{} ± {}{}", format_number(r.kld, 5), format_number(r.kld_se, 5),
                     significance_marker(r.kld_p));
}
std::string top1_cell(const SchemeReport& r) {
  if (!r.has_kld) return "–";
  return fmt::format("{:.2f}%", 100.0 * r.top1);
}
std::string gsm8k_cell(const SchemeReport& r, bool baseline) {
  if (!r.has_gsm8k) return "–";
  std::string s = fmt::format("{:.1f} ± {:.1f}", 100.0 * r.gsm8k, 100.0 * r.gsm8k_se);
  if (!baseline)
    s += fmt::format(" ({:+.1f}{})", 100.0 * r.gsm8k_delta, significance_marker(r.gsm8k_p));
  return s;
}

}  // namespace

std::string compare_markdown(const std::vector<SchemeReport>& rows, const CompareMeta& meta) {
  std::string out;
  out += fmt::format(
      "kvq compare: {} — {} ctx {}, {} windows; calibration {} GSM8K-train samples; "
      "GSM8K {} questions\n\n",
      meta.model, meta.text, meta.ctx,
      meta.max_windows == 0 ? std::string("all") : std::to_string(meta.max_windows),
      meta.calib_samples,
      meta.gsm8k_limit == 0 ? std::string("0 (skipped)") : std::to_string(meta.gsm8k_limit));
  out +=
      "| scheme | GSM8K % (±SE) | PPL [95% CI] | ΔPPL | KLD (±SE) | top-1 | KV bits/value | "
      "KV bytes/token | decode tok/s |\n";
  out += "|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const bool base = r.scheme == "baseline";
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.scheme,
                       gsm8k_cell(r, base), ppl_cell(r), dppl_cell(r, base), kld_cell(r, base),
                       top1_cell(r),
                       format_number(r.kv_bits_per_value, bits_decimals(r.kv_bits_per_value)),
                       r.kv_bytes_per_token,
                       r.decode_tok_s > 0 ? format_number(r.decode_tok_s, 1) : std::string("–"));
  }
  bool any_cached = false, any_exact = false;
  for (const auto& r : rows) {
    if (!r.has_kld || r.scheme == "baseline") continue;
    (r.kld_exact ? any_exact : any_cached) = true;
  }
  std::string kld_note;
  if (any_cached)
    kld_note +=
        " KLD against the top-K cached baseline distribution (a lower bound; "
        "results.json has the upper bound).";
  if (any_exact) kld_note += " KLD over the full vocabulary (exact, --kld exact).";
  out += fmt::format(
      "\n`*`: differs from the baseline at the 5% level (paired bootstrap over windows for "
      "ΔPPL and KLD, exact McNemar for GSM8K).{}\n",
      kld_note);
  const auto ranking = rank_by_ppl(rows);
  if (ranking.size() >= 2) {
    out +=
        "\nRanked by PPL; each step is the PPL difference to the scheme ranked just above, "
        "with its 95% CI (paired bootstrap over windows; `*`: significant at 5%, so the order of "
        "that pair is real):\n\n";
    out += "| rank | scheme | PPL | step from the one above [95% CI] |\n|---|---|---|---|\n";
    for (std::size_t i = 0; i < ranking.size(); ++i) {
      const auto& s = ranking[i];
      std::string step = "–";
      if (s.step)
        step = fmt::format("{} [{}, {}]{} vs {}", format_number(s.step->delta, 3, true),
                           format_number(s.step->lo, 3, true), format_number(s.step->hi, 3, true),
                           significance_marker(s.step->p), s.above);
      out += fmt::format("| {} | {} | {} | {} |\n", i + 1, s.scheme, format_number(s.ppl, 3), step);
    }
  }
  return out;
}

nlohmann::json to_json(const SchemeReport& r) {
  nlohmann::json j;
  j["scheme"] = r.scheme;
  j["kv_format"] = r.kv_format;
  j["kv_bits_per_value"] = r.kv_bits_per_value;
  j["kv_bytes_per_token"] = r.kv_bytes_per_token;
  if (r.has_ppl)
    j["wikitext2"] = {{"ppl", r.ppl},
                      {"ppl_ci", {r.ppl_lo, r.ppl_hi}},
                      {"tokens", r.ppl_tokens},
                      {"windows", r.ppl_windows},
                      {"delta_ppl", r.dppl},
                      {"delta_ppl_ci", {r.dppl_lo, r.dppl_hi}},
                      {"delta_ppl_p", r.dppl_p},
                      {"window_nll_sum", r.window_nll_sum},
                      {"window_scored", r.window_scored}};
  if (r.has_kld)
    j["kld"] = {{"mean", r.kld},        {"se", r.kld_se}, {"upper", r.kld_upper}, {"p", r.kld_p},
                {"exact", r.kld_exact}, {"top1", r.top1}, {"top1_se", r.top1_se}};
  if (r.has_gsm8k)
    j["gsm8k"] = {{"n", r.gsm8k_n},
                  {"flexible_extract", r.gsm8k},
                  {"flexible_extract_se", r.gsm8k_se},
                  {"strict_match", r.gsm8k_strict},
                  {"strict_match_se", r.gsm8k_strict_se},
                  {"delta", r.gsm8k_delta},
                  {"mcnemar_p", r.gsm8k_p},
                  {"correct", r.gsm8k_correct}};
  j["decode"] = {{"tokens_per_second", r.decode_tok_s}, {"context", r.decode_context}};
  j["calibration"] = {{"samples", r.calib_samples}, {"seconds", r.calib_seconds}};
  j["eval_seconds"] = r.eval_seconds;
  return j;
}

namespace {
// A double field; null (how nlohmann writes NaN) reads back as NaN.
struct D {
  const nlohmann::json& v;
  operator double() const {  // NOLINT(google-explicit-constructor)
    return v.is_null() ? std::nan("") : v.get<double>();
  }
};
}  // namespace

SchemeReport scheme_report_from_json(const nlohmann::json& j) {
  SchemeReport r;
  try {
    r.scheme = j.at("scheme").get<std::string>();
    r.kv_format = j.at("kv_format").get<std::string>();
    r.kv_bits_per_value = j.at("kv_bits_per_value").get<double>();
    r.kv_bytes_per_token = j.at("kv_bytes_per_token").get<std::int64_t>();
    if (j.contains("wikitext2")) {
      const auto& w = j["wikitext2"];
      r.has_ppl = true;
      r.ppl = D{w.at("ppl")};
      r.ppl_lo = D{w.at("ppl_ci").at(0)};
      r.ppl_hi = D{w.at("ppl_ci").at(1)};
      r.ppl_tokens = w.at("tokens");
      r.ppl_windows = w.at("windows");
      r.dppl = D{w.at("delta_ppl")};
      r.dppl_lo = D{w.at("delta_ppl_ci").at(0)};
      r.dppl_hi = D{w.at("delta_ppl_ci").at(1)};
      r.dppl_p = D{w.at("delta_ppl_p")};
      r.window_nll_sum = w.at("window_nll_sum").get<std::vector<double>>();
      r.window_scored = w.at("window_scored").get<std::vector<std::int64_t>>();
    }
    if (j.contains("kld")) {
      const auto& k = j["kld"];
      r.has_kld = true;
      r.kld = D{k.at("mean")};
      r.kld_se = D{k.at("se")};
      r.kld_upper = D{k.at("upper")};
      r.kld_p = D{k.at("p")};
      r.kld_exact = k.at("exact");
      r.top1 = D{k.at("top1")};
      r.top1_se = D{k.at("top1_se")};
    }
    if (j.contains("gsm8k")) {
      const auto& g = j["gsm8k"];
      r.has_gsm8k = true;
      r.gsm8k_n = g.at("n");
      r.gsm8k = D{g.at("flexible_extract")};
      r.gsm8k_se = D{g.at("flexible_extract_se")};
      r.gsm8k_strict = D{g.at("strict_match")};
      r.gsm8k_strict_se = D{g.at("strict_match_se")};
      r.gsm8k_delta = D{g.at("delta")};
      r.gsm8k_p = D{g.at("mcnemar_p")};
      r.gsm8k_correct = g.at("correct").get<std::vector<std::uint8_t>>();
    }
    r.decode_tok_s = j.at("decode").at("tokens_per_second");
    r.decode_context = j.at("decode").at("context");
    r.calib_samples = j.at("calibration").at("samples");
    r.calib_seconds = j.at("calibration").at("seconds");
    r.eval_seconds = j.at("eval_seconds");
  } catch (const nlohmann::json::exception& e) {
    fail<FormatError>("scheme result JSON: {}", e.what());
  }
  return r;
}

nlohmann::json compare_json(const std::vector<SchemeReport>& rows, const CompareMeta& meta) {
  nlohmann::json j;
  j["model"] = meta.model;
  j["text"] = meta.text;
  j["options"] = {{"ctx", meta.ctx},
                  {"max_windows", meta.max_windows},
                  {"calib_samples", meta.calib_samples},
                  {"gsm8k_limit", meta.gsm8k_limit}};
  j["significance_level"] = kSignificanceLevel;
  j["schemes"] = nlohmann::json::array();
  for (const auto& r : rows) j["schemes"].push_back(to_json(r));
  j["ranking_by_ppl"] = nlohmann::json::array();
  for (const auto& s : rank_by_ppl(rows)) {
    nlohmann::json e = {{"scheme", s.scheme}, {"ppl", s.ppl}};
    if (s.step)
      e["step"] = {{"above", s.above},
                   {"delta_ppl", s.step->delta},
                   {"delta_ppl_ci", {s.step->lo, s.step->hi}},
                   {"p", s.step->p}};
    j["ranking_by_ppl"].push_back(e);
  }
  return j;
}

}  // namespace kvq::eval
