// The host-KV gather kernel alone (host_kv_stream.h) against the copy engine on the same
// bytes: where the ceiling of streaming host-resident KV is on this machine. Not a test.
//
// Usage: kvtier_host_kv_gather_bench [--blocks N] [--fp8] [--kinds loads,loads256,bulk,batch]
//                                    [--ctas 33,66,132] [--loads 4,8,16] [--repeats R] [--split]
// (kind codes, --fp8 only: the copy engine on the codes, a kernel on the scales)
// A pinned, mapped host buffer holds N blocks of the Llama-3-8B KV shape restricted to four
// layers (16 tokens, 8 KV heads, head_dim 128: 64 KiB per layer in bf16; with --fp8 32 KiB of
// codes and 1 KiB of row scales per layer, the scales after every layer's codes); the gather
// copies layer 1 of every block, in a shuffled block order, into a device staging buffer, as
// one decode step of a long sequence does per layer. Every shape is checked byte for byte
// against the host copy, then timed over R back-to-back launches (launch gaps included).
// Prints one line per shape: GB/s (staged bytes / time) and "ok" or "WRONG" (kind batch: the
// copy engine, one cudaMemcpyBatchAsync of every slice). The reference line: cudaMemcpyAsync
// of the same byte count from one contiguous pinned range (the link's ceiling). --split: the
// copy engine and the best kernel shape side by side, each on a share of the slices.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/host_kv_stream.h"
#include "bench_check.h"
#include "bench_env.h"

namespace {

using kvtier::IntList;
using kvtier::cuda::HostKvGather;
using kvtier::cuda::HostKvGatherKind;
using kvtier::cuda::HostKvGatherShape;

std::vector<std::string> WordList(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

const char* KindName(HostKvGatherKind kind) {
  switch (kind) {
    case HostKvGatherKind::kLoads: return "loads";
    case HostKvGatherKind::kLoads256: return "loads256";
    case HostKvGatherKind::kBulk: return "bulk";
    case HostKvGatherKind::kCopyBatch: return "batch";
    case HostKvGatherKind::kSplit: return "split";
    case HostKvGatherKind::kCopyCodes: return "codes";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 2048, repeats = 20;
  bool fp8 = false, split = false;
  std::string kinds = "loads,loads256", ctas_list, loads_list = "4,8,16";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--blocks") blocks = std::atoi(next().c_str());
    else if (arg == "--repeats") repeats = std::atoi(next().c_str());
    else if (arg == "--fp8") fp8 = true;
    else if (arg == "--split") split = true;
    else if (arg == "--kinds") kinds = next();
    else if (arg == "--ctas") ctas_list = next();
    else if (arg == "--loads") loads_list = next();
    else {
      std::fprintf(stderr, "unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (blocks < 1 || repeats < 1) {
    std::fprintf(stderr, "--blocks and --repeats must be positive\n");
    return 2;
  }
  cudaDeviceProp prop;
  KVT_BENCH_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sm = prop.multiProcessorCount;
  if (ctas_list.empty()) ctas_list = std::to_string(sm / 4) + "," + std::to_string(sm / 2) + "," + std::to_string(sm) +
                                     "," + std::to_string(2 * sm) + "," + std::to_string(4 * sm);

  constexpr int kLayers = 4, kLayer = 1;
  constexpr size_t kElementsPerLayer = 2 * 8 * 16 * 128;
  const size_t code_bytes = kElementsPerLayer * (fp8 ? 1 : 2);
  const size_t scale_bytes = fp8 ? kElementsPerLayer / 128 * 4 : 0;
  const size_t block_bytes = kLayers * (code_bytes + scale_bytes);
  const size_t slot_bytes = code_bytes + scale_bytes;
  HostKvGather g;
  g.num_slices = blocks;
  g.segments[0] = {kLayer * code_bytes, code_bytes};
  g.num_segments = fp8 ? 2 : 1;
  if (fp8) g.segments[1] = {kLayers * code_bytes + kLayer * scale_bytes, scale_bytes};

  uint8_t* host = nullptr;
  KVT_BENCH_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), block_bytes * blocks, cudaHostAllocMapped));
  std::mt19937_64 rng(7);
  for (size_t i = 0; i < block_bytes * blocks / 8; ++i) reinterpret_cast<uint64_t*>(host)[i] = rng();
  std::vector<int> order(blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<uint64_t> addresses(blocks);
  std::vector<uint8_t> expected(slot_bytes * blocks);
  for (int s = 0; s < blocks; ++s) {
    const uint8_t* block = host + static_cast<size_t>(order[s]) * block_bytes;
    addresses[s] = reinterpret_cast<uint64_t>(block);
    std::memcpy(&expected[s * slot_bytes], block + g.segments[0].offset, g.segments[0].bytes);
    if (fp8) std::memcpy(&expected[s * slot_bytes + code_bytes], block + g.segments[1].offset, scale_bytes);
  }
  uint64_t* device_addresses = nullptr;
  uint8_t* staged = nullptr;
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&device_addresses, blocks * sizeof(uint64_t)));
  KVT_BENCH_CUDA_CHECK(cudaMemcpy(device_addresses, addresses.data(), blocks * sizeof(uint64_t), cudaMemcpyHostToDevice));
  KVT_BENCH_CUDA_CHECK(cudaMalloc(&staged, slot_bytes * blocks));
  g.blocks = device_addresses;
  g.host_blocks = addresses.data();
  g.staged = staged;
  kvtier::cuda::HostKvCopyBatch batch;
  batch.Reserve(blocks);
  kvtier::cuda::HostKvAuxStream aux;  // kinds split and codes
  KVT_BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&aux.stream, cudaStreamNonBlocking));
  KVT_BENCH_CUDA_CHECK(cudaEventCreateWithFlags(&aux.fork, cudaEventDisableTiming));
  KVT_BENCH_CUDA_CHECK(cudaEventCreateWithFlags(&aux.join, cudaEventDisableTiming));
  cudaStream_t stream;
  KVT_BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start, end;
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&start));
  KVT_BENCH_CUDA_CHECK(cudaEventCreate(&end));
  const double bytes = static_cast<double>(slot_bytes) * blocks;
  std::printf("device %s, %d SMs; %d blocks, %s, %zu bytes per slot, %.1f MiB per gather, %d repeats\n", prop.name,
              sm, blocks, fp8 ? "fp8 (codes + scales)" : "bf16", slot_bytes, bytes / (1 << 20), repeats);

  auto time_it = [&](auto&& launch) {
    launch();
    KVT_BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
    KVT_BENCH_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < repeats; ++r) launch();
    KVT_BENCH_CUDA_CHECK(cudaEventRecord(end, stream));
    KVT_BENCH_CUDA_CHECK(cudaEventSynchronize(end));
    float ms = 0;
    KVT_BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
    return bytes * repeats / (ms * 1e-3) / 1e9;
  };
  std::vector<uint8_t> got(slot_bytes * blocks);
  auto check = [&]() {
    KVT_BENCH_CUDA_CHECK(cudaMemcpy(got.data(), staged, got.size(), cudaMemcpyDeviceToHost));
    const bool ok = std::memcmp(got.data(), expected.data(), got.size()) == 0;
    KVT_BENCH_CUDA_CHECK(cudaMemset(staged, 0, got.size()));
    return ok;
  };

  // The link's ceiling: one contiguous pinned range of the same size, copy engine.
  const double memcpy_gbs = time_it([&] {
    KVT_BENCH_CUDA_CHECK(cudaMemcpyAsync(staged, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream));
  });
  std::printf("memcpy_contiguous GB/s %.2f\n", memcpy_gbs);
  double best = 0, best_kernel = 0;
  std::string best_name;
  HostKvGatherShape best_kernel_shape;
  for (const std::string& kind_name : WordList(kinds)) {
    HostKvGatherShape shape;
    if (kind_name == "loads") shape.kind = HostKvGatherKind::kLoads;
    else if (kind_name == "loads256") shape.kind = HostKvGatherKind::kLoads256;
    else if (kind_name == "bulk") shape.kind = HostKvGatherKind::kBulk;
    else if (kind_name == "batch") shape.kind = HostKvGatherKind::kCopyBatch;
    else if (kind_name == "codes") shape.kind = HostKvGatherKind::kCopyCodes;
    else {
      std::fprintf(stderr, "unknown kind %s\n", kind_name.c_str());
      return 2;
    }
    const bool kernel = shape.kind == HostKvGatherKind::kLoads || shape.kind == HostKvGatherKind::kLoads256;
    const std::vector<int> loads = kernel || shape.kind == HostKvGatherKind::kCopyCodes ? IntList(loads_list)
                                                                                       : std::vector<int>{4};
    const std::vector<int> ctas = shape.kind == HostKvGatherKind::kCopyBatch ? std::vector<int>{1} : IntList(ctas_list);
    for (int l : loads) {
      for (int c : ctas) {
        shape.loads = l;
        shape.ctas = c;
        KVT_BENCH_CUDA_CHECK(kvtier::cuda::GatherHostKv(g, shape, stream, &batch, &aux));
        KVT_BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
        const bool ok = check();
        const double gbs = time_it([&] { KVT_BENCH_CUDA_CHECK(kvtier::cuda::GatherHostKv(g, shape, stream, &batch, &aux)); });
        char name[64];
        std::snprintf(name, sizeof(name), "%s loads %d ctas %d", KindName(shape.kind), l, c);
        std::printf("gather %s GB/s %.2f (%.3f of memcpy) %s\n", name, gbs, gbs / memcpy_gbs, ok ? "ok" : "WRONG");
        std::fflush(stdout);
        if (ok && gbs > best) {
          best = gbs;
          best_name = name;
        }
        if (ok && kernel && gbs > best_kernel) {
          best_kernel = gbs;
          best_kernel_shape = shape;
        }
      }
    }
  }
  std::printf("best gather: %s GB/s %.2f (%.3f of memcpy)\n", best_name.c_str(), best, best / memcpy_gbs);

  // --split: the copy engine (one batch) takes the first fraction of the slices while the
  // best kernel shape above gathers the rest on a second stream: both paths on the link.
  if (split && best_kernel > 0) {
    cudaStream_t aux;
    KVT_BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&aux, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    KVT_BENCH_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    KVT_BENCH_CUDA_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    HostKvGatherShape copy_shape;
    copy_shape.kind = HostKvGatherKind::kCopyBatch;
    for (double fraction : {0.2, 0.35, 0.5, 0.65, 0.8}) {
      const int n_copy = static_cast<int>(blocks * fraction);
      HostKvGather by_copy = g, by_kernel = g;
      by_copy.num_slices = n_copy;
      by_kernel.num_slices = blocks - n_copy;
      by_kernel.blocks = device_addresses + n_copy;
      by_kernel.host_blocks = addresses.data() + n_copy;
      by_kernel.staged = staged + static_cast<size_t>(n_copy) * slot_bytes;
      auto launch = [&] {
        KVT_BENCH_CUDA_CHECK(cudaEventRecord(fork, stream));
        KVT_BENCH_CUDA_CHECK(cudaStreamWaitEvent(aux, fork, 0));
        KVT_BENCH_CUDA_CHECK(kvtier::cuda::GatherHostKv(by_kernel, best_kernel_shape, aux));
        KVT_BENCH_CUDA_CHECK(kvtier::cuda::GatherHostKv(by_copy, copy_shape, stream, &batch));
        KVT_BENCH_CUDA_CHECK(cudaEventRecord(join, aux));
        KVT_BENCH_CUDA_CHECK(cudaStreamWaitEvent(stream, join, 0));
      };
      launch();
      KVT_BENCH_CUDA_CHECK(cudaStreamSynchronize(stream));
      const bool ok = check();
      const double gbs = time_it(launch);
      std::printf("split copy %.2f + %s loads %d ctas %d GB/s %.2f (%.3f of memcpy) %s\n", fraction,
                  KindName(best_kernel_shape.kind), best_kernel_shape.loads, best_kernel_shape.ctas, gbs,
                  gbs / memcpy_gbs, ok ? "ok" : "WRONG");
      std::fflush(stdout);
    }
  }
  cudaFreeHost(host);
  return 0;
}
