// Test data of the mixture-of-experts CUDA tests: routings with experts no route chose, the
// device buffers of a grouping, and expert weights held both ways (16-bit or fp8 codes for the
// device, their fp32 values for the reference). Not thread-safe.
#ifndef KVTIER_TESTS_BACKEND_CUDA_MOE_TEST_DATA_H_
#define KVTIER_TESTS_BACKEND_CUDA_MOE_TEST_DATA_H_

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/moe_kernels.h"
#include "common/fp8_e4m3.h"
#include "cuda_test_data.h"
#include "model/config.h"

namespace kvtier::cuda_test {

// One MoE layer's shape, as the tests and the bench sweep them.
struct MoeLayerShape {
  const char* name;
  int hidden, num_experts, top_k, inter;
  bool renormalize;
};

// The two real models' shapes: kvtier_cuda_moe_bench times them, and MoeTileRun's thresholds
// were measured on them.
inline constexpr MoeLayerShape kQwen3MoeShape = {"qwen3-30b-a3b", 2048, 128, 8, 768, true};
inline constexpr MoeLayerShape kMixtralShape = {"mixtral-8x7b", 4096, 8, 2, 14336, true};

// A one-layer config whose only layer is that MoE layer.
inline ModelConfig MoeLayerConfig(const MoeLayerShape& s) {
  ModelConfig c;
  c.hidden_size = s.hidden;
  c.num_layers = 1;
  c.moe.num_experts = s.num_experts;
  c.moe.top_k = s.top_k;
  c.moe.expert_intermediate_size = s.inter;
  c.moe.norm_topk_prob = s.renormalize;
  c.moe.sparse_layers = {true};
  return c;
}

// (rows, top_k) distinct experts per row, drawn only from the experts e with e % 3 != 1 when
// that leaves top_k of them, so some experts get no route at all.
inline std::vector<int32_t> RandomRouting(int rows, int top_k, int num_experts, std::mt19937& rng) {
  std::vector<int32_t> pool;
  for (int e = 0; e < num_experts; ++e) {
    if (e % 3 != 1) pool.push_back(e);
  }
  if (static_cast<int>(pool.size()) < top_k) {
    pool.resize(static_cast<size_t>(num_experts));
    std::iota(pool.begin(), pool.end(), 0);
  }
  std::vector<int32_t> chosen;
  for (int r = 0; r < rows; ++r) {
    std::shuffle(pool.begin(), pool.end(), rng);
    chosen.insert(chosen.end(), pool.begin(), pool.begin() + top_k);
  }
  return chosen;
}

// The device buffers of one grouping of `routes` routes (sized for the finest tiles).
struct DeviceGrouping {
  DeviceGrouping(int routes, int num_experts)
      : offsets(static_cast<size_t>(num_experts) + 1),
        route_slot(static_cast<size_t>(routes)),
        slot_token(static_cast<size_t>(routes)),
        slot_expert(static_cast<size_t>(routes)),
        tiles(static_cast<size_t>(cuda::MoeMaxTiles(routes, num_experts, 16))),
        num_tiles(1) {}
  cuda::MoeGrouping View() const {
    cuda::MoeGrouping g;
    g.expert_offsets = offsets.get();
    g.route_slot = route_slot.get();
    g.slot_token = slot_token.get();
    g.slot_expert = slot_expert.get();
    g.tiles = tiles.get();
    g.num_tiles = num_tiles.get();
    return g;
  }
  DeviceArray<int32_t> offsets, route_slot, slot_token, slot_expert;
  DeviceArray<int2> tiles;
  DeviceArray<int32_t> num_tiles;
};

// num_experts stacked (rows, cols) matrices: the device bytes (16-bit elements of T, or E4M3
// codes with a scale per row) and the fp32 values they stand for.
struct ExpertMatrices {
  std::vector<uint16_t> bits;  // 16-bit
  std::vector<uint8_t> codes;  // fp8
  std::vector<float> scales;   // fp8: (num_experts * rows)
  std::vector<float> values;   // (num_experts, rows, cols)
};
template <typename T>
ExpertMatrices RandomExperts(int num_experts, int rows, int cols, bool fp8, std::mt19937& rng) {
  ExpertMatrices m;
  const int64_t total_rows = static_cast<int64_t>(num_experts) * rows;
  if (fp8) {
    // Scales around 1/(max code): products of the size the 16-bit weights give.
    RandomFp8(total_rows, cols, rng, &m.codes, &m.scales, 1e-3f, 4e-3f);
    m.values.resize(m.codes.size());
    for (int64_t r = 0; r < total_rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t i = static_cast<size_t>(r * cols + c);
        m.values[i] = Fp8E4M3ToFloat(m.codes[i]) * m.scales[static_cast<size_t>(r)];
      }
    }
    return m;
  }
  Data16 d = Random16<T>(static_cast<size_t>(total_rows * cols), rng, -0.5f, 0.5f);
  m.bits = std::move(d.bits);
  m.values = std::move(d.values);
  return m;
}

}  // namespace kvtier::cuda_test

#endif  // KVTIER_TESTS_BACKEND_CUDA_MOE_TEST_DATA_H_
