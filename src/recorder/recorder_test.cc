#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <chrono>
#include <thread>

#include "recorder/recorder.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    logdir_ = fs::temp_directory_path() / ("ts_recorder_" + std::to_string(::getpid()) + "_" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(logdir_);
  }
  void TearDown() override { fs::remove_all(logdir_); }
  Recorder::Options Options(const std::string& name) {
    Recorder::Options o;
    o.logdir = logdir_.string();
    o.name = name;
    return o;
  }
  fs::path logdir_;
};

TEST_F(RecorderTest, EverythingLoggedIsStoredAfterClose) {
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(Options("r1"), &rec).ok());
  uint32_t loss = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &loss).ok());
  for (int step = 0; step < 10000; ++step) rec->LogScalar(loss, step, step * 0.5);
  std::vector<std::string> rejected;
  rec->LogNamedScalars({{"opt/lr", 0.1}, {"", 1.0}, {"train/acc", 0.9}}, 10000, &rejected);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_NE(rejected[0].find("empty"), std::string::npos);
  ASSERT_TRUE(rec->Close().ok());

  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "r1").string(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 10000u);
  EXPECT_EQ(points[9999].value, 9999 * 0.5);
  ASSERT_TRUE(store->ReadScalars("train/acc", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  EXPECT_EQ(points[0].step, 10000);
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.status, "finished");
  EXPECT_EQ(meta.pid, ::getpid());
}

TEST_F(RecorderTest, FlushMakesDataVisibleToAConcurrentReader) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("live");
  options.flush_interval_seconds = 60;  // only the explicit flush writes
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &id).ok());
  rec->LogScalar(id, 1, 3.0);
  rec->Flush();
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly(rec->run_dir(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("train/loss", INT64_MIN, INT64_MAX, &points).ok());
  ASSERT_EQ(points.size(), 1u);
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(store->EffectiveStatus(meta), "running");
}

TEST_F(RecorderTest, SetMetaReachesTheStoreAndTheLastValueWins) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("meta");
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  rec->SetMeta("module_order", "[\"a\"]");
  rec->SetMeta("module_order", "[\"a\",\"b\"]");
  rec->Flush();  // nothing else queued: the meta alone must be written
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly(rec->run_dir(), &store).ok());
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.extra["module_order"], "[\"a\",\"b\"]");
  ASSERT_TRUE(rec->Close().ok());
}

TEST_F(RecorderTest, FullQueueDropsAndCountsInsteadOfBlocking) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("tiny");
  options.queue_capacity = 100;
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("x", SeriesKind::kScalar, &id).ok());
  for (int i = 0; i < 250; ++i) rec->LogScalar(id, i, i);
  EXPECT_EQ(rec->dropped(), 150u);
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "tiny").string(), &store).ok());
  RunMeta meta;
  ASSERT_TRUE(store->ReadMeta(&meta).ok());
  EXPECT_EQ(meta.dropped_points, 150);
}

TEST_F(RecorderTest, CriticalFindingIsWrittenWithoutWaitingForTheInterval) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("urgent");
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  Finding f;
  f.code = "NONFINITE_LOSS";
  f.severity = Severity::kCritical;
  rec->AddFinding(f);
  std::vector<Finding> findings;
  for (int i = 0; i < 200 && findings.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::unique_ptr<RunStore> store;
    if (RunStore::OpenReadOnly(rec->run_dir(), &store).ok()) store->ReadFindings(&findings);
  }
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].code, "NONFINITE_LOSS");
}

// Thousands of tensor statistics (~1.1 KB each) a second would grow the queue and the
// buffers recycled after it to hundreds of MB: past Recorder::kEarlyWriteStats queued the
// writer commits at once instead of at the interval. Fewer than that wait for it.
TEST_F(RecorderTest, ManyTensorStatsAreWrittenWithoutWaitingForTheInterval) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("heavy");
  options.flush_interval_seconds = 60;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t few = 0, many = 0;
  ASSERT_TRUE(rec->Series("grad/few", SeriesKind::kTensorStats, &few).ok());
  ASSERT_TRUE(rec->Series("grad/many", SeriesKind::kTensorStats, &many).ok());
  TensorStats s;
  s.numel = 10;
  rec->LogTensorStats(few, 0, s);
  auto stored = [&](const char* tag) {
    std::vector<TensorStatsPoint> points;
    std::unique_ptr<RunStore> store;
    if (RunStore::OpenReadOnly(rec->run_dir(), &store).ok()) store->ReadTensorStats(tag, INT64_MIN, INT64_MAX, &points);
    return points.size();
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(stored("grad/few"), 0u);  // one sample waits for the interval
  for (int64_t step = 0; step < static_cast<int64_t>(Recorder::kEarlyWriteStats); ++step) {
    rec->LogTensorStats(many, step, s);
  }
  // The queue reached kEarlyWriteStats with the 4095th of these (the first sample counts);
  // the writer commits what is queued when it wakes, so the last one may wait.
  size_t seen = 0;
  for (int i = 0; i < 300 && seen < Recorder::kEarlyWriteStats - 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    seen = stored("grad/many");
  }
  EXPECT_GE(seen, Recorder::kEarlyWriteStats - 1);
  EXPECT_EQ(stored("grad/few"), 1u);
}

// The online doctor stores a finding when it opens; what it learns afterwards (here: the
// loss stays negative to the end) is written over that row at Close, and into
// live_findings (run.findings).
TEST_F(RecorderTest, OnlineFindingsAreStoredInTheirFinalState) {
  std::unique_ptr<Recorder> rec;
  auto options = Options("final");
  options.flush_interval_seconds = 0.05;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  uint32_t id = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &id).ok());
  for (int64_t step = 0; step < 10; ++step) rec->LogScalar(id, step, -1.0);
  std::vector<Finding> stored;
  for (int i = 0; i < 300 && stored.empty(); ++i) {  // opened and stored while running
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::unique_ptr<RunStore> store;
    if (RunStore::OpenReadOnly(rec->run_dir(), &store).ok()) store->ReadFindings(&stored);
  }
  ASSERT_EQ(stored.size(), 1u);
  ASSERT_EQ(stored[0].code, "NEGATIVE_LOSS");
  EXPECT_LT(stored[0].last_step, 60);
  for (int64_t step = 10; step < 60; ++step) rec->LogScalar(id, step, -1.0);
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "final").string(), &store).ok());
  std::vector<Finding> after;
  ASSERT_TRUE(store->ReadFindings(&after).ok());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].step, stored[0].step);
  EXPECT_EQ(after[0].last_step, 59);
  const std::vector<Finding> live = rec->live_findings();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].last_step, 59);
}

TEST_F(RecorderTest, ExistingRunNameIsRefusedUnlessResumed) {
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(Options("same"), &rec).ok());
  uint32_t id = 0;
  rec->Series("x", SeriesKind::kScalar, &id);
  rec->LogScalar(id, 0, 1.0);
  rec->Close();
  std::unique_ptr<Recorder> again;
  Status s = Recorder::Open(Options("same"), &again);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("already exists"), std::string::npos);
  auto resume = Options("same");
  resume.resume = true;
  ASSERT_TRUE(Recorder::Open(resume, &again).ok());
  again->Series("x", SeriesKind::kScalar, &id);
  again->LogScalar(id, 1, 2.0);
  again->Close();
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "same").string(), &store).ok());
  std::vector<Point> points;
  ASSERT_TRUE(store->ReadScalars("x", INT64_MIN, INT64_MAX, &points).ok());
  EXPECT_EQ(points.size(), 2u);
  EXPECT_FALSE(Recorder::Open(Options("../escape"), &again).ok());
}

#if defined(TRAINSCOPE_TEST_WITH_DOCTOR)
// Rules are judged on the writer's tick, long before a commit (flush interval 60 s); an
// alert is taken only once its step has ended; its finding is stored with the run.
TEST_F(RecorderTest, AlertRulesFireBetweenCommitsAndWaitForTheirStepToEnd) {
  auto options = Options("alerts");
  options.flush_interval_seconds = 60;
  options.alert_rules_text = "[[rule]]\nname = \"high\"\nseries = \"train/*\"\nabove = 2.0\nfor = 2\n"
                             "actions = [\"stop\"]\n";
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  EXPECT_EQ(rec->alert_rule_count(), 1u);
  uint32_t loss = 0, other = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &loss).ok());
  ASSERT_TRUE(rec->Series("val/loss", SeriesKind::kScalar, &other).ok());
  const double values[] = {1, 3, 1, 3, 3, 3};
  for (int step = 0; step < 6; ++step) {
    rec->LogScalar(loss, step, values[step]);
    rec->LogScalar(other, step, 100.0);  // no rule matches val/*
  }
  for (int i = 0; i < 400 && !rec->alerts_pending(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(rec->alerts_pending()) << "no alert within 2 s of the tick";
  EXPECT_TRUE(rec->TakeAlerts(4).empty());  // step 4 has not ended at step 4
  EXPECT_TRUE(rec->alerts_pending());
  std::vector<RuleAlert> alerts = rec->TakeAlerts(5);
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].rule, "high");
  EXPECT_EQ(alerts[0].series, "train/loss");
  EXPECT_EQ(alerts[0].step, 4);  // the second consecutive point above 2
  EXPECT_EQ(alerts[0].value, 3.0);
  EXPECT_EQ(alerts[0].actions, std::vector<std::string>{"stop"});
  EXPECT_FALSE(rec->alerts_pending());
  ASSERT_EQ(rec->live_findings().size(), 1u);
  ASSERT_TRUE(rec->Close().ok());
  std::unique_ptr<RunStore> store;
  ASSERT_TRUE(RunStore::OpenReadOnly((logdir_ / "alerts").string(), &store).ok());
  std::vector<Finding> findings;
  ASSERT_TRUE(store->ReadFindings(&findings).ok());
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].code, "USER_ALERT");
  EXPECT_EQ(findings[0].step, 4);
  EXPECT_EQ(findings[0].location, "train/loss");
}

TEST_F(RecorderTest, ABadRuleFailsOpenBeforeTheRunExists) {
  auto options = Options("bad");
  options.alert_rules_text = "[[rule]]\nseries = \"x\"\nabove = \"high\"\n";
  options.alert_rules_origin = "rules.toml";
  std::unique_ptr<Recorder> rec;
  Status s = Recorder::Open(options, &rec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rules.toml"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("expected a number"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(logdir_ / "bad"));
}
#endif

#if defined(TRAINSCOPE_TEST_WITH_INGEST)
TEST_F(RecorderTest, TensorBoardMirrorIsFlushedWithEachCommit) {
  auto options = Options("tb");
  options.tensorboard = true;
  options.flush_interval_seconds = 60;  // only Flush() commits
  std::unique_ptr<Recorder> rec;
  ASSERT_TRUE(Recorder::Open(options, &rec).ok());
  ASSERT_EQ(fs::path(rec->tensorboard_path()).parent_path(), logdir_ / "tb" / "tensorboard");
  uint32_t loss = 0;
  ASSERT_TRUE(rec->Series("train/loss", SeriesKind::kScalar, &loss).ok());
  rec->LogScalar(loss, 0, 0.5);
  const auto before = fs::file_size(rec->tensorboard_path());
  rec->Flush();
  const auto after = fs::file_size(rec->tensorboard_path());
  EXPECT_GT(after, before);  // readers see the point once the store has it
  ASSERT_TRUE(rec->Close().ok());
}
#endif

TEST(GitCommit, ReadsHeadWithoutGit) {
  const fs::path repo = fs::temp_directory_path() / ("ts_git_" + std::to_string(::getpid()));
  fs::remove_all(repo);
  fs::create_directories(repo / ".git" / "refs" / "heads");
  fs::create_directories(repo / "sub");
  std::ofstream(repo / ".git" / "HEAD") << "ref: refs/heads/main\n";
  std::ofstream(repo / ".git" / "refs" / "heads" / "main") << "0123456789abcdef0123456789abcdef01234567\n";
  EXPECT_EQ(GitCommit((repo / "sub").string()), "0123456789abcdef0123456789abcdef01234567");
  fs::remove(repo / ".git" / "refs" / "heads" / "main");
  std::ofstream(repo / ".git" / "packed-refs") << "# pack-refs\nfedcba9876543210fedcba9876543210fedcba98 refs/heads/main\n";
  EXPECT_EQ(GitCommit(repo.string()), "fedcba9876543210fedcba9876543210fedcba98");
  fs::remove_all(repo);
}

}  // namespace
}  // namespace trainscope
