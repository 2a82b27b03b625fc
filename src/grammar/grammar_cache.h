// GrammarCache: compiled grammars by (vocabulary fingerprint, canonical grammar text), so a
// schema or grammar used by many requests is compiled once per tokenizer. Concurrent
// requests for the same key wait for one compile; errors are cached like results (they are
// properties of the text). Least recently used entries beyond the capacity are dropped
// (sequences keep theirs alive through shared ownership). Thread-safe.
#ifndef KVTIER_GRAMMAR_GRAMMAR_CACHE_H_
#define KVTIER_GRAMMAR_GRAMMAR_CACHE_H_

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "grammar/compiled_grammar.h"

namespace kvtier::grammar {

class GrammarCache {
 public:
  struct Counters {
    int64_t hits = 0;
    int64_t compiles = 0;
    double compile_seconds = 0;
    int64_t entries = 0;
  };

  explicit GrammarCache(size_t capacity = 64, CompileLimits limits = {}) : capacity_(capacity), limits_(limits) {}

  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Get(const Grammar& grammar,
                                                             const std::shared_ptr<const Vocabulary>& vocabulary);
  Counters counters() const;

 private:
  using Result = absl::StatusOr<std::shared_ptr<const CompiledGrammar>>;
  struct Entry {
    std::shared_future<Result> result;
    uint64_t last_use = 0;
  };

  const size_t capacity_;
  const CompileLimits limits_;
  // std::mutex: see common/thread_pool.h (TSan and the system abseil).
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  uint64_t clock_ ABSL_GUARDED_BY(mu_) = 0;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvtier::grammar

#endif  // KVTIER_GRAMMAR_GRAMMAR_CACHE_H_
