// CudaBackend's warm-up (see cuda_backend.h): every kernel a step launches run once, every
// decode graph bucket instantiated and cuDNN's prefill plans built, so that no step pays for
// loading a module, capturing a graph or building a plan — and so that what loading them costs
// in device memory is measured before the KV pool is sized (device_memory_account.h).
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "common/status_macros.h"

namespace kvtier {

absl::Status CudaBackend::WarmUp() {
  if (pool_.base == nullptr) return absl::FailedPreconditionError("KV pool not allocated");
  // RunStep directly: the batches name the scratch block, which ValidateBatch (rightly)
  // refuses from callers. Every position maps to it; what lands there is never read.
  cuda::StepSpec argmax;
  argmax.output = cuda::StepOutput::kArgmax;
  std::vector<int32_t> tokens;
  std::vector<int32_t> table;
  for (int64_t n : {std::min<int64_t>(512, capacity_.max_tokens), capacity_.max_tokens}) {
    // Distinct ids spread over the vocabulary: a repeated token keeps every row identical
    // through every layer, so a mixture of experts would route them all to the same top-k
    // experts and leave the per-expert shapes of a real prompt (and their kernels) untouched.
    tokens.resize(n);
    for (int64_t i = 0; i < n; ++i) tokens[i] = static_cast<int32_t>((i * 2654435761LL) % config_.vocab_size);
    table.assign((n + layout_.block_tokens - 1) / layout_.block_tokens, pool_.scratch_block);
    ForwardBatch prefill;
    prefill.chunks.push_back({tokens, 0, table, true});
    RETURN_IF_ERROR(RunStep(prefill, argmax).status());
  }
  if (cudnn_ != nullptr) cudnn_->BuildPlansForChunks(capacity_.max_tokens);
  // The fp8 experts' GEMMs on the library path see any row count per expert: their algorithms
  // for every bucket, which the prefills above (all routes to the same experts) do not pick.
  if (kernels_.moe_library_fp8 && projections_->fp8_gemm() != nullptr) {
    const int h = static_cast<int>(config_.hidden_size), inter = static_cast<int>(config_.moe.expert_intermediate_size);
    const int routes = static_cast<int>(capacity_.max_tokens * config_.moe.top_k);
    RETURN_IF_ERROR(projections_->fp8_gemm()->PrepareVaryingRows(routes, h, 2 * inter, CUDA_R_16BF));
    RETURN_IF_ERROR(projections_->fp8_gemm()->PrepareVaryingRows(routes, inter, h, CUDA_R_16BF));
  }
  tokens.assign(1, 0);
  table.assign(1, pool_.scratch_block);
  for (int64_t rows = 1; rows <= capacity_.max_chunks; rows = graphs_.Bucket(rows) + 1) {
    const int64_t bucket = graphs_.Bucket(rows);
    if (bucket == 0) break;
    ForwardBatch decode;
    for (int64_t i = 0; i < bucket; ++i) decode.chunks.push_back({tokens, 0, table, true});
    RETURN_IF_ERROR(RunStep(decode, argmax).status());
  }
  memory_.Trace("warmed up");
  return absl::OkStatus();
}

absl::Status CudaBackend::MeasureWarmRuntime() {
  // A one-block pool stands in for the real one (the warm-up's tables name only the
  // scratch block); it, and the graphs captured against it, go before the pool comes.
  const int64_t block = static_cast<int64_t>(layout_.BlockBytes());
  memory_.Unreserve(block);
  absl::StatusOr<void*> stand_in = memory_.Allocate(static_cast<size_t>(block), "warm-up block");
  if (!stand_in.ok()) {
    memory_.Reserve(block);
    return stand_in.status();
  }
  pool_.base = *stand_in;
  pool_.scratch_block = 0;
  absl::Status status = WarmUp();
  if (status.ok()) status = memory_.MeasureRuntimeShare();
  graphs_.Drop();
  pool_.base = nullptr;
  pool_.scratch_block = -1;
  memory_.Free(*stand_in);
  memory_.Reserve(block);
  memory_.Trace("runtime share measured after warm-up");
  return status;
}

}  // namespace kvtier
