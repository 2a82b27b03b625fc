// StepPlanner (see step_planner.h).
#include "backend/cuda/step_planner.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/window_table_span.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

// The chunk's table in group g: its group table, or (no group tables: the warm-up's chunks)
// its block table in every group.
GroupKvTable TableOf(const SequenceChunk& chunk, int64_t g) {
  return chunk.group_tables.empty() ? GroupKvTable{0, chunk.block_table, chunk.host_kv}
                                    : chunk.group_tables[static_cast<size_t>(g)];
}

// Host-resident blocks of `table` among logical blocks [span_first, span_end).
int64_t HostBlocksIn(const GroupKvTable& table, int64_t span_first, int64_t span_end) {
  const int64_t lo = std::max(span_first, table.first_block + table.host.first_block);
  const int64_t hi = std::min(span_end, table.first_block + table.host.first_block + table.host.num_blocks());
  return std::max<int64_t>(0, hi - lo);
}

}  // namespace

int64_t StepPlanner::MaxTableEntries(const StepCapacity& capacity,
                                     std::span<const std::optional<int64_t>> group_window, int64_t block_tokens) {
  if (group_window.empty()) return capacity.max_table_entries;
  int64_t total = 0;
  for (const std::optional<int64_t>& window : group_window) {
    if (!window.has_value()) {
      total += capacity.max_table_entries;
      continue;
    }
    // Summed over at most max_chunks chunks of max_tokens tokens in all (the sum of the
    // per-chunk floors is at most the floor of the sum), and never more than a full table.
    const int64_t chunks = capacity.max_chunks, b = block_tokens;
    const int64_t spans = (chunks * (*window + b - 3) + capacity.max_tokens) / b + chunks * (1 + WindowSlackBlocks(b));
    total += std::min(capacity.max_table_entries, spans);
  }
  return total;
}

size_t StepPlanner::MetaCapacity(const StepCapacity& capacity, int64_t host_kv_slots,
                                 std::span<const std::optional<int64_t>> group_window, int64_t block_tokens) {
  // Token arrays (ids, pos, chunk, decode rows, splits, partial bases), chunk arrays (the
  // logit rows, one indptr per group), items or prefill tiles, sampling parameters, mask
  // slots, block tables, host block addresses.
  const int64_t max_tokens = capacity.max_tokens, max_chunks = capacity.max_chunks;
  const int64_t num_groups = std::max<int64_t>(1, static_cast<int64_t>(group_window.size()));
  return 6 * AlignMetaBytes(max_tokens * 4) + (1 + num_groups) * AlignMetaBytes((max_chunks + 1) * 4) +
         AlignMetaBytes(capacity.max_items * sizeof(AttentionItem)) +
         AlignMetaBytes((max_tokens + max_chunks) * sizeof(PrefillTile)) +
         AlignMetaBytes(max_chunks * sizeof(SampleParams)) + AlignMetaBytes(max_chunks * 4) +
         AlignMetaBytes(MaxTableEntries(capacity, group_window, block_tokens) * 4) +
         AlignMetaBytes(host_kv_slots * 8) + 4 * 256;
}

StepPlanner::TableSpan StepPlanner::SpanOf(int64_t group, const SequenceChunk& chunk) const {
  const int64_t bt = shape_.block_tokens;
  const int64_t start = chunk.start_position, n = static_cast<int64_t>(chunk.tokens.size());
  TableSpan span{0, (start + n + bt - 1) / bt};
  const std::optional<int64_t> window =
      shape_.group_window.empty() ? std::nullopt : shape_.group_window[static_cast<size_t>(group)];
  if (window.has_value()) span.first = std::min(WindowTableFirst(*window, start, bt), span.end);
  return span;
}

absl::StatusOr<std::unique_ptr<StepPlanner>> StepPlanner::Create(const Shape& shape, size_t meta_capacity) {
  std::unique_ptr<StepPlanner> planner(new StepPlanner(shape, meta_capacity));
  CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(reinterpret_cast<void**>(&planner->meta_host_), meta_capacity, cudaHostAllocDefault));
  return planner;
}

StepPlanner::~StepPlanner() {
  if (meta_host_ != nullptr) cudaFreeHost(meta_host_);
}

absl::StatusOr<StepLaunch> StepPlanner::Prepare(const ForwardBatch& piece, int64_t padded_chunks, int32_t scratch_block,
                                                const StepSpec& spec) {
  const bool greedy = spec.picks_ids();
  const std::span<const RowSampling> sampling =
      spec.output == StepOutput::kSampled ? spec.sampling : std::span<const RowSampling>();
  const TokenMasks* masks = spec.output == StepOutput::kLogits ? nullptr : spec.masks;
  const size_t first_row = spec.first_row;
  const int64_t num_chunks = static_cast<int64_t>(piece.chunks.size());
  const int64_t padded = std::max(num_chunks, padded_chunks);
  const int64_t pads = padded - num_chunks;
  StepLaunch step;
  step.greedy = greedy;
  step.sampled = greedy && !sampling.empty();
  step.path = shape_.fast_attention ? AttentionPath::kFast : AttentionPath::kGeneric;

  // num_entries: a full-attention table's (an entry per logical block); table_entries:
  // what every group's table takes (a windowed group's from its TableSpan on).
  const int64_t num_groups = this->num_groups();
  int64_t num_tokens = pads, num_entries = pads, num_logits = pads, decode_rows = 0, host_blocks = 0;
  int64_t table_entries = pads * num_groups;
  for (const SequenceChunk& chunk : piece.chunks) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    for (int64_t g = 0; g < num_groups; ++g) {
      const TableSpan span = SpanOf(g, chunk);
      table_entries += span.end - span.first;
      host_blocks += HostBlocksIn(TableOf(chunk, g), span.first, span.end);
    }
    num_tokens += n;
    num_entries += (chunk.start_position + n + shape_.block_tokens - 1) / shape_.block_tokens;
    num_logits += static_cast<int64_t>(chunk.num_logit_rows());
    if (n == 1) ++decode_rows;
  }
  decode_rows += pads;
  if (num_entries > shape_.capacity.max_table_entries) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: step needs ", num_entries,
                                                     " block-table entries (capacity ",
                                                     shape_.capacity.max_table_entries, ")"));
  }

  // Attention work: the generic plan, or prefill tiles of the multi-token chunks.
  if (step.path == AttentionPath::kGeneric) {
    shapes_.resize(padded);
    for (int64_t c = 0; c < padded; ++c) {
      shapes_[c].num_tokens = c < num_chunks ? static_cast<int32_t>(piece.chunks[c].tokens.size()) : 1;
      shapes_[c].start_position = c < num_chunks ? piece.chunks[c].start_position : 0;
    }
    RETURN_IF_ERROR(PlanAttention(shapes_, shape_.capacity.plan_options, &plan_));
    if (static_cast<int64_t>(plan_.items.size()) > shape_.capacity.max_items) {
      return absl::ResourceExhaustedError(absl::StrCat("cuda backend: step needs ", plan_.items.size(),
                                                       " attention items (capacity ", shape_.capacity.max_items, ")"));
    }
  } else {
    prefill_chunks_.clear();
    int64_t token = 0;
    for (int64_t c = 0; c < num_chunks; ++c) {
      const SequenceChunk& chunk = piece.chunks[c];
      const int64_t n = static_cast<int64_t>(chunk.tokens.size());
      if (n > 1) {
        prefill_chunks_.push_back(
            {static_cast<int32_t>(c), static_cast<int32_t>(token), static_cast<int32_t>(n), chunk.start_position});
      }
      token += n;
    }
    prefill_tiles_.clear();
    PlanPrefillTiles(prefill_chunks_, shape_.prefill_tile_tokens, &prefill_tiles_);
  }

  // Layout: fixed-size arrays first (a pure function of the bucket for graph steps), the
  // block-table indices last.
  MetaLayout& m = step.meta;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += AlignMetaBytes(bytes);
    return offset;
  };
  m.ids = take(num_tokens * 4);
  m.pos = take(num_tokens * 4);
  m.chunk = take(num_tokens * 4);
  m.rows = take(std::max<int64_t>(decode_rows, 1) * 4);
  m.logit_rows = take(std::max<int64_t>(num_logits, 1) * 4);
  m.indptr = take((padded + 1) * 4);
  m.indptr_stride = AlignMetaBytes((padded + 1) * 4);
  for (int64_t g = 1; g < num_groups; ++g) take((padded + 1) * 4);
  if (step.path == AttentionPath::kGeneric) {
    m.num_splits = take(num_tokens * 4);
    m.partial_base = take(num_tokens * 4);
    m.items = take(plan_.items.size() * sizeof(AttentionItem));
  } else {
    m.tiles = take(prefill_tiles_.size() * sizeof(PrefillTile));
  }
  if (step.sampled) m.sampling = take(num_logits * sizeof(SampleParams));
  // Grammar masks: the piece's constrained rows have consecutive slots (rows are added in
  // order), so one copy moves them all.
  if (masks != nullptr) {
    int32_t lo = std::numeric_limits<int32_t>::max(), hi = -1;
    for (int64_t r = 0; r < num_logits; ++r) {
      const size_t row = first_row + static_cast<size_t>(r);
      const int32_t slot = row < masks->slot_of_row.size() ? masks->slot_of_row[row] : TokenMasks::kNoMask;
      if (slot == TokenMasks::kNoMask) continue;
      lo = std::min(lo, slot);
      hi = std::max(hi, slot);
    }
    if (hi >= 0) {
      step.masks = masks;
      step.first_slot = lo;
      step.num_slots = hi - lo + 1;
      m.mask_slots = take(num_logits * 4);
    }
  }
  if (host_blocks > 0) m.host_blocks = take(host_blocks * sizeof(uint64_t));
  m.indices = take(table_entries * 4);
  m.bytes = at;
  if (m.bytes > meta_capacity_) return absl::InternalError("step metadata over capacity");

  auto host = [&](size_t offset) { return reinterpret_cast<int32_t*>(meta_host_ + offset); };
  int32_t* ids = host(m.ids);
  int32_t* pos = host(m.pos);
  int32_t* chunk_of = host(m.chunk);
  int32_t* rows = host(m.rows);
  int32_t* logit_rows = host(m.logit_rows);
  int32_t* indices = host(m.indices);
  int64_t t = 0, logit = 0, row = 0;
  for (int64_t c = 0; c < padded; ++c) {
    if (c >= num_chunks) {  // padding: token 0 at position 0 of the scratch block
      ids[t] = 0;
      pos[t] = 0;
      chunk_of[t] = static_cast<int32_t>(c);
      rows[row++] = static_cast<int32_t>(t);
      logit_rows[logit++] = static_cast<int32_t>(t);
      ++t;
      continue;
    }
    const SequenceChunk& chunk = piece.chunks[c];
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    if (n == 1) rows[row++] = static_cast<int32_t>(t);
    for (int64_t i = 0; i < n; ++i, ++t) {
      ids[t] = chunk.tokens[i];
      pos[t] = static_cast<int32_t>(chunk.start_position + i);
      chunk_of[t] = static_cast<int32_t>(c);
    }
    const int64_t rows_here = static_cast<int64_t>(chunk.num_logit_rows());  // the chunk's last rows
    for (int64_t r = rows_here; r > 0; --r) logit_rows[logit++] = static_cast<int32_t>(t - r);
  }
  // The tables, group after group, each chunk's span of logical blocks [first, end) at
  // entries indptr[c] + j: indptr[c] is negative where a windowed span starts past the
  // entries before it (the kernels add block indices of at least `first`: MetaLayout).
  int64_t entry = 0, slot = 0;
  auto* host_addresses = reinterpret_cast<uint64_t*>(meta_host_ + m.host_blocks);
  for (int64_t g = 0; g < num_groups; ++g) {
    int32_t* indptr = host(m.GroupIndptr(g));
    for (int64_t c = 0; c < padded; ++c) {
      if (c >= num_chunks) {
        indptr[c] = static_cast<int32_t>(entry);
        indices[entry++] = scratch_block;
        continue;
      }
      const SequenceChunk& chunk = piece.chunks[c];
      const GroupKvTable table = TableOf(chunk, g);
      const TableSpan span = SpanOf(g, chunk);
      indptr[c] = static_cast<int32_t>(entry - span.first);
      // Blocks before a windowed group's first block: given back, read only masked.
      for (int64_t j = span.first; j < std::min(table.first_block, span.end); ++j) indices[entry++] = scratch_block;
      // Host-resident blocks get the staging slots in order (entry -1 - slot, PagedKv::staged).
      const HostResidentKv& host = table.host;
      for (int64_t j = std::max(span.first, table.first_block); j < span.end; ++j) {
        const int64_t local = j - table.first_block;
        if (host.Contains(local)) {
          host_addresses[slot] = reinterpret_cast<uint64_t>(host.blocks[local - host.first_block]);
          indices[entry++] = static_cast<int32_t>(-1 - slot++);
        } else {
          indices[entry++] = table.blocks[host.DeviceIndex(local)];
        }
      }
    }
    indptr[padded] = static_cast<int32_t>(entry);
  }
  if (step.path == AttentionPath::kGeneric) {
    std::memcpy(host(m.num_splits), plan_.num_splits.data(), num_tokens * 4);
    std::memcpy(host(m.partial_base), plan_.partial_base.data(), num_tokens * 4);
    std::memcpy(meta_host_ + m.items, plan_.items.data(), plan_.items.size() * sizeof(AttentionItem));
  } else {
    std::memcpy(meta_host_ + m.tiles, prefill_tiles_.data(), prefill_tiles_.size() * sizeof(PrefillTile));
  }

  if (step.sampled) {
    if (static_cast<int64_t>(sampling.size()) != num_logits) {
      return absl::InternalError("cuda backend: sampling rows do not match the logits rows");
    }
    auto* params = reinterpret_cast<SampleParams*>(meta_host_ + m.sampling);
    for (int64_t r = 0; r < num_logits; ++r) {
      params[r] = SampleParams{};
      params[r].temperature = sampling[r].temperature;
      params[r].top_k = sampling[r].top_k;
      params[r].top_p = sampling[r].top_p;
      params[r].u = sampling[r].u;
      params[r].min_p = sampling[r].min_p;
    }
  }
  if (step.masks != nullptr) {
    int32_t* slots = host(m.mask_slots);
    for (int64_t r = 0; r < num_logits; ++r) {
      const int32_t slot = masks->slot_of_row[first_row + static_cast<size_t>(r)];
      slots[r] = slot == TokenMasks::kNoMask ? TokenMasks::kNoMask : slot - step.first_slot;
    }
  }
  step.rows = static_cast<int32_t>(num_tokens);
  step.logit_rows = static_cast<int32_t>(num_logits);
  step.decode_rows = step.path == AttentionPath::kFast ? static_cast<int32_t>(decode_rows) : 0;
  step.decode_splits =
      step.decode_rows > 0 ? DecodeMaxSplits(step.decode_rows, shape_.num_kv_heads, shape_.decode_wave_ctas) : 1;
  step.prefill_tiles = static_cast<int32_t>(prefill_tiles_.size());
  if (step.path == AttentionPath::kFast) step.prefill_chunks = prefill_chunks_;
  step.host_blocks = static_cast<int32_t>(host_blocks);
  if (step.path == AttentionPath::kGeneric) {
    step.generic_items = static_cast<int32_t>(plan_.items.size());
    step.generic_max_rows = plan_.max_rows;
    step.generic_any_split = plan_.any_split;
  }
  return step;
}

}  // namespace kvtier::cuda
