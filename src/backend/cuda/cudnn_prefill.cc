// CudnnPrefill (see cudnn_prefill.h).
#include "backend/cuda/cudnn_prefill.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_gather.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

namespace {

// Rows of the K and V scratch: the longest context's plan.
int64_t ScratchRows(const CudnnPrefill::Options& options) {
  return CudnnAttention::PlanKeys(options.max_context, options.max_context);
}

// Bytes of the K (or V) scratch: its rows of every kv head.
size_t KvScratchSideBytes(const CudnnPrefill::Options& options) {
  return static_cast<size_t>(ScratchRows(options)) * options.num_kv_heads * options.head_dim * sizeof(bf16);
}

}  // namespace

int64_t CudnnPrefill::ScratchBytes(const Options& options) {
  return 2 * static_cast<int64_t>(KvScratchSideBytes(options)) + kWorkspaceBytes;
}

absl::StatusOr<std::unique_ptr<CudnnPrefill>> CudnnPrefill::Create(const CudnnLibrary& library,
                                                                   const Options& options, cudaStream_t stream,
                                                                   DeviceMemoryAccount& memory) {
  if ((options.head_dim != 64 && options.head_dim != 128) || options.num_kv_heads <= 0 ||
      options.num_heads % options.num_kv_heads != 0 || options.max_context <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("cuDNN prefill: head_dim ", options.head_dim, ", ",
                                                   options.num_heads, " heads over ", options.num_kv_heads,
                                                   " kv heads, context ", options.max_context, " not supported"));
  }
  const size_t side = KvScratchSideBytes(options);
  // What was allocated goes back to the account when a later part fails.
  void* buffers[3] = {nullptr, nullptr, nullptr};
  const size_t sizes[3] = {static_cast<size_t>(kWorkspaceBytes), side, side};
  const char* names[3] = {"cuDNN attention workspace", "cuDNN attention K scratch", "cuDNN attention V scratch"};
  auto release = [&] {
    for (void* b : buffers) memory.Free(b);
  };
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<void*> b = memory.Allocate(sizes[i], names[i]);
    if (!b.ok()) {
      release();
      return b.status();
    }
    buffers[i] = *b;
  }
  CudnnAttention::Options attention;
  attention.num_heads = options.num_heads;
  attention.num_kv_heads = options.num_kv_heads;
  attention.head_dim = options.head_dim;
  attention.max_keys = options.max_context;
  absl::StatusOr<std::unique_ptr<CudnnAttention>> runner =
      CudnnAttention::Create(library, attention, stream, buffers[0], kWorkspaceBytes);
  if (!runner.ok()) {
    release();
    return runner.status();
  }
  return std::unique_ptr<CudnnPrefill>(
      new CudnnPrefill(options, stream, std::move(*runner), static_cast<bf16*>(buffers[1]),
                       static_cast<bf16*>(buffers[2])));
}

void CudnnPrefill::Refuse(const std::string& reason) {
  steps_refused_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  if (first_refusal_.empty()) first_refusal_ = reason;
}

bool CudnnPrefill::PrepareStep(std::span<const PrefillChunk> chunks) {
  for (const PrefillChunk& c : chunks) {
    if (c.num_tokens < options_.min_chunk_tokens || c.start_position + c.num_tokens < options_.min_context) {
      steps_of_short_chunks_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
  }
  const int64_t rows = ScratchRows(options_);
  for (const PrefillChunk& c : chunks) {
    const int64_t skv = c.start_position + c.num_tokens;
    if (CudnnAttention::PlanKeys(skv, options_.max_context) > rows) {
      Refuse(absl::StrCat("a context of ", skv, " positions is longer than the scratch's ", rows));
      return false;
    }
    if (const absl::Status s = attention_->Prepare(c.num_tokens, skv); !s.ok()) {
      Refuse(std::string(s.message()));
      return false;
    }
  }
  steps_on_cudnn_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void CudnnPrefill::BuildPlansForChunks(int64_t chunk_tokens) {
  const int64_t last = ScratchRows(options_);
  // The first bucket a step PrepareStep accepts can reach.
  for (int64_t skv = std::min(std::max(chunk_tokens, options_.min_context), options_.max_context); skv > 0;) {
    const int64_t keys = CudnnAttention::PlanKeys(skv, options_.max_context);
    if (!attention_->Prepare(std::min(chunk_tokens, skv), skv).ok() || keys >= last) break;
    skv = keys + 1;
  }
}

absl::Status CudnnPrefill::EnqueueLayer(std::span<const PrefillChunk> chunks, int32_t layer, const bf16* q, bf16* out,
                                        const PagedKv<bf16>& kv) {
  const int64_t row = static_cast<int64_t>(options_.num_heads) * options_.head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(options_.head_dim)));
  for (const PrefillChunk& c : chunks) {
    const int64_t skv = c.start_position + c.num_tokens;
    KvGatherParams gather;
    gather.chunk = c.chunk;
    gather.layer = layer;
    gather.num_positions = skv;
    // The plan's rows past skv are masked, and cuDNN's kernel stops within the key tile that
    // holds skv: only that tile's tail is zeroed (a stale NaN there would leak through P x V),
    // not the whole bucket.
    gather.padded_positions = std::min(CudnnAttention::PlanKeys(skv, options_.max_context), (skv + 255) / 256 * 256);
    gather.k_out = k_;
    gather.v_out = v_;
    CUDA_RETURN_IF_ERROR(KvGather(gather, kv, stream_));
    RETURN_IF_ERROR(attention_->Run(q + c.token_begin * row, k_, v_, out + c.token_begin * row, c.num_tokens, skv,
                                    scale));
  }
  return absl::OkStatus();
}

std::string CudnnPrefill::Describe(const std::string& own) const {
  const std::string cudnn = absl::StrCat("cudnn ", attention_->library().VersionString());
  const std::string plans = absl::StrFormat("%d plans built in %.2f s", attention_->plans_built(),
                                            attention_->plan_build_seconds());
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t refused = steps_refused(), short_steps = steps_of_short_chunks();
  const bool on_cudnn = steps_on_cudnn() > 0 || refused + short_steps == 0;
  std::vector<std::string> notes;
  if (on_cudnn) notes.push_back(plans);
  if (short_steps > 0) {
    notes.push_back(absl::StrCat(short_steps, " steps with chunks under ", options_.min_chunk_tokens, " tokens or ",
                                 options_.min_context, " positions on ", own));
  }
  if (refused > 0) notes.push_back(absl::StrCat("cuDNN refused ", refused, " steps: ", first_refusal_));
  const std::string head = !on_cudnn ? own : refused + short_steps > 0 ? absl::StrCat(cudnn, " and ", own) : cudnn;
  return absl::StrCat(head, " (", absl::StrJoin(notes, "; "), ")");
}

}  // namespace kvtier::cuda
