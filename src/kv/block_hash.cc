// BlockHash and BlockKeyScope (block_hash.h): the exact bytes hashed. Each input is
// fixed-size or length-prefixed, so no two different inputs hash the same bytes.
#include "kv/block_hash.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tokenizer/unicode.h"

namespace kvtier {
namespace {

constexpr std::string_view kScopeDomain{"kvtier block key scope v2", 26};  // with its NUL
constexpr std::string_view kBlockDomain{"kvtier block key v2", 20};
constexpr std::string_view kGroupDomain{"kvtier group block key v1", 26};

}  // namespace

BlockHash BlockHash::Chain(const BlockHash& scope, const BlockHash* parent, std::span<const int32_t> tokens) {
  Sha256 h;
  h.Update(kBlockDomain);
  h.Update(scope.digest.bytes.data(), Sha256Digest::kBytes);
  const uint8_t has_parent = parent != nullptr ? 1 : 0;
  h.Update(&has_parent, 1);
  const Sha256Digest none{};
  h.Update((parent != nullptr ? parent->digest : none).bytes.data(), Sha256Digest::kBytes);
  h.UpdateU32(static_cast<uint32_t>(tokens.size()));
  for (int32_t token : tokens) h.UpdateU32(static_cast<uint32_t>(token));
  return BlockHash{h.Finish()};
}

BlockHash GroupBlockKey(const BlockHash& key, int64_t group) {
  Sha256 h;
  h.Update(kGroupDomain);
  h.Update(key.digest.bytes.data(), Sha256Digest::kBytes);
  h.UpdateU64(static_cast<uint64_t>(group));
  return BlockHash{h.Finish()};
}

BlockHash BlockKeyScope(uint64_t model_fingerprint, const KvLayout& layout, std::string_view cache_namespace) {
  Sha256 h;
  h.Update(kScopeDomain);
  h.UpdateU64(model_fingerprint);
  h.UpdateU64(static_cast<uint64_t>(layout.num_layers));
  h.UpdateU64(static_cast<uint64_t>(layout.num_kv_heads));
  h.UpdateU64(static_cast<uint64_t>(layout.head_dim));
  h.UpdateU64(static_cast<uint64_t>(layout.block_tokens));
  const std::string_view dtype = DTypeName(layout.dtype);
  h.UpdateU32(static_cast<uint32_t>(dtype.size())).Update(dtype);
  h.UpdateU32(static_cast<uint32_t>(cache_namespace.size())).Update(cache_namespace);
  return BlockHash{h.Finish()};
}

absl::Status ValidateCacheNamespace(std::string_view ns) {
  if (ns.size() > kMaxCacheNamespaceBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the cache namespace is ", ns.size(), " bytes; at most ",
                                                   kMaxCacheNamespaceBytes, " are allowed"));
  }
  if (ns.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the cache namespace has a NUL byte at ", ns.find('\0')));
  }
  if (!tokenizer::IsValidUtf8(ns)) return absl::InvalidArgumentError("the cache namespace is not valid UTF-8");
  return absl::OkStatus();
}

}  // namespace kvtier
