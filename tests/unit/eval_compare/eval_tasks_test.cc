// The eval tasks (eval_task.h) and the Evaluator running them, on the tiny random Llama with a
// byte-level tokenizer of its 256 ids: --text, --kld exact against the top-K bounds, the cache
// keys of the default options.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/core/threading.h"
#include "kvq/eval/compare.h"
#include "kvq/eval/eval_task.h"
#include "kvq/eval/logits_cache.h"
#include "kvq/eval/report.h"
#include "support/test_paths.h"

namespace kvq::eval {
namespace {

namespace fs = std::filesystem;

TEST(EvalTasks, RegistryListsTheThreeTasksInOrder) {
  std::vector<std::string> names;
  for (const auto& t : eval_tasks()) names.emplace_back(t->name());
  EXPECT_EQ(names, (std::vector<std::string>{"text", "gsm8k", "decode"}));
}

const EvalTask& task(std::string_view name) {
  for (const auto& t : eval_tasks())
    if (t->name() == name) return *t;
  throw std::runtime_error("no task " + std::string(name));
}

TEST(EvalTasks, EachIsEnabledByItsOptions) {
  EvalOptions o;
  o.ppl_kld = true, o.gsm8k_limit = 0, o.decode_steps = 0;
  EXPECT_TRUE(task("text").enabled(o));
  EXPECT_FALSE(task("gsm8k").enabled(o));
  EXPECT_FALSE(task("decode").enabled(o));
  o.ppl_kld = false, o.gsm8k_limit = 3, o.decode_steps = 4;
  EXPECT_FALSE(task("text").enabled(o));
  EXPECT_TRUE(task("gsm8k").enabled(o));
  EXPECT_TRUE(task("decode").enabled(o));
}

TEST(EvalTasks, KldModeNames) {
  EXPECT_EQ(parse_kld_mode("topk"), KldMode::kTopK);
  EXPECT_EQ(parse_kld_mode("exact"), KldMode::kExact);
  EXPECT_THROW(parse_kld_mode("full"), InvalidArgument);
}

// The tiny GQA Llama as a model directory with a tokenizer (one id per byte, no merges), a data
// directory whose GSM8K files only exist (nothing here calibrates or runs GSM8K) and a text.
class TinyEvaluator : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = num_threads();
    set_num_threads(1);  // a 64-wide model: parallel regions cost more than they save
    const fs::path tiny = test::test_data_dir() / "tiny_llama/gqa";
    fs::create_directories(model_dir());
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(tiny / f, model_dir() / f);
    nlohmann::json vocab = nlohmann::json::object();
    const auto byte_char = [](int b) {  // GPT-2's byte-to-unicode map
      int cp = b;
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int n = 0;
        for (int c = 0; c < b; ++c)
          n += !((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255));
        cp = 256 + n;
      }
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      return s;
    };
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    const nlohmann::json tokenizer = {
        {"version", "1.0"},
        {"added_tokens", nlohmann::json::array()},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
    std::ofstream(model_dir() / "tokenizer.json") << tokenizer.dump();
    fs::create_directories(data_dir() / "gsm8k");
    for (const char* f : {"train.jsonl", "test.jsonl"}) std::ofstream(data_dir() / "gsm8k" / f);
    std::string text;
    for (int i = 0; i < 40; ++i)
      text += fmt::format("Line {} of a small text, with {} words and numbers.\n", i, i * 7 % 13);
    std::ofstream(dir_ / "tiny.txt", std::ios::binary) << text;

    options_.model_dir = model_dir();
    options_.data_dir = data_dir();
    options_.cache_dir = dir_ / "cache";
    options_.text = dir_ / "tiny.txt";
    options_.ctx = 64;
    options_.max_windows = 4;
    options_.top_k = 8;
    options_.gsm8k_limit = 0;
    options_.decode_steps = 0;
    options_.progress = false;
  }
  void TearDown() override { set_num_threads(threads_); }
  fs::path model_dir() const { return dir_ / "model"; }
  fs::path data_dir() const { return dir_ / "data"; }
  // A scheme with dynamic scales: nothing to calibrate.
  static SchemeDef dynamic(const std::string& kv_cache) {
    SchemeDef d;
    d.name = d.kv_cache = kv_cache;
    return d;
  }

  int threads_ = 1;
  test::TempDir dir_;
  EvalOptions options_;
};

TEST_F(TinyEvaluator, ExactKldLiesBetweenTheTopKBounds) {
  Evaluator topk(options_);
  const SchemeReport base = topk.baseline();
  const SchemeReport bounds = topk.evaluate(dynamic("int4:head"));
  EvalOptions o = options_;
  o.kld = KldMode::kExact;
  Evaluator exact(o);
  const SchemeReport exact_base = exact.baseline();
  const SchemeReport row = exact.evaluate(dynamic("int4:head"));

  EXPECT_EQ(base.ppl_windows, 4);
  EXPECT_FALSE(bounds.kld_exact);
  EXPECT_TRUE(row.kld_exact);
  // The baseline against itself: exactly 0 in both modes.
  EXPECT_EQ(exact_base.kld, 0.0);
  EXPECT_TRUE(exact_base.kld_exact);
  EXPECT_EQ(exact_base.ppl, base.ppl);
  // The same quantized forward either way: identical PPL and top-1; the exact KL between the
  // top-K bounds (each per token; the slack is the cached log-probs' float32 rounding).
  EXPECT_EQ(row.ppl, bounds.ppl);
  EXPECT_EQ(row.top1, bounds.top1);
  EXPECT_GT(row.kld, 0.0);
  EXPECT_LE(bounds.kld, row.kld + 1e-7);
  EXPECT_GE(bounds.kld_upper, row.kld - 1e-7);
  EXPECT_LT(bounds.kld, bounds.kld_upper);
  EXPECT_EQ(row.kld_upper, row.kld);

  const std::string md = compare_markdown({exact_base, row}, {"tiny", 64, 4, 0, 0, "tiny.txt"});
  EXPECT_EQ(md.find("lower bound"), std::string::npos) << md;
  EXPECT_NE(md.find("exact"), std::string::npos) << md;
  EXPECT_NE(compare_markdown({base, bounds}, {}).find("lower bound"), std::string::npos);
}

TEST_F(TinyEvaluator, TextIsNamedByItsFileAndKeyedByItsContent) {
  EXPECT_FALSE(is_default_text(options_));
  EXPECT_EQ(text_name(options_), "tiny.txt");
  EXPECT_EQ(text_path(options_), dir_ / "tiny.txt");
  Evaluator ev(options_);
  const SchemeReport r = ev.baseline();
  EXPECT_TRUE(r.has_ppl);
  EXPECT_GT(r.ppl_tokens, 3 * 63);  // about 2 KB of bytes, one token each: 4 windows of 64
  const SchemeDef& base = builtin_schemes().front();
  const std::string key = ev.row_key(base);
  EvalOptions wiki = options_;
  wiki.text.clear();
  EXPECT_TRUE(is_default_text(wiki));
  EXPECT_EQ(text_name(wiki), "WikiText-2");
  EXPECT_NE(ev.row_key(base, wiki), key);
  // Another content under the same name is another text.
  std::ofstream(dir_ / "tiny.txt", std::ios::binary | std::ios::app) << "one more line\n";
  EXPECT_NE(ev.row_key(base), key);
}

TEST_F(TinyEvaluator, MissingOrIrregularTextIsNamed) {
  for (const fs::path& bad : {dir_ / "missing.txt", data_dir()}) {
    EvalOptions o = options_;
    o.text = bad;
    try {
      Evaluator ev(o);
      FAIL() << bad;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--text"), std::string::npos) << e.what();
    }
  }
}

TEST_F(TinyEvaluator, DecodeRunsOnlyWhenEnabled) {
  Evaluator off(options_);
  const SchemeReport a = off.evaluate(dynamic("int8:head"));
  EXPECT_EQ(a.decode_context, 0);
  EXPECT_EQ(a.decode_tok_s, 0.0);
  EXPECT_FALSE(a.has_gsm8k);
  EvalOptions o = options_;
  o.decode_steps = 2;
  o.decode_context = 16;
  Evaluator on(o);
  const SchemeReport b = on.evaluate(dynamic("int8:head"));
  EXPECT_EQ(b.decode_context, 16);
  EXPECT_GT(b.decode_tok_s, 0.0);
  EXPECT_EQ(b.ppl, a.ppl);  // the text part does not depend on decode options (reused)
}

// The cache keys of the options that existed before the task interface, --text and --kld are
// what they were (the format string below is the one compare.cc used), so existing caches stay
// valid; --kld exact gets keys of its own.
TEST_F(TinyEvaluator, DefaultOptionsKeepTheirCacheKeys) {
  EvalOptions o = options_;
  o.text.clear();
  fs::create_directories(data_dir() / "wikitext-2-raw");
  fs::copy_file(dir_ / "tiny.txt", data_dir() / "wikitext-2-raw" / "wiki.test.raw");
  o.gsm8k_limit = 5;
  o.decode_steps = 3;
  Evaluator ev(o);
  const auto legacy = [&](const SchemeDef& s, const EvalOptions& x) {
    const std::string str = fmt::format(
        "{:016x}|{}|{}|ppl{}|ctx{}|w{}|k{}|g{}:{}|c{}:{}:{}|d{}:{}", ev.model_hash(), s.kv_cache,
        s.recipe, x.ppl_kld, x.ctx, x.max_windows, x.top_k, x.gsm8k_limit, x.gsm8k_max_new_tokens,
        x.calib_samples, x.calib_seq_len, x.calib_seed, x.decode_context, x.decode_steps);
    return fmt::format("{:016x}", fnv1a64(str.data(), str.size()));
  };
  for (const SchemeDef& s : {builtin_schemes()[0], builtin_schemes()[2], dynamic("nvfp4:head")}) {
    EXPECT_EQ(ev.row_key(s), legacy(s, o)) << s.name;
    EvalOptions text_only = o;
    text_only.gsm8k_limit = 0, text_only.decode_steps = 0;
    EXPECT_EQ(ev.ppl_key(s), legacy(s, text_only)) << s.name;
    const std::string g =
        fmt::format("{:016x}|{}|{}|n{}|c{}:{}:{}", ev.model_hash(), s.kv_cache, s.recipe,
                    o.gsm8k_max_new_tokens, o.calib_samples, o.calib_seq_len, o.calib_seed);
    EXPECT_EQ(ev.gsm8k_key(s), fmt::format("{:016x}", fnv1a64(g.data(), g.size()))) << s.name;
    // Naming the default file is the default text.
    EvalOptions named = o;
    named.text = data_dir() / "wikitext-2-raw" / "wiki.test.raw";
    EXPECT_EQ(ev.row_key(s, named), legacy(s, o)) << s.name;
    EvalOptions exact = o;
    exact.kld = KldMode::kExact;
    EXPECT_NE(ev.row_key(s, exact), legacy(s, o)) << s.name;
  }
}

// The built-in QKV recipes target LlamaAttention; on the tiny Gemma 3 they calibrate its
// Gemma3Attention (GSM8K train in the plain layout: the tokenizer has no chat template).
TEST_F(TinyEvaluator, QkvSchemeRunsOnGemma3) {
  const fs::path tiny = test::test_data_dir() / "tiny_arch/gemma3";
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(tiny / f, model_dir() / f, fs::copy_options::overwrite_existing);
  }
  std::ofstream train(data_dir() / "gsm8k" / "train.jsonl");
  for (int i = 0; i < 4; ++i) {
    train << nlohmann::json{{"question", fmt::format("What is {} + {}?", i, i)},
                            {"answer", fmt::format("#### {}", 2 * i)}}
                 .dump()
          << "\n";
  }
  train.close();
  options_.calib_samples = 4;
  Evaluator e(options_);
  e.baseline();
  const SchemeReport row = e.evaluate(find_scheme("QKV-FP8-Tensor"));
  EXPECT_TRUE(row.has_kld);
  EXPECT_GT(row.kld, 0.0);
  EXPECT_LT(row.kld, 0.1);
}

}  // namespace
}  // namespace kvq::eval
