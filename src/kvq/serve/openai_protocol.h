// The OpenAI API's JSON, both ways: /v1/completions and /v1/chat/completions request bodies
// parsed and validated into CompletionRequest (every error a RequestError naming the field, as
// OpenAI's error object does), and the response, chunk and error objects built from a
// sequence's output. No HTTP and no model here (server.h does both).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvq/model/sampler.h"
#include "kvq/serve/request_error.h"
#include "kvq/serve/sequence.h"
#include "kvq/tokenizer/chat_template.h"
#include "kvq/tokenizer/tokenizer.h"

namespace kvq::serve {

// Most alternatives a request may ask logprobs for (vLLM's default limit).
inline constexpr int kMaxTopLogprobs = 20;
// Most stop strings per request.
inline constexpr std::size_t kMaxStopStrings = 16;
// Most prompts in one /v1/completions request (each runs as its own sequence).
inline constexpr std::size_t kMaxPromptsPerRequest = 64;

using Prompt = std::variant<std::string, std::vector<std::int32_t>>;  // text or token ids

struct CompletionRequest {
  bool chat = false;
  std::string model;                       // "" when absent
  std::vector<Prompt> prompts;             // completions: one or more
  std::vector<tok::ChatMessage> messages;  // chat
  std::optional<std::int64_t> max_tokens;  // nullopt: the endpoint's default
  model::SamplerConfig sampling;           // temperature 1 unless given (OpenAI's default)
  bool seeded = false;                     // seed given (else the server picks one)
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, echo = false, ignore_eos = false;
  int logprobs = -1;  // alternatives per token (completions: logprobs; chat: top_logprobs); -1 off
};

// RequestError 400 naming the field for malformed JSON, a field of the wrong type or out of
// range, an unknown field (OpenAI rejects those: "Unrecognized request argument supplied"), or a
// feature kvq does not serve (n > 1, best_of, penalties, logit_bias, suffix).
CompletionRequest parse_completion_request(std::string_view body, bool chat);

// vLLM's tokenizer endpoints, which lm-eval's local-completions uses when the server has them
// (so it scores kvq's own tokens): POST /tokenize {"prompt": text | "messages": [...],
// "add_special_tokens", "add_generation_prompt"}, POST /detokenize {"tokens": [ids]}.
struct TokenizeRequest {
  std::optional<std::string> prompt;       // or
  std::vector<tok::ChatMessage> messages;  // rendered with the chat template
  bool add_special_tokens = true, add_generation_prompt = true;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
std::vector<std::int32_t> parse_detokenize_request(std::string_view body);

// {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_json(const RequestError& error);

// One choice of a finished response.
struct ChoiceResult {
  SequenceOutput output;
  std::string echo_text;               // completions with echo: the prompt's text
  std::vector<std::int32_t> echo_ids;  // ... and its tokens (logprobs when asked)
};

struct ResponseInfo {
  std::string id, model;
  std::int64_t created = 0;  // unix seconds
  bool chat = false;
  bool logprobs = false;
  std::int64_t prompt_tokens = 0;  // all choices'
};

// The whole (non-streamed) response: "text_completion" or "chat.completion" with usage.
nlohmann::json response_json(const ResponseInfo& info, const std::vector<ChoiceResult>& choices,
                             const tok::Tokenizer& tokenizer);

// A streamed chunk of choice `index`: new text, the logprobs of its new tokens (`tokens`, may be
// empty) and, in the last one, the finish reason. Chat chunks carry {"role": "assistant"} when
// `first`.
nlohmann::json chunk_json(const ResponseInfo& info, std::size_t index, std::string_view text,
                          std::span<const TokenLogprob> tokens, std::size_t text_offset,
                          FinishReason finish, bool first, const tok::Tokenizer& tokenizer);
// The usage-only chunk stream_options.include_usage asks for (empty choices).
nlohmann::json usage_chunk_json(const ResponseInfo& info, std::int64_t completion_tokens);

// The text a JSON string can hold: nlohmann refuses invalid UTF-8 when dumping, and a token may be
// part of a character, so bytes that are not UTF-8 become U+FFFD.
std::string dump(const nlohmann::json& j);

}  // namespace kvq::serve
