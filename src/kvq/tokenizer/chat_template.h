// Chat templates rendered natively (kvq has no Jinja engine).
//
// A model's Jinja template is recognised by comparing it, with the whitespace inside {{ }} and
// {% %} tags ignored and "\n" escapes read as newlines, against the templates kvq knows:
//   - ChatML: <|im_start|>{role}\n{content}<|im_end|>\n per message, "<|im_start|>assistant\n"
//     for the generation prompt;
//   - ChatML with a default system prompt (SmolLM2): as ChatML, preceded by
//     <|im_start|>system\n{default}<|im_end|>\n when the first message is not a system one;
//     the default text is read from the template.
// Any other template throws NotSupported on use, naming these.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvq::tok {

struct ChatMessage {
  std::string role, content;
};

class ChatTemplate {
 public:
  enum class Kind { kNone, kUnknown, kChatML };

  ChatTemplate() = default;
  // Recognises `jinja` (an empty string means the model has no template).
  explicit ChatTemplate(std::string_view jinja);

  Kind kind() const { return kind_; }
  const std::optional<std::string>& default_system() const { return default_system_; }
  // Throws NotSupported for kNone / kUnknown.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  Kind kind_ = Kind::kNone;
  std::optional<std::string> default_system_;
};

}  // namespace kvq::tok
