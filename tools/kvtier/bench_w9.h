// W9, W9a and W9b of `kvtier bench` (docs/WORKLOADS.md): a saturated server. N requests of
// random prompt tokens, all submitted at once with no GPU cap, each generating its full
// length (EOS ignored); output tokens/s from the first add to the last finish, against the
// run's limit and TensorRT-LLM's published max-throughput figure for Llama-3.1-8B on one H200
// in fp8. Reports the batch the engine ran (its rows per step) and the host time per step.
// Not part of `all`. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_W9_H_
#define KVTIER_TOOLS_KVTIER_BENCH_W9_H_

#include <string>

#include "bench_session.h"

namespace kvtier::cli::bench {

struct W9Shape {
  int requests, prompt, gen;
  double trtllm_tok_s;  // TensorRT-LLM's published H200 fp8 figure for the shape
};

// W9: 1,000 / 1,000; W9a: 128 / 128; W9b: 2,048 / 2,048. False for any other id.
bool W9ShapeOf(const std::string& id, W9Shape* shape);

// Output tokens/s bound of the whole run: the prefill's FLOPs at `projection_flops` (the GEMM
// ceiling of the run's weight format: BenchSession::ProjectionFlops), then `gen` decode steps
// of all `requests` rows, each the larger of its bytes (weights once, plus every row's KV at
// its mean context) at `hbm_Bps` and its FLOPs (`flops_per_token` a row) at `projection_flops`.
double W9Limit(const W9Shape& shape, double weight_bytes_per_step, double kv_bytes_per_token, double hbm_Bps,
               double projection_flops, double flops_per_token);

void RunW9(const std::string& id, kvt_model* model, BenchSession* session);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_W9_H_
