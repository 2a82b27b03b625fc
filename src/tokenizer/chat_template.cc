// Built-in chat formats, written after the families' published templates.
#include "tokenizer/chat_template.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tokenizer/strings.h"
#include "tokenizer/unicode.h"

namespace kvtier::tokenizer {
namespace {

std::string_view Trim(std::string_view s) { return TrimEndJs(TrimStartJs(s)); }

absl::Status CheckRole(const ChatMessage& m) {
  if (m.role == "system" || m.role == "user" || m.role == "assistant") return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("chat: unknown role '", m.role, "'"));
}

std::string FormatLlama3(absl::Span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = options.bos_token;
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", Av(Trim(m.content)),
                    "<|eot_id|>");
  }
  if (options.add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

std::string FormatChatMl(absl::Span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out;
  for (const ChatMessage& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  if (options.add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// Llama-2 and Mistral: user/assistant turns alternate, starting with the user; a system
// message may only come first and is folded into the first user turn.
absl::StatusOr<std::string> FormatInst(bool llama2, absl::Span<const ChatMessage> messages,
                                       const ChatOptions& options) {
  std::string system;
  size_t first = 0;
  if (!messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  std::string out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    bool expect_user = (i - first) % 2 == 0;
    if (m.role != (expect_user ? "user" : "assistant")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chat: ", Av(ChatFormatName(llama2 ? ChatFormat::kLlama2 : ChatFormat::kMistral)),
          " needs alternating user/assistant messages (after an optional first system message); "
          "message ", i, " is '", m.role, "'"));
    }
    if (expect_user) {
      std::string content(llama2 ? Trim(m.content) : std::string_view(m.content));
      if (i == first && !system.empty()) {
        content = llama2 ? absl::StrCat("<<SYS>>\n", system, "\n<</SYS>>\n\n", content)
                         : absl::StrCat(system, "\n\n", content);
      }
      absl::StrAppend(&out, options.bos_token, "[INST] ", content, " [/INST]");
    } else if (llama2) {
      absl::StrAppend(&out, " ", Av(Trim(m.content)), " ", options.eos_token);
    } else {
      absl::StrAppend(&out, m.content, options.eos_token);
    }
  }
  return out;
}

}  // namespace

std::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kNone: return "none";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kMistral: return "mistral";
  }
  return "none";
}

ChatFormat DetectChatFormat(std::string_view jinja_template,
                            const std::function<bool(std::string_view)>& has_token) {
  if (absl::StrContains(Av(jinja_template), "<|start_header_id|>")) return ChatFormat::kLlama3;
  if (absl::StrContains(Av(jinja_template), "<|im_start|>")) return ChatFormat::kChatMl;
  if (absl::StrContains(Av(jinja_template), "<<SYS>>")) return ChatFormat::kLlama2;
  if (absl::StrContains(Av(jinja_template), "[INST]")) return ChatFormat::kMistral;
  if (!jinja_template.empty()) return ChatFormat::kNone;
  if (has_token("<|start_header_id|>")) return ChatFormat::kLlama3;
  if (has_token("<|im_start|>")) return ChatFormat::kChatMl;
  if (has_token("[INST]")) return ChatFormat::kMistral;
  // No template and no family's markers (a base model): ChatML as plain text, as llama.cpp
  // formats chats for a model without a template, so that chat requests work everywhere.
  return ChatFormat::kChatMl;
}

absl::StatusOr<std::string> FormatChat(ChatFormat format, absl::Span<const ChatMessage> messages,
                                       const ChatOptions& options) {
  for (const ChatMessage& m : messages) {
    absl::Status s = CheckRole(m);
    if (!s.ok()) return s;
  }
  switch (format) {
    case ChatFormat::kLlama3: return FormatLlama3(messages, options);
    case ChatFormat::kChatMl: return FormatChatMl(messages, options);
    case ChatFormat::kLlama2: return FormatInst(/*llama2=*/true, messages, options);
    case ChatFormat::kMistral: return FormatInst(/*llama2=*/false, messages, options);
    case ChatFormat::kNone: break;
  }
  return absl::UnimplementedError("chat: this tokenizer has no built-in chat format");
}

}  // namespace kvtier::tokenizer
