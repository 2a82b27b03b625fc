// Engine's forward and what it does with the answer (engine.h): the sampling requests of a
// step, the backend call, and the commit of sampled tokens, forked completions and prompt
// scores.
#include <algorithm>
#include <chrono>
#include <vector>

#include "common/clock.h"
#include "common/status_macros.h"
#include "engine/engine.h"
#include "kv/grouped_block_tables.h"

namespace kvtier {
namespace {

// Whether a chunk of a sequence scoring its prompt holds positions still to be scored:
// position q scores token q + 1, for q + 1 < the prompt's length.
bool ChunkScores(const Sequence& seq, const ScheduledChunk& chunk) {
  if (!seq.scoring_prompt()) return false;
  const int64_t next = static_cast<int64_t>(seq.prompt_logprobs.size());  // the next q to score
  return chunk.start + chunk.length > next && chunk.start + 1 < seq.num_prompt_tokens;
}

}  // namespace

void Engine::BuildSampling(const Schedule& schedule, ForwardBatch* batch) {
  SamplingBatch& sb = sampling_batch_;
  sb.Clear();
  sampling_rows_.clear();
  chunk_sampling_.resize(schedule.chunks.size());
  bool any_adjustment = false;
  std::vector<AdjustmentRange> ranges;  // per logits row, filled as rows are laid out
  int32_t row = 0;
  for (size_t c = 0; c < schedule.chunks.size(); ++c) {
    const ScheduledChunk& chunk = schedule.chunks[c];
    Sequence* seq = chunk.sequence;
    SequenceChunk& forward = batch->chunks[c];
    ChunkSampling& cs = chunk_sampling_[c];
    cs = ChunkSampling{};
    cs.first_score = static_cast<int32_t>(sb.scores.size());
    cs.first_row = row;
    if (ChunkScores(*seq, chunk)) {
      forward.all_logits = true;
      for (int64_t i = 0; i < chunk.length; ++i) {
        const int64_t q = chunk.start + i;
        if (q < static_cast<int64_t>(seq->prompt_logprobs.size()) || q + 1 >= seq->num_prompt_tokens) continue;
        sb.scores.push_back(ScoreSpec{row + static_cast<int32_t>(i), seq->tokens[static_cast<size_t>(q + 1)],
                                      seq->params.prompt_logprobs});
      }
      cs.num_scores = static_cast<int32_t>(sb.scores.size()) - cs.first_score;
    }
    const int32_t rows = static_cast<int32_t>(forward.num_logit_rows());
    ranges.resize(ranges.size() + static_cast<size_t>(rows));
    row += rows;
    if (!chunk.need_logits) continue;
    // The sampled row: the sequence's own draw, then those of the completions forked here.
    // Each draw is taken now, so a sequence's tokens depend on its seed only, whichever
    // backend and batch it runs in.
    const int32_t sample_row = row - 1;
    cs.sample = static_cast<int32_t>(sb.samples.size());
    sb.samples.push_back({sample_row, DrawRowSampling(seq->params, seq->rng), seq->params.logprobs});
    // (Whether they are still wanted is decided at the commit, under the lock; a draw not
    // used then is given back.)
    if (seq->num_generated() == 0) {
      for (Sequence* child : seq->fork_children) {
        cs.forks.push_back(child);
        cs.fork_rng.push_back(child->rng);
        sb.samples.push_back({sample_row, DrawRowSampling(child->params, child->rng), child->params.logprobs});
      }
    }
    // The row's adjustments: its completions share them (the same request, no token of
    // their own yet).
    if (seq->history.active()) {
      const size_t begin = sb.adjustments.size();
      seq->history.AppendAdjustments(&sb.adjustments);
      ranges[static_cast<size_t>(sample_row)] = {static_cast<int32_t>(begin),
                                                 static_cast<int32_t>(sb.adjustments.size() - begin)};
      any_adjustment = any_adjustment || sb.adjustments.size() > begin;
    }
  }
  if (any_adjustment) sb.row_adjustments = std::move(ranges);
  // Plain draws (one per logits row, nothing else asked) take the backend's fast paths.
  use_chain_ = any_adjustment || !sb.scores.empty() || static_cast<int32_t>(sb.samples.size()) != row;
  for (const SampleSpec& s : sb.samples) use_chain_ = use_chain_ || s.top_logprobs >= 0;
  if (!use_chain_) {
    for (const SampleSpec& s : sb.samples) sampling_rows_.push_back(s.sampling);
  }
}

absl::Status Engine::Forward(const Schedule& schedule) {
  ForwardBatch batch;
  // With layer groups the backend reads every group's table of a sequence (a windowed one
  // from its first live block; a long sequence's full-attention ones through their
  // host-resident blocks first) instead of the one block table.
  const GroupedBlockTables* grouped = scheduler_.grouped_tables();
  std::vector<std::vector<GroupKvTable>> group_tables(grouped != nullptr ? schedule.chunks.size() : 0);
  for (size_t c = 0; c < schedule.chunks.size(); ++c) {
    const ScheduledChunk& chunk = schedule.chunks[c];
    batch.chunks.push_back(SequenceChunk{
        std::span<const int32_t>(chunk.sequence->tokens)
            .subspan(static_cast<size_t>(chunk.start), static_cast<size_t>(chunk.length)),
        chunk.start, chunk.blocks, chunk.need_logits, /*all_logits=*/false, chunk.host_kv});
    if (grouped == nullptr) continue;
    for (int64_t g = 0; g < grouped->groups().num_groups(); ++g) {
      const GroupBlockTable& table = grouped->Table(chunk.sequence->id, g);
      group_tables[c].push_back(GroupKvTable{table.first_block - table.host_blocks, table.blocks,
                                             scheduler_.GroupHostResident(chunk.sequence->id, g)});
    }
    batch.chunks.back().block_table = {};
    batch.chunks.back().group_tables = group_tables[c];
  }
  // The backend picks the tokens itself (on the GPU only ids, and the log-probabilities
  // asked for, cross the bus).
  BuildSampling(schedule, &batch);
  // Constrained rows' masks are computed on the mask thread while the backend runs the
  // forward; it waits for them only to pick the tokens. Completions forked at a row share
  // its mask: they start where their parent stands in the grammar.
  grammar_masks_->BeginStep(batch.num_logit_rows());
  for (size_t c = 0; c < schedule.chunks.size(); ++c) {
    Sequence* seq = schedule.chunks[c].sequence;
    if (!schedule.chunks[c].need_logits || seq->matcher == nullptr) continue;
    const int32_t row = sampling_batch_.samples[static_cast<size_t>(chunk_sampling_[c].sample)].logits_row;
    RETURN_IF_ERROR(grammar_masks_->AddRow(static_cast<size_t>(row), seq->matcher.get()));
  }
  batch.masks = grammar_masks_->Start();
  const auto compute_start = std::chrono::steady_clock::now();
  absl::Status forward;
  if (use_chain_) {
    forward = backend_->ForwardAndSample(batch, sampling_batch_, &sampling_result_);
  } else {
    const bool all_greedy = std::all_of(sampling_rows_.begin(), sampling_rows_.end(),
                                        [](const RowSampling& r) { return r.greedy(); });
    forward = all_greedy ? backend_->ForwardGreedy(batch, &step_tokens_)
                         : backend_->ForwardSampled(batch, sampling_rows_, &step_tokens_);
  }
  grammar_masks_->Finish();
  last_compute_seconds_ = SecondsSince(compute_start);
  return forward;
}

void Engine::CommitLocked(const Schedule& schedule, std::vector<StepEvent>* events) {
  ++counters_.steps;
  ++counters_.forwards;
  scheduler_.Commit(schedule);
  int64_t step_tokens = 0;
  for (const ScheduledChunk& chunk : schedule.chunks) {
    step_tokens += chunk.length;
    if (chunk.length > 1 || chunk.start < chunk.sequence->num_prompt_tokens) {
      counters_.prompt_tokens_computed += chunk.length;
    }
  }
  CommitSamplesLocked(schedule, std::chrono::steady_clock::now(), events);  // every token of the step is delivered now
  policy_.ObserveCompute(step_tokens, last_compute_seconds_);
  grammar_mask_counters_ = grammar_masks_->counters();
  scheduler_.EndStep();
}

TokenLogprobs Engine::ToTokenLogprobs(const LogprobEntry& entry) const {
  TokenLogprobs out;
  out.token = entry.token;
  out.logprob = entry.logprob;
  const auto top = sampling_result_.top.begin() + entry.top_begin;
  out.top.assign(top, top + entry.top_count);
  return out;
}

void Engine::CommitScoresLocked(Sequence* seq, const ScheduledChunk& chunk, int32_t first_row,
                                int32_t first_score, int32_t num_scores) {
  for (int32_t i = 0; i < num_scores; ++i) {
    const ScoreSpec& spec = sampling_batch_.scores[static_cast<size_t>(first_score + i)];
    // The row of position q scores token q + 1; entries are kept in order, each once.
    const int64_t q = chunk.start + (spec.logits_row - first_row);
    if (q != static_cast<int64_t>(seq->prompt_logprobs.size())) continue;
    seq->prompt_logprobs.push_back(ToTokenLogprobs(sampling_result_.scores[static_cast<size_t>(first_score + i)]));
    ++counters_.scored_tokens;
  }
}

void Engine::CommitSamplesLocked(const Schedule& schedule, std::chrono::steady_clock::time_point now,
                                 std::vector<StepEvent>* events) {
  size_t logits_row = 0;  // the plain path: one row per need_logits chunk
  for (size_t c = 0; c < schedule.chunks.size(); ++c) {
    const ScheduledChunk& chunk = schedule.chunks[c];
    Sequence* seq = chunk.sequence;
    const ChunkSampling& cs = chunk_sampling_[c];
    if (cs.num_scores > 0 && !seq->cancel_requested) CommitScoresLocked(seq, chunk, cs.first_row, cs.first_score, cs.num_scores);
    if (!chunk.need_logits) continue;
    const size_t row = logits_row++;
    if (seq->cancel_requested) {  // finished at the start of the next step
      for (size_t i = 0; i < cs.forks.size(); ++i) cs.forks[i]->rng = cs.fork_rng[i];
      continue;
    }
    auto token_of = [&](int32_t sample) {
      return use_chain_ ? sampling_result_.tokens[static_cast<size_t>(sample)] : step_tokens_[row];
    };
    auto logprobs_of = [&](int32_t sample) -> const LogprobEntry* {
      if (!use_chain_ || sampling_batch_.samples[static_cast<size_t>(sample)].top_logprobs < 0) return nullptr;
      return &sampling_result_.sample_logprobs[static_cast<size_t>(sample)];
    };
    // Completions forked here start on the blocks the prompt left before this sequence's
    // own token can end it (and free them).
    std::vector<Sequence*> forked;
    for (size_t i = 0; i < cs.forks.size(); ++i) {
      Sequence* child = cs.forks[i];
      if (child->finished() || child->cancel_requested) {
        child->rng = cs.fork_rng[i];
        continue;
      }
      std::erase(seq->fork_children, child);
      child->fork_parent = nullptr;
      scheduler_.Fork(seq, child);
      forked.push_back(child);
    }
    // A constrained sequence's token goes through its grammar first (which may end it).
    const size_t sample_row = static_cast<size_t>(sampling_batch_.samples[static_cast<size_t>(cs.sample)].logits_row);
    auto commit = [&](Sequence* s, int32_t sample) {
      const int32_t token = token_of(sample);
      if (s->matcher != nullptr && !AcceptGrammarTokenLocked(s, sample_row, token, events)) return;
      CommitTokenLocked(s, token, logprobs_of(sample), now, events);
    };
    commit(seq, cs.sample);
    for (size_t i = 0; i < cs.forks.size(); ++i) {
      Sequence* child = cs.forks[i];
      if (std::find(forked.begin(), forked.end(), child) == forked.end()) continue;
      commit(child, cs.sample + 1 + static_cast<int32_t>(i));
    }
  }
}

}  // namespace kvtier
