#include "ingest/csv_reader.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ingest/test_util.h"

namespace trainscope::ingest {
namespace {

TEST(Csv, LightningSparseColumnsUseStepAndKeepEpoch) {
  RunData run;
  ImportStats s;
  const std::string text =
      "epoch,step,train_loss_step,val_loss\n"
      "0,49,7.6,\n"
      "0,99,nan,\n"
      "0,99,,5.5\n";
  ASSERT_TRUE(ReadCsvBuffer(text, "metrics.csv", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("train_loss_step")->steps, (std::vector<int64_t>{49, 99}));
  EXPECT_TRUE(std::isnan(run.FindScalar("train_loss_step")->values[1]));
  EXPECT_EQ(run.FindScalar("val_loss")->steps, (std::vector<int64_t>{99}));
  EXPECT_EQ(run.FindScalar("epoch")->values.size(), 3u);
  EXPECT_EQ(run.FindScalar("step"), nullptr);
  EXPECT_EQ(s.scalars, 6u);  // epoch x3, train_loss_step x2, val_loss x1
}

TEST(Csv, YoloPaddedHeadersAndEpochAsStep) {
  RunData run;
  ImportStats s;
  const std::string text =
      "                  epoch,         train/box_loss,   metrics/mAP50(B)\n"
      "                      0,                 1.6878,            0.15826\n"
      "                      1,                  1.267,            0.25946\n";
  ASSERT_TRUE(ReadCsvBuffer(text, "results.csv", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("train/box_loss")->steps, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(run.FindScalar("metrics/mAP50(B)")->values[1], 0.25946);
  EXPECT_EQ(run.FindScalar("epoch"), nullptr);
}

TEST(Csv, RaggedRowsAreSkippedWithTheirLineAndTheRestIsKept) {
  RunData run;
  ImportStats s;
  const std::string text = "step,loss\n1,0.5\n2,0.4,extra\n3\n4,0.3\n\"5\",\"0.2\"\n";
  ASSERT_TRUE(ReadCsvBuffer(text, "r.csv", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("loss")->steps, (std::vector<int64_t>{1, 4, 5}));
  EXPECT_EQ(s.damaged, 2u);
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_NE(s.warnings[0].find("r.csv: line 3: expected 2 cells"), std::string::npos) << s.warnings[0];
  EXPECT_NE(s.warnings[1].find("line 4"), std::string::npos);
}

TEST(Csv, NoStepColumnUsesTheRowIndex) {
  RunData run;
  ImportStats s;
  ASSERT_TRUE(ReadCsvBuffer("loss;acc\n1;0.1\n2;0.2\n", "k.csv", &run, &s).ok());
  EXPECT_EQ(run.FindScalar("acc")->steps, (std::vector<int64_t>{0, 1}));
}

TEST(Csv, EmptyFileIsAnError) {
  RunData run;
  ImportStats s;
  Status st = ReadCsvBuffer("", "e.csv", &run, &s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("e.csv: empty file"), std::string::npos) << st.message();
}

TEST(Csv, RealFilesFromOtherTools) {
  const std::string dir = testing::TestDataDir() + "/csv_metrics/";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no test data";
  // Counted independently with Python's csv module: non-empty cells outside the step column.
  struct Case {
    const char* file;
    uint64_t rows, scalars, tags;
  };
  const Case cases[] = {
      {"lightning_pinn_diverge_v17.csv", 951, 5706, 6},  {"lightning_pinn_spiky_v0.csv", 736, 4416, 6},
      {"lightning_pinn_stuck_huge_v13.csv", 535, 3210, 6}, {"lightning_slm_lm_v0.csv", 2834, 8532, 10},
      {"resnet18_img100_epoch_metrics.csv", 93, 744, 8}, {"yolo_wheat_weed_results.csv", 102, 1428, 14},
      {"yolov8_fire_smoke_results.csv", 25, 325, 13},
  };
  for (const Case& c : cases) {
    RunData run;
    ImportStats s;
    ASSERT_TRUE(ReadCsv(dir + c.file, &run, &s).ok()) << c.file;
    EXPECT_EQ(s.records, c.rows) << c.file;
    EXPECT_EQ(s.scalars, c.scalars) << c.file;
    EXPECT_EQ(run.scalars.size(), c.tags) << c.file;
    EXPECT_EQ(s.damaged, 0u) << c.file;
  }
  RunData diverge;
  ImportStats s;
  ASSERT_TRUE(ReadCsv(dir + "lightning_pinn_diverge_v17.csv", &diverge, &s).ok());
  double max = 0;
  for (double v : diverge.FindScalar("mean_loss")->values) max = std::max(max, v);
  EXPECT_NEAR(max, 1.48e14, 0.01e14);
}

}  // namespace
}  // namespace trainscope::ingest
