// Fuzzes what the disk tier reads back: a slot's bytes (header + payload), the index snapshot
// and its journal. A DiskBlockStore over FakeFileIo holds one valid block in slot 1; the
// fuzzer overwrites slot 1's bytes, or the index (first byte / 4 even) or journal (odd)
// file, either wholesale (first byte % 4 == 0 / 1) or by XOR-ing bytes at fuzzed offsets of
// the valid ones (== 2 / 3, three bytes per edit: offset lo, offset hi, mask), so both
// garbage and near-valid headers are tried. Read must return OK only with the original
// block; anything else is a refusal (DataLoss, NotFound: another block, FailedPrecondition:
// other tokens), never a crash or a bad read. A reopened store must accept only index
// entries that are in range, and reading them must never return another block's bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "storage/disk_block_store.h"
#include "testing/fake_file_io.h"

namespace {

constexpr size_t kBlockBytes = 256;
constexpr int64_t kSlots = 3;
const kvtier::Sha256Digest kKey = kvtier::Sha256::Of("block", 5);
const std::vector<int32_t> kTokens = {11, 12, 13, 14};

kvtier::DiskStoreOptions Options(kvtier::FakeFileIo* io) {
  kvtier::DiskStoreOptions o;
  o.path = "/fuzz/kv.bin";
  o.num_slots = kSlots;
  o.block_bytes = kBlockBytes;
  o.model_fingerprint = 42;
  o.block_tokens = 4;
  o.io = io;
  return o;
}

size_t DiskBlockStoreHeaderAndBlock() { return kvtier::SlotHeaderBytes(4) + kBlockBytes; }

bool Refusal(const absl::Status& s) {
  return absl::IsDataLoss(s) || absl::IsNotFound(s) || absl::IsFailedPrecondition(s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  kvtier::FakeFileIo io;
  std::vector<uint8_t> block(kBlockBytes);
  for (size_t i = 0; i < kBlockBytes; ++i) block[i] = static_cast<uint8_t>(i * 7 + 1);
  auto store = kvtier::DiskBlockStore::Open(Options(&io));
  if (!store.ok()) std::abort();
  if (!(*store)->Write(1, kKey, kTokens, block.data(), kvtier::DiskBlockStore::Content::kCached).ok()) std::abort();

  const int mode = data[0] % 4;
  // Valid bytes with the edits applied (modes 2 and 3); the raw input otherwise.
  auto edited = [&](std::string bytes) {
    for (size_t i = 1; i + 2 < size; i += 3) {
      const size_t offset = (data[i] | (data[i + 1] << 8)) % std::max<size_t>(bytes.size(), 1);
      if (!bytes.empty()) bytes[offset] = static_cast<char>(bytes[offset] ^ data[i + 2]);
    }
    return bytes;
  };
  if (mode == 0 || mode == 2) {
    // Written under the open store (which holds the file locked), as a stray writer would.
    const int64_t slot_bytes = (*store)->slot_bytes();
    if (mode == 0) {
      const size_t n = std::min<size_t>(size - 1, static_cast<size_t>(slot_bytes));
      const std::string_view bytes(reinterpret_cast<const char*>(data + 1), n);
      if (n > 0 && !io.Overwrite("/fuzz/kv.bin", slot_bytes, bytes).ok()) std::abort();
    } else {
      auto contents = io.Contents("/fuzz/kv.bin");
      if (!contents.ok()) std::abort();
      const std::string slot = edited(contents->substr(static_cast<size_t>(slot_bytes),
                                                       DiskBlockStoreHeaderAndBlock()));
      if (!io.Overwrite("/fuzz/kv.bin", slot_bytes, slot).ok()) std::abort();
    }
    std::vector<uint8_t> out(kBlockBytes);
    absl::Status s = (*store)->Read(1, kKey, kTokens, out.data());
    if (s.ok() && std::memcmp(out.data(), block.data(), kBlockBytes) != 0) {
      std::fprintf(stderr, "slot accepted with different bytes\n");
      std::abort();
    }
    if (!s.ok() && !Refusal(s)) std::abort();
    // The other slots are untouched (never written: a miss, not a crash).
    (void)(*store)->Read(0, kKey, kTokens, out.data());
    (void)(*store)->Read(2, kvtier::Sha256Digest{}, {}, out.data());
    return 0;
  }
  store->reset();
  const std::string file = (data[0] / 4) % 2 == 0 ? "/fuzz/kv.bin.index" : "/fuzz/kv.bin.journal";
  std::string contents;
  if (mode == 1) {
    contents.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  } else {
    auto valid = io.Contents(file);
    if (!valid.ok()) std::abort();
    contents = edited(*valid);
  }
  if (!io.WriteFileAtomically(file, contents).ok()) std::abort();
  auto reopened = kvtier::DiskBlockStore::Open(Options(&io));
  if (!reopened.ok()) std::abort();  // a bad index never fails the open
  for (const auto& e : (*reopened)->recovered_entries()) {
    if (e.slot < 0 || e.slot >= kSlots) std::abort();
    std::vector<uint8_t> out(kBlockBytes);
    const absl::Status s = (*reopened)->Read(e.slot, e.key, kTokens, out.data());
    if (s.ok() && (e.slot != 1 || std::memcmp(out.data(), block.data(), kBlockBytes) != 0)) std::abort();
    if (!s.ok() && !Refusal(s)) std::abort();
  }
  return 0;
}
