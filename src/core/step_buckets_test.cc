#include "core/step_buckets.h"

#include <gtest/gtest.h>

namespace trainscope {
namespace {

// 300 steps in 200 columns: the report's float division (per = 1.5) put step 3 in column
// 2 while the dashboard's integer buckets (width 2) put it in bucket 1. Both use
// StepBuckets now (report_command.cc's heatmap, api.cc's layers/vectors/spans).
TEST(StepBuckets, ReportAndDashboardCaseWhereFloatAndIntegerDiffered) {
  const StepBuckets b(0, 299, 200);
  EXPECT_EQ(b.step_width, 2u);
  EXPECT_EQ(b.count, 150u);
  EXPECT_EQ(b.Of(3), 1u);
  EXPECT_EQ(static_cast<size_t>(3 / 1.5), 2u);  // what the report's float division gave
  EXPECT_EQ(b.Of(299), 149u);
  EXPECT_EQ(b.Begin(1), 2);
}

TEST(StepBuckets, FewStepsOneEachAndWholeLine) {
  const StepBuckets few(10, 14, 200);
  EXPECT_EQ(few.count, 5u);
  EXPECT_EQ(few.Of(12), 2u);
  const StepBuckets exact(0, 399, 200);
  EXPECT_EQ(exact.step_width, 2u);
  EXPECT_EQ(exact.count, 200u);
  const StepBuckets line(INT64_MIN, INT64_MAX, 100);
  EXPECT_LE(line.count, 100u);
  EXPECT_EQ(line.Of(INT64_MAX), line.count - 1);
}

}  // namespace
}  // namespace trainscope
