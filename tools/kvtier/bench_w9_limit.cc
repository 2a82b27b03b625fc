// W9ShapeOf and W9Limit (bench_w9.h): apart from the run so that unit tests link them alone.
#include <algorithm>

#include "bench_w9.h"

namespace kvtier::cli::bench {
bool W9ShapeOf(const std::string& id, W9Shape* shape) {
  // Request counts: more than the KV of one H200 holds at once in bf16 for W9 and W9b, so the
  // scheduler, not the submission, sets the batch.
  if (id == "W9") {
    *shape = {512, 1000, 1000, 17744};
  } else if (id == "W9a") {
    *shape = {1024, 128, 128, 27911};
  } else if (id == "W9b") {
    *shape = {256, 2048, 2048, 12194};
  } else {
    return false;
  }
  return true;
}

double W9Limit(const W9Shape& shape, double weight_bytes_per_step, double kv_bytes_per_token, double hbm_Bps,
               double projection_flops, double flops_per_token) {
  const double rows = shape.requests;
  const double prefill_s = rows * shape.prompt * flops_per_token / projection_flops;
  const double mean_context = shape.prompt + shape.gen / 2.0;
  const double step_bytes_s = (weight_bytes_per_step + rows * mean_context * kv_bytes_per_token) / hbm_Bps;
  const double step_flops_s = rows * flops_per_token / projection_flops;
  return rows * shape.gen / (prefill_s + shape.gen * std::max(step_bytes_s, step_flops_s));
}

}  // namespace kvtier::cli::bench
