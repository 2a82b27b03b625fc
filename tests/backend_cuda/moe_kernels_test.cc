// The mixture-of-experts kernels (backend/cuda/moe_kernels.h) one by one against the CPU
// backend's routing (cpu_moe.h RouteTopK) and plain loops on identical data: routing with ties,
// groupings that leave experts without routes, 1 row to hundreds, every tile shape, 16-bit and
// fp8 expert weights. Outputs are poisoned before each run. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_moe.h"
#include "backend/cuda/moe_kernels.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"
#include "moe_test_data.h"

namespace kvtier::cuda {
namespace {

using cuda_test::Data16;
using cuda_test::DeviceArray;
using cuda_test::DeviceGrouping;
using cuda_test::ExpertMatrices;
using cuda_test::RandomExperts;
using cuda_test::RandomF32;
using cuda_test::RandomRouting;
using cuda_test::RelativeError;
using cuda_test::Tolerance;

class MoeKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override { KVT_SKIP_WITHOUT_CUDA(); }
  std::mt19937 rng_{std::random_device{}()};
};

struct Routing {
  int num_experts, top_k;
};
constexpr Routing kRoutings[] = {{8, 2}, {16, 4}, {128, 8}, {256, 16}, {5, 5}};

// GPU top-k of `logits` against RouteTopK: the same experts in the same order, the weights
// within fp32 rounding.
void ExpectRoutingMatchesCpu(const std::vector<float>& logits, int rows, Routing r, bool renormalize) {
  SCOPED_TRACE(::testing::Message() << rows << " rows, " << r.num_experts << " experts, top " << r.top_k
                                  << (renormalize ? ", renormalized" : ""));
  const size_t routes = static_cast<size_t>(rows) * r.top_k;
  std::vector<int32_t> want_chosen(routes);
  std::vector<float> want_weights(routes);
  RouteTopK(logits.data(), rows, r.num_experts, r.top_k, renormalize, want_chosen.data(), want_weights.data());
  DeviceArray<float> d_logits(logits.size());
  d_logits.Upload(logits);
  DeviceArray<int32_t> d_chosen(routes);
  DeviceArray<float> d_weights(routes);
  ASSERT_EQ(MoeRouteTopK(d_logits.get(), rows, r.num_experts, r.top_k, renormalize, d_chosen.get(), d_weights.get(),
                         nullptr),
            cudaSuccess);
  EXPECT_EQ(d_chosen.Download(), want_chosen);
  const std::vector<float> weights = d_weights.Download();
  for (size_t i = 0; i < routes; ++i) {
    EXPECT_NEAR(weights[i], want_weights[i], 1e-6 + 1e-5 * std::fabs(want_weights[i])) << "route " << i;
  }
}

// Random logits in [-4, 4), each row's apart by more than rounding can bridge (a near-tie
// could order differently through the two sides' exp), shuffled.
std::vector<float> SpreadLogits(int rows, int num_experts, std::mt19937& rng) {
  const float step = 8.0f / static_cast<float>(num_experts);
  std::uniform_real_distribution<float> jitter(0.0f, 0.5f * step);
  std::vector<float> logits;
  for (int t = 0; t < rows; ++t) {
    std::vector<float> row(static_cast<size_t>(num_experts));
    for (int e = 0; e < num_experts; ++e) {
      row[static_cast<size_t>(e)] = -4.0f + step * static_cast<float>(e) + jitter(rng);
    }
    std::shuffle(row.begin(), row.end(), rng);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

TEST_F(MoeKernelsTest, RouteTopKMatchesCpuOnRandomLogits) {
  for (const Routing r : kRoutings) {
    for (bool renormalize : {false, true}) {
      for (int rows : {1, 37, 300}) {
        const std::vector<float> logits = SpreadLogits(rows, r.num_experts, rng_);
        ASSERT_NO_FATAL_FAILURE(ExpectRoutingMatchesCpu(logits, rows, r, renormalize));
      }
    }
  }
}

// Equal logits give equal probabilities, bit for bit on both sides: the lower index wins.
TEST_F(MoeKernelsTest, RouteTopKBreaksTiesToTheLowerExpert) {
  for (const Routing r : kRoutings) {
    const int rows = 4;
    std::vector<float> logits(static_cast<size_t>(rows) * r.num_experts);
    for (int e = 0; e < r.num_experts; ++e) {
      logits[static_cast<size_t>(e)] = 0.5f;                                   // all equal
      logits[static_cast<size_t>(r.num_experts + e)] = static_cast<float>(e / 2);  // pairs, rising
      logits[static_cast<size_t>(2 * r.num_experts + e)] = static_cast<float>((r.num_experts - e) / 3);  // triples
      logits[static_cast<size_t>(3 * r.num_experts + e)] = e % 2 == 0 ? 1.0f : -1.0f;  // two levels
    }
    for (bool renormalize : {false, true}) {
      ASSERT_NO_FATAL_FAILURE(ExpectRoutingMatchesCpu(logits, rows, r, renormalize));
    }
  }
}

// Rows whose logits hold a NaN, an infinity, or only -infinity have no probabilities: both sides
// take the lowest experts with NaN weights (never an index past the experts), and the rows
// around them route as usual.
TEST_F(MoeKernelsTest, RouteTopKTakesTheLowestExpertsForRowsWithoutProbabilities) {
  for (const Routing r : kRoutings) {
    for (bool renormalize : {false, true}) {
      SCOPED_TRACE(::testing::Message() << r.num_experts << " experts, top " << r.top_k
                                        << (renormalize ? ", renormalized" : ""));
      std::vector<float> logits = SpreadLogits(5, r.num_experts, rng_);
      const size_t e = static_cast<size_t>(r.num_experts);
      logits[e + e / 2] = NAN;                                       // row 1: one NaN
      logits[2 * e + 1] = INFINITY;                                  // row 2: one +infinity
      std::fill(logits.begin() + 3 * e, logits.begin() + 4 * e, -INFINITY);  // row 3: all -infinity
      const size_t routes = 5 * static_cast<size_t>(r.top_k);
      std::vector<int32_t> want_chosen(routes);
      std::vector<float> want_weights(routes);
      RouteTopK(logits.data(), 5, r.num_experts, r.top_k, renormalize, want_chosen.data(), want_weights.data());
      DeviceArray<float> d_logits(logits.size());
      d_logits.Upload(logits);
      DeviceArray<int32_t> d_chosen(routes);
      DeviceArray<float> d_weights(routes);
      ASSERT_EQ(MoeRouteTopK(d_logits.get(), 5, r.num_experts, r.top_k, renormalize, d_chosen.get(), d_weights.get(),
                             nullptr),
                cudaSuccess);
      CUDA_ASSERT(cudaDeviceSynchronize());
      EXPECT_EQ(d_chosen.Download(), want_chosen);
      const std::vector<float> weights = d_weights.Download();
      for (size_t i = 0; i < routes; ++i) {
        const size_t row = i / static_cast<size_t>(r.top_k);
        if (row >= 1 && row <= 3) {
          EXPECT_EQ(want_chosen[i], static_cast<int32_t>(i % static_cast<size_t>(r.top_k))) << "route " << i;
          EXPECT_TRUE(std::isnan(weights[i]) && std::isnan(want_weights[i])) << "route " << i;
        } else {
          EXPECT_NEAR(weights[i], want_weights[i], 1e-6 + 1e-5 * std::fabs(want_weights[i])) << "route " << i;
        }
      }
    }
  }
}

TEST_F(MoeKernelsTest, RouterLogitsMatchFp32DotProducts) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (int hidden : {64, 2048}) {
      for (int num_experts : {8, 128}) {
        for (int rows : {1, 3, 4, 5, 33}) {
          SCOPED_TRACE(::testing::Message() << rows << " rows, hidden " << hidden << ", " << num_experts << " experts");
          Data16 x = cuda_test::Random16<T>(static_cast<size_t>(rows) * hidden, rng_);
          const std::vector<float> router = RandomF32(static_cast<size_t>(num_experts) * hidden, rng_);
          std::vector<float> want(static_cast<size_t>(rows) * num_experts);
          for (int t = 0; t < rows; ++t) {
            for (int e = 0; e < num_experts; ++e) {
              double dot = 0;
              for (int d = 0; d < hidden; ++d) {
                dot += static_cast<double>(x.values[static_cast<size_t>(t * hidden + d)]) *
                       router[static_cast<size_t>(e * hidden + d)];
              }
              want[static_cast<size_t>(t * num_experts + e)] = static_cast<float>(dot);
            }
          }
          DeviceArray<uint16_t> d_x(x.bits.size());
          d_x.Upload(x.bits);
          DeviceArray<float> d_router(router.size());
          d_router.Upload(router);
          DeviceArray<float> d_logits(want.size());
          ASSERT_EQ(MoeRouterLogits(reinterpret_cast<const T*>(d_x.get()), d_router.get(), rows, hidden, num_experts,
                                    d_logits.get(), nullptr),
                    cudaSuccess);
          EXPECT_LT(RelativeError(d_logits.Download(), want), 1e-5);
        }
      }
    }
  });
}

// The grouping of `chosen` as the CPU backend's counting sort makes it, and the tiles.
void ExpectGroupingOf(const std::vector<int32_t>& chosen, int rows, Routing r, int tile_rows,
                      const DeviceGrouping& grouping) {
  const int routes = rows * r.top_k;
  std::vector<int32_t> offsets(static_cast<size_t>(r.num_experts) + 1, 0);
  for (int32_t e : chosen) ++offsets[static_cast<size_t>(e) + 1];
  std::vector<int2> want_tiles;
  for (int e = 0; e < r.num_experts; ++e) {
    for (int m = 0; m < offsets[static_cast<size_t>(e) + 1]; m += tile_rows) want_tiles.push_back(make_int2(e, m));
    offsets[static_cast<size_t>(e) + 1] += offsets[static_cast<size_t>(e)];
  }
  EXPECT_EQ(grouping.offsets.Download(), offsets);
  const std::vector<int32_t> num_tiles = grouping.num_tiles.Download();
  ASSERT_EQ(num_tiles[0], static_cast<int32_t>(want_tiles.size()));
  ASSERT_LE(num_tiles[0], MoeMaxTiles(routes, r.num_experts, tile_rows));
  const std::vector<int2> tiles = grouping.tiles.Download();
  for (size_t i = 0; i < want_tiles.size(); ++i) {
    EXPECT_EQ(tiles[i].x, want_tiles[i].x) << "tile " << i;
    EXPECT_EQ(tiles[i].y, want_tiles[i].y) << "tile " << i;
  }
  // Every route has a slot of its own inside its expert's range, and the slot knows its token.
  const std::vector<int32_t> route_slot = grouping.route_slot.Download();
  const std::vector<int32_t> slot_token = grouping.slot_token.Download();
  const std::vector<int32_t> slot_expert = grouping.slot_expert.Download();
  std::vector<int> uses(static_cast<size_t>(routes), 0);
  for (int i = 0; i < routes; ++i) {
    const int32_t slot = route_slot[static_cast<size_t>(i)];
    const int32_t e = chosen[static_cast<size_t>(i)];
    ASSERT_GE(slot, offsets[static_cast<size_t>(e)]) << "route " << i;
    ASSERT_LT(slot, offsets[static_cast<size_t>(e) + 1]) << "route " << i;
    ++uses[static_cast<size_t>(slot)];
    EXPECT_EQ(slot_token[static_cast<size_t>(slot)], i / r.top_k) << "route " << i;
    EXPECT_EQ(slot_expert[static_cast<size_t>(slot)], e) << "route " << i;
  }
  for (int s = 0; s < routes; ++s) EXPECT_EQ(uses[static_cast<size_t>(s)], 1) << "slot " << s;
}

TEST_F(MoeKernelsTest, GroupRoutesCountsOffsetsSlotsAndTiles) {
  for (const Routing r : {Routing{8, 2}, Routing{128, 8}, Routing{5, 5}}) {
    for (int rows : {1, 3, 64, 300}) {
      for (int tile_rows : {16, 64}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows, " << r.num_experts << " experts, top " << r.top_k
                                        << ", tiles of " << tile_rows);
        const std::vector<int32_t> chosen = RandomRouting(rows, r.top_k, r.num_experts, rng_);
        DeviceArray<int32_t> d_chosen(chosen.size());
        d_chosen.Upload(chosen);
        DeviceGrouping grouping(rows * r.top_k, r.num_experts);
        ASSERT_EQ(MoeGroupRoutes(d_chosen.get(), rows, r.top_k, r.num_experts, tile_rows, grouping.View(), nullptr),
                  cudaSuccess);
        ASSERT_NO_FATAL_FAILURE(ExpectGroupingOf(chosen, rows, r, tile_rows, grouping));
      }
    }
  }
}

// One grouped GEMM case: routing, grouping on the device, the GEMM, and its reference from the
// grouping the device made (slot -> expert, slot -> activation row).
struct GemmCase {
  Routing routing;
  int rows, k, n;
  bool gated, fp8;
  MoeTile tile;
};

template <typename T>
void ExpectExpertGemmMatches(const GemmCase& c, std::mt19937& rng) {
  SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.routing.num_experts << " experts, top "
                                  << c.routing.top_k << ", k " << c.k << ", n " << c.n << (c.gated ? ", gated" : "")
                                  << (c.fp8 ? ", fp8" : ", 16-bit") << ", tile " << MoeTileName(c.tile));
  const Routing r = c.routing;
  const int routes = c.rows * r.top_k;
  const std::vector<int32_t> chosen = RandomRouting(c.rows, r.top_k, r.num_experts, rng);
  DeviceArray<int32_t> d_chosen(chosen.size());
  d_chosen.Upload(chosen);
  DeviceGrouping grouping(routes, r.num_experts);
  const MoeGrouping view = grouping.View();
  const MoeTile tile = MoeTileFor(c.tile, routes, r.num_experts);
  ASSERT_EQ(MoeGroupRoutes(d_chosen.get(), c.rows, r.top_k, r.num_experts, MoeTileRows(tile), view, nullptr),
            cudaSuccess);
  // Gated: the tokens' rows gathered through slot_token; plain: one row per slot.
  const int a_rows = c.gated ? c.rows : routes;
  Data16 a = cuda_test::Random16<T>(static_cast<size_t>(a_rows) * c.k, rng);
  const int matrix_rows = c.gated ? 2 * c.n : c.n;
  const ExpertMatrices w = RandomExperts<T>(r.num_experts, matrix_rows, c.k, c.fp8, rng);
  DeviceArray<uint16_t> d_a(a.bits.size());
  d_a.Upload(a.bits);
  DeviceArray<uint16_t> d_w16(w.bits.size());
  DeviceArray<uint8_t> d_codes(w.codes.size());
  DeviceArray<float> d_scales(w.scales.size());
  if (c.fp8) {
    d_codes.Upload(w.codes);
    d_scales.Upload(w.scales);
  } else {
    d_w16.Upload(w.bits);
  }
  DeviceArray<uint16_t> d_out(static_cast<size_t>(routes) * c.n);
  MoeGemmParams<T> p;
  p.a = reinterpret_cast<const T*>(d_a.get());
  p.a_row_of_slot = c.gated ? view.slot_token : nullptr;
  p.weights = c.fp8 ? static_cast<const void*>(d_codes.get()) : d_w16.get();
  p.scales = c.fp8 ? d_scales.get() : nullptr;
  p.fp8 = c.fp8;
  p.gated = c.gated;
  p.k = c.k;
  p.n = c.n;
  p.num_experts = r.num_experts;
  p.routes = routes;
  p.grouping = &view;
  p.tile = tile;
  p.out = reinterpret_cast<T*>(d_out.get());
  ASSERT_EQ(MoeExpertGemm(p, nullptr), cudaSuccess);
  const std::vector<float> out = cuda_test::ToF32<T>(d_out.Download());

  const std::vector<int32_t> offsets = grouping.offsets.Download();
  const std::vector<int32_t> slot_token = grouping.slot_token.Download();
  std::vector<float> want(out.size());
  for (int e = 0; e < r.num_experts; ++e) {
    for (int s = offsets[static_cast<size_t>(e)]; s < offsets[static_cast<size_t>(e) + 1]; ++s) {
      const int a_row = c.gated ? slot_token[static_cast<size_t>(s)] : s;
      const float* x = a.values.data() + static_cast<size_t>(a_row) * c.k;
      auto dot = [&](int w_row) {
        const float* wr = w.values.data() + (static_cast<size_t>(e) * matrix_rows + w_row) * c.k;
        double acc = 0;
        for (int i = 0; i < c.k; ++i) acc += static_cast<double>(x[i]) * wr[i];
        return acc;
      };
      for (int col = 0; col < c.n; ++col) {
        const double v = c.gated ? cuda_test::GateRef(GateActivation::kSilu, dot(col), dot(c.n + col)) : dot(col);
        want[static_cast<size_t>(s) * c.n + col] = static_cast<float>(v);
      }
    }
  }
  EXPECT_LT(RelativeError(out, want), Tolerance<T>());
}

TEST_F(MoeKernelsTest, ExpertGemmMatchesPerExpertProducts) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (MoeTile tile :
         {MoeTile::kGemv, MoeTile::k16x16, MoeTile::k16x16Deep, MoeTile::k16x64, MoeTile::k64x64}) {
      for (bool fp8 : {false, true}) {
        for (bool gated : {false, true}) {
          // k 96: a partial K chunk for every tile; n 40: a partial column tile.
          for (int rows : {1, 5, 70}) {
            ASSERT_NO_FATAL_FAILURE(
                ExpectExpertGemmMatches<T>({{8, 2}, rows, 96, 40, gated, fp8, tile}, rng_));
          }
          // Decode over many experts (most with no route), and a prefill-sized step.
          ASSERT_NO_FATAL_FAILURE(ExpectExpertGemmMatches<T>({{128, 8}, 1, 256, 64, gated, fp8, tile}, rng_));
          ASSERT_NO_FATAL_FAILURE(ExpectExpertGemmMatches<T>({{16, 4}, 300, 128, 96, gated, fp8, tile}, rng_));
        }
      }
    }
  });
}

TEST_F(MoeKernelsTest, CombineAddsTheRoutesInExpertOrder) {
  cuda_test::ForEachElem([&]<typename T>() {
    for (const Routing r : {Routing{8, 2}, Routing{128, 8}, Routing{16, 16}}) {
      for (int rows : {1, 9, 200}) {
        SCOPED_TRACE(::testing::Message() << rows << " rows, " << r.num_experts << " experts, top " << r.top_k);
        const int hidden = 72, routes = rows * r.top_k;
        const std::vector<int32_t> chosen = RandomRouting(rows, r.top_k, r.num_experts, rng_);
        const std::vector<float> weights = RandomF32(static_cast<size_t>(routes), rng_, 0.0f, 1.0f);
        std::vector<int32_t> route_slot(static_cast<size_t>(routes));
        std::iota(route_slot.begin(), route_slot.end(), 0);
        std::shuffle(route_slot.begin(), route_slot.end(), rng_);
        Data16 y = cuda_test::Random16<T>(static_cast<size_t>(routes) * hidden, rng_);
        std::vector<float> want(static_cast<size_t>(rows) * hidden, 0.0f);
        for (int t = 0; t < rows; ++t) {
          std::vector<int> order(static_cast<size_t>(r.top_k));
          std::iota(order.begin(), order.end(), t * r.top_k);
          std::sort(order.begin(), order.end(), [&](int a, int b) { return chosen[a] < chosen[b]; });
          for (int route : order) {
            for (int d = 0; d < hidden; ++d) {
              want[static_cast<size_t>(t * hidden + d)] +=
                  y.values[static_cast<size_t>(route_slot[route]) * hidden + d] * weights[route];
            }
          }
        }
        DeviceArray<uint16_t> d_y(y.bits.size());
        d_y.Upload(y.bits);
        DeviceArray<int32_t> d_chosen(chosen.size()), d_slots(route_slot.size());
        d_chosen.Upload(chosen);
        d_slots.Upload(route_slot);
        DeviceArray<float> d_weights(weights.size());
        d_weights.Upload(weights);
        DeviceArray<uint16_t> d_out(want.size());
        ASSERT_EQ(MoeCombine(reinterpret_cast<const T*>(d_y.get()), d_chosen.get(), d_weights.get(), d_slots.get(),
                             rows, r.top_k, hidden, reinterpret_cast<T*>(d_out.get()), nullptr),
                  cudaSuccess);
        EXPECT_LT(RelativeError(cuda_test::ToF32<T>(d_out.Download()), want), Tolerance<T>());
      }
    }
  });
}

TEST_F(MoeKernelsTest, LaunchersRefuseWhatTheKernelsCannotTake) {
  DeviceArray<float> logits(16);
  DeviceArray<int32_t> chosen(16);
  DeviceArray<float> weights(16);
  EXPECT_EQ(MoeRouteTopK(logits.get(), 1, kMoeMaxExperts + 1, 2, true, chosen.get(), weights.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(MoeRouteTopK(logits.get(), 1, 8, 9, true, chosen.get(), weights.get(), nullptr), cudaErrorInvalidValue);
  MoeGemmParams<bf16> p;  // no buffers
  p.k = 100;              // and k not a multiple of 8
  EXPECT_EQ(MoeExpertGemm(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvtier::cuda
