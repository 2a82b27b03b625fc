// Implementation of TierCache (tier_cache.h), and TierName (tier.h).
#include "kv/tier_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier {

const char* TierName(Tier tier) {
  switch (tier) {
    case Tier::kDevice: return "gpu";
    case Tier::kHost: return "host";
    case Tier::kDisk: return "disk";
    case Tier::kRemote: return "remote";
  }
  return "?";
}

TierCache::TierCache(Tier tier, int64_t num_blocks, int64_t num_available, int64_t block_tokens, bool keeps_tokens)
    : tier_(tier),
      block_tokens_(block_tokens),
      keeps_tokens_(keeps_tokens),
      pool_(num_blocks, num_available),
      tokens_(keeps_tokens ? static_cast<size_t>(num_blocks * block_tokens) : 0) {}

void TierCache::Insert(int32_t slot, const BlockHash& hash, std::span<const int32_t> tokens) {
  by_hash_[hash] = slot;
  hash_of_[slot] = hash;
  if (!tokens.empty()) SetTokens(slot, tokens);
}

std::optional<BlockHash> TierCache::Erase(int32_t slot) {
  auto it = hash_of_.find(slot);
  if (it == hash_of_.end()) return std::nullopt;
  const BlockHash hash = it->second;
  auto by = by_hash_.find(hash);
  if (by != by_hash_.end() && by->second == slot) by_hash_.erase(by);
  hash_of_.erase(it);
  return hash;
}

void TierCache::Touch(const BlockHash& hash, int32_t priority) {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || !lru_.Contains(it->second)) return;
  lru_.Erase(it->second);
  lru_.PushBack(it->second, priority);
}

void TierCache::SetTokens(int32_t slot, std::span<const int32_t> tokens) {
  if (!keeps_tokens_) return;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + slot * block_tokens_);
}

bool TierCache::TokensMatch(int32_t slot, std::span<const int32_t> tokens) const {
  const std::span<const int32_t> stored = this->tokens(slot);
  return std::equal(stored.begin(), stored.end(), tokens.begin(), tokens.end());
}

absl::Status TierCache::VerifyIndex() const {
  RETURN_IF_ERROR(pool_.VerifyIntegrity());
  const char* name = TierName(tier_);
  for (const auto& [slot, hash] : hash_of_) {
    auto by = by_hash_.find(hash);
    if (by == by_hash_.end() || by->second != slot) {
      return absl::InternalError(absl::StrCat(name, " slot ", slot, " hash index mismatch"));
    }
  }
  if (by_hash_.size() != hash_of_.size()) {
    return absl::InternalError(absl::StrCat(name, " cache maps disagree: ", by_hash_.size(), " keys, ",
                                            hash_of_.size(), " slots"));
  }
  if (keeps_tokens_ && static_cast<int64_t>(tokens_.size()) != pool_.num_blocks() * block_tokens_) {
    return absl::InternalError(absl::StrCat(name, " tier keeps ", tokens_.size(), " stored tokens for ",
                                            pool_.num_blocks(), " slots"));
  }
  return absl::OkStatus();
}

}  // namespace kvtier
