#include <gtest/gtest.h>

#include <cmath>

#include "read/layer_matrix.h"
#include "read/phase_times.h"
#include "read/run_summary.h"

namespace trainscope::read {
namespace {

TEST(LayerMatrixTest, KeepsTheLargestValuePerBucketAndMarksNonFiniteBuckets) {
  // Steps 0..9 in 5 buckets of 2: a spike at step 3 is its bucket's value; a NaN tensor at
  // step 6 marks its bucket even beside a finite point; layer b has no point in bucket 4.
  std::vector<LayerPoints> layers = {
      {"a", {{0, 1, false}, {1, 2, false}, {2, 1, false}, {3, 50, false}, {4, 1, false}, {5, 1, false},
             {6, 0, true}, {7, 3, false}, {8, 1, false}, {9, 1, false}}},
      {"b", {{0, 5, false}, {7, 4, false}}},
  };
  const LayerMatrix m = BucketLayers(layers, 5);
  EXPECT_EQ(m.layers, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.steps, (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(m.values[0], (std::vector<double>{2, 50, 1, 3, 1}));
  EXPECT_EQ(m.nonfinite[0], (std::vector<char>{0, 0, 0, 1, 0}));
  EXPECT_EQ(m.values[1][0], 5);
  EXPECT_TRUE(std::isnan(m.values[1][1]));
  EXPECT_EQ(m.values[1][3], 4);
  EXPECT_TRUE(BucketLayers({}, 5).steps.empty());
}

TEST(PhaseTimesTest, PhasesAddUpToTheStepMeasuredStartToStart) {
  // Two steps 1 s apart whose phases take 0.6 s: "other" is the 0.4 s left; the last step
  // has no successor and lasts its phases.
  std::vector<Span> spans = {{0, "forward", 100.0, 0.2}, {0, "backward", 100.2, 0.4},
                             {1, "forward", 101.0, 0.2}, {1, "backward", 101.2, 0.4}};
  const PhaseTimes t = ComputePhaseTimes(spans, 10);
  EXPECT_EQ(t.phases, (std::vector<std::string>{"forward", "backward", "other"}));
  EXPECT_EQ(t.steps, (std::vector<int64_t>{0, 1}));
  EXPECT_DOUBLE_EQ(t.step_time[0], 1.0);
  EXPECT_DOUBLE_EQ(t.step_time[1], 0.6);
  EXPECT_NEAR(t.mean[2][0], 0.4, 1e-12);
  EXPECT_NEAR(t.mean[2][1], 0.0, 1e-12);
  EXPECT_EQ(t.starts, (std::vector<double>{100.0, 101.0}));
  EXPECT_EQ(t.spans, 4u);
}

TEST(RunSummaryTest, HealthIsTheWorstFindingAboveInfoAndACrashIsCritical) {
  Finding warning, info;
  warning.severity = Severity::kWarning;
  info.severity = Severity::kInfo;
  EXPECT_STREQ(RunHealth({}, "finished"), "ok");
  EXPECT_STREQ(RunHealth({info}, "finished"), "ok");
  EXPECT_STREQ(RunHealth({info, warning}, "finished"), "warning");
  EXPECT_STREQ(RunHealth({}, "crashed"), "critical");
  std::vector<SeriesInfo> series(4);
  series[0].tag = "sys/cpu_percent", series[1].tag = "grad/global_norm", series[2].tag = "train/loss", series[3].tag = "val/loss";
  for (auto& s : series) s.kind = SeriesKind::kScalar, s.points = 1;
  std::vector<std::string> tags;
  for (const SeriesInfo* s : FinalValueSeries(series, 2)) tags.push_back(s->tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"train/loss", "val/loss"}));  // the user's first; never sys/
}

}  // namespace
}  // namespace trainscope::read
