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
// Which num_samples samples calibrate, in which order (order matters to moving-average
// observers), is SampleOrder's; kvq oneshot and kvq.oneshot default to llm-compressor's
// oneshot(shuffle_calibration_samples=True).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kvq/tokenizer/tokenizer.h"

namespace kvq::lifecycle {

enum class DatasetFormat { kAuto, kText, kJsonlText, kJsonlQA };

// How num_samples samples are picked from a dataset that has more, and the order they are fed in.
// The llm-compressor orders are those of its calibration dataloader (llmcompressor/datasets/
// utils.py _make_sampler, batch size 1), over the samples after truncation:
enum class SampleOrder {
  // shuffle_calibration_samples=True (its default): RandomSampler's draw, which llm-compressor
  // seeds from torch's global generator — the samples its oneshot (default sequential
  // pipeline) calibrates on when the script calls torch.manual_seed(seed) right before it.
  kShuffled,
  // shuffle_calibration_samples=False: LengthAwareSampler, the num_samples longest, longest
  // first (ties in torch.argsort's order).
  kLongestFirst,
  // The first num_samples in file order.
  kFileOrder,
  // kvq compare's calibration set: Fisher-Yates over all samples with std::mt19937_64(seed),
  // then the first num_samples (not llm-compressor's; kept so compare's published numbers and
  // caches reproduce).
  kCompareShuffle,
};

struct DatasetOptions {
  std::int64_t num_samples = 64;
  std::int64_t max_seq_length = 512;
  SampleOrder order = SampleOrder::kFileOrder;
  std::uint64_t seed = 0;  // kShuffled, kCompareShuffle
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

// The num_samples samples `options.order` picks from `samples` (all of the dataset, in file
// order), in the order they calibrate. load_calibration_dataset ends with it; kvq.oneshot's
// in-memory lists go through it too.
std::vector<CalibrationSample> select_calibration_samples(std::vector<CalibrationSample> samples,
                                                          const DatasetOptions& options);

}  // namespace kvq::lifecycle
