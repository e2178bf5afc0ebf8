#include "kvq/eval/gsm8k.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "kvq/core/error.h"
#include "kvq/core/progress.h"
#include "kvq/eval/py_random.h"
#include "kvq/model/llama_model.h"
#include "kvq/model/sampler.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::eval {

std::vector<Gsm8kExample> load_gsm8k(const std::filesystem::path& jsonl) {
  std::ifstream in(jsonl, std::ios::binary);
  if (!in) {
    fail<IoError>(
        "{}: cannot open GSM8K file (it ships in ../shared/data/gsm8k/ next to the "
        "project; pass the directory holding test.jsonl and train.jsonl)",
        jsonl.string());
  }
  std::vector<Gsm8kExample> out;
  std::string line;
  std::int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail<FormatError>("{}:{}: invalid JSON: {}", jsonl.string(), line_no, e.what());
    }
    Gsm8kExample ex;
    for (const char* field : {"question", "answer"}) {
      if (!j.is_object() || !j.contains(field) || !j[field].is_string()) {
        fail<FormatError>("{}:{}: expected an object with a string \"{}\"", jsonl.string(), line_no,
                          field);
      }
    }
    ex.question = j["question"].get<std::string>();
    ex.answer = j["answer"].get<std::string>();
    out.push_back(std::move(ex));
  }
  if (in.bad()) fail<IoError>("{}: read error", jsonl.string());
  if (out.empty()) fail<FormatError>("{}: no GSM8K examples in the file", jsonl.string());
  return out;
}

std::vector<std::vector<std::int64_t>> gsm8k_fewshot_indices(std::int64_t train_size,
                                                             std::int64_t count,
                                                             std::int64_t num_fewshot,
                                                             std::uint64_t seed) {
  if (num_fewshot < 0 || num_fewshot > train_size) {
    fail<InvalidArgument>("gsm8k: num_fewshot = {} outside [0, {}] (train examples)", num_fewshot,
                          train_size);
  }
  PyRandom rnd(seed);
  std::vector<std::vector<std::int64_t>> out(
      static_cast<std::size_t>(std::max<std::int64_t>(0, count)));
  // lm-eval returns [] without touching the generator when num_fewshot == 0.
  if (num_fewshot == 0) return out;
  for (auto& draw : out) draw = rnd.sample(train_size, num_fewshot);
  return out;
}

std::string gsm8k_doc_to_text(const Gsm8kExample& doc) {
  return "Question: " + doc.question + "\nAnswer:";
}

std::vector<tok::ChatMessage> gsm8k_messages(const Gsm8kExample& doc,
                                             const std::vector<const Gsm8kExample*>& fewshot) {
  std::vector<tok::ChatMessage> messages;
  for (const Gsm8kExample* ex : fewshot) {
    messages.push_back({"user", gsm8k_doc_to_text(*ex)});
    messages.push_back({"assistant", ex->answer});
  }
  messages.push_back({"user", gsm8k_doc_to_text(doc)});
  return messages;
}

namespace {

std::string render_prompt(const tok::ChatTemplate& chat_template, const Gsm8kExample& doc,
                          const std::vector<Gsm8kExample>& train,
                          const std::vector<std::int64_t>& fewshot) {
  std::vector<const Gsm8kExample*> examples;
  for (std::int64_t i : fewshot) examples.push_back(&train[static_cast<std::size_t>(i)]);
  const auto messages = gsm8k_messages(doc, examples);
  return chat_template.render(messages, /*add_generation_prompt=*/true);
}

// lm-eval's postprocess_generated_text: s = s.split(term)[0] for each stop string in turn.
std::string cut_at_stops(std::string text, const std::vector<std::string>& until) {
  for (const std::string& term : until) {
    if (term.empty()) continue;
    const auto pos = text.find(term);
    if (pos != std::string::npos) text.resize(pos);
  }
  return text;
}

}  // namespace

std::string gsm8k_prompt(const tok::ChatTemplate& chat_template,
                         const std::vector<Gsm8kExample>& test,
                         const std::vector<Gsm8kExample>& train, std::int64_t index,
                         std::int64_t num_fewshot, std::uint64_t seed) {
  if (index < 0 || index >= static_cast<std::int64_t>(test.size())) {
    fail<InvalidArgument>("gsm8k: question index {} outside [0, {})", index, test.size());
  }
  const auto draws =
      gsm8k_fewshot_indices(static_cast<std::int64_t>(train.size()), index + 1, num_fewshot, seed);
  return render_prompt(chat_template, test[static_cast<std::size_t>(index)], train, draws.back());
}

std::string gsm8k_generate(model::LlamaModel& model, const tok::Tokenizer& tokenizer,
                           const std::string& prompt, const Gsm8kOptions& options,
                           std::int64_t* prompt_tokens, std::int64_t* generated_tokens) {
  if (options.max_new_tokens < 1) {
    fail<InvalidArgument>("gsm8k: max_new_tokens must be >= 1, got {}", options.max_new_tokens);
  }
  const std::vector<std::int32_t> ids = tokenizer.encode(prompt, /*add_special_tokens=*/false);
  std::vector<std::int32_t> eos;
  if (tokenizer.eos_id()) eos.push_back(*tokenizer.eos_id());
  if (auto im_end = tokenizer.token_id("<|im_end|>")) eos.push_back(*im_end);

  const auto capacity = static_cast<std::int64_t>(ids.size()) + options.max_new_tokens;
  model::KvCache cache = model.make_cache(1, capacity, options.kv_storage);
  if (options.prepare_cache) options.prepare_cache(cache);
  model::Sampler greedy(model::SamplerConfig{});  // temperature 0: argmax, lowest id on ties

  std::vector<std::int32_t> generated;
  Tensor logits = model.forward(ids, cache, model::LogitsMode::kLast);
  const auto vocab = static_cast<std::size_t>(logits.shape().back());
  while (static_cast<std::int64_t>(generated.size()) < options.max_new_tokens) {
    const std::int32_t token = greedy.sample(std::span<const float>(logits.f32(), vocab));
    generated.push_back(token);
    if (std::find(eos.begin(), eos.end(), token) != eos.end()) break;
    // lm-eval's stopping criterion decodes with special tokens kept.
    const std::string so_far = tokenizer.decode(generated, /*skip_special=*/false);
    bool stop = false;
    for (const std::string& term : options.until) {
      stop |= !term.empty() && so_far.find(term) != std::string::npos;
    }
    if (stop || static_cast<std::int64_t>(generated.size()) == options.max_new_tokens) break;
    const std::int32_t next[1] = {token};
    logits = model.forward(next, cache, model::LogitsMode::kLast);
  }
  if (prompt_tokens) *prompt_tokens = static_cast<std::int64_t>(ids.size());
  if (generated_tokens) *generated_tokens = static_cast<std::int64_t>(generated.size());
  return cut_at_stops(tokenizer.decode(generated, /*skip_special=*/true), options.until);
}

Gsm8kResult run_gsm8k(model::LlamaModel& model, const tok::Tokenizer& tokenizer,
                      const Gsm8kOptions& options) {
  if (options.limit < 0) fail<InvalidArgument>("gsm8k: limit must be >= 0");
  const auto test = load_gsm8k(options.data_dir / "test.jsonl");
  const auto train = load_gsm8k(options.data_dir / "train.jsonl");
  const std::int64_t n = options.limit == 0 ? static_cast<std::int64_t>(test.size())
                                            : std::min<std::int64_t>(options.limit, test.size());
  const auto draws = gsm8k_fewshot_indices(static_cast<std::int64_t>(train.size()), n,
                                           options.num_fewshot, options.fewshot_seed);

  const tok::ChatTemplate chat_template(tokenizer.chat_template());
  Gsm8kResult result;
  const auto start = std::chrono::steady_clock::now();
  ProgressBar bar("gsm8k", n, "q", !options.progress);
  std::vector<std::uint8_t> strict, flexible;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& doc = test[static_cast<std::size_t>(i)];
    Gsm8kRecord rec;
    rec.index = i;
    rec.fewshot_indices = draws[static_cast<std::size_t>(i)];
    const std::string prompt = render_prompt(chat_template, doc, train, rec.fewshot_indices);
    rec.generation = gsm8k_generate(model, tokenizer, prompt, options, &rec.prompt_tokens,
                                    &rec.generated_tokens);
    rec.target = doc.answer;
    rec.score = score_gsm8k(rec.generation, rec.target);
    strict.push_back(rec.score.strict_correct);
    flexible.push_back(rec.score.flexible_correct);
    result.generated_tokens += rec.generated_tokens;
    result.records.push_back(std::move(rec));
    bar.advance(1);
    const MeanSe acc = mean_se(flexible);
    bar.set_suffix(fmt::format("flex {:.1f}%", 100.0 * acc.mean));
  }
  bar.finish();
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (n > 0) {
    result.strict_match = mean_se(strict);
    result.flexible_extract = mean_se(flexible);
  }
  return result;
}

}  // namespace kvq::eval
