// PrometheusText (prometheus_text.h): a table from statistics to metric families.
#include "engine/prometheus_text.h"

#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvtier {
namespace {

using Json = nlohmann::json;

enum class Type { kCounter, kGauge };

struct Family {
  const char* name;  // after "kvtier_"
  Type type;
  const char* help;
  // One sample per entry: label text ("" or e.g. `tier="gpu"`) and the stats path.
  std::vector<std::pair<std::string, std::string>> samples;
};

// The statistic at a dotted path ("tiers.gpu.used_bytes"), or nullptr.
const Json* Find(const Json& stats, std::string_view path) {
  const Json* node = &stats;
  while (!path.empty()) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    path = dot == std::string_view::npos ? std::string_view() : path.substr(dot + 1);
  }
  return node;
}

// Numbers as Prometheus reads them: integers exactly, floats in their shortest round-trip
// form (the JSON library's), +Inf spelled as the format spells it.
std::string Number(const Json& value) {
  if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
  return value.dump();
}

std::string EscapeLabel(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> PerTier(const char* field) {
  std::vector<std::pair<std::string, std::string>> samples;
  for (const char* tier : {"gpu", "host", "disk"}) {
    samples.push_back({absl::StrCat("tier=\"", tier, "\""), absl::StrCat("tiers.", tier, ".", field)});
  }
  return samples;
}

std::vector<Family> Families() {
  using P = std::vector<std::pair<std::string, std::string>>;
  constexpr Type kCounter = Type::kCounter;
  constexpr Type kGauge = Type::kGauge;
  return {
      // Work done.
      {"steps_total", kCounter, "Steps that ran a forward.", P{{"", "steps"}}},
      {"prompt_tokens_computed_total", kCounter, "Prompt tokens computed (prefill and recompute).",
       P{{"", "prompt_tokens_computed"}}},
      {"generated_tokens_total", kCounter, "Tokens generated.", P{{"", "generated_tokens"}}},
      {"sequences_finished_total", kCounter, "Sequences finished, by how: completed (stop or length), cancelled, failed.",
       P{{"reason=\"completed\"", "sequences.completed"},
         {"reason=\"cancelled\"", "sequences.cancelled"},
         {"reason=\"failed\"", "sequences.failed"}}},
      {"sequences", kGauge, "Sequences not finished, by state.",
       P{{"state=\"running\"", "sequences.running"}, {"state=\"waiting\"", "sequences.waiting"}}},
      {"sequences_unfinished", kGauge, "Sequences waiting, running or paused.", P{{"", "sequences.unfinished"}}},
      // Tiers.
      {"tier_capacity_bytes", kGauge, "KV bytes the tier holds when full.", PerTier("capacity_bytes")},
      {"tier_used_bytes", kGauge, "KV bytes of the tier in use (referenced or cached).", PerTier("used_bytes")},
      {"tier_peak_bytes", kGauge, "Most KV bytes of the tier in use at once since the context was created.",
       PerTier("peak_bytes")},
      {"tier_cached_bytes", kGauge, "KV bytes of the tier held only as prefix-cache entries (evictable).",
       PerTier("cached_bytes")},
      {"tier_ready_bytes", kGauge,
       "KV bytes of the tier usable now (host pinned, disk file reserved in the background after creation).",
       PerTier("ready_bytes")},
      {"tier_capacity_blocks", kGauge, "KV blocks the tier holds when full.", PerTier("capacity_blocks")},
      {"tier_used_blocks", kGauge, "KV blocks of the tier in use.", PerTier("used_blocks")},
      {"tier_demoted_blocks_total", kCounter, "Blocks evicted from the tier into the tier below.",
       PerTier("demoted_blocks")},
      {"pinned_blocks", kGauge, "Device blocks held by pinned prefixes.", P{{"", "pinned_blocks"}}},
      {"pending_write_blocks", kGauge, "Blocks on their way to the disk or remote tier, not there yet.",
       P{{"tier=\"disk\"", "pending_writes.disk_blocks"}, {"tier=\"remote\"", "pending_writes.remote_blocks"}}},
      {"device_bytes_in_use", kGauge, "Device bytes the backend holds (weights, workspace, KV pool).",
       P{{"", "device_bytes_in_use"}}},
      {"disk_read_bytes_per_second", kGauge, "The disk tier's recent read speed, the one load plans weigh.",
       P{{"", "disk_reads.recent_bytes_per_second"}}},
      // Policy.
      {"preemptions_total", kCounter, "Running sequences paused to free device blocks.", P{{"", "preemptions"}}},
      {"recomputes_total", kCounter, "Preemptions that dropped the KV for recompute.", P{{"", "recomputes"}}},
      {"prefetches_reclaimed_total", kCounter, "Blocks prefetched for paused sequences taken back for running ones.",
       P{{"", "prefetches_reclaimed"}}},
      {"swaps_out_total", kCounter, "Sequences whose KV was swapped out of the device.", P{{"", "swaps_out"}}},
      {"swaps_in_total", kCounter, "Sequences whose KV was swapped back in.", P{{"", "swaps_in"}}},
      {"swap_prefetches_total", kCounter, "Swap-ins started ahead of the sequence's resume.", P{{"", "swap_prefetches"}}},
      {"swap_out_bytes_total", kCounter, "Bytes swapped out of the device.", P{{"", "swap_out_bytes"}}},
      {"swap_in_bytes_total", kCounter, "Bytes swapped back into the device.", P{{"", "swap_in_bytes"}}},
      {"blocks_dropped_total", kCounter, "Cached blocks dropped from the last tier that could hold them.",
       P{{"", "blocks_dropped"}}},
      {"kv_layer_groups", kGauge, "KV layer groups (1 unless sliding-window layers keep blocks of their own).",
       P{{"", "kv_layer_groups.groups"}}},
      {"blocks_freed_by_window_total", kCounter, "Blocks of windowed layer groups given back once no query read them.",
       P{{"", "kv_layer_groups.blocks_freed_by_window"}}},
      {"blocks_moved_to_host_total", kCounter,
       "Old blocks of sequences longer than the device tier moved to the host tier, read there in place.",
       P{{"", "blocks_moved_to_host"}}},
      {"prefix_hits_total", kCounter, "Prompt blocks found in the prefix cache, by the tier they were found in.",
       P{{"tier=\"gpu\"", "prefix_hits.gpu"},
         {"tier=\"host\"", "prefix_hits.host"},
         {"tier=\"disk\"", "prefix_hits.disk"},
         {"tier=\"remote\"", "prefix_hits.remote"}}},
      {"prefix_hit_tokens_total", kCounter, "Prompt tokens not computed thanks to prefix-cache hits.",
       P{{"", "prefix_hit_tokens"}}},
      {"blocks_written_back_total", kCounter, "Cached device blocks copied to the host ahead of their eviction.",
       P{{"", "blocks_written_back"}}},
      {"disk_blocks_written_back_total", kCounter, "Cached host blocks written to disk ahead of their eviction.",
       P{{"", "disk_blocks_written_back"}}},
      {"disk_staged_reads_total", kCounter, "Blocks read from disk at their use.", P{{"", "disk_staged_reads"}}},
      {"disk_read_aheads_total", kCounter, "Blocks read from disk ahead of their use.", P{{"", "disk_read_aheads"}}},
      {"disk_speed_probes_total", kCounter,
       "Rounds of probe reads that measured the disk's read speed again after load plans found it stale.",
       P{{"", "disk_reads.speed_probes"}}},
      {"reads_without_host_slot_total", kCounter,
       "Optional reads not started: every host block that could make room was still being written to disk.",
       P{{"", "reads_without_host_slot"}}},
      // The remote tier (Redis), present when remote_kv_url is set.
      {"remote_puts_total", kCounter, "Blocks stored in the remote tier.", P{{"", "remote.puts"}}},
      {"remote_put_bytes_total", kCounter, "Value bytes stored in the remote tier.", P{{"", "remote.put_bytes"}}},
      {"remote_gets_total", kCounter, "Remote-tier lookups answered, by outcome.",
       P{{"result=\"hit\"", "remote.hits"},
         {"result=\"miss\"", "remote.misses"},
         {"result=\"corrupt\"", "remote.corrupt"},
         {"result=\"token_mismatch\"", "remote.token_mismatches"},
         {"result=\"error\"", "remote.get_errors"}}},
      {"remote_get_bytes_total", kCounter, "Block bytes the remote tier delivered (hits).", P{{"", "remote.get_bytes"}}},
      {"remote_get_seconds_total", kCounter, "Time at least one remote-tier lookup batch was running.",
       P{{"", "remote.get_seconds"}}},
      {"remote_refused_total", kCounter, "Remote-tier puts and lookups not queued (tier off, or bytes in flight at the bound).",
       P{{"op=\"put\"", "remote.puts_refused"}, {"op=\"get\"", "remote.gets_refused"}}},
      {"remote_puts_skipped_total", kCounter, "Remote-tier puts not sent: the block was in Redis already.",
       P{{"", "remote.puts_skipped"}}},
      {"remote_puts_stale_total", kCounter,
       "Remote-tier puts dropped before sending: the block held another entry by then.",
       P{{"", "remote.puts_stale"}}},
      {"remote_put_errors_total", kCounter, "Remote-tier puts refused by Redis or lost with a connection.",
       P{{"", "remote.put_errors"}}},
      {"remote_lookup_timeouts_total", kCounter, "Prefix matches that stopped waiting for a remote lookup.",
       P{{"", "remote.lookup_timeouts"}}},
      {"remote_landed_in_host_total", kCounter, "Remote-tier blocks received in place into host-tier slots.",
       P{{"", "remote.landed_in_host"}}},
      {"remote_probes_total", kCounter, "EXISTS probes of the remote tier before load plans.", P{{"", "remote.probes"}}},
      {"remote_probe_blocks_total", kCounter, "Blocks those probes found in Redis (in a row from the first).",
       P{{"", "remote.probe_blocks"}}},
      {"remote_disables_total", kCounter, "Times the remote tier switched itself off after a failure.",
       P{{"", "remote.disables"}}},
      {"remote_reconnects_total", kCounter, "Times the remote tier came back after a failure.",
       P{{"", "remote.reconnects"}}},
      {"remote_on", kGauge, "1 while the remote tier is on, 0 while it is off after a failure.", P{{"", "remote.on"}}},
      {"remote_bytes_in_flight", kGauge, "Bytes of remote-tier puts and lookups queued now.",
       P{{"", "remote.bytes_in_flight"}}},
      // Faults.
      {"corrupt_blocks_detected_total", kCounter, "Stored blocks that failed validation (treated as misses).",
       P{{"", "corrupt_blocks_detected"}}},
      {"io_errors_total", kCounter, "Disk-tier reads and writes that failed.", P{{"", "io_errors"}}},
      {"gpu_allocs_after_init_total", kCounter, "Device allocations made after the context was created (0 by design).",
       P{{"", "gpu_allocs_after_init"}}},
      // Time.
      {"compute_seconds_total", kCounter, "Time in the backend's forward.", P{{"", "time.compute_seconds"}}},
      {"schedule_seconds_total", kCounter, "Time scheduling steps.", P{{"", "time.schedule_seconds"}}},
      {"copy_wait_seconds_total", kCounter, "Time the stepping thread waited for tier copies.",
       P{{"", "time.copy_wait_seconds"}}},
      {"disk_write_wait_seconds_total", kCounter, "Time host evictions waited for disk writes.",
       P{{"", "time.disk_write_wait_seconds"}}},
      {"disk_read_ahead_wait_seconds_total", kCounter, "Time uses waited for disk read-aheads.",
       P{{"", "time.disk_read_ahead_wait_seconds"}}},
  };
}

struct HistogramFamily {
  const char* name;  // after "kvtier_"
  const char* help;
};

constexpr HistogramFamily kHistograms[] = {
    {"time_to_first_token_seconds", "From a sequence's admission to its first token."},
    {"inter_token_latency_seconds", "Between two consecutive tokens of one sequence."},
    {"step_duration_seconds", "One step that ran a forward (schedule, forward, commit)."},
};

void AppendHeader(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help) {
  absl::StrAppend(out, "# HELP kvtier_", name, " ", help, "\n# TYPE kvtier_", name, " ", type, "\n");
}

void AppendHistogram(std::string* out, const HistogramFamily& family, const Json& h) {
  const Json* bounds = Find(h, "bounds");
  const Json* counts = Find(h, "cumulative_counts");
  const Json* count = Find(h, "count");
  const Json* sum = Find(h, "sum");
  if (bounds == nullptr || counts == nullptr || count == nullptr || sum == nullptr || !bounds->is_array() ||
      !counts->is_array() || bounds->size() != counts->size()) {
    return;
  }
  AppendHeader(out, family.name, "histogram", family.help);
  for (size_t i = 0; i < bounds->size(); ++i) {
    absl::StrAppend(out, "kvtier_", family.name, "_bucket{le=\"", Number((*bounds)[i]), "\"} ", Number((*counts)[i]),
                    "\n");
  }
  absl::StrAppend(out, "kvtier_", family.name, "_bucket{le=\"+Inf\"} ", Number(*count), "\n");
  absl::StrAppend(out, "kvtier_", family.name, "_sum ", Number(*sum), "\n");
  absl::StrAppend(out, "kvtier_", family.name, "_count ", Number(*count), "\n");
}

}  // namespace

std::string PrometheusText(const Json& stats) {
  std::string out;
  // What the numbers are about, as an info-style gauge (value 1, the facts in labels).
  const Json* backend = Find(stats, "backend");
  const Json* dtype = Find(stats, "kv_dtype");
  if (backend != nullptr && backend->is_string() && dtype != nullptr && dtype->is_string()) {
    AppendHeader(&out, "context_info", "gauge", "The context's backend and KV element type (value 1).");
    absl::StrAppend(&out, "kvtier_context_info{backend=\"", EscapeLabel(backend->get<std::string>()), "\",kv_dtype=\"",
                    EscapeLabel(dtype->get<std::string>()), "\"} 1\n");
  }
  for (const Family& family : Families()) {
    std::string lines;
    for (const auto& [labels, path] : family.samples) {
      const Json* value = Find(stats, path);
      if (value == nullptr || !(value->is_number() || value->is_boolean())) continue;
      absl::StrAppend(&lines, "kvtier_", family.name, labels.empty() ? "" : "{", labels, labels.empty() ? "" : "}", " ",
                      Number(*value), "\n");
    }
    if (lines.empty()) continue;
    AppendHeader(&out, family.name, family.type == Type::kCounter ? "counter" : "gauge", family.help);
    out += lines;
  }
  if (const Json* histograms = Find(stats, "histograms"); histograms != nullptr) {
    for (const HistogramFamily& family : kHistograms) {
      if (const Json* h = Find(*histograms, family.name); h != nullptr) AppendHistogram(&out, family, *h);
    }
  }
  return out;
}

}  // namespace kvtier
