// kvq perplexity: perplexity of a model on a text file (Hugging Face windowing, see
// src/kvq/eval/perplexity.h).
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/eval/perplexity.h"
#include "kvq/io/read_file.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq/runtime/model_source.h"

namespace kvq::cli {
namespace {

struct PerplexityArgs {
  std::string model_dir, text_file, kv_cache = "auto", weights = "auto";
  std::int64_t ctx = 2048, stride = 0, max_windows = 0, batch = 1, decode_from = 0;
  bool json = false, llama_cpp_scoring = false;
};

void run_perplexity(const PerplexityArgs& a) {
  eval::PerplexityOptions opt;
  opt.ctx = a.ctx;
  opt.stride = a.stride == 0 ? a.ctx : a.stride;
  opt.max_windows = a.max_windows;
  opt.batch = a.batch;
  opt.decode_from = a.decode_from;
  opt.score_last_half = a.llama_cpp_scoring;
  const runtime::KvCacheOption kv_option = runtime::parse_kv_cache_option(a.kv_cache);
  const model::LoadOptions load{model::resolve_weight_dtype(a.weights, a.model_dir)};
  eval::plan_windows(2, opt.ctx, opt.stride, opt.max_windows);  // flag checks before loading
  if (opt.batch < 1) fail<InvalidArgument>("--batch must be >= 1, got {}", opt.batch);
  if (opt.decode_from < 0) {
    fail<InvalidArgument>("--decode-from must be >= 0, got {}", opt.decode_from);
  }
  if (opt.decode_from > 0 && opt.batch > 1) {
    fail<InvalidArgument>("--decode-from runs one window at a time; drop --batch {}", opt.batch);
  }

  const std::string text = io::read_file(a.text_file, "text");
  runtime::ModelSource src =
      runtime::open_model_source(a.model_dir, /*with_quantization=*/true, load);
  const model::KvCacheConfig kv =
      runtime::resolve_kv_cache(kv_option, src.lifecycle.get(), a.model_dir);
  opt.kv_cache = kv;
  const std::int64_t kv_bytes = runtime::kv_bytes_per_token(*src.model, kv);
  const std::string first_write =
      opt.decode_from > 0 ? fmt::format("each window's first {} tokens", opt.decode_from)
      : opt.batch > 1     ? std::string("each batch of windows")
                          : std::string("each window's tokens");
  const std::string note = runtime::dynamic_scales_note(kv, first_write);
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
  if (opt.ctx > src.model->config().max_position_embeddings) {
    log::warn("--ctx {} exceeds the model's max_position_embeddings {}", opt.ctx,
              src.model->config().max_position_embeddings);
  }
  log::info("tokenizing {} ({} bytes)", a.text_file, text.size());
  // After the tokenizer's BOS when it adds one; each window then starts with it (perplexity.h).
  const std::vector<std::int32_t> ids = eval::perplexity_tokens(*src.tokenizer, text);
  opt.bos = src.tokenizer->add_bos_id();
  if (ids.size() < 2) {
    fail<InvalidArgument>("{}: {} tokens; perplexity needs at least 2", a.text_file, ids.size());
  }
  const eval::PerplexityResult r = eval::perplexity(*src.model, ids, opt);

  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model_dir;
    j["text"] = a.text_file;
    j["text_tokens"] = ids.size();
    j["ctx"] = opt.ctx;
    j["stride"] = opt.stride;
    j["decode_from"] = opt.decode_from;
    j["bos"] = opt.bos ? nlohmann::json(*opt.bos) : nlohmann::json(nullptr);
    j["scored"] = opt.score_last_half ? "last half of each window (llama-perplexity)" : "all";
    j["weights"] = model::weight_dtype_label(load.weights);
    j.update(runtime::kv_cache_json(kv));
    j["kv_bytes_per_token"] = kv_bytes;
    j.update(eval::perplexity_result_json(r));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf(
        "%s\n",
        fmt::format(
            "PPL {:.4f}  (mean NLL {:.6f} nats over {} scored tokens; {} windows "
            "of ctx {}, stride {}{}{}; {:.1f} s, {:.0f} tok/s; {} weights; KV cache "
            "{}: {} bytes/token)",
            r.ppl, r.nll_mean, r.tokens_scored, r.windows, opt.ctx, opt.stride,
            fmt::format("{}{}", opt.bos ? fmt::format(", each starting with BOS {}", *opt.bos) : "",
                        opt.score_last_half ? ", last half scored (llama-perplexity)" : ""),
            opt.decode_from > 0
                ? fmt::format(", decoded one token at a time after {}", opt.decode_from)
                : "",
            r.seconds, r.tokens_per_second, model::weight_dtype_label(load.weights), kv.describe(),
            kv_bytes)
            .c_str());
  }
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  auto* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity on a text file. The file is read as raw bytes (CRLF kept) and tokenized once\n"
      "without special tokens, after the tokenizer's BOS when it adds one (Gemma; SmolLM2 adds\n"
      "none). Window i feeds tokens [i*stride, i*stride + ctx) from a fresh cache, its first\n"
      "token replaced by BOS when the tokenizer adds one (llama-perplexity's convention; it\n"
      "scores only the last half of each window, kvq all of it).\n"
      "stride == ctx (default): disjoint windows, each scoring its ctx-1 predicted tokens.\n"
      "stride < ctx (Hugging Face strided): the first window scores ctx-1 tokens, every later\n"
      "window only its last `stride` targets. The last window is the first reaching the end of\n"
      "the text. PPL = exp(sum NLL / scored tokens), log-softmax in float64.\n"
      "A quantized checkpoint runs with its packed KV cache; on a plain model a low-bit\n"
      "--kv-cache fixes dynamic scales from each window (from the batch with --batch > 1).\n"
      "Examples:\n"
      "  kvq perplexity --model M --text wiki.test.raw --max-windows 8\n"
      "  kvq perplexity --model M --text wiki.test.raw --max-windows 8 --kv-cache int4:head\n"
      "  kvq perplexity --model M --text wiki.test.raw --max-windows 8 --weights bf16\n"
      "  kvq perplexity --model M-kv-fp8-head --text wiki.test.raw --kv-cache fake\n"
      "  kvq perplexity --model M --text wiki.test.raw --ctx 512 --max-windows 4 \\\n"
      "      --decode-from 64 --kv-cache int8:head+q8    # measures the decode kernels");
  cmd->add_option("--model", a->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--text", a->text_file, "UTF-8 text file (e.g. wikitext-2-raw wiki.test.raw)")
      ->required();
  cmd->add_option("--ctx", a->ctx, "Window length in tokens")
      ->check(tokens_in(2))
      ->capture_default_str();
  cmd->add_option("--stride", a->stride, "Window start step in tokens (0 = ctx)")
      ->check(tokens_in(0))
      ->capture_default_str();
  cmd->add_option("--max-windows", a->max_windows, "Evaluate only the first N windows (0 = all)")
      ->check(count_in(0))
      ->capture_default_str();
  cmd->add_option("--batch", a->batch, "Windows of equal length evaluated per forward")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--decode-from", a->decode_from,
                  "Teacher-forced decode: each window's first N tokens in one prefill, the rest\n"
                  "one token at a time through the decode path (slow; measures decode-only\n"
                  "options such as --kv-cache int8:head+q8). 0 = the whole window in one prefill")
      ->check(tokens_in(0))
      ->capture_default_str();
  cmd->add_option("--kv-cache", a->kv_cache, runtime::kv_cache_flag_help(false))
      ->capture_default_str();
  cmd->add_option("--weights", a->weights, kWeightsHelp)->capture_default_str();
  cmd->add_flag(
      "--llama-cpp-scoring", a->llama_cpp_scoring,
      "Score only each window's last ctx/2 - 1 tokens and drop a partial last window, as\n"
      "llama.cpp's llama-perplexity does (its -c is --ctx, its --chunks --max-windows),\n"
      "so the two numbers compare; needs --stride 0 (= ctx)");
  cmd->add_flag("--json", a->json, "Print the result as JSON");
  cmd->callback([a] { run_perplexity(*a); });
}

}  // namespace kvq::cli
