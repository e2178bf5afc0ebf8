#include "kvq/tokenizer/chat_template.h"

#include <ctime>

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

using Messages = std::span<const ChatMessage>;

// What a renderer reads besides the messages.
struct Context {
  std::string_view family;
  const ChatSpecialTokens& special;
  const ChatRenderOptions& options;
  const std::optional<std::string>& default_system;
  const std::string& default_system_after_date;
};

[[noreturn]] void reject(const Context& c, std::string_view what) {
  fail<InvalidArgument>("chat template ({}): {}", c.family, what);
}

// Tools are out of scope: only plain system / user / assistant turns are rendered.
void check_roles(const Context& c, Messages messages) {
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      fail<NotSupported>(
          "chat template ({}): role '{}' is not rendered by kvq (system, user and assistant "
          "turns only; tools, tool calls and tool results are not supported)",
          c.family, m.role);
    }
  }
}

// The template reads messages[0], which Jinja rejects for an empty conversation.
void need_first(const Context& c, Messages messages) {
  if (messages.empty()) reject(c, "the template reads messages[0]: the conversation is empty");
}

// Python's str.isspace for one code point (Jinja's |trim is str.strip()).
bool py_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Decodes the UTF-8 code point at s[i] (s is valid UTF-8 or its bytes are taken as they are);
// sets len to its byte length.
char32_t decode_at(std::string_view s, size_t i, size_t& len) {
  const auto b = static_cast<unsigned char>(s[i]);
  len = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
  if (i + len > s.size()) len = 1;
  if (len == 1) return b;
  char32_t cp = b & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
  return cp;
}

std::string trim(std::string_view s) {
  size_t b = 0, len = 0;
  while (b < s.size() && py_space(decode_at(s, b, len))) b += len;
  size_t e = s.size();
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    if (!py_space(decode_at(s, start, len)) || start + len != e) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

std::string_view lstrip_newlines(std::string_view s) {
  while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  return s;
}
std::string_view rstrip_newlines(std::string_view s) {
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

// strftime_now(format) for "%d %b %Y" and "%Y-%m-%d", in the C locale as Python prints them.
std::string strftime_now(const ChatRenderOptions& options, bool day_month_year) {
  ChatRenderOptions::Date d;
  if (options.today) {
    d = *options.today;
  } else {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    d = {tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday};
  }
  if (d.month < 1 || d.month > 12 || d.day < 1 || d.day > 31) {
    fail<InvalidArgument>("chat template: invalid date {}-{}-{}", d.year, d.month, d.day);
  }
  static constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (day_month_year) return fmt::format("{:02} {} {:04}", d.day, kMonths[d.month - 1], d.year);
  return fmt::format("{:04}-{:02}-{:02}", d.year, d.month, d.day);
}

// ---- The families ----------------------------------------------------------------------------

// Llama 3.1 / 3.2 / 3.3: a system header with the knowledge and today dates, the first message's
// text (trimmed) when it is a system one; every other turn trimmed.
std::string render_llama3(const Context& c, Messages messages, bool gen, bool date_from_clock) {
  need_first(c, messages);
  std::string system;
  if (messages[0].role == "system") {
    system = trim(messages[0].content);
    messages = messages.subspan(1);
  }
  const std::string date = c.options.date_string ? *c.options.date_string
                           : date_from_clock     ? strftime_now(c.options, true)
                                                 : std::string("26 Jul 2024");
  std::string out = c.special.bos_token;
  out += "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n";
  out += "Today Date: " + date + "\n\n" + system + "<|eot_id|>";
  for (const ChatMessage& m : messages) {
    out +=
        "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  }
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}
std::string render_llama31(const Context& c, Messages m, bool gen) {
  return render_llama3(c, m, gen, false);
}
std::string render_llama32(const Context& c, Messages m, bool gen) {
  return render_llama3(c, m, gen, true);
}

// Gemma 2 / 3: <start_of_turn>{user|model}, trimmed text; Gemma 3 folds a system message into
// the first turn ("{system}\n\n" before it), Gemma 2 rejects it.
std::string render_gemma(const Context& c, Messages messages, bool gen, bool fold_system) {
  need_first(c, messages);
  std::string prefix;
  if (messages[0].role == "system") {
    if (!fold_system) reject(c, "System role not supported");
    prefix = messages[0].content + "\n\n";
    messages = messages.subspan(1);
  }
  std::string out = c.special.bos_token;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if ((m.role == "user") != (i % 2 == 0)) {
      reject(c, "Conversation roles must alternate user/assistant/user/assistant/...");
    }
    out += "<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n";
    if (i == 0) out += prefix;
    out += trim(m.content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}
std::string render_gemma2(const Context& c, Messages m, bool gen) {
  return render_gemma(c, m, gen, false);
}
std::string render_gemma3(const Context& c, Messages m, bool gen) {
  return render_gemma(c, m, gen, true);
}

void check_alternation(const Context& c, Messages loop) {
  for (size_t i = 0; i < loop.size(); ++i) {
    if ((loop[i].role == "user") != (i % 2 == 0)) {
      reject(c,
             "After the optional system message, conversation roles must alternate "
             "user/assistant/user/assistant/...");
    }
  }
}

// Mistral Nemo: [INST]...[/INST] turns, the system message before the LAST user turn (dropped
// when the conversation ends with an assistant turn, as the template does); no generation
// prompt.
std::string render_mistral_nemo(const Context& c, Messages messages, bool /*gen*/) {
  need_first(c, messages);
  std::optional<std::string> system;
  if (messages[0].role == "system") {
    system = messages[0].content;
    messages = messages.subspan(1);
  }
  check_alternation(c, messages);
  std::string out = c.special.bos_token;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      if (i + 1 == messages.size() && system) {
        out += "[INST]" + *system + "\n\n" + m.content + "[/INST]";
      } else {
        out += "[INST]" + m.content + "[/INST]";
      }
    } else if (m.role == "assistant") {
      out += m.content + c.special.eos_token;
    } else {
      reject(c,
             "Only user and assistant roles are supported, with the exception of an initial "
             "optional system message!");
    }
  }
  return out;
}

// Mistral Small 3.2: [SYSTEM_PROMPT] with the given or the default system text (which holds
// today's date), then [INST] turns; no generation prompt.
std::string render_mistral_small(const Context& c, Messages messages, bool /*gen*/) {
  std::string system =
      *c.default_system + strftime_now(c.options, false) + c.default_system_after_date;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    messages = messages.subspan(1);
  }
  check_alternation(c, messages);
  std::string out = c.special.bos_token + "[SYSTEM_PROMPT]" + system + "[/SYSTEM_PROMPT]";
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      out += "[SYSTEM_PROMPT]" + m.content + "[/SYSTEM_PROMPT]";
    } else if (m.role == "user") {
      out += "[INST]" + m.content + "[/INST]";
    } else {
      out += m.content + c.special.eos_token;
    }
  }
  return out;
}

// Phi-3 / 3.5: <|role|>\n{content}<|end|>\n, an empty system message skipped; eos_token ends a
// conversation without a generation prompt.
std::string render_phi3(const Context& c, Messages messages, bool gen) {
  std::string out;
  for (const ChatMessage& m : messages) {
    if (m.role == "system" && m.content.empty()) continue;
    out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  }
  out += gen ? std::string("<|assistant|>\n") : c.special.eos_token;
  return out;
}

void chatml_turn(std::string& out, const ChatMessage& m) {
  out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
}

// Qwen2.5: ChatML with its default system prompt when the first message is not a system one.
std::string render_qwen25(const Context& c, Messages messages, bool gen) {
  need_first(c, messages);
  std::string out;
  if (messages[0].role != "system") {
    out +=
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) chatml_turn(out, m);
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

// Qwen3: ChatML; an assistant turn's <think>...</think> block is dropped before the last user
// query and kept (an empty one added to the final turn) after it.
std::string render_qwen3(const Context& c, Messages messages, bool gen) {
  need_first(c, messages);
  const size_t n = messages.size();
  size_t last_query = n - 1;
  for (size_t i = n; i-- > 0;) {
    const std::string_view t = messages[i].content;
    if (messages[i].role == "user" &&
        !(t.starts_with("<tool_response>") && t.ends_with("</tool_response>"))) {
      last_query = i;
      break;
    }
  }
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant") {
      chatml_turn(out, m);  // a system message first or later, a user message
      continue;
    }
    std::string_view content = m.content, reasoning;
    if (const size_t close = content.find("</think>"); close != std::string_view::npos) {
      reasoning = rstrip_newlines(content.substr(0, close));
      if (const size_t open = reasoning.rfind("<think>"); open != std::string_view::npos) {
        reasoning.remove_prefix(open + 7);
      }
      reasoning = lstrip_newlines(reasoning);
      content = lstrip_newlines(content.substr(content.rfind("</think>") + 8));
    }
    out += "<|im_start|>assistant\n";
    if (i > last_query && (i + 1 == n || !reasoning.empty())) {
      out += "<think>\n" + std::string(rstrip_newlines(lstrip_newlines(reasoning))) +
             "\n</think>\n\n" + std::string(lstrip_newlines(content));
    } else {
      out += content;
    }
    out += "<|im_end|>\n";
  }
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

using Renderer = std::string (*)(const Context&, Messages, bool);

// The templates kvq knows besides ChatML: how each is recognised (the fingerprint of its
// normalised text; tests/data/tokenizer/chat_templates/ holds the originals) and rendered.
struct Family {
  std::string_view name;
  ChatTemplate::Kind kind;
  std::uint64_t fingerprint;
  Renderer render;
};

constexpr Family kFamilies[] = {
    {"Llama 3.1/3.3", ChatTemplate::Kind::kLlama3, 0x764b2f29bb5f0ae6ULL, render_llama31},
    {"Llama 3.2", ChatTemplate::Kind::kLlama3, 0xb344bfdb639b2494ULL, render_llama32},
    {"Gemma 2", ChatTemplate::Kind::kGemma, 0xd9afbf5bd37c8a7fULL, render_gemma2},
    {"Gemma 3", ChatTemplate::Kind::kGemma, 0xeee0e70cff18f6efULL, render_gemma3},
    {"Mistral Nemo", ChatTemplate::Kind::kMistral, 0x8ae4cf1bc65e1d47ULL, render_mistral_nemo},
    {"Mistral Small 3.2", ChatTemplate::Kind::kMistral, 0x181dfe9a2dfb3229ULL,
     render_mistral_small},
    {"Phi-3.5", ChatTemplate::Kind::kPhi3, 0x3b6307939c2729e4ULL, render_phi3},
    {"Qwen2.5", ChatTemplate::Kind::kQwen2_5, 0x46c6a882c684aaf5ULL, render_qwen25},
    {"Qwen3", ChatTemplate::Kind::kQwen3, 0x8e5f740d7c8fb43eULL, render_qwen3},
};

constexpr std::string_view kChatMLName = "ChatML";

// Reads the double-quoted Jinja string literal starting at t[pos] (escapes \n, \", \\, \').
std::optional<std::string> read_literal(std::string_view t, size_t& pos) {
  if (pos >= t.size() || t[pos] != '"') return std::nullopt;
  std::string out;
  for (++pos; pos < t.size(); ++pos) {
    char ch = t[pos];
    if (ch == '"') {
      ++pos;
      return out;
    }
    if (ch == '\\' && pos + 1 < t.size()) {
      ch = t[++pos];
      if (ch == 'n') ch = '\n';
    }
    out += ch;
  }
  return std::nullopt;
}

// Mistral Small 3.2's default system message: "{before}" + today + "{after}".
bool read_mistral_small_default(std::string_view jinja, std::string& before, std::string& after) {
  constexpr std::string_view kSet = "set default_system_message = ";
  size_t pos = jinja.find(kSet);
  if (pos == std::string_view::npos) return false;
  pos += kSet.size();
  auto b = read_literal(jinja, pos);
  constexpr std::string_view kToday = " + today + ";
  if (!b || jinja.substr(pos, kToday.size()) != kToday) return false;
  pos += kToday.size();
  auto a = read_literal(jinja, pos);
  if (!a) return false;
  before = std::move(*b);
  after = std::move(*a);
  return true;
}

}  // namespace

std::uint64_t ChatTemplate::fingerprint(std::string_view jinja) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char ch : normalize(jinja)) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ULL;
  }
  return h;
}

ChatTemplate::ChatTemplate(std::string_view jinja, ChatSpecialTokens special)
    : special_(std::move(special)) {
  if (jinja.empty()) return;
  kind_ = Kind::kUnknown;
  std::string t = normalize(jinja);
  std::string_view v = t;
  if (v.starts_with(kForMessages) && v.ends_with(kChatMLBody)) {
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
    return;
  }
  const std::uint64_t fp = fingerprint(jinja);
  for (size_t i = 0; i < std::size(kFamilies); ++i) {
    if (kFamilies[i].fingerprint != fp) continue;
    if (kFamilies[i].render == render_mistral_small) {
      std::string before;
      if (!read_mistral_small_default(jinja, before, default_system_after_date_)) return;
      default_system_ = std::move(before);
    }
    kind_ = kFamilies[i].kind;
    row_ = static_cast<int>(i);
    return;
  }
}

std::string_view ChatTemplate::family() const {
  if (kind_ == Kind::kChatML) return kChatMLName;
  if (row_ >= 0) return kFamilies[row_].name;
  return {};
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const ChatRenderOptions& options) const {
  if (kind_ == Kind::kNone || kind_ == Kind::kUnknown) {
    std::string known(kChatMLName);
    known += " (with or without a default system prompt, e.g. SmolLM2)";
    for (const Family& f : kFamilies) known += fmt::format(", {}", f.name);
    fail<NotSupported>(
        "chat template: {}; kvq renders these natively: {}. Without a template, give "
        "pre-rendered text instead: a calibration dataset of plain text (.txt) or JSONL lines "
        "{{\"text\": ...}} holding the already-formatted conversations needs no chat template",
        kind_ == Kind::kNone ? "the tokenizer has no chat template"
                             : "the model's template is not one kvq recognises",
        known);
  }
  if (kind_ != Kind::kChatML) {
    const Family& f = kFamilies[row_];
    const Context c{f.name, special_, options, default_system_, default_system_after_date_};
    check_roles(c, messages);
    return f.render(c, messages, add_generation_prompt);
  }
  std::string out;
  if (default_system_ && !messages.empty() && messages[0].role != "system") {
    out += "<|im_start|>system\n" + *default_system_ + "<|im_end|>\n";
  }
  for (const ChatMessage& m : messages) chatml_turn(out, m);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

}  // namespace kvq::tok
