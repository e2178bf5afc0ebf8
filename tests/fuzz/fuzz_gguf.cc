// GGUF files: the reader (GgufFile::parse, what GgufFile::open runs on the mapped file), every
// metadata value's rendering and every tensor's bytes and dequantization, then what `kvq convert`
// and `kvq inspect` derive from the metadata (tokenizer.json, tokenizer_config.json, config.json,
// generation_config.json, tensor names).
#include <cstdint>
#include <span>

#include "fuzz_support.h"
#include "kvq/io/convert_gguf_tokenizer.h"
#include "kvq/io/gguf.h"
#include "kvq/io/gguf_dequant.h"
#include "kvq/model/convert_gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  fuzz::expect_kvq_errors_only([&] {
    const io::GgufFile gguf =
        io::GgufFile::parse(std::span<const std::uint8_t>(data, size), "fuzz.gguf", nullptr);
    for (const io::GgufKeyValue& kv : gguf.metadata()) (void)kv.value.summary();
    for (const io::GgufTensorInfo& info : gguf.tensors()) {
      (void)model::gguf_to_hf_tensor_name(info.name);
      (void)model::gguf_to_hf_tensor_name(info.name, "gemma3");
      const std::span<const std::uint8_t> bytes = gguf.tensor_bytes(info);
      if (!bytes.empty()) {
        volatile std::uint8_t sink = bytes.front() ^ bytes.back();
        (void)sink;
      }
      fuzz::expect_kvq_errors_only([&] { (void)io::dequantize_tensor(gguf, info); });
    }
    fuzz::expect_kvq_errors_only([&] { (void)io::gguf_tokenizer_json(gguf); });
    fuzz::expect_kvq_errors_only([&] { (void)io::gguf_tokenizer_config_json(gguf); });
    fuzz::expect_kvq_errors_only([&] { (void)model::gguf_llama_config_json(gguf); });
    fuzz::expect_kvq_errors_only([&] { (void)model::gguf_config_json(gguf); });
    fuzz::expect_kvq_errors_only([&] { (void)model::gguf_generation_config_json(gguf); });
  });
  return 0;
}
