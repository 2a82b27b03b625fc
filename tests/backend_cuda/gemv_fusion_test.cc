// The decode GEMVs with their norm and residual add fused (backend/cuda/gemv_fusion.h) against
// the kernels they replace, on the same device data: AddRmsNorm then the plain GEMV must give
// the same bits as the GEMV that norms its own input, and the plain GEMV then AddRmsNorm's
// residual add the same residual as the GEMV that adds its output there. 16-bit and fp8
// weights, one and two rows, plain and gate|up projections, widths with ragged pieces.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/fp8_kernels.h"
#include "backend/cuda/gemv_fusion.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::ForEachElem;

constexpr float kEps = 1e-5f;

template <typename V>
void Upload(DeviceBuffer<V>& d, const std::vector<V>& h) {
  ASSERT_EQ(cudaMemcpy(d.ptr, h.data(), h.size() * sizeof(V), cudaMemcpyHostToDevice), cudaSuccess);
}

template <typename V>
std::vector<V> Download(const DeviceBuffer<V>& d, size_t count) {
  std::vector<V> h(count);
  EXPECT_EQ(cudaMemcpy(h.data(), d.ptr, count * sizeof(V), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

std::vector<float> RandomFloats(size_t count, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& f : v) f = dist(rng);
  return v;
}

// One projection's weights on the device, 16-bit or fp8 codes with row scales.
struct Weights {
  bool fp8 = false;
  int64_t rows = 0, k = 0;
  std::unique_ptr<DeviceBuffer<uint16_t>> w16;
  std::unique_ptr<DeviceBuffer<uint8_t>> codes;
  std::unique_ptr<DeviceBuffer<float>> scales;
};

template <typename T>
Weights MakeWeights(bool fp8, int64_t rows, int64_t k, std::mt19937& rng) {
  Weights w;
  w.fp8 = fp8;
  w.rows = rows;
  w.k = k;
  const cuda_test::Data16 data = cuda_test::Random16<T>(rows * k, rng, -0.5f, 0.5f);
  w.w16 = std::make_unique<DeviceBuffer<uint16_t>>(rows * k);
  Upload(*w.w16, data.bits);
  if (fp8) {
    w.codes = std::make_unique<DeviceBuffer<uint8_t>>(rows * k);
    w.scales = std::make_unique<DeviceBuffer<float>>(rows);
    EXPECT_EQ(cuda::QuantizeRowsFp8(reinterpret_cast<const T*>(w.w16->ptr), rows, k, w.codes->ptr, w.scales->ptr,
                                    nullptr),
              cudaSuccess);
  }
  return w;
}

// out = x times w^T on the plain GEMVs.
template <typename T>
cudaError_t PlainGemv(const Weights& w, const T* x, int rows, int n, T* out) {
  if (w.fp8) return cuda::GemvFp8<T>(x, rows, w.codes->ptr, w.scales->ptr, n, w.k, out, nullptr, cuda_test::kDefaultLaunch);
  return cuda::GemvSmallRows<T>(x, reinterpret_cast<const T*>(w.w16->ptr), rows, static_cast<int>(w.k), n, out, false,
                                nullptr, cuda_test::kDefaultLaunch);
}

template <typename T>
cudaError_t PlainGated(const Weights& w, const T* x, int rows, int inter, cuda::GateActivation act, T* out) {
  if (w.fp8) {
    return cuda::GemvGatedMulFp8<T>(x, rows, w.codes->ptr, w.scales->ptr, inter, w.k, act, out, nullptr,
                                    cuda_test::kDefaultLaunch);
  }
  return cuda::GemvGatedMul<T>(x, reinterpret_cast<const T*>(w.w16->ptr), rows, static_cast<int>(w.k), inter, act, out,
                               nullptr, cuda_test::kDefaultLaunch);
}

template <typename T>
cudaError_t FusedGemv(const Weights& w, const cuda::GemvFusion& f, const T* x, int rows, int n, T* out) {
  if (w.fp8) {
    return cuda::GemvFp8Fused<T>(f, x, rows, w.codes->ptr, w.scales->ptr, n, w.k, out, nullptr,
                                 cuda_test::kDefaultLaunch);
  }
  return cuda::GemvSmallRowsFused<T>(f, x, reinterpret_cast<const T*>(w.w16->ptr), rows, static_cast<int>(w.k), n, out,
                                     nullptr, cuda_test::kDefaultLaunch);
}

template <typename T>
cudaError_t FusedGated(const Weights& w, const cuda::GemvFusion& f, int rows, int inter, cuda::GateActivation act,
                       T* out) {
  if (w.fp8) {
    return cuda::GemvGatedMulFp8Normed<T>(f, rows, w.codes->ptr, w.scales->ptr, inter, w.k, act, out, nullptr,
                                          cuda_test::kDefaultLaunch);
  }
  return cuda::GemvGatedMulNormed<T>(f, reinterpret_cast<const T*>(w.w16->ptr), rows, static_cast<int>(w.k), inter,
                                     act, out, nullptr, cuda_test::kDefaultLaunch);
}

struct Shape {
  int k, n;
};
// k: the widest norm, one with pieces past the pre-wait and pipelined groups, and a short one
// (one norm chunk per thread at most); n: ragged against the warps of a CTA.
constexpr Shape kShapes[] = {{4096, 333}, {1040, 129}, {2048, 64}};

TEST(GemvFusionTest, NormedInputGivesTheBitsOfNormThenGemv) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(11);
    for (bool fp8 : {false, true}) {
      for (const Shape& s : kShapes) {
        for (int rows : {1, 2}) {
          SCOPED_TRACE(::testing::Message() << (fp8 ? "fp8" : "16-bit") << " k " << s.k << " n " << s.n << " rows "
                                            << rows);
          const Weights w = MakeWeights<T>(fp8, s.n, s.k, rng);
          const std::vector<float> residual = RandomFloats(rows * s.k, rng, -4.0f, 4.0f);
          const std::vector<float> norm = RandomFloats(s.k, rng, 0.5f, 1.5f);
          DeviceBuffer<float> d_res(residual.size()), d_res_ref(residual.size()), d_norm(norm.size());
          Upload(d_res, residual);
          Upload(d_res_ref, residual);
          Upload(d_norm, norm);
          DeviceBuffer<uint16_t> d_normed(rows * s.k), d_want(rows * s.n), d_got(rows * s.n);
          CUDA_ASSERT(cuda::AddRmsNorm<T>(d_res_ref.ptr, nullptr, d_norm.ptr, nullptr, rows, s.k, kEps,
                                          reinterpret_cast<T*>(d_normed.ptr), nullptr, cuda_test::kDefaultLaunch));
          CUDA_ASSERT(PlainGemv<T>(w, reinterpret_cast<const T*>(d_normed.ptr), rows, s.n,
                                   reinterpret_cast<T*>(d_want.ptr)));
          const cuda::GemvFusion f{d_norm.ptr, kEps, d_res.ptr};
          CUDA_ASSERT(FusedGemv<T>(w, f, nullptr, rows, s.n, reinterpret_cast<T*>(d_got.ptr)));
          CUDA_ASSERT(cudaDeviceSynchronize());
          EXPECT_EQ(Download(d_got, rows * s.n), Download(d_want, rows * s.n));
          EXPECT_EQ(Download(d_res, residual.size()), residual);  // read, not written
        }
      }
    }
  });
}

TEST(GemvFusionTest, NormedGateUpGivesTheBitsOfNormThenGatedGemv) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(12);
    for (bool fp8 : {false, true}) {
      for (cuda::GateActivation act : cuda_test::kGateActivations) {
        for (int rows : {1, 2}) {
          const int k = 4096, inter = 200;
          SCOPED_TRACE(::testing::Message() << (fp8 ? "fp8" : "16-bit") << " act " << static_cast<int>(act)
                                            << " rows " << rows);
          const Weights w = MakeWeights<T>(fp8, 2 * inter, k, rng);
          const std::vector<float> residual = RandomFloats(rows * k, rng, -4.0f, 4.0f);
          const std::vector<float> norm = RandomFloats(k, rng, 0.5f, 1.5f);
          DeviceBuffer<float> d_res(residual.size()), d_norm(norm.size());
          Upload(d_res, residual);
          Upload(d_norm, norm);
          DeviceBuffer<uint16_t> d_normed(rows * k), d_want(rows * inter), d_got(rows * inter);
          CUDA_ASSERT(cuda::AddRmsNorm<T>(d_res.ptr, nullptr, d_norm.ptr, nullptr, rows, k, kEps,
                                          reinterpret_cast<T*>(d_normed.ptr), nullptr, cuda_test::kDefaultLaunch));
          CUDA_ASSERT(PlainGated<T>(w, reinterpret_cast<const T*>(d_normed.ptr), rows, inter, act,
                                    reinterpret_cast<T*>(d_want.ptr)));
          const cuda::GemvFusion f{d_norm.ptr, kEps, d_res.ptr};
          CUDA_ASSERT(FusedGated<T>(w, f, rows, inter, act, reinterpret_cast<T*>(d_got.ptr)));
          CUDA_ASSERT(cudaDeviceSynchronize());
          EXPECT_EQ(Download(d_got, rows * inter), Download(d_want, rows * inter));
        }
      }
    }
  });
}

TEST(GemvFusionTest, ResidualOutputAddsWhatTheNextNormWouldAdd) {
  KVT_SKIP_WITHOUT_CUDA();
  ForEachElem([]<typename T>() {
    std::mt19937 rng(13);
    for (bool fp8 : {false, true}) {
      for (const Shape& s : kShapes) {
        for (int rows : {1, 2}) {
          // o: k is the attention width, n the hidden width the residual has.
          const int k = s.k, n = 272;
          SCOPED_TRACE(::testing::Message() << (fp8 ? "fp8" : "16-bit") << " k " << k << " rows " << rows);
          const Weights w = MakeWeights<T>(fp8, n, k, rng);
          const cuda_test::Data16 x = cuda_test::Random16<T>(rows * k, rng);
          const std::vector<float> residual = RandomFloats(rows * n, rng, -4.0f, 4.0f);
          const std::vector<float> norm(n, 1.0f);
          DeviceBuffer<uint16_t> d_x(x.bits.size()), d_proj(rows * n), d_normed(rows * n);
          DeviceBuffer<float> d_res(residual.size()), d_res_ref(residual.size()), d_norm(n);
          Upload(d_x, x.bits);
          Upload(d_res, residual);
          Upload(d_res_ref, residual);
          Upload(d_norm, norm);
          const T* xp = reinterpret_cast<const T*>(d_x.ptr);
          CUDA_ASSERT(PlainGemv<T>(w, xp, rows, n, reinterpret_cast<T*>(d_proj.ptr)));
          CUDA_ASSERT(cuda::AddRmsNorm<T>(d_res_ref.ptr, reinterpret_cast<const T*>(d_proj.ptr), d_norm.ptr, nullptr,
                                          rows, n, kEps, reinterpret_cast<T*>(d_normed.ptr), nullptr,
                                          cuda_test::kDefaultLaunch));
          cuda::GemvFusion f;
          f.residual = d_res.ptr;
          CUDA_ASSERT(FusedGemv<T>(w, f, xp, rows, n, nullptr));
          CUDA_ASSERT(cudaDeviceSynchronize());
          EXPECT_EQ(Download(d_res, residual.size()), Download(d_res_ref, residual.size()));
        }
      }
    }
  });
}

TEST(GemvFusionTest, RefusesWhatItCannotFuse) {
  // Host-side checks: no device needed.
  float* aligned = reinterpret_cast<float*>(uintptr_t{256});
  cuda::GemvFusion norm{aligned, kEps, aligned};
  EXPECT_TRUE(cuda::GemvFusionArgsValid(norm, 1, 4096));
  EXPECT_TRUE(cuda::GemvFusionArgsValid(norm, 2, 8));
  EXPECT_FALSE(cuda::GemvFusionArgsValid(norm, 3, 4096));    // rows
  EXPECT_FALSE(cuda::GemvFusionArgsValid(norm, 0, 4096));
  EXPECT_FALSE(cuda::GemvFusionArgsValid(norm, 1, 4104));    // wider than the norm's block
  EXPECT_FALSE(cuda::GemvFusionArgsValid(norm, 1, 4092));    // not whole chunks of 8
  cuda::GemvFusion misaligned{aligned, kEps, aligned + 1};
  EXPECT_FALSE(cuda::GemvFusionArgsValid(misaligned, 1, 4096));
  cuda::GemvFusion plain;
  EXPECT_FALSE(cuda::GemvFusionArgsValid(plain, 1, 4096));  // nothing to fuse: the plain entry points
  cuda::GemvFusion add;
  add.residual = aligned;
  EXPECT_TRUE(cuda::GemvFusionArgsValid(add, 2, 14336));     // o and down: any width
  EXPECT_EQ(add.end(), cuda::GemvEnd::kResidualOut);
  EXPECT_EQ(norm.end(), cuda::GemvEnd::kNormIn);
  // The launchers refuse before touching the device: a gate|up GEMV adds nothing into the
  // residual, and a residual add needs its input.
  using T = cuda::bf16;
  const T* w = reinterpret_cast<const T*>(aligned);
  T* out = reinterpret_cast<T*>(aligned);
  EXPECT_EQ(cuda::GemvGatedMulNormed<T>(add, w, 1, 4096, 16, cuda::GateActivation::kSilu, out, nullptr,
                                        cuda_test::kDefaultLaunch),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GemvSmallRowsFused<T>(add, nullptr, w, 1, 4096, 16, out, nullptr, cuda_test::kDefaultLaunch),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GemvSmallRowsFused<T>(norm, nullptr, w, 3, 4096, 16, out, nullptr, cuda_test::kDefaultLaunch),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GemvFp8Fused<T>(norm, nullptr, 1, reinterpret_cast<const uint8_t*>(aligned), aligned, 16, 4104, out,
                                  nullptr, cuda_test::kDefaultLaunch),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::GemvGatedMulFp8Normed<T>(plain, 1, reinterpret_cast<const uint8_t*>(aligned), aligned, 16, 4096,
                                           cuda::GateActivation::kSilu, out, nullptr, cuda_test::kDefaultLaunch),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvtier
