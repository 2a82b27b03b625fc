// KvCacheManager: the front end of KV memory over three tiers — device (the backend's
// pool), host (one region from the backend, pinned on CUDA) and disk (a file of slots).
// It owns every sequence's block table, the prefix cache (full blocks keyed by chained
// SHA-256, block_hash.h, in any tier) and the swapped-out blocks of paused sequences. The
// scheduler asks it "can these positions be held", "match this prompt", "swap this one
// out"; it never walks a pool itself. Moves between tiers are whole-block copies through
// the backend.
//
// Prefix blocks are shared only between sequences of the same cache namespace (the key's
// scope). Every cached block keeps its token ids (device and host: next to the cache maps;
// disk: in the slot header), and every hit from any tier compares them with the request's:
// a block whose tokens differ is a miss (prefix_token_mismatch), never used.
//
// Write-behind (crash durability): each block cached on the device is queued, and at the
// start and end of every step the oldest queued blocks without a disk copy are written to
// disk on the writer thread — from their host copy when there is one, else copied device ->
// a write-behind buffer first — where the store records them in its journal. A block
// already on disk when cached again (recomputed, or a hit) has its disk copy made the most
// recently used, and its journal record renewed, so that neither this context nor a
// restart evicts it as an old block. Bounded: at
// most WriteBehindLimit() such writes in flight, none started while the writer already has
// that many other writes queued (counted in write_behind_skipped_busy), the queue holds the
// newest 2 x device blocks (older ones dropped, counted, and written later only by
// eviction or shutdown). So while the context steps and the disk keeps up with the rate at
// which blocks fill, a full block is durable within a step plus the writer's time for the
// blocks queued before it; a step never waits for it.
//
// Device -> host copies are asynchronous (Backend::StartCopiesToHost): a swap-out starts
// its copies and returns; cached full blocks (immutable) are written back to the host tier
// ahead of their eviction while the forward runs (StartBackgroundCopies), so evicting them
// later costs no copy. What an in-flight copy reads or writes is fenced until its ticket
// is done: its device blocks are not handed out for writing (AllocateDeviceBlocks waits,
// counting the stall), host slots of a swap are read (swap-in) and disk slots written only
// after it, and a written-back host slot joins the host cache only then.
//
// Disk writes run on an I/O thread (DiskIoThread). Swapped blocks bound for disk are staged
// by their device -> host copy and written by it once the copy lands; until the write lands
// the staging buffer is held and a swap-in (or read-ahead) of the block waits for it, and a
// release leaves the disk slot to the write. Each step, too, the coldest cached host
// blocks without a disk copy are queued for writing (StartBackgroundCopies), so that the
// host tier's eviction of them later costs no write. While such a write is in flight its
// host slot stays in the host cache (only read: by the writer and by prefix hits) and is
// never freed or rewritten — evicting it first waits for the write, counted in
// disk_write_waits/disk_write_wait_seconds — and its disk slot is held but in no cache map;
// it joins the disk cache when the step that finds the write done lands it (or is
// released, with io_errors counted, when the write failed; write-back then pauses for a
// few steps).
// Disk -> host reads run on a second I/O thread (ReadAhead): for a sequence about to be
// scheduled, the blocks it will need from disk (those of a swap-out that went to disk, or
// the prompt blocks only the disk tier caches) are read into host slots ahead of use (a
// slot that is free, or whose cached block is on disk already with no write of it in
// flight: making room for a read ahead never makes the step wait for a write); when
// a step finds them landed they are host copies, and the swap-in or prefix match moves them
// host -> device like any other. While such a read is in flight its host slot is held (in
// no cache map, never handed out) and its disk slot is neither evicted nor reused: a prefix
// block's slot stays cached but leaves the disk LRU until the read lands; a swapped
// sequence released meanwhile leaves its disk slot to the read, which frees it on landing.
// A step that needs a block still being read waits for it (disk_read_ahead_waits); the
// scheduler lets a new request whose prefix is being read wait while others run
// (ReadAhead's result).
// Disk blocks nobody read ahead (a request admitted when nothing else runs, no host tier or
// no host room) are read at their use, but still on the reader thread: all the disk blocks
// a prefix match or a swap-in needs are submitted at once into staging buffers, and each is
// copied to its device block as it lands (ReadDiskBlocksToDevice), so file reads overlap
// one another's device copies; the stepping thread waits for the last.
// Device victims the host tier cannot take (no host tier, or full) are copied device ->
// staging in batches the host waits for (the caller may overwrite the device block), then
// written to disk by the writer thread. Until that write lands the staging buffer and the
// disk slot are held, the slot in no cache map (so neither evicted nor read); a prefix
// match of the block first waits for the write, then reads it back as a disk hit. A failed
// write drops the block (io_errors, blocks_dropped).
// Tier preparation: Create returns before the lower tiers are ready, whatever their size.
// The host region is reserved at once and, on backends that pin host memory (CUDA), pinned
// on a background thread a chunk at a time (HostTierMemory); the disk file is opened,
// locked and reserved up to TierPreparationOptions::disk_bytes_at_create, the rest on a
// second background thread (ChunkedPreparer over DiskBlockStore::PreallocateSlots). The
// budgets are fixed and exact from the start (capacity, admission), but a tier's pool hands
// out only the slots prepared so far: AdmitPreparedSlots (at every step, and before a slot
// is taken) makes the newly prepared ones free, on the stepping thread, so counts, stats and
// VerifyIntegrity stay exact while chunks arrive. Nothing waits for preparation: a host
// slot wanted before its chunk is pinned is not there, as when the host tier is full (a
// swap goes to disk or recomputes, a write-back or read-ahead is skipped). A preparation
// that fails (pinning refused, a disk found full late) stops there for good: the tier keeps
// what was prepared, the failure is in preparation_error() (a disk one counted in
// io_errors once). Destruction cancels both, waiting at most for the chunk in progress.
// Not thread-safe: driven under the engine lock by the stepping thread (the I/O threads
// touch only their jobs' host bytes and disk slots; the preparation threads only pin host
// memory the pools do not hand out yet and reserve file space no slot uses yet).
#ifndef KVTIER_KV_KV_CACHE_MANAGER_H_
#define KVTIER_KV_KV_CACHE_MANAGER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backend/host_resident_kv.h"
#include "kv/block_hash.h"
#include "kv/block_key_chain.h"
#include "kv/block_pool.h"
#include "kv/chunked_preparer.h"
#include "kv/disk_jobs.h"
#include "kv/host_tier_memory.h"
#include "kv/lru_set.h"
#include "kv/remote_tier_options.h"
#include "kv/tier_preparation.h"
#include "remote/remote_block_bytes.h"

namespace kvtier {

class Backend;
class FileIo;
class RemoteBlockStore;
using DiskStoreCounters = DiskBlockStore::Counters;

using SequenceId = int64_t;

enum class Tier { kDevice = 0, kHost = 1, kDisk = 2 };
inline constexpr int kNumTiers = 3;
const char* TierName(Tier tier);

struct KvCacheOptions {
  int64_t block_tokens = 16;
  int64_t device_blocks = 0;
  int64_t host_blocks = 0;          // 0 disables the host tier
  int64_t disk_blocks = 0;          // 0 disables the disk tier
  std::string disk_path;            // file backing the disk tier
  FileIo* file_io = nullptr;        // nullptr = the real file system
  uint64_t model_fingerprint = 0;   // keys the prefix cache and the disk file
  bool prefix_cache = true;
  bool write_behind = true;         // with a disk tier: full blocks written to disk soon (see the top)
  TierPreparationOptions preparation;  // host pinning and disk reservation in the background
  RemoteTierOptions remote;         // the remote tier (Redis), off when its url is empty
};

// Counters the statistics report; monotonically increasing except *_used.
struct KvCacheCounters {
  int64_t swaps_out = 0;            // sequences swapped out
  int64_t swaps_in = 0;
  int64_t prefetches = 0;           // swap-ins started a step ahead of use
  int64_t swap_out_bytes = 0;
  int64_t swap_in_bytes = 0;
  int64_t blocks_demoted[kNumTiers] = {0, 0, 0};  // cached blocks moved down from the tier
  int64_t blocks_dropped = 0;       // cached blocks evicted from the last tier
  int64_t prefix_hits[kNumTiers] = {0, 0, 0};     // blocks reused from each tier
  int64_t prefix_hit_tokens = 0;
  int64_t corrupt_blocks_detected = 0;
  int64_t prefix_token_mismatch = 0;  // hits refused: the block's stored tokens differ from the request's
  int64_t disk_stale_entries = 0;     // disk index entries whose slot holds another block now (a miss)
  int64_t io_errors = 0;
  double copy_seconds = 0;          // host time spent moving blocks between tiers (incl. stalls)
  int64_t async_copy_batches = 0;   // Backend::StartCopiesToHost calls
  int64_t blocks_written_back = 0;  // cached device blocks copied to host ahead of eviction
  int64_t evictions_copied = 0;     // evicted device blocks still needing a copy then (host waited)
  double copy_stall_seconds = 0;    // host time waiting for async copies (part of copy_seconds)
  int64_t disk_blocks_written_back = 0;  // cached host blocks written to disk by the I/O thread
  int64_t host_evictions_on_disk = 0;    // host victims already on disk: evicted without a write
  int64_t host_evictions_written = 0;    // host victims written to disk at eviction (writer thread, waited for)
  int64_t disk_write_waits = 0;          // uses (host evictions, swap-ins, prefix hits, staging
                                         // buffers) that waited for an in-flight disk write
  double disk_write_wait_seconds = 0;    // host time those waits took
  int64_t disk_swap_writes = 0;          // swapped blocks written to disk by the I/O thread
  int64_t disk_demote_writes = 0;        // device victims written to disk by the I/O thread
  int64_t disk_staged_reads = 0;         // disk blocks read at their use (prefix hit, swap-in)
                                         // by the I/O thread through staging buffers
  int64_t disk_read_aheads = 0;          // disk blocks read into host slots by the I/O thread
  int64_t disk_read_ahead_waits = 0;     // uses that waited for their read to land
  int64_t reads_without_host_slot = 0;   // optional reads (read-ahead, load plans, remote values)
                                         // not started into a host slot: every victim would
                                         // have made the step wait for a disk write
  double disk_read_ahead_wait_seconds = 0;
  int64_t swap_bytes_timed = 0;          // bytes of the moves copy_seconds timed (bandwidth)
  int64_t blocks_persisted = 0;          // write-behind: full blocks written to disk soon after filling
  int64_t write_behind_skipped_busy = 0; // steps whose write-behind waited for a busy writer
  int64_t write_behind_dropped = 0;      // queued blocks dropped from a full write-behind queue
  int64_t forks = 0;                     // sequences started on another's blocks (Fork)
  int64_t fork_shared_blocks = 0;        // full blocks they share instead of holding a copy
  int64_t fork_copied_blocks = 0;        // partial blocks copied for them
  int64_t blocks_moved_to_host = 0;      // long sequences' old blocks moved to host, read in place
  int64_t prefix_hits_remote = 0;        // prompt blocks found in the remote tier (Redis)
  int64_t remote_puts_queued = 0;        // computed blocks handed to the remote tier
  int64_t remote_lookup_timeouts = 0;    // prefix matches that stopped waiting for a lookup
  int64_t remote_landed_in_host = 0;     // remote blocks received in place into host slots
  int64_t remote_probes = 0;             // EXISTS probes before load plans (remote_probe_blocks found)
  int64_t remote_probe_blocks = 0;
};

class KvCacheManager {
 public:
  // Allocates the host region (through the backend) and opens the disk store, recovering
  // its persisted prefix blocks. `backend` must outlive the manager and have its device
  // pool allocated with options.device_blocks blocks.
  static absl::StatusOr<std::unique_ptr<KvCacheManager>> Create(const KvCacheOptions& options, Backend* backend);
  ~KvCacheManager();  // flushes cached blocks to disk when the disk tier is on

  int64_t block_tokens() const { return options_.block_tokens; }
  int64_t BlocksForTokens(int64_t num_tokens) const {
    return (num_tokens + options_.block_tokens - 1) / options_.block_tokens;
  }
  int64_t num_device_blocks() const { return pool(Tier::kDevice).num_blocks(); }
  // Free device blocks plus unreferenced cached ones (which can be evicted on demand).
  int64_t num_available_device_blocks() const {
    return pool(Tier::kDevice).num_free() + lru(Tier::kDevice).size();
  }
  // Blocks that any tier can hold at once (admission: a sequence beyond this never fits).
  int64_t total_blocks() const {
    return pool(Tier::kDevice).num_blocks() + pool(Tier::kHost).num_blocks() + pool(Tier::kDisk).num_blocks();
  }

  // Device blocks the sequence must still get to hold positions [0, num_tokens) (its
  // host-resident blocks count as held).
  int64_t NewBlocksNeeded(SequenceId seq, int64_t num_tokens) const;
  // Grows the sequence's device block table to cover [0, num_tokens), evicting unreferenced
  // cached blocks (demoted down the tiers) as needed. All or nothing: ResourceExhausted,
  // and nothing changed, when too few device blocks are available.
  absl::Status Reserve(SequenceId seq, int64_t num_tokens);
  // Returns the sequence's device blocks and any swapped-out copies. Hashed full blocks
  // stay behind as prefix-cache entries.
  void Release(SequenceId seq);
  std::span<const BlockId> BlockTable(SequenceId seq) const;

  // The key chain of a sequence in `cache_namespace` ("" is the default namespace; the
  // caller validated it, ValidateCacheNamespace). The sequence keeps it and passes it to
  // MatchPrefix, OnComputed and ReadAhead with its tokens, so each block's key is computed
  // once; without one (nullptr) those compute the default namespace's keys each call.
  BlockKeyChain KeyChain(std::string_view cache_namespace) const;

  // Prefix reuse for a sequence with no blocks yet: maps the longest run of its full
  // blocks found in any tier (device hits shared, host/disk hits copied up) and returns the
  // number of tokens covered. Always leaves at least one token to compute. Never evicts a
  // referenced block; stops at the first miss, corrupt block, block with other tokens, or
  // shortage. `priority` (the sequence's) raises the eviction priority of the blocks it
  // reuses.
  // A sequence that holds only full computed blocks (the front of its prompt computed under
  // a load plan, see ProbeSlowPrefix) gets the run from the first block it does not hold
  // (the returned count covers the blocks it held too); one holding a partial block gets
  // nothing. `max_blocks` >= 0 caps the blocks it holds afterwards. `landed_only` (a load
  // plan's attach): takes only what the device and host tiers hold and remote lookups that
  // have landed, waiting for nothing (no disk read, no read-ahead or lookup in flight), so
  // that the blocks still loading are computed instead of waited for.
  int64_t MatchPrefix(SequenceId seq, std::span<const int32_t> tokens, int32_t priority = 0,
                      BlockKeyChain* keys = nullptr, int64_t max_blocks = -1, bool landed_only = false);
  // Load or recompute (the engine's plan, engine/load_plan.h). From the first block the
  // sequence does not hold, the prompt's `fast_blocks` cached on the device or host tier,
  // then `slow_blocks` only a slow tier may hold: the disk tier, and with a remote tier
  // every block no local tier holds (a lookup may find it; a known miss ends the run).
  // Their load time per block is measured (disk reads, remote hits), or guessed until
  // measured; `overlap`: their loads can run while the front computes (remote lookups
  // always; disk reads need a host tier to read ahead into).
  struct SlowPrefix {
    int64_t fast_blocks = 0;
    int64_t slow_blocks = 0;
    double load_seconds_per_block = 0;
    bool overlap = false;
  };
  SlowPrefix ProbeSlowPrefix(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys = nullptr);
  // Starts loading prompt blocks [from, to) ahead of their use (a load plan's slow run):
  // disk blocks read into host slots on the reader threads, every one at once (a plan's
  // loads replace computing them, so their budget is what they need, as far as the host
  // tier has slots ready now), the others looked up in the remote tier. MatchPrefix uses what has landed.
  // Disk reads start from the back (block to - 1 first), so that the blocks landed form a
  // run at the back that grows toward the front while the front computes toward it
  // (ProbeLoadFrontier). Returns the disk reads it started.
  int64_t LoadPrefixAhead(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from, int64_t to);
  // A load plan's progress over prompt blocks [from, to) (from: the first block the
  // sequence does not hold): `landed_from`, the first block of the run of landed blocks
  // (device, host, landed remote hits) that ends at `to` (to itself when block to - 1 has
  // not landed); `loading`, whether a block before it is still being read or looked up, and
  // the load time per block of the tiers loading them (the slower when both are). Lands
  // finished reads and lookups first; never waits.
  // `landed`: the blocks of [from, to) landed, in the run or not.
  struct LoadFrontier {
    int64_t landed_from = 0;
    int64_t landed = 0;
    bool loading = false;
    double load_seconds_per_block = 0;
  };
  LoadFrontier ProbeLoadFrontier(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from, int64_t to);
  // A tier's load time per block: block bytes over the bandwidth it delivered here, or over
  // a guess before it has delivered any (the disk's: kGuessedDiskBytesPerSecond).
  double DiskSecondsPerBlock() const;
  double RemoteSecondsPerBlock() const;
  // An NVMe drive's parallel reads, assumed until the disk has delivered blocks here (the
  // reads at creation, TierPreparationOptions::probe_disk_read_speed, usually have by the
  // first plan). A guess above the drive's speed costs little under a load plan (the front
  // computes on until it meets the loads, Scheduler::Replan and Attach); one below it
  // computes blocks that had loaded.
  static constexpr double kGuessedDiskBytesPerSecond = 4e9;
  // Gives a MatchPrefix result back unused (the sequence could not start yet): releases
  // its blocks, which stay cached, and takes its hits out of the counters, so a sequence
  // that waits is not counted as a hit on every step.
  void UnmatchPrefix(SequenceId seq);
  // Records that positions [0, num_computed) of the sequence hold valid K/V, so its newly
  // completed blocks become prefix-cache entries, evicted after those of lower priority.
  void OnComputed(SequenceId seq, std::span<const int32_t> tokens, int64_t num_computed, int32_t priority = 0,
                  BlockKeyChain* keys = nullptr);

  // Parallel sampling: gives `child` (holding nothing) the blocks of `parent` covering
  // positions [0, num_tokens), which the parent has computed: the full blocks shared (one
  // reference more each, so the prompt is held once however many completions read it),
  // the last partial block copied into a new device block, since both will write it next
  // (copy on write; kv_cache_fork.cc). ResourceExhausted, nothing changed, when no device
  // block is available for the copy; the backend's error when the copy fails.
  absl::Status Fork(SequenceId parent, SequenceId child, int64_t num_tokens);

  // Long sequences (docs/LONG_CONTEXT.md, kv_cache_streaming.cc): a sequence longer than
  // the device tier keeps its oldest full blocks in host slots of its own, read in place by
  // the forward (Backend: HostResidentKv), and only its recent blocks on the device; its
  // BlockTable then starts at logical block num_host_resident_blocks(seq).
  // Moves the sequence's oldest device blocks lying wholly before position `num_computed`
  // (computed, so never written again) to host slots, one by one, until
  // num_available_device_blocks() reaches `device_blocks_wanted` or no such block is left.
  // Host slots are taken as a swap takes them (an unreferenced cached host block is
  // evicted down to disk for one). Returns the blocks moved (0: none could be); the
  // backend's error when a copy failed (the block stays on the device).
  absl::StatusOr<int64_t> MoveOldBlocksToHost(SequenceId seq, int64_t num_computed, int64_t device_blocks_wanted);
  // What the forward reads from the host for the sequence (empty for an ordinary one).
  HostResidentKv HostResident(SequenceId seq) const;
  int64_t num_host_resident_blocks(SequenceId seq) const;

  // Pins the sequence's first `num_blocks` full blocks (which must be computed): the cache
  // keeps them on the device tier, never evicted, until UnpinAll. Idempotent per block.
  void PinPrefix(SequenceId seq, int64_t num_blocks);
  void UnpinAll();
  int64_t num_pinned_blocks() const { return static_cast<int64_t>(pinned_.size()); }

  // Swap: moves every device block of the sequence to host slots (disk slots when host is
  // full). ResourceExhausted when neither tier has room (the caller recomputes instead).
  // The copies are only started (in a few batches, smallest first, so that a pool short of
  // blocks right now waits for few); the device blocks are free for others at once (handed
  // out only once their copy has landed) and the disk writes happen when the copies land.
  // A failed copy or disk write is reported by SwapIn (the caller recomputes then).
  absl::Status SwapOut(SequenceId seq);
  bool IsSwappedOut(SequenceId seq) const { return swapped_.contains(seq); }
  int64_t SwappedBlocks(SequenceId seq) const;
  // Brings a swapped-out sequence back to device blocks (first waiting for its swap-out
  // copies if still in flight). ResourceExhausted when too few device blocks;
  // DataLoss/IoError when a disk copy is corrupt or unreadable, or the swap-out failed —
  // the swapped copy is then discarded and the caller must recompute the sequence.
  // With `prefetch`, host copies are only started (Backend::PrefetchBlocksFromHost): the
  // blocks may be read from the next step on, after Backend::WaitForPrefetches.
  absl::Status SwapIn(SequenceId seq, bool prefetch = false);

  // Disk -> host read-ahead on the I/O thread for a waiting sequence (see the top): its
  // swapped-out disk blocks once their swap-out and disk writes have landed, or, when it
  // holds nothing yet, the prompt's full blocks cached only on disk (`tokens`: its tokens,
  // as MatchPrefix gets them). Host slots are taken as a host eviction would; bounded per
  // call and in flight. Without both a host and a disk tier: nothing.
  // Returns whether one of the sequence's prefix blocks is being read when it returns:
  // the scheduler then lets it wait a step rather than read it on the stepping thread.
  bool ReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys = nullptr);
  int64_t num_disk_reads_in_flight() const {
    return disk_tier_.jobs == nullptr
               ? 0
               : disk_tier_.jobs->Count<PrefixReadJob>() + disk_tier_.jobs->Count<SwapReadJob>();
  }
  // Blocks until every read-ahead has finished, and lands them (tests, shutdown).
  void DrainDiskReads() {
    if (disk_tier_.jobs != nullptr) AwaitDiskJob(disk_tier_.jobs->last_read());
  }

  // Called at the end of every step: lands what finished and starts the write-behind of
  // the blocks the step filled (see the top). `idle` (nothing left to run): everything
  // queued is started — blocks with a host copy at once, the others as write-behind
  // buffers come free, waiting up to 200 ms for earlier writes to free them — so that an
  // idle context's blocks reach disk without another step; and the remote tier's puts, a
  // put buffer at a time (up to 200 ms more). Both waits are set_idle_drain_budget's.
  void FinishStep(bool idle);
  // How long FinishStep(idle) may wait for the slow tiers' writes (200 ms by default). The
  // engine sets 0 when its idle writer (PumpIdleWrites) moves what is left between steps:
  // then the step that ends a request never waits for the disk or the remote tier.
  void set_idle_drain_budget(std::chrono::milliseconds budget) { write_behind_.idle_drain_budget = budget; }
  // Between steps of an idle context (the engine's idle writer, under the engine lock):
  // what FinishStep(idle) left queued goes on — finished copies and disk writes land,
  // write-behind and remote puts start as far as buffers and bounds allow — waiting for
  // nothing. The blocks whose writes remain, queued or in flight, for a later call to move
  // (0: done; the disk's count as 0 while write-behind is paused after a failed write,
  // which the next step resumes).
  int64_t PumpIdleWrites();

  // Blocks until the host -> device copies SwapIn(prefetch = true) started have landed (the
  // blocks may be read from then on); the backend's error when one failed.
  absl::Status WaitForPrefetches();
  // Called once a step is scheduled, right before its forward: lands the copies that have
  // finished, then starts the write-back to host slots of cached device blocks that have no
  // lower-tier copy yet (the coldest unreferenced ones first), so they overlap the forward.
  // Without a host tier (or prefix cache) it only lands copies.
  void StartBackgroundCopies();
  // Lands finished async copies and disk writes without waiting (copies are also landed
  // inside every operation; disk writes at step start and end, and when an eviction needs
  // one).
  void PollCopies() {
    AdmitPreparedSlots();
    FinishCopies(0);
    LandDiskJobs();
  }
  int64_t num_copies_in_flight() const { return static_cast<int64_t>(copies_.batches.size()); }
  // Jobs submitted to the writer thread and not landed yet (blocks of every kind, index).
  int64_t num_disk_writes_in_flight() const {
    return disk_tier_.jobs != nullptr ? disk_tier_.jobs->num_writes_in_flight() : 0;
  }
  // Blocks until every queued disk write has finished, and lands them (tests, shutdown).
  void DrainDiskWrites() {
    if (disk_tier_.jobs != nullptr) AwaitDiskJob(disk_tier_.jobs->last_write());
  }

  // Makes the host and disk slots prepared in the background since the last call usable
  // (see the top), and notes a preparation that failed. Cheap: two atomic loads when
  // nothing changed. Called by every step and before a host or disk slot is taken.
  void AdmitPreparedSlots();
  // Blocks until both preparations have ended (complete, failed), then admits what they
  // prepared: tests, and callers that want the whole tiers before they start.
  void WaitForPreparedTiers();
  // Starts pinning the host tier when Create did not (TierPreparationOptions::
  // pin_host_at_create false); nothing otherwise.
  void StartHostPinning() {
    if (host_region_ != nullptr) host_region_->StartPinning();
  }
  // Holds the host tier's pinning back after the chunk being pinned (at most one chunk's
  // wait for the caller's device calls), until ResumeHostPinning.
  void PauseHostPinning() {
    if (host_region_ != nullptr) host_region_->PausePinning();
  }
  void ResumeHostPinning() {
    if (host_region_ != nullptr) host_region_->ResumePinning();
  }
  // Whether the host tier is still being pinned in the background (not all its slots are
  // usable yet).
  bool host_tier_preparing() const {
    return host_region_ != nullptr && !preparation_[static_cast<int>(Tier::kHost)].ended;
  }
  // Blocks until the host tier's preparation has ended, then admits its slots: for a long
  // sequence that can run no other way (Scheduler::EnsureProgress).
  void WaitForPreparedHostTier() {
    if (host_region_ != nullptr) host_region_->WaitUntilDone();
    AdmitPreparedSlots();
  }
  // Slots of the tier usable now (prepared and admitted): capacity_blocks once prepared.
  int64_t ready_blocks(Tier tier) const { return pool(tier).num_available(); }
  // Why the tier's preparation stopped early, once AdmitPreparedSlots has seen it; empty
  // otherwise.
  const std::string& preparation_error(Tier tier) const { return preparation_[static_cast<int>(tier)].error; }

  // Bytes per block; used/peak blocks per tier.
  size_t block_bytes() const { return block_bytes_; }
  int64_t capacity_blocks(Tier tier) const;
  // Blocks held by sequences (running, or swapped out); cached blocks nobody holds are
  // reclaimable and counted by cached_blocks instead.
  int64_t used_blocks(Tier tier) const;
  int64_t cached_blocks(Tier tier) const;
  int64_t peak_blocks(Tier tier) const;
  const KvCacheCounters& counters() const { return counters_; }
  // The disk store's own counters (index recovery, journal), zero without a disk tier; and
  // why part of its index was ignored when it was opened ("" when none was).
  DiskStoreCounters disk_store_counters() const;
  std::string disk_index_ignored_reason() const;
  // Measured bytes/second of swaps (for the preemption cost model); 0 before any swap.
  double measured_swap_bandwidth() const;
  // The remote tier (kv_cache_remote.cc), null without one; its own counters are the
  // store's (RemoteBlockStore::counters).
  const RemoteBlockStore* remote_store() const { return remote_.store.get(); }
  // Blocks on their way to the slow tiers, not there yet: the disk's (write-behind queued,
  // being copied off the device, or written by the writer thread and not finished) and the
  // remote tier's (queued here, or put by its lane and not answered). Zero once a context
  // that served is idle and its writes have landed.
  struct PendingWrites {
    int64_t disk_blocks = 0;
    int64_t remote_blocks = 0;
  };
  PendingWrites pending_writes() const;
  // Blocks until every computed block queued for the remote tier has been sent (tests,
  // benchmarks; also done when the manager is destroyed).
  void FlushRemotePuts();

  // Every invariant: pools, tables, cache maps and LRU sets agree. Internal error naming
  // the first violation.
  absl::Status VerifyIntegrity() const;

 private:
  struct SlotRef {
    Tier tier;
    int32_t slot;
  };
  using Tokens = std::vector<int32_t>;
  // A swapped-out sequence: its slots, and the state of the copies filling them.
  struct SwapState {
    std::vector<SlotRef> slots;  // in block order
    uint64_t generation = 0;     // distinguishes swap-outs of the same sequence id
    int64_t last_ticket = 0;     // the swap-out's last copy batch; 0 when all landed
    absl::Status failed;         // a copy or disk write failed: unusable
  };
  // One block of an in-flight device -> host copy, and what to do with it once landed.
  // kDemoteToDisk: an evicted cached block bound for disk (DemoteDirtyDeviceBlocks).
  // kPersistToDisk: a cached block's write-behind (into a write-behind buffer).
  enum class PendingKind { kCacheToHost, kSwapToHost, kSwapToDisk, kDemoteToDisk, kPersistToDisk };
  struct PendingCopy {
    PendingKind kind = PendingKind::kCacheToHost;
    BlockId block = 0;          // device block read
    int32_t slot = 0;           // host slot (kCacheToHost, kSwapToHost) or disk slot
    int32_t staging = -1;       // staging buffer the bytes land in (kSwapToDisk, kDemoteToDisk), or
                                // write-behind buffer (kPersistToDisk)
    BlockHash hash{};           // cached kinds: the content's key
    Tokens tokens;              // cached kinds: the content's tokens
    int32_t priority = 0;       // kCacheToHost, kDemoteToDisk: eviction priority it had
    bool evicted = false;       // kCacheToHost: the device copy is gone (failure = dropped)
    SequenceId seq = 0;         // swaps
    uint64_t generation = 0;    // swaps: SwapState::generation
    size_t index = 0;           // swaps: block index (disk tag)
  };
  struct PendingBatch {
    int64_t ticket = 0;
    std::vector<PendingCopy> copies;
  };
  // Async device -> host copies in flight, oldest first (tickets complete in this order).
  struct InFlightCopies {
    std::deque<PendingBatch> batches;
    // Device block -> the newest ticket reading it: not handed out for writing before it lands.
    absl::flat_hash_map<BlockId, int64_t> reading_ticket;
    // Host slots being filled by a write-back (held, in no cache map until they land).
    absl::flat_hash_map<int32_t, int64_t> writeback_slots;
  };

  struct SequenceBlocks {
    // Long sequences: its first host_slots.size() logical blocks, in host slots it holds
    // alone (in no cache map), read in place; host_data[i] = HostSlot(host_slots[i]).
    std::vector<int32_t> host_slots;
    std::vector<const void*> host_data;
    std::vector<BlockId> table;         // device blocks, in position order, after the host ones
    std::vector<BlockHash> hashes;      // hashes of the first hashes.size() full blocks
    // The blocks MatchPrefix found per tier, and last in the remote tier (UnmatchPrefix
    // uncounts them).
    int64_t matched[kNumTiers + 1] = {0, 0, 0, 0};
  };
  // One tier: its blocks (ids, ref counts, free queue), its prefix-cache index (hash ->
  // slot, slot -> hash) and the eviction order of its unreferenced cached slots. A cached
  // device block holds one reference of its own (the cache's), so "unreferenced" means ref
  // count 1 there; host and disk cached slots hold none but the cache's entry.
  // Device and host keep each cached slot's token ids (block_tokens per slot, valid while
  // the slot is cached); the disk keeps them in its slot headers.
  struct TierState {
    TierState(int64_t num_blocks, int64_t num_available, int64_t tokens_per_slot)
        : pool(num_blocks, num_available), tokens(static_cast<size_t>(num_blocks * tokens_per_slot)) {}
    BlockPool pool;
    LruSet lru;
    absl::flat_hash_map<BlockHash, int32_t> by_hash;
    absl::flat_hash_map<int32_t, BlockHash> hash_of;
    std::vector<int32_t> tokens;  // (num_blocks, block_tokens); empty for the disk
  };
  // Staging buffers between the device and the disk I/O threads (pinned on CUDA): each free
  // or held by exactly one copy in flight or one disk job.
  struct StagingBuffers {
    uint8_t* memory = nullptr;  // (count, block_bytes)
    int32_t count = 0;
    std::vector<int32_t> free;
  };
  // The disk tier: the slot file and its I/O in flight. `jobs` is declared after `store`,
  // so that its threads are joined before the store closes.
  struct DiskTier {
    std::unique_ptr<DiskBlockStore> store;
    // Reserves the file's slots past what Open reserved (null when none were left).
    std::unique_ptr<ChunkedPreparer> preparer;
    std::unique_ptr<DiskJobs> jobs;
    int64_t write_pause_steps = 0;  // steps without write-back left after a failed write
  };
  // Write-behind (see the top): device blocks cached since, with their key then, oldest
  // first (entries whose block changed or reached disk meanwhile are skipped), and its own
  // buffers, so that it never takes a staging buffer a swap or eviction waits for.
  struct WriteBehind {
    std::deque<std::pair<BlockId, BlockHash>> queue;
    StagingBuffers buffers;
    int64_t pause_steps = 0;  // steps without write-behind left after a failed write
    // How long FinishStep(idle) waits for buffers (disk, then remote): 0 once an idle
    // writer takes over (set_idle_drain_budget).
    std::chrono::milliseconds idle_drain_budget{200};
  };

  // The remote tier (kv_cache_remote.cc): the store and its I/O thread; the prompt blocks
  // looked up (in flight, or landed: the block's bytes or why not), kept a few steps for
  // the match that asked; the computed device blocks waiting to be put, with their key
  // then; and a host buffer their device copies go through. A lookup with a host slot
  // receives the block there, in place (pinned memory, no copy, no bound but the host
  // tier's); the slot is held (in no cache map: nothing evicts it) until the block is
  // copied to the device, found unusable, or expires.
  struct RemoteLookup {
    bool landed = false;
    absl::Status status;           // once landed: OK (bytes valid), NotFound (a miss), else unusable
    RemoteBlockBytes bytes;
    int64_t landed_step = 0;
    int32_t host_slot = -1;        // the host slot it lands in (held, in no cache map), if any
  };
  struct RemoteTier {
    std::unique_ptr<RemoteBlockStore> store;
    absl::flat_hash_map<BlockHash, RemoteLookup> lookups;
    int64_t landed_bytes = 0;      // bytes held by landed lookups
    int64_t landed_total = 0;      // lookups landed so far (a wait's progress)
    std::deque<std::pair<BlockId, BlockHash>> put_queue;
    uint8_t* put_buffer = nullptr; // (put_buffer_blocks, block_bytes), from the backend
    int64_t put_buffer_blocks = 0;
    int64_t step = 0;
    int64_t host_slot_lookups = 0;  // lookups holding host slots (in flight or landed)
  };
  // Opens the remote tier (Create); nothing happens on the network until it is used.
  absl::Status OpenRemoteTier();
  // Queues a block just computed and cached on the device for the remote tier.
  void QueueRemotePut(BlockId block, BlockHash hash);
  // Copies queued blocks still cached to the host buffer and hands them to the store, as
  // far as its bound allows (the rest wait for the next step). Called by FinishStep.
  void StartRemotePuts();
  // The rest of the put queue, a put buffer at a time: `buffer_free` returns once the next
  // put would be accepted (false: the rest wait).
  void DrainRemotePutQueue(absl::FunctionRef<bool()> buffer_free);
  // Disk writes not handed to the writer thread yet: write-behind queued, or being copied
  // off the device for the disk.
  int64_t DiskWritesNotSubmitted() const;
  // Moves finished lookups into `lookups`, and forgets landed ones no match took for a
  // while (called at each step's end with `expire`).
  void LandRemoteLookups(bool expire = false);
  // Submits lookups of prompt blocks [first, max_blocks) not asked yet (while the bound
  // allows; the last block first with back_first, as a load plan wants them); returns
  // whether one of them is still in flight.
  bool LookUpRemote(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t first, int64_t max_blocks,
                    bool back_first = false);
  // For MatchPrefix at block i, the first one no local tier holds: the landed lookup of the
  // block when it is a valid hit (asking for it and the blocks after it first, and waiting
  // while lookups land, at most timeout_ms without one); nullptr otherwise.
  const RemoteLookup* RemoteHit(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t i, int64_t max_blocks);
  // The block's lookup when it has landed as a valid hit; nullptr otherwise (never waits).
  const RemoteLookup* LandedRemoteHit(const BlockHash& hash) const;
  // How many blocks from `first` on (up to max_blocks) Redis holds, in a row: one pipelined
  // EXISTS, waited for at most timeout_ms (0 when it does not answer, or the tier is off).
  int64_t ProbeRemoteRun(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t first, int64_t max_blocks);
  // ReadAhead's remote part: lookups for the prompt blocks no local tier holds; true while
  // one is in flight (the scheduler lets the sequence wait while others run).
  bool RemoteReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys);
  // ReadAhead's disk part (kv_cache_read_ahead.cc), and its prefix walk over blocks
  // [from, to): reads of the blocks only the disk holds, up to the first block no tier
  // holds; true when one of them is being read.
  bool DiskReadAhead(SequenceId seq, std::span<const int32_t> tokens, BlockKeyChain* keys);
  // `back_first`: reads are started from the back of the chain (for a load plan).
  // `budget`: the host slots it may fill (ReadAheadBudget() when negative).
  bool ReadPrefixAhead(std::span<const int32_t> tokens, BlockKeyChain* keys, int64_t from, int64_t to,
                       bool back_first = false, int64_t budget = -1);
  // The host slots one read-ahead call may fill: a write-back budget of them per call, and
  // in flight at most a quarter of the host tier, so read-ahead never displaces most of
  // what the host caches. TakeHostSlotForRead allocates one against `*budget`, evicting
  // only what goes without waiting (AllocateSlot, may_wait false); nullopt when the budget
  // or the tier is spent.
  int64_t ReadAheadBudget() const;
  std::optional<int32_t> TakeHostSlotForRead(int64_t* budget);

  KvCacheManager(const KvCacheOptions& options, Backend* backend);
  // The tag a swapped block's disk slot carries instead of a content key, so that a slot
  // read back is checked to be the one written (by this manager, swap-out and block).
  Sha256Digest SwapTag(SequenceId seq, uint64_t generation, size_t index) const;
  // The stored token ids of a cached device or host slot.
  std::span<int32_t> StoredTokens(Tier tier, int32_t slot) {
    return std::span<int32_t>(state(tier).tokens).subspan(static_cast<size_t>(slot * options_.block_tokens),
                                                          static_cast<size_t>(options_.block_tokens));
  }
  std::span<const int32_t> StoredTokens(Tier tier, int32_t slot) const {
    return std::span<const int32_t>(state(tier).tokens)
        .subspan(static_cast<size_t>(slot * options_.block_tokens), static_cast<size_t>(options_.block_tokens));
  }
  void SetStoredTokens(Tier tier, int32_t slot, std::span<const int32_t> tokens) {
    std::copy(tokens.begin(), tokens.end(), StoredTokens(tier, slot).begin());
  }
  // Whether a cached device or host slot holds exactly `tokens`; a mismatch is counted.
  bool StoredTokensMatch(Tier tier, int32_t slot, std::span<const int32_t> tokens);
  // Tokens of full block i of `tokens`.
  std::span<const int32_t> BlockTokens(std::span<const int32_t> tokens, int64_t i) const {
    return tokens.subspan(static_cast<size_t>(i * options_.block_tokens), static_cast<size_t>(options_.block_tokens));
  }
  // Eviction priority of a cached content hash (0 when never raised).
  int32_t PriorityOf(BlockHash hash) const;
  void RaisePriority(BlockHash hash, int32_t priority);

  TierState& state(Tier tier) { return tiers_[static_cast<int>(tier)]; }
  const TierState& state(Tier tier) const { return tiers_[static_cast<int>(tier)]; }
  BlockPool& pool(Tier tier) { return state(tier).pool; }
  const BlockPool& pool(Tier tier) const { return state(tier).pool; }
  LruSet& lru(Tier tier) { return state(tier).lru; }
  const LruSet& lru(Tier tier) const { return state(tier).lru; }
  // Returns one reference of a device block; a cached block left with only the cache's
  // becomes evictable (LRU at its hash's priority).
  void ReleaseDeviceBlock(BlockId block);

  // n device blocks to write (caller checked num_available_device_blocks): free ones first,
  // then LRU unreferenced cached blocks, evicted down the tiers. A victim with a lower-tier
  // copy (written back) is free to take; the others are copied in one batch the host waits
  // for. Blocks an async copy still reads are waited for (stall counted).
  std::vector<BlockId> AllocateDeviceBlocks(int64_t n);
  // Eviction of device victims without a lower-tier copy: one batch to host slots, waited
  // for; those the host has no room for go to disk slots through staging buffers (batches
  // waited for too) and the writer thread (see the top).
  struct DirtyVictim {
    BlockId block;
    BlockHash hash;
    int32_t priority;
    Tokens tokens;
  };
  void DemoteDirtyDeviceBlocks(const std::vector<DirtyVictim>& victims);
  void DemoteToDisk(const std::vector<DirtyVictim>& victims);
  // Starts one async batch; on success it is queued and its device blocks are fenced.
  // Returns the ticket.
  absl::StatusOr<int64_t> StartBatch(std::vector<PendingCopy> copies);
  // Lands every pending batch that is done; with wait_ticket > 0 the host first waits for
  // that ticket (the stall is counted).
  void FinishCopies(int64_t wait_ticket);
  void DrainCopies() {
    if (!copies_.batches.empty()) FinishCopies(copies_.batches.back().ticket);
  }
  void FinishBatch(const PendingBatch& batch, const absl::Status& copied);
  uint8_t* Staging(int32_t index) const {
    return staging_.memory + static_cast<size_t>(index) * block_bytes_;
  }
  uint8_t* WriteBehindBuffer(int32_t index) const {
    return write_behind_.buffers.memory + static_cast<size_t>(index) * block_bytes_;
  }
  // A free staging buffer, first landing the oldest copies and then waiting for the oldest
  // disk write holding one; nullopt only when none is held by anything (no disk tier).
  // Callers hand their own unstarted copies' buffers in first (they would wait forever).
  std::optional<int32_t> AcquireStaging();
  // On host or disk, or on its way to disk by write-behind.
  bool HasLowerCopy(BlockHash hash) const {
    return state(Tier::kHost).by_hash.contains(hash) || state(Tier::kDisk).by_hash.contains(hash) ||
           (disk_tier_.jobs != nullptr && disk_tier_.jobs->PersistWriteOf(hash).has_value());
  }
  // Blocks of write-back per StartBackgroundCopies (see there).
  int64_t WriteBackBudget() const;
  // Host -> disk write-back on the writer thread (kv_cache_copies.cc): queues writes of the
  // coldest cached host blocks without a disk copy.
  void StartDiskWriteBack();
  // Write-behind (kv_cache_write_behind.cc, see the top): starts the writes of the oldest
  // queued blocks not on disk yet; `idle`: as many as buffers allow, waiting for the device
  // copies.
  void StartWriteBehind(bool idle);
  // Write-behind writes in flight at once, and the writer queue depth it yields to.
  int64_t WriteBehindLimit() const;
  // Disk jobs (kv_cache_disk_jobs.cc): lands every finished one, each by its kind — the one
  // place a disk job's effects happen.
  void LandDiskJobs(DiskThreads which = DiskThreads::kBoth);
  void LandDiskJob(DiskJobs::Landed& landed);
  // A failed disk read counted: corrupt (DataLoss) or an I/O error.
  void CountReadFailure(const absl::Status& status);
  // When there is a job: lands what its thread has finished; then, if the job is still in
  // flight, waits for it (counted as a disk write or read-ahead wait) and lands it.
  void AwaitDiskJob(std::optional<DiskJobId> job);
  // The status of an awaited job (eviction write, staged read) once landed.
  absl::Status AwaitResult(DiskJobId job);
  // A free slot of the host or disk tier for cached or swapped data, evicting the LRU
  // cached entry (Offload) when none is free. Pinned blocks are never candidates: the pin
  // holds a reference, so they are not in any LRU set.
  // `may_wait` false, for a read that may as well not happen (a read-ahead, a load plan's
  // load, a remote value): only a victim whose eviction waits for no disk write
  // (PopVictimWithoutWaiting), so the stepping thread never waits for the disk to make
  // room for an optional read.
  std::optional<int32_t> AllocateSlot(Tier tier, bool may_wait = true);
  // The least recently used cached entry of `tier` among the first kVictimsScanned that
  // EvictsWithoutWaiting, out of the LRU; nullopt (counted in reads_without_host_slot) when
  // they all would wait.
  std::optional<int32_t> PopVictimWithoutWaiting(Tier tier);
  // Whether evicting cached `slot` of `tier` (Offload) is done at once: a host block with
  // a disk copy and no write of it in flight, or any block when there is no disk to go to.
  bool EvictsWithoutWaiting(Tier tier, int32_t slot) const;
  static constexpr int64_t kVictimsScanned = 64;
  // Moves the content of a cached slot being evicted from `tier` one tier down: a host
  // block to disk (unless already there), from the last tier it is dropped. Device victims
  // go through AllocateDeviceBlocks.
  void Offload(Tier tier, int32_t slot);
  // Writes a host victim's block to disk_slot on the writer thread and waits for it (the
  // slot is reused right after); straight to the store when there is no writer.
  absl::Status WriteEvictedHostSlot(int32_t host_slot, int32_t disk_slot, BlockHash hash);
  // Forgets a disk cache entry whose slot did not hold its block (stale or corrupt): out of
  // the cache, the pool and the store's index.
  void ForgetDiskSlot(int32_t disk_slot);
  void DropCached(Tier tier, int32_t slot);
  // Enters a block written to disk_slot into the disk cache (LRU at its hash's priority).
  void CacheOnDisk(int32_t disk_slot, BlockHash hash);
  // The block was used (recomputed or hit): its disk copy, if any, becomes the most recently
  // used there too (a block in use is not the disk's next victim).
  void TouchOnDisk(BlockHash hash);
  // Queues a block just cached on the device for write-behind (see the top).
  void QueueWriteBehind(BlockId block, BlockHash hash);
  absl::Status CopyHostSlotToDevice(int32_t host_slot, BlockId block);
  // Device -> staging buffer -> disk, synchronously: at shutdown only.
  absl::Status CopyDeviceToDisk(BlockId block, int32_t disk_slot, BlockHash hash);
  // Disk -> device through staging buffers on the reader thread (kv_cache_staged_reads.cc):
  // every read is submitted as far as buffers allow, each landed read copied to its device
  // block at once; returns each read's status, in order (DataLoss: corrupt, counted in
  // corrupt_blocks_detected; other failures in io_errors). The disk slots must not be
  // written meanwhile (no write in flight on them).
  struct StagedRead {
    int32_t disk_slot;
    Sha256Digest key;  // content key, or SwapTag
    Tokens tokens;     // the content's expected tokens (none for a swapped block)
    BlockId block;     // written only if the read succeeds
  };
  std::vector<absl::Status> ReadDiskBlocksToDevice(const std::vector<StagedRead>& reads);
  uint8_t* HostSlot(int32_t slot) const { return host_memory_ + static_cast<size_t>(slot) * block_bytes_; }
  // Whether swap-out `generation` of `seq` still holds disk slot `disk_slot` as block
  // `index`. A disk read or write of a swapped block whose swap no longer holds it (released,
  // or swapped anew) owns the slot until it lands.
  bool SwapHoldsDiskSlot(SequenceId seq, uint64_t generation, size_t index, int32_t disk_slot) const;
  // Waits for what a swapped sequence's slots still wait on — its swap-out copies, then
  // the disk writes and read-aheads of its disk slots — and lands it all (a failure is
  // left in its SwapState::failed).
  void SettleSwap(SequenceId seq);
  // The invariants of the host and disk tiers (kv_cache_integrity.cc).
  absl::Status VerifyLowerTier(Tier tier) const;
  // Staging or write-behind buffers: each free or held by exactly one holder.
  absl::Status VerifyBuffers() const;
  // Records how a tier's background preparation ended (kv_cache_preparation.cc).
  void NotePreparationEnd(Tier tier, const absl::Status& status);

  const KvCacheOptions options_;
  Backend* const backend_;
  const size_t block_bytes_;
  TierState tiers_[kNumTiers];
  const uint64_t instance_tag_;     // random: keys SwapTag to this manager
  const BlockHash default_scope_;   // the default namespace's key scope
  std::unique_ptr<HostTierMemory> host_region_;  // null without a host tier
  uint8_t* host_memory_ = nullptr;  // (host_blocks, block_bytes): host_region_'s bytes
  // How each lower tier's preparation ended, once AdmitPreparedSlots saw it end.
  struct Preparation {
    bool ended = false;
    std::string error;
  };
  Preparation preparation_[kNumTiers];
  StagingBuffers staging_;          // from the backend, with a disk tier
  WriteBehind write_behind_;        // with a disk tier (its buffers from the backend)
  DiskTier disk_tier_;
  RemoteTier remote_;
  InFlightCopies copies_;
  absl::flat_hash_map<SequenceId, SequenceBlocks> sequences_;
  absl::flat_hash_map<SequenceId, SwapState> swapped_;
  uint64_t swap_generation_ = 0;
  // Device blocks cached since the last StartBackgroundCopies, with their hash then.
  std::deque<std::pair<BlockId, BlockHash>> writeback_queue_;
  absl::flat_hash_map<BlockHash, int32_t> hash_priority_;  // only hashes cached somewhere
  // Pinned prefix blocks: hash -> device block, each holding one reference of the pin.
  absl::flat_hash_map<BlockHash, BlockId> pinned_;
  KvCacheCounters counters_;
};

}  // namespace kvtier

#endif  // KVTIER_KV_KV_CACHE_MANAGER_H_
