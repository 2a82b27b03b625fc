// KvCacheCounters: what the KV cache manager and its tiers count, for the statistics, by
// part: swaps, the prefix cache, copies between tiers, and the disk and remote tiers' own.
// Monotonically increasing. Plain value types.
#ifndef KVTIER_KV_KV_COUNTERS_H_
#define KVTIER_KV_KV_COUNTERS_H_

#include <cstdint>

#include "kv/tier.h"

namespace kvtier {

struct DiskTierCounters {
  int64_t blocks_written_back = 0;     // cached host blocks written ahead of their eviction
  int64_t host_evictions_on_disk = 0;  // host victims already on disk: evicted without a write
  int64_t host_evictions_written = 0;  // host victims written at eviction (writer thread, waited for)
  int64_t write_waits = 0;             // uses (host evictions, swap-ins, prefix hits, staging
                                       // buffers) that waited for an in-flight disk write
  double write_wait_seconds = 0;       // host time those waits took
  int64_t swap_writes = 0;             // swapped blocks written by the writer thread
  int64_t demote_writes = 0;           // device victims written by the writer thread
  int64_t staged_reads = 0;            // blocks read at their use (prefix hit, swap-in)
                                       // by the reader threads through staging buffers
  int64_t read_aheads = 0;             // blocks read into host slots by the reader threads
  int64_t read_ahead_waits = 0;        // uses that waited for their read to land
  int64_t reads_in_file_order = 0;     // of those reads, each of the slot right after the one
                                       // its call read before: how much of a prefix the file
                                       // holds in order (read sequentially)
  int64_t speed_probes = 0;            // rounds of probe reads re-measuring a stale read speed
                                       // (load plans; not the one at creation)
  double read_ahead_wait_seconds = 0;
  int64_t stale_entries = 0;           // index entries whose slot holds another block now (a miss)
  int64_t blocks_persisted = 0;        // write-behind: full blocks written soon after filling
  int64_t write_behind_skipped_busy = 0;  // steps whose write-behind waited for a busy writer
  int64_t write_behind_dropped = 0;    // queued blocks dropped from a full write-behind queue
};

struct RemoteTierCounters {
  int64_t puts_queued = 0;      // computed blocks handed to the remote tier
  int64_t puts_stale = 0;       // of those, not put: the block held another entry by then
  int64_t lookup_timeouts = 0;  // prefix matches that stopped waiting for a lookup
  int64_t landed_in_host = 0;   // blocks received in place into host slots
  int64_t probes = 0;           // EXISTS probes before load plans (probe_blocks found)
  int64_t probe_blocks = 0;
};

struct KvCacheCounters {
  int64_t swaps_out = 0;            // sequences swapped out
  int64_t swaps_in = 0;
  int64_t prefetches = 0;           // swap-ins started a step ahead of use
  int64_t swap_out_bytes = 0;
  int64_t swap_in_bytes = 0;
  int64_t blocks_demoted[kNumTiers] = {};  // cached blocks moved down from the tier
  int64_t blocks_dropped = 0;       // cached blocks evicted from the last tier
  int64_t prefix_hits[kNumTiers] = {};     // blocks reused from each tier (by Tier)
  int64_t prefix_hit_tokens = 0;
  int64_t corrupt_blocks_detected = 0;
  int64_t prefix_token_mismatch = 0;  // hits refused: the block's stored tokens differ from the request's
  int64_t io_errors = 0;
  int64_t reads_without_host_slot = 0;  // optional reads (read-ahead, load plans, remote values)
                                        // not started into a host slot: every victim would
                                        // have made the step wait for a disk write
  double copy_seconds = 0;          // host time spent moving blocks between tiers (incl. stalls)
  double copy_stall_seconds = 0;    // host time waiting for async copies (part of copy_seconds)
  int64_t swap_bytes_timed = 0;     // bytes of the moves copy_seconds timed (bandwidth)
  int64_t async_copy_batches = 0;   // Backend::StartCopiesToHost calls
  int64_t blocks_written_back = 0;  // cached device blocks copied to host ahead of eviction
  int64_t evictions_copied = 0;     // evicted device blocks still needing a copy then (host waited)
  int64_t forks = 0;                // sequences started on another's blocks (Fork)
  int64_t fork_shared_blocks = 0;   // full blocks they share instead of holding a copy
  int64_t fork_copied_blocks = 0;   // partial blocks copied for them
  int64_t blocks_moved_to_host = 0;  // long sequences' old blocks moved to host, read in place
  DiskTierCounters disk;
  RemoteTierCounters remote;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_COUNTERS_H_
