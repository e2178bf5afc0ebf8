// tokenizer.json: Tokenizer::from_file (vocab, merges, added tokens, pre-tokenizer and
// post-processor), then an encode / decode round of a fixed text with the loaded tokenizer.
#include <cstdint>
#include <vector>

#include "fuzz_support.h"
#include "kvq/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  const auto path = fuzz::write_scratch("tokenizer.json", fuzz::as_text(data, size));
  fuzz::expect_kvq_errors_only([&] {
    const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(path);
    const std::vector<std::int32_t> ids =
        tokenizer.encode("Hello world, 1234 caf\xc3\xa9 <|im_end|>  \n\tx", true);
    (void)tokenizer.decode(ids);
    (void)tokenizer.decode(ids, /*skip_special=*/true);
    for (std::int32_t id = 0; id < tokenizer.vocab_size() && id < 512; ++id)
      (void)tokenizer.token_to_piece(id);
  });
  return 0;
}
