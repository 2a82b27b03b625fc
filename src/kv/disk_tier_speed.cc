// DiskTier's read speed (the contract is at the top of disk_tier.h): the recent figure a
// load plan weighs (ReadSpeedWindow over the store's read counts), and the probe rounds
// that measure it at creation and again when a load plan finds it stale (kSpeedStaleAfter).
#include <vector>

#include "kv/disk_tier.h"

namespace kvtier {

ReadSpeedWindow::Reads DiskTier::ReadCounts() const {
  if (store_ == nullptr) return {};
  const DiskBlockStore::Counters c = store_->counters();
  return {c.bytes_read, c.read_seconds};
}

void DiskTier::ObserveReads() {
  if (on()) read_speed_.Observe(ReadCounts(), clock_->Now());
}

double DiskTier::ReadBytesPerSecond() const {
  // (Reads in progress advance read_seconds before they count their bytes.)
  return read_speed_.BytesPerSecond(ReadCounts()).value_or(kGuessedBytesPerSecond);
}

double DiskTier::SecondsPerBlock() const { return static_cast<double>(ctx_->block_bytes) / ReadBytesPerSecond(); }

void DiskTier::SubmitSpeedProbes(std::span<const int32_t> disk_slots) {
  if (disk_slots.empty()) return;
  // The round's window starts here: the reads before it (complete or not) end theirs.
  read_speed_.Close(ReadCounts(), clock_->Now());
  for (const int32_t slot : disk_slots) ctx_->transfers.SubmitDiskProbe(slot);
  speed_probes_.in_flight += static_cast<int64_t>(disk_slots.size());
  speed_probes_.last_round = clock_->Now();
}

void DiskTier::LandSpeedProbe() {
  // The round's last read closes the window: the round is the fresh figure.
  if (--speed_probes_.in_flight == 0) read_speed_.Close(ReadCounts(), clock_->Now());
}

void DiskTier::NoteSlowBlocks(const BlockChain& chain, std::span<const int64_t> blocks) {
  if (!on() || !ctx_->options.preparation.probe_disk_read_speed || blocks.empty()) return;
  ObserveReads();
  // Nothing while reads are in flight (a round or a plan's loads: they measure), nor while
  // reads have landed or a round was submitted within the staleness period.
  if (ctx_->transfers.num_in_flight(Lane::kDiskRead) > 0 || speed_probes_.in_flight > 0) return;
  const Clock::TimePoint now = clock_->Now();
  auto recent = [&](const std::optional<Clock::TimePoint>& at) {
    return at.has_value() && now - *at < kSpeedStaleAfter;
  };
  if (recent(read_speed_.last_read_at()) || recent(speed_probes_.last_round)) return;
  // One read per reader thread (the speed of reads in flight together, as a plan's loads
  // are), of the blocks the plan would load (from the back, as its loads start).
  std::vector<int32_t> slots;
  for (auto i = blocks.rbegin(); i != blocks.rend() && slots.size() < Transfers::kReaderThreads; ++i) {
    if (const std::optional<int32_t> slot = cache_.Find(chain.Key(*i))) slots.push_back(*slot);
  }
  if (slots.empty()) return;
  SubmitSpeedProbes(slots);
  ++ctx_->counters.disk.speed_probes;
}

}  // namespace kvtier
