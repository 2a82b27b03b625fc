// RemoteTierStats (remote_tier_stats.h).
#include "engine/remote_tier_stats.h"

#include "remote/remote_block_store.h"

namespace kvtier {

nlohmann::json RemoteTierStats(const KvStats& kv) {
  if (!kv.remote_enabled) return {{"enabled", false}};  // no remote_kv_url: no remote numbers
  const RemoteBlockStore::Counters& c = kv.remote;
  const KvCacheCounters& counters = kv.counters;
  return {
      {"enabled", true},
      {"on", c.on},
      {"puts_queued", counters.remote.puts_queued},
      // Queued blocks evicted and written for another entry before their put: not sent.
      {"puts_stale", counters.remote.puts_stale},
      {"puts", c.puts},
      {"put_bytes", c.put_bytes},
      {"puts_refused", c.puts_refused},
      {"puts_skipped", c.puts_skipped},
      {"put_errors", c.put_errors},
      {"gets", c.gets},
      {"gets_refused", c.gets_refused},
      {"hits", c.hits},
      {"misses", c.misses},
      {"corrupt", c.corrupt},
      {"token_mismatches", c.token_mismatches},
      {"get_errors", c.get_errors},
      {"get_bytes", c.get_bytes},
      {"get_seconds", c.get_seconds},
      {"put_seconds", c.put_seconds},
      // What the tier delivered: block bytes of the hits over the time lookups were
      // running (on any of the lookup lanes; 0 before any).
      {"get_bytes_per_second", c.get_seconds > 0 ? static_cast<double>(c.get_bytes) / c.get_seconds : 0.0},
      {"lookup_timeouts", counters.remote.lookup_timeouts},
      // Blocks received in place into host slots (the others into buffers of their own).
      {"landed_in_host", counters.remote.landed_in_host},
      // EXISTS probes before load plans, and the blocks they found in a row.
      {"probes", counters.remote.probes},
      {"probe_blocks", counters.remote.probe_blocks},
      {"disables", c.disables},
      {"reconnects", c.reconnects},
      {"bytes_in_flight", c.bytes_in_flight},
  };
}

}  // namespace kvtier
