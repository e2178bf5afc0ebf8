// Calibration datasets -> token sequences.
//
// Formats (picked from the file name / content):
//  - plain text (.txt/.raw): the whole file tokenized, split into consecutive windows of
//    max_seq_length tokens (the last, shorter window kept when non-empty);
//  - JSONL with a "text" field: one sample per line, truncated to max_seq_length;
//  - chat-messages JSONL {"messages": [{"role", "content"}, ...]} (ultrachat's layout, the
//    reference PR's calibration set): rendered with the model's chat template
//    (add_generation_prompt=false), tokenized without special tokens and truncated, as
//    llm-compressor's examples do with tokenizer.apply_chat_template(messages, tokenize=False);
//  - GSM8K-style JSONL {question, answer}: rendered with the model's chat template as
//    [user: question, assistant: answer] (add_generation_prompt=false), tokenized without
//    special tokens and truncated to max_seq_length — what llm-compressor's kv-cache examples
//    feed oneshot (tokenizer(apply_chat_template(..., tokenize=False), max_length=L,
//    truncation=True, add_special_tokens=False)). A model without a chat template (a base
//    model such as gemma-3-270m) gets lm-eval's plain layout instead:
//    "Question: {question}\nAnswer: {answer}", tokenized the same way.
// Samples keep file order unless a shuffle seed is given (Fisher-Yates with std::mt19937_64 —
// NOT the same permutation as HF datasets' shuffle), then the first num_samples are taken.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kvq/tokenizer/tokenizer.h"

namespace kvq::lifecycle {

enum class DatasetFormat { kAuto, kText, kJsonlText, kJsonlQA };

struct DatasetOptions {
  std::int64_t num_samples = 64;
  std::int64_t max_seq_length = 512;
  std::optional<std::uint64_t> shuffle_seed;
  DatasetFormat format = DatasetFormat::kAuto;
};

struct CalibrationSample {
  std::int64_t index = 0;            // line (JSONL) or window (text) index in the file
  std::vector<std::int32_t> tokens;  // non-empty, <= max_seq_length
};

// FormatError naming the file and line for ill-formed lines / missing fields; InvalidArgument
// for an empty dataset or bad options.
std::vector<CalibrationSample> load_calibration_dataset(const std::filesystem::path& path,
                                                        const tok::Tokenizer& tokenizer,
                                                        const DatasetOptions& options);

}  // namespace kvq::lifecycle
