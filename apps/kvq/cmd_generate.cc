// kvq generate: text generation with the native engine (greedy or sampled), streamed to stdout.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "flag_limits.h"
#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/eval/utf8_stream.h"
#include "kvq/model/sampler.h"
#include "kvq/runtime/generator.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq/runtime/model_source.h"

namespace kvq::cli {
namespace {

struct GenerateArgs {
  std::string model_dir, prompt, system, kv_cache = "auto", weights = "auto";
  bool chat = false, json = false, truncate = false;
  std::int64_t max_new_tokens = 128, ctx = 0, top_k = 0;
  double temperature = 0.0, top_p = 1.0;
  std::uint64_t seed = 0;
};

void write_stdout(const std::string& s) {
  if (s.empty()) return;
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

// Flag values are checked before the model is loaded, so a typo fails in milliseconds.
model::SamplerConfig checked_sampler_config(const GenerateArgs& a) {
  if (a.prompt.empty()) fail<InvalidArgument>("--prompt is empty");
  if (a.max_new_tokens < 1) {
    fail<InvalidArgument>("--max-new-tokens must be >= 1, got {}", a.max_new_tokens);
  }
  if (!(a.temperature >= 0.0)) {
    fail<InvalidArgument>("--temperature must be >= 0 (0: greedy), got {}", a.temperature);
  }
  if (a.top_k < 0) fail<InvalidArgument>("--top-k must be >= 0 (0: off), got {}", a.top_k);
  if (!(a.top_p > 0.0 && a.top_p <= 1.0)) {
    fail<InvalidArgument>("--top-p must be in (0, 1], got {}", a.top_p);
  }
  if (a.ctx < 0) fail<InvalidArgument>("--ctx must be >= 0 (0: the model's), got {}", a.ctx);
  if (!a.chat && !a.system.empty()) fail<InvalidArgument>("--system needs --chat");
  return model::SamplerConfig{a.temperature, a.top_k, a.top_p, a.seed};
}

void run_generate(const GenerateArgs& a) {
  model::Sampler{checked_sampler_config(a)};  // the sampling flags fail before loading
  const runtime::KvCacheOption kv_option = runtime::parse_kv_cache_option(a.kv_cache);
  const model::LoadOptions load{model::resolve_weight_dtype(a.weights, a.model_dir)};
  runtime::ModelSource src =
      runtime::open_model_source(a.model_dir, /*with_quantization=*/true, load);
  const tok::Tokenizer& tokenizer = *src.tokenizer;
  model::CausalLM& llm = *src.model;
  const model::KvCacheConfig kv =
      runtime::resolve_kv_cache(kv_option, src.lifecycle.get(), a.model_dir);
  if (const std::string note = runtime::dynamic_scales_note(kv, "the prompt"); !note.empty()) {
    std::fprintf(stderr, "%s\n", note.c_str());
  }

  std::string text = a.prompt;
  if (a.chat) {
    std::vector<tok::ChatMessage> messages;
    if (!a.system.empty()) messages.push_back({"system", a.system});
    messages.push_back({"user", a.prompt});
    text = tokenizer.apply_chat_template(messages, /*add_generation_prompt=*/true);
  }
  // The tokenizer's BOS first when it adds one (Gemma; SmolLM2 adds none), unless the text
  // already starts with it (a chat template writes {{ bos_token }}, or "<bos>" in --prompt).
  std::vector<std::int32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/false);
  if (const auto bos = tokenizer.add_bos_id(); bos && (ids.empty() || ids.front() != *bos)) {
    ids.insert(ids.begin(), *bos);
  }
  if (ids.empty()) fail<InvalidArgument>("--prompt tokenizes to no tokens");

  const std::int64_t ctx = a.ctx > 0 ? a.ctx : llm.config().max_position_embeddings;
  const auto n_prompt = static_cast<std::int64_t>(ids.size());
  if (n_prompt >= ctx) {
    if (!a.truncate) {
      fail<InvalidArgument>(
          "the prompt has {} tokens but the context is {} (at least one token must fit after "
          "it); shorten it, raise --ctx, or pass --truncate to keep its last tokens",
          n_prompt, ctx);
    }
    const std::int64_t keep = std::max<std::int64_t>(1, ctx - a.max_new_tokens);
    log::warn("prompt truncated from {} to its last {} tokens (context {})", n_prompt, keep, ctx);
    ids.erase(ids.begin(), ids.end() - keep);
  }
  const auto prompt_len = static_cast<std::int64_t>(ids.size());
  const std::int64_t budget = std::min(a.max_new_tokens, ctx - prompt_len);
  if (budget < a.max_new_tokens) {
    log::warn("at most {} new tokens fit in the context of {}", budget, ctx);
  }
  const std::vector<std::int64_t> stop = a.chat ? src.chat_stop_ids() : src.eos_ids();

  runtime::GenerationRequest request;
  request.prompt = ids;
  request.max_new_tokens = budget;
  request.stop_ids = stop;
  request.sampling = checked_sampler_config(a);
  eval::Utf8Stream stream;
  std::string out_text;  // the pieces of the new tokens, the stop token's excluded
  runtime::Generation gen;
  runtime::generate(
      llm, std::span(&request, 1), {kv, 1},
      [&](std::size_t, std::int32_t t) {
        if (std::find(stop.begin(), stop.end(), t) != stop.end()) return;
        const std::string& piece = tokenizer.token_to_piece(t);
        out_text += piece;
        if (!a.json) write_stdout(stream.push(piece));
      },
      [&](std::size_t, runtime::Generation g) { gen = std::move(g); });
  if (!a.json) write_stdout(stream.flush() + "\n");
  const std::vector<std::int32_t>& generated = gen.tokens;
  const std::string stop_reason(runtime::stop_reason_name(gen.stop));
  const double prefill_s = gen.prefill_seconds, decode_s = gen.decode_seconds;
  const std::int64_t decode_steps = gen.decode_steps;

  const double prefill_tps = prefill_s > 0 ? prompt_len / prefill_s : 0.0;
  const double decode_tps = decode_steps > 0 && decode_s > 0 ? decode_steps / decode_s : 0.0;
  const std::int64_t kv_bytes = runtime::kv_bytes_per_token(llm, kv);
  if (a.json) {
    nlohmann::json j;
    j["model"] = a.model_dir;
    j["prompt_ids"] = ids;
    j["prompt_tokens"] = prompt_len;
    j["generated_ids"] = generated;
    j["new_tokens"] = generated.size();
    // Bytes of the generated tokens; invalid UTF-8 (a cut-off character) is replaced in JSON.
    j["text"] = out_text;
    j["stop_reason"] = stop_reason;
    j["prefill_seconds"] = prefill_s;
    j["prefill_tok_s"] = prefill_tps;
    j["decode_seconds"] = decode_s;
    j["decode_tok_s"] = decode_tps;
    j["weights"] = model::weight_dtype_label(load.weights);
    j.update(runtime::kv_cache_json(kv));
    j["kv_bytes_per_token"] = kv_bytes;
    write_stdout(j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  }
  std::fprintf(stderr,
               "[kvq generate] prompt %lld tokens, %zu new tokens (stop: %s); prefill %.1f tok/s, "
               "decode %.1f tok/s; %s weights; KV cache %s: %lld bytes/token\n",
               static_cast<long long>(prompt_len), generated.size(), stop_reason.c_str(),
               prefill_tps, decode_tps,
               std::string(model::weight_dtype_label(load.weights)).c_str(), kv.describe().c_str(),
               static_cast<long long>(kv_bytes));
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* cmd = app.add_subcommand(
      "generate",
      "Generate text with the native engine. A quantized checkpoint (kvq oneshot --output)\n"
      "runs with its packed low-bit KV cache and calibrated scales. Examples:\n"
      "  kvq generate --model M --prompt \"Hello my name is\"                  # fp32 KV cache\n"
      "  kvq generate --model M --prompt \"Hello my name is\" --kv-cache int8  # dynamic scales\n"
      "  kvq generate --model M-kv-fp8-head --prompt \"Hello my name is\"      # packed fp8\n"
      "  kvq generate --model M-kv-fp8-head --prompt \"Hello my name is\" --kv-cache fake");
  cmd->add_option("--model", a->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--prompt", a->prompt, "Prompt text")->required();
  cmd->add_flag("--chat", a->chat,
                "Render the prompt as a user turn with the model's chat template (generation "
                "prompt added); also stops at <|im_end|>");
  cmd->add_option("--system", a->system, "System message (with --chat)");
  cmd->add_option("--max-new-tokens", a->max_new_tokens, "Most tokens to generate")
      ->check(tokens_in(1))
      ->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str();
  cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)")
      ->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass in (0, 1]")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--ctx", a->ctx,
                  "Context length (prompt + new tokens); 0 = max_position_embeddings")
      ->check(tokens_in(0))
      ->capture_default_str();
  cmd->add_flag("--truncate", a->truncate,
                "Keep the last tokens of a prompt that does not fit the context instead of "
                "failing");
  cmd->add_option("--kv-cache", a->kv_cache, runtime::kv_cache_flag_help(false))
      ->capture_default_str();
  cmd->add_option("--weights", a->weights, kWeightsHelp)->capture_default_str();
  cmd->add_flag("--json", a->json,
                "Print one JSON object (ids, text, timings) instead of streaming the text");
  cmd->callback([a] { run_generate(*a); });
}

}  // namespace kvq::cli
