// Built-in chat formats: exact prompt strings per family, format detection, and errors.
#include "tokenizer/chat_template.h"

#include "gtest/gtest.h"

namespace kvtier::tokenizer {
namespace {

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Bye?"}};

TEST(ChatTemplateTest, Llama3) {
  auto s = FormatChat(ChatFormat::kLlama3, kChat, ChatOptions{true, "<|begin_of_text|>", ""});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplateTest, ChatMl) {
  auto s = FormatChat(ChatFormat::kChatMl, kChat, ChatOptions{false, "", ""});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye?<|im_end|>\n");
}

TEST(ChatTemplateTest, Llama2AndMistral) {
  ChatOptions options{true, "<s>", "</s>"};
  EXPECT_EQ(*FormatChat(ChatFormat::kLlama2, kChat, options),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] Bye? [/INST]");
  EXPECT_EQ(*FormatChat(ChatFormat::kMistral, kChat, options),
            "<s>[INST] Be brief.\n\nHi! [/INST]Hello.</s><s>[INST] Bye? [/INST]");
}

TEST(ChatTemplateTest, Errors) {
  std::vector<ChatMessage> bad_role = {{"robot", "x"}};
  EXPECT_EQ(FormatChat(ChatFormat::kChatMl, bad_role, {}).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
  EXPECT_EQ(FormatChat(ChatFormat::kLlama2, two_users, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FormatChat(ChatFormat::kNone, kChat, {}).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ChatTemplateTest, Detection) {
  auto none = [](std::string_view) { return false; };
  EXPECT_EQ(DetectChatFormat("{{ '<|start_header_id|>' }}", none), ChatFormat::kLlama3);
  EXPECT_EQ(DetectChatFormat("{{ '<|im_start|>' + role }}", none), ChatFormat::kChatMl);
  EXPECT_EQ(DetectChatFormat("[INST] <<SYS>>", none), ChatFormat::kLlama2);
  EXPECT_EQ(DetectChatFormat("{{ '[INST] ' + m }}", none), ChatFormat::kMistral);
  EXPECT_EQ(DetectChatFormat("", [](std::string_view t) { return t == "<|im_start|>"; }), ChatFormat::kChatMl);
  // A base model (no template, no markers) gets ChatML; an unknown template gets none.
  EXPECT_EQ(DetectChatFormat("", none), ChatFormat::kChatMl);
  EXPECT_EQ(DetectChatFormat("{{ messages[0].content }}", none), ChatFormat::kNone);
}

}  // namespace
}  // namespace kvtier::tokenizer
