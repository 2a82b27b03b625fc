// The micro-benchmarks' kernel launch options, read from the environment as the kvtier CLI
// reads them (README.md, "Diagnostics"): KVTIER_CUDA_PDL=0 launches without programmatic
// dependent launch, KVTIER_CUDA_PDL_EARLY=0 keeps the norm/SiLU kernels from triggering the
// next kernel early, KVTIER_CUDA_GEMV_PREFETCH=2|4|8. Run a benchmark twice to compare.
#ifndef KVTIER_BENCH_MICRO_LAUNCH_ENV_H_
#define KVTIER_BENCH_MICRO_LAUNCH_ENV_H_

#include <cstdlib>

#include "backend/cuda_options.h"

inline kvtier::CudaLaunchOptions LaunchOptionsFromEnv() {
  auto off = [](const char* name) {
    const char* value = std::getenv(name);
    return value != nullptr && value[0] == '0';
  };
  kvtier::CudaLaunchOptions launch;
  launch.pdl = !off("KVTIER_CUDA_PDL");
  launch.pdl_early_trigger = !off("KVTIER_CUDA_PDL_EARLY");
  if (const char* value = std::getenv("KVTIER_CUDA_GEMV_PREFETCH"); value != nullptr) {
    const int pieces = std::atoi(value);
    launch.gemv_prefetch = pieces >= 8 ? 8 : pieces >= 4 ? 4 : 2;
  }
  return launch;
}

#endif  // KVTIER_BENCH_MICRO_LAUNCH_ENV_H_
