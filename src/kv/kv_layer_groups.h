// KvLayerGroups: which layers share a block table, and what a sliding window lets a group
// drop. Layers that attend over the whole context are grouped apart from the layers of each
// sliding window (Gemma 3: 5 local layers of window 1024 for every global one). A group's
// block holds block_tokens positions of its layers only, so a windowed group can return
// the blocks no future query reads while a full-attention group keeps all of them
// (docs/ARCHITECTURE.md, "Layer groups"). Every group has the same number of layers, so
// every group's block has the same bytes: one pool per tier serves them all, and the tiers
// below move a group's block as they move any block. Immutable value; thread-safe.
//
// The window arithmetic, in one place: a query at position p of a layer with window W reads
// keys in (p - W, p]. The next query of a sequence that has computed [0, num_computed) is
// at num_computed (a chunk's first), and no later query reads further back, so group g's
// blocks before FirstLiveBlock(g, num_computed) are never read again.
#ifndef KVTIER_KV_KV_LAYER_GROUPS_H_
#define KVTIER_KV_KV_LAYER_GROUPS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "backend/kv_grouping.h"

namespace kvtier {

struct KvLayerGroup {
  std::vector<int64_t> layers;   // model layers, ascending
  std::optional<int64_t> window;  // nullopt: full attention
};

class KvLayerGroups {
 public:
  // `layer_windows[l]`: layer l's window (ModelConfig::LayerWindow), nullopt for full
  // attention. With `grouped` (a model with windowed layers on a backend that reads a
  // grouped layout): the full-attention layers first, if any, then the layers of each
  // distinct window in ascending order, each kind cut into runs of layers_per_group() layers
  // (the greatest common divisor of the kinds' sizes: Gemma 3's 5:1 gives one layer a
  // group, Gemma 2's 1:1 half the layers). Without: one full-attention group of every layer
  // (every layer in one block, nothing dropped). InvalidArgument for no layers, a window
  // below 1 or block_tokens below 1.
  static absl::StatusOr<KvLayerGroups> Create(std::span<const std::optional<int64_t>> layer_windows,
                                              int64_t block_tokens, bool grouped);

  int64_t num_groups() const { return static_cast<int64_t>(groups_.size()); }
  const KvLayerGroup& group(int64_t g) const { return groups_[static_cast<size_t>(g)]; }
  int64_t num_layers() const { return static_cast<int64_t>(group_of_layer_.size()); }
  int64_t block_tokens() const { return block_tokens_; }
  // The layers of every group (the layers a block of any group holds).
  int64_t layers_per_group() const { return static_cast<int64_t>(groups_.front().layers.size()); }
  // The group of model layer `layer`, and its index among that group's layers (the layer
  // index inside a block of that group).
  int64_t GroupOfLayer(int64_t layer) const { return group_of_layer_[static_cast<size_t>(layer)]; }
  int64_t IndexInGroup(int64_t layer) const { return index_in_group_[static_cast<size_t>(layer)]; }

  int64_t BlocksForTokens(int64_t num_tokens) const { return (num_tokens + block_tokens_ - 1) / block_tokens_; }
  // The first block of group g that a query at `next_position` or later can read (0 for a
  // full-attention group).
  int64_t FirstLiveBlock(int64_t g, int64_t next_position) const;
  // The blocks group g holds for a sequence holding positions [0, num_tokens) that has
  // computed [0, num_computed): from FirstLiveBlock(g, num_computed) to the last.
  int64_t BlocksHeld(int64_t g, int64_t num_computed, int64_t num_tokens) const;
  // The blocks all groups hold, together, for a sequence that has computed [0, num_computed)
  // and holds no position past it: what a swap-out carries, and a swap-in allocates.
  int64_t ComputedBlocksHeld(int64_t num_computed) const;
  // The most blocks group g holds at once for a sequence of `num_tokens` positions computed
  // at most `chunk_tokens` a step (a chunked prefill, then decoding one a step): the
  // admission need. For a window W the span a step holds is its chunk plus the W - 1
  // positions before, which an unaligned start spreads over one more block.
  int64_t PeakBlocks(int64_t g, int64_t num_tokens, int64_t chunk_tokens) const;
  // The blocks one sequence of `num_tokens` computed `chunk_tokens` a step holds at its
  // peak over all groups, bounded by the sum of each group's PeakBlocks: the admission need.
  int64_t SequencePeakBlocks(int64_t num_tokens, int64_t chunk_tokens) const;
  // The longest prefix of at most `matched` blocks that a new sequence can reuse: every
  // block its next query reads (blocks [FirstLiveBlock(g, n * block_tokens), n) of every
  // group g) is held, `held(g, block)` says which are; 0 when none (recompute). A
  // windowed group's blocks dropped from the front leave a long prefix usable and a short
  // one not (its next query reads further back): recomputing the positions after a shorter
  // prefix would need the dropped blocks too.
  int64_t UsablePrefixBlocks(int64_t matched, const std::function<bool(int64_t g, int64_t block)>& held) const;

 private:
  KvLayerGroups() = default;

  std::vector<KvLayerGroup> groups_;
  std::vector<int64_t> group_of_layer_;  // (num_layers)
  std::vector<int64_t> index_in_group_;  // (num_layers)
  int64_t block_tokens_ = 0;
};

// What a backend reads of the groups (kv_grouping.h): not enabled for one full-attention
// group (every layer in every block, read through the one block table).
KvGrouping BackendGrouping(const KvLayerGroups& groups);

}  // namespace kvtier

#endif  // KVTIER_KV_KV_LAYER_GROUPS_H_
