// SampleRows (the device sampler) against SampleRow, the host reference, on fresh random
// logits: peaked, flat and tied rows; vocabularies of 37 (most candidates in few key
// bins), 1000 and 128256 (Llama-3); greedy, temperature only, top-k (up to 1024 sorted in
// shared memory, beyond by selects), top-p and both; draws from 0 to just below 1. Picks must agree up to rounding (sampling_check.h). Skips
// without a GPU.
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/kernels.h"
#include "backend/row_sampling.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "sampling_check.h"

namespace kvtier::cuda {
namespace {

using cuda_test::DeviceArray;
using cuda_test::kDefaultLaunch;

struct Shape {
  const char* name;
  float scale;   // logits ~ scale * N(0, 1)
  bool integer;  // rounded: many ties
};

TEST(SampleRowsTest, MatchesHostReference) {
  KVT_SKIP_WITHOUT_CUDA();
  std::mt19937 rng{std::random_device{}()};
  const std::vector<RowSampling> params = {
      {0.0f, 0, 1.0f, 0.0},  {1.0f, 1, 1.0f, 0.0},  {1.0f, 0, 1.0f, 0.0},
      {0.7f, 40, 1.0f, 0.0}, {1.3f, 0, 0.9f, 0.0},  {0.5f, 200, 0.8f, 0.0},
      {1.0f, 5, 0.3f, 0.0},  {2.0f, 0, 0.05f, 0.0}, {0.05f, 0, 1.0f, 0.0},
      {1.0f, 1024, 0.95f, 0.0}, {0.9f, 2000, 0.9f, 0.0},  // largest compact top_k; beyond
  };
  const std::vector<double> draws = {0.0, 0.1234, 0.5, 0.9, 0.999999};
  const Shape shapes[] = {{"peaked", 4.0f, false}, {"flat", 0.3f, false}, {"ties", 3.0f, true}};
  for (int vocab : {37, 1000, 128256}) {
    for (const Shape& shape : shapes) {
      std::vector<float> logits;
      std::vector<RowSampling> rows;
      std::normal_distribution<float> normal(0.0f, shape.scale);
      std::uniform_real_distribution<double> unit(0.0, 1.0);
      for (const RowSampling& p : params) {
        for (size_t d = 0; d <= draws.size(); ++d) {
          RowSampling row = p;
          row.u = d < draws.size() ? draws[d] : unit(rng);
          rows.push_back(row);
          for (int i = 0; i < vocab; ++i) {
            const float v = normal(rng);
            logits.push_back(shape.integer ? std::round(v) : v);
          }
        }
      }
      const int n = static_cast<int>(rows.size());
      std::vector<SampleParams> device_params(n);
      for (int r = 0; r < n; ++r) {
        device_params[r].temperature = rows[r].temperature;
        device_params[r].top_k = rows[r].top_k;
        device_params[r].top_p = rows[r].top_p;
        device_params[r].u = rows[r].u;
      }
      DeviceArray<float> d_logits(logits.size());
      d_logits.Upload(logits);
      DeviceArray<SampleParams> d_params(n);
      d_params.Upload(device_params);
      DeviceArray<int32_t> d_ids(n);
      ASSERT_EQ(SampleRows(d_logits.get(), n, vocab, d_params.get(), d_ids.get(), nullptr,
                           kDefaultLaunch),
                cudaSuccess);
      const std::vector<int32_t> ids = d_ids.Download();
      int exact = 0;
      for (int r = 0; r < n; ++r) {
        const std::span<const float> row(logits.data() + static_cast<size_t>(r) * vocab, vocab);
        EXPECT_TRUE(cuda_test::SampledLikeReference(row, rows[r], ids[r]))
            << "vocab " << vocab << ", " << shape.name << " row " << r;
        std::vector<std::pair<float, int32_t>> scratch;
        exact += ids[r] == SampleRow(row, rows[r], &scratch) ? 1 : 0;
      }
      std::printf("[sample] vocab %6d %-6s: %d of %d rows pick exactly the reference token\n",
                  vocab, shape.name, exact, n);
    }
  }
}

TEST(SampleRowsTest, RejectsBadArguments) {
  KVT_SKIP_WITHOUT_CUDA();
  EXPECT_EQ(SampleRows(nullptr, 1, 10, nullptr, nullptr, nullptr, kDefaultLaunch),
            cudaErrorInvalidValue);
  EXPECT_EQ(SampleRows(nullptr, 0, 10, nullptr, nullptr, nullptr, kDefaultLaunch), cudaSuccess);
}

}  // namespace
}  // namespace kvtier::cuda
