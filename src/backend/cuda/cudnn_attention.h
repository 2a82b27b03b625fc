// CudnnAttention: causal GQA attention of one prefill chunk on cuDNN's fused flash-attention
// engine (the graph of cudnn_graph.h), bf16, on contiguous buffers: Q and O (sq, heads,
// head_dim) as the backend's workspace holds them, K and V (keys, kv_heads, head_dim) as
// KvGather leaves them. The chunk's queries sit at the last sq of skv key positions.
//
// Plans are cached per (sq, PlanKeys(skv, max_keys)), at most Options::max_plans of them, the
// least recently used dropped first. Keys are bucketed rather than exact because a long
// prompt's chunks each see a different skv (32 chunks of 1,024 over 32k keys: 32 shapes per
// prompt and new ones for every prompt length), while the chunk length sq is mostly the step's
// token budget, and a plan costs tens of milliseconds of host time to build. The buckets are
// powers of two (the last one max_keys): the extra keys are masked (the graph's padded form,
// AttentionMask::kPadded: the chunk's sq and skv are device tensors the run writes, so one
// plan serves every skv of its bucket) and cuDNN's kernel stops at the chunk's own skv, so a
// coarse bucket costs no attention time. A shape that does not finalize is remembered as such.
// Every plan runs in the one workspace given at Create (allocated by the caller, inside
// gpu_mem_limit), less its last kReservedBytes, which hold those two lengths; a plan wanting
// more is refused. One thread at a time.
#ifndef KVTIER_BACKEND_CUDA_CUDNN_ATTENTION_H_
#define KVTIER_BACKEND_CUDA_CUDNN_ATTENTION_H_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/cuda/attention_fp8_inputs.h"
#include "backend/cuda/cudnn_library.h"

namespace kvtier::cuda {

class CudnnAttention {
 public:
  struct Options {
    int32_t num_heads = 0;
    int32_t num_kv_heads = 0;
    int32_t head_dim = 0;
    int32_t max_plans = 64;
    int64_t max_keys = 0;  // the longest skv a chunk has (the last bucket's keys); 0: no bound
    // Q, K, V and O as E4M3 codes with one scale each (BuildCausalAttentionGraphFp8; cuDNN 9
    // on Hopper offers no engine for this graph with O in bf16): Run then takes the factors
    // the graph reads.
    bool fp8 = false;
  };
  // The head_dim values cuDNN's fused attention takes (a multiple of 8, at most 128 on
  // every cuDNN 9 and GPU it runs on).
  static bool SupportsHeadDim(int32_t head_dim) { return head_dim > 0 && head_dim <= 128 && head_dim % 8 == 0; }
  // The end of the workspace that holds the chunk's sq and skv for the graph.
  static constexpr int64_t kReservedBytes = 256;
  // Key rows of the plan that serves skv keys when no chunk has more than max_keys (0: no
  // bound): the power of two at or above skv (at least 64), or max_keys rounded up to 64
  // where that is less; >= skv (see the file comment).
  static int64_t PlanKeys(int64_t skv, int64_t max_keys);

  // A cuDNN handle on `stream`; plans run in `workspace` (device, workspace_bytes, at least
  // kReservedBytes). InvalidArgument for a bad shape or workspace; Internal with cuDNN's message when no handle is made
  // (no GPU, or a cuDNN built for another CUDA).
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create(const CudnnLibrary& library, const Options& options,
                                                                cudaStream_t stream, void* workspace,
                                                                int64_t workspace_bytes);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Builds (or finds) the plan for sq queries over skv keys. FailedPrecondition with
  // cuDNN's message when the graph does not finalize on this GPU and cuDNN,
  // ResourceExhausted when its workspace exceeds the one given at Create.
  absl::Status Prepare(int64_t sq, int64_t skv);

  // Enqueues out = softmax(scale * q k^T, causal) v for sq queries at positions
  // skv - sq .. skv - 1. k and v hold PlanKeys(skv, max_keys) rows (those from skv on are not read
  // into the result). Prepares the plan when it has not been. With Options::fp8, q, k, v and out
  // are E4M3 codes and fp8_factors (device, attention_fp8_inputs.h) holds their scales; else
  // bf16 and fp8_factors is not read.
  absl::Status Run(const void* q, const void* k, const void* v, void* out, int64_t sq, int64_t skv, float scale,
                   Fp8AttentionFactors* fp8_factors = nullptr);

  // Graphs built into plans (or refused) so far, a shape once while it stays cached, and the
  // host seconds that took (a new shape's first chunk waits for it). Any thread.
  int64_t plans_built() const { return plans_built_.load(std::memory_order_relaxed); }
  double plan_build_seconds() const { return plan_build_ns_.load(std::memory_order_relaxed) * 1e-9; }
  const CudnnLibrary& library() const { return library_; }

 private:
  struct Plan {
    absl::Status status;  // why the shape has no plan, or ok
    cudnnBackendDescriptor_t plan = nullptr;
    std::vector<cudnnBackendDescriptor_t> descriptors;  // everything the plan was built from
    std::list<std::pair<int64_t, int64_t>>::iterator lru;
  };
  using Key = std::pair<int64_t, int64_t>;  // (sq, plan keys)

  CudnnAttention(const CudnnLibrary& library, const Options& options, cudnnHandle_t handle, cudaStream_t stream,
                 void* workspace, int64_t workspace_bytes)
      : library_(library), options_(options), handle_(handle), stream_(stream), workspace_(workspace),
        workspace_bytes_(workspace_bytes - kReservedBytes),
        seq_lens_(static_cast<int32_t*>(workspace) + (workspace_bytes - kReservedBytes) / 4) {}
  absl::StatusOr<Plan*> Find(int64_t sq, int64_t skv);
  void Build(const Key& key, Plan* plan);
  void Destroy(Plan* plan);

  const CudnnLibrary& library_;
  const Options options_;
  cudnnHandle_t handle_;
  cudaStream_t stream_;
  void* workspace_;
  int64_t workspace_bytes_;  // for the plans
  int32_t* seq_lens_;        // device: sq, skv of the run

  std::map<Key, Plan> plans_;
  std::list<Key> lru_;  // most recently used first
  std::atomic<int64_t> plans_built_{0};
  std::atomic<int64_t> plan_build_ns_{0};
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_CUDNN_ATTENTION_H_
