// Times CudaBackend prefill and decode steps on a real model shape with random weights
// generated on the device (no checkpoint on disk). Usage: kvtier_cuda_bench [preset].
// Prints one line per case: median ms per step and tokens/s. Not a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

double MedianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "llama3-8b";
  auto spec = RandomCheckpointPreset(preset);
  if (!spec.ok()) return std::printf("%s\n", spec.status().ToString().c_str()), 1;
  auto config = RandomCheckpointConfig(*spec);
  if (!config.ok()) return std::printf("%s\n", config.status().ToString().c_str()), 1;
  BackendOptions options;
  auto t0 = std::chrono::steady_clock::now();
  auto created = CudaBackend::CreateWithRandomWeights(*config, options, 1);
  if (!created.ok()) return std::printf("%s\n", created.status().ToString().c_str()), 1;
  CudaBackend& b = **created;
  const int64_t bt = b.kv_layout().block_tokens;
  const int64_t num_blocks = 64 * 1024 / bt + 32768 / bt + 64;
  if (auto st = b.AllocateKvPool(num_blocks); !st.ok()) {
    return std::printf("%s\n", st.ToString().c_str()), 1;
  }
  cuda::FillRandomBf16(static_cast<cuda::bf16*>(const_cast<void*>(b.BlockDevicePointer(0))),
                       num_blocks * b.kv_layout().ElementsPerBlock(), 5, 0.0f, 1.0f, nullptr);
  cudaDeviceSynchronize();
  const double setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("model %s: %.2f GiB device memory (weights+workspace+KV), setup %.1f s\n",
              preset.c_str(), b.device_bytes_in_use() / 1073741824.0, setup_s);

  std::vector<int32_t> tokens(32768, 7);
  // Sequence s owns blocks [s*blocks_per_seq, ...); the long sequence the last 2048+.
  const int64_t per_seq = 1024 / bt;
  std::vector<std::vector<int32_t>> tables(64);
  for (int s = 0; s < 64; ++s) {
    for (int64_t j = 0; j < per_seq; ++j) tables[s].push_back(static_cast<int32_t>(s * per_seq + j));
  }
  std::vector<int32_t> long_table;
  for (int64_t j = 0; j < 32768 / bt + 1; ++j) {
    long_table.push_back(static_cast<int32_t>(64 * per_seq + j));
  }

  auto time_batch = [&](const char* name, const ForwardBatch& batch, int reps, int64_t tokens_per_step,
                        bool greedy) {
    std::vector<double> ms;
    std::vector<float> logits;
    std::vector<int32_t> ids;
    for (int i = 0; i < reps + 2; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const absl::Status st = greedy ? b.ForwardGreedy(batch, &ids) : b.Forward(batch, &logits);
      const auto end = std::chrono::steady_clock::now();
      if (!st.ok()) {
        std::printf("%s: %s\n", name, st.ToString().c_str());
        return;
      }
      if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    }
    const double med = MedianMs(ms);
    std::printf("%-36s %9.3f ms/step %11.1f tokens/s\n", name, med, tokens_per_step * 1000.0 / med);
  };

  {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 512), 0, tables[0], true});
    time_batch("W1 prefill 512 (1 seq)", batch, 5, 512, true);
  }
  {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 1), 600, tables[0], true});
    time_batch("W1 decode, 1 seq at 600", batch, 30, 1, true);
  }
  {
    ForwardBatch batch;
    for (int s = 0; s < 64; ++s) {
      batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 1), 640, tables[s], true});
    }
    time_batch("W2 decode, 64 seqs at 640", batch, 20, 64, true);
  }
  {
    ForwardBatch batch;
    for (int s = 0; s < 64; ++s) {
      batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 512), 0, tables[s], true});
    }
    time_batch("W2 prefill 64 x 512", batch, 2, 64 * 512, true);
  }
  {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 1), 32767, long_table, true});
    time_batch("W4 decode, 1 seq at 32767", batch, 20, 1, true);
  }
  {
    ForwardBatch batch;
    batch.chunks.push_back({std::span<const int32_t>(tokens).subspan(0, 2048), 30000, long_table, true});
    time_batch("W4 prefill chunk 2048 at 30000", batch, 2, 2048, true);
  }
  std::printf("allocations after init: %lld\n", static_cast<long long>(b.allocations_after_init()));
  return 0;
}

}  // namespace
}  // namespace kvtier

int main(int argc, char** argv) { return kvtier::Main(argc, argv); }
