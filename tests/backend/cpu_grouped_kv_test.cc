// The CPU backend over a grouped KV layout (backend/kv_grouping.h, docs/ARCHITECTURE.md
// "Layer groups"): tiny Gemma 2 and Gemma 3 random checkpoints, two sequences with prompts
// longer than the window prefilled in chunks and decoded greedily in one batch, their
// windowed blocks dropped and handed out again as they advance, give bit for bit the
// logits of the one-group layout; so do a swap of only the blocks kept (out to host
// memory, into other blocks), a recompute into fresh blocks, and reading a full-attention
// group's oldest blocks from host memory in place. Malformed group tables and
// layouts the backend cannot read are refused.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"
#include "kv/grouped_block_tables.h"
#include "kv/kv_layer_groups.h"
#include "model/checkpoint.h"
#include "model/random_checkpoint.h"

namespace kvtier {
namespace {

constexpr int64_t kBlockTokens = 4;
constexpr int64_t kChunk = 7;

struct Family {
  std::string name;
  RandomCheckpointSpec spec;
  DType kv = DType::kF32;
};

std::vector<Family> Families() {
  RandomCheckpointSpec base;
  base.hidden = 64;
  base.heads = 4;
  base.kv_heads = 2;
  base.head_dim = 16;
  base.intermediate = 96;
  base.vocab = 256;
  base.max_positions = 256;
  base.tie_embeddings = true;
  RandomCheckpointSpec gemma2 = base;  // local and global layers alternate: two groups of two
  gemma2.arch = Architecture::kGemma2;
  gemma2.layers = 4;
  gemma2.sliding_window = 5;
  gemma2.query_pre_attn_scalar = 24;
  gemma2.attn_logit_softcap = 2.0;
  gemma2.final_logit_softcap = 4.0;
  RandomCheckpointSpec gemma3 = base;  // five local layers, then a global one: six groups
  gemma3.arch = Architecture::kGemma3;
  gemma3.layers = 6;
  gemma3.sliding_window_pattern = 6;
  gemma3.sliding_window = 6;
  gemma3.rope_theta = 1000000.0;
  gemma3.rope_local_theta = 10.0;
  return {{"gemma2", gemma2}, {"gemma3", gemma3}, {"gemma3_fp8kv", gemma3, DType::kF8E4M3}};
}

const Checkpoint& GetCheckpoint(const Family& f) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Checkpoint>>();
  const std::string arch = f.spec.arch == Architecture::kGemma2 ? "gemma2" : "gemma3";
  auto it = cache->find(arch);
  if (it != cache->end()) return *it->second;
  const std::string dir = absl::StrCat(testing::TempDir(), "/kvtier_cpu_grouped_kv_", getpid(), "_", arch);
  const absl::Status written = WriteRandomCheckpoint(f.spec, dir);
  EXPECT_TRUE(written.ok()) << written;
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return *cache->emplace(arch, std::move(*checkpoint)).first->second;
}

KvLayerGroups Groups(const ModelConfig& config, bool grouped) {
  std::vector<std::optional<int64_t>> windows;
  for (int64_t l = 0; l < config.num_layers; ++l) windows.push_back(config.LayerWindow(l));
  absl::StatusOr<KvLayerGroups> groups = KvLayerGroups::Create(windows, kBlockTokens, grouped);
  EXPECT_TRUE(groups.ok()) << groups.status();
  return *std::move(groups);
}

std::unique_ptr<CpuBackend> MakeBackend(const Family& f, const KvGrouping& grouping, int64_t num_blocks) {
  BackendOptions options;
  options.num_threads = 2;
  options.block_tokens = kBlockTokens;
  options.kv_dtype = f.kv == DType::kF8E4M3 ? StorageDType::kFp8 : StorageDType::kAuto;
  options.kv_grouping = grouping;
  absl::StatusOr<std::unique_ptr<CpuBackend>> backend = CpuBackend::Create(GetCheckpoint(f), options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  EXPECT_TRUE((*backend)->AllocateKvPool(num_blocks).ok());
  return std::move(*backend);
}

// One backend and its block tables: the one-group layout (every layer in a block, fixed
// tables) or the grouped one (GroupedBlockTables over a pool of just the peak need).
struct Runner {
  std::unique_ptr<CpuBackend> backend;
  std::optional<GroupedBlockTables> tables;
  std::vector<std::vector<int32_t>> plain_tables;  // by sequence, one-group layout
  // (sequence, group) -> the bytes of its host-resident blocks (GroupedBlockTables::MoveFrontToHost).
  std::map<std::pair<SequenceId, int64_t>, std::vector<const void*>> host;
  std::vector<std::vector<uint8_t>> host_bytes;

  // Runs one step: chunk s feeds tokens[s] at start[s]. Returns the logits.
  std::vector<float> Step(const std::vector<std::vector<int32_t>>& tokens, const std::vector<int64_t>& start) {
    ForwardBatch batch;
    std::vector<std::vector<GroupKvTable>> group_tables(tokens.size());
    for (size_t s = 0; s < tokens.size(); ++s) {
      const int64_t end = start[s] + static_cast<int64_t>(tokens[s].size());
      SequenceChunk chunk{.tokens = tokens[s], .start_position = start[s], .block_table = {}, .need_logits = true};
      if (tables) {
        EXPECT_TRUE(tables->Reserve(static_cast<SequenceId>(s), end).ok());
        for (int64_t g = 0; g < tables->groups().num_groups(); ++g) {
          const GroupBlockTable& t = tables->Table(static_cast<SequenceId>(s), g);
          group_tables[s].push_back({t.first_block - t.host_blocks, t.blocks,
                                     HostResidentKv{0, host[{static_cast<SequenceId>(s), g}]}});
        }
        chunk.group_tables = group_tables[s];
      } else {
        chunk.block_table = plain_tables[s];
      }
      batch.chunks.push_back(chunk);
    }
    std::vector<float> logits;
    const absl::Status st = backend->Forward(batch, &logits);
    EXPECT_TRUE(st.ok()) << st;
    if (tables) {
      for (size_t s = 0; s < tokens.size(); ++s) {
        tables->OnComputed(static_cast<SequenceId>(s), start[s] + static_cast<int64_t>(tokens[s].size()));
      }
      EXPECT_TRUE(tables->VerifyIntegrity().ok()) << tables->VerifyIntegrity();
    }
    return logits;
  }
};

std::vector<int32_t> Prompt(int64_t n, int32_t salt) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + salt * 11 + 3) % 250 + 3);
  return p;
}

int32_t Argmax(const float* row, int64_t n) { return static_cast<int32_t>(std::max_element(row, row + n) - row); }

// What may happen to sequence 1 between its prefill and its decode.
enum class Pressure { kNone, kSwap, kRecompute, kHostResident };

// Prefills both prompts (chunk by chunk, together), applies `pressure` to sequence 1 in the
// grouped runner, then decodes both greedily, comparing every logits row bit for bit.
void ExpectGroupedMatchesOneGroup(const Family& f, Pressure pressure) {
  const ModelConfig& config = GetCheckpoint(f).config();
  const std::vector<std::vector<int32_t>> prompts = {Prompt(41, 1), Prompt(33, 2)};
  constexpr int64_t kDecode = 12;
  const int64_t longest = 41 + kDecode;
  KvLayerGroups groups = Groups(config, true);
  ASSERT_GT(groups.num_groups(), 1);
  const KvGrouping grouping = BackendGrouping(groups);
  // Two sequences at their peak (a decode step's need is below a chunk's).
  const int64_t grouped_blocks = 2 * groups.SequencePeakBlocks(longest, kChunk);
  const int64_t all_blocks = groups.BlocksForTokens(longest);
  ASSERT_LT(grouped_blocks, 2 * groups.num_groups() * all_blocks);

  Runner plain{MakeBackend(f, KvGrouping{}, 2 * all_blocks), std::nullopt, {}, {}, {}};
  for (int32_t s = 0; s < 2; ++s) {
    std::vector<int32_t> t(static_cast<size_t>(all_blocks));
    for (int64_t j = 0; j < all_blocks; ++j) t[static_cast<size_t>(j)] = static_cast<int32_t>(2 * all_blocks - 1 - (s * all_blocks + j));
    plain.plain_tables.push_back(t);
  }
  absl::StatusOr<GroupedBlockTables> tables = GroupedBlockTables::Create(groups, grouped_blocks);
  ASSERT_TRUE(tables.ok());
  Runner grouped{MakeBackend(f, grouping, grouped_blocks), std::move(*tables), {}, {}, {}};

  const int64_t vocab = config.vocab_size;
  std::vector<int64_t> done = {0, 0};
  auto compare = [&](const std::vector<std::vector<int32_t>>& tokens, const std::vector<int64_t>& start,
                     const std::string& what) {
    const std::vector<float> want = plain.Step(tokens, start);
    const std::vector<float> got = grouped.Step(tokens, start);
    EXPECT_EQ(want.size(), got.size());
    EXPECT_EQ(std::memcmp(want.data(), got.data(), std::min(want.size(), got.size()) * sizeof(float)), 0) << what;
    return want;
  };
  while (done[0] < 41 || done[1] < 33) {
    std::vector<std::vector<int32_t>> tokens;
    std::vector<int64_t> start;
    for (size_t s = 0; s < 2; ++s) {
      const int64_t n = std::min<int64_t>(kChunk, static_cast<int64_t>(prompts[s].size()) - done[s]);
      if (n <= 0) continue;  // a sequence done with its prompt waits for the other
      tokens.emplace_back(prompts[s].begin() + done[s], prompts[s].begin() + done[s] + n);
      start.push_back(done[s]);
    }
    if (tokens.size() < 2) break;  // sequence 1 is done; the rest of 0 goes on alone below
    compare(tokens, start, absl::StrCat("prefill at ", done[0], " and ", done[1]));
    done[0] += static_cast<int64_t>(tokens[0].size());
    done[1] += static_cast<int64_t>(tokens[1].size());
  }
  // The rest of sequence 0's prompt (sequence 1 holds what it has).
  for (; done[0] < 41; done[0] += kChunk) {
    const int64_t n = std::min<int64_t>(kChunk, 41 - done[0]);
    std::vector<int32_t> chunk(prompts[0].begin() + done[0], prompts[0].begin() + done[0] + n);
    // Step numbers its chunks as sequences: sequence 0 alone is chunk 0.
    const std::vector<float> want = plain.Step({chunk}, {done[0]});
    const std::vector<float> got = grouped.Step({chunk}, {done[0]});
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << "prefill 0 at " << done[0];
  }

  GroupedBlockTables& gt = *grouped.tables;
  if (pressure == Pressure::kSwap) {
    // Out: only the blocks sequence 1 keeps, to host memory; in: into blocks allocated after
    // the release (others first, so the ids differ).
    std::vector<std::vector<float>> saved;
    std::vector<BlockCopy> out;
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      for (int32_t b : gt.Table(1, g).blocks) {
        saved.emplace_back(grouped.backend->kv_layout().BlockBytes() / sizeof(float));
        out.push_back({b, saved.back().data()});
      }
    }
    for (size_t i = 0; i < out.size(); ++i) out[i].host = saved[i].data();
    ASSERT_TRUE(grouped.backend->CopyBlocksToHost(out).ok());
    const GroupedBlockStats before = gt.Stats();
    EXPECT_LT(static_cast<int64_t>(out.size()), groups.num_groups() * groups.BlocksForTokens(33));
    gt.Release(1);
    ASSERT_TRUE(gt.Reserve(2, 1).ok());  // takes the front of the free queue
    ASSERT_TRUE(gt.Restore(1, 33).ok());
    gt.Release(2);
    std::vector<BlockCopy> in;
    size_t i = 0;
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      for (int32_t b : gt.Table(1, g).blocks) in.push_back({b, saved[i++].data()});
    }
    ASSERT_EQ(i, saved.size());
    ASSERT_TRUE(grouped.backend->CopyBlocksFromHost(in).ok());
    EXPECT_EQ(gt.Stats().used_blocks, before.used_blocks);
  } else if (pressure == Pressure::kRecompute) {
    // Dropped: recomputed from position 0 into fresh blocks, in chunks, alone.
    gt.Release(1);
    ASSERT_TRUE(gt.Reserve(3, 2 * kBlockTokens).ok());  // shift the ids it gets
    for (int64_t p = 0; p < 33; p += kChunk) {
      const int64_t n = std::min<int64_t>(kChunk, 33 - p);
      const std::vector<int32_t> chunk(prompts[1].begin() + p, prompts[1].begin() + p + n);
      ForwardBatch batch;
      ASSERT_TRUE(gt.Reserve(1, p + n).ok());
      std::vector<GroupKvTable> t;
      for (int64_t g = 0; g < groups.num_groups(); ++g) t.push_back({gt.Table(1, g).first_block, gt.Table(1, g).blocks});
      batch.chunks.push_back({.tokens = chunk, .start_position = p, .block_table = {}, .need_logits = true});
      batch.chunks.back().group_tables = t;
      std::vector<float> logits;
      ASSERT_TRUE(grouped.backend->Forward(batch, &logits).ok());
      gt.OnComputed(1, p + n);
    }
    gt.Release(3);
  } else if (pressure == Pressure::kHostResident) {
    // Each full-attention group's full computed blocks go to host memory and are read
    // there; their device blocks go back, and the decodes take them again.
    const size_t block_bytes = grouped.backend->kv_layout().BlockBytes();
    int64_t moved = 0;
    for (int64_t g = 0; g < groups.num_groups(); ++g) {
      if (groups.group(g).window.has_value()) {
        EXPECT_FALSE(gt.MoveFrontToHost(1, g).ok()) << "a windowed group keeps its window on the device";
        continue;
      }
      while (gt.Table(1, g).first_block < 33 / kBlockTokens) {
        std::vector<uint8_t>& bytes = grouped.host_bytes.emplace_back(block_bytes);
        const BlockCopy copy{gt.Table(1, g).blocks.front(), bytes.data()};
        ASSERT_TRUE(grouped.backend->CopyBlocksToHost(std::span<const BlockCopy>(&copy, 1)).ok());
        ASSERT_TRUE(gt.MoveFrontToHost(1, g).ok());
        grouped.host[{1, g}].push_back(bytes.data());
        ++moved;
      }
      EXPECT_EQ(gt.Table(1, g).host_blocks, 33 / kBlockTokens);
      EXPECT_FALSE(gt.MoveFrontToHost(1, g).ok()) << "the partial block stays on the device";
    }
    EXPECT_GT(moved, 0);
    EXPECT_TRUE(gt.VerifyIntegrity().ok()) << gt.VerifyIntegrity();
  }

  // Decode both, greedily, from the plain runner's tokens.
  std::vector<int64_t> pos = {41, 33};
  std::vector<std::vector<int32_t>> tokens = {{7}, {9}};
  for (int64_t step = 0; step < kDecode; ++step) {
    const std::vector<float> logits = compare(tokens, pos, absl::StrCat("decode step ", step));
    for (size_t s = 0; s < 2; ++s) {
      tokens[s] = {Argmax(logits.data() + static_cast<int64_t>(s) * vocab, vocab)};
      ++pos[s];
    }
  }
  const GroupedBlockStats stats = gt.Stats();
  EXPECT_GT(stats.blocks_dropped_for_window, 0);
  EXPECT_LT(stats.used_blocks, stats.full_attention_blocks);
}

class CpuGroupedKvTest : public testing::TestWithParam<Family> {};

TEST_P(CpuGroupedKvTest, LogitsMatchOneGroupBitForBit) { ExpectGroupedMatchesOneGroup(GetParam(), Pressure::kNone); }
TEST_P(CpuGroupedKvTest, SwappingOnlyTheKeptBlocksChangesNoBit) {
  ExpectGroupedMatchesOneGroup(GetParam(), Pressure::kSwap);
}
TEST_P(CpuGroupedKvTest, RecomputingIntoFreshBlocksChangesNoBit) {
  ExpectGroupedMatchesOneGroup(GetParam(), Pressure::kRecompute);
}
TEST_P(CpuGroupedKvTest, ReadingFullAttentionBlocksFromTheHostChangesNoBit) {
  ExpectGroupedMatchesOneGroup(GetParam(), Pressure::kHostResident);
}

INSTANTIATE_TEST_SUITE_P(Families, CpuGroupedKvTest, testing::ValuesIn(Families()),
                         [](const testing::TestParamInfo<Family>& info) { return info.param.name; });

TEST(CpuGroupedKvValidationTest, RefusesMalformedTablesAndLayoutsItCannotRead) {
  const Family f = Families()[1];
  const ModelConfig& config = GetCheckpoint(f).config();
  KvLayerGroups groups = Groups(config, true);
  const KvGrouping grouping = BackendGrouping(groups);
  std::unique_ptr<CpuBackend> backend = MakeBackend(f, grouping, 64);
  EXPECT_EQ(backend->kv_layout().num_layers, 1);
  const std::vector<int32_t> tokens = {5, 6, 7};
  std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  std::vector<GroupKvTable> t;
  for (int64_t g = 0; g < groups.num_groups(); ++g) t.push_back({0, std::span<const int32_t>(ids).subspan(2 * g, 2)});
  auto run = [&](int64_t start) {
    ForwardBatch batch;
    batch.chunks.push_back({.tokens = tokens, .start_position = start, .block_table = {}, .need_logits = true});
    batch.chunks.back().group_tables = t;
    std::vector<float> logits;
    return backend->Forward(batch, &logits);
  };
  EXPECT_TRUE(run(0).ok());
  EXPECT_EQ(run(6).code(), absl::StatusCode::kInvalidArgument);  // positions 6..8 need block 2
  t[1].first_block = 1;  // a window of 6 at position 5 reads from position 0, in block 0
  absl::Status st = run(5);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  t[1].first_block = 0;
  t[2].blocks = std::span<const int32_t>(ids).subspan(0, 2);  // group 0's blocks again
  st = run(0);
  EXPECT_NE(st.message().find("written twice"), std::string_view::npos) << st;
  t.pop_back();
  EXPECT_EQ(run(0).code(), absl::StatusCode::kInvalidArgument);

  // Tables given to a backend without groups.
  std::unique_ptr<CpuBackend> plain = MakeBackend(f, KvGrouping{}, 64);
  ForwardBatch batch;
  batch.chunks.push_back({.tokens = tokens, .start_position = 0, .block_table = ids, .need_logits = true});
  batch.chunks.back().group_tables = t;
  std::vector<float> logits;
  EXPECT_EQ(plain->Forward(batch, &logits).code(), absl::StatusCode::kInvalidArgument);

  // Layouts it refuses: the sharded plan, and a grouping whose windows are not the model's.
  BackendOptions options;
  options.block_tokens = kBlockTokens;
  options.kv_grouping = grouping;
  options.sharded_reduction = true;
  EXPECT_EQ(CpuBackend::Create(GetCheckpoint(f), options).status().code(), absl::StatusCode::kUnimplemented);
  options.sharded_reduction = false;
  options.kv_grouping.group_window[0] = 3;
  EXPECT_EQ(CpuBackend::Create(GetCheckpoint(f), options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
