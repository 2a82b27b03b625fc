// Histogram (common/histogram.h), the engine's latency histograms, and their Prometheus
// text (engine/prometheus_text.h). A real parser reads the text in
// tests/engine/prometheus_parse_test.py.
#include "common/histogram.h"

#include "engine/engine.h"
#include "engine/prometheus_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kv/tier_test_util.h"
#include "testing/test_model.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HistogramTest, BucketsAreCumulativeUpperBounds) {
  Histogram h{0.1, 1, 10};
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 50.0, 100.0}) h.Observe(v);
  EXPECT_THAT(h.CumulativeCounts(), ElementsAre(2, 4, 5));  // le=0.1 holds 0.1 itself
  EXPECT_EQ(h.count(), 7);
  EXPECT_DOUBLE_EQ(h.sum(), 156.65);
}

TEST(PrometheusTextTest, FamiliesFromStats) {
  nlohmann::json stats = {
      {"backend", "cpu"},
      {"kv_dtype", "F32"},
      {"steps", 3},
      {"generated_tokens", 12},
      {"sequences", {{"running", 1}, {"waiting", 2}, {"completed", 4}, {"cancelled", 1}, {"failed", 0}}},
      {"tiers", {{"gpu", {{"used_bytes", 100}, {"capacity_bytes", 1000}}}}},
      {"time", {{"compute_seconds", 0.25}}},
      {"histograms",
       {{"step_duration_seconds", {{"bounds", {0.5, 1.0}}, {"cumulative_counts", {1, 2}}, {"count", 3}, {"sum", 2.75}}}}},
  };
  const std::string text = PrometheusText(stats);
  EXPECT_THAT(text, HasSubstr("# TYPE kvtier_context_info gauge\nkvtier_context_info{backend=\"cpu\",kv_dtype=\"F32\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("# HELP kvtier_steps_total Steps that ran a forward.\n# TYPE kvtier_steps_total counter\n"
                              "kvtier_steps_total 3\n"));
  EXPECT_THAT(text, HasSubstr("kvtier_sequences_finished_total{reason=\"completed\"} 4\n"
                              "kvtier_sequences_finished_total{reason=\"cancelled\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("kvtier_sequences{state=\"waiting\"} 2\n"));
  // A tier the stats lack is left out, not reported as 0.
  EXPECT_THAT(text, HasSubstr("kvtier_tier_used_bytes{tier=\"gpu\"} 100\n# HELP"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("tier=\"host\"")));
  EXPECT_THAT(text, HasSubstr("kvtier_compute_seconds_total 0.25\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE kvtier_step_duration_seconds histogram\n"
                              "kvtier_step_duration_seconds_bucket{le=\"0.5\"} 1\n"
                              "kvtier_step_duration_seconds_bucket{le=\"1.0\"} 2\n"
                              "kvtier_step_duration_seconds_bucket{le=\"+Inf\"} 3\n"
                              "kvtier_step_duration_seconds_sum 2.75\n"
                              "kvtier_step_duration_seconds_count 3\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("preemptions")));  // absent from stats
}

// The disk tier's read speed: the recent figure load plans weigh, and the re-probes.
TEST(PrometheusTextTest, DiskReadSpeedFamilies) {
  const nlohmann::json stats = {
      {"disk_reads", {{"bytes", 10}, {"seconds", 0.5}, {"recent_bytes_per_second", 2000.0}, {"speed_probes", 3}}}};
  const std::string text = PrometheusText(stats);
  EXPECT_THAT(text, HasSubstr("# TYPE kvtier_disk_speed_probes_total counter\nkvtier_disk_speed_probes_total 3\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE kvtier_disk_read_bytes_per_second gauge\nkvtier_disk_read_bytes_per_second 2000"));
}

// The remote tier's put outcomes, the stale puts (layer groups' entries) among them.
TEST(PrometheusTextTest, RemotePutFamilies) {
  const nlohmann::json stats = {{"remote", {{"puts", 7}, {"puts_skipped", 2}, {"puts_stale", 5}, {"put_errors", 1}}}};
  const std::string text = PrometheusText(stats);
  EXPECT_THAT(text, HasSubstr("# TYPE kvtier_remote_puts_total counter\nkvtier_remote_puts_total 7\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE kvtier_remote_puts_stale_total counter\nkvtier_remote_puts_stale_total 5\n"));
  EXPECT_THAT(text, HasSubstr("kvtier_remote_puts_skipped_total 2\n"));
  EXPECT_THAT(text, HasSubstr("kvtier_remote_put_errors_total 1\n"));
}

TEST(PrometheusTextTest, LabelValuesAreEscaped) {
  nlohmann::json stats = {{"backend", "a\"b\\c\nd"}, {"kv_dtype", "F32"}};
  EXPECT_THAT(PrometheusText(stats), HasSubstr("backend=\"a\\\"b\\\\c\\nd\""));
}

TEST(LatencyHistogramsTest, EngineObservesFirstTokensGapsAndSteps) {
  auto engine = Engine::Create(testing::OpenCheckpoint(testing::TinyLlamaDir()), testing::TierOptions(64));
  ASSERT_TRUE(engine.ok()) << engine.status();
  testing::RunAll(**engine, {testing::Prompt(1, 5), testing::Prompt(2, 7), testing::Prompt(3, 9)}, 6);
  nlohmann::json h = (*engine)->Stats()["histograms"];
  EXPECT_EQ(h["time_to_first_token_seconds"]["count"], 3);
  EXPECT_EQ(h["inter_token_latency_seconds"]["count"], 15);
  EXPECT_EQ(h["step_duration_seconds"]["count"], (*engine)->Stats()["steps"]);
  const auto& ttft = h["time_to_first_token_seconds"];
  EXPECT_EQ(ttft["bounds"].size(), ttft["cumulative_counts"].size());
  EXPECT_LE(ttft["cumulative_counts"].back().get<int64_t>(), 3);
  EXPECT_GT(ttft["sum"].get<double>(), 0.0);
}

}  // namespace
}  // namespace kvtier
