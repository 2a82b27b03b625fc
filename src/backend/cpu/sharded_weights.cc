// ShardCpuWeights: row and column slices of CpuMatrix in any of its formats.
#include "backend/cpu/sharded_weights.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

// Rows [first, first + count) of m, in m's format.
CpuMatrix SliceRows(const CpuMatrix& m, int64_t first, int64_t count) {
  CpuMatrix out;
  out.dtype = m.dtype;
  out.rows = count;
  out.cols = m.cols;
  out.dot16 = m.dot16;
  if (m.dtype == DType::kF32) {
    out.f32.assign(m.f32.begin() + first * m.cols, m.f32.begin() + (first + count) * m.cols);
  } else {
    const size_t row_bytes = m.RowBytes();
    out.packed.assign(m.packed.begin() + first * row_bytes, m.packed.begin() + (first + count) * row_bytes);
  }
  return out;
}

// Columns [first, first + count) of m: whole blocks of its format (checked by the caller).
CpuMatrix SliceColumns(const CpuMatrix& m, int64_t first, int64_t count) {
  CpuMatrix out;
  out.dtype = m.dtype;
  out.rows = m.rows;
  out.cols = count;
  out.dot16 = m.dot16;
  if (m.dtype == DType::kF32) {
    out.f32.resize(static_cast<size_t>(m.rows * count));
    for (int64_t r = 0; r < m.rows; ++r) {
      std::memcpy(out.f32.data() + r * count, m.f32.data() + r * m.cols + first, count * sizeof(float));
    }
    return out;
  }
  const size_t src_row = m.RowBytes(), dst_row = out.RowBytes(), offset = DTypeBytes(m.dtype, first);
  out.packed.resize(dst_row * static_cast<size_t>(m.rows));
  for (int64_t r = 0; r < m.rows; ++r) {
    std::memcpy(out.packed.data() + r * dst_row, m.packed.data() + r * src_row + offset, dst_row);
  }
  return out;
}

std::vector<float> SliceVector(const std::vector<float>& v, int64_t first, int64_t count) {
  if (v.empty()) return {};
  return std::vector<float>(v.begin() + first, v.begin() + first + count);
}

// The chunks of a row-parallel matrix must be whole blocks of its format, or a chunk's
// product would not be a product of whole blocks.
absl::Status CheckChunkable(const CpuMatrix& m, const char* name) {
  const int64_t block = DTypeBlockElements(m.dtype);
  if (m.cols % kShardedChunks != 0 || (m.cols / kShardedChunks) % block != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallel plan: ", name, " has ", m.cols, " input columns, not ", kShardedChunks, " chunks of whole ",
        std::string(DTypeName(m.dtype)), " blocks of ", block, " values (needs a multiple of ", kShardedChunks * block,
        ")"));
  }
  return absl::OkStatus();
}

// The rank's chunks of m: kShardedChunks / degree consecutive column chunks.
std::vector<CpuMatrix> RankChunks(const CpuMatrix& m, int32_t degree, int32_t rank) {
  const int64_t per_rank = kShardedChunks / degree;
  const int64_t width = m.cols / kShardedChunks;
  std::vector<CpuMatrix> chunks;
  for (int64_t c = rank * per_rank; c < (rank + 1) * per_rank; ++c) chunks.push_back(SliceColumns(m, c * width, width));
  return chunks;
}

}  // namespace

int64_t ShardedWeights::Bytes() const {
  int64_t bytes = 0;
  for (const std::vector<RankLayerWeights>& layers : ranks) {
    for (const RankLayerWeights& w : layers) {
      for (const CpuMatrix* m : {&w.q_proj, &w.k_proj, &w.v_proj, &w.gate_proj, &w.up_proj}) bytes += m->Bytes();
      for (const std::vector<CpuMatrix>* chunks : {&w.o_chunks, &w.down_chunks}) {
        for (const CpuMatrix& m : *chunks) bytes += m.Bytes();
      }
      bytes += static_cast<int64_t>((w.q_bias.size() + w.k_bias.size() + w.v_bias.size()) * sizeof(float));
    }
  }
  return bytes;
}

absl::StatusOr<ShardedWeights> ShardCpuWeights(const ModelConfig& config, int32_t degree, CpuWeights* weights) {
  RETURN_IF_ERROR(ValidateTensorParallelOptions(degree, {}));
  RETURN_IF_ERROR(ValidateTensorParallelModel(config, degree));
  if (config.moe.num_experts > 0) {
    return absl::UnimplementedError("tensor parallel plan: mixture-of-experts layers are not sharded");
  }
  for (const CpuLayerWeights& layer : weights->layers) {
    RETURN_IF_ERROR(CheckChunkable(layer.o_proj, "o_proj"));
    RETURN_IF_ERROR(CheckChunkable(layer.down_proj, "down_proj"));
  }
  const int64_t q_rows = config.q_dim() / degree, kv_rows = config.kv_dim() / degree;
  const int64_t inter_rows = config.intermediate_size / degree;
  ShardedWeights sharded;
  sharded.degree = degree;
  sharded.ranks.resize(static_cast<size_t>(degree));
  for (int32_t rank = 0; rank < degree; ++rank) {
    for (const CpuLayerWeights& layer : weights->layers) {
      RankLayerWeights w;
      w.q_proj = SliceRows(layer.q_proj, rank * q_rows, q_rows);
      w.k_proj = SliceRows(layer.k_proj, rank * kv_rows, kv_rows);
      w.v_proj = SliceRows(layer.v_proj, rank * kv_rows, kv_rows);
      w.q_bias = SliceVector(layer.q_bias, rank * q_rows, q_rows);
      w.k_bias = SliceVector(layer.k_bias, rank * kv_rows, kv_rows);
      w.v_bias = SliceVector(layer.v_bias, rank * kv_rows, kv_rows);
      w.gate_proj = SliceRows(layer.gate_proj, rank * inter_rows, inter_rows);
      w.up_proj = SliceRows(layer.up_proj, rank * inter_rows, inter_rows);
      w.o_chunks = RankChunks(layer.o_proj, degree, rank);
      w.down_chunks = RankChunks(layer.down_proj, degree, rank);
      sharded.ranks[rank].push_back(std::move(w));
    }
  }
  // Each rank reads only its shard: the whole matrices are not kept.
  for (CpuLayerWeights& layer : weights->layers) {
    for (CpuMatrix* m : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
                         &layer.up_proj, &layer.down_proj}) {
      *m = CpuMatrix{};
    }
    layer.q_bias.clear();
    layer.k_bias.clear();
    layer.v_bias.clear();
  }
  return sharded;
}

}  // namespace kvtier
