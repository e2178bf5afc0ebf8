// `kvq serve`'s HTTP side: an OpenAI-compatible API on cpp-httplib over one Scheduler.
//
//   POST /v1/completions        prompt (text, token ids, or a list of them), echo, logprobs
//   POST /v1/chat/completions   messages, rendered with the model's chat template
//   GET  /v1/models             the one model served
//   GET  /health                200 {"status": "ok"} (503 while draining)
//   GET  /metrics               Prometheus text: requests, tokens, sequences, KV blocks
//   POST /tokenize, /detokenize, GET /tokenizer_info   vLLM's tokenizer endpoints (lm-eval's
//                               local-completions then scores kvq's own tokens)
// `stream: true` answers with server-sent events ("data: {chunk}\n\n" ... "data: [DONE]\n\n").
// Errors are OpenAI error objects with a 4xx (5xx for the server's own failures).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "kvq/runtime/model_source.h"
#include "kvq/serve/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvq::serve {

struct ServerOptions {
  std::string model_name;  // what /v1/models lists and a request's "model" must name
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (tests)
  std::size_t max_body_bytes = std::size_t{8} << 20;
  std::int64_t context = 0;  // tokens per sequence (prompt + new); 0: max_position_embeddings
  int http_threads = 0;      // 0: max_seqs + max_queue + 4, so every admitted request has one
  SchedulerOptions scheduler;
};

class Server {
 public:
  // `source` (model, tokenizer) must outlive the server. InvalidArgument for bad options.
  Server(runtime::ModelSource& source, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (port 0: a free one) and returns the port. IoError when it cannot.
  int bind();
  // Serves until shutdown() (blocks; call bind() first). Returns at once after a shutdown().
  void listen();
  // Refuses new requests (503), lets every accepted one finish, then stops listen(): whether
  // listen() is running, not yet entered on its thread, or never called.
  void shutdown();

  const Scheduler& scheduler() const { return *scheduler_; }

 private:
  struct Metrics;
  void routes();
  void completions(const httplib::Request& req, httplib::Response& res, bool chat);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  std::string metrics_text() const;

  runtime::ModelSource& source_;
  ServerOptions options_;
  std::int64_t context_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<httplib::Server> http_;
  // listen() and shutdown() on different threads: see shutdown().
  std::mutex listen_mutex_;
  bool stopping_ = false;
  bool listening_ = false;
  std::atomic<bool> listen_returned_{false};
};

}  // namespace kvq::serve
