// DeviceSamplerChain (device_sampler_chain.h).
#include "backend/cuda/device_sampler_chain.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backend/cuda/cuda_check.h"
#include "backend/sampling_ranges.h"
#include "common/status_macros.h"

namespace kvtier {
namespace {

// Rows' adjustments: room for every token of a row at least, so any row fits one group.
int64_t MaxAdjustments(int64_t vocab) { return std::max<int64_t>(int64_t{1} << 18, vocab); }

size_t Align(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

}  // namespace

DeviceSamplerChain::DeviceSamplerChain(int64_t max_rows, int64_t vocab)
    : max_rows_(max_rows),
      max_samples_(max_rows + kMaxCompletions),
      max_adjustments_(MaxAdjustments(vocab)),
      vocab_(vocab) {}

int64_t DeviceSamplerChain::DeviceBytes(int64_t max_rows, int64_t vocab) {
  const int64_t samples = max_rows + kMaxCompletions;
  return static_cast<int64_t>(Align(samples * sizeof(cuda::SampleParams)) + Align(samples * sizeof(cuda::LogprobTask)) +
                              Align(max_rows * sizeof(cuda::AdjustRange)) +
                              Align(MaxAdjustments(vocab) * (sizeof(cuda::DeviceAdjustment) + sizeof(float))) +
                              3 * Align(samples * 4) + 2 * Align(samples * kMaxTopLogprobs * 4));
}

absl::StatusOr<std::unique_ptr<DeviceSamplerChain>> DeviceSamplerChain::Create(int64_t max_rows, int64_t vocab,
                                                                               const Allocator& alloc) {
  std::unique_ptr<DeviceSamplerChain> chain(new DeviceSamplerChain(max_rows, vocab));
  DeviceSamplerChain& c = *chain;
  const size_t s = static_cast<size_t>(c.max_samples_), a = static_cast<size_t>(c.max_adjustments_);
  const size_t top = s * kMaxTopLogprobs;
  auto take = [&](auto** ptr, size_t count, const char* what) -> absl::Status {
    ASSIGN_OR_RETURN(void* p, alloc(count * sizeof(**ptr), what));
    *ptr = static_cast<std::remove_reference_t<decltype(*ptr)>>(p);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(take(&c.params_, s, "sampler params"));
  RETURN_IF_ERROR(take(&c.tasks_, s, "logprob tasks"));
  RETURN_IF_ERROR(take(&c.ranges_, static_cast<size_t>(max_rows), "adjustment ranges"));
  RETURN_IF_ERROR(take(&c.adjustments_, a, "logit adjustments"));
  RETURN_IF_ERROR(take(&c.raw_, a, "raw logits"));
  RETURN_IF_ERROR(take(&c.ids_, s, "sampled ids"));
  RETURN_IF_ERROR(take(&c.lse_, s, "log-sum-exp"));
  RETURN_IF_ERROR(take(&c.logprobs_, s, "logprobs"));
  RETURN_IF_ERROR(take(&c.top_ids_, top, "top logprob ids"));
  RETURN_IF_ERROR(take(&c.top_logprobs_, top, "top logprobs"));
  // Pinned staging: the inputs and outputs, each at its aligned offset.
  const size_t sizes[] = {Align(s * sizeof(cuda::SampleParams)), Align(s * sizeof(cuda::LogprobTask)),
                          Align(static_cast<size_t>(max_rows) * sizeof(cuda::AdjustRange)),
                          Align(a * sizeof(cuda::DeviceAdjustment)), Align(s * 4), Align(s * 4), Align(top * 4),
                          Align(top * 4)};
  size_t total = 0;
  for (size_t b : sizes) total += b;
  CUDA_RETURN_IF_ERROR(cudaHostAlloc(&c.host_memory_, total, cudaHostAllocDefault));
  uint8_t* at = static_cast<uint8_t*>(c.host_memory_);
  auto next = [&](size_t i) {
    uint8_t* p = at;
    at += sizes[i];
    return p;
  };
  c.host_.params = reinterpret_cast<cuda::SampleParams*>(next(0));
  c.host_.tasks = reinterpret_cast<cuda::LogprobTask*>(next(1));
  c.host_.ranges = reinterpret_cast<cuda::AdjustRange*>(next(2));
  c.host_.adjustments = reinterpret_cast<cuda::DeviceAdjustment*>(next(3));
  c.host_.ids = reinterpret_cast<int32_t*>(next(4));
  c.host_.logprobs = reinterpret_cast<float*>(next(5));
  c.host_.top_ids = reinterpret_cast<int32_t*>(next(6));
  c.host_.top_logprobs = reinterpret_cast<float*>(next(7));
  return chain;
}

DeviceSamplerChain::~DeviceSamplerChain() {
  if (host_memory_ != nullptr) cudaFreeHost(host_memory_);
}

absl::Status DeviceSamplerChain::Run(float* logits, int64_t first_row, int64_t num_rows, const SamplingBatch& batch,
                                     std::span<const int32_t> samples, SamplingResult* result, cudaStream_t stream,
                                     const CudaLaunchOptions& launch) {
  if (num_rows > max_rows_) {
    return absl::InternalError(absl::StrCat("sampler chain: ", num_rows, " rows, room for ", max_rows_));
  }
  auto adjustments_of = [&](int64_t row) -> int64_t {
    return batch.row_adjustments.empty() ? 0 : batch.row_adjustments[static_cast<size_t>(row)].count;
  };
  // Groups of whole rows, in order, each within the buffers.
  size_t next = 0;
  int64_t row = first_row;
  const int64_t end_row = first_row + num_rows;
  while (row < end_row) {
    const int64_t group_begin = row;
    const size_t group_first = next;
    int64_t adjustments = 0;
    while (row < end_row) {
      size_t row_end = next;
      while (row_end < samples.size() && batch.samples[static_cast<size_t>(samples[row_end])].logits_row == row) ++row_end;
      const int64_t row_samples = static_cast<int64_t>(row_end - next);
      const bool fits = static_cast<int64_t>(row_end - group_first) <= max_samples_ &&
                        adjustments + adjustments_of(row) <= max_adjustments_;
      if (!fits && row > group_begin) break;
      if (!fits) {
        return absl::InternalError(absl::StrCat("sampler chain: row ", row, " has ", row_samples, " samples and ",
                                                adjustments_of(row), " adjustments, more than the buffers hold"));
      }
      adjustments += adjustments_of(row);
      next = row_end;
      ++row;
    }
    RETURN_IF_ERROR(RunGroup(logits + (group_begin - first_row) * vocab_, group_begin, row, batch,
                             samples.subspan(group_first, next - group_first), result, stream, launch));
  }
  return absl::OkStatus();
}

absl::Status DeviceSamplerChain::RunGroup(float* logits, int64_t row_begin, int64_t row_end,
                                          const SamplingBatch& batch, std::span<const int32_t> samples,
                                          SamplingResult* result, cudaStream_t stream,
                                          const CudaLaunchOptions& launch) {
  const int rows = static_cast<int>(row_end - row_begin);
  const int n = static_cast<int>(samples.size());
  const int vocab = static_cast<int>(vocab_);
  // Inputs.
  int num_tasks = 0, num_top = 0;
  for (int i = 0; i < n; ++i) {
    const SampleSpec& spec = batch.samples[static_cast<size_t>(samples[static_cast<size_t>(i)])];
    const int32_t row = spec.logits_row - static_cast<int32_t>(row_begin);
    cuda::SampleParams& p = host_.params[i];
    p = cuda::SampleParams{};
    p.temperature = spec.sampling.temperature;
    p.top_k = spec.sampling.top_k;
    p.top_p = spec.sampling.top_p;
    p.min_p = spec.sampling.min_p;
    p.u = spec.sampling.u;
    p.logits_row = row;
    if (spec.top_logprobs >= 0) {
      const int32_t top_n = std::min(spec.top_logprobs, vocab);
      host_.tasks[num_tasks++] = cuda::LogprobTask{row, top_n, num_top, i};
      num_top += top_n;
    }
  }
  int num_adjustments = 0;
  const bool adjusted = !batch.row_adjustments.empty();
  if (adjusted) {
    for (int r = 0; r < rows; ++r) {
      const AdjustmentRange range = batch.row_adjustments[static_cast<size_t>(row_begin + r)];
      host_.ranges[r] = cuda::AdjustRange{num_adjustments, range.count};
      static_assert(sizeof(cuda::DeviceAdjustment) == sizeof(TokenAdjustment));
      std::memcpy(host_.adjustments + num_adjustments, batch.adjustments.data() + range.begin,
                  static_cast<size_t>(range.count) * sizeof(TokenAdjustment));
      num_adjustments += range.count;
    }
  }
  auto up = [&](void* dst, const void* src, size_t bytes) {
    return bytes == 0 ? cudaSuccess : cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream);
  };
  CUDA_RETURN_IF_ERROR(up(params_, host_.params, n * sizeof(cuda::SampleParams)));
  CUDA_RETURN_IF_ERROR(up(tasks_, host_.tasks, num_tasks * sizeof(cuda::LogprobTask)));
  if (adjusted) {
    CUDA_RETURN_IF_ERROR(up(ranges_, host_.ranges, rows * sizeof(cuda::AdjustRange)));
    CUDA_RETURN_IF_ERROR(up(adjustments_, host_.adjustments, num_adjustments * sizeof(cuda::DeviceAdjustment)));
  }
  // The chain, in SampleOnHost's order.
  CUDA_RETURN_IF_ERROR(cuda::RowLogprobs(logits, vocab, tasks_, num_tasks, lse_, top_ids_, top_logprobs_, stream));
  if (adjusted && num_adjustments > 0) {
    CUDA_RETURN_IF_ERROR(cuda::AdjustLogits(logits, rows, vocab, ranges_, adjustments_, raw_, stream));
  }
  CUDA_RETURN_IF_ERROR(cuda::SampleRows(logits, n, vocab, params_, ids_, stream, launch));
  CUDA_RETURN_IF_ERROR(cuda::PickedLogprobs(logits, vocab, tasks_, num_tasks, ids_, lse_,
                                            adjusted && num_adjustments > 0 ? ranges_ : nullptr, adjustments_, raw_,
                                            logprobs_, stream));
  // Only the asked-for numbers come back.
  auto down = [&](void* dst, const void* src, size_t bytes) {
    return bytes == 0 ? cudaSuccess : cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream);
  };
  CUDA_RETURN_IF_ERROR(down(host_.ids, ids_, n * sizeof(int32_t)));
  CUDA_RETURN_IF_ERROR(down(host_.logprobs, logprobs_, num_tasks * sizeof(float)));
  CUDA_RETURN_IF_ERROR(down(host_.top_ids, top_ids_, num_top * sizeof(int32_t)));
  CUDA_RETURN_IF_ERROR(down(host_.top_logprobs, top_logprobs_, num_top * sizeof(float)));
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  for (int i = 0; i < n; ++i) result->tokens[static_cast<size_t>(samples[static_cast<size_t>(i)])] = host_.ids[i];
  const int32_t top_base = static_cast<int32_t>(result->top.size());
  for (int k = 0; k < num_top; ++k) result->top.push_back({host_.top_ids[k], host_.top_logprobs[k]});
  for (int t = 0; t < num_tasks; ++t) {
    const cuda::LogprobTask& task = host_.tasks[t];
    const size_t sample = static_cast<size_t>(samples[static_cast<size_t>(task.sample)]);
    result->sample_logprobs[sample] =
        LogprobEntry{host_.ids[task.sample], host_.logprobs[t], top_base + task.top_offset, task.top_n};
  }
  return absl::OkStatus();
}

}  // namespace kvtier
