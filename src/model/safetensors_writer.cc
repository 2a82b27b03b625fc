// Streaming, parallel safetensors writer (safetensors_writer.h).
#include "model/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace kvtier {
namespace {

// Work unit: big enough to amortise a pwrite, small enough to spread a tensor over threads.
constexpr int64_t kChunkBytes = 8 << 20;

absl::Status FileError(const std::string& what, const std::string& path, int err) {
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

absl::Status PwriteFully(int fd, const uint8_t* data, size_t size, int64_t offset, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, data, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return FileError("cannot write", path, errno);
    }
    data += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

// The header JSON padded with spaces so the data starts 8-byte aligned (format rule).
std::string BuildHeader(const std::vector<const TensorToWrite*>& tensors, const SafetensorsWriteOptions& options) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  metadata["format"] = "pt";
  for (const auto& [key, value] : options.metadata) metadata[key] = value;
  header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const TensorToWrite* t : tensors) {
    nlohmann::ordered_json entry;
    entry["dtype"] = std::string(DTypeName(t->dtype));
    entry["shape"] = t->shape;
    entry["data_offsets"] = {offset, offset + t->nbytes()};
    header[t->name] = entry;
    offset += t->nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// Bytes written so far of a whole checkpoint, for options.progress.
struct WriteProgress {
  std::atomic<int64_t> written{0};
  int64_t total = 0;
};

absl::Status WriteFile(const std::string& path, const std::vector<const TensorToWrite*>& tensors,
                       const SafetensorsWriteOptions& options, WriteProgress* progress) {
  const std::string header = BuildHeader(tensors, options);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  const int64_t data_start = 8 + static_cast<int64_t>(header.size());

  struct Job {
    const TensorToWrite* tensor;
    int64_t first;
    int64_t count;
    int64_t file_offset;
  };
  std::vector<Job> jobs;
  int64_t offset = data_start;
  for (const TensorToWrite* t : tensors) {
    const int64_t elem = static_cast<int64_t>(DTypeSize(t->dtype));
    const int64_t per_chunk = std::max<int64_t>(1, kChunkBytes / elem);
    const int64_t n = t->num_elements();
    for (int64_t first = 0; first < n; first += per_chunk) {
      const int64_t count = std::min(per_chunk, n - first);
      jobs.push_back({t, first, count, offset + first * elem});
    }
    offset += t->nbytes();
  }
  const int64_t total_size = offset;

  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create", tmp, errno);
  absl::Status status = PwriteFully(fd, length, 8, 0, tmp);
  if (status.ok()) {
    status = PwriteFully(fd, reinterpret_cast<const uint8_t*>(header.data()), header.size(), 8, tmp);
  }
  if (status.ok() && ::ftruncate(fd, total_size) != 0) status = FileError("cannot size", tmp, errno);

  if (status.ok() && !jobs.empty()) {
    int threads = options.num_threads > 0 ? options.num_threads
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), jobs.size()));
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::condition_variable job_done;
    int workers_left = threads;  // guarded by mu
    auto worker = [&]() {
      std::vector<uint8_t> buffer;
      for (size_t j = next.fetch_add(1); j < jobs.size() && !failed.load(); j = next.fetch_add(1)) {
        const Job& job = jobs[j];
        const size_t bytes = static_cast<size_t>(job.count) * DTypeSize(job.tensor->dtype);
        buffer.resize(bytes);
        job.tensor->produce(job.first, job.count, buffer.data());
        absl::Status s = PwriteFully(fd, buffer.data(), bytes, job.file_offset, tmp);
        progress->written.fetch_add(static_cast<int64_t>(bytes));
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) {
          if (status.ok()) status = s;
          failed = true;
        }
        job_done.notify_one();
      }
      std::lock_guard<std::mutex> lock(mu);
      --workers_left;
      job_done.notify_one();
    };
    std::vector<std::thread> pool;
    if (!options.progress) {
      for (int i = 1; i < threads; ++i) pool.emplace_back(worker);
      worker();
    } else {
      // Progress is heard on the calling thread only: it reports as the workers finish
      // their jobs, and relays a cancel to them (they stop taking jobs).
      for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
      // At least one report once every job is done, before the file is renamed into place,
      // so that a cancel at the end still leaves no file.
      std::unique_lock<std::mutex> lock(mu);
      int64_t reported = -1;
      bool done = false;
      while (!done) {
        job_done.wait(lock, [&] { return workers_left == 0 || progress->written.load() != reported; });
        done = workers_left == 0;
        reported = progress->written.load();
        lock.unlock();
        absl::Status heard =
            ReportProgress(options.progress, "weights", std::min(reported, progress->total), progress->total);
        lock.lock();
        if (!heard.ok() && !failed.load()) {
          if (status.ok()) status = heard;
          failed = true;
        }
      }
    }
    for (std::thread& t : pool) t.join();
  }
  if (::close(fd) != 0 && status.ok()) status = FileError("cannot close", tmp, errno);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    status = FileError("cannot rename into", path, errno);
  }
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create", tmp, errno);
  absl::Status status = PwriteFully(fd, reinterpret_cast<const uint8_t*>(text.data()), text.size(), 0, tmp);
  if (::close(fd) != 0 && status.ok()) status = FileError("cannot close", tmp, errno);
  if (status.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) status = FileError("cannot rename into", path, errno);
  if (!status.ok()) ::unlink(tmp.c_str());
  return status;
}

absl::Status Validate(const std::vector<TensorToWrite>& tensors) {
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat("invalid tensor name '", t.name, "'"));
    }
    if (!names.insert(t.name).second) return absl::InvalidArgumentError(absl::StrCat("duplicate tensor '", t.name, "'"));
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has a negative dimension"));
    }
    if (!t.produce && t.num_elements() > 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has no producer"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t TensorToWrite::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::Status WriteSafetensorsFile(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                  const SafetensorsWriteOptions& options) {
  RETURN_IF_ERROR(Validate(tensors));
  std::vector<const TensorToWrite*> all;
  WriteProgress progress;
  for (const TensorToWrite& t : tensors) {
    all.push_back(&t);
    progress.total += t.nbytes();
  }
  RETURN_IF_ERROR(ReportProgress(options.progress, "weights", 0, progress.total));
  RETURN_IF_ERROR(WriteFile(path, all, options, &progress));
  return ReportProgress(options.progress, "weights", progress.total, progress.total);
}

namespace {

// The tensors of each file WriteSafetensorsCheckpoint writes, in order: one group for
// model.safetensors, or one per shard.
std::vector<std::vector<const TensorToWrite*>> PlanShards(const std::vector<TensorToWrite>& tensors,
                                                          const SafetensorsWriteOptions& options) {
  std::vector<std::vector<const TensorToWrite*>> shards(1);
  int64_t shard_bytes = 0;
  for (const TensorToWrite& t : tensors) {
    if (options.max_shard_bytes > 0 && !shards.back().empty() && shard_bytes + t.nbytes() > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += t.nbytes();
  }
  return shards;
}

std::string ShardName(size_t index, size_t count) {
  return absl::StrFormat("model-%05d-of-%05d.safetensors", index + 1, count);
}

}  // namespace

std::vector<std::string> SafetensorsCheckpointFiles(const std::vector<TensorToWrite>& tensors,
                                                    const SafetensorsWriteOptions& options) {
  const size_t count = PlanShards(tensors, options).size();
  if (count == 1) return {"model.safetensors"};
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back(ShardName(i, count));
  names.push_back("model.safetensors.index.json");
  return names;
}

absl::Status WriteSafetensorsCheckpoint(const std::string& directory, const std::vector<TensorToWrite>& tensors,
                                        const SafetensorsWriteOptions& options) {
  RETURN_IF_ERROR(Validate(tensors));
  const std::vector<std::vector<const TensorToWrite*>> shards = PlanShards(tensors, options);
  WriteProgress progress;
  for (const TensorToWrite& t : tensors) progress.total += t.nbytes();
  RETURN_IF_ERROR(ReportProgress(options.progress, "weights", 0, progress.total));
  if (shards.size() == 1) {
    RETURN_IF_ERROR(WriteFile(directory + "/model.safetensors", shards[0], options, &progress));
    return ReportProgress(options.progress, "weights", progress.total, progress.total);
  }

  int64_t total_bytes = 0;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = ShardName(i, shards.size());
    RETURN_IF_ERROR(WriteFile(directory + "/" + name, shards[i], options, &progress));
    for (const TensorToWrite* t : shards[i]) {
      weight_map[t->name] = name;
      total_bytes += t->nbytes();
    }
  }
  nlohmann::json index;
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = weight_map;
  RETURN_IF_ERROR(WriteText(directory + "/model.safetensors.index.json", index.dump(2) + "\n"));
  return ReportProgress(options.progress, "weights", total_bytes, total_bytes);
}

}  // namespace kvtier
