// What a run's compute_path (engine stats) says ran its prefill attention, for the bench
// JSON's prefill_attention. Pure function.
#ifndef KVTIER_TOOLS_KVTIER_BENCH_COMPUTE_PATH_H_
#define KVTIER_TOOLS_KVTIER_BENCH_COMPUTE_PATH_H_

#include <string>
#include <string_view>

namespace kvtier::cli::bench {

// "cuda, prefill attention cudnn 9.10.2 and wgmma (16 plans built in 2.10 s; cuDNN refused 2
// steps: ...)" gives "cudnn 9.10.2 and wgmma" (the parenthesis stays in compute_path); empty
// where the backend does not say (the CPU).
std::string PrefillAttentionOf(std::string_view compute_path);

}  // namespace kvtier::cli::bench

#endif  // KVTIER_TOOLS_KVTIER_BENCH_COMPUTE_PATH_H_
