// VocabularyFromTokenizer: the grammar Vocabulary of a model's tokenizer — each id's bytes
// as the tokenizer decodes it after other text, special tokens and ids past the tokenizer
// (a model vocabulary may be padded) having none. Thread-safe.
#ifndef KVTIER_GRAMMAR_TOKENIZER_VOCABULARY_H_
#define KVTIER_GRAMMAR_TOKENIZER_VOCABULARY_H_

#include <cstdint>
#include <memory>

#include "grammar/vocabulary.h"
#include "tokenizer/tokenizer.h"

namespace kvtier::grammar {

// num_ids: the model's vocabulary size (mask width).
std::shared_ptr<const Vocabulary> VocabularyFromTokenizer(const tokenizer::Tokenizer& tokenizer, int32_t num_ids);

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_TOKENIZER_VOCABULARY_H_
