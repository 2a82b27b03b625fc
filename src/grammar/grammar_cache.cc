// GrammarCache (grammar_cache.h).
#include "grammar/grammar_cache.h"

#include "absl/strings/str_cat.h"

namespace kvtier::grammar {

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCache::Get(
    const Grammar& grammar, const std::shared_ptr<const Vocabulary>& vocabulary) {
  std::string key = absl::StrCat(vocabulary->fingerprint(), "\n", grammar.ToGbnf());
  std::promise<Result> promise;
  std::shared_future<Result> future;
  bool compile = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      ++counters_.hits;
      it->second.last_use = ++clock_;
      future = it->second.result;
    } else {
      compile = true;
      future = promise.get_future().share();
      if (entries_.size() >= capacity_) {
        auto oldest = entries_.begin();
        for (auto i = entries_.begin(); i != entries_.end(); ++i) {
          if (i->second.last_use < oldest->second.last_use) oldest = i;
        }
        entries_.erase(oldest);
      }
      entries_.emplace(key, Entry{future, ++clock_});
    }
  }
  if (compile) {
    Result result = CompiledGrammar::Compile(grammar, vocabulary, limits_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++counters_.compiles;
      if (result.ok()) counters_.compile_seconds += (*result)->compile_seconds();
    }
    promise.set_value(std::move(result));
  }
  return future.get();
}

GrammarCache::Counters GrammarCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  Counters c = counters_;
  c.entries = static_cast<int64_t>(entries_.size());
  return c;
}

}  // namespace kvtier::grammar
