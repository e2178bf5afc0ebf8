#include "kvq/eval/gsm8k.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/core/progress.h"
#include "kvq/eval/logits_cache.h"
#include "kvq/eval/py_random.h"
#include "kvq/io/json_file.h"
#include "kvq/io/jsonl_journal.h"
#include "kvq/model/causal_lm.h"
#include "kvq/runtime/generator.h"
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
    const nlohmann::json j = io::parse_json(line, fmt::format("{}:{}", jsonl.string(), line_no));
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

namespace {

// Greedy generation of `prompts` with lm-eval's stopping rules: an EOS id (the tokenizer's eos and
// <|im_end|>), a stop string in the continuation decoded with special tokens kept, or
// max_new_tokens; `done(i, generation)` as prompt i finishes (not in order). The sequences in
// flight decode together (runtime/generator.h: bit-identical to one at a time up to 8).
void generate_answers(model::CausalLM& model, const tok::Tokenizer& tokenizer,
                      const std::vector<std::string>& prompts, const Gsm8kOptions& options,
                      const std::function<void(std::size_t, Gsm8kGeneration)>& done) {
  if (options.max_new_tokens < 1) {
    fail<InvalidArgument>("gsm8k: max_new_tokens must be >= 1, got {}", options.max_new_tokens);
  }
  if (options.batch < 1) fail<InvalidArgument>("gsm8k: batch must be >= 1, got {}", options.batch);
  std::vector<std::int64_t> eos;
  if (tokenizer.eos_id()) eos.push_back(*tokenizer.eos_id());
  if (auto im_end = tokenizer.token_id("<|im_end|>")) eos.push_back(*im_end);
  const auto stop_string = [&](std::span<const std::int32_t> generated) {
    const std::string so_far = tokenizer.decode(generated, /*skip_special=*/false);
    return std::any_of(options.until.begin(), options.until.end(), [&](const std::string& term) {
      return !term.empty() && so_far.find(term) != std::string::npos;
    });
  };
  std::vector<runtime::GenerationRequest> requests;
  for (const std::string& prompt : prompts) {
    runtime::GenerationRequest r;
    r.prompt = tokenizer.encode(prompt, /*add_special_tokens=*/false);
    r.max_new_tokens = options.max_new_tokens;
    r.stop_ids = eos;
    r.stop_after = stop_string;
    requests.push_back(std::move(r));
  }
  runtime::generate(
      model, requests, {options.kv_cache, options.batch}, {},
      [&](std::size_t i, runtime::Generation g) {
        done(i, Gsm8kGeneration{
                    cut_at_stops(tokenizer.decode(g.tokens, /*skip_special=*/true), options.until),
                    g.prompt_tokens, static_cast<std::int64_t>(g.tokens.size())});
      });
}

}  // namespace

std::vector<Gsm8kGeneration> gsm8k_generate(model::CausalLM& model, const tok::Tokenizer& tokenizer,
                                            const std::vector<std::string>& prompts,
                                            const Gsm8kOptions& options) {
  std::vector<Gsm8kGeneration> out(prompts.size());
  generate_answers(model, tokenizer, prompts, options,
                   [&](std::size_t i, Gsm8kGeneration g) { out[i] = std::move(g); });
  return out;
}

namespace {

// The resume file (io/jsonl_journal.h): one record per finished question, so an interrupted run
// loses at most the questions in flight. A record counts only when its prompt hash matches
// (another few-shot draw or template is a different question).
nlohmann::json record_json(std::int64_t index, std::uint64_t prompt_hash,
                           const Gsm8kGeneration& g) {
  nlohmann::json j;
  j["index"] = index;
  j["prompt_fnv1a64"] = prompt_hash;
  j["prompt_tokens"] = g.prompt_tokens;
  j["generated_tokens"] = g.generated_tokens;
  j["generation"] = g.text;
  return j;
}

std::map<std::int64_t, std::pair<std::uint64_t, Gsm8kGeneration>> read_records(
    const std::filesystem::path& path) {
  std::map<std::int64_t, std::pair<std::uint64_t, Gsm8kGeneration>> out;
  for (const nlohmann::json& j : io::read_jsonl_journal(path)) {
    try {
      out[j.at("index").get<std::int64_t>()] = {
          j.at("prompt_fnv1a64").get<std::uint64_t>(),
          Gsm8kGeneration{j.at("generation").get<std::string>(),
                          j.at("prompt_tokens").get<std::int64_t>(),
                          j.at("generated_tokens").get<std::int64_t>()}};
    } catch (const nlohmann::json::exception&) {
      log::warn("{}: skipped a record without the GSM8K fields", path.string());
    }
  }
  return out;
}

}  // namespace

Gsm8kResult run_gsm8k(model::CausalLM& model, const tok::Tokenizer& tokenizer,
                      const Gsm8kOptions& options) {
  if (options.limit < 0) fail<InvalidArgument>("gsm8k: limit must be >= 0");
  const auto test = load_gsm8k(options.data_dir / "test.jsonl");
  const auto train = load_gsm8k(options.data_dir / "train.jsonl");
  const std::int64_t n = options.limit == 0 ? static_cast<std::int64_t>(test.size())
                                            : std::min<std::int64_t>(options.limit, test.size());
  const auto draws = gsm8k_fewshot_indices(static_cast<std::int64_t>(train.size()), n,
                                           options.num_fewshot, options.fewshot_seed);

  const tok::ChatTemplate& chat_template = tokenizer.chat_template_renderer();
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> prompts(static_cast<std::size_t>(n));
  std::vector<std::uint64_t> hashes(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    prompts[i] = render_prompt(chat_template, test[i], train, draws[i]);
    hashes[i] = fnv1a64(prompts[i].data(), prompts[i].size());
  }

  // Questions already answered in the resume file are taken from it.
  std::vector<std::optional<Gsm8kGeneration>> answers(prompts.size());
  if (!options.resume_file.empty()) {
    for (auto& [index, rec] : read_records(options.resume_file)) {
      if (index >= 0 && index < n && rec.first == hashes[static_cast<std::size_t>(index)])
        answers[static_cast<std::size_t>(index)] = std::move(rec.second);
    }
  }
  std::vector<std::string> todo;
  std::vector<std::size_t> todo_index;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (!answers[i]) {
      todo.push_back(prompts[i]);
      todo_index.push_back(i);
    }
  }
  if (todo.size() < prompts.size()) {
    log::info("gsm8k: {} of {} questions reused from {}", prompts.size() - todo.size(),
              prompts.size(), options.resume_file.string());
  }

  std::optional<io::JsonlJournal> resume;
  if (!options.resume_file.empty() && !todo.empty()) resume.emplace(options.resume_file);
  ProgressBar bar("gsm8k", n, "q", !options.progress);
  bar.advance(n - static_cast<std::int64_t>(todo.size()));
  std::int64_t answered = 0, correct = 0;
  generate_answers(model, tokenizer, todo, options, [&](std::size_t t, Gsm8kGeneration g) {
    const std::size_t i = todo_index[t];
    if (resume) resume->append(record_json(static_cast<std::int64_t>(i), hashes[i], g));
    correct += score_gsm8k(g.text, test[i].answer).flexible_correct ? 1 : 0;
    ++answered;
    answers[i] = std::move(g);
    bar.advance(1);
    bar.set_suffix(fmt::format("flex {:.1f}% of {} new", 100.0 * correct / answered, answered));
  });
  bar.finish();

  Gsm8kResult result;
  std::vector<std::uint8_t> strict, flexible;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Gsm8kRecord rec;
    rec.index = static_cast<std::int64_t>(i);
    rec.fewshot_indices = draws[i];
    rec.prompt_tokens = answers[i]->prompt_tokens;
    rec.generated_tokens = answers[i]->generated_tokens;
    rec.generation = answers[i]->text;
    rec.target = test[i].answer;
    rec.score = score_gsm8k(rec.generation, rec.target);
    strict.push_back(rec.score.strict_correct);
    flexible.push_back(rec.score.flexible_correct);
    result.generated_tokens += rec.generated_tokens;
    result.records.push_back(std::move(rec));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (n > 0) {
    result.strict_match = mean_se(strict);
    result.flexible_extract = mean_se(flexible);
  }
  return result;
}

}  // namespace kvq::eval
