// A small disk block store on a fake file and the keys/tokens the disk-thread tests write
// into it: blocks of 4 tokens, key n and tokens n..n+3 for block n.
#ifndef KVTIER_TESTS_KV_DISK_STORE_FIXTURE_H_
#define KVTIER_TESTS_KV_DISK_STORE_FIXTURE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "storage/disk_block_store.h"

namespace kvtier::testing {

inline std::unique_ptr<DiskBlockStore> OpenFakeStore(FileIo* io, const std::string& path, size_t block_bytes,
                                                     int64_t slots) {
  DiskStoreOptions o;
  o.path = path;
  o.num_slots = slots;
  o.block_bytes = block_bytes;
  o.block_tokens = 4;
  o.io = io;
  auto store = DiskBlockStore::Open(o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

inline Sha256Digest BlockKey(uint64_t n) { return Sha256::Of(&n, sizeof n); }
inline std::vector<int32_t> BlockTokens(int32_t n) { return {n, n + 1, n + 2, n + 3}; }

}  // namespace kvtier::testing

#endif  // KVTIER_TESTS_KV_DISK_STORE_FIXTURE_H_
