// NCCL for tensor parallelism: the run-time loading of libnccl (why it cannot load, the real
// library where the CUDA toolkit has it, NVLink multicast left off) and NcclGroup's
// all-reduce over every GPU of the machine (one rank per GPU: on a one-GPU machine the sum of
// one rank, on more a real reduction), in fp32 and bf16. GPU tests skip without a device,
// NCCL tests without NCCL (KVTIER_NCCL_LIBRARY, else libnccl.so.2 on the library path).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cuda/nccl_group.h"
#include "backend/cuda/nccl_library.h"
#include "cuda_test_util.h"
#include "gtest/gtest.h"

namespace kvtier::cuda {
namespace {

TEST(NcclLibraryTest, SaysWhyItCannotLoad) {
  auto absent = NcclLibrary::Load("/nonexistent/dir/libnccl.so.2");
  ASSERT_FALSE(absent.ok());
  EXPECT_TRUE(absl::IsNotFound(absent.status())) << absent.status();
  EXPECT_NE(absent.status().message().find(NcclLibrary::kPathVariable), std::string::npos) << absent.status();
  EXPECT_TRUE(absl::IsInvalidArgument(NcclLibrary::Load("").status()));
  auto not_nccl = NcclLibrary::Load("libm.so.6");
  ASSERT_FALSE(not_nccl.ok());
  EXPECT_TRUE(absl::IsUnimplemented(not_nccl.status())) << not_nccl.status();
  EXPECT_NE(not_nccl.status().message().find("ncclGetVersion"), std::string::npos) << not_nccl.status();
}

TEST(NcclLibraryTest, PathComesFromTheEnvironment) {
  const char* saved = getenv(NcclLibrary::kPathVariable);
  const std::string restore = saved != nullptr ? saved : "";
  setenv(NcclLibrary::kPathVariable, "/opt/x/libnccl.so.2", 1);
  EXPECT_EQ(NcclLibrary::PathFromEnvironment(), "/opt/x/libnccl.so.2");
  setenv(NcclLibrary::kPathVariable, "", 1);
  EXPECT_EQ(NcclLibrary::PathFromEnvironment(), NcclLibrary::kDefaultFile);
  unsetenv(NcclLibrary::kPathVariable);
  EXPECT_EQ(NcclLibrary::PathFromEnvironment(), NcclLibrary::kDefaultFile);
  if (saved != nullptr) setenv(NcclLibrary::kPathVariable, restore.c_str(), 1);
}

// The CUDA toolkit's own NCCL, where it has one (no GPU needed to load it). Loading turns
// NVLink multicast off unless the process says otherwise.
TEST(NcclLibraryTest, LoadsTheToolkitsNcclWithMulticastOff) {
  const std::string path = KVTIER_TEST_NCCL_PATH;
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no NCCL at " << path;
  const char* saved = getenv("NCCL_NVLS_ENABLE");
  const std::string restore = saved != nullptr ? saved : "";
  unsetenv("NCCL_NVLS_ENABLE");
  auto library = NcclLibrary::Load(path);
  ASSERT_TRUE(library.ok()) << library.status();
  const char* nvls = getenv("NCCL_NVLS_ENABLE");
  ASSERT_NE(nvls, nullptr);
  EXPECT_STREQ(nvls, "0");
  EXPECT_GE((*library)->version(), NcclLibrary::kMinVersion);
  EXPECT_EQ((*library)->VersionString().rfind("2.", 0), 0u) << (*library)->VersionString();
  EXPECT_EQ((*library)->path(), path);
  setenv("NCCL_NVLS_ENABLE", "7", 1);  // a value the process set is kept
  ASSERT_TRUE(NcclLibrary::Load(path).ok());
  EXPECT_STREQ(getenv("NCCL_NVLS_ENABLE"), "7");
  if (saved != nullptr) {
    setenv("NCCL_NVLS_ENABLE", restore.c_str(), 1);
  } else {
    setenv("NCCL_NVLS_ENABLE", "0", 1);  // off for the GPU tests below
  }
}

// The process's NCCL, or a skip saying why there is none.
#define KVT_NCCL_OR_SKIP(library)                                          \
  KVT_SKIP_WITHOUT_CUDA();                                                 \
  absl::StatusOr<const NcclLibrary*> library##_or = NcclLibrary::Shared(); \
  if (!library##_or.ok()) GTEST_SKIP() << library##_or.status().message(); \
  const NcclLibrary& library = **library##_or

TEST(NcclGroupTest, RefusesNoDeviceAndADeviceTwice) {
  KVT_NCCL_OR_SKIP(library);
  const std::vector<int32_t> none;
  EXPECT_TRUE(absl::IsInvalidArgument(NcclGroup::Create(library, none).status()));
  const std::vector<int32_t> twice = {0, 0};
  auto refused = NcclGroup::Create(library, twice);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
}

// Rank r's buffer holds (r + 1) * (i % 7 + 1) at i; after the all-reduce every rank holds
// the sum over ranks, exact in fp32 and (small integers) in bf16.
TEST(NcclGroupTest, AllReduceSumsEveryRanksBufferInPlace) {
  KVT_NCCL_OR_SKIP(library);
  int count = 0;
  CUDA_ASSERT(cudaGetDeviceCount(&count));
  std::vector<int32_t> devices;
  for (int d = 0; d < count; ++d) devices.push_back(d);
  auto group = NcclGroup::Create(library, devices);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_EQ((*group)->size(), count);
  const int64_t n = 3001;  // not a multiple of any NCCL chunk
  const int ranks = count;
  const float rank_sum = ranks * (ranks + 1) / 2.0f;
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    const size_t element = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    std::vector<void*> buffers(ranks, nullptr);
    std::vector<cudaStream_t> streams(ranks, nullptr);
    for (int r = 0; r < ranks; ++r) {
      CUDA_ASSERT(cudaSetDevice(r));
      CUDA_ASSERT(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
      CUDA_ASSERT(cudaMalloc(&buffers[r], n * element));
      std::vector<float> values(n);
      for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>((r + 1) * (i % 7 + 1));
      if (bf16) {
        std::vector<__nv_bfloat16> packed(n);
        for (int64_t i = 0; i < n; ++i) packed[i] = __float2bfloat16(values[i]);
        CUDA_ASSERT(cudaMemcpy(buffers[r], packed.data(), n * element, cudaMemcpyHostToDevice));
      } else {
        CUDA_ASSERT(cudaMemcpy(buffers[r], values.data(), n * element, cudaMemcpyHostToDevice));
      }
    }
    ASSERT_TRUE((*group)->AllReduceSum(buffers, n, bf16 ? ncclBfloat16 : ncclFloat32, streams).ok());
    for (int r = 0; r < ranks; ++r) {
      CUDA_ASSERT(cudaSetDevice(r));
      CUDA_ASSERT(cudaStreamSynchronize(streams[r]));
      std::vector<float> got(n);
      if (bf16) {
        std::vector<__nv_bfloat16> packed(n);
        CUDA_ASSERT(cudaMemcpy(packed.data(), buffers[r], n * element, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < n; ++i) got[i] = __bfloat162float(packed[i]);
      } else {
        CUDA_ASSERT(cudaMemcpy(got.data(), buffers[r], n * element, cudaMemcpyDeviceToHost));
      }
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], rank_sum * static_cast<float>(i % 7 + 1)) << "rank " << r << " at " << i;
      }
      CUDA_ASSERT(cudaFree(buffers[r]));
      CUDA_ASSERT(cudaStreamDestroy(streams[r]));
    }
  }
  EXPECT_TRUE((*group)->AsyncError().ok());
  // A mismatch between buffers, streams and ranks is refused before NCCL sees it.
  std::vector<void*> one(1, nullptr);
  std::vector<cudaStream_t> none;
  EXPECT_TRUE(absl::IsInvalidArgument((*group)->AllReduceSum(one, 1, ncclFloat32, none)));
  CUDA_ASSERT(cudaSetDevice(0));
}

}  // namespace
}  // namespace kvtier::cuda
