// GSM8K generation benchmark, prompted and scored as lm-eval's `gsm8k` task (lm-eval 0.4.13,
// lm_eval/tasks/gsm8k/gsm8k.yaml) run with `--apply_chat_template --fewshot_as_multiturn`:
//
//   few-shot:  num_fewshot (5) examples from the train split, drawn by lm-eval's default
//              ContextSampler: ONE random.Random(fewshot_seed = 1234) shared by all test
//              questions in order, rnd.sample(train, num_fewshot) per question (so question i's
//              examples depend on the draws for questions 0..i-1; kvq replays them exactly, see
//              py_random.h). The train split must be the HF `openai/gsm8k` order (the shipped
//              ../shared/data/gsm8k/train.jsonl is).
//   messages:  per example  user "Question: {question}\nAnswer:"  assistant "{answer}" (the whole
//              answer text, calculator annotations and "#### N" included), then
//              user "Question: {test question}\nAnswer:"; rendered with the model's chat
//              template, add_generation_prompt = true (SmolLM2 prepends its default system turn).
//   generate:  prompt encoded without special tokens (the template already holds them), greedy,
//              at most max_new_tokens (256 = lm-eval's max_gen_toks); stops after an EOS id or
//              once the decoded continuation contains a stop string (until: "Question:", "</s>",
//              "<|im_end|>" — the yaml's list, which already holds the eos text). The text is the
//              continuation decoded without special tokens, cut before the first occurrence of
//              each stop string in turn (lm-eval's postprocess_generated_text).
//   score:     gsm8k_score.h (strict-match and flexible-extract, exact_match); accuracy with
//              lm-eval's stderr (mean_se in stats.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kvq/eval/gsm8k_score.h"
#include "kvq/eval/stats.h"
#include "kvq/model/kv_cache.h"

namespace kvq::model {
class CausalLM;
}
namespace kvq::tok {
class Tokenizer;
class ChatTemplate;
struct ChatMessage;
}  // namespace kvq::tok

namespace kvq::eval {

struct Gsm8kExample {
  std::string question, answer;
};

// Reads a GSM8K jsonl file (one {"question", "answer"} object per line; blank lines skipped).
// IoError naming the path when it is missing (GSM8K ships in ../shared/data/gsm8k), FormatError
// "path:line: ..." for a line that is not valid JSON or lacks a string field.
std::vector<Gsm8kExample> load_gsm8k(const std::filesystem::path& jsonl);

// The train indices lm-eval's few-shot sampler draws for test questions 0..count-1 (one
// random.Random(seed), num_fewshot draws per question in order). [count][num_fewshot].
std::vector<std::vector<std::int64_t>> gsm8k_fewshot_indices(std::int64_t train_size,
                                                             std::int64_t count,
                                                             std::int64_t num_fewshot,
                                                             std::uint64_t seed = 1234);

// lm-eval's doc_to_text.
std::string gsm8k_doc_to_text(const Gsm8kExample& doc);

// The multi-turn chat messages for one test question with the given few-shot examples.
std::vector<tok::ChatMessage> gsm8k_messages(const Gsm8kExample& doc,
                                             const std::vector<const Gsm8kExample*>& fewshot);

struct Gsm8kOptions {
  std::filesystem::path data_dir;  // holds test.jsonl and train.jsonl
  std::int64_t limit = 0;          // first `limit` test questions; 0: all 1319
  std::int64_t num_fewshot = 5;
  std::uint64_t fewshot_seed = 1234;
  std::int64_t max_new_tokens = 256;
  std::vector<std::string> until = {"Question:", "</s>", "<|im_end|>"};
  // The cache every question runs with (runtime::resolve_kv_cache makes it). Attention hooks
  // live on the model itself.
  model::KvCacheConfig kv_cache;
  bool progress = true;  // progress bar on stderr (drawn only on a terminal)
  // Questions generated together: each is prefilled alone, then those in flight decode one token
  // each per step, reading every weight once for up to 8 of them (the batched GEMV); the
  // generations are bit-identical to one question at a time.
  std::int64_t batch = 8;
  // JSONL of finished questions, appended as each finishes: those found there (same index and
  // prompt) are not generated again, so an interrupted run resumes. The caller names the file
  // after the model and scheme. Empty: none.
  std::filesystem::path resume_file;
};

// One greedy generation.
struct Gsm8kGeneration {
  std::string text;  // after stop-string truncation
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
};

struct Gsm8kRecord {
  std::int64_t index = 0;                     // test question index
  std::vector<std::int64_t> fewshot_indices;  // train indices of the examples
  std::int64_t prompt_tokens = 0;
  std::int64_t generated_tokens = 0;
  std::string generation;  // after stop-string truncation
  std::string target;      // the full answer text
  Gsm8kScore score;
};

struct Gsm8kResult {
  std::vector<Gsm8kRecord> records;
  MeanSe strict_match, flexible_extract;  // accuracy and lm-eval stderr
  double seconds = 0.0;
  std::int64_t generated_tokens = 0;
};

// The prompt string for test question `index` (the few-shot draws of questions 0..index-1 are
// replayed), rendered with `chat_template` (a model's:
// tokenizer.chat_template_renderer()). InvalidArgument for an index out of range.
std::string gsm8k_prompt(const tok::ChatTemplate& chat_template,
                         const std::vector<Gsm8kExample>& test,
                         const std::vector<Gsm8kExample>& train, std::int64_t index,
                         std::int64_t num_fewshot = 5, std::uint64_t seed = 1234);

// Greedy generation of each prompt with lm-eval's stopping rules (see above), options.batch at a
// time.
std::vector<Gsm8kGeneration> gsm8k_generate(model::CausalLM& model, const tok::Tokenizer& tokenizer,
                                            const std::vector<std::string>& prompts,
                                            const Gsm8kOptions& options);

Gsm8kResult run_gsm8k(model::CausalLM& model, const tok::Tokenizer& tokenizer,
                      const Gsm8kOptions& options);

}  // namespace kvq::eval
