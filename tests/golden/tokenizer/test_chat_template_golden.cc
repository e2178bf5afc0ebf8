// Chat templates rendered natively equal what transformers' Jinja rendering produced:
//  - SmolLM2's (as stored in the GGUF; tests/data/tokenizer/smollm2_goldens.json, written by
//    tools/reference/make_tokenizer_goldens.py);
//  - the model families of tests/data/tokenizer/chat_templates/ (Llama 3.x, Gemma 2/3, Mistral,
//    Phi-3.5, Qwen2.5/3) on every case of chat_template_goldens.json (written by
//    tools/reference/make_chat_template_goldens.py), byte for byte; a case the template rejects
//    is rejected by kvq too.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include "kvq/core/error.h"
#include "kvq/tokenizer/chat_template.h"
#include "support/test_paths.h"

namespace kvq::tok {
namespace {

TEST(ChatTemplateGolden, SmolLM2MatchesTransformers) {
  std::ifstream in(test::test_data_dir() / "tokenizer" / "smollm2_goldens.json");
  ASSERT_TRUE(in) << "missing smollm2_goldens.json";
  const nlohmann::json header = nlohmann::json::parse(in);
  ChatTemplate tmpl(header.at("chat_template").get<std::string>());
  ASSERT_EQ(tmpl.kind(), ChatTemplate::Kind::kChatML);
  EXPECT_EQ(tmpl.default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  int checked = 0;
  for (const auto& chat : header.at("chats")) {
    std::vector<ChatMessage> messages;
    for (const auto& m : chat.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    EXPECT_EQ(tmpl.render(messages, chat.at("add_generation_prompt").get<bool>()),
              chat.at("rendered").get<std::string>())
        << chat.at("name");
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

std::string read_template(const std::string& file) {
  std::ifstream in(test::test_data_dir() / "tokenizer" / "chat_templates" / file, std::ios::binary);
  EXPECT_TRUE(in) << file;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ChatTemplateGolden, FamiliesMatchTransformers) {
  std::ifstream in(test::test_data_dir() / "tokenizer" / "chat_template_goldens.json");
  ASSERT_TRUE(in) << "missing chat_template_goldens.json";
  const nlohmann::json golden = nlohmann::json::parse(in);
  const std::string now = golden.at("now").get<std::string>();  // YYYY-MM-DD
  ChatRenderOptions base;
  base.today = ChatRenderOptions::Date{std::stoi(now.substr(0, 4)), std::stoi(now.substr(5, 2)),
                                       std::stoi(now.substr(8, 2))};
  std::map<std::string, ChatTemplate> templates;
  for (const auto& [file, special] : golden.at("special_tokens").items()) {
    auto token = [&](const char* key) {
      return special.at(key).is_null() ? std::string() : special.at(key).get<std::string>();
    };
    templates.emplace(file,
                      ChatTemplate(read_template(file), {token("bos_token"), token("eos_token")}));
    const ChatTemplate& t = templates.at(file);
    EXPECT_NE(t.kind(), ChatTemplate::Kind::kUnknown) << file;
    EXPECT_NE(t.kind(), ChatTemplate::Kind::kChatML) << file;
  }
  int rendered = 0, rejected = 0;
  for (const auto& c : golden.at("cases")) {
    const std::string what =
        c.at("template").get<std::string>() + " / " + c.at("name").get<std::string>();
    const ChatTemplate& t = templates.at(c.at("template").get<std::string>());
    std::vector<ChatMessage> messages;
    for (const auto& m : c.at("messages")) {
      messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    }
    ChatRenderOptions options = base;
    if (c.contains("date_string")) options.date_string = c.at("date_string").get<std::string>();
    const bool gen = c.at("add_generation_prompt").get<bool>();
    if (c.contains("error")) {
      EXPECT_THROW(t.render(messages, gen, options), InvalidArgument) << what;
      ++rejected;
    } else {
      EXPECT_EQ(t.render(messages, gen, options), c.at("rendered").get<std::string>()) << what;
      ++rendered;
    }
  }
  EXPECT_EQ(rendered, 141);
  EXPECT_EQ(rejected, 19);
}

TEST(ChatTemplateGolden, RecognisesEachTemplateAsItsFamily) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "Llama 3.1/3.3"},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", "Llama 3.1/3.3"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "Llama 3.2"},
      {"google-gemma-2-2b-it.jinja", "Gemma 2"},
      {"google-gemma-3-4b-it.jinja", "Gemma 3"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral Nemo"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "Mistral Small 3.2"},
      {"microsoft-Phi-3.5-mini-instruct.jinja", "Phi-3.5"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen2.5"},
      {"Qwen-Qwen3-0.6B.jinja", "Qwen3"},
  };
  for (const auto& [file, family] : expected) {
    const std::string jinja = read_template(file);
    EXPECT_EQ(ChatTemplate(jinja).family(), family) << file;
    // Recognition is exact: one more character printed, or one letter changed, makes it
    // unknown.
    EXPECT_EQ(ChatTemplate("x" + jinja).kind(), ChatTemplate::Kind::kUnknown) << file;
    std::string changed = jinja;
    const size_t pos = changed.rfind("user");
    ASSERT_NE(pos, std::string::npos) << file;
    changed[pos] = 'U';
    EXPECT_EQ(ChatTemplate(changed).kind(), ChatTemplate::Kind::kUnknown) << file;
  }
}

}  // namespace
}  // namespace kvq::tok
