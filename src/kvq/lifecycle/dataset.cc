#include "kvq/lifecycle/dataset.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kvq/core/error.h"
#include "kvq/core/torch_sampling.h"
#include "kvq/io/json_file.h"
#include "kvq/io/read_file.h"

namespace kvq::lifecycle {
namespace {

bool looks_like_jsonl(const std::string& text) {
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    return c == '{';
  }
  return false;
}

void truncate(std::vector<std::int32_t>& tokens, std::int64_t max_len) {
  if (static_cast<std::int64_t>(tokens.size()) > max_len)
    tokens.resize(static_cast<std::size_t>(max_len));
}

// {"messages": [{"role": ..., "content": ...}, ...]} (ultrachat's layout; other keys of a
// message are ignored).
std::vector<tok::ChatMessage> chat_messages(const nlohmann::json& j,
                                            const std::filesystem::path& path,
                                            std::int64_t lineno) {
  if (!j.is_array() || j.empty())
    fail<FormatError>("{}:{}: \"messages\" must be a non-empty array", path.string(), lineno);
  std::vector<tok::ChatMessage> msgs;
  for (const nlohmann::json& m : j) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() ||
        !m["content"].is_string())
      fail<FormatError>(
          "{}:{}: each message must be an object with string \"role\" and \"content\"",
          path.string(), lineno);
    msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return msgs;
}

// The conversation rendered with the model's chat template (add_generation_prompt=false),
// errors prefixed with the line.
std::string render(const tok::Tokenizer& tokenizer, const std::vector<tok::ChatMessage>& msgs,
                   const std::filesystem::path& path, std::int64_t lineno) {
  try {
    return tokenizer.apply_chat_template(msgs, /*add_generation_prompt=*/false);
  } catch (const NotSupported& e) {
    fail<NotSupported>("{}:{}: {}", path.string(), lineno, e.what());
  } catch (const InvalidArgument& e) {
    fail<InvalidArgument>("{}:{}: {}", path.string(), lineno, e.what());
  }
}

}  // namespace

std::vector<CalibrationSample> load_calibration_dataset(const std::filesystem::path& path,
                                                        const tok::Tokenizer& tokenizer,
                                                        const DatasetOptions& options) {
  if (options.num_samples <= 0)
    fail<InvalidArgument>("--num-calibration-samples must be positive (got {})",
                          options.num_samples);
  if (options.max_seq_length <= 0)
    fail<InvalidArgument>("--max-seq-length must be positive (got {})", options.max_seq_length);
  const std::string text = io::read_file(path, "the calibration dataset");
  DatasetFormat format = options.format;
  const std::string ext = path.extension().string();
  if (format == DatasetFormat::kAuto)
    format = (ext == ".jsonl" || ext == ".json" || looks_like_jsonl(text))
                 ? DatasetFormat::kJsonlText
                 : DatasetFormat::kText;
  std::vector<CalibrationSample> samples;
  if (format == DatasetFormat::kText) {
    const std::vector<std::int32_t> all = tokenizer.encode(text, /*add_special_tokens=*/false);
    for (std::size_t b = 0, i = 0; b < all.size();
         b += static_cast<std::size_t>(options.max_seq_length), ++i) {
      const std::size_t e =
          std::min(all.size(), b + static_cast<std::size_t>(options.max_seq_length));
      samples.push_back({static_cast<std::int64_t>(i),
                         {all.begin() + static_cast<std::ptrdiff_t>(b),
                          all.begin() + static_cast<std::ptrdiff_t>(e)}});
    }
  } else {
    // JSONL: every line an object with "text", or "question" + "answer" (GSM8K).
    std::istringstream lines(text);
    std::string line;
    std::int64_t lineno = 0, index = 0;
    while (std::getline(lines, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const nlohmann::json j = io::parse_json(line, fmt::format("{}:{}", path.string(), lineno));
      if (!j.is_object()) fail<FormatError>("{}:{}: expected a JSON object", path.string(), lineno);
      std::vector<std::int32_t> tokens;
      if (j.contains("messages")) {
        const std::vector<tok::ChatMessage> msgs = chat_messages(j["messages"], path, lineno);
        tokens = tokenizer.encode(render(tokenizer, msgs, path, lineno), false);
      } else if (j.contains("question") && j.contains("answer")) {
        if (!j["question"].is_string() || !j["answer"].is_string())
          fail<FormatError>("{}:{}: \"question\" and \"answer\" must be strings", path.string(),
                            lineno);
        if (tokenizer.chat_template().empty()) {
          // A base model (no chat template, e.g. gemma-3-270m): lm-eval's plain GSM8K layout.
          tokens = tokenizer.encode("Question: " + j["question"].get<std::string>() +
                                        "\nAnswer: " + j["answer"].get<std::string>(),
                                    /*add_special_tokens=*/false);
        } else {
          const std::vector<tok::ChatMessage> msgs = {
              {"user", j["question"].get<std::string>()},
              {"assistant", j["answer"].get<std::string>()}};
          tokens = tokenizer.encode(render(tokenizer, msgs, path, lineno),
                                    /*add_special_tokens=*/false);
        }
      } else if (j.contains("text")) {
        if (!j["text"].is_string())
          fail<FormatError>("{}:{}: \"text\" must be a string", path.string(), lineno);
        tokens = tokenizer.encode(j["text"].get<std::string>(), false);
      } else {
        fail<FormatError>(
            "{}:{}: a calibration JSONL line needs a \"text\" field, \"messages\" or "
            "\"question\" + \"answer\"",
            path.string(), lineno);
      }
      truncate(tokens, options.max_seq_length);
      if (!tokens.empty()) samples.push_back({index, std::move(tokens)});
      ++index;
    }
  }
  if (samples.empty())
    fail<InvalidArgument>("{}: the calibration dataset is empty (no non-empty samples)",
                          path.string());
  return select_calibration_samples(std::move(samples), options);
}

std::vector<CalibrationSample> select_calibration_samples(std::vector<CalibrationSample> samples,
                                                          const DatasetOptions& options) {
  const auto n = static_cast<std::int64_t>(samples.size());
  if (n == 0) return {};
  const std::int64_t k = std::min(n, options.num_samples);  // llm-compressor clamps too
  std::vector<std::int64_t> picked;                         // indices into samples, feed order
  switch (options.order) {
    case SampleOrder::kShuffled:
      // llm-compressor 0.14's default (sequential) pipeline iterates the DataLoader twice (a
      // sample to trace the model, then the pass it calibrates on); each iteration draws the
      // DataLoader's base seed, then the sampler's, from the global generator: the calibrated
      // samples come from the fourth draw after torch.manual_seed.
      picked = torch_random_sampler(n, k, options.seed, /*draws_before=*/3);
      break;
    case SampleOrder::kLongestFirst: {
      std::vector<std::int64_t> lengths;
      for (const CalibrationSample& s : samples)
        lengths.push_back(static_cast<std::int64_t>(s.tokens.size()));
      picked = torch_argsort_descending(lengths);
      break;
    }
    case SampleOrder::kFileOrder:
      picked.resize(static_cast<std::size_t>(n));
      std::iota(picked.begin(), picked.end(), std::int64_t{0});
      break;
    case SampleOrder::kCompareShuffle: {
      picked.resize(static_cast<std::size_t>(n));
      std::iota(picked.begin(), picked.end(), std::int64_t{0});
      std::mt19937_64 rng(options.seed);
      for (std::size_t i = picked.size() - 1; i > 0; --i) {
        std::uniform_int_distribution<std::size_t> pick(0, i);
        std::swap(picked[i], picked[pick(rng)]);
      }
      break;
    }
  }
  std::vector<CalibrationSample> out;
  for (std::int64_t i = 0; i < k; ++i)
    out.push_back(
        std::move(samples[static_cast<std::size_t>(picked[static_cast<std::size_t>(i)])]));
  return out;
}

}  // namespace kvq::lifecycle
