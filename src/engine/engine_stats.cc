// Engine::Stats (engine.h): the engine's, scheduler's, KV tiers' and backend's numbers as
// one JSON object (docs/METRICS.md), the one source of the statistics and the Prometheus
// text.
#include <algorithm>
#include <cmath>

#include "engine/engine.h"
#include "engine/remote_tier_stats.h"

namespace kvtier {

nlohmann::json Engine::Stats() {
  std::lock_guard<std::mutex> lock(mu_);
  const KvStats kv_stats = scheduler_.kv_stats();
  const int64_t block_bytes = static_cast<int64_t>(kv_stats.block_bytes);
  const KvCacheCounters& kv = kv_stats.counters;
  nlohmann::json tiers;
  for (Tier t : {Tier::kDevice, Tier::kHost, Tier::kDisk}) {
    const KvTierStats& tier = kv_stats.tier(t);
    tiers[TierName(t)] = {{"capacity_bytes", tier.capacity_blocks * block_bytes},
                          {"used_bytes", tier.used_blocks * block_bytes},
                          {"peak_bytes", tier.peak_blocks * block_bytes},
                          {"capacity_blocks", tier.capacity_blocks},
                          {"used_blocks", tier.used_blocks},
                          {"cached_bytes", tier.cached_blocks * block_bytes},
                          {"demoted_blocks", kv.blocks_demoted[static_cast<int>(t)]},
                          // Usable now: the host tier is pinned and the disk file reserved in
                          // the background after creation; capacity_bytes once done.
                          {"ready_bytes", tier.ready_blocks * block_bytes}};
    if (!tier.preparation_error.empty()) tiers[TierName(t)]["preparation_error"] = tier.preparation_error;
  }
  nlohmann::json stats;
  stats["backend"] = std::string(backend_->name());
  stats["compute_path"] = backend_->compute_path();
  stats["block_tokens"] = options_.block_tokens;
  stats["block_bytes"] = block_bytes;
  stats["steps"] = counters_.steps;
  stats["prompt_tokens_computed"] = counters_.prompt_tokens_computed;
  stats["generated_tokens"] = counters_.generated_tokens;
  stats["sequences"] = {{"running", scheduler_.num_running()},
                        {"waiting", scheduler_.num_waiting()},
                        {"unfinished", num_unfinished_},
                        {"finished", counters_.finished},
                        {"completed", counters_.finished - counters_.cancelled - counters_.failed},
                        {"cancelled", counters_.cancelled},
                        {"failed", counters_.failed}};
  stats["tiers"] = tiers;
  const grammar::GrammarCache::Counters cache = grammar_cache_.counters();
  stats["grammar"] = {{"compiles", cache.compiles},
                      {"cache_hits", cache.hits},
                      {"cached", cache.entries},
                      {"compile_seconds", cache.compile_seconds},
                      {"completed", counters_.grammar_completed},
                      {"failed", counters_.grammar_failed},
                      {"masks", grammar_mask_counters_.rows},
                      {"mask_compute_seconds", grammar_mask_counters_.compute_seconds},
                      {"mask_wait_seconds", grammar_mask_counters_.wait_seconds}};
  stats["preemptions"] = scheduler_.num_preemptions();
  stats["recomputes"] = scheduler_.num_recomputes();
  stats["prefetches_reclaimed"] = scheduler_.num_prefetches_reclaimed();
  stats["swaps_out"] = kv.swaps_out;
  stats["swaps_in"] = kv.swaps_in;
  stats["swap_prefetches"] = kv.prefetches;
  stats["swap_out_bytes"] = kv.swap_out_bytes;
  stats["swap_in_bytes"] = kv.swap_in_bytes;
  stats["blocks_dropped"] = kv.blocks_dropped;
  // KV layer groups (docs/ARCHITECTURE.md "Layer groups"): one group unless grouping is on.
  const GroupedBlockStats& groups = kv_stats.layer_groups;
  stats["kv_layer_groups"] = {
      {"groups", std::max<size_t>(groups.group_blocks.size(), 1)},
      {"group_blocks", groups.group_blocks},
      {"full_attention_blocks", groups.group_blocks.empty() ? kv_stats.tier(Tier::kDevice).used_blocks
                                                            : groups.full_attention_blocks},
      {"blocks_freed_by_window", groups.blocks_dropped_for_window}};
  // Long sequences: old blocks moved to the host tier, read there in place from then on.
  stats["blocks_moved_to_host"] = kv.blocks_moved_to_host;
  stats["prefix_hits"] = {{"gpu", kv.prefix_hits[0]},
                          {"host", kv.prefix_hits[1]},
                          {"disk", kv.prefix_hits[2]},
                          {"remote", kv.prefix_hits[static_cast<int>(Tier::kRemote)]}};
  stats["prefix_hit_tokens"] = kv.prefix_hit_tokens;
  // Load or recompute: prompts whose slow-tier prefix was split, the blocks planned
  // computed and loaded (a loaded block that did not land is computed too).
  const Scheduler::LoadPlanCounters& plans = scheduler_.load_plan_counters();
  stats["load_plans"] = {
      {"plans", plans.plans}, {"computed_blocks", plans.computed_blocks}, {"loaded_blocks", plans.loaded_blocks}};
  if (plans.plans > 0) {
    // The latest plan, for seeing where its time went (null: not attached yet).
    const Scheduler::LastLoadPlan& last = plans.last;
    auto seconds = [](double s) { return std::isnan(s) ? nlohmann::json() : nlohmann::json(s); };
    stats["load_plans"]["last"] = {{"fast_blocks", last.fast_blocks},
                                   {"slow_blocks", last.slow_blocks},
                                   {"compute_blocks", last.compute_blocks},
                                   {"load_blocks", last.load_blocks},
                                   {"load_seconds_per_block", last.load_seconds_per_block},
                                   {"compute_seconds_per_block", last.compute_seconds_per_block},
                                   {"expected_seconds", last.expected_seconds},
                                   {"disk_reads_started", last.disk_reads_started},
                                   {"front_computed_after_s", seconds(last.front_computed_after_s)},
                                   {"attach_s", seconds(last.attach_s)},
                                   {"attached_blocks", last.attached_blocks},
                                   {"attaches", last.attaches},
                                   {"progress", nlohmann::json::array()}};
    for (const Scheduler::LastLoadPlan::Progress& p : last.progress) {
      stats["load_plans"]["last"]["progress"].push_back({{"after_s", p.after_s},
                                                          {"computed_tokens", p.computed_tokens},
                                                          {"landed_from", p.landed_from},
                                                          {"landed", p.landed},
                                                          {"attach_at", p.attach_at}});
    }
  }
  // Parallel sampling: completions started on their first's computed prompt, the full
  // blocks they share with it (held once) and the partial blocks copied for them; forks
  // that could not share (the completion computed its context itself).
  stats["parallel_sampling"] = {{"forks", kv.forks},
                                {"shared_blocks", kv.fork_shared_blocks},
                                {"copied_blocks", kv.fork_copied_blocks},
                                {"forks_queued", scheduler_.num_forks_queued()}};
  stats["logprob_tokens"] = counters_.logprob_tokens;
  stats["scored_prompt_tokens"] = counters_.scored_tokens;
  stats["pinned_blocks"] = kv_stats.pinned_blocks;
  stats["corrupt_blocks_detected"] = kv.corrupt_blocks_detected;
  // Prefix-cache trust: hits refused because the block's stored tokens differ from the
  // request's (any tier), and disk index entries whose slot held another block (a miss).
  stats["prefix_token_mismatch"] = kv.prefix_token_mismatch;
  stats["disk_stale_entries"] = kv.disk.stale_entries;
  stats["io_errors"] = kv.io_errors;
  // Crash durability: full blocks written to disk by write-behind; steps it yielded to a
  // busy writer; queued blocks it dropped (written at eviction or shutdown instead). The
  // disk index as found when the context was created, and its journal since.
  stats["blocks_persisted"] = kv.disk.blocks_persisted;
  stats["write_behind_skipped_busy"] = kv.disk.write_behind_skipped_busy;
  stats["write_behind_dropped"] = kv.disk.write_behind_dropped;
  const DiskBlockStore::Counters& disk = kv_stats.disk_store;
  stats["disk_index"] = {{"recovered_blocks", disk.recovered_blocks},
                         {"journal_replayed", disk.journal_replayed},
                         {"slots_scanned", disk.slots_scanned},
                         {"ignored", disk.index_ignored},
                         {"older_format_slots", disk.older_format_slots},
                         {"journal_records", disk.journal_records},
                         {"compactions", disk.compactions}};
  stats["disk_index_ignored_reason"] = kv_stats.disk_index_ignored_reason;
  // What the disk tier delivered: block bytes read and the time the reads took; the recent
  // read speed load plans weigh (a guess before any read); rounds of probe reads that
  // measured it again after load plans found it stale (not the one at creation). Why reads
  // took that time: each read's own seconds summed (over `seconds`, the reads in flight at
  // once; over the reads, one read's time), of which in the file's reads (the rest is the
  // CPU's: checks and the copy out); reads of the slot after their call's previous read
  // (a prefix the file holds in order).
  stats["disk_reads"] = {{"bytes", disk.bytes_read},
                         {"seconds", disk.read_seconds},
                         {"recent_bytes_per_second", kv_stats.disk_read_bytes_per_second},
                         {"speed_probes", kv.disk.speed_probes},
                         {"reads", disk.reads},
                         {"seconds_summed", disk.read_seconds_summed},
                         {"file_seconds_summed", disk.file_read_seconds_summed},
                         {"in_file_order", kv.disk.reads_in_file_order}};
  stats["remote"] = RemoteTierStats(kv_stats);
  // Blocks on their way to the disk and remote tiers (0 once an idle context's writes landed).
  stats["pending_writes"] = {{"disk_blocks", kv_stats.pending_disk_writes},
                             {"remote_blocks", kv_stats.pending_remote_writes}};
  stats["idle_writer_pumps"] = idle_writer_pumps_;  // its calls between steps that found writes to move
  stats["backend"] = std::string(backend_->name());
  // What the KV (and, on CUDA, weights and activations) are held in: F32 on the CPU, the
  // checkpoint's BF16 or F16 on CUDA.
  stats["kv_dtype"] = std::string(DTypeName(backend_->kv_layout().dtype));
  stats["gpu_allocs_after_init"] = backend_->allocations_after_init();
  stats["device_bytes_in_use"] = backend_->device_bytes_in_use();
  const DeviceMemoryStats memory = backend_->device_memory();
  stats["device_memory"] = {{"limit_bytes", options_.gpu_mem_limit},
                            {"runtime_share_bytes", memory.runtime_share_bytes},
                            {"process_peak_bytes", memory.process_peak_bytes},
                            {"measured_per_process", memory.per_process}};
  stats["time"] = {{"step_seconds", counters_.step_seconds},
                   {"compute_seconds", counters_.compute_seconds},
                   {"schedule_seconds", counters_.schedule_seconds},
                   {"copy_wait_seconds", kv.copy_seconds},
                   {"copy_stall_seconds", kv.copy_stall_seconds},
                   {"disk_write_wait_seconds", kv.disk.write_wait_seconds},
                   {"disk_read_ahead_wait_seconds", kv.disk.read_ahead_wait_seconds}};
  stats["histograms"] = latencies_.ToJson();
  stats["async_copy_batches"] = kv.async_copy_batches;
  stats["blocks_written_back"] = kv.blocks_written_back;
  stats["evictions_copied"] = kv.evictions_copied;
  // Host -> disk: blocks the I/O thread wrote ahead of their host eviction, host evictions
  // that found their block on disk / wrote it on the stepping thread / waited for the I/O
  // thread (time.disk_write_wait_seconds).
  stats["disk_blocks_written_back"] = kv.disk.blocks_written_back;
  stats["host_evictions_on_disk"] = kv.disk.host_evictions_on_disk;
  stats["host_evictions_written"] = kv.disk.host_evictions_written;
  stats["disk_write_waits"] = kv.disk.write_waits;
  // Swapped blocks, and evicted device blocks the host tier could not take, written to disk
  // by the I/O thread. Disk -> host: blocks the other I/O thread read ahead for waiting
  // sequences, and uses that had to wait for such a read (time.disk_read_ahead_wait_seconds).
  // Disk -> device: blocks nobody read ahead, read by that thread at their use (prefix hit,
  // swap-in) through staging buffers.
  stats["disk_swap_writes"] = kv.disk.swap_writes;
  stats["disk_demote_writes"] = kv.disk.demote_writes;
  stats["disk_read_aheads"] = kv.disk.read_aheads;
  stats["disk_read_ahead_waits"] = kv.disk.read_ahead_waits;
  // Reads ahead (and remote values) not started into a host slot because every host block
  // that could make room was still being written to disk: the step does not wait for it.
  stats["reads_without_host_slot"] = kv.reads_without_host_slot;
  stats["disk_staged_reads"] = kv.disk.staged_reads;
  const BackendCopyStats copies = backend_->copy_stats();
  stats["backend_copies"] = {{"prefetch_batches", copies.prefetch_batches},
                             {"prefetch_bytes", copies.prefetch_bytes},
                             {"prefetch_copy_seconds", copies.prefetch_copy_seconds},
                             {"prefetch_stall_seconds", copies.prefetch_stall_seconds},
                             {"sync_batches", copies.sync_batches},
                             {"sync_bytes", copies.sync_bytes},
                             {"sync_copy_seconds", copies.sync_copy_seconds},
                             {"async_out_batches", copies.async_out_batches},
                             {"async_out_bytes", copies.async_out_bytes},
                             {"async_out_copy_seconds", copies.async_out_copy_seconds},
                             {"async_out_wait_seconds", copies.async_out_wait_seconds},
                             {"host_kv_steps", copies.host_kv_steps},
                             {"host_kv_bytes", copies.host_kv_bytes},
                             {"host_link_bytes_per_second", copies.host_link_bytes_per_second},
                             {"host_kv_gather", copies.host_kv_gather},
                             {"host_kv_gather_bytes_per_second", copies.host_kv_gather_bytes_per_second}};
  return stats;
}

}  // namespace kvtier
