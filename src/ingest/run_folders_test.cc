// The W&B and MLflow readers on the real run folders of ../shared/testdata/external-2
// (counts from its SOURCES.md), and the small parsers they use on inputs written here.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/run_data.h"
#include "ingest/detect.h"
#include "ingest/mlflow_reader.h"
#include "ingest/test_util.h"
#include "ingest/wandb_reader.h"
#include "ingest/yaml_loader.h"

namespace trainscope::ingest {
namespace {

std::string Second(const std::string& rel) { return testing::TestDataDir() + "/../external-2/" + rel; }

bool Have(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

TEST(WandbDatastore, RealFileHistorySummaryAndExit) {
  const std::string path = Second("wandb/nanogpt_shakespeare_char_overfit_kt2awly2/run-kt2awly2.wandb");
  if (!Have(path)) GTEST_SKIP() << "no " << path;
  RunData run;
  ImportStats stats;
  ASSERT_TRUE(ReadWandbDatastoreFile(path, &run, &stats).ok());
  const ScalarSeries* val = run.FindScalar("val/loss");
  ASSERT_NE(val, nullptr);
  EXPECT_EQ(val->steps.size(), 21u);  // 21 history rows, one every 250 iterations
  EXPECT_NEAR(val->values.back(), 4.922, 1e-3);
  EXPECT_EQ(run.meta.at("wandb_exit_code"), "0");
  EXPECT_FALSE(stats.partial_tail);
  EXPECT_EQ(stats.damaged, 0u);
  const auto summary = nlohmann::json::parse(run.meta.at("wandb_summary"));
  EXPECT_NEAR(summary.at("val/loss").get<double>(), 4.922, 1e-3);
}

TEST(WandbDatastore, CutFileKeepsEveryCompleteRecord) {
  const std::string path = Second("wandb/imdb_transformer_truncated_datastore_r8mtbfdx/run-r8mtbfdx.wandb");
  if (!Have(path)) GTEST_SKIP() << "no " << path;
  RunData run;
  ImportStats stats;
  ASSERT_TRUE(ReadWandbDatastoreFile(path, &run, &stats).ok());
  const ScalarSeries* loss = run.FindScalar("train_loss_local");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->steps.size(), 3957u);  // steps 0..3956 before the cut
  EXPECT_EQ(loss->steps.front(), 0);
  EXPECT_EQ(loss->steps.back(), 3956);
  EXPECT_TRUE(stats.partial_tail);
  EXPECT_EQ(run.meta.at("wandb_complete"), "false");
  EXPECT_EQ(run.meta.count("wandb_exit_code"), 0u);
}

TEST(WandbDatastore, BadInputIsAnErrorNotACrash) {
  RunData run;
  ImportStats stats;
  EXPECT_FALSE(ReadWandbDatastore("", "x.wandb", &run, &stats).ok());
  EXPECT_FALSE(ReadWandbDatastore(":W&B\xE1\xBE\x01", "x.wandb", &run, &stats).ok());  // version 1
  std::string header = ":W&B";
  header += '\xE1';
  header += '\xBE';
  header += '\0';
  // A chunk announcing more bytes than the file has: a cut, not damage.
  Status s = ReadWandbDatastore(header + std::string("\x01\x02\x03\x04\xff\x00\x01", 7) + "abc", "x.wandb", &run, &stats);
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE(stats.partial_tail);
}

TEST(WandbFolder, OneRunFromTheRichestSourceAndEveryFileRead) {
  const std::string dir = Second("wandb/imdb_transformer_chance_plateau_t2wihhdg");
  if (!Have(dir)) GTEST_SKIP() << "no " << dir;
  Format format;
  ASSERT_TRUE(DetectFormat(dir, &format).ok());
  EXPECT_EQ(format, Format::kWandb);
  RunData run;
  ImportStats stats;
  ASSERT_TRUE(ReadWandbRun(dir, &run, &stats).ok());
  EXPECT_EQ(stats.format, "wandb/datastore");
  EXPECT_EQ(run.FindScalar("train_loss_local")->steps.size(), 2912u);
  EXPECT_EQ(run.meta.at("wandb_exit_code"), "255");
  EXPECT_EQ(run.meta.at("exception"), "KeyboardInterrupt");  // from output.log
  const auto config = nlohmann::json::parse(run.meta.at("config"));
  EXPECT_EQ(config.at("epochs").get<int>(), 10);
  EXPECT_EQ(nlohmann::json::parse(run.meta.at("wandb_sources")).size(), 4u);
}

TEST(Mlflow, RealRun) {
  const std::string dir = Second("mlflow/swahili_asr_keras_ctc_plateau/mlruns/1/ed05f9cd599442fe9a0c9222184710b8");
  if (!Have(dir)) GTEST_SKIP() << "no " << dir;
  ASSERT_TRUE(IsMlflowRunFolder(dir));
  RunData run;
  ImportStats stats;
  ASSERT_TRUE(ReadMlflowRun(dir, &run, &stats).ok());
  const ScalarSeries* loss = run.FindScalar("loss");
  ASSERT_NE(loss, nullptr);
  EXPECT_EQ(loss->steps.size(), 10u);
  EXPECT_NEAR(loss->values.front(), 332.68, 0.01);
  EXPECT_EQ(run.meta.at("mlflow_status"), "finished");
  EXPECT_EQ(run.meta.at("mlflow_experiment"), "Speech model simple rnn");
  EXPECT_EQ(nlohmann::json::parse(run.meta.at("config")).at("opt_name"), "SGD");
  EXPECT_EQ(nlohmann::json::parse(run.meta.at("mlflow_files")).size(), 28u);
}

TEST(Mlflow, MetricLines) {
  RunData run;
  ImportStats stats;
  ASSERT_TRUE(ReadMlflowMetricText("1 0.5 0\n2 nan 3\n\nbad line here now\n3 0.25\n", "m", "m", &run, &stats).ok());
  const ScalarSeries* m = run.FindScalar("m");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->steps, (std::vector<int64_t>{0, 3, 2}));  // no step column: the value's index
  EXPECT_TRUE(std::isnan(m->values[1]));
  EXPECT_EQ(stats.damaged, 1u);
}

TEST(Yaml, ScalarsMappingsSequencesAndErrors) {
  nlohmann::json j;
  ASSERT_TRUE(ParseYaml("a: 1\nb: 2.5\nc: 'x'\nd: [1, two]\ne:\n  f: true\n  g: ~\n", "t.yaml", &j).ok());
  EXPECT_EQ(j.at("a"), 1);
  EXPECT_EQ(j.at("b"), 2.5);
  EXPECT_EQ(j.at("c"), "x");
  EXPECT_EQ(j.at("d")[1], "two");
  EXPECT_EQ(j.at("e").at("f"), true);
  EXPECT_TRUE(j.at("e").at("g").is_null());
  const Status s = ParseYaml("a: [1, 2\n", "bad.yaml", &j);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.yaml: line"), std::string::npos) << s.message();
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "[";
  EXPECT_FALSE(ParseYaml(deep, "deep.yaml", &j).ok());
}

}  // namespace
}  // namespace trainscope::ingest
