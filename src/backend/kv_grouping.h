// KvGrouping: where each model layer's KV lives when the layers are cut into groups of
// equal layer counts, each group with its own block table per sequence in one pool of
// blocks (docs/ARCHITECTURE.md, "Layer groups"; the KV manager's side is
// kv/kv_layer_groups.h). A windowed group's table starts at its first live block: the
// blocks before it, which no query of the window reads, were given back. Plain value types.
#ifndef KVTIER_BACKEND_KV_GROUPING_H_
#define KVTIER_BACKEND_KV_GROUPING_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/host_resident_kv.h"

namespace kvtier {

struct KvGrouping {
  // (num_layers) each layer's group and its layer index inside that group's blocks; empty:
  // no grouping (one block holds every layer, read through SequenceChunk::block_table).
  std::vector<int64_t> group_of_layer;
  std::vector<int64_t> index_in_group;
  std::vector<std::optional<int64_t>> group_window;  // (num_groups) nullopt: full attention

  bool enabled() const { return !group_of_layer.empty(); }
  int64_t num_groups() const { return static_cast<int64_t>(group_window.size()); }
  // Checks the shape against a model whose layer l attends within layer_windows[l]: every
  // layer in one group at its own index, every group of the same number of layers, every
  // layer of a group with the group's window. Returns the layers of a group; InvalidArgument
  // naming the first mismatch.
  absl::StatusOr<int64_t> Validate(std::span<const std::optional<int64_t>> layer_windows) const;
};

// One sequence's table in one group: logical blocks from first_block on, through `host`
// (counting from first_block, host_resident_kv.h) for a long sequence whose oldest blocks
// live in host memory, read in place: host.blocks[i] holds logical block first_block +
// host.first_block + i, and blocks the rest, in order (without host blocks, blocks[i]
// holds logical block first_block + i).
struct GroupKvTable {
  int64_t first_block = 0;
  std::span<const int32_t> blocks;
  HostResidentKv host{};
};

// Checks a chunk's group tables for positions [start_position, end_position): one per
// group, each starting no later than the first block the chunk's first query reads and
// covering the chunk's last position, every id in [0, num_blocks), every host block
// before the chunk's first position and not null; the blocks the chunk writes are added
// to *written, none twice (across groups and chunks). InvalidArgument
// naming `name` and the group otherwise.
absl::Status ValidateGroupTables(const KvGrouping& grouping, std::span<const GroupKvTable> tables,
                                 int64_t start_position, int64_t end_position, int64_t block_tokens,
                                 int64_t num_blocks, absl::flat_hash_set<int32_t>* written, const std::string& name);

}  // namespace kvtier

#endif  // KVTIER_BACKEND_KV_GROUPING_H_
