// A kvq server in-process on the tiny GQA Llama with a tokenizer (support/tiny_chat_model.h),
// listening on a free loopback port, and the httplib client that talks to it.
#pragma once

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "kvq/io/json_file.h"
#include "kvq/runtime/model_source.h"
#include "kvq/serve/openai_protocol.h"
#include "kvq/serve/server.h"
#include "support/test_paths.h"
#include "support/tiny_chat_model.h"

namespace kvq::serve::test {

using nlohmann::json;

class TinyServer {
 public:
  explicit TinyServer(ServerOptions options = {}, const std::string& variant = "gqa") {
    kvq::test::write_tiny_chat_model(dir_.path(), variant);
    source_ = runtime::open_model_source(dir_.path());
    options.model_name = "tiny";
    options.port = 0;
    if (options.scheduler.kv_cache_bytes == SchedulerOptions{}.kv_cache_bytes) {
      options.scheduler.kv_cache_bytes = 4 << 20;
    }
    // The tiny model's sequences are tens of tokens: 16-position blocks make them span several.
    if (options.scheduler.block_tokens == SchedulerOptions{}.block_tokens) {
      options.scheduler.block_tokens = 16;
    }
    server_ = std::make_unique<Server>(source_, options);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
  }
  ~TinyServer() {
    server_->shutdown();
    thread_.join();
  }

  runtime::ModelSource& source() { return source_; }
  Server& server() { return *server_; }
  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(std::chrono::seconds(60));
    return c;
  }

  // POST path with a JSON body: {status, parsed body}.
  std::pair<int, json> post(const std::string& path, const json& body) const {
    return post_text(path, body.dump());
  }
  std::pair<int, json> post_text(const std::string& path, const std::string& body) const {
    httplib::Client c = client();
    const httplib::Result r = c.Post(path.c_str(), body, "application/json");
    if (!r) return {-1, json()};
    return {r->status, io::parse_json(r->body, path)};
  }
  // The value of a Prometheus metric without labels in /metrics (-1 when absent).
  double metric(const std::string& name) const {
    httplib::Client c = client();
    const httplib::Result r = c.Get("/metrics");
    if (!r) return -1;
    const std::string key = "\n" + name + " ";
    const std::size_t at = r->body.find(key);
    if (at == std::string::npos) return -1;
    return std::stod(r->body.substr(at + key.size()));
  }

 private:
  kvq::test::TempDir dir_;
  runtime::ModelSource source_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::thread thread_;
};

// The `data:` payloads of a server-sent event stream, in order ("[DONE]" included).
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const std::size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

}  // namespace kvq::serve::test
