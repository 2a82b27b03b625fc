// C API: kvt_options — key/value setters over EngineOptions, validated per key.
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "backend/tensor_parallel.h"
#include "api/handles.h"
#include "common/byte_size.h"
#include "remote/redis_address.h"

namespace {

using kvtier::EngineOptions;

struct IntKey {
  int64_t min;
  int64_t max;
  std::function<void(EngineOptions&, int64_t)> set;
};

const std::map<std::string, IntKey>& IntKeys() {
  static const auto* keys = new std::map<std::string, IntKey>{
      {"threads", {0, 4096, [](EngineOptions& o, int64_t v) { o.num_threads = static_cast<int32_t>(v); }}},
      {"gpu_kv_bytes", {0, INT64_MAX, [](EngineOptions& o, int64_t v) { o.gpu_kv_bytes = v; }}},
      {"host_kv_bytes", {0, INT64_MAX, [](EngineOptions& o, int64_t v) { o.host_kv_bytes = v; }}},
      {"disk_kv_bytes", {0, INT64_MAX, [](EngineOptions& o, int64_t v) { o.disk_kv_bytes = v; }}},
      {"block_tokens", {1, 1024, [](EngineOptions& o, int64_t v) { o.block_tokens = v; }}},
      {"max_tokens_per_step", {1, 1 << 20, [](EngineOptions& o, int64_t v) { o.max_tokens_per_step = v; }}},
      {"max_running", {1, 65536, [](EngineOptions& o, int64_t v) { o.max_running = v; }}},
      {"max_waiting", {1, 1 << 24, [](EngineOptions& o, int64_t v) { o.max_waiting = v; }}},
      {"gpu_mem_limit", {0, INT64_MAX, [](EngineOptions& o, int64_t v) { o.gpu_mem_limit = v; }}},
      // CUDA backend switches (backend/cuda_options.h): 1 = on (the default), 0 = off.
      {"cuda_graphs", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.decode_graphs = v != 0; }}},
      {"cuda_fast_attention", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.fast_attention = v != 0; }}},
      // Positions of host-resident KV a step may stream (long sequences); 0 = off.
      {"cuda_host_kv_stream_tokens",
       {0, int64_t{1} << 24, [](EngineOptions& o, int64_t v) { o.cuda.host_kv_stream_tokens = v; }}},
      {"cuda_skinny_gemm", {0, 3, [](EngineOptions& o, int64_t v) { o.cuda.skinny_gemm = static_cast<int32_t>(v); }}},
      {"cuda_fp8_activations", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.fp8_activations = v != 0; }}},
      {"cuda_prefill_wgmma", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.prefill_wgmma = v != 0; }}},
      {"cuda_prefill_cudnn",
       {0, 2, [](EngineOptions& o, int64_t v) { o.cuda.prefill_cudnn = static_cast<kvtier::CudnnPrefillUse>(v); }}},
      {"cuda_prefill_fp8_attention",
       {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.prefill_fp8_attention = v != 0; }}},
      {"cuda_overlap_attention", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.overlap_attention = v != 0; }}},
      // Kernel variants for timing runs (backend/cuda_options.h, CudaLaunchOptions).
      {"cuda_prefill_wgmma_variant",
       {0, 7, [](EngineOptions& o, int64_t v) { o.cuda.launch.prefill_wgmma_variant = static_cast<int32_t>(v); }}},
      {"cuda_decode_fp8_pair_tiles",
       {-1, 2, [](EngineOptions& o, int64_t v) { o.cuda.launch.decode_fp8_pair_tiles = static_cast<int32_t>(v); }}},
      {"cuda_moe_decode_fused",
       {-1, 1, [](EngineOptions& o, int64_t v) { o.cuda.launch.moe_decode_fused = static_cast<int32_t>(v); }}},
      {"cuda_gemv_bulk", {-1, 1, [](EngineOptions& o, int64_t v) { o.cuda.launch.gemv_bulk = static_cast<int32_t>(v); }}},
      {"cuda_moe_down_bulk",
       {-1, 1, [](EngineOptions& o, int64_t v) { o.cuda.launch.moe_down_bulk = static_cast<int32_t>(v); }}},
      {"cuda_moe_skinny",
       {-1, 1, [](EngineOptions& o, int64_t v) { o.cuda.launch.moe_skinny = static_cast<int32_t>(v); }}},
      {"cuda_l2_prefetch",
       {-1, 3, [](EngineOptions& o, int64_t v) { o.cuda.launch.l2_prefetch = static_cast<int32_t>(v); }}},
      {"cuda_pdl", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.launch.pdl = v != 0; }}},
      {"cuda_pdl_early", {0, 1, [](EngineOptions& o, int64_t v) { o.cuda.launch.pdl_early_trigger = v != 0; }}},
      // Tensor parallelism (devices is a string).
      {"tensor_parallel",
       {1, kvtier::kMaxTensorParallel,
        [](EngineOptions& o, int64_t v) { o.tensor_parallel = static_cast<int32_t>(v); }}},
      {"sharded_reduction", {0, 1, [](EngineOptions& o, int64_t v) { o.sharded_reduction = v != 0; }}},
      {"load_or_recompute", {0, 1, [](EngineOptions& o, int64_t v) { o.load_or_recompute = v != 0; }}},
      {"prefix_cache", {0, 1, [](EngineOptions& o, int64_t v) { o.prefix_cache = v != 0; }}},
      {"kv_layer_groups", {0, 1, [](EngineOptions& o, int64_t v) { o.kv_layer_groups = v != 0; }}},
      // The remote KV tier (remote_kv_url is a string).
      {"remote_kv_ttl_seconds", {0, INT64_MAX, [](EngineOptions& o, int64_t v) { o.remote.ttl_seconds = v; }}},
      {"remote_kv_max_bytes_in_flight",
       {1, INT64_MAX, [](EngineOptions& o, int64_t v) { o.remote.max_bytes_in_flight = v; }}},
      {"remote_kv_timeout_ms", {1, 600000, [](EngineOptions& o, int64_t v) { o.remote.timeout_ms = v; }}},
      {"remote_kv_retry_ms", {0, 86400000, [](EngineOptions& o, int64_t v) { o.remote.retry_ms = v; }}},
      {"remote_kv_connections", {1, 64, [](EngineOptions& o, int64_t v) { o.remote.connections = v; }}},
      {"cuda_gemv_prefetch",
       {2, 8, [](EngineOptions& o, int64_t v) { o.cuda.launch.gemv_prefetch = static_cast<int32_t>(v); }}},
  };
  return *keys;
}

bool IsByteKey(const std::string& key) {
  return key == "gpu_kv_bytes" || key == "host_kv_bytes" || key == "disk_kv_bytes" || key == "gpu_mem_limit" ||
         key == "remote_kv_max_bytes_in_flight";
}

kvt_status Fail(kvt_options* options, std::string message) {
  options->error = std::move(message);
  return KVT_ERR_INVALID_ARGUMENT;
}

// "0,1": GPU ordinals, comma-separated; "" for none (the first tensor_parallel GPUs).
std::optional<std::vector<int32_t>> ParseDevices(const std::string& text) {
  std::vector<int32_t> devices;
  if (text.empty()) return devices;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int32_t ordinal = 0;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) return std::nullopt;
    devices.push_back(ordinal);
  }
  return devices;
}

}  // namespace

extern "C" {

KVT_API kvt_status kvt_options_create(kvt_options** out) {
  if (out == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    *out = new kvt_options();
    return KVT_OK;
  });
}

KVT_API void kvt_options_free(kvt_options* options) { delete options; }

KVT_API kvt_status kvt_options_set_int(kvt_options* options, const char* key, int64_t value) {
  if (options == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (key == nullptr) return Fail(options, "option key is NULL");
    auto it = IntKeys().find(key);
    if (it == IntKeys().end()) {
      const std::string k = key;
      if (k == "backend" || k == "disk_path" || k == "preemption" || k == "remote_kv_url" || k == "weight_dtype" ||
          k == "kv_dtype" || k == "devices") {
        return Fail(options, absl::StrCat("option '", key, "' takes a string: use kvt_options_set_string"));
      }
      return Fail(options, absl::StrCat("unknown option '", key, "'"));
    }
    if (value < it->second.min || value > it->second.max) {
      return Fail(options, absl::StrCat("option '", key, "' must be in [", it->second.min, ", ", it->second.max,
                                        "], got ", value));
    }
    if (std::string_view(key) == "tensor_parallel") {
      const absl::Status degree = kvtier::ValidateTensorParallelOptions(static_cast<int32_t>(value), {});
      if (!degree.ok()) return Fail(options, std::string(degree.message()));
    }
    it->second.set(options->engine, value);
    options->error.clear();
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_options_set_string(kvt_options* options, const char* key, const char* value) {
  if (options == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    if (key == nullptr) return Fail(options, "option key is NULL");
    if (value == nullptr) return Fail(options, absl::StrCat("value of option '", key, "' is NULL"));
    const std::string k = key, v = value;
    if (k == "backend") {
      if (v != "auto" && v != "cpu" && v != "cpu-reference" && v != "cuda") {
        return Fail(options, absl::StrCat("option 'backend' must be auto, cpu, cpu-reference or cuda, got '", v, "'"));
      }
      options->engine.backend = v;
    } else if (k == "devices") {
      std::optional<std::vector<int32_t>> devices = ParseDevices(v);
      if (!devices) {
        return Fail(options, absl::StrCat("option 'devices' must list GPU ordinals as \"0,1\", got '", v, "'"));
      }
      options->engine.devices = *std::move(devices);
    } else if (k == "disk_path") {
      options->engine.disk_path = v;
    } else if (k == "remote_kv_url") {
      if (!v.empty()) {  // "" turns the remote tier off
        if (auto nodes = kvtier::ParseRemoteKvUrl(v); !nodes.ok()) return Fail(options, std::string(nodes.status().message()));
      }
      options->engine.remote.url = v;
    } else if (k == "preemption") {
      if (v == "auto") options->engine.preemption = kvtier::PreemptionMode::kAuto;
      else if (v == "swap") options->engine.preemption = kvtier::PreemptionMode::kSwap;
      else if (v == "recompute") options->engine.preemption = kvtier::PreemptionMode::kRecompute;
      else return Fail(options, absl::StrCat("option 'preemption' must be auto, swap or recompute, got '", v, "'"));
    } else if (k == "weight_dtype" || k == "kv_dtype") {
      std::optional<kvtier::StorageDType> dtype = kvtier::ParseStorageDType(v);
      if (k == "kv_dtype" && dtype && kvtier::IsBlockStorageDType(*dtype)) dtype.reset();  // weights only
      if (!dtype) {
        return Fail(options, absl::StrCat("option '", k, "' must be auto, bf16, fp16 or fp8",
                                          k == "weight_dtype" ? " (or q8_0, q4_k on the cpu backend)" : "", ", got '", v,
                                          "'"));
      }
      (k == "weight_dtype" ? options->engine.weight_dtype : options->engine.kv_dtype) = *dtype;
    } else if (k == "gpu_kv_bytes" && v == "auto") {
      options->engine.gpu_kv_bytes.reset();  // sized from the model, as when never set
    } else if (IntKeys().count(k)) {
      int64_t parsed = 0;
      if (IsByteKey(k)) {
        auto bytes = kvtier::ParseByteSize(v);
        if (!bytes.ok()) return Fail(options, absl::StrCat("option '", k, "': ", bytes.status().message()));
        parsed = *bytes;
      } else if (!absl::SimpleAtoi(v, &parsed)) {
        return Fail(options, absl::StrCat("option '", k, "' needs an integer, got '", v, "'"));
      }
      return kvt_options_set_int(options, key, parsed);
    } else {
      return Fail(options, absl::StrCat("unknown option '", k, "'"));
    }
    options->error.clear();
    return KVT_OK;
  });
}

KVT_API kvt_status kvt_options_set_progress_callback(kvt_options* options, kvt_progress_fn progress, void* user_data) {
  if (options == nullptr) return KVT_ERR_INVALID_ARGUMENT;
  return kvtier::api::Guard([&] {
    options->engine.progress = kvtier::api::ToProgressFn(progress, user_data);
    options->error.clear();
    return KVT_OK;
  });
}

KVT_API const char* kvt_options_errmsg(const kvt_options* options) {
  return options == nullptr ? "options handle is NULL" : options->error.c_str();
}

}  // extern "C"
