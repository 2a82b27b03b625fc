// Portable default implementations of optional Backend methods.
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backend/backend.h"
#include "common/physical_memory.h"

namespace kvtier {

namespace {

// Transparent huge pages' size on x86-64 (and on arm64 with 4 KiB base pages).
constexpr size_t kHugePageBytes = size_t{2} << 20;

// Grammar masks first, before any other step picks from the logits.
void ApplyMasks(const ForwardBatch& batch, size_t vocab, std::vector<float>* logits) {
  if (batch.masks == nullptr) return;
  batch.masks->Wait();
  for (size_t row = 0; row * vocab < logits->size(); ++row) {
    if (const uint32_t* mask = batch.masks->Row(row)) {
      ApplyTokenMask(mask, std::span<float>(*logits).subspan(row * vocab, vocab));
    }
  }
}

}  // namespace

int64_t Backend::MemoryForKvPool() const { return PhysicalMemoryBytes(); }

absl::Status Backend::ForwardGreedy(const ForwardBatch& batch, std::vector<int32_t>* token_ids) {
  std::vector<float> logits;
  if (absl::Status s = Forward(batch, &logits); !s.ok()) return s;
  const size_t vocab = static_cast<size_t>(vocab_size());
  ApplyMasks(batch, vocab, &logits);
  token_ids->clear();
  for (size_t row = 0; row * vocab < logits.size(); ++row) {
    const float* r = logits.data() + row * vocab;
    size_t best = 0;
    for (size_t i = 1; i < vocab; ++i) {
      if (r[i] > r[best]) best = i;
    }
    token_ids->push_back(static_cast<int32_t>(best));
  }
  return absl::OkStatus();
}

absl::Status Backend::ForwardSampled(const ForwardBatch& batch, std::span<const RowSampling> rows,
                                     std::vector<int32_t>* token_ids) {
  if (absl::Status s = ValidateRowSampling(rows, batch.num_logit_rows()); !s.ok()) return s;
  std::vector<float> logits;
  if (absl::Status s = Forward(batch, &logits); !s.ok()) return s;
  const size_t vocab = static_cast<size_t>(vocab_size());
  ApplyMasks(batch, vocab, &logits);
  std::vector<std::pair<float, int32_t>> scratch;
  token_ids->clear();
  for (size_t row = 0; row < rows.size(); ++row) {
    token_ids->push_back(
        SampleRow(std::span<const float>(logits).subspan(row * vocab, vocab), rows[row], &scratch));
  }
  return absl::OkStatus();
}

absl::Status Backend::ForwardAndSample(const ForwardBatch& batch, const SamplingBatch& sampling,
                                       SamplingResult* result) {
  if (absl::Status s = ValidateSamplingBatch(sampling, batch.num_logit_rows(), vocab_size()); !s.ok()) return s;
  std::vector<float> logits;
  if (absl::Status s = Forward(batch, &logits); !s.ok()) return s;
  ApplyMasks(batch, static_cast<size_t>(vocab_size()), &logits);
  SampleOnHost(logits, vocab_size(), sampling, result);
  return absl::OkStatus();
}

absl::StatusOr<void*> Backend::AllocateHostMemory(size_t bytes) {
  void* ptr = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (ptr == nullptr) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
  return ptr;
}

void Backend::FreeHostMemory(void* ptr) { std::free(ptr); }

absl::StatusOr<void*> Backend::ReserveHostMemory(size_t bytes) {
  // MAP_NORESERVE: pages are committed as they are first touched (or pinned), so reserving
  // a large tier takes no time and no memory up front. A region of whole huge pages, aligned
  // to one and marked MADV_HUGEPAGE, is paged in a huge page per fault: pinning a host tier
  // then takes one fault per 2 MiB instead of one per 4 KiB, and pins and unpins faster
  // (bench/micro/host_pin.cu measures both). Where transparent huge pages are off, the
  // advice is ignored.
  const size_t huge = bytes >= kHugePageBytes ? kHugePageBytes : 0;
  void* mapped = ::mmap(nullptr, bytes + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                        -1, 0);
  if (mapped == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", bytes, " bytes of host memory: ", std::strerror(errno)));
  }
  if (huge == 0) return mapped;
  // Keep exactly [aligned, aligned + bytes): ReleaseHostMemory unmaps that range.
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t aligned = (start + huge - 1) / huge * huge;
  if (aligned > start) ::munmap(mapped, aligned - start);
  if (const size_t tail = start + bytes + huge - (aligned + bytes); tail > 0) {
    ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  }
  void* const ptr = reinterpret_cast<void*>(aligned);
#ifdef MADV_HUGEPAGE
  ::madvise(ptr, bytes, MADV_HUGEPAGE);
#endif
  return ptr;
}

absl::Status Backend::PinHostMemory(void*, size_t) { return absl::OkStatus(); }

void Backend::UnpinHostMemory(void*, size_t) {}

void Backend::ReleaseHostMemory(void* ptr, size_t bytes) {
  if (ptr != nullptr) ::munmap(ptr, bytes);
}

// Synchronous backends copy at once; every ticket they hand out (1) is already done.
absl::StatusOr<int64_t> Backend::StartCopiesToHost(std::span<const BlockCopy> copies) {
  if (absl::Status s = CopyBlocksToHost(copies); !s.ok()) return s;
  return 1;
}

absl::StatusOr<bool> Backend::CopiesDone(int64_t ticket) {
  if (ticket != 1) return absl::InvalidArgumentError(absl::StrCat("unknown copy ticket ", ticket));
  return true;
}

absl::Status Backend::WaitForCopies(int64_t ticket) { return CopiesDone(ticket).status(); }

}  // namespace kvtier
