// SplitBatch (see split_batch.h).
#include "backend/cuda/split_batch.h"

#include <algorithm>
#include <utility>

namespace kvtier::cuda {

std::vector<ForwardBatch> SplitBatch(const ForwardBatch& batch, int64_t max_tokens, int64_t max_chunks,
                                     int64_t max_host_blocks) {
  std::vector<ForwardBatch> pieces;
  ForwardBatch current;
  int64_t current_tokens = 0;
  int64_t current_host = 0;  // host-resident blocks named by the piece's chunks
  auto flush = [&] {
    if (!current.chunks.empty()) pieces.push_back(std::move(current));
    current = ForwardBatch();
    current_tokens = 0;
    current_host = 0;
  };
  int64_t current_rows = 0;  // logits rows: at most max_chunks per piece, as chunks
  for (const SequenceChunk& chunk : batch.chunks) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    const int64_t host = chunk.host_kv.num_blocks();
    int64_t offset = 0;
    while (offset < n) {
      if (static_cast<int64_t>(current.chunks.size()) == max_chunks || current_tokens == max_tokens ||
          current_rows >= max_chunks || (host > 0 && current_host + host > max_host_blocks)) {
        flush();
        current_rows = 0;
      }
      int64_t take = std::min(n - offset, max_tokens - current_tokens);
      if (chunk.all_logits) take = std::min(take, max_chunks - current_rows);
      SequenceChunk piece;
      piece.tokens = chunk.tokens.subspan(offset, take);
      piece.start_position = chunk.start_position + offset;
      piece.block_table = chunk.block_table;
      piece.host_kv = chunk.host_kv;  // full blocks before every piece's positions
      piece.group_tables = chunk.group_tables;  // a piece's first query reads no further back
      piece.need_logits = chunk.need_logits && offset + take == n;
      piece.all_logits = chunk.all_logits;
      current.chunks.push_back(piece);
      current_tokens += take;
      current_host += host;
      current_rows += static_cast<int64_t>(piece.num_logit_rows());
      offset += take;
    }
  }
  flush();
  return pieces;
}

}  // namespace kvtier::cuda
