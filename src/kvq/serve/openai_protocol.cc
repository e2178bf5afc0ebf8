#include "kvq/serve/openai_protocol.h"

#include <cmath>
#include <limits>
#include <set>

#include "kvq/io/json_file.h"
#include "kvq/serve/token_text.h"

namespace kvq::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw RequestError(400, message, field);
}

// The fields each endpoint accepts; anything else is refused as OpenAI refuses it.
const std::set<std::string, std::less<>>& known_fields(bool chat) {
  static const std::set<std::string, std::less<>> completions = {"model",
                                                                 "prompt",
                                                                 "max_tokens",
                                                                 "temperature",
                                                                 "top_p",
                                                                 "top_k",
                                                                 "seed",
                                                                 "stop",
                                                                 "echo",
                                                                 "logprobs",
                                                                 "stream",
                                                                 "stream_options",
                                                                 "n",
                                                                 "best_of",
                                                                 "frequency_penalty",
                                                                 "presence_penalty",
                                                                 "logit_bias",
                                                                 "suffix",
                                                                 "user",
                                                                 "ignore_eos"};
  static const std::set<std::string, std::less<>> chat_fields = {"model",
                                                                 "messages",
                                                                 "max_tokens",
                                                                 "max_completion_tokens",
                                                                 "temperature",
                                                                 "top_p",
                                                                 "top_k",
                                                                 "seed",
                                                                 "stop",
                                                                 "logprobs",
                                                                 "top_logprobs",
                                                                 "stream",
                                                                 "stream_options",
                                                                 "n",
                                                                 "frequency_penalty",
                                                                 "presence_penalty",
                                                                 "logit_bias",
                                                                 "user",
                                                                 "ignore_eos"};
  return chat ? chat_fields : completions;
}

bool present(const json& body, std::string_view field) {
  const auto it = body.find(field);
  return it != body.end() && !it->is_null();
}

std::int64_t integer(const json& body, const std::string& field, std::int64_t min,
                     std::int64_t max) {
  const json& v = body.at(field);
  if (!v.is_number_integer())
    bad(field, fmt::format("{} must be an integer, got {}", field, v.type_name()));
  const std::int64_t x = v.is_number_unsigned() && v.get<std::uint64_t>() >
                                                       static_cast<std::uint64_t>(
                                                           std::numeric_limits<std::int64_t>::max())
                             ? std::numeric_limits<std::int64_t>::max()
                             : v.get<std::int64_t>();
  if (x < min || x > max)
    bad(field, fmt::format("{} must be in [{}, {}], got {}", field, min, max, x));
  return x;
}

double number(const json& body, const std::string& field, double min, double max) {
  const json& v = body.at(field);
  if (!v.is_number()) bad(field, fmt::format("{} must be a number, got {}", field, v.type_name()));
  const double x = v.get<double>();
  if (!(x >= min && x <= max))
    bad(field, fmt::format("{} must be in [{}, {}], got {}", field, min, max, x));
  return x;
}

bool boolean(const json& body, const std::string& field) {
  const json& v = body.at(field);
  if (!v.is_boolean())
    bad(field, fmt::format("{} must be true or false, got {}", field, v.type_name()));
  return v.get<bool>();
}

std::vector<std::int32_t> token_ids(const json& v, const std::string& field) {
  std::vector<std::int32_t> ids;
  for (const json& t : v) {
    if (!t.is_number_integer())
      bad(field, fmt::format("{} token ids must be integers, got {}", field, t.type_name()));
    const auto id = t.get<std::int64_t>();
    if (id < 0 || id > std::numeric_limits<std::int32_t>::max()) {
      bad(field, fmt::format("{} token id {} is out of range", field, id));
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  if (ids.empty()) bad(field, field + " holds no tokens");
  return ids;
}

// A string, token ids, or a list of either.
std::vector<Prompt> prompts(const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array() || v.empty())
    bad("prompt", "prompt must be a string, a list of token ids or a non-empty list of those");
  if (v.front().is_number()) return {token_ids(v, "prompt")};
  if (v.size() > kMaxPromptsPerRequest) {
    bad("prompt",
        fmt::format("at most {} prompts per request, got {}", kMaxPromptsPerRequest, v.size()));
  }
  std::vector<Prompt> out;
  for (const json& p : v) {
    if (p.is_string())
      out.emplace_back(p.get<std::string>());
    else if (p.is_array())
      out.emplace_back(token_ids(p, "prompt"));
    else
      bad("prompt", fmt::format("each prompt must be a string or a list of token ids, got {}",
                                p.type_name()));
  }
  return out;
}

std::vector<tok::ChatMessage> messages(const json& v) {
  if (!v.is_array() || v.empty()) bad("messages", "messages must be a non-empty list");
  std::vector<tok::ChatMessage> out;
  for (const json& m : v) {
    if (!m.is_object()) bad("messages", "each message must be an object with role and content");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad("messages", "each message needs a string role");
    const auto content = m.find("content");
    if (content == m.end()) bad("messages", "each message needs content");
    std::string text;
    if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {  // content parts: text only
      for (const json& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          bad("messages", "message content parts must be {\"type\": \"text\", \"text\": ...}");
        }
        text += part["text"].get<std::string>();
      }
    } else {
      bad("messages",
          fmt::format("message content must be a string or a list of text parts, got {}",
                      content->type_name()));
    }
    out.push_back({role->get<std::string>(), std::move(text)});
  }
  return out;
}

std::vector<std::string> stops(const json& v) {
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array())
    bad("stop", fmt::format("stop must be a string or a list of strings, got {}", v.type_name()));
  if (v.size() > kMaxStopStrings)
    bad("stop", fmt::format("at most {} stop strings, got {}", kMaxStopStrings, v.size()));
  std::vector<std::string> out;
  for (const json& s : v) {
    if (!s.is_string()) bad("stop", "stop strings must be strings");
    if (s.get<std::string>().empty()) bad("stop", "stop strings must not be empty");
    out.push_back(s.get<std::string>());
  }
  return out;
}

// What kvq does not serve: OpenAI's defaults only.
void refuse_unsupported(const json& body) {
  if (present(body, "n") && integer(body, "n", 1, 1) != 1) bad("n", "n must be 1");
  if (present(body, "best_of")) integer(body, "best_of", 1, 1);
  for (const char* penalty : {"frequency_penalty", "presence_penalty"}) {
    if (present(body, penalty) && number(body, penalty, -2, 2) != 0.0) {
      bad(penalty, fmt::format("{} is not supported (only 0)", penalty));
    }
  }
  if (present(body, "logit_bias") &&
      !(body["logit_bias"].is_object() && body["logit_bias"].empty())) {
    bad("logit_bias", "logit_bias is not supported");
  }
  if (present(body, "suffix")) bad("suffix", "suffix is not supported");
  if (present(body, "user") && !body["user"].is_string()) bad("user", "user must be a string");
}

json logprob_entry_bytes(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(c);
  return bytes;
}

// Completions' logprobs object over `tokens` (prompt tokens first when echoed: the first has no
// logprob).
json completion_logprobs(std::span<const TokenLogprob> tokens, std::size_t text_offset,
                         const tok::Tokenizer& tokenizer) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const TokenLogprob& t : tokens) {
    const std::string& piece = token_piece(tokenizer, t.id);
    out["tokens"].push_back(piece);
    if (std::isnan(t.logprob)) {
      out["token_logprobs"].push_back(nullptr);
      out["top_logprobs"].push_back(nullptr);
    } else {
      out["token_logprobs"].push_back(t.logprob);
      json top = json::object();
      for (const auto& [id, lp] : t.top) top[token_piece(tokenizer, id)] = lp;
      out["top_logprobs"].push_back(std::move(top));
    }
    out["text_offset"].push_back(text_offset);
    text_offset += piece.size();
  }
  return out;
}

json chat_logprobs(std::span<const TokenLogprob> tokens, const tok::Tokenizer& tokenizer) {
  json content = json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string& piece = token_piece(tokenizer, t.id);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string& alt = token_piece(tokenizer, id);
      top.push_back({{"token", alt}, {"logprob", lp}, {"bytes", logprob_entry_bytes(alt)}});
    }
    content.push_back({{"token", piece},
                       {"logprob", t.logprob},
                       {"bytes", logprob_entry_bytes(piece)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

json finish_json(FinishReason finish) {
  if (finish == FinishReason::kNone) return nullptr;
  return std::string(finish_reason_name(finish));
}

// The body as a JSON object whose fields are all in `known` (OpenAI refuses unknown ones).
json object_body(std::string_view body_text, const std::set<std::string, std::less<>>& known) {
  json body;
  try {
    body = io::parse_json(body_text, "request body");
  } catch (const Error& e) {
    bad("", e.what());
  }
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (!known.contains(key)) {
      bad(key, fmt::format("Unrecognized request argument supplied: {}", key));
    }
  }
  return body;
}

}  // namespace

TokenizeRequest parse_tokenize_request(std::string_view body_text) {
  static const std::set<std::string, std::less<>> known = {
      "model", "prompt", "messages", "add_special_tokens", "add_generation_prompt"};
  const json body = object_body(body_text, known);
  TokenizeRequest r;
  if (present(body, "prompt") == present(body, "messages")) {
    bad("prompt", "give either prompt (a string) or messages");
  }
  if (present(body, "prompt")) {
    if (!body["prompt"].is_string()) bad("prompt", "prompt must be a string");
    r.prompt = body["prompt"].get<std::string>();
  } else {
    r.messages = messages(body["messages"]);
  }
  if (present(body, "add_special_tokens"))
    r.add_special_tokens = boolean(body, "add_special_tokens");
  if (present(body, "add_generation_prompt")) {
    r.add_generation_prompt = boolean(body, "add_generation_prompt");
  }
  return r;
}

std::vector<std::int32_t> parse_detokenize_request(std::string_view body_text) {
  static const std::set<std::string, std::less<>> known = {"model", "tokens"};
  const json body = object_body(body_text, known);
  if (!present(body, "tokens") || !body["tokens"].is_array()) {
    bad("tokens", "tokens must be a list of token ids");
  }
  if (body["tokens"].empty()) return {};
  return token_ids(body["tokens"], "tokens");
}

CompletionRequest parse_completion_request(std::string_view body_text, bool chat) {
  const json body = object_body(body_text, known_fields(chat));
  refuse_unsupported(body);
  CompletionRequest r;
  r.chat = chat;
  if (present(body, "model")) {
    if (!body["model"].is_string()) bad("model", "model must be a string");
    r.model = body["model"].get<std::string>();
  }
  if (chat) {
    if (!present(body, "messages")) bad("messages", "messages is required");
    r.messages = messages(body["messages"]);
  } else {
    if (!present(body, "prompt")) bad("prompt", "prompt is required");
    r.prompts = prompts(body["prompt"]);
  }
  constexpr std::int64_t kMaxTokens = std::int64_t{1} << 30;
  const bool echo = !chat && present(body, "echo") && boolean(body, "echo");
  for (const char* field : {"max_tokens", "max_completion_tokens"}) {
    if (!present(body, field)) continue;
    // 0 new tokens is how lm-eval's loglikelihood asks for the prompt's logprobs (echo).
    r.max_tokens = integer(body, field, echo ? 0 : 1, kMaxTokens);
  }
  r.echo = echo;
  r.sampling.temperature = present(body, "temperature") ? number(body, "temperature", 0, 1e6) : 1.0;
  if (present(body, "top_p")) {
    r.sampling.top_p = number(body, "top_p", 0, 1);
    if (r.sampling.top_p <= 0) bad("top_p", "top_p must be in (0, 1]");
  }
  // vLLM's top_k: -1 or 0 means off.
  if (present(body, "top_k"))
    r.sampling.top_k = std::max<std::int64_t>(0, integer(body, "top_k", -1, kMaxTokens));
  if (present(body, "seed")) {
    r.seeded = true;
    r.sampling.seed =
        static_cast<std::uint64_t>(integer(body, "seed", std::numeric_limits<std::int64_t>::min(),
                                           std::numeric_limits<std::int64_t>::max()));
  }
  if (present(body, "stop")) r.stop = stops(body["stop"]);
  if (present(body, "stream")) r.stream = boolean(body, "stream");
  if (present(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) bad("stream_options", "stream_options must be an object");
    for (const auto& [key, value] : so.items()) {
      if (key != "include_usage")
        bad("stream_options", fmt::format("unknown stream option {}", key));
    }
    if (present(so, "include_usage")) r.include_usage = boolean(so, "include_usage");
  }
  if (present(body, "ignore_eos")) r.ignore_eos = boolean(body, "ignore_eos");
  if (chat) {
    const bool wants = present(body, "logprobs") && boolean(body, "logprobs");
    if (present(body, "top_logprobs")) {
      const auto n = static_cast<int>(integer(body, "top_logprobs", 0, kMaxTopLogprobs));
      if (!wants) bad("top_logprobs", "top_logprobs needs logprobs: true");
      r.logprobs = n;
    } else if (wants) {
      r.logprobs = 0;
    }
  } else if (present(body, "logprobs")) {
    r.logprobs = static_cast<int>(integer(body, "logprobs", 0, kMaxTopLogprobs));
  }
  if (r.stream && r.prompts.size() > 1) bad("prompt", "stream: true takes one prompt per request");
  return r;
}

json error_json(const RequestError& error) {
  json e = {{"message", error.what()}, {"type", error.type()}, {"code", nullptr}};
  e["param"] = error.param().empty() ? json(nullptr) : json(error.param());
  if (error.status() == 404) e["code"] = "model_not_found";
  return {{"error", std::move(e)}};
}

json response_json(const ResponseInfo& info, const std::vector<ChoiceResult>& choices,
                   const tok::Tokenizer& tokenizer) {
  json out = {{"id", info.id},
              {"object", info.chat ? "chat.completion" : "text_completion"},
              {"created", info.created},
              {"model", info.model},
              {"choices", json::array()}};
  std::int64_t completion_tokens = 0;
  for (std::size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    completion_tokens += c.output.completion_tokens;
    json choice = {{"index", i}, {"finish_reason", finish_json(c.output.finish)}};
    if (info.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.output.text}};
      choice["logprobs"] =
          info.logprobs ? chat_logprobs(c.output.tokens, tokenizer) : json(nullptr);
    } else {
      choice["text"] = c.echo_text + c.output.text;
      if (info.logprobs) {
        std::vector<TokenLogprob> all = c.output.prompt_logprobs;
        if (all.empty()) {  // echoed without logprobs of the prompt: none asked
          for (std::int32_t id : c.echo_ids)
            all.push_back({id, std::numeric_limits<double>::quiet_NaN(), {}});
        }
        all.insert(all.end(), c.output.tokens.begin(), c.output.tokens.end());
        choice["logprobs"] = completion_logprobs(all, 0, tokenizer);
      } else {
        choice["logprobs"] = nullptr;
      }
    }
    out["choices"].push_back(std::move(choice));
  }
  out["usage"] = {{"prompt_tokens", info.prompt_tokens},
                  {"completion_tokens", completion_tokens},
                  {"total_tokens", info.prompt_tokens + completion_tokens}};
  return out;
}

json chunk_json(const ResponseInfo& info, std::size_t index, std::string_view text,
                std::span<const TokenLogprob> tokens, std::size_t text_offset, FinishReason finish,
                bool first, const tok::Tokenizer& tokenizer) {
  json choice = {{"index", index}, {"finish_reason", finish_json(finish)}};
  if (info.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty()) delta["content"] = std::string(text);
    choice["delta"] = std::move(delta);
    choice["logprobs"] = info.logprobs ? chat_logprobs(tokens, tokenizer) : json(nullptr);
  } else {
    choice["text"] = std::string(text);
    choice["logprobs"] =
        info.logprobs ? completion_logprobs(tokens, text_offset, tokenizer) : json(nullptr);
  }
  return {{"id", info.id},
          {"object", info.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array({std::move(choice)})}};
}

json usage_chunk_json(const ResponseInfo& info, std::int64_t completion_tokens) {
  return {{"id", info.id},
          {"object", info.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array()},
          {"usage",
           {{"prompt_tokens", info.prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", info.prompt_tokens + completion_tokens}}}};
}

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace kvq::serve
