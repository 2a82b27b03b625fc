// DecodeGraphCache: pure decode steps replayed as CUDA graphs, one captured per batch bucket.
//
// Why graphs: a decode step is a few hundred launches of kernels that each run for a few
// microseconds; launched one by one from the host, the gaps between them cost about as much
// as the weight stream itself. A pure decode step is a fixed sequence of launches for a
// given batch size, so it is captured once per batch bucket and replayed: only the step
// metadata (token ids, positions, block tables) changes, and it lives in device memory at
// offsets fixed for the bucket (StepPlanner). Padding rows up to the bucket are one-token
// chunks on a scratch block nobody reads. One thread at a time (the backend's).
#ifndef KVTIER_BACKEND_CUDA_DECODE_GRAPH_CACHE_H_
#define KVTIER_BACKEND_CUDA_DECODE_GRAPH_CACHE_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvtier::cuda {

class DecodeGraphCache {
 public:
  // enabled: CudaOptions::decode_graphs; buckets go up to max_chunks rows.
  DecodeGraphCache(bool enabled, int64_t max_chunks) : enabled_(enabled), max_chunks_(max_chunks) {}
  ~DecodeGraphCache() { Drop(); }
  DecodeGraphCache(const DecodeGraphCache&) = delete;
  DecodeGraphCache& operator=(const DecodeGraphCache&) = delete;

  // The smallest bucket of at least `chunks` rows, or 0 when no graph covers it.
  int64_t Bucket(int64_t chunks) const;

  // Launches the graph of a step of `rows` rows (with the device pick at its end, or without
  // it for steps whose sampling runs after the graph) on `stream`, capturing `enqueue` (which
  // enqueues that step's forward on `stream`) the first time. false: the capture failed;
  // graphs are off from now on (error() says why) and the caller runs the step eagerly. A
  // failed launch of a captured graph is an error of the step.
  absl::StatusOr<bool> Replay(int64_t rows, bool with_pick, cudaStream_t stream,
                              absl::FunctionRef<absl::Status()> enqueue);
  // Destroys every captured graph (they hold the buffers they were captured with).
  void Drop();

  // Off runs every step eagerly (tests compare the two; benchmarks measure the gain).
  void set_enabled(bool on) { enabled_ = on; }
  bool enabled() const { return enabled_; }
  // Why graphs were turned off after a failed capture ("" if they were not).
  const std::string& error() const { return error_; }
  int64_t replays() const { return replays_; }

 private:
  absl::StatusOr<cudaGraphExec_t> Capture(cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue);

  bool enabled_;
  const int64_t max_chunks_;
  std::string error_;
  int64_t replays_ = 0;
  // (rows, with_pick) -> graph.
  std::vector<std::pair<std::pair<int64_t, bool>, cudaGraphExec_t>> graphs_;
};

}  // namespace kvtier::cuda

#endif  // KVTIER_BACKEND_CUDA_DECODE_GRAPH_CACHE_H_
