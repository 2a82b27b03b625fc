// DecodeGraphCache (see decode_graph_cache.h): buckets, capture, replay.
#include "backend/cuda/decode_graph_cache.h"

#include "backend/cuda/cuda_check.h"
#include "common/status_macros.h"

namespace kvtier::cuda {
namespace {

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

int64_t DecodeGraphCache::Bucket(int64_t chunks) const {
  if (chunks <= 0) return 0;
  const int64_t bucket = BucketFor(chunks);
  return bucket <= max_chunks_ ? bucket : 0;
}

absl::StatusOr<cudaGraphExec_t> DecodeGraphCache::Capture(cudaStream_t stream,
                                                          absl::FunctionRef<absl::Status()> enqueue) {
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
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
  return exec;
}

absl::StatusOr<bool> DecodeGraphCache::Replay(int64_t rows, bool with_pick, cudaStream_t stream,
                                              absl::FunctionRef<absl::Status()> enqueue) {
  const std::pair<int64_t, bool> key{rows, with_pick};
  cudaGraphExec_t exec = nullptr;
  for (const auto& [k, e] : graphs_) {
    if (k == key) {
      exec = e;
      break;
    }
  }
  if (exec == nullptr) {
    absl::StatusOr<cudaGraphExec_t> captured = Capture(stream, enqueue);
    if (!captured.ok()) {
      // A graph that cannot be captured is not an error of the step: it runs eagerly, and
      // graphs stay off from now on.
      enabled_ = false;
      error_ = std::string(captured.status().message());
      return false;
    }
    exec = *captured;
    graphs_.emplace_back(key, exec);
  }
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, stream));
  ++replays_;
  return true;
}

void DecodeGraphCache::Drop() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

}  // namespace kvtier::cuda
