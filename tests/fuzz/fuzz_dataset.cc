// Calibration datasets (JSONL: {"text"} or GSM8K {"question", "answer"} lines):
// lifecycle::load_calibration_dataset with a small byte-level tokenizer and a ChatML template
// (tests/data/tokenizer/tiny_bytelevel.json, set up once per process).
#include <cstdint>
#include <filesystem>
#include <memory>

#include "fuzz_support.h"
#include "kvq/lifecycle/dataset.h"
#include "kvq/tokenizer/tokenizer.h"

namespace {

const kvq::tok::Tokenizer& tokenizer() {
  static const std::unique_ptr<kvq::tok::Tokenizer> t = [] {
    const std::filesystem::path dir = kvq::fuzz::scratch_dir() / "tokenizer";
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(KVQ_TEST_DATA_DIR "/tokenizer/tiny_bytelevel.json",
                               dir / "tokenizer.json",
                               std::filesystem::copy_options::overwrite_existing);
    const char* config =
        R"({"chat_template": "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"})";
    kvq::fuzz::write_scratch("tokenizer/tokenizer_config.json", config);
    return std::make_unique<kvq::tok::Tokenizer>(kvq::tok::Tokenizer::from_dir(dir));
  }();
  return *t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  const kvq::tok::Tokenizer& tok = tokenizer();
  const auto path = fuzz::write_scratch("data.jsonl", fuzz::as_text(data, size));
  fuzz::expect_kvq_errors_only([&] {
    lifecycle::DatasetOptions options;
    options.num_samples = 8;
    options.max_seq_length = 64;
    // Both llm-compressor selections (the input's length picks one; the corpus stays valid).
    options.order = size % 2 == 0 ? lifecycle::SampleOrder::kShuffled
                                  : lifecycle::SampleOrder::kLongestFirst;
    options.seed = 1;
    (void)lifecycle::load_calibration_dataset(path, tok, options);
  });
  return 0;
}
