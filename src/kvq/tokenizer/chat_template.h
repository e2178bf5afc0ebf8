// Chat templates rendered natively (kvq has no Jinja engine).
//
// A model's Jinja template is recognised, never interpreted:
//   - ChatML, structurally: the template, with the whitespace inside {{ }} and {% %} tags
//     ignored and "\n" escapes read as newlines, is <|im_start|>{role}\n{content}<|im_end|>\n
//     per message and "<|im_start|>assistant\n" for the generation prompt, optionally preceded
//     by <|im_start|>system\n{default}<|im_end|>\n when the first message is not a system one
//     (SmolLM2; the default text is read from the template);
//   - the other families by fingerprint: the FNV-1a hash of the same normalised text equals the
//     one of a template kvq knows (one row per template in chat_template.cc's table: Llama
//     3.1/3.3, Llama 3.2, Gemma 2, Gemma 3, Mistral Nemo, Mistral Small 3.2, Phi-3.5, Qwen2.5,
//     Qwen3), each rendered by its own function, byte-identical to transformers'
//     apply_chat_template on tests/data/tokenizer/chat_template_goldens.json.
// Messages are plain {role, content} strings with roles system / user / assistant (ChatML:
// any role). Tools, tool calls and tool results are out of scope: other roles throw
// NotSupported naming the family. A conversation the template itself rejects (raise_exception,
// e.g. Gemma 2's system role, roles that do not alternate, or no message where the template
// reads messages[0]) throws InvalidArgument. An unknown template (or none) throws NotSupported
// on use, naming the templates kvq knows and how to calibrate on pre-rendered text instead.
//
// Clocks: Llama 3.1/3.3 print "Today Date: 26 Jul 2024" unless a date_string is given, as
// their template does; Llama 3.2 and Mistral Small 3.2 call strftime_now, which transformers
// defines as the local date of now; kvq does the same unless options.today pins the date.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvq::tok {

struct ChatMessage {
  std::string role, content;
};

// The tokenizer's special tokens the templates print ({{ bos_token }}, {{ eos_token }}); ""
// when the tokenizer has none, as Jinja prints an undefined variable.
struct ChatSpecialTokens {
  std::string bos_token, eos_token;
};

struct ChatRenderOptions {
  struct Date {
    int year = 0, month = 0, day = 0;  // month 1..12
  };
  // Llama 3.x's date_string template variable (e.g. "26 Jul 2024"), as
  // apply_chat_template(..., date_string=...) passes it.
  std::optional<std::string> date_string;
  // The date strftime_now formats; the local date of now when unset (as transformers).
  std::optional<Date> today;
};

class ChatTemplate {
 public:
  enum class Kind {
    kNone,
    kUnknown,
    kChatML,
    kLlama3,
    kGemma,
    kMistral,
    kPhi3,
    kQwen2_5,
    kQwen3,
  };

  ChatTemplate() = default;
  // Recognises `jinja` (an empty string means the model has no template).
  explicit ChatTemplate(std::string_view jinja, ChatSpecialTokens special = {});

  Kind kind() const { return kind_; }
  // The recognised template's name ("Llama 3.1/3.3", "ChatML", ...); "" for kNone / kUnknown.
  std::string_view family() const;
  const std::optional<std::string>& default_system() const { return default_system_; }
  // Throws NotSupported for kNone / kUnknown and for what kvq does not render (see above).
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     const ChatRenderOptions& options = {}) const;

  // The fingerprint recognition compares (FNV-1a 64 of the normalised template).
  static std::uint64_t fingerprint(std::string_view jinja);

 private:
  Kind kind_ = Kind::kNone;
  int row_ = -1;  // index into the family table (fingerprinted templates)
  ChatSpecialTokens special_;
  std::optional<std::string> default_system_;
  std::string default_system_after_date_;  // Mistral Small 3.2: the text after the date
};

}  // namespace kvq::tok
