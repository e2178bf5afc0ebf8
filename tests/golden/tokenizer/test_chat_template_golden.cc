// SmolLM2's chat template (as stored in the GGUF) rendered natively equals what transformers'
// Jinja rendering produced (tests/data/tokenizer/smollm2_goldens.json, written by
// tools/reference/make_tokenizer_goldens.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>

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

}  // namespace
}  // namespace kvq::tok
