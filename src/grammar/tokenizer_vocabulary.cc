// VocabularyFromTokenizer (tokenizer_vocabulary.h).
#include "grammar/tokenizer_vocabulary.h"

namespace kvtier::grammar {

std::shared_ptr<const Vocabulary> VocabularyFromTokenizer(const tokenizer::Tokenizer& tokenizer, int32_t num_ids) {
  std::vector<std::optional<std::string>> bytes(static_cast<size_t>(num_ids));
  const int32_t known = std::min(num_ids, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id) bytes[static_cast<size_t>(id)] = tokenizer.TokenBytes(id);
  return Vocabulary::Create(std::move(bytes));
}

}  // namespace kvtier::grammar
