// The long runs: oneshot (calibration + checkpoint), Model.generate, perplexity and compare —
// the same library calls as the CLI commands, results as the dicts their --json prints.
#include <algorithm>
#include <string>
#include <vector>

#include "kvq/eval/compare.h"
#include "kvq/eval/perplexity.h"
#include "kvq/io/atomic_write.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"
#include "kvq/lifecycle/calibrate.h"
#include "kvq/lifecycle/checkpoint.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/model/sampler.h"
#include "kvq/runtime/generator.h"
#include "kvq/runtime/kv_cache_choice.h"
#include "kvq_py.h"

namespace kvq::py {
namespace {
namespace fs = std::filesystem;

// Calibration samples from a list: strings are tokenized as the CLI tokenizes a JSONL "text"
// line (no special tokens), lists are token ids; each truncated to max_seq_length.
std::vector<lifecycle::CalibrationSample> samples_from_list(const PyModel& model, pyb::handle data,
                                                            std::int64_t max_seq_length) {
  std::vector<lifecycle::CalibrationSample> samples;
  for (pyb::handle item : pyb::reinterpret_borrow<pyb::iterable>(data)) {
    lifecycle::CalibrationSample s;
    s.index = static_cast<std::int64_t>(samples.size());
    if (pyb::isinstance<pyb::str>(item)) {
      s.tokens = model.tokenizer().encode(item.cast<std::string>(), /*add_special_tokens=*/false);
    } else {
      s.tokens = item.cast<std::vector<std::int32_t>>();
    }
    if (static_cast<std::int64_t>(s.tokens.size()) > max_seq_length)
      s.tokens.resize(max_seq_length);
    if (s.tokens.empty()) fail<InvalidArgument>("dataset[{}] has no tokens", s.index);
    samples.push_back(std::move(s));
  }
  if (samples.empty()) fail<InvalidArgument>("dataset: the list is empty");
  return samples;
}

pyb::object oneshot(pyb::handle model_arg, pyb::handle recipe, pyb::handle dataset,
                    std::int64_t num_calibration_samples, std::int64_t max_seq_length,
                    pyb::handle output_dir, bool overwrite, bool shuffle_calibration_samples,
                    std::uint64_t seed) {
  if (num_calibration_samples <= 0)
    fail<InvalidArgument>("num_calibration_samples must be > 0, got {}", num_calibration_samples);
  if (max_seq_length <= 0)
    fail<InvalidArgument>("max_seq_length must be > 0, got {}", max_seq_length);
  const quant::QuantizationConfig config = to_config(recipe);
  const fs::path out = output_dir.is_none() ? fs::path() : to_path(output_dir);
  if (config.key_smoothing && !out.empty())
    fail<NotSupported>(
        "a KeySmoothingModifier cannot be saved in a checkpoint (no transformers / vLLM "
        "equivalent); drop output_dir or evaluate it with kvq.compare");
  if (!out.empty() && fs::exists(out) && !overwrite)
    fail<InvalidArgument>("output_dir {} already exists; remove it or pass overwrite=True",
                          out.string());
  ModelPtr model = as_model(model_arg);
  if (!out.empty()) io::refuse_output_over_input(out, "output_dir", model->src.dir, "model");
  if (max_seq_length > model->lm().config().max_position_embeddings)
    fail<InvalidArgument>("max_seq_length {} is beyond {}'s context (max_position_embeddings {})",
                          max_seq_length, model->src.dir.string(),
                          model->lm().config().max_position_embeddings);
  // Apply before reading the dataset (a recipe that selects nothing fails at once), on the plain
  // model: a previous quantization goes first.
  model->set_lifecycle(nullptr);
  auto lc = lifecycle::apply_quantization_config(model->lm(), config);
  lifecycle::DatasetOptions opts;  // llm-compressor's selection, as `kvq oneshot`
  opts.num_samples = num_calibration_samples;
  opts.max_seq_length = max_seq_length;
  opts.order = shuffle_calibration_samples ? lifecycle::SampleOrder::kShuffled
                                           : lifecycle::SampleOrder::kLongestFirst;
  opts.seed = seed;
  std::vector<lifecycle::CalibrationSample> samples;
  if (pyb::isinstance<pyb::list>(dataset) || pyb::isinstance<pyb::tuple>(dataset)) {
    samples = lifecycle::select_calibration_samples(
        samples_from_list(*model, dataset, max_seq_length), opts);
  } else {
    const fs::path path = to_path(dataset);
    const tok::Tokenizer& tokenizer = model->tokenizer();
    with_path(path, [&] { samples = lifecycle::load_calibration_dataset(path, tokenizer, opts); });
  }
  run_native([&] {
    const lifecycle::CalibrationResult result = lifecycle::calibrate(*lc, samples);
    if (out.empty()) return;
    // The files `kvq oneshot --output` writes, so both checkpoints are the same.
    lifecycle::save_pretrained(
        *lc, model->src.dir, out,
        [&](const fs::path& dir) {
          lifecycle::write_calibration_report_json(result, *lc, dir / "calibration_report.json");
          lifecycle::write_calibration_heatmap_png(result, dir / "calibration_heatmap.png");
        },
        overwrite);
  });
  model->set_lifecycle(std::move(lc));
  return pyb::cast(model);
}

pyb::dict generate(const ModelPtr& s, pyb::handle prompt, std::int64_t max_new_tokens,
                   const std::string& kv_cache, bool chat, const std::string& system,
                   double temperature, std::int64_t top_k, double top_p, std::uint64_t seed) {
  const model::SamplerConfig sampling{temperature, top_k, top_p, seed};
  model::Sampler{sampling};  // bad sampling arguments fail before any work
  if (max_new_tokens < 1)
    fail<InvalidArgument>("max_new_tokens must be >= 1, got {}", max_new_tokens);
  if (!chat && !system.empty()) fail<InvalidArgument>("system needs chat=True");
  const model::KvCacheConfig kv =
      runtime::resolve_kv_cache(kv_cache, s->src.lifecycle.get(), s->src.dir.string());
  std::vector<std::int32_t> ids;
  if (pyb::isinstance<pyb::str>(prompt)) {
    std::string text = prompt.cast<std::string>();
    if (chat) {
      std::vector<tok::ChatMessage> messages;
      if (!system.empty()) messages.push_back({"system", system});
      messages.push_back({"user", text});
      text = s->tokenizer().apply_chat_template(messages, /*add_generation_prompt=*/true);
    }
    // As kvq generate: the chat template holds the special tokens, plain prompts get none.
    ids = s->tokenizer().encode(text, /*add_special_tokens=*/false);
  } else {
    ids = prompt.cast<std::vector<std::int32_t>>();
  }
  if (ids.empty()) fail<InvalidArgument>("the prompt tokenizes to no tokens");
  const auto prompt_len = static_cast<std::int64_t>(ids.size());
  const std::int64_t ctx = s->lm().config().max_position_embeddings;
  if (prompt_len >= ctx)
    fail<InvalidArgument>("the prompt has {} tokens but the context is {}", prompt_len, ctx);
  runtime::GenerationRequest request;
  request.prompt = ids;
  request.max_new_tokens = std::min(max_new_tokens, ctx - prompt_len);
  request.stop_ids = chat ? s->src.chat_stop_ids() : s->src.eos_ids();
  request.sampling = sampling;
  std::vector<runtime::Generation> gens;
  run_native([&] { gens = runtime::generate(s->lm(), std::span(&request, 1), {kv, 1}); });
  const runtime::Generation& g = gens.front();
  // The text of the new tokens without the stop token, piece by piece as `kvq generate` prints it.
  std::string text;
  if (s->src.tokenizer) {
    for (std::int32_t t : g.tokens) {
      if (std::find(request.stop_ids.begin(), request.stop_ids.end(), t) == request.stop_ids.end())
        text += s->tokenizer().token_to_piece(t);
    }
  }
  nlohmann::json j;
  j["model"] = s->src.dir.string();
  j["prompt_ids"] = ids;
  j["prompt_tokens"] = prompt_len;
  j["generated_ids"] = g.tokens;
  j["new_tokens"] = g.tokens.size();
  j["text"] = text;
  j["stop_reason"] = std::string(runtime::stop_reason_name(g.stop));
  j["prefill_seconds"] = g.prefill_seconds;
  j["prefill_tok_s"] = g.prefill_seconds > 0 ? prompt_len / g.prefill_seconds : 0.0;
  j["decode_seconds"] = g.decode_seconds;
  j["decode_tok_s"] =
      g.decode_steps > 0 && g.decode_seconds > 0 ? g.decode_steps / g.decode_seconds : 0.0;
  j["weights"] = s->weights;
  j.update(runtime::kv_cache_json(kv));
  j["kv_bytes_per_token"] = runtime::kv_bytes_per_token(s->lm(), kv);
  // Invalid UTF-8 (a cut-off character) replaced, as the CLI's JSON does.
  return from_json(
      nlohmann::json::parse(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

pyb::dict perplexity(pyb::handle model_arg, pyb::handle text_file, pyb::object text,
                     std::int64_t ctx, std::int64_t stride, std::int64_t max_windows,
                     std::int64_t batch, std::int64_t decode_from, const std::string& kv_cache,
                     bool llama_cpp_scoring) {
  eval::PerplexityOptions opt;
  opt.score_last_half = llama_cpp_scoring;
  opt.ctx = ctx;
  opt.stride = stride == 0 ? ctx : stride;
  opt.max_windows = max_windows;
  opt.batch = batch;
  opt.decode_from = decode_from;
  eval::plan_windows(2, opt.ctx, opt.stride, opt.max_windows);  // argument checks before loading
  if (batch < 1) fail<InvalidArgument>("batch must be >= 1, got {}", batch);
  if (decode_from < 0) fail<InvalidArgument>("decode_from must be >= 0, got {}", decode_from);
  if (decode_from > 0 && batch > 1)
    fail<InvalidArgument>("decode_from runs one window at a time; drop batch={}", batch);
  if (text_file.is_none() == text.is_none())
    fail<InvalidArgument>("perplexity: pass exactly one of text_file and text");
  std::string content, name = "<text>";
  if (!text_file.is_none()) {
    const fs::path path = to_path(text_file);
    name = path.string();
    with_path(path, [&] { content = io::read_file(path, "text"); });
  } else {
    content = text.cast<std::string>();
  }
  ModelPtr model = as_model(model_arg);
  const model::KvCacheConfig kv =
      runtime::resolve_kv_cache(kv_cache, model->src.lifecycle.get(), model->src.dir.string());
  opt.kv_cache = kv;
  const std::vector<std::int32_t> ids = eval::perplexity_tokens(model->tokenizer(), content);
  opt.bos = model->tokenizer().add_bos_id();  // each window starts with it (perplexity.h)
  if (ids.size() < 2)
    fail<InvalidArgument>("{}: {} tokens; perplexity needs at least 2", name, ids.size());
  eval::PerplexityResult r;
  run_native([&] { r = eval::perplexity(model->lm(), ids, opt); });
  nlohmann::json j;  // the fields of `kvq perplexity --json`
  j["model"] = model->src.dir.string();
  j["text"] = name;
  j["text_tokens"] = ids.size();
  j["ctx"] = opt.ctx;
  j["stride"] = opt.stride;
  j["decode_from"] = opt.decode_from;
  j["bos"] = opt.bos ? nlohmann::json(*opt.bos) : nlohmann::json(nullptr);
  j["scored"] = opt.score_last_half ? "last half of each window (llama-perplexity)" : "all";
  j["weights"] = model->weights;
  j.update(runtime::kv_cache_json(kv));
  j["kv_bytes_per_token"] = runtime::kv_bytes_per_token(model->lm(), kv);
  j.update(eval::perplexity_result_json(r));
  return from_json(j);
}

pyb::dict compare(pyb::handle model_arg, pyb::object schemes, pyb::handle out_dir,
                  pyb::handle data_dir, pyb::object text_file, const std::string& kld,
                  std::int64_t ctx, std::int64_t max_windows, std::int64_t calib_samples,
                  std::int64_t gsm8k_limit, std::int64_t gsm8k_batch, std::int64_t decode_context,
                  std::int64_t decode_steps, const std::string& weights) {
  eval::CompareOptions o;
  std::string list;
  if (pyb::isinstance<pyb::str>(schemes)) {
    list = schemes.cast<std::string>();
  } else if (!schemes.is_none()) {
    for (const std::string& name : schemes.cast<std::vector<std::string>>())
      list += (list.empty() ? "" : ",") + name;
  }
  o.schemes = eval::parse_scheme_list(list);  // unknown names fail before loading
  o.eval.model_dir = pyb::isinstance<PyModel>(model_arg) ? model_arg.cast<ModelPtr>()->src.dir
                                                         : to_path(model_arg);
  o.eval.data_dir = to_path(data_dir);
  if (!text_file.is_none()) o.eval.text = to_path(text_file);
  o.eval.kld = eval::parse_kld_mode(kld);
  o.eval.ctx = ctx;
  o.eval.max_windows = max_windows;
  o.eval.calib_samples = calib_samples;
  o.eval.gsm8k_limit = gsm8k_limit;
  o.eval.gsm8k_batch = gsm8k_batch;
  o.eval.decode_context = decode_context;
  o.eval.decode_steps = decode_steps;
  o.eval.weights = model::resolve_weight_dtype(weights, o.eval.model_dir);
  o.out_dir = to_path(out_dir);
  eval::CompareResult r;
  with_path(o.eval.model_dir, [&] { run_native([&] { r = eval::run_compare(o); }); });
  // results.json as written (compare_json plus the run's wall time).
  return from_json(
      io::parse_ordered_json(io::read_file(r.results_json, "results"), r.results_json.string()));
}

}  // namespace

void bind_run(pyb::module_& m) {
  namespace a = pybind11;
  m.def(
      "oneshot", &oneshot, a::arg("model"), a::arg("recipe"), a::arg("dataset"), a::kw_only(),
      a::arg("num_calibration_samples") = 64, a::arg("max_seq_length") = 512,
      a::arg("output_dir") = a::none(), a::arg("overwrite") = false,
      a::arg("shuffle_calibration_samples") = true, a::arg("seed") = 42,
      "llm-compressor's oneshot on kvq's engine: applies the recipe (a path, YAML / JSON text, a\n"
      "dict or a QuantizationConfig) to `model` (a Model, changed in place, or a model "
      "directory),\n"
      "calibrates the q/k/v scales on `dataset` (a file as `kvq oneshot --dataset` reads it, or a\n"
      "list of strings / token-id lists) and, with output_dir, saves the compressed-tensors\n"
      "checkpoint `kvq oneshot --output` writes (the same bytes; calibration report included).\n"
      "Returns the model, now quantized (generate / forward use its calibrated packed cache).\n"
      "Defaults are the CLI's (64 samples of up to 512 tokens). With more samples than\n"
      "num_calibration_samples, llm-compressor's selection: shuffle_calibration_samples=True\n"
      "draws them as its RandomSampler does after torch.manual_seed(seed), False takes the\n"
      "longest, longest first. Ctrl-C: KeyboardInterrupt, the model left unquantized and\n"
      "nothing written.");
  m.def("perplexity", &perplexity, a::arg("model"), a::arg("text_file") = a::none(), a::kw_only(),
        a::arg("text") = a::none(), a::arg("ctx") = 2048, a::arg("stride") = 0,
        a::arg("max_windows") = 0, a::arg("batch") = 1, a::arg("decode_from") = 0,
        a::arg("kv_cache") = "auto", a::arg("llama_cpp_scoring") = false,
        "Perplexity of `model` on a text file (or `text`), Hugging Face windowing, as `kvq\n"
        "perplexity --json`: returns its dict (ppl, nll, window_nll_sum, kv_cache, ...).\n"
        "llama_cpp_scoring: score each window's last ctx/2 - 1 tokens, as llama-perplexity.");
  m.def("compare", &compare, a::arg("model"), a::arg("schemes") = a::none(), a::kw_only(),
        a::arg("out_dir") = "kvq-compare", a::arg("data_dir") = "../shared/data",
        a::arg("text_file") = a::none(), a::arg("kld") = "topk", a::arg("ctx") = 512,
        a::arg("max_windows") = 8, a::arg("calib_samples") = 32, a::arg("gsm8k_limit") = 0,
        a::arg("gsm8k_batch") = 8, a::arg("decode_context") = 256, a::arg("decode_steps") = 16,
        a::arg("weights") = "auto",
        "`kvq compare`: calibrates and evaluates the schemes (default: the built-in list) against\n"
        "the unquantized model, writes out_dir/results.{json,md} and the plot, and returns\n"
        "results.json as a dict. Resumes from out_dir's caches like the CLI.");
  auto model_class = pyb::reinterpret_borrow<pyb::class_<PyModel, ModelPtr>>(m.attr("Model"));
  model_class.def(
      "generate", &generate, a::arg("prompt"), a::kw_only(), a::arg("max_new_tokens") = 128,
      a::arg("kv_cache") = "auto", a::arg("chat") = false, a::arg("system") = "",
      a::arg("temperature") = 0.0, a::arg("top_k") = 0, a::arg("top_p") = 1.0, a::arg("seed") = 0,
      "Generates from a prompt (text, or token ids) as `kvq generate --json`: returns its\n"
      "dict (generated_ids, text, stop_reason, timings, kv_cache, ...). kv_cache as\n"
      "--kv-cache: auto (a quantized model's packed cache), fake, or FORMAT[:tensor|head].");
}

}  // namespace kvq::py
