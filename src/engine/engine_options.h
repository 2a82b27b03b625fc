// EngineOptions: everything a context is created with. Plain value type; validated by
// Validate() before an Engine is built.
#ifndef KVTIER_ENGINE_ENGINE_OPTIONS_H_
#define KVTIER_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "backend/cuda_options.h"
#include "backend/storage_dtype.h"
#include "common/progress.h"
#include "kv/remote_tier_options.h"
#include "kv/tier_preparation.h"

namespace kvtier {

class Backend;
class FileIo;

enum class PreemptionMode { kAuto, kSwap, kRecompute };

struct EngineOptions {
  std::string backend = "auto";  // "auto" | "cpu" | "cpu-reference" | "cuda"
  int32_t num_threads = 0;       // CPU backend threads, 0 = all cores
  // Device-tier KV budget. 0 = everything gpu_mem_limit leaves after weights and
  // workspace (needs gpu_mem_limit > 0); none = sized from the model (kv_pool_size.h).
  std::optional<int64_t> gpu_kv_bytes;
  int64_t host_kv_bytes = 0;
  int64_t disk_kv_bytes = 0;
  std::string disk_path;
  int64_t block_tokens = 16;
  int64_t max_tokens_per_step = 512;
  int64_t max_running = 256;
  int64_t max_waiting = 1024;
  // Sequences longer than the device tier (their older KV read from the host tier in
  // place, docs/LONG_CONTEXT.md) running at once; 0 refuses them at admission. Backends
  // that cannot read host-resident KV refuse them whatever this says.
  int64_t max_long_running = 1;
  PreemptionMode preemption = PreemptionMode::kAuto;
  int64_t gpu_mem_limit = 0;  // 0 = no cap
  // Options weight_dtype / kv_dtype (BackendOptions), passed to the backend unchanged.
  StorageDType weight_dtype = StorageDType::kAuto;
  StorageDType kv_dtype = StorageDType::kAuto;
  // Options tensor_parallel, devices, sharded_reduction (BackendOptions), passed unchanged.
  int32_t tensor_parallel = 1;
  std::vector<int32_t> devices;
  bool sharded_reduction = false;
  bool prefix_cache = true;
  // KV layer groups (engine/kv_layer_groups_choice.h): a model with sliding-window layers
  // keeps each window's layers in blocks of their own, given back once no query reads them,
  // where the backend and the other options allow (else one group, as off).
  bool kv_layer_groups = true;
  // A prompt prefix found only in a slow tier (disk, remote) is partly recomputed while the
  // rest loads, split by measured cost (engine/load_plan.h); off: always loaded.
  bool load_or_recompute = true;
  // Device blocks kept free for running decodes when admitting waiting sequences.
  int64_t watermark_blocks = 1;
  // CUDA backend switches (BackendOptions::cuda), passed to the backend unchanged.
  CudaOptions cuda;
  // File system for the disk tier; nullptr = the real one (tests inject faults here).
  FileIo* file_io = nullptr;
  // Tests of other disk paths: full blocks are not written to disk soon after filling
  // (crash durability, KvCacheOptions::write_behind) but only when evicted or at shutdown.
  bool disk_write_behind = true;
  // The remote KV tier: a Redis node or cluster shared by every process of a service
  // (remote_kv_url, remote_kv_ttl_seconds, remote_kv_max_bytes_in_flight,
  // remote_kv_timeout_ms, remote_kv_retry_ms, remote_kv_connections).
  RemoteTierOptions remote;
  // How the host and disk tiers are prepared in the background after creation (chunk sizes;
  // tests make them small).
  TierPreparationOptions tier_preparation;
  // Hears Engine::Create's stages ("weights", "kv_pools", "warmup"); Create returns
  // Cancelled when it asks to stop. May be empty.
  ProgressFn progress;
  // Tests: wraps the created backend (e.g. to delay its asynchronous copies); empty = none.
  std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)> wrap_backend;

  // InvalidArgument naming the option when a value is out of range or inconsistent.
  absl::Status Validate() const;
};

}  // namespace kvtier

#endif  // KVTIER_ENGINE_ENGINE_OPTIONS_H_
