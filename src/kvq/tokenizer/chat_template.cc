#include "kvq/tokenizer/chat_template.h"

#include "kvq/core/error.h"

namespace kvq::tok {
namespace {

// Drops whitespace inside {{ }} / {% %} tags outside string literals and reads "\n", "\\" and
// "\'" escapes inside literals, so formatting variants of one template compare equal.
std::string normalize(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  bool in_tag = false;
  char quote = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (!in_tag) {
      if (c == '{' && i + 1 < t.size() && (t[i + 1] == '{' || t[i + 1] == '%')) in_tag = true;
      out += c;
      continue;
    }
    if (quote != 0) {
      if (c == '\\' && i + 1 < t.size()) {
        char e = t[++i];
        out += e == 'n' ? '\n' : e;
      } else {
        if (c == quote) quote = 0;
        out += c;
      }
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      continue;
    } else if ((c == '}' || c == '%') && i + 1 < t.size() && t[i + 1] == '}') {
      in_tag = false;
      out += c;
      out += t[++i];
      continue;
    }
    out += c;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

constexpr std::string_view kChatMLBody =
    "{{'<|im_start|>'+message['role']+'\n'+message['content']+'<|im_end|>'+'\n'}}{%endfor%}"
    "{%ifadd_generation_prompt%}{{'<|im_start|>assistant\n'}}{%endif%}";
constexpr std::string_view kForMessages = "{%formessageinmessages%}";
constexpr std::string_view kDefaultSystemPrefix =
    "{%ifloop.firstandmessages[0]['role']!='system'%}{{'<|im_start|>system\n";
constexpr std::string_view kDefaultSystemSuffix = "<|im_end|>\n'}}{%endif%}";

}  // namespace

ChatTemplate::ChatTemplate(std::string_view jinja) {
  if (jinja.empty()) return;
  kind_ = Kind::kUnknown;
  std::string t = normalize(jinja);
  std::string_view v = t;
  if (!v.starts_with(kForMessages) || !v.ends_with(kChatMLBody)) return;
  v.remove_prefix(kForMessages.size());
  v.remove_suffix(kChatMLBody.size());
  if (v.empty()) {
    kind_ = Kind::kChatML;
    return;
  }
  if (v.starts_with(kDefaultSystemPrefix) && v.ends_with(kDefaultSystemSuffix)) {
    v.remove_prefix(kDefaultSystemPrefix.size());
    v.remove_suffix(kDefaultSystemSuffix.size());
    if (v.find('\'') == std::string_view::npos) {
      kind_ = Kind::kChatML;
      default_system_ = std::string(v);
    }
  }
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  if (kind_ != Kind::kChatML) {
    fail<NotSupported>(
        "chat template: {}; kvq renders these natively: ChatML, and ChatML with a default system "
        "prompt when the first message is not a system one (SmolLM2)",
        kind_ == Kind::kNone ? "the tokenizer has no chat template" : "template not recognised");
  }
  std::string out;
  if (default_system_ && !messages.empty() && messages[0].role != "system") {
    out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace kvq::tok
