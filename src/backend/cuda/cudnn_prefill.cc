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
#include "backend/cuda/attention_fp8_inputs.h"
#include "backend/cuda/kv_gather.h"
#include "common/status_macros.h"

namespace kvtier::cuda {

namespace {

// Rows of the K and V scratch: the longest context's plan.
int64_t ScratchRows(const CudnnPrefill::Options& options) {
  return CudnnAttention::PlanKeys(options.max_context, options.max_context);
}

// Bytes of the K (or V) scratch: its rows of every kv head, bf16 or E4M3.
size_t KvScratchSideBytes(const CudnnPrefill::Options& options) {
  return static_cast<size_t>(ScratchRows(options)) * options.num_kv_heads * options.head_dim *
         (options.fp8_attention ? 1 : sizeof(bf16));
}

// Bytes of one chunk's codes (the fp8 queries', and likewise the output's) and of the factors
// (none without fp8_attention).
size_t ChunkCodesBytes(const CudnnPrefill::Options& options) {
  if (!options.fp8_attention) return 0;
  return static_cast<size_t>(options.max_chunk_tokens) * options.num_heads * options.head_dim;
}
size_t FactorsBytes(const CudnnPrefill::Options& options) {
  return options.fp8_attention ? 256 : 0;  // one Fp8AttentionFactors, the account's alignment
}

}  // namespace

int64_t CudnnPrefill::ScratchBytes(const Options& options) {
  return 2 * static_cast<int64_t>(KvScratchSideBytes(options)) + kWorkspaceBytes +
         static_cast<int64_t>(2 * ChunkCodesBytes(options) + FactorsBytes(options));
}

absl::StatusOr<std::unique_ptr<CudnnPrefill>> CudnnPrefill::Create(const CudnnLibrary& library,
                                                                   const Options& options, cudaStream_t stream,
                                                                   DeviceMemoryAccount& memory) {
  if ((options.head_dim != 64 && options.head_dim != 128) || options.num_kv_heads <= 0 ||
      options.num_heads % options.num_kv_heads != 0 || options.max_context <= 0 ||
      (options.fp8_attention && options.max_chunk_tokens <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN prefill: head_dim ", options.head_dim, ", ", options.num_heads, " heads over ", options.num_kv_heads,
        " kv heads, context ", options.max_context, options.fp8_attention ? ", fp8 chunks of " : "",
        options.fp8_attention ? absl::StrCat(options.max_chunk_tokens) : "", " not supported"));
  }
  const size_t side = KvScratchSideBytes(options);
  // What was allocated goes back to the account when a later part fails.
  constexpr int kBuffers = 6;
  void* buffers[kBuffers] = {nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  const size_t sizes[kBuffers] = {static_cast<size_t>(kWorkspaceBytes), side, side, ChunkCodesBytes(options),
                                  ChunkCodesBytes(options), FactorsBytes(options)};
  const char* names[kBuffers] = {"cuDNN attention workspace", "cuDNN attention K scratch", "cuDNN attention V scratch",
                                 "cuDNN attention fp8 queries", "cuDNN attention fp8 output",
                                 "cuDNN attention fp8 factors"};
  auto release = [&] {
    for (void* b : buffers) memory.Free(b);
  };
  for (int i = 0; i < kBuffers; ++i) {
    if (sizes[i] == 0) continue;
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
  attention.fp8 = options.fp8_attention;
  Scratch scratch{buffers[0], buffers[1], buffers[2], static_cast<uint8_t*>(buffers[3]),
                  static_cast<uint8_t*>(buffers[4]), static_cast<Fp8AttentionFactors*>(buffers[5])};
  if (scratch.factors != nullptr) {
    if (const cudaError_t e = InitFp8AttentionFactors(scratch.factors, stream); e != cudaSuccess) {
      release();
      return absl::InternalError(absl::StrCat("cuDNN prefill: fp8 factors: ", cudaGetErrorString(e)));
    }
  }
  absl::StatusOr<std::unique_ptr<CudnnAttention>> runner =
      CudnnAttention::Create(library, attention, stream, buffers[0], kWorkspaceBytes);
  if (!runner.ok()) {
    release();
    return runner.status();
  }
  return std::unique_ptr<CudnnPrefill>(
      new CudnnPrefill(options, stream, std::move(*runner), scratch, memory));
}

CudnnPrefill::~CudnnPrefill() {
  attention_.reset();  // its plans run in the workspace
  for (void* b : {scratch_.workspace, scratch_.k, scratch_.v, static_cast<void*>(scratch_.q_codes),
                  static_cast<void*>(scratch_.o_codes), static_cast<void*>(scratch_.factors)}) {
    memory_.Free(b);
  }
}

absl::Status CudnnPrefill::CheckPlan(int64_t chunk_tokens) {
  const int64_t n = std::min(chunk_tokens, options_.max_context);
  return attention_->Prepare(n, n);
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
    if (options_.fp8_attention && c.num_tokens > options_.max_chunk_tokens) {
      Refuse(absl::StrCat("a chunk of ", c.num_tokens, " tokens is longer than the fp8 queries' scratch's ",
                          options_.max_chunk_tokens));
      return false;
    }
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
  if (options_.fp8_attention && !kv.fp8) {
    return absl::FailedPreconditionError("cuDNN prefill: fp8 attention over a 16-bit KV pool");
  }
  for (const PrefillChunk& c : chunks) RETURN_IF_ERROR(EnqueueChunk(c, layer, q, out, kv));
  return absl::OkStatus();
}

absl::Status CudnnPrefill::EnqueueChunk(const PrefillChunk& c, int32_t layer, const bf16* q, bf16* out,
                                        const PagedKv<bf16>& kv) {
  const int64_t row = static_cast<int64_t>(options_.num_heads) * options_.head_dim;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(options_.head_dim)));
  const int64_t skv = c.start_position + c.num_tokens;
  // The plan's rows past skv are masked, and cuDNN's kernel stops within the key tile that
  // holds skv: only that tile's tail is zeroed (a stale NaN there would leak through P x V),
  // not the whole bucket.
  const int64_t padded = std::min(CudnnAttention::PlanKeys(skv, options_.max_context), (skv + 255) / 256 * 256);
  const bf16* chunk_q = q + c.token_begin * row;
  bf16* chunk_out = out + c.token_begin * row;
  if (options_.fp8_attention) {
    CUDA_RETURN_IF_ERROR(QuantizeQueriesFp8(chunk_q, c.num_tokens * row, scratch_.q_codes, scratch_.factors, stream_));
    KvGatherFp8Params gather;
    gather.chunk = c.chunk;
    gather.layer = layer;
    gather.num_positions = skv;
    gather.padded_positions = padded;
    gather.k_out = static_cast<uint8_t*>(scratch_.k);
    gather.v_out = static_cast<uint8_t*>(scratch_.v);
    CUDA_RETURN_IF_ERROR(KvGatherFp8(gather, kv, scratch_.factors, stream_));
    RETURN_IF_ERROR(attention_->Run(scratch_.q_codes, scratch_.k, scratch_.v, scratch_.o_codes, c.num_tokens, skv,
                                    scale, scratch_.factors));
    CUDA_RETURN_IF_ERROR(
        DequantizeOutputFp8(scratch_.o_codes, c.num_tokens * row, scratch_.factors, chunk_out, stream_));
    return absl::OkStatus();
  }
  KvGatherParams gather;
  gather.chunk = c.chunk;
  gather.layer = layer;
  gather.num_positions = skv;
  gather.padded_positions = padded;
  gather.k_out = static_cast<bf16*>(scratch_.k);
  gather.v_out = static_cast<bf16*>(scratch_.v);
  CUDA_RETURN_IF_ERROR(KvGather(gather, kv, stream_));
  return attention_->Run(chunk_q, scratch_.k, scratch_.v, chunk_out, c.num_tokens, skv, scale);
}

std::string CudnnPrefill::Describe(const std::string& own) const {
  const std::string cudnn = absl::StrCat("cudnn ", attention_->library().VersionString());
  const std::string plans = absl::StrFormat("%d plans built in %.2f s", attention_->plans_built(),
                                            attention_->plan_build_seconds());
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t refused = steps_refused(), short_steps = steps_of_short_chunks();
  const bool on_cudnn = steps_on_cudnn() > 0 || refused + short_steps == 0;
  std::vector<std::string> notes;
  if (on_cudnn && options_.fp8_attention) notes.push_back("fp8 Q, K, V and O");
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
