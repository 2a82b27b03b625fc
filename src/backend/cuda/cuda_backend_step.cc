// CudaBackend's stepping (see cuda_backend.h): the forward's entry points describe their
// step (StepSpec) and run it piece by piece; RunStep plans a piece, copies its metadata,
// replays its decode graph or enqueues the forward, and waits for it.
#include <algorithm>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/split_batch.h"
#include "common/status_macros.h"

namespace kvtier {

absl::Status CudaBackend::ValidateBatch(const ForwardBatch& batch) const {
  if (pool_.base == nullptr) return absl::FailedPreconditionError("KV pool not allocated");
  absl::flat_hash_set<int32_t> written;  // blocks the batch writes, with groups
  for (size_t c = 0; c < batch.chunks.size(); ++c) {
    const SequenceChunk& chunk = batch.chunks[c];
    if (chunk.tokens.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " has no tokens"));
    }
    if (chunk.start_position < 0) {
      return absl::InvalidArgumentError(absl::StrCat("chunk ", c, " has negative start"));
    }
    const int64_t end = chunk.start_position + static_cast<int64_t>(chunk.tokens.size());
    if (end > INT32_MAX) return absl::InvalidArgumentError("context too long");
    for (int32_t token : chunk.tokens) {
      if (token < 0 || token >= config_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("token ", token, " out of range [0, ", config_.vocab_size, ")"));
      }
    }
    if (options_.kv_grouping.enabled() || !chunk.group_tables.empty()) {
      RETURN_IF_ERROR(ValidateGroupedChunk(chunk, c, &written));
      continue;
    }
    const int64_t blocks = (end + layout_.block_tokens - 1) / layout_.block_tokens;
    RETURN_IF_ERROR(host_kv_->ValidateChunk(chunk, c));
    const int64_t device_blocks = blocks - chunk.host_kv.num_blocks();
    if (static_cast<int64_t>(chunk.block_table.size()) < device_blocks) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk ", c, " block table has ", chunk.block_table.size(), " entries, needs ", device_blocks));
    }
    for (int64_t j = 0; j < device_blocks; ++j) RETURN_IF_ERROR(pool_.Validate(chunk.block_table[j]));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::ValidateGroupedChunk(const SequenceChunk& chunk, size_t c,
                                               absl::flat_hash_set<int32_t>* written) const {
  const std::string name = absl::StrCat("chunk ", c);
  if (!options_.kv_grouping.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": group tables without a grouped KV layout"));
  }
  if (!chunk.host_kv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": host-resident blocks outside the group tables"));
  }
  // The streamer stages one layer of every host block for every layer (one table's
  // layers); a group's host blocks would need its own slots and layer index.
  for (const GroupKvTable& table : chunk.group_tables) {
    if (!table.host.empty()) {
      return absl::UnimplementedError(absl::StrCat(
          "cuda backend: ", name, " reads host-resident KV blocks in a grouped KV layout, which is not supported"));
    }
  }
  const int64_t end = chunk.start_position + static_cast<int64_t>(chunk.tokens.size());
  return ValidateGroupTables(options_.kv_grouping, chunk.group_tables, chunk.start_position, end, layout_.block_tokens,
                             pool_.num_blocks, written, name);
}

template <typename Fn>
absl::Status CudaBackend::RunAll(const ForwardBatch& batch, Fn&& run_piece) {
  RETURN_IF_ERROR(ValidateBatch(batch));
  int64_t tokens = 0, host_blocks = 0;
  for (const SequenceChunk& c : batch.chunks) {
    tokens += static_cast<int64_t>(c.tokens.size());
    host_blocks += c.host_kv.num_blocks();
  }
  const int64_t host_slots = host_kv_->slots();
  if (tokens <= capacity_.max_tokens && static_cast<int64_t>(batch.chunks.size()) <= capacity_.max_chunks &&
      static_cast<int64_t>(batch.num_logit_rows()) <= capacity_.max_chunks && host_blocks <= host_slots) {
    return run_piece(batch);
  }
  for (const ForwardBatch& piece : cuda::SplitBatch(batch, capacity_.max_tokens, capacity_.max_chunks, host_slots)) {
    RETURN_IF_ERROR(run_piece(piece));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Forward(const ForwardBatch& batch, std::vector<float>* logits) {
  logits->clear();
  return RunAll(batch, [&](const ForwardBatch& piece) {
    cuda::StepSpec spec;
    spec.output = cuda::StepOutput::kLogits;
    const size_t rows = piece.num_logit_rows();
    if (rows > 0) {
      const size_t old = logits->size();
      logits->resize(old + rows * static_cast<size_t>(config_.vocab_size));
      spec.logits = logits->data() + old;
    }
    return RunStep(piece, spec).status();
  });
}

absl::Status CudaBackend::RunStepForIds(const ForwardBatch& piece, const cuda::StepSpec& spec,
                                        std::vector<int32_t>* ids) {
  ASSIGN_OR_RETURN(std::span<const int32_t> picked, RunStep(piece, spec));
  ids->insert(ids->end(), picked.begin(), picked.end());
  return absl::OkStatus();
}

absl::Status CudaBackend::ForwardGreedy(const ForwardBatch& batch, std::vector<int32_t>* token_ids) {
  token_ids->clear();
  size_t next_row = 0;  // pieces keep chunk order: each takes the next logits rows
  return RunAll(batch, [&](const ForwardBatch& piece) {
    cuda::StepSpec spec;
    spec.output = cuda::StepOutput::kArgmax;
    spec.masks = batch.masks;
    spec.first_row = next_row;
    next_row += piece.num_logit_rows();
    return RunStepForIds(piece, spec, token_ids);
  });
}

absl::Status CudaBackend::ForwardSampled(const ForwardBatch& batch, std::span<const RowSampling> rows,
                                         std::vector<int32_t>* token_ids) {
  RETURN_IF_ERROR(ValidateRowSampling(rows, batch.num_logit_rows()));
  token_ids->clear();
  size_t next_row = 0;  // pieces keep chunk order: each takes the next rows
  return RunAll(batch, [&](const ForwardBatch& piece) {
    cuda::StepSpec spec;
    spec.output = cuda::StepOutput::kSampled;
    spec.sampling = rows.subspan(next_row, piece.num_logit_rows());
    spec.masks = batch.masks;
    spec.first_row = next_row;
    next_row += spec.sampling.size();
    return RunStepForIds(piece, spec, token_ids);
  });
}

absl::Status CudaBackend::ForwardAndSample(const ForwardBatch& batch, const SamplingBatch& sampling,
                                           SamplingResult* result) {
  RETURN_IF_ERROR(ValidateSamplingBatch(sampling, batch.num_logit_rows(), config_.vocab_size));
  if (!sampling.scores.empty()) return Backend::ForwardAndSample(batch, sampling, result);
  result->Clear();
  result->tokens.assign(sampling.samples.size(), 0);
  result->sample_logprobs.assign(sampling.samples.size(), LogprobEntry{});
  // Samples by row, so each piece takes a contiguous run of them.
  std::vector<int32_t> order(sampling.samples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return sampling.samples[static_cast<size_t>(a)].logits_row < sampling.samples[static_cast<size_t>(b)].logits_row;
  });
  int64_t first_row = 0;
  size_t next = 0;
  return RunAll(batch, [&](const ForwardBatch& piece) {
    const int64_t rows = static_cast<int64_t>(piece.num_logit_rows());
    size_t end = next;
    while (end < order.size() && sampling.samples[static_cast<size_t>(order[end])].logits_row < first_row + rows) ++end;
    cuda::StepSpec spec;
    spec.output = cuda::StepOutput::kChain;
    spec.chain = {&sampling, std::span<const int32_t>(order).subspan(next, end - next), first_row, result};
    spec.masks = batch.masks;
    spec.first_row = static_cast<size_t>(first_row);
    next = end;
    first_row += rows;
    return RunStep(piece, spec).status();
  });
}

absl::StatusOr<std::span<const int32_t>> CudaBackend::RunStep(const ForwardBatch& piece, cuda::StepSpec spec) {
  const int64_t num_chunks = static_cast<int64_t>(piece.chunks.size());
  if (num_chunks == 0) return std::span<const int32_t>();
  const bool picks_ids = spec.picks_ids();
  const bool chain = spec.output == cuda::StepOutput::kChain;
  const bool sampled_rows = spec.output == cuda::StepOutput::kSampled && !spec.sampling.empty();
  bool decode_only = true;
  int64_t real_logits = 0;
  for (const SequenceChunk& chunk : piece.chunks) {
    // A streamed step is never captured: its gathers change with the host block count.
    decode_only = decode_only && chunk.tokens.size() == 1 && chunk.need_logits && chunk.host_kv.empty();
    real_logits += static_cast<int64_t>(chunk.num_logit_rows());
  }
  // Graphs replay argmax decode steps whole, and the forward of sampler-chain decode steps
  // (the chain then runs after the graph); never masked steps: their masks are waited for
  // between the forward and the pick, which a graph launch cannot do.
  bool masked = false;
  for (int64_t r = 0; (picks_ids || chain) && spec.masks != nullptr && r < real_logits; ++r) {
    masked = masked || spec.masks->Row(spec.first_row + static_cast<size_t>(r)) != nullptr;
  }
  const int64_t bucket =
      graphs_.enabled() && kernels_.fast_attention && decode_only && !masked && ((picks_ids && !sampled_rows) || chain)
          ? graphs_.Bucket(num_chunks)
          : 0;
  ASSIGN_OR_RETURN(cuda::StepLaunch step, planner_->Prepare(piece, bucket, pool_.scratch_block, spec));

  RETURN_IF_ERROR(copies_->ApplyPrefetchWait());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(ws_.meta, planner_->meta_host(), step.meta.bytes, cudaMemcpyHostToDevice, stream_));
  bool ran = false;
  if (bucket > 0) {
    ASSIGN_OR_RETURN(ran,
                     graphs_.Replay(step.rows, step.greedy, stream_, [&] { return forward_->Enqueue(step, nullptr); }));
  }
  float* logits_out = spec.output == cuda::StepOutput::kLogits && step.logit_rows > 0 ? spec.logits : nullptr;
  if (!ran) RETURN_IF_ERROR(forward_->Enqueue(step, logits_out));
  host_kv_->CountStep(step);
  if (chain) {
    RETURN_IF_ERROR(chain_->Run(ws_.logits, spec.chain.first_row, real_logits, *spec.chain.batch, spec.chain.samples,
                                spec.chain.result, stream_, options_.cuda.launch));
  }
  RETURN_IF_ERROR(copies_->RecordForwardDone());
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  memory_.SampleProcess();
  RETURN_IF_ERROR(copies_->HarvestTimings(/*block=*/false));
  if (!picks_ids) return std::span<const int32_t>();
  return std::span<const int32_t>(ws_.ids_host, static_cast<size_t>(real_logits));
}

}  // namespace kvtier
