#include "kvq/serve/server.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include <httplib.h>

#include "kvq/core/error.h"
#include "kvq/core/log.h"
#include "kvq/eval/utf8_stream.h"
#include "kvq/serve/client_socket.h"
#include "kvq/serve/openai_protocol.h"
#include "kvq/serve/token_text.h"

namespace kvq::serve {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr const char* kJson = "application/json";
// How often a waiting stream sends an SSE comment: a client that went away is noticed (the write
// fails) and its sequence cancelled even before it produces a token.
constexpr auto kKeepAlive = 1000ms;
// New tokens of a completion when the request names no max_tokens (OpenAI's default).
constexpr std::int64_t kDefaultCompletionTokens = 16;

void send_error(httplib::Response& res, const RequestError& e) {
  res.status = e.status();
  res.set_content(dump(error_json(e)), kJson);
}

// A sequence that failed inside the scheduler (an allocation, a kernel's InvalidArgument).
RequestError sequence_error(const SequenceOutput& out) {
  return RequestError(500, "generation failed: " + out.error, "", "server_error");
}

std::string request_id(bool chat) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}{:08x}", chat ? "chatcmpl" : "cmpl", rng(), counter.fetch_add(1));
}

// A request turned into sequences, with what its response echoes.
struct Prepared {
  std::vector<std::shared_ptr<Sequence>> sequences;
  std::vector<ChoiceResult> choices;  // echo text / ids per sequence
  std::int64_t prompt_tokens = 0;
};

}  // namespace

// Counters /metrics reports beside the scheduler's.
struct Server::Metrics {
  mutable std::mutex mutex;
  std::map<std::pair<std::string, int>, std::int64_t> requests;  // (path, status) -> count
  void count(const std::string& path, int status) {
    std::lock_guard lock(mutex);
    ++requests[{path, status}];
  }
};

Server::Server(runtime::ModelSource& source, ServerOptions options)
    : source_(source),
      options_(std::move(options)),
      context_(options_.context > 0 ? options_.context
                                    : source.model->config().max_position_embeddings),
      metrics_(std::make_unique<Metrics>()),
      http_(std::make_unique<httplib::Server>()) {
  if (options_.model_name.empty()) fail<InvalidArgument>("serve: the model needs a name");
  scheduler_ = std::make_unique<Scheduler>(*source.model, *source.tokenizer, options_.scheduler);
  const int threads =
      options_.http_threads > 0
          ? options_.http_threads
          : static_cast<int>(options_.scheduler.max_seqs + options_.scheduler.max_queue + 4);
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<std::size_t>(threads));
  };
  http_->set_payload_max_length(options_.max_body_bytes);
  // SO_REUSEADDR, not cpp-httplib 0.11's default SO_REUSEPORT: with SO_REUSEPORT a second server
  // on a busy port binds too and the kernel splits the requests between the two, and a restart
  // right after llama-server (SO_REUSEADDR) held the port fails while its TIME_WAIT sockets last.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  routes();
}

Server::~Server() { http_->stop(); }

int Server::bind() {
  int port = options_.port;
  if (port == 0) {
    port = http_->bind_to_any_port(options_.host);
  } else if (!http_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  if (port < 0) {
    fail<IoError>("serve: cannot listen on {}:{} (in use, or not an address of this machine)",
                  options_.host, options_.port);
  }
  return port;
}

void Server::listen() {
  {
    const std::lock_guard lock(listen_mutex_);
    if (stopping_) return;
    listening_ = true;
  }
  http_->listen_after_bind();
  listen_returned_ = true;
}

void Server::shutdown() {
  scheduler_->drain();
  {
    const std::lock_guard lock(listen_mutex_);
    stopping_ = true;
    if (!listening_) return;  // listen() has not started and now returns at once
  }
  // cpp-httplib 0.11's stop() does nothing until listen_after_bind() has marked the server
  // running, and a listen that gets there after it then serves forever: wait for that mark.
  while (!http_->is_running() && !listen_returned_) std::this_thread::sleep_for(1ms);
  http_->stop();
}

void Server::routes() {
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, /*chat=*/false);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completions(req, res, /*chat=*/true);
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options_.model_name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "kvq"},
                        {"max_model_len", context_}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), kJson);
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool draining = scheduler_->stats().draining;
    res.status = draining ? 503 : 200;
    res.set_content(dump({{"status", draining ? "draining" : "ok"}}), kJson);
  });
  http_->Post("/tokenize",
              [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    try {
      const std::vector<std::int32_t> ids = parse_detokenize_request(req.body);
      for (std::int32_t id : ids) {
        if (id >= source_.model->config().vocab_size) {
          throw RequestError(400, fmt::format("token id {} is outside the vocabulary", id),
                             "tokens");
        }
      }
      res.set_content(dump({{"prompt", token_text(*source_.tokenizer, ids)}}), kJson);
    } catch (const RequestError& e) {
      send_error(res, e);
    }
  });
  http_->Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    const tok::Tokenizer& t = *source_.tokenizer;
    auto token_or_null = [&](std::optional<std::int32_t> id) {
      return id ? json(token_piece(t, *id)) : json(nullptr);
    };
    res.set_content(dump({{"eos_token", token_or_null(t.eos_id())},
                          {"bos_token", token_or_null(t.bos_id())},
                          {"pad_token", nullptr},
                          {"chat_template", t.chat_template()},
                          {"model_max_length", context_},
                          {"tokenizer_class", "kvq"}}),
                    kJson);
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  // httplib's own errors (unknown path 404, body over the limit 413, bad HTTP 400) as OpenAI
  // error objects; responses that already have a body keep it.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
    if (res.status == 404) message = fmt::format("no route {} {}", req.method, req.path);
    if (res.status == 413) message = "the request body is over the server's size limit";
    send_error(res, RequestError(res.status, message));
  });
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        send_error(res, RequestError(500, "internal server error", "", "server_error"));
      });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    // Paths of no route are counted together: a client's made-up paths must not grow /metrics.
    static const std::set<std::string, std::less<>> kRoutes = {
        "/v1/completions", "/v1/chat/completions", "/v1/models",     "/health", "/metrics",
        "/tokenize",       "/detokenize",          "/tokenizer_info"};
    metrics_->count(kRoutes.contains(req.path) ? req.path : "other", res.status);
  });
}

void Server::completions(const httplib::Request& req, httplib::Response& res, bool chat) {
  const tok::Tokenizer& tokenizer = *source_.tokenizer;
  const std::int64_t vocab = source_.model->config().vocab_size;
  CompletionRequest r;
  Prepared prepared;
  try {
    r = parse_completion_request(req.body, chat);
    if (!r.model.empty() && r.model != options_.model_name) {
      throw RequestError(404,
                         fmt::format("The model `{}` does not exist; this server serves `{}`",
                                     r.model, options_.model_name),
                         "model");
    }
    std::vector<Prompt> prompts = r.prompts;
    if (chat) {
      try {
        prompts = {tokenizer.apply_chat_template(r.messages, /*add_generation_prompt=*/true)};
      } catch (const Error& e) {
        throw RequestError(400, e.what(), "messages");
      }
    }
    const std::string field = chat ? "messages" : "prompt";
    std::uint64_t seed = r.sampling.seed;
    if (!r.seeded) seed = std::random_device{}() * 0x100000001ull + std::random_device{}();
    for (const Prompt& p : prompts) {
      SequenceRequest s;
      ChoiceResult echo;
      if (const auto* text = std::get_if<std::string>(&p)) {
        try {
          // The chat template holds every special token; a plain prompt gets none (as kvq
          // generate).
          s.prompt = tokenizer.encode(*text, /*add_special_tokens=*/false);
        } catch (const Error& e) {
          throw RequestError(400, e.what(), field);
        }
        if (r.echo) echo.echo_text = *text;
      } else {
        s.prompt = std::get<std::vector<std::int32_t>>(p);
        for (std::int32_t id : s.prompt) {
          if (id >= vocab) {
            throw RequestError(
                400, fmt::format("token id {} is outside the vocabulary (size {})", id, vocab),
                field);
          }
        }
        if (r.echo) echo.echo_text = token_text(tokenizer, s.prompt);
      }
      const auto n = static_cast<std::int64_t>(s.prompt.size());
      if (n == 0) throw RequestError(400, field + " tokenizes to no tokens", field);
      if (n >= context_) {
        throw RequestError(400,
                           fmt::format("the prompt has {} tokens but the context is {} (at least "
                                       "one token must fit after it)",
                                       n, context_),
                           field);
      }
      if (r.max_tokens && n + *r.max_tokens > context_) {
        throw RequestError(400,
                           fmt::format("this model's context is {} tokens, but {} were asked ({} "
                                       "in the prompt, {} in the completion)",
                                       context_, n + *r.max_tokens, n, *r.max_tokens),
                           "max_tokens");
      }
      // Chat without max_tokens: up to the context, as OpenAI; a completion: 16.
      s.max_tokens = r.max_tokens.value_or(chat ? context_ - n
                                                : std::min(kDefaultCompletionTokens, context_ - n));
      s.sampling = r.sampling;
      s.sampling.seed = seed;
      if (!r.ignore_eos) s.stop_ids = chat ? source_.chat_stop_ids() : source_.eos_ids();
      s.stop_strings = r.stop;
      s.top_logprobs = r.logprobs;
      s.prompt_logprobs = r.echo && r.logprobs >= 0;
      if (r.echo) echo.echo_ids = s.prompt;
      prepared.prompt_tokens += n;
      prepared.sequences.push_back(std::make_shared<Sequence>(std::move(s)));
      prepared.choices.push_back(std::move(echo));
    }
    scheduler_->submit(prepared.sequences);
  } catch (const RequestError& e) {
    send_error(res, e);
    return;
  }

  ResponseInfo info;
  info.id = request_id(chat);
  info.model = options_.model_name;
  info.created = static_cast<std::int64_t>(std::time(nullptr));
  info.chat = chat;
  info.logprobs = r.logprobs >= 0;
  info.prompt_tokens = prepared.prompt_tokens;

  if (!r.stream) {
    // Nothing is written until the answer is whole: a client that hangs up meanwhile is noticed
    // on its socket, and its sequences are cancelled (their blocks freed).
    const int client = find_client_socket(req.remote_addr, req.remote_port);
    for (std::size_t i = 0; i < prepared.sequences.size(); ++i) {
      std::uint64_t version = 0;
      SequenceOutput& out = prepared.choices[i].output;
      do {
        version = prepared.sequences[i]->wait(version, kKeepAlive, out);
        if (out.finish == FinishReason::kNone && peer_closed(client)) {
          for (const auto& s : prepared.sequences) s->cancel();
          res.status = 499;  // nginx's "client closed request", for /metrics: nobody reads it
          return;
        }
      } while (out.finish == FinishReason::kNone);
      if (out.finish == FinishReason::kError) {
        send_error(res, sequence_error(out));
        return;
      }
    }
    res.set_content(dump(response_json(info, prepared.choices, tokenizer)), kJson);
    return;
  }

  // Streaming: one sequence. Text is sent once it cannot be the start of a stop string (the
  // longest stop's length - 1 bytes are held back) nor end inside a UTF-8 character.
  struct Stream {
    std::shared_ptr<Sequence> sequence;
    ChoiceResult echo;
    std::uint64_t version = 0;
    std::size_t text_sent = 0, tokens_sent = 0, text_offset = 0;
    std::size_t hold_back = 0;
    eval::Utf8Stream utf8;
    bool first = true, done = false;
  };
  auto stream = std::make_shared<Stream>();
  stream->sequence = prepared.sequences.front();
  stream->echo = std::move(prepared.choices.front());
  for (const std::string& s : r.stop) stream->hold_back = std::max(stream->hold_back, s.size() - 1);
  const bool include_usage = r.include_usage;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream, info, include_usage](std::size_t, httplib::DataSink& sink) {
        const tok::Tokenizer& detokenizer = *source_.tokenizer;
        auto send = [&](const json& j) {
          const std::string event = "data: " + dump(j) + "\n\n";
          return sink.write(event.data(), event.size());
        };
        auto give_up = [&] {
          stream->sequence->cancel();
          return false;
        };
        SequenceOutput out;
        const std::uint64_t version = stream->sequence->wait(stream->version, kKeepAlive, out);
        const bool changed = version != stream->version;
        stream->version = version;
        const bool finished = out.finish != FinishReason::kNone;
        if (out.finish == FinishReason::kError) {
          const std::string event = "data: " + dump(error_json(sequence_error(out))) + "\n\n";
          sink.write(event.data(), event.size());
          sink.done();
          return true;
        }
        std::string text;
        std::vector<TokenLogprob> tokens;
        if (stream->first && (!stream->echo.echo_ids.empty() || info.chat)) {
          if (!info.chat && !out.prefilled) {  // the echo waits for the prompt's logprobs
            if (changed) return true;
            constexpr std::string_view kComment = ": keep-alive\n\n";
            return sink.write(kComment.data(), kComment.size()) ? true : give_up();
          }
          text = stream->echo.echo_text;
          if (info.logprobs && !info.chat) {
            tokens = out.prompt_logprobs;
            if (tokens.empty()) {
              for (std::int32_t id : stream->echo.echo_ids) {
                tokens.push_back({id, std::numeric_limits<double>::quiet_NaN(), {}});
              }
            }
          }
        }
        std::size_t ready = out.text.size();
        if (!finished) ready -= std::min(ready, stream->hold_back);
        if (ready > stream->text_sent) {
          text += stream->utf8.push(
              std::string_view(out.text).substr(stream->text_sent, ready - stream->text_sent));
          stream->text_sent = ready;
        }
        if (finished) text += stream->utf8.flush();
        if (info.logprobs) {
          tokens.insert(tokens.end(),
                        out.tokens.begin() + static_cast<std::ptrdiff_t>(stream->tokens_sent),
                        out.tokens.end());
          stream->tokens_sent = out.tokens.size();
        }
        if (!text.empty() || !tokens.empty() || finished || (stream->first && info.chat)) {
          if (!send(chunk_json(info, 0, text, tokens, stream->text_offset, out.finish,
                               stream->first, detokenizer))) {
            return give_up();
          }
          for (const TokenLogprob& t : tokens)
            stream->text_offset += token_piece(detokenizer, t.id).size();
          stream->first = false;
        } else if (!changed) {
          constexpr std::string_view kComment = ": keep-alive\n\n";
          if (!sink.write(kComment.data(), kComment.size())) return give_up();
        }
        if (finished) {
          if (include_usage && !send(usage_chunk_json(info, out.completion_tokens)))
            return give_up();
          constexpr std::string_view kDone = "data: [DONE]\n\n";
          sink.write(kDone.data(), kDone.size());
          sink.done();
        }
        return true;
      },
      [stream](bool success) {
        if (!success) stream->sequence->cancel();
      });
}

void Server::tokenize(const httplib::Request& req, httplib::Response& res) {
  const tok::Tokenizer& tokenizer = *source_.tokenizer;
  try {
    const TokenizeRequest r = parse_tokenize_request(req.body);
    std::vector<std::int32_t> ids;
    try {
      ids = r.prompt ? tokenizer.encode(*r.prompt, r.add_special_tokens)
                     : tokenizer.encode(
                           tokenizer.apply_chat_template(r.messages, r.add_generation_prompt),
                           /*add_special_tokens=*/false);
    } catch (const Error& e) {
      throw RequestError(400, e.what(), r.prompt ? "prompt" : "messages");
    }
    res.set_content(dump({{"tokens", ids}, {"count", ids.size()}, {"max_model_len", context_}}),
                    kJson);
  } catch (const RequestError& e) {
    send_error(res, e);
  }
}

std::string Server::metrics_text() const {
  const SchedulerStats s = scheduler_->stats();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, std::int64_t value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, value);
  };
  out +=
      "# HELP kvq_http_requests_total HTTP requests answered, by path and status.\n"
      "# TYPE kvq_http_requests_total counter\n";
  {
    std::lock_guard lock(metrics_->mutex);
    for (const auto& [key, count] : metrics_->requests) {
      out += fmt::format("kvq_http_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", key.first,
                         key.second, count);
    }
  }
  metric("kvq_sequences_finished_total", "counter", "Sequences finished (any reason).",
         s.sequences_finished);
  metric("kvq_sequences_rejected_total", "counter", "Sequences refused with 429 (queue full).",
         s.sequences_rejected);
  metric("kvq_prompt_tokens_total", "counter", "Prompt tokens of admitted sequences.",
         s.prompt_tokens);
  metric("kvq_generation_tokens_total", "counter", "Tokens generated.", s.generation_tokens);
  metric("kvq_decode_steps_total", "counter", "Batched decode steps run.", s.decode_steps);
  metric("kvq_running_sequences", "gauge", "Sequences in the running batch.", s.running);
  metric("kvq_waiting_sequences", "gauge",
         "Sequences waiting for a seat or KV blocks (preempted ones included).", s.waiting);
  metric("kvq_kv_blocks_used", "gauge",
         "KV cache blocks held by running sequences (a block: kvq_kv_block_tokens positions of "
         "one layer's K and V).",
         s.blocks_used);
  metric("kvq_kv_blocks_free", "gauge", "KV cache blocks free.", s.blocks_total - s.blocks_used);
  metric("kvq_kv_block_tokens", "gauge", "Positions per KV cache block.", s.block_tokens);
  metric("kvq_kv_block_bytes", "gauge", "Bytes per KV cache block.", s.block_bytes);
  metric("kvq_preemptions_total", "counter",
         "Sequences preempted when the KV pool ran out (recomputed later).", s.preemptions);
  metric("kvq_kv_bytes_per_token", "gauge", "KV cache bytes per token of one sequence.",
         s.kv_bytes_per_token);
  return out;
}

}  // namespace kvq::serve
