// W8 of `kvtier bench` (docs/WORKLOADS.md): one sequence of a 131,008-token prompt and 64
// generated tokens (the model's whole 131,072-position context) under a 24 GiB device cap, bf16 weights and KV — most of its 16 GiB of
// KV lives on the host tier and is streamed every step (docs/LONG_CONTEXT.md). Reports
// prefill seconds against the prefill's compute limit, decode tokens/s against the
// PCIe-bound limit computed from the host link bandwidth the backend measured in the same
// run, and the peak GPU memory nvidia-smi saw. Not part of `all`. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_W8_H_
#define KVTIER_TOOLS_KVTIER_BENCH_W8_H_

#include "bench_session.h"

namespace kvtier::cli::bench {

// The Llama-3-8B shape's context is 131,072 positions, prompt and generated tokens together
// (kvtier refuses a sequence longer than the model's context), so the prompt leaves room for
// the 64 generated tokens.
inline constexpr int kW8Context = 131072;
inline constexpr int kW8Gen = 64;
inline constexpr int kW8Prompt = kW8Context - kW8Gen;

void RunW8(kvt_model* model, BenchSession* session);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_W8_H_
