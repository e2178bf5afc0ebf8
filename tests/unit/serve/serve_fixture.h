// A kvq server in-process on the tiny GQA Llama (tests/data/tiny_llama/gqa) with a made-up
// tokenizer of its 256-token vocabulary, listening on a free loopback port, and the httplib
// client that talks to it.
//
// The tokenizer: byte-level BPE without merges whose ids 0..253 are the bytes 0x00..0xFD (0xFE
// and 0xFF never occur in UTF-8 text) and 254 / 255 are <|im_start|> / <|im_end|>, with SmolLM2's
// ChatML template; so every text encodes inside the model's vocabulary and chat works.
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
#include "kvq/tokenizer/byte_level.h"
#include "support/test_paths.h"

namespace kvq::serve::test {

using nlohmann::json;

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The tiny model's directory with the tokenizer above (tokenizer.json, tokenizer_config.json).
inline void write_tiny_model_dir(const std::filesystem::path& dir) {
  const std::filesystem::path tiny = kvq::test::test_data_dir() / "tiny_llama" / "gqa";
  std::filesystem::copy_file(tiny / "config.json", dir / "config.json");
  std::filesystem::copy_file(tiny / "model.safetensors", dir / "model.safetensors");
  json vocab = json::object();
  for (int b = 0; b < 0xFE; ++b) {
    vocab[tok::byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
  }
  json added = json::array();
  for (const auto& [content, id] : {std::pair{"<|im_start|>", 254}, {"<|im_end|>", 255}}) {
    added.push_back({{"id", id},
                     {"content", content},
                     {"special", true},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"single_word", false},
                     {"normalized", false}});
    vocab[content] = id;
  }
  const json tokenizer = {{"version", "1.0"},
                          {"added_tokens", added},
                          {"normalizer", nullptr},
                          {"pre_tokenizer",
                           {{"type", "ByteLevel"},
                            {"add_prefix_space", false},
                            {"trim_offsets", true},
                            {"use_regex", true}}},
                          {"post_processor", nullptr},
                          {"decoder", {{"type", "ByteLevel"}}},
                          {"model",
                           {{"type", "BPE"},
                            {"vocab", vocab},
                            {"merges", json::array()},
                            {"byte_fallback", false},
                            {"unk_token", nullptr},
                            {"fuse_unk", false},
                            {"ignore_merges", false}}}};
  write_text(dir / "tokenizer.json", tokenizer.dump());
  const std::string chatml =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  write_text(
      dir / "tokenizer_config.json",
      json{{"eos_token", "<|im_end|>"}, {"bos_token", nullptr}, {"chat_template", chatml}}.dump());
}

class TinyServer {
 public:
  explicit TinyServer(ServerOptions options = {}) {
    write_tiny_model_dir(dir_.path());
    source_ = runtime::open_model_source(dir_.path());
    options.model_name = "tiny";
    options.port = 0;
    if (options.scheduler.kv_cache_bytes == SchedulerOptions{}.kv_cache_bytes) {
      options.scheduler.kv_cache_bytes = 4 << 20;
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
