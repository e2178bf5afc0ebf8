// The tiny GQA Llama (tests/data/tiny_llama/gqa, or another tiny row) as a model directory a server
// or CLI can open: its config and weights plus a made-up tokenizer of its 256-token vocabulary.
// Byte-level BPE without merges whose ids 0..253 are the bytes 0x00..0xFD (0xFE and 0xFF never
// occur in UTF-8 text) and 254 / 255 are <|im_start|> / <|im_end|>, with SmolLM2's ChatML template;
// so every text encodes inside the model's vocabulary and chat works. Needs kvq_tokenizer and
// nlohmann_json (header only: kvq_test_support links no kvq library).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvq/tokenizer/byte_level.h"
#include "support/test_paths.h"
#include "support/tiny_models.h"

namespace kvq::test {

// Writes the tiny model with that tokenizer into `dir` (config.json, model.safetensors,
// tokenizer.json, tokenizer_config.json). `variant`: another tiny architecture row of the same
// 256-token vocabulary (support/tiny_models.h), e.g. "mistral" for sliding windows.
inline void write_tiny_chat_model(const std::filesystem::path& dir,
                                  const std::string& variant = "gqa") {
  using nlohmann::json;
  auto write_text = [](const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  };
  const std::filesystem::path tiny = tiny_variant_dir(variant);
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

}  // namespace kvq::test
