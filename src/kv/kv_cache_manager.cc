// Implementation of KvCacheManager (kv_cache_manager.h).
#include "kv/kv_cache_manager.h"

#include "absl/strings/str_cat.h"

namespace kvtier {

KvCacheManager::KvCacheManager(int64_t num_device_blocks, int64_t block_tokens)
    : block_tokens_(block_tokens), device_pool_(num_device_blocks) {}

int64_t KvCacheManager::NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const {
  auto it = tables_.find(seq);
  int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size());
  int64_t need = BlocksForTokens(num_tokens) - have;
  return need > 0 ? need : 0;
}

absl::Status KvCacheManager::Reserve(SequenceId seq, int64_t num_tokens) {
  int64_t need = NewBlocksNeeded(seq, num_tokens);
  if (need > device_pool_.num_free()) {
    return absl::ResourceExhaustedError(absl::StrCat("sequence ", seq, " needs ", need,
                                                     " more KV blocks, ", device_pool_.num_free(), " free"));
  }
  std::vector<BlockId>& table = tables_[seq];
  for (int64_t i = 0; i < need; ++i) table.push_back(*device_pool_.Allocate());
  return absl::OkStatus();
}

void KvCacheManager::Release(SequenceId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (BlockId id : it->second) device_pool_.Release(id);
  tables_.erase(it);
}

std::span<const BlockId> KvCacheManager::BlockTable(SequenceId seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return {};
  return it->second;
}

absl::Status KvCacheManager::VerifyIntegrity() const {
  if (absl::Status s = device_pool_.VerifyIntegrity(); !s.ok()) return s;
  std::vector<int32_t> refs(static_cast<size_t>(device_pool_.num_blocks()), 0);
  for (const auto& [seq, table] : tables_) {
    for (BlockId id : table) {
      if (id < 0 || id >= device_pool_.num_blocks()) {
        return absl::InternalError(absl::StrCat("sequence ", seq, " holds block ", id, " out of range"));
      }
      ++refs[static_cast<size_t>(id)];
    }
  }
  for (BlockId id = 0; id < device_pool_.num_blocks(); ++id) {
    if (refs[static_cast<size_t>(id)] != device_pool_.ref_count(id)) {
      return absl::InternalError(absl::StrCat("block ", id, " ref count ", device_pool_.ref_count(id),
                                              " but referenced by ", refs[static_cast<size_t>(id)], " tables"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kvtier
