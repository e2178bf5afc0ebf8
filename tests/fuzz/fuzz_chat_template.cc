// Chat templates: recognising a Jinja template (tok::ChatTemplate) and rendering messages with
// it. The bytes up to the first NUL are the template; the rest, when present, is the content of
// the user message.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "kvq/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvq;
  const std::string_view text = fuzz::as_text(data, size);
  const std::size_t nul = text.find('\0');
  const std::string_view jinja = text.substr(0, nul);
  const std::string content =
      nul == std::string_view::npos ? "What is 2+2?" : std::string(text.substr(nul + 1));
  fuzz::expect_kvq_errors_only([&] {
    const tok::ChatTemplate chat(jinja);
    const std::vector<tok::ChatMessage> with_system = {
        {"system", "Be brief."}, {"user", content}, {"assistant", "4"}};
    const std::vector<tok::ChatMessage> without_system = {{"user", content}};
    (void)chat.render(with_system, false);
    (void)chat.render(without_system, true);
  });
  return 0;
}
