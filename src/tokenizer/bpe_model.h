// BpeModel: the "model" part of tokenizer.json (type BPE): vocabulary, ranked merges, byte
// fallback and unk, for byte-level (GPT-2/Llama-3/Qwen) and sentencepiece-style (Llama-2,
// Mistral) vocabularies; or a scored sentencepiece vocabulary (GGUF's "llama" tokenizer),
// whose merges follow from the scores. Words are merged lowest rank first, leftmost first
// among equal ranks; results are cached per word. Immutable after load except the cache, which a mutex guards; thread-safe.
#ifndef KVTIER_TOKENIZER_BPE_MODEL_H_
#define KVTIER_TOKENIZER_BPE_MODEL_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/strings.h"

namespace kvtier::tokenizer {

class BpeModel {
 public:
  // Unimplemented for model types other than BPE; InvalidArgument naming the field for a
  // malformed vocab or merges.
  static absl::StatusOr<std::unique_ptr<BpeModel>> FromJson(const Json& model);
  // tokens[i] is id i (a later duplicate wins the text, as in llama.cpp). Every two pieces
  // that concatenate to a token merge into it (a piece is a token or one character), a
  // higher-scored token first, equal scores leftmost first: llama.cpp's sentencepiece
  // tokenizer. Pieces no token covers fall back to <0xNN> byte tokens, else to unk_id.
  // Tokens longer than kMaxScoredTokenBytes (sentencepiece's pieces are at most 16
  // characters) are not made by merges, which bounds loading time on any file.
  static std::unique_ptr<BpeModel> FromScores(const std::vector<std::string>& tokens,
                                              const std::vector<float>& scores, std::optional<int32_t> unk_id);

  // Makes content an id of its own (added tokens override the vocabulary, as they do in
  // the reference). Only during loading.
  void AddToken(const std::string& content, int32_t id);

  // Appends the ids of one pre-tokenized word. InvalidArgument when a piece is not in the
  // vocabulary and there is neither byte fallback nor an unk token.
  absl::Status EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;
  // Collapses runs of unk ids in ids[from..] to one (fuse_unk), when configured.
  void FuseUnk(std::vector<int32_t>* ids, size_t from) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Null for ids that name no token.
  const std::string* IdToToken(int32_t id) const;
  // One more than the largest id.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  static constexpr size_t kMaxScoredTokenBytes = 128;
  BpeModel() = default;

  // A symbol is any string a merge can produce or consume; not every symbol is a token.
  int32_t InternSymbol(const std::string& text);
  absl::Status MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  absl::Status EmitPiece(std::string_view piece, int32_t symbol, std::vector<int32_t>* ids) const;

  struct MergeInfo {
    int32_t rank;
    int32_t result;  // symbol
  };
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  StringMap<int32_t> symbol_of_;
  std::vector<int32_t> token_of_symbol_;  // token id, or -1 when the symbol is no token
  absl::flat_hash_map<uint64_t, MergeInfo> merges_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_valid_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string end_of_word_suffix_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> tokens, -1 where missing

  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 17;
  mutable absl::Mutex cache_mu_;
  mutable StringMap<std::vector<int32_t>> cache_ ABSL_GUARDED_BY(cache_mu_);
};

}  // namespace kvtier::tokenizer

#endif  // KVTIER_TOKENIZER_BPE_MODEL_H_
