// CudaBackend's forward (see cuda_backend.h): step metadata, the layer loop, and decode
// steps replayed as CUDA graphs.
//
// Why graphs: a decode step of a Llama-3-8B-shape model is ~300 launches whose kernels are
// each a few microseconds; launched one by one from the host, the gaps between them cost
// about as much as the weight stream itself (NOTES.md, session 2; bench/results/). A pure
// decode step is a fixed sequence of launches for a given batch size, so it is captured
// once per batch bucket and replayed: only the metadata (token ids, positions, block
// tables) changes, and it lives in device memory at offsets fixed for the bucket. Padding
// rows up to the bucket are one-token chunks on a scratch block nobody reads.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_activations.h"
#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/fp8_skinny.h"
#include "backend/cuda/skinny_gemm.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

constexpr int kGemvRowsLimit = 2;

template <typename T>
constexpr cudaDataType_t CublasType() {
  return std::is_same_v<T, cuda::f16> ? CUDA_R_16F : CUDA_R_16BF;
}

// Graph buckets: every size up to 8 rows is its own GEMV instantiation anyway; above it,
// steps of 8 to 64 and of 32 beyond, so padding wastes little.
int64_t BucketFor(int64_t chunks) {
  if (chunks <= 8) {
    int64_t b = 1;
    while (b < chunks) b *= 2;
    return b;
  }
  if (chunks <= 64) return (chunks + 7) / 8 * 8;
  return (chunks + 31) / 32 * 32;
}

}  // namespace

int64_t CudaBackend::GraphBucket(int64_t chunks) const {
  if (chunks <= 0) return 0;
  const int64_t bucket = BucketFor(chunks);
  return bucket <= max_chunks_ ? bucket : 0;
}

template <typename T>
bool CudaBackend::UseSkinnyGemm(int rows, int k, int n, const void* x, const void* w, bool fp8) const {
  if constexpr (!std::is_same_v<T, cuda::bf16>) {
    return false;
  } else {
    // 1-2 rows stay on the GEMVs (weight-stream bound already). Per call on the H200
    // (kvtier_cuda_skinny_test's bench, bench/results/2026-12-02-h200-skinny): fp8 codes, ahead
    // of SkinnyFp8 on every Llama-3-8B projection at 64 rows (gate|up 78.5 vs 96.8 us), behind
    // on most at 16-32 rows (o 14.4 vs 9.4 us at 16), and SkinnyFp8 stops at 64 rows. bf16
    // weights, against cuBLAS: ahead or level up to 32 rows (o 12.5 vs 13.7 us at 16), at
    // 33..64 rows ahead only on the LM head (274 vs 291 us) and 2-3 us behind on qkv and o,
    // behind everywhere past 64.
    if (skinny_mode_ == 0 || rows <= kGemvRowsLimit || !cuda::SkinnyGemmSupported(rows, k, n, x, w)) return false;
    if (fp8) return rows > 32;
    return rows <= 32 || (rows <= 64 && static_cast<int64_t>(n) * k >= (int64_t{256} << 20));
  }
}

cuda::SkinnyPipeline CudaBackend::SkinnyPipelineFor(bool fp8) const {
  // Mode 1: the faster pipeline per weight type by the same bench (fp8: the conversion runs
  // under the previous slice's MMAs); mode 2: overlapped for both.
  return skinny_mode_ == 2 || fp8 ? cuda::SkinnyPipeline::kOverlapped : cuda::SkinnyPipeline::kSerial;
}

template <typename T>
absl::Status CudaBackend::Gemm(const T* x, const T* w, int rows, int k, int n, void* out,
                               bool out_f32, bool allow_gemv) {
  // Row-major out(rows, n) = x(rows, k) * w(n, k)^T, i.e. column-major out^T = w^T' * x'.
  // The CUDA-core GEMV beats cuBLAS only up to kGemvRowsLimit rows: beyond that the dot
  // products, not the weight stream, bound it (kvtier_cuda_bench's per-shape table of both,
  // e.g. bench/results/2026-11-29-h200-gpu-sampling-compact-backend.txt).
  if (allow_gemv && rows <= kGemvRowsLimit && cuda::GemvSupported(rows, k, x, w)) {
    CUDA_RETURN_IF_ERROR(
        cuda::GemvSmallRows(x, w, rows, k, n, out, out_f32, stream_, options_.cuda.launch));
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, cuda::bf16>) {
    // Decode batches: the weights streamed by every SM alike (allow_gemv false: w was just
    // written by another kernel, and SkinnyGemm reads weights before its PDL wait).
    if (allow_gemv && UseSkinnyGemm<T>(rows, k, n, x, w, /*fp8=*/false)) {
      CUDA_RETURN_IF_ERROR(cuda::SkinnyGemm(x, w, rows, k, n, out, out_f32, skinny_workspace_, sm_count_,
                                            SkinnyPipelineFor(/*fp8=*/false), stream_, options_.cuda.launch));
      return absl::OkStatus();
    }
  }
  const float alpha = 1.0f, beta = 0.0f;
  constexpr cudaDataType_t type = CublasType<T>();
  CUBLAS_RETURN_IF_ERROR(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w,
                                      type, k, x, type, k, &beta, out,
                                      out_f32 ? CUDA_R_32F : type, n, CUBLAS_COMPUTE_32F,
                                      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

template <typename T>
absl::Status CudaBackend::Project(const T* x, const Raw16* w16, const Fp8Matrix& w8, int rows, int k, int n,
                                  void* out) {
  if (!fp8_weights_) return Gemm(x, reinterpret_cast<const T*>(w16), rows, k, n, out, false);
  // The same row limit as the 16-bit GEMV: at more rows the dot products (here also the
  // code conversions), not the weight stream, bound a CUDA-core kernel.
  if (rows <= kGemvRowsLimit && cuda::GemvFp8Supported(rows, k, x, w8.codes)) {
    CUDA_RETURN_IF_ERROR(cuda::GemvFp8(x, rows, w8.codes, w8.scales, n, k, static_cast<T*>(out), stream_,
                                       options_.cuda.launch));
    return absl::OkStatus();
  }
  if constexpr (std::is_same_v<T, cuda::bf16>) {
    if (UseSkinnyGemm<T>(rows, k, n, x, w8.codes, /*fp8=*/true)) {  // codes converted in shared memory, wgmma
      CUDA_RETURN_IF_ERROR(cuda::SkinnyGemmFp8(x, w8.codes, w8.scales, rows, k, n, static_cast<T*>(out),
                                               skinny_workspace_, sm_count_, SkinnyPipelineFor(/*fp8=*/true),
                                               stream_, options_.cuda.launch));
      return absl::OkStatus();
    }
  }
  // Decode batches: codes through the tensor cores, K split over CTAs.
  if (rows <= cuda::kSkinnyFp8MaxRows && cuda::SkinnyFp8Supported(rows, k, x, w8.codes)) {
    CUDA_RETURN_IF_ERROR(cuda::SkinnyFp8(x, rows, w8.codes, w8.scales, n, k, cuda::SkinnyFp8Splits(n, k, sm_count_),
                                         fp8_partial_, /*silu_mul=*/false, static_cast<T*>(out), stream_,
                                         options_.cuda.launch));
    return absl::OkStatus();
  }
  // Prefill (W8A16): the projection dequantized to 16 bits, then the tensor cores through cuBLAS.
  T* dense = reinterpret_cast<T*>(fp8_scratch_);
  CUDA_RETURN_IF_ERROR(cuda::DequantizeRowsFp8(w8.codes, w8.scales, n, k, dense, stream_));
  return Gemm(x, dense, rows, k, n, out, false, /*allow_gemv=*/false);
}

CudaBackend::W8A8Path CudaBackend::W8A8PathFor(int rows) const {
  if (ws_.x8 == nullptr) return W8A8Path::kNone;  // not fp8 weights, or cuda.fp8_activations off
  // Decode batches: the skinny kernel streams the codes (the weights are the traffic), with
  // no conversion of them (W8A8) where W8A16 converts every code in shared memory. Above
  // its rows the products bind and cuBLASLt's fp8 kernels run them at about 1.6x the bf16
  // rate (bench/micro/fp8_lt_gemm.cu). 1-2 rows stay on the GEMV.
  if (rows > cuda::kSkinnyGemmMaxRows) return fp8_gemm_ != nullptr ? W8A8Path::kLibrary : W8A8Path::kNone;
  return rows > kGemvRowsLimit && skinny_mode_ != 0 ? W8A8Path::kSkinny : W8A8Path::kNone;
}

template <typename T>
absl::Status CudaBackend::ProjectW8A8(W8A8Path path, const Fp8Matrix& w8, int rows, int k, int n, void* out) {
  if (path == W8A8Path::kLibrary) {
    return fp8_gemm_->Run(ws_.x8, ws_.x8_scales, w8.codes, w8.scales, rows, k, n, out, CublasType<T>(), stream_);
  }
  if constexpr (std::is_same_v<T, cuda::bf16>) {  // kSkinny: bf16 compute only (skinny_mode_)
    CUDA_RETURN_IF_ERROR(cuda::SkinnyGemmW8A8(ws_.x8, ws_.x8_scales, w8.codes, w8.scales, rows, k, n,
                                              static_cast<T*>(out), skinny_workspace_, sm_count_,
                                              SkinnyPipelineFor(/*fp8=*/true), stream_, options_.cuda.launch));
    return absl::OkStatus();
  }
  return absl::InternalError("cuda backend: the skinny W8A8 projection runs in bf16 only");
}

absl::StatusOr<CudaBackend::StepLaunch> CudaBackend::PrepareStep(
    const ForwardBatch& piece, int64_t padded_chunks, bool greedy,
    std::span<const RowSampling> sampling, const TokenMasks* masks, size_t first_row) {
  const int64_t num_chunks = static_cast<int64_t>(piece.chunks.size());
  const int64_t padded = std::max(num_chunks, padded_chunks);
  const int64_t pads = padded - num_chunks;
  StepLaunch step;
  step.greedy = greedy;
  step.sampled = greedy && !sampling.empty();
  step.path = fast_attention_ ? AttentionPath::kFast : AttentionPath::kGeneric;

  int64_t num_tokens = pads, num_entries = pads, num_logits = pads, decode_rows = 0, host_blocks = 0;
  for (const SequenceChunk& chunk : piece.chunks) {
    const int64_t n = static_cast<int64_t>(chunk.tokens.size());
    host_blocks += chunk.host_kv.num_blocks();
    num_tokens += n;
    num_entries += (chunk.start_position + n + layout_.block_tokens - 1) / layout_.block_tokens;
    num_logits += static_cast<int64_t>(chunk.num_logit_rows());
    if (n == 1) ++decode_rows;
  }
  decode_rows += pads;
  if (num_entries > max_table_entries_) {
    return absl::ResourceExhaustedError(absl::StrCat("cuda backend: step needs ", num_entries,
                                                     " block-table entries (capacity ",
                                                     max_table_entries_, ")"));
  }

  // Attention work: the generic plan, or prefill tiles of the multi-token chunks.
  if (step.path == AttentionPath::kGeneric) {
    shapes_.resize(padded);
    for (int64_t c = 0; c < padded; ++c) {
      shapes_[c].num_tokens =
          c < num_chunks ? static_cast<int32_t>(piece.chunks[c].tokens.size()) : 1;
      shapes_[c].start_position = c < num_chunks ? piece.chunks[c].start_position : 0;
    }
    RETURN_IF_ERROR(cuda::PlanAttention(shapes_, plan_options_, &plan_));
    if (static_cast<int64_t>(plan_.items.size()) > max_items_) {
      return absl::ResourceExhaustedError(absl::StrCat("cuda backend: step needs ",
                                                       plan_.items.size(),
                                                       " attention items (capacity ",
                                                       max_items_, ")"));
    }
  } else {
    prefill_chunks_.clear();
    int64_t token = 0;
    for (int64_t c = 0; c < num_chunks; ++c) {
      const SequenceChunk& chunk = piece.chunks[c];
      const int64_t n = static_cast<int64_t>(chunk.tokens.size());
      if (n > 1) {
        prefill_chunks_.push_back({static_cast<int32_t>(c), static_cast<int32_t>(token),
                                   static_cast<int32_t>(n), chunk.start_position});
      }
      token += n;
    }
    prefill_tiles_.clear();
    cuda::PlanPrefillTiles(prefill_chunks_, prefill_tile_tokens_, &prefill_tiles_);
  }

  // Layout: fixed-size arrays first (a pure function of the bucket for graph steps), the
  // block-table indices last.
  MetaLayout& m = step.meta;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t offset = at;
    at += cuda::AlignMetaBytes(bytes);
    return offset;
  };
  m.ids = take(num_tokens * 4);
  m.pos = take(num_tokens * 4);
  m.chunk = take(num_tokens * 4);
  m.rows = take(std::max<int64_t>(decode_rows, 1) * 4);
  m.logit_rows = take(std::max<int64_t>(num_logits, 1) * 4);
  m.indptr = take((padded + 1) * 4);
  if (step.path == AttentionPath::kGeneric) {
    m.num_splits = take(num_tokens * 4);
    m.partial_base = take(num_tokens * 4);
    m.items = take(plan_.items.size() * sizeof(cuda::AttentionItem));
  } else {
    m.tiles = take(prefill_tiles_.size() * sizeof(cuda::PrefillTile));
  }
  if (step.sampled) m.sampling = take(num_logits * sizeof(cuda::SampleParams));
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
  m.indices = take(num_entries * 4);
  m.bytes = at;
  if (m.bytes > meta_capacity_) return absl::InternalError("step metadata over capacity");

  auto host = [&](size_t offset) { return reinterpret_cast<int32_t*>(meta_host_ + offset); };
  int32_t* ids = host(m.ids);
  int32_t* pos = host(m.pos);
  int32_t* chunk_of = host(m.chunk);
  int32_t* rows = host(m.rows);
  int32_t* logit_rows = host(m.logit_rows);
  int32_t* indptr = host(m.indptr);
  int32_t* indices = host(m.indices);
  int64_t t = 0, entry = 0, logit = 0, row = 0, slot = 0;
  auto* host_addresses = reinterpret_cast<uint64_t*>(meta_host_ + m.host_blocks);
  for (int64_t c = 0; c < padded; ++c) {
    indptr[c] = static_cast<int32_t>(entry);
    if (c >= num_chunks) {  // padding: token 0 at position 0 of the scratch block
      ids[t] = 0;
      pos[t] = 0;
      chunk_of[t] = static_cast<int32_t>(c);
      rows[row++] = static_cast<int32_t>(t);
      logit_rows[logit++] = static_cast<int32_t>(t);
      indices[entry++] = scratch_block_;
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
    const int64_t blocks = (chunk.start_position + n + layout_.block_tokens - 1) /
                           layout_.block_tokens;
    // Host-resident blocks get the staging slots in order (entry -1 - slot, PagedKv::staged).
    const HostResidentKv& host = chunk.host_kv;
    for (int64_t j = 0; j < blocks; ++j) {
      if (host.Contains(j)) {
        host_addresses[slot] = reinterpret_cast<uint64_t>(host.blocks[j - host.first_block]);
        indices[entry++] = static_cast<int32_t>(-1 - slot++);
      } else {
        indices[entry++] = chunk.block_table[host.DeviceIndex(j)];
      }
    }
  }
  indptr[padded] = static_cast<int32_t>(entry);
  if (step.path == AttentionPath::kGeneric) {
    std::memcpy(host(m.num_splits), plan_.num_splits.data(), num_tokens * 4);
    std::memcpy(host(m.partial_base), plan_.partial_base.data(), num_tokens * 4);
    std::memcpy(meta_host_ + m.items, plan_.items.data(),
                plan_.items.size() * sizeof(cuda::AttentionItem));
  } else {
    std::memcpy(meta_host_ + m.tiles, prefill_tiles_.data(),
                prefill_tiles_.size() * sizeof(cuda::PrefillTile));
  }

  if (step.sampled) {
    if (static_cast<int64_t>(sampling.size()) != num_logits) {
      return absl::InternalError("cuda backend: sampling rows do not match the logits rows");
    }
    auto* params = reinterpret_cast<cuda::SampleParams*>(meta_host_ + m.sampling);
    for (int64_t r = 0; r < num_logits; ++r) {
      params[r] = cuda::SampleParams{};
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
      step.decode_rows > 0
          ? cuda::DecodeMaxSplits(step.decode_rows, static_cast<int32_t>(config_.num_kv_heads),
                                  sm_count_)
          : 1;
  step.prefill_tiles = static_cast<int32_t>(prefill_tiles_.size());
  step.host_blocks = static_cast<int32_t>(host_blocks);
  return step;
}

absl::Status CudaBackend::EnqueueForward(const StepLaunch& step, float* logits_out) {
  return compute_dtype_ == DType::kF16 ? EnqueueForwardAs<cuda::f16>(step, logits_out)
                                      : EnqueueForwardAs<cuda::bf16>(step, logits_out);
}

template <typename T>
absl::Status CudaBackend::EnqueueForwardAs(const StepLaunch& step, float* logits_out) {
  auto dev = [&](size_t offset) { return reinterpret_cast<int32_t*>(ws_.meta + offset); };
  // The 16-bit arrays as the element type of this backend (compute_dtype_).
  auto as = [](Raw16* p) { return reinterpret_cast<T*>(p); };
  const MetaLayout& m = step.meta;
  cuda::StepTokens step_tokens{dev(m.chunk), dev(m.pos), step.rows};
  cuda::PagedKv<T> kv;
  kv.pool = as(kv_pool_);
  kv.indices = dev(m.indices);
  kv.indptr = dev(m.indptr);
  kv.block_elements = layout_.ElementsPerBlock();
  kv.num_kv_heads = static_cast<int32_t>(config_.num_kv_heads);
  kv.head_dim = static_cast<int32_t>(config_.head_dim);
  kv.block_tokens = static_cast<int32_t>(layout_.block_tokens);
  kv.fp8 = layout_.dtype == DType::kF8E4M3;
  kv.block_bytes = static_cast<int64_t>(layout_.BlockBytes());

  const int rows = step.rows;
  const int h = static_cast<int>(config_.hidden_size);
  const int inter = static_cast<int>(config_.intermediate_size);
  const int q_dim = static_cast<int>(config_.q_dim());
  const int qkv = static_cast<int>(config_.q_dim() + 2 * config_.kv_dim());
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int32_t num_heads = static_cast<int32_t>(config_.num_heads);

  const CudaLaunchOptions& launch = options_.cuda.launch;
  const W8A8Path w8a8_path = W8A8PathFor(rows);
  const bool w8a8 = w8a8_path != W8A8Path::kNone;
  CUDA_RETURN_IF_ERROR(
      cuda::EmbeddingGather(dev(m.ids), as(embed_), rows, h, ws_.residual, stream_, launch));
  RETURN_IF_ERROR(StageFirstHostKvLayer(step));
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = layers_[layer];
    const T* residual_add = layer == 0 ? nullptr : as(ws_.proj);
    if (w8a8) {
      CUDA_RETURN_IF_ERROR(cuda::AddRmsNormFp8(ws_.residual, residual_add, w.input_norm, rows, h, eps, ws_.x8,
                                               ws_.x8_scales, stream_, launch));
      RETURN_IF_ERROR(ProjectW8A8<T>(w8a8_path, w.qkv8, rows, h, qkv, ws_.wide));
    } else {
      CUDA_RETURN_IF_ERROR(cuda::AddRmsNorm(ws_.residual, residual_add, w.input_norm, nullptr, rows, h, eps,
                                            as(ws_.normed), stream_, launch));
      RETURN_IF_ERROR(Project(as(ws_.normed), w.qkv, w.qkv8, rows, h, qkv, ws_.wide));
    }
    cuda::QkvPostParams<T> post;
    post.qkv = as(ws_.wide);
    post.bias = w.qkv_bias;
    post.q_norm = w.q_norm;
    post.k_norm = w.k_norm;
    post.inv_freq = inv_freq_;
    post.norm_eps = eps;
    post.num_heads = num_heads;
    post.layer = static_cast<int32_t>(layer);
    post.q_out = as(ws_.q);
    CUDA_RETURN_IF_ERROR(cuda::QkvPost(post, step_tokens, kv, stream_, launch));
    ASSIGN_OR_RETURN(const void* staged, StageHostKvLayer(step, layer));
    kv.staged = static_cast<const T*>(staged);
    if (step.path == AttentionPath::kFast) {
      if (step.decode_rows > 0) {
        cuda::DecodeAttentionParams<T> attn;
        attn.q = as(ws_.q);
        attn.out = as(ws_.attn);
        attn.rows = dev(m.rows);
        attn.num_rows = step.decode_rows;
        attn.num_heads = num_heads;
        attn.layer = static_cast<int32_t>(layer);
        attn.max_splits = step.decode_splits;
        attn.partial_out = decode_partial_out_;
        attn.partial_ml = decode_partial_ml_;
        attn.split_counters = decode_split_counters_;
        CUDA_RETURN_IF_ERROR(cuda::DecodeAttention(attn, step_tokens, kv, stream_, launch));
      }
      if (step.prefill_tiles > 0) {
        cuda::PrefillAttentionParams<T> attn;
        attn.q = as(ws_.q);
        attn.out = as(ws_.attn);
        attn.tiles = reinterpret_cast<const cuda::PrefillTile*>(ws_.meta + m.tiles);
        attn.num_tiles = step.prefill_tiles;
        attn.num_heads = num_heads;
        attn.layer = static_cast<int32_t>(layer);
        CUDA_RETURN_IF_ERROR(cuda::PrefillAttention(attn, kv, stream_));
      }
    } else {
      cuda::AttentionSplits splits{dev(m.num_splits), dev(m.partial_base), ws_.partial_out,
                                   ws_.partial_ml};
      cuda::AttentionParams<T> attn;
      attn.q = as(ws_.q);
      attn.out = as(ws_.attn);
      attn.items = reinterpret_cast<const cuda::AttentionItem*>(ws_.meta + m.items);
      attn.num_items = static_cast<int32_t>(plan_.items.size());
      attn.num_heads = num_heads;
      attn.layer = static_cast<int32_t>(layer);
      attn.max_rows = plan_.max_rows;
      attn.any_split = plan_.any_split;
      CUDA_RETURN_IF_ERROR(cuda::PagedAttention(attn, step_tokens, kv, splits, stream_));
    }
    RETURN_IF_ERROR(ReleaseHostKvLayer(step, layer));
    if (w8a8) {
      CUDA_RETURN_IF_ERROR(
          cuda::QuantizeActivationsFp8(as(ws_.attn), rows, q_dim, ws_.x8, ws_.x8_scales, stream_, launch));
      RETURN_IF_ERROR(ProjectW8A8<T>(w8a8_path, w.o8, rows, q_dim, h, ws_.proj));
      CUDA_RETURN_IF_ERROR(cuda::AddRmsNormFp8(ws_.residual, as(ws_.proj), w.post_norm, rows, h, eps, ws_.x8,
                                               ws_.x8_scales, stream_, launch));
      RETURN_IF_ERROR(ProjectW8A8<T>(w8a8_path, w.gate_up8, rows, h, 2 * inter, ws_.wide));
      CUDA_RETURN_IF_ERROR(cuda::SiluMulFp8(as(ws_.wide), rows, inter, ws_.x8, ws_.x8_scales, stream_, launch));
      RETURN_IF_ERROR(ProjectW8A8<T>(w8a8_path, w.down8, rows, inter, h, ws_.proj));
      continue;
    }
    RETURN_IF_ERROR(Project(as(ws_.attn), w.o, w.o8, rows, q_dim, h, ws_.proj));
    CUDA_RETURN_IF_ERROR(cuda::AddRmsNorm(ws_.residual, as(ws_.proj), w.post_norm, nullptr,
                                          rows, h, eps, as(ws_.normed), stream_, launch));
    if (fp8_weights_ && rows <= kGemvRowsLimit && cuda::GemvFp8Supported(rows, h, ws_.normed, w.gate_up8.codes)) {
      CUDA_RETURN_IF_ERROR(cuda::GemvSiluMulFp8(as(ws_.normed), rows, w.gate_up8.codes, w.gate_up8.scales, inter, h,
                                                as(ws_.act), stream_, launch));
    } else if (fp8_weights_ && !UseSkinnyGemm<T>(rows, h, 2 * inter, ws_.normed, w.gate_up8.codes, /*fp8=*/true) &&
               rows <= cuda::kSkinnyFp8MaxRows &&
               cuda::SkinnyFp8Supported(rows, h, ws_.normed, w.gate_up8.codes)) {
      CUDA_RETURN_IF_ERROR(cuda::SkinnyFp8(as(ws_.normed), rows, w.gate_up8.codes, w.gate_up8.scales, 2 * inter, h,
                                           cuda::SkinnyFp8Splits(2 * inter, h, sm_count_), fp8_partial_,
                                           /*silu_mul=*/true, as(ws_.act), stream_, launch));
    } else if (!fp8_weights_ && rows <= kGemvRowsLimit && cuda::GemvSupported(rows, h, ws_.normed, w.gate_up)) {
      CUDA_RETURN_IF_ERROR(cuda::GemvSiluMul(as(ws_.normed), as(w.gate_up), rows, h, inter,
                                             as(ws_.act), stream_, launch));
    } else {
      RETURN_IF_ERROR(Project(as(ws_.normed), w.gate_up, w.gate_up8, rows, h, 2 * inter, ws_.wide));
      CUDA_RETURN_IF_ERROR(
          cuda::SiluMul(as(ws_.wide), rows, inter, as(ws_.act), stream_, launch));
    }
    RETURN_IF_ERROR(Project(as(ws_.act), w.down, w.down8, rows, inter, h, ws_.proj));
  }
  if (step.logit_rows == 0) return absl::OkStatus();
  const int n = step.logit_rows;
  CUDA_RETURN_IF_ERROR(cuda::AddRmsNorm(ws_.residual, as(ws_.proj), final_norm_,
                                        dev(m.logit_rows), n, h, eps, as(ws_.normed), stream_,
                                        launch));
  const int vocab = static_cast<int>(config_.vocab_size);
  RETURN_IF_ERROR(Gemm(as(ws_.normed), as(lm_head_), n, h, vocab, ws_.logits, true));
  if (step.masks != nullptr) {
    // Grammar masks, before anything picks from the logits. Computed on the host during
    // the forward enqueued above; waiting here blocks the host only, while the GPU runs.
    step.masks->Wait();
    const int words = step.masks->words_per_row;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        ws_.masks, step.masks->words + static_cast<size_t>(step.first_slot) * static_cast<size_t>(words),
        static_cast<size_t>(step.num_slots) * static_cast<size_t>(words) * sizeof(uint32_t),
        cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN_IF_ERROR(cuda::ApplyTokenMasks(ws_.logits, n, vocab, dev(m.mask_slots), ws_.masks, words, stream_));
  }
  if (step.greedy) {  // token ids picked on the device (sampled or argmax); only they come back
    if (step.sampled) {
      CUDA_RETURN_IF_ERROR(cuda::SampleRows(
          ws_.logits, n, vocab, reinterpret_cast<const cuda::SampleParams*>(ws_.meta + m.sampling),
          ws_.token_ids, stream_, launch));
    } else {
      CUDA_RETURN_IF_ERROR(cuda::ArgmaxRows(ws_.logits, n, vocab, ws_.argmax_scratch,
                                            ws_.token_ids, stream_, launch));
    }
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(ids_host_, ws_.token_ids, n * sizeof(int32_t),
                                         cudaMemcpyDeviceToHost, stream_));
  } else if (logits_out != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(logits_out, ws_.logits,
                                         static_cast<size_t>(n) * vocab * sizeof(float),
                                         cudaMemcpyDeviceToHost, stream_));
  }
  return absl::OkStatus();
}

absl::StatusOr<cudaGraphExec_t> CudaBackend::DecodeGraph(const StepLaunch& step) {
  const std::pair<int64_t, bool> key{step.rows, step.greedy};
  for (const auto& [k, exec] : graphs_) {
    if (k == key) return exec;
  }
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = EnqueueForward(step, nullptr);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!enqueued.ok() || ended != cudaSuccess) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (!enqueued.ok()) return enqueued;
    CUDA_RETURN_IF_ERROR(ended);
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_RETURN_IF_ERROR(made);
  graphs_.emplace_back(key, exec);
  return exec;
}

absl::Status CudaBackend::RunStep(const ForwardBatch& piece, std::vector<float>* logits,
                                  std::vector<int32_t>* token_ids,
                                  std::span<const RowSampling> sampling, const TokenMasks* masks,
                                  size_t first_row, const ChainPiece* chain) {
  const int64_t num_chunks = static_cast<int64_t>(piece.chunks.size());
  if (num_chunks == 0) return absl::OkStatus();
  const bool greedy = token_ids != nullptr;
  bool decode_only = true;
  int64_t real_logits = 0;
  for (const SequenceChunk& chunk : piece.chunks) {
    // A streamed step is never captured: its gathers change with the host block count.
    decode_only = decode_only && chunk.tokens.size() == 1 && chunk.need_logits && chunk.host_kv.empty();
    real_logits += static_cast<int64_t>(chunk.num_logit_rows());
  }
  // Graphs replay greedy decode steps whole, and the forward of sampler-chain decode steps
  // (the chain then runs after the graph); never masked steps: their masks are waited for
  // between the forward and the pick, which a graph launch cannot do.
  bool masked = false;
  for (int64_t r = 0; (greedy || chain != nullptr) && masks != nullptr && r < real_logits; ++r) {
    masked = masked || masks->Row(first_row + static_cast<size_t>(r)) != nullptr;
  }
  const int64_t bucket = graphs_enabled_ && fast_attention_ && decode_only && !masked &&
                                 ((greedy && sampling.empty()) || chain != nullptr)
                             ? GraphBucket(num_chunks)
                             : 0;
  ASSIGN_OR_RETURN(StepLaunch step, PrepareStep(piece, bucket, greedy, sampling,
                                                greedy || chain != nullptr ? masks : nullptr, first_row));

  RETURN_IF_ERROR(ApplyPrefetchWait());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(ws_.meta, meta_host_, step.meta.bytes, cudaMemcpyHostToDevice, stream_));
  bool ran = false;
  if (bucket > 0) {
    absl::StatusOr<cudaGraphExec_t> exec = DecodeGraph(step);
    if (exec.ok()) {
      CUDA_RETURN_IF_ERROR(cudaGraphLaunch(*exec, stream_));
      ++graph_replays_;
      ran = true;
    } else {
      // A graph that cannot be captured is not an error of the step: run it eagerly and
      // keep graphs off from now on (graph_error_ says why).
      graphs_enabled_ = false;
      graph_error_ = std::string(exec.status().message());
    }
  }
  float* logits_out = nullptr;
  if (logits != nullptr && step.logit_rows > 0) {
    const size_t old = logits->size();
    logits->resize(old + static_cast<size_t>(step.logit_rows) * config_.vocab_size);
    logits_out = logits->data() + old;
  }
  if (!ran) RETURN_IF_ERROR(EnqueueForward(step, logits_out));
  CountHostKvStep(step);
  if (chain != nullptr) {
    RETURN_IF_ERROR(chain_->Run(ws_.logits, chain->first_row, real_logits, *chain->batch, chain->samples,
                                chain->result, stream_, options_.cuda.launch));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(compute_done_, stream_));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (greedy) token_ids->insert(token_ids->end(), ids_host_, ids_host_ + real_logits);
  memory_.SampleProcess();
  return HarvestTimings(/*block=*/false);
}

}  // namespace kvtier
