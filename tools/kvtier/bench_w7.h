// W7 (docs/WORKLOADS.md): the CPU backend against llama.cpp on the same GGUF files in the
// same run. For each source model as F16 and Q8_0 GGUF (bench_w7_files.h): prefill of one
// prompt at 2 threads, and decode of 1 and of 8 sequences at 1 and at 2 threads, each
// engine's best thread count compared. kvtier runs through the public C API; llama.cpp
// through node-llama-cpp's prebuilt CPU build (tests/gguf/oracle/llama_speed.mjs). Without
// node or the oracle the entry says llama.cpp was not measured. Not thread-safe.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_W7_H_
#define KVTIER_TOOLS_KVTIER_BENCH_W7_H_

#include <string>
#include <vector>

#include "bench_session.h"
#include "bench_w7_files.h"

namespace kvtier::cli::bench {

struct W7Options {
  std::vector<W7Source> sources;
  std::string cache_dir;         // where the GGUF files are (WriteW7Files wrote them)
  std::string llama_oracle_dir;  // holds llama_speed.mjs and node_modules/node-llama-cpp
  int prefill = 512;             // prompt tokens of the prefill figure
  int decode = 128;              // tokens each sequence generates in the decode figures
};

// Runs W7 into session->out["workloads"]["W7"] and its table rows.
void RunW7(const W7Options& options, BenchSession* session);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_W7_H_
