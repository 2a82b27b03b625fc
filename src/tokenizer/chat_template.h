// Chat formatting: built-in prompt formats for the supported families (Llama-3,
// Qwen/ChatML, Mistral, Llama-2), chosen from the checkpoint's chat template or vocabulary
// (ChatML for a model that has neither).
// This is not a Jinja engine: the checkpoint's template only selects a built-in format.
// Stateless functions; thread-safe.
#ifndef KVTIER_TOKENIZER_CHAT_TEMPLATE_H_
#define KVTIER_TOKENIZER_CHAT_TEMPLATE_H_

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace kvtier::tokenizer {

enum class ChatFormat {
  kNone,     // no built-in format fits
  kLlama3,   // <|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>
  kChatMl,   // <|im_start|>role\ncontent<|im_end|>\n (Qwen)
  kLlama2,   // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] assistant </s>
  kMistral,  // <s>[INST] user [/INST]assistant</s>
};

std::string_view ChatFormatName(ChatFormat format);

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the header that starts the assistant's turn
  std::string bos_token;              // text of the BOS token, if the format uses it
  std::string eos_token;              // text of the EOS token, if the format uses it
};

// Picks the format from the Jinja source of tokenizer_config.json's chat_template (may be
// empty), else from which marker tokens the vocabulary has, else (no template, no markers:
// a base model) ChatML, whose markers are then plain text. kNone for a template that is
// none of the built-in formats.
ChatFormat DetectChatFormat(std::string_view jinja_template,
                            const std::function<bool(std::string_view)>& has_token);

// The prompt text. Its special-token strings are meant to be parsed when it is encoded,
// and BOS is part of the text: encode it with add_special_tokens = false.
// InvalidArgument for unknown roles or an order the format cannot express; Unimplemented
// for kNone.
absl::StatusOr<std::string> FormatChat(ChatFormat format, absl::Span<const ChatMessage> messages,
                                       const ChatOptions& options);

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_CHAT_TEMPLATE_H_
