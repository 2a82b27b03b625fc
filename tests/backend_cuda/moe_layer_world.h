// One mixture-of-experts layer's weights for the CUDA tests, held both ways: the device's
// stacked experts (16-bit or fp8) and the CPU backend's per-expert matrices of the same values,
// so a test runs both sides' MLP on identical data. Not thread-safe.
#ifndef KVTIER_TESTS_BACKEND_CUDA_MOE_LAYER_WORLD_H_
#define KVTIER_TESTS_BACKEND_CUDA_MOE_LAYER_WORLD_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/cpu_moe.h"
#include "backend/cuda/device_memory_account.h"
#include "backend/cuda/moe_weights.h"
#include "gtest/gtest.h"
#include "model/config.h"
#include "moe_test_data.h"

namespace kvtier::cuda_test {

inline CpuMatrix F32Matrix(const float* values, int64_t rows, int64_t cols) {
  CpuMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.f32.assign(values, values + rows * cols);
  return m;
}

// One layer's weights on both sides: the device's stacked experts and the CPU's per-expert
// matrices of the same values.
class MoeLayerWorld {
 public:
  template <typename T>
  static MoeLayerWorld Make(const MoeLayerShape& s, bool fp8, std::mt19937& rng) {
    MoeLayerWorld w;
    const std::vector<float> router = RandomF32(static_cast<size_t>(s.num_experts) * s.hidden, rng);
    const ExpertMatrices gate_up = RandomExperts<T>(s.num_experts, 2 * s.inter, s.hidden, fp8, rng);
    const ExpertMatrices down = RandomExperts<T>(s.num_experts, s.hidden, s.inter, fp8, rng);
    w.cpu.router = F32Matrix(router.data(), s.num_experts, s.hidden);
    for (int e = 0; e < s.num_experts; ++e) {
      const float* gu = gate_up.values.data() + static_cast<size_t>(e) * 2 * s.inter * s.hidden;
      w.cpu.experts.push_back({F32Matrix(gu, s.inter, s.hidden), F32Matrix(gu + s.inter * s.hidden, s.inter, s.hidden),
                               F32Matrix(down.values.data() + static_cast<size_t>(e) * s.hidden * s.inter, s.hidden,
                                         s.inter)});
    }
    w.Upload(router, &w.device.router);
    if (fp8) {
      w.Upload(gate_up.codes, &w.device.gate_up_codes);
      w.Upload(gate_up.scales, &w.device.gate_up_scales);
      w.Upload(down.codes, &w.device.down_codes);
      w.Upload(down.scales, &w.device.down_scales);
    } else {
      w.Upload(gate_up.bits, &w.device.gate_up);
      w.Upload(down.bits, &w.device.down);
    }
    return w;
  }

  // The CPU backend's MoeMlp of x (rows, hidden) on this layer: (rows, hidden).
  std::vector<float> CpuMlp(const ModelConfig& config, const std::vector<float>& x, int rows) const {
    CpuMoeScratch scratch;
    scratch.Reserve(config, rows);
    std::vector<uint8_t> activations;
    const float* out = MoeMlp(cpu, config.moe, x.data(), rows, config.hidden_size, nullptr, &scratch, &activations);
    return std::vector<float>(out, out + static_cast<size_t>(rows) * config.hidden_size);
  }

  // Router rows equal in groups of `group` (expert e's row is that of e - e % group) on both
  // sides: every row's logits, and so its probabilities, tie within a group bit for bit.
  void TieRouterGroups(int group) {
    const int64_t experts = cpu.router.rows, hidden = cpu.router.cols;
    std::vector<float>& r = cpu.router.f32;
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t lead = e - e % group;
      if (lead == e) continue;
      std::copy(r.begin() + lead * hidden, r.begin() + (lead + 1) * hidden, r.begin() + e * hidden);
    }
    ASSERT_EQ(cudaMemcpy(device.router, r.data(), r.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }

  CpuMoeWeights cpu;
  cuda::MoeExperts device;

 private:
  MoeLayerWorld() : memory_(std::make_unique<cuda::DeviceMemoryAccount>(0)) {}
  template <typename V>
  void Upload(const std::vector<V>& host, V** out) {
    absl::StatusOr<void*> p = memory_->Allocate(host.size() * sizeof(V), "test weights");
    ASSERT_TRUE(p.ok()) << p.status();
    *out = static_cast<V*>(*p);
    ASSERT_EQ(cudaMemcpy(*out, host.data(), host.size() * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::unique_ptr<cuda::DeviceMemoryAccount> memory_;  // the device weights (a unique_ptr: the world moves)
};

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_MOE_LAYER_WORLD_H_
