#include "kvq/eval/compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/strings.h"
#include "kvq/eval/builtin_recipes.h"
#include "kvq/eval/eval_task.h"
#include "kvq/eval/kld.h"
#include "kvq/eval/logits_cache.h"
#include "kvq/eval/perplexity.h"
#include "kvq/eval/plot_png.h"
#include "kvq/eval/stats.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"
#include "kvq/lifecycle/apply.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/quant/recipe.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq/runtime/model_source.h"

namespace kvq::eval {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string hex(std::uint64_t v) { return fmt::format("{:016x}", v); }
std::uint64_t hash_str(std::string_view s, std::uint64_t seed = 0xcbf29ce484222325ULL) {
  return fnv1a64(s.data(), s.size(), seed);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::optional<Json> read_cache_json(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) return std::nullopt;
  try {
    return io::read_json_file(p);
  } catch (const std::exception& e) {
    log::warn("ignoring unreadable cache file {}: {}", p.string(), e.what());
    return std::nullopt;
  }
}
void write_cache_json(const fs::path& p, const Json& j) {
  fs::create_directories(p.parent_path());
  io::write_file_atomic(p, j.dump(1));
}

KldMode parse_kld_mode(std::string_view name) {
  if (name == "topk") return KldMode::kTopK;
  if (name == "exact") return KldMode::kExact;
  fail<InvalidArgument>("--kld must be topk or exact, got '{}'", name);
}

const std::vector<SchemeDef>& builtin_schemes() {
  // The recipes are examples/recipes/*.yaml, compiled in (builtin_recipes.h): what compare runs
  // is what a user copies.
  const auto r = [](std::string_view file) { return std::string(builtin_recipe(file)); };
  static const std::vector<SchemeDef> table = {
      {"baseline", "unquantized (fp32 KV cache)", ""},
      {"KV-FP8-Tensor", "FP8 E4M3 K/V, one scale per tensor", r("kv_fp8_tensor.yaml")},
      {"KV-FP8-Head", "FP8 E4M3 K/V, one scale per KV head", r("kv_fp8_head.yaml")},
      {"QKV-FP8-Tensor", "FP8 E4M3 Q/K/V (attention group), per tensor", r("qkv_fp8_tensor.yaml")},
      {"QKV-FP8-Head", "FP8 E4M3 Q/K/V (attention group), per head", r("qkv_fp8_head.yaml")},
      {"KV-INT8-Head", "INT8 symmetric K/V, per KV head", r("kv_int8_head.yaml")},
      {"KV-INT4-Head", "INT4 symmetric K/V, per KV head", r("kv_int4_head.yaml")},
      // No recipe: the packed cache quantizes K/V itself with dynamic per-head global scales
      // (vLLM-style, see model/kv_cache.h) and nothing is calibrated.
      {"KV-NVFP4", "NVFP4 K/V packed cache (E2M1, 16-value E4M3 block scales, dynamic global)", "",
       "nvfp4:head"},
      // SpinQuant R2 + R3 (Hadamard rotations of every head of q, k and v) before quantization:
      // llama.cpp's KV rotation, expressed as llm-compressor rotations.
      {"KV-FP8-Head+R3", "KV-FP8-Head with SpinQuant R2 + R3 Hadamard rotations",
       r("kv_fp8_head_r3.yaml")},
      {"KV-INT4-Head+R3", "KV-INT4-Head with SpinQuant R2 + R3 Hadamard rotations",
       r("kv_int4_head_r3.yaml")},
      {"KV-NVFP4+R3", "KV-NVFP4 (dynamic) of K/V rotated by SpinQuant R2 + R3",
       r("rotate_r2_r3.yaml"), "nvfp4:head"},
      // kv_nvfp4.yaml: compressed-tensors' FP4 per-head kv scheme, packed as NVFP4 under the
      // calibrated global scale 448 / k_scale. Not in the default list (run it by name).
      {"KV-NVFP4-Calibrated",
       "NVFP4 K/V packed cache, global scale per KV head calibrated (kv_nvfp4.yaml)",
       r("kv_nvfp4.yaml"), "auto", false, false},
      // llama.cpp's q8_0 / q4_0 KV caches: one fp16 scale per 32 values inside each row, from
      // that row (nothing calibrated). Not in the default list (run them by name).
      {"KV-INT8-Group32", "INT8 K/V packed cache, one fp16 scale per 32 values (q8_0-style)", "",
       "int8_g32", false, false},
      {"KV-INT4-Group32", "INT4 K/V packed cache, one fp16 scale per 32 values (q4_0-style)", "",
       "int4_g32", false, false},
      {"KV-INT4-Group32+R3", "KV-INT4-Group32 of K/V rotated by SpinQuant R2 + R3",
       r("rotate_r2_r3.yaml"), "int4_g32", false, false},
      // int4_g32's bytes with clipping-searched block scales, after the rotations and (+KS) kvq's
      // key smoothing: kvq's best 4-bit cache (4.5 bits per value, like q4_0).
      {"KV-INT4-Group32-MSE+R3", "int4_g32_mse K/V (q4_0 bytes, searched scales), R2 + R3",
       r("rotate_r2_r3.yaml"), "int4_g32_mse", false, false},
      {"KV-INT4-Group32-MSE+R3+KS",
       "KV-INT4-Group32-MSE+R3 after key smoothing (calibrated per-channel K scaling + centring)",
       r("rotate_r2_r3_smooth_k.yaml"), "int4_g32_mse"},
      // The same with each window's first token kept in bf16 (attention sink; KvCacheConfig::
      // sink_tokens): its K/V draw a large share of every query's attention.
      {"KV-INT4-Group32-MSE+R3+KS+Sink1",
       "KV-INT4-Group32-MSE+R3+KS with the first token of each sequence in bf16 (attention sink)",
       r("rotate_r2_r3_smooth_k.yaml"), "int4_g32_mse+sink1"},
      // K at 5 or 8 bits, V at 4 (llama.cpp's -ctk q5_0 / q8_0 -ctv q4_0): K costs most of the
      // 4-bit error. Run by name.
      {"KV-K5V4-Group32-MSE+R3+KS+Sink1",
       "K int5_g32_mse, V int4_g32_mse (5 bits per value), R2 + R3, key smoothing, first token "
       "in bf16",
       r("rotate_r2_r3_smooth_k.yaml"), "int5_g32_mse/int4_g32_mse+sink1", false, false},
      {"KV-K8V4-Group32+R3+KS+Sink1",
       "K int8_g32, V int4_g32_mse (6.5 bits per value), R2 + R3, key smoothing, first token in "
       "bf16",
       r("rotate_r2_r3_smooth_k.yaml"), "int8_g32/int4_g32_mse+sink1", false, false},
      // 4.5 bits spent where they matter: one scale per 64 values (4.25 bits) everywhere, and the
      // quarter bit left buys a fifth bit for the K of the 13 layers and the V of the 2 layers
      // whose 4-bit error costs most (a per-layer sensitivity scan, docs/results.md). Run by name.
      {"KV-INT4-Group64-MSE+R3+KS+Sink1+Layers5",
       "int4_g64_mse K/V, 13 layers' K and 2 layers' V in int5_g64_mse (4.5 bits per value), R2 "
       "+ R3, key smoothing, first token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"),
       "int4_g64_mse+sink1+k1-3=int5_g64_mse+k9-11=int5_g64_mse+k13=int5_g64_mse+k17-20=int5_"
       "g64_mse+k22-23=int5_g64_mse+v1=int5_g64_mse+v3=int5_g64_mse",
       false, false},
      // The same allocations on iq4_nl's non-uniform levels (nl4_g32 / nl4_g64: denser near 0,
      // where rotated K / V are dense) instead of evenly spaced int4 codes. Run by name.
      {"KV-NL4-Group32+R3+KS+Sink1",
       "nl4_g32 K/V (iq4_nl levels, searched scales; 4.5 bits), R2 + R3, key smoothing, first "
       "token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"), "nl4_g32+sink1", false, false},
      {"KV-NL4-Group64+R3+KS+Sink1+Layers5",
       "nl4_g64 K/V, 13 layers' K and 2 layers' V in int5_g64_mse (4.5 bits per value), R2 + R3, "
       "key smoothing, first token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"),
       "nl4_g64+sink1+k1-3=int5_g64_mse+k9-11=int5_g64_mse+k13=int5_g64_mse+k17-20=int5_g64_"
       "mse+k22-23=int5_g64_mse+v1=int5_g64_mse+v3=int5_g64_mse",
       false, false},
      // One-byte E4M3 block scales over a per-head global (nvfp4's mechanism): iq4_nl's levels
      // with a searched scale per 16 values at nvfp4's 4.5 bits, and kvq allocate's 4.5-bit plan
      // over the ladder nl4_g32_e4m3 (4.25) -> nl4_g16_e4m3 (4.5) -> int5_g32_e4m3 (5.25),
      // scanned on WikiText-2 test's first 200,000 characters (docs/results.md). Run by name.
      {"KV-NL4-Group16-E4M3+R3+KS+Sink1",
       "nl4_g16_e4m3 K/V (iq4_nl levels, searched E4M3 scale per 16 values; 4.5 bits), R2 + R3, "
       "key smoothing, first token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"), "nl4_g16_e4m3+sink1", false, false},
      {"KV-NL4-E4M3-Alloc+R3+KS+Sink1",
       "kvq allocate's 4.5-bit plan: 12 K and 2 V tensors in int5_g32_e4m3, 4 K in nl4_g16_e4m3, "
       "the other 14 K and 28 V in nl4_g32_e4m3; R2 + R3, key smoothing, first token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"),
       "nl4_g16_e4m3+sink1+k1-5=int5_g32_e4m3+k9=int5_g32_e4m3+k11=int5_g32_e4m3+k13=int5_g32_"
       "e4m3+k18-20=int5_g32_e4m3+k23=int5_g32_e4m3+v1=int5_g32_e4m3+v3=int5_g32_e4m3+k0=nl4_g32_"
       "e4m3+k6-7=nl4_g32_e4m3+k12=nl4_g32_e4m3+k14-15=nl4_g32_e4m3+k17=nl4_g32_e4m3+k21-22=nl4_"
       "g32_e4m3+k25-29=nl4_g32_e4m3+v0=nl4_g32_e4m3+v2=nl4_g32_e4m3+v4-29=nl4_g32_e4m3",
       false, false},
      // kvq's one-byte log scale (2^(1/16) steps) in place of E4M3: nl4_g16_log, and kvq
      // allocate's 4.5-bit plan over nl4_g32_log -> nl4_g16_log -> int5_g32_log, scanned on the
      // same text (docs/results.md). Run by name.
      {"KV-NL4-Group16-Log+R3+KS+Sink1",
       "nl4_g16_log K/V (iq4_nl levels, searched log-scale byte per 16 values; 4.5 bits), R2 + "
       "R3, key smoothing, first token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"), "nl4_g16_log+sink1", false, false},
      {"KV-NL4-Log-Alloc+R3+KS+Sink1",
       "kvq allocate's 4.5-bit plan: 11 K and 3 V tensors in int5_g32_log, 3 K and 1 V in "
       "nl4_g16_log, the other 16 K and 26 V in nl4_g32_log; R2 + R3, key smoothing, first token "
       "in bf16",
       r("rotate_r2_r3_smooth_k.yaml"),
       "nl4_g16_log+sink1+k1-4=int5_g32_log+k8-9=int5_g32_log+k11=int5_g32_log+k18-20=int5_g32"
       "_log+k23=int5_g32_log+v1-3=int5_g32_log+k0=nl4_g32_log+k6-7=nl4_g32_log+k10=nl4_g32_lo"
       "g+k12=nl4_g32_log+k14-16=nl4_g32_log+k21-22=nl4_g32_log+k24-29=nl4_g32_log+v0=nl4_g32_"
       "log+v4-10=nl4_g32_log+v12-29=nl4_g32_log",
       false, false},
      // 3 bits: kvq's 8 non-uniform levels (nl3_g32: 3.5 bits per value). Run by name.
      {"KV-NL3-Group32+R3+KS+Sink1",
       "nl3_g32 K/V (8 Lloyd-Max levels, searched scales; 3.5 bits), R2 + R3, key smoothing, "
       "first token in bf16",
       r("rotate_r2_r3_smooth_k.yaml"), "nl3_g32+sink1", false, false},
      {"KV-INT8-Group32+R3+KS", "KV-INT8-Group32 after key smoothing and SpinQuant R2 + R3",
       r("rotate_r2_r3_smooth_k.yaml"), "int8_g32", false, false},
      // The reference PR's FP4 attention per head (q fake-quantized; K/V packed as NVFP4 under
      // the calibrated global scales), without and with the rotations. Run by name.
      {"QKV-FP4-Head", "FP4 E2M1 Q/K/V (attention group), per head; K/V packed as NVFP4",
       r("qkv_fp4_head.yaml"), "auto", false, false},
      {"QKV-FP4-Head+R3", "QKV-FP4-Head with SpinQuant R2 + R3 Hadamard rotations",
       r("qkv_fp4_head_r3.yaml"), "auto", false, false},
  };
  return table;
}

const SchemeDef& find_scheme(std::string_view name) {
  for (const auto& s : builtin_schemes())
    if (ascii_lower(s.name) == ascii_lower(name)) return s;
  std::string names;
  for (const auto& s : builtin_schemes()) names += (names.empty() ? "" : ", ") + s.name;
  fail<InvalidArgument>("unknown scheme '{}'; valid schemes: {}", name, names);
}

std::vector<SchemeDef> parse_scheme_list(std::string_view list) {
  std::vector<SchemeDef> out;
  if (list.find_first_not_of(" ,") == std::string_view::npos) {
    for (const SchemeDef& s : builtin_schemes())
      if (s.in_default) out.push_back(s);
    return out;
  }
  for (std::size_t b = 0; b <= list.size();) {
    std::size_t e = list.find(',', b);
    if (e == std::string_view::npos) e = list.size();
    std::string_view item = list.substr(b, e - b);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) {
      const SchemeDef& s = find_scheme(item);
      for (const auto& o : out)
        if (o.name == s.name) fail<InvalidArgument>("scheme '{}' listed twice", s.name);
      out.push_back(s);
    }
    b = e + 1;
  }
  return out;
}

fs::path wikitext_path(const fs::path& data_dir) {
  const fs::path p = data_dir / "wikitext-2-raw" / "wiki.test.raw";
  std::error_code ec;
  if (!fs::exists(p, ec))
    fail<IoError>(
        "{}: WikiText-2 test file not found; pass --data DIR holding wikitext-2-raw/wiki.test.raw "
        "(the shared data folder ../shared/data has it; see ../shared/data/README.md)",
        p.string());
  return p;
}

fs::path text_path(const EvalOptions& o) {
  return o.text.empty() ? wikitext_path(o.data_dir) : o.text;
}

bool is_default_text(const EvalOptions& o) {
  if (o.text.empty()) return true;
  std::error_code ec;  // a missing file is not the default one
  return fs::equivalent(o.text, o.data_dir / "wikitext-2-raw" / "wiki.test.raw", ec);
}

std::string text_name(const EvalOptions& o) {
  return is_default_text(o) ? std::string("WikiText-2") : o.text.filename().string();
}

fs::path gsm8k_dir(const fs::path& data_dir) {
  const fs::path d = data_dir / "gsm8k";
  for (const char* f : {"train.jsonl", "test.jsonl"}) {
    std::error_code ec;
    if (!fs::exists(d / f, ec))
      fail<IoError>(
          "{}: GSM8K file not found; pass --data DIR holding gsm8k/train.jsonl and "
          "gsm8k/test.jsonl (the HF openai/gsm8k 'main' splits as JSONL; ../shared/data has them)",
          (d / f).string());
  }
  return d;
}

void compare_to_baseline(SchemeReport& row, const SchemeReport& base,
                         std::span<const double> kld_window_sums) {
  BootstrapOptions bo;
  // Windows are the resampled units: with one window there is no variability to resample, so
  // no p-value (NaN: no marker) rather than a spurious 1 / (1 + B).
  const bool testable = row.window_scored.size() >= 2;
  if (const auto d = ppl_delta(base, row)) {
    row.dppl = d->delta, row.dppl_lo = d->lo, row.dppl_hi = d->hi, row.dppl_p = d->p;
  }
  if (row.has_kld && !kld_window_sums.empty()) {
    const std::vector<double> zeros(kld_window_sums.size(), 0.0);
    std::vector<double> w(row.window_scored.begin(), row.window_scored.end());
    row.kld_p = testable ? paired_bootstrap(zeros, kld_window_sums, w, bo).p_value : NAN;
  }
  if (row.has_gsm8k && base.has_gsm8k && row.gsm8k_correct.size() == base.gsm8k_correct.size()) {
    row.gsm8k_delta = row.gsm8k - base.gsm8k;
    row.gsm8k_p = mcnemar(base.gsm8k_correct, row.gsm8k_correct).p_exact;
  }
}

struct Evaluator::Impl {
  runtime::ModelSource src;
  std::vector<std::int32_t> tokens;  // the text (--text), whole file
  std::optional<LogitsCache> base_logits;
  std::optional<SchemeReport> base_row;
  std::vector<lifecycle::CalibrationSample> calib;  // loaded on first use
};

Evaluator::Evaluator(EvalOptions options)
    : impl_(std::make_unique<Impl>()), options_(std::move(options)) {
  const auto& o = options_;
  plan_windows(2, o.ctx, o.ctx, o.max_windows);  // option checks before loading anything
  if (o.gsm8k_limit < 0) fail<InvalidArgument>("--gsm8k-limit must be >= 0");
  if (o.calib_samples < 1) fail<InvalidArgument>("--calib-samples must be >= 1");
  if (o.decode_steps < 0)
    fail<InvalidArgument>("--decode-steps must be >= 0, got {}", o.decode_steps);
  if (o.decode_steps > 0 && o.decode_context < 1)
    fail<InvalidArgument>("--decode-context must be >= 1, got {}", o.decode_context);
  if (o.gsm8k_limit > 0 && (o.gsm8k_batch < 1 || o.gsm8k_batch > 8))
    fail<InvalidArgument>("--gsm8k-batch must be in [1, 8], got {}", o.gsm8k_batch);
  std::string text;  // read before the model is loaded: a bad --text fails fast
  if (o.ppl_kld) text = io::read_file(text_path(o), "the --text file");
  if (o.gsm8k_limit > 0 || o.calib_samples > 0) gsm8k_dir(o.data_dir);
  impl_->src = runtime::open_model_source(o.model_dir, /*with_quantization=*/false,
                                          model::LoadOptions{o.weights});
  model_hash_ = model_fingerprint(o.model_dir);
  // fp32 keys stay what they were (existing caches remain valid); other dtypes get their own.
  if (o.weights != DType::kF32)
    model_hash_ = hash_str(fmt::format("{}|weights={}", hex(model_hash_), dtype_name(o.weights)));
  // A tokenizer that adds BOS changes every text window (perplexity.h); the tokenizer itself
  // enters the key then too (a re-conversion that tokenizes differently recomputes). Tokenizers
  // without BOS (SmolLM2) keep the keys they had.
  if (const auto bos = impl_->src.tokenizer->add_bos_id()) {
    const fs::path tj = fs::path(o.model_dir) / "tokenizer.json";
    const std::string bytes = fs::exists(tj) ? io::read_file(tj, "tokenizer") : std::string();
    model_hash_ = hash_str(
        fmt::format("{}|bos={}|tokenizer={}", hex(model_hash_), *bos, hex(hash_str(bytes))));
  }
  if (o.ppl_kld) {
    const auto t0 = std::chrono::steady_clock::now();
    impl_->tokens = perplexity_tokens(*impl_->src.tokenizer, text);
    log::info("{}: {} tokens ({:.1f} s to tokenize)", text_name(o), impl_->tokens.size(),
              seconds_since(t0));
  }
}

Evaluator::~Evaluator() = default;

namespace {

// The built-in QKV recipes target Llama's attention class, as llm-compressor's examples do; on
// another architecture they mean that architecture's attention class (Gemma3Attention, ...).
void retarget_attention(quant::QuantizationConfig& qc, const std::string& attention_class) {
  for (auto& group : qc.config_groups) {
    for (std::string& t : group.second.targets) {
      if (t == "LlamaAttention") t = attention_class;
    }
  }
}

// The scheme's KV cache in cache keys: its --kv-cache text (a recipe's own format is in the
// recipe, a checkpoint's in the model hash).
const std::string& kv_key(const SchemeDef& scheme) { return scheme.kv_cache; }

// The calibration options enter the row key between the first two tasks' keys and the rest,
// where they were before the task interface (so existing caches stay valid).
constexpr std::size_t kTasksKeyedBeforeCalibration = 2;

}  // namespace

std::string Evaluator::row_key(const SchemeDef& scheme) const { return row_key(scheme, options_); }

std::string Evaluator::row_key(const SchemeDef& scheme, const EvalOptions& o) const {
  std::string s = fmt::format("{}|{}|{}", hex(model_hash_), kv_key(scheme), scheme.recipe);
  const auto& tasks = eval_tasks();
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    if (i == kTasksKeyedBeforeCalibration)
      s += fmt::format("|c{}:{}:{}", o.calib_samples, o.calib_seq_len, o.calib_seed);
    s.push_back('|');  // appends only: GCC 12 reports a false -Wrestrict on "|" + string
    s.append(tasks[i]->key(o));
  }
  return hex(hash_str(s));
}

std::string Evaluator::ppl_key(const SchemeDef& scheme) const {
  // The row key of the same run without GSM8K and decode timing: a few options that do not
  // change PPL / KLD stay in it, which only costs a recomputation when they change.
  EvalOptions o = options_;
  o.gsm8k_limit = 0;
  o.decode_steps = 0;
  return row_key(scheme, o);
}

std::string Evaluator::gsm8k_key(const SchemeDef& scheme) const {
  const auto& o = options_;
  return hex(hash_str(fmt::format("{}|{}|{}|n{}|c{}:{}:{}", hex(model_hash_), kv_key(scheme),
                                  scheme.recipe, o.gsm8k_max_new_tokens, o.calib_samples,
                                  o.calib_seq_len, o.calib_seed)));
}

std::filesystem::path Evaluator::cache_file(std::string_view part, const SchemeDef& scheme,
                                            const std::string& key,
                                            std::string_view extension) const {
  if (options_.cache_dir.empty()) return {};
  return options_.cache_dir / fmt::format("{}-{}-{}{}", part, scheme.name, key, extension);
}

const SchemeReport& Evaluator::baseline() {
  if (impl_->base_row) return *impl_->base_row;
  const auto& o = options_;
  const SchemeDef& def = builtin_schemes().front();
  const std::string key = row_key(def);
  const fs::path row_file =
      o.cache_dir.empty() ? fs::path() : o.cache_dir / ("baseline-" + key + ".json");
  if (o.ppl_kld) baseline_logits();
  if (!row_file.empty())
    if (auto j = read_cache_json(row_file)) {
      impl_->base_row = scheme_report_from_json(*j);
      log::info("baseline: reusing {}", row_file.string());
      return *impl_->base_row;
    }
  SchemeReport r = evaluate(def);
  if (!row_file.empty()) write_cache_json(row_file, to_json(r));
  impl_->base_row = std::move(r);
  return *impl_->base_row;
}

const LogitsCache& Evaluator::baseline_logits() {
  if (impl_->base_logits) return *impl_->base_logits;
  const auto& o = options_;
  std::optional<fs::path> lp;
  if (!o.cache_dir.empty()) {
    fs::create_directories(o.cache_dir);
    // The top-K distributions do not depend on how they are compared later (--kld).
    EvalOptions topk = o;
    topk.gsm8k_limit = 0;
    topk.decode_steps = 0;
    topk.kld = KldMode::kTopK;
    lp = o.cache_dir / ("baseline-logits-" + row_key(builtin_schemes().front(), topk) + ".bin");
  }
  log::info("baseline: top-{} distributions over {} windows of {}", o.top_k,
            o.max_windows == 0 ? std::string("all") : std::to_string(o.max_windows), o.ctx);
  impl_->base_logits =
      build_logits_cache(*impl_->src.model, impl_->tokens,
                         text_kld_options(o, impl_->src.tokenizer->add_bos_id()), model_hash_, lp);
  return *impl_->base_logits;
}

namespace {

// Scales of every quantized module: {module: {q|k|v: {scale: [...], zero_point: [...]}}}.
Json scales_json(const lifecycle::QuantizationLifecycle& lc) {
  Json j = Json::object();
  for (const auto& s : lc.states())
    for (char b : {'q', 'k', 'v'})
      if (const auto& p = s->param(b)) {
        Json e;
        e["scale"] = p->scale;
        if (p->zero_point) e["zero_point"] = *p->zero_point;
        j[s->name][std::string(1, b)] = e;
      }
  return j;
}

// Restores scales saved by scales_json; false when they do not fit this lifecycle.
bool restore_scales(lifecycle::QuantizationLifecycle& lc, const Json& j) {
  try {
    for (const auto& s : lc.states())
      for (char b : {'q', 'k', 'v'})
        if (auto& p = s->param(b)) {
          const Json& e = j.at(s->name).at(std::string(1, b));
          auto scale = e.at("scale").get<std::vector<float>>();
          if (scale.size() != p->scale.size()) return false;
          p->scale = std::move(scale);
          if (p->zero_point) {
            auto zp = e.at("zero_point").get<std::vector<float>>();
            if (zp.size() != p->zero_point->size()) return false;
            p->zero_point = std::move(zp);
          }
        }
    lc.check_scales("cached calibration");
  } catch (const std::exception& e) {
    log::warn("cached calibration does not fit: {}", e.what());
    return false;
  }
  lc.set_status(quant::QuantizationStatus::kFrozen);
  lc.set_quantization_enabled(true);
  return true;
}

}  // namespace

SchemeReport Evaluator::evaluate(const SchemeDef& def) {
  const bool is_base = def.name == builtin_schemes().front().name;
  if (is_base && impl_->base_row) return *impl_->base_row;
  if (!is_base) baseline();  // the reference distributions first (plain model)
  SchemeReport r;
  const auto lc = prepare_scheme(def, r);
  return run_scheme(def, lc.get(), std::move(r));
}

std::vector<SchemeReport> Evaluator::evaluate_kv_variants(
    const SchemeDef& scheme, std::span<const SchemeDef> variants,
    const std::function<void(std::size_t, const SchemeReport&)>& on_row) {
  for (const SchemeDef& v : variants) {
    if (v.recipe != scheme.recipe || v.from_checkpoint != scheme.from_checkpoint)
      fail<InvalidArgument>("variant {} of {} changes more than its KV cache", v.name, scheme.name);
  }
  baseline();
  SchemeReport calibration;
  const auto lc = prepare_scheme(scheme, calibration);
  std::vector<SchemeReport> rows;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    rows.push_back(run_scheme(variants[i], lc.get(), calibration));
    if (on_row) on_row(i, rows.back());
  }
  return rows;
}

std::unique_ptr<lifecycle::QuantizationLifecycle> Evaluator::prepare_scheme(const SchemeDef& def,
                                                                            SchemeReport& r) {
  const auto& o = options_;
  auto& m = *impl_->src.model;
  // Hooks with calibrated (or stored) scales; else the packed cache alone (nvfp4).
  const bool calibrated = !def.recipe.empty() || def.from_checkpoint;

  // Calibrate (or reuse cached scales).
  std::unique_ptr<lifecycle::QuantizationLifecycle> lc;
  if (def.from_checkpoint) {
    lc = lifecycle::load_quantized(m, o.model_dir);
  } else if (calibrated) {
    quant::QuantizationConfig qc = quant::parse_recipe(def.recipe, def.name);
    retarget_attention(qc, m.architecture().attention_classes.front());
    lc = lifecycle::apply_quantization_config(m, qc);
    const std::string ckey =
        hex(hash_str(fmt::format("{}|{}|{}|{}|{}", hex(model_hash_), def.recipe, o.calib_samples,
                                 o.calib_seq_len, o.calib_seed)));
    const fs::path cfile =
        o.cache_dir.empty() ? fs::path() : o.cache_dir / ("calib-" + ckey + ".json");
    bool restored = false;
    if (!cfile.empty())
      if (auto j = read_cache_json(cfile)) restored = restore_scales(*lc, *j);
    r.calib_samples = o.calib_samples;
    const auto calibration_data = [&]() -> const std::vector<lifecycle::CalibrationSample>& {
      if (impl_->calib.empty()) {
        lifecycle::DatasetOptions d;
        d.num_samples = o.calib_samples;
        d.max_seq_length = o.calib_seq_len;
        d.order = lifecycle::SampleOrder::kCompareShuffle;
        d.seed = o.calib_seed;
        d.format = lifecycle::DatasetFormat::kJsonlQA;
        impl_->calib = lifecycle::load_calibration_dataset(gsm8k_dir(o.data_dir) / "train.jsonl",
                                                           *impl_->src.tokenizer, d);
      }
      return impl_->calib;
    };
    lifecycle::CalibrationOptions co;
    co.show_progress = o.progress;
    // Key smoothing is fitted every run (one pass over the samples; not cached): the cached
    // scales below were observed through it, and it is deterministic for the same samples.
    if (lc->key_smoothing() != nullptr) {
      const auto t0 = std::chrono::steady_clock::now();
      lifecycle::calibrate_key_smoothing(*lc, calibration_data(), co);
      r.calib_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    if (lc->states().empty()) {
      // Transforms / key smoothing only (with a dynamic --kv-cache): no scales.
      if (lc->key_smoothing() == nullptr) r.calib_samples = 0;
    } else if (restored) {
      log::info("{}: reusing calibration {}", def.name, cfile.string());
    } else {
      const auto cr = lifecycle::calibrate(*lc, calibration_data(), co);
      r.calib_seconds += cr.seconds;
      log::info("{}: calibrated on {} samples ({} tokens) in {:.1f} s", def.name, cr.samples,
                cr.tokens, cr.seconds);
      if (!cfile.empty()) write_cache_json(cfile, scales_json(*lc));
    }
  }

  return lc;
}

SchemeReport Evaluator::run_scheme(const SchemeDef& def, lifecycle::QuantizationLifecycle* lc,
                                   SchemeReport r) {
  const auto& o = options_;
  auto& m = *impl_->src.model;
  const bool is_base = def.name == builtin_schemes().front().name;
  r.scheme = def.name;
  // The cache the user would run: a calibrated scheme's packed cache with its scales (its k/v
  // fake-quant hooks stand aside for it), else the scheme's format with dynamic scales. A scheme
  // whose k/v cannot be packed (layers with different scale granularities, k without v) runs its
  // fake quantization, with a warning; a partially quantized one packs per layer.
  const model::KvCacheConfig kv = runtime::resolve_kv_cache(def.kv_cache, lc, def.name);
  // What a value costs in the cache the scheme stands for (K and V, and layers, may differ).
  quant::KvFormat stored = kv.k_format(), stored_v = kv.v_format();
  std::vector<model::KvCacheConfig::LayerFormat> stored_layers = kv.layer_formats;
  if (kv.fake_quant) {
    try {
      const model::KvCacheConfig ckpt = lc->kv_cache_config();
      stored = stored_v = ckpt.format;
      stored_layers = ckpt.layer_formats;
    } catch (const NotSupported&) {
      stored = stored_v = quant::KvFormat::kF32;  // no packed format at all: an fp32 cache
      stored_layers.clear();
    }
  }
  const model::KvCacheConfig costs = runtime::dynamic_cache(
      stored, model::KvScaleGranularity::kHead, false, stored_v, stored_layers);
  r.kv_format = stored_v == stored ? std::string(quant::kv_format_name(stored))
                                   : fmt::format("{}/{}", quant::kv_format_name(stored),
                                                 quant::kv_format_name(stored_v));
  for (const model::KvCacheConfig::LayerFormat& lf : stored_layers)
    r.kv_format += fmt::format("+{}", model::KvCacheConfig::of(stored).layer_format_label(lf));
  r.kv_bytes_per_token = runtime::kv_bytes_per_token(m, costs);
  const auto& mc = m.config();
  r.kv_bits_per_value =
      8.0 * static_cast<double>(r.kv_bytes_per_token) /
      static_cast<double>(2 * mc.num_hidden_layers * mc.num_key_value_heads * mc.head_dim);
  if (kv.sink_tokens > 0) {
    // Sink rows cost bf16 instead of the format once per sequence: spread over the context.
    const double share = static_cast<double>(std::min(kv.sink_tokens, options_.ctx)) /
                         static_cast<double>(options_.ctx);
    const double bf16_bytes = static_cast<double>(
        runtime::kv_bytes_per_token(m, model::KvCacheConfig::of(quant::KvFormat::kBF16)));
    const double bytes = static_cast<double>(r.kv_bytes_per_token);
    r.kv_bits_per_value *= (bytes + share * (bf16_bytes - bytes)) / bytes;
    r.kv_bytes_per_token = std::llround(bytes + share * (bf16_bytes - bytes));
  }

  const auto t0 = std::chrono::steady_clock::now();
  TaskContext context{.evaluator = *this,
                      .model = m,
                      .tokenizer = *impl_->src.tokenizer,
                      .scheme = def,
                      .kv = kv,
                      .lifecycle = lc,
                      .text = impl_->tokens,
                      .baseline = is_base ? nullptr : &baseline()};
  for (const auto& task : eval_tasks())
    if (task->enabled(o)) task->run(context, r);
  r.eval_seconds = seconds_since(t0);
  if (!is_base) compare_to_baseline(r, baseline(), {});  // ΔPPL, GSM8K (the KLD test ran above)
  return r;
}

namespace {

// One panel of the quality-vs-bits plot; `value` is the row's y, absent rows are skipped.
ScatterPanel bits_panel(const std::vector<SchemeReport>& rows, std::string title,
                        std::string y_label,
                        const std::function<std::optional<double>(const SchemeReport&)>& value) {
  ScatterPanel panel{
      std::move(title), "KV bits per value (log₂ axis)", std::move(y_label), {}, true};
  double lo = INFINITY, hi = -INFINITY;  // over the quantized schemes (rows after the first)
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::optional<double> y = value(rows[i]);
    if (!y) continue;
    panel.points.push_back({rows[i].kv_bits_per_value, *y, rows[i].scheme});
    if (i > 0) lo = std::min(lo, *y), hi = std::max(hi, *y);
  }
  if (lo > 0 && hi >= 10 * lo) {
    panel.log10_y = true;
    panel.y_label += " (log axis; baseline = 0 not shown)";
    // The baseline's 0 has no place on a log axis (write_scatter would skip it anyway).
    std::erase_if(panel.points, [&](const ScatterPoint& p) { return p.y <= 0; });
  }
  return panel;
}

}  // namespace

std::vector<ScatterPanel> quality_vs_bits_panels(const std::vector<SchemeReport>& rows) {
  if (rows.empty()) return {};
  return {bits_panel(rows, "KLD vs KV bits", "Mean KLD (nats)",
                     [](const SchemeReport& r) -> std::optional<double> {
                       return r.has_kld ? std::optional(r.kld) : std::nullopt;
                     }),
          bits_panel(rows, "ΔPPL vs KV bits", "ΔPPL (PPL − baseline PPL)",
                     [](const SchemeReport& r) -> std::optional<double> {
                       return r.has_ppl ? std::optional(r.dppl) : std::nullopt;
                     })};
}

CompareResult run_compare(const CompareOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  CompareOptions o = options;
  if (o.eval.cache_dir.empty()) o.eval.cache_dir = o.out_dir / "cache";
  // What compare writes under --out must not be the --text it reads.
  if (!o.eval.text.empty()) {
    for (const char* name :
         {"results.json", "results.md", "kld_vs_bits.png", "kld_vs_bits.svg", "rows"})
      io::refuse_output_over_input(o.out_dir / name, "--out", o.eval.text, "--text");
    io::refuse_output_over_input(o.eval.cache_dir, "--out", o.eval.text, "--text");
  }
  Evaluator ev(o.eval);  // checks the options and loads the model: nothing is written before
  fs::create_directories(o.out_dir);
  CompareResult res;
  res.meta.model = o.eval.model_dir.filename().string();
  res.meta.ctx = o.eval.ctx;
  res.meta.max_windows = o.eval.max_windows;
  res.meta.calib_samples = o.eval.calib_samples;
  res.meta.gsm8k_limit = o.eval.gsm8k_limit;
  res.meta.text = text_name(o.eval);

  std::vector<SchemeDef> schemes{builtin_schemes().front()};
  for (const auto& s : o.schemes)
    if (s.name != schemes.front().name) schemes.push_back(s);
  for (const auto& s : schemes) {
    const fs::path row_file = o.out_dir / "rows" / (s.name + "-" + ev.row_key(s) + ".json");
    std::optional<SchemeReport> row;
    if (auto j = read_cache_json(row_file)) {
      try {
        row = scheme_report_from_json(*j);
        log::info("{}: reusing {}", s.name, row_file.string());
      } catch (const Error& e) {
        log::warn("{}: {}", row_file.string(), e.what());
      }
    }
    if (!row) {
      log::info("=== {} ===", s.name);
      row = s.name == schemes.front().name ? ev.baseline() : ev.evaluate(s);
      write_cache_json(row_file, to_json(*row));
    }
    res.rows.push_back(*row);
  }

  res.results_json = o.out_dir / "results.json";
  Json j = compare_json(res.rows, res.meta);
  j["seconds"] = seconds_since(t0);
  write_cache_json(res.results_json, j);
  io::write_file_atomic(o.out_dir / "results.md", compare_markdown(res.rows, res.meta));

  const auto figure = write_scatter(quality_vs_bits_panels(res.rows), o.out_dir / "kld_vs_bits");
  res.plot_png = figure.png, res.plot_svg = figure.svg;
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace kvq::eval
