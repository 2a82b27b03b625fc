// Implementation of EngineOptions::Validate.
#include "engine/engine_options.h"

#include "absl/strings/str_cat.h"
#include "backend/tensor_parallel.h"
#include "common/status_macros.h"
#include "remote/redis_address.h"

namespace kvtier {

absl::Status EngineOptions::Validate() const {
  if (backend != "auto" && backend != "cpu" && backend != "cpu-reference" && backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend must be auto, cpu, cpu-reference or cuda, got '", backend, "'"));
  }
  if (num_threads < 0 || num_threads > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be in [0, 4096], got ", num_threads));
  }
  if (gpu_kv_bytes.has_value() && *gpu_kv_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("gpu_kv_bytes must be >= 0, got ", *gpu_kv_bytes));
  }
  if (gpu_kv_bytes == 0 && gpu_mem_limit == 0) {
    return absl::InvalidArgumentError("gpu_kv_bytes 0 (use what the limit leaves) needs gpu_mem_limit > 0");
  }
  if (host_kv_bytes < 0) return absl::InvalidArgumentError(absl::StrCat("host_kv_bytes must be >= 0, got ", host_kv_bytes));
  if (disk_kv_bytes < 0) return absl::InvalidArgumentError(absl::StrCat("disk_kv_bytes must be >= 0, got ", disk_kv_bytes));
  if (disk_kv_bytes > 0 && disk_path.empty()) {
    return absl::InvalidArgumentError("disk_kv_bytes > 0 needs a disk_path");
  }
  if (block_tokens < 1 || block_tokens > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("block_tokens must be in [1, 1024], got ", block_tokens));
  }
  if (max_tokens_per_step < 1 || max_tokens_per_step > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens_per_step must be in [1, 1048576], got ", max_tokens_per_step));
  }
  if (max_running < 1 || max_running > 65536) {
    return absl::InvalidArgumentError(absl::StrCat("max_running must be in [1, 65536], got ", max_running));
  }
  if (max_long_running < 0 || max_long_running > max_running) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_long_running must be in [0, max_running = ", max_running, "], got ", max_long_running));
  }
  if (max_waiting < 1 || max_waiting > (1 << 24)) {
    return absl::InvalidArgumentError(absl::StrCat("max_waiting must be in [1, 16777216], got ", max_waiting));
  }
  RETURN_IF_ERROR(ValidateTensorParallelOptions(tensor_parallel, devices));
  if (gpu_mem_limit < 0) return absl::InvalidArgumentError(absl::StrCat("gpu_mem_limit must be >= 0, got ", gpu_mem_limit));
  if (tier_preparation.host_chunk_bytes < 1 || tier_preparation.disk_chunk_bytes < 1 ||
      tier_preparation.disk_bytes_at_create < 0 || tier_preparation.host_bytes_at_create < 0 ||
      !(tier_preparation.host_pin_bytes_per_second >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tier preparation needs chunks of >= 1 byte, >= 0 bytes at creation and a pin speed >= 0, got host chunk ",
        tier_preparation.host_chunk_bytes, ", disk chunk ", tier_preparation.disk_chunk_bytes, ", disk at creation ",
        tier_preparation.disk_bytes_at_create, ", host at creation ", tier_preparation.host_bytes_at_create,
        ", pin speed ", tier_preparation.host_pin_bytes_per_second, " B/s"));
  }
  if (!remote.url.empty()) {
    if (absl::StatusOr<std::vector<RedisAddress>> nodes = ParseRemoteKvUrl(remote.url); !nodes.ok()) return nodes.status();
  }
  if (remote.ttl_seconds < 0) {
    return absl::InvalidArgumentError(absl::StrCat("remote_kv_ttl_seconds must be >= 0, got ", remote.ttl_seconds));
  }
  if (remote.max_bytes_in_flight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote_kv_max_bytes_in_flight must be >= 1, got ", remote.max_bytes_in_flight));
  }
  if (remote.connections < 1 || remote.connections > 64) {
    return absl::InvalidArgumentError(absl::StrCat("remote_kv_connections must be 1..64, got ", remote.connections));
  }
  if (remote.timeout_ms < 1 || remote.retry_ms < 0) {
    return absl::InvalidArgumentError(absl::StrCat("remote_kv_timeout_ms must be >= 1 and remote_kv_retry_ms >= 0, got ",
                                                   remote.timeout_ms, " and ", remote.retry_ms));
  }
  return absl::OkStatus();
}

}  // namespace kvtier
